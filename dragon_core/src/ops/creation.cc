// Creation ops, which have no inputs and dispatch on their output dtype:
// Fill, Arange, RandomUniform, RandomNormal.
#include <cmath>
#include <cstdint>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// 16-bit floats: the device's float32 numbers rounded once (the kernels say
// which dtypes they have; cpu_eigen has float32/float64).
constexpr DgDTypeMask kRandomDTypes = dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64) |
                                      dg::Bit(DG_FLOAT16) | dg::Bit(DG_BFLOAT16);

void CheckFinite(const dg::InferContext& ctx, const char* name) {
  const double v = ctx.f(name);
  DG_CHECK(std::isfinite(v), DG_INVALID_ARGUMENT, name, " must be finite, got ",
           v);
}

// The range of an integer dtype (bool: 0 and 1).
void IntRange(DgDType t, int64_t* lo, int64_t* hi) {
  switch (t) {
    case DG_BOOL: *lo = 0; *hi = 1; return;
    case DG_UINT8: *lo = 0; *hi = UINT8_MAX; return;
    case DG_INT8: *lo = INT8_MIN; *hi = INT8_MAX; return;
    case DG_INT16: *lo = INT16_MIN; *hi = INT16_MAX; return;
    case DG_INT32: *lo = INT32_MIN; *hi = INT32_MAX; return;
    case DG_UINT16: *lo = 0; *hi = UINT16_MAX; return;
    case DG_UINT32: *lo = 0; *hi = UINT32_MAX; return;
    // uint64: int_value holds the bit pattern (FillShape), `value` a double
    // in [0, 2**64).
    case DG_UINT64: *lo = 0; *hi = INT64_MAX; return;
    default: *lo = INT64_MIN; *hi = INT64_MAX; return;
  }
}

// The largest finite value of a float dtype.
double FloatMax(DgDType t) {
  switch (t) {
    case DG_FLOAT16: return 65504.0;
    case DG_BFLOAT16: return 3.3895313892515355e38;
    case DG_FLOAT32: return 3.4028234663852886e38;
    default: return HUGE_VAL;
  }
}

// The smallest magnitude that a cast to t rounds to infinity: FloatMax plus
// half an ulp (a tie there rounds to even, which is infinity). Values below
// it, past FloatMax, round to FloatMax (NumPy: float32(3.4028235e38) is
// finite), so they are values of t.
double FloatOverflow(DgDType t) {
  switch (t) {
    case DG_FLOAT16: return 65520.0;
    case DG_BFLOAT16: return std::ldexp(1.0, 128) - std::ldexp(1.0, 119);
    case DG_FLOAT32: return std::ldexp(1.0, 128) - std::ldexp(1.0, 103);
    default: return HUGE_VAL;
  }
}

// The fill value must be one of the dtype's values: an integer dtype takes
// an integral value in its range (int_value, exact, for values past 2**53),
// a float dtype a value that does not overflow it (inf and nan are values).
void FillShape(dg::InferContext& ctx) {
  const DgDType dtype = CheckDTypeAttr(ctx, "dtype", dg::kAny);
  const bool integral = !(dg::kFloat & dg::Bit(dtype));
  if (ctx.has("int_value")) {
    DG_CHECK(integral, DG_INVALID_ARGUMENT, "int_value is for integer and bool dtypes, not ",
             dg::DTypeName(dtype), "; give value instead");
    int64_t lo = 0, hi = 0;
    IntRange(dtype, &lo, &hi);
    const int64_t v = ctx.i("int_value");
    // For uint64 every int64 is a value: int_value is its two's complement
    // bit pattern (values past INT64_MAX arrive negative; ops.fill does it).
    DG_CHECK(dtype == DG_UINT64 || (v >= lo && v <= hi), DG_INVALID_ARGUMENT, "int_value ",
             v, " is out of the range of ", dg::DTypeName(dtype), " [", lo, ", ", hi, "]");
  } else if (integral) {
    const double v = ctx.f("value");
    int64_t lo = 0, hi = 0;
    IntRange(dtype, &lo, &hi);
    // hi + 1 is a power of two, exact as a double; so is lo.
    const double top = dtype == DG_UINT64 ? 18446744073709551616.0
                                          : static_cast<double>(hi / 2 + 1) * 2.0;
    DG_CHECK(std::isfinite(v) && v == std::trunc(v) && v >= static_cast<double>(lo) && v < top,
             DG_INVALID_ARGUMENT, "value ", v, " is not a value of ", dg::DTypeName(dtype),
             " (an integer in [", lo, ", ",
             dtype == DG_UINT64 ? std::string("18446744073709551615") : std::to_string(hi),
             "]); round or cast it first");
  } else {
    const double v = ctx.f("value");
    DG_CHECK(!std::isfinite(v) || std::fabs(v) < FloatOverflow(dtype), DG_INVALID_ARGUMENT,
             "value ", v, " overflows ", dg::DTypeName(dtype), " (largest finite value ",
             FloatMax(dtype), ")");
  }
  ctx.set_output(0, dtype, CheckShapeAttr(ctx, "shape"));
}

