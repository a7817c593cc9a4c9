// MatMul and MatMulBiasAct of bfloat16 operands on the AVX512-BF16 GEMM
// (src/gemm/bf16_gemm.cc): NumPy matmul semantics as matmul.cc, a bfloat16
// or (out_dtype=float32, autocast's gradient products) float32 output.
//
// Registered at priority 20, above mkldnn's oneDNN matmul (10), for the
// classes of products where it is faster on CPUs without AMX
// (docs/benchmarks.md, "bfloat16 GEMM"). Where oneDNN runs AMX tiles
// (AmxServesBf16: Sapphire Rapids and later) it registers at priority 5,
// below oneDNN: there oneDNN's tile kernels ran 2048^3 at 1,613 GFLOP/s
// against this kernel's 147 on two threads (docs/benchmarks.md, "Session
// 24"), and DRAGON_CPU_EIGEN_BF16_GEMM=all puts it back at 20. Without
// AMX, oneDNN's AVX512-BF16 kernel and this one run the same instruction;
// this one keeps a 6 x 64 float32 tile
// in registers over k chunks of up to 2048 and splits the cores' work by
// whole tiles. supports() accepts a call only when
//   * the CPU has AVX512_BF16 (CPUID leaf 7 subleaf 1 EAX bit 5) and the
//     OS saves the zmm state (XCR0), and x86-64-v4 is not capped away by
//     DRAGON_CPU_EIGEN_ISA=base|v2|v3 (the plugin's ISA switch);
//   * both operands are bfloat16, the output bfloat16 or float32, a bias
//     (MatMulBiasAct) of the output's dtype and 1-D along the last axis,
//     activation "none" or "relu";
//   * the product is not matrix-vector shaped (fewer than kMinRows rows or
//     kMinCols columns per matrix): the 6 x 64 register tile would mostly
//     multiply padding there;
//   * the product is of a class where it measured faster than oneDNN's
//     (Worthwhile(): at least 2048^3 multiply-adds; a batch of products
//     of at least 64^3 each; a single product whose A is not stored
//     transposed with n >= 1024 and m, k >= 256 (m, k = 256 for a bfloat16
//     output), autocast's Linear layers and input gradients; a single
//     float32-output product whose A is stored transposed with k >= 1024
//     and n, m >= 256, the weight gradients). Other products measured a tie
//     or a loss (smaller ones such as square 512, larger bfloat16 outputs
//     such as square 1024) or were not measured (bfloat16 weight
//     gradients), so they stay there. DRAGON_CPU_EIGEN_BF16_GEMM=all takes every call the kernel
//     can compute (tests, benchmarks), =off none.
// Anything else goes to oneDNN (or cpu_eigen's widening kernel without
// mkldnn); `dragon_core.plugins.pin("MatMul", "cpu", "mkldnn")` puts
// oneDNN's first for every call. Operands are read in place through any strides
// (transposed and permuted views included) while they are packed; the
// output is dense, as the core allocates it.
//
// Numerics: products of pairs of k are added to float32 accumulators in k
// order (vdpbf16ps, round to nearest even); bfloat16 denormal inputs count
// as zero and denormal sums flush to zero (as in oneDNN's kernel); the bias
// is added in float32, relu keeps NaN (the core's Relu), and a bfloat16
// output is rounded once, to nearest even. Threads split C, never k, except
// for the weight-gradient shape (A^T B over at least 1024 k, both operands
// stored with k along their rows), which is always summed as two fixed
// halves of k added at the end, one half per thread on two (split-k,
// src/gemm/bf16_gemm.cc SplitK): the same bits for any thread count.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "common.h"
#include "gemm/batch_axes.h"
#include "gemm/bf16_gemm.h"
#include "reduce_util.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#endif
#if defined(__x86_64__) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace cpu_eigen {
namespace {

#if defined(__x86_64__) && defined(__GNUC__)
// The low word of XCR0 (the register state the OS saves), or 0 where the
// CPU lacks OSXSAVE and XCR0 cannot be read.
unsigned Xcr0Low() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 27))) return 0;
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  (void)hi;
  return lo;
}
#endif

