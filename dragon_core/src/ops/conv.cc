// Convolution (NCHW): Conv2d, its adjoint ConvTranspose2d, and
// Conv2dBackpropFilter, the gradient of Conv2d with respect to its filter.
//
// The three ops share one geometry: an "image" side (Conv2d's input,
// ConvTranspose2d's output) of H x W and a "window" side (Conv2d's output,
// ConvTranspose2d's input) of Ho x Wo with
//   Ho = floor((H + pad_top + pad_bottom - dilation_h * (kh - 1) - 1)
//              / stride_h) + 1
// and likewise for the width. Each op's gradient is written with the other
// two (see _grads/conv.py), so the set is closed under differentiation.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// The per-axis geometry attributes, validated.
using ConvAttrs = ConvGeometryAttrs<2>;

ConvAttrs ReadConvAttrs(const dg::InferContext& ctx) {
  return ReadConvGeometryAttrs<2>(ctx, "height, width",
                                  "top, left, bottom, right");
}

// Checks that `shape` (named `what`) is NCHW.
void CheckRank4(const Shape& shape, const char* what, const char* layout) {
  DG_CHECK(shape.size() == 4, DG_INVALID_ARGUMENT, what, " must have rank 4 ",
           layout, ", got shape ", ShapeStr(shape));
}

// Checks that the kernel dimensions of filter shape `w` are positive.
void CheckKernel(const Shape& w, const char* what) {
  DG_CHECK(w[2] >= 1 && w[3] >= 1, DG_INVALID_ARGUMENT,
           "the kernel of ", what, " ", ShapeStr(w),
           " must be at least 1x1");
}

// The window-side size of an image-side extent `h` along axis `i`; rejects
// a dilated kernel that does not fit the padded image.
int64_t WindowExtent(const ConvAttrs& a, int i, int64_t h, int64_t k,
                     const char* image) {
  const char* axis = i == 0 ? "height" : "width";
  const int64_t padded = h + a.pad_begin[i] + a.pad_end[i];
  const int64_t span = a.dilation[i] * (k - 1) + 1;
  DG_CHECK(span <= padded, DG_INVALID_ARGUMENT, "the kernel ", axis, " ", k,
           " (", span, " with dilation ", a.dilation[i],
           ") is larger than the padded ", image, " ", axis, " ", padded,
           " (", h, " + pads ", a.pad_begin[i], " + ", a.pad_end[i], ")");
  return (padded - span) / a.stride[i] + 1;
}

// Checks that the groups split the C input channels of x [N, C, H, W].
void CheckGroupsDivideInput(const ConvAttrs& a, const Shape& x) {
  DG_CHECK(x[1] % a.groups == 0, DG_INVALID_ARGUMENT, "groups ", a.groups,
           " does not divide the ", x[1], " input channels of x ",
           ShapeStr(x));
}

// Checks the optional bias (input 2) against `channels` outputs.
void CheckBias(const dg::InferContext& ctx, int64_t channels) {
  if (ctx.num_inputs() < 3) return;
  const Shape b = ctx.input(2).shape();
  DG_CHECK(b.size() == 1 && b[0] == channels, DG_INVALID_ARGUMENT,
           "bias b must have shape [", channels,
           "] (one value per output channel), got ", ShapeStr(b));
}

void Conv2dShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), w = ctx.input(1).shape();
  CheckRank4(x, "input x", "[N, C, H, W]");
  CheckRank4(w, "filter w", "[O, C / groups, kh, kw]");
  const ConvAttrs a = ReadConvAttrs(ctx);
  CheckKernel(w, "filter w");
  CheckGroupsDivideInput(a, x);
  DG_CHECK(w[0] % a.groups == 0, DG_INVALID_ARGUMENT, "groups ", a.groups,
           " does not divide the ", w[0], " output channels of w ",
           ShapeStr(w));
  DG_CHECK(w[1] * a.groups == x[1], DG_INVALID_ARGUMENT, "filter w ",
           ShapeStr(w), " expects ", w[1], " x groups ", a.groups, " = ",
           w[1] * a.groups, " input channels, but x ", ShapeStr(x), " has ",
           x[1]);
  CheckBias(ctx, w[0]);
  const int64_t ho = WindowExtent(a, 0, x[2], w[2], "input");
  const int64_t wo = WindowExtent(a, 1, x[3], w[3], "input");
  ctx.set_output(0, ctx.input(0).dtype(), {x[0], w[0], ho, wo});
}

// The activations a fused op may apply after its bias.
void CheckActivation(const dg::InferContext& ctx) {
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT,
           "activation must be 'none' or 'relu', got '", act, "'");
}

void Conv2dBiasActShape(dg::InferContext& ctx) {
  CheckActivation(ctx);
  Conv2dShape(ctx);
}

