// MaxPool2d, MaxPool2dIndices and MaxPool2dGrad on cuda over NCHW tensors,
// with cpu_eigen's semantics (pool.cc; PyTorch's): padded cells never win,
// NaN wins over numbers, ties go to the first cell in row-major window
// order. The gradient is gathered, not scattered: each input cell sums the
// dy of the windows whose maximum it is, in the CPU's window order, so the
// result is deterministic and matches the CPU's accumulation order.
// MaxPool2d also reads a channels-last x natively (DG_KERNEL_CHANNELS_LAST,
// docs/cuda.md); the other pooling kernels take dense NCHW copies.
#include <cmath>
#include <cstdint>
#include <vector>

#include "elementwise.cuh"
#include "index_math.h"
#include "pool_window.h"

namespace dragon_cuda {
namespace {

struct Pool {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t ph_end = 0, pw_end = 0;  // bottom / right padding
};

// pads: [ph, pw] on both sides (one value: all), or [top, left, bottom,
// right]; a maximum needs only the begins (windows are clipped to x), an
// average's divisor the ends too.
void ReadPads(const dg::KernelContext& ctx, Pool* p) {
  const std::vector<int64_t> v = ctx.ints("pads");
  DG_CHECK(!v.empty(), DG_INTERNAL, ctx.op_name(), ": attribute pads is empty");
  p->ph = v[0];
  p->pw = v.size() > 1 ? v[1] : v[0];
  p->ph_end = v.size() == 4 ? v[2] : p->ph;
  p->pw_end = v.size() == 4 ? v[3] : p->pw;
}

void ReadPair(const dg::KernelContext& ctx, const char* name, const std::vector<int64_t>& fb,
              int64_t* a, int64_t* b) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty()) v = fb;
  DG_CHECK(!v.empty(), DG_INTERNAL, ctx.op_name(), ": attribute ", name, " is empty");
  *a = v[0];
  *b = v.size() > 1 ? v[1] : v[0];
}

Pool ReadPool(const dg::KernelContext& ctx, const dg::TensorRef& x, const dg::TensorRef& pooled) {
  DG_CHECK(x.ndim() == 4 && pooled.ndim() == 4, DG_INTERNAL, ctx.op_name(),
           ": expected 4-D tensors");
  Pool p;
  p.planes = x.dim(0) * x.dim(1);
  p.h = x.dim(2);
  p.w = x.dim(3);
  p.oh = pooled.dim(2);
  p.ow = pooled.dim(3);
  ReadPair(ctx, "kernel_size", {}, &p.kh, &p.kw);
  ReadPair(ctx, "strides", ctx.ints("kernel_size"), &p.sh, &p.sw);
  ReadPads(ctx, &p);
  ReadPair(ctx, "dilations", {}, &p.dh, &p.dw);
  return p;
}

// The geometry in the kernels' index type: 32-bit when every index of x and
// of the pooled tensor fits (the common case: 64-bit integer division and
// multiplication cost several times the 32-bit ones, and the max-pool
// kernels are bound by their index math, not by memory).
template <typename I>
struct Geo {
  I planes, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};

template <typename I>
Geo<I> GeoOf(const Pool& p) {
  return Geo<I>{static_cast<I>(p.planes), static_cast<I>(p.h),  static_cast<I>(p.w),
                static_cast<I>(p.oh),     static_cast<I>(p.ow), static_cast<I>(p.kh),
                static_cast<I>(p.kw),     static_cast<I>(p.sh), static_cast<I>(p.sw),
                static_cast<I>(p.ph),     static_cast<I>(p.pw), static_cast<I>(p.dh),
                static_cast<I>(p.dw)};
}

// Whether 32-bit indices hold every index the max-pool kernels form
// (window positions included: (o - 1) * s + (k - 1) * d stays under h + p).
bool Fits32(const Pool& p) {
  const int64_t lim = int64_t{1} << 30;
  const int64_t cells = p.planes * (p.h * p.w > p.oh * p.ow ? p.h * p.w : p.oh * p.ow);
  return cells < lim && p.h + p.ph < lim && p.w + p.pw < lim &&
         p.oh * p.sh + p.kh * p.dh < lim && p.ow * p.sw + p.kw * p.dw < lim;
}

