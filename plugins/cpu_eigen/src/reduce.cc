// Reductions: Sum, Prod, Max, Min (bool: any, all), Mean, Var, Std,
// LogSumExp.
//
// Every op is one or two passes of a primitive fold (add, multiply, max or
// min) of a per-element map (the value itself, its squared deviation from a
// per-output mean, or its exponential shifted by a per-output maximum). The
// fold walks the grouped layout of reduce_util.h in memory order, without
// copying the input, whether it is contiguous or any transpose of a
// contiguous tensor (other strided inputs are copied densely first):
//  - innermost axis reduced: each output folds contiguous runs (float sums
//    in short float blocks widened into double accumulators, double sums
//    pairwise, max/min through Eigen's vectorised NaN-propagating redux);
//  - innermost axis kept: outputs are accumulated as contiguous vectors,
//    one input row at a time.
// Work is split over outputs, and over the reduced range with per-chunk
// partial results when there are too few outputs to occupy the threads. The
// split depends only on the shapes, so results do not depend on the thread
// count. Floating-point sums and products accumulate in double; integer ones
// in the unsigned type of their width, which wraps exactly like the output.
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "common.h"
#include "reduce_util.h"
#include "softmax_isa.h"
#include "rows.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

// ------------------------------------------------------------ folds

struct AddOp {
  static constexpr bool kPairwise = true;
  static constexpr bool kRedux = false;
  template <typename A>
  static A Identity() {
    return A(0);
  }
  template <typename A>
  static A Apply(A a, A b) {
    return a + b;
  }
};

struct MulOp {
  static constexpr bool kPairwise = false;
  static constexpr bool kRedux = false;
  template <typename A>
  static A Identity() {
    return A(1);
  }
  template <typename A>
  static A Apply(A a, A b) {
    // Narrow unsigned types promote to (signed) int, whose product could
    // overflow: multiply as unsigned int instead.
    using W = std::conditional_t<
        std::is_integral_v<A> && sizeof(A) < sizeof(unsigned), unsigned, A>;
    return static_cast<A>(static_cast<W>(a) * static_cast<W>(b));
  }
};

// Max and Min propagate NaN, as NumPy's max/min do. Contiguous runs of
// floats go through Eigen's vectorised NaN-propagating redux.
struct MaxOp {
  static constexpr bool kPairwise = false;
  static constexpr bool kRedux = true;
  template <typename V>
  static auto Redux(const V& v) {
    return v.template maxCoeff<Eigen::PropagateNaN>();
  }
  template <typename D, typename V>
  static void Combine(D& d, const V& v) {
    d = d.template max<Eigen::PropagateNaN>(v);
  }
  template <typename A>
  static A Identity() {
    return std::numeric_limits<A>::has_infinity
               ? -std::numeric_limits<A>::infinity()
               : std::numeric_limits<A>::lowest();
  }
  template <typename A>
  static A Apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return (a > b || a != a) ? a : b;
    } else {
      return a > b ? a : b;
    }
  }
};

struct MinOp {
  static constexpr bool kPairwise = false;
  static constexpr bool kRedux = true;
  template <typename V>
  static auto Redux(const V& v) {
    return v.template minCoeff<Eigen::PropagateNaN>();
  }
  template <typename D, typename V>
  static void Combine(D& d, const V& v) {
    d = d.template min<Eigen::PropagateNaN>(v);
  }
  template <typename A>
  static A Identity() {
    return std::numeric_limits<A>::has_infinity
               ? std::numeric_limits<A>::infinity()
               : std::numeric_limits<A>::max();
  }
  template <typename A>
  static A Apply(A a, A b) {
    if constexpr (std::is_floating_point_v<A>) {
      return (a < b || a != a) ? a : b;
    } else {
      return a < b ? a : b;
    }
  }
};

// ------------------------------------------------------------ element maps

// The element converted to the accumulator type.
struct Plain {
  static constexpr bool kAux = false;
  template <typename A, typename T>
  static A Apply(T v, A /*aux*/) {
    return static_cast<A>(v);
  }
};

