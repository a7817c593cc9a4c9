// 3-D convolution (NCDHW): Conv3d, its adjoint ConvTranspose3d and
// Conv3dBackpropFilter, closed under differentiation exactly as the 2-D set
// in conv.cc (see _grads/conv3d.py). Geometry per spatial axis a (depth,
// height, width):
//   out_a = floor((in_a + pad_begin_a + pad_end_a - dilation_a * (k_a - 1)
//                  - 1) / stride_a) + 1.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

const char* const kAxes[3] = {"depth", "height", "width"};

using Geo3 = ConvGeometryAttrs<3>;

Geo3 ReadGeo3(const dg::InferContext& ctx) {
  return ReadConvGeometryAttrs<3>(ctx, "depth, height, width",
                                  "begin d, h, w, end d, h, w");
}

void CheckRank5(const Shape& s, const char* what, const char* layout) {
  DG_CHECK(s.size() == 5, DG_INVALID_ARGUMENT, what, " must have rank 5 ",
           layout, ", got shape ", ShapeStr(s));
}

void CheckKernel3(const Shape& w, const char* what) {
  DG_CHECK(w[2] >= 1 && w[3] >= 1 && w[4] >= 1, DG_INVALID_ARGUMENT,
           "the kernel of ", what, " ", ShapeStr(w), " must be at least 1x1x1");
}

int64_t Window3(const Geo3& a, int i, int64_t n, int64_t k) {
  int64_t padded = 0, span = 0;
  DG_CHECK(!__builtin_add_overflow(n, a.pad_begin[i], &padded) &&
               !__builtin_add_overflow(padded, a.pad_end[i], &padded) &&
               !__builtin_mul_overflow(a.dilation[i], k - 1, &span),
           DG_INVALID_ARGUMENT, "the ", kAxes[i],
           " geometry overflows int64 (pads or dilation too large)");
  span += 1;
  DG_CHECK(span <= padded, DG_INVALID_ARGUMENT, "the kernel ", kAxes[i], " ",
           k, " (", span, " with dilation ", a.dilation[i],
           ") is larger than the padded input ", kAxes[i], " ", padded);
  return (padded - span) / a.stride[i] + 1;
}

void CheckBias3(const dg::InferContext& ctx, int64_t channels) {
  if (ctx.num_inputs() < 3) return;
  const Shape b = ctx.input(2).shape();
  DG_CHECK(b.size() == 1 && b[0] == channels, DG_INVALID_ARGUMENT,
           "bias b must have shape [", channels, "], got ", ShapeStr(b));
}

// Checks filter `w` [O, C / groups, k...] against `c` input channels.
void CheckFilter3(const Geo3& a, const Shape& w, int64_t c, const char* what) {
  CheckKernel3(w, what);
  DG_CHECK(c % a.groups == 0 && w[0] % a.groups == 0 && w[1] * a.groups == c,
           DG_INVALID_ARGUMENT, what, " ", ShapeStr(w), " with groups ",
           a.groups, " does not match ", c,
           " input channels (it needs O and C divisible by groups and "
           "w[1] * groups = C)");
}

void Conv3dShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), w = ctx.input(1).shape();
  CheckRank5(x, "input x", "[N, C, D, H, W]");
  CheckRank5(w, "filter w", "[O, C / groups, kd, kh, kw]");
  const Geo3 a = ReadGeo3(ctx);
  CheckFilter3(a, w, x[1], "filter w");
  CheckBias3(ctx, w[0]);
  Shape y = {x[0], w[0], 0, 0, 0};
  for (int i = 0; i < 3; ++i) y[2 + i] = Window3(a, i, x[2 + i], w[2 + i]);
  ctx.set_output(0, ctx.input(0).dtype(), y);
}

