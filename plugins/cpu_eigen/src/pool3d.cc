// MaxPool3d, AvgPool3d, AvgPool3dGrad (schemas and semantics in
// dragon_core/src/ops/pool3d.cc): direct loops over (n, c) volumes, in
// parallel across volumes.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "common.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

struct Pool3 {
  int64_t in[3], out[3], k[3], s[3], d[3], pb[3], pe[3];
  int64_t volumes;
};

std::vector<int64_t> Triple(const dg::KernelContext& ctx, const char* name,
                            const std::vector<int64_t>& fallback) {
  std::vector<int64_t> v = ctx.has(name) ? ctx.ints(name) : fallback;
  if (v.empty()) v = fallback;
  if (v.size() == 1) v.assign(3, v[0]);
  return v;
}

Pool3 ReadPool3(const dg::KernelContext& ctx, const std::vector<int64_t>& x,
                const std::vector<int64_t>& y, bool dilated) {
  Pool3 g;
  const std::vector<int64_t> k = Triple(ctx, "kernel_size", {});
  const std::vector<int64_t> s = Triple(ctx, "strides", k);
  const std::vector<int64_t> d =
      dilated ? Triple(ctx, "dilations", {1, 1, 1}) : std::vector<int64_t>{1, 1, 1};
  std::vector<int64_t> p = ctx.ints("pads");
  if (p.size() == 1) p.assign(3, p[0]);
  if (p.size() == 3) p.insert(p.end(), p.begin(), p.end());
  g.volumes = x[0] * x[1];
  for (int i = 0; i < 3; ++i) {
    g.in[i] = x[2 + i];
    g.out[i] = y[2 + i];
    g.k[i] = k[i];
    g.s[i] = s[i];
    g.d[i] = d[i];
    g.pb[i] = p[i];
    g.pe[i] = p[i + 3];
  }
  return g;
}

template <typename T>
bool Wins(T v, T best, bool have) {
  return !have || v > best || (v != v && best == best);
}

template <typename T>
void MaxPool3d(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
  const Pool3 g = ReadPool3(ctx, xt.shape(), yt.shape(), true);
  const T* x = xt.data<const T>();
  T* y = yt.data<T>();
  int64_t* idx = ctx.output(1).data<int64_t>();
  const int64_t in_vol = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_vol = g.out[0] * g.out[1] * g.out[2];
  ParallelFor(
      g.volumes,
      [&](int64_t begin, int64_t end) {
        for (int64_t v = begin; v < end; ++v) {
          const T* xv = x + v * in_vol;
          for (int64_t od = 0; od < g.out[0]; ++od)
            for (int64_t oh = 0; oh < g.out[1]; ++oh)
              for (int64_t ow = 0; ow < g.out[2]; ++ow) {
                T best = T(0);
                int64_t at = -1;
                for (int64_t a = 0; a < g.k[0]; ++a) {
                  const int64_t id = od * g.s[0] - g.pb[0] + a * g.d[0];
                  if (id < 0 || id >= g.in[0]) continue;
                  for (int64_t b = 0; b < g.k[1]; ++b) {
                    const int64_t ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
                    if (ih < 0 || ih >= g.in[1]) continue;
                    for (int64_t c = 0; c < g.k[2]; ++c) {
                      const int64_t iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
                      if (iw < 0 || iw >= g.in[2]) continue;
                      const int64_t pos = (id * g.in[1] + ih) * g.in[2] + iw;
                      if (Wins(xv[pos], best, at >= 0)) {
                        best = xv[pos];
                        at = pos;
                      }
                    }
                  }
                }
                const int64_t o = v * out_vol + (od * g.out[1] + oh) * g.out[2] + ow;
                y[o] = best;
                idx[o] = at;
              }
        }
      },
      out_vol * g.k[0] * g.k[1] * g.k[2]);
}

// The divisor of window (od, oh, ow) and its clipped bounds.
struct Window {
  int64_t lo[3], hi[3];
  int64_t count;
};