#ifdef CPU_EIGEN_BF16_GEMM

// Products with fewer rows or columns (per batch item) are declined.
constexpr int64_t kMinRows = 4;
constexpr int64_t kMinCols = 16;

// Whether this CPU runs AVX512-BF16 and the OS saves the zmm registers.
bool CpuHasAvx512Bf16() {
  static const bool ok = [] {
    if (DetectIsaLevel() < 4) return false;  // no AVX-512, or capped
    // XMM, YMM, opmask, ZMM_Hi256 and Hi16_ZMM state enabled.
    if ((Xcr0Low() & 0xE6u) != 0xE6u) return false;
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) return false;
    return (eax & (1u << 5)) != 0;  // AVX512_BF16
  }();
  return ok;
}

// One operand as a stack of logical matrices: element (r, c) of item i at
// data + offset_i + r * rs + c * cs.
struct Matrix {
  const uint16_t* data = nullptr;
  int64_t rows = 0, cols = 0, rs = 0, cs = 0;
  std::vector<int64_t> batch_shape, batch_strides;
};

Matrix AsMatrix(const DgTensorView* t, bool is_a, bool transpose) {
  Matrix m;
  m.data = reinterpret_cast<const uint16_t*>(static_cast<const char*>(t->data) +
                                             t->byte_offset);
  const int nd = t->ndim;
  if (nd == 1) {  // a: the row [1, k]; b: the column [k, 1]
    const int64_t len = t->shape[0], s = t->strides[0];
    if (is_a) {
      m.rows = 1, m.cols = len, m.rs = len * s, m.cs = s;
    } else {
      m.rows = len, m.cols = 1, m.rs = s, m.cs = 1;
    }
    return m;
  }
  m.rows = t->shape[nd - 2], m.cols = t->shape[nd - 1];
  m.rs = t->strides[nd - 2], m.cs = t->strides[nd - 1];
  if (transpose) std::swap(m.rows, m.cols), std::swap(m.rs, m.cs);
  m.batch_shape.assign(t->shape, t->shape + nd - 2);
  m.batch_strides.assign(t->strides, t->strides + nd - 2);
  return m;
}

// One call, described; `call` lacks offsets, bias and workspace.
struct Problem {
  Bf16GemmCall call{};
  Matrix a, b;
  std::vector<int64_t> batch_shape;  // the output's batch axes
  bool has_bias = false;
};

// Builds the problem; false when this kernel does not take the call (see
// the top of the file). Never throws on a well-formed frame.
bool Describe(const DgCallFrame* f, Problem* p) {
  if (f->num_inputs < 2 || f->num_outputs != 1) return false;
  const DgTensorView *at = f->inputs[0], *bt = f->inputs[1];
  const DgTensorView* yt = f->outputs[0];
  if (!at || !bt || !yt || at->ndim < 1 || bt->ndim < 1) return false;
  if (at->dtype != DG_BFLOAT16 || bt->dtype != DG_BFLOAT16) return false;
  if (yt->dtype != DG_BFLOAT16 && yt->dtype != DG_FLOAT32) return false;
  const dg::AttrReader attrs(f->num_attrs, f->attrs, f->attr_names,
                             f->op_name);
  const bool ta = attrs.b("transpose_a"), tb = attrs.b("transpose_b");
  p->a = AsMatrix(at, true, ta);
  p->b = AsMatrix(bt, false, tb);
  if (p->a.cols != p->b.rows) return false;
  // Batch axes, right-aligned and broadcast.
  int64_t batch = 1;
  if (!BroadcastBatchAxes(p->a.batch_shape, p->b.batch_shape, &p->batch_shape, &batch))
    return false;
  const int64_t n = p->a.rows, m = p->b.cols, k = p->a.cols;
  // The output: dense, batch x n x m elements.
  if (!DenseWithElements(yt, batch * n * m)) return false;
  p->has_bias = f->num_inputs > 2 && f->inputs[2] != nullptr;
  bool relu = false;
  if (std::strcmp(f->op_name, "MatMulBiasAct") == 0) {
    const std::string act = attrs.s("activation");
    if (act != "none" && act != "relu") return false;
    relu = act == "relu";
  } else if (std::strcmp(f->op_name, "MatMul") != 0) {
    return false;
  }
  if (p->has_bias) {
    const DgTensorView* bias = f->inputs[2];
    if (bias->dtype != yt->dtype || bias->ndim != 1 || bias->shape[0] != m) {
      return false;
    }
  }
  Bf16GemmCall& c = p->call;
  c.batch = batch;
  c.n = n, c.m = m, c.k = k;
  c.a = p->a.data, c.a_rs = p->a.rs, c.a_cs = p->a.cs;
  c.b = p->b.data, c.b_rs = p->b.rs, c.b_cs = p->b.cs;
  c.c_f32 = yt->dtype == DG_FLOAT32;
  c.ldc = m;
  c.c_stride = n * m;
  c.relu = relu;
  return true;
}

