// Conv3d, ConvTranspose3d and Conv3dBackpropFilter (schemas in
// dragon_core/src/ops/conv3d.cc): direct loops, fp32/fp64.
//
// The three ops are one sum over (n, window channel o, image channel c of
// o's group, tap k, window position p) of image[n, c, p*s - pad + k*dil] *
// filter[o, c_local, k] * window[n, o, p]: each op computes one of the
// three factors from the other two. The "image" is Conv3d's input and
// ConvTranspose3d's output; the "window" is Conv3d's output and
// ConvTranspose3d's input. Work is split so no two threads write the same
// element: by (n, o) for Conv3d, (n, group) for ConvTranspose3d and o for
// Conv3dBackpropFilter. A direct loop (no im2col/GEMM): correct everywhere,
// not tuned. Conv3d and ConvTranspose3d also run on int32 (quantized
// convolutions): exact sums wrapped to int32 (MulAdd).
#include <cstdint>
#include <vector>

#include "common.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

enum class Mode { kForward, kTranspose, kFilter };

struct Geo {
  int64_t N, Ic, Wc, groups;
  int64_t img[3], win[3], k[3];
  int64_t stride[3], dil[3], pad[3];
};

Geo ReadGeo(const dg::KernelContext& ctx, const std::vector<int64_t>& img,
            const std::vector<int64_t>& win, const std::vector<int64_t>& filt) {
  Geo g;
  const std::vector<int64_t> s = ctx.ints("strides"), d = ctx.ints("dilations"),
                             p = ctx.ints("pads");
  g.N = img[0];
  g.Ic = img[1];
  g.Wc = win[1];
  g.groups = ctx.i("groups");
  for (int i = 0; i < 3; ++i) {
    g.img[i] = img[2 + i];
    g.win[i] = win[2 + i];
    g.k[i] = filt[2 + i];
    g.stride[i] = s[i];
    g.dil[i] = d[i];
    g.pad[i] = p[i];
  }
  return g;
}

// Visits every (image offset, filter offset, window offset) triple of
// window channel `o` and batch `n` whose image position is inside.
template <typename Fn>
void ForTaps(const Geo& g, int64_t n, int64_t o, Fn&& fn) {
  const int64_t icg = g.Ic / g.groups, wcg = g.Wc / g.groups;
  const int64_t grp = o / wcg;
  const int64_t img_sp = g.img[0] * g.img[1] * g.img[2];
  const int64_t win_sp = g.win[0] * g.win[1] * g.win[2];
  const int64_t k_sp = g.k[0] * g.k[1] * g.k[2];
  for (int64_t cl = 0; cl < icg; ++cl) {
    const int64_t img_base = (n * g.Ic + grp * icg + cl) * img_sp;
    const int64_t f_base = (o * icg + cl) * k_sp;
    const int64_t w_base = (n * g.Wc + o) * win_sp;
    for (int64_t kd = 0; kd < g.k[0]; ++kd)
      for (int64_t kh = 0; kh < g.k[1]; ++kh)
        for (int64_t kw = 0; kw < g.k[2]; ++kw) {
          const int64_t f_at = f_base + (kd * g.k[1] + kh) * g.k[2] + kw;
          for (int64_t od = 0; od < g.win[0]; ++od) {
            const int64_t id = od * g.stride[0] - g.pad[0] + kd * g.dil[0];
            if (id < 0 || id >= g.img[0]) continue;
            for (int64_t oh = 0; oh < g.win[1]; ++oh) {
              const int64_t ih = oh * g.stride[1] - g.pad[1] + kh * g.dil[1];
              if (ih < 0 || ih >= g.img[1]) continue;
              for (int64_t ow = 0; ow < g.win[2]; ++ow) {
                const int64_t iw =
                    ow * g.stride[2] - g.pad[2] + kw * g.dil[2];
                if (iw < 0 || iw >= g.img[2]) continue;
                fn(img_base + (id * g.img[1] + ih) * g.img[2] + iw, f_at,
                   w_base + (od * g.win[1] + oh) * g.win[2] + ow);
              }
            }
          }
        }
  }
}

// acc + a * b; for int32 taken modulo 2^32 (uint32 arithmetic): the exact
// sum wrapped to two's complement, with no signed overflow.
template <typename T>
inline T MulAdd(T acc, T a, T b) {
  return acc + a * b;
}
inline int32_t MulAdd(int32_t acc, int32_t a, int32_t b) {
  return static_cast<int32_t>(static_cast<uint32_t>(acc) +
                              static_cast<uint32_t>(a) * static_cast<uint32_t>(b));
}

