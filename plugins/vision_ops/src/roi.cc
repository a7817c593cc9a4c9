// CPU kernels of RoiAlign, RoiAlignGrad, RoiPool, RoiPoolGrad and
// RoiPoolGather (schemas, shape rules and roi validation in roi_ops.cc, the
// CUDA kernels in cuda/roi.cu). Every kernel validates the rois with
// CheckRois before its loops, so the batch indices it reads are in range.
//
// Threads: the forward kernels split the work into (roi, channel block)
// items, each computing its roi's sampling table once. The gradient
// kernels scatter into dx, where rois overlap: they split channels only,
// and each item walks the rois in order, so no two threads write one cell
// and the sums do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "common.h"
#include "roi.h"

namespace vision {
namespace {

// ------------------------------------------------------------ CPU helpers

// One call's tensors: x [N, C, H, W] (or its shape only), rois [K, 5].
struct RoiCall {
  int64_t n, c, h, w, k;
  RoiAttrs a;
};

template <typename T>
RoiCall ReadCall(const dg::KernelContext& ctx, bool align) {
  const dg::TensorRef x = ctx.input(0), rois = ctx.input(1);
  RoiCall call{x.dim(0), x.dim(1), x.dim(2), x.dim(3), rois.dim(0),
               ReadRoiAttrs(ctx, align)};
  CheckRois<T>(rois.data<const T>(), call.k, call.n, call.a, align);
  return call;
}

// How many channel blocks to cut: enough that blocks x `rois` work items
// (rois = 1 when the rois are not split) keep every thread busy.
inline int64_t ChannelBlocks(const RoiCall& call, int64_t rois) {
  const int64_t threads = std::max(1, omp_get_max_threads());
  const int64_t want = 4 * threads / std::max<int64_t>(rois, 1);
  return std::max<int64_t>(1, std::min(call.c, want));
}

// Forward shape of the work: fn(roi, c0, c1) for every roi and channel
// block, in parallel (each item writes only its own output planes).
template <typename Fn>
void ForRoiBlocks(const RoiCall& call, int64_t cost_per_plane, Fn&& fn) {
  const int64_t blocks = ChannelBlocks(call, call.k);
  const int64_t per = (call.c + blocks - 1) / blocks;
  ParallelFor(call.k * blocks, per * cost_per_plane, [&](int64_t item) {
    const int64_t roi = item / blocks, b = item % blocks;
    const int64_t c0 = b * per, c1 = std::min(call.c, c0 + per);
    if (c0 < c1) fn(roi, c0, c1);
  });
}

// Gradient shape of the work: fn(roi, c0, c1) for every roi in order inside
// each channel block, blocks in parallel (a block owns its dx channels).
template <typename Fn>
void ForBlocksOverRois(const RoiCall& call, int64_t cost_per_plane, Fn&& fn) {
  const int64_t blocks = ChannelBlocks(call, 1);
  const int64_t per = (call.c + blocks - 1) / blocks;
  ParallelFor(blocks, per * call.k * cost_per_plane, [&](int64_t b) {
    const int64_t c0 = b * per, c1 = std::min(call.c, c0 + per);
    for (int64_t roi = 0; roi < call.k && c0 < c1; ++roi) fn(roi, c0, c1);
  });
}

template <typename T>
inline int64_t BatchOf(const T* rois, int64_t roi) {
  return static_cast<int64_t>(rois[5 * roi]);
}

// ---------------------------------------------------------------- RoiAlign

// One bilinear tap set: four in-plane offsets and their weights, already
// divided by the bin's sample count (weights 0 outside the map).
template <typename T>
struct Sample {
  int64_t at[4];
  T w[4];
};

// The bilinear sample at (y, x) of an h x w plane: Mask R-CNN's rule.
// Outside [-1, h] x [-1, w] (or NaN) every weight is 0; in [-1, 0) a
// coordinate is clamped to 0; past the last row/column it is clamped to it.
// `weight` scales the four weights (1 / samples per bin).
template <typename T>
Sample<T> Bilinear(T y, T x, int64_t h, int64_t w, T weight) {
  Sample<T> s{{0, 0, 0, 0}, {T(0), T(0), T(0), T(0)}};
  if (!(y >= T(-1) && y <= T(h) && x >= T(-1) && x <= T(w))) return s;
  y = std::max(y, T(0));
  x = std::max(x, T(0));
  int64_t y0 = static_cast<int64_t>(y), x0 = static_cast<int64_t>(x);
  int64_t y1 = y0 + 1, x1 = x0 + 1;
  if (y0 >= h - 1) {
    y0 = y1 = h - 1;
    y = T(y0);
  }
  if (x0 >= w - 1) {
    x0 = x1 = w - 1;
    x = T(x0);
  }
  const T ly = y - T(y0), lx = x - T(x0), hy = T(1) - ly, hx = T(1) - lx;
  s.at[0] = y0 * w + x0;
  s.at[1] = y0 * w + x1;
  s.at[2] = y1 * w + x0;
  s.at[3] = y1 * w + x1;
  s.w[0] = hy * hx * weight;
  s.w[1] = hy * lx * weight;
  s.w[2] = ly * hx * weight;
  s.w[3] = ly * lx * weight;
  return s;
}

// The samples of every bin of one roi, bin-major: bin b owns entries
// [b * per_bin, (b + 1) * per_bin).
template <typename T>
struct AlignTable {
  int64_t per_bin = 0;
  std::vector<Sample<T>> samples;
};

template <typename T>
void BuildAlignTable(const T* roi, const RoiCall& call, AlignTable<T>* t) {
  const RoiAttrs& a = call.a;
  const T offset = a.aligned ? T(0.5) : T(0);
  const T scale = static_cast<T>(a.scale);
  // The coordinates round as torchvision's CUDA kernel (whose compiler
  // fuses roi * scale - offset and i * bin + start into fused multiply-adds):
  // in float32 a coordinate near 64 is only good to ~4e-6 pixel, and
  // results that round their coordinates differently can differ by 1e-5
  // after interpolation. The cuda kernels use the same fmas.
  const T x0 = std::fma(roi[1], scale, -offset), y0 = std::fma(roi[2], scale, -offset);
  T rw = std::fma(roi[3], scale, -offset) - x0, rh = std::fma(roi[4], scale, -offset) - y0;
  if (!a.aligned) rw = std::max(rw, T(1)), rh = std::max(rh, T(1));
  const T bw = rw / T(a.ow), bh = rh / T(a.oh);
  const int64_t gh = GridSize(rh, a.oh, a.sampling);
  const int64_t gw = GridSize(rw, a.ow, a.sampling);
  // avg divides every weight by the sample count; max compares the raw
  // weighted terms.
  const T inv = a.max_mode ? T(1) : T(1) / T(std::max<int64_t>(gh * gw, 1));
  t->per_bin = gh * gw;
  t->samples.resize(static_cast<size_t>(a.oh * a.ow * t->per_bin));
  Sample<T>* s = t->samples.data();
  for (int64_t i = 0; i < a.oh; ++i) {
    for (int64_t j = 0; j < a.ow; ++j) {
      for (int64_t iy = 0; iy < gh; ++iy) {
        const T y = std::fma(T(i), bh, y0) + (T(iy) + T(0.5)) * bh / T(gh);
        for (int64_t ix = 0; ix < gw; ++ix) {
          const T x = std::fma(T(j), bw, x0) + (T(ix) + T(0.5)) * bw / T(gw);
          *s++ = Bilinear(y, x, call.h, call.w, inv);
        }
      }
    }
  }
}

// Mode max (ONNX): the bin's value is the largest weighted corner term
// w_j * x[at_j] over its samples, each sample first reduced to the largest
// of its four terms (max(max(max(t0, t1), t2), t3), then across samples in
// order, as onnxruntime and the ONNX reference). Returns 4 * sample +
// corner of the term selected (the first on ties), -1 for a bin without
// samples.
template <typename T>
int64_t MaxTerm(const Sample<T>* s, int64_t n, const T* xp) {
  int64_t best = -1;
  T best_v = T(0);
  for (int64_t q = 0; q < n; ++q) {
    int64_t at = 4 * q;
    T v = s[q].w[0] * xp[s[q].at[0]];
    for (int j = 1; j < 4; ++j) {
      const T t = s[q].w[j] * xp[s[q].at[j]];
      if (t > v) v = t, at = 4 * q + j;
    }
    if (best < 0 || v > best_v) best = at, best_v = v;
  }
  return best;
}

template <typename T>
void RoiAlignCpu(dg::KernelContext& ctx) {
  const RoiCall call = ReadCall<T>(ctx, true);
  const T* x = ctx.input(0).data<const T>();
  const T* rois = ctx.input(1).data<const T>();
  T* y = ctx.output(0).data<T>();
  const int64_t bins = call.a.oh * call.a.ow, plane = call.h * call.w;
  ForRoiBlocks(call, bins * 16, [&](int64_t k, int64_t c0, int64_t c1) {
    AlignTable<T> t;
    BuildAlignTable(rois + 5 * k, call, &t);
    const T* xb = x + BatchOf(rois, k) * call.c * plane;
    for (int64_t c = c0; c < c1; ++c) {
      const T* xp = xb + c * plane;
      T* yp = y + (k * call.c + c) * bins;
      const Sample<T>* s = t.samples.data();
      if (call.a.max_mode) {
        for (int64_t b = 0; b < bins; ++b, s += t.per_bin) {
          const int64_t at = MaxTerm(s, t.per_bin, xp);
          yp[b] = at < 0 ? T(0) : s[at / 4].w[at % 4] * xp[s[at / 4].at[at % 4]];
        }
        continue;
      }
      for (int64_t b = 0; b < bins; ++b) {
        T sum = T(0);
        for (int64_t q = 0; q < t.per_bin; ++q, ++s) {
          sum += s->w[0] * xp[s->at[0]] + s->w[1] * xp[s->at[1]] +
                 s->w[2] * xp[s->at[2]] + s->w[3] * xp[s->at[3]];
        }
        yp[b] = sum;
      }
    }
  });
}

// dx = the adjoint of RoiAlign applied to dy (x gives the shape only; in
// mode max it selects the term each bin took).
template <typename T>
void RoiAlignGradCpu(dg::KernelContext& ctx) {
  const RoiCall call = ReadCall<T>(ctx, true);
  const T* x = ctx.input(0).data<const T>();
  const T* rois = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  const int64_t bins = call.a.oh * call.a.ow, plane = call.h * call.w;
  std::fill(dx, dx + ctx.output(0).numel(), T(0));
  ForBlocksOverRois(call, bins * 16, [&](int64_t k, int64_t c0, int64_t c1) {
    AlignTable<T> t;
    BuildAlignTable(rois + 5 * k, call, &t);
    T* db = dx + BatchOf(rois, k) * call.c * plane;
    for (int64_t c = c0; c < c1; ++c) {
      T* dp = db + c * plane;
      const T* gp = dy + (k * call.c + c) * bins;
      const Sample<T>* s = t.samples.data();
      if (call.a.max_mode) {
        const T* xp = x + (db - dx) + c * plane;
        for (int64_t b = 0; b < bins; ++b, s += t.per_bin) {
          const int64_t at = MaxTerm(s, t.per_bin, xp);
          if (at >= 0) dp[s[at / 4].at[at % 4]] += gp[b] * s[at / 4].w[at % 4];
        }
        continue;
      }
      for (int64_t b = 0; b < bins; ++b) {
        const T g = gp[b];
        for (int64_t q = 0; q < t.per_bin; ++q, ++s) {
          for (int j = 0; j < 4; ++j) dp[s->at[j]] += g * s->w[j];
        }
      }
    }
  });
}

// ----------------------------------------------------------------- RoiPool

// The quantised cells of every bin of one roi (torchvision / Fast R-CNN):
// bin b covers rows [h0[b], h1[b]) and columns [w0[b], w1[b]), clipped to
// the map; an empty bin has h1 <= h0 or w1 <= w0.
struct PoolBins {
  std::vector<int64_t> h0, h1, w0, w1;
};

// `v` clipped to [0, len] (NaN gives 0) as a cell index.
inline int64_t ClipCell(double v, int64_t len) {
  v = v > 0 ? v : 0.0;
  const double top = static_cast<double>(len);
  return static_cast<int64_t>(v < top ? v : top);
}

// [start, end) of bin i of `bins` over a roi starting at cell `origin`
// spanning `size` cells, clipped to [0, len).
inline void BinRange(int64_t i, int64_t bins, double origin, double size,
                     int64_t len, int64_t* start, int64_t* end) {
  const double bin = size / static_cast<double>(bins);
  const double lo = std::floor(static_cast<double>(i) * bin) + origin;
  const double hi = std::ceil(static_cast<double>(i + 1) * bin) + origin;
  *start = ClipCell(lo, len);
  *end = ClipCell(hi, len);
}

template <typename T>
void BuildPoolBins(const T* roi, const RoiCall& call, PoolBins* p) {
  const double s = call.a.scale;
  // std::round: half away from zero, as torchvision.
  const double x0 = std::round(roi[1] * s), y0 = std::round(roi[2] * s);
  const double x1 = std::round(roi[3] * s), y1 = std::round(roi[4] * s);
  const double rw = std::max(x1 - x0 + 1.0, 1.0);
  const double rh = std::max(y1 - y0 + 1.0, 1.0);
  const int64_t oh = call.a.oh, ow = call.a.ow;
  p->h0.resize(oh), p->h1.resize(oh), p->w0.resize(ow), p->w1.resize(ow);
  for (int64_t i = 0; i < oh; ++i) {
    BinRange(i, oh, y0, rh, call.h, &p->h0[i], &p->h1[i]);
  }
  for (int64_t j = 0; j < ow; ++j) {
    BinRange(j, ow, x0, rw, call.w, &p->w0[j], &p->w1[j]);
  }
}

// In-plane index of the maximum of bin (i, j): the first cell in row-major
// order holding it, a NaN winning over numbers; -1 for an empty bin.
template <typename T>
int64_t ArgMaxBin(const T* xp, const PoolBins& p, int64_t i, int64_t j,
                  int64_t w) {
  if (p.h1[i] <= p.h0[i] || p.w1[j] <= p.w0[j]) return -1;
  int64_t best = p.h0[i] * w + p.w0[j];
  T best_v = xp[best];
  for (int64_t r = p.h0[i]; r < p.h1[i]; ++r) {
    for (int64_t col = p.w0[j]; col < p.w1[j]; ++col) {
      const int64_t at = r * w + col;
      const T v = xp[at];
      if (v > best_v || (std::isnan(v) && !std::isnan(best_v))) {
        best = at;
        best_v = v;
      }
    }
  }
  return best;
}

// out[k, c, i, j] = values[b_k, c] at the argmax of x[b_k, c] in bin (i, j)
// (0 for an empty bin). RoiPool is the case values = x.
template <typename T>
void GatherAtArgMax(dg::KernelContext& ctx, int32_t values_input) {
  const RoiCall call = ReadCall<T>(ctx, false);
  const T* x = ctx.input(0).data<const T>();
  const T* rois = ctx.input(1).data<const T>();
  const T* v = ctx.input(values_input).data<const T>();
  T* y = ctx.output(0).data<T>();
  const int64_t oh = call.a.oh, ow = call.a.ow, plane = call.h * call.w;
  ForRoiBlocks(call, plane, [&](int64_t k, int64_t c0, int64_t c1) {
    PoolBins p;
    BuildPoolBins(rois + 5 * k, call, &p);
    const int64_t base = BatchOf(rois, k) * call.c * plane;
    for (int64_t c = c0; c < c1; ++c) {
      const T* xp = x + base + c * plane;
      const T* vp = v + base + c * plane;
      T* yp = y + (k * call.c + c) * oh * ow;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t at = ArgMaxBin(xp, p, i, j, call.w);
          yp[i * ow + j] = at < 0 ? T(0) : vp[at];
        }
      }
    }
  });
}

