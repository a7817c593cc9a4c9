// Normalization: BatchNorm, LayerNorm, GroupNorm, and their backward ops
// (BatchNormGrad, LayerNormGrad, GroupNormGrad), which compute every input
// gradient in one kernel; their own gradients (second order) are written
// with ops in Python. BatchNormStatsUpdate is BatchNorm's running-statistics
// update (not differentiable).
//
// All of them normalise groups of elements by their mean and biased variance:
//   y = (x - mean) / sqrt(var + eps) * gamma + beta.
#include <cstdint>
#include <vector>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr const char* kEps = "Added to the variance before the square root.";
constexpr const char* kTraining =
    "Use batch statistics (True) or running_mean / running_var (False).";

// Why a per-channel input has shape [C].
constexpr const char* kPerChannel = "one value per channel, axis 1 of x";

// `name` must have shape `want`.
void CheckParam(const dg::InferContext& ctx, int32_t i, const char* name,
                const Shape& want, const char* why) {
  Shape got = ctx.input(i).shape();
  DG_CHECK(got == want, DG_INVALID_ARGUMENT, name, " has shape ",
           ShapeStr(got), ", expected ", ShapeStr(want), " (", why,
           ", x has shape ", ShapeStr(ctx.input(0).shape()), ")");
}

void CheckEps(const dg::InferContext& ctx) {
  const double eps = ctx.f("eps");
  DG_CHECK(eps >= 0.0, DG_INVALID_ARGUMENT, "eps ", eps,
           " must be non-negative");
}

// x of rank >= 2: [N, C, *]. Returns [C].
Shape ChannelShape(const dg::InferContext& ctx) {
  Shape x = ctx.input(0).shape();
  DG_CHECK(x.size() >= 2, DG_INVALID_ARGUMENT,
           "x must have rank >= 2 ([N, C, *]), got shape ", ShapeStr(x));
  return {x[1]};
}

// The outputs of a norm op and its gradient: x's shape, then two of `param`
// (batch_mean, batch_var or dgamma, dbeta), all of x's dtype.
void SetNormOutputs(dg::InferContext& ctx, const Shape& param) {
  const DgDType t = ctx.input(0).dtype();
  ctx.set_output(0, t, ctx.input(0).shape());
  ctx.set_output(1, t, param);
  ctx.set_output(2, t, param);
}

void BatchNormShape(dg::InferContext& ctx) {
  CheckEps(ctx);
  Shape c = ChannelShape(ctx);
  static const char* kNames[] = {"x", "gamma", "beta", "running_mean",
                                 "running_var"};
  for (int32_t i = 1; i < 5; ++i) {
    CheckParam(ctx, i, kNames[i], c, kPerChannel);
  }
  SetNormOutputs(ctx, c);
}

void BatchNormGradShape(dg::InferContext& ctx) {
  CheckEps(ctx);
  Shape c = ChannelShape(ctx);
  static const char* kNames[] = {"x",  "gamma", "running_mean", "running_var",
                                 "dy", "dmean", "dvar"};
  for (int32_t i : {1, 2, 3, 5, 6}) {
    CheckParam(ctx, i, kNames[i], c, kPerChannel);
  }
  CheckParam(ctx, 4, "dy", ctx.input(0).shape(), "the gradient of y");
  SetNormOutputs(ctx, c);
}

// The trailing shape LayerNorm normalises over: x.shape[axis:].
Shape NormalizedShape(const dg::InferContext& ctx) {
  Shape x = ctx.input(0).shape();
  const int64_t axis = NormalizeAxis(ctx.i("axis"), Rank(x));
  return Shape(x.begin() + axis, x.end());
}

void LayerNormShape(dg::InferContext& ctx) {
  CheckEps(ctx);
  Shape p = NormalizedShape(ctx);
  CheckParam(ctx, 1, "gamma", p, "x.shape[axis:]");
  CheckParam(ctx, 2, "beta", p, "x.shape[axis:]");
  SameAsInput(ctx);
}

void LayerNormGradShape(dg::InferContext& ctx) {
  CheckEps(ctx);
  Shape p = NormalizedShape(ctx);
  CheckParam(ctx, 1, "gamma", p, "x.shape[axis:]");
  CheckParam(ctx, 2, "dy", ctx.input(0).shape(), "the gradient of y");
  SetNormOutputs(ctx, p);
}

Shape GroupNormChannels(const dg::InferContext& ctx) {
  CheckEps(ctx);
  Shape c = ChannelShape(ctx);
  const int64_t groups = ctx.i("groups");
  DG_CHECK(groups > 0, DG_INVALID_ARGUMENT, "groups ", groups,
           " must be positive");
  DG_CHECK(c[0] % groups == 0, DG_INVALID_ARGUMENT, "groups ", groups,
           " does not divide the ", c[0], " channels of x (shape ",
           ShapeStr(ctx.input(0).shape()), ")");
  return c;
}

