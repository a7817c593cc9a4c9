// The interface between matmul.cc and the float32 batched small-GEMM
// (batched_f32.cc): many small products, one thread per batch item.
//
// batched_f32.cc is compiled only on x86-64, once, for -march=x86-64-v4
// (CMakeLists.txt defines CPU_EIGEN_BATCHED_F32 when it is built). Its
// functions must only be called after DetectIsaLevel() >= 4. Like gemm.h,
// this header holds plain data and declarations only.
#ifndef DRAGON_CPU_EIGEN_GEMM_BATCHED_F32_H_
#define DRAGON_CPU_EIGEN_GEMM_BATCHED_F32_H_

#include <cstdint>

namespace cpu_eigen {

// C[i] = op(A[i]) * op(B[i]) for i in [0, batch): op(A) n x k, op(B) k x m,
// C n x m row-major (leading dimension ldc, c_stride elements between
// items), all float32. Element (r, c) of A[i] lies at a[a_offsets[i] +
// r * a_rs + c * a_cs] (any strides; a_offsets null = all 0), likewise B.
// Every output is one float32 FMA chain over k in order, starting at 0:
// the same bits for any thread count. A plain aggregate: value-initialise
// it with `BatchedF32Call call{};`.
struct BatchedF32Call {
  int64_t batch;
  int64_t n, m, k;
  const float* a;
  int64_t a_rs, a_cs;
  const int64_t* a_offsets;
  const float* b;
  int64_t b_rs, b_cs;
  const int64_t* b_offsets;
  float* c;
  int64_t ldc;
  int64_t c_stride;
  // OpenMP threads to use (>= 1); each takes whole batch items.
  int threads;
  // Scratch of BatchedF32WorkspaceBytes(call) bytes, 64-byte aligned.
  void* workspace;
};

// The attention block of one layer over a batch of items (the
// SoftmaxAttention / SoftmaxAttentionGrad ops of src/attention_fused.cc):
// each item's products and softmax run on one thread, while its operands
// are in cache. Operand element (r, c) of item i lies at
// data[offsets[i] + r * rs + c * cs]; the outputs are dense, item after
// item. The products are Gemm's (same bits); the softmax rows are the
// Softmax / SoftmaxGrad kernels' own entry points (softmax_isa.h), passed
// in. A plain aggregate: value-initialise it.
struct AttentionOperand {
  const void* data;  // float32, or bfloat16 bits (AttentionF32Call::bf16)
  int64_t rs, cs;
  const int64_t* offsets;  // batch entries
};

// An output: item i's rows x cols matrix at data + i * rows * cols (dense,
// heads == 0) or, with heads > 0 (a [B, H, rows, cols] result written as
// [B, rows, H, cols]: the head merge's layout), at data + b * rows * heads *
// cols + h * cols, rows heads * cols apart (i = b * heads + h).
struct AttentionOut {
  void* data;  // float32, or bfloat16 bits for a bf16 call's o
  int64_t heads;
};

struct AttentionF32Call {
  int64_t batch;
  int64_t L, S, E, Ev;
  AttentionOperand q, kt, v;  // q L x E, kt E x S, v S x Ev
  AttentionOperand p, dout;   // backward only: p L x S, dout L x Ev
  float scale;
  bool has_scale;
  // bfloat16 q, kt, v, do and o (the mixed-precision graph): the products
  // run on the AVX512-BF16 GEMM (bf16_gemm.h) with float32 accumulation,
  // p and the scores' gradient rounded to bfloat16 before the products
  // that read them (as the graph's Casts do); p, dq, dk, dv stay float32.
  // Only where CPU_EIGEN_BF16_GEMM is built and the CPU runs it.
  bool bf16;
  float* p_out;  // forward: L x S per item
  AttentionOut o_out;  // forward: L x Ev per item
  AttentionOut dq;     // backward: L x E per item
  AttentionOut dk;     // backward: S x E per item
  AttentionOut dv;     // backward: S x Ev per item
  void (*softmax_rows)(const float* x, float* y, int64_t rows, int64_t n,
                       int log);
  void (*softmax_grad_rows)(const float* y, const float* dy, float* dx,
                            int64_t rows, int64_t n, int64_t chunks);
  int64_t grad_chunks;
  int threads;
  void* workspace;  // AttentionWorkspaceBytes(call) bytes, 64-byte aligned
};

#ifdef CPU_EIGEN_BATCHED_F32
namespace gemm_batched_f32 {
// Scratch bytes the forward / backward needs (per thread: one L x S score
// block and the largest packed operand).
int64_t AttentionWorkspaceBytes(const AttentionF32Call& call);
// Runs the forward (p_out, o_out) or the backward (dq, dk, dv).
void AttentionForward(const AttentionF32Call& call);
void AttentionBackward(const AttentionF32Call& call);
// Bytes of scratch the call needs (a packed copy of op(B) per thread).
int64_t WorkspaceBytes(const BatchedF32Call& call);
// Runs the call (batch, n, m > 0; k >= 0).
void Gemm(const BatchedF32Call& call);
}  // namespace gemm_batched_f32
#endif

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GEMM_BATCHED_F32_H_