// In-plane index of the maximum of window (i, j), -1 for an empty window:
// the shared walk (pool_window.h) over the dense NCHW plane.
template <typename I, typename T>
__device__ I ArgMaxWindow(const T* xp, const Geo<I>& p, I i, I j) {
  I at = 0;
  return MaxPoolWindowArgMax<Acc<T>>(xp, p, i, j, p.w, I(1), &at) ? at : I(-1);
}

// y (or, with kIndices, the in-plane index of each window's maximum).
template <typename I, typename T, typename Idx, bool kIndices>
__global__ void MaxPoolKernel(const T* x, T* y, Idx* idx, Geo<I> p) {
  const I per = p.oh * p.ow;
  const I n = p.planes * per;
  for (I t = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); t < n;
       t += static_cast<I>(blockDim.x * gridDim.x)) {
    const I q = t / per, o = t - q * per;
    const I i = o / p.ow;
    const T* xp = x + static_cast<int64_t>(q) * p.h * p.w;
    const I at = ArgMaxWindow(xp, p, i, o - i * p.ow);
    if constexpr (kIndices) {
      idx[t] = static_cast<Idx>(at);
    } else {
      // An empty window gives NaN (the shape rules exclude it).
      y[t] = at >= 0 ? xp[at] : Store<T>(static_cast<Acc<T>>(NAN));
    }
  }
}

// Grid-stride launches index with I: cap the grid so that t + stride stays
// in range.
inline unsigned Blocks32(int64_t n) {
  const int64_t b = Blocks(n);
  return static_cast<unsigned>(b < 65535 ? b : 65535);
}

template <typename I, typename T, typename Idx, bool kIndices>
void LaunchMaxPool(const Pool& p, int64_t n, cudaStream_t s, const T* x, T* y, Idx* idx) {
  const unsigned blocks = sizeof(I) == 4 ? Blocks32(n) : Blocks(n);
  MaxPoolKernel<I, T, Idx, kIndices><<<blocks, kThreads, 0, s>>>(x, y, idx, GeoOf<I>(p));
}

// Channels-last MaxPool2d (docs/cuda.md): thread t takes output element t
// in NHWC order and reads x and writes y through their strides; the element
// (index split, window walk over x's own row and column strides, store) is
// pool_window.h's MaxPoolChannelsLastAt, which
// tests/test_cuda_pool_window.py runs on the host against NumPy.
Strides4 StridesOf(const dg::TensorRef& t) {
  return Strides4{t.stride(0), t.stride(1), t.stride(2), t.stride(3)};
}

template <typename T>
__global__ void MaxPoolChannelsLast(const T* x, T* y, Pool p, int64_t channels, Strides4 xs,
                                    Strides4 ys, int64_t total) {
  const T empty = Store<T>(static_cast<Acc<T>>(NAN));
  DGC_LOOP(t, total) MaxPoolChannelsLastAt<Acc<T>>(x, y, p, channels, xs, ys, t, empty);
}

// Whether t (4-D) is channels-last and not also row-major (the SDK's rules,
// which are the core's).
bool StrictlyChannelsLast(const dg::TensorRef& t) {
  return t.ndim() == 4 && !t.is_contiguous() && t.is_channels_last();
}

template <typename T>
void MaxPool2d(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.output(0));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  if (StrictlyChannelsLast(ctx.input(0))) {
    const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
    MaxPoolChannelsLast<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
        static_cast<const T*>(xt.raw_data()), static_cast<T*>(yt.raw_data()), p, xt.dim(1),
        StridesOf(xt), StridesOf(yt), n);
    CheckLaunch(ctx);
    return;
  }
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  if (Fits32(p)) {
    LaunchMaxPool<int32_t, T, int64_t, false>(p, n, Prepare(ctx), x, y, nullptr);
  } else {
    LaunchMaxPool<int64_t, T, int64_t, false>(p, n, Prepare(ctx), x, y, nullptr);
  }
  CheckLaunch(ctx);
}
DG_KERNEL_EX("MaxPool2d", "cuda", 0, DG_KERNEL_CHANNELS_LAST, MaxPool2d, float, double, half,
             bf16);

