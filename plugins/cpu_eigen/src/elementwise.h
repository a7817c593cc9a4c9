// Loops shared by the element-wise kernels (unary.cc, binary.cc,
// compare.cc, where.cc): parallel runs, NumPy broadcasting, and the choice
// of the float build (elementwise_isa.cc) for this CPU.
//
// Inputs arrive contiguous (no DG_KERNEL_STRIDED_INPUTS), outputs are
// contiguous with the broadcast shape. A binary or ternary op takes the
// cheapest of: same element count (one flat run), one operand with a single
// element (a scalar run), or a broadcast plan in which dimensions that are
// contiguous (or broadcast) in every operand are merged, so that the inner
// loop runs over rows as long as possible. Small work never wakes the
// OpenMP team: an eager op on a few elements costs little more than its
// arithmetic.
#ifndef DRAGON_CPU_EIGEN_ELEMENTWISE_H_
#define DRAGON_CPU_EIGEN_ELEMENTWISE_H_

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <utility>

#include "common.h"
#include "dragon/plugin.hpp"
#include "elementwise_ops.h"

// Dtype lists for DG_KERNEL registrations (docs/ops.md: float, numeric, all).
#define CPU_EIGEN_FLOAT_TYPES float, double
// uint16/uint32/uint64 (ABI 1.4) are numeric like the others.
#define CPU_EIGEN_NUMERIC_TYPES                                            \
  float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, \
      uint32_t, uint64_t
#define CPU_EIGEN_ALL_TYPES bool, CPU_EIGEN_NUMERIC_TYPES

