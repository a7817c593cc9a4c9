// CUDA kernels of Interpolate, InterpolateGrad, GridSample and
// GridSampleGrad (schemas and CPU kernels in ../resample.cc). The plans are
// read and validated by the same host code as on the CPU, and every thread
// computes its taps with the shared functions of ../resample.h, so both
// devices sample the same points. Gradients scatter with atomicAdd into
// outputs zeroed on the stream first (the summation order, hence the last
// bits of float results, may vary between runs).
#include <type_traits>

#include "../resample.h"
#include "cuda_common.cuh"

namespace vision {
namespace resample {
namespace {

using cuda::Blocks;
using cuda::Check;
using cuda::kThreads;
using cuda::Stream;

// The taps of one output position on the three (D, H, W) axes; the flat
// output index `i` is (plane, od, oh, ow).
struct PositionTaps {
  int64_t idx[kAxes][kMaxTaps];
  double w[kAxes][kMaxTaps];
  int n[kAxes];
  int64_t plane;
};

__device__ PositionTaps TapsOf(const InterpPlan& p, int64_t i) {
  PositionTaps t;
  int64_t rest = i;
  for (int a = kAxes - 1; a >= 0; --a) {
    const int64_t o = rest % p.axis[a].out;
    rest /= p.axis[a].out;
    t.n[a] = AxisTaps(p.axis[a], p.mode, o, t.idx[a], t.w[a]);
  }
  t.plane = rest;
  return t;
}

// Calls fn(offset in the input plane, weight) for every tap of `t`.
template <typename F>
__device__ void ForEachTap(const InterpPlan& p, const PositionTaps& t, F fn) {
  const int64_t in_h = p.axis[2].in, in_dh = p.axis[1].in * p.axis[2].in;
  for (int i = 0; i < t.n[0]; ++i) {
    for (int j = 0; j < t.n[1]; ++j) {
      for (int k = 0; k < t.n[2]; ++k) {
        fn(t.idx[0][i] * in_dh + t.idx[1][j] * in_h + t.idx[2][k],
           t.w[0][i] * t.w[1][j] * t.w[2][k]);
      }
    }
  }
}

// One thread per output element. Forward (kGrad false): y[i] = the
// weighted sum of its taps in x. Gradient (kGrad true): dy[i] times each
// weight is added to dx at the tap, with atomics.
template <typename T, bool kGrad>
__global__ void InterpolateKernel(InterpPlan p, const T* src, T* dst,
                                  int64_t total) {
  const int64_t in_numel = p.in_numel();
  VISION_CUDA_LOOP(i, total) {
    const PositionTaps t = TapsOf(p, i);
    const int64_t base = t.plane * in_numel;
    if constexpr (kGrad) {
      const double g = static_cast<double>(src[i]);
      ForEachTap(p, t, [&](int64_t off, double w) {
        atomicAdd(dst + base + off, static_cast<T>(w * g));
      });
    } else {
      double acc = 0.0;
      ForEachTap(p, t, [&](int64_t off, double w) {
        acc += w * static_cast<double>(src[base + off]);
      });
      dst[i] = static_cast<T>(acc);
    }
  }
}

template <typename T>
void InterpolateCuda(dg::KernelContext& ctx) {
  const InterpPlan p =
      WithInputPrecision(ReadInterpPlan(ctx, ctx.input(0).shape()),
                         std::is_same<T, double>::value);
  const int64_t total = ctx.output(0).numel();
  if (total == 0) return;
  InterpolateKernel<T, false><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      p, ctx.input(0).data<const T>(), ctx.output(0).data<T>(), total);
  Check(cudaGetLastError(), "Interpolate kernel launch");
}

template <typename T>
void InterpolateGradCuda(dg::KernelContext& ctx) {
  const InterpPlan p = ForNearestGradient(ReadInterpPlan(ctx, ctx.input(0).shape()));
  T* dx = ctx.output(0).data<T>();
  const int64_t n = ctx.output(0).numel(), total = ctx.input(1).numel();
  if (n == 0) return;
  Check(cudaMemsetAsync(dx, 0, n * sizeof(T), Stream(ctx)),
        "InterpolateGrad zeroing dx");
  if (total == 0) return;
  InterpolateKernel<T, true><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      p, ctx.input(1).data<const T>(), dx, total);
  Check(cudaGetLastError(), "InterpolateGrad kernel launch");
}

// ------------------------------------------------------------ GridSample

// One thread per output element (n, c, point).
template <typename T>
__global__ void GridSampleKernel(GridPlan p, const T* x, const T* grid, T* y,
                                 int64_t total) {
  const int64_t points = p.points(), plane = p.plane();
  VISION_CUDA_LOOP(i, total) {
    const int64_t q = i % points, nc = i / points, n = nc / p.c;
    const GridPoint pt = GridPointAt<DynamicGrid>(p, grid, n * points + q);
    y[i] = static_cast<T>(SampleAt(p, pt, x + nc * plane));
  }
}

// dx: one thread per dy element, scattering with atomics.
template <typename T>
__global__ void GridSampleGradXKernel(GridPlan p, const T* grid, const T* dy,
                                      T* dx, int64_t total) {
  const int64_t points = p.points(), plane = p.plane();
  VISION_CUDA_LOOP(i, total) {
    const int64_t q = i % points, nc = i / points, n = nc / p.c;
    const GridPoint pt = GridPointAt<DynamicGrid>(p, grid, n * points + q);
    T* dst = dx + nc * plane;
    const double g = static_cast<double>(dy[i]);
    ForEachGridTap(p, pt, [&](int64_t off, double w, int, int, int) {
      atomicAdd(dst + off, static_cast<T>(w * g));
    });
  }
}

// dgrid: one thread per grid point, summing over channels (no atomics).
template <typename T>
__global__ void GridSampleGradGridKernel(GridPlan p, const T* x, const T* dy,
                                         const T* grid, T* dgrid,
                                         int64_t total) {
  VISION_CUDA_LOOP(np, total) { GridPointGrad<DynamicGrid>(p, x, grid, dy, np, dgrid); }
}

GridPlan CudaGridPlan(const dg::KernelContext& ctx) {
  return ReadGridPlan(ctx, ctx.input(0).shape(), ctx.input(1).shape());
}

template <typename T>
void GridSampleCuda(dg::KernelContext& ctx) {
  const GridPlan p = CudaGridPlan(ctx);
  const int64_t total = ctx.output(0).numel();
  if (total == 0) return;
  GridSampleKernel<T><<<Blocks(total), kThreads, 0, Stream(ctx)>>>(
      p, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
      ctx.output(0).data<T>(), total);
  Check(cudaGetLastError(), "GridSample kernel launch");
}

template <typename T>
void GridSampleGradCuda(dg::KernelContext& ctx) {
  const GridPlan p = CudaGridPlan(ctx);
  const T* x = ctx.input(0).data<const T>();
  const T* grid = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  T* dgrid = ctx.output(1).data<T>();
  const cudaStream_t s = Stream(ctx);
  const int64_t nx = ctx.output(0).numel(), total = ctx.input(2).numel();
  const int64_t points = p.n * p.points();
  if (nx > 0) {
    Check(cudaMemsetAsync(dx, 0, nx * sizeof(T), s),
          "GridSampleGrad zeroing dx");
  }
  if (total > 0) {
    GridSampleGradXKernel<T><<<Blocks(total), kThreads, 0, s>>>(p, grid, dy, dx,
                                                                total);
    Check(cudaGetLastError(), "GridSampleGrad dx kernel launch");
  }
  if (points > 0) {
    GridSampleGradGridKernel<T><<<Blocks(points), kThreads, 0, s>>>(
        p, x, dy, grid, dgrid, points);
    Check(cudaGetLastError(), "GridSampleGrad dgrid kernel launch");
  }
}

}  // namespace

DG_KERNEL("Interpolate", "cuda", InterpolateCuda, float, double);
DG_KERNEL("InterpolateGrad", "cuda", InterpolateGradCuda, float, double);
DG_KERNEL("GridSample", "cuda", GridSampleCuda, float, double);
DG_KERNEL("GridSampleGrad", "cuda", GridSampleGradCuda, float, double);

}  // namespace resample
}  // namespace vision
