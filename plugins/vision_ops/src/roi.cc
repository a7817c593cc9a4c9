// Region-of-interest pooling over NCHW feature maps: RoiAlign (Mask R-CNN),
// RoiPool (Fast R-CNN), and the ops their gradients are written with
// (RoiAlignGrad, RoiPoolGrad, RoiPoolGather). Schemas, shape rules and CPU
// kernels; the CUDA kernels are in cuda/roi.cu and reuse the host-side
// validation defined here (ReadRoiAttrs, CheckRois).
//
// A roi is a row (batch_index, x1, y1, x2, y2) in input-image coordinates;
// spatial_scale maps it onto the feature map. Every roi is validated before
// any kernel loop starts (the batch index must be an integer in [0, N), the
// coordinates finite), so a bad roi is a clear error, never a wild read.
//
// Threads: the forward kernels split the work into (roi, channel block)
// items, each computing its roi's sampling table once. The gradient
// kernels scatter into dx, where rois overlap: they split channels only,
// and each item walks the rois in order, so no two threads write one cell
// and the sums do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"
#include "roi.h"

namespace vision {

// Limit on the bilinear samples of one RoiAlign roi, all bins together (an
// adaptive grid on a huge roi would otherwise run for hours and its
// sampling table would not fit in memory).
constexpr int64_t kMaxSamplesPerRoi = int64_t{1} << 22;

namespace {

constexpr const char* kX = "Feature map, [N, C, H, W].";
constexpr const char* kRois =
    "Regions, [K, 5]: (batch_index, x1, y1, x2, y2) per row, in input "
    "coordinates (multiplied by spatial_scale); x's dtype.";
constexpr const char* kOutSize =
    "Bins per roi [oh, ow] (one value: both).";
constexpr const char* kScale =
    "Factor from roi coordinates to feature-map pixels (1/stride).";
constexpr const char* kSampling =
    "Bilinear samples per bin along each axis; <= 0 means adaptive: "
    "ceil(roi_size / output_size) per axis.";
constexpr const char* kAligned =
    "Shift the roi by -0.5 pixel so that pixel centres sit at integer + 0.5 "
    "(Detectron2); False is the legacy Mask R-CNN form (roi size >= 1).";
constexpr const char* kDy = "Gradient of the pooled output, [K, C, oh, ow].";
constexpr int64_t kMaxSamplingRatio = 2048;

using Shape = std::vector<int64_t>;

std::string ShapeStr(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    out += (i ? ", " : "") + std::to_string(s[i]);
  }
  return out + "]";
}

// ------------------------------------------------------------ shape rules

// output_size as [oh, ow]; validated.
Shape OutputSize(const dg::AttrReader& ctx) {
  Shape o = ctx.ints("output_size");
  DG_CHECK(o.size() == 1 || o.size() == 2, DG_INVALID_ARGUMENT,
           "output_size ", ShapeStr(o), " must hold 1 or 2 values");
  if (o.size() == 1) o.push_back(o[0]);
  DG_CHECK(o[0] > 0 && o[1] > 0 && o[0] <= (1 << 20) && o[1] <= (1 << 20),
           DG_INVALID_ARGUMENT, "output_size ", ShapeStr(o),
           " must be positive (and at most 2^20)");
  return o;
}

// Checks x [N, C, H, W], rois [K, 5] and the attributes; returns the pooled
// shape [K, C, oh, ow].
Shape PooledShape(const dg::InferContext& ctx, bool align) {
  const Shape x = ctx.input(0).shape(), r = ctx.input(1).shape();
  DG_CHECK(x.size() == 4, DG_INVALID_ARGUMENT,
           "x must be 4-D [N, C, H, W], got shape ", ShapeStr(x));
  DG_CHECK(x[2] > 0 && x[3] > 0, DG_INVALID_ARGUMENT, "x shape ", ShapeStr(x),
           " has an empty spatial axis; RoI pooling needs H, W >= 1");
  DG_CHECK(r.size() == 2 && r[1] == 5, DG_INVALID_ARGUMENT,
           "rois must be [K, 5] (batch_index, x1, y1, x2, y2), got shape ",
           ShapeStr(r));
  DG_CHECK(ctx.input(1).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           "rois must have x's dtype ", dg::DTypeName(ctx.input(0).dtype()),
           ", got ", dg::DTypeName(ctx.input(1).dtype()));
  const double scale = ctx.f("spatial_scale");
  DG_CHECK(std::isfinite(scale) && scale > 0, DG_INVALID_ARGUMENT,
           "spatial_scale must be a positive finite number, got ", scale);
  if (align) {
    const int64_t s = ctx.i("sampling_ratio");
    DG_CHECK(s <= kMaxSamplingRatio, DG_INVALID_ARGUMENT, "sampling_ratio ", s,
             " is larger than ", kMaxSamplingRatio);
  }
  const Shape o = OutputSize(ctx);
  return {r[0], x[1], o[0], o[1]};
}

void SameAsX(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}

void PoolShape(dg::InferContext& ctx, bool align) {
  ctx.set_output(0, ctx.input(0).dtype(), PooledShape(ctx, align));
}

void RoiAlignShape(dg::InferContext& ctx) { PoolShape(ctx, true); }
void RoiPoolShape(dg::InferContext& ctx) { PoolShape(ctx, false); }

// Checks the third input (`name`) of a helper op: x's dtype and `want`.
void CheckThird(const dg::InferContext& ctx, const char* name,
                const Shape& want, const char* what) {
  const Shape got = ctx.input(2).shape();
  DG_CHECK(got == want, DG_INVALID_ARGUMENT, name, " has shape ",
           ShapeStr(got), " but must have ", what, " ", ShapeStr(want),
           " (x ", ShapeStr(ctx.input(0).shape()), ", rois ",
           ShapeStr(ctx.input(1).shape()), ")");
  DG_CHECK(ctx.input(2).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           name, " must have x's dtype ", dg::DTypeName(ctx.input(0).dtype()),
           ", got ", dg::DTypeName(ctx.input(2).dtype()));
}

// A gradient op (x, rois, dy [K, C, oh, ow]) -> dx, x's shape.
void GradShape(dg::InferContext& ctx, bool align) {
  CheckThird(ctx, "dy", PooledShape(ctx, align), "the pooled shape");
  SameAsX(ctx);
}

void RoiAlignGradShape(dg::InferContext& ctx) { GradShape(ctx, true); }
void RoiPoolGradShape(dg::InferContext& ctx) { GradShape(ctx, false); }

void RoiPoolGatherShape(dg::InferContext& ctx) {
  const Shape pooled = PooledShape(ctx, false);
  CheckThird(ctx, "values", ctx.input(0).shape(), "x's shape");
  ctx.set_output(0, ctx.input(0).dtype(), pooled);
}

}  // namespace

