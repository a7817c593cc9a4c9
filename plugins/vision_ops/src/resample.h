// Resampling geometry shared by the CPU kernels (resample.cc) and the CUDA
// kernels (cuda/resample.cu) of Interpolate and GridSample: the plans read
// from an op's attributes, the output-to-source coordinate maps and the
// interpolation weights. Every function marked VISION_HD compiles for host
// and device alike, so both backends sample exactly the same points.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"

#ifdef __CUDACC__
#define VISION_HD __host__ __device__ inline
#else
#define VISION_HD inline __attribute__((always_inline))
#endif

namespace vision {
namespace resample {

// ------------------------------------------------------------ Interpolate

enum Mode : int { kNearest = 0, kNearestExact = 1, kLinear = 2, kCubic = 3 };

constexpr int kMaxTaps = 4;  // bicubic: 4 source cells per axis
constexpr int kAxes = 3;     // spatial axes, padded to (D, H, W)

// How one spatial axis maps output positions to source coordinates.
struct Axis {
  int64_t in = 1, out = 1;
  double scale_factor = 0.0;  // > 0: the caller's factor; 0: size was given
  bool align_corners = false;
  // PyTorch's CPU nearest kernel of 4-D inputs (2 spatial axes) copies an
  // axis whose output size equals its input size and reads dst / 2 when the
  // output size doubles; its 3-D and 5-D kernels have no such shortcuts.
  bool nearest_shortcuts = false;
  // Its nearest kernels compute a float64 input's source index in float64
  // (floored after a rounding to float32), a float32 input's in float32.
  bool nearest_float64 = false;
};

// Everything an Interpolate / InterpolateGrad kernel needs. Inputs of rank
// 3 and 4 are viewed as rank 5 with leading spatial axes of size 1.
struct InterpPlan {
  int mode = kNearest;
  int64_t planes = 0;  // N * C
  Axis axis[kAxes];    // (D, H, W)
  VISION_HD int64_t in_numel() const {
    return axis[0].in * axis[1].in * axis[2].in;
  }
};

// `plan` for an input of dtype float64 (`float64`) or float32 (sets
// Axis::nearest_float64).
inline InterpPlan WithInputPrecision(InterpPlan plan, bool float64) {
  for (Axis& a : plan.axis) a.nearest_float64 = float64;
  return plan;
}

// `plan` for InterpolateGrad. PyTorch's nearest backward kernels keep the
// copy and dst / 2 shortcuts for every rank and compute the source index in
// float32 for every dtype, so its 3-D / 5-D nearest gradient is not the
// adjoint of its own forward; the gradient follows the backward kernels
// (torch's values), the forward the forward kernels.
inline InterpPlan ForNearestGradient(InterpPlan plan) {
  for (Axis& a : plan.axis) {
    a.nearest_shortcuts = true;
    a.nearest_float64 = false;
  }
  return plan;
}

// Validates the attributes against x's shape and builds the plan; throws
// DG_INVALID_ARGUMENT naming the offending values (shape rules call it, so
// the kernels only ever see valid plans). Defined in resample.cc.
InterpPlan ReadInterpPlan(const dg::AttrReader& attrs,
                          const std::vector<int64_t>& x_shape);

// The output shape of Interpolate for x_shape under `plan`.
std::vector<int64_t> InterpOutputShape(const InterpPlan& plan,
                                       const std::vector<int64_t>& x_shape);

// Keys' bicubic convolution with A = -0.75 (PyTorch's value): the weight
// of a cell at distance |x| <= 1 and 1 < |x| < 2.
constexpr double kCubicA = -0.75;
VISION_HD double CubicNear(double x) {
  return ((kCubicA + 2.0) * x - (kCubicA + 3.0)) * x * x + 1.0;
}
VISION_HD double CubicFar(double x) {
  return ((kCubicA * x - 5.0 * kCubicA) * x + 8.0 * kCubicA) * x -
         4.0 * kCubicA;
}

VISION_HD int64_t ClampIndex(int64_t i, int64_t n) {
  return i < 0 ? 0 : (i >= n ? n - 1 : i);
}

// Continuous source coordinate of output position `dst` (linear and cubic
// modes): align_corners maps the corner cells' centres onto each other;
// otherwise half-pixel centres, scaled by 1/scale_factor when a factor was
// given and by in/out when a size was. Linear clamps negatives to 0.
VISION_HD double SourceCoord(const Axis& a, int64_t dst, bool cubic) {
  if (a.align_corners) {
    if (a.out == 1) return 0.0;
    return static_cast<double>(dst) * static_cast<double>(a.in - 1) /
           static_cast<double>(a.out - 1);
  }
  const double src =
      a.scale_factor > 0.0
          ? (static_cast<double>(dst) + 0.5) / a.scale_factor - 0.5
          : static_cast<double>(2 * dst + 1) * static_cast<double>(a.in) /
                    static_cast<double>(2 * a.out) -
                0.5;
  return (!cubic && src < 0.0) ? 0.0 : src;
}

// Nearest source cell as PyTorch's CPU kernels compute it. For a float32
// input in float32: scale = float(1 / scale_factor) when a factor was
// given, else float(in) / float(out); "nearest" (the legacy rule) reads
// floorf(float(dst) * scale), "nearest-exact" floorf(float((dst + 0.5) *
// scale)). For a float64 input (Axis::nearest_float64) the scale and the
// product are float64, rounded to float32 before the floor. Clamped to the
// last cell. The roundings are part of the contract (33 / 2.2 floors to 14
// in float64, to 15 in torch). The legacy shortcuts of 4-D inputs are
// Axis::nearest_shortcuts.
VISION_HD int64_t NearestIndex(const Axis& a, int64_t dst, bool exact) {
  if (!exact && a.nearest_shortcuts) {
    if (a.out == a.in) return dst;
    if (a.out == 2 * a.in) return dst / 2;
  }
  if (a.nearest_float64) {  // float64 scale and product, floored in float32
    const double s = a.scale_factor > 0.0 ? 1.0 / a.scale_factor
                                          : static_cast<double>(a.in) /
                                                static_cast<double>(a.out);
    const double pos = (static_cast<double>(dst) + (exact ? 0.5 : 0.0)) * s;
    const int64_t i = static_cast<int64_t>(floorf(static_cast<float>(pos)));
    return i < a.in - 1 ? i : a.in - 1;
  }
  const float scale =
      a.scale_factor > 0.0
          ? static_cast<float>(1.0 / a.scale_factor)
          : static_cast<float>(a.in) / static_cast<float>(a.out);
  // (dst + 0.5) is a double in torch's code: the product is rounded to
  // float32 only when floorf takes it
  const float pos =
      exact ? static_cast<float>((static_cast<double>(dst) + 0.5) *
                                 static_cast<double>(scale))
            : static_cast<float>(dst) * scale;
  const int64_t i = static_cast<int64_t>(floorf(pos));
  return i < a.in - 1 ? i : a.in - 1;
}

// The source cells and weights output position `dst` reads along axis `a`.
// Fills all kMaxTaps slots (unused ones: cell 0, weight 0) and returns how
// many the mode uses. In the linear modes (and the legacy nearest mode of
// 4-D inputs, Axis::nearest_shortcuts) an axis whose output size equals its
// input size is the identity, as PyTorch's CPU kernels.
VISION_HD int AxisTaps(const Axis& a, int mode, int64_t dst, int64_t* idx,
                       double* w) {
  for (int k = 0; k < kMaxTaps; ++k) {
    idx[k] = 0;
    w[k] = 0.0;
  }
  const bool copy =
      a.in == a.out &&
      ((mode == kNearest && a.nearest_shortcuts) || mode == kLinear);
  if (copy || mode == kNearest || mode == kNearestExact) {
    idx[0] = copy ? dst : NearestIndex(a, dst, mode == kNearestExact);
    w[0] = 1.0;
    return 1;
  }
  const double src = SourceCoord(a, dst, mode == kCubic);
  int64_t i0 = static_cast<int64_t>(floor(src));
  if (i0 > a.in - 1) i0 = a.in - 1;
  double t = src - static_cast<double>(i0);
  t = t < 0.0 ? 0.0 : (t > 1.0 ? 1.0 : t);
  if (mode == kLinear) {
    idx[0] = i0;
    idx[1] = i0 + (i0 < a.in - 1 ? 1 : 0);
    w[0] = 1.0 - t;
    w[1] = t;
    return 2;
  }
  w[0] = CubicFar(t + 1.0);
  w[1] = CubicNear(t);
  w[2] = CubicNear(1.0 - t);
  w[3] = CubicFar(2.0 - t);
  for (int k = 0; k < 4; ++k) idx[k] = ClampIndex(i0 - 1 + k, a.in);
  return 4;
}

// ------------------------------------------------------------- GridSample
//
// x is [N, C, H, W] (2 spatial axes) or [N, C, D, H, W] (3); the grid is
// [N, Ho, Wo, 2] holding (x, y) or [N, Do, Ho, Wo, 3] holding (x, y, z):
// component 0 runs along W, 1 along H, 2 along D. A 4-D call is the 5-D
// one with D = Do = 1 and a D axis that always reads cell 0 with weight 1.

enum GridMode : int { kGridBilinear = 0, kGridNearest = 1, kGridBicubic = 2 };
enum GridPad : int { kPadZeros = 0, kPadBorder = 1, kPadReflection = 2 };

// Taps of one point at most: bicubic 4 x 4 (trilinear needs 8).
constexpr int kGridTaps = 16;

struct GridPlan {
  int64_t n = 0, c = 0;
  int64_t size[kAxes] = {1, 1, 1};  // input (D, H, W)
  int64_t out[kAxes] = {1, 1, 1};   // output (Do, Ho, Wo)
  int dims = 2;                     // spatial axes: 2 or 3
  int mode = kGridBilinear;
  int pad = kPadZeros;
  bool align_corners = false;
  VISION_HD int64_t points() const { return out[0] * out[1] * out[2]; }
  VISION_HD int64_t plane() const { return size[0] * size[1] * size[2]; }
};

// Which mode, padding and rank a grid function runs: read from the plan
// (DynamicGrid: the CUDA kernels) or fixed at compile time (StaticGrid:
// the CPU kernels instantiate every combination, so the per-point code has
// no branches on them and its tap loops unroll).
struct DynamicGrid {
  VISION_HD static int mode(const GridPlan& p) { return p.mode; }
  VISION_HD static int pad(const GridPlan& p) { return p.pad; }
  VISION_HD static int dims(const GridPlan& p) { return p.dims; }
};

template <int M, int P, int D>
struct StaticGrid {
  VISION_HD static constexpr int mode(const GridPlan&) { return M; }
  VISION_HD static constexpr int pad(const GridPlan&) { return P; }
  VISION_HD static constexpr int dims(const GridPlan&) { return D; }
};

// Taps per point of spec S (the stride of a CPU tap cache).
template <typename S>
VISION_HD constexpr int GridTapCount(const GridPlan& p) {
  return S::mode(p) == kGridNearest
             ? 1
             : (S::mode(p) == kGridBicubic ? 16 : (S::dims(p) == 3 ? 8 : 4));
}

// Validates x [N, C, H, W] / [N, C, D, H, W], the grid and the attributes.
// Defined in resample.cc.
GridPlan ReadGridPlan(const dg::AttrReader& attrs,
                      const std::vector<int64_t>& x_shape,
                      const std::vector<int64_t>& grid_shape);

// Grid value in [-1, 1] to a pixel coordinate along an axis of `size`
// cells; *mult receives the derivative.
VISION_HD double Unnormalize(double g, int64_t size, bool align, double* mult) {
  if (align) {
    *mult = static_cast<double>(size - 1) / 2.0;
    return (g + 1.0) / 2.0 * static_cast<double>(size - 1);
  }
  *mult = static_cast<double>(size) / 2.0;
  return ((g + 1.0) * static_cast<double>(size) - 1.0) / 2.0;
}

// Border padding: clip to [0, size - 1]; *mult becomes 0 at and beyond the
// limits (PyTorch's convention) and is kept inside.
VISION_HD double ClipBorder(double c, int64_t size, double* mult) {
  const double hi = static_cast<double>(size - 1);
  if (c <= 0.0) {
    *mult = 0.0;
    return 0.0;
  }
  if (c >= hi) {
    *mult = 0.0;
    return hi;
  }
  return c;
}

// Reflection padding of a coordinate (PyTorch's reflect_coordinates): the
// axis is mirrored about its ends, the corner centres (align_corners) or
// the outer edges of the corner cells; *mult changes sign on odd flips.
// The caller clips the result to [0, size - 1] afterwards.
VISION_HD double ReflectCoord(double c, int64_t size, bool align,
                              double* mult) {
  const double lo = align ? 0.0 : -0.5;
  const double span = align ? static_cast<double>(size - 1)
                            : static_cast<double>(size);
  if (span <= 0.0) {
    *mult = 0.0;
    return 0.0;
  }
  double in = c - lo;
  if (in < 0.0) {
    *mult = -*mult;
    in = -in;
  }
  const double flips = floor(in / span);
  const double extra = fmod(in, span);
  if (fmod(flips, 2.0) == 0.0) return extra + lo;
  *mult = -*mult;
  return span - extra + lo;
}

// Reflection padding of an integer cell index (the taps of bicubic): the
// index mirrored into [0, size).
VISION_HD int64_t ReflectIndex(int64_t i, int64_t size, bool align) {
  const int64_t period = align ? 2 * (size - 1) : 2 * size;
  if (period <= 0) return 0;
  int64_t m = i % period;
  if (m < 0) m += period;
  if (align) return m < size ? m : period - m;
  return m < size ? m : period - 1 - m;
}

// True for finite values (inf - inf and NaN - NaN are NaN); the same
// expression on host and device.
VISION_HD bool Finite(double v) { return v - v == 0.0; }

// Keys' cubic weights (A = -0.75) of taps -1, 0, 1, 2 at fraction t and
// their derivatives with respect to t.
VISION_HD void CubicTaps(double t, double* w, double* dw) {
  const double a = kCubicA;
  w[0] = CubicFar(t + 1.0);
  w[1] = CubicNear(t);
  w[2] = CubicNear(1.0 - t);
  w[3] = CubicFar(2.0 - t);
  // d/dx of CubicNear: 3(A+2)x^2 - 2(A+3)x; of CubicFar: 3Ax^2 - 10Ax + 8A.
  const double u0 = t + 1.0, u1 = t, u2 = 1.0 - t, u3 = 2.0 - t;
  dw[0] = (3.0 * a * u0 - 10.0 * a) * u0 + 8.0 * a;
  dw[1] = (3.0 * (a + 2.0) * u1 - 2.0 * (a + 3.0)) * u1;
  dw[2] = -((3.0 * (a + 2.0) * u2 - 2.0 * (a + 3.0)) * u2);
  dw[3] = -((3.0 * a * u3 - 10.0 * a) * u3 + 8.0 * a);
}

// What one grid component reads along its axis: up to 4 cells with their
// weights and the weights' derivatives with respect to the pixel
// coordinate; `mult` is d(pixel coordinate)/d(grid value) (0 where
// clipping is active). `valid` is false when the point must sample 0 (a
// non-finite value; every tap in the zero padding).
struct AxisSample {
  int n;
  int64_t idx[4];
  double w[4], dw[4];
  bool in[4];
  double mult;
  bool valid;
};

VISION_HD AxisSample UnitAxis() {
  AxisSample s;
  s.n = 1;
  for (int k = 0; k < 4; ++k) {
    s.idx[k] = 0;
    s.w[k] = s.dw[k] = 0.0;
    s.in[k] = false;
  }
  s.w[0] = 1.0;
  s.in[0] = true;
  s.mult = 0.0;
  s.valid = true;
  return s;
}

template <typename S>
VISION_HD AxisSample AxisSampleOf(const GridPlan& p, int64_t size, double g) {
  AxisSample s = UnitAxis();
  s.in[0] = false;
  s.w[0] = 0.0;
  s.valid = Finite(g);
  if (!s.valid) return s;
  double c = Unnormalize(g, size, p.align_corners, &s.mult);
  const double n = static_cast<double>(size);
  if (S::mode(p) != kGridBicubic) {
    // The padding acts on the coordinate.
    if (S::pad(p) == kPadReflection) {
      if (!Finite(c)) {
        s.valid = false;
        return s;
      }
      c = ReflectCoord(c, size, p.align_corners, &s.mult);
      c = ClipBorder(c, size, &s.mult);
    } else if (S::pad(p) == kPadBorder) {
      c = ClipBorder(c, size, &s.mult);
    }
    // Beyond one cell outside, every neighbour is padding (and the int64
    // casts below stay in range).
    s.valid = c > -2.0 && c < n + 1.0;
    if (!s.valid) return s;
    if (S::mode(p) == kGridNearest) {
      // Halves round to even, as PyTorch's nearbyint.
      s.idx[0] = static_cast<int64_t>(nearbyint(c));
      s.w[0] = 1.0;
      s.in[0] = s.idx[0] >= 0 && s.idx[0] < size;
      return s;
    }
    const double f0 = floor(c);
    const double f = c - f0;
    s.n = 2;
    s.idx[0] = static_cast<int64_t>(f0);
    s.idx[1] = s.idx[0] + 1;
    s.w[0] = 1.0 - f;
    s.w[1] = f;
    s.dw[0] = -1.0;
    s.dw[1] = 1.0;
    for (int k = 0; k < 2; ++k) s.in[k] = s.idx[k] >= 0 && s.idx[k] < size;
    return s;
  }
  // Bicubic: the 4 cells floor(c) - 1 .. floor(c) + 2 of the unpadded
  // coordinate; the padding acts on each cell index (PyTorch and ONNX).
  if (S::pad(p) == kPadZeros) {
    s.valid = c > -3.0 && c < n + 2.0;
    if (!s.valid) return s;
  } else if (S::pad(p) == kPadBorder) {
    // Further out every tap reads the edge cell: the value is constant.
    if (!(c > -3.0)) {
      c = -3.0;
      s.mult = 0.0;
    } else if (!(c < n + 2.0)) {
      c = n + 2.0;
      s.mult = 0.0;
    }
  } else {
    if (!Finite(c)) {
      s.valid = false;
      return s;
    }
    // The reflected taps repeat with this period: shift far points back.
    const double period = p.align_corners ? 2.0 * (n - 1.0) : 2.0 * n;
    if (period > 0.0 && (c < -period || c > 2.0 * period)) {
      c -= floor(c / period) * period;
    } else if (period <= 0.0) {
      c = 0.0;
      s.mult = 0.0;
    }
  }
  const double f0 = floor(c);
  CubicTaps(c - f0, s.w, s.dw);
  s.n = 4;
  for (int k = 0; k < 4; ++k) {
    const int64_t i = static_cast<int64_t>(f0) - 1 + k;
    if (S::pad(p) == kPadZeros) {
      s.idx[k] = i;
      s.in[k] = i >= 0 && i < size;
    } else {
      s.idx[k] = S::pad(p) == kPadBorder ? ClampIndex(i, size)
                                     : ReflectIndex(i, size, p.align_corners);
      s.in[k] = true;
    }
  }
  return s;
}

// One grid point: what it reads along (D, H, W).
struct GridPoint {
  AxisSample a[kAxes];
  bool valid;
};

// The point `np` (a flat index over N * points) of `grid`.
template <typename S, typename T>
VISION_HD GridPoint GridPointAt(const GridPlan& p, const T* grid, int64_t np) {
  GridPoint q;
  q.valid = true;
  const int dims = S::dims(p);
  const T* g = grid + np * dims;
  for (int a = 0; a < kAxes; ++a) {
    if (a < kAxes - dims) {
      q.a[a] = UnitAxis();
      continue;
    }
    // Axis W reads component 0, H component 1, D component 2.
    q.a[a] = AxisSampleOf<S>(p, p.size[a], static_cast<double>(g[kAxes - 1 - a]));
    q.valid = q.valid && q.a[a].valid;
  }
  return q;
}

// Calls fn(offset in the plane, weight, i, j, k) for every tap of `q`
// inside the image (i, j, k: the tap on the D, H and W axes). Nothing for an
// invalid point.
template <typename F>
VISION_HD void ForEachGridTap(const GridPlan& p, const GridPoint& q, F fn) {
  if (!q.valid) return;
  const AxisSample &d = q.a[0], &h = q.a[1], &w = q.a[2];
  for (int i = 0; i < d.n; ++i) {
    if (!d.in[i]) continue;
    for (int j = 0; j < h.n; ++j) {
      if (!h.in[j]) continue;
      const int64_t row = (d.idx[i] * p.size[1] + h.idx[j]) * p.size[2];
      const double wdh = d.w[i] * h.w[j];
      for (int k = 0; k < w.n; ++k) {
        if (!w.in[k]) continue;
        fn(row + w.idx[k], wdh * w.w[k], i, j, k);
      }
    }
  }
}

// The taps of `q` as (offset, weight) pairs in off[0 .. GridTapCount), the
// unused slots (offset 0, weight 0).
template <typename S>
VISION_HD void FlattenTaps(const GridPlan& p, const GridPoint& q, int64_t* off,
                           double* w) {
  const int n = GridTapCount<S>(p);
  for (int t = 0; t < n; ++t) {
    off[t] = 0;
    w[t] = 0.0;
  }
  int t = 0;
  ForEachGridTap(p, q, [&](int64_t o, double wt, int, int, int) {
    if (t < n) {
      off[t] = o;
      w[t] = wt;
      ++t;
    }
  });
}

// The sample of `plane` at point `q`.
template <typename T>
VISION_HD double SampleAt(const GridPlan& p, const GridPoint& q,
                          const T* plane) {
  double acc = 0.0;
  ForEachGridTap(p, q, [&](int64_t o, double wt, int, int, int) {
    acc += wt * static_cast<double>(plane[o]);
  });
  return acc;
}

// Writes dgrid of grid point `np`: per component, the channel sum of dy
// times the derivative of the sample with respect to the pixel coordinate,
// times d(coordinate)/d(grid value) (0 in nearest mode, for invalid points
// and where clipping is active).
template <typename S, typename T>
VISION_HD void GridPointGrad(const GridPlan& p, const T* x, const T* grid,
                             const T* dy, int64_t np, T* dgrid) {
  const int64_t points = p.points(), plane = p.plane();
  const int64_t n = np / points, qi = np % points;
  const int dims = S::dims(p);
  const GridPoint q = GridPointAt<S>(p, grid, np);
  double g[kAxes] = {0.0, 0.0, 0.0};
  if (S::mode(p) != kGridNearest && q.valid) {
    // The taps once: their offsets and, per axis, the derivative of their
    // weight along that axis (the product of the other axes' weights).
    const AxisSample &d = q.a[0], &h = q.a[1], &w = q.a[2];
    int64_t off[kGridTaps];
    double slope[kAxes][kGridTaps];
    int nt = 0;
    ForEachGridTap(p, q, [&](int64_t o, double, int i, int j, int k) {
      if (nt >= kGridTaps) return;
      off[nt] = o;
      slope[0][nt] = d.dw[i] * h.w[j] * w.w[k];
      slope[1][nt] = d.w[i] * h.dw[j] * w.w[k];
      slope[2][nt] = d.w[i] * h.w[j] * w.dw[k];
      ++nt;
    });
    const int first = kAxes - dims;
    for (int64_t c = 0; c < p.c; ++c) {
      const T* xp = x + (n * p.c + c) * plane;
      const double gy = static_cast<double>(dy[(n * p.c + c) * points + qi]);
      for (int t = 0; t < nt; ++t) {
        const double v = gy * static_cast<double>(xp[off[t]]);
        for (int a = first; a < kAxes; ++a) g[a] += v * slope[a][t];
      }
    }
  }
  for (int k = 0; k < dims; ++k) {
    const int a = kAxes - 1 - k;
    dgrid[np * dims + k] =
        static_cast<T>(q.valid ? g[a] * q.a[a].mult : 0.0);
  }
}

}  // namespace resample
}  // namespace vision