void ArangeShape(dg::InferContext& ctx) {
  const DgDType dtype = CheckDTypeAttr(ctx, "dtype", dg::kAnyNumeric);
  CheckFinite(ctx, "start");
  CheckFinite(ctx, "stop");
  CheckFinite(ctx, "step");
  const double start = ctx.f("start"), stop = ctx.f("stop"),
               step = ctx.f("step");
  DG_CHECK(step != 0.0, DG_INVALID_ARGUMENT, "step must be non-zero");
  // NumPy's length: max(0, ceil((stop - start) / step)).
  const double len = std::ceil((stop - start) / step);
  DG_CHECK(len < 9.2e18, DG_INVALID_ARGUMENT, "arange(", start, ", ", stop,
           ", ", step, ") would have ", len,
           " elements, more than int64 holds");
  ctx.set_output(0, dtype, {len > 0 ? static_cast<int64_t>(len) : 0});
}

void RandomUniformShape(dg::InferContext& ctx) {
  const DgDType dtype = CheckDTypeAttr(ctx, "dtype", kRandomDTypes);
  CheckFinite(ctx, "low");
  CheckFinite(ctx, "high");
  DG_CHECK(ctx.f("low") <= ctx.f("high"), DG_INVALID_ARGUMENT, "low ",
           ctx.f("low"), " is greater than high ", ctx.f("high"));
  ctx.set_output(0, dtype, CheckShapeAttr(ctx, "shape"));
}

void RandomNormalShape(dg::InferContext& ctx) {
  const DgDType dtype = CheckDTypeAttr(ctx, "dtype", kRandomDTypes);
  CheckFinite(ctx, "mean");
  CheckFinite(ctx, "std");
  DG_CHECK(ctx.f("std") >= 0.0, DG_INVALID_ARGUMENT,
           "std must be >= 0, got ", ctx.f("std"));
  ctx.set_output(0, dtype, CheckShapeAttr(ctx, "shape"));
}

}  // namespace

DG_OP(Fill)
    .Doc("A tensor of the given shape with every element equal to value "
         "(cast to dtype).")
    .Output("y", dg::kAny, 0, "The filled tensor.")
    .RequiredAttr("shape", DG_ATTR_INTS, "Output shape.")
    .Attr("value", 0.0,
          "Fill value: a value of dtype (an integer in range for integer dtypes, 0 or 1 "
          "for bool, no overflow for float dtypes).")
    .DTypeAttr("dtype", DG_FLOAT32, "Output dtype.")
    .OptionalAttr("int_value", DG_ATTR_INT,
                  "The exact fill value of an integer or bool dtype; when set, value is "
                  "ignored (a float64 holds integers exactly only up to 2**53).")
    .Flags(DG_OP_NO_GRAD)
    .Shape(FillShape);

DG_OP(Arange)
    .Doc("Evenly spaced values start, start + step, ... up to but excluding "
         "stop, as NumPy arange: length max(0, ceil((stop - start) / step)).")
    .Output("y", dg::kAnyNumeric, 0, "1-D tensor of the values.")
    .RequiredAttr("start", DG_ATTR_FLOAT, "First value.")
    .RequiredAttr("stop", DG_ATTR_FLOAT, "End of the interval (excluded).")
    .Attr("step", 1.0, "Spacing between values; non-zero, may be negative.")
    .DTypeAttr("dtype", DG_INT64, "Output dtype.")
    .Flags(DG_OP_NO_GRAD)
    .Shape(ArangeShape);

DG_OP(RandomUniform)
    .Doc("Samples from the uniform distribution on [low, high). Element i "
         "depends only on (seed, i), not on the thread count.")
    .Output("y", kRandomDTypes, 0, "The samples.")
    .RequiredAttr("shape", DG_ATTR_INTS, "Output shape.")
    .Attr("low", 0.0, "Lower bound (included).")
    .Attr("high", 1.0, "Upper bound (excluded), >= low.")
    .DTypeAttr("dtype", DG_FLOAT32, "Output dtype: a float dtype (16-bit ones where the device's kernel has them).")
    .Attr("seed", int64_t{-1},
          "Generator seed; -1 lets the Python wrapper draw one from the "
          "global generator.")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(RandomUniformShape);

DG_OP(RandomNormal)
    .Doc("Samples from the normal distribution N(mean, std^2). Element i "
         "depends only on (seed, i), not on the thread count.")
    .Output("y", kRandomDTypes, 0, "The samples.")
    .RequiredAttr("shape", DG_ATTR_INTS, "Output shape.")
    .Attr("mean", 0.0, "Mean of the distribution.")
    .Attr("std", 1.0, "Standard deviation, >= 0.")
    .DTypeAttr("dtype", DG_FLOAT32, "Output dtype: a float dtype (16-bit ones where the device's kernel has them).")
    .Attr("seed", int64_t{-1},
          "Generator seed; -1 lets the Python wrapper draw one from the "
          "global generator.")
    .Flags(DG_OP_STATEFUL | DG_OP_NO_GRAD)
    .Shape(RandomNormalShape);

}  // namespace ops
}  // namespace dragon
