// 2-D pooling on oneDNN's pooling primitives (schemas and geometry in
// dragon_core/src/ops/pool.cc): MaxPool2d, AvgPool2d, AdaptiveAvgPool2d
// and their gradient ops MaxPool2dGrad, AvgPool2dGrad,
// AdaptiveAvgPool2dGrad, on plain NCHW tensors, float32 and bfloat16.
//
// The core's geometry maps onto oneDNN's as follows, per spatial axis of
// length L with kernel k, stride s, padding p before and pe after (pads
// [top, left, bottom, right], or one value per axis for both sides) and
// dilation d (oneDNN counts dilation from 0: d - 1):
//   * the output size is the core's (the pooled tensor's shape); ceil mode
//     becomes a right padding pr >= pe chosen so that oneDNN's floor formula
//     (L + p + pr - d(k-1) - 1) / s + 1 gives that size;
//   * padded cells never win a maximum (oneDNN pads max pooling with -inf);
//   * count_include_pad=True divides by the window clipped to [-p, L + pe):
//     that is k (oneDNN's avg_include_padding) only when no window reaches
//     past L + pe, i.e. pr <= pe; other calls are declined;
//   * count_include_pad=False divides by the real cells
//     (avg_exclude_padding), whatever pr is;
//   * AdaptiveAvgPool2d bins are [floor(iL/O), ceil((i+1)L/O)): a regular
//     pooling with k = s = L / O when O divides L; declined otherwise.
// Max pooling propagates NaN in the core (a NaN wins its window); oneDNN's
// comparisons drop it, so calls whose x holds a NaN are declined (one scan
// of x, measured in docs/nn_ops.md). A window of only -inf is -inf in the
// core (and torch); oneDNN starts each window at -FLT_MAX and leaves that,
// so calls whose x holds a -inf are declined by the same scan. MaxPool2dGrad recomputes the maxima
// from x: it runs the forward in training mode into workspace buffers (the
// pooled values and oneDNN's argmax workspace), then the backward.
#include <cfloat>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common.h"

namespace mkldnn_plugin {
namespace {

enum class Pool { kMax, kAvg, kAdaptive };

// One pooling call as oneDNN sees it.
struct PoolPlan {
  dnnl::algorithm alg;
  dnnl::memory::dims kernel, strides, dilation, pad_l, pad_r;
  dnnl::memory::desc src, dst;  // x and the pooled tensor, plain NCHW
  std::string key;
};

// A per-axis attribute of 1 or 2 values (`fallback` when empty); false
// when it has another count.
bool ReadPair(const dg::KernelContext& ctx, const char* name,
              const std::vector<int64_t>& fallback, int64_t out[2]) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty()) v = fallback;
  if (v.size() != 1 && v.size() != 2) return false;
  out[0] = v[0];
  out[1] = v.back();
  return true;
}

// The pads attribute: begins p[2] and ends pe[2] ([ph, pw] on both sides,
// one value for all, or [top, left, bottom, right]); false otherwise.
bool ReadPads(const dg::KernelContext& ctx, int64_t p[2], int64_t pe[2]) {
  const std::vector<int64_t> v = ctx.ints("pads");
  if (v.size() == 4) {
    p[0] = v[0], p[1] = v[1], pe[0] = v[2], pe[1] = v[3];
    return true;
  }
  if (!ReadPair(ctx, "pads", {}, p)) return false;
  pe[0] = p[0], pe[1] = p[1];
  return true;
}

// The right padding that makes oneDNN's floor formula give `out` positions
// (see the file comment); -1 when there is none.
int64_t RightPad(int64_t len, int64_t out, int64_t k, int64_t s, int64_t p,
                 int64_t pe, int64_t d) {
  const int64_t span = d * (k - 1) + 1;
  for (int64_t pr : {pe, (out - 1) * s + span - len - p}) {
    const int64_t room = len + p + pr - span;
    if (pr >= 0 && room >= 0 && room / s + 1 == out) return pr;
  }
  return -1;
}

