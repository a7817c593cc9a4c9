// Integer-aware division and remainder with NumPy broadcasting (docs/ops.md,
// "Division and remainder"): FloorDivide (NumPy //), TruncDivide (C and ONNX
// integer Div), Mod (NumPy %, the sign of the divisor) and Fmod (C fmod, the
// sign of the dividend; ONNX Mod with fmod=1). Div stays true division on
// float dtypes.
//
// Integer division by zero gives 0 (quotient and remainder), as NumPy does
// (NumPy also warns; Dragon does not): never a trap. The one overflowing
// quotient, MIN / -1, wraps to MIN; its remainder is 0.
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kA = "Dividend.";
constexpr const char* kB = "Divisor, same dtype as a; broadcasts with a.";
constexpr const char* kY = "Result with the broadcast shape of a and b.";

void BroadcastSame(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(),
                 BroadcastShapes(ctx.input(0).shape(), ctx.input(1).shape()));
}

dg::OpSchema& Division(const char* name, const char* doc) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("a", dg::kAnyNumeric, 0, kA)
      .Input("b", dg::kAnyNumeric, 0, kB)
      .Output("y", dg::kAnyNumeric, 0, kY)
      .Flags(DG_OP_SAME_DTYPE)
      .Inplace(3)
      .Shape(BroadcastSame);
}

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kDivision[] = {
    &Division("FloorDivide",
              "Floor division with broadcasting, NumPy's a // b: the quotient "
              "rounded toward -inf. Floats: floor(a / b) computed as NumPy does "
              "(x // 0 is +-inf or NaN). Integers: exact; x // 0 is 0 and "
              "MIN // -1 wraps to MIN. Not differentiable (piecewise constant).")
        .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD),
    &Division("TruncDivide",
              "Truncating division with broadcasting: the quotient rounded "
              "toward zero (C and ONNX Div on integers; trunc(a / b) on "
              "floats). Integers: x / 0 is 0 and MIN / -1 wraps to MIN. Not "
              "differentiable (piecewise constant).")
        .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD),
    &Division("Mod",
              "Remainder with broadcasting, NumPy's a % b: a - floor(a / b) * b, "
              "with the sign of the divisor b. Floats: x % 0 is NaN. Integers: "
              "x % 0 is 0."),
    &Division("Fmod",
              "C fmod with broadcasting: a - trunc(a / b) * b, with the sign of "
              "the dividend a (ONNX Mod with fmod=1). Floats: fmod(x, 0) is NaN. "
              "Integers: fmod(x, 0) is 0."),
};

}  // namespace ops
}  // namespace dragon
