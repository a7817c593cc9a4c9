// CUDA kernels of RoiAlign, RoiAlignGrad, RoiPool, RoiPoolGrad and
// RoiPoolGather (schemas in ../roi_ops.cc, CPU kernels in ../roi.cc).
//
// One thread per pooled output (k, c, i, j). The rois are first copied to
// the host and validated by the same code as the CPU kernels (CheckRois in
// roi_ops.cc), so a bad batch index is the same clear error on both devices;
// that copy synchronises the stream once per call. The gradient kernels
// add into dx (zeroed on the stream first) with atomicAdd: the sums are
// exact up to the order of floating-point additions, which may vary from
// run to run in the last bits.
//
// RoiAlign's mode "max" (ONNX) mirrors the CPU's MaxTerm (roi.cc): each
// bilinear sample, at the CPU's coordinates, offers its four weighted
// corner terms (all 0 * x[0] outside the map), the sample's largest term
// (the first on ties) competes with the other samples' in order; the bin
// takes that term, and the gradient goes to its cell with its weight.
#include <cmath>
#include <cstdint>
#include <vector>

#include "../roi.h"
#include "cuda_common.cuh"

namespace vision {

namespace cuda {
namespace {

// The sizes of one call, passed to the kernels by value.
struct Dims {
  int64_t c, h, w, k, oh, ow;
  __host__ __device__ int64_t outputs() const { return k * c * oh * ow; }
};

// Reads the attributes and checks the rois (a host copy) of a call.
template <typename T>
Dims Prepare(const dg::KernelContext& ctx, bool align, RoiAttrs* a) {
  const dg::TensorRef x = ctx.input(0), rois = ctx.input(1);
  *a = ReadRoiAttrs(ctx, align);
  const int64_t k = rois.dim(0);
  std::vector<T> host(static_cast<size_t>(5 * k));
  if (k > 0) {
    Check(cudaMemcpyAsync(host.data(), rois.data<const T>(),
                          host.size() * sizeof(T), cudaMemcpyDeviceToHost,
                          Stream(ctx)),
          "copying rois to the host");
    Check(cudaStreamSynchronize(Stream(ctx)), "waiting for the rois");
  }
  CheckRois<T>(host.data(), k, x.dim(0), *a, align);
  return Dims{x.dim(1), x.dim(2), x.dim(3), k, a->oh, a->ow};
}

void Zero(const dg::KernelContext& ctx, int32_t output) {
  const dg::TensorRef t = ctx.output(output);
  if (t.numel() == 0) return;
  Check(cudaMemsetAsync(t.raw_data(), 0, t.numel() * dg::DTypeSize(t.dtype()),
                        Stream(ctx)),
        "zeroing the gradient");
}

// The frame of every RoI kernel: validates the rois, zeroes dx for a
// gradient (`zero_dx`), then, when there are outputs, runs
// launch(dims, attrs, blocks, stream) and checks the launch.
template <typename T, typename Launch>
void RunRoiOp(dg::KernelContext& ctx, bool align, bool zero_dx, Launch launch) {
  RoiAttrs a;
  const Dims d = Prepare<T>(ctx, align, &a);
  if (zero_dx) Zero(ctx, 0);
  if (d.outputs() == 0) return;
  launch(d, a, Blocks(d.outputs()), Stream(ctx));
  Check(cudaGetLastError(), ctx.op_name());
}

// Output index -> (roi, channel, bin row, bin column).
struct Pos {
  int64_t k, c, i, j;
};

__device__ inline Pos Unravel(int64_t idx, const Dims& d) {
  Pos p;
  p.j = idx % d.ow;
  p.i = (idx / d.ow) % d.oh;
  p.c = (idx / (d.ow * d.oh)) % d.c;
  p.k = idx / (d.ow * d.oh * d.c);
  return p;
}

// ---------------------------------------------------------------- RoiAlign

// The sampling grid of bin (i, j) of one roi.
template <typename T>
struct AlignBin {
  T y0, x0, step_y, step_x;  // first sample and spacing
  int64_t gh, gw;
  T inv;                     // 1 / samples
};

// The corner, bin size and sampling grid of one roi's bins, shared by the
// average and max modes (their sample positions then follow the CPU's
// formula for each mode).
template <typename T>
struct RoiGeom {
  T x1, y1, bw, bh;
  int64_t gh, gw;
};

template <typename T>
__device__ RoiGeom<T> RoiGeomOf(const T* roi, const Dims& d, T scale, int64_t sampling,
                                bool aligned) {
  const T off = aligned ? T(0.5) : T(0);
  RoiGeom<T> g;
  g.x1 = roi[1] * scale - off;
  g.y1 = roi[2] * scale - off;
  T rw = roi[3] * scale - off - g.x1, rh = roi[4] * scale - off - g.y1;
  if (!aligned) {
    rw = rw > T(1) ? rw : T(1);
    rh = rh > T(1) ? rh : T(1);
  }
  g.bh = rh / T(d.oh);
  g.bw = rw / T(d.ow);
  g.gh = GridSize(rh, d.oh, sampling);
  g.gw = GridSize(rw, d.ow, sampling);
  return g;
}

template <typename T>
__device__ AlignBin<T> AlignBinOf(const T* roi, const Pos& p, const Dims& d,
                                  T scale, int64_t sampling, bool aligned) {
  const RoiGeom<T> g = RoiGeomOf(roi, d, scale, sampling, aligned);
  AlignBin<T> b;
  b.gh = g.gh;
  b.gw = g.gw;
  b.step_y = b.gh > 0 ? g.bh / T(b.gh) : T(0);
  b.step_x = b.gw > 0 ? g.bw / T(b.gw) : T(0);
  b.y0 = g.y1 + T(p.i) * g.bh + T(0.5) * b.step_y;
  b.x0 = g.x1 + T(p.j) * g.bw + T(0.5) * b.step_x;
  b.inv = T(1) / T(b.gh * b.gw > 0 ? b.gh * b.gw : 1);
  return b;
}

// Calls fn(offset, weight) for the (up to four) taps of the bilinear sample
// at (y, x) of an h x w plane, with Mask R-CNN's border rule (see roi.cc).
template <typename T, typename Fn>
__device__ inline void Taps(T y, T x, int64_t h, int64_t w, T weight, Fn fn) {
  if (!(y >= T(-1) && y <= T(h) && x >= T(-1) && x <= T(w))) return;
  y = y > T(0) ? y : T(0);
  x = x > T(0) ? x : T(0);
  int64_t ylo = static_cast<int64_t>(y), xlo = static_cast<int64_t>(x);
  int64_t yhi = ylo + 1, xhi = xlo + 1;
  if (ylo >= h - 1) {
    ylo = yhi = h - 1;
    y = T(ylo);
  }
  if (xlo >= w - 1) {
    xlo = xhi = w - 1;
    x = T(xlo);
  }
  const T ly = y - T(ylo), lx = x - T(xlo);
  fn(ylo * w + xlo, (T(1) - ly) * (T(1) - lx) * weight);
  fn(ylo * w + xhi, (T(1) - ly) * lx * weight);
  fn(yhi * w + xlo, ly * (T(1) - lx) * weight);
  fn(yhi * w + xhi, ly * lx * weight);
}

// Calls fn(offset, weight) for every tap of every sample of bin p.
template <typename T, typename Fn>
__device__ inline void ForBinTaps(const T* roi, const Pos& p, const Dims& d,
                                  T scale, int64_t sampling, bool aligned,
                                  Fn fn) {
  const AlignBin<T> b = AlignBinOf(roi, p, d, scale, sampling, aligned);
  for (int64_t iy = 0; iy < b.gh; ++iy) {
    const T y = b.y0 + T(iy) * b.step_y;
    for (int64_t ix = 0; ix < b.gw; ++ix) {
      Taps(y, b.x0 + T(ix) * b.step_x, d.h, d.w, b.inv, fn);
    }
  }
}

template <typename T>
__device__ inline int64_t PlaneOf(const T* roi, const Pos& p, const Dims& d) {
  return (static_cast<int64_t>(roi[0]) * d.c + p.c) * d.h * d.w;
}

template <typename T>
__global__ void RoiAlignKernel(Dims d, const T* x, const T* rois, T scale,
                               int64_t sampling, bool aligned, T* y) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    const T* plane = x + PlaneOf(roi, p, d);
    T sum = T(0);
    ForBinTaps(roi, p, d, scale, sampling, aligned,
               [&](int64_t at, T wgt) { sum += wgt * plane[at]; });
    y[idx] = sum;
  }
}

template <typename T>
__global__ void RoiAlignGradKernel(Dims d, const T* rois, const T* dy,
                                   T scale, int64_t sampling, bool aligned,
                                   T* dx) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    T* plane = dx + PlaneOf(roi, p, d);
    const T g = dy[idx];
    ForBinTaps(roi, p, d, scale, sampling, aligned,
               [&](int64_t at, T wgt) { atomicAdd(plane + at, g * wgt); });
  }
}

