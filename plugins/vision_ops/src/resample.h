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
#define VISION_HD inline
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

// Nearest source cell: floor(dst * scale) ("nearest", PyTorch's legacy
// rule) or floor((dst + 0.5) * scale) ("nearest-exact"), clamped to the
// last cell. With a size, scale = in / out is applied in exact integer
// arithmetic. Legacy nearest doubling an axis reads dst / 2 whatever the
// factor (PyTorch's CPU rule).
VISION_HD int64_t NearestIndex(const Axis& a, int64_t dst, bool exact) {
  int64_t i;
  if (!exact && a.out == 2 * a.in) {
    i = dst / 2;
  } else if (a.scale_factor > 0.0) {
    const double shifted = static_cast<double>(dst) + (exact ? 0.5 : 0.0);
    i = static_cast<int64_t>(floor(shifted / a.scale_factor));
  } else if (exact) {
    i = (2 * dst + 1) * a.in / (2 * a.out);
  } else {
    i = dst * a.in / a.out;
  }
  return i < a.in - 1 ? i : a.in - 1;
}

// The source cells and weights output position `dst` reads along axis `a`.
// Fills all kMaxTaps slots (unused ones: cell 0, weight 0) and returns how
// many the mode uses. In the legacy nearest and the linear modes an axis
// whose output size equals its input size is the identity (as PyTorch's CPU
// kernels; its nearest-exact and bicubic kernels have no such rule).
VISION_HD int AxisTaps(const Axis& a, int mode, int64_t dst, int64_t* idx,
                       double* w) {
  for (int k = 0; k < kMaxTaps; ++k) {
    idx[k] = 0;
    w[k] = 0.0;
  }
  const bool copy = a.in == a.out && (mode == kNearest || mode == kLinear);
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

struct GridPlan {
  int64_t n = 0, c = 0, h = 0, w = 0, ho = 0, wo = 0;
  bool nearest = false;  // mode: nearest or bilinear
  bool border = false;   // padding_mode: border or zeros
  bool align_corners = false;
};

// Validates x [N, C, H, W] and grid [N, Ho, Wo, 2] and the attributes.
// Defined in resample.cc.
GridPlan ReadGridPlan(const dg::AttrReader& attrs,
                      const std::vector<int64_t>& x_shape,
                      const std::vector<int64_t>& grid_shape);

// One grid point in pixel coordinates: (ix, iy) and d(ix)/d(gx),
// d(iy)/d(gy) (the unnormalisation factor, 0 where border clipping is
// active). `valid` is false for non-finite points and points so far
// outside that no cell is touched: they sample 0 and get no gradient.
struct GridPoint {
  double ix, iy, mx, my;
  bool valid;
};

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

// Border padding: clip to [0, size - 1]; the derivative is 0 at and beyond
// the limits (PyTorch's convention).
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

// True for finite values (inf - inf and NaN - NaN are NaN); the same
// expression on host and device.
VISION_HD bool Finite(double v) { return v - v == 0.0; }

VISION_HD GridPoint MapGridPoint(const GridPlan& p, double gx, double gy) {
  GridPoint q;
  q.ix = q.iy = q.mx = q.my = 0.0;
  q.valid = Finite(gx) && Finite(gy);
  if (!q.valid) return q;
  q.ix = Unnormalize(gx, p.w, p.align_corners, &q.mx);
  q.iy = Unnormalize(gy, p.h, p.align_corners, &q.my);
  if (p.border) {
    q.ix = ClipBorder(q.ix, p.w, &q.mx);
    q.iy = ClipBorder(q.iy, p.h, &q.my);
  }
  // Beyond one cell outside, every neighbour is padding (and the int64
  // casts below stay in range).
  q.valid = q.ix > -2.0 && q.ix < static_cast<double>(p.w) + 1.0 &&
            q.iy > -2.0 && q.iy < static_cast<double>(p.h) + 1.0;
  return q;
}

// The cells a grid point reads: up to 4 (bilinear) or 1 (nearest, rounding
// half to even as PyTorch's nearbyint), with the bilinear fractions
// (fx, fy). Cells outside the image get weight 0 and index 0, so callers
// never read out of range.
struct GridTaps {
  int64_t offset[4];  // h * W + w inside the plane
  double w[4];
  double fx, fy;
  bool inside[4];
};

VISION_HD bool InImage(const GridPlan& p, int64_t y, int64_t x) {
  return y >= 0 && y < p.h && x >= 0 && x < p.w;
}

VISION_HD GridTaps PointTaps(const GridPlan& p, const GridPoint& q) {
  GridTaps t;
  for (int k = 0; k < 4; ++k) {
    t.offset[k] = 0;
    t.w[k] = 0.0;
    t.inside[k] = false;
  }
  t.fx = t.fy = 0.0;
  if (!q.valid) return t;
  if (p.nearest) {
    const int64_t x = static_cast<int64_t>(nearbyint(q.ix));
    const int64_t y = static_cast<int64_t>(nearbyint(q.iy));
    if (InImage(p, y, x)) {
      t.offset[0] = y * p.w + x;
      t.w[0] = 1.0;
      t.inside[0] = true;
    }
    return t;
  }
  const int64_t x0 = static_cast<int64_t>(floor(q.ix));
  const int64_t y0 = static_cast<int64_t>(floor(q.iy));
  t.fx = q.ix - static_cast<double>(x0);
  t.fy = q.iy - static_cast<double>(y0);
  // Corners in the order (y0,x0), (y0,x1), (y1,x0), (y1,x1).
  for (int k = 0; k < 4; ++k) {
    const int64_t y = y0 + k / 2, x = x0 + k % 2;
    if (!InImage(p, y, x)) continue;
    t.offset[k] = y * p.w + x;
    t.w[k] = (k % 2 ? t.fx : 1.0 - t.fx) * (k / 2 ? t.fy : 1.0 - t.fy);
    t.inside[k] = true;
  }
  return t;
}

// d(sample)/d(ix), d(sample)/d(iy) of a bilinear sample of `plane` at the
// point whose taps are `t` (padding cells read as 0).
template <typename T>
VISION_HD void BilinearSlopes(const GridTaps& t, const T* plane, double* dix,
                              double* diy) {
  double v[4];
  for (int k = 0; k < 4; ++k) {
    v[k] = t.inside[k] ? static_cast<double>(plane[t.offset[k]]) : 0.0;
  }
  *dix = (v[1] - v[0]) * (1.0 - t.fy) + (v[3] - v[2]) * t.fy;
  *diy = (v[2] - v[0]) * (1.0 - t.fx) + (v[3] - v[1]) * t.fx;
}

// The taps of grid point `np` (a flat index over N * Ho * Wo).
template <typename T>
VISION_HD GridTaps GridTapsAt(const GridPlan& p, const T* grid, int64_t np) {
  return PointTaps(p, MapGridPoint(p, static_cast<double>(grid[2 * np]),
                                   static_cast<double>(grid[2 * np + 1])));
}

// The sample of `plane` at the point whose taps are `t`.
template <typename T>
VISION_HD double SampleAt(const GridTaps& t, const T* plane) {
  double acc = 0.0;
  for (int k = 0; k < 4; ++k) {
    if (t.inside[k]) acc += t.w[k] * static_cast<double>(plane[t.offset[k]]);
  }
  return acc;
}

// Writes dgrid of grid point `np` (n, q): the channel sum of dy times the
// slopes of the bilinear sample, times the unnormalisation factor (0 in
// nearest mode, for invalid points and where border clipping is active).
template <typename T>
VISION_HD void GridPointGrad(const GridPlan& p, const T* x, const T* grid,
                             const T* dy, int64_t np, T* dgrid) {
  const int64_t points = p.ho * p.wo, plane = p.h * p.w;
  const int64_t n = np / points, q = np % points;
  const GridPoint pt = MapGridPoint(p, static_cast<double>(grid[2 * np]),
                                    static_cast<double>(grid[2 * np + 1]));
  double gx = 0.0, gy = 0.0;
  if (!p.nearest && pt.valid) {
    const GridTaps t = PointTaps(p, pt);
    for (int64_t c = 0; c < p.c; ++c) {
      double sx, sy;
      BilinearSlopes(t, x + (n * p.c + c) * plane, &sx, &sy);
      const double g = static_cast<double>(dy[(n * p.c + c) * points + q]);
      gx += g * sx;
      gy += g * sy;
    }
  }
  dgrid[2 * np] = static_cast<T>(gx * pt.mx);
  dgrid[2 * np + 1] = static_cast<T>(gy * pt.my);
}

}  // namespace resample
}  // namespace vision
