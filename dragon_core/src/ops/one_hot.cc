// OneHot: expands integer indices into one-hot vectors along a new axis.
#include <cstdint>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void OneHotShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const int64_t depth = ctx.i("depth");
  DG_CHECK(depth >= 0, DG_INVALID_ARGUMENT, "depth must be >= 0, got ",
           depth);
  const DgDType dtype = CheckDTypeAttr(ctx, "dtype", dg::kAny);
  // The new axis refers to the output, whose rank is one more.
  const int64_t rank = Rank(in) + 1, axis = ctx.i("axis");
  DG_CHECK(axis >= -rank && axis < rank, DG_INVALID_ARGUMENT, "axis ", axis,
           " is out of range for an output of rank ", rank,
           " (valid range is [", -rank, ", ", rank - 1, "])");
  Shape out = in;
  out.insert(out.begin() + (axis < 0 ? axis + rank : axis), depth);
  CheckedNumel(out, "output shape");
  ctx.set_output(0, dtype, out);
}

}  // namespace

DG_OP(OneHot)
    .Doc("Encodes each index as a vector of length depth holding on_value at "
         "the index and off_value elsewhere, along a new axis; an index "
         "outside [0, depth) is an error.")
    .Input("indices", dg::Bit(DG_INT32) | dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
           "Integer indices.")
    .Output("y", dg::kAny, 0, "One-hot tensor of the requested dtype.")
    .RequiredAttr("depth", DG_ATTR_INT,
                  "Number of classes (length of the new axis), >= 0.")
    .Attr("on_value", 1.0, "Value at the index, cast to dtype.")
    .Attr("off_value", 0.0, "Value elsewhere, cast to dtype.")
    .DTypeAttr("dtype", DG_FLOAT32, "Output dtype.")
    .Attr("axis", int64_t{-1}, "Position of the new axis in the output.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(OneHotShape);

}  // namespace ops
}  // namespace dragon
