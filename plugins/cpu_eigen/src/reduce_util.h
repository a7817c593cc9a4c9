// Helpers shared by the reduction, arg-reduction and softmax kernels: axis
// normalisation with op-named errors, the (outer, axis, inner) split of a
// single axis, the grouped layout a multi-axis reduction iterates over, and
// a vectorised shifted exponential.
#ifndef DRAGON_CPU_EIGEN_REDUCE_UTIL_H_
#define DRAGON_CPU_EIGEN_REDUCE_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"

namespace cpu_eigen {

// "(2, 3, 4)" for error messages.
inline std::string ShapeStr(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

// Normalises `axis` against `shape` or throws an error naming the op.
inline int64_t CheckedAxis(const char* op, int64_t axis,
                           const std::vector<int64_t>& shape) {
  const int64_t ndim = static_cast<int64_t>(shape.size());
  DG_CHECK(axis >= -ndim && axis < ndim, DG_INVALID_ARGUMENT, op, ": axis ",
           axis, " is out of range for an input of shape ", ShapeStr(shape),
           " (rank ", ndim, ")");
  return NormAxis(axis, ndim);
}

// Which axes of the input a reduction op folds, from its optional `axes`
// attribute: unset = every axis, [] = none. Duplicates are an error.
inline std::vector<bool> ReducedAxes(const dg::KernelContext& ctx,
                                     const std::vector<int64_t>& shape) {
  const size_t ndim = shape.size();
  if (!ctx.has("axes")) return std::vector<bool>(ndim, true);
  std::vector<bool> mask(ndim, false);
  for (int64_t a : ctx.ints("axes")) {
    int64_t axis = CheckedAxis(ctx.op_name(), a, shape);
    DG_CHECK(!mask[axis], DG_INVALID_ARGUMENT, ctx.op_name(), ": axis ", a,
             " is given twice for an input of shape ", ShapeStr(shape));
    mask[axis] = true;
  }
  return mask;
}

// A contiguous tensor seen as (outer, dim, inner) around one axis.
struct AxisSplit {
  int64_t outer = 1, dim = 1, inner = 1;
};

inline AxisSplit SplitAt(const std::vector<int64_t>& shape, int64_t axis) {
  AxisSplit s;
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis) {
      s.outer *= shape[i];
    } else if (i == axis) {
      s.dim = shape[i];
    } else {
      s.inner *= shape[i];
    }
  }
  return s;
}

// One group of input dimensions: its extent and its stride in elements.
struct Dim {
  int64_t size;
  int64_t stride;
};

// The order (outermost first) in which a tensor's dimensions are dense:
// true when its elements fill a contiguous block with every dimension of
// extent > 1 stepping by the product of the extents inside it (a
// contiguous tensor, or any transpose of one). Extent-1 dimensions go first.
inline bool DenseOrder(const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& strides,
                       std::vector<size_t>* order) {
  order->clear();
  std::vector<size_t> big;
  for (size_t i = 0; i < shape.size(); ++i) {
    (shape[i] == 1 ? *order : big).push_back(i);
  }
  std::stable_sort(big.begin(), big.end(),
                   [&](size_t a, size_t b) { return strides[a] > strides[b]; });
  int64_t expected = 1;
  for (size_t j = big.size(); j-- > 0;) {
    if (strides[big[j]] != expected) return false;
    expected *= shape[big[j]];
  }
  order->insert(order->end(), big.begin(), big.end());
  return true;
}

// The iteration space of a reduction over a dense input (see DenseOrder),
// walked in memory order. Extent-1 axes are dropped and neighbouring axes
// of the same kind (kept or reduced) are merged, so e.g. reducing axes
// (1, 2) of a contiguous (A, B, C, D) gives kept {A, D}, reduced {B*C}.
// Outputs are numbered in the walk order of the kept groups; `out` gives
// each kept group's stride in the (contiguous) output tensor, which is the
// row-major order of the kept groups unless the input is a transpose that
// reorders kept axes (`out_permuted`).
struct ReduceLayout {
  std::vector<Dim> kept;     // outermost first, input strides
  std::vector<Dim> out;      // the same groups, output strides
  std::vector<Dim> reduced;  // outermost first, input strides
  int64_t num_out = 1;       // output elements
  int64_t num_red = 1;       // input elements folded into each output
  bool out_permuted = false;
  // True when the innermost input dimension (stride 1) is reduced: each
  // output folds contiguous runs. Otherwise the innermost kept dimension
  // is contiguous and outputs are accumulated as vectors.
  bool inner_reduced = false;

  // Offset in the output tensor of output number `o`.
  int64_t OutOffset(int64_t o) const;
};

// `order` from DenseOrder.
inline ReduceLayout MakeReduceLayout(const std::vector<int64_t>& shape,
                                     const std::vector<int64_t>& strides,
                                     const std::vector<size_t>& order,
                                     const std::vector<bool>& reduce) {
  ReduceLayout l;
  // Output strides: row-major over the kept axes in their original order.
  std::vector<int64_t> out_stride(shape.size(), 0);
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (reduce[i]) continue;
    out_stride[i] = acc;
    acc *= shape[i];
  }
  int last_kind = -1;  // 0 kept, 1 reduced: kind of the latest group
  for (size_t i : order) {
    const int64_t n = shape[i];
    if (reduce[i]) {
      l.num_red *= n;
    } else {
      l.num_out *= n;
    }
    if (n == 1) continue;
    const int kind = reduce[i] ? 1 : 0;
    std::vector<Dim>& group = kind ? l.reduced : l.kept;
    // Dense input: neighbours in memory order always merge on the input
    // side; kept ones must also be neighbours in the output.
    const bool merge = kind == last_kind &&
                       (kind == 1 || l.out.back().stride == out_stride[i] * n);
    if (merge) {
      group.back().size *= n;
      group.back().stride = strides[i];
      if (kind == 0) {
        l.out.back().size *= n;
        l.out.back().stride = out_stride[i];
      }
    } else {
      group.push_back(Dim{n, strides[i]});
      if (kind == 0) l.out.push_back(Dim{n, out_stride[i]});
    }
    last_kind = kind;
  }
  l.inner_reduced = last_kind == 1;
  int64_t expected = 1;
  for (size_t j = l.out.size(); j-- > 0;) {
    if (l.out[j].stride != expected) l.out_permuted = true;
    expected *= l.out[j].size;
  }
  return l;
}

