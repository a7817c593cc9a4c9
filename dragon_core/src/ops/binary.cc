// Element-wise binary ops with NumPy broadcasting: arithmetic, comparisons,
// logical and/or, and the ternary Where.
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kA = "First operand.";
constexpr const char* kB =
    "Second operand, same dtype as a; broadcasts with a.";
constexpr const char* kY = "Result with the broadcast shape of a and b.";

// Output: broadcast shape, dtype of a (SAME_DTYPE makes a and b agree).
void BroadcastSameDType(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(),
                 BroadcastShapes(ctx.input(0).shape(), ctx.input(1).shape()));
}

// Output: broadcast shape, bool.
void BroadcastBool(dg::InferContext& ctx) {
  ctx.set_output(0, DG_BOOL,
                 BroadcastShapes(ctx.input(0).shape(), ctx.input(1).shape()));
}

void WhereShape(dg::InferContext& ctx) {
  dg::TensorRef cond = ctx.input(0), x = ctx.input(1), y = ctx.input(2);
  DG_CHECK(cond.dtype() == DG_BOOL, DG_INVALID_ARGUMENT,
           "condition must be bool, got ", dg::DTypeName(cond.dtype()));
  DG_CHECK(x.dtype() == y.dtype(), DG_INVALID_ARGUMENT,
           "x and y must have the same dtype, got ", dg::DTypeName(x.dtype()),
           " and ", dg::DTypeName(y.dtype()));
  ctx.set_output(0, x.dtype(),
                 BroadcastShapes(cond.shape(), x.shape(), y.shape()));
}

}  // namespace

// ------------------------------------------------------------- arithmetic

DG_OP(Add)
    .Doc("Addition with broadcasting: y = a + b.")
    .Input("a", dg::kNumeric, 0, kA)
    .Input("b", dg::kNumeric, 0, kB)
    .Output("y", dg::kNumeric, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Sub)
    .Doc("Subtraction with broadcasting: y = a - b.")
    .Input("a", dg::kNumeric, 0, kA)
    .Input("b", dg::kNumeric, 0, kB)
    .Output("y", dg::kNumeric, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Mul)
    .Doc("Multiplication with broadcasting: y = a * b.")
    .Input("a", dg::kNumeric, 0, kA)
    .Input("b", dg::kNumeric, 0, kB)
    .Output("y", dg::kNumeric, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Div)
    .Doc("True division with broadcasting: y = a / b (IEEE semantics: x / 0 "
         "is +-inf or NaN).")
    .Input("a", dg::kFloat, 0, kA)
    .Input("b", dg::kFloat, 0, kB)
    .Output("y", dg::kFloat, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Pow)
    .Doc("Power with broadcasting: y = a ^ b.")
    .Input("a", dg::kFloat, 0, "Base.")
    .Input("b", dg::kFloat, 0, "Exponent, same dtype as a; broadcasts with a.")
    .Output("y", dg::kFloat, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Maximum)
    .Doc("Element-wise maximum with broadcasting; a NaN in either operand "
         "gives NaN (as NumPy).")
    .Input("a", dg::kNumeric, 0, kA)
    .Input("b", dg::kNumeric, 0, kB)
    .Output("y", dg::kNumeric, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

DG_OP(Minimum)
    .Doc("Element-wise minimum with broadcasting; a NaN in either operand "
         "gives NaN (as NumPy).")
    .Input("a", dg::kNumeric, 0, kA)
    .Input("b", dg::kNumeric, 0, kB)
    .Output("y", dg::kNumeric, 0, kY)
    .Flags(DG_OP_SAME_DTYPE)
    .Inplace(3)
    .Shape(BroadcastSameDType);

// ------------------------------------------------------- comparisons, logical

// The shared schema of a broadcasting predicate: any dtypes (one dtype for
// both), a bool result, no gradient.
static dg::OpSchema& Predicate(const char* name, const char* doc) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("a", dg::kAll, 0, kA)
      .Input("b", dg::kAll, 0, kB)
      .Output("y", dg::Bit(DG_BOOL), 0, "Bool result, broadcast shape.")
      .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
      .Shape(BroadcastBool);
}

[[maybe_unused]] static const dg::OpSchema* const kPredicates[] = {
    &Predicate("Equal", "y = (a == b) with broadcasting, as bool."),
    &Predicate("NotEqual", "y = (a != b) with broadcasting, as bool."),
    &Predicate("Less", "y = (a < b) with broadcasting, as bool."),
    &Predicate("LessEqual", "y = (a <= b) with broadcasting, as bool."),
    &Predicate("Greater", "y = (a > b) with broadcasting, as bool."),
    &Predicate("GreaterEqual", "y = (a >= b) with broadcasting, as bool."),
    &Predicate("LogicalAnd", "y = (a != 0) and (b != 0) with broadcasting, as bool."),
    &Predicate("LogicalOr", "y = (a != 0) or (b != 0) with broadcasting, as bool."),
};

// ------------------------------------------------------------- selection

DG_OP(Where)
    .Doc("Selects element-wise: y = x where condition is true, else y; the "
         "three inputs broadcast together.")
    .Input("condition", dg::Bit(DG_BOOL), DG_ARG_NO_GRAD,
           "Bool mask choosing x (true) or y (false).")
    .Input("x", dg::kAll, 0, "Values taken where condition is true.")
    .Input("y", dg::kAll, 0,
           "Values taken where condition is false; same dtype as x.")
    .Output("out", dg::kAll, 0,
            "Result with x's dtype and the broadcast shape of all inputs.")
    .DispatchInput(1)
    .Shape(WhereShape);

}  // namespace ops
}  // namespace dragon