// ------------------------------------------------------- RoiAlign, max mode

// The term a max-mode bin takes: cell offset `at` (-1 for a bin without
// samples) and weight `w`.
template <typename T>
struct MaxPick {
  int64_t at = -1;
  T w = T(0);
};

// The four taps of the sample at (y, x), weights unscaled (max mode), as
// the CPU's Bilinear: every weight 0 and offset 0 outside the map. The taps
// are Taps' own, in its order (weight 1 scales nothing).
template <typename T>
__device__ inline void SampleTaps(T y, T x, int64_t h, int64_t w, int64_t at[4], T wt[4]) {
  for (int j = 0; j < 4; ++j) at[j] = 0, wt[j] = T(0);
  int n = 0;
  Taps(y, x, h, w, T(1), [&](int64_t offset, T weight) {
    at[n] = offset;
    wt[n] = weight;
    ++n;
  });
}

// The CPU's sample grid (BuildAlignTable) and selection (MaxTerm) for bin p.
template <typename T>
__device__ MaxPick<T> PickMax(const T* roi, const Pos& p, const Dims& d, T scale,
                              int64_t sampling, bool aligned, const T* plane) {
  const RoiGeom<T> g = RoiGeomOf(roi, d, scale, sampling, aligned);
  MaxPick<T> best;
  T best_v = T(0);
  for (int64_t iy = 0; iy < g.gh; ++iy) {
    const T y = g.y1 + T(p.i) * g.bh + (T(iy) + T(0.5)) * g.bh / T(g.gh);
    for (int64_t ix = 0; ix < g.gw; ++ix) {
      const T x = g.x1 + T(p.j) * g.bw + (T(ix) + T(0.5)) * g.bw / T(g.gw);
      int64_t at[4];
      T wt[4];
      SampleTaps(y, x, d.h, d.w, at, wt);
      int k = 0;
      T v = wt[0] * plane[at[0]];
      for (int j = 1; j < 4; ++j) {
        const T t = wt[j] * plane[at[j]];
        if (t > v) v = t, k = j;
      }
      if (best.at < 0 || v > best_v) {
        best.at = at[k];
        best.w = wt[k];
        best_v = v;
      }
    }
  }
  return best;
}

