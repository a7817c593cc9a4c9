// Linear algebra: MatMul with NumPy matmul semantics; Det.
#include <cstdint>
#include <string>
#include <utility>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// How a transpose flag changed an operand, for error messages.
std::string TransposeNote(bool ta, bool tb) {
  if (ta && tb) return " (after transpose_a and transpose_b)";
  if (ta) return " (after transpose_a)";
  if (tb) return " (after transpose_b)";
  return "";
}

// The product's shape (checks the operands).
Shape MatMulOutShape(const dg::InferContext& ctx) {
  const Shape a0 = ctx.input(0).shape(), b0 = ctx.input(1).shape();
  DG_CHECK(!a0.empty() && !b0.empty(), DG_INVALID_ARGUMENT,
           "operands must have at least one dimension, got a ", ShapeStr(a0),
           " and b ", ShapeStr(b0));
  // Transpose flags only act on operands of rank >= 2.
  const bool ta = ctx.b("transpose_a") && a0.size() >= 2;
  const bool tb = ctx.b("transpose_b") && b0.size() >= 2;
  Shape a = a0, b = b0;
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  // 1-D operands: a becomes a row [1, k], b a column [k, 1].
  const bool a_vec = a.size() == 1, b_vec = b.size() == 1;
  if (a_vec) a.insert(a.begin(), 1);
  if (b_vec) b.push_back(1);

  const int64_t m = a[a.size() - 2], k = a[a.size() - 1];
  const int64_t kb = b[b.size() - 2], n = b[b.size() - 1];
  DG_CHECK(k == kb, DG_INVALID_ARGUMENT, "inner dimensions differ: a is ",
           ShapeStr(a0), " and b is ", ShapeStr(b0), TransposeNote(ta, tb),
           ", contracting ", k, " with ", kb);

  Shape batch_a(a.begin(), a.end() - 2), batch_b(b.begin(), b.end() - 2);
  Shape out;
  try {
    out = BroadcastShapes(batch_a, batch_b);
  } catch (const dg::Error&) {
    DG_CHECK(false, DG_INVALID_ARGUMENT, "batch dimensions ",
             ShapeStr(batch_a), " of a ", ShapeStr(a0), " and ",
             ShapeStr(batch_b), " of b ", ShapeStr(b0),
             " cannot be broadcast");
  }
  if (!a_vec) out.push_back(m);
  if (!b_vec) out.push_back(n);
  return out;
}

// --- out_dtype (mixed precision: bfloat16/float16 operands, float32 output)

// The product's dtype: a's, or `out_dtype` when set. A different dtype is
// only float32 from float16/bfloat16 operands (the kernels accumulate in
// float32 and skip the rounding to 16 bits); anything else raises.
DgDType MatMulOutDType(const dg::InferContext& ctx) {
  const DgDType a = ctx.input(0).dtype();
  if (!ctx.has("out_dtype")) return a;
  const DgDType out = ctx.dtype("out_dtype");
  DG_CHECK(out == a || (out == DG_FLOAT32 && (a == DG_BFLOAT16 || a == DG_FLOAT16)),
           DG_INVALID_ARGUMENT, "out_dtype ", dg::DTypeName(out),
           " is not supported for operands of dtype ", dg::DTypeName(a),
           ": out_dtype must be a's dtype, or float32 for bfloat16/float16 operands");
  return out;
}

// The optional output dtype of MatMul and MatMulBiasAct.
void OutDTypeAttr(dg::OpSchema& op) {
  op.OptionalAttr("out_dtype", DG_ATTR_DTYPE,
                  "Dtype of y: None (a's dtype), or float32 for bfloat16/float16 "
                  "operands (products accumulated in float32 and written unrounded; "
                  "autocast sets it).");
}
// --- end out_dtype

void MatMulShape(dg::InferContext& ctx) {
  ctx.set_output(0, MatMulOutDType(ctx), MatMulOutShape(ctx));
}

// MatMul's shape, then the optional bias (input 2) against the last axis.
void MatMulBiasActShape(dg::InferContext& ctx) {
  const std::string act = ctx.s("activation");
  DG_CHECK(act == "none" || act == "relu", DG_INVALID_ARGUMENT,
           "activation must be 'none' or 'relu', got '", act, "'");
  CheckDTypeLike(ctx.input(1), "b", ctx.input(0), "a");
  const DgDType out = MatMulOutDType(ctx);
  const Shape y = MatMulOutShape(ctx);
  if (ctx.num_inputs() >= 3) {
    // The bias is added to the (float32 when out_dtype says so) product.
    DG_CHECK(ctx.input(2).dtype() == out, DG_INVALID_ARGUMENT,
             "bias must have the product's dtype ", dg::DTypeName(out), ", got ",
             dg::DTypeName(ctx.input(2).dtype()));
    const Shape bias = ctx.input(2).shape();
    DG_CHECK(!y.empty() && bias.size() == 1 && bias[0] == y.back(),
             DG_INVALID_ARGUMENT, "bias must have shape [",
             y.empty() ? 0 : y.back(), "] (the product's last axis), got ",
             ShapeStr(bias), " for a product of shape ", ShapeStr(y));
  }
  ctx.set_output(0, out, y);
}