// ---------------------------------------------- validation (CPU and CUDA)

RoiAttrs ReadRoiAttrs(const dg::KernelContext& ctx, bool align) {
  RoiAttrs a;
  const Shape o = OutputSize(ctx);
  a.oh = o[0];
  a.ow = o[1];
  a.scale = ctx.f("spatial_scale");
  if (align) {
    a.sampling = ctx.i("sampling_ratio");
    a.aligned = ctx.b("aligned");
  }
  return a;
}

// Samples per bin along one axis of a RoiAlign roi of `size` pixels split
// into `bins` (the caller has checked that `size` is finite).
inline int64_t GridSize(double size, int64_t bins, int64_t sampling) {
  if (sampling > 0) return sampling;
  const double g = std::ceil(size / static_cast<double>(bins));
  return g <= 0 ? 0 : (g > 1e9 ? int64_t{1000000000} : static_cast<int64_t>(g));
}

// Checks every roi of a host copy of `rois` [k, 5] against a batch of
// `batch` images: integral batch index in range, finite coordinates and,
// for RoiAlign, at most kMaxSamplesPerRoi bilinear samples.
template <typename T>
void CheckRois(const T* rois, int64_t k, int64_t batch, const RoiAttrs& a,
               bool align) {
  for (int64_t i = 0; i < k; ++i) {
    const T* r = rois + 5 * i;
    const double b = static_cast<double>(r[0]);
    DG_CHECK(std::isfinite(b) && b == std::floor(b) && b >= 0 &&
                 b < static_cast<double>(batch),
             DG_INVALID_ARGUMENT, "roi ", i, " has batch index ", b,
             " but x holds ", batch, " image(s): it must be an integer in [0, ",
             batch, ")");
    for (int j = 1; j < 5; ++j) {
      DG_CHECK(std::isfinite(static_cast<double>(r[j])), DG_INVALID_ARGUMENT,
               "roi ", i, " has a non-finite coordinate ", r[j]);
    }
    if (!align) continue;
    const double w = (static_cast<double>(r[3]) - r[1]) * a.scale;
    const double h = (static_cast<double>(r[4]) - r[2]) * a.scale;
    const double gw = static_cast<double>(
        GridSize(a.aligned ? w : std::max(w, 1.0), a.ow, a.sampling));
    const double gh = static_cast<double>(
        GridSize(a.aligned ? h : std::max(h, 1.0), a.oh, a.sampling));
    const double total = gw * gh * static_cast<double>(a.oh * a.ow);
    DG_CHECK(total <= static_cast<double>(kMaxSamplesPerRoi),
             DG_INVALID_ARGUMENT, "roi ", i, " (", r[1], ", ", r[2],
             ", ", r[3], ", ", r[4], ") needs ", gh, " x ", gw,
             " samples in each of its ", a.oh * a.ow, " bins, more than the "
             "limit of 2^22 per roi; pass a small positive sampling_ratio");
  }
}

