// Resampling ops defined by this plugin: Interpolate (nearest,
// nearest-exact, linear, bilinear, bicubic, trilinear over N,C,W / NCHW /
// NCDHW, as torch.nn.functional.interpolate) and GridSample (bilinear and
// nearest over NCHW, as torch.nn.functional.grid_sample), their gradient
// ops, and the CPU kernels of all four. The coordinate maps and weights are
// in resample.h, shared with the CUDA kernels (cuda/resample.cu).
//
// Every CPU gradient kernel is a scatter whose writes are partitioned
// (by plane or slice), so the tasks run in parallel without atomics and the
// result does not depend on the thread count.
#include "resample.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "common.h"

namespace vision {
namespace resample {

namespace {

template <typename V>
std::string ListStr(const std::vector<V>& v) {
  std::string out = "[";
  for (size_t i = 0; i < v.size(); ++i) {
    out += (i ? ", " : "") + dg::Str(v[i]);
  }
  return out + "]";
}

// The modes Interpolate knows and the input rank each interpolating mode
// needs (0: any of 3, 4, 5).
struct ModeSpec {
  const char* name;
  int mode;
  int rank;
};
constexpr ModeSpec kModes[] = {
    {"nearest", kNearest, 0},    {"nearest-exact", kNearestExact, 0},
    {"linear", kLinear, 3},      {"bilinear", kLinear, 4},
    {"trilinear", kLinear, 5},   {"bicubic", kCubic, 4},
};

const ModeSpec& FindMode(const std::string& name, int64_t rank) {
  for (const ModeSpec& m : kModes) {
    if (name != m.name) continue;
    DG_CHECK(m.rank == 0 || m.rank == rank, DG_INVALID_ARGUMENT, "mode '",
             name, "' needs a ", m.rank, "-D input (", m.rank - 2,
             " spatial axes), got rank ", rank,
             "; use linear for 3-D, bilinear or bicubic for 4-D, trilinear "
             "for 5-D inputs");
    return m;
  }
  DG_CHECK(false, DG_INVALID_ARGUMENT, "unknown mode '", name,
           "'; expected one of nearest, nearest-exact, linear, bilinear, "
           "bicubic, trilinear");
  return kModes[0];
}

// A per-axis attribute of 1 value (every axis) or one per spatial axis.
template <typename V>
std::vector<V> PerAxis(const std::vector<V>& v, size_t axes, const char* name) {
  DG_CHECK(v.size() == 1 || v.size() == axes, DG_INVALID_ARGUMENT, name, " ",
           ListStr(v), " must hold 1 value or one per spatial axis (", axes,
           ")");
  return v.size() == 1 ? std::vector<V>(axes, v[0]) : v;
}

// The output sizes from `size` or `scale_factor` (exactly one given).
void ReadTargets(const dg::AttrReader& attrs, const std::vector<int64_t>& x,
                 InterpPlan* plan) {
  const size_t axes = x.size() - 2;
  const bool has_size = attrs.has("size") && !attrs.ints("size").empty();
  const bool has_scale =
      attrs.has("scale_factor") && !attrs.floats("scale_factor").empty();
  DG_CHECK(has_size != has_scale, DG_INVALID_ARGUMENT,
           has_size ? "give either size or scale_factor, not both"
                    : "give one of size or scale_factor");
  const size_t first = kAxes - axes;  // padded axes keep in = out = 1
  if (has_size) {
    const std::vector<int64_t> size = PerAxis(attrs.ints("size"), axes, "size");
    for (size_t a = 0; a < axes; ++a) {
      DG_CHECK(size[a] > 0, DG_INVALID_ARGUMENT, "size ", ListStr(size),
               " must be positive");
      plan->axis[first + a].out = size[a];
    }
    return;
  }
  const std::vector<double> scale =
      PerAxis(attrs.floats("scale_factor"), axes, "scale_factor");
  for (size_t a = 0; a < axes; ++a) {
    const double s = scale[a];
    DG_CHECK(std::isfinite(s) && s > 0.0, DG_INVALID_ARGUMENT, "scale_factor ",
             ListStr(scale), " must be finite and positive");
    const double out = std::floor(static_cast<double>(x[2 + a]) * s);
    DG_CHECK(out >= 1.0 && out < 9.0e15, DG_INVALID_ARGUMENT, "scale_factor ",
             ListStr(scale), " gives an output size of ", out, " along axis ",
             2 + a, " (input ", ShapeStr(x),
             "); it must be at least 1 and representable");
    plan->axis[first + a].out = static_cast<int64_t>(out);
    plan->axis[first + a].scale_factor = s;
  }
}

}  // namespace

InterpPlan ReadInterpPlan(const dg::AttrReader& attrs,
                          const std::vector<int64_t>& x) {
  const int64_t rank = static_cast<int64_t>(x.size());
  DG_CHECK(rank >= 3 && rank <= 5, DG_INVALID_ARGUMENT,
           "x must be 3-D [N, C, W], 4-D [N, C, H, W] or 5-D [N, C, D, H, W], "
           "got shape ", ShapeStr(x), " (rank ", rank, ")");
  for (int64_t a = 2; a < rank; ++a) {
    DG_CHECK(x[a] > 0, DG_INVALID_ARGUMENT, "x shape ", ShapeStr(x),
             " has an empty spatial axis ", a,
             "; interpolation needs at least one input cell per axis");
  }
  InterpPlan plan;
  const std::string mode_name = attrs.s("mode");
  plan.mode = FindMode(mode_name, rank).mode;
  const bool nearest = plan.mode == kNearest || plan.mode == kNearestExact;
  const bool align = attrs.has("align_corners") && attrs.b("align_corners");
  DG_CHECK(!(nearest && attrs.has("align_corners")), DG_INVALID_ARGUMENT,
           "align_corners can only be set with the interpolating modes "
           "(linear, bilinear, bicubic, trilinear), not with mode '",
           mode_name, "'; leave it unset (None)");
  plan.planes = x[0] * x[1];
  const size_t first = kAxes - (rank - 2);
  for (int64_t a = 2; a < rank; ++a) {
    plan.axis[first + a - 2].in = x[a];
    plan.axis[first + a - 2].align_corners = align;
    plan.axis[first + a - 2].nearest_shortcuts = rank == 4;
  }
  ReadTargets(attrs, x, &plan);
  // Under align_corners the corner cells define the scale; a factor given
  // by the caller only sets the output size (PyTorch does the same).
  if (align) {
    for (Axis& axis : plan.axis) axis.scale_factor = 0.0;
  }
  // Bounds that keep every index computation of the kernels in int64 (the
  // spatial axes first, so that an empty batch cannot hide an overflow).
  const std::vector<int64_t> out = InterpOutputShape(plan, x);
  for (const Axis& axis : plan.axis) {
    DG_CHECK(axis.out <= (int64_t{1} << 60) / axis.in, DG_INVALID_ARGUMENT,
             "output shape ", ShapeStr(out), " is too large for input ",
             ShapeStr(x));
  }
  int64_t numel = 1;
  for (auto d = out.rbegin(); d != out.rend(); ++d) {
    DG_CHECK(!__builtin_mul_overflow(numel, *d, &numel), DG_INVALID_ARGUMENT,
             "output shape ", ShapeStr(out),
             " has more elements than fit in int64");
  }
  return plan;
}

std::vector<int64_t> InterpOutputShape(const InterpPlan& plan,
                                       const std::vector<int64_t>& x) {
  std::vector<int64_t> out = {x[0], x[1]};
  for (size_t a = kAxes - (x.size() - 2); a < kAxes; ++a) {
    out.push_back(plan.axis[a].out);
  }
  return out;
}

namespace {

constexpr const char* kModeDoc =
    "nearest (legacy PyTorch rule: source = floor(dst * scale)), "
    "nearest-exact (floor((dst + 0.5) * scale)), linear (3-D x), bilinear or "
    "bicubic (4-D x; bicubic uses Keys' kernel with A = -0.75), trilinear "
    "(5-D x).";
constexpr const char* kSizeDoc =
    "Output spatial size, 1 value (every axis) or one per spatial axis. Give "
    "exactly one of size and scale_factor.";
constexpr const char* kScaleDoc =
    "Multiplier of each spatial size, 1 value or one per axis: the output "
    "size is floor(in * scale_factor) and, without align_corners, source "
    "coordinates are computed with 1 / scale_factor (PyTorch's "
    "recompute_scale_factor=None).";
constexpr const char* kAlignDoc =
    "Interpolating modes only (None otherwise): map the centres of the "
    "corner cells onto each other, source = dst * (in - 1) / (out - 1); "
    "False/None uses half-pixel centres.";

void InterpolateShape(dg::InferContext& ctx) {
  const std::vector<int64_t> x = ctx.input(0).shape();
  ctx.set_output(0, ctx.input(0).dtype(),
                 InterpOutputShape(ReadInterpPlan(ctx, x), x));
}

void InterpolateGradShape(dg::InferContext& ctx) {
  const std::vector<int64_t> x = ctx.input(0).shape();
  const std::vector<int64_t> y = InterpOutputShape(ReadInterpPlan(ctx, x), x);
  const std::vector<int64_t> dy = ctx.input(1).shape();
  DG_CHECK(dy == y, DG_INVALID_ARGUMENT, "dy has shape ", ShapeStr(dy),
           " but interpolating x of shape ", ShapeStr(x), " gives ",
           ShapeStr(y));
  ctx.set_output(0, ctx.input(0).dtype(), x);
}

dg::OpSchema& InterpAttrs(dg::OpSchema& op) {
  return op.OptionalAttr("size", DG_ATTR_INTS, kSizeDoc)
      .OptionalAttr("scale_factor", DG_ATTR_FLOATS, kScaleDoc)
      .Attr("mode", "nearest", kModeDoc)
      .OptionalAttr("align_corners", DG_ATTR_BOOL, kAlignDoc);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kInterpOps[] = {
    &InterpAttrs(
         dg::internal::NewOp("Interpolate")
             .Doc("Resize the spatial axes of x (N, C, *spatial) by "
                  "nearest, linear or bicubic interpolation, as "
                  "torch.nn.functional.interpolate. Separable: along each "
                  "axis, output position dst reads the source cells "
                  "around its source coordinate; cells beyond the border "
                  "are clamped to it. In the nearest and linear modes an "
                  "axis whose output size equals its input size is copied "
                  "and nearest doubling an axis reads dst / 2 (PyTorch's CPU "
                  "rules).")
             .Input("x", kFloat, 0, "Input, [N, C, W], [N, C, H, W] or "
                                    "[N, C, D, H, W].")
             .Output("y", kFloat, 0,
                     "Resized x, [N, C, *output size]."))
         .Shape(InterpolateShape),
    &InterpAttrs(
         dg::internal::NewOp("InterpolateGrad")
             .Doc("Gradient of Interpolate (its adjoint): each dy is "
                  "spread over the source cells it was read from, with the "
                  "same weights. Linear in dy; x only gives the shape.")
             .Input("x", kFloat, DG_ARG_NO_GRAD,
                    "The interpolated input (shape only).")
             .Input("dy", kFloat, 0, "Gradient of Interpolate's output.")
             .Output("dx", kFloat, 0, "Gradient of x, x's shape.")
             .Flags(DG_OP_SAME_DTYPE))
         .Shape(InterpolateGradShape),
};

// ---------------------------------------------------------- CPU kernels
//
// Interpolate is separable, so the CPU runs it as one 1-D pass per resized
// axis (W, then H, then D), each reading the previous pass's output: a
// bicubic 2-D upsampling costs 4 + 4 taps per output instead of 16. The
// intermediates are float64 whatever the dtype; InterpolateGrad runs the
// adjoint passes in the reverse order (D, H, W).

namespace {

// The taps of every output position of one axis, kMaxTaps slots each.
struct AxisTable {
  int taps = 1;
  bool identity = true;  // output cell o reads input cell o with weight 1
  std::vector<int64_t> idx;
  std::vector<double> w;
};

AxisTable MakeTable(const Axis& axis, int mode) {
  AxisTable tab;
  tab.idx.resize(axis.out * kMaxTaps);
  tab.w.resize(axis.out * kMaxTaps);
  tab.identity = axis.in == axis.out;
  for (int64_t o = 0; o < axis.out; ++o) {
    int64_t* idx = &tab.idx[o * kMaxTaps];
    double* w = &tab.w[o * kMaxTaps];
    tab.taps = AxisTaps(axis, mode, o, idx, w);
    tab.identity = tab.identity && tab.taps == 1 && idx[0] == o && w[0] == 1.0;
  }
  return tab;
}

// One 1-D pass over a tensor viewed as [outer, len, inner]: along the axis,
// `len_in` cells on the input side, `len_out` on the output side.
struct Pass {
  const AxisTable* table;
  int64_t outer, len_in, len_out, inner;
};

// The passes of the resized axes, in forward order (W, H, D); `planes` is
// N * C.
std::vector<Pass> MakePasses(const InterpPlan& plan, const AxisTable* tabs) {
  int64_t dims[kAxes] = {plan.axis[0].in, plan.axis[1].in, plan.axis[2].in};
  std::vector<Pass> passes;
  for (int a = kAxes - 1; a >= 0; --a) {
    if (tabs[a].identity) continue;
    Pass p{&tabs[a], plan.planes, dims[a], plan.axis[a].out, 1};
    for (int b = 0; b < a; ++b) p.outer *= dims[b];
    for (int b = a + 1; b < kAxes; ++b) p.inner *= dims[b];
    passes.push_back(p);
    dims[a] = plan.axis[a].out;
  }
  return passes;
}

// Forward pass: dst[b, o, j] = sum_k w[o, k] * src[b, idx[o, k], j].
template <typename S, typename D>
void GatherPass(const Pass& p, const S* src, D* dst) {
  const AxisTable& t = *p.table;
  ParallelFor(p.outer * p.len_out, p.inner * t.taps, [&](int64_t row) {
    const int64_t o = row % p.len_out;
    const S* s = src + (row / p.len_out) * p.len_in * p.inner;
    const int64_t* idx = &t.idx[o * kMaxTaps];
    const double* w = &t.w[o * kMaxTaps];
    D* d = dst + row * p.inner;
    for (int64_t j = 0; j < p.inner; ++j) {
      double acc = 0.0;
      for (int k = 0; k < t.taps; ++k) {
        acc += w[k] * static_cast<double>(s[idx[k] * p.inner + j]);
      }
      d[j] = static_cast<D>(acc);
    }
  });
}

// Adjoint pass (the forward pass transposed): for every (b, o, k), adds
// w[o, k] * src[b, o, j] to dst[b, idx[o, k], j]. Each task owns one b
// slice of dst, so there are no races and no order dependence.
template <typename S>
void ScatterPass(const Pass& p, const S* src, double* dst) {
  const AxisTable& t = *p.table;
  const int64_t slice_in = p.len_in * p.inner, slice_out = p.len_out * p.inner;
  ParallelFor(p.outer, slice_out * t.taps + slice_in, [&](int64_t b) {
    double* d = dst + b * slice_in;
    std::fill(d, d + slice_in, 0.0);
    const S* s = src + b * slice_out;
    for (int64_t o = 0; o < p.len_out; ++o) {
      for (int k = 0; k < t.taps; ++k) {
        const double w = t.w[o * kMaxTaps + k];
        double* dk = d + t.idx[o * kMaxTaps + k] * p.inner;
        const S* so = s + o * p.inner;
        for (int64_t j = 0; j < p.inner; ++j) {
          dk[j] += w * static_cast<double>(so[j]);
        }
      }
    }
  });
}

template <typename S, typename D>
void Cast(const S* src, D* dst, int64_t n) {
  ParallelFor(n, 1, [&](int64_t i) { dst[i] = static_cast<D>(src[i]); });
}

// Workspace for `count` (1 or 2) float64 intermediates, each of the
// largest intermediate size; *second is null when count is 1.
double* PassBuffers(const dg::KernelContext& ctx,
                    const std::vector<Pass>& passes, int count,
                    double** second) {
  int64_t most = 0;
  for (const Pass& p : passes) {
    most = std::max({most, p.outer * p.len_in * p.inner,
                     p.outer * p.len_out * p.inner});
  }
  double* first = ctx.workspace<double>(count * most);
  *second = count > 1 ? first + most : nullptr;
  return first;
}

struct Resampler {
  InterpPlan plan;
  AxisTable tabs[kAxes];
  std::vector<Pass> passes;

  // `grad`: the plan of InterpolateGrad (ForNearestGradient).
  Resampler(const dg::KernelContext& ctx, bool grad)
      : plan(grad ? ForNearestGradient(ReadInterpPlan(ctx, ctx.input(0).shape()))
                  : WithInputPrecision(ReadInterpPlan(ctx, ctx.input(0).shape()),
                                       ctx.input(0).dtype() == DG_FLOAT64)) {
    for (int a = 0; a < kAxes; ++a) {
      tabs[a] = MakeTable(plan.axis[a], plan.mode);
    }
    passes = MakePasses(plan, tabs);
  }
};

template <typename T>
void InterpolateCpu(dg::KernelContext& ctx) {
  if (ctx.output(0).numel() == 0) return;
  const Resampler r(ctx, false);
  const T* x = ctx.input(0).data<const T>();
  T* y = ctx.output(0).data<T>();
  const size_t n = r.passes.size();
  if (n == 0) return Cast(x, y, r.plan.planes * r.plan.in_numel());
  if (n == 1) return GatherPass(r.passes[0], x, y);
  // n - 1 intermediates, alternating between at most two buffers.
  double *b1, *b0 = PassBuffers(ctx, r.passes, n > 2 ? 2 : 1, &b1);
  GatherPass(r.passes[0], x, b0);
  for (size_t i = 1; i + 1 < n; ++i) {
    GatherPass(r.passes[i], b0, b1);
    std::swap(b0, b1);
  }
  GatherPass(r.passes[n - 1], b0, y);
}

template <typename T>
void InterpolateGradCpu(dg::KernelContext& ctx) {
  if (ctx.output(0).numel() == 0) return;
  const Resampler r(ctx, true);
  const T* dy = ctx.input(1).data<const T>();
  T* dx = ctx.output(0).data<T>();
  const size_t n = r.passes.size();
  if (n == 0) return Cast(dy, dx, r.plan.planes * r.plan.in_numel());
  // n intermediates (the last one is rounded into dx).
  double *b1, *b0 = PassBuffers(ctx, r.passes, n > 1 ? 2 : 1, &b1);
  ScatterPass(r.passes[n - 1], dy, b0);
  for (size_t i = n - 1; i-- > 0;) {
    ScatterPass(r.passes[i], b0, b1);
    std::swap(b0, b1);
  }
  Cast(b0, dx, r.plan.planes * r.plan.in_numel());
}

}  // namespace

DG_KERNEL("Interpolate", "cpu", InterpolateCpu, float, double);
DG_KERNEL("InterpolateGrad", "cpu", InterpolateGradCpu, float, double);

// ------------------------------------------------------------ GridSample

GridPlan ReadGridPlan(const dg::AttrReader& attrs,
                      const std::vector<int64_t>& x,
                      const std::vector<int64_t>& grid) {
  DG_CHECK(x.size() == 4 || x.size() == 5, DG_INVALID_ARGUMENT,
           "x must be 4-D [N, C, H, W] or 5-D [N, C, D, H, W], got shape ",
           ShapeStr(x));
  const int dims = static_cast<int>(x.size()) - 2;
  DG_CHECK(grid.size() == x.size() && grid.back() == dims,
           DG_INVALID_ARGUMENT,
           dims == 2 ? "grid must be 4-D [N, Ho, Wo, 2] holding (x, y) pairs"
                     : "grid must be 5-D [N, Do, Ho, Wo, 3] holding (x, y, z) "
                       "triples",
           " for x of shape ", ShapeStr(x), ", got shape ", ShapeStr(grid));
  DG_CHECK(grid[0] == x[0], DG_INVALID_ARGUMENT, "grid batch ", grid[0],
           " differs from x batch ", x[0], " (x ", ShapeStr(x), ", grid ",
           ShapeStr(grid), ")");
  for (size_t a = 2; a < x.size(); ++a) {
    DG_CHECK(x[a] > 0, DG_INVALID_ARGUMENT, "x shape ", ShapeStr(x),
             " has an empty spatial axis; sampling needs every spatial size "
             ">= 1");
  }
  GridPlan p;
  p.n = x[0];
  p.c = x[1];
  p.dims = dims;
  for (int a = 0; a < dims; ++a) {
    p.size[kAxes - dims + a] = x[2 + a];
    p.out[kAxes - dims + a] = grid[1 + a];
  }
  const std::string mode = attrs.s("mode");
  DG_CHECK(mode == "bilinear" || mode == "nearest" || mode == "bicubic",
           DG_INVALID_ARGUMENT, "unknown mode '", mode,
           "'; expected bilinear, nearest or bicubic");
  DG_CHECK(mode != "bicubic" || dims == 2, DG_INVALID_ARGUMENT,
           "mode 'bicubic' needs a 4-D input [N, C, H, W], got shape ",
           ShapeStr(x), "; 5-D inputs take bilinear (trilinear) or nearest");
  const std::string pad = attrs.s("padding_mode");
  DG_CHECK(pad == "zeros" || pad == "border" || pad == "reflection",
           DG_INVALID_ARGUMENT, "unknown padding_mode '", pad,
           "'; expected zeros, border or reflection");
  p.mode = mode == "nearest" ? kGridNearest
                             : (mode == "bicubic" ? kGridBicubic : kGridBilinear);
  p.pad = pad == "zeros" ? kPadZeros
                         : (pad == "border" ? kPadBorder : kPadReflection);
  p.align_corners = attrs.b("align_corners");
  return p;
}

namespace {

constexpr const char* kGridModeDoc =
    "bilinear (the 4 cells around each point; 8 on 5-D inputs, trilinear), "
    "nearest (the closest cell, halves rounded to even) or bicubic (4-D "
    "inputs: the 4 x 4 cells around the point, Keys' cubic convolution with "
    "A = -0.75).";
constexpr const char* kPaddingDoc =
    "Value of cells outside x: zeros, border (points are clipped to the "
    "image, so the edge cells repeat) or reflection (points are mirrored "
    "about the image's ends: the corner centres with align_corners, else "
    "the outer edges of the corner cells). Bicubic pads each of its cells "
    "instead of the point.";
constexpr const char* kGridAlignDoc =
    "True: -1 and 1 are the centres of the corner cells; False: the outer "
    "edges of the corner cells.";

std::vector<int64_t> GridOutputShape(const GridPlan& p) {
  std::vector<int64_t> y = {p.n, p.c};
  for (int a = kAxes - p.dims; a < kAxes; ++a) y.push_back(p.out[a]);
  return y;
}

void GridSampleShape(dg::InferContext& ctx) {
  const GridPlan p =
      ReadGridPlan(ctx, ctx.input(0).shape(), ctx.input(1).shape());
  ctx.set_output(0, ctx.input(0).dtype(), GridOutputShape(p));
}

void GridSampleGradShape(dg::InferContext& ctx) {
  const std::vector<int64_t> x = ctx.input(0).shape(),
                             grid = ctx.input(1).shape(),
                             dy = ctx.input(2).shape();
  const std::vector<int64_t> y = GridOutputShape(ReadGridPlan(ctx, x, grid));
  DG_CHECK(dy == y, DG_INVALID_ARGUMENT, "dy has shape ", ShapeStr(dy),
           " but sampling x of shape ", ShapeStr(x), " at grid ",
           ShapeStr(grid), " gives ", ShapeStr(y));
  ctx.set_output(0, ctx.input(0).dtype(), x);
  ctx.set_output(1, ctx.input(1).dtype(), grid);
}

dg::OpSchema& GridAttrs(dg::OpSchema& op) {
  return op.Attr("mode", "bilinear", kGridModeDoc)
      .Attr("padding_mode", "zeros", kPaddingDoc)
      .Attr("align_corners", false, kGridAlignDoc);
}

constexpr const char* kGridXDoc = "Input, [N, C, H, W] or [N, C, D, H, W].";
constexpr const char* kGridDoc =
    "Sampling points, [N, Ho, Wo, 2] holding (x, y) or [N, Do, Ho, Wo, 3] "
    "holding (x, y, z), normalised to [-1, 1] (x along W, y along H, z "
    "along D).";

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kGridOps[] = {
    &GridAttrs(
         dg::internal::NewOp("GridSample")
             .Doc("Sample x at the points of grid, as "
                  "torch.nn.functional.grid_sample on 4-D and 5-D inputs: "
                  "y[n, c, i, j] interpolates plane x[n, c] at grid[n, i, "
                  "j] (y[n, c, i, j, k] at grid[n, i, j, k] for volumes). "
                  "Non-finite points sample 0.")
             .Input("x", kFloat, 0, kGridXDoc)
             .Input("grid", kFloat, 0, kGridDoc)
             .Output("y", kFloat, 0,
                     "Samples, [N, C, Ho, Wo] or [N, C, Do, Ho, Wo].")
             .Flags(DG_OP_SAME_DTYPE))
         .Shape(GridSampleShape),
    &GridAttrs(
         dg::internal::NewOp("GridSampleGrad")
             .Doc("Gradients of GridSample: dx (each dy spread over the "
                  "cells its point read, with the same weights) and dgrid "
                  "(the derivative of the interpolation weights with "
                  "respect to the point, times the unnormalisation factor "
                  "and the reflection's sign; zero where clipping is active "
                  "and in nearest mode). Has no gradient rule itself.")
             .Input("x", kFloat, 0, kGridXDoc)
             .Input("grid", kFloat, 0, kGridDoc)
             .Input("dy", kFloat, 0, "Gradient of GridSample's output.")
             .Output("dx", kFloat, 0, "Gradient of x, x's shape.")
             .Output("dgrid", kFloat, 0, "Gradient of grid, grid's shape.")
             .Flags(DG_OP_SAME_DTYPE))
         .Shape(GridSampleGradShape),
};

namespace {

GridPlan KernelGridPlan(const dg::KernelContext& ctx) {
  return ReadGridPlan(ctx, ctx.input(0).shape(), ctx.input(1).shape());
}

// Calls fn(StaticGrid<mode, padding, dims>{}) for the plan's combination,
// so the per-point code is compiled once per combination (bicubic is 2-D
// only).
template <int M, int P, typename F>
void WithDims(const GridPlan& p, F&& fn) {
  if (p.dims == 3) {
    if constexpr (M != kGridBicubic) fn(StaticGrid<M, P, 3>{});
  } else {
    fn(StaticGrid<M, P, 2>{});
  }
}

template <int M, typename F>
void WithPad(const GridPlan& p, F&& fn) {
  switch (p.pad) {
    case kPadZeros: return WithDims<M, kPadZeros>(p, fn);
    case kPadBorder: return WithDims<M, kPadBorder>(p, fn);
    default: return WithDims<M, kPadReflection>(p, fn);
  }
}

template <typename F>
void WithGridSpec(const GridPlan& p, F&& fn) {
  switch (p.mode) {
    case kGridNearest: return WithPad<kGridNearest>(p, fn);
    case kGridBicubic: return WithPad<kGridBicubic>(p, fn);
    default: return WithPad<kGridBilinear>(p, fn);
  }
}

template <typename S, typename T>
void GridSampleCpuSpec(dg::KernelContext& ctx, const GridPlan& p) {
  const T* x = ctx.input(0).data<const T>();
  const T* grid = ctx.input(1).data<const T>();
  T* y = ctx.output(0).data<T>();
  const int64_t points = p.points(), plane = p.plane();
  constexpr int taps = GridTapCount<S>(GridPlan());
  // One task per (n, point): its taps once, then its C outputs.
  ParallelFor(p.n * points, p.c * 2 * taps + 64, [&](int64_t np) {
    const int64_t n = np / points, q = np % points;
    int64_t off[taps];
    double w[taps];
    FlattenTaps<S>(p, GridPointAt<S>(p, grid, np), off, w);
    for (int64_t c = 0; c < p.c; ++c) {
      const T* xp = x + (n * p.c + c) * plane;
      double acc = 0.0;
      for (int t = 0; t < taps; ++t) acc += w[t] * static_cast<double>(xp[off[t]]);
      y[(n * p.c + c) * points + q] = static_cast<T>(acc);
    }
  });
}

template <typename T>
void GridSampleCpu(dg::KernelContext& ctx) {
  const GridPlan p = KernelGridPlan(ctx);
  WithGridSpec(p, [&](auto spec) {
    GridSampleCpuSpec<decltype(spec), T>(ctx, p);
  });
}

template <typename S, typename T>
void GridSampleGradCpuSpec(dg::KernelContext& ctx, const GridPlan& p) {
  const T* x = ctx.input(0).data<const T>();
  const T* grid = ctx.input(1).data<const T>();
  const T* dy = ctx.input(2).data<const T>();
  T* dx = ctx.output(0).data<T>();
  T* dgrid = ctx.output(1).data<T>();
  const int64_t points = p.points(), plane = p.plane();
  constexpr int taps = GridTapCount<S>(GridPlan());
  // The taps of every point, computed once for all channels (unused slots
  // have weight 0 and offset 0).
  int64_t* offs = ctx.workspace<int64_t>(p.n * points * taps);
  double* wts = ctx.workspace<double>(p.n * points * taps);
  ParallelFor(p.n * points, 64, [&](int64_t np) {
    FlattenTaps<S>(p, GridPointAt<S>(p, grid, np), offs + np * taps,
                   wts + np * taps);
  });
  // dx: one task per (n, c) plane, scattering its own points' gradients in
  // float64, then rounded once.
  double* acc = ctx.workspace<double>(p.n * p.c * plane);
  ParallelFor(p.n * p.c, points * 2 * taps + plane, [&](int64_t nc) {
    double* dst = acc + nc * plane;
    std::fill(dst, dst + plane, 0.0);
    const T* g = dy + nc * points;
    const int64_t first = (nc / p.c) * points * taps;
    const int64_t* o = offs + first;
    const double* w = wts + first;
    for (int64_t q = 0; q < points; ++q) {
      const double gq = static_cast<double>(g[q]);
      for (int t = 0; t < taps; ++t) dst[o[q * taps + t]] += w[q * taps + t] * gq;
    }
    for (int64_t i = 0; i < plane; ++i) dx[nc * plane + i] = static_cast<T>(dst[i]);
  });
  // dgrid: one task per (n, point), summing over channels.
  ParallelFor(p.n * points, p.c * 4 * taps + 64, [&](int64_t np) {
    GridPointGrad<S>(p, x, grid, dy, np, dgrid);
  });
}

template <typename T>
void GridSampleGradCpu(dg::KernelContext& ctx) {
  const GridPlan p = KernelGridPlan(ctx);
  WithGridSpec(p, [&](auto spec) {
    GridSampleGradCpuSpec<decltype(spec), T>(ctx, p);
  });
}

}  // namespace

DG_KERNEL("GridSample", "cpu", GridSampleCpu, float, double);
DG_KERNEL("GridSampleGrad", "cpu", GridSampleGradCpu, float, double);

}  // namespace resample
}  // namespace vision
