// SoftmaxAttention and SoftmaxAttentionGrad (schemas in
// dragon_core/src/ops/softmax_attention.cc), float32, on the AVX-512
// batched small-GEMM (src/gemm/batched_f32.cc): one thread takes a whole
// batch item (one head of one sequence) and runs its products and its
// softmax rows back to back, so the L x S scores never leave that core's
// cache. The unfused graph wrote them out and read them back five times.
//
// Bits: the products are the batched kernel's (one FMA chain over k in
// order, whatever the strides), the softmax rows the Softmax / SoftmaxGrad
// kernels' own entry points (softmax_isa.h, with SoftmaxGrad's chunking),
// the scale one multiply as the Mul kernel does: bit for bit the ops the
// attention_fusion pass replaces wherever those ran on these kernels (its
// class, [8, 256] on every side and a batch of at least max(2, threads)
// items, is BatchedWorthwhile's).
//
// bfloat16 calls (the mixed-precision graph) run each item's products on
// the AVX512-BF16 GEMM (bf16_gemm.h, float32 accumulation) and round p and
// ds to bfloat16 with the Cast kernel's conversion: the same bits as the
// unfused bfloat16 products and Casts, which run on that GEMM in the pass's
// class. That dtype is registered only where the GEMM runs and comes
// before oneDNN's (Bf16GemmPreferred: not where oneDNN runs AMX tiles).
//
// Registered only where the batched kernel runs (x86-64-v4, and
// DRAGON_CPU_EIGEN_ISA not capping below it, DRAGON_CPU_EIGEN_BATCHED_GEMM
// not "off"): the pass asks for a kernel before it fuses, so elsewhere the
// graph keeps its MatMuls and Softmax.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common.h"
#include "gemm/batched_f32.h"
#include "gemm/bf16_gemm.h"
#include "reduce_util.h"
#include "softmax_isa.h"