// Fills `plan` for a call of `kind` (the pooled tensor is dy for a
// gradient, y otherwise); false when oneDNN cannot express it.
bool PlanPool(const dg::KernelContext& ctx, Pool kind, bool grad,
              PoolPlan* plan) {
  const dg::TensorRef x = ctx.input(0);
  const dg::TensorRef pooled = grad ? ctx.input(1) : ctx.output(0);
  // MaxPool2dNchw16c (layout.cc): blocked [N, C/16, H, W, 16] tensors.
  const bool blocked = x.ndim() == 5 && pooled.ndim() == 5 && !grad;
  if (!blocked && (x.ndim() != 4 || pooled.ndim() != 4)) return false;
  int64_t k[2], s[2], p[2] = {0, 0}, pe[2] = {0, 0}, d[2] = {1, 1};
  if (kind == Pool::kAdaptive) {
    for (int a = 0; a < 2; ++a) {
      const int64_t len = x.dim(2 + a), out = pooled.dim(2 + a);
      if (out <= 0 || len % out != 0) return false;
      k[a] = s[a] = len / out;
    }
    plan->alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    const std::vector<int64_t> ks = ctx.ints("kernel_size");
    if (!ReadPair(ctx, "kernel_size", {}, k) ||
        !ReadPair(ctx, "strides", ks, s) || !ReadPads(ctx, p, pe) ||
        (kind == Pool::kMax && !ReadPair(ctx, "dilations", {}, d))) {
      return false;
    }
    plan->alg = kind == Pool::kMax ? dnnl::algorithm::pooling_max
                : ctx.b("count_include_pad")
                    ? dnnl::algorithm::pooling_avg_include_padding
                    : dnnl::algorithm::pooling_avg_exclude_padding;
  }
  plan->kernel.assign(k, k + 2);
  plan->strides.assign(s, s + 2);
  plan->pad_l.assign(p, p + 2);
  plan->dilation = {d[0] - 1, d[1] - 1};
  plan->pad_r.resize(2);
  for (int a = 0; a < 2; ++a) {
    const int64_t pr =
        RightPad(x.dim(2 + a), pooled.dim(2 + a), k[a], s[a], p[a], pe[a], d[a]);
    if (pr < 0) return false;
    if (plan->alg == dnnl::algorithm::pooling_avg_include_padding &&
        pr > pe[a]) {
      return false;
    }
    plan->pad_r[a] = pr;
  }
  const dnnl::memory::data_type dt = DataType(x.dtype());
  if (blocked) {
    plan->src = Nchw16cDesc(PlainDims(x), dt);
    plan->dst = Nchw16cDesc(PlainDims(pooled), dt);
  } else {
    plan->src = Plain(Dims(x.shape()), dt);
    plan->dst = Plain(Dims(pooled.shape()), dt);
  }
  plan->key = Key("pool", static_cast<int>(plan->alg), blocked, x.shape(),
                  pooled.shape(), plan->kernel, plan->strides, plan->dilation,
                  plan->pad_l, plan->pad_r, static_cast<int>(dt));
  return true;
}

// The forward primitive of `plan` (training mode: with oneDNN's argmax
// workspace for max pooling, and the hint of the backward).
auto Forward(const PoolPlan& plan, dnnl::prop_kind prop) {
  return Cached<dnnl::pooling_forward>(
      Key(plan.key, "fwd", static_cast<int>(prop)), [&] {
        return dnnl::pooling_forward::primitive_desc(
            Engine(), prop, plan.alg, plan.src, plan.dst, plan.strides,
            plan.kernel, plan.dilation, plan.pad_l, plan.pad_r, Attr());
      });
}

auto Backward(const PoolPlan& plan) {
  return Cached<dnnl::pooling_backward>(Key(plan.key, "bwd"), [&] {
    auto hint = Forward(plan, dnnl::prop_kind::forward_training);
    return dnnl::pooling_backward::primitive_desc(
        Engine(), plan.alg, plan.src, plan.dst, plan.strides, plan.kernel,
        plan.dilation, plan.pad_l, plan.pad_r, *hint.pd, Attr());
  });
}

// Whether bits are a NaN or -inf: oneDNN's max pooling starts each window
// at the lowest finite value, so a window of -inf (and padding) comes out
// as -FLT_MAX where the core's max gives -inf (as torch does).
constexpr bool IsNanOrNegInfBits(uint32_t b) {
  return IsNanBits(b) || b == 0xff800000u;
}
constexpr bool IsNanOrNegInfBits(uint16_t b) {
  return IsNanBits(b) || b == 0xff80u;
}

