// CumSum, Sort, ArgSort, TopK, NonZero and Unique (schemas and semantics in
// dragon_core/src/ops/sort.cc).
//
// Every axis op sees the contiguous input as (outer, dim, inner) and works
// on one line of `dim` elements (stride `inner`) at a time, lines in
// parallel. Orderings compare (value, index) pairs, a strict total order,
// so the results are stable and deterministic whatever algorithm runs.
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <type_traits>
#include <vector>

#include "common.h"
#include "reduce_util.h"

namespace cpu_eigen {
namespace {

template <typename T>
bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    (void)v;
    return false;
  }
}

// a < b with NaN largest (all NaNs equal).
template <typename T>
bool Less(T a, T b) {
  if (IsNan(a)) return false;
  if (IsNan(b)) return true;
  return a < b;
}

template <typename T>
bool Equal(T a, T b) {
  return IsNan(a) ? IsNan(b) : (!IsNan(b) && a == b);
}

// The split of the input around the op's "axis" (0-d: one element).
AxisSplit Split(const dg::KernelContext& ctx, const dg::TensorRef& x) {
  const std::vector<int64_t> shape = x.shape();
  if (shape.empty()) return AxisSplit{};
  return SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
}

// -- CumSum -------------------------------------------------------------------

template <typename T, bool = std::is_integral_v<T>>
struct Accum {
  using type = T;
};
template <typename T>
struct Accum<T, true> {
  using type = std::make_unsigned_t<T>;
};

template <typename T>
void CumSum(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const AxisSplit s = Split(ctx, xt);
  const bool exclusive = ctx.b("exclusive"), reverse = ctx.b("reverse");
  const T* x = xt.data<const T>();
  T* y = ctx.output(0).data<T>();
  if (xt.numel() == 0) return;
  using U = typename Accum<T>::type;  // integers wrap without UB
  ParallelFor(
      s.outer * s.inner,
      [&](int64_t begin, int64_t end) {
        for (int64_t line = begin; line < end; ++line) {
          const int64_t o = line / s.inner, in = line % s.inner;
          const T* xl = x + o * s.dim * s.inner + in;
          T* yl = y + o * s.dim * s.inner + in;
          U acc = U(0);
          for (int64_t j = 0; j < s.dim; ++j) {
            const int64_t a = (reverse ? s.dim - 1 - j : j) * s.inner;
            const U v = static_cast<U>(xl[a]);
            if (exclusive) {
              yl[a] = static_cast<T>(acc);
              acc = static_cast<U>(acc + v);
            } else {
              acc = static_cast<U>(acc + v);
              yl[a] = static_cast<T>(acc);
            }
          }
        }
      },
      s.dim);
}

// -- Sort, ArgSort, TopK ------------------------------------------------------

// Orders positions 0..dim-1 of one line; writes the first `k` (sorted) into
// `order`. `values` is the line gathered contiguously.
template <typename T>
void OrderLine(const T* values, int64_t dim, int64_t k, bool descending,
               std::vector<int64_t>* order) {
  order->resize(static_cast<size_t>(dim));
  std::iota(order->begin(), order->end(), int64_t{0});
  auto cmp = [&](int64_t a, int64_t b) {
    const T va = values[a], vb = values[b];
    if (descending ? Less(vb, va) : Less(va, vb)) return true;
    if (descending ? Less(va, vb) : Less(vb, va)) return false;
    return a < b;
  };
  if (k < dim) {
    std::partial_sort(order->begin(), order->begin() + k, order->end(), cmp);
  } else {
    std::sort(order->begin(), order->end(), cmp);
  }
}