void ConvTranspose2dShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), w = ctx.input(1).shape();
  CheckRank4(x, "input x", "[N, C, H, W]");
  CheckRank4(w, "filter w", "[C, O / groups, kh, kw]");
  const ConvAttrs a = ReadConvAttrs(ctx);
  CheckKernel(w, "filter w");
  const Shape op = ctx.ints("output_padding");
  DG_CHECK(op.size() == 2, DG_INVALID_ARGUMENT,
           "output_padding must hold 2 values (height, width), got ",
           ShapeStr(op));
  CheckGroupsDivideInput(a, x);
  DG_CHECK(w[0] == x[1], DG_INVALID_ARGUMENT, "filter w ", ShapeStr(w),
           " has ", w[0], " input channels (axis 0), but x ", ShapeStr(x),
           " has ", x[1]);
  const int64_t out_channels = w[1] * a.groups;
  CheckBias(ctx, out_channels);
  Shape y = {x[0], out_channels, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const char* axis = i == 0 ? "height" : "width";
    // as PyTorch: below the stride or below the dilation (the extra rows
    // then get no input tap, only the bias)
    DG_CHECK(op[i] >= 0 &&
                 op[i] < std::max<int64_t>(a.stride[i], a.dilation[i]),
             DG_INVALID_ARGUMENT, "output_padding ", ShapeStr(op),
             " must be non-negative and smaller than strides [", a.stride[0],
             ", ", a.stride[1], "] or dilations [", a.dilation[0], ", ",
             a.dilation[1], "] (on each axis, below either)");
    DG_CHECK(x[2 + i] >= 1, DG_INVALID_ARGUMENT, "input x ", ShapeStr(x),
             " has an empty ", axis);
    const int64_t size = (x[2 + i] - 1) * a.stride[i] - a.pad_begin[i] -
                         a.pad_end[i] + a.dilation[i] * (w[2 + i] - 1) +
                         op[i] + 1;
    DG_CHECK(size >= 1, DG_INVALID_ARGUMENT, "the output ", axis, " (",
             x[2 + i], " - 1) * stride ", a.stride[i], " - pads ",
             a.pad_begin[i], " - ", a.pad_end[i], " + dilation ",
             a.dilation[i], " * (", w[2 + i], " - 1) + output_padding ",
             op[i], " + 1 = ", size, " is not positive");
    y[2 + i] = size;
  }
  ctx.set_output(0, ctx.input(0).dtype(), y);
}

void Conv2dBackpropFilterShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), dy = ctx.input(1).shape();
  CheckRank4(x, "input x", "[N, C, H, W]");
  CheckRank4(dy, "output gradient dy", "[N, O, Ho, Wo]");
  const ConvAttrs a = ReadConvAttrs(ctx);
  const Shape w = ctx.ints("filter_shape");
  DG_CHECK(w.size() == 4, DG_INVALID_ARGUMENT,
           "filter_shape must hold 4 values [O, C / groups, kh, kw], got ",
           ShapeStr(w));
  CheckedNumel(w, "filter_shape");
  CheckKernel(w, "filter_shape");
  DG_CHECK(dy[0] == x[0], DG_INVALID_ARGUMENT, "x ", ShapeStr(x), " and dy ",
           ShapeStr(dy), " have different batch sizes");
  DG_CHECK(x[1] % a.groups == 0 && w[0] % a.groups == 0 &&
               w[1] * a.groups == x[1],
           DG_INVALID_ARGUMENT, "filter_shape ", ShapeStr(w), " with groups ",
           a.groups, " does not match the ", x[1], " input channels of x ",
           ShapeStr(x));
  DG_CHECK(w[0] == dy[1], DG_INVALID_ARGUMENT, "filter_shape ", ShapeStr(w),
           " has ", w[0], " output channels, but dy ", ShapeStr(dy), " has ",
           dy[1]);
  const int64_t ho = WindowExtent(a, 0, x[2], w[2], "input");
  const int64_t wo = WindowExtent(a, 1, x[3], w[3], "input");
  DG_CHECK(dy[2] == ho && dy[3] == wo, DG_INVALID_ARGUMENT, "dy ",
           ShapeStr(dy), " must have spatial size [", ho, ", ", wo,
           "], the output size of the convolution of x ", ShapeStr(x));
  ctx.set_output(0, ctx.input(0).dtype(), w);
}

constexpr const char* kStridesDoc = "Window steps (height, width).";
constexpr const char* kPadsDoc =
    "Zero padding of the image: 2 values (height, width; both sides) or 4 "
    "(top, left, bottom, right).";
constexpr const char* kDilationsDoc =
    "Spacing between kernel taps (height, width).";
constexpr const char* kGroupsDoc =
    "Channel groups: input and output channels are split into this many "
    "groups, each convolved separately (groups = C: depthwise).";

// The inputs (of dtypes `types`), output and geometry attributes of Conv2d
// and Conv2dBiasAct.
void Conv2dSignatureOf(dg::OpSchema& op, DgDTypeMask types) {
  op.Input("x", types, 0, "Input [N, C, H, W].")
      .Input("w", types, 0, "Filter [O, C / groups, kh, kw].")
      .Input("b", types, DG_ARG_OPTIONAL, "Optional bias [O].")
      .Output("y", types, 0, "Output [N, O, Ho, Wo], dtype of x.")
      .Attr("strides", std::vector<int64_t>{1, 1}, kStridesDoc)
      .Attr("pads", std::vector<int64_t>{0, 0}, kPadsDoc)
      .Attr("dilations", std::vector<int64_t>{1, 1}, kDilationsDoc)
      .Attr("groups", int64_t{1}, kGroupsDoc);
}