template <typename T>
void AddBias(const dg::KernelContext& ctx, T* y, int64_t n, int64_t c,
             int64_t spatial) {
  if (ctx.num_inputs() < 3) return;
  const T* b = ctx.input(2).data<const T>();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < c; ++j) {
      T* p = y + (i * c + j) * spatial;
      for (int64_t s = 0; s < spatial; ++s) p[s] = MulAdd(p[s], b[j], T(1));
    }
}

template <typename T>
void Conv3d(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), yt = ctx.output(0);
  const Geo g = ReadGeo(ctx, x.shape(), yt.shape(), w.shape());
  const T* xi = x.data<const T>();
  const T* wf = w.data<const T>();
  T* y = yt.data<T>();
  std::fill(y, y + yt.numel(), T(0));
  const int64_t win_sp = g.win[0] * g.win[1] * g.win[2];
  ParallelFor(
      g.N * g.Wc,
      [&](int64_t begin, int64_t end) {
        for (int64_t it = begin; it < end; ++it) {
          ForTaps(g, it / g.Wc, it % g.Wc, [&](int64_t i, int64_t f, int64_t o) {
            y[o] = MulAdd(y[o], xi[i], wf[f]);
          });
        }
      },
      std::max<int64_t>(1, win_sp * w.numel() / std::max<int64_t>(1, g.Wc)));
  AddBias<T>(ctx, y, g.N, g.Wc, win_sp);
}

template <typename T>
void ConvTranspose3d(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), yt = ctx.output(0);
  const Geo g = ReadGeo(ctx, yt.shape(), x.shape(), w.shape());
  const T* xw = x.data<const T>();
  const T* wf = w.data<const T>();
  T* y = yt.data<T>();
  std::fill(y, y + yt.numel(), T(0));
  const int64_t wcg = g.Wc / g.groups;
  ParallelFor(
      g.N * g.groups,
      [&](int64_t begin, int64_t end) {
        for (int64_t it = begin; it < end; ++it) {
          const int64_t n = it / g.groups, grp = it % g.groups;
          for (int64_t o = grp * wcg; o < (grp + 1) * wcg; ++o) {
            ForTaps(g, n, o, [&](int64_t i, int64_t f, int64_t p) {
              y[i] = MulAdd(y[i], xw[p], wf[f]);
            });
          }
        }
      },
      std::max<int64_t>(1, x.numel() * w.numel() / std::max<int64_t>(1, g.N * g.groups)));
  AddBias<T>(ctx, y, g.N, g.Ic, g.img[0] * g.img[1] * g.img[2]);
}

template <typename T>
void Conv3dBackpropFilter(dg::KernelContext& ctx) {
  const dg::TensorRef x = ctx.input(0), dy = ctx.input(1), dwt = ctx.output(0);
  const Geo g = ReadGeo(ctx, x.shape(), dy.shape(), dwt.shape());
  const T* xi = x.data<const T>();
  const T* d = dy.data<const T>();
  T* dw = dwt.data<T>();
  std::fill(dw, dw + dwt.numel(), T(0));
  ParallelFor(
      g.Wc,
      [&](int64_t begin, int64_t end) {
        for (int64_t o = begin; o < end; ++o) {
          for (int64_t n = 0; n < g.N; ++n) {
            ForTaps(g, n, o, [&](int64_t i, int64_t f, int64_t p) {
              dw[f] += xi[i] * d[p];
            });
          }
        }
      },
      std::max<int64_t>(1, dy.numel() * dwt.numel() / std::max<int64_t>(1, g.Wc)));
}

}  // namespace

DG_KERNEL("Conv3d", "cpu", Conv3d, float, double, int32_t);
DG_KERNEL("ConvTranspose3d", "cpu", ConvTranspose3d, float, double, int32_t);
DG_KERNEL("Conv3dBackpropFilter", "cpu", Conv3dBackpropFilter, float, double);
// float16 / bfloat16: the float32 kernel on widened copies (widen_call.h).
CPU_EIGEN_WIDENED_KERNEL("Conv3d", Conv3d);
CPU_EIGEN_WIDENED_KERNEL("ConvTranspose3d", ConvTranspose3d);
CPU_EIGEN_WIDENED_KERNEL("Conv3dBackpropFilter", Conv3dBackpropFilter);

}  // namespace cpu_eigen