void ConvTranspose3dShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), w = ctx.input(1).shape();
  CheckRank5(x, "input x", "[N, C, D, H, W]");
  CheckRank5(w, "filter w", "[C, O / groups, kd, kh, kw]");
  const Geo3 a = ReadGeo3(ctx);
  CheckKernel3(w, "filter w");
  const Shape op = ctx.ints("output_padding");
  DG_CHECK(op.size() == 3, DG_INVALID_ARGUMENT,
           "output_padding must hold 3 values, got ", ShapeStr(op));
  DG_CHECK(x[1] % a.groups == 0, DG_INVALID_ARGUMENT, "groups ", a.groups,
           " does not divide the ", x[1], " input channels of x ", ShapeStr(x));
  DG_CHECK(w[0] == x[1], DG_INVALID_ARGUMENT, "filter w ", ShapeStr(w),
           " has ", w[0], " input channels (axis 0), but x ", ShapeStr(x),
           " has ", x[1]);
  const int64_t out_c = w[1] * a.groups;
  CheckBias3(ctx, out_c);
  Shape y = {x[0], out_c, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    // as PyTorch: below the stride or below the dilation (the extra planes
    // then get no input tap, only the bias)
    DG_CHECK(op[i] >= 0 &&
                 op[i] < std::max<int64_t>(a.stride[i], a.dilation[i]),
             DG_INVALID_ARGUMENT, "output_padding ", ShapeStr(op),
             " must be non-negative and smaller than the strides [",
             a.stride[0], ", ", a.stride[1], ", ", a.stride[2],
             "] or the dilations [", a.dilation[0], ", ", a.dilation[1], ", ",
             a.dilation[2], "] (on each axis, below either)");
    DG_CHECK(x[2 + i] >= 1, DG_INVALID_ARGUMENT, "input x ", ShapeStr(x),
             " has an empty ", kAxes[i]);
    int64_t grown = 0, taps = 0;
    DG_CHECK(!__builtin_mul_overflow(x[2 + i] - 1, a.stride[i], &grown) &&
                 !__builtin_mul_overflow(a.dilation[i], w[2 + i] - 1, &taps) &&
                 !__builtin_add_overflow(grown, taps, &grown) &&
                 grown < (int64_t{1} << 62),
             DG_INVALID_ARGUMENT, "the output ", kAxes[i],
             " overflows int64 (strides or dilations too large)");
    const int64_t size =
        grown - a.pad_begin[i] - a.pad_end[i] + op[i] + 1;
    DG_CHECK(size >= 1, DG_INVALID_ARGUMENT, "the output ", kAxes[i], " ",
             size, " is not positive");
    y[2 + i] = size;
  }
  ctx.set_output(0, ctx.input(0).dtype(), y);
}

void Conv3dBackpropFilterShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), dy = ctx.input(1).shape();
  CheckRank5(x, "input x", "[N, C, D, H, W]");
  CheckRank5(dy, "output gradient dy", "[N, O, Do, Ho, Wo]");
  const Geo3 a = ReadGeo3(ctx);
  const Shape w = ctx.ints("filter_shape");
  DG_CHECK(w.size() == 5, DG_INVALID_ARGUMENT,
           "filter_shape must hold 5 values [O, C / groups, kd, kh, kw], got ",
           ShapeStr(w));
  CheckedNumel(w, "filter_shape");
  CheckFilter3(a, w, x[1], "filter_shape");
  DG_CHECK(dy[0] == x[0] && dy[1] == w[0], DG_INVALID_ARGUMENT, "dy ",
           ShapeStr(dy), " must be [", x[0], ", ", w[0], ", ...] for x ",
           ShapeStr(x), " and filter_shape ", ShapeStr(w));
  for (int i = 0; i < 3; ++i) {
    DG_CHECK(dy[2 + i] == Window3(a, i, x[2 + i], w[2 + i]),
             DG_INVALID_ARGUMENT, "dy ", ShapeStr(dy),
             " does not have the output size of the convolution of x ",
             ShapeStr(x));
  }
  ctx.set_output(0, ctx.input(0).dtype(), w);
}

constexpr const char* kStrides = "Window steps (depth, height, width).";
constexpr const char* kPads =
    "Zero padding: 3 values (depth, height, width; both sides) or 6 (begin "
    "d, h, w, then end d, h, w).";