// DRAGON_CPU_EIGEN_BF16_GEMM, read once (ParseGemmPolicy); auto is the
// measured choice of Worthwhile().
GemmPolicy PolicyFromEnv() {
  static const GemmPolicy policy = ParseGemmPolicy("DRAGON_CPU_EIGEN_BF16_GEMM");
  return policy;
}

// Products at least this large (n m k) run here whatever their layout.
constexpr double kLargeWork = 2048.0 * 2048.0 * 2048.0;
// Single products whose A is not stored transposed run here from n >=
// kPlainMinRows and m, k >= kPlainMinSide (the encoder step's 1024-token
// products; its smallest are 1024 x 256 x 256).
constexpr int64_t kPlainMinRows = 1024;
constexpr int64_t kPlainMinSide = 256;
// Single float32-output products whose A is stored transposed (weight
// gradients dy^T @ x) run here from k >= kTransMinK and n, m >=
// kPlainMinSide.
constexpr int64_t kTransMinK = 1024;
// Batches run here when each item is at least this much work (n m k):
// below it, this kernel's per-item packing outweighs the arithmetic.
constexpr double kBatchItemMinWork = 64.0 * 64.0 * 64.0;

// Whether the product is one this kernel is faster on than oneDNN's
// (docs/benchmarks.md, "bfloat16 GEMM", "bgemm" and "Session 17"; Zen 4,
// two threads):
//   * products of at least 2048^3 multiply-adds (1.04-1.11x: oneDNN's
//     kernel falls to 88% of the vdpbf16ps peak there, this one stays at
//     94%);
//   * batches of products, any layout, whose items are at least 64^3
//     multiply-adds (attention's q @ K^T, P @ V, their gradients):
//     1.00-1.14x inside the compiled encoder step, where the operands come
//     from the ops before (per-op minima of 12 profiles); isolated, 64^3
//     to 128 x 128 x 64 items 1.03-1.25x, 4 x 1024 x 256 x 256 a tie.
//     Smaller items lose (each item's operands are packed: 48^3 0.77-0.83x,
//     32^3 0.42-0.71x, 8 x 16 x 16 0.14-0.62x), so they stay on oneDNN;
//   * single products whose A is not stored transposed (row-major, or any
//     strides but a unit row stride), n >= 1024, m >= 256, k >= 256, with
//     a float32 output, or a bfloat16 one when m and k are at most 256: the
//     encoder step's Linear layers (x @ W^T) and input gradients (dy @ W),
//     whose outputs are written cold; with the microkernel's prefetch of
//     C, 1.03-1.13x on two threads for float32 outputs, 1.04-1.05x in the
//     step for the bfloat16 1024 x 256 x 256 one (larger bfloat16 outputs
//     measured a tie isolated, 0.98-1.01x, and square 1024 0.975x in the
//     gemm benchmark, so they stay on oneDNN);
//   * single float32-output products whose A is stored transposed, k >=
//     1024, n, m >= 256: the step's weight gradients (dy^T @ x over 1024
//     tokens), 1.04-1.11x in the step for the 256 x 1024 and 1024 x 256
//     ones, a tie for 256 x 256 (isolated and warm: a tie on one core,
//     0.96x on two);
// and never a matrix-vector shape. Everything else stays with oneDNN:
// smaller single products (square 512: 1.03x on one core but 0.89x on
// two; 256^3: a tie), transposed-A ones over a short k, and bfloat16
// weight gradients (not measured).
bool Worthwhile(const Problem& p) {
  const Bf16GemmCall& c = p.call;
  const GemmPolicy policy = PolicyFromEnv();
  if (policy == GemmPolicy::kOff) return false;
  if (c.n < kMinRows || c.m < kMinCols) return false;
  if (policy == GemmPolicy::kAll) return true;
  const bool a_trans = c.a_rs == 1 && c.a_cs != 1 && c.k > 1;
  const double work = static_cast<double>(c.n) * static_cast<double>(c.m) *
                      static_cast<double>(c.k);
  if (c.batch > 1) return work >= kBatchItemMinWork;
  if (work >= kLargeWork) return true;
  if (!a_trans) {
    return c.n >= kPlainMinRows && c.m >= kPlainMinSide &&
           c.k >= kPlainMinSide &&
           (c.c_f32 || (c.m <= kPlainMinSide && c.k <= kPlainMinSide));
  }
  return c.c_f32 && c.k >= kTransMinK && c.n >= kPlainMinSide &&
         c.m >= kPlainMinSide;
}

