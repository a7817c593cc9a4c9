"""Gradients of the losses, written with ops (so they differentiate again).

Every rule computes the element-wise derivative ``g`` of the per-element
(or per-sample) loss and scales it by the reduction's adjoint: ``dy``
itself for "none" (one value per element), ``dy`` broadcast for "sum",
``dy / count`` for "mean".

Conventions where the loss is not differentiable or the mean is empty:

* ``L1Loss`` / ``SmoothL1Loss`` with ``beta = 0``: ``sign(input - target)``,
  i.e. 0 where input == target (a subgradient).
* ``SoftmaxCrossEntropy`` / ``NllLoss`` with reduction "mean" and every
  target ignored: the loss is NaN (0 / 0) but the gradient is 0, as in
  PyTorch's ``nll_loss`` backward.
* ``SigmoidFocalLoss``: ``(1 - p_t)^(gamma - 1)`` is taken as 0 where
  ``1 - p_t == 0`` (a saturated sigmoid on a hard target), where the
  factor it multiplies, ``p (1 - p)``, is 0 as well.
"""

from __future__ import annotations

from .._autograd import gradient, needs_grad
from ._util import ops, scalar_like, unbroadcast


def _pair_scale(node, dy):
    """The reduction adjoint of an element-wise loss over input 0."""
    if node.attrs["reduction"] == "mean":
        n = 1
        for d in node.inputs[0].shape:
            n *= d
        if n > 1:
            return dy / float(n)
    return dy


@gradient("MseLoss")
def _mse(node, dy):
    x, t = node.inputs
    g = (x - t) * (_pair_scale(node, dy) * 2.0)
    return [g, -g if needs_grad(node, 1) else None]   # a target is rarely trained


@gradient("L1Loss")
def _l1(node, dy):
    x, t = node.inputs
    g = ops().sign(x - t) * _pair_scale(node, dy)
    return [g, -g if needs_grad(node, 1) else None]


@gradient("SmoothL1Loss")
def _smooth_l1(node, dy):
    o = ops()
    x, t = node.inputs
    beta = float(node.attrs["beta"])
    d = x - t
    if beta > 0.0:
        local = o.where(o.abs(d) < beta, d / beta, o.sign(d))
    else:
        local = o.sign(d)
    g = local * _pair_scale(node, dy)
    return [g, -g if needs_grad(node, 1) else None]


@gradient("BceWithLogits")
def _bce_with_logits(node, dy):
    # loss = (1 - t) x + (1 + (w - 1) t) softplus(-x)
    o = ops()
    x, t = node.inputs[0], node.inputs[1]
    pw = node.inputs[2] if len(node.inputs) > 2 else None
    s = _pair_scale(node, dy)
    sp = o.softplus(-x)
    if pw is None:
        dx = (o.sigmoid(x) - t) * s
        dt = -x * s
        return [dx, dt]
    coef = (pw - 1.0) * t + 1.0
    dx = ((1.0 - t) - coef * o.sigmoid(-x)) * s
    dt = ((pw - 1.0) * sp - x) * s
    dpw = unbroadcast(t * sp * s, pw.shape)
    return [dx, dt, dpw]


@gradient("SigmoidFocalLoss")
def _sigmoid_focal(node, dy):
    # loss = a_t ce q^gamma with ce = (1 - t) x + softplus(-x),
    # q = 1 - p_t = p + t - 2 p t, dq/dx = p (1 - p) (1 - 2 t).
    o = ops()
    x, t = node.inputs
    alpha = float(node.attrs["alpha"])
    gamma = float(node.attrs["gamma"])
    p = o.sigmoid(x)
    ce = (1.0 - t) * x + o.softplus(-x)
    q = p + t - 2.0 * p * t
    local = (p - t) * o.pow(q, scalar_like(q, gamma))
    if gamma != 0.0:
        positive = q > 0.0
        q_safe = o.where(positive, q, scalar_like(q, 1.0))
        q_pow = o.where(positive, o.pow(q_safe, scalar_like(q, gamma - 1.0)),
                        scalar_like(q, 0.0))
        dq = p * (1.0 - p) * (1.0 - 2.0 * t)
        local = local + ce * q_pow * dq * gamma
    if alpha >= 0.0:
        local = local * (t * (2.0 * alpha - 1.0) + (1.0 - alpha))
    return [local * _pair_scale(node, dy), None]


# ------------------------------------------------- classification losses


def _class_parts(node):
    """(input, class axis, number of classes, 0/1 weights of the targets
    with the class axis added, the targets with ignored ones set to 0)."""
    o = ops()
    x, t = node.inputs
    axis = 1 if x.ndim > 1 else 0
    valid = t != node.attrs["ignore_index"]
    safe = o.where(valid, t, 0)
    w = o.unsqueeze(o.cast(valid, x.dtype), [axis])
    return x, axis, x.shape[axis], w, safe, valid


def _class_scale(node, dy, w, valid, axis):
    """The reduction adjoint times the target weights, with the class axis."""
    o = ops()
    red = node.attrs["reduction"]
    if red == "none":
        return w * o.unsqueeze(dy, [axis])
    if red == "sum":
        return w * dy
    count = o.cast(o.sum(valid), w.dtype)
    return w * (dy / o.maximum(count, scalar_like(count, 1.0)))


@gradient("SoftmaxCrossEntropy")
def _softmax_cross_entropy(node, dy):
    o = ops()
    x, axis, classes, w, safe, valid = _class_parts(node)
    smoothing = float(node.attrs["label_smoothing"])
    target = o.one_hot(safe, classes, dtype=x.dtype, axis=axis)
    if smoothing != 0.0:
        target = target * (1.0 - smoothing) + smoothing / classes
    g = o.softmax(x, axis) - target
    return [g * _class_scale(node, dy, w, valid, axis), None]


@gradient("NllLoss")
def _nll_loss(node, dy):
    o = ops()
    x, axis, classes, w, safe, valid = _class_parts(node)
    target = o.one_hot(safe, classes, dtype=x.dtype, axis=axis)
    return [-target * _class_scale(node, dy, w, valid, axis), None]
