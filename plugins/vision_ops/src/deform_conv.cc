// Deformable convolution, v1 (Dai et al. 2017, "Deformable Convolutional
// Networks") and v2 (Zhu et al. 2018, "Deformable ConvNets v2": a modulation
// mask), in NCHW layout with torchvision's offset/mask layout.
//
// For output position (i, j) and kernel tap k = p * kw + q, offset group g:
//   y0 = i * stride_h - pad_top + p * dilation_h + offset[n, 2(gK+k), i, j]
//   x0 = j * stride_w - pad_left + q * dilation_w + offset[n, 2(gK+k)+1, i, j]
//   col[c, k, i, j] = mask[n, g*K + k, i, j] * bilinear(x[n, c], y0, x0)
// for every channel c of offset group g (channels split evenly into
// offset_groups), with bilinear() reading zeros outside the image; then
//   y[n, o] = b[o] + sum over c, k of w[o, c, k] * col[group(o) c, k]
// as in a grouped convolution. Without a mask, m = 1 (v1).
//
// CPU kernels, per image: a table of the sampling points of every (offset
// group, tap, position), shared by the group's channels; a deformable im2col
// into a [C*K, Ho*Wo] column buffer; one register-blocked GEMM per channel
// group (gemm.cc: this plugin carries no BLAS). The backward op
// DeformConv2dGrad returns the gradients of x, w, offset and mask (each only
// when asked for), from the column gradient W^T dy: a bilinear scatter
// (col2im) for x, the derivative of the bilinear weights for the offsets and
// the sampled values for the mask.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "common.h"
#include "gemm.h"

namespace vision {
namespace {

using Shape = std::vector<int64_t>;

// ----------------------------------------------------------------- geometry

// Everything the kernels need, read from the input shapes and attributes.
struct Geometry {
  int64_t n = 0, c = 0, h = 0, w = 0;   // input x
  int64_t o = 0, kh = 0, kw = 0;        // filter
  int64_t ho = 0, wo = 0;               // output
  int64_t stride[2] = {1, 1}, dilation[2] = {1, 1};
  int64_t pad_begin[2] = {0, 0}, pad_end[2] = {0, 0};
  int64_t groups = 1, offset_groups = 1;

