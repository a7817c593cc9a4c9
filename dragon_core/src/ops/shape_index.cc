// Shape ops that select or add elements: Slice, Gather, ScatterAdd,
// ScatterReduce, Pad.
#include <cstdint>
#include <string>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// Length of Python's slice(start, stop, step) applied to a sequence of
// `length` items (the result of len(range(*slice.indices(length)))).
// Negative indices count from the end; out-of-range ones are clamped, so
// INT64_MAX / INT64_MIN mean "to the end" in either direction.
int64_t SliceLength(int64_t start, int64_t stop, int64_t step,
                    int64_t length) {
  const int64_t lower = step > 0 ? 0 : -1;
  const int64_t upper = step > 0 ? length : length - 1;
  auto clamp = [&](int64_t i) {
    if (i < 0) {
      i += length;  // cannot overflow: length >= 0
      return i < lower ? lower : i;
    }
    return i > upper ? upper : i;
  };
  start = clamp(start);
  stop = clamp(stop);
  if (step > 0) return stop > start ? (stop - start - 1) / step + 1 : 0;
  // step < 0; (stop - start + 1) / step avoids negating INT64_MIN.
  return start > stop ? (stop - start + 1) / step + 1 : 0;
}

void SliceShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const std::vector<int64_t> starts = ctx.ints("starts");
  const std::vector<int64_t> ends = ctx.ints("ends");
  const std::vector<int64_t> steps = ctx.ints("steps");
  const size_t k = starts.size();
  DG_CHECK(ends.size() == k && steps.size() == k, DG_INVALID_ARGUMENT,
           "starts, ends and steps must have one length, got ", k, ", ",
           ends.size(), " and ", steps.size());
  std::vector<int64_t> axes;
  if (ctx.has("axes")) {
    const std::vector<int64_t> given = ctx.ints("axes");
    DG_CHECK(given.size() == k, DG_INVALID_ARGUMENT, "axes ",
             ShapeStr(given), " has ", given.size(), " entries but starts has ",
             k);
    axes = NormalizeAxes(given, Rank(in));
  } else {
    DG_CHECK(k <= in.size(), DG_INVALID_ARGUMENT, "starts has ", k,
             " entries but the tensor has only ", in.size(), " axes");
    for (size_t i = 0; i < k; ++i) axes.push_back(static_cast<int64_t>(i));
  }
  Shape out = in;
  for (size_t i = 0; i < k; ++i) {
    DG_CHECK(steps[i] != 0, DG_INVALID_ARGUMENT, "steps[", i,
             "] is 0; a slice step must be non-zero");
    out[axes[i]] = SliceLength(starts[i], ends[i], steps[i], in[axes[i]]);
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

// x.shape[:axis] + indices.shape + x.shape[axis+1:]: the result of Gather,
// and the shape ScatterAdd's updates must have. `axis` is normalised.
Shape GatheredShape(const Shape& in, const Shape& idx, int64_t axis) {
  Shape out(in.begin(), in.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), in.begin() + axis + 1, in.end());
  return out;
}

void GatherShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape(), idx = ctx.input(1).shape();
  DG_CHECK(!in.empty(), DG_INVALID_ARGUMENT,
           "cannot gather from a 0-d tensor");
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(in));
  ctx.set_output(0, ctx.input(0).dtype(), GatheredShape(in, idx, axis));
}

// ScatterAdd(x, indices, updates): x's shape and dtype. updates must have
// x's dtype and the shape Gather(x, indices, axis) would produce.
void ScatterAddShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0), updates = ctx.input(2);
  const Shape in = x.shape(), idx = ctx.input(1).shape(),
              upd = updates.shape();
  DG_CHECK(!in.empty(), DG_INVALID_ARGUMENT,
           "cannot scatter into a 0-d tensor");
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(in));
  CheckDTypeLike(updates, "updates", x, "x");
  const Shape want = GatheredShape(in, idx, axis);
  DG_CHECK(upd == want, DG_INVALID_ARGUMENT, "updates has shape ",
           ShapeStr(upd), " but x shape ", ShapeStr(in), ", indices shape ",
           ShapeStr(idx), " and axis ", axis, " need ", ShapeStr(want),
           " (x.shape[:axis] + indices.shape + x.shape[axis+1:])");
  ctx.set_output(0, x.dtype(), in);
}

// ScatterReduce: ScatterAdd's shapes, and a known reduction.
void ScatterReduceShape(dg::InferContext& ctx) {
  const std::string red = ctx.s("reduction");
  DG_CHECK(red == "add" || red == "mul" || red == "max" || red == "min",
           DG_INVALID_ARGUMENT,
           "reduction must be \"add\", \"mul\", \"max\" or \"min\", got \"",
           red, "\"");
  ScatterAddShape(ctx);
}