// (v - mean)^2 with the output's mean as auxiliary value.
struct SquaredDeviation {
  static constexpr bool kAux = true;
  template <typename A, typename T>
  static A Apply(T v, A mean) {
    A d = static_cast<A>(v) - mean;
    return d * d;
  }
};

// exp(v - shift) with the output's shift as auxiliary value. Runs and
// blocks of these use Eigen's vectorised exp (ExpSumRun, FoldBlock); Apply
// is the scalar definition.
struct ShiftedExp {
  static constexpr bool kAux = true;
  template <typename A, typename T>
  static A Apply(T v, A shift) {
    return std::exp(static_cast<A>(v) - shift);
  }
};

// SumFloatRun (reduce_util.h): a float run summed in double, fast.

template <typename A, typename Op, typename Map, typename T>
A FoldRun(const T* p, int64_t n, A aux);

// Width of the scratch buffers the vectorised exponentials go through.
constexpr int64_t kExpChunk = 256;

// sum(exp(p[i] - shift)) over a run, exponentials in T precision.
template <typename T>
double ExpSumRun(const T* p, int64_t n, double shift) {
  T buf[kExpChunk];
  const T s = static_cast<T>(shift);  // a maximum of T values, or 0: exact
  double total = 0;
  for (int64_t i = 0; i < n; i += kExpChunk) {
    const int64_t len = std::min(kExpChunk, n - i);
    ExpShifted(p + i, &s, 0, buf, len);
    total += FoldRun<double, AddOp, Plain>(buf, len, 0.0);
  }
  return total;
}

// Folds a contiguous run. Sums recurse pairwise above kBlock elements;
// below it eight accumulators run side by side (which GCC vectorises).
template <typename A, typename Op, typename Map, typename T>
A FoldRun(const T* p, int64_t n, A aux) {
  if constexpr (std::is_same_v<Op, AddOp> && std::is_same_v<T, float> &&
                std::is_same_v<A, double> && !Map::kAux) {
    return SumFloatRun(p, n);
  }
  if constexpr (std::is_same_v<Op, AddOp> && std::is_same_v<Map, ShiftedExp>) {
    return ExpSumRun(p, n, aux);
  }
  if constexpr (Op::kRedux && std::is_floating_point_v<T> && !Map::kAux) {
    if (n > 0) {
      return static_cast<A>(Op::Redux(
          Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>>(p, n)));
    }
  }
  constexpr int64_t kBlock = 256;
  if (Op::kPairwise && n > kBlock) {
    const int64_t half = (n / 2) & ~int64_t{7};
    return Op::Apply(FoldRun<A, Op, Map>(p, half, aux),
                     FoldRun<A, Op, Map>(p + half, n - half, aux));
  }
  const A id = Op::template Identity<A>();
  A acc[8] = {id, id, id, id, id, id, id, id};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) {
      acc[j] = Op::Apply(acc[j], Map::template Apply<A>(p[i + j], aux));
    }
  }
  A tail = id;
  for (; i < n; ++i) tail = Op::Apply(tail, Map::template Apply<A>(p[i], aux));
  A left = Op::Apply(Op::Apply(acc[0], acc[1]), Op::Apply(acc[2], acc[3]));
  A right = Op::Apply(Op::Apply(acc[4], acc[5]), Op::Apply(acc[6], acc[7]));
  return Op::Apply(Op::Apply(left, right), tail);
}

// ------------------------------------------------------------ the fold

// The work split (reduce_util.h, shared with SumCastGrad).
using fold_split::kMaxBlock;
using fold_split::kMinChunk;
using fold_split::kTargetItems;

// Folds x over the layout into out[num_out] (type A). `aux` holds one value
// per output for maps that need it (else may be null).
template <typename T, typename A, typename Op, typename Map>
class Fold {
 public:
  Fold(const dg::KernelContext& ctx, const ReduceLayout& l, const T* x,
       const A* aux)
      : ctx_(ctx), l_(l), x_(x), aux_(aux) {}

