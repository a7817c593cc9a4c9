// 2-D pooling over NCHW tensors: MaxPool2d, AvgPool2d, AdaptiveAvgPool2d,
// and the helper ops their gradients are written with (MaxPool2dGrad,
// MaxPool2dIndices, AvgPool2dGrad, AdaptiveAvgPool2dGrad).
//
// Window geometry follows PyTorch: along one spatial axis of size L with
// kernel k, stride s, padding pb before and pe after, and dilation d, the
// output has
//   floor_or_ceil((L + pb + pe - d(k-1) - 1) / s) + 1
// positions; in ceil mode a last window that would start in the end
// padding is dropped. Padded cells never take part in a maximum; the
// average divides by the window clipped to the padded extent
// (count_include_pad) or by the number of real cells.
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kX = "Input, [N, C, H, W].";
constexpr const char* kKernel = "Window size [kh, kw] (one value: both).";
constexpr const char* kStrides =
    "Window step [sh, sw] (one value: both); empty means kernel_size.";
constexpr const char* kPads =
    "Implicit padding: [ph, pw] on both sides of H and W (one value: all), "
    "or 4 values [top, left, bottom, right] (the begins, then the ends); "
    "each at most half the kernel.";
constexpr const char* kDilations =
    "Spacing [dh, dw] between window cells (one value: both).";
constexpr const char* kCeil =
    "Round the output size up instead of down (a window must still start "
    "inside the input or its left padding).";
constexpr const char* kCountPad =
    "Divide by the window size including padded cells (True) or by the "
    "number of real cells (False).";
constexpr const char* kDy = "Gradient of the pooled output.";

// A per-axis attribute given as 1 or 2 values; `fallback` when empty and
// `allow_empty`.
std::vector<int64_t> Pair(const dg::InferContext& ctx, const char* name,
                          bool allow_empty,
                          const std::vector<int64_t>& fallback) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty() && allow_empty) return fallback;
  DG_CHECK(v.size() == 1 || v.size() == 2, DG_INVALID_ARGUMENT, name, " ",
           ShapeStr(v), " must hold 1 or 2 values (one per spatial axis)");
  if (v.size() == 1) v.push_back(v[0]);
  return v;
}

struct Geometry {
  Shape x;                   // [N, C, H, W]
  int64_t out[2];            // [OH, OW]
};

void CheckInput4d(const dg::TensorRef& x, const char* what) {
  Shape s = x.shape();
  DG_CHECK(s.size() == 4, DG_INVALID_ARGUMENT, what,
           " must be 4-D [N, C, H, W], got shape ", ShapeStr(s), " (rank ",
           s.size(), ")");
  DG_CHECK(s[2] > 0 && s[3] > 0, DG_INVALID_ARGUMENT, what, " shape ",
           ShapeStr(s), " has an empty spatial axis; pooling needs H, W >= 1");
}

// Whether a window of `k` cells `d` apart starting at `start` (in input
// coordinates; negative in the left padding) has a cell in [0, len).
bool WindowTouchesInput(int64_t start, int64_t k, int64_t d, int64_t len) {
  for (int64_t j = 0; j < k; ++j) {
    const int64_t c = start + j * d;
    if (c >= 0 && c < len) return true;
  }
  return false;
}

