// Bitwise ops and shifts with NumPy broadcasting (docs/ops.md, "Bitwise"):
// BitwiseAnd/Or/Xor/Not on integer dtypes and bool (where they are the
// logical ops), LeftShift/RightShift on integer dtypes. None has a gradient.
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kIntBool = dg::kAnyInt | DG_DTYPE_BIT(DG_BOOL);

void BroadcastSame(dg::InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(),
                 BroadcastShapes(ctx.input(0).shape(), ctx.input(1).shape()));
}

dg::OpSchema& Bitwise(const char* name, const char* doc, DgDTypeMask dtypes,
                      const char* b_doc) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("a", dtypes, 0, "First operand.")
      .Input("b", dtypes, 0, b_doc)
      .Output("y", dtypes, 0, "Result with the broadcast shape of a and b.")
      .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
      .Inplace(3)
      .Shape(BroadcastSame);
}

constexpr const char* kSame = "Second operand, same dtype as a; broadcasts with a.";
constexpr const char* kCount =
    "Shift count, same dtype as a; broadcasts with a.";

}  // namespace

[[maybe_unused]] static const dg::OpSchema* const kBitwise[] = {
    &Bitwise("BitwiseAnd", "Bitwise and with broadcasting: y = a & b (logical and on bool).",
             kIntBool, kSame),
    &Bitwise("BitwiseOr", "Bitwise or with broadcasting: y = a | b (logical or on bool).",
             kIntBool, kSame),
    &Bitwise("BitwiseXor",
             "Bitwise exclusive or with broadcasting: y = a ^ b (logical xor on bool).",
             kIntBool, kSame),
    &Bitwise("LeftShift",
             "Left shift with broadcasting: y = a << b, bits shifted out are lost "
             "(wrapping, as NumPy). A count below 0 or at least the bit width gives 0.",
             dg::kAnyInt, kCount),
    &Bitwise("RightShift",
             "Right shift with broadcasting: y = a >> b, arithmetic (sign-filling) for "
             "signed dtypes, as NumPy. A count below 0 or at least the bit width gives 0, "
             "or -1 for a negative a.",
             dg::kAnyInt, kCount),
};

DG_OP(BitwiseNot)
    .Doc("Bitwise complement, element-wise: y = ~x (two's complement, so ~x == -x - 1 "
         "for signed dtypes; logical not on bool).")
    .Input("x", kIntBool, 0, "Input tensor.")
    .Output("y", kIntBool, 0, "Result, same shape and dtype as x.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Shape(SameAsInput);

}  // namespace ops
}  // namespace dragon