template <typename T>
void RoiPoolCpu(dg::KernelContext& ctx) {
  GatherAtArgMax<T>(ctx, 0);
}

template <typename T>
void RoiPoolGatherCpu(dg::KernelContext& ctx) {
  GatherAtArgMax<T>(ctx, 2);
}

// dx[b_k, c] at the argmax of bin (i, j) += dy[k, c, i, j].
template <typename T>
void RoiPoolGradCpu(dg::KernelContext& ctx) {
  const RoiCall call = ReadCall<T>(ctx, false);
  const T* x = ctx.input(0).data<const T>();
  const T* rois = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  const int64_t oh = call.a.oh, ow = call.a.ow, plane = call.h * call.w;
  std::fill(dx, dx + ctx.output(0).numel(), T(0));
  ForBlocksOverRois(call, plane, [&](int64_t k, int64_t c0, int64_t c1) {
    PoolBins p;
    BuildPoolBins(rois + 5 * k, call, &p);
    const int64_t base = BatchOf(rois, k) * call.c * plane;
    for (int64_t c = c0; c < c1; ++c) {
      const T* xp = x + base + c * plane;
      T* dp = dx + base + c * plane;
      const T* gp = dy + (k * call.c + c) * oh * ow;
      for (int64_t i = 0; i < oh; ++i) {
        for (int64_t j = 0; j < ow; ++j) {
          const int64_t at = ArgMaxBin(xp, p, i, j, call.w);
          if (at >= 0) dp[at] += gp[i * ow + j];
        }
      }
    }
  });
}

}  // namespace

DG_KERNEL("RoiAlign", "cpu", RoiAlignCpu, float, double);
DG_KERNEL("RoiAlignGrad", "cpu", RoiAlignGradCpu, float, double);
DG_KERNEL("RoiPool", "cpu", RoiPoolCpu, float, double);
DG_KERNEL("RoiPoolGrad", "cpu", RoiPoolGradCpu, float, double);
DG_KERNEL("RoiPoolGather", "cpu", RoiPoolGatherCpu, float, double);

}  // namespace vision
