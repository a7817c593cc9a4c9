// MatMulBiasAdd: a mixed-precision Linear layer's product with its bias, and
// optionally the residual added after it, as one graph-only op written by
// the `linear_epilogue` graph pass (dragon_core/_graph/passes/
// linear_epilogue.py, docs/graph.md) in place of
//   MatMul(a, b; out_dtype=float32) -> [Reshape] -> Add(bias)
//       -> Cast(to a's dtype)                       (no residual), or
//       -> Add(residual)                            (float32 y)
// so that the float32 product is never written out and read back by the
// element-wise ops after it. Not differentiable (the pass runs on the
// differentiated graph).
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kHalf = dg::Bit(DG_BFLOAT16) | dg::Bit(DG_FLOAT16);
constexpr DgDTypeMask kF32 = dg::Bit(DG_FLOAT32);

// a, b: 2-D, same 16-bit dtype; bias [m] float32; y: dtype (float32 or a's
// dtype), shape `shape` (n * m elements; [n, m] when unset); residual: y's
// element count, float32.
void MatMulBiasAddShape(dg::InferContext& ctx) {
  const dg::TensorRef a = ctx.input(0), b = ctx.input(1), bias = ctx.input(2);
  CheckDTypeLike(b, "b", a, "a");
  const Shape as = a.shape(), bs = b.shape();
  DG_CHECK(as.size() == 2 && bs.size() == 2, DG_INVALID_ARGUMENT,
           "a and b must be 2-D matrices, got a ", ShapeStr(as), " and b ",
           ShapeStr(bs));
  const bool ta = ctx.b("transpose_a"), tb = ctx.b("transpose_b");
  const int64_t n = ta ? as[1] : as[0], k = ta ? as[0] : as[1];
  const int64_t kb = tb ? bs[1] : bs[0], m = tb ? bs[0] : bs[1];
  DG_CHECK(k == kb, DG_INVALID_ARGUMENT, "inner dimensions differ: a ",
           ShapeStr(as), (ta ? " (transposed)" : ""), " has ", k, ", b ",
           ShapeStr(bs), (tb ? " (transposed)" : ""), " has ", kb);
  DG_CHECK(bias.shape() == Shape{m}, DG_INVALID_ARGUMENT,
           "bias must have shape [", m, "] (the product's columns), got ",
           ShapeStr(bias.shape()));
  const DgDType to = CheckDTypeAttr(ctx, "dtype", kF32 | kHalf);
  DG_CHECK(to == DG_FLOAT32 || to == a.dtype(), DG_INVALID_ARGUMENT,
           "dtype must be float32 or a's dtype ", dg::DTypeName(a.dtype()),
           ", got ", dg::DTypeName(to));
  Shape y{n, m};
  if (ctx.has("shape")) {
    y = ctx.ints("shape");
    const int64_t have = CheckedNumel(y, "shape");
    DG_CHECK(have == n * m, DG_INVALID_ARGUMENT, "shape ", ShapeStr(y),
             " has ", have, " elements but the product [", n, ", ", m,
             "] has ", n * m, " (y is the product read row-major in this "
             "shape, as Reshape reads it)");
  }
  if (ctx.num_inputs() > 3) {
    const Shape r = ctx.input(3).shape();
    DG_CHECK(r == y, DG_INVALID_ARGUMENT, "residual must have y's shape ",
             ShapeStr(y), ", got ", ShapeStr(r));
  }
  ctx.set_output(0, to, y);
}

}  // namespace

DG_OP(MatMulBiasAdd)
    .PyName("matmul_bias_add")
    .Doc("y = (a @ b + bias) + residual for 2-D 16-bit operands: the product "
         "accumulated in float32, the float32 bias added to it, then the "
         "float32 residual (when given), and the sum rounded once to dtype; "
         "y is the [n, m] result read in `shape`. Bit for bit MatMul"
         "(out_dtype=float32) -> [Reshape] -> Add(bias) -> [Add(residual)] "
         "-> [Cast] on a kernel that runs their arithmetic. Written by the "
         "linear_epilogue graph pass; not differentiable.")
    .Input("a", kHalf, DG_ARG_NO_GRAD,
           "Left operand [n, k] ([k, n] with transpose_a), bfloat16 or "
           "float16.")
    .Input("b", kHalf, DG_ARG_NO_GRAD,
           "Right operand [k, m] ([m, k] with transpose_b), a's dtype.")
    .Input("bias", kF32, DG_ARG_NO_GRAD,
           "float32 [m], added along the product's rows.")
    .Input("residual", kF32, DG_ARG_OPTIONAL | DG_ARG_NO_GRAD,
           "Optional float32 of y's shape, added after the bias.")
    .Output("y", kF32 | kHalf, 0, "The sum, in dtype, of shape `shape`.")
    .Attr("transpose_a", false, "Swap a's two axes first.")
    .Attr("transpose_b", false, "Swap b's two axes first.")
    .DTypeAttr("dtype", DG_FLOAT32, "y's dtype: float32 or a's dtype.")
    .OptionalAttr("shape", DG_ATTR_INTS,
                  "y's shape (n * m elements, row-major as Reshape); [n, m] "
                  "when unset.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(MatMulBiasAddShape);

}  // namespace ops
}  // namespace dragon