  void Run(A* out) const {
    const int64_t num_out = l_.num_out, num_red = l_.num_red;
    if (num_out == 0) return;
    if (num_red == 0) {
      for (int64_t o = 0; o < num_out; ++o) out[o] = Op::template Identity<A>();
      return;
    }
    if (l_.inner_reduced) {
      RunInner(out);
    } else {
      RunOuter(out);
    }
  }

 private:
  A Aux(int64_t o) const {
    if constexpr (Map::kAux) {
      return aux_[o];
    } else {
      (void)o;
      return A(0);
    }
  }

  // Innermost axis reduced: reduced = {..., L} with L contiguous.
  // Folds elements [begin, end) of the reduced space of the output whose
  // first element sits at x + base.
  A FoldRange(int64_t base, A aux, int64_t begin, int64_t end) const {
    const std::vector<Dim>& red = l_.reduced;
    const int64_t run = red.back().size;
    Odometer rows(red, red.size() - 1, begin / run);
    int64_t col = begin % run;
    A acc = Op::template Identity<A>();
    while (begin < end) {
      const int64_t len = std::min(run - col, end - begin);
      acc = Op::Apply(
          acc, FoldRun<A, Op, Map>(x_ + base + rows.offset() + col, len, aux));
      begin += len;
      col = 0;
      rows.Next();
    }
    return acc;
  }

  void RunInner(A* out) const {
    const int64_t num_out = l_.num_out, num_red = l_.num_red;
    const std::vector<Dim>& kept = l_.kept;
    int64_t chunks = std::min(kTargetItems, num_red / kMinChunk);
    const std::vector<Dim>& red = l_.reduced;
    if (red.size() == 2 && !kept.empty() && red[0].stride > kept[0].stride &&
        num_out >= kTargetItems / 2) {
      // Layout (R, K, L): walk the input in memory order, R outermost, so
      // each thread streams through its share of every R slab instead of
      // jumping a slab per run. Same arithmetic as FoldRange.
      const int64_t run = red[1].size;
      ParallelFor(
          num_out,
          [&](int64_t begin, int64_t end) {
            for (int64_t o = begin; o < end; ++o) {
              out[o] = Op::template Identity<A>();
            }
            for (int64_t r = 0; r < red[0].size; ++r) {
              const T* slab = x_ + r * red[0].stride;
              Odometer outs(kept, kept.size(), begin);
              for (int64_t o = begin; o < end; ++o, outs.Next()) {
                out[o] = Op::Apply(
                    out[o],
                    FoldRun<A, Op, Map>(slab + outs.offset(), run, Aux(o)));
              }
            }
          },
          num_red);
      return;
    }
    if (num_out >= kTargetItems / 2 || chunks <= 1) {
      ParallelFor(
          num_out,
          [&](int64_t begin, int64_t end) {
            Odometer outs(kept, kept.size(), begin);
            for (int64_t o = begin; o < end; ++o, outs.Next()) {
              out[o] = FoldRange(outs.offset(), Aux(o), 0, num_red);
            }
          },
          num_red);
      return;
    }
    // Few outputs, long reductions: fold chunks of each output's range in
    // parallel, then combine the chunks in order.
    A* partial = ctx_.template workspace<A>(num_out * chunks);
    ParallelFor(
        num_out * chunks,
        [&](int64_t begin, int64_t end) {
          for (int64_t item = begin; item < end; ++item) {
            const int64_t o = item / chunks, c = item % chunks;
            partial[item] =
                FoldRange(OffsetOf(kept, kept.size(), o), Aux(o),
                          num_red * c / chunks, num_red * (c + 1) / chunks);
          }
        },
        num_red / chunks);
    for (int64_t o = 0; o < num_out; ++o) {
      A acc = partial[o * chunks];
      for (int64_t c = 1; c < chunks; ++c) {
        acc = Op::Apply(acc, partial[o * chunks + c]);
      }
      out[o] = acc;
    }
  }