namespace cpu_eigen {

// The per-instruction-set builds of elementwise_isa.cc. Weak and hidden:
// a build the plugin was not linked with resolves to null (no dynamic
// symbol), and the baseline serves instead.
#define CPU_EIGEN_EW_DECLARE_WEAK_(ns)                                    \
  namespace ns {                                                         \
  extern const FloatKernels<float> kFloatKernelsF32                      \
      __attribute__((weak, visibility("hidden")));                       \
  extern const FloatKernels<double> kFloatKernelsF64                     \
      __attribute__((weak, visibility("hidden")));                       \
  }
CPU_EIGEN_EW_DECLARE_WEAK_(ew_v2)
CPU_EIGEN_EW_DECLARE_WEAK_(ew_v3)
CPU_EIGEN_EW_DECLARE_WEAK_(ew_v4)
#undef CPU_EIGEN_EW_DECLARE_WEAK_

namespace ew_base {
extern const FloatKernels<float> kFloatKernelsF32;
extern const FloatKernels<double> kFloatKernelsF64;
}  // namespace ew_base

namespace elementwise {

// Relative cost of one element, used to scale ParallelFor's grain.
constexpr int64_t kCostCheap = 1;           // add, compare, select
constexpr int64_t kCostDivide = 2;          // div, sqrt
constexpr int64_t kCostTranscendental = 8;  // exp, log, tanh, sin
constexpr int64_t kCostHeavy = 16;          // pow, erfc

// ------------------------------------------------------------ ISA choice

// DetectIsaLevel() lives in common.h (shared with matmul.cc).

// The float runs for T built for the best instruction set this CPU has
// (among the builds linked in), chosen once.
template <typename T>
const FloatKernels<T>& FloatKernelsFor() {
  static const FloatKernels<T>* const chosen = [] {
    if constexpr (std::is_same_v<T, float>)
      return BestIsaBuild(&ew_v4::kFloatKernelsF32, &ew_v3::kFloatKernelsF32,
                          &ew_v2::kFloatKernelsF32, &ew_base::kFloatKernelsF32);
    else
      return BestIsaBuild(&ew_v4::kFloatKernelsF64, &ew_v3::kFloatKernelsF64,
                          &ew_v2::kFloatKernelsF64, &ew_base::kFloatKernelsF64);
  }();
  return *chosen;
}

// ------------------------------------------------------------- parallelism

// ParallelFor without its thread-count query when the work is small.
template <typename Fn>
inline void ForRange(int64_t n, int64_t cost, Fn&& fn) {
  if (n * cost < kParallelGrain) {
    fn(int64_t{0}, n);
  } else {
    ParallelFor(n, std::forward<Fn>(fn), cost);
  }
}

// ------------------------------------------------------------ broadcasting

// NumPy caps the rank at 64; so do we, after merging dimensions.
constexpr int kMaxDims = 64;

// How N contiguous inputs map onto a contiguous output. Dimensions are
// stored innermost first; size-1 output dimensions are dropped and runs of
// dimensions that are contiguous (or broadcast) in every input are merged.
// strides[k][d] is input k's element stride along merged dimension d, 0
// where input k is broadcast. After merging every innermost stride is 0 or
// 1, and at least one input has 1 there (unless the output has 1 element).
template <int N>
struct BroadcastPlan {
  int ndim = 0;
  int64_t shape[kMaxDims];
  int64_t strides[N][kMaxDims];
};

template <int N>
std::string ShapesForError(const std::array<dg::TensorRef, N>& in,
                           const dg::TensorRef& out) {
  auto fmt = [](const dg::TensorRef& t) {
    std::string s = "(";
    for (int32_t d = 0; d < t.ndim(); ++d) {
      s += std::to_string(t.dim(d));
      if (d + 1 < t.ndim() || t.ndim() == 1) s += ",";
    }
    return s + ")";
  };
  std::string s = "inputs ";
  for (int k = 0; k < N; ++k) s += (k ? " " : "") + fmt(in[k]);
  return s + ", output " + fmt(out);
}

template <int N>
void MakeBroadcastPlan(const char* op, const std::array<dg::TensorRef, N>& in,
                       const dg::TensorRef& out, BroadcastPlan<N>* plan) {
  const int32_t nd = out.ndim();
  int64_t acc[N];  // contiguous stride of the current dimension, per input
  for (int k = 0; k < N; ++k) {
    DG_CHECK(in[k].ndim() <= nd, DG_INTERNAL, op, ": ",
             ShapesForError<N>(in, out), " do not broadcast");
    acc[k] = 1;
  }
  BroadcastPlan<N>& p = *plan;
  p.ndim = 0;
  for (int32_t d = nd - 1; d >= 0; --d) {
    const int64_t size = out.dim(d);
    int64_t stride[N];
    for (int k = 0; k < N; ++k) {
      const int32_t dk = d - (nd - in[k].ndim());
      const int64_t in_size = dk >= 0 ? in[k].dim(dk) : 1;
      DG_CHECK(in_size == size || in_size == 1, DG_INTERNAL, op, ": ",
               ShapesForError<N>(in, out), " do not broadcast");
      stride[k] = in_size == 1 ? 0 : acc[k];
      acc[k] *= in_size;
    }
    if (size == 1) continue;
    bool merge = p.ndim > 0;
    for (int k = 0; merge && k < N; ++k) {
      const int last = p.ndim - 1;
      merge = stride[k] == p.strides[k][last] * p.shape[last];
    }
    if (merge) {
      p.shape[p.ndim - 1] *= size;
      continue;
    }
    DG_CHECK(p.ndim < kMaxDims, DG_UNIMPLEMENTED, op, ": ",
             ShapesForError<N>(in, out), " need more than ", kMaxDims,
             " broadcast dimensions");
    p.shape[p.ndim] = size;
    for (int k = 0; k < N; ++k) p.strides[k][p.ndim] = stride[k];
    ++p.ndim;
  }
  if (p.ndim == 0) {  // a single element
    p.ndim = 1;
    p.shape[0] = 1;
    for (int k = 0; k < N; ++k) p.strides[k][0] = 0;
  }
}

// Calls fn(i, len, offsets) for runs of output elements [i, i + len) that
// lie in one row of the plan's innermost dimension; offsets[k] is input k's
// element offset at output element i (step plan.strides[k][0] along the
// row). Runs in parallel over the flat output when it is large.
template <int N, typename Fn>
void ForEachRow(const BroadcastPlan<N>& p, int64_t n, int64_t cost, Fn&& fn) {
  ForRange(n, cost, [&](int64_t begin, int64_t end) {
    int64_t idx[kMaxDims];
    int64_t off[N];
    for (int k = 0; k < N; ++k) off[k] = 0;
    int64_t rem = begin;
    for (int d = 0; d < p.ndim; ++d) {
      idx[d] = rem % p.shape[d];
      rem /= p.shape[d];
      for (int k = 0; k < N; ++k) off[k] += idx[d] * p.strides[k][d];
    }
    const int64_t row = p.shape[0];
    int64_t i = begin;
    while (true) {
      const int64_t len = std::min(row - idx[0], end - i);
      fn(i, len, static_cast<const int64_t*>(off));
      i += len;
      if (i >= end) return;
      // The row is finished: rewind it and carry into outer dimensions.
      for (int k = 0; k < N; ++k) off[k] -= idx[0] * p.strides[k][0];
      idx[0] = 0;
      for (int d = 1; d < p.ndim; ++d) {
        for (int k = 0; k < N; ++k) off[k] += p.strides[k][d];
        if (++idx[d] < p.shape[d]) break;
        for (int k = 0; k < N; ++k) off[k] -= p.shape[d] * p.strides[k][d];
        idx[d] = 0;
      }
    }
  });
}

// ----------------------------------------------------------------- kernels
//
// The loops below take the op as a plain function pointer plus opaque
// state, so that each is compiled once per dtype pair, not once per op
// (a lambda per op would copy the broadcast machinery into every kernel).

// y[0, n) = f(x[0, n)); `op` is the op's state.
template <typename T, typename Out>
using UnaryRunFn = void (*)(const void* op, const T* x, Out* y, int64_t n);

// y[0, n) = f(a, b) in the given form (see BinaryForm).
template <typename T, typename Out>
using BinaryRunFn = void (*)(const void* op, BinaryForm form, const T* a,
                             const T* b, Out* y, int64_t n);

// y = f(x) for a contiguous x of y's shape.
template <typename T, typename Out>
void RunUnary(dg::KernelContext& ctx, UnaryRunFn<T, Out> run, const void* op,
              int64_t cost) {
  const dg::TensorRef x = ctx.input(0), y = ctx.output(0);
  const int64_t n = y.numel();
  DG_CHECK(x.numel() == n, DG_INTERNAL, ctx.op_name(), ": input has ",
           x.numel(), " elements, output ", n);
  if (n == 0) return;
  const T* px = x.data<const T>();
  Out* py = y.data<Out>();
  ForRange(n, cost, [&](int64_t begin, int64_t end) {
    run(op, px + begin, py + begin, end - begin);
  });
}

// y = f(a, b) with NumPy broadcasting; y has the broadcast shape.
template <typename T, typename Out>
void RunBinary(dg::KernelContext& ctx, BinaryRunFn<T, Out> run,
               const void* op, int64_t cost) {
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  const T* pa = a.data<const T>();
  const T* pb = b.data<const T>();
  Out* py = y.data<Out>();
  const int64_t na = a.numel(), nb = b.numel();
  // Equal element counts imply equal shapes up to leading ones (a size-1
  // dimension broadcast to a larger one would shrink the count).
  const bool flat_a = na == n, flat_b = nb == n;
  if ((flat_a || na == 1) && (flat_b || nb == 1) && (flat_a || flat_b)) {
    const BinaryForm form = flat_a && flat_b ? BinaryForm::kVV
                            : flat_b         ? BinaryForm::kSV
                                             : BinaryForm::kVS;
    const int64_t sa = flat_a ? 1 : 0, sb = flat_b ? 1 : 0;
    ForRange(n, cost, [&](int64_t begin, int64_t end) {
      run(op, form, pa + begin * sa, pb + begin * sb, py + begin,
          end - begin);
    });
    return;
  }
  BroadcastPlan<2> plan;
  MakeBroadcastPlan<2>(ctx.op_name(), {a, b}, y, &plan);
  const int64_t sa = plan.strides[0][0], sb = plan.strides[1][0];
  DG_CHECK(sa == 1 || sb == 1, DG_INTERNAL, ctx.op_name(),
           ": broadcast plan without a contiguous operand");
  const BinaryForm form = sa == sb  ? BinaryForm::kVV
                          : sa == 0 ? BinaryForm::kSV
                                    : BinaryForm::kVS;
  ForEachRow<2>(plan, n, cost,
                [&](int64_t i, int64_t len, const int64_t* off) {
                  run(op, form, pa + off[0], pb + off[1], py + i, len);
                });
}

// Run functions for a functor F (its scalar or Eigen form, built here) and
// for the float table chosen for this CPU.
template <typename T, typename Out, typename F>
void FunctorUnaryRun(const void* op, const T* x, Out* y, int64_t n) {
  ew_base::UnaryRun<T, Out>(*static_cast<const F*>(op), x, y, n);
}

template <typename T, typename Out, typename F>
void FunctorBinaryRun(const void* op, BinaryForm form, const T* a,
                      const T* b, Out* y, int64_t n) {
  ew_base::BinaryRun<T, Out>(*static_cast<const F*>(op), form, a, b, y, n);
}

template <typename T>
struct TableUnaryOp {
  const FloatKernels<T>* kernels;
  UnaryKind kind;
  UnaryParams<T> params;
};

template <typename T>
void TableUnaryRun(const void* op, const T* x, T* y, int64_t n) {
  const auto* t = static_cast<const TableUnaryOp<T>*>(op);
  t->kernels->unary(t->kind, t->params, x, y, n);
}

template <typename T>
struct TableBinaryOp {
  const FloatKernels<T>* kernels;
  BinaryKind kind;
};

template <typename T>
void TableBinaryRun(const void* op, BinaryForm form, const T* a, const T* b,
                    T* y, int64_t n) {
  const auto* t = static_cast<const TableBinaryOp<T>*>(op);
  t->kernels->binary(t->kind, form, a, b, y, n);
}

// Runs a unary op: float dtypes through the build chosen for this CPU,
// others through the functor's scalar form.
template <typename T, typename Op>
void RunUnaryOp(dg::KernelContext& ctx, UnaryKind kind, const Op& op,
                UnaryParams<T> params, int64_t cost) {
  if constexpr (std::is_floating_point_v<T>) {
    const TableUnaryOp<T> t{&FloatKernelsFor<T>(), kind, params};
    RunUnary<T, T>(ctx, &TableUnaryRun<T>, &t, cost);
  } else {
    (void)kind;
    (void)params;
    RunUnary<T, T>(ctx, &FunctorUnaryRun<T, T, Op>, &op, cost);
  }
}

// Runs a binary op with output dtype T (as RunUnaryOp).
template <typename T, typename Op>
void RunBinaryOp(dg::KernelContext& ctx, BinaryKind kind, const Op& op,
                 int64_t cost) {
  if constexpr (std::is_floating_point_v<T>) {
    const TableBinaryOp<T> t{&FloatKernelsFor<T>(), kind};
    RunBinary<T, T>(ctx, &TableBinaryRun<T>, &t, cost);
  } else {
    (void)kind;
    RunBinary<T, T>(ctx, &FunctorBinaryRun<T, T, Op>, &op, cost);
  }
}

}  // namespace elementwise
}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_ELEMENTWISE_H_
