// 2-D pooling kernels over NCHW tensors (schemas and geometry rules in
// dragon_core/src/ops/pool.cc). Every kernel works plane by plane — one
// (n, c) slice of H x W — and runs the planes in parallel; a gradient
// kernel accumulates into its own plane in a fixed order, so results never
// depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"
#include "widen_call.h"

namespace cpu_eigen {
namespace {

// Window geometry of one call, read from the attributes and the shapes the
// core has already validated and allocated.
struct Pool2d {
  int64_t planes = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t ph_end = 0, pw_end = 0;  // bottom / right padding
};

// A per-axis attribute of 1 or 2 values (`fallback` when empty).
void ReadPair(const dg::KernelContext& ctx, const char* name,
              const std::vector<int64_t>& fallback, int64_t* a, int64_t* b) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty()) v = fallback;
  DG_CHECK(!v.empty(), DG_INTERNAL, ctx.op_name(), ": attribute ", name,
           " is empty");
  *a = v[0];
  *b = v.size() > 1 ? v[1] : v[0];
}

// `x` is the pooled input, `pooled` the tensor of the pooled shape.
Pool2d ReadPool2d(const dg::KernelContext& ctx, const dg::TensorRef& x,
                  const dg::TensorRef& pooled, bool windowed, bool dilated) {
  DG_CHECK(x.ndim() == 4 && pooled.ndim() == 4, DG_INTERNAL, ctx.op_name(),
           ": expected 4-D tensors");
  Pool2d p;
  p.planes = x.dim(0) * x.dim(1);
  p.h = x.dim(2);
  p.w = x.dim(3);
  p.oh = pooled.dim(2);
  p.ow = pooled.dim(3);
  if (windowed) {
    const std::vector<int64_t> k = ctx.ints("kernel_size");
    ReadPair(ctx, "kernel_size", {}, &p.kh, &p.kw);
    ReadPair(ctx, "strides", k, &p.sh, &p.sw);
    ReadPair(ctx, "pads", {}, &p.ph, &p.pw);
    const std::vector<int64_t> pads = ctx.ints("pads");
    p.ph_end = pads.size() == 4 ? pads[2] : p.ph;  // [top, left, bottom, right]
    p.pw_end = pads.size() == 4 ? pads[3] : p.pw;
    if (dilated) ReadPair(ctx, "dilations", {}, &p.dh, &p.dw);
  }
  return p;
}

// The window cells of output position `o` along one axis: the first input
// coordinate `start`, step `d`, and the range [j0, j1) of kernel taps that
// fall inside [0, len).
struct Taps {
  int64_t start, j0, j1;
};

inline Taps WindowTaps(int64_t o, int64_t s, int64_t p, int64_t k, int64_t d,
                       int64_t len) {
  Taps t;
  t.start = o * s - p;
  t.j0 = t.start >= 0 ? 0 : (-t.start + d - 1) / d;
  const int64_t last = len - 1 - t.start;  // largest offset inside the input
  t.j1 = last < 0 ? 0 : std::min(k, last / d + 1);
  if (t.j1 < t.j0) t.j1 = t.j0;
  return t;
}

// In-plane index (h * W + w) of the maximum of window (i, j): the first
// cell in row-major window order holding it; NaN beats every number.
template <typename T>
inline int64_t ArgMaxWindow(const T* x, const Pool2d& p, int64_t i, int64_t j) {
  const Taps th = WindowTaps(i, p.sh, p.ph, p.kh, p.dh, p.h);
  const Taps tw = WindowTaps(j, p.sw, p.pw, p.kw, p.dw, p.w);
  int64_t best = -1;
  T best_v = T(0);
  for (int64_t a = th.j0; a < th.j1; ++a) {
    const int64_t row = (th.start + a * p.dh) * p.w;
    for (int64_t b = tw.j0; b < tw.j1; ++b) {
      const int64_t at = row + tw.start + b * p.dw;
      const T v = x[at];
      if (best < 0 || v > best_v || (std::isnan(v) && !std::isnan(best_v))) {
        best = at;
        best_v = v;
      }
    }
  }
  return best;
}