  int64_t taps() const { return kh * kw; }
  int64_t positions() const { return ho * wo; }
  int64_t plane() const { return h * w; }
  // Rows of the column buffer of one group / one image.
  int64_t group_rows() const { return c / groups * taps(); }
  int64_t rows() const { return c * taps(); }
};

void CheckRank4(const Shape& s, const char* what, const char* layout) {
  DG_CHECK(s.size() == 4, DG_INVALID_ARGUMENT, what, " must have rank 4 ",
           layout, ", got shape ", ShapeStr(s));
}

// Reads the geometry attributes, rejecting malformed values.
void ReadAttrs(const dg::AttrReader& a, Geometry* g) {
  const Shape strides = a.ints("strides"), dilations = a.ints("dilations");
  const Shape pads = a.ints("pads");
  DG_CHECK(strides.size() == 2, DG_INVALID_ARGUMENT,
           "strides must hold 2 values (height, width), got ",
           ShapeStr(strides));
  DG_CHECK(dilations.size() == 2, DG_INVALID_ARGUMENT,
           "dilations must hold 2 values (height, width), got ",
           ShapeStr(dilations));
  DG_CHECK(pads.size() == 2 || pads.size() == 4, DG_INVALID_ARGUMENT,
           "pads must hold 2 values (height, width) or 4 (top, left, bottom, "
           "right), got ", ShapeStr(pads));
  for (int64_t p : pads) {
    DG_CHECK(p >= 0 && p <= (int64_t{1} << 31), DG_INVALID_ARGUMENT,
             "pads must be in [0, 2^31], got ", ShapeStr(pads));
  }
  for (int i = 0; i < 2; ++i) {
    DG_CHECK(strides[i] >= 1 && strides[i] <= (int64_t{1} << 31),
             DG_INVALID_ARGUMENT, "strides must be in [1, 2^31], got ",
             ShapeStr(strides));
    DG_CHECK(dilations[i] >= 1 && dilations[i] <= (int64_t{1} << 31),
             DG_INVALID_ARGUMENT, "dilations must be in [1, 2^31], got ",
             ShapeStr(dilations));
    g->stride[i] = strides[i];
    g->dilation[i] = dilations[i];
    g->pad_begin[i] = pads[i];
    g->pad_end[i] = pads.size() == 4 ? pads[i + 2] : pads[i];
  }
  g->groups = a.i("groups");
  g->offset_groups = a.i("offset_groups");
  DG_CHECK(g->groups >= 1, DG_INVALID_ARGUMENT, "groups must be >= 1, got ",
           g->groups);
  DG_CHECK(g->offset_groups >= 1, DG_INVALID_ARGUMENT,
           "offset_groups must be >= 1, got ", g->offset_groups);
}

// The output extent along axis i (0: height, 1: width).
int64_t OutputExtent(const Geometry& g, int i, int64_t size, int64_t k) {
  const char* axis = i == 0 ? "height" : "width";
  const int64_t padded = size + g.pad_begin[i] + g.pad_end[i];
  const int64_t span = g.dilation[i] * (k - 1) + 1;
  DG_CHECK(span <= padded, DG_INVALID_ARGUMENT, "the kernel ", axis, " ", k,
           " (", span, " with dilation ", g.dilation[i],
           ") is larger than the padded input ", axis, " ", padded, " (",
           size, " + pads ", g.pad_begin[i], " + ", g.pad_end[i], ")");
  return (padded - span) / g.stride[i] + 1;
}

// Whether the product of `dims` stays below 2^50 elements.
bool FitsBuffer(std::initializer_list<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  return n < (int64_t{1} << 50);
}

// Validates x [N, C, H, W], w [O, C/groups, kh, kw] and the attributes.
Geometry ReadGeometry(const dg::AttrReader& a, const Shape& x,
                      const Shape& w) {
  CheckRank4(x, "input x", "[N, C, H, W]");
  CheckRank4(w, "weight", "[O, C / groups, kh, kw]");
  Geometry g;
  ReadAttrs(a, &g);
  g.n = x[0], g.c = x[1], g.h = x[2], g.w = x[3];
  g.o = w[0], g.kh = w[2], g.kw = w[3];
  DG_CHECK(g.kh >= 1 && g.kw >= 1, DG_INVALID_ARGUMENT, "the kernel of weight ",
           ShapeStr(w), " must be at least 1x1");
  DG_CHECK(g.c % g.groups == 0 && g.o % g.groups == 0, DG_INVALID_ARGUMENT,
           "groups ", g.groups, " must divide the ", g.c,
           " input channels of x ", ShapeStr(x), " and the ", g.o,
           " output channels of weight ", ShapeStr(w));
  DG_CHECK(w[1] * g.groups == g.c, DG_INVALID_ARGUMENT, "weight ",
           ShapeStr(w), " expects ", w[1], " x groups ", g.groups, " = ",
           w[1] * g.groups, " input channels, but x ", ShapeStr(x), " has ",
           g.c);
  DG_CHECK(g.c % g.offset_groups == 0, DG_INVALID_ARGUMENT, "offset_groups ",
           g.offset_groups, " does not divide the ", g.c,
           " input channels of x ", ShapeStr(x));
  g.ho = OutputExtent(g, 0, g.h, g.kh);
  g.wo = OutputExtent(g, 1, g.w, g.kw);
  // The column buffer [C * K, Ho * Wo] and the offsets must be addressable
  // even when the batch is empty (an empty tensor may carry any other size).
  DG_CHECK(FitsBuffer({g.c, g.kh, g.kw, g.ho, g.wo}) &&
               FitsBuffer({2, g.offset_groups, g.kh, g.kw, g.ho, g.wo}),
           DG_INVALID_ARGUMENT, "the output ", g.ho, " x ", g.wo, " with ",
           g.c, " channels, offset_groups ", g.offset_groups, " and a ", g.kh,
           "x", g.kw, " kernel needs a column buffer too large to address");
  return g;
}

// Checks that tensor `what` of shape s is [N, channels, Ho, Wo].
void CheckPerPosition(const Geometry& g, const Shape& s, const char* what,
                      int64_t channels, const char* meaning) {
  CheckRank4(s, what, "[N, channels, Ho, Wo]");
  DG_CHECK(s[1] == channels, DG_INVALID_ARGUMENT, what, " ", ShapeStr(s),
           " must have ", channels, " channels (", meaning, " = ", channels,
           " with offset_groups ", g.offset_groups, " and a ", g.kh, "x",
           g.kw, " kernel), got ", s[1]);
  DG_CHECK(s[0] == g.n && s[2] == g.ho && s[3] == g.wo, DG_INVALID_ARGUMENT,
           what, " ", ShapeStr(s), " must have shape [", g.n, ", ", channels,
           ", ", g.ho, ", ", g.wo,
           "] (batch of x, output height and width of the convolution)");
}

void CheckOffset(const Geometry& g, const Shape& s) {
  CheckPerPosition(g, s, "offset", 2 * g.offset_groups * g.taps(),
                   "2 * offset_groups * kh * kw");
}

void CheckMask(const Geometry& g, const Shape& s) {
  CheckPerPosition(g, s, "mask", g.offset_groups * g.taps(),
                   "offset_groups * kh * kw");
}

// Inputs: x, weight, offset, mask?, bias?.
void DeformConv2dShape(dg::InferContext& ctx) {
  const Geometry g =
      ReadGeometry(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  CheckOffset(g, ctx.input(2).shape());
  if (ctx.num_inputs() > 3) CheckMask(g, ctx.input(3).shape());
  if (ctx.num_inputs() > 4) {
    const Shape b = ctx.input(4).shape();
    DG_CHECK(b.size() == 1 && b[0] == g.o, DG_INVALID_ARGUMENT,
             "bias must have shape [", g.o,
             "] (one value per output channel), got ", ShapeStr(b));
  }
  ctx.set_output(0, ctx.input(0).dtype(), {g.n, g.o, g.ho, g.wo});
}

// The gradients DeformConv2dGrad is asked for, from its "grads" attribute.
struct Wanted {
  bool x, w, offset, mask;
};

Wanted ReadWanted(const dg::AttrReader& a, bool has_mask) {
  const Shape v = a.ints("grads");
  DG_CHECK(v.size() == 4, DG_INVALID_ARGUMENT,
           "grads must hold 4 flags (x, weight, offset, mask), got ",
           ShapeStr(v));
  for (int64_t f : v) {
    DG_CHECK(f == 0 || f == 1, DG_INVALID_ARGUMENT,
             "grads flags must be 0 or 1, got ", ShapeStr(v));
  }
  return {v[0] != 0, v[1] != 0, v[2] != 0, v[3] != 0 && has_mask};
}

// Inputs: x, weight, offset, dy, mask?.
void DeformConv2dGradShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), w = ctx.input(1).shape();
  const Shape offset = ctx.input(2).shape(), dy = ctx.input(3).shape();
  const Geometry g = ReadGeometry(ctx, x, w);
  CheckOffset(g, offset);
  const bool has_mask = ctx.num_inputs() > 4;
  if (has_mask) CheckMask(g, ctx.input(4).shape());
  const Shape y = {g.n, g.o, g.ho, g.wo};
  DG_CHECK(dy == y, DG_INVALID_ARGUMENT, "dy ", ShapeStr(dy),
           " must have the output shape ", ShapeStr(y));
  const Wanted want = ReadWanted(ctx, has_mask);
  const DgDType t = ctx.input(0).dtype();
  const Shape none = {0};
  ctx.set_output(0, t, want.x ? x : none);
  ctx.set_output(1, t, want.w ? w : none);
  ctx.set_output(2, t, want.offset ? offset : none);
  ctx.set_output(3, t, want.mask ? Shape{g.n, g.offset_groups * g.taps(),
                                         g.ho, g.wo}
                                 : none);
}

constexpr const char* kStridesDoc = "Window steps (height, width).";
constexpr const char* kPadsDoc =
    "Zero padding of the image: 2 values (height, width; both sides) or 4 "
    "(top, left, bottom, right).";
constexpr const char* kDilationsDoc =
    "Spacing between kernel taps (height, width).";
constexpr const char* kGroupsDoc =
    "Channel groups of the convolution (weight has C / groups input "
    "channels).";
constexpr const char* kOffsetGroupsDoc =
    "Offset groups: the C input channels are split into this many groups, "
    "each sampled with its own offsets (and mask).";

// The geometry attributes and flags both deformable-convolution ops share.
dg::OpSchema& ConvAttrs(dg::OpSchema& op) {
  return op.Attr("strides", std::vector<int64_t>{1, 1}, kStridesDoc)
      .Attr("pads", std::vector<int64_t>{0, 0}, kPadsDoc)
      .Attr("dilations", std::vector<int64_t>{1, 1}, kDilationsDoc)
      .Attr("groups", int64_t{1}, kGroupsDoc)
      .Attr("offset_groups", int64_t{1}, kOffsetGroupsDoc)
      .Flags(DG_OP_SAME_DTYPE);
}

// -------------------------------------------------------- bilinear sampling

// The four neighbours of a sampling point (y, x) in an H x W plane, with
// their bilinear weights and the weights' derivatives. Neighbours outside
// the image have at = -1 (they read zero and receive nothing).
template <typename T>
struct Corners {
  int64_t at[4];
  T weight[4], dweight_dy[4], dweight_dx[4];
};

template <typename T>
Corners<T> Locate(T y, T x, int64_t h, int64_t w) {
  Corners<T> c;
  // Also false for NaN: such a point samples nothing.
  if (!(y > T(-1) && y < T(h) && x > T(-1) && x < T(w))) {
    for (int t = 0; t < 4; ++t) {
      c.at[t] = -1;
      c.weight[t] = c.dweight_dy[t] = c.dweight_dx[t] = T(0);
    }
    return c;
  }
  const T fy = std::floor(y), fx = std::floor(x);
  const int64_t y0 = static_cast<int64_t>(fy), x0 = static_cast<int64_t>(fx);
  const T ly = y - fy, lx = x - fx, hy = T(1) - ly, hx = T(1) - lx;
  const int64_t ys[2] = {y0, y0 + 1}, xs[2] = {x0, x0 + 1};
  const T wy[2] = {hy, ly}, wx[2] = {hx, lx}, sign[2] = {T(-1), T(1)};
  for (int t = 0; t < 4; ++t) {
    const int a = t >> 1, b = t & 1;
    const bool inside = ys[a] >= 0 && ys[a] < h && xs[b] >= 0 && xs[b] < w;
    c.at[t] = inside ? ys[a] * w + xs[b] : -1;
    c.weight[t] = wy[a] * wx[b];
    c.dweight_dy[t] = sign[a] * wx[b];
    c.dweight_dx[t] = wy[a] * sign[b];
  }
  return c;
}

// sum over neighbours of coef[t] * plane[at[t]].
template <typename T>
T Combine(const Corners<T>& c, const T (&coef)[4], const T* plane) {
  T v = T(0);
  for (int t = 0; t < 4; ++t) {
    if (c.at[t] >= 0) v += coef[t] * plane[c.at[t]];
  }
  return v;
}

// The sampling point of one (offset group, tap, output position) of one
// image: its neighbours and its modulation m (1 without a mask).
template <typename T>
struct Tap {
  Corners<T> at;
  T m;
};

// Runs fn(og, k, i) over every (offset group, tap, output row), in parallel:
// each call owns the taps and column rows of its tap in its offset group.
template <typename F>
void ForEachTapRow(const Geometry& g, int64_t cost, F&& fn) {
  ParallelFor(g.offset_groups * g.taps() * g.ho, g.wo * cost, [&](int64_t r) {
    const int64_t i = r % g.ho, k = (r / g.ho) % g.taps();
    fn(r / (g.ho * g.taps()), k, i);
  });
}

// taps[(og * K + k) * P + pos] for one image, from its offsets
// [2 * offset_groups * K, P] and mask [offset_groups * K, P] (or null).
// Every channel of the offset group reuses it.
template <typename T>
void LocateTaps(const Geometry& g, const T* offset, const T* mask,
                Tap<T>* taps) {
  const int64_t p = g.positions();
  ForEachTapRow(g, 16, [&](int64_t og, int64_t k, int64_t i) {
    const int64_t row = og * g.taps() + k;
    const T base_y = static_cast<T>(i * g.stride[0] - g.pad_begin[0] +
                                    (k / g.kw) * g.dilation[0]);
    for (int64_t j = 0; j < g.wo; ++j) {
      const int64_t pos = i * g.wo + j;
      const T base_x = static_cast<T>(j * g.stride[1] - g.pad_begin[1] +
                                      (k % g.kw) * g.dilation[1]);
      Tap<T>& tap = taps[row * p + pos];
      tap.at = Locate(base_y + offset[2 * row * p + pos],
                      base_x + offset[(2 * row + 1) * p + pos], g.h, g.w);
      tap.m = mask ? mask[row * p + pos] : T(1);
    }
  });
}

// col[(c * K + k) * P + pos] = m * bilinear(x[c]) for one image.
template <typename T>
void DeformIm2Col(const Geometry& g, const Tap<T>* taps, const T* x, T* col) {
  const int64_t per_group = g.c / g.offset_groups, p = g.positions();
  ForEachTapRow(g, per_group * 8, [&](int64_t og, int64_t k, int64_t i) {
    const Tap<T>* row = taps + (og * g.taps() + k) * p + i * g.wo;
    for (int64_t ch = og * per_group; ch < (og + 1) * per_group; ++ch) {
      const T* plane = x + ch * g.plane();
      T* out = col + (ch * g.taps() + k) * p + i * g.wo;
      for (int64_t j = 0; j < g.wo; ++j) {
        out[j] = row[j].m * Combine(row[j].at, row[j].at.weight, plane);
      }
    }
  });
}

// dx[c] += bilinear scatter of m * dcol for one image; one channel per task,
// so no two tasks write the same pixel.
template <typename T>
void DeformCol2Im(const Geometry& g, const Tap<T>* taps, const T* dcol,
                  T* dx) {
  const int64_t per_group = g.c / g.offset_groups, p = g.positions();
  ParallelFor(g.c, g.taps() * p * 8, [&](int64_t ch) {
    T* plane = dx + ch * g.plane();
    const Tap<T>* group = taps + (ch / per_group) * g.taps() * p;
    const T* d = dcol + ch * g.taps() * p;
    for (int64_t e = 0; e < g.taps() * p; ++e) {
      const T v = group[e].m * d[e];
      const Corners<T>& c = group[e].at;
      for (int t = 0; t < 4; ++t) {
        if (c.at[t] >= 0) plane[c.at[t]] += v * c.weight[t];
      }
    }
  });
}

// The offset and mask gradients of one image: for each (group, tap,
// position), the column gradient times the derivative of m * bilinear(x)
// with respect to (dy, dx) and m, summed over the group's channels.
template <typename T>
void DeformCoordGrad(const Geometry& g, const Tap<T>* taps, const T* x,
                     const T* dcol, T* doffset, T* dmask) {
  const int64_t per_group = g.c / g.offset_groups, p = g.positions();
  ForEachTapRow(g, per_group * 24, [&](int64_t og, int64_t k, int64_t i) {
    const int64_t row = og * g.taps() + k;
    for (int64_t j = 0; j < g.wo; ++j) {
      const int64_t pos = i * g.wo + j;
      const Tap<T>& tap = taps[row * p + pos];
      T gy = T(0), gx = T(0), gm = T(0);
      for (int64_t ch = og * per_group; ch < (og + 1) * per_group; ++ch) {
        const T* plane = x + ch * g.plane();
        const T d = dcol[(ch * g.taps() + k) * p + pos];
        for (int t = 0; t < 4; ++t) {
          if (tap.at.at[t] < 0) continue;
          const T v = d * plane[tap.at.at[t]];
          gy += v * tap.at.dweight_dy[t];
          gx += v * tap.at.dweight_dx[t];
          gm += v * tap.at.weight[t];
        }
      }
      if (doffset) {
        doffset[2 * row * p + pos] = tap.m * gy;
        doffset[(2 * row + 1) * p + pos] = tap.m * gx;
      }
      if (dmask) dmask[row * p + pos] = gm;
    }
  });
}

// ------------------------------------------------------------------ kernels

// The per-image slices of the batched inputs, and the tap table of the image.
template <typename T>
struct Batch {
  const Geometry& g;
  const T *x, *offset, *mask;

