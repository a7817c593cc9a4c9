// More element-wise float functions (docs/ops.md, "Elementwise, unary"):
// trigonometric, hyperbolic and their inverses, erf, expm1; and the float
// classification predicates IsNan / IsInf / IsFinite (bool results).
// Domain errors give NaN as in C and NumPy (asin(2), acosh(0.5)); poles
// give +-inf (atanh(1)).
#include "core/registry.h"
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kX = "Input tensor.";
constexpr const char* kY = "Result, same shape and dtype as x.";

dg::OpSchema& FloatUnary(const char* name, const char* doc) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("x", dg::kFloat, 0, kX)
      .Output("y", dg::kFloat, 0, kY)
      .Inplace(1)
      .Flags(kOpFlagElementwise)
      .Shape(SameAsInput);
}

void BoolLike(dg::InferContext& ctx) {
  ctx.set_output(0, DG_BOOL, ctx.input(0).shape());
}

dg::OpSchema& Classify(const char* name, const char* py_name, const char* doc) {
  return dg::internal::NewOp(name)
      .PyName(py_name)
      .Doc(doc)
      .Input("x", dg::kAnyNumeric, 0, kX)
      .Output("y", dg::Bit(DG_BOOL), 0, "Bool tensor, same shape as x.")
      .Flags(DG_OP_NO_GRAD)
      .Flags(kOpFlagElementwise)
      .Shape(BoolLike);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kUnaryMath[] = {
    &FloatUnary("Tan", "Tangent, element-wise (x in radians)."),
    &FloatUnary("Asin", "Inverse sine, element-wise; y in [-pi/2, pi/2], NaN outside [-1, 1]."),
    &FloatUnary("Acos", "Inverse cosine, element-wise; y in [0, pi], NaN outside [-1, 1]."),
    &FloatUnary("Atan", "Inverse tangent, element-wise; y in (-pi/2, pi/2)."),
    &FloatUnary("Sinh", "Hyperbolic sine, element-wise."),
    &FloatUnary("Cosh", "Hyperbolic cosine, element-wise."),
    &FloatUnary("Asinh", "Inverse hyperbolic sine, element-wise."),
    &FloatUnary("Acosh", "Inverse hyperbolic cosine, element-wise; NaN below 1."),
    &FloatUnary("Atanh",
                "Inverse hyperbolic tangent, element-wise; +-inf at +-1, NaN outside [-1, 1]."),
    &FloatUnary("Erf", "Gauss error function, element-wise: 2/sqrt(pi) * int_0^x e^(-t^2) dt."),
    &FloatUnary("Expm1", "y = e^x - 1, element-wise, accurate for small x (the inverse of "
                         "log1p)."),
    &Classify("IsNan", "isnan", "y = x is NaN, element-wise, as bool (all false for integers)."),
    &Classify("IsInf", "isinf",
              "y = x is +inf or -inf, element-wise, as bool (all false for integers)."),
    &Classify("IsFinite", "isfinite",
              "y = x is neither NaN nor infinite, element-wise, as bool (all true for "
              "integers)."),
};

}  // namespace ops
}  // namespace dragon
