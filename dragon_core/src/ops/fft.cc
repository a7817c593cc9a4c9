// The discrete Fourier transform family, as numpy.fft: Fft, Ifft (complex to
// complex), Rfft (real to one-sided complex) and Irfft (one-sided complex to
// real), along one axis.
//
// Complex data is a trailing axis of size 2 (real, imaginary), ONNX's
// convention: a complex array of shape S is a float tensor of shape S + [2].
// `axis` counts the axes of the complex array, so for a complex input of
// rank r + 1 it lies in [-r, r); for Rfft's real input it is an ordinary
// axis. `n` is the transform length (numpy's n): the input is cut or padded
// with zeros to n along the axis (Irfft: to n // 2 + 1 frequencies); unset,
// it is the input's length (Irfft: 2 * (m - 1)). `norm` scales as numpy:
// "backward" (forward unscaled, inverse by 1/n), "ortho" (both by
// 1/sqrt(n)), "forward" (forward by 1/n, inverse unscaled).
//
// The gradients (_grads/fft.py) are transforms of the same family: the
// adjoint of a DFT scaled by s is the opposite-direction DFT scaled by s,
// which is the same transform with "backward" and "forward" swapped.
#include <cstdint>
#include <string>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kN =
    "Transform length; the input is cut or padded with zeros to it along "
    "the axis. None: the input's length.";
constexpr const char* kAxis =
    "Axis of the transform, counted over the axes of the complex array (the "
    "trailing real/imaginary axis is not one); negative counts from the end.";
constexpr const char* kNorm =
    "Scaling: \"backward\" (forward unscaled, inverse by 1/n), \"ortho\" "
    "(1/sqrt(n) both ways) or \"forward\" (forward by 1/n, inverse "
    "unscaled), as numpy.fft.";

void CheckNorm(const dg::InferContext& ctx) {
  const std::string norm = ctx.s("norm");
  DG_CHECK(norm == "backward" || norm == "ortho" || norm == "forward",
           DG_INVALID_ARGUMENT, "norm must be \"backward\", \"ortho\" or "
           "\"forward\", got \"", norm, "\"");
}

// The normalised signal axis of a complex input (shape S + [2]).
int64_t ComplexAxis(const dg::InferContext& ctx, const Shape& shape) {
  DG_CHECK(!shape.empty() && shape.back() == 2, DG_INVALID_ARGUMENT,
           "the input must be complex, a float tensor whose last axis has "
           "size 2 (real, imaginary); got shape ", ShapeStr(shape));
  DG_CHECK(shape.size() >= 2, DG_INVALID_ARGUMENT,
           "a complex input needs at least one axis besides the trailing "
           "(real, imaginary) one; got shape ", ShapeStr(shape));
  return NormalizeAxis(ctx.i("axis"), Rank(shape) - 1);
}

// The transform length: n, or `fallback` when n is unset.
int64_t Length(const dg::InferContext& ctx, int64_t fallback,
               const Shape& shape, int64_t axis) {
  const int64_t n = ctx.has("n") ? ctx.i("n") : fallback;
  DG_CHECK(n >= 1, DG_INVALID_ARGUMENT, "invalid number of data points ", n,
           ctx.has("n") ? " (n)" : " (from the input's length along axis ",
           ctx.has("n") ? "" : std::to_string(axis),
           ctx.has("n") ? "" : ")", "; it must be at least 1 (input shape ",
           ShapeStr(shape), ")");
  return n;
}

void ComplexShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  Shape shape = x.shape();
  const int64_t axis = ComplexAxis(ctx, shape);
  CheckNorm(ctx);
  shape[axis] = Length(ctx, shape[axis], shape, axis);
  ctx.set_output(0, x.dtype(), shape);
}

void RfftShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  Shape shape = x.shape();
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(shape));
  CheckNorm(ctx);
  shape[axis] = Length(ctx, shape[axis], shape, axis) / 2 + 1;
  shape.push_back(2);
  ctx.set_output(0, x.dtype(), shape);
}

void IrfftShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0);
  Shape shape = x.shape();
  const int64_t axis = ComplexAxis(ctx, shape);
  CheckNorm(ctx);
  shape[axis] = Length(ctx, 2 * (shape[axis] - 1), shape, axis);
  shape.pop_back();
  ctx.set_output(0, x.dtype(), shape);
}

template <typename S>
S& CommonAttrs(S& s) {
  return s.OptionalAttr("n", DG_ATTR_INT, kN)
      .Attr("axis", int64_t{-1}, kAxis)
      .Attr("norm", "backward", kNorm);
}

}  // namespace

DG_OP(Fft)
    .PyName("fft")
    .Doc("One-dimensional discrete Fourier transform of a complex array "
         "(numpy.fft.fft): y[k] = sum_j x[j] exp(-2 pi i j k / n). Complex "
         "values are a trailing axis of size 2 (real, imaginary).")
    .Input("x", dg::kFloat, 0, "Complex input, shape S + [2].")
    .Output("y", dg::kFloat, 0,
            "Complex output, x's shape with n along the axis; x's dtype.")
    .Apply([](dg::OpSchema& s) { CommonAttrs(s); })
    .Shape(ComplexShape);

DG_OP(Ifft)
    .PyName("ifft")
    .Doc("One-dimensional inverse discrete Fourier transform of a complex "
         "array (numpy.fft.ifft): y[j] = (1/n) sum_k x[k] exp(2 pi i j k / "
         "n) with norm \"backward\". Complex values are a trailing axis of "
         "size 2.")
    .Input("x", dg::kFloat, 0, "Complex input, shape S + [2].")
    .Output("y", dg::kFloat, 0,
            "Complex output, x's shape with n along the axis; x's dtype.")
    .Apply([](dg::OpSchema& s) { CommonAttrs(s); })
    .Shape(ComplexShape);

DG_OP(Rfft)
    .PyName("rfft")
    .Doc("Discrete Fourier transform of a real array, the n // 2 + 1 "
         "non-negative frequencies (numpy.fft.rfft). The output is complex: "
         "a trailing axis of size 2 (real, imaginary).")
    .Input("x", dg::kFloat, 0, "Real input.")
    .Output("y", dg::kFloat, 0,
            "Complex output: x's shape with n // 2 + 1 along the axis, plus "
            "a trailing axis of size 2; x's dtype.")
    .Apply([](dg::OpSchema& s) { CommonAttrs(s); })
    .Shape(RfftShape);

DG_OP(Irfft)
    .PyName("irfft")
    .Doc("Inverse of Rfft (numpy.fft.irfft): the real signal of length n "
         "whose spectrum has the given n // 2 + 1 non-negative frequencies "
         "(Hermitian symmetry gives the rest; the imaginary parts of the "
         "zero and, for even n, the n / 2 frequency are ignored). n "
         "defaults to 2 * (m - 1) for m input frequencies.")
    .Input("x", dg::kFloat, 0, "Complex input, shape S + [2].")
    .Output("y", dg::kFloat, 0,
            "Real output: S with n along the axis; x's dtype.")
    .Apply([](dg::OpSchema& s) { CommonAttrs(s); })
    .Shape(IrfftShape);

}  // namespace ops
}  // namespace dragon
