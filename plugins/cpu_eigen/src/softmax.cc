// Softmax and LogSoftmax along one axis, max-shifted for stability:
//   softmax(x)     = exp(x - m) / sum(exp(x - m))
//   log_softmax(x) = x - m - log(sum(exp(x - m)))
// with m the maximum along the axis (NaN propagates into the whole slice).
//
// float32 runs the kernels of softmax_isa.cc (per-instruction-set builds,
// a branch-free exp within 0.94 ulp, sums in double lanes); it is registered at
// priority 20, above mkldnn's oneDNN softmax (10), because it is faster
// on every shape measured (docs/benchmarks.md, "Softmax"), serves any axis
// (oneDNN declines an axis with inner > 1), and gives the same bits for any
// thread count. `dragon_core.plugins.pin("Softmax", "cpu", "mkldnn::Softmax")`
// still picks oneDNN's. float64 keeps Eigen's exp with double sums here.
//
// float16 and bfloat16 run the float32 kernel on widened copies
// (widen_call.h): every slice is widened to float, computed exactly as a
// float32 input is, and each output rounded once (nearest, ties to even),
// as torch's CPU kernels compute 16-bit softmax in float.
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "common.h"
#include "reduce_util.h"
#include "softmax_isa.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

template <typename T>
using Vec = Eigen::Array<T, Eigen::Dynamic, 1>;

template <typename T>
T NanMax(T a, T b) {
  return (a > b || a != a) ? a : b;
}

// Sum of n values accumulated in double (eight running sums).
template <typename T>
double SumDouble(const T* p, int64_t n) {
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int j = 0; j < 8; ++j) acc[j] += static_cast<double>(p[i + j]);
  }
  double tail = 0;
  for (; i < n; ++i) tail += static_cast<double>(p[i]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) +
         ((acc[4] + acc[5]) + (acc[6] + acc[7])) + tail;
}

// One contiguous slice of n >= 1 elements.
template <bool kLog, typename T>
void SoftmaxRun(const T* x, T* y, int64_t n) {
  T m = x[0];
  for (int64_t i = 1; i < n; ++i) m = NanMax(m, x[i]);
  ExpShifted(x, &m, 0, y, n);
  const double sum = SumDouble(y, n);
  Eigen::Map<Vec<T>> yv(y, n);
  if constexpr (kLog) {
    const T log_sum = static_cast<T>(std::log(sum));
    yv = (Eigen::Map<const Vec<T>>(x, n) - m) - log_sum;
  } else {
    yv /= static_cast<T>(sum);
  }
}

// Scratch for one block of the strided case.
template <typename T>
struct BlockScratch {
  std::vector<T> max, norm;
  std::vector<double> sum;
  explicit BlockScratch(int64_t w) : max(w), norm(w), sum(w) {}
};

// Positions [k0, k1) of the inner axis of one outer slice laid out as
// (dim, inner): running max and sum are vectors over the block, the axis is
// swept row by row.
template <bool kLog, typename T>
void SoftmaxBlock(const T* x, T* y, int64_t dim, int64_t inner, int64_t k0,
                  int64_t k1, BlockScratch<T>* s) {
  const int64_t w = k1 - k0;
  T* m = s->max.data();
  double* sum = s->sum.data();
  for (int64_t k = 0; k < w; ++k) m[k] = x[k0 + k];
  for (int64_t a = 1; a < dim; ++a) {
    const T* r = x + a * inner + k0;
    for (int64_t k = 0; k < w; ++k) m[k] = NanMax(m[k], r[k]);
  }
  for (int64_t k = 0; k < w; ++k) sum[k] = 0.0;
  for (int64_t a = 0; a < dim; ++a) {
    T* out = y + a * inner + k0;
    ExpShifted(x + a * inner + k0, m, 1, out, w);
    for (int64_t k = 0; k < w; ++k) sum[k] += static_cast<double>(out[k]);
  }
  Eigen::Map<Vec<T>> norm(s->norm.data(), w);
  Eigen::Map<const Vec<T>> mv(m, w);
  for (int64_t k = 0; k < w; ++k) {
    norm[k] = static_cast<T>(kLog ? std::log(sum[k]) : sum[k]);
  }
  for (int64_t a = 0; a < dim; ++a) {
    Eigen::Map<Vec<T>> out(y + a * inner + k0, w);
    if constexpr (kLog) {
      out = (Eigen::Map<const Vec<T>>(x + a * inner + k0, w) - mv) - norm;
    } else {
      out /= norm;
    }
  }
}

// Width of a block of the inner axis in the strided case: rows are read
// in pieces of this size (narrower strips down a tall slice defeat the
// hardware prefetcher; wider ones spill the running max and sum from L1).
constexpr int64_t kBlock = 1024;

// The (outer, dim, inner) split of input 0 around the op's axis (a 0-d
// input is a single slice of one element), after checking the output's size.
AxisSplit SoftmaxSplit(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const std::vector<int64_t> shape = xt.shape();
  AxisSplit s;
  if (!shape.empty()) {
    s = SplitAt(shape, CheckedAxis(ctx.op_name(), ctx.i("axis"), shape));
  }
  DG_CHECK(ctx.output(0).numel() == xt.numel(), DG_INTERNAL, ctx.op_name(),
           ": output has ", ctx.output(0).numel(), " elements, input ",
           ShapeStr(shape), " has ", xt.numel());
  return s;
}