void Conv2dSignature(dg::OpSchema& op) { Conv2dSignatureOf(op, dg::kFloat); }

// Conv2d also takes int32 (quantized convolutions, ONNX ConvInteger): exact
// sums wrapping as two's complement.
void Conv2dIntSignature(dg::OpSchema& op) {
  Conv2dSignatureOf(op, dg::kFloat | dg::Bit(DG_INT32));
}

}  // namespace

DG_OP(Conv2d)
    .Doc("2-D cross-correlation in NCHW layout: y[n, o, i, j] = b[o] + "
         "sum over c, p, q of x[n, g * C/groups + c, i * sh - pt + p * dh, "
         "j * sw - pl + q * dw] * w[o, c, p, q], where g = o / (O/groups) "
         "and taps outside the input read zeros. Output size per axis: "
         "floor((H + pad_begin + pad_end - dilation * (k - 1) - 1) / stride) "
         "+ 1. int32 operands give the exact sums wrapped to int32 "
         "(quantized convolutions); no gradient.")
    .Apply(Conv2dIntSignature)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(Conv2dShape);

DG_OP(Conv2dBiasAct)
    .Doc("Fused Conv2d + bias + activation: y = act(conv2d(x, w) + b). "
         "The fusion pass (graph mode) writes it in place of Conv2d -> "
         "(Add of a per-channel bias) -> Relu when a kernel for it is "
         "registered on the graph's device; it is never needed eagerly.")
    .Apply(Conv2dSignature)
    .Attr("activation", "relu", "Applied after the bias: 'none' or 'relu'.")
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(Conv2dBiasActShape);

DG_OP(ConvTranspose2d)
    .Doc("Transposed 2-D convolution in NCHW layout (the adjoint of Conv2d "
         "with the same filter and geometry, often called deconvolution): "
         "every input pixel scatters x[n, c, i, j] * w[c, o, p, q] to "
         "y[n, g * O/groups + o, i * sh - pt + p * dh, j * sw - pl + q * dw]. "
         "Output size per axis (PyTorch's definition): (H - 1) * stride - "
         "pad_begin - pad_end + dilation * (k - 1) + output_padding + 1. "
         "int32 operands give the exact sums wrapped to int32; no gradient.")
    .Input("x", dg::kFloat | dg::Bit(DG_INT32), 0, "Input [N, C, H, W].")
    .Input("w", dg::kFloat | dg::Bit(DG_INT32), 0, "Filter [C, O / groups, kh, kw].")
    .Input("b", dg::kFloat | dg::Bit(DG_INT32), DG_ARG_OPTIONAL, "Optional bias [O].")
    .Output("y", dg::kFloat | dg::Bit(DG_INT32), 0, "Output [N, O, Ho, Wo], dtype of x.")
    .Attr("strides", std::vector<int64_t>{1, 1}, kStridesDoc)
    .Attr("pads", std::vector<int64_t>{0, 0},
          "Padding removed from the output: 2 values (height, width; both "
          "sides) or 4 (top, left, bottom, right).")
    .Attr("output_padding", std::vector<int64_t>{0, 0},
          "Extra rows/columns added at the bottom/right of the output "
          "(height, width); each in [0, stride).")
    .Attr("dilations", std::vector<int64_t>{1, 1}, kDilationsDoc)
    .Attr("groups", int64_t{1}, kGroupsDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(ConvTranspose2dShape);

DG_OP(Conv2dBackpropFilter)
    .Doc("Gradient of Conv2d with respect to its filter: dw[o, c, p, q] = "
         "sum over n, i, j of dy[n, o, i, j] * x[n, g * C/groups + c, "
         "i * sh - pt + p * dh, j * sw - pl + q * dw] (zeros outside x). "
         "Attributes as for Conv2d.")
    .Input("x", dg::kFloat, 0, "The convolution's input [N, C, H, W].")
    .Input("dy", dg::kFloat, 0,
           "Gradient of the convolution's output [N, O, Ho, Wo].")
    .Output("dw", dg::kFloat, 0, "Filter gradient of shape filter_shape.")
    .RequiredAttr("filter_shape", DG_ATTR_INTS,
                  "The filter's shape [O, C / groups, kh, kw].")
    .Attr("strides", std::vector<int64_t>{1, 1}, kStridesDoc)
    .Attr("pads", std::vector<int64_t>{0, 0}, kPadsDoc)
    .Attr("dilations", std::vector<int64_t>{1, 1}, kDilationsDoc)
    .Attr("groups", int64_t{1}, kGroupsDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(Conv2dBackpropFilterShape);

}  // namespace ops
}  // namespace dragon