Window AvgWindow(const Pool3& g, const int64_t o[3], bool include_pad) {
  Window w;
  int64_t padded_cells = 1, real_cells = 1;
  for (int i = 0; i < 3; ++i) {
    const int64_t start = o[i] * g.s[i] - g.pb[i];
    const int64_t end = std::min(start + g.k[i], g.in[i] + g.pe[i]);
    padded_cells *= end - start;
    w.lo[i] = std::max<int64_t>(start, 0);
    w.hi[i] = std::min(end, g.in[i]);
    real_cells *= w.hi[i] - w.lo[i];
  }
  w.count = include_pad ? padded_cells : real_cells;
  return w;
}

// Forward (kAdjoint false): y = window mean of x. Adjoint: dx += dy / count
// over the window.
template <typename T, bool kAdjoint>
void AvgPool(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0);
  const dg::TensorRef pooled = kAdjoint ? ctx.input(1) : ctx.output(0);
  const Pool3 g = ReadPool3(ctx, xt.shape(), pooled.shape(), false);
  const bool include_pad = ctx.b("count_include_pad");
  const int64_t in_vol = g.in[0] * g.in[1] * g.in[2];
  const int64_t out_vol = g.out[0] * g.out[1] * g.out[2];
  const T* src = kAdjoint ? ctx.input(1).data<const T>() : xt.data<const T>();
  T* dst = ctx.output(0).data<T>();
  if (kAdjoint) std::fill(dst, dst + ctx.output(0).numel(), T(0));
  ParallelFor(
      g.volumes,
      [&](int64_t begin, int64_t end) {
        for (int64_t v = begin; v < end; ++v) {
          int64_t o[3];
          for (o[0] = 0; o[0] < g.out[0]; ++o[0])
            for (o[1] = 0; o[1] < g.out[1]; ++o[1])
              for (o[2] = 0; o[2] < g.out[2]; ++o[2]) {
                const Window w = AvgWindow(g, o, include_pad);
                const int64_t oi =
                    v * out_vol + (o[0] * g.out[1] + o[1]) * g.out[2] + o[2];
                T acc = T(0);
                const T share = kAdjoint ? src[oi] / static_cast<T>(w.count) : T(0);
                for (int64_t a = w.lo[0]; a < w.hi[0]; ++a)
                  for (int64_t b = w.lo[1]; b < w.hi[1]; ++b)
                    for (int64_t c = w.lo[2]; c < w.hi[2]; ++c) {
                      const int64_t at = v * in_vol + (a * g.in[1] + b) * g.in[2] + c;
                      if (kAdjoint) {
                        dst[at] += share;
                      } else {
                        acc += src[at];
                      }
                    }
                if (!kAdjoint) dst[oi] = acc / static_cast<T>(w.count);
              }
        }
      },
      out_vol * g.k[0] * g.k[1] * g.k[2]);
}

template <typename T>
void AvgPool3d(dg::KernelContext& ctx) {
  AvgPool<T, false>(ctx);
}

template <typename T>
void AvgPool3dGrad(dg::KernelContext& ctx) {
  AvgPool<T, true>(ctx);
}

}  // namespace

DG_KERNEL("MaxPool3d", "cpu", MaxPool3d, float, double);
DG_KERNEL("AvgPool3d", "cpu", AvgPool3d, float, double);
DG_KERNEL("AvgPool3dGrad", "cpu", AvgPool3dGrad, float, double);
// float16 / bfloat16: the float32 kernel on widened copies (widen_call.h).
CPU_EIGEN_WIDENED_KERNEL("MaxPool3d", MaxPool3d);
CPU_EIGEN_WIDENED_KERNEL("AvgPool3d", AvgPool3d);
CPU_EIGEN_WIDENED_KERNEL("AvgPool3dGrad", AvgPool3dGrad);

}  // namespace cpu_eigen