  // Innermost axis kept: kept = {..., K} with K contiguous; outputs are
  // groups g of K contiguous values. Folds reduced elements [r0, r1) into
  // dst[k0, k1) for group g.
  void FoldBlock(int64_t g, int64_t k0, int64_t k1, int64_t r0, int64_t r1,
                 A* dst) const {
    const std::vector<Dim>& kept = l_.kept;
    const int64_t width = kept.empty() ? 1 : kept.back().size;
    const int64_t base = kept.empty() ? 0 : OffsetOf(kept, kept.size() - 1, g);
    const A* aux = Map::kAux ? aux_ + g * width : nullptr;
    for (int64_t k = k0; k < k1; ++k) dst[k] = Op::template Identity<A>();
    if constexpr (std::is_same_v<Map, ShiftedExp>) {
      FoldBlockExp(base, aux, k0, k1, r0, r1, dst);
      return;
    }
    if constexpr (std::is_same_v<Op, AddOp> && !Map::kAux &&
                  std::is_same_v<A, double> &&
                  (std::is_same_v<T, float> || std::is_same_v<T, double>)) {
      if (l_.reduced.size() == 1) {
        // Rows at a fixed stride (a bias gradient's [rows, cols] -> [cols]):
        // the row kernels built for this CPU's vector width (rows.h), same
        // arithmetic as the loops below.
        const int64_t stride = l_.reduced[0].stride;
        RowKernelsFor<T>().column_sum(x_ + base + r0 * stride + k0, stride,
                                      r1 - r0, k1 - k0, dst + k0);
        return;
      }
    }
    Odometer rows(l_.reduced, l_.reduced.size(), r0);
    int64_t r = r0;
    if constexpr (std::is_same_v<Op, AddOp> && std::is_same_v<T, float> &&
                  std::is_same_v<A, double> && !Map::kAux) {
      // As SumFloatRun: four rows add in float, then widen once.
      for (; r + 4 <= r1; r += 4) {
        const T* p[4];
        for (int i = 0; i < 4; ++i, rows.Next()) {
          p[i] = x_ + base + rows.offset();
        }
        for (int64_t k = k0; k < k1; ++k) {
          dst[k] +=
              static_cast<double>((p[0][k] + p[1][k]) + (p[2][k] + p[3][k]));
        }
      }
    }
    if constexpr (Op::kRedux && std::is_floating_point_v<T> &&
                  std::is_same_v<A, T> && !Map::kAux) {
      // NaN-propagating max/min, vectorised by Eigen.
      using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
      Eigen::Map<Vec> d(dst + k0, k1 - k0);
      for (; r < r1; ++r, rows.Next()) {
        Op::Combine(
            d, Eigen::Map<const Vec>(x_ + base + rows.offset() + k0, k1 - k0));
      }
    }
    for (; r < r1; ++r, rows.Next()) {
      const T* p = x_ + base + rows.offset();
      if constexpr (Map::kAux) {
        for (int64_t k = k0; k < k1; ++k) {
          dst[k] = Op::Apply(dst[k], Map::template Apply<A>(p[k], aux[k]));
        }
      } else {
        for (int64_t k = k0; k < k1; ++k) {
          dst[k] = Op::Apply(dst[k], Map::template Apply<A>(p[k], A(0)));
        }
      }
    }
  }

  // FoldBlock for sums of shifted exponentials: each row's block goes
  // through Eigen's vectorised exp in T precision.
  void FoldBlockExp(int64_t base, const A* aux, int64_t k0, int64_t k1,
                    int64_t r0, int64_t r1, A* dst) const {
    std::vector<T> shift(aux + k0, aux + k1);  // maxima of T values: exact
    T buf[kExpChunk];
    Odometer rows(l_.reduced, l_.reduced.size(), r0);
    for (int64_t r = r0; r < r1; ++r, rows.Next()) {
      const T* p = x_ + base + rows.offset();
      for (int64_t k = k0; k < k1; k += kExpChunk) {
        const int64_t len = std::min(kExpChunk, k1 - k);
        ExpShifted(p + k, shift.data() + (k - k0), 1, buf, len);
        for (int64_t j = 0; j < len; ++j) dst[k + j] += buf[j];
      }
    }
  }