// Sorts every line; writes the first `k` of each into `vals` (may be null)
// and `idx`, both laid out as (outer, k, inner).
template <typename T>
void SelectLines(const dg::KernelContext& ctx, const AxisSplit& s, int64_t k,
                 bool descending, T* vals, int64_t* idx) {
  const T* x = ctx.input(0).data<const T>();
  if (s.outer * s.inner == 0 || k == 0) return;
  ParallelFor(
      s.outer * s.inner,
      [&](int64_t begin, int64_t end) {
        std::vector<T> line(static_cast<size_t>(s.dim));
        std::vector<int64_t> order;
        for (int64_t l = begin; l < end; ++l) {
          const int64_t o = l / s.inner, in = l % s.inner;
          const T* xl = x + o * s.dim * s.inner + in;
          for (int64_t j = 0; j < s.dim; ++j) line[j] = xl[j * s.inner];
          OrderLine(line.data(), s.dim, k, descending, &order);
          const int64_t base = o * k * s.inner + in;
          for (int64_t j = 0; j < k; ++j) {
            idx[base + j * s.inner] = order[j];
            if (vals) vals[base + j * s.inner] = line[order[j]];
          }
        }
      },
      s.dim * 16);
}

template <typename T>
void Sort(dg::KernelContext& ctx) {
  const AxisSplit s = Split(ctx, ctx.input(0));
  SelectLines<T>(ctx, s, s.dim, ctx.b("descending"),
                 ctx.output(0).data<T>(), ctx.output(1).data<int64_t>());
}

template <typename T>
void ArgSort(dg::KernelContext& ctx) {
  const AxisSplit s = Split(ctx, ctx.input(0));
  SelectLines<T>(ctx, s, s.dim, ctx.b("descending"), nullptr,
                 ctx.output(0).data<int64_t>());
}

template <typename T>
void TopK(dg::KernelContext& ctx) {
  const AxisSplit s = Split(ctx, ctx.input(0));
  const int64_t k = ctx.i("k");
  DG_CHECK(k >= 0 && k <= s.dim, DG_INVALID_ARGUMENT, ctx.op_name(), ": k ",
           k, " is out of range for an axis of size ", s.dim);
  SelectLines<T>(ctx, s, k, ctx.b("largest"), ctx.output(0).data<T>(),
                 ctx.output(1).data<int64_t>());
}

// -- NonZero, Unique ----------------------------------------------------------

template <typename T>
bool IsNonZero(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v;
  } else if constexpr (std::is_floating_point_v<T>) {
    return v != T(0);  // true for NaN
  } else if constexpr (std::is_integral_v<T>) {
    return v != T(0);
  } else {
    return static_cast<float>(v) != 0.0f;  // half, bfloat16 (NaN: true)
  }
}

template <typename T>
void NonZero(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape = xt.shape();
  const int64_t n = xt.numel(), rank = static_cast<int64_t>(shape.size());
  const T* x = xt.data<const T>();
  int64_t* out = ctx.output(0).data<int64_t>();
  std::vector<int64_t> coord(static_cast<size_t>(rank), 0);
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (IsNonZero(x[i])) {
      for (int64_t d = 0; d < rank; ++d) out[d * n + count] = coord[d];
      ++count;
    }
    for (int64_t d = rank - 1; d >= 0; --d) {  // advance the coordinate
      if (++coord[d] < shape[d]) break;
      coord[d] = 0;
    }
  }
  for (int64_t d = 0; d < rank; ++d) {
    std::fill(out + d * n + count, out + (d + 1) * n, int64_t{-1});
  }
  *ctx.output(1).data<int64_t>() = count;
}

