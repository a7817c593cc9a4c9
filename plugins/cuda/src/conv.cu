// Convolutions on cuda as direct kernels (NCHW): Conv2d, Conv2dBiasAct,
// ConvTranspose2d and Conv2dBackpropFilter with the schemas' definitions
// (dragon_core/src/ops/conv.cc): strides, pads (2 or 4 values), dilations,
// groups. One thread per output element gathers its sum in double: no
// atomics, deterministic. Correct on every geometry, but slow: the cuDNN
// kernels (cudnn.cu, a higher priority) run every call cuDNN's descriptors
// can describe; these run only the calls that cudnn.cu's supports()
// declines (cudnn_plan.h: bottom/right pads that change the output size,
// extents above 2^31-1, an empty extent), as explain() shows.
// float16/bfloat16 accumulate in the same double and round once.
#include <cstdint>
#include <string>
#include <vector>

#include "elementwise.cuh"

namespace dragon_cuda {
namespace {

struct Geom {
  int64_t n = 0, c = 0, h = 0, w = 0;      // input of the convolution
  int64_t o = 0, ho = 0, wo = 0;           // its output
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, pt = 0, pl = 0, dh = 1, dw = 1, groups = 1;
};

void ReadAttrs(const dg::KernelContext& ctx, Geom* g) {
  const std::vector<int64_t> s = ctx.ints("strides"), p = ctx.ints("pads"),
                             d = ctx.ints("dilations");
  DG_CHECK(s.size() == 2 && d.size() == 2 && (p.size() == 2 || p.size() == 4), DG_INVALID_ARGUMENT,
           ctx.op_name(), ": strides and dilations need 2 values, pads 2 or 4");
  g->sh = s[0];
  g->sw = s[1];
  g->dh = d[0];
  g->dw = d[1];
  g->pt = p[0];
  g->pl = p[1];
  g->groups = ctx.i("groups");
  DG_CHECK(g->groups >= 1, DG_INVALID_ARGUMENT, ctx.op_name(), ": groups must be >= 1");
}

// y[n, oo, i, j] = b[oo] + sum_{c, p, q} x[n, g*Cg + c, i*sh - pt + p*dh, j*sw - pl + q*dw]
//                                         * w[oo, c, p, q]
template <typename T>
__global__ void ConvKernel(const T* x, const T* w, const T* b, T* y, Geom g, bool relu) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  DGC_LOOP(t, g.n * g.o * g.ho * g.wo) {
    const int64_t j = t % g.wo, i = (t / g.wo) % g.ho, oo = (t / (g.wo * g.ho)) % g.o,
                  n = t / (g.wo * g.ho * g.o);
    const int64_t grp = oo / og;
    double acc = b ? ToDouble(b[oo]) : 0.0;
    for (int64_t c = 0; c < cg; ++c) {
      const T* xp = x + (n * g.c + grp * cg + c) * g.h * g.w;
      const T* wp = w + (oo * cg + c) * g.kh * g.kw;
      for (int64_t p = 0; p < g.kh; ++p) {
        const int64_t r = i * g.sh - g.pt + p * g.dh;
        if (r < 0 || r >= g.h) continue;
        for (int64_t q = 0; q < g.kw; ++q) {
          const int64_t col = j * g.sw - g.pl + q * g.dw;
          if (col < 0 || col >= g.w) continue;
          acc += ToDouble(xp[r * g.w + col]) * ToDouble(wp[p * g.kw + q]);
        }
      }
    }
    if (relu) acc = acc > 0.0 || acc != acc ? acc : 0.0;  // rounding keeps the sign
    y[t] = FromDouble<T>(acc);
  }
}

template <typename T>
void ConvRun(dg::KernelContext& ctx, bool relu) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  Geom g;
  ReadAttrs(ctx, &g);
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.o = y.dim(1), g.ho = y.dim(2), g.wo = y.dim(3);
  g.kh = w.dim(2), g.kw = w.dim(3);
  if (y.numel() == 0) return;
  const T* b = ctx.num_inputs() > 2 ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
  ConvKernel<T><<<Blocks(y.numel()), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(x.raw_data()), static_cast<const T*>(w.raw_data()), b,
      static_cast<T*>(y.raw_data()), g, relu);
  CheckLaunch(ctx);
}

template <typename T>
void Conv2d(dg::KernelContext& ctx) { ConvRun<T>(ctx, false); }
template <typename T>
void Conv2dBiasAct(dg::KernelContext& ctx) {
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT, ctx.op_name(),
           ": activation must be 'none' or 'relu', got '", act, "'");
  ConvRun<T>(ctx, act == "relu");
}
DG_KERNEL("Conv2d", "cuda", Conv2d, float, double, half, bf16);
DG_KERNEL("Conv2dBiasAct", "cuda", Conv2dBiasAct, float, double, half, bf16);