// Element offsets of every output batch item into an operand.
void BatchOffsets(const Matrix& mtx, const std::vector<int64_t>& out_shape,
                  int64_t* offsets) {
  const size_t nb = out_shape.size(), nm = mtx.batch_shape.size();
  std::vector<int64_t> stride(nb, 0), idx(nb, 0);
  for (size_t i = 0; i < nm; ++i) {
    if (mtx.batch_shape[i] != 1) stride[nb - nm + i] = mtx.batch_strides[i];
  }
  int64_t total = 1;
  for (int64_t v : out_shape) total *= v;
  int64_t off = 0;
  for (int64_t t = 0; t < total; ++t) {
    offsets[t] = off;
    for (size_t d = nb; d-- > 0;) {
      if (++idx[d] < out_shape[d]) {
        off += stride[d];
        break;
      }
      off -= stride[d] * (out_shape[d] - 1);
      idx[d] = 0;
    }
  }
}

// Input `index` (a 1-D bias, float32 or bfloat16, any stride) as dense
// float32 in the workspace.
float* WideBias(dg::KernelContext& ctx, int index) {
  const dg::TensorRef bias = ctx.input(index);
  const int64_t len = bias.dim(0), stride = bias.stride(0);
  float* wide = ctx.workspace<float>(len);
  if (bias.dtype() == DG_FLOAT32) {
    const float* src = bias.data<const float>();
    for (int64_t i = 0; i < len; ++i) wide[i] = src[i * stride];
  } else {
    const uint16_t* src = static_cast<const uint16_t*>(bias.raw_data());
    for (int64_t i = 0; i < len; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[i * stride]) << 16;
      std::memcpy(&wide[i], &bits, sizeof(float));
    }
  }
  return wide;
}

// Runs `call` (all but c, threads and workspace set) into output 0.
void RunGemm(dg::KernelContext& ctx, Bf16GemmCall* call) {
  call->c = ctx.output(0).raw_data();
  call->threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  const int64_t bytes = gemm_bf16::WorkspaceBytes(*call);
  if (bytes > 0) {
    char* raw = ctx.workspace<char>(static_cast<size_t>(bytes) + 64);
    const uintptr_t addr = reinterpret_cast<uintptr_t>(raw);
    call->workspace = raw + ((64 - addr % 64) % 64);
  }
  gemm_bf16::Gemm(*call);
}

