// Neural-network utilities: Dropout and Embedding.
#include <cmath>
#include <cstdint>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kIndexTypes = dg::Bit(DG_INT32) | dg::Bit(DG_INT64);

void DropoutShape(dg::InferContext& ctx) {
  const double p = ctx.f("p");
  DG_CHECK(p >= 0.0 && p <= 1.0, DG_INVALID_ARGUMENT,
           "p must be a probability in [0, 1], got ", p);
  const dg::TensorRef x = ctx.input(0);
  ctx.set_output(0, x.dtype(), x.shape());
  ctx.set_output(1, x.dtype(), x.shape());
}

void EmbeddingShape(dg::InferContext& ctx) {
  const dg::TensorRef weight = ctx.input(0), indices = ctx.input(1);
  const Shape w = weight.shape();
  DG_CHECK(w.size() == 2, DG_INVALID_ARGUMENT,
           "weight must be a 2-D table [num_embeddings, embedding_dim], got "
           "shape ",
           ShapeStr(w));
  const int64_t padding_idx = ctx.i("padding_idx");
  DG_CHECK(padding_idx < w[0], DG_INVALID_ARGUMENT, "padding_idx ",
           padding_idx, " is out of range for a table of ", w[0],
           " rows (use a row in [0, ", w[0], ") or a negative value for none)");
  Shape out = indices.shape();
  out.push_back(w[1]);
  CheckedNumel(out, "output shape");
  ctx.set_output(0, weight.dtype(), out);
}

}  // namespace

DG_OP(Dropout)
    .Doc("Zeroes each element of x with probability p and scales the kept "
         "ones by 1 / (1 - p): y = x * mask, where mask holds 0 or "
         "1 / (1 - p). Element i of the mask depends only on (seed, i), not "
         "on the thread count. p = 1 zeroes everything.")
    .Input("x", dg::kFloat, 0, "Input tensor.")
    .Output("y", dg::kFloat, 0, "x * mask, x's shape and dtype.")
    .Output("mask", dg::kFloat, DG_ARG_NO_GRAD,
            "The scaled keep mask (0 or 1 / (1 - p)), x's shape and dtype.")
    .Attr("p", 0.5, "Probability of dropping an element, in [0, 1].")
    .Attr("seed", int64_t{-1},
          "Generator seed; -1 draws one from the global generator at every "
          "run (also in graph mode).")
    .Flags(DG_OP_STATEFUL)
    .Shape(DropoutShape);

DG_OP(Embedding)
    .Doc("Looks up rows of a table: y[..., :] = weight[indices[...], :], so "
         "y has shape indices.shape + [embedding_dim]. An index outside "
         "[0, num_embeddings) is an error. The row padding_idx (when >= 0) "
         "gets no gradient.")
    .Input("weight", dg::kAny, 0,
           "Table of shape [num_embeddings, embedding_dim].")
    .Input("indices", kIndexTypes, DG_ARG_NO_GRAD,
           "Row indices, int32 or int64, any shape.")
    .Output("y", dg::kAny, 0, "The rows, weight's dtype.")
    .Attr("padding_idx", int64_t{-1},
          "Row whose gradient is always zero; negative means none.")
    .Shape(EmbeddingShape);

}  // namespace ops
}  // namespace dragon
