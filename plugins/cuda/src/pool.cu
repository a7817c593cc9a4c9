// MaxPool2d, MaxPool2dIndices and MaxPool2dGrad on cuda over NCHW tensors,
// with cpu_eigen's semantics (pool.cc; PyTorch's): padded cells never win,
// NaN wins over numbers, ties go to the first cell in row-major window
// order. The gradient is gathered, not scattered: each input cell sums the
// dy of the windows whose maximum it is, in the CPU's window order, so the
// result is deterministic and matches the CPU's accumulation order.
#include <cmath>
#include <cstdint>
#include <vector>

#include "elementwise.cuh"

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

// In-plane index of the maximum of window (i, j), -1 for an empty window.
template <typename T>
__device__ int64_t ArgMaxWindow(const T* xp, const Pool& p, int64_t i, int64_t j) {
  int64_t best = -1;
  Acc<T> best_v = 0;
  for (int64_t a = 0; a < p.kh; ++a) {
    const int64_t r = i * p.sh - p.ph + a * p.dh;
    if (r < 0 || r >= p.h) continue;
    for (int64_t b = 0; b < p.kw; ++b) {
      const int64_t c = j * p.sw - p.pw + b * p.dw;
      if (c < 0 || c >= p.w) continue;
      const Acc<T> v = Load(xp[r * p.w + c]);
      if (best < 0 || v > best_v || (v != v && best_v == best_v)) {
        best = r * p.w + c;
        best_v = v;
      }
    }
  }
  return best;
}

template <typename T, bool kIndices>
__global__ void MaxPoolKernel(const T* x, T* y, int64_t* idx, Pool p) {
  DGC_LOOP(t, p.planes * p.oh * p.ow) {
    const int64_t q = t / (p.oh * p.ow), o = t % (p.oh * p.ow);
    const T* xp = x + q * p.h * p.w;
    const int64_t at = ArgMaxWindow(xp, p, o / p.ow, o % p.ow);
    if constexpr (kIndices) {
      idx[t] = at;
    } else {
      y[t] = at >= 0 ? xp[at] : Store<T>(static_cast<Acc<T>>(NAN));  // an empty window: the shape rules exclude it
    }
  }
}

template <typename T>
void MaxPool2d(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.output(0));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  MaxPoolKernel<T, false><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      nullptr, p);
  CheckLaunch(ctx);
}
DG_KERNEL("MaxPool2d", "cuda", MaxPool2d, float, double, half, bf16);

template <typename T>
void MaxPool2dIndices(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.output(0));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  MaxPoolKernel<T, true><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), nullptr,
      static_cast<int64_t*>(ctx.output(0).raw_data()), p);
  CheckLaunch(ctx);
}
DG_KERNEL("MaxPool2dIndices", "cuda", MaxPool2dIndices, float, double, half, bf16);

// dx[cell] = sum of dy[i, j] over the windows (i, j) whose maximum is the
// cell, in row-major (i, j) order.
template <typename T>
__global__ void MaxPoolGradKernel(const T* x, const T* dy, T* dx, Pool p) {
  DGC_LOOP(t, p.planes * p.h * p.w) {
    const int64_t q = t / (p.h * p.w), cell = t % (p.h * p.w);
    const int64_t r = cell / p.w, c = cell % p.w;
    const T* xp = x + q * p.h * p.w;
    const T* dyp = dy + q * p.oh * p.ow;
    Acc<T> acc = 0;  // 16-bit floats sum in float, rounded once
    // Window rows i with i * sh - ph + a * dh == r, i ascending (a descending).
    for (int64_t a = p.kh - 1; a >= 0; --a) {
      const int64_t ni = r + p.ph - a * p.dh;
      if (ni < 0 || ni % p.sh != 0) continue;
      const int64_t i = ni / p.sh;
      if (i >= p.oh) continue;
      for (int64_t b = p.kw - 1; b >= 0; --b) {
        const int64_t nj = c + p.pw - b * p.dw;
        if (nj < 0 || nj % p.sw != 0) continue;
        const int64_t j = nj / p.sw;
        if (j >= p.ow) continue;
        if (ArgMaxWindow(xp, p, i, j) == cell) acc += Load(dyp[i * p.ow + j]);
      }
    }
    dx[t] = Store<T>(acc);
  }
}

template <typename T>
void MaxPool2dGrad(dg::KernelContext& ctx) {
  const Pool p = ReadPool(ctx, ctx.input(0), ctx.input(1));
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  MaxPoolGradKernel<T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()),
      static_cast<const T*>(ctx.input(1).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      p);
  CheckLaunch(ctx);
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
  BoxMean<kAdaptive, T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(0).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      p, include_pad);
  CheckLaunch(ctx);
}

template <bool kAdaptive, typename T>
void AvgBackward(dg::KernelContext& ctx) {
  const Pool p = ReadAvg(ctx, ctx.input(0), ctx.input(1), !kAdaptive);
  const int64_t n = ctx.output(0).numel();
  if (n == 0) return;
  const bool include_pad = kAdaptive ? false : ctx.b("count_include_pad");
  BoxMeanGrad<kAdaptive, T><<<Blocks(n), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(ctx.input(1).raw_data()), static_cast<T*>(ctx.output(0).raw_data()),
      p, include_pad);
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
