// Scans, sorting and selection along one axis, and the data-dependent ops
// in padded form: CumSum, Sort, ArgSort, TopK, NonZero, Unique.
//
// Ordering (Sort, ArgSort, TopK, Unique): ascending puts NaN last, and
// descending puts NaN first (NaN counts as larger than every number, as in
// torch); equal keys keep their index order, so results are always stable
// and TopK resolves ties by the lower index, as ONNX requires.
//
// Data-dependent shapes. The core sizes every output from shape inference,
// before any kernel runs (docs/architecture.md), so NonZero and Unique
// return the padded form, as vision_ops' Nms does: outputs sized for the
// worst case plus a 0-d int64 count. The Python functions
// dragon_core.ops.nonzero / unique slice the padded outputs by that count
// (docs/ops.md, "Data-dependent shapes").
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kSortTypes = dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64) |
                                   dg::Bit(DG_INT32) | dg::Bit(DG_INT64);
constexpr const char* kAxis =
    "Axis to work along (negative counts from the end); a 0-d input "
    "accepts 0 or -1 and is treated as one element.";

// Normalised axis; a 0-d tensor is one element along axis 0 or -1.
int64_t ScalarOrAxis(int64_t axis, int64_t rank) {
  if (rank == 0) {
    DG_CHECK(axis == 0 || axis == -1, DG_INVALID_ARGUMENT, "axis ", axis,
             " is out of range for a 0-d tensor (only 0 and -1 are accepted)");
    return 0;
  }
  return NormalizeAxis(axis, rank);
}

void SameShapeAlongAxis(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  ScalarOrAxis(ctx.i("axis"), x.ndim());
  ctx.set_output(0, x.dtype(), x.shape());
}

void SortShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  ScalarOrAxis(ctx.i("axis"), x.ndim());
  ctx.set_output(0, x.dtype(), x.shape());
  ctx.set_output(1, DG_INT64, x.shape());
}

void ArgSortShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  ScalarOrAxis(ctx.i("axis"), x.ndim());
  ctx.set_output(0, DG_INT64, x.shape());
}

void TopKShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  Shape shape = x.shape();
  const int64_t axis = ScalarOrAxis(ctx.i("axis"), x.ndim());
  const int64_t dim = shape.empty() ? 1 : shape[axis];
  const int64_t k = ctx.i("k");
  DG_CHECK(k >= 0 && k <= dim, DG_INVALID_ARGUMENT, "k ", k,
           " is out of range for axis ", ctx.i("axis"), " of size ", dim,
           " (input shape ", ShapeStr(shape), "; k must be in [0, ", dim,
           "])");
  DG_CHECK(!shape.empty() || k == 1, DG_INVALID_ARGUMENT,
           "a 0-d input is one element and takes k = 1, got k ", k);
  if (!shape.empty()) shape[axis] = k;
  ctx.set_output(0, x.dtype(), shape);
  ctx.set_output(1, DG_INT64, shape);
}

void NonZeroShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const Shape shape = x.shape();
  const int64_t n = CheckedNumel(shape, "input shape");
  ctx.set_output(0, DG_INT64, {Rank(shape), n});
  ctx.set_output(1, DG_INT64, {});
}

// Without axis: the flattened x ([numel] outputs, inverse of x's shape).
// With axis: the slices of x along it (values keeps x's shape, indices /
// inverse / counts are [dim]); a 0-d x has no axis to take.
void UniqueShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  const Shape shape = x.shape();
  const int64_t n = CheckedNumel(shape, "input shape");
  if (ctx.has("axis")) {
    DG_CHECK(!shape.empty(), DG_INVALID_ARGUMENT, "axis ", ctx.i("axis"),
             " given for a 0-d input (a 0-d tensor has no axis; leave axis "
             "unset to take its one element)");
    const int64_t dim = shape[NormalizeAxis(ctx.i("axis"), Rank(shape))];
    ctx.set_output(0, x.dtype(), shape);
    ctx.set_output(1, DG_INT64, {dim});
    ctx.set_output(2, DG_INT64, {dim});
    ctx.set_output(3, DG_INT64, {dim});
    ctx.set_output(4, DG_INT64, {});
    return;
  }
  ctx.set_output(0, x.dtype(), {n});
  ctx.set_output(1, DG_INT64, {n});
  ctx.set_output(2, DG_INT64, shape);
  ctx.set_output(3, DG_INT64, {n});
  ctx.set_output(4, DG_INT64, {});
}

}  // namespace

DG_OP(CumSum)
    .PyName("cumsum")
    .Doc("Cumulative sum along an axis (ONNX CumSum): y[i] = sum of x[j] "
         "for j <= i; exclusive leaves x[i] out (j < i, so y starts at 0); "
         "reverse sums from the end (j >= i, or j > i when exclusive). "
         "Integers wrap as in two's complement; float sums run in order.")
    .Input("x", kSortTypes, 0, "Input tensor.")
    .Output("y", kSortTypes, 0, "Cumulative sums, x's shape and dtype.")
    .RequiredAttr("axis", DG_ATTR_INT, kAxis)
    .Attr("exclusive", false, "Leave each element out of its own sum.")
    .Attr("reverse", false, "Sum from the end of the axis.")
    .Shape(SameShapeAlongAxis);