// The operand flags of MatMul and MatMulBiasAct.
void TransposeAttrs(dg::OpSchema& op) {
  op.Attr("transpose_a", false,
          "Swap the last two axes of a first (ignored when a is 1-D).")
      .Attr("transpose_b", false,
            "Swap the last two axes of b first (ignored when b is 1-D).");
}

// Det(x): x [..., n, n] -> [...]. DetGrad(x, dy): x's shape.
void DetShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const size_t r = in.size();
  DG_CHECK(r >= 2 && in[r - 1] == in[r - 2], DG_INVALID_ARGUMENT,
           "x must be a batch of square matrices [..., n, n], got ",
           ShapeStr(in));
  ctx.set_output(0, ctx.input(0).dtype(), Shape(in.begin(), in.end() - 2));
}

void DetGradShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape(), dy = ctx.input(1).shape();
  const size_t r = in.size();
  DG_CHECK(r >= 2 && in[r - 1] == in[r - 2], DG_INVALID_ARGUMENT,
           "x must be a batch of square matrices [..., n, n], got ",
           ShapeStr(in));
  CheckDTypeLike(ctx.input(1), "dy", ctx.input(0), "x");
  const Shape want(in.begin(), in.end() - 2);
  DG_CHECK(dy == want, DG_INVALID_ARGUMENT, "dy has shape ", ShapeStr(dy),
           " but x ", ShapeStr(in), " needs ", ShapeStr(want));
  ctx.set_output(0, ctx.input(0).dtype(), in);
}

}  // namespace

DG_OP(MatMul)
    .PyName("matmul")
    .Doc("Matrix product with NumPy matmul semantics: the last two axes are "
         "multiplied, leading (batch) axes broadcast, and a 1-D operand is "
         "treated as a row (a) or column (b) whose added axis is removed.")
    .Input("a", dg::kFloat | dg::Bit(DG_INT32), 0,
           "Left operand, rank >= 1 (a float type, or int32: exact "
           "products wrapping as two's complement).")
    .Input("b", dg::kFloat | dg::Bit(DG_INT32), 0,
           "Right operand, rank >= 1, same dtype as a.")
    .Output("y", dg::kFloat | dg::Bit(DG_INT32), 0,
            "Product, a's dtype (or out_dtype).")
    .Apply(TransposeAttrs)
    .Apply(OutDTypeAttr)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(MatMulShape);

DG_OP(MatMulBiasAct)
    .PyName("matmul_bias_act")
    .Doc("Fused MatMul + bias + activation: y = act(matmul(a, b) + bias), "
         "the bias broadcast along the product's last axis. The fusion pass "
         "(graph mode) writes it in place of MatMul -> Add -> Relu when a "
         "kernel for it is registered on the graph's device.")
    .Input("a", dg::kFloat, 0, "Left operand, rank >= 1.")
    .Input("b", dg::kFloat, 0, "Right operand, rank >= 1, same dtype as a.")
    .Input("bias", dg::kFloat, DG_ARG_OPTIONAL,
           "Optional bias, [n] for a product [..., n], the product's dtype "
           "(a's, or out_dtype).")
    .Output("y", dg::kFloat, 0, "act(a @ b + bias), a's dtype (or out_dtype).")
    .Apply(TransposeAttrs)
    .Attr("activation", "relu", "Applied after the bias: 'none' or 'relu'.")
    .Apply(OutDTypeAttr)
    .Shape(MatMulBiasActShape);

DG_OP(Det)
    .PyName("det")
    .Doc("Determinant of each square matrix in the last two axes of x "
         "(np.linalg.det, ONNX Det), by LU factorisation with partial "
         "pivoting accumulated in float64; a 0x0 matrix has determinant 1.")
    .Input("x", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), 0,
           "Square matrices [..., n, n].")
    .Output("y", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), 0,
            "Determinants [...], x's dtype.")
    .Shape(DetShape);

DG_OP(DetGrad)
    .PyName("det_grad")
    .Doc("Gradient of Det: dx = dy * cofactor(x) (det(x) * inv(x)^T where x "
         "is invertible; from the (n-1)x(n-1) minors where it is singular, "
         "so the gradient stays exact there).")
    .Input("x", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Square matrices [..., n, n].")
    .Input("dy", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Gradient of the determinants [...], x's dtype.")
    .Output("dx", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), 0,
            "Gradient of x, x's shape.")
    .Shape(DetGradShape);

}  // namespace ops
}  // namespace dragon