// Unique sees x as (outer, dim, inner) and compares the dim slices
// x[:, k, :] lexicographically in row-major order (NaN largest; NaNs equal).
// Without axis the flattened x is (1, numel, 1): slices are elements.
template <typename T>
void Unique(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape = xt.shape();
  AxisSplit s{1, xt.numel(), 1};
  if (ctx.has("axis")) {
    s = SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
  }
  const int64_t n = s.dim, width = s.outer * s.inner;
  const T* x = xt.data<const T>();
  T* values = ctx.output(0).data<T>();
  int64_t* first = ctx.output(1).data<int64_t>();
  int64_t* inverse = ctx.output(2).data<int64_t>();
  int64_t* counts = ctx.output(3).data<int64_t>();
  // Element e (row-major over outer, inner) of slice k.
  // The slices as the rows of a contiguous [dim, width] array: x itself
  // when nothing precedes the axis, else a copy with the axis moved first.
  std::vector<T> moved;
  const T* rows = x;
  if (s.outer > 1) {
    moved.resize(static_cast<size_t>(n * width));
    for (int64_t o = 0; o < s.outer; ++o) {
      for (int64_t k = 0; k < n; ++k) {
        std::copy(x + (o * n + k) * s.inner, x + (o * n + k + 1) * s.inner,
                  moved.begin() + k * width + o * s.inner);
      }
    }
    rows = moved.data();
  }
  auto at = [&](int64_t k, int64_t e) { return rows[k * width + e]; };
  auto slice_less = [&](int64_t a, int64_t b) {
    for (int64_t e = 0; e < width; ++e) {
      const T va = at(a, e), vb = at(b, e);
      if (Less(va, vb)) return true;
      if (Less(vb, va)) return false;
    }
    return false;
  };
  auto slice_equal = [&](int64_t a, int64_t b) {
    for (int64_t e = 0; e < width; ++e) {
      if (!Equal(at(a, e), at(b, e))) return false;
    }
    return true;
  };
  std::vector<int64_t> order;
  if (width == 1) {
    OrderLine(x, n, n, false, &order);
  } else {
    order.resize(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t{0});
    std::stable_sort(order.begin(), order.end(), slice_less);
  }
  // Groups of equal slices in sorted order; the first of a group is its
  // first occurrence (ties are ordered by index).
  std::vector<int64_t> group_of(static_cast<size_t>(n));
  std::vector<int64_t> group_first, group_count;
  for (int64_t j = 0; j < n; ++j) {
    const int64_t i = order[j];
    if (j == 0 || !slice_equal(i, order[j - 1])) {
      group_first.push_back(i);
      group_count.push_back(0);
    }
    group_of[i] = static_cast<int64_t>(group_first.size()) - 1;
    ++group_count.back();
  }
  const int64_t m = static_cast<int64_t>(group_first.size());
  // rank[g]: the output position of group g.
  std::vector<int64_t> rank(static_cast<size_t>(m));
  std::iota(rank.begin(), rank.end(), int64_t{0});
  if (!ctx.b("sorted")) {
    std::vector<int64_t> by_first(static_cast<size_t>(m));
    std::iota(by_first.begin(), by_first.end(), int64_t{0});
    std::sort(by_first.begin(), by_first.end(), [&](int64_t a, int64_t b) {
      return group_first[a] < group_first[b];
    });
    for (int64_t p = 0; p < m; ++p) rank[by_first[p]] = p;
  }
  // values: (outer, dim, inner) with slice rank[g] = slice group_first[g].
  std::fill(values, values + n * width, T(0));
  for (int64_t g = 0; g < m; ++g) {
    const T* row = rows + group_first[g] * width;
    for (int64_t o = 0; o < s.outer; ++o) {
      std::copy(row + o * s.inner, row + (o + 1) * s.inner,
                values + (o * s.dim + rank[g]) * s.inner);
    }
    first[rank[g]] = group_first[g];
    counts[rank[g]] = group_count[g];
  }
  for (int64_t i = 0; i < n; ++i) inverse[i] = rank[group_of[i]];
  std::fill(first + m, first + n, int64_t{0});
  std::fill(counts + m, counts + n, int64_t{0});
  *ctx.output(4).data<int64_t>() = m;
}

}  // namespace

DG_KERNEL("CumSum", "cpu", CumSum, float, double, int32_t, int64_t);
DG_KERNEL("Sort", "cpu", Sort, float, double, int32_t, int64_t);
DG_KERNEL("ArgSort", "cpu", ArgSort, float, double, int32_t, int64_t);
DG_KERNEL("TopK", "cpu", TopK, float, double, int32_t, int64_t);
DG_KERNEL("NonZero", "cpu", NonZero, bool, float, double, int8_t, int16_t,
          int32_t, int64_t, uint8_t, Eigen::half, Eigen::bfloat16);
DG_KERNEL("Unique", "cpu", Unique, float, double, int32_t, int64_t);

}  // namespace cpu_eigen
