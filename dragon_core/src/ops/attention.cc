// Scaled dot-product attention, fused (torch.nn.functional.
// scaled_dot_product_attention semantics; ONNX Attention without its
// projections).
//
//   y = softmax(query @ key^T * scale + mask) @ value
//
// query [..., Hq, L, E], key [..., Hk, S, E], value [..., Hk, S, Ev] share
// their leading dimensions; Hk = Hq unless enable_gqa, where Hk divides Hq
// and query head h reads key/value head h / (Hq / Hk). attn_mask broadcasts
// to [..., Hq, L, S]: a bool mask keeps the scores where it is true, a float
// mask is added to them. is_causal keeps key j for query i when j <= i
// (top-left aligned, as torch). A query row that keeps no key (every score
// masked, or -inf) gives zeros, as torch 2.13 does on the CPU; a NaN score
// makes its row NaN (torch's CPU kernel returns zeros there).
#include <cmath>
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void AttentionShape(dg::InferContext& ctx) {
  const dg::TensorRef q = ctx.input(0), k = ctx.input(1), v = ctx.input(2);
  const Shape qs = q.shape(), ks = k.shape(), vs = v.shape();
  const int64_t rank = Rank(qs);
  DG_CHECK(rank >= 2, DG_INVALID_ARGUMENT,
           "query must have rank >= 2 ([..., L, E]), got shape ", ShapeStr(qs));
  DG_CHECK(Rank(ks) == rank && Rank(vs) == rank, DG_INVALID_ARGUMENT,
           "query, key and value must have one rank, got shapes ", ShapeStr(qs),
           ", ", ShapeStr(ks), ", ", ShapeStr(vs));
  DG_CHECK(k.dtype() == q.dtype() && v.dtype() == q.dtype(),
           DG_INVALID_ARGUMENT, "query, key and value must have one dtype, got ",
           dg::DTypeName(q.dtype()), ", ", dg::DTypeName(k.dtype()), ", ",
           dg::DTypeName(v.dtype()));
  const int64_t L = qs[rank - 2], E = qs[rank - 1];
  const int64_t S = ks[rank - 2], Ev = vs[rank - 1];
  DG_CHECK(ks[rank - 1] == E, DG_INVALID_ARGUMENT, "key's last dimension ",
           ks[rank - 1], " must equal query's ", E, " (query ", ShapeStr(qs),
           ", key ", ShapeStr(ks), ")");
  DG_CHECK(vs[rank - 2] == S, DG_INVALID_ARGUMENT,
           "value must have as many rows as key (", S, "), got value ",
           ShapeStr(vs), " and key ", ShapeStr(ks));
  const bool gqa = ctx.b("enable_gqa");
  for (int64_t d = 0; d < rank - 2; ++d) {
    DG_CHECK(ks[d] == vs[d], DG_INVALID_ARGUMENT,
             "key and value must share their leading dimensions, got ",
             ShapeStr(ks), " and ", ShapeStr(vs));
    if (gqa && d == rank - 3) {
      DG_CHECK(ks[d] > 0 && qs[d] % ks[d] == 0, DG_INVALID_ARGUMENT,
               "enable_gqa: key/value heads (", ks[d],
               ") must divide query heads (", qs[d], "); query ", ShapeStr(qs),
               ", key ", ShapeStr(ks));
    } else {
      DG_CHECK(qs[d] == ks[d], DG_INVALID_ARGUMENT,
               "query and key must share their leading dimensions",
               (gqa || rank < 3) ? "" : " (different head counts need enable_gqa=True)",
               ", got query ", ShapeStr(qs), " and key ", ShapeStr(ks));
    }
  }
  DG_CHECK(!gqa || rank >= 3, DG_INVALID_ARGUMENT,
           "enable_gqa needs a head axis: query [..., H, L, E], got ",
           ShapeStr(qs));
  const double p = ctx.f("dropout_p");
  DG_CHECK(p == 0.0, DG_UNIMPLEMENTED, "dropout_p = ", p,
           " is not supported (attention dropout is not implemented: pass 0 "
           "and apply dropout to the output or use a Dropout op)");
  if (ctx.has("scale")) {
    DG_CHECK(std::isfinite(ctx.f("scale")), DG_INVALID_ARGUMENT,
             "scale must be finite, got ", ctx.f("scale"));
  }
  if (ctx.num_inputs() > 3) {
    const dg::TensorRef m = ctx.input(3);
    DG_CHECK(!ctx.b("is_causal"), DG_INVALID_ARGUMENT,
             "attn_mask and is_causal=True are exclusive (as in torch): fold "
             "the causal mask into attn_mask");
    DG_CHECK(m.dtype() == DG_BOOL || m.dtype() == q.dtype(),
             DG_INVALID_ARGUMENT, "attn_mask must be bool or query's dtype ",
             dg::DTypeName(q.dtype()), ", got ", dg::DTypeName(m.dtype()));
    Shape full(qs.begin(), qs.end() - 2);
    full.push_back(L);
    full.push_back(S);
    const Shape ms = m.shape();
    bool ok = Rank(ms) <= rank;
    for (int64_t i = 1; ok && i <= Rank(ms); ++i) {
      const int64_t a = ms[ms.size() - i], b = full[full.size() - i];
      ok = a == 1 || a == b;
    }
    DG_CHECK(ok, DG_INVALID_ARGUMENT, "attn_mask of shape ", ShapeStr(ms),
             " does not broadcast to the scores' shape ", ShapeStr(full));
  }
  Shape out(qs.begin(), qs.end() - 1);
  out.push_back(Ev);
  CheckedNumel(out, "output shape");
  ctx.set_output(0, q.dtype(), out);
}

}  // namespace

DG_OP(ScaledDotProductAttention)
    .PyName("scaled_dot_product_attention")
    .Doc("Fused scaled dot-product attention, as torch.nn.functional."
         "scaled_dot_product_attention: y = softmax(query @ key^T * scale + "
         "mask) @ value. A bool attn_mask keeps the scores where it is True; "
         "a float one is added. is_causal keeps key j for query i when "
         "j <= i (top-left aligned). A query that keeps no key gives zeros. "
         "Grouped-query attention (enable_gqa): query head h uses key/value "
         "head h // (Hq // Hk).")
    .Input("query", dg::kFloat, 0, "Queries [..., Hq, L, E].")
    .Input("key", dg::kFloat, 0, "Keys [..., Hk, S, E], query's dtype.")
    .Input("value", dg::kFloat, 0, "Values [..., Hk, S, Ev], query's dtype.")
    .Input("attn_mask", dg::kFloat | dg::Bit(DG_BOOL), DG_ARG_OPTIONAL,
           "Bool (keep where True) or query's dtype (added), broadcastable to "
           "[..., Hq, L, S].")
    .Output("y", dg::kFloat, 0, "Attention output [..., Hq, L, Ev].")
    .Attr("dropout_p", 0.0,
          "Must be 0: attention dropout is not implemented and raises.")
    .Attr("is_causal", false,
          "Keep key j for query i only when j <= i; exclusive with attn_mask.")
    .OptionalAttr("scale", DG_ATTR_FLOAT,
                  "Multiplies the scores; None means 1 / sqrt(E).")
    .Attr("enable_gqa", false,
          "Allow fewer key/value heads than query heads (axis -3), dividing "
          "them.")
    .Shape(AttentionShape);

}  // namespace ops
}  // namespace dragon