namespace cpu_eigen {
namespace {

#ifdef CPU_EIGEN_BATCHED_F32

// Input `index` as an attention operand: its last two axes' strides and the
// offset of each batch item (the batch axes are the output's, checked by
// the schema).
AttentionOperand Operand(const dg::KernelContext& ctx, int index,
                         int64_t batch, std::vector<int64_t>* offsets) {
  const DgTensorView* t = ctx.frame()->inputs[index];
  AttentionOperand x{};
  x.data = static_cast<const char*>(t->data) + t->byte_offset;
  const int nd = t->ndim;
  x.rs = t->strides[nd - 2];
  x.cs = t->strides[nd - 1];
  std::vector<Dim> dims;
  for (int d = 0; d < nd - 2; ++d) dims.push_back({t->shape[d], t->strides[d]});
  offsets->resize(static_cast<size_t>(batch));
  Odometer it(dims, dims.size(), 0);
  for (int64_t i = 0; i < batch; ++i, it.Next()) (*offsets)[i] = it.offset();
  x.offsets = offsets->data();
  return x;
}

int64_t Batch(const std::vector<int64_t>& shape) {
  int64_t b = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d) b *= shape[d];
  return b;
}

int Threads() { return omp_in_parallel() ? 1 : omp_get_max_threads(); }

// The call's common part: sizes, q, kt, v, the scale and the row kernels.
AttentionF32Call Describe(const dg::KernelContext& ctx,
                          std::vector<int64_t> (&offsets)[5]) {
  const std::vector<int64_t> q = ctx.input(0).shape();
  const std::vector<int64_t> kt = ctx.input(1).shape();
  const std::vector<int64_t> v = ctx.input(2).shape();
  AttentionF32Call c{};
  c.batch = Batch(q);
  c.L = q[q.size() - 2], c.E = q.back();
  c.S = kt.back(), c.Ev = v.back();
  if (c.batch > 0) {
    c.q = Operand(ctx, 0, c.batch, &offsets[0]);
    c.kt = Operand(ctx, 1, c.batch, &offsets[1]);
    c.v = Operand(ctx, 2, c.batch, &offsets[2]);
  }
  c.bf16 = ctx.input(0).dtype() == DG_BFLOAT16;
  c.scale = static_cast<float>(ctx.f("scale"));
  c.has_scale = ctx.b("has_scale");
  const SoftmaxKernels& k = SoftmaxKernelsForCpu();
  c.softmax_rows = k.rows;
  c.softmax_grad_rows = k.grad_rows;
  // SoftmaxGrad's split of a row's sum (reduce.cc): by the total row count.
  const int64_t rows = c.batch * c.L;
  c.grad_chunks = rows >= fold_split::kTargetItems / 2
                      ? 1
                      : std::max<int64_t>(1, std::min(fold_split::kTargetItems,
                                                      c.S / fold_split::kMinChunk));
  c.threads = Threads();
  return c;
}

void* Workspace(const dg::KernelContext& ctx, const AttentionF32Call& c) {
  const int64_t bytes = gemm_batched_f32::AttentionWorkspaceBytes(c);
  if (bytes <= 0) return nullptr;
  char* raw = ctx.workspace<char>(static_cast<size_t>(bytes) + 64);
  const uintptr_t addr = reinterpret_cast<uintptr_t>(raw);
  return raw + ((64 - addr % 64) % 64);
}

// Output `index`; with the attribute `heads_last` set it is [B, rows, H,
// cols] (the schema's shape), written item (b, h) at a time.
AttentionOut Out(const dg::KernelContext& ctx, int index, const char* heads_last) {
  AttentionOut o{};
  o.data = ctx.output(index).raw_data();
  if (ctx.b(heads_last)) o.heads = ctx.output(index).shape()[2];
  return o;
}

void SoftmaxAttentionF32(dg::KernelContext& ctx) {
  std::vector<int64_t> offsets[5];
  AttentionF32Call c = Describe(ctx, offsets);
  if (c.batch == 0) return;
  c.p_out = ctx.output(0).data<float>();
  c.o_out = Out(ctx, 1, "o_heads_last");
  c.workspace = Workspace(ctx, c);
  gemm_batched_f32::AttentionForward(c);
}

void SoftmaxAttentionGradF32(dg::KernelContext& ctx) {
  std::vector<int64_t> offsets[5];
  AttentionF32Call c = Describe(ctx, offsets);
  if (c.batch == 0) return;
  c.p = Operand(ctx, 3, c.batch, &offsets[3]);
  // The kernel reads p as dense rows (SoftmaxAttention's output is); a
  // strided p is copied first.
  bool dense = c.p.cs == 1 && c.p.rs == c.S;
  for (int64_t i = 0; dense && i < c.batch; ++i) dense = offsets[3][i] == i * c.L * c.S;
  if (!dense) {
    float* copy = ctx.workspace<float>(static_cast<size_t>(c.batch * c.L * c.S));
    for (int64_t i = 0; i < c.batch; ++i) {
      const float* src = static_cast<const float*>(c.p.data) + offsets[3][i];
      for (int64_t r = 0; r < c.L; ++r) {
        for (int64_t j = 0; j < c.S; ++j) {
          copy[(i * c.L + r) * c.S + j] = src[r * c.p.rs + j * c.p.cs];
        }
      }
    }
    for (int64_t i = 0; i < c.batch; ++i) offsets[3][i] = i * c.L * c.S;
    c.p = AttentionOperand{copy, c.S, 1, offsets[3].data()};
  }
  c.dout = Operand(ctx, 4, c.batch, &offsets[4]);
  c.dq = Out(ctx, 0, "dq_heads_last");
  c.dk = Out(ctx, 1, "dk_heads_last");
  c.dv = Out(ctx, 2, "dv_heads_last");
  c.workspace = Workspace(ctx, c);
  gemm_batched_f32::AttentionBackward(c);
}

// Registered at load only where the kernel runs (see the top of the file).
int Register() {
  if (DetectIsaLevel() < 4) return 0;
  // float32 where the unfused products run on the batched kernel (not
  // switched off), bfloat16 where they run on the AVX512-BF16 GEMM.
  const char* batched = std::getenv("DRAGON_CPU_EIGEN_BATCHED_GEMM");
  const bool f32 = !(batched && std::strcmp(batched, "off") == 0);
  const DgDTypeMask dtypes = (f32 ? dg::Bit(DG_FLOAT32) : 0) |
                             (Bf16GemmPreferred() ? dg::Bit(DG_BFLOAT16) : 0);
  if (dtypes == 0) return 0;
  dg::internal::AddKernel("SoftmaxAttention", "cpu", dtypes, 0,
                          DG_KERNEL_STRIDED_INPUTS, "SoftmaxAttentionAvx512",
                          &SoftmaxAttentionF32);
  dg::internal::AddKernel("SoftmaxAttentionGrad", "cpu", dtypes, 0,
                          DG_KERNEL_STRIDED_INPUTS,
                          "SoftmaxAttentionGradAvx512",
                          &SoftmaxAttentionGradF32);
  return 1;
}

[[maybe_unused]] const int kRegistered = Register();

#endif  // CPU_EIGEN_BATCHED_F32

}  // namespace
}  // namespace cpu_eigen
