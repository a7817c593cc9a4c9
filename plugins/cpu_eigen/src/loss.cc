// Loss kernels. Element-wise losses compute each term in the input dtype;
// the "sum" and "mean" reductions accumulate in double over fixed blocks
// (eight interleaved partial sums per block, block partials added in block
// order), so the result does not depend on
// the thread count. A mean over nothing is NaN (0 / 0), as in PyTorch.
//
// The classification losses see the input as (outer, C, inner): [N, C, d...]
// has outer = N and inner = prod(d); a 1-D input [C] has outer = inner = 1.
// Targets are validated before any parallel work (no exception may leave a
// parallel region).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace cpu_eigen {
namespace {

enum class Reduction { kNone, kSum, kMean };

Reduction GetReduction(const dg::KernelContext& ctx) {
  const std::string r = ctx.s("reduction");
  if (r == "none") return Reduction::kNone;
  if (r == "sum") return Reduction::kSum;
  DG_CHECK(r == "mean", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": reduction must be \"mean\", \"sum\" or \"none\", got \"", r,
           "\"");
  return Reduction::kMean;
}

constexpr int64_t kSumBlock = 4096, kLanes = 8;

// Sum of term(i) for i in [0, n) in double, deterministic for any thread
// count: fixed blocks in parallel (each summed in eight interleaved lanes),
// then the block sums in order. `visit(begin, end)` runs on each block just
// before it is summed (its data then sits in L1 for the sum).
struct NoVisit {
  void operator()(int64_t, int64_t) const {}
};
template <typename Term, typename Visit = NoVisit>
double BlockedSum(int64_t n, int64_t cost, const Term& term,
                  const Visit& visit = Visit{}) {
  if (n <= 0) return 0.0;
  const int64_t blocks = (n + kSumBlock - 1) / kSumBlock;
  std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
  ParallelFor(
      blocks,
      [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t end = std::min(n, (b + 1) * kSumBlock);
          visit(b * kSumBlock, end);
          // Eight interleaved partial sums (term i goes to lane i % 8), added
          // pairwise at the end: eight independent chains of additions
          // instead of one (a double add waits ~4 cycles for the last).
          double acc[kLanes] = {};
          int64_t i = b * kSumBlock;
          for (; i + kLanes <= end; i += kLanes)
            for (int64_t k = 0; k < kLanes; ++k) acc[k] += term(i + k);
          for (int64_t k = 0; i < end; ++i, ++k) acc[k] += term(i);
          partial[b] = ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                       ((acc[4] + acc[5]) + (acc[6] + acc[7]));
        }
      },
      kSumBlock * cost);
  double total = 0.0;
  for (double v : partial) total += v;
  return total;
}

// Writes term(i) (reduction "none") or the reduced value into output 0.
// `count` is the mean's divisor.
template <typename T, typename Term>
void Reduce(dg::KernelContext& ctx, Reduction red, int64_t n, double count,
            int64_t cost, const Term& term) {
  T* out = ctx.output(0).data<T>();
  if (red == Reduction::kNone) {
    ParallelFor(
        n,
        [&](int64_t begin, int64_t end) {
          for (int64_t i = begin; i < end; ++i) out[i] = static_cast<T>(term(i));
        },
        cost);
    return;
  }
  const double sum = BlockedSum(n, cost, term);
  out[0] = static_cast<T>(red == Reduction::kSum ? sum : sum / count);
}

void CheckSameCount(const dg::KernelContext& ctx) {
  DG_CHECK(ctx.input(0).numel() == ctx.input(1).numel(), DG_INTERNAL,
           ctx.op_name(), ": input has ", ctx.input(0).numel(),
           " elements, target ", ctx.input(1).numel());
}

// ---------------------------------------------------- element-wise losses

template <typename T, typename F>
void PairLoss(dg::KernelContext& ctx, int64_t cost, const F& f) {
  CheckSameCount(ctx);
  const Reduction red = GetReduction(ctx);
  const int64_t n = ctx.input(0).numel();
  const T* x = n ? ctx.input(0).data<const T>() : nullptr;
  const T* t = n ? ctx.input(1).data<const T>() : nullptr;
  Reduce<T>(ctx, red, n, static_cast<double>(n), cost,
            [&](int64_t i) { return f(x[i], t[i], i); });
}