template <bool kLog, typename T>
void SoftmaxImpl(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const AxisSplit s = SoftmaxSplit(ctx);
  if (xt.numel() == 0) return;
  const T* x = xt.data<const T>();
  T* y = ctx.output(0).data<T>();
  // Exponentials dominate: weigh each element as ~8 simple operations.
  constexpr int64_t kCost = 8;

  if (s.inner == 1) {
    ParallelFor(
        s.outer,
        [&](int64_t begin, int64_t end) {
          for (int64_t o = begin; o < end; ++o) {
            SoftmaxRun<kLog>(x + o * s.dim, y + o * s.dim, s.dim);
          }
        },
        s.dim * kCost);
    return;
  }

  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  ParallelFor(
      s.outer * blocks,
      [&](int64_t begin, int64_t end) {
        BlockScratch<T> scratch((s.inner + blocks - 1) / blocks + 1);
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / blocks, b = item % blocks;
          const int64_t offset = o * s.dim * s.inner;
          SoftmaxBlock<kLog>(x + offset, y + offset, s.dim, s.inner,
                             s.inner * b / blocks, s.inner * (b + 1) / blocks,
                             &scratch);
        }
      },
      s.dim * s.inner / blocks * kCost);
}

// float32 on softmax_isa.h's kernels: rows (inner == 1) or column blocks
// split over threads; each slice is computed alone, so the split (which
// depends on the thread count) never changes a bit.
template <bool kLog>
void SoftmaxF32Impl(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const AxisSplit s = SoftmaxSplit(ctx);
  if (xt.numel() == 0) return;
  const float* x = xt.data<const float>();
  float* y = ctx.output(0).data<float>();
  const SoftmaxKernels& k = SoftmaxKernelsForCpu();
  // An element costs about as much as four simple operations.
  constexpr int64_t kCost = 4;
  if (s.inner == 1) {
    ParallelFor(
        s.outer,
        [&](int64_t begin, int64_t end) {
          k.rows(x + begin * s.dim, y + begin * s.dim, end - begin, s.dim,
                 kLog ? 1 : 0);
        },
        s.dim * kCost);
    return;
  }
  const int64_t blocks = (s.inner + kBlock - 1) / kBlock;
  ParallelFor(
      s.outer * blocks,
      [&](int64_t begin, int64_t end) {
        const int64_t width = (s.inner + blocks - 1) / blocks + 1;
        std::vector<float> max(width);
        std::vector<double> sum(width);
        for (int64_t item = begin; item < end; ++item) {
          const int64_t o = item / blocks, b = item % blocks;
          const int64_t offset = o * s.dim * s.inner;
          k.columns(x + offset, y + offset, s.dim, s.inner,
                    s.inner * b / blocks, s.inner * (b + 1) / blocks,
                    kLog ? 1 : 0, max.data(), sum.data());
        }
      },
      s.dim * s.inner / blocks * kCost);
}

void SoftmaxF32(dg::KernelContext& ctx) { SoftmaxF32Impl<false>(ctx); }
void LogSoftmaxF32(dg::KernelContext& ctx) { SoftmaxF32Impl<true>(ctx); }

// float16 / bfloat16 through the float32 kernels (see the top of the file).
void SoftmaxHalf(dg::KernelContext& ctx) {
  widen_call::RunInFloat(ctx, &SoftmaxF32);
}
void LogSoftmaxHalf(dg::KernelContext& ctx) {
  widen_call::RunInFloat(ctx, &LogSoftmaxF32);
}
constexpr DgDTypeMask kHalfMask = dg::Bit(DG_FLOAT16) | dg::Bit(DG_BFLOAT16);

template <typename T>
void Softmax(dg::KernelContext& ctx) {
  SoftmaxImpl<false, T>(ctx);
}

template <typename T>
void LogSoftmax(dg::KernelContext& ctx) {
  SoftmaxImpl<true, T>(ctx);
}

// Above mkldnn's oneDNN softmax (priority 10): see the top of this file.
constexpr int32_t kSoftmaxF32Priority = 20;

}  // namespace

DG_KERNEL("Softmax", "cpu", Softmax, double);
DG_KERNEL("LogSoftmax", "cpu", LogSoftmax, double);
DG_KERNEL_MASK("Softmax", "cpu", dg::Bit(DG_FLOAT32), kSoftmaxF32Priority, 0,
               SoftmaxF32);
DG_KERNEL_MASK("LogSoftmax", "cpu", dg::Bit(DG_FLOAT32), kSoftmaxF32Priority,
               0, LogSoftmaxF32);
DG_KERNEL_MASK("Softmax", "cpu", kHalfMask, 0, 0, SoftmaxHalf);
DG_KERNEL_MASK("LogSoftmax", "cpu", kHalfMask, 0, 0, LogSoftmaxHalf);

}  // namespace cpu_eigen
