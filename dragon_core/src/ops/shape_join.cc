// Shape ops that join or split tensors along an axis: Concat, Stack, Split.
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

void ConcatShape(dg::InferContext& ctx) {
  const int32_t n = ctx.num_inputs();
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "needs at least one input tensor");
  const Shape first = ctx.input(0).shape();
  DG_CHECK(!first.empty(), DG_INVALID_ARGUMENT,
           "0-d tensors cannot be concatenated; use stack");
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(first));
  Shape out = first;
  for (int32_t i = 1; i < n; ++i) {
    const Shape s = ctx.input(i).shape();
    DG_CHECK(s.size() == first.size(), DG_INVALID_ARGUMENT, "input ", i,
             " has shape ", ShapeStr(s), " of rank ", s.size(),
             " but input 0 has shape ", ShapeStr(first), " of rank ",
             first.size());
    for (int64_t d = 0; d < Rank(s); ++d) {
      DG_CHECK(d == axis || s[d] == first[d], DG_INVALID_ARGUMENT, "input ", i,
               " has shape ", ShapeStr(s), " but input 0 has shape ",
               ShapeStr(first), ": they differ on axis ", d,
               ", not only on the concatenation axis ", axis);
    }
    out[axis] += s[axis];
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void StackShape(dg::InferContext& ctx) {
  const int32_t n = ctx.num_inputs();
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "needs at least one input tensor");
  const Shape first = ctx.input(0).shape();
  for (int32_t i = 1; i < n; ++i) {
    const Shape s = ctx.input(i).shape();
    DG_CHECK(s == first, DG_INVALID_ARGUMENT, "input ", i, " has shape ",
             ShapeStr(s), " but input 0 has shape ", ShapeStr(first),
             "; stacked tensors must have equal shapes");
  }
  // The new axis refers to the output, whose rank is one more.
  const int64_t rank = Rank(first) + 1, axis = ctx.i("axis");
  DG_CHECK(axis >= -rank && axis < rank, DG_INVALID_ARGUMENT, "axis ", axis,
           " is out of range for stacking tensors of rank ", rank - 1,
           " (valid range is [", -rank, ", ", rank - 1, "])");
  Shape out = first;
  out.insert(out.begin() + (axis < 0 ? axis + rank : axis), n);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void SplitShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(in));
  const std::vector<int64_t> sizes = ctx.ints("sizes");
  int64_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    DG_CHECK(sizes[i] >= 0, DG_INVALID_ARGUMENT, "sizes ", ShapeStr(sizes),
             " has a negative entry ", sizes[i], " at position ", i);
    DG_CHECK(!__builtin_add_overflow(total, sizes[i], &total),
             DG_INVALID_ARGUMENT, "sizes ", ShapeStr(sizes),
             " overflow int64");
  }
  DG_CHECK(total == in[axis], DG_INVALID_ARGUMENT, "sizes ", ShapeStr(sizes),
           " sum to ", total, " but axis ", axis, " of shape ", ShapeStr(in),
           " has size ", in[axis]);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape out = in;
    out[axis] = sizes[i];
    ctx.set_output(static_cast<int32_t>(i), ctx.input(0).dtype(), out);
  }
}

}  // namespace

DG_OP(Concat)
    .Doc("Joins tensors along an existing axis; shapes must agree on every "
         "other axis.")
    .Input("inputs", dg::kAny, DG_ARG_VARIADIC,
           "One or more tensors of one dtype and rank >= 1.")
    .Output("y", dg::kAny, 0, "The joined tensor.")
    .Attr("axis", int64_t{0}, "Axis to join along.")
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(ConcatShape);

DG_OP(Stack)
    .Doc("Joins equally shaped tensors along a new axis inserted at `axis` "
         "of the output.")
    .Input("inputs", dg::kAny, DG_ARG_VARIADIC,
           "One or more tensors of one dtype and one shape.")
    .Output("y", dg::kAny, 0, "The stacked tensor, one rank higher.")
    .Attr("axis", int64_t{0},
          "Position of the new axis, in [-(ndim + 1), ndim].")
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(StackShape);

DG_OP(Split)
    .Doc("Splits x along an axis into consecutive pieces of the given sizes, "
         "which must sum to that axis's length.")
    .Input("x", dg::kAny, 0, "Input tensor, rank >= 1.")
    .Output("outputs", dg::kAny, DG_ARG_VARIADIC,
            "One tensor per entry of sizes.")
    .RequiredAttr("sizes", DG_ATTR_INTS,
                  "Length of each piece along axis (non-negative).")
    .Attr("axis", int64_t{0}, "Axis to split.")
    .Shape(SplitShape);

}  // namespace ops
}  // namespace dragon
