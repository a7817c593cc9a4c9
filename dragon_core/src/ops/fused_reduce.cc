// SumCastGrad: a gradient's sum over its leading axes (a Linear layer's bias
// gradient, float32) and its cast to a 16-bit float (the operand of the two
// gradient MatMuls) in one op that reads the gradient once. Written by the
// `sum_cast` graph pass (dragon_core/_graph/passes/sum_cast.py) on the
// differentiated graph, so it has no gradient rule; docs/graph.md, "Sum and
// Cast of one gradient".
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kHalfTypes =
    dg::Bit(DG_FLOAT16) | dg::Bit(DG_BFLOAT16);

// sum: float32, shape[num_leading:] (keepdims: leading 1s); y: dtype, shape.
void SumCastGradShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  DG_CHECK(x.dtype() == DG_FLOAT32, DG_INVALID_ARGUMENT,
           "x must be float32 (the gradient whose float32 sum and 16-bit cast "
           "are wanted), got ",
           dg::DTypeName(x.dtype()), " of shape ", ShapeStr(x.shape()));
  const DgDType to = CheckDTypeAttr(ctx, "dtype", kHalfTypes);
  Shape shape = x.shape();
  if (ctx.has("shape")) {
    shape = ctx.ints("shape");
    const int64_t n = CheckedNumel(shape, "shape");
    const int64_t have = CheckedNumel(x.shape(), "x's shape");
    DG_CHECK(n == have, DG_INVALID_ARGUMENT, "shape ", ShapeStr(shape),
             " has ", n, " elements but x of shape ", ShapeStr(x.shape()),
             " has ", have, " (x is read as a row-major tensor of this shape, "
             "as Reshape reads it)");
  }
  const int64_t p = ctx.i("num_leading");
  DG_CHECK(p >= 0 && p <= Rank(shape), DG_INVALID_ARGUMENT, "num_leading ", p,
           " is out of range for shape ", ShapeStr(shape), " (0 to ",
           Rank(shape), " leading axes can be summed)");
  Shape sum;
  for (int64_t i = 0; i < Rank(shape); ++i) {
    if (i >= p) {
      sum.push_back(shape[i]);
    } else if (ctx.b("keepdims")) {
      sum.push_back(1);
    }
  }
  ctx.set_output(0, DG_FLOAT32, sum);
  ctx.set_output(1, to, shape);
}

}  // namespace

DG_OP(SumCastGrad)
    .Doc("sum = Sum(reshape(x, shape), axes=range(num_leading), keepdims) in "
         "float32, bit for bit as Sum computes it, and y = Cast(reshape(x, "
         "shape), dtype) bit for bit, reading x (any strides) once. A graph "
         "pass writes it (sum_cast, docs/graph.md) for a Linear layer's bias "
         "gradient and the 16-bit operand of its gradient MatMuls; not "
         "differentiable.")
    .Input("x", dg::Bit(DG_FLOAT32), DG_ARG_NO_GRAD,
           "The float32 gradient, read through its strides.")
    .Output("sum", dg::Bit(DG_FLOAT32), 0,
            "Sum over the leading num_leading axes of shape, float32.")
    .Output("y", kHalfTypes, 0, "x cast to dtype, with shape `shape`.")
    .RequiredAttr("dtype", DG_ATTR_DTYPE, "float16 or bfloat16.")
    .RequiredAttr("num_leading", DG_ATTR_INT,
                  "How many leading axes of `shape` the sum folds.")
    .OptionalAttr("shape", DG_ATTR_INTS,
                  "The shape x is read as, row-major (as Reshape); x's shape "
                  "when unset. y has this shape.")
    .Attr("keepdims", false, "Keep the summed axes with size 1.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(SumCastGradShape);

}  // namespace ops
}  // namespace dragon
