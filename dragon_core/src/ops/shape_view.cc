// Shape ops that rearrange one tensor's axes without changing its elements:
// Reshape, Transpose, BroadcastTo, Squeeze, Unsqueeze, Flatten, Contiguous.
#include <cstdint>
#include <vector>

#include "core/registry.h"
#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kX = "Input tensor.";

void ReshapeShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const int64_t numel = CheckedNumel(in, "input shape");
  Shape out = ctx.ints("shape");
  int64_t infer_at = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      DG_CHECK(infer_at < 0, DG_INVALID_ARGUMENT, "shape ", ShapeStr(out),
               " has more than one -1");
      infer_at = static_cast<int64_t>(i);
      continue;
    }
    DG_CHECK(out[i] >= 0, DG_INVALID_ARGUMENT, "shape ", ShapeStr(out),
             " has an invalid dimension ", out[i],
             " (only -1 may be negative)");
    DG_CHECK(!__builtin_mul_overflow(known, out[i], &known),
             DG_INVALID_ARGUMENT, "shape ", ShapeStr(out),
             " has more elements than fit in int64");
  }
  if (infer_at >= 0) {
    DG_CHECK(known != 0 && numel % known == 0, DG_INVALID_ARGUMENT,
             "cannot reshape ", numel, " elements into shape ", ShapeStr(out));
    out[infer_at] = numel / known;
  } else {
    DG_CHECK(known == numel, DG_INVALID_ARGUMENT, "cannot reshape ", numel,
             " elements into shape ", ShapeStr(out), " (", known,
             " elements)");
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void TransposeShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const int64_t rank = Rank(in);
  Shape out(in.size());
  if (!ctx.has("perm")) {
    for (int64_t i = 0; i < rank; ++i) out[i] = in[rank - 1 - i];
  } else {
    const std::vector<int64_t> perm = ctx.ints("perm");
    DG_CHECK(Rank(perm) == rank, DG_INVALID_ARGUMENT, "perm ", ShapeStr(perm),
             " has ", perm.size(), " entries; a permutation of ", rank,
             " axes is needed");
    std::vector<int64_t> axes = NormalizeAxes(perm, rank, "perm");
    for (int64_t i = 0; i < rank; ++i) out[i] = in[axes[i]];
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void BroadcastToShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const Shape target = CheckShapeAttr(ctx, "shape");
  DG_CHECK(in.size() <= target.size(), DG_INVALID_ARGUMENT,
           "cannot broadcast a tensor of rank ", in.size(), " to shape ",
           ShapeStr(target), " of lower rank ", target.size());
  const size_t lead = target.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i) {
    DG_CHECK(in[i] == 1 || in[i] == target[lead + i], DG_INVALID_ARGUMENT,
             "cannot broadcast shape ", ShapeStr(in), " to ",
             ShapeStr(target), ": size ", in[i], " of axis ", i,
             " is neither 1 nor ", target[lead + i]);
  }
  ctx.set_output(0, ctx.input(0).dtype(), target);
}

void SqueezeShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  std::vector<bool> drop(in.size(), false);
  if (!ctx.has("axes")) {
    for (size_t i = 0; i < in.size(); ++i) drop[i] = in[i] == 1;
  } else {
    for (int64_t a : NormalizeAxes(ctx.ints("axes"), Rank(in))) {
      DG_CHECK(in[a] == 1, DG_INVALID_ARGUMENT, "cannot squeeze axis ", a,
               " of shape ", ShapeStr(in), ": its size is ", in[a],
               ", not 1");
      drop[a] = true;
    }
  }
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!drop[i]) out.push_back(in[i]);
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void UnsqueezeShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const std::vector<int64_t> axes = ctx.ints("axes");
  const int64_t rank = Rank(in) + Rank(axes);
  for (int64_t a : axes) {
    DG_CHECK(a >= -rank && a < rank, DG_INVALID_ARGUMENT, "axis ", a,
             " in axes ", ShapeStr(axes), " is out of range for the output "
             "rank ", rank, " (valid range is [", -rank, ", ", rank - 1, "])");
  }
  std::vector<bool> added(static_cast<size_t>(rank), false);
  for (int64_t a : NormalizeAxes(axes, rank)) added[a] = true;
  Shape out;
  size_t next = 0;
  for (int64_t i = 0; i < rank; ++i) out.push_back(added[i] ? 1 : in[next++]);
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void FlattenShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  // A 0-d tensor behaves as rank 1 here (torch semantics): result [1].
  const int64_t rank = in.empty() ? 1 : Rank(in);
  const Shape dims = in.empty() ? Shape{1} : in;
  const int64_t start = NormalizeAxis(ctx.i("start_axis"), rank, "start_axis");
  const int64_t end = NormalizeAxis(ctx.i("end_axis"), rank, "end_axis");
  DG_CHECK(start <= end, DG_INVALID_ARGUMENT, "start_axis ",
           ctx.i("start_axis"), " comes after end_axis ", ctx.i("end_axis"),
           " for a tensor of rank ", Rank(in));
  Shape out(dims.begin(), dims.begin() + start);
  out.push_back(CheckedNumel(
      Shape(dims.begin() + start, dims.begin() + end + 1), "input shape"));
  out.insert(out.end(), dims.begin() + end + 1, dims.end());
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

}  // namespace

DG_OP(Reshape)
    .Doc("Gives x a new shape with the same number of elements (row-major "
         "order); one dimension may be -1 and is inferred. A view of x "
         "(sharing its memory) when x is contiguous, else a copy.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x with the new shape.")
    .RequiredAttr("shape", DG_ATTR_INTS,
                  "New shape; at most one entry may be -1.")
    .Flags(kOpFlagView)
    .Shape(ReshapeShape);

DG_OP(Transpose)
    .Doc("Permutes the axes of x: output axis i is input axis perm[i]. A "
         "strided view of x (sharing its memory, no copy); consumers whose "
         "kernels need dense inputs get a dense copy.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x with permuted axes.")
    .OptionalAttr("perm", DG_ATTR_INTS,
                  "A permutation of the axes; None reverses them.")
    .Flags(kOpFlagPermuteView)
    .Shape(TransposeShape);

DG_OP(BroadcastTo)
    .Doc("Broadcasts x to a given shape with NumPy rules (size-1 axes "
         "repeat, leading axes are added).")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x broadcast to shape.")
    .RequiredAttr("shape", DG_ATTR_INTS, "Target shape.")
    .Shape(BroadcastToShape);

DG_OP(Squeeze)
    .Doc("Removes axes of size 1.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x without the removed axes.")
    .OptionalAttr("axes", DG_ATTR_INTS,
                  "Axes to remove, each of size 1; None removes every "
                  "size-1 axis.")
    .Flags(kOpFlagView)
    .Shape(SqueezeShape);

DG_OP(Unsqueeze)
    .Doc("Inserts axes of size 1 at the given positions of the output.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x with the new axes.")
    .RequiredAttr("axes", DG_ATTR_INTS,
                  "Positions of the new axes in the output's rank.")
    .Flags(kOpFlagView)
    .Shape(UnsqueezeShape);

DG_OP(Flatten)
    .Doc("Merges axes start_axis..end_axis (inclusive) into one; a 0-d "
         "tensor becomes shape [1].")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "x with the merged axes.")
    .Attr("start_axis", int64_t{0}, "First axis to merge.")
    .Attr("end_axis", int64_t{-1}, "Last axis to merge (inclusive).")
    .Flags(kOpFlagView)
    .Shape(FlattenShape);

DG_OP(Contiguous)
    .Doc("A dense row-major copy of x; the core uses it to make strided "
         "inputs dense.")
    .Input("x", dg::kAny, 0, kX)
    .Output("y", dg::kAny, 0, "Dense copy of x.")
    .Shape(SameAsInput);

}  // namespace ops
}  // namespace dragon
