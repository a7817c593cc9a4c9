// Element-wise binary ops with NumPy broadcasting: arithmetic, comparisons,
// logical and/or, and the ternary Where.
#include "core/registry.h"
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

// The shared schema of broadcasting arithmetic: one dtype for a, b and y;
// y may overwrite either input.
static dg::OpSchema& Arithmetic(const char* name, const char* doc, DgDTypeMask dtypes,
                                const char* a_doc = kA, const char* b_doc = kB) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("a", dtypes, 0, a_doc)
      .Input("b", dtypes, 0, b_doc)
      .Output("y", dtypes, 0, kY)
      .Flags(DG_OP_SAME_DTYPE)
      .Inplace(3)
      .Flags(kOpFlagElementwise)
      .Shape(BroadcastSameDType);
}

[[maybe_unused]] static const dg::OpSchema* const kArithmetic[] = {
    &Arithmetic("Add", "Addition with broadcasting: y = a + b.", dg::kAnyNumeric),
    &Arithmetic("Sub", "Subtraction with broadcasting: y = a - b.", dg::kAnyNumeric),
    &Arithmetic("Mul", "Multiplication with broadcasting: y = a * b.", dg::kAnyNumeric),
    &Arithmetic("Div",
                "True division with broadcasting: y = a / b (IEEE semantics: x / 0 is +-inf "
                "or NaN).",
                dg::kFloat),
    &Arithmetic("Pow",
                "Power with broadcasting: y = a ^ b. Integers: exact with wrapping, and a "
                "negative exponent raises (as NumPy).",
                dg::kAnyNumeric, "Base.",
                "Exponent, same dtype as a; broadcasts with a."),
    &Arithmetic("Maximum",
                "Element-wise maximum with broadcasting; a NaN in either operand gives NaN "
                "(as NumPy); logical or on bool.",
                dg::kAny),
    &Arithmetic("Minimum",
                "Element-wise minimum with broadcasting; a NaN in either operand gives NaN "
                "(as NumPy); logical and on bool.",
                dg::kAny),
};

// ------------------------------------------------------- comparisons, logical

// The shared schema of a broadcasting predicate: any dtypes (one dtype for
// both), a bool result, no gradient.
static dg::OpSchema& Predicate(const char* name, const char* doc) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("a", dg::kAny, 0, kA)
      .Input("b", dg::kAny, 0, kB)
      .Output("y", dg::Bit(DG_BOOL), 0, "Bool result, broadcast shape.")
      .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
      .Flags(kOpFlagElementwise)
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
    .Input("x", dg::kAny, 0, "Values taken where condition is true.")
    .Input("y", dg::kAny, 0,
           "Values taken where condition is false; same dtype as x.")
    .Output("out", dg::kAny, 0,
            "Result with x's dtype and the broadcast shape of all inputs.")
    .DispatchInput(1)
    .Flags(kOpFlagElementwise)
    .Shape(WhereShape);

}  // namespace ops
}  // namespace dragon