// Whether a float32 / bfloat16 tensor of rank 4 holds a NaN or a -inf (any
// strides: supports() sees the caller's view), tested on the bits (Bits =
// uint32_t / uint16_t): an integer loop that vectorizes.
template <typename Bits>
bool AnyNanOrNegInf(const dg::TensorRef& t) {
  const Bits* base = static_cast<const Bits*>(t.raw_data());
  if (t.is_contiguous()) {
    // An OR of the tests (no early exit) vectorizes; split across the
    // threads above 256 Ki elements (a ResNet stem's 2 MiB input took
    // ~80 us on one thread, a fifth of the pooling call).
    const int64_t n = t.numel();
    unsigned any = 0;
#pragma omp parallel for schedule(static) reduction(| : any) if (n >= (1 << 18))
    for (int64_t i = 0; i < n; ++i) any |= IsNanOrNegInfBits(base[i]) ? 1u : 0u;
    return any != 0;
  }
  for (int64_t a = 0; a < t.dim(0); ++a) {
    for (int64_t b = 0; b < t.dim(1); ++b) {
      for (int64_t c = 0; c < t.dim(2); ++c) {
        const Bits* row = base + a * t.stride(0) + b * t.stride(1) +
                          c * t.stride(2);
        bool any = false;
        for (int64_t e = 0; e < t.dim(3); ++e) {
          any |= IsNanOrNegInfBits(row[e * t.stride(3)]);
        }
        if (any) return true;
      }
    }
  }
  return false;
}

bool HasNanOrNegInf(const dg::TensorRef& t) {
  return t.dtype() == DG_BFLOAT16 ? AnyNanOrNegInf<uint16_t>(t) : AnyNanOrNegInf<uint32_t>(t);
}

// supports(): the call maps onto oneDNN (PlanPool), oneDNN builds the
// primitive for it, and a max pooling sees no NaN and no -inf (cpu_eigen's
// kernels take those). Never throws.
template <Pool kKind, bool kGrad>
int32_t Supports(const DgCallFrame* f) {
  try {
    const dg::KernelContext ctx(f);
    if (ctx.input(0).numel() == 0) return 1;  // nothing to compute
    PoolPlan plan;
    if (!PlanPool(ctx, kKind, kGrad, &plan)) return 0;
    if (kKind == Pool::kMax && HasNanOrNegInf(ctx.input(0))) return 0;
    if (kGrad) {
      Backward(plan);
    } else {
      Forward(plan, dnnl::prop_kind::forward_inference);
    }
    return 1;
  } catch (...) {  // dnnl::error (no implementation) or a bad attribute
    return 0;
  }
}

// The plan of a call supports() accepted.
PoolPlan MustPlan(const dg::KernelContext& ctx, Pool kind, bool grad) {
  PoolPlan plan;
  DG_CHECK(PlanPool(ctx, kind, grad, &plan), DG_INTERNAL, ctx.op_name(),
           ": oneDNN cannot express this call (supports() should have "
           "declined it)");
  return plan;
}

template <Pool kKind>
void PoolForward(dg::KernelContext& ctx) {
  if (ctx.input(0).numel() == 0) return;
  const PoolPlan plan = MustPlan(ctx, kKind, false);
  auto p = Forward(plan, dnnl::prop_kind::forward_inference);
  Execute(ctx, p.prim, *p.pd,
          {{DNNL_ARG_SRC, Memory(plan.src, ctx.input(0))},
           {DNNL_ARG_DST, Memory(plan.dst, ctx.output(0))}});
}

// The gradient ops: the backward primitive on dy. An average is linear in
// dy (x gives only the shape); max pooling first recomputes each window's
// argmax by running the forward in training mode on x.
template <Pool kKind>
void PoolBackward(dg::KernelContext& ctx) {
  if (ctx.input(0).numel() == 0) return;
  const PoolPlan plan = MustPlan(ctx, kKind, true);
  auto bwd = Backward(plan);
  std::unordered_map<int, dnnl::memory> args = {
      {DNNL_ARG_DIFF_DST, Memory(plan.dst, ctx.input(1))},
      {DNNL_ARG_DIFF_SRC, Memory(plan.src, ctx.output(0))}};
  if (kKind == Pool::kMax) {  // the argmax of each window, recomputed
    auto fwd = Forward(plan, dnnl::prop_kind::forward_training);
    const dnnl::memory ws = Scratch(ctx, fwd.pd->workspace_desc());
    Execute(ctx, fwd.prim, *fwd.pd,
            {{DNNL_ARG_SRC, Memory(plan.src, ctx.input(0))},
             {DNNL_ARG_DST, Scratch(ctx, plan.dst)},
             {DNNL_ARG_WORKSPACE, ws}});
    args[DNNL_ARG_WORKSPACE] = ws;
  }
  Execute(ctx, bwd.prim, *bwd.pd, std::move(args));
}