// True when every window lies inside the input (no padding, and ceil_mode
// added no partial window): the kernels then skip the per-window clipping.
inline bool AllInside(const Pool2d& p) {
  return p.ph == 0 && p.pw == 0 && p.oh > 0 && p.ow > 0 &&
         (p.oh - 1) * p.sh + (p.kh - 1) * p.dh < p.h &&
         (p.ow - 1) * p.sw + (p.kw - 1) * p.dw < p.w;
}

// The window of a call whose windows all lie inside the input, by value
// (so the compiler keeps it in registers while the kernels write), with
// the kernel size fixed at compile time when KH, KW > 0.
template <int KH, int KW>
struct Win {
  int64_t kh, kw, dh, dw, w;  // w: plane width
  int64_t rows() const { return KH > 0 ? KH : kh; }
  int64_t cols() const { return KW > 0 ? KW : kw; }
  int64_t at(int64_t a, int64_t b) const { return a * dh * w + b * dw; }
};

// Runs fn(Win<...>) with the common kernel sizes specialised.
template <typename Fn>
void WithWin(const Pool2d& p, Fn&& fn) {
  if (p.kh == 2 && p.kw == 2) {
    fn(Win<2, 2>{2, 2, p.dh, p.dw, p.w});
  } else if (p.kh == 3 && p.kw == 3) {
    fn(Win<3, 3>{3, 3, p.dh, p.dw, p.w});
  } else {
    fn(Win<0, 0>{p.kh, p.kw, p.dh, p.dw, p.w});
  }
}

// The maximum of the inside window whose first cell is x[0]; *nan is set
// when the window holds a NaN (the value is then left to ArgMaxWindow).
// Free of data-dependent branches (`v > m ? v : m` is one maxss): on real
// data every comparison is a coin flip, and a mispredicted branch per
// cell costs more than the whole window.
template <typename T, int KH, int KW>
inline T MaxInside(const T* x, const Win<KH, KW> wn, bool* nan) {
  T m = x[0];
  bool any_nan = false;
  for (int64_t a = 0; a < wn.rows(); ++a) {
    for (int64_t b = 0; b < wn.cols(); ++b) {
      const T v = x[wn.at(a, b)];
      m = v > m ? v : m;
      any_nan |= v != v;
    }
  }
  *nan = any_nan;
  return m;
}

// The offset from x[0] of the first cell of the inside window holding m
// (not NaN), found without branches by a backward scan: the last match
// kept is the first in window order.
template <typename T, int KH, int KW>
inline int64_t FirstOf(const T* x, const Win<KH, KW> wn, T m) {
  int64_t best = 0;
  for (int64_t a = wn.rows() - 1; a >= 0; --a) {
    for (int64_t b = wn.cols() - 1; b >= 0; --b) {
      const int64_t at = wn.at(a, b);
      const int64_t hit = x[at] == m;
      best += (at - best) & -hit;
    }
  }
  return best;
}

// ArgMaxWindow (an in-plane index) for window (i, j) of an AllInside call.
template <typename T, int KH, int KW>
inline int64_t ArgMaxInside(const T* xp, const Pool2d& p, const Win<KH, KW> wn,
                            int64_t i, int64_t j) {
  const int64_t at0 = i * p.sh * p.w + j * p.sw;
  bool nan;
  const T m = MaxInside(xp + at0, wn, &nan);
  return nan ? ArgMaxWindow(xp, p, i, j) : at0 + FirstOf(xp + at0, wn, m);
}

// Calls fn(i * ow + j, index of the max of window (i, j)) for every window
// of one plane, in row-major order.
template <typename T, typename Fn>
inline void ForEachArgMax(const T* xp, const Pool2d& p, bool inside, Fn&& fn) {
  if (!inside) {
    for (int64_t i = 0; i < p.oh; ++i) {
      for (int64_t j = 0; j < p.ow; ++j) {
        fn(i * p.ow + j, ArgMaxWindow(xp, p, i, j));
      }
    }
    return;
  }
  WithWin(p, [&](const auto wn) {
    for (int64_t i = 0; i < p.oh; ++i) {
      for (int64_t j = 0; j < p.ow; ++j) {
        fn(i * p.ow + j, ArgMaxInside(xp, p, wn, i, j));
      }
    }
  });
}