template <typename T>
void MaxPool2dIndices(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.output(0));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  int64_t* idx = static_cast<int64_t*>(ctx.output(0).raw_data());
  if (Fits32(p)) {
    LaunchMaxPool<int32_t, T, int64_t, true>(p, n, Prepare(ctx), x, nullptr, idx);
  } else {
    LaunchMaxPool<int64_t, T, int64_t, true>(p, n, Prepare(ctx), x, nullptr, idx);
  }
  CheckLaunch(ctx);
}
DG_KERNEL("MaxPool2dIndices", "cuda", MaxPool2dIndices, float, double, half, bf16);

// dx[cell] = sum of dy[i, j] over the windows (i, j) whose maximum is the
// cell, in row-major (i, j) order (the CPU's). The maxima come first, once
// per window, from MaxPoolKernel into a workspace (`at`), so each cell
// compares one stored index per window that holds it instead of scanning
// those windows again.
template <typename I, typename T>
__global__ void MaxPoolGradKernel(const I* at, const T* dy, T* dx, Geo<I> p) {
  const I per = p.h * p.w;
  const I n = p.planes * per;
  for (I t = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); t < n;
       t += static_cast<I>(blockDim.x * gridDim.x)) {
    const I q = t / per, cell = t - q * per;
    const I r = cell / p.w, c = cell - r * p.w;
    const I* ap = at + static_cast<int64_t>(q) * p.oh * p.ow;
    const T* dyp = dy + static_cast<int64_t>(q) * p.oh * p.ow;
    Acc<T> acc = 0;  // 16-bit floats sum in float, rounded once
    if (p.dh == 1 && p.dw == 1) {
      // Windows i with i * sh - ph <= r <= i * sh - ph + kh - 1, ascending.
      const I nh = r + p.ph - p.kh + 1, nw = c + p.pw - p.kw + 1;
      const I i0 = nh <= 0 ? 0 : (nh + p.sh - 1) / p.sh;
      const I j0 = nw <= 0 ? 0 : (nw + p.sw - 1) / p.sw;
      I i1 = (r + p.ph) / p.sh, j1 = (c + p.pw) / p.sw;
      i1 = i1 < p.oh - 1 ? i1 : p.oh - 1;
      j1 = j1 < p.ow - 1 ? j1 : p.ow - 1;
      for (I i = i0; i <= i1; ++i)
        for (I j = j0; j <= j1; ++j)
          if (ap[i * p.ow + j] == cell) acc += Load(dyp[i * p.ow + j]);
    } else {
      // Window rows i with i * sh - ph + a * dh == r, i ascending (a descending).
      for (I a = p.kh - 1; a >= 0; --a) {
        const I ni = r + p.ph - a * p.dh;
        if (ni < 0 || ni % p.sh != 0) continue;
        const I i = ni / p.sh;
        if (i >= p.oh) continue;
        for (I b = p.kw - 1; b >= 0; --b) {
          const I nj = c + p.pw - b * p.dw;
          if (nj < 0 || nj % p.sw != 0) continue;
          const I j = nj / p.sw;
          if (j >= p.ow) continue;
          if (ap[i * p.ow + j] == cell) acc += Load(dyp[i * p.ow + j]);
        }
      }
    }
    dx[t] = Store<T>(acc);
  }
}

