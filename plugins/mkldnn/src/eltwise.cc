// Element-wise activations on oneDNN's eltwise primitive (schemas in
// dragon_core/src/ops/unary.cc), float32 and bfloat16, registered only
// where oneDNN's JIT code beats cpu_eigen, and only from the size where it
// does (measured in docs/nn_ops.md; smaller calls are declined, since a
// oneDNN call costs a few microseconds of fixed overhead):
//   * Gelu, approximate="none" (gelu_erf), from 8192 elements; the tanh
//     form is declined (no faster at any size). oneDNN returns NaN for
//     x = ±inf, where the op gives inf and -0: those are set afterwards.
//     bfloat16 at kPriority; float32 at kBelowCpuEigen (issue 21): cpu_eigen's
//     float32 Gelu (one packet formula shared with GeluGrad) is now faster
//     than gelu_erf at every size and more accurate (a few ulp against
//     float64 over the whole line, where gelu_erf's 1 + erf(x/sqrt 2)
//     loses the relative accuracy of x < -3), so dispatch picks cpu_eigen;
//     this kernel stays registered (and served where cpu_eigen is not
//     installed) and reachable with plugins.pin("Gelu", "cpu", "mkldnn").
//   * Elu (elu with alpha), from 8192 elements.
//   * Sigmoid (logistic) and Tanh from 1048576 elements.
// Relu, LeakyRelu, Exp, Log, Sqrt, Abs, Square and Clip are not registered
// (with the default two threads oneDNN is at best within 5% of cpu_eigen
// and slower at most sizes), nor Softplus (oneDNN's soft_relu returns 0
// for beta * x < -15, where the op is e^(beta x) / beta > 0).
//
// The tensor is seen as one dense vector of numel elements, so the
// primitive depends only on (algorithm, alpha, numel, dtype). Gelu repairs
// elements from x afterwards, so it does not run in place.
#include <cstdint>
#include <string>

#include "common.h"

namespace mkldnn_plugin {
namespace {

// y = f_alpha(x) with oneDNN's algorithm alg.
void RunEltwise(dg::KernelContext& ctx, dnnl::algorithm alg, float alpha) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int64_t n = x.numel();
  if (n == 0) return;
  const dnnl::memory::data_type dt = DataType(x.dtype());
  const dnnl::memory::desc md = Plain({n}, dt);
  auto p = Cached<dnnl::eltwise_forward>(
      Key("eltwise", static_cast<int>(alg), FloatBits(alpha), n,
          static_cast<int>(dt)),
      [&] {
        return dnnl::eltwise_forward::primitive_desc(
            Engine(), dnnl::prop_kind::forward_inference, alg, md, md, alpha,
            0.f, Attr());
      });
  Execute(ctx, p.prim, *p.pd,
          {{DNNL_ARG_SRC, Memory(md, x)}, {DNNL_ARG_DST, Memory(md, y)}});
}

void EluK(dg::KernelContext& ctx) {
  RunEltwise(ctx, dnnl::algorithm::eltwise_elu,
             static_cast<float>(ctx.f("alpha")));
}

// Where y[i] is NaN but x[i] is not, x[i] is ±inf (see GeluK): sets y[i]
// to inf for +inf and -0 for -inf. Bits is uint32_t for float32, uint16_t
// for bfloat16 (the same test and fix on the bits of either).
template <typename Bits>
void RepairGeluInf(const void* x, void* y, int64_t n) {
  const Bits* px = static_cast<const Bits*>(x);
  Bits* py = static_cast<Bits*>(y);
  constexpr Bits kSign = kSignBit<Bits>;
#pragma omp parallel for schedule(static) if (n >= (1 << 18))
  for (int64_t i = 0; i < n; ++i) {
    const Bits a = px[i], b = py[i];
    const Bits fixed = (a & kSign) ? kSign : a;
    py[i] = IsNanBits(b) && !IsNanBits(a) ? fixed : b;  // a blend, no branch
  }
}

// Gelu's exact form (the tanh form is declined by GeluServes); a NaN
// output for a non-NaN input comes from x = ±inf: inf stays, -inf -> -0.
void GeluK(dg::KernelContext& ctx) {
  RunEltwise(ctx, dnnl::algorithm::eltwise_gelu_erf, 0.f);
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  if (x.dtype() == DG_BFLOAT16) {
    RepairGeluInf<uint16_t>(x.raw_data(), y.raw_data(), x.numel());
  } else {
    RepairGeluInf<uint32_t>(x.raw_data(), y.raw_data(), x.numel());
  }
}

// Ops without attributes or repairs.
template <dnnl::algorithm kAlg>
void Fixed(dg::KernelContext& ctx) {
  RunEltwise(ctx, kAlg, 0.f);
}

bool AnyAttrs(const dg::KernelContext&) { return true; }

bool GeluServes(const dg::KernelContext& ctx) {
  return ctx.s("approximate") == "none";
}

// supports(): at least kMin elements (where oneDNN starts to win) and Pred
// accepts the attributes. Never throws (a missing attribute declines).
template <int64_t kMin, bool (*Pred)(const dg::KernelContext&) = AnyAttrs>
int32_t Supports(const DgCallFrame* f) {
  try {
    const dg::KernelContext ctx(f);
    return ctx.input(0).numel() >= kMin && Pred(ctx) ? 1 : 0;
  } catch (...) {
    return 0;
  }
}

int Register(const char* op, const char* name, dg::KernelFunc fn,
             uint32_t traits, DgSupportsFn supports,
             DgDTypeMask dtypes = kF32Bf16, int32_t priority = kPriority) {
  return dg::internal::AddKernel(op, "cpu", dtypes, priority, traits, name,
                                 fn, supports);
}

// Below cpu_eigen's reference priority 0: a kernel kept for pinning (and
// for installs without cpu_eigen) that dispatch does not pick by default.
constexpr int32_t kBelowCpuEigen = -10;

using A = dnnl::algorithm;
constexpr uint32_t kInPlace = DG_KERNEL_INPLACE;
[[maybe_unused]] const int kRegistered[] = {
    Register("Gelu", "mkldnn::Gelu", &GeluK, 0, &Supports<8192, GeluServes>,
             dg::Bit(DG_BFLOAT16)),
    Register("Gelu", "mkldnn::Gelu", &GeluK, 0, &Supports<8192, GeluServes>,
             kF32, kBelowCpuEigen),
    Register("Elu", "mkldnn::Elu", &EluK, kInPlace, &Supports<8192>),
    Register("Sigmoid", "mkldnn::Sigmoid", &Fixed<A::eltwise_logistic>,
             kInPlace, &Supports<1048576>),
    Register("Tanh", "mkldnn::Tanh", &Fixed<A::eltwise_tanh>, kInPlace,
             &Supports<1048576>),
};

}  // namespace
}  // namespace mkldnn_plugin