// dw[oo, c, p, q] = sum_{n, i, j} dy[n, oo, i, j] * x[n, g*Cg + c, i*sh - pt + p*dh, ...]
template <typename T>
__global__ void FilterGradKernel(const T* x, const T* dy, T* dw, Geom g) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  DGC_LOOP(t, g.o * cg * g.kh * g.kw) {
    const int64_t q = t % g.kw, p = (t / g.kw) % g.kh, c = (t / (g.kw * g.kh)) % cg,
                  oo = t / (g.kw * g.kh * cg);
    const int64_t ch = (oo / og) * cg + c;
    double acc = 0.0;
    for (int64_t n = 0; n < g.n; ++n) {
      const T* xp = x + (n * g.c + ch) * g.h * g.w;
      const T* gp = dy + (n * g.o + oo) * g.ho * g.wo;
      for (int64_t i = 0; i < g.ho; ++i) {
        const int64_t r = i * g.sh - g.pt + p * g.dh;
        if (r < 0 || r >= g.h) continue;
        for (int64_t j = 0; j < g.wo; ++j) {
          const int64_t col = j * g.sw - g.pl + q * g.dw;
          if (col < 0 || col >= g.w) continue;
          acc += ToDouble(gp[i * g.wo + j]) * ToDouble(xp[r * g.w + col]);
        }
      }
    }
    dw[t] = FromDouble<T>(acc);
  }
}

template <typename T>
void Conv2dBackpropFilter(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dw = ctx.output(0);
  Geom g;
  ReadAttrs(ctx, &g);
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.o = dy.dim(1), g.ho = dy.dim(2), g.wo = dy.dim(3);
  g.kh = dw.dim(2), g.kw = dw.dim(3);
  if (dw.numel() == 0) return;
  FilterGradKernel<T><<<Blocks(dw.numel()), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(x.raw_data()), static_cast<const T*>(dy.raw_data()),
      static_cast<T*>(dw.raw_data()), g);
  CheckLaunch(ctx);
}
DG_KERNEL("Conv2dBackpropFilter", "cuda", Conv2dBackpropFilter, float, double, half, bf16);

// Transposed: y[n, g*Og + o, yi, yj] = b + sum over (c in group, p, q) with
// yi = i*sh - pt + p*dh, yj = j*sw - pl + q*dw of x[n, c, i, j] * w[c, o, p, q].
// Here g.c/g.h/g.w describe x (the transposed conv's input), g.o/g.ho/g.wo y.
template <typename T>
__global__ void TransposeKernel(const T* x, const T* w, const T* b, T* y, Geom g) {
  const int64_t cg = g.c / g.groups, og = g.o / g.groups;
  DGC_LOOP(t, g.n * g.o * g.ho * g.wo) {
    const int64_t yj = t % g.wo, yi = (t / g.wo) % g.ho, oo = (t / (g.wo * g.ho)) % g.o,
                  n = t / (g.wo * g.ho * g.o);
    const int64_t grp = oo / og, o = oo % og;
    double acc = b ? ToDouble(b[oo]) : 0.0;
    for (int64_t c = grp * cg; c < (grp + 1) * cg; ++c) {
      const T* xp = x + (n * g.c + c) * g.h * g.w;
      const T* wp = w + (c * og + o) * g.kh * g.kw;
      for (int64_t p = 0; p < g.kh; ++p) {
        const int64_t ni = yi + g.pt - p * g.dh;
        if (ni < 0 || ni % g.sh != 0 || ni / g.sh >= g.h) continue;
        for (int64_t q = 0; q < g.kw; ++q) {
          const int64_t nj = yj + g.pl - q * g.dw;
          if (nj < 0 || nj % g.sw != 0 || nj / g.sw >= g.w) continue;
          acc += ToDouble(xp[(ni / g.sh) * g.w + nj / g.sw]) *
                 ToDouble(wp[p * g.kw + q]);
        }
      }
    }
    y[t] = FromDouble<T>(acc);
  }
}

template <typename T>
void ConvTranspose2d(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), y = ctx.output(0);
  Geom g;
  ReadAttrs(ctx, &g);
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.o = y.dim(1), g.ho = y.dim(2), g.wo = y.dim(3);
  g.kh = w.dim(2), g.kw = w.dim(3);
  if (y.numel() == 0) return;
  const T* b = ctx.num_inputs() > 2 ? static_cast<const T*>(ctx.input(2).raw_data()) : nullptr;
  TransposeKernel<T><<<Blocks(y.numel()), kThreads, 0, Prepare(ctx)>>>(
      static_cast<const T*>(x.raw_data()), static_cast<const T*>(w.raw_data()), b,
      static_cast<T*>(y.raw_data()), g);
  CheckLaunch(ctx);
}
DG_KERNEL("ConvTranspose2d", "cuda", ConvTranspose2d, float, double, half, bf16);

}  // namespace
}  // namespace dragon_cuda
