// Recurrent layers as single ops, ONNX semantics (LSTM, GRU).
//
// Shapes (layout 0 / layout 1; D = 2 for bidirectional, else 1):
//   X [T, N, I] / [N, T, I]; W [D, G*H, I]; R [D, G*H, H]; B [D, 2*G*H]
//   (W's bias then R's); initial_h, initial_c [D, N, H] / [N, D, H];
//   Y [T, D, N, H] / [N, T, D, H]; Y_h, Y_c as initial_h.
// G = 4 for LSTM (gate blocks i, o, f, c), 3 for GRU (z, r, h).
// Inputs follow ONNX's order: X, W, R, B, sequence_lens, initial_h,
// initial_c, P (optional ones trailing: give the earlier ones to give a later
// one). sequence_lens [N] (int32/int64, each in [0, T], checked by the
// kernel): steps at or past a sequence's length leave its state unchanged
// and write zeros to Y (a reverse pass starts at length - 1).
// Activations are ONNX's defaults (sigmoid, tanh, tanh); `clip` bounds the
// gate pre-activations to [-clip, clip].
#include <cmath>
#include <cstdint>
#include <string>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

// Checks the shared inputs; returns D. `gates` is 4 (LSTM) or 3 (GRU).
int64_t RnnCheck(dg::InferContext& ctx, int64_t gates, int64_t* T, int64_t* N,
                 int64_t* H) {
  const dg::TensorRef x = ctx.input(0), w = ctx.input(1), r = ctx.input(2);
  const std::string dir = ctx.s("direction");
  DG_CHECK(dir == "forward" || dir == "reverse" || dir == "bidirectional",
           DG_INVALID_ARGUMENT, "direction must be \"forward\", \"reverse\" or "
           "\"bidirectional\", got \"", dir, "\"");
  const int64_t d = dir == "bidirectional" ? 2 : 1;
  const int64_t layout = ctx.i("layout");
  DG_CHECK(layout == 0 || layout == 1, DG_INVALID_ARGUMENT,
           "layout must be 0 ([T, N, I]) or 1 ([N, T, I]), got ", layout);
  const Shape xs = x.shape(), ws = w.shape(), rs = r.shape();
  DG_CHECK(xs.size() == 3, DG_INVALID_ARGUMENT, "X must be 3-D (",
           layout ? "[N, T, I]" : "[T, N, I]", "), got shape ", ShapeStr(xs));
  DG_CHECK(w.dtype() == x.dtype() && r.dtype() == x.dtype(),
           DG_INVALID_ARGUMENT, "X, W and R must have one dtype, got ",
           dg::DTypeName(x.dtype()), ", ", dg::DTypeName(w.dtype()), ", ",
           dg::DTypeName(r.dtype()));
  *T = layout ? xs[1] : xs[0];
  *N = layout ? xs[0] : xs[1];
  const int64_t I = xs[2];
  DG_CHECK(rs.size() == 3 && rs[0] == d && rs[1] % gates == 0 &&
               rs[2] * gates == rs[1],
           DG_INVALID_ARGUMENT, "R must be [", d, ", ", gates, "*H, H] for direction \"",
           dir, "\", got shape ", ShapeStr(rs));
  *H = rs[2];
  if (ctx.has("hidden_size")) {
    DG_CHECK(ctx.i("hidden_size") == *H, DG_INVALID_ARGUMENT, "hidden_size ",
             ctx.i("hidden_size"), " disagrees with R's shape ", ShapeStr(rs),
             " (H = ", *H, ")");
  }
  DG_CHECK(ws.size() == 3 && ws[0] == d && ws[1] == gates * *H && ws[2] == I,
           DG_INVALID_ARGUMENT, "W must be [", d, ", ", gates * *H, ", ", I,
           "] (D, ", gates, "*H, input size), got shape ", ShapeStr(ws));
  if (ctx.num_inputs() > 3) {
    const dg::TensorRef b = ctx.input(3);
    const Shape want = {d, 2 * gates * *H};
    DG_CHECK(b.dtype() == x.dtype() && b.shape() == want,
             DG_INVALID_ARGUMENT, "B must be ", dg::DTypeName(x.dtype()), "[",
             d, ", ", 2 * gates * *H, "], got ", dg::DTypeName(b.dtype()),
             ShapeStr(b.shape()));
  }
  if (ctx.num_inputs() > 4) {
    const dg::TensorRef lens = ctx.input(4);
    const Shape want = {*N};
    DG_CHECK(lens.shape() == want, DG_INVALID_ARGUMENT,
             "sequence_lens must be [N] = [", *N, "], got ",
             ShapeStr(lens.shape()));
  }
  const Shape state = layout ? Shape{*N, d, *H} : Shape{d, *N, *H};
  for (int32_t i = 5; i < ctx.num_inputs() && i < 7; ++i) {
    const dg::TensorRef s = ctx.input(i);
    DG_CHECK(s.dtype() == x.dtype() && s.shape() == state, DG_INVALID_ARGUMENT,
             i == 5 ? "initial_h" : "initial_c", " must be ",
             dg::DTypeName(x.dtype()), ShapeStr(state), ", got ",
             dg::DTypeName(s.dtype()), ShapeStr(s.shape()));
  }
  if (ctx.has("clip")) {
    DG_CHECK(ctx.f("clip") > 0, DG_INVALID_ARGUMENT,
             "clip must be positive, got ", ctx.f("clip"));
  }
  return d;
}

void SetRnnOutputs(dg::InferContext& ctx, int64_t d, int64_t T, int64_t N,
                   int64_t H, int num_states) {
  const DgDType dt = ctx.input(0).dtype();
  const bool l1 = ctx.i("layout") == 1;
  ctx.set_output(0, dt, l1 ? Shape{N, T, d, H} : Shape{T, d, N, H});
  for (int i = 1; i <= num_states; ++i) {
    ctx.set_output(i, dt, l1 ? Shape{N, d, H} : Shape{d, N, H});
  }
}

