// 3-D pooling over NCDHW tensors: MaxPool3d (values and argmax indices),
// AvgPool3d and its adjoint AvgPool3dGrad.
//
// Geometry per spatial axis (PyTorch semantics, as pool.cc): size L, kernel
// k, stride s, pads pb/pe, dilation d (max only):
//   out = floor_or_ceil((L + pb + pe - d(k-1) - 1) / s) + 1,
// and in ceil mode a last window starting in the end padding is dropped.
// Each pad is at most half the kernel, so every window holds a real cell.
// Padded cells never win a maximum (NaN wins over numbers; ties: first cell
// in window order); the average divides by the window clipped to the padded
// extent (count_include_pad) or by the number of real cells.
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

const char* const kAxes[3] = {"depth", "height", "width"};

std::vector<int64_t> Triple(const dg::InferContext& ctx, const char* name,
                            const std::vector<int64_t>& fallback) {
  std::vector<int64_t> v = ctx.ints(name);
  if (v.empty() && !fallback.empty()) return fallback;
  DG_CHECK(v.size() == 1 || v.size() == 3, DG_INVALID_ARGUMENT, name, " ",
           ShapeStr(v), " must hold 1 or 3 values (depth, height, width)");
  if (v.size() == 1) v.assign(3, v[0]);
  return v;
}

// Checks x and the attributes; returns the output shape.
Shape Pool3dShape(const dg::InferContext& ctx, bool dilated) {
  const Shape x = ctx.input(0).shape();
  DG_CHECK(x.size() == 5, DG_INVALID_ARGUMENT,
           "x must have rank 5 [N, C, D, H, W], got shape ", ShapeStr(x));
  const std::vector<int64_t> k = Triple(ctx, "kernel_size", {});
  const std::vector<int64_t> s = Triple(ctx, "strides", k);
  const std::vector<int64_t> d =
      dilated ? Triple(ctx, "dilations", {}) : std::vector<int64_t>{1, 1, 1};
  std::vector<int64_t> p = ctx.ints("pads");
  DG_CHECK(p.size() == 1 || p.size() == 3 || p.size() == 6,
           DG_INVALID_ARGUMENT, "pads ", ShapeStr(p),
           " must hold 1, 3 (both sides) or 6 values (begin d, h, w, end d, "
           "h, w)");
  if (p.size() == 1) p.assign(3, p[0]);
  if (p.size() == 3) p.insert(p.end(), p.begin(), p.end());
  const bool ceil = ctx.b("ceil_mode");
  Shape out = {x[0], x[1], 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    DG_CHECK(k[i] >= 1 && s[i] >= 1 && d[i] >= 1, DG_INVALID_ARGUMENT,
             "kernel_size, strides and dilations must be positive (",
             kAxes[i], ": kernel ", k[i], ", stride ", s[i], ", dilation ",
             d[i], ")");
    int64_t span = 0;
    DG_CHECK(!__builtin_mul_overflow(d[i], k[i] - 1, &span) &&
                 span < (int64_t{1} << 61),
             DG_INVALID_ARGUMENT, "the ", kAxes[i], " window (kernel ", k[i],
             ", dilation ", d[i], ") is too large");
    span += 1;
    DG_CHECK(p[i] >= 0 && p[i + 3] >= 0 && p[i] <= span / 2 &&
                 p[i + 3] <= span / 2,
             DG_INVALID_ARGUMENT, "pads ", ShapeStr(p),
             " must be non-negative and at most half the kernel (", kAxes[i],
             ": ", span, ")");
    const int64_t padded = x[2 + i] + p[i] + p[i + 3];
    DG_CHECK(padded >= span, DG_INVALID_ARGUMENT, "the window ", kAxes[i],
             " ", span, " is larger than the padded input ", kAxes[i], " ",
             padded, " (x ", ShapeStr(x), ")");
    int64_t o = (padded - span) / s[i] + 1;
    if (ceil && (padded - span) % s[i] != 0) {
      ++o;
      int64_t start = 0;  // the last window's start; drop it in the padding
      if (__builtin_mul_overflow(o - 1, s[i], &start) ||
          start >= x[2 + i] + p[i]) {
        --o;
      }
    }
    out[2 + i] = o;
  }
  return out;
}