void GroupNormShape(dg::InferContext& ctx) {
  Shape c = GroupNormChannels(ctx);
  CheckParam(ctx, 1, "gamma", c, kPerChannel);
  CheckParam(ctx, 2, "beta", c, kPerChannel);
  SameAsInput(ctx);
}

void GroupNormGradShape(dg::InferContext& ctx) {
  Shape c = GroupNormChannels(ctx);
  CheckParam(ctx, 1, "gamma", c, kPerChannel);
  CheckParam(ctx, 2, "dy", ctx.input(0).shape(), "the gradient of y");
  SetNormOutputs(ctx, c);
}

}  // namespace

DG_OP(BatchNorm)
    .Doc("Batch normalization over every axis but 1 (the channel): "
         "y = (x - mean) / sqrt(var + eps) * gamma + beta, per channel. In "
         "training mode mean and var are the batch statistics (var biased; "
         "NaN for an empty batch) and are returned; otherwise "
         "running_mean / running_var are used and returned. Never updates "
         "the running statistics itself.")
    .Input("x", dg::kFloat, 0, "Input, [N, C] or [N, C, *].")
    .Input("gamma", dg::kFloat, 0, "Scale, [C].")
    .Input("beta", dg::kFloat, 0, "Shift, [C].")
    .Input("running_mean", dg::kFloat, DG_ARG_NO_GRAD, "Running mean, [C].")
    .Input("running_var", dg::kFloat, DG_ARG_NO_GRAD, "Running variance, [C].")
    .Output("y", dg::kFloat, 0, "Normalized x, x's shape.")
    .Output("batch_mean", dg::kFloat, 0,
            "Per-channel mean used, [C] (training: of the batch).")
    .Output("batch_var", dg::kFloat, 0,
            "Per-channel variance used, [C] (training: biased, of the batch).")
    .Attr("eps", 1e-5, kEps)
    .Attr("training", true, kTraining)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(BatchNormShape);

DG_OP(BatchNormGrad)
    .Doc("Backward of BatchNorm: gradients of x, gamma and beta from the "
         "gradients dy, dmean, dvar of its three outputs (dmean and dvar "
         "only matter in training mode). Statistics are recomputed from x.")
    .Input("x", dg::kFloat, 0, "BatchNorm input, [N, C, *].")
    .Input("gamma", dg::kFloat, 0, "Scale, [C].")
    .Input("running_mean", dg::kFloat, DG_ARG_NO_GRAD, "Running mean, [C].")
    .Input("running_var", dg::kFloat, DG_ARG_NO_GRAD, "Running variance, [C].")
    .Input("dy", dg::kFloat, 0, "Gradient of y, x's shape.")
    .Input("dmean", dg::kFloat, 0, "Gradient of batch_mean, [C].")
    .Input("dvar", dg::kFloat, 0, "Gradient of batch_var, [C].")
    .Output("dx", dg::kFloat, 0, "Gradient of x.")
    .Output("dgamma", dg::kFloat, 0, "Gradient of gamma, [C].")
    .Output("dbeta", dg::kFloat, 0, "Gradient of beta, [C].")
    .Attr("eps", 1e-5, kEps)
    .Attr("training", true, kTraining)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(BatchNormGradShape);

DG_OP(LayerNorm)
    .Doc("Layer normalization over the trailing axes [axis, rank): "
         "y = (x - mean) / sqrt(var + eps) * gamma + beta, with gamma and "
         "beta of shape x.shape[axis:] (var biased).")
    .Input("x", dg::kFloat, 0, "Input, rank >= 1.")
    .Input("gamma", dg::kFloat, 0, "Scale, x.shape[axis:].")
    .Input("beta", dg::kFloat, 0, "Shift, x.shape[axis:].")
    .Output("y", dg::kFloat, 0, "Normalized x, x's shape.")
    .Attr("axis", int64_t{-1}, "First normalized axis.")
    .Attr("eps", 1e-5, kEps)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(LayerNormShape);

DG_OP(LayerNormGrad)
    .Doc("Backward of LayerNorm: gradients of x, gamma and beta.")
    .Input("x", dg::kFloat, 0, "LayerNorm input.")
    .Input("gamma", dg::kFloat, 0, "Scale, x.shape[axis:].")
    .Input("dy", dg::kFloat, 0, "Gradient of y, x's shape.")
    .Output("dx", dg::kFloat, 0, "Gradient of x.")
    .Output("dgamma", dg::kFloat, 0, "Gradient of gamma.")
    .Output("dbeta", dg::kFloat, 0, "Gradient of beta.")
    .Attr("axis", int64_t{-1}, "First normalized axis.")
    .Attr("eps", 1e-5, kEps)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(LayerNormGradShape);