  void RunOuter(A* out) const {
    const int64_t num_out = l_.num_out, num_red = l_.num_red;
    const int64_t width = l_.kept.empty() ? 1 : l_.kept.back().size;
    const int64_t groups = num_out / width;
    // Blocks along the contiguous output axis, then chunks of the reduced
    // range if groups x blocks still leave threads idle.
    const int64_t blocks = (width + kMaxBlock - 1) / kMaxBlock;
    int64_t chunks = 1;
    if (groups * blocks < kTargetItems) {
      chunks = std::min(kTargetItems / (groups * blocks),
                        num_red * width / (blocks * kMinChunk));
      chunks = std::max<int64_t>(1, std::min(chunks, num_red));
    }
    A* dst_base =
        chunks > 1 ? ctx_.template workspace<A>(num_out * chunks) : out;
    const int64_t per_group = blocks * chunks;
    ParallelFor(
        groups * per_group,
        [&](int64_t begin, int64_t end) {
          for (int64_t item = begin; item < end; ++item) {
            const int64_t g = item / per_group;
            const int64_t b = (item % per_group) / chunks;
            const int64_t c = item % chunks;
            FoldBlock(g, width * b / blocks, width * (b + 1) / blocks,
                      num_red * c / chunks, num_red * (c + 1) / chunks,
                      dst_base + c * num_out + g * width);
          }
        },
        num_red * width / (blocks * chunks));
    if (chunks > 1) {
      // The chunks in order, a row of partials at a time: per output the
      // same chain of Apply as down its column, but vectorisable (a strided
      // chain per output cost ~35 us for 1024 outputs of 32 chunks).
      ParallelFor(
          num_out,
          [&](int64_t begin, int64_t end) {
            for (int64_t c = 1; c < chunks; ++c) {
              const A* src = dst_base + c * num_out;
              for (int64_t o = begin; o < end; ++o) {
                dst_base[o] = Op::Apply(dst_base[o], src[o]);
              }
            }
            for (int64_t o = begin; o < end; ++o) out[o] = dst_base[o];
          },
          chunks);
    }
  }

  const dg::KernelContext& ctx_;
  const ReduceLayout& l_;
  const T* x_;
  const A* aux_;
};

template <typename Op, typename Map, typename T, typename A>
void FoldInto(const dg::KernelContext& ctx, const ReduceLayout& l, const T* x,
              const A* aux, A* out) {
  Fold<T, A, Op, Map>(ctx, l, x, aux).Run(out);
}

// The call's input with the layout to fold it over. Inputs arrive with
// their strides (DG_KERNEL_STRIDED_INPUTS): a contiguous tensor or any
// transpose of one is walked in place, in memory order; anything else
// (steps, broadcasts) is first copied to dense scratch memory.
template <typename T>
struct Input {
  ReduceLayout layout;
  const T* x;
};

template <typename T>
Input<T> Prepare(const dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape = xt.shape();
  std::vector<int64_t> strides = xt.strides();
  const std::vector<bool> reduce = ReducedAxes(ctx, shape);
  Input<T> in{ReduceLayout{}, xt.data<const T>()};
  std::vector<size_t> order;
  if (xt.numel() > 0 && !DenseOrder(shape, strides, &order)) {
    T* dense = ctx.workspace<T>(xt.numel());
    CopyDense(xt, dense);
    in.x = dense;
    strides = ContiguousStrides(shape);
    DenseOrder(shape, strides, &order);
  } else if (xt.numel() == 0) {
    order.clear();
    for (size_t i = 0; i < shape.size(); ++i) order.push_back(i);
  }
  in.layout = MakeReduceLayout(shape, strides, order, reduce);
  DG_CHECK(ctx.output(0).numel() == in.layout.num_out, DG_INTERNAL,
           ctx.op_name(), ": output has ", ctx.output(0).numel(),
           " elements, the reduction of ", ShapeStr(shape), " gives ",
           in.layout.num_out);
  return in;
}

// Applies fn(o) for every output in parallel (in the layout's numbering).
template <typename Fn>
void ForEachOutput(int64_t n, Fn fn) {
  ParallelFor(n, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) fn(o);
  });
}

