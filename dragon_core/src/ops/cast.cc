// Cast: converts a tensor to another dtype.
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void CastShape(dg::InferContext& ctx) {
  ctx.set_output(0, CheckDTypeAttr(ctx, "dtype", dg::kAll),
                 ctx.input(0).shape());
}

}  // namespace

DG_OP(Cast)
    .Doc("Converts x to another dtype as C++ does: to bool is x != 0, float "
         "to integer truncates toward zero.")
    .Input("x", dg::kAll, 0, "Input tensor.")
    .Output("y", dg::kAll, 0, "x converted, same shape.")
    .RequiredAttr("dtype", DG_ATTR_DTYPE, "Target dtype.")
    .Shape(CastShape);

}  // namespace ops
}  // namespace dragon