// MaxPool2dNchw16c (layout.cc): oneDNN's max pooling on nChw16c, then every
// window holding a NaN gets that NaN (the core's max keeps NaN, oneDNN's
// comparisons drop it) and every window of only -inf gets -inf (oneDNN's
// starts at -FLT_MAX). No other kernel serves the op, so these are handled
// here rather than declined; the fix-up runs only when x holds one.
void BlockedMaxPool(dg::KernelContext& ctx) {
  PoolForward<Pool::kMax>(ctx);
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  if (x.numel() == 0 || y.numel() == 0 || !HasNanOrNegInf(x)) return;
  const PoolPlan plan = MustPlan(ctx, Pool::kMax, false);
  const float* px = x.data<const float>();
  float* py = y.data<float>();
  const int64_t planes = x.dim(0) * x.dim(1), h = x.dim(2), w = x.dim(3);
  const int64_t oh = y.dim(2), ow = y.dim(3), lanes = x.dim(4);
  DG_CHECK(lanes <= 64, DG_INTERNAL, ctx.op_name(), ": blocks of ", lanes,
           " channels (at most 64 expected)");
  for (int64_t nc = 0; nc < planes; ++nc) {
    const float* plane = px + nc * h * w * lanes;
    for (int64_t i = 0; i < oh; ++i) {
      for (int64_t j = 0; j < ow; ++j) {
        float* out = py + ((nc * oh + i) * ow + j) * lanes;
        // A lane oneDNN left at -FLT_MAX saw only -inf (or padding), unless a
        // cell holds -FLT_MAX itself.
        bool low[64];
        for (int64_t l = 0; l < lanes; ++l) low[l] = out[l] == -FLT_MAX;
        for (int64_t a = 0; a < plan.kernel[0]; ++a) {
          const int64_t r = i * plan.strides[0] - plan.pad_l[0] +
                            a * (plan.dilation[0] + 1);
          if (r < 0 || r >= h) continue;
          for (int64_t b = 0; b < plan.kernel[1]; ++b) {
            const int64_t c = j * plan.strides[1] - plan.pad_l[1] +
                              b * (plan.dilation[1] + 1);
            if (c < 0 || c >= w) continue;
            const float* cell = plane + (r * w + c) * lanes;
            for (int64_t l = 0; l < lanes; ++l) {
              if (cell[l] != cell[l] && out[l] == out[l]) out[l] = cell[l];
              if (cell[l] == -FLT_MAX) low[l] = false;
            }
          }
        }
        for (int64_t l = 0; l < lanes; ++l) {
          if (low[l] && out[l] == -FLT_MAX) {
            out[l] = -std::numeric_limits<float>::infinity();
          }
        }
      }
    }
  }
}

// The blocked op's supports(): oneDNN builds the primitive (a NaN or a
// window of -inf is the kernel's to handle, see BlockedMaxPool). Never
// throws.
int32_t BlockedSupports(const DgCallFrame* f) {
  try {
    const dg::KernelContext ctx(f);
    if (ctx.input(0).numel() == 0) return 1;
    PoolPlan plan;
    if (!PlanPool(ctx, Pool::kMax, false, &plan)) return 0;
    Forward(plan, dnnl::prop_kind::forward_inference);
    return 1;
  } catch (...) {
    return 0;
  }
}

// Registers FN for float32 and bfloat16 with its supports() predicate.
int Register(const char* op, const char* name, dg::KernelFunc fn,
             DgSupportsFn supports) {
  return dg::internal::AddKernel(op, "cpu", kF32Bf16, kPriority, 0, name, fn,
                                 supports);
}

[[maybe_unused]] const int kRegistered[] = {
    Register("MaxPool2d", "mkldnn::MaxPool2d", &PoolForward<Pool::kMax>,
             &Supports<Pool::kMax, false>),
    Register("MaxPool2dNchw16c", "mkldnn::MaxPool2dNchw16c", &BlockedMaxPool,
             &BlockedSupports),
    Register("MaxPool2dGrad", "mkldnn::MaxPool2dGrad",
             &PoolBackward<Pool::kMax>, &Supports<Pool::kMax, true>),
    Register("AvgPool2d", "mkldnn::AvgPool2d", &PoolForward<Pool::kAvg>,
             &Supports<Pool::kAvg, false>),
    Register("AvgPool2dGrad", "mkldnn::AvgPool2dGrad",
             &PoolBackward<Pool::kAvg>, &Supports<Pool::kAvg, true>),
    Register("AdaptiveAvgPool2d", "mkldnn::AdaptiveAvgPool2d",
             &PoolForward<Pool::kAdaptive>, &Supports<Pool::kAdaptive, false>),
    Register("AdaptiveAvgPool2dGrad", "mkldnn::AdaptiveAvgPool2dGrad",
             &PoolBackward<Pool::kAdaptive>,
             &Supports<Pool::kAdaptive, true>),
};

}  // namespace
}  // namespace mkldnn_plugin
