// SoftmaxAttention and SoftmaxAttentionGrad: the attention block of a
// multi-head attention layer written with MatMul and Softmax, as two
// graph-only ops. The `attention_fusion` graph pass
// (dragon_core/_graph/passes/attention_fusion.py, docs/graph.md) writes them
// in place of
//   forward:  s = MatMul(q, kt) -> [Mul(s, scale)] -> p = Softmax(-1)
//             -> o = MatMul(p, v)
//   backward: dp = MatMul(do, v, transpose_b) -> SoftmaxGrad(p, dp)
//             -> [Mul(scale)] = ds; dv = MatMul(p, do, transpose_a),
//             dq = MatMul(ds, kt, transpose_b), dk = MatMul(ds, q, transpose_a)
// so that a kernel can run each batch item's products and softmax while its
// operands are in cache. The forward writes p beside o for the backward, as
// the Softmax did. Neither op is differentiable (the pass runs on the
// differentiated graph).
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kF32 = dg::Bit(DG_FLOAT32);
constexpr DgDTypeMask kF32Bf16 = dg::Bit(DG_FLOAT32) | dg::Bit(DG_BFLOAT16);

// Checks that `t` has rank >= 2, the batch axes `batch` and the matrix
// shape [rows, cols] (-1: any); returns its last two dimensions.
std::pair<int64_t, int64_t> Matrix(const char* name, const Shape& t,
                                   const Shape& batch, int64_t rows,
                                   int64_t cols) {
  DG_CHECK(Rank(t) >= 2, DG_INVALID_ARGUMENT, name,
           " must have rank >= 2 ([..., rows, cols]), got shape ", ShapeStr(t));
  const Shape lead(t.begin(), t.end() - 2);
  const int64_t r = t[t.size() - 2], c = t.back();
  DG_CHECK(lead == batch && (rows < 0 || r == rows) && (cols < 0 || c == cols),
           DG_INVALID_ARGUMENT, name, " must have shape ",
           ShapeStr(batch), " + [", rows < 0 ? std::string("*") : std::to_string(rows),
           ", ", cols < 0 ? std::string("*") : std::to_string(cols), "], got ",
           ShapeStr(t));
  return {r, c};
}

struct Dims {
  Shape batch;
  int64_t L = 0, S = 0, E = 0, Ev = 0;
};

// q [..., L, E], kt [..., E, S], v [..., S, Ev] with one batch shape.
Dims CheckQkv(const dg::InferContext& ctx) {
  Dims d;
  const Shape q = ctx.input(0).shape();
  DG_CHECK(Rank(q) >= 2, DG_INVALID_ARGUMENT,
           "q must have rank >= 2 ([..., L, E]), got shape ", ShapeStr(q));
  d.batch.assign(q.begin(), q.end() - 2);
  d.L = q[q.size() - 2], d.E = q.back();
  d.S = Matrix("kt", ctx.input(1).shape(), d.batch, d.E, -1).second;
  d.Ev = Matrix("v", ctx.input(2).shape(), d.batch, d.S, -1).second;
  const DgDType t = ctx.input(0).dtype();
  DG_CHECK(ctx.input(1).dtype() == t && ctx.input(2).dtype() == t,
           DG_INVALID_ARGUMENT, "q, kt and v must have one dtype, got ",
           dg::DTypeName(t), ", ", dg::DTypeName(ctx.input(1).dtype()), ", ",
           dg::DTypeName(ctx.input(2).dtype()));
  return d;
}

// [..., rows, cols]; with the attribute `heads_last` set (rank 4 only),
// [B, rows, H, cols]: the [B, H, rows, cols] result with its two middle axes
// swapped, as the head merge reads it.
Shape With(const dg::InferContext& ctx, const char* heads_last,
           const Shape& batch, int64_t rows, int64_t cols) {
  if (ctx.b(heads_last)) {
    DG_CHECK(batch.size() == 2, DG_INVALID_ARGUMENT, heads_last,
             " needs inputs of rank 4 ([B, H, rows, cols]), got batch axes ",
             ShapeStr(batch));
    return {batch[0], rows, batch[1], cols};
  }
  Shape s = batch;
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

void SoftmaxAttentionShape(dg::InferContext& ctx) {
  const Dims d = CheckQkv(ctx);
  Shape p = d.batch;
  p.push_back(d.L);
  p.push_back(d.S);
  ctx.set_output(0, DG_FLOAT32, p);
  ctx.set_output(1, ctx.input(0).dtype(),
                 With(ctx, "o_heads_last", d.batch, d.L, d.Ev));
}

void SoftmaxAttentionGradShape(dg::InferContext& ctx) {
  const Dims d = CheckQkv(ctx);
  Matrix("p", ctx.input(3).shape(), d.batch, d.L, d.S);
  Matrix("do", ctx.input(4).shape(), d.batch, d.L, d.Ev);
  DG_CHECK(ctx.input(4).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
           "do must have q's dtype ", dg::DTypeName(ctx.input(0).dtype()),
           ", got ", dg::DTypeName(ctx.input(4).dtype()));
  ctx.set_output(0, DG_FLOAT32, With(ctx, "dq_heads_last", d.batch, d.L, d.E));
  ctx.set_output(1, DG_FLOAT32, With(ctx, "dk_heads_last", d.batch, d.S, d.E));
  ctx.set_output(2, DG_FLOAT32, With(ctx, "dv_heads_last", d.batch, d.S, d.Ev));
}

}  // namespace

