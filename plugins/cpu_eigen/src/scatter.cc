// ScatterAdd and ScatterReduce. ScatterAdd: y = x, then y[o, indices[i], :] += updates[o, i, :] for every
// (outer position o, index position i), viewing x as [outer, n, inner] and
// updates as [outer, m, inner] (m = indices.numel()). The inverse of Gather:
// same index conventions (int32 or int64, a negative index wraps once,
// anything else out of range is a DG_OUT_OF_RANGE error naming the index).
//
// Deterministic: work is split over (outer, block of inner) pairs, each
// owned by one thread, and within a pair the indices are applied in order,
// so every output element sums its updates in the same order whatever the
// thread count. No atomics.
#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "common.h"
#include "widen_call.h"
#include "strided.h"

namespace cpu_eigen {
namespace {

// Elements of inner handled by one task.
constexpr int64_t kInnerBlock = 4096;

// a + b; integers wrap as two's complement (no signed-overflow UB).
template <typename T>
inline T AddWrap(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) +
                                         static_cast<U>(b)));
  } else {
    return a + b;
  }
}

// Every index as an int64 in [0, n), checked before any thread starts: no
// exception may leave a parallel region.
template <typename I>
std::vector<int64_t> CheckedIndices(const dg::KernelContext& ctx, const I* idx,
                                    int64_t m, int64_t n, int64_t axis) {
  std::vector<int64_t> out(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    const int64_t v = static_cast<int64_t>(idx[i]);
    CheckIndex(ctx, v, n, axis);
    out[static_cast<size_t>(i)] = v < 0 ? v + n : v;
  }
  return out;
}

// y = x, then y[o, indices[i], :] = combine(y[...], updates[o, i, :]) for
// each i in index order. outer x inner blocks are split among threads; a
// block owns whole output rows, so the result does not depend on threads.
template <typename T, typename F>
void ScatterAlongAxis(dg::KernelContext& ctx, F combine) {
  const dg::TensorRef x = ctx.input(0), indices = ctx.input(1),
                      updates = ctx.input(2), y = ctx.output(0);
  const int64_t axis = CheckedAxis(ctx, x);
  const int32_t a = static_cast<int32_t>(axis);
  const int64_t n = x.dim(a), m = indices.numel();
  const std::vector<int64_t> idx =
      DispatchIndexType(ctx, indices, "indices", [&](const auto* p) {
        return CheckedIndices(ctx, p, m, n, axis);
      });
  int64_t outer = 1, inner = 1;
  for (int32_t k = 0; k < a; ++k) outer *= x.dim(k);
  for (int32_t k = a + 1; k < x.ndim(); ++k) inner *= x.dim(k);
  DG_CHECK(y.numel() == x.numel() && updates.numel() == outer * m * inner,
           DG_INTERNAL, ctx.op_name(), ": y has ", y.numel(),
           " elements and updates ", updates.numel(), ", expected ",
           x.numel(), " and ", outer * m * inner);

  T* dst = y.data<T>();
  const T* src = x.data<const T>();
  const T* upd = updates.data<const T>();
  ParallelMemcpy(dst, src, static_cast<size_t>(x.numel()) * sizeof(T));
  if (m == 0 || inner == 0 || outer == 0) return;

  const int64_t blocks = (inner + kInnerBlock - 1) / kInnerBlock;
  const int64_t* ix = idx.data();
  ParallelFor(
      outer * blocks,
      [&](int64_t begin, int64_t end) {
        for (int64_t t = begin; t < end; ++t) {
          const int64_t o = t / blocks;
          const int64_t lo = (t % blocks) * kInnerBlock;
          const int64_t len = std::min(kInnerBlock, inner - lo);
          T* out = dst + o * n * inner + lo;
          const T* in = upd + o * m * inner + lo;
          for (int64_t i = 0; i < m; ++i) {
            T* row = out + ix[i] * inner;
            const T* from = in + i * inner;
            for (int64_t k = 0; k < len; ++k) row[k] = combine(row[k], from[k]);
          }
        }
      },
      m * std::min(kInnerBlock, inner));
}

template <typename T>
void ScatterAddKernel(dg::KernelContext& ctx) {
  ScatterAlongAxis<T>(ctx, [](T acc, T u) { return AddWrap(acc, u); });
}

DG_KERNEL("ScatterAdd", "cpu", ScatterAddKernel, float, double, int8_t,
          int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t);
// float16 / bfloat16: summed in float32, each result rounded once
// (widen_call.h), so repeated indices do not accumulate 16-bit roundings.
CPU_EIGEN_WIDENED_KERNEL("ScatterAdd", ScatterAddKernel);

// a * b; integers wrap as two's complement (no signed-overflow UB).
template <typename T>
inline T MulWrap(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    using W = std::conditional_t<(sizeof(U) < sizeof(unsigned)), unsigned, U>;
    return static_cast<T>(static_cast<U>(static_cast<W>(static_cast<U>(a)) *
                                         static_cast<W>(static_cast<U>(b))));
  } else {
    return a * b;
  }
}

template <typename T>
inline bool IsNan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

// Combines one update into the running value: the reduction of
// ScatterReduce. max / min propagate NaN as np.maximum / np.minimum do.
enum class Reduction { kAdd, kMul, kMax, kMin };

template <typename T>
inline T Combine(Reduction r, T acc, T u) {
  switch (r) {
    case Reduction::kAdd:
      return AddWrap(acc, u);
    case Reduction::kMul:
      return MulWrap(acc, u);
    case Reduction::kMax:
      return (IsNan(acc) || u <= acc) && !IsNan(u) ? acc : u;
    case Reduction::kMin:
      return (IsNan(acc) || u >= acc) && !IsNan(u) ? acc : u;
  }
  return acc;
}

// ScatterReduce: y = x, then y[o, indices[i], :] = reduce(y[...], updates[o,
// i, :]) in index order; the same layout, index rules and deterministic
// work split as ScatterAdd.
template <typename T>
void ScatterReduceKernel(dg::KernelContext& ctx) {
  const std::string name = ctx.s("reduction");
  Reduction red;
  if (name == "add") {
    red = Reduction::kAdd;
  } else if (name == "mul") {
    red = Reduction::kMul;
  } else if (name == "max") {
    red = Reduction::kMax;
  } else if (name == "min") {
    red = Reduction::kMin;
  } else {
    DG_CHECK(false, DG_INVALID_ARGUMENT, ctx.op_name(),
             ": reduction must be \"add\", \"mul\", \"max\" or \"min\", "
             "got \"", name, "\"");
    return;
  }
  ScatterAlongAxis<T>(ctx, [red](T acc, T u) { return Combine(red, acc, u); });
}

DG_KERNEL("ScatterReduce", "cpu", ScatterReduceKernel, float, double, int8_t,
          int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t);

}  // namespace
}  // namespace cpu_eigen