template void CheckRois<float>(const float*, int64_t, int64_t,
                               const RoiAttrs&, bool);
template void CheckRois<double>(const double*, int64_t, int64_t,
                                const RoiAttrs&, bool);

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
  const T x0 = roi[1] * scale - offset, y0 = roi[2] * scale - offset;
  T rw = roi[3] * scale - offset - x0, rh = roi[4] * scale - offset - y0;
  if (!a.aligned) rw = std::max(rw, T(1)), rh = std::max(rh, T(1));
  const T bw = rw / T(a.ow), bh = rh / T(a.oh);
  const int64_t gh = GridSize(rh, a.oh, a.sampling);
  const int64_t gw = GridSize(rw, a.ow, a.sampling);
  const T inv = T(1) / T(std::max<int64_t>(gh * gw, 1));
  t->per_bin = gh * gw;
  t->samples.resize(static_cast<size_t>(a.oh * a.ow * t->per_bin));
  Sample<T>* s = t->samples.data();
  for (int64_t i = 0; i < a.oh; ++i) {
    for (int64_t j = 0; j < a.ow; ++j) {
      for (int64_t iy = 0; iy < gh; ++iy) {
        const T y = y0 + T(i) * bh + (T(iy) + T(0.5)) * bh / T(gh);
        for (int64_t ix = 0; ix < gw; ++ix) {
          const T x = x0 + T(j) * bw + (T(ix) + T(0.5)) * bw / T(gw);
          *s++ = Bilinear(y, x, call.h, call.w, inv);
        }
      }
    }
  }
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