void MaxPool3dShape(dg::InferContext& ctx) {
  const Shape out = Pool3dShape(ctx, true);
  ctx.set_output(0, ctx.input(0).dtype(), out);
  ctx.set_output(1, DG_INT64, out);
}

void AvgPool3dShape(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), Pool3dShape(ctx, false));
}

void AvgPool3dGradShape(dg::InferContext& ctx) {
  const Shape out = Pool3dShape(ctx, false);
  const Shape dy = ctx.input(1).shape();
  DG_CHECK(dy == out, DG_INVALID_ARGUMENT, "dy ", ShapeStr(dy),
           " must have the pooled shape ", ShapeStr(out));
  DG_CHECK(ctx.input(1).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           "dy must have x's dtype");
  ctx.set_output(0, ctx.input(0).dtype(), ctx.input(0).shape());
}

constexpr const char* kKernel = "Window [kd, kh, kw] (one value: all).";
constexpr const char* kStrides =
    "Window step [sd, sh, sw] (one value: all); empty means kernel_size.";
constexpr const char* kPads =
    "Implicit padding: 1 value, 3 (both sides) or 6 (begin d, h, w, end d, "
    "h, w); each at most half the kernel.";
constexpr const char* kCeil = "Round the output size up instead of down.";

dg::OpSchema& AvgAttrs(dg::OpSchema& op) {
  return op.RequiredAttr("kernel_size", DG_ATTR_INTS, kKernel)
      .Attr("strides", std::vector<int64_t>{}, kStrides)
      .Attr("pads", std::vector<int64_t>{0, 0, 0}, kPads)
      .Attr("ceil_mode", false, kCeil)
      .Attr("count_include_pad", true,
            "Divide by the window including padded cells (True) or by the "
            "number of real cells (False).");
}

}  // namespace

DG_OP(MaxPool3d)
    .PyName("max_pool3d")
    .Doc("3-D max pooling over NCDHW (ONNX MaxPool with Indices; PyTorch "
         "semantics: padded cells never win, NaN wins over numbers, ties "
         "take the first cell in window order). Returns the maxima and "
         "where they come from: d * H * W + h * W + w inside the (n, c) "
         "volume, int64.")
    .Input("x", dg::kFloat, 0, "Input [N, C, D, H, W].")
    .Output("y", dg::kFloat, 0, "Window maxima [N, C, OD, OH, OW].")
    .Output("indices", dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
            "Flat in-volume position of each maximum, int64.")
    .RequiredAttr("kernel_size", DG_ATTR_INTS, kKernel)
    .Attr("strides", std::vector<int64_t>{}, kStrides)
    .Attr("pads", std::vector<int64_t>{0, 0, 0}, kPads)
    .Attr("dilations", std::vector<int64_t>{1, 1, 1},
          "Spacing between window cells (one value: all).")
    .Attr("ceil_mode", false, kCeil)
    .Shape(MaxPool3dShape);

DG_OP(AvgPool3d)
    .PyName("avg_pool3d")
    .Doc("3-D average pooling over NCDHW (ONNX AveragePool / PyTorch "
         "semantics).")
    .Input("x", dg::kFloat, 0, "Input [N, C, D, H, W].")
    .Output("y", dg::kFloat, 0, "Window means [N, C, OD, OH, OW].")
    .Apply(AvgAttrs)
    .Shape(AvgPool3dShape);

DG_OP(AvgPool3dGrad)
    .PyName("avg_pool3d_grad")
    .Doc("Gradient of AvgPool3d (its adjoint): each dy, divided as in the "
         "forward, is spread over its window. Linear in dy; x only gives "
         "the shape.")
    .Input("x", dg::kFloat, DG_ARG_NO_GRAD, "Pooled input (shape only).")
    .Input("dy", dg::kFloat, 0, "Gradient of the pooled output.")
    .Output("dx", dg::kFloat, 0, "Gradient of x, x's shape.")
    .Apply(AvgAttrs)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(AvgPool3dGradShape);

}  // namespace ops
}  // namespace dragon