template <typename I, typename T>
void MaxPoolGradRun(dg::KernelContext& ctx, const Pool& p, cudaStream_t s) {
  const int64_t windows = p.planes * p.oh * p.ow, cells = p.planes * p.h * p.w;
  I* at = ctx.workspace<I>(static_cast<size_t>(windows > 0 ? windows : 1));
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  if (windows > 0) {
    LaunchMaxPool<I, T, I, true>(p, windows, s, x, nullptr, at);
    CheckLaunch(ctx);
  }
  const unsigned blocks = sizeof(I) == 4 ? Blocks32(cells) : Blocks(cells);
  MaxPoolGradKernel<I, T><<<blocks, kThreads, 0, s>>>(
      at, static_cast<const T*>(ctx.input(1).raw_data()),
      static_cast<T*>(ctx.output(0).raw_data()), GeoOf<I>(p));
  CheckLaunch(ctx);
}

template <typename T>
void MaxPool2dGrad(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.input(1));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  cudaStream_t s = Prepare(ctx);
  if (Fits32(p)) {
    MaxPoolGradRun<int32_t, T>(ctx, p, s);
  } else {
    MaxPoolGradRun<int64_t, T>(ctx, p, s);
  }
}
DG_KERNEL("MaxPool2dGrad", "cuda", MaxPool2dGrad, float, double, half, bf16);

// ------------------------------------------------------------ average pools
// AvgPool2d (PyTorch's divisor rules, count_include_pad) and
// AdaptiveAvgPool2d: y(i, j) = sum of box(i, j) in double / count. The
// gradients gather, per input cell, dy(i, j) / count over the boxes that
// hold it, in row-major (i, j) order as the CPU adds them.

struct Box {
  int64_t h0, h1, w0, w1, count;
};

__host__ __device__ inline int64_t Min64(int64_t a, int64_t b) { return a < b ? a : b; }
__host__ __device__ inline int64_t Max64(int64_t a, int64_t b) { return a > b ? a : b; }

__device__ Box AvgBox(const Pool& p, int64_t i, int64_t j, bool include_pad) {
  Box b;
  const int64_t h0 = i * p.sh - p.ph, w0 = j * p.sw - p.pw;
  int64_t h1 = Min64(h0 + p.kh, p.h + p.ph_end), w1 = Min64(w0 + p.kw, p.w + p.pw_end);
  if (include_pad) {
    b.count = (h1 - h0) * (w1 - w0);
  } else {
    b.count = (Min64(h1, p.h) - Max64(h0, 0)) * (Min64(w1, p.w) - Max64(w0, 0));
  }
  b.h0 = Max64(h0, 0);
  b.h1 = Min64(h0 + p.kh, p.h);
  b.w0 = Max64(w0, 0);
  b.w1 = Min64(w0 + p.kw, p.w);
  return b;
}

__device__ Box AdaptiveBox(const Pool& p, int64_t i, int64_t j) {
  Box b;
  b.h0 = i * p.h / p.oh;
  b.h1 = ((i + 1) * p.h + p.oh - 1) / p.oh;
  b.w0 = j * p.w / p.ow;
  b.w1 = ((j + 1) * p.w + p.ow - 1) / p.ow;
  b.count = (b.h1 - b.h0) * (b.w1 - b.w0);
  return b;
}

template <bool kAdaptive>
__device__ Box BoxOf(const Pool& p, int64_t i, int64_t j, bool include_pad) {
  if constexpr (kAdaptive) {
    return AdaptiveBox(p, i, j);
  } else {
    return AvgBox(p, i, j, include_pad);
  }
}

template <bool kAdaptive, typename T>
__global__ void BoxMean(const T* x, T* y, Pool p, bool include_pad) {
  DGC_LOOP(t, p.planes * p.oh * p.ow) {
    const int64_t q = t / (p.oh * p.ow), o = t % (p.oh * p.ow);
    const T* xp = x + q * p.h * p.w;
    const Box b = BoxOf<kAdaptive>(p, o / p.ow, o % p.ow, include_pad);
    double sum = 0.0;
    for (int64_t a = b.h0; a < b.h1; ++a)
      for (int64_t c = b.w0; c < b.w1; ++c) sum += ToDouble(xp[a * p.w + c]);
    y[t] = FromDouble<T>(sum / static_cast<double>(b.count));
  }
}