void LstmShape(dg::InferContext& ctx) {
  int64_t T, N, H;
  const int64_t d = RnnCheck(ctx, 4, &T, &N, &H);
  if (ctx.num_inputs() > 7) {
    const dg::TensorRef p = ctx.input(7);
    const Shape want = {d, 3 * H};
    DG_CHECK(p.dtype() == ctx.input(0).dtype() && p.shape() == want,
             DG_INVALID_ARGUMENT, "P (peepholes i, o, f) must be [", d, ", ",
             3 * H, "], got ", dg::DTypeName(p.dtype()), ShapeStr(p.shape()));
  }
  SetRnnOutputs(ctx, d, T, N, H, 2);
}

void GruShape(dg::InferContext& ctx) {
  int64_t T, N, H;
  const int64_t d = RnnCheck(ctx, 3, &T, &N, &H);
  SetRnnOutputs(ctx, d, T, N, H, 1);
}

constexpr const char* kX = "Input sequence [T, N, I] (layout 0) or [N, T, I].";
constexpr const char* kB =
    "Biases [D, 2*G*H]: W's then R's (optional: zeros; needed when a later "
    "input is given).";
constexpr const char* kH0 = "Initial hidden state (optional: zeros).";
constexpr const char* kLens =
    "Length of each sequence, [N] int32/int64 in [0, T] (optional: T).";
constexpr DgDTypeMask kLenTypes = dg::Bit(DG_INT32) | dg::Bit(DG_INT64);

}  // namespace

DG_OP(Lstm)
    .PyName("lstm")
    .Doc("Long short-term memory layer, ONNX LSTM: gate blocks i, o, f, c; "
         "i, o, f = sigmoid(.), c~ = tanh(.), C = f*C + i*c~ (input_forget: "
         "f = 1 - i), H = o*tanh(C); peepholes P add P*C to i, f (old C) "
         "and o (new C). Default activations.")
    .Input("X", dg::kFloat, 0, kX)
    .Input("W", dg::kFloat, 0, "Input weights [D, 4*H, I].")
    .Input("R", dg::kFloat, 0, "Recurrent weights [D, 4*H, H].")
    .Input("B", dg::kFloat, DG_ARG_OPTIONAL, kB)
    .Input("sequence_lens", kLenTypes, DG_ARG_OPTIONAL | DG_ARG_NO_GRAD, kLens)
    .Input("initial_h", dg::kFloat, DG_ARG_OPTIONAL, kH0)
    .Input("initial_c", dg::kFloat, DG_ARG_OPTIONAL, "Initial cell state "
           "(optional: zeros).")
    .Input("P", dg::kFloat, DG_ARG_OPTIONAL, "Peepholes [D, 3*H] (i, o, f).")
    .Output("Y", dg::kFloat, 0,
            "Every hidden state: [T, D, N, H] (layout 0) or [N, T, D, H].")
    .Output("Y_h", dg::kFloat, 0, "Last hidden state, initial_h's layout.")
    .Output("Y_c", dg::kFloat, 0, "Last cell state, initial_h's layout.")
    .OptionalAttr("hidden_size", DG_ATTR_INT, "H; checked against R.")
    .Attr("direction", "forward",
          "\"forward\", \"reverse\" or \"bidirectional\" (D = 2).")
    .Attr("layout", int64_t{0}, "0: time-major, 1: batch-major.")
    .OptionalAttr("clip", DG_ATTR_FLOAT,
                  "Bound the gate pre-activations to [-clip, clip].")
    .Attr("input_forget", false, "Couple the forget gate: f = 1 - i.")
    .Shape(LstmShape);

DG_OP(Gru)
    .PyName("gru")
    .Doc("Gated recurrent unit layer, ONNX GRU: gate blocks z, r, h; z, r = "
         "sigmoid(.), h~ = tanh(X Wh + (r*H) Rh + Rbh + Wbh), or with "
         "linear_before_reset tanh(X Wh + r*(H Rh + Rbh) + Wbh); "
         "H = (1 - z)*h~ + z*H. Default activations.")
    .Input("X", dg::kFloat, 0, kX)
    .Input("W", dg::kFloat, 0, "Input weights [D, 3*H, I].")
    .Input("R", dg::kFloat, 0, "Recurrent weights [D, 3*H, H].")
    .Input("B", dg::kFloat, DG_ARG_OPTIONAL, kB)
    .Input("sequence_lens", kLenTypes, DG_ARG_OPTIONAL | DG_ARG_NO_GRAD, kLens)
    .Input("initial_h", dg::kFloat, DG_ARG_OPTIONAL, kH0)
    .Output("Y", dg::kFloat, 0,
            "Every hidden state: [T, D, N, H] (layout 0) or [N, T, D, H].")
    .Output("Y_h", dg::kFloat, 0, "Last hidden state, initial_h's layout.")
    .OptionalAttr("hidden_size", DG_ATTR_INT, "H; checked against R.")
    .Attr("direction", "forward",
          "\"forward\", \"reverse\" or \"bidirectional\" (D = 2).")
    .Attr("layout", int64_t{0}, "0: time-major, 1: batch-major.")
    .OptionalAttr("clip", DG_ATTR_FLOAT,
                  "Bound the gate pre-activations to [-clip, clip].")
    .Attr("linear_before_reset", false,
          "Apply the reset gate after the recurrent product (cuDNN/torch "
          "style).")
    .Shape(GruShape);

}  // namespace ops
}  // namespace dragon
