// Reductions over a set of axes (Sum, Prod, Mean, Max, Min, Var, Std,
// LogSumExp) and index reductions over one axis (ArgMax, ArgMin).
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kX = "Input tensor.";
constexpr const char* kAxes =
    "Axes to reduce; None reduces all axes, [] reduces none.";
constexpr const char* kKeepDims = "Keep reduced axes with size 1.";

// Output shape of a reduction of `in` over `axes` (already normalised).
Shape Reduced(const Shape& in, const std::vector<bool>& reduce, bool keepdims) {
  Shape out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!reduce[i]) {
      out.push_back(in[i]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

// Shared by the multi-axis reductions. `no_identity`: the reduction has no
// value on an empty set (Max, Min), so a zero-size reduction is an error.
void ReduceShapeImpl(dg::InferContext& ctx, bool no_identity) {
  dg::TensorRef x = ctx.input(0);
  Shape in = x.shape();
  std::vector<bool> reduce(in.size(), !ctx.has("axes"));
  if (ctx.has("axes")) {
    for (int64_t a : NormalizeAxes(ctx.ints("axes"), Rank(in))) {
      reduce[a] = true;
    }
  }
  // Max/Min (no_identity): an empty reduction gives -inf / +inf for float
  // dtypes (ONNX's ReduceMax/ReduceMin; NumPy raises) and false / true for
  // bool; integer dtypes have no such value, so it is an error there.
  const bool is_int = (dg::kAnyInt & dg::Bit(x.dtype())) != 0;
  if (no_identity && is_int) {
    for (size_t i = 0; i < in.size(); ++i) {
      DG_CHECK(!reduce[i] || in[i] != 0, DG_INVALID_ARGUMENT,
               "zero-size reduction: axis ", i, " of shape ", ShapeStr(in),
               " is empty and the reduction has no identity for ",
               dg::DTypeName(x.dtype()),
               " (float dtypes give -inf / +inf, as ONNX; cast to a float dtype, "
               "or reduce a non-empty axis)");
    }
  }
  DgDType dtype = x.dtype() == DG_BOOL && !no_identity ? DG_INT64 : x.dtype();
  ctx.set_output(0, dtype, Reduced(in, reduce, ctx.b("keepdims")));
}

void ReduceShape(dg::InferContext& ctx) { ReduceShapeImpl(ctx, false); }
void ReduceNoIdentityShape(dg::InferContext& ctx) {
  ReduceShapeImpl(ctx, true);
}

void ArgReduceShape(dg::InferContext& ctx) {
  Shape in = ctx.input(0).shape();
  bool keepdims = ctx.b("keepdims");
  Shape out;
  if (!ctx.has("axis")) {
    DG_CHECK(CheckedNumel(in, "input shape") != 0, DG_INVALID_ARGUMENT,
             "cannot take the index of an extremum of an empty tensor (shape ",
             ShapeStr(in), ")");
    if (keepdims) out.assign(in.size(), 1);
  } else {
    int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(in));
    DG_CHECK(in[axis] != 0, DG_INVALID_ARGUMENT, "zero-size reduction: axis ",
             axis, " of shape ", ShapeStr(in), " is empty");
    std::vector<bool> reduce(in.size(), false);
    reduce[axis] = true;
    out = Reduced(in, reduce, keepdims);
  }
  ctx.set_output(0, DG_INT64, out);
}

}  // namespace

// The shared schema of an axes/keepdims reduction.
static dg::OpSchema& Reduction(const char* name, const char* doc, DgDTypeMask in,
                               DgDTypeMask out, const char* out_doc,
                               dg::InferFunc shape = ReduceShape) {
  return dg::internal::NewOp(name)
      .Doc(doc)
      .Input("x", in, 0, kX)
      .Output("y", out, 0, out_doc)
      .OptionalAttr("axes", DG_ATTR_INTS, kAxes)
      .Attr("keepdims", false, kKeepDims)
      .Shape(shape);
}

static const char kDdof[] = "Delta degrees of freedom (NumPy's meaning).";

[[maybe_unused]] static const dg::OpSchema* const kReductions[] = {
    &Reduction("Sum",
               "Sum of elements over the given axes; 0 for an empty reduction. Bool "
               "input sums to int64.",
               dg::kAny, dg::kAnyNumeric, "Sums; x's dtype, or int64 for bool x."),
    &Reduction("Prod", "Product of elements over the given axes; 1 for an empty reduction.",
               dg::kAnyNumeric, dg::kAnyNumeric, "Products, x's dtype."),
    &Reduction("Mean", "Arithmetic mean over the given axes; NaN for an empty reduction.",
               dg::kFloat, dg::kFloat, "Means, x's dtype."),
    &Reduction("Max",
               "Largest element over the given axes (NaN propagates; any() on bool). An "
               "empty reduction gives -inf for float dtypes (as ONNX), false for bool, and "
               "is an error for integer dtypes.",
               dg::kAny, dg::kAny, "Maxima, x's dtype.", ReduceNoIdentityShape),
    &Reduction("Min",
               "Smallest element over the given axes (NaN propagates; all() on bool). An "
               "empty reduction gives +inf for float dtypes (as ONNX), true for bool, and "
               "is an error for integer dtypes.",
               dg::kAny, dg::kAny, "Minima, x's dtype.", ReduceNoIdentityShape),
    &Reduction("Var",
               "Variance over the given axes: sum((x - mean)^2) / (N - ddof); NaN for an "
               "empty reduction.",
               dg::kFloat, dg::kFloat, "Variances, x's dtype.")
         .Attr("ddof", int64_t{0}, kDdof),
    &Reduction("Std",
               "Standard deviation over the given axes: the square root of Var; NaN for an "
               "empty reduction.",
               dg::kFloat, dg::kFloat, "Standard deviations, x's dtype.")
         .Attr("ddof", int64_t{0}, kDdof),
    &Reduction("LogSumExp",
               "log(sum(exp(x))) over the given axes, computed stably by shifting by the "
               "maximum; -inf for an empty reduction.",
               dg::kFloat, dg::kFloat, "Results, x's dtype.")
         .PyName("logsumexp"),
};

DG_OP(ArgMax)
    .PyName("argmax")
    .Doc("Index of the largest element along an axis (first one on ties), "
         "as int64; an empty reduction is an error.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::Bit(DG_INT64), 0, "Indices, int64.")
    .OptionalAttr("axis", DG_ATTR_INT,
                  "Axis to reduce; None means the flattened tensor (0-d "
                  "result).")
    .Attr("keepdims", false, kKeepDims)
    .Flags(DG_OP_NO_GRAD)
    .Shape(ArgReduceShape);

DG_OP(ArgMin)
    .PyName("argmin")
    .Doc("Index of the smallest element along an axis (first one on ties), "
         "as int64; an empty reduction is an error.")
    .Input("x", dg::kAnyNumeric, 0, kX)
    .Output("y", dg::Bit(DG_INT64), 0, "Indices, int64.")
    .OptionalAttr("axis", DG_ATTR_INT,
                  "Axis to reduce; None means the flattened tensor (0-d "
                  "result).")
    .Attr("keepdims", false, kKeepDims)
    .Flags(DG_OP_NO_GRAD)
    .Shape(ArgReduceShape);

}  // namespace ops
}  // namespace dragon