// One warp per output, for boxes of dozens of cells (the global average
// pool: 7x7 or more per plane): lanes sum strided cells of the box in
// double, a fixed shuffle tree adds the lanes (the same bits every run),
// so a warp reads its box as a few coalesced rows instead of one thread
// walking it alone.
template <bool kAdaptive, typename T>
__global__ void BoxMeanWarp(const T* x, T* y, Pool p, bool include_pad) {
  const int64_t total = p.planes * p.oh * p.ow;
  const int lane = threadIdx.x & 31;
  const int64_t first = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) >> 5;
  const int64_t step = (static_cast<int64_t>(blockDim.x) * gridDim.x) >> 5;
  for (int64_t t = first; t < total; t += step) {  // the same t in every lane of a warp
    const int64_t q = t / (p.oh * p.ow), o = t % (p.oh * p.ow);
    const T* xp = x + q * p.h * p.w;
    const Box b = BoxOf<kAdaptive>(p, o / p.ow, o % p.ow, include_pad);
    const int64_t bw = b.w1 - b.w0, cells = (b.h1 - b.h0) * bw;
    double sum = 0.0;
    for (int64_t k = lane; k < cells; k += 32)
      sum += ToDouble(xp[(b.h0 + k / bw) * p.w + b.w0 + k % bw]);
    for (int off = 16; off > 0; off >>= 1) sum += __shfl_down_sync(0xffffffffu, sum, off);
    if (lane == 0) y[t] = FromDouble<T>(sum / static_cast<double>(b.count));
  }
}

template <bool kAdaptive, typename T>
__global__ void BoxMeanGrad(const T* dy, T* dx, Pool p, bool include_pad) {
  DGC_LOOP(t, p.planes * p.h * p.w) {
    const int64_t q = t / (p.h * p.w), cell = t % (p.h * p.w);
    const int64_t r = cell / p.w, c = cell % p.w;
    const T* dyp = dy + q * p.oh * p.ow;
    // Output rows/cols whose boxes may hold (r, c).
    int64_t i0 = 0, i1 = p.oh, j0 = 0, j1 = p.ow;
    if constexpr (!kAdaptive) {
      // i * sh - ph <= r < i * sh - ph + kh (a superset: boxes are checked below).
      const int64_t nh = r + p.ph - p.kh, nw = c + p.pw - p.kw;
      i0 = nh < 0 ? 0 : nh / p.sh + 1;
      i1 = Min64(p.oh, (r + p.ph) / p.sh + 1);
      j0 = nw < 0 ? 0 : nw / p.sw + 1;
      j1 = Min64(p.ow, (c + p.pw) / p.sw + 1);
    }
    using A = Acc<T>;
    A acc = A(0);
    for (int64_t i = i0; i < i1; ++i) {
      for (int64_t j = j0; j < j1; ++j) {
        const Box b = BoxOf<kAdaptive>(p, i, j, include_pad);
        if (r >= b.h0 && r < b.h1 && c >= b.w0 && c < b.w1)
          acc += Load(dyp[i * p.ow + j]) / static_cast<A>(b.count);
      }
    }
    dx[t] = Store<T>(acc);
  }
}

template <typename T>
__global__ void GlobalAvgGrad(const T* dy, T* dx, int32_t n, FastDiv per_plane, int64_t count) {
  using A = Acc<T>;
  for (int32_t t = static_cast<int32_t>(blockIdx.x * blockDim.x + threadIdx.x); t < n;
       t += static_cast<int32_t>(blockDim.x * gridDim.x))
    dx[t] = Store<T>(Load(dy[per_plane.Div(static_cast<uint32_t>(t))]) / static_cast<A>(count));
}

