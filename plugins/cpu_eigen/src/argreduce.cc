// ArgMax and ArgMin: the index of the extreme value along one axis (or of
// the flattened tensor when `axis` is unset), as int64.
//
// NumPy semantics: ties give the first index, and NaN counts as more
// extreme than any number (the first NaN wins), for ArgMax and ArgMin alike.
#include <cstdint>
#include <vector>

#include "common.h"
#include "reduce_util.h"

namespace cpu_eigen {
namespace {

template <typename T>
bool IsNan(T v) {
  return v != v;  // false for integers
}

// True when `v` replaces the current `best` (strictly better, so the first
// index wins ties; a NaN replaces any number but never another NaN).
template <bool kMax, typename T>
bool Beats(T v, T best) {
  const bool better = kMax ? v > best : v < best;
  return better || (IsNan(v) && !IsNan(best));
}

// Finds the extreme of a contiguous run of n >= 1 elements in two passes:
// its value with Eigen's vectorised NaN-propagating redux, then the first
// position holding it (or the first NaN).
template <bool kMax, typename T>
void ScanRun(const T* p, int64_t n, T* best, int64_t* index) {
  Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>> v(p, n);
  const T b = kMax ? v.template maxCoeff<Eigen::PropagateNaN>()
                   : v.template minCoeff<Eigen::PropagateNaN>();
  int64_t at = 0;
  if (IsNan(b)) {
    while (!IsNan(p[at])) ++at;
  } else {
    while (p[at] != b) ++at;
  }
  *best = b;
  *index = at;
}

constexpr int64_t kTargetItems = 32;
constexpr int64_t kMinChunk = 16384;
// Blocks of the inner axis are at least this wide (when it is): narrow
// strips down a tall slice defeat the hardware prefetcher.
constexpr int64_t kMinBlock = 1024;

template <bool kMax, typename T>
void ArgExtreme(dg::KernelContext& ctx) {
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
           ": cannot reduce a zero-size axis (input shape ", ShapeStr(shape),
           ")");
  const T* x = xt.data<const T>();
  int64_t* y = ctx.output(0).data<int64_t>();

  if (s.inner == 1) {
    // Contiguous runs. With few outputs, split each run into chunks and
    // combine the chunk winners in order (earlier chunks win ties).
    const int64_t chunks =
        s.outer >= kTargetItems / 2
            ? 1
            : std::max<int64_t>(1, std::min(kTargetItems, s.dim / kMinChunk));
    if (chunks == 1) {
      ParallelFor(
          s.outer,
          [&](int64_t begin, int64_t end) {
            T best;
            for (int64_t o = begin; o < end; ++o) {
              ScanRun<kMax>(x + o * s.dim, s.dim, &best, y + o);
            }
          },
          s.dim);
      return;
    }
    T* best = ctx.workspace<T>(s.outer * chunks);
    int64_t* index = ctx.workspace<int64_t>(s.outer * chunks);
    ParallelFor(
        s.outer * chunks,
        [&](int64_t begin, int64_t end) {
          for (int64_t item = begin; item < end; ++item) {
            const int64_t o = item / chunks, c = item % chunks;
            const int64_t lo = s.dim * c / chunks,
                          hi = s.dim * (c + 1) / chunks;
            ScanRun<kMax>(x + o * s.dim + lo, hi - lo, best + item,
                          index + item);
            index[item] += lo;
          }
        },
        s.dim / chunks);
    for (int64_t o = 0; o < s.outer; ++o) {
      int64_t win = o * chunks;
      for (int64_t c = 1; c < chunks; ++c) {
        if (Beats<kMax>(best[o * chunks + c], best[win])) win = o * chunks + c;
      }
      y[o] = index[win];
    }
    return;
  }

  // Strided axis: keep the running best of a block of `inner` positions as
  // vectors and sweep the axis row by row.
  const int64_t blocks =
      std::max<int64_t>(1, std::min((s.inner + kMinBlock - 1) / kMinBlock,
                                    (kTargetItems + s.outer - 1) / s.outer));
  T* best = ctx.workspace<T>(num_out);
  ParallelFor(
      s.outer * blocks,
      [&](int64_t begin, int64_t end) {
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / blocks, b = item % blocks;
          const int64_t k0 = s.inner * b / blocks;
          const int64_t k1 = s.inner * (b + 1) / blocks;
          const T* base = x + o * s.dim * s.inner;
          T* bv = best + o * s.inner;
          int64_t* bi = y + o * s.inner;
          for (int64_t k = k0; k < k1; ++k) {
            bv[k] = base[k];
            bi[k] = 0;
          }
          for (int64_t a = 1; a < s.dim; ++a) {
            const T* row = base + a * s.inner;
            for (int64_t k = k0; k < k1; ++k) {
              if (Beats<kMax>(row[k], bv[k])) {
                bv[k] = row[k];
                bi[k] = a;
              }
            }
          }
        }
      },
      s.dim * s.inner / blocks);
}

template <typename T>
void ArgMax(dg::KernelContext& ctx) {
  ArgExtreme<true, T>(ctx);
}

template <typename T>
void ArgMin(dg::KernelContext& ctx) {
  ArgExtreme<false, T>(ctx);
}

}  // namespace

DG_KERNEL("ArgMax", "cpu", ArgMax, float, double, int8_t, int16_t, int32_t,
          int64_t, uint8_t, uint16_t, uint32_t, uint64_t);
DG_KERNEL("ArgMin", "cpu", ArgMin, float, double, int8_t, int16_t, int32_t,
          int64_t, uint8_t, uint16_t, uint32_t, uint64_t);

}  // namespace cpu_eigen
