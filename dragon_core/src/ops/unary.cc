// Element-wise unary ops: y = f(x), same shape (and, except LogicalNot, same
// dtype) as x. All may overwrite their input (Inplace(1)).
#include <string>

#include "core/registry.h"
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kX = "Input tensor.";
constexpr const char* kY = "Result, same shape and dtype as x.";

void GeluShape(dg::InferContext& ctx) {
  std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           "approximate must be \"none\" or \"tanh\", got \"", mode, "\"");
  SameAsInput(ctx);
}

// GeluGrad(x, dy): dx has x's shape; dy must match it exactly (no
// broadcasting: it is the gradient of Gelu's output, which has x's shape).
void GeluGradShape(dg::InferContext& ctx) {
  std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           "approximate must be \"none\" or \"tanh\", got \"", mode, "\"");
  const auto x = ctx.input(0).shape();
  const auto dy = ctx.input(1).shape();
  DG_CHECK(x == dy, DG_INVALID_ARGUMENT, "dy must have x's shape ",
           ShapeStr(x), ", got ", ShapeStr(dy));
  SameAsInput(ctx);
}

void SoftplusShape(dg::InferContext& ctx) {
  DG_CHECK(ctx.f("beta") != 0.0, DG_INVALID_ARGUMENT,
           "beta must be non-zero (it divides the result)");
  SameAsInput(ctx);
}

// ReluGrad: x and dy of one shape (no broadcasting), dx like dy.
void ReluGradShape(dg::InferContext& ctx) {
  DG_CHECK(ctx.input(0).shape() == ctx.input(1).shape(), DG_INVALID_ARGUMENT,
           "x and dy must have the same shape, got ",
           ShapeStr(ctx.input(0).shape()), " and ",
           ShapeStr(ctx.input(1).shape()));
  ctx.set_output(0, ctx.input(1).dtype(), ctx.input(1).shape());
}

void LogicalNotShape(dg::InferContext& ctx) {
  ctx.set_output(0, DG_BOOL, ctx.input(0).shape());
}

}  // namespace

// ----------------------------------------------------------- numeric

DG_OP(Neg)
    .Doc("Negation, element-wise: y = -x.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Abs)
    .Doc("Absolute value, element-wise: y = |x|.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Sign)
    .Doc("Sign, element-wise: -1 where x < 0, 0 where x == 0, 1 where x > 0; "
         "NaN stays NaN.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Square)
    .Doc("Square, element-wise: y = x * x.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Relu)
    .Doc("Rectified linear unit, element-wise: y = max(x, 0).")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(ReluGrad)
    .Doc("Relu's backward in one pass: dx = 0 where x <= 0, else dy (a NaN "
         "x passes dy, as PyTorch's threshold_backward; a NaN dy is blocked "
         "where x <= 0). x may be Relu's input or its output: x <= 0 and "
         "relu(x) <= 0 agree for every x, Relu keeping NaN.")
    .Input("x", dg::kFloat, DG_ARG_NO_GRAD, "Relu's input (or output).")
    .Input("dy", dg::kFloat, 0, "Gradient of Relu's output, x's shape.")
    .Output("dx", dg::kFloat, 0, "Gradient of Relu's input, x's shape.")
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(2)
    .Flags(kOpFlagElementwise)
    .Shape(ReluGradShape);

DG_OP(Clip)
    .Doc("Clamps x into [min, max], element-wise: y = min(max(x, min), max). "
         "An unset bound is no bound; bounds are cast to x's dtype.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::kAnyNumeric, 0, kY)
    .OptionalAttr("min", DG_ATTR_FLOAT, "Lower bound, or None for no bound.")
    .OptionalAttr("max", DG_ATTR_FLOAT, "Upper bound, or None for no bound.")
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

// ----------------------------------------------------------- float

DG_OP(Exp)
    .Doc("Exponential, element-wise: y = e^x.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Log)
    .Doc("Natural logarithm, element-wise: y = ln(x).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Log1p)
    .Doc("y = ln(1 + x), element-wise, accurate for small x.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Sqrt)
    .Doc("Square root, element-wise: y = sqrt(x).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Rsqrt)
    .Doc("Reciprocal square root, element-wise: y = 1 / sqrt(x).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Reciprocal)
    .Doc("Reciprocal, element-wise: y = 1 / x.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Sin)
    .Doc("Sine, element-wise (x in radians).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Cos)
    .Doc("Cosine, element-wise (x in radians).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Tanh)
    .Doc("Hyperbolic tangent, element-wise.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Sigmoid)
    .Doc("Logistic function, element-wise: y = 1 / (1 + e^-x), computed "
         "without overflow for large |x|.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(LeakyRelu)
    .Doc("Leaky ReLU, element-wise: y = x where x > 0, else alpha * x.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Attr("alpha", 0.01, "Slope for negative inputs.")
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Elu)
    .Doc("Exponential linear unit, element-wise: y = x where x > 0, else "
         "alpha * (e^x - 1).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Attr("alpha", 1.0, "Scale of the negative branch.")
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Gelu)
    .Doc("Gaussian error linear unit, element-wise: y = x * Phi(x) with the "
         "exact erf form, or the tanh approximation.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Attr("approximate", "none",
          "\"none\" for the exact erf form, \"tanh\" for the tanh form.")
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(GeluShape);

DG_OP(GeluGrad)
    .Doc("Gradient of Gelu: dx = dy * d/dx gelu(x), element-wise, with the "
         "same approximate form as the forward op. x and dy have one shape "
         "and one dtype.")
    .Input("x", dg::kFloat, 0, "Gelu's input.")
    .Input("dy", dg::kFloat, 0, "Gradient of Gelu's output, x's shape.")
    .Output("dx", dg::kFloat, 0, "Gradient of x, x's shape and dtype.")
    .Attr("approximate", "none",
          "\"none\" for the exact erf form, \"tanh\" for the tanh form.")
    .Flags(DG_OP_SAME_DTYPE)
    .Flags(kOpFlagElementwise)
    .Shape(GeluGradShape);

DG_OP(Softplus)
    .Doc("Softplus, element-wise: y = ln(1 + e^(beta * x)) / beta, and y = x "
         "where beta * x > threshold.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Attr("beta", 1.0, "Sharpness; must be non-zero.")
    .Attr("threshold", 20.0, "Above this value of beta * x, y = x.")
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SoftplusShape);

DG_OP(Floor)
    .Doc("Largest integer not greater than x, element-wise.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Ceil)
    .Doc("Smallest integer not less than x, element-wise.")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

DG_OP(Round)
    .Doc("Nearest integer, element-wise; halves round to even (NumPy rint).")
    .Input("x", dg::kFloat, 0, kX)
    .Output("y", dg::kFloat, 0, kY)
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(SameAsInput);

// ----------------------------------------------------------- logical

DG_OP(LogicalNot)
    .Doc("Logical negation, element-wise: y = (x == 0), as bool.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::Bit(DG_BOOL), 0, "Bool tensor, same shape as x.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Flags(kOpFlagElementwise)
    .Shape(LogicalNotShape);

}  // namespace ops
}  // namespace dragon