void MatMulBf16(dg::KernelContext& ctx) {
  Problem p;
  DG_CHECK(Describe(ctx.frame(), &p) && CpuHasAvx512Bf16(), DG_INTERNAL,
           ctx.op_name(),
           ": the AVX512-BF16 kernel was chosen for a call its supports() "
           "declines");
  Bf16GemmCall& call = p.call;
  if (call.batch * call.n * call.m == 0) return;
  if (call.batch > 1) {
    int64_t* offsets = ctx.workspace<int64_t>(2 * call.batch);
    BatchOffsets(p.a, p.batch_shape, offsets);
    BatchOffsets(p.b, p.batch_shape, offsets + call.batch);
    bool a_stacks_rows = true, b_shared = true;
    for (int64_t i = 0; i < call.batch; ++i) {
      a_stacks_rows = a_stacks_rows && offsets[i] == i * call.n * call.a_rs;
      b_shared = b_shared && offsets[call.batch + i] == offsets[call.batch];
    }
    if (a_stacks_rows && b_shared) {
      // One B for every item and the A matrices stacked row after row: a
      // single (batch * n) x k product.
      call.b += offsets[call.batch];
      call.n *= call.batch;
      call.batch = 1;
    } else {
      call.a_offsets = offsets;
      call.b_offsets = offsets + call.batch;
    }
  }
  if (p.has_bias) call.bias = WideBias(ctx, 2);
  RunGemm(ctx, &call);
}

// MatMulBiasAdd (dragon_core/src/ops/matmul_bias_add.cc, written by the
// linear_epilogue graph pass): one 2-D product with the float32 bias and
// residual added in the GEMM's epilogue, in that order, and a bfloat16 y
// rounded as the Cast kernel rounds: the bits of MatMul(out_dtype=float32)
// -> Add(bias) -> [Add(residual)] -> [Cast] on this GEMM and cpu_eigen's
// element-wise kernels. Takes every call of its schema (registered only
// where the GEMM runs: Register below).
void MatMulBiasAddBf16(dg::KernelContext& ctx) {
  const DgCallFrame* f = ctx.frame();
  const Matrix a = AsMatrix(f->inputs[0], true, ctx.b("transpose_a"));
  const Matrix b = AsMatrix(f->inputs[1], false, ctx.b("transpose_b"));
  Bf16GemmCall call{};
  call.batch = 1;
  call.n = a.rows, call.m = b.cols, call.k = a.cols;
  if (call.n * call.m == 0) return;
  call.a = a.data, call.a_rs = a.rs, call.a_cs = a.cs;
  call.b = b.data, call.b_rs = b.rs, call.b_cs = b.cs;
  call.c_f32 = ctx.output(0).dtype() == DG_FLOAT32;
  call.ldc = call.m;
  call.c_stride = call.n * call.m;
  call.cast_round = true;
  call.bias = WideBias(ctx, 2);
  if (ctx.num_inputs() > 3 && f->inputs[3] != nullptr) {
    const dg::TensorRef r = ctx.input(3);
    if (r.is_contiguous()) {
      call.residual = r.data<const float>();
    } else {  // a strided view: gathered row-major first
      std::vector<Dim> dims;
      for (int d = 0; d < r.ndim(); ++d) dims.push_back({r.dim(d), r.stride(d)});
      float* dense = ctx.workspace<float>(static_cast<size_t>(call.n * call.m));
      const float* src = r.data<const float>();
      Odometer it(dims, dims.size(), 0);
      for (int64_t i = 0; i < call.n * call.m; ++i, it.Next()) dense[i] = src[it.offset()];
      call.residual = dense;
    }
    call.ld_residual = call.m;
  }
  RunGemm(ctx, &call);
}

// Above mkldnn's oneDNN matmul (priority 10), or below it where oneDNN
// runs AMX tiles (Bf16GemmPreferred): see the top of this file.
constexpr int32_t kMatMulBf16Priority = 20;
constexpr int32_t kMatMulBf16BelowAmxPriority = 5;
int32_t MatMulBf16Priority() {
  return Bf16GemmPreferred() || !Bf16GemmRuns() ? kMatMulBf16Priority
                                                : kMatMulBf16BelowAmxPriority;
}

int Register() {
  if (!Bf16GemmRuns()) return 0;
  dg::internal::AddKernel("MatMulBiasAdd", "cpu", dg::Bit(DG_BFLOAT16),
                          MatMulBf16Priority(),
                          DG_KERNEL_STRIDED_INPUTS, "MatMulBiasAddBf16Avx512",
                          &MatMulBiasAddBf16);
  return 1;
}