template <typename T>
__global__ void RoiAlignMaxKernel(Dims d, const T* x, const T* rois, T scale,
                                  int64_t sampling, bool aligned, T* y) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    const T* plane = x + PlaneOf(roi, p, d);
    const MaxPick<T> m = PickMax(roi, p, d, scale, sampling, aligned, plane);
    y[idx] = m.at < 0 ? T(0) : m.w * plane[m.at];
  }
}

template <typename T>
__global__ void RoiAlignMaxGradKernel(Dims d, const T* x, const T* rois, const T* dy,
                                      T scale, int64_t sampling, bool aligned, T* dx) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    const int64_t base = PlaneOf(roi, p, d);
    const MaxPick<T> m = PickMax(roi, p, d, scale, sampling, aligned, x + base);
    if (m.at >= 0) atomicAdd(dx + base + m.at, dy[idx] * m.w);
  }
}

template <typename T>
void RoiAlignCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, true, false, [&](Dims d, RoiAttrs a, unsigned blocks,
                                    cudaStream_t stream) {
    if (a.max_mode) {
      RoiAlignMaxKernel<T><<<blocks, kThreads, 0, stream>>>(
          d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
          static_cast<T>(a.scale), a.sampling, a.aligned, ctx.output(0).data<T>());
      return;
    }
    RoiAlignKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
        static_cast<T>(a.scale), a.sampling, a.aligned,
        ctx.output(0).data<T>());
  });
}

template <typename T>
void RoiAlignGradCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, true, true, [&](Dims d, RoiAttrs a, unsigned blocks,
                                   cudaStream_t stream) {
    if (a.max_mode) {  // x selects the term each bin took
      RoiAlignMaxGradKernel<T><<<blocks, kThreads, 0, stream>>>(
          d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
          ctx.input(2).data<const T>(), static_cast<T>(a.scale), a.sampling, a.aligned,
          ctx.output(0).data<T>());
      return;
    }
    RoiAlignGradKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(1).data<const T>(), ctx.input(2).data<const T>(),
        static_cast<T>(a.scale), a.sampling, a.aligned,
        ctx.output(0).data<T>());
  });
}

// ----------------------------------------------------------------- RoiPool