// Runs fn(plane) for every plane in parallel.
template <typename Fn>
void ForPlanes(const Pool2d& p, int64_t cost_per_plane, Fn&& fn) {
  ParallelFor(
      p.planes,
      [&](int64_t begin, int64_t end) {
        for (int64_t q = begin; q < end; ++q) fn(q);
      },
      std::max<int64_t>(1, cost_per_plane));
}

template <typename T>
void MaxPool2d(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
  const Pool2d p = ReadPool2d(ctx, xt, yt, true, true);
  if (yt.numel() == 0) return;
  const T* x = xt.data<const T>();
  T* y = yt.data<T>();
  const bool inside = AllInside(p);
  ForPlanes(p, p.oh * p.ow * p.kh * p.kw, [&](int64_t q) {
    const T* xp = x + q * p.h * p.w;
    T* yp = y + q * p.oh * p.ow;
    if (inside) {
      WithWin(p, [&](const auto wn) {
        for (int64_t i = 0; i < p.oh; ++i) {
          for (int64_t j = 0; j < p.ow; ++j) {
            bool nan;
            const T m = MaxInside(xp + i * p.sh * p.w + j * p.sw, wn, &nan);
            yp[i * p.ow + j] = nan ? xp[ArgMaxWindow(xp, p, i, j)] : m;
          }
        }
      });
      return;
    }
    ForEachArgMax(xp, p, false, [&](int64_t o, int64_t at) {
      DG_CHECK(at >= 0, DG_INTERNAL, "MaxPool2d: empty window");
      yp[o] = xp[at];
    });
  });
}

template <typename T>
void MaxPool2dIndices(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
  const Pool2d p = ReadPool2d(ctx, xt, yt, true, true);
  if (yt.numel() == 0) return;
  const T* x = xt.data<const T>();
  int64_t* y = yt.data<int64_t>();
  const bool inside = AllInside(p);
  ForPlanes(p, p.oh * p.ow * p.kh * p.kw, [&](int64_t q) {
    const T* xp = x + q * p.h * p.w;
    int64_t* yp = y + q * p.oh * p.ow;
    ForEachArgMax(xp, p, inside, [&](int64_t o, int64_t at) { yp[o] = at; });
  });
}

template <typename T>
void MaxPool2dGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), dyt = ctx.input(1);
  const dg::TensorRef dxt = ctx.output(0);
  const Pool2d p = ReadPool2d(ctx, xt, dyt, true, true);
  if (dxt.numel() == 0) return;
  const T* x = xt.data<const T>();
  const T* dy = dyt.data<const T>();
  T* dx = dxt.data<T>();
  const bool inside = AllInside(p);
  // Disjoint windows (stride >= kernel, no dilation): each window's cells
  // are written whole (zeros and the one gradient), so only the cells no
  // window covers need zeroing first — none when the windows tile the plane.
  const bool disjoint = inside && p.dh == 1 && p.dw == 1 && p.sh >= p.kh &&
                        p.sw >= p.kw;
  const bool tiled = disjoint && p.sh == p.kh && p.sw == p.kw &&
                     p.oh * p.kh == p.h && p.ow * p.kw == p.w;
  ForPlanes(p, p.h * p.w + p.oh * p.ow * p.kh * p.kw, [&](int64_t q) {
    const T* xp = x + q * p.h * p.w;
    const T* dyp = dy + q * p.oh * p.ow;
    T* dxp = dx + q * p.h * p.w;
    if (!tiled) std::fill(dxp, dxp + p.h * p.w, T(0));
    if (disjoint) {
      WithWin(p, [&](const auto wn) {
        for (int64_t i = 0; i < p.oh; ++i) {
          for (int64_t j = 0; j < p.ow; ++j) {
            // Zero the window's cells, then write g at its maximum.
            T* win = dxp + i * p.sh * p.w + j * p.sw;
            const int64_t at = ArgMaxInside(xp, p, wn, i, j);
            for (int64_t a = 0; a < wn.rows(); ++a) {
              for (int64_t b = 0; b < wn.cols(); ++b) win[wn.at(a, b)] = T(0);
            }
            dxp[at] = dyp[i * p.ow + j];
          }
        }
      });
      return;
    }
    ForEachArgMax(xp, p, inside, [&](int64_t o, int64_t at) {
      if (at >= 0) dxp[at] += dyp[o];
    });
  });
}