DG_OP(SoftmaxAttention)
    .Doc("p = softmax(q @ kt * scale) along the last axis and o = p @ v, per "
         "batch item, p in float32 and o in q's dtype (float32, or bfloat16 "
         "with float32 scores and p rounded to bfloat16 for the second "
         "product): bit for bit MatMul -> Mul -> Softmax -> [Cast] -> MatMul "
         "on a kernel that runs their code (scale applied as the Mul does, "
         "after the product; has_scale false: no Mul). Written by the "
         "attention_fusion graph pass; not differentiable.")
    .Input("q", kF32Bf16, DG_ARG_NO_GRAD,
           "float32 or bfloat16 [..., L, E] (any strides).")
    .Input("kt", kF32Bf16, DG_ARG_NO_GRAD,
           "[..., E, S], q's dtype: the keys, transposed (any strides).")
    .Input("v", kF32Bf16, DG_ARG_NO_GRAD,
           "[..., S, Ev], q's dtype (any strides).")
    .Output("p", kF32, 0, "softmax(q @ kt * scale), [..., L, S], float32.")
    .Output("o", kF32Bf16, 0,
            "p @ v in q's dtype (bfloat16: p rounded to bfloat16 first, "
            "the product accumulated in float32, rounded once), [..., L, Ev] "
            "([B, L, H, Ev] with o_heads_last).")
    .Attr("scale", 1.0, "Multiplies the scores after the product.")
    .Attr("has_scale", false, "Whether the scores are multiplied at all.")
    .Attr("o_heads_last", false,
          "Rank 4 only: o is written as [B, L, H, Ev] (the [B, H, L, Ev] "
          "result with its middle axes swapped, as the head merge reads it).")
    .Flags(DG_OP_NO_GRAD)
    .Shape(SoftmaxAttentionShape);

DG_OP(SoftmaxAttentionGrad)
    .Doc("SoftmaxAttention's backward from p and do (the gradient of o): "
         "dp = do @ v^T, ds = SoftmaxGrad(p, dp) * scale, dq = ds @ kt^T, "
         "dk = ds^T @ q, dv = p^T @ do, float32 results (bfloat16 inputs: "
         "p and ds rounded to bfloat16 before the products that read them, "
         "products accumulated in float32): bit for bit the MatMul, "
         "SoftmaxGrad, Mul and Cast ops it replaces on a kernel that runs "
         "their code. Written by the attention_fusion graph pass; not "
         "differentiable.")
    .Input("q", kF32Bf16, DG_ARG_NO_GRAD,
           "float32 or bfloat16 [..., L, E] (any strides).")
    .Input("kt", kF32Bf16, DG_ARG_NO_GRAD, "[..., E, S], q's dtype (any strides).")
    .Input("v", kF32Bf16, DG_ARG_NO_GRAD, "[..., S, Ev], q's dtype (any strides).")
    .Input("p", kF32, DG_ARG_NO_GRAD,
           "float32 [..., L, S]: SoftmaxAttention's p.")
    .Input("do", kF32Bf16, DG_ARG_NO_GRAD,
           "[..., L, Ev], q's dtype: the gradient of o (any strides).")
    .Output("dq", kF32, 0,
            "Gradient of q, [..., L, E] ([B, L, H, E] with dq_heads_last).")
    .Output("dk", kF32, 0,
            "Gradient of the keys (kt transposed), [..., S, E] ([B, S, H, E] "
            "with dk_heads_last).")
    .Output("dv", kF32, 0,
            "Gradient of v, [..., S, Ev] ([B, S, H, Ev] with dv_heads_last).")
    .Attr("scale", 1.0, "The forward's scale.")
    .Attr("has_scale", false, "Whether the forward multiplied the scores.")
    .Attr("dq_heads_last", false,
          "Rank 4 only: dq is written with its middle axes swapped.")
    .Attr("dk_heads_last", false,
          "Rank 4 only: dk is written with its middle axes swapped.")
    .Attr("dv_heads_last", false,
          "Rank 4 only: dv is written with its middle axes swapped.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(SoftmaxAttentionGradShape);

}  // namespace ops
}  // namespace dragon
