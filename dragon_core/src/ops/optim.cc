// Fused optimizer updates: SgdUpdate, AdamUpdate, RmspropUpdate and
// AdagradUpdate. Each is one element-wise pass that reads a parameter, its
// gradient and its optimizer state and returns the new parameter and the new
// state (functional: the caller rebinds its tensors with Tensor.assign, which
// also makes them state updates of a compiled graph). The learning rate and
// the step count are one-element tensor inputs, not attributes, so a
// compiled graph follows a scheduler without being traced again; the other
// hyper-parameters are attributes. The update rules are those of PyTorch's
// torch.optim (single-tensor form); docs/optim.md writes them out.
//
// State buffers an option leaves unused (the momentum buffer of SGD without
// momentum, max_exp_avg_sq of Adam without amsgrad, ...) are not read: they
// may have any shape (an empty tensor is typical) and their output is a copy
// of them, so the op's outputs stay fixed.
#include <cstdint>
#include <string>

#include "dragon/plugin.hpp"
#include "infer_util.h"

namespace dragon {
namespace ops {
namespace {

constexpr DgDTypeMask kScalarTypes = dg::Bit(DG_FLOAT32) |
                                     dg::Bit(DG_FLOAT64) | dg::Bit(DG_INT32) |
                                     dg::Bit(DG_INT64);

// Input i must have the parameter's (input 0's) shape and dtype.
void CheckLikeParam(const dg::InferContext& ctx, int32_t i, const char* name,
                    const char* why = "") {
  const dg::TensorRef p = ctx.input(0), t = ctx.input(i);
  DG_CHECK(t.dtype() == p.dtype(), DG_INVALID_ARGUMENT, name, " is ",
           dg::DTypeName(t.dtype()), " but param is ",
           dg::DTypeName(p.dtype()), why,
           "; gradients and optimizer state must have the parameter's dtype");
  DG_CHECK(t.shape() == p.shape(), DG_INVALID_ARGUMENT, name, " has shape ",
           ShapeStr(t.shape()), " but param has shape ", ShapeStr(p.shape()),
           why, "; gradients and optimizer state must have the parameter's "
           "shape");
}

// A state buffer that `used` says the update reads: it must look like the
// parameter. An unused one only needs the parameter's dtype; its output
// (a copy) keeps its shape. `used_when` names the option that makes the
// update read it ("" for a buffer always read).
void StateOutput(dg::InferContext& ctx, int32_t in, int32_t out,
                 const char* name, bool used, const char* used_when) {
  if (used) {
    const std::string why =
        *used_when ? dg::Str(" (it is read when ", used_when, ")") : "";
    CheckLikeParam(ctx, in, name, why.c_str());
  } else {
    DG_CHECK(ctx.input(in).dtype() == ctx.input(0).dtype(), DG_INVALID_ARGUMENT,
             name, " is ", dg::DTypeName(ctx.input(in).dtype()),
             " but param is ", dg::DTypeName(ctx.input(0).dtype()),
             "; it is only read when ", used_when,
             ", otherwise pass an empty tensor of the parameter's dtype");
  }
  ctx.set_output(out, ctx.input(in).dtype(), ctx.input(in).shape());
}

// lr and step hold exactly one value.
void CheckScalar(const dg::InferContext& ctx, int32_t i, const char* name) {
  const Shape s = ctx.input(i).shape();
  DG_CHECK(CheckedNumel(s, name) == 1, DG_INVALID_ARGUMENT, name,
           " must hold one value (a 0-d tensor), got shape ", ShapeStr(s));
}

void CheckNonNegative(const dg::InferContext& ctx, const char* name) {
  const double v = ctx.f(name);
  DG_CHECK(v >= 0.0, DG_INVALID_ARGUMENT, name, " must be >= 0, got ", v);
}

void CheckUnitInterval(const dg::InferContext& ctx, const char* name) {
  const double v = ctx.f(name);
  DG_CHECK(v >= 0.0 && v < 1.0, DG_INVALID_ARGUMENT, name,
           " must be in [0, 1), got ", v);
}

// SgdUpdate(param, grad, momentum_buf, lr)
void SgdShape(dg::InferContext& ctx) {
  CheckLikeParam(ctx, 1, "grad");
  CheckScalar(ctx, 3, "lr");
  CheckNonNegative(ctx, "momentum");
  CheckNonNegative(ctx, "weight_decay");
  const double dampening = ctx.f("dampening");
  DG_CHECK(dampening >= 0.0 && dampening <= 1.0, DG_INVALID_ARGUMENT,
           "dampening must be in [0, 1], got ", dampening);
  const bool momentum = ctx.f("momentum") != 0.0;
  if (ctx.b("nesterov")) {
    DG_CHECK(momentum && dampening == 0.0, DG_INVALID_ARGUMENT,
             "nesterov needs momentum > 0 and dampening = 0, got momentum ",
             ctx.f("momentum"), " and dampening ", dampening);
  }
  SameAsInput(ctx);  // param_out
  StateOutput(ctx, 2, 1, "momentum_buf", momentum, "momentum != 0");
}

// AdamUpdate(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, step)
void AdamShape(dg::InferContext& ctx) {
  CheckLikeParam(ctx, 1, "grad");
  CheckScalar(ctx, 5, "lr");
  CheckScalar(ctx, 6, "step");
  CheckUnitInterval(ctx, "beta1");
  CheckUnitInterval(ctx, "beta2");
  CheckNonNegative(ctx, "eps");
  CheckNonNegative(ctx, "weight_decay");
  SameAsInput(ctx);  // param_out
  StateOutput(ctx, 2, 1, "exp_avg", true, "");
  StateOutput(ctx, 3, 2, "exp_avg_sq", true, "");
  StateOutput(ctx, 4, 3, "max_exp_avg_sq", ctx.b("amsgrad"),
              "amsgrad is set");
}

// RmspropUpdate(param, grad, square_avg, momentum_buf, grad_avg, lr)
void RmspropShape(dg::InferContext& ctx) {
  CheckLikeParam(ctx, 1, "grad");
  CheckScalar(ctx, 5, "lr");
  const double alpha = ctx.f("alpha");
  DG_CHECK(alpha >= 0.0 && alpha <= 1.0, DG_INVALID_ARGUMENT,
           "alpha must be in [0, 1], got ", alpha);
  CheckNonNegative(ctx, "eps");
  CheckNonNegative(ctx, "weight_decay");
  CheckNonNegative(ctx, "momentum");
  SameAsInput(ctx);  // param_out
  StateOutput(ctx, 2, 1, "square_avg", true, "");
  StateOutput(ctx, 3, 2, "momentum_buf", ctx.f("momentum") != 0.0,
              "momentum != 0");
  StateOutput(ctx, 4, 3, "grad_avg", ctx.b("centered"), "centered is set");
}

// AdagradUpdate(param, grad, sum, lr, step)
void AdagradShape(dg::InferContext& ctx) {
  CheckLikeParam(ctx, 1, "grad");
  CheckScalar(ctx, 3, "lr");
  CheckScalar(ctx, 4, "step");
  CheckNonNegative(ctx, "lr_decay");
  CheckNonNegative(ctx, "weight_decay");
  CheckNonNegative(ctx, "eps");
  SameAsInput(ctx);  // param_out
  StateOutput(ctx, 2, 1, "sum", true, "");
}

// The multi-tensor (foreach) forms take the scalars first, then one
// variadic list holding each role's tensors in turn: MultiSgdUpdate(lr,
// params..., grads..., momentum_bufs...) and MultiAdamUpdate(lr, params...,
// grads..., exp_avgs..., exp_avg_sqs..., max_exp_avg_sqs..., steps...)
// (each parameter keeps its own step count, as AdamUpdate's callers do).
// Entry k of every role belongs to parameter k; the outputs are the new
// params then the new state, role by role.

// Checks the list of a multi-tensor update (`roles` tensors per parameter,
// starting at input `first`) and returns the number of parameters.
int32_t MultiCount(const dg::InferContext& ctx, int32_t first, int32_t roles,
                   const char* layout) {
  const int32_t total = ctx.num_inputs() - first;
  DG_CHECK(total > 0 && total % roles == 0, DG_INVALID_ARGUMENT, "expected ",
           layout, " (", roles, " tensors per parameter), got ", total,
           " tensors");
  return total / roles;
}

// Tensor `t` of parameter k must have parameter k's (input `p`) shape and
// the dtype of parameter 0 (one dtype per call).
void CheckLikeParamAt(const dg::InferContext& ctx, int32_t p, int32_t t,
                      int32_t k, const char* name, bool shape = true,
                      const char* why = "") {
  const dg::TensorRef pt = ctx.input(p), tt = ctx.input(t);
  DG_CHECK(tt.dtype() == pt.dtype(), DG_INVALID_ARGUMENT, name, "[", k,
           "] is ", dg::DTypeName(tt.dtype()), " but params[", k, "] is ",
           dg::DTypeName(pt.dtype()), why,
           "; every tensor of one multi-tensor update has one dtype");
  if (!shape) return;
  DG_CHECK(tt.shape() == pt.shape(), DG_INVALID_ARGUMENT, name, "[", k,
           "] has shape ", ShapeStr(tt.shape()), " but params[", k,
           "] has shape ", ShapeStr(pt.shape()), why);
}

void CheckSgdAttrs(const dg::InferContext& ctx) {
  CheckNonNegative(ctx, "momentum");
  CheckNonNegative(ctx, "weight_decay");
  const double dampening = ctx.f("dampening");
  DG_CHECK(dampening >= 0.0 && dampening <= 1.0, DG_INVALID_ARGUMENT,
           "dampening must be in [0, 1], got ", dampening);
  if (ctx.b("nesterov")) {
    DG_CHECK(ctx.f("momentum") != 0.0 && dampening == 0.0,
             DG_INVALID_ARGUMENT,
             "nesterov needs momentum > 0 and dampening = 0, got momentum ",
             ctx.f("momentum"), " and dampening ", dampening);
  }
}

// MultiSgdUpdate(lr, params..., grads..., momentum_bufs...)
void MultiSgdShape(dg::InferContext& ctx) {
  CheckScalar(ctx, 0, "lr");
  CheckSgdAttrs(ctx);
  const int32_t n =
      MultiCount(ctx, 1, 3, "lr, params..., grads..., momentum_bufs...");
  const bool momentum = ctx.f("momentum") != 0.0;
  for (int32_t k = 0; k < n; ++k) {
    const int32_t p = 1 + k;
    CheckLikeParamAt(ctx, 1, p, k, "params", false);
    CheckLikeParamAt(ctx, p, p + n, k, "grads");
    CheckLikeParamAt(ctx, p, p + 2 * n, k, "momentum_bufs", momentum,
                     " (it is read when momentum != 0)");
  }
  for (int32_t k = 0; k < n; ++k) {
    ctx.set_output(k, ctx.input(1 + k).dtype(), ctx.input(1 + k).shape());
  }
  for (int32_t k = 0; k < n; ++k) {
    const dg::TensorRef b = ctx.input(1 + 2 * n + k);
    ctx.set_output(n + k, b.dtype(), b.shape());
  }
}

// MultiAdamUpdate(lr, params..., grads..., exp_avgs..., exp_avg_sqs...,
//                 max_exp_avg_sqs..., steps...)
void MultiAdamShape(dg::InferContext& ctx) {
  CheckScalar(ctx, 0, "lr");
  CheckUnitInterval(ctx, "beta1");
  CheckUnitInterval(ctx, "beta2");
  CheckNonNegative(ctx, "eps");
  CheckNonNegative(ctx, "weight_decay");
  const int32_t n = MultiCount(
      ctx, 1, 6,
      "lr, params..., grads..., exp_avgs..., exp_avg_sqs..., "
      "max_exp_avg_sqs..., steps...");
  const bool amsgrad = ctx.b("amsgrad");
  for (int32_t k = 0; k < n; ++k) {
    const int32_t p = 1 + k;
    CheckLikeParamAt(ctx, 1, p, k, "params", false);
    CheckLikeParamAt(ctx, p, p + n, k, "grads");
    CheckLikeParamAt(ctx, p, p + 2 * n, k, "exp_avgs");
    CheckLikeParamAt(ctx, p, p + 3 * n, k, "exp_avg_sqs");
    CheckLikeParamAt(ctx, p, p + 4 * n, k, "max_exp_avg_sqs", amsgrad,
                     " (it is read when amsgrad is set)");
    const dg::TensorRef step = ctx.input(p + 5 * n);
    DG_CHECK((kScalarTypes >> step.dtype()) & 1, DG_INVALID_ARGUMENT,
             "steps[", k, "] is ", dg::DTypeName(step.dtype()),
             "; a step count is float32, float64, int32 or int64");
    DG_CHECK(CheckedNumel(step.shape(), "steps") == 1, DG_INVALID_ARGUMENT,
             "steps[", k, "] must hold one value (a 0-d tensor), got shape ",
             ShapeStr(step.shape()));
  }
  for (int32_t role = 0; role < 4; ++role) {
    const int32_t from = role == 0 ? 0 : role + 1;  // skip the grads
    for (int32_t k = 0; k < n; ++k) {
      const dg::TensorRef t = ctx.input(1 + from * n + k);
      ctx.set_output(role * n + k, t.dtype(), t.shape());
    }
  }
}

}  // namespace

DG_OP(SgdUpdate)
    .Doc("One SGD step (PyTorch semantics): g = grad (negated if maximize) "
         "+ weight_decay * param; with momentum, buf = momentum * buf + "
         "(1 - dampening) * g and g = g + momentum * buf (nesterov) or "
         "g = buf; param = param - lr * g. The buffer starts at zero, so "
         "with dampening != 0 the first step scales g by (1 - dampening) "
         "where PyTorch copies it.")
    .Input("param", dg::kFloat, DG_ARG_NO_GRAD, "The parameter.")
    .Input("grad", dg::kFloat, DG_ARG_NO_GRAD, "Its gradient, same shape.")
    .Input("momentum_buf", dg::kFloat, DG_ARG_NO_GRAD,
           "Momentum buffer (param's shape); unused, any shape, when "
           "momentum is 0.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Output("param_out", dg::kFloat, 0, "The updated parameter.")
    .Output("momentum_buf_out", dg::kFloat, 0, "The updated buffer.")
    .Attr("momentum", 0.0, "Momentum factor, >= 0.")
    .Attr("dampening", 0.0, "Dampening of the momentum, in [0, 1].")
    .Attr("nesterov", false, "Nesterov momentum (needs momentum > 0 and "
          "dampening = 0).")
    .Attr("weight_decay", 0.0, "L2 penalty added to the gradient, >= 0.")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Shape(SgdShape);

DG_OP(AdamUpdate)
    .Doc("One Adam / AdamW step (PyTorch semantics), step >= 1 being the "
         "count including this one: g = grad (negated if maximize); L2 "
         "(decoupled = false): g += weight_decay * param; AdamW (decoupled): "
         "param *= 1 - lr * weight_decay. m = beta1 * m + (1 - beta1) * g, "
         "v = beta2 * v + (1 - beta2) * g^2, vmax = max(vmax, v) (amsgrad), "
         "param -= lr / (1 - beta1^step) * m / (sqrt(v or vmax) / "
         "sqrt(1 - beta2^step) + eps).")
    .Input("param", dg::kFloat, DG_ARG_NO_GRAD, "The parameter.")
    .Input("grad", dg::kFloat, DG_ARG_NO_GRAD, "Its gradient, same shape.")
    .Input("exp_avg", dg::kFloat, DG_ARG_NO_GRAD, "First moment m.")
    .Input("exp_avg_sq", dg::kFloat, DG_ARG_NO_GRAD, "Second moment v.")
    .Input("max_exp_avg_sq", dg::kFloat, DG_ARG_NO_GRAD,
           "Running maximum of v (amsgrad); unused, any shape, otherwise.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Input("step", kScalarTypes, DG_ARG_NO_GRAD,
           "Step count including this step (>= 1), one value.")
    .Output("param_out", dg::kFloat, 0, "The updated parameter.")
    .Output("exp_avg_out", dg::kFloat, 0, "The updated m.")
    .Output("exp_avg_sq_out", dg::kFloat, 0, "The updated v.")
    .Output("max_exp_avg_sq_out", dg::kFloat, 0, "The updated vmax.")
    .Attr("beta1", 0.9, "Decay of the first moment, in [0, 1).")
    .Attr("beta2", 0.999, "Decay of the second moment, in [0, 1).")
    .Attr("eps", 1e-8, "Added to the denominator, >= 0.")
    .Attr("weight_decay", 0.0, "Weight decay, >= 0.")
    .Attr("decoupled", false, "Decoupled weight decay (AdamW).")
    .Attr("amsgrad", false, "Use the running maximum of v (AMSGrad).")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Shape(AdamShape);

DG_OP(RmspropUpdate)
    .Doc("One RMSprop step (PyTorch semantics): g = grad (negated if "
         "maximize) + weight_decay * param; s = alpha * s + (1 - alpha) * "
         "g^2; centered: a = alpha * a + (1 - alpha) * g and d = sqrt(s - "
         "a^2) + eps, else d = sqrt(s) + eps; with momentum, buf = momentum "
         "* buf + g / d and param -= lr * buf, else param -= lr * g / d.")
    .Input("param", dg::kFloat, DG_ARG_NO_GRAD, "The parameter.")
    .Input("grad", dg::kFloat, DG_ARG_NO_GRAD, "Its gradient, same shape.")
    .Input("square_avg", dg::kFloat, DG_ARG_NO_GRAD,
           "Running average s of g^2.")
    .Input("momentum_buf", dg::kFloat, DG_ARG_NO_GRAD,
           "Momentum buffer; unused, any shape, when momentum is 0.")
    .Input("grad_avg", dg::kFloat, DG_ARG_NO_GRAD,
           "Running average a of g (centered); unused, any shape, otherwise.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Output("param_out", dg::kFloat, 0, "The updated parameter.")
    .Output("square_avg_out", dg::kFloat, 0, "The updated s.")
    .Output("momentum_buf_out", dg::kFloat, 0, "The updated buffer.")
    .Output("grad_avg_out", dg::kFloat, 0, "The updated a.")
    .Attr("alpha", 0.99, "Smoothing constant, in [0, 1].")
    .Attr("eps", 1e-8, "Added to the denominator, >= 0.")
    .Attr("weight_decay", 0.0, "L2 penalty added to the gradient, >= 0.")
    .Attr("momentum", 0.0, "Momentum factor, >= 0.")
    .Attr("centered", false, "Normalise by the estimated variance of g.")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Shape(RmspropShape);

DG_OP(AdagradUpdate)
    .Doc("One Adagrad step (PyTorch semantics), step >= 1 being the count "
         "including this one: g = grad (negated if maximize) + weight_decay "
         "* param; sum += g^2; param -= lr / (1 + (step - 1) * lr_decay) * "
         "g / (sqrt(sum) + eps).")
    .Input("param", dg::kFloat, DG_ARG_NO_GRAD, "The parameter.")
    .Input("grad", dg::kFloat, DG_ARG_NO_GRAD, "Its gradient, same shape.")
    .Input("sum", dg::kFloat, DG_ARG_NO_GRAD, "Sum of squared gradients.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Input("step", kScalarTypes, DG_ARG_NO_GRAD,
           "Step count including this step (>= 1), one value.")
    .Output("param_out", dg::kFloat, 0, "The updated parameter.")
    .Output("sum_out", dg::kFloat, 0, "The updated sum.")
    .Attr("lr_decay", 0.0, "Learning-rate decay per step, >= 0.")
    .Attr("weight_decay", 0.0, "L2 penalty added to the gradient, >= 0.")
    .Attr("eps", 1e-10, "Added to the denominator, >= 0.")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .Inplace(1)
    .Shape(AdagradShape);

DG_OP(MultiSgdUpdate)
    .Doc("SgdUpdate over a list of parameters in one call (a multi-tensor, "
         "or foreach, update): the inputs are lr, then params, grads and "
         "momentum_bufs, n of each; the outputs are the n new params then "
         "the n new buffers. Each parameter's result is bit for bit that "
         "of SgdUpdate with the same attributes.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Input("tensors", dg::kFloat, DG_ARG_NO_GRAD | DG_ARG_VARIADIC,
           "params..., grads..., momentum_bufs... (3n tensors of one dtype; "
           "a buffer is unused, any shape, when momentum is 0).")
    .Output("outputs", dg::kFloat, DG_ARG_VARIADIC,
            "The n updated params, then the n updated buffers.")
    .Attr("momentum", 0.0, "Momentum factor, >= 0.")
    .Attr("dampening", 0.0, "Dampening of the momentum, in [0, 1].")
    .Attr("nesterov", false, "Nesterov momentum (needs momentum > 0 and "
          "dampening = 0).")
    .Attr("weight_decay", 0.0, "L2 penalty added to the gradient, >= 0.")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .DispatchInput(1)
    .Shape(MultiSgdShape);

DG_OP(MultiAdamUpdate)
    .Doc("AdamUpdate over a list of parameters in one call (a multi-tensor, "
         "or foreach, update): the inputs are lr, then params, grads, "
         "exp_avgs, exp_avg_sqs, max_exp_avg_sqs and steps (each parameter's "
         "step count including this step), n of each; the outputs "
         "are the n new params, exp_avgs, exp_avg_sqs and max_exp_avg_sqs. "
         "Each parameter's result is bit for bit that of AdamUpdate with the "
         "same attributes.")
    .Input("lr", dg::Bit(DG_FLOAT32) | dg::Bit(DG_FLOAT64), DG_ARG_NO_GRAD,
           "Learning rate, one value.")
    .Input("tensors", dg::kFloat | kScalarTypes,
           DG_ARG_NO_GRAD | DG_ARG_VARIADIC,
           "params..., grads..., exp_avgs..., exp_avg_sqs..., "
           "max_exp_avg_sqs... (5n tensors of one floating dtype; a "
           "max_exp_avg_sq is unused, any shape, without amsgrad), then "
           "steps... (n one-value tensors, >= 1).")
    .Output("outputs", dg::kFloat, DG_ARG_VARIADIC,
            "The n updated params, exp_avgs, exp_avg_sqs, max_exp_avg_sqs.")
    .Attr("beta1", 0.9, "Decay of the first moment, in [0, 1).")
    .Attr("beta2", 0.999, "Decay of the second moment, in [0, 1).")
    .Attr("eps", 1e-8, "Added to the denominator, >= 0.")
    .Attr("weight_decay", 0.0, "Weight decay, >= 0.")
    .Attr("decoupled", false, "Decoupled weight decay (AdamW).")
    .Attr("amsgrad", false, "Use the running maximum of v (AMSGrad).")
    .Attr("maximize", false, "Ascend instead of descend.")
    .Flags(DG_OP_NO_GRAD)
    .DispatchInput(1)
    .Shape(MultiAdamShape);

}  // namespace ops
}  // namespace dragon