Pool ReadAvg(const dg::KernelContext& ctx, const dg::TensorRef& x, const dg::TensorRef& pooled,
             bool windowed) {
  DG_CHECK(x.ndim() == 4 && pooled.ndim() == 4, DG_INTERNAL, ctx.op_name(),
           ": expected 4-D tensors");
  Pool p;
  p.planes = x.dim(0) * x.dim(1);
  p.h = x.dim(2);
  p.w = x.dim(3);
  p.oh = pooled.dim(2);
  p.ow = pooled.dim(3);
  if (windowed) {
    ReadPair(ctx, "kernel_size", {}, &p.kh, &p.kw);
    ReadPair(ctx, "strides", ctx.ints("kernel_size"), &p.sh, &p.sw);
    ReadPads(ctx, &p);
  }
  return p;
}

template <bool kAdaptive, typename T>
void AvgForward(dg::KernelContext& ctx) {
  const Pool p = ReadAvg(ctx, ctx.input(0), ctx.output(0), !kAdaptive);
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  const bool include_pad = kAdaptive ? false : ctx.b("count_include_pad");
  const T* x = static_cast<const T*>(ctx.input(0).raw_data());
  T* y = static_cast<T*>(ctx.output(0).raw_data());
  cudaStream_t s = Prepare(ctx);
  // Cells per box: about h w / (oh ow) for the adaptive pool, kh kw else.
  const int64_t box = kAdaptive ? p.h * p.w / (p.oh * p.ow) : p.kh * p.kw;
  if (box >= 32 && n <= (int64_t{1} << 40)) {
    BoxMeanWarp<kAdaptive, T><<<Blocks(n * 32), kThreads, 0, s>>>(x, y, p, include_pad);
  } else {
    BoxMean<kAdaptive, T><<<Blocks(n), kThreads, 0, s>>>(x, y, p, include_pad);
  }
  CheckLaunch(ctx);
}

template <bool kAdaptive, typename T>
void AvgBackward(dg::KernelContext& ctx) {
  const Pool p = ReadAvg(ctx, ctx.input(0), ctx.input(1), !kAdaptive);
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  const bool include_pad = kAdaptive ? false : ctx.b("count_include_pad");
  const T* dy = static_cast<const T*>(ctx.input(1).raw_data());
  T* dx = static_cast<T*>(ctx.output(0).raw_data());
  cudaStream_t s = Prepare(ctx);
  if (kAdaptive && p.oh == 1 && p.ow == 1 && n < (int64_t{1} << 30)) {
    // The global average pool's gradient: dy of the cell's plane / (h w),
    // the value BoxMeanGrad gives (0 + dy / count), with one 32-bit
    // multiply-high division per cell instead of its box search.
    GlobalAvgGrad<T><<<Blocks32(n), kThreads, 0, s>>>(dy, dx, static_cast<int32_t>(n),
                                                      FastDiv(static_cast<uint32_t>(p.h * p.w)),
                                                      p.h * p.w);
  } else {
    BoxMeanGrad<kAdaptive, T><<<Blocks(n), kThreads, 0, s>>>(dy, dx, p, include_pad);
  }
  CheckLaunch(ctx);
}

template <typename T>
void AvgPool2d(dg::KernelContext& ctx) { AvgForward<false, T>(ctx); }
template <typename T>
void AvgPool2dGrad(dg::KernelContext& ctx) { AvgBackward<false, T>(ctx); }
template <typename T>
void AdaptiveAvgPool2d(dg::KernelContext& ctx) { AvgForward<true, T>(ctx); }
template <typename T>
void AdaptiveAvgPool2dGrad(dg::KernelContext& ctx) { AvgBackward<true, T>(ctx); }
DG_KERNEL("AvgPool2d", "cuda", AvgPool2d, float, double, half, bf16);
DG_KERNEL("AvgPool2dGrad", "cuda", AvgPool2dGrad, float, double, half, bf16);
DG_KERNEL("AdaptiveAvgPool2d", "cuda", AdaptiveAvgPool2d, float, double, half, bf16);
DG_KERNEL("AdaptiveAvgPool2dGrad", "cuda", AdaptiveAvgPool2dGrad, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