// dx = the adjoint of RoiAlign applied to dy (x gives the shape only).
template <typename T>
void RoiAlignGradCpu(dg::KernelContext& ctx) {
  const RoiCall call = ReadCall<T>(ctx, true);
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

// ----------------------------------------------------------------- schemas

// A user-facing op: (x, rois) -> y [K, C, oh, ow].
dg::OpSchema& PoolingOp(const char* name, const char* py_name,
                        const char* doc) {
  return dg::internal::NewOp(name)
      .PyName(py_name)
      .Doc(doc)
      .Input("x", kFloat, 0, kX)
      .Input("rois", kFloat, DG_ARG_NO_GRAD, kRois)
      .Output("y", kFloat, 0, "Pooled features, [K, C, oh, ow].");
}

// A gradient helper: (x [no gradient], rois, third) -> out.
dg::OpSchema& HelperOp(const char* name, const char* py_name, const char* doc,
                       const char* x_doc, const char* third,
                       const char* third_doc, const char* out,
                       const char* out_doc) {
  return dg::internal::NewOp(name)
      .PyName(py_name)
      .Doc(doc)
      .Input("x", kFloat, DG_ARG_NO_GRAD, x_doc)
      .Input("rois", kFloat, DG_ARG_NO_GRAD, kRois)
      .Input(third, kFloat, 0, third_doc)
      .Output(out, kFloat, 0, out_doc);
}

dg::OpSchema& AlignAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("output_size", DG_ATTR_INTS, kOutSize)
      .Attr("spatial_scale", 1.0, kScale)
      .Attr("sampling_ratio", int64_t{-1}, kSampling)
      .Attr("aligned", true, kAligned);
}

dg::OpSchema& PoolAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("output_size", DG_ATTR_INTS, kOutSize)
      .Attr("spatial_scale", 1.0, kScale);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kRoiOps[] = {
    &AlignAttrs(PoolingOp(
         "RoiAlign", "roi_align",
         "RoIAlign (Mask R-CNN): each roi is split into oh x ow bins; each "
         "bin is the mean of a regular grid of bilinear samples of x "
         "(Detectron2 / torchvision semantics). Samples outside [-1, H] x "
         "[-1, W] count as 0; in [-1, 0) a coordinate is clamped to 0."))
        .Shape(RoiAlignShape),
    &AlignAttrs(HelperOp(
         "RoiAlignGrad", "roi_align_grad",
         "Gradient of RoiAlign with respect to x (its adjoint): each dy is "
         "spread over its bin's bilinear taps. Linear in dy; x only gives "
         "the shape.",
         "Pooled input (shape only).", "dy", kDy, "dx",
         "Gradient of x, x's shape."))
        .Shape(RoiAlignGradShape),
    &PoolAttrs(PoolingOp(
         "RoiPool", "roi_pool",
         "RoIPool (Fast R-CNN): each roi, rounded to feature-map cells, is "
         "split into oh x ow quantised bins; each bin is its maximum "
         "(torchvision semantics; an empty bin gives 0; NaN wins over "
         "numbers)."))
        .Shape(RoiPoolShape),
    &PoolAttrs(HelperOp(
         "RoiPoolGrad", "roi_pool_grad",
         "Gradient of RoiPool with respect to x: each dy is added to the "
         "cell its bin's maximum came from (the first one in row-major order "
         "on ties). Linear in dy.",
         "Pooled input (selects the cells).", "dy", kDy, "dx",
         "Gradient of x, x's shape."))
        .Shape(RoiPoolGradShape),
    &PoolAttrs(HelperOp(
         "RoiPoolGather", "roi_pool_gather",
         "Reads values where RoiPool takes its maxima: output (k, c, i, j) "
         "is values[b_k, c] at the argmax of x[b_k, c] in bin (i, j), 0 for "
         "an empty bin. The adjoint of RoiPoolGrad; RoiPool(x) is "
         "RoiPoolGather(x, rois, x).",
         "Pooled input (selects the cells).", "values",
         "Values read, x's shape.", "y",
         "Gathered values, [K, C, oh, ow]."))
        .Shape(RoiPoolGatherShape),
};

DG_KERNEL("RoiAlign", "cpu", RoiAlignCpu, float, double);
DG_KERNEL("RoiAlignGrad", "cpu", RoiAlignGradCpu, float, double);
DG_KERNEL("RoiPool", "cpu", RoiPoolCpu, float, double);
DG_KERNEL("RoiPoolGrad", "cpu", RoiPoolGradCpu, float, double);
DG_KERNEL("RoiPoolGather", "cpu", RoiPoolGatherCpu, float, double);

}  // namespace vision