  const T* image(int64_t n) const { return x + n * g.c * g.plane(); }
  void Locate(int64_t n, Tap<T>* taps) const {
    const int64_t rows = g.offset_groups * g.taps(), p = g.positions();
    LocateTaps(g, offset + n * 2 * rows * p,
               mask ? mask + n * rows * p : nullptr, taps);
  }
};

template <typename T>
Tap<T>* TapTable(const dg::KernelContext& ctx, const Geometry& g) {
  return ctx.workspace<Tap<T>>(
      static_cast<size_t>(g.offset_groups * g.taps() * g.positions()));
}

template <typename T>
void DeformConv2dCpu(dg::KernelContext& ctx) {
  const Geometry g =
      ReadGeometry(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  const Batch<T> in{g, ctx.input(0).data<const T>(),
                    ctx.input(2).data<const T>(),
                    ctx.num_inputs() > 3 ? ctx.input(3).data<const T>()
                                         : nullptr};
  const T* w = ctx.input(1).data<const T>();
  const T* bias = ctx.num_inputs() > 4 ? ctx.input(4).data<const T>() : nullptr;
  T* y = ctx.output(0).data<T>();
  const int64_t p = g.positions(), og = g.o / g.groups, kg = g.group_rows();
  if (g.n == 0 || g.o == 0) return;
  T* col = ctx.workspace<T>(static_cast<size_t>(g.rows() * p));
  Tap<T>* taps = TapTable<T>(ctx, g);
  for (int64_t n = 0; n < g.n; ++n) {
    in.Locate(n, taps);
    DeformIm2Col(g, taps, in.image(n), col);
    T* yn = y + n * g.o * p;
    for (int64_t gr = 0; gr < g.groups; ++gr) {
      Gemm(false, og, p, kg, w + gr * og * kg, col + gr * kg * p, false,
           yn + gr * og * p);
    }
    if (bias) {
      ParallelFor(g.o, p, [&](int64_t o) {
        T* plane = yn + o * p;
        for (int64_t e = 0; e < p; ++e) plane[e] += bias[o];
      });
    }
  }
}

// dW_g += dy_g col_g^T for one image: col is transposed per group into
// `scratch` [P, Cg * K] so the product runs on the same GEMM.
template <typename T>
void AccumulateWeightGrad(const Geometry& g, const T* dyn, const T* col,
                          T* scratch, T* dw) {
  const int64_t p = g.positions(), og = g.o / g.groups, kg = g.group_rows();
  for (int64_t gr = 0; gr < g.groups; ++gr) {
    Transpose(kg, p, col + gr * kg * p, scratch);
    Gemm(false, og, kg, p, dyn + gr * og * p, scratch, true,
         dw + gr * og * kg);
  }
}

// Outputs dx, dweight, doffset, dmask (each empty unless asked for).
template <typename T>
void DeformConv2dGradCpu(dg::KernelContext& ctx) {
  const Geometry g =
      ReadGeometry(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  const bool has_mask = ctx.num_inputs() > 4;
  const Wanted want = ReadWanted(ctx, has_mask);
  const Batch<T> in{g, ctx.input(0).data<const T>(),
                    ctx.input(2).data<const T>(),
                    has_mask ? ctx.input(4).data<const T>() : nullptr};
  const T* w = ctx.input(1).data<const T>();
  const T* dy = ctx.input(3).data<const T>();
  T* dx = want.x ? ctx.output(0).data<T>() : nullptr;
  T* dw = want.w ? ctx.output(1).data<T>() : nullptr;
  T* doffset = want.offset ? ctx.output(2).data<T>() : nullptr;
  T* dmask = want.mask ? ctx.output(3).data<T>() : nullptr;
  if (dx) std::fill(dx, dx + ctx.output(0).numel(), T(0));
  if (dw) std::fill(dw, dw + ctx.output(1).numel(), T(0));
  const int64_t p = g.positions(), og = g.o / g.groups, kg = g.group_rows();
  const int64_t rows = g.offset_groups * g.taps();
  if (g.n == 0) return;
  T* col = ctx.workspace<T>(static_cast<size_t>(g.rows() * p));
  T* scratch = dw ? ctx.workspace<T>(static_cast<size_t>(kg * p)) : nullptr;
  Tap<T>* taps = TapTable<T>(ctx, g);
  for (int64_t n = 0; n < g.n; ++n) {
    in.Locate(n, taps);
    const T* dyn = dy + n * g.o * p;
    if (dw) {
      DeformIm2Col(g, taps, in.image(n), col);
      AccumulateWeightGrad(g, dyn, col, scratch, dw);
    }
    if (!dx && !doffset && !dmask) continue;
    for (int64_t gr = 0; gr < g.groups; ++gr) {  // dcol_g = W_g^T dy_g
      Gemm(true, kg, p, og, w + gr * og * kg, dyn + gr * og * p, false,
           col + gr * kg * p);
    }
    if (dx) DeformCol2Im(g, taps, col, dx + n * g.c * g.plane());
    if (doffset || dmask) {
      DeformCoordGrad(g, taps, in.image(n), col,
                      doffset ? doffset + n * 2 * rows * p : nullptr,
                      dmask ? dmask + n * rows * p : nullptr);
    }
  }
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema& kDeformConv2d =
    ConvAttrs(dg::internal::NewOp("DeformConv2d")
    .Doc("Deformable 2-D convolution in NCHW layout: v1 (Dai et al. 2017) "
         "without a mask, v2 (modulated, Zhu et al. 2018) with one. Tap k = "
         "p * kw + q of offset group g at output (i, j) samples x bilinearly "
         "(zeros outside the image) at (i * sh - pt + p * dh + "
         "offset[n, 2 * (g * K + k), i, j], j * sw - pl + q * dw + "
         "offset[n, 2 * (g * K + k) + 1, i, j]) and scales the sample by "
         "mask[n, g * K + k, i, j]; the samples are then convolved with w as "
         "in a grouped Conv2d. Offsets are interleaved (dy, dx) per tap and "
         "per offset group, as in torchvision. The output size is that of "
         "Conv2d with the same geometry. A bias needs a mask (trailing "
         "optional inputs); dragon_vision_ops.deform_conv2d adds a bias "
         "without one.")
    .Input("x", kFloat, 0, "Input [N, C, H, W].")
    .Input("weight", kFloat, 0, "Filter [O, C / groups, kh, kw].")
    .Input("offset", kFloat, 0,
           "Sampling offsets [N, 2 * offset_groups * kh * kw, Ho, Wo], "
           "(dy, dx) per tap.")
    .Input("mask", kFloat, DG_ARG_OPTIONAL,
           "Optional modulation [N, offset_groups * kh * kw, Ho, Wo] (v2).")
    .Input("bias", kFloat, DG_ARG_OPTIONAL, "Optional bias [O].")
    .Output("y", kFloat, 0, "Output [N, O, Ho, Wo], dtype of x."))
    .Shape(DeformConv2dShape);

[[maybe_unused]] static const dg::OpSchema& kDeformConv2dGrad =
    ConvAttrs(dg::internal::NewOp("DeformConv2dGrad")
    .Doc("Backward of DeformConv2d: the gradients of x, weight, offset and "
         "mask given the output gradient dy. Only the gradients flagged in "
         "grads are computed; the others (and dmask without a mask) are "
         "empty [0]. The bias gradient is dy summed over N, Ho, Wo. Its "
         "gradient rule refuses second order (NotImplementedError).")
    .Input("x", kFloat, 0, "The convolution's input [N, C, H, W].")
    .Input("weight", kFloat, 0, "Filter [O, C / groups, kh, kw].")
    .Input("offset", kFloat, 0,
           "Offsets [N, 2 * offset_groups * kh * kw, Ho, Wo].")
    .Input("dy", kFloat, 0, "Output gradient [N, O, Ho, Wo].")
    .Input("mask", kFloat, DG_ARG_OPTIONAL,
           "Optional modulation [N, offset_groups * kh * kw, Ho, Wo].")
    .Output("dx", kFloat, 0, "Gradient of x, or [0].")
    .Output("dweight", kFloat, 0, "Gradient of weight, or [0].")
    .Output("doffset", kFloat, 0, "Gradient of offset, or [0].")
    .Output("dmask", kFloat, 0, "Gradient of mask, or [0].")
    .Attr("grads", std::vector<int64_t>{1, 1, 1, 1},
          "Which gradients to compute: 4 flags (x, weight, offset, mask)."))
    .Shape(DeformConv2dGradShape);

DG_KERNEL("DeformConv2d", "cpu", DeformConv2dCpu, float, double);
DG_KERNEL("DeformConv2dGrad", "cpu", DeformConv2dGradCpu, float, double);

}  // namespace vision
