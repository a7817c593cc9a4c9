// Loss functions. Every loss takes a `reduction` attribute: "none" keeps
// one loss per element (per sample for the classification losses), "sum"
// adds them up and "mean" averages them (PyTorch semantics: the
// classification losses divide by the number of targets that are not
// ignore_index; a mean over nothing is NaN).
#include <cmath>
#include <cstdint>
#include <string>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kIndexTypes = dg::Bit(DG_INT32) | dg::Bit(DG_INT64);

constexpr const char* kReductionDoc =
    "\"mean\" (average), \"sum\" or \"none\" (one loss per element).";

// Checks the reduction attribute; true for "none".
bool CheckReduction(const dg::InferContext& ctx) {
  const std::string r = ctx.s("reduction");
  DG_CHECK(r == "mean" || r == "sum" || r == "none", DG_INVALID_ARGUMENT,
           "reduction must be \"mean\", \"sum\" or \"none\", got \"", r,
           "\"");
  return r == "none";
}

void CheckFiniteAttr(const dg::InferContext& ctx, const char* name) {
  DG_CHECK(std::isfinite(ctx.f(name)), DG_INVALID_ARGUMENT, name,
           " must be finite, got ", ctx.f(name));
}

// Loss over an input and a target of one shape (and dtype): a scalar, or
// input's shape for reduction "none".
void PairLossShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0), t = ctx.input(1);
  DG_CHECK(x.shape() == t.shape(), DG_INVALID_ARGUMENT,
           "input and target must have one shape, got ", ShapeStr(x.shape()),
           " and ", ShapeStr(t.shape()));
  DG_CHECK(x.dtype() == t.dtype(), DG_INVALID_ARGUMENT,
           "input and target must have one dtype, got ",
           dg::DTypeName(x.dtype()), " and ", dg::DTypeName(t.dtype()));
  const bool none = CheckReduction(ctx);
  ctx.set_output(0, x.dtype(), none ? x.shape() : Shape{});
}

// MseLossAndGrad: MseLoss's checks; reduction "mean" or "sum" (the scale of
// an element-wise loss's gradient is not one scalar); scale 0-d, input's
// dtype; dinput has input's shape.
void MseLossAndGradShape(dg::InferContext& ctx) {
  const dg::TensorRef x = ctx.input(0), s = ctx.input(2);
  PairLossShape(ctx);
  DG_CHECK(ctx.s("reduction") != "none", DG_INVALID_ARGUMENT,
           "reduction must be \"mean\" or \"sum\" (one scale for the whole "
           "gradient), got \"none\"");
  DG_CHECK(s.ndim() == 0, DG_INVALID_ARGUMENT,
           "scale must be a 0-d tensor, got shape ", ShapeStr(s.shape()));
  DG_CHECK(s.dtype() == x.dtype(), DG_INVALID_ARGUMENT,
           "scale must have input's dtype ", dg::DTypeName(x.dtype()), ", got ",
           dg::DTypeName(s.dtype()));
  ctx.set_output(1, x.dtype(), x.shape());
}

void SmoothL1Shape(dg::InferContext& ctx) {
  CheckFiniteAttr(ctx, "beta");
  DG_CHECK(ctx.f("beta") >= 0.0, DG_INVALID_ARGUMENT,
           "beta must be >= 0, got ", ctx.f("beta"));
  PairLossShape(ctx);
}

void BceWithLogitsShape(dg::InferContext& ctx) {
  if (ctx.num_inputs() > 2) {
    const dg::TensorRef x = ctx.input(0), w = ctx.input(2);
    const Shape xs = x.shape();
    DG_CHECK(!xs.empty(), DG_INVALID_ARGUMENT,
             "pos_weight needs an input of rank >= 1 (it weighs the last "
             "axis), got a 0-d input");
    DG_CHECK(w.ndim() == 1 && (w.dim(0) == xs.back() || w.dim(0) == 1),
             DG_INVALID_ARGUMENT, "pos_weight must be 1-D of length ",
             xs.back(), " (input's last axis) or 1, got shape ",
             ShapeStr(w.shape()));
    CheckDTypeLike(w, "pos_weight", x, "input");
  }
  PairLossShape(ctx);
}