// Offset (in elements) of the linear index `i` of a row-major walk over
// `dims`, the first `count` of them.
inline int64_t OffsetOf(const std::vector<Dim>& dims, size_t count, int64_t i) {
  int64_t off = 0;
  for (size_t d = count; d-- > 0;) {
    off += (i % dims[d].size) * dims[d].stride;
    i /= dims[d].size;
  }
  return off;
}

inline int64_t ReduceLayout::OutOffset(int64_t o) const {
  return out_permuted ? OffsetOf(out, out.size(), o) : o;
}

// Walks the first `count` dims of `dims` in row-major order starting at a
// linear index, tracking the element offset incrementally.
class Odometer {
 public:
  Odometer(const std::vector<Dim>& dims, size_t count, int64_t start)
      : dims_(dims), count_(count), idx_(count, 0) {
    int64_t i = start;
    for (size_t d = count; d-- > 0;) {
      idx_[d] = i % dims[d].size;
      offset_ += idx_[d] * dims[d].stride;
      i /= dims[d].size;
    }
  }
  int64_t offset() const { return offset_; }
  void Next() {
    for (size_t d = count_; d-- > 0;) {
      offset_ += dims_[d].stride;
      if (++idx_[d] < dims_[d].size) return;
      offset_ -= idx_[d] * dims_[d].stride;
      idx_[d] = 0;
    }
  }

 private:
  const std::vector<Dim>& dims_;
  size_t count_;
  std::vector<int64_t> idx_;
  int64_t offset_ = 0;
};

// Shared with SumCastGrad (fused_reduce.cc), whose float32 sums must be
// bit for bit Sum's: the fold's work split and its float run sum.
// Targets for splitting Sum's work (fixed, so the split depends on shapes
// only).
namespace fold_split {
constexpr int64_t kTargetItems = 32;
constexpr int64_t kMinChunk = 16384;  // elements per reduced-range chunk
// Width of an output block when the innermost axis is kept. Rows are read
// in full up to this width: narrower strips down a tall matrix defeat the
// hardware prefetcher, so parallelism comes from chunks of the reduced
// range instead.
constexpr int64_t kMaxBlock = 4096;
}  // namespace fold_split

// Sum of a float run accumulated in double, fast: eight float lanes add
// blocks of 32 values (4 per lane), which then widen into eight double
// accumulators. Each float partial holds at most 4 values, so the result
// is within a few float roundings of the exact sum, relative to the sum of
// magnitudes, however long the run. (Widening every element runs at about
// half the speed.)
inline double SumFloatRun(const float* p, int64_t n) {
  constexpr int64_t kBlock = 32;
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int b = 0; b < kBlock; b += 8) {
      for (int j = 0; j < 8; ++j) lane[j] += p[i + b + j];
    }
    for (int j = 0; j < 8; ++j) acc[j] += lane[j];
  }
  double tail = 0;
  for (; i < n; ++i) tail += p[i];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// Copies a strided tensor into a dense row-major buffer.
template <typename T>
void CopyDense(const dg::TensorRef& t, T* dst) {
  std::vector<Dim> dims;
  for (int32_t i = 0; i < t.ndim(); ++i) {
    dims.push_back({t.dim(i), t.stride(i)});
  }
  const T* src = t.data<const T>();
  ParallelFor(t.numel(), [&](int64_t begin, int64_t end) {
    Odometer it(dims, dims.size(), begin);
    for (int64_t i = begin; i < end; ++i, it.Next()) dst[i] = src[it.offset()];
  });
}

// Below this argument Eigen's SSE exp clamps its input and returns a tiny
// positive number (about 3e-39 in float, 6e-309 in double) even for -inf,
// where the true value is a denormal or 0: those few are redone exactly, so
// that a masked (-inf) position gets exactly 0.
template <typename T>
inline constexpr T kExpLow = std::is_same_v<T, float> ? T(-87) : T(-708);

// y[i] = exp(x[i] - shift[i * shift_step]) for i in [0, n).
template <typename T>
void ExpShifted(const T* x, const T* shift, int64_t shift_step, T* y,
                int64_t n) {
  using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;
  Eigen::Map<const Vec> xv(x, n);
  Eigen::Map<Vec> yv(y, n);
  if (shift_step == 0) {
    yv = (xv - shift[0]).exp();
  } else {
    yv = (xv - Eigen::Map<const Vec>(shift, n)).exp();
  }
  for (int64_t i = 0; i < n; ++i) {
    const T d = x[i] - shift[i * shift_step];
    if (d < kExpLow<T>) y[i] = std::exp(d);
  }
}

}  // namespace cpu_eigen

#endif  // DRAGON_CPU_EIGEN_REDUCE_UTIL_H_