// [start, end) of bin i of `bins` over a roi from cell `origin` spanning
// `size` cells, clipped to [0, len] (NaN gives 0).
__device__ inline void BinCells(int64_t i, int64_t bins, double origin,
                                double size, int64_t len, int64_t* start,
                                int64_t* end) {
  const double bin = size / static_cast<double>(bins);
  double lo = floor(static_cast<double>(i) * bin) + origin;
  double hi = ceil(static_cast<double>(i + 1) * bin) + origin;
  const double top = static_cast<double>(len);
  lo = lo > 0 ? (lo < top ? lo : top) : 0.0;
  hi = hi > 0 ? (hi < top ? hi : top) : 0.0;
  *start = static_cast<int64_t>(lo);
  *end = static_cast<int64_t>(hi);
}

// In-plane index of the maximum of bin p (first in row-major order, NaN
// winning), or -1 for an empty bin; torchvision's quantisation.
template <typename T>
__device__ int64_t ArgMax(const T* plane, const T* roi, const Pos& p,
                          const Dims& d, double scale) {
  const double x1 = round(roi[1] * scale), y1 = round(roi[2] * scale);
  const double x2 = round(roi[3] * scale), y2 = round(roi[4] * scale);
  const double rw = fmax(x2 - x1 + 1.0, 1.0), rh = fmax(y2 - y1 + 1.0, 1.0);
  int64_t h0, h1, w0, w1;
  BinCells(p.i, d.oh, y1, rh, d.h, &h0, &h1);
  BinCells(p.j, d.ow, x1, rw, d.w, &w0, &w1);
  int64_t best = -1;
  T best_v = T(0);
  for (int64_t r = h0; r < h1; ++r) {
    for (int64_t c = w0; c < w1; ++c) {
      const T v = plane[r * d.w + c];
      if (best < 0 || v > best_v || (isnan(v) && !isnan(best_v))) {
        best = r * d.w + c;
        best_v = v;
      }
    }
  }
  return best;
}

// y[k, c, i, j] = values at the argmax of x in bin (i, j), 0 when empty.
template <typename T>
__global__ void GatherKernel(Dims d, const T* x, const T* rois,
                             const T* values, double scale, T* y) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    const int64_t base = PlaneOf(roi, p, d);
    const int64_t at = ArgMax(x + base, roi, p, d, scale);
    y[idx] = at < 0 ? T(0) : values[base + at];
  }
}

template <typename T>
__global__ void ScatterKernel(Dims d, const T* x, const T* rois, const T* dy,
                              double scale, T* dx) {
  VISION_CUDA_LOOP(idx, d.outputs()) {
    const Pos p = Unravel(idx, d);
    const T* roi = rois + 5 * p.k;
    const int64_t base = PlaneOf(roi, p, d);
    const int64_t at = ArgMax(x + base, roi, p, d, scale);
    if (at >= 0) atomicAdd(dx + base + at, dy[idx]);
  }
}

// RoiPool (values = input 0) and RoiPoolGather (values = input 2).
template <typename T>
void GatherCuda(dg::KernelContext& ctx, int32_t values_input) {
  RunRoiOp<T>(ctx, false, false, [&](Dims d, RoiAttrs a, unsigned blocks,
                                     cudaStream_t stream) {
    GatherKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
        ctx.input(values_input).data<const T>(), a.scale,
        ctx.output(0).data<T>());
  });
}

template <typename T>
void RoiPoolCuda(dg::KernelContext& ctx) {
  GatherCuda<T>(ctx, 0);
}

template <typename T>
void RoiPoolGatherCuda(dg::KernelContext& ctx) {
  GatherCuda<T>(ctx, 2);
}

template <typename T>
void RoiPoolGradCuda(dg::KernelContext& ctx) {
  RunRoiOp<T>(ctx, false, true, [&](Dims d, RoiAttrs a, unsigned blocks,
                                    cudaStream_t stream) {
    ScatterKernel<T><<<blocks, kThreads, 0, stream>>>(
        d, ctx.input(0).data<const T>(), ctx.input(1).data<const T>(),
        ctx.input(2).data<const T>(), a.scale, ctx.output(0).data<T>());
  });
}

}  // namespace

DG_KERNEL("RoiAlign", "cuda", RoiAlignCuda, float, double);
DG_KERNEL("RoiAlignGrad", "cuda", RoiAlignGradCuda, float, double);
DG_KERNEL("RoiPool", "cuda", RoiPoolCuda, float, double);
DG_KERNEL("RoiPoolGrad", "cuda", RoiPoolGradCuda, float, double);
DG_KERNEL("RoiPoolGather", "cuda", RoiPoolGatherCuda, float, double);

}  // namespace cuda
}  // namespace vision