// y[offset of output o] = fn(o) for every output.
template <typename Out, typename Fn>
void WriteOutputs(const ReduceLayout& l, Out* y, Fn fn) {
  if (!l.out_permuted) {
    ForEachOutput(l.num_out, [&](int64_t o) { y[o] = fn(o); });
    return;
  }
  ParallelFor(l.num_out, [&](int64_t begin, int64_t end) {
    Odometer at(l.out, l.out.size(), begin);
    for (int64_t o = begin; o < end; ++o, at.Next()) y[at.offset()] = fn(o);
  });
}

// Accumulators: double for floats; for integers the unsigned type of the
// same width, whose wrap-around gives exactly the two's complement result
// of the output type (and vectorises as well as the input); a 64-bit count
// for bool.
template <typename T, bool kIsBool = std::is_same_v<T, bool>,
          bool kIsFloat = std::is_floating_point_v<T>>
struct AccOf {
  using type = std::make_unsigned_t<T>;
};
template <typename T, bool kIsFloat>
struct AccOf<T, true, kIsFloat> {
  using type = uint64_t;
};
template <typename T>
struct AccOf<T, false, true> {
  using type = double;
};
template <typename T>
using WideAcc = typename AccOf<T>::type;

// ------------------------------------------------------------ kernels

template <typename T>
void Sum(dg::KernelContext& ctx) {
  using A = WideAcc<T>;
  using Out = std::conditional_t<std::is_same_v<T, bool>, int64_t, T>;
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  A* acc = ctx.workspace<A>(l.num_out);
  FoldInto<AddOp, Plain>(ctx, l, in.x, static_cast<const A*>(nullptr), acc);
  WriteOutputs(l, ctx.output(0).data<Out>(),
               [&](int64_t o) { return static_cast<Out>(acc[o]); });
}

template <typename T>
void Prod(dg::KernelContext& ctx) {
  using A = WideAcc<T>;
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  A* acc = ctx.workspace<A>(l.num_out);
  FoldInto<MulOp, Plain>(ctx, l, in.x, static_cast<const A*>(nullptr), acc);
  WriteOutputs(l, ctx.output(0).data<T>(),
               [&](int64_t o) { return static_cast<T>(acc[o]); });
}

template <typename Op, typename T>
void Extreme(dg::KernelContext& ctx) {
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  // Floats: an empty reduction is the fold's identity, -inf / +inf (ONNX);
  // bool: false / true (any / all of nothing).
  DG_CHECK(l.num_red > 0 || l.num_out == 0 || std::is_floating_point_v<T> ||
               (std::is_same_v<T, bool>),
           DG_INVALID_ARGUMENT, ctx.op_name(),
           ": zero-size reduction of an input of shape ",
           ShapeStr(ctx.input(0).shape()), " has no identity");
  T* y = ctx.output(0).data<T>();
  if (l.num_red == 0) {
    std::fill(y, y + l.num_out, Op::template Identity<T>());
    return;
  }
  if (!l.out_permuted) {
    FoldInto<Op, Plain>(ctx, l, in.x, static_cast<const T*>(nullptr), y);
    return;
  }
  T* acc = ctx.workspace<T>(l.num_out);
  FoldInto<Op, Plain>(ctx, l, in.x, static_cast<const T*>(nullptr), acc);
  WriteOutputs(l, y, [&](int64_t o) { return acc[o]; });
}

template <typename T>
void Max(dg::KernelContext& ctx) {
  Extreme<MaxOp, T>(ctx);
}

template <typename T>
void Min(dg::KernelContext& ctx) {
  Extreme<MinOp, T>(ctx);
}

template <typename T>
void Mean(dg::KernelContext& ctx) {
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  double* acc = ctx.workspace<double>(l.num_out);
  FoldInto<AddOp, Plain>(ctx, l, in.x, static_cast<const double*>(nullptr),
                         acc);
  const double n = static_cast<double>(l.num_red);  // 0 / 0 gives NaN
  WriteOutputs(l, ctx.output(0).data<T>(),
               [&](int64_t o) { return static_cast<T>(acc[o] / n); });
}