void FocalShape(dg::InferContext& ctx) {
  CheckFiniteAttr(ctx, "alpha");
  CheckFiniteAttr(ctx, "gamma");
  DG_CHECK(ctx.f("alpha") <= 1.0, DG_INVALID_ARGUMENT,
           "alpha must be <= 1 (negative disables the weighting), got ",
           ctx.f("alpha"));
  DG_CHECK(ctx.f("gamma") >= 0.0, DG_INVALID_ARGUMENT,
           "gamma must be >= 0, got ", ctx.f("gamma"));
  PairLossShape(ctx);
}

// Scores [N, C, d1, ...] (or [C]) against class indices [N, d1, ...] (or
// []): the class axis is 1 (0 for a 1-D input).
void ClassLossShape(dg::InferContext& ctx) {
  const Shape x = ctx.input(0).shape(), t = ctx.input(1).shape();
  DG_CHECK(!x.empty(), DG_INVALID_ARGUMENT,
           "input must have a class axis: shape [N, C, d1, ...] or [C], got "
           "a 0-d input");
  const size_t axis = x.size() == 1 ? 0 : 1;
  Shape want = x;
  want.erase(want.begin() + static_cast<int64_t>(axis));
  DG_CHECK(t == want, DG_INVALID_ARGUMENT, "target must have shape ",
           ShapeStr(want), " (input shape ", ShapeStr(x),
           " without its class axis ", axis, "), got ", ShapeStr(t));
  const bool none = CheckReduction(ctx);
  ctx.set_output(0, ctx.input(0).dtype(), none ? t : Shape{});
}

void SoftmaxCrossEntropyShape(dg::InferContext& ctx) {
  CheckFiniteAttr(ctx, "label_smoothing");
  const double s = ctx.f("label_smoothing");
  DG_CHECK(s >= 0.0 && s <= 1.0, DG_INVALID_ARGUMENT,
           "label_smoothing must be in [0, 1], got ", s);
  ClassLossShape(ctx);
}

}  // namespace

DG_OP(SoftmaxCrossEntropy)
    .Doc("Cross entropy between softmax(logits) along the class axis and "
         "class-index targets, computed stably with log-sum-exp: "
         "loss = logsumexp(x) - (1 - s) * x[target] - s / C * sum_c x[c] for "
         "label smoothing s. Targets equal to ignore_index contribute 0 and "
         "are not counted by the mean. Any other target outside [0, C) is an "
         "error.")
    .Input("logits", dg::kFloat, 0,
           "Scores [N, C], [N, C, d1, ...] (class axis 1) or [C].")
    .Input("target", kIndexTypes, DG_ARG_NO_GRAD,
           "Class indices, int32 or int64, logits' shape without the class "
           "axis.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or target's shape for reduction \"none\".")
    .Attr("ignore_index", int64_t{-100},
          "Target value that is skipped (loss 0, not counted by the mean).")
    .Attr("label_smoothing", 0.0,
          "s in [0, 1]: the target distribution is (1 - s) * one_hot + s / C.")
    .Attr("reduction", "mean", kReductionDoc)
    .Shape(SoftmaxCrossEntropyShape);

DG_OP(NllLoss)
    .Doc("Negative log-likelihood of class-index targets: "
         "loss = -log_probs[target] along the class axis. Targets equal to "
         "ignore_index contribute 0 and are not counted by the mean; any "
         "other target outside [0, C) is an error.")
    .PyName("nll_loss")
    .Input("log_probs", dg::kFloat, 0,
           "Log-probabilities [N, C], [N, C, d1, ...] (class axis 1) or [C].")
    .Input("target", kIndexTypes, DG_ARG_NO_GRAD,
           "Class indices, int32 or int64, log_probs' shape without the "
           "class axis.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or target's shape for reduction \"none\".")
    .Attr("ignore_index", int64_t{-100},
          "Target value that is skipped (loss 0, not counted by the mean).")
    .Attr("reduction", "mean", kReductionDoc)
    .Shape(ClassLossShape);