// Output sizes of a windowed pooling; validates every attribute.
Geometry WindowGeometry(const dg::InferContext& ctx, bool has_dilation) {
  CheckInput4d(ctx.input(0), "x");
  Geometry g;
  g.x = ctx.input(0).shape();
  const std::vector<int64_t> k = Pair(ctx, "kernel_size", false, {});
  const std::vector<int64_t> s = Pair(ctx, "strides", true, k);
  std::vector<int64_t> p = ctx.ints("pads");
  DG_CHECK(p.size() == 1 || p.size() == 2 || p.size() == 4,
           DG_INVALID_ARGUMENT, "pads ", ShapeStr(p),
           " must hold 1, 2 (both sides) or 4 values (top, left, bottom, "
           "right)");
  if (p.size() == 1) p.push_back(p[0]);
  if (p.size() == 2) p.insert(p.end(), {p[0], p[1]});
  const std::vector<int64_t> d = has_dilation
                                     ? Pair(ctx, "dilations", false, {})
                                     : std::vector<int64_t>{1, 1};
  const bool ceil_mode = ctx.b("ceil_mode");
  static const char* kAxis[] = {"H", "W"};
  for (int a = 0; a < 2; ++a) {
    DG_CHECK(k[a] > 0, DG_INVALID_ARGUMENT, "kernel_size ", ShapeStr(k),
             " must be positive");
    DG_CHECK(s[a] > 0, DG_INVALID_ARGUMENT, "strides ", ShapeStr(s),
             " must be positive");
    DG_CHECK(d[a] > 0, DG_INVALID_ARGUMENT, "dilations ", ShapeStr(d),
             " must be positive");
    DG_CHECK(p[a] >= 0 && 2 * p[a] <= k[a] && p[a + 2] >= 0 &&
                 2 * p[a + 2] <= k[a],
             DG_INVALID_ARGUMENT, "pads ", ShapeStr(p),
             " must be in [0, kernel_size / 2] (kernel_size ", ShapeStr(k),
             ")");
    const int64_t len = g.x[2 + a];
    const int64_t span = d[a] * (k[a] - 1) + 1;  // extent of one window
    const int64_t room = len + p[a] + p[a + 2];
    DG_CHECK(span <= room, DG_INVALID_ARGUMENT, "the window (kernel_size ",
             ShapeStr(k), ", dilations ", ShapeStr(d), ") spans ", span,
             " cells along ", kAxis[a], " but the padded input has only ", room,
             " (input ", ShapeStr(g.x), ", pads ", ShapeStr(p), ")");
    const int64_t steps = room - span;
    int64_t n = (ceil_mode ? (steps + s[a] - 1) / s[a] : steps / s[a]) + 1;
    if (ceil_mode && (n - 1) * s[a] >= len + p[a]) --n;
    // With dilation a window can fall entirely in the padding (its cells
    // jump over the input); its maximum would be undefined.
    for (int64_t o = 0; o < n; ++o) {
      DG_CHECK(WindowTouchesInput(o * s[a] - p[a], k[a], d[a], len),
               DG_INVALID_ARGUMENT, "window ", o, " along ", kAxis[a],
               " covers only padding (input ", ShapeStr(g.x), ", kernel_size ",
               ShapeStr(k), ", dilations ", ShapeStr(d), ", pads ", ShapeStr(p),
               ")");
    }
    g.out[a] = n;
  }
  return g;
}

Shape Pooled(const Geometry& g) { return {g.x[0], g.x[1], g.out[0], g.out[1]}; }

// dy of a pooling gradient op must have the pooled shape and x's dtype.
void CheckDy(const dg::InferContext& ctx, const Shape& pooled) {
  Shape dy = ctx.input(1).shape();
  DG_CHECK(dy == pooled, DG_INVALID_ARGUMENT, "dy has shape ", ShapeStr(dy),
           " but pooling x of shape ", ShapeStr(ctx.input(0).shape()),
           " gives ", ShapeStr(pooled));
}

void MaxPoolShape(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), Pooled(WindowGeometry(ctx, true)));
}

void MaxPoolIndicesShape(dg::InferContext& ctx) {
  ctx.set_output(0, DG_INT64, Pooled(WindowGeometry(ctx, true)));
}

void MaxPoolGradShape(dg::InferContext& ctx) {
  CheckDy(ctx, Pooled(WindowGeometry(ctx, true)));
  SameAsInput(ctx);
}

void AvgPoolShape(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), Pooled(WindowGeometry(ctx, false)));
}

void AvgPoolGradShape(dg::InferContext& ctx) {
  CheckDy(ctx, Pooled(WindowGeometry(ctx, false)));
  SameAsInput(ctx);
}

Shape AdaptiveShape(const dg::InferContext& ctx) {
  CheckInput4d(ctx.input(0), "x");
  Shape x = ctx.input(0).shape();
  std::vector<int64_t> o = Pair(ctx, "output_size", false, {});
  DG_CHECK(o[0] > 0 && o[1] > 0, DG_INVALID_ARGUMENT, "output_size ",
           ShapeStr(o), " must be positive");
  return {x[0], x[1], o[0], o[1]};
}

void AdaptiveAvgPoolShape(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), AdaptiveShape(ctx));
}

void AdaptiveAvgPoolGradShape(dg::InferContext& ctx) {
  CheckDy(ctx, AdaptiveShape(ctx));
  SameAsInput(ctx);
}