DG_OP(Sort)
    .PyName("sort")
    .Doc("Sorts x along an axis. Returns the sorted values and, as int64, "
         "their positions in x (values = take_along_axis(x, indices)). "
         "Always stable: equal values keep their order. NaN sorts as the "
         "largest value (last ascending, first descending).")
    .Input("x", kSortTypes, 0, "Input tensor.")
    .Output("values", kSortTypes, 0, "Sorted values, x's shape and dtype.")
    .Output("indices", dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
            "Positions of the values in x along the axis, int64.")
    .Attr("axis", int64_t{-1}, kAxis)
    .Attr("descending", false, "Sort from largest to smallest.")
    .Attr("stable", true,
          "Keep equal values in index order. The sort is always stable; "
          "False is accepted (NumPy/torch spelling) and gives the same "
          "result.")
    .Shape(SortShape);

DG_OP(ArgSort)
    .PyName("argsort")
    .Doc("Indices that sort x along an axis, int64 (the indices output of "
         "Sort). Always stable; NaN sorts as the largest value.")
    .Input("x", kSortTypes, 0, "Input tensor.")
    .Output("indices", dg::Bit(DG_INT64), 0, "Sorting indices, int64.")
    .Attr("axis", int64_t{-1}, kAxis)
    .Attr("descending", false, "Sort from largest to smallest.")
    .Attr("stable", true, "Accepted for compatibility; always stable.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(ArgSortShape);

DG_OP(TopK)
    .PyName("topk")
    .Doc("The k largest (or smallest) elements along an axis, with their "
         "int64 positions (ONNX TopK). Equal values are taken in index "
         "order (the lower index first), so the result is deterministic. "
         "With sorted=False the same elements are returned, still in sorted "
         "order. NaN counts as the largest value.")
    .Input("x", kSortTypes, 0, "Input tensor.")
    .Output("values", kSortTypes, 0,
            "The selected values: x's shape with the axis of size k.")
    .Output("indices", dg::Bit(DG_INT64), DG_ARG_NO_GRAD,
            "Their positions in x along the axis, int64.")
    .RequiredAttr("k", DG_ATTR_INT, "How many elements to take, in [0, dim].")
    .Attr("axis", int64_t{-1}, kAxis)
    .Attr("largest", true, "Take the largest (True) or smallest elements.")
    .Attr("sorted", true,
          "Return them sorted (largest first when largest, else smallest "
          "first); False is accepted and gives the same order.")
    .Shape(TopKShape);

DG_OP(NonZero)
    .PyName("nonzero_padded")
    .Doc("Indices of the non-zero elements of x in row-major order, in "
         "padded form: indices [rank, numel] int64 holds the coordinates of "
         "the count non-zero elements in its first count columns and -1 "
         "after them. dragon_core.ops.nonzero returns indices[:, :count] "
         "(ONNX NonZero). NaN is non-zero.")
    .Input("x", dg::kAll, DG_ARG_NO_GRAD, "Input tensor.")
    .Output("indices", dg::Bit(DG_INT64), 0,
            "Coordinates, [rank, numel] int64, -1 padded.")
    .Output("count", dg::Bit(DG_INT64), 0, "Number of non-zero elements, [] "
            "int64.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(NonZeroShape);

DG_OP(Unique)
    .PyName("unique_padded")
    .Doc("Distinct values of the flattened x, or distinct slices of x "
         "along axis, in padded form (ONNX Unique; numpy.unique). The first "
         "count entries of values (along axis when given), indices and "
         "counts are meaningful; the rest are 0. values holds the distinct "
         "values (slices) sorted ascending (sorted=True; slices compare "
         "lexicographically in row-major order; NaN sorts last and NaNs "
         "are equal to each other) or in order of first occurrence "
         "(sorted=False); indices the position (in the flattened x, or "
         "along axis) of each one's first occurrence; inverse the position "
         "in values of every element (x's shape) or slice ([dim]); counts "
         "how often each occurs. dragon_core.ops.unique slices them.")
    .Input("x", kSortTypes, DG_ARG_NO_GRAD, "Input tensor.")
    .Output("values", kSortTypes, 0,
            "Distinct values, [numel]; with axis, x's shape (distinct "
            "slices first along axis); 0 padded.")
    .Output("indices", dg::Bit(DG_INT64), 0,
            "First occurrence of each, [numel] ([dim] with axis) int64, 0 "
            "padded.")
    .Output("inverse", dg::Bit(DG_INT64), 0,
            "Position in values of each element (x's shape), or of each "
            "slice ([dim] with axis), int64.")
    .Output("counts", dg::Bit(DG_INT64), 0,
            "Occurrences of each, [numel] ([dim] with axis) int64, 0 "
            "padded.")
    .Output("count", dg::Bit(DG_INT64), 0, "Number of distinct values, [] "
            "int64.")
    .Attr("sorted", true,
          "Sort the values ascending; False keeps first-occurrence order.")
    .OptionalAttr("axis", DG_ATTR_INT,
                  "Axis whose slices are compared (negative counts from the "
                  "end); None flattens x.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(UniqueShape);

}  // namespace ops
}  // namespace dragon