// MseLoss's term, in T (MseLossAndGrad sums the same terms).
template <typename T>
T SquaredError(T x, T t) {
  const T d = x - t;
  return d * d;
}

template <typename T>
void MseLossKernel(dg::KernelContext& ctx) {
  PairLoss<T>(ctx, 1, [](T x, T t, int64_t) { return SquaredError(x, t); });
}

// MseLoss and its gradient in one pass over input and target: the loss has
// MseLoss's bits (the same terms, the same BlockedSum), dinput Sub's then
// Mul's (d = x - t rounded to T, then d * scale rounded to T).
template <typename T>
void MseLossAndGradKernel(dg::KernelContext& ctx) {
  CheckSameCount(ctx);
  const Reduction red = GetReduction(ctx);
  DG_CHECK(red != Reduction::kNone, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": reduction must be \"mean\" or \"sum\", got \"none\"");
  const int64_t n = ctx.input(0).numel();
  DG_CHECK(ctx.input(2).numel() == 1 && ctx.output(1).numel() == n,
           DG_INTERNAL, ctx.op_name(), ": scale has ", ctx.input(2).numel(),
           " elements (expected 1), dinput ", ctx.output(1).numel(),
           " (expected ", n, ")");
  const T scale = ctx.input(2).data<const T>()[0];
  const T* x = n ? ctx.input(0).data<const T>() : nullptr;
  const T* t = n ? ctx.input(1).data<const T>() : nullptr;
  T* dx = n ? ctx.output(1).data<T>() : nullptr;
  // dx block by block (a plain loop the compiler vectorises), then the
  // block's terms from the same x and t, now in L1.
  const double sum = BlockedSum(
      n, 2,
      [&](int64_t i) { return SquaredError(x[i], t[i]); },
      [&](int64_t begin, int64_t end) {
        const T* __restrict xs = x;
        const T* __restrict ts = t;
        T* __restrict out = dx;
        for (int64_t i = begin; i < end; ++i) out[i] = (xs[i] - ts[i]) * scale;
      });
  ctx.output(0).data<T>()[0] = static_cast<T>(
      red == Reduction::kSum ? sum : sum / static_cast<double>(n));
}

template <typename T>
void L1LossKernel(dg::KernelContext& ctx) {
  PairLoss<T>(ctx, 1, [](T x, T t, int64_t) { return std::abs(x - t); });
}

template <typename T>
void SmoothL1LossKernel(dg::KernelContext& ctx) {
  const double beta_attr = ctx.f("beta");
  DG_CHECK(beta_attr >= 0.0, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": beta must be >= 0, got ", beta_attr);
  const T beta = static_cast<T>(beta_attr);
  PairLoss<T>(ctx, 2, [beta](T x, T t, int64_t) {
    const T d = std::abs(x - t);
    return d < beta ? T(0.5) * d * d / beta : d - T(0.5) * beta;
  });
}

// log(1 + exp(-x)) for any x, without overflow.
template <typename T>
inline T SoftplusNeg(T x) {
  return std::log1p(std::exp(-std::abs(x))) + std::max(-x, T(0));
}

template <typename T>
void BceWithLogitsKernel(dg::KernelContext& ctx) {
  const T* pw = nullptr;
  int64_t classes = 1;
  if (ctx.num_inputs() > 2) {
    const dg::TensorRef w = ctx.input(2);
    DG_CHECK(w.ndim() == 1 && ctx.input(0).ndim() >= 1, DG_INTERNAL,
             ctx.op_name(), ": pos_weight must be 1-D");
    pw = w.data<const T>();
    classes = w.dim(0);
    DG_CHECK(classes == 1 || classes == ctx.input(0).dim(-1), DG_INTERNAL,
             ctx.op_name(), ": pos_weight has ", classes,
             " entries for a last axis of ", ctx.input(0).dim(-1));
  }
  PairLoss<T>(ctx, 8, [pw, classes](T x, T t, int64_t i) {
    const T w = pw ? pw[classes == 1 ? 0 : i % classes] : T(1);
    return (T(1) - t) * x + (T(1) + (w - T(1)) * t) * SoftplusNeg(x);
  });
}