// Sum, in double, of the box [h0, h1) x [w0, w1) of a plane of width w.
template <typename T>
inline double BoxSum(const T* plane, int64_t w, int64_t h0, int64_t h1,
                     int64_t w0, int64_t w1) {
  double sum = 0.0;
  for (int64_t a = h0; a < h1; ++a) {
    const T* row = plane + a * w;
    for (int64_t b = w0; b < w1; ++b) sum += static_cast<double>(row[b]);
  }
  return sum;
}

// The box [h0, h1) x [w0, w1) of input cells that output (i, j) averages,
// and the count it divides by.
struct Box {
  int64_t h0, h1, w0, w1, count;
};

// Divisor of window (i, j) of an average pooling.
inline int64_t AvgDivisor(const Pool2d& p, int64_t i, int64_t j,
                          bool count_include_pad) {
  const int64_t h0 = i * p.sh - p.ph, w0 = j * p.sw - p.pw;
  int64_t h1 = std::min(h0 + p.kh, p.h + p.ph_end);
  int64_t w1 = std::min(w0 + p.kw, p.w + p.pw_end);
  if (count_include_pad) return (h1 - h0) * (w1 - w0);
  h1 = std::min(h1, p.h);
  w1 = std::min(w1, p.w);
  return (h1 - std::max<int64_t>(h0, 0)) * (w1 - std::max<int64_t>(w0, 0));
}

// Box of window (i, j) of an average pooling.
inline Box AvgBox(const Pool2d& p, int64_t i, int64_t j,
                  bool count_include_pad) {
  Box b;
  b.h0 = std::max<int64_t>(i * p.sh - p.ph, 0);
  b.h1 = std::min(i * p.sh - p.ph + p.kh, p.h);
  b.w0 = std::max<int64_t>(j * p.sw - p.pw, 0);
  b.w1 = std::min(j * p.sw - p.pw + p.kw, p.w);
  b.count = AvgDivisor(p, i, j, count_include_pad);
  return b;
}

// Bin [start, end) of output cell i out of `out` over an axis of `len`.
inline int64_t BinStart(int64_t i, int64_t len, int64_t out) {
  return i * len / out;
}
inline int64_t BinEnd(int64_t i, int64_t len, int64_t out) {
  return ((i + 1) * len + out - 1) / out;
}

// Box of output (i, j) of an adaptive average pooling.
inline Box AdaptiveBox(const Pool2d& p, int64_t i, int64_t j) {
  Box b;
  b.h0 = BinStart(i, p.h, p.oh);
  b.h1 = BinEnd(i, p.h, p.oh);
  b.w0 = BinStart(j, p.w, p.ow);
  b.w1 = BinEnd(j, p.w, p.ow);
  b.count = (b.h1 - b.h0) * (b.w1 - b.w0);
  return b;
}

// y (i, j) = mean of box(i, j) of x, for every plane.
template <typename T, typename BoxFn>
void BoxMean(const dg::TensorRef& xt, const dg::TensorRef& yt,
             const Pool2d& p, int64_t cost_per_plane, BoxFn&& box) {
  if (yt.numel() == 0) return;
  const T* x = xt.data<const T>();
  T* y = yt.data<T>();
  ForPlanes(p, cost_per_plane, [&](int64_t q) {
    const T* xp = x + q * p.h * p.w;
    T* yp = y + q * p.oh * p.ow;
    for (int64_t i = 0; i < p.oh; ++i) {
      for (int64_t j = 0; j < p.ow; ++j) {
        const Box b = box(i, j);
        yp[i * p.ow + j] = static_cast<T>(
            BoxSum(xp, p.w, b.h0, b.h1, b.w0, b.w1) /
            static_cast<double>(b.count));
      }
    }
  });
}

