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

}  // namespace

DG_OP(Softmax)
    .Doc("y = exp(x - max(x)) / sum(exp(x - max(x))) along an axis, so each "
         "slice along that axis sums to 1.")
    .Input("x", dg::kFloat, 0, "Input tensor, rank >= 1.")
    .Output("y", dg::kFloat, 0, "Probabilities, same shape and dtype as x.")
    .Attr("axis", int64_t{-1}, "Axis to normalise over.")
    .Shape(SoftmaxShape);

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
