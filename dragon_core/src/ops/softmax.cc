// Softmax and LogSoftmax along one axis, computed stably (max-shifted).
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void SoftmaxShape(dg::InferContext& ctx) {
  NormalizeAxis(ctx.i("axis"), ctx.input(0).ndim());
  SameAsInput(ctx);
}

// SoftmaxGrad(y, dy): dx has y's shape; dy must match it exactly (it is the
// gradient of Softmax's output).
void SoftmaxGradShape(dg::InferContext& ctx) {
  NormalizeAxis(ctx.i("axis"), ctx.input(0).ndim());
  const auto y = ctx.input(0).shape();
  const auto dy = ctx.input(1).shape();
  DG_CHECK(y == dy, DG_INVALID_ARGUMENT, "dy must have y's shape ",
           ShapeStr(y), ", got ", ShapeStr(dy));
  SameAsInput(ctx);
}

}  // namespace

DG_OP(Softmax)
    .Doc("y = exp(x - max(x)) / sum(exp(x - max(x))) along an axis, so each "
         "slice along that axis sums to 1.")
    .Input("x", dg::kFloat, 0, "Input tensor, rank >= 1.")
    .Output("y", dg::kFloat, 0, "Probabilities, same shape and dtype as x.")
    .Attr("axis", int64_t{-1}, "Axis to normalise over.")
    .Shape(SoftmaxShape);

DG_OP(SoftmaxGrad)
    .Doc("Gradient of Softmax from its output: dx = y * (dy - sum(dy * y)) "
         "along an axis (the sum kept as a size-1 axis and broadcast). The "
         "products dy * y are rounded to the dtype and summed as Sum sums, "
         "so the result equals Mul, Sum, Sub and Mul run one by one. The "
         "graph compiler fuses that chain into this op where a kernel exists "
         "(docs/graph.md, \"Pattern fusion\").")
    .Input("y", dg::kFloat, 0, "Softmax's output, rank >= 1.")
    .Input("dy", dg::kFloat, 0, "Gradient of Softmax's output, y's shape.")
    .Output("dx", dg::kFloat, 0, "Gradient of Softmax's input, y's shape.")
    .Attr("axis", int64_t{-1}, "The axis Softmax normalised over.")
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(SoftmaxGradShape);

DG_OP(LogSoftmax)
    .Doc("y = x - max(x) - log(sum(exp(x - max(x)))) along an axis: the "
         "logarithm of Softmax, without its underflow.")
    .Input("x", dg::kFloat, 0, "Input tensor, rank >= 1.")
    .Output("y", dg::kFloat, 0,
            "Log-probabilities, same shape and dtype as x.")
    .Attr("axis", int64_t{-1}, "Axis to normalise over.")
    .Shape(SoftmaxShape);

}  // namespace ops
}  // namespace dragon