// The attributes shared by MaxPool2d and its helpers.
dg::OpSchema& MaxPoolAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("kernel_size", DG_ATTR_INTS, kKernel)
      .Attr("strides", std::vector<int64_t>{}, kStrides)
      .Attr("pads", std::vector<int64_t>{0, 0}, kPads)
      .Attr("dilations", std::vector<int64_t>{1, 1}, kDilations)
      .Attr("ceil_mode", false, kCeil);
}

dg::OpSchema& AvgPoolAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("kernel_size", DG_ATTR_INTS, kKernel)
      .Attr("strides", std::vector<int64_t>{}, kStrides)
      .Attr("pads", std::vector<int64_t>{0, 0}, kPads)
      .Attr("ceil_mode", false, kCeil)
      .Attr("count_include_pad", true, kCountPad);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kPoolOps[] = {
    &MaxPoolAttrs(
         dg::internal::NewOp("MaxPool2d")
             .Doc("2-D max pooling over the last two axes of an NCHW tensor "
                  "(PyTorch semantics: padded cells never win; NaN wins "
                  "over numbers). Integer dtypes too (not differentiable).")
             .Input("x", dg::kNumeric, 0, kX)
             .Output("y", dg::kNumeric, 0, "Window maxima, [N, C, OH, OW]."))
         .Shape(MaxPoolShape),
    &MaxPoolAttrs(
         dg::internal::NewOp("MaxPool2dIndices")
             .Doc("Where MaxPool2d takes each maximum from: h * W + w inside "
                  "its (n, c) plane, the first such cell of the window in "
                  "row-major window order on ties.")
             .Input("x", dg::kNumeric, 0, kX)
             .Output("indices", dg::Bit(DG_INT64), 0,
                     "int64, [N, C, OH, OW].")
             .Flags(DG_OP_NO_GRAD))
         .Shape(MaxPoolIndicesShape),
    &MaxPoolAttrs(
         dg::internal::NewOp("MaxPool2dGrad")
             .Doc("Gradient of MaxPool2d: each dy is added to the cell its "
                  "window's maximum came from (the first one on ties).")
             .Input("x", dg::kFloat, 0, kX)
             .Input("dy", dg::kFloat, 0, kDy)
             .Output("dx", dg::kFloat, 0, "Gradient of x, x's shape.")
             .Flags(DG_OP_SAME_DTYPE))
         .Shape(MaxPoolGradShape),
    &AvgPoolAttrs(
         dg::internal::NewOp("AvgPool2d")
             .Doc("2-D average pooling over the last two axes of an NCHW "
                  "tensor (PyTorch semantics).")
             .Input("x", dg::kFloat, 0, kX)
             .Output("y", dg::kFloat, 0, "Window means, [N, C, OH, OW]."))
         .Shape(AvgPoolShape),
    &AvgPoolAttrs(
         dg::internal::NewOp("AvgPool2dGrad")
             .Doc("Gradient of AvgPool2d (its adjoint): each dy, divided as "
                  "in the forward, is spread over its window. Linear in dy; "
                  "x only gives the shape.")
             .Input("x", dg::kFloat, DG_ARG_NO_GRAD,
                    "Pooled input (shape only).")
             .Input("dy", dg::kFloat, 0, kDy)
             .Output("dx", dg::kFloat, 0, "Gradient of x, x's shape.")
             .Flags(DG_OP_SAME_DTYPE))
         .Shape(AvgPoolGradShape),
};

DG_OP(AdaptiveAvgPool2d)
    .Doc("2-D average pooling to a fixed output size: output cell i along an "
         "axis of size L averages input cells [floor(i L / O), ceil((i + 1) L "
         "/ O)).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, "Bin means, [N, C, OH, OW].")
    .RequiredAttr("output_size", DG_ATTR_INTS,
                  "Output size [OH, OW] (one value: both).")
    .Shape(AdaptiveAvgPoolShape);

DG_OP(AdaptiveAvgPool2dGrad)
    .Doc("Gradient of AdaptiveAvgPool2d (its adjoint). Linear in dy; x only "
         "gives the shape.")
    .Input("x", dg::kFloat, DG_ARG_NO_GRAD, "Pooled input (shape only).")
    .Input("dy", dg::kFloat, 0, kDy)
    .Output("dx", dg::kFloat, 0, "Gradient of x, x's shape.")
    .RequiredAttr("output_size", DG_ATTR_INTS,
                  "Output size [OH, OW] (one value: both).")
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(AdaptiveAvgPoolGradShape);

}  // namespace ops
}  // namespace dragon