void PadShape(dg::InferContext& ctx) {
  const Shape in = ctx.input(0).shape();
  const std::vector<int64_t> pads = ctx.ints("pads");
  const std::string mode = ctx.s("mode");
  DG_CHECK(mode == "constant" || mode == "reflect" || mode == "edge",
           DG_INVALID_ARGUMENT, "mode must be \"constant\", \"reflect\" or ",
           "\"edge\", got \"", mode, "\"");
  DG_CHECK(pads.size() == 2 * in.size(), DG_INVALID_ARGUMENT, "pads ",
           ShapeStr(pads), " has ", pads.size(), " entries; a tensor of rank ",
           in.size(), " needs ", 2 * in.size(),
           " ([before0, after0, before1, after1, ...])");
  Shape out = in;
  for (size_t d = 0; d < in.size(); ++d) {
    const int64_t before = pads[2 * d], after = pads[2 * d + 1];
    DG_CHECK(before >= 0 && after >= 0, DG_INVALID_ARGUMENT, "pads ",
             ShapeStr(pads), " has a negative entry for axis ", d, " (",
             before, ", ", after, ")");
    if (mode == "reflect") {
      DG_CHECK((before == 0 || before < in[d]) &&
                   (after == 0 || after < in[d]),
               DG_INVALID_ARGUMENT,
               "reflect padding needs pads smaller than the axis size: axis ",
               d, " has size ", in[d], " but pads (", before, ", ", after,
               ")");
    } else if (mode == "edge") {
      DG_CHECK(in[d] > 0 || (before == 0 && after == 0), DG_INVALID_ARGUMENT,
               "edge padding cannot extend axis ", d,
               " of size 0 (pads (", before, ", ", after, "))");
    }
    DG_CHECK(!__builtin_add_overflow(out[d], before, &out[d]) &&
                 !__builtin_add_overflow(out[d], after, &out[d]),
             DG_INVALID_ARGUMENT, "padded size of axis ", d,
             " overflows int64");
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

}  // namespace

DG_OP(Slice)
    .Doc("Python slicing per axis: along axes[i], takes "
         "slice(starts[i], ends[i], steps[i]) with negative indices counted "
         "from the end and out-of-range indices clamped.")
    .Input("x", dg::kAny, 0, "Input tensor.")
    .Output("y", dg::kAny, 0, "The selected part of x.")
    .RequiredAttr("starts", DG_ATTR_INTS, "First index per sliced axis.")
    .RequiredAttr("ends", DG_ATTR_INTS,
                  "Stop index per sliced axis (exclusive); INT64_MAX or "
                  "INT64_MIN mean \"to the end\".")
    .RequiredAttr("steps", DG_ATTR_INTS,
                  "Step per sliced axis; non-zero, may be negative.")
    .OptionalAttr("axes", DG_ATTR_INTS,
                  "Axes that starts/ends/steps refer to; None means the "
                  "first len(starts) axes.")
    .Shape(SliceShape);

DG_OP(Gather)
    .Doc("Takes slices of x along an axis at the given indices: the output "
         "shape is x.shape[:axis] + indices.shape + x.shape[axis+1:]. "
         "Negative indices count from the end.")
    .Input("x", dg::kAny, 0, "Tensor to gather from, rank >= 1.")
    .Input("indices", dg::Bit(DG_INT32) | dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
           "Indices into axis, in [-dim, dim).")
    .Output("y", dg::kAny, 0, "Gathered values, x's dtype.")
    .Attr("axis", int64_t{0}, "Axis of x to index.")
    .Shape(GatherShape);

DG_OP(ScatterAdd)
    .Doc("Adds slices of updates into a copy of x along an axis at the given "
         "indices: for every position p of indices, "
         "y[..., indices[p], ...] += updates[..., p, ...]. updates has shape "
         "x.shape[:axis] + indices.shape + x.shape[axis+1:]; repeated "
         "indices accumulate; negative indices count from the end.")
    .Input("x", dg::kAnyNumeric, 0, "Tensor to add into, rank >= 1.")
    .Input("indices", dg::Bit(DG_INT32) | dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
           "Indices into axis, in [-dim, dim).")
    .Input("updates", dg::kAnyNumeric, 0,
           "Values to add, x's dtype, shape "
           "x.shape[:axis] + indices.shape + x.shape[axis+1:].")
    .Output("y", dg::kAnyNumeric, 0, "x plus the scattered updates, x's dtype.")
    .Attr("axis", int64_t{0}, "Axis of x to index.")
    .Shape(ScatterAddShape);

DG_OP(ScatterReduce)
    .Doc("Reduces slices of updates into a copy of x along an axis at the "
         "given indices, in index order: for every position p of indices, "
         "y[..., indices[p], ...] = reduce(y[..., indices[p], ...], "
         "updates[..., p, ...]) with reduce one of add, mul, max, min "
         "(ONNX ScatterElements' reduction; max and min propagate NaN). "
         "Positions no index names keep x's value. updates has shape "
         "x.shape[:axis] + indices.shape + x.shape[axis+1:]; negative "
         "indices count from the end.")
    .Input("x", dg::kAnyNumeric, 0, "Tensor to reduce into, rank >= 1.")
    .Input("indices", dg::Bit(DG_INT32) | dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
           "Indices into axis, in [-dim, dim).")
    .Input("updates", dg::kAnyNumeric, 0,
           "Values to reduce in, x's dtype, shape "
           "x.shape[:axis] + indices.shape + x.shape[axis+1:].")
    .Output("y", dg::kAnyNumeric, 0, "x with the updates reduced in, x's dtype.")
    .Attr("axis", int64_t{0}, "Axis of x to index.")
    .Attr("reduction", "add", "\"add\", \"mul\", \"max\" or \"min\".")
    .Shape(ScatterReduceShape);

DG_OP(Pad)
    .Doc("Pads each axis of x before and after, as NumPy pad: with a "
         "constant value, by reflection (edge not repeated), or by repeating "
         "the edge value.")
    .Input("x", dg::kAnyNumeric, 0, "Input tensor.")
    .Output("y", dg::kAnyNumeric, 0, "Padded tensor, x's dtype.")
    .RequiredAttr("pads", DG_ATTR_INTS,
                  "Non-negative amounts [before0, after0, before1, after1, "
                  "...], two per axis.")
    .Attr("mode", "constant", "\"constant\", \"reflect\" or \"edge\".")
    .Attr("value", 0.0, "Fill value for constant mode, cast to x's dtype.")
    .Shape(PadShape);

}  // namespace ops
}  // namespace dragon