// The gradient of BoxMean: dy (i, j) / count is added to every cell of
// box(i, j), in row-major output order.
template <typename T, typename BoxFn>
void BoxMeanGrad(const dg::TensorRef& dyt, const dg::TensorRef& dxt,
                 const Pool2d& p, int64_t cost_per_plane, BoxFn&& box) {
  if (dxt.numel() == 0) return;
  const T* dy = dyt.data<const T>();
  T* dx = dxt.data<T>();
  ForPlanes(p, cost_per_plane, [&](int64_t q) {
    const T* dyp = dy + q * p.oh * p.ow;
    T* dxp = dx + q * p.h * p.w;
    std::fill(dxp, dxp + p.h * p.w, T(0));
    for (int64_t i = 0; i < p.oh; ++i) {
      for (int64_t j = 0; j < p.ow; ++j) {
        const Box b = box(i, j);
        const T g = dyp[i * p.ow + j] / static_cast<T>(b.count);
        for (int64_t a = b.h0; a < b.h1; ++a) {
          for (int64_t c = b.w0; c < b.w1; ++c) dxp[a * p.w + c] += g;
        }
      }
    }
  });
}

template <typename T>
void AvgPool2d(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
  const Pool2d p = ReadPool2d(ctx, xt, yt, true, false);
  const bool include_pad = ctx.b("count_include_pad");
  BoxMean<T>(xt, yt, p, p.oh * p.ow * p.kh * p.kw, [&](int64_t i, int64_t j) {
    return AvgBox(p, i, j, include_pad);
  });
}

template <typename T>
void AvgPool2dGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), dyt = ctx.input(1);
  const Pool2d p = ReadPool2d(ctx, xt, dyt, true, false);
  const bool include_pad = ctx.b("count_include_pad");
  BoxMeanGrad<T>(dyt, ctx.output(0), p, p.h * p.w + p.oh * p.ow * p.kh * p.kw,
                 [&](int64_t i, int64_t j) {
                   return AvgBox(p, i, j, include_pad);
                 });
}

template <typename T>
void AdaptiveAvgPool2d(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), yt = ctx.output(0);
  const Pool2d p = ReadPool2d(ctx, xt, yt, false, false);
  BoxMean<T>(xt, yt, p, p.h * p.w + p.oh * p.ow,
             [&](int64_t i, int64_t j) { return AdaptiveBox(p, i, j); });
}

template <typename T>
void AdaptiveAvgPool2dGrad(dg::KernelContext& ctx) {
  const dg::TensorRef xt = ctx.input(0), dyt = ctx.input(1);
  const Pool2d p = ReadPool2d(ctx, xt, dyt, false, false);
  BoxMeanGrad<T>(dyt, ctx.output(0), p, 2 * p.h * p.w + p.oh * p.ow,
                 [&](int64_t i, int64_t j) { return AdaptiveBox(p, i, j); });
}

}  // namespace

DG_KERNEL("MaxPool2d", "cpu", MaxPool2d, float, double, int8_t, uint8_t,
          int16_t, int32_t, int64_t);
DG_KERNEL("MaxPool2dIndices", "cpu", MaxPool2dIndices, float, double, int8_t,
          uint8_t, int16_t, int32_t, int64_t);
DG_KERNEL("MaxPool2dGrad", "cpu", MaxPool2dGrad, float, double);
DG_KERNEL("AvgPool2d", "cpu", AvgPool2d, float, double);
DG_KERNEL("AvgPool2dGrad", "cpu", AvgPool2dGrad, float, double);
DG_KERNEL("AdaptiveAvgPool2d", "cpu", AdaptiveAvgPool2d, float, double);
DG_KERNEL("AdaptiveAvgPool2dGrad", "cpu", AdaptiveAvgPool2dGrad, float, double);
// float16 / bfloat16: the float32 kernel on widened copies (widen_call.h).
CPU_EIGEN_WIDENED_KERNEL("MaxPool2d", MaxPool2d);
CPU_EIGEN_WIDENED_KERNEL("MaxPool2dIndices", MaxPool2dIndices);
CPU_EIGEN_WIDENED_KERNEL("MaxPool2dGrad", MaxPool2dGrad);
CPU_EIGEN_WIDENED_KERNEL("AvgPool2d", AvgPool2d);
CPU_EIGEN_WIDENED_KERNEL("AvgPool2dGrad", AvgPool2dGrad);
CPU_EIGEN_WIDENED_KERNEL("AdaptiveAvgPool2d", AdaptiveAvgPool2d);
CPU_EIGEN_WIDENED_KERNEL("AdaptiveAvgPool2dGrad", AdaptiveAvgPool2dGrad);

}  // namespace cpu_eigen
