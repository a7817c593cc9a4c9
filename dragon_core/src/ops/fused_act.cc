// BiasGelu and BiasGeluGrad: the GELU block of a Linear + GELU layer as two
// graph-only ops, written by the `gelu_fusion` graph pass
// (dragon_core/_graph/passes/gelu_fusion.py, docs/graph.md) in place of
//   forward:  pre = Add(x, bias) -> Gelu -> [Cast to float16 / bfloat16]
//   backward: GeluGrad(pre, dy) -> Sum over the leading axes (the bias
//             gradient) and [Cast to float16 / bfloat16]
// BiasGelu writes pre (float32) beside y for the backward, as the Add did.
// Neither op is differentiable (the pass runs on the differentiated graph).
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kF32 = dg::Bit(DG_FLOAT32);
constexpr DgDTypeMask kOutDTypes =
    dg::Bit(DG_FLOAT32) | dg::Bit(DG_BFLOAT16) | dg::Bit(DG_FLOAT16);

void CheckApproximate(const dg::InferContext& ctx) {
  const std::string mode = ctx.s("approximate");
  DG_CHECK(mode == "none" || mode == "tanh", DG_INVALID_ARGUMENT,
           "approximate must be \"none\" or \"tanh\", got \"", mode, "\"");
}

// x of rank >= 1, bias of shape [x's last dimension]; both float32 (the
// schema's dtype masks say so before this runs).
int64_t CheckBias(const dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape();
  const Shape b = ctx.input(1).shape();
  DG_CHECK(!x.empty(), DG_INVALID_ARGUMENT,
           "x must have at least one dimension (the bias runs along its "
           "last), got a 0-d tensor");
  DG_CHECK(b.size() == 1 && b[0] == x.back(), DG_INVALID_ARGUMENT,
           "bias must have shape [", x.back(), "] (x's last dimension; x ",
           ShapeStr(x), "), got ", ShapeStr(b));
  return x.back();
}

void BiasGeluShape(dg::InferContext& ctx) {
  CheckApproximate(ctx);
  CheckBias(ctx);
  ctx.set_output(0, CheckDTypeAttr(ctx, "dtype", kOutDTypes),
                 ctx.input(0).shape());
  ctx.set_output(1, DG_FLOAT32, ctx.input(0).shape());
}

void BiasGeluGradShape(dg::InferContext& ctx) {
  CheckApproximate(ctx);
  const Shape pre = ctx.input(0).shape();
  const Shape dy = ctx.input(1).shape();
  DG_CHECK(!pre.empty(), DG_INVALID_ARGUMENT,
           "pre must have at least one dimension (the bias runs along its "
           "last), got a 0-d tensor");
  DG_CHECK(dy == pre, DG_INVALID_ARGUMENT, "dy must have pre's shape ",
           ShapeStr(pre), ", got ", ShapeStr(dy));
  ctx.set_output(0, CheckDTypeAttr(ctx, "dtype", kOutDTypes), pre);
  Shape db(ctx.b("keepdims") ? pre.size() : 1, 1);
  db.back() = pre.back();
  ctx.set_output(1, DG_FLOAT32, db);
}

}  // namespace

DG_OP(BiasGelu)
    .Doc("y = gelu(x + bias) in dtype, and pre = x + bias: the float32 sum "
         "and the float32 GELU of Add and Gelu, y rounded once to dtype (as "
         "a following Cast rounds). Bit for bit Add -> Gelu -> [Cast] on a "
         "kernel that runs their code. Written by the gelu_fusion graph "
         "pass; not differentiable.")
    .Input("x", kF32, DG_ARG_NO_GRAD, "float32 input, rank >= 1.")
    .Input("bias", kF32, DG_ARG_NO_GRAD,
           "float32, shape [x.shape[-1]]: added along x's last axis.")
    .Output("y", kOutDTypes, 0, "gelu(x + bias), x's shape, in dtype.")
    .Output("pre", kF32, 0,
            "x + bias, float32, x's shape (what the backward reads).")
    .Attr("approximate", "none",
          "\"none\" for the exact erf form, \"tanh\" for the tanh form.")
    .DTypeAttr("dtype", DG_FLOAT32,
               "y's dtype: float32, bfloat16 or float16.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(BiasGeluShape);

DG_OP(BiasGeluGrad)
    .Doc("GELU's backward with its bias gradient: g = dy * gelu'(pre) in "
         "float32 (GeluGrad), dx = g rounded once to dtype, dbias = the "
         "float32 sum of g over every axis but the last (the Sum of a bias "
         "gradient: accumulated in double, in the order of Sum's kernel, "
         "which depends on the shape only). Written by the gelu_fusion graph "
         "pass; not differentiable.")
    .Input("pre", kF32, DG_ARG_NO_GRAD,
           "float32 pre-activation (BiasGelu's pre, or any GeluGrad x), "
           "rank >= 1.")
    .Input("dy", kF32, DG_ARG_NO_GRAD,
           "float32 gradient of gelu(pre), pre's shape.")
    .Output("dx", kOutDTypes, 0, "Gradient of pre, in dtype.")
    .Output("dbias", kF32, 0,
            "Gradient of a bias added along pre's last axis, float32: "
            "[pre.shape[-1]], or pre's rank with ones before the last axis "
            "when keepdims.")
    .Attr("approximate", "none",
          "\"none\" for the exact erf form, \"tanh\" for the tanh form.")
    .DTypeAttr("dtype", DG_FLOAT32,
               "dx's dtype: float32, bfloat16 or float16.")
    .Attr("keepdims", false,
          "dbias keeps x's rank (as the Sum it replaces, keepdims=True).")
    .Flags(DG_OP_NO_GRAD)
    .Shape(BiasGeluGradShape);

}  // namespace ops
}  // namespace dragon