template <typename T>
void SigmoidFocalLossKernel(dg::KernelContext& ctx) {
  const T alpha = static_cast<T>(ctx.f("alpha"));
  const T gamma = static_cast<T>(ctx.f("gamma"));
  DG_CHECK(gamma >= T(0), DG_INVALID_ARGUMENT, ctx.op_name(),
           ": gamma must be >= 0, got ", gamma);
  PairLoss<T>(ctx, 16, [alpha, gamma](T x, T t, int64_t) {
    const T p = T(1) / (T(1) + std::exp(-x));
    const T ce = (T(1) - t) * x + SoftplusNeg(x);
    const T p_t = p * t + (T(1) - p) * (T(1) - t);
    T loss = ce * std::pow(T(1) - p_t, gamma);
    if (alpha >= T(0)) loss *= alpha * t + (T(1) - alpha) * (T(1) - t);
    return loss;
  });
}

DG_KERNEL("MseLoss", "cpu", MseLossKernel, float, double);
DG_KERNEL("MseLossAndGrad", "cpu", MseLossAndGradKernel, float, double);
DG_KERNEL("L1Loss", "cpu", L1LossKernel, float, double);
DG_KERNEL("SmoothL1Loss", "cpu", SmoothL1LossKernel, float, double);
DG_KERNEL("BceWithLogits", "cpu", BceWithLogitsKernel, float, double);
DG_KERNEL("SigmoidFocalLoss", "cpu", SigmoidFocalLossKernel, float, double);

// ------------------------------------------------- classification losses

struct ClassLayout {
  int64_t outer = 1, classes = 1, inner = 1;
};

ClassLayout GetLayout(const dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  DG_CHECK(x.ndim() >= 1, DG_INTERNAL, ctx.op_name(),
           ": input needs a class axis");
  ClassLayout l;
  if (x.ndim() == 1) {
    l.classes = x.dim(0);
    return l;
  }
  l.outer = x.dim(0);
  l.classes = x.dim(1);
  for (int32_t k = 2; k < x.ndim(); ++k) l.inner *= x.dim(k);
  DG_CHECK(ctx.input(1).numel() == l.outer * l.inner, DG_INTERNAL,
           ctx.op_name(), ": target has ", ctx.input(1).numel(),
           " elements, expected ", l.outer * l.inner);
  return l;
}

// Target values as int64, checked against [0, C) unless ignored; returns
// how many are not ignored.
template <typename I>
int64_t ReadTargets(const dg::KernelContext& ctx, const I* t, int64_t m,
                    int64_t classes, int64_t ignore, std::vector<int64_t>* out) {
  out->resize(static_cast<size_t>(m));
  int64_t counted = 0;
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = static_cast<int64_t>(t[i]);
    (*out)[i] = v;
    if (v == ignore) continue;
    if (v < 0 || v >= classes) {
      throw dg::Error(DG_OUT_OF_RANGE,
                      dg::Str(ctx.op_name(), ": target ", v,
                              " (at flat position ", i, ") is outside [0, ",
                              classes, ") and is not ignore_index ", ignore));
    }
    ++counted;
  }
  return counted;
}

int64_t Targets(const dg::KernelContext& ctx, const ClassLayout& l,
                std::vector<int64_t>* out) {
  const dg::TensorRef t = ctx.input(1);
  const int64_t m = l.outer * l.inner, ignore = ctx.i("ignore_index");
  if (m == 0) return 0;
  return DispatchIndexType(ctx, t, "target", [&](const auto* p) {
    return ReadTargets(ctx, p, m, l.classes, ignore, out);
  });
}