// Two passes (mean, then squared deviations) for accuracy. The divisor is
// max(n - ddof, 0), as in NumPy.
template <typename T, bool kSqrt>
void Moments(dg::KernelContext& ctx) {
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  double* mean = ctx.workspace<double>(l.num_out);
  double* dev = ctx.workspace<double>(l.num_out);
  FoldInto<AddOp, Plain>(ctx, l, in.x, static_cast<const double*>(nullptr),
                         mean);
  const double n = static_cast<double>(l.num_red);
  ForEachOutput(l.num_out, [&](int64_t o) { mean[o] /= n; });
  FoldInto<AddOp, SquaredDeviation>(ctx, l, in.x, mean, dev);
  const double divisor = std::max(0.0, n - static_cast<double>(ctx.i("ddof")));
  WriteOutputs(l, ctx.output(0).data<T>(), [&](int64_t o) {
    const double v = dev[o] / divisor;
    return static_cast<T>(kSqrt ? std::sqrt(v) : v);
  });
}

template <typename T>
void Var(dg::KernelContext& ctx) {
  Moments<T, false>(ctx);
}

template <typename T>
void Std(dg::KernelContext& ctx) {
  Moments<T, true>(ctx);
}

// log(sum(exp(x))) = m + log(sum(exp(x - m))) with m the maximum. A
// non-finite maximum is replaced by 0: then -inf (all -inf, or empty)
// gives log(0) = -inf, +inf gives +inf and NaN stays NaN.
template <typename T>
void LogSumExp(dg::KernelContext& ctx) {
  const Input<T> in = Prepare<T>(ctx);
  const ReduceLayout& l = in.layout;
  double* shift = ctx.workspace<double>(l.num_out);
  double* sum = ctx.workspace<double>(l.num_out);
  FoldInto<MaxOp, Plain>(ctx, l, in.x, static_cast<const double*>(nullptr),
                         shift);
  ForEachOutput(l.num_out, [&](int64_t o) {
    if (!std::isfinite(shift[o])) shift[o] = 0.0;
  });
  FoldInto<AddOp, ShiftedExp>(ctx, l, in.x, shift, sum);
  WriteOutputs(l, ctx.output(0).data<T>(), [&](int64_t o) {
    return static_cast<T>(shift[o] + std::log(sum[o]));
  });
}

// ------------------------------------------------------------ SoftmaxGrad