DG_OP(GroupNorm)
    .Doc("Group normalization: the C channels of x [N, C, *] are split into "
         "`groups` consecutive groups, each (sample, group) is normalized by "
         "its own mean and biased variance, then y = xhat * gamma + beta per "
         "channel.")
    .Input("x", dg::kFloat, 0, "Input, [N, C] or [N, C, *].")
    .Input("gamma", dg::kFloat, 0, "Scale, [C].")
    .Input("beta", dg::kFloat, 0, "Shift, [C].")
    .Output("y", dg::kFloat, 0, "Normalized x, x's shape.")
    .RequiredAttr("groups", DG_ATTR_INT, "Number of groups; divides C.")
    .Attr("eps", 1e-5, kEps)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(GroupNormShape);

DG_OP(GroupNormGrad)
    .Doc("Backward of GroupNorm: gradients of x, gamma and beta.")
    .Input("x", dg::kFloat, 0, "GroupNorm input, [N, C, *].")
    .Input("gamma", dg::kFloat, 0, "Scale, [C].")
    .Input("dy", dg::kFloat, 0, "Gradient of y, x's shape.")
    .Output("dx", dg::kFloat, 0, "Gradient of x.")
    .Output("dgamma", dg::kFloat, 0, "Gradient of gamma, [C].")
    .Output("dbeta", dg::kFloat, 0, "Gradient of beta, [C].")
    .RequiredAttr("groups", DG_ATTR_INT, "Number of groups; divides C.")
    .Attr("eps", 1e-5, kEps)
    .Flags(DG_OP_SAME_DTYPE)
    .Shape(GroupNormGradShape);

// ------------------------------------------- BatchNorm running statistics

namespace {

// running_mean, running_var, batch_mean, batch_var: one shape (usually
// [C]); momentum in [0, 1]; count (values per channel) >= 2.
void BatchNormStatsUpdateShape(dg::InferContext& ctx) {
  const double momentum = ctx.f("momentum");
  DG_CHECK(momentum >= 0.0 && momentum <= 1.0, DG_INVALID_ARGUMENT,
           "momentum must be in [0, 1], got ", momentum);
  const int64_t count = ctx.i("count");
  DG_CHECK(count >= 2, DG_INVALID_ARGUMENT,
           "count (values per channel) must be >= 2 for the unbiased "
           "variance, got ", count);
  const Shape c = ctx.input(0).shape();
  static const char* kNames[] = {"running_mean", "running_var", "batch_mean",
                                 "batch_var"};
  for (int32_t i = 1; i < 4; ++i) {
    const Shape got = ctx.input(i).shape();
    DG_CHECK(got == c, DG_INVALID_ARGUMENT, kNames[i], " has shape ",
             ShapeStr(got), ", expected running_mean's ", ShapeStr(c));
  }
  const DgDType t = ctx.input(0).dtype();
  ctx.set_output(0, t, c);
  ctx.set_output(1, t, c);
}

}  // namespace

DG_OP(BatchNormStatsUpdate)
    .Doc("The running-statistics update of a training-mode BatchNorm "
         "(PyTorch semantics), in one op: running_mean = (1 - momentum) * "
         "running_mean + momentum * batch_mean, running_var = (1 - momentum) "
         "* running_var + momentum * batch_var * count / (count - 1) (the "
         "batch variance made unbiased), computed in double and rounded "
         "once. momentum and count are attributes, so no scalar operand "
         "travels to the device.")
    .Input("running_mean", dg::kFloat, DG_ARG_NO_GRAD, "Running mean, [C].")
    .Input("running_var", dg::kFloat, DG_ARG_NO_GRAD, "Running variance, [C].")
    .Input("batch_mean", dg::kFloat, DG_ARG_NO_GRAD,
           "BatchNorm's batch_mean output, [C].")
    .Input("batch_var", dg::kFloat, DG_ARG_NO_GRAD,
           "BatchNorm's batch_var output (biased), [C].")
    .Output("running_mean_out", dg::kFloat, 0, "Updated running mean.")
    .Output("running_var_out", dg::kFloat, 0, "Updated running variance.")
    .Attr("momentum", 0.1, "Weight of the batch statistics, in [0, 1].")
    .Attr("count", int64_t{2},
          "Values per channel in the batch (N * prod(spatial)), >= 2.")
    .Flags(DG_OP_SAME_DTYPE | DG_OP_NO_GRAD)
    .Shape(BatchNormStatsUpdateShape);

}  // namespace ops
}  // namespace dragon