// Cross entropy of one position: logits x[c * stride], c < C.
template <typename T>
double CrossEntropyAt(const T* x, int64_t classes, int64_t stride,
                      int64_t target, double smoothing) {
  if (classes == 0) return 0.0;  // unreachable: a valid target needs C > 0
  double m = static_cast<double>(x[0]);
  for (int64_t c = 1; c < classes; ++c) {
    const double v = static_cast<double>(x[c * stride]);
    if (v > m || v != v) m = v;
  }
  double sum_exp = 0.0, sum_x = 0.0;
  for (int64_t c = 0; c < classes; ++c) {
    const double v = static_cast<double>(x[c * stride]);
    sum_exp += std::exp(v - m);
    sum_x += v;
  }
  const double lse = m + std::log(sum_exp);
  double loss = lse - (1.0 - smoothing) * static_cast<double>(x[target * stride]);
  if (smoothing != 0.0) loss -= smoothing / static_cast<double>(classes) * sum_x;
  return loss;
}

// Row-contiguous case (inner == 1): vectorised max and exp in T.
template <typename T>
double CrossEntropyRow(const T* x, int64_t classes, int64_t target,
                       double smoothing) {
  using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Vec> row(x, classes);
  const T m = row.maxCoeff();
  if (!std::isfinite(static_cast<double>(m))) {
    return CrossEntropyAt(x, classes, 1, target, smoothing);  // NaN / inf
  }
  const double sum_exp = static_cast<double>((row - m).exp().sum());
  const double lse = static_cast<double>(m) + std::log(sum_exp);
  double loss = lse - (1.0 - smoothing) * static_cast<double>(x[target]);
  if (smoothing != 0.0) {
    loss -= smoothing / static_cast<double>(classes) *
            static_cast<double>(row.template cast<double>().sum());
  }
  return loss;
}

template <typename T>
void SoftmaxCrossEntropyKernel(dg::KernelContext& ctx) {
  const Reduction red = GetReduction(ctx);
  const ClassLayout l = GetLayout(ctx);
  const double smoothing = ctx.f("label_smoothing");
  DG_CHECK(smoothing >= 0.0 && smoothing <= 1.0, DG_INVALID_ARGUMENT,
           ctx.op_name(), ": label_smoothing must be in [0, 1], got ",
           smoothing);
  const int64_t ignore = ctx.i("ignore_index");
  std::vector<int64_t> target;
  const int64_t counted = Targets(ctx, l, &target);
  const int64_t m = l.outer * l.inner;
  const T* x = m && l.classes ? ctx.input(0).data<const T>() : nullptr;
  Reduce<T>(ctx, red, m, static_cast<double>(counted), l.classes * 8,
            [&](int64_t i) {
              const int64_t t = target[i];
              if (t == ignore) return 0.0;
              const int64_t o = i / l.inner, s = i % l.inner;
              const T* base = x + o * l.classes * l.inner + s;
              return l.inner == 1
                         ? CrossEntropyRow(base, l.classes, t, smoothing)
                         : CrossEntropyAt(base, l.classes, l.inner, t,
                                          smoothing);
            });
}

template <typename T>
void NllLossKernel(dg::KernelContext& ctx) {
  const Reduction red = GetReduction(ctx);
  const ClassLayout l = GetLayout(ctx);
  const int64_t ignore = ctx.i("ignore_index");
  std::vector<int64_t> target;
  const int64_t counted = Targets(ctx, l, &target);
  const int64_t m = l.outer * l.inner;
  const T* x = m && l.classes ? ctx.input(0).data<const T>() : nullptr;
  Reduce<T>(ctx, red, m, static_cast<double>(counted), 1, [&](int64_t i) {
    const int64_t t = target[i];
    if (t == ignore) return 0.0;
    const int64_t o = i / l.inner, s = i % l.inner;
    return -static_cast<double>(x[(o * l.classes + t) * l.inner + s]);
  });
}

DG_KERNEL("SoftmaxCrossEntropy", "cpu", SoftmaxCrossEntropyKernel, float,
          double);
DG_KERNEL("NllLoss", "cpu", NllLossKernel, float, double);

}  // namespace
}  // namespace cpu_eigen