// dx = y * (dy - s) with s = sum(dy * y) along the axis, dense y, dy, dx of
// one shape. Along the last axis each row's products dy * y are rounded to T
// (written to dx first, as the Mul kernel writes them), folded exactly as
// Sum folds a contiguous run (FoldRun, and Sum's chunks when there are few
// long rows), s rounded to T, then dx = y * (dy - s) in T: bit for bit the
// Mul, Sum(keepdims), Sub and Mul kernels run one by one. Along another axis
// the sums accumulate in double, column by column.
template <typename T>
void SoftmaxGrad(dg::KernelContext& ctx) {
  const dg::TensorRef yt = ctx.input(0), dyt = ctx.input(1);
  const std::vector<int64_t> shape = yt.shape();
  DG_CHECK(dyt.shape() == shape && ctx.output(0).numel() == yt.numel(),
           DG_INTERNAL, ctx.op_name(), ": y ", ShapeStr(shape), ", dy ",
           ShapeStr(dyt.shape()), " and dx must have one shape");
  AxisSplit s;  // a 0-d input is a single slice of one element
  if (!shape.empty()) {
    s = SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
  }
  if (yt.numel() == 0) return;
  const T* y = yt.data<const T>();
  const T* dy = dyt.data<const T>();
  T* dx = ctx.output(0).data<T>();
  if (s.inner == 1) {
    const int64_t dim = s.dim;
    // Sum's split of one output's range (Fold::RunInner, one reduced axis).
    const int64_t chunks =
        s.outer >= kTargetItems / 2
            ? 1
            : std::max<int64_t>(1, std::min(kTargetItems, dim / kMinChunk));
    if constexpr (std::is_same_v<T, float>) {
      // The same bits in one fused pass per row plus the output pass, on
      // the per-instruction-set build (softmax_isa.h).
      const SoftmaxKernels& k = SoftmaxKernelsForCpu();
      ParallelFor(
          s.outer,
          [&](int64_t begin, int64_t end) {
            k.grad_rows(y + begin * dim, dy + begin * dim, dx + begin * dim,
                        end - begin, dim, chunks);
          },
          dim * 4);
      return;
    }
    ParallelFor(
        s.outer,
        [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            const T* yr = y + o * dim;
            const T* dyr = dy + o * dim;
            T* p = dx + o * dim;
            for (int64_t i = 0; i < dim; ++i) p[i] = dyr[i] * yr[i];
            double acc = 0;
            for (int64_t c = 0; c < chunks; ++c) {
              const int64_t lo = dim * c / chunks, hi = dim * (c + 1) / chunks;
              const double part =
                  0.0 + FoldRun<double, AddOp, Plain>(p + lo, hi - lo, 0.0);
              acc = c == 0 ? part : acc + part;
            }
            const T sum = static_cast<T>(acc);
            for (int64_t i = 0; i < dim; ++i) p[i] = yr[i] * (dyr[i] - sum);
          }
        },
        dim * 4);
    return;
  }
  const int64_t dim = s.dim, inner = s.inner;
  double* sums = ctx.workspace<double>(s.outer * inner);
  ParallelFor(
      s.outer,
      [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          double* sum = sums + o * inner;
          const int64_t base = o * dim * inner;
          for (int64_t k = 0; k < inner; ++k) sum[k] = 0.0;
          for (int64_t a = 0; a < dim; ++a) {
            const T* yr = y + base + a * inner;
            const T* dyr = dy + base + a * inner;
            for (int64_t k = 0; k < inner; ++k)
              sum[k] += static_cast<double>(dyr[k] * yr[k]);
          }
          for (int64_t a = 0; a < dim; ++a) {
            const int64_t at = base + a * inner;
            for (int64_t k = 0; k < inner; ++k)
              dx[at + k] = y[at + k] * (dy[at + k] - static_cast<T>(sum[k]));
          }
        }
      },
      dim * inner * 4);
}

}  // namespace

// Inputs are read through their strides (see Prepare).
constexpr uint32_t kStrided = DG_KERNEL_STRIDED_INPUTS;
DG_KERNEL_EX("Sum", "cpu", 0, kStrided, Sum, float, double, int8_t, int16_t,
             int32_t, int64_t, uint8_t, bool, uint16_t, uint32_t, uint64_t);
DG_KERNEL_EX("Prod", "cpu", 0, kStrided, Prod, float, double, int8_t, int16_t,
             int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t);
// bool Max / Min are any / all: the same vectorised, threaded fold over
// the bytes (0 or 1), read through their strides.
DG_KERNEL_EX("Max", "cpu", 0, kStrided, Max, float, double, int8_t, int16_t,
             int32_t, int64_t, uint8_t, bool, uint16_t, uint32_t, uint64_t);
DG_KERNEL_EX("Min", "cpu", 0, kStrided, Min, float, double, int8_t, int16_t,
             int32_t, int64_t, uint8_t, bool, uint16_t, uint32_t, uint64_t);
DG_KERNEL_EX("Mean", "cpu", 0, kStrided, Mean, float, double);
DG_KERNEL_EX("Var", "cpu", 0, kStrided, Var, float, double);
DG_KERNEL_EX("Std", "cpu", 0, kStrided, Std, float, double);
DG_KERNEL_EX("LogSumExp", "cpu", 0, kStrided, LogSumExp, float, double);
DG_KERNEL("SoftmaxGrad", "cpu", SoftmaxGrad, float, double);
// float16 / bfloat16: the float32 kernel on widened y and dy, dx rounded
// once (widen_call.h), as torch's CPU softmax backward computes in float.
CPU_EIGEN_WIDENED_KERNEL("SoftmaxGrad", SoftmaxGrad);

}  // namespace cpu_eigen