int32_t SupportsBf16(const DgCallFrame* f) {
  try {
    if (!CpuHasAvx512Bf16()) return 0;
    Problem p;
    return Describe(f, &p) && Worthwhile(p) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

[[maybe_unused]] const int kRegistered[] = {
    dg::internal::AddKernel("MatMul", "cpu", dg::Bit(DG_BFLOAT16),
                            MatMulBf16Priority(), DG_KERNEL_STRIDED_INPUTS,
                            "MatMulBf16Avx512", &MatMulBf16, &SupportsBf16),
    dg::internal::AddKernel("MatMulBiasAct", "cpu", dg::Bit(DG_BFLOAT16),
                            MatMulBf16Priority(), DG_KERNEL_STRIDED_INPUTS,
                            "MatMulBiasActBf16Avx512", &MatMulBf16,
                            &SupportsBf16),
};

#endif  // CPU_EIGEN_BF16_GEMM

}  // namespace

#ifdef CPU_EIGEN_BF16_GEMM
namespace {
// Registered at load only where the GEMM runs, ranked as the MatMul
// kernels (below mkldnn's MatMulBiasAddOneDNN where oneDNN runs AMX
// tiles): the linear_epilogue pass asks for a kernel before it fuses.
[[maybe_unused]] const int kBiasAddRegistered = Register();
}  // namespace
#endif

bool Bf16GemmRuns() {
#ifdef CPU_EIGEN_BF16_GEMM
  return CpuHasAvx512Bf16() && PolicyFromEnv() != GemmPolicy::kOff;
#else
  return false;
#endif
}

namespace {

// The CPU and the OS side of AmxServesBf16 (no environment).
bool DetectAmxBf16() {
#if defined(__x86_64__) && defined(__GNUC__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  if (!(edx & (1u << 22)) || !(edx & (1u << 24))) return false;  // AMX-BF16, AMX-TILE
  if ((Xcr0Low() & 0x60000u) != 0x60000u) return false;  // XTILECFG, XTILEDATA
#if defined(__linux__)
  // Linux hands out tile data per process on request (oneDNN asks before
  // its first AMX kernel); ARCH_GET_XCOMP_SUPP says whether it can.
  constexpr long kArchGetXcompSupp = 0x1021;
  constexpr int kXfeatureXtiledata = 18;
  unsigned long long supported = 0;
  if (syscall(SYS_arch_prctl, kArchGetXcompSupp, &supported) != 0) return false;
  if (!(supported & (1ull << kXfeatureXtiledata))) return false;
#endif
  return true;
#else
  return false;
#endif
}

// ONEDNN_MAX_CPU_ISA (or its older name DNNL_MAX_CPU_ISA) set to an ISA
// without AMX (AVX512_CORE_BF16, AVX2, ...): oneDNN runs no tile kernel.
bool OneDnnCappedBelowAmx() {
  for (const char* name : {"ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"}) {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') continue;
    std::string isa(v);
    for (char& ch : isa) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
    if (isa == "ALL" || isa == "DEFAULT") return false;
    return isa.find("AMX") == std::string::npos;
  }
  return false;
}

}  // namespace

bool AmxServesBf16() {
  static const bool amx = [] {
    const char* v = std::getenv("DRAGON_CPU_EIGEN_AMX");
    if (v != nullptr && std::strcmp(v, "on") == 0) return true;
    if (v != nullptr && std::strcmp(v, "off") == 0) return false;
    if (v != nullptr && *v != '\0' && std::strcmp(v, "auto") != 0) {
      std::fprintf(stderr,
                   "[dragon warning] DRAGON_CPU_EIGEN_AMX=%s is not auto, on or off; "
                   "using auto\n", v);
    }
    return DetectAmxBf16() && !OneDnnCappedBelowAmx();
  }();
  return amx;
}

bool Bf16GemmPreferred() {
#ifdef CPU_EIGEN_BF16_GEMM
  return Bf16GemmRuns() && (PolicyFromEnv() == GemmPolicy::kAll || !AmxServesBf16());
#else
  return false;
#endif
}

}  // namespace cpu_eigen
