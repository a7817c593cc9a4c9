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

#ifdef CPU_EIGEN_BATCHED_F32
namespace gemm_batched_f32 {
// Bytes of scratch the call needs (a packed copy of op(B) per thread).
int64_t WorkspaceBytes(const BatchedF32Call& call);
// Runs the call (batch, n, m > 0; k >= 0).
void Gemm(const BatchedF32Call& call);
}  // namespace gemm_batched_f32
#endif

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_GEMM_BATCHED_F32_H_
