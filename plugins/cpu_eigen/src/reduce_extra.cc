// Reductions (docs/ops.md, "Reductions") for the dtypes reduce.cc and
// argreduce.cc do not serve: float16 / bfloat16 (Sum, Prod, Mean, Max, Min,
// Var, Std, LogSumExp accumulated in double and rounded once to the output;
// ArgMax, ArgMin). (bool Max / Min, any / all, are reduce.cc's folds.)
//
// One plain walk: the input arrives contiguous, each element adds into its
// output's accumulator, whose offset an odometer over the input's
// dimensions keeps up to date. The semantics are those of the float32
// kernels: NaN propagates through Max and Min, an empty Max / Min gives
// -inf / +inf, an empty Mean / Var / Std NaN, an empty LogSumExp -inf.
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common.h"
#include "dragon/plugin.hpp"
#include "reduce_util.h"
#include "widen.h"

namespace cpu_eigen {
namespace {

// Calls fn(i, o) for every input element i with the index o of the output
// it reduces into (outputs numbered over the kept axes, row-major).
template <typename Fn>
void Walk(const std::vector<int64_t>& shape, const std::vector<bool>& reduce,
          int64_t n, Fn&& fn) {
  const size_t nd = shape.size();
  std::vector<int64_t> ostride(nd, 0), idx(nd, 0);
  int64_t s = 1;
  for (size_t d = nd; d-- > 0;) {
    if (!reduce[d]) {
      ostride[d] = s;
      s *= shape[d];
    }
  }
  int64_t o = 0;
  for (int64_t i = 0; i < n; ++i) {
    fn(i, o);
    for (size_t d = nd; d-- > 0;) {  // carry
      o += ostride[d];
      if (++idx[d] < shape[d]) break;
      o -= ostride[d] * shape[d];
      idx[d] = 0;
    }
  }
}

struct Plan {
  std::vector<int64_t> shape;
  std::vector<bool> reduce;
  int64_t n = 0, num_out = 0, num_red = 1;
};

Plan MakePlan(const dg::KernelContext& ctx) {
  Plan p;
  const dg::TensorRef x = ctx.input(0);
  p.shape = x.shape();
  p.reduce = ReducedAxes(ctx, p.shape);
  p.n = x.numel();
  p.num_out = ctx.output(0).numel();
  for (size_t d = 0; d < p.shape.size(); ++d) {
    if (p.reduce[d]) p.num_red *= p.shape[d];
  }
  return p;
}

enum class Kind { kSum, kProd, kMax, kMin };

// acc[o] = fold of f(x) over output o's elements, in double.
template <typename T, typename F>
std::vector<double> Fold(const Plan& p, const T* x, Kind kind, F f) {
  const double inf = std::numeric_limits<double>::infinity();
  const double id = kind == Kind::kSum ? 0.0 : kind == Kind::kProd ? 1.0
                    : kind == Kind::kMax ? -inf : inf;
  std::vector<double> acc(static_cast<size_t>(p.num_out), id);
  Walk(p.shape, p.reduce, p.n, [&](int64_t i, int64_t o) {
    const double v = f(static_cast<double>(static_cast<float>(x[i])), o);
    double& a = acc[static_cast<size_t>(o)];
    switch (kind) {
      case Kind::kSum: a += v; break;
      case Kind::kProd: a *= v; break;
      case Kind::kMax:  // NaN propagates: once a is NaN it stays
        if (!std::isnan(a) && (std::isnan(v) || v > a)) a = v;
        break;
      case Kind::kMin:
        if (!std::isnan(a) && (std::isnan(v) || v < a)) a = v;
        break;
    }
  });
  return acc;
}

template <typename T>
void Store(const dg::KernelContext& ctx, const std::vector<double>& acc) {
  T* y = ctx.output(0).data<T>();
  for (size_t o = 0; o < acc.size(); ++o) {
    y[o] = static_cast<T>(static_cast<float>(acc[o]));
  }
}

// The double result goes to the 16-bit type through float: a double
// rounding that can differ from a direct one only on an exact 16-bit tie
// after float rounding (a 2^-24 relative step before a 2^-11 or 2^-8 one).
constexpr auto kPlain = [](double v, int64_t) { return v; };

template <typename T>
void HalfReduce(dg::KernelContext& ctx, Kind kind) {
  const Plan p = MakePlan(ctx);
  Store<T>(ctx, Fold(p, ctx.input(0).data<const T>(), kind, kPlain));
}

template <typename T>
void HalfSum(dg::KernelContext& ctx) { HalfReduce<T>(ctx, Kind::kSum); }
template <typename T>
void HalfProd(dg::KernelContext& ctx) { HalfReduce<T>(ctx, Kind::kProd); }
template <typename T>
void HalfMax(dg::KernelContext& ctx) { HalfReduce<T>(ctx, Kind::kMax); }
template <typename T>
void HalfMin(dg::KernelContext& ctx) { HalfReduce<T>(ctx, Kind::kMin); }

template <typename T>
void HalfMean(dg::KernelContext& ctx) {
  const Plan p = MakePlan(ctx);
  std::vector<double> acc = Fold(p, ctx.input(0).data<const T>(), Kind::kSum, kPlain);
  for (double& a : acc) a /= static_cast<double>(p.num_red);  // 0 / 0: NaN
  Store<T>(ctx, acc);
}

// Two passes (mean, then squared deviations), divisor max(n - ddof, 0).
template <typename T, bool kSqrt>
void HalfMoments(dg::KernelContext& ctx) {
  const Plan p = MakePlan(ctx);
  const T* x = ctx.input(0).data<const T>();
  std::vector<double> mean = Fold(p, x, Kind::kSum, kPlain);
  const double n = static_cast<double>(p.num_red);
  for (double& m : mean) m /= n;
  std::vector<double> dev = Fold(p, x, Kind::kSum, [&](double v, int64_t o) {
    const double d = v - mean[static_cast<size_t>(o)];
    return d * d;
  });
  const double divisor = std::max(0.0, n - static_cast<double>(ctx.i("ddof")));
  for (double& d : dev) d = kSqrt ? std::sqrt(d / divisor) : d / divisor;
  Store<T>(ctx, dev);
}

template <typename T>
void HalfVar(dg::KernelContext& ctx) { HalfMoments<T, false>(ctx); }
template <typename T>
void HalfStd(dg::KernelContext& ctx) { HalfMoments<T, true>(ctx); }

// m + log(sum(exp(x - m))), m the maximum (0 where not finite), as reduce.cc.
template <typename T>
void HalfLogSumExp(dg::KernelContext& ctx) {
  const Plan p = MakePlan(ctx);
  const T* x = ctx.input(0).data<const T>();
  std::vector<double> shift = Fold(p, x, Kind::kMax, kPlain);
  for (double& s : shift) {
    if (!std::isfinite(s)) s = 0.0;
  }
  std::vector<double> sum = Fold(p, x, Kind::kSum, [&](double v, int64_t o) {
    return std::exp(v - shift[static_cast<size_t>(o)]);
  });
  for (size_t o = 0; o < sum.size(); ++o) sum[o] = shift[o] + std::log(sum[o]);
  Store<T>(ctx, sum);
}

DG_KERNEL("Sum", "cpu", HalfSum, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Prod", "cpu", HalfProd, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Max", "cpu", HalfMax, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Min", "cpu", HalfMin, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Mean", "cpu", HalfMean, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Var", "cpu", HalfVar, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("Std", "cpu", HalfStd, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("LogSumExp", "cpu", HalfLogSumExp, CPU_EIGEN_HALF_TYPES);

// ------------------------------------------------- 16-bit ArgMax / ArgMin

// NumPy's argmax / argmin (argreduce.cc): ties give the first index, the
// first NaN wins. Compared in float, which orders 16-bit values exactly.
template <bool kMax, typename T>
void HalfArgExtreme(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape = xt.shape();
  AxisSplit s;
  if (ctx.has("axis")) {
    s = SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
  } else {
    s.dim = xt.numel();
  }
  const int64_t num_out = s.outer * s.inner;
  DG_CHECK(ctx.output(0).numel() == num_out, DG_INTERNAL, ctx.op_name(),
           ": output has ", ctx.output(0).numel(), " elements, expected ",
           num_out, " for an input of shape ", ShapeStr(shape));
  if (num_out == 0) return;
  DG_CHECK(s.dim > 0, DG_INVALID_ARGUMENT, ctx.op_name(),
           ": cannot reduce a zero-size axis (input shape ", ShapeStr(shape), ")");
  const T* x = xt.data<const T>();
  int64_t* y = ctx.output(0).data<int64_t>();
  ParallelFor(num_out, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const int64_t outer = o / s.inner, inner = o % s.inner;
      const T* p = x + outer * s.dim * s.inner + inner;
      float best = static_cast<float>(p[0]);
      int64_t at = 0;
      for (int64_t k = 1; k < s.dim && !std::isnan(best); ++k) {
        const float v = static_cast<float>(p[k * s.inner]);
        if ((kMax ? v > best : v < best) || std::isnan(v)) {
          best = v;
          at = k;
        }
      }
      y[o] = at;
    }
  }, s.dim);
}

template <typename T>
void HalfArgMax(dg::KernelContext& ctx) { HalfArgExtreme<true, T>(ctx); }
template <typename T>
void HalfArgMin(dg::KernelContext& ctx) { HalfArgExtreme<false, T>(ctx); }

DG_KERNEL("ArgMax", "cpu", HalfArgMax, CPU_EIGEN_HALF_TYPES);
DG_KERNEL("ArgMin", "cpu", HalfArgMin, CPU_EIGEN_HALF_TYPES);

}  // namespace
}  // namespace cpu_eigen
