// Cast: converts a tensor to another dtype.
#include "core/registry.h"
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void CastShape(dg::InferContext& ctx) {
  ctx.set_output(0, CheckDTypeAttr(ctx, "dtype", dg::kAny),
                 ctx.input(0).shape());
}

// BitCast: the same bytes read as another dtype of the same size; the
// shape is kept.
void BitCastShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const DgDType to = CheckDTypeAttr(ctx, "dtype", dg::kAny);
  DG_CHECK(dg::DTypeSize(to) == dg::DTypeSize(x.dtype()), DG_INVALID_ARGUMENT,
           "cannot reinterpret ", dg::DTypeName(x.dtype()), " (",
           dg::DTypeSize(x.dtype()), " bytes) as ", dg::DTypeName(to), " (",
           dg::DTypeSize(to), " bytes): BitCast needs dtypes of one size");
  ctx.set_output(0, to, x.shape());
}

}  // namespace

DG_OP(BitCast)
    .PyName("bitcast")
    .Doc("Reinterprets the bytes of each element of x as another dtype of the "
         "same size (NumPy's x.view(dtype), ONNX BitCast); the shape is kept. "
         "A bool read from a byte other than 0 or 1 is true. Not "
         "differentiable.")
    .Input("x", dg::kAny, DG_ARG_NO_GRAD, "Input tensor.")
    .Output("y", dg::kAny, 0, "x's bytes as dtype, x's shape.")
    .RequiredAttr("dtype", DG_ATTR_DTYPE, "Target dtype, x's element size.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(BitCastShape);

DG_OP(Cast)
    .Doc("Converts x to another dtype as C++ does: to bool is x != 0, float "
         "to integer truncates toward zero.")
    .Input("x", dg::kAny, 0, "Input tensor.")
    .Output("y", dg::kAny, 0, "x converted, same shape.")
    .RequiredAttr("dtype", DG_ATTR_DTYPE, "Target dtype.")
    .Flags(kOpFlagElementwise)
    .Shape(CastShape);

}  // namespace ops
}  // namespace dragon