DG_OP(MseLoss)
    .Doc("Squared error, element-wise: loss = (input - target)^2.")
    .Input("input", dg::kFloat, 0, "Predictions.")
    .Input("target", dg::kFloat, 0, "Targets, input's shape and dtype.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or input's shape for reduction \"none\".")
    .Attr("reduction", "mean", kReductionDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(PairLossShape);

DG_OP(MseLossAndGrad)
    .Doc("MseLoss and its input's gradient in one pass: loss as MseLoss "
         "(mean or sum), dinput = (input - target) * scale, element-wise in "
         "input's dtype (the Sub and Mul of MseLoss's gradient rule, scale "
         "being 2 dy, divided by the count for the mean). Written by the "
         "loss_fusion graph pass; not differentiable.")
    .Input("input", dg::kFloat, DG_ARG_NO_GRAD, "Predictions.")
    .Input("target", dg::kFloat, DG_ARG_NO_GRAD,
           "Targets, input's shape and dtype.")
    .Input("scale", dg::kFloat, DG_ARG_NO_GRAD,
           "0-d, input's dtype: the gradient's factor.")
    .Output("loss", dg::kFloat, 0, "Scalar.")
    .Output("dinput", dg::kFloat, 0, "(input - target) * scale, input's shape.")
    .Attr("reduction", "mean", "\"mean\" (average) or \"sum\".")
    .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
    .Shape(MseLossAndGradShape);

DG_OP(L1Loss)
    .Doc("Absolute error, element-wise: loss = |input - target|.")
    .Input("input", dg::kFloat, 0, "Predictions.")
    .Input("target", dg::kFloat, 0, "Targets, input's shape and dtype.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or input's shape for reduction \"none\".")
    .Attr("reduction", "mean", kReductionDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(PairLossShape);

DG_OP(SmoothL1Loss)
    .Doc("Huber-like error, element-wise, with d = |input - target|: "
         "loss = 0.5 * d^2 / beta where d < beta, else d - 0.5 * beta "
         "(beta = 0 gives the L1 loss).")
    .Input("input", dg::kFloat, 0, "Predictions.")
    .Input("target", dg::kFloat, 0, "Targets, input's shape and dtype.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or input's shape for reduction \"none\".")
    .Attr("beta", 1.0, "Where the loss turns from quadratic to linear, >= 0.")
    .Attr("reduction", "mean", kReductionDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(SmoothL1Shape);

DG_OP(BceWithLogits)
    .Doc("Binary cross entropy of sigmoid(input) against target "
         "probabilities, from the logits, stably: with w the pos_weight of "
         "the element's last-axis position (1 without pos_weight), "
         "loss = (1 - t) * x + (1 + (w - 1) * t) * "
         "(log(1 + exp(-|x|)) + max(-x, 0)).")
    .Input("input", dg::kFloat, 0, "Logits.")
    .Input("target", dg::kFloat, 0,
           "Target probabilities in [0, 1], input's shape and dtype.")
    .Input("pos_weight", dg::kFloat, DG_ARG_OPTIONAL,
           "Optional weight of the positive term per class: 1-D, of length "
           "input.shape[-1] (or 1), input's dtype.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or input's shape for reduction \"none\".")
    .Attr("reduction", "mean", kReductionDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(BceWithLogitsShape);

DG_OP(SigmoidFocalLoss)
    .Doc("Focal loss of RetinaNet (as torchvision's sigmoid_focal_loss): "
         "with p = sigmoid(x) and p_t = p * t + (1 - p) * (1 - t), "
         "loss = a_t * BCE(x, t) * (1 - p_t)^gamma, where "
         "a_t = alpha * t + (1 - alpha) * (1 - t), or 1 when alpha < 0.")
    .Input("input", dg::kFloat, 0, "Logits.")
    .Input("target", dg::kFloat, DG_ARG_NO_GRAD,
           "Binary targets (0 or 1; soft targets allowed), input's shape and "
           "dtype.")
    .Output("loss", dg::kFloat, 0,
            "Scalar, or input's shape for reduction \"none\".")
    .Attr("alpha", 0.25,
          "Weight of the positive class, <= 1; negative disables it.")
    .Attr("gamma", 2.0, "Focusing exponent, >= 0.")
    .Attr("reduction", "mean", kReductionDoc)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(FocalShape);

}  // namespace ops
}  // namespace dragon