constexpr const char* kDil = "Spacing between kernel taps (d, h, w).";
constexpr const char* kGroups =
    "Channel groups, as Conv2d (groups = C: depthwise).";
const std::vector<int64_t> kOnes = {1, 1, 1}, kZeros = {0, 0, 0};

// Conv3d and ConvTranspose3d also take int32 (quantized convolutions):
// exact sums wrapping as two's complement.
constexpr DgDTypeMask kFloatInt32 = dg::kFloat | dg::Bit(DG_INT32);

}  // namespace

DG_OP(Conv3d)
    .PyName("conv3d")
    .Doc("3-D cross-correlation in NCDHW layout (ONNX Conv with 3 spatial "
         "axes): y[n, o, i, j, l] = b[o] + sum over c, p, q, r of x[n, g * "
         "C/groups + c, i*sd - pd + p*dd, j*sh - ph + q*dh, l*sw - pw + "
         "r*dw] * w[o, c, p, q, r]; taps outside x read zeros. int32 operands "
         "give the exact sums wrapped to int32 (quantized convolutions); no "
         "gradient.")
    .Input("x", kFloatInt32, 0, "Input [N, C, D, H, W].")
    .Input("w", kFloatInt32, 0, "Filter [O, C / groups, kd, kh, kw].")
    .Input("b", kFloatInt32, DG_ARG_OPTIONAL, "Optional bias [O].")
    .Output("y", kFloatInt32, 0, "Output [N, O, Do, Ho, Wo], dtype of x.")
    .Attr("strides", kOnes, kStrides)
    .Attr("pads", kZeros, kPads)
    .Attr("dilations", kOnes, kDil)
    .Attr("groups", int64_t{1}, kGroups)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(Conv3dShape);

DG_OP(ConvTranspose3d)
    .PyName("conv_transpose3d")
    .Doc("Transposed 3-D convolution in NCDHW layout (the adjoint of Conv3d "
         "with the same filter and geometry; ONNX ConvTranspose). Output "
         "size per axis: (in - 1) * stride - pad_begin - pad_end + dilation "
         "* (k - 1) + output_padding + 1. int32 operands give the exact sums "
         "wrapped to int32; no gradient.")
    .Input("x", kFloatInt32, 0, "Input [N, C, D, H, W].")
    .Input("w", kFloatInt32, 0, "Filter [C, O / groups, kd, kh, kw].")
    .Input("b", kFloatInt32, DG_ARG_OPTIONAL, "Optional bias [O].")
    .Output("y", kFloatInt32, 0, "Output [N, O, Do, Ho, Wo], dtype of x.")
    .Attr("strides", kOnes, kStrides)
    .Attr("pads", kZeros, "Padding removed from the output (as Conv3d's).")
    .Attr("output_padding", kZeros,
          "Extra planes added at the end of each output axis, in [0, stride).")
    .Attr("dilations", kOnes, kDil)
    .Attr("groups", int64_t{1}, kGroups)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(ConvTranspose3dShape);

DG_OP(Conv3dBackpropFilter)
    .PyName("conv3d_backprop_filter")
    .Doc("Gradient of Conv3d with respect to its filter: dw[o, c, p, q, r] "
         "= sum over n and output positions of dy[n, o, ...] * x[n, g * "
         "C/groups + c, tap position] (zeros outside x).")
    .Input("x", dg::kFloat, 0, "The convolution's input [N, C, D, H, W].")
    .Input("dy", dg::kFloat, 0, "Gradient of its output [N, O, Do, Ho, Wo].")
    .Output("dw", dg::kFloat, 0, "Filter gradient of shape filter_shape.")
    .RequiredAttr("filter_shape", DG_ATTR_INTS,
                  "The filter's shape [O, C / groups, kd, kh, kw].")
    .Attr("strides", kOnes, kStrides)
    .Attr("pads", kZeros, kPads)
    .Attr("dilations", kOnes, kDil)
    .Attr("groups", int64_t{1}, kGroups)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(Conv3dBackpropFilterShape);

}  // namespace ops
}  // namespace dragon
