"""Gradients of the normalization ops (BatchNorm, LayerNorm, GroupNorm).

First order goes through one backward op per family (``BatchNormGrad``,
``LayerNormGrad``, ``GroupNormGrad``): a single kernel computes the
gradients of x, gamma and beta, recomputing the statistics from x (rules
never read outputs).

Each backward op is differentiated again (second and higher order) as the
op composition below that computes the same values: the rule records that
composition on a private tape and returns its vector-Jacobian product. The
compositions are the reference formulas of the backward kernels:

    xhat = (x - mean) * rstd,   rstd = 1 / sqrt(var + eps),   g = dy * gamma
    dx = rstd * (g - mean(g) - xhat * mean(g * xhat))
    dgamma = sum(dy * xhat),   dbeta = sum(dy)

with means over each normalized group and sums over everything but gamma's
axes. BatchNorm in training mode adds the gradients of its statistics
outputs, ``(dmean + 2 dvar (x - mean)) / M``; in inference mode the
statistics are constants (running_mean, running_var) and
``dx = dy * gamma * rstd``.
"""

from __future__ import annotations

import math

from .._autograd import GradientTape, enable_grad, gradient
from ._util import ops


def _vjp(fn, primals, cotangents):
    """Gradients of ``<fn(*primals), cotangents>`` with respect to each
    primal, recorded (when an outer tape records) for higher orders.

    A tensor passed in several positions gets its whole gradient at the
    first one (the engine adds per-position gradients, so repeating it would
    count it twice).
    """
    with enable_grad(), GradientTape() as tape:
        tape.watch(list(primals))
        outs = fn(*primals)
    grads = tape.gradient(list(outs), list(primals),
                          output_gradients=list(cotangents),
                          unconnected_gradients="zero")
    seen, result = set(), []
    for p, g in zip(primals, grads):
        result.append(None if p._id in seen else g)
        seen.add(p._id)
    return result


# ------------------------------------------------------------------ BatchNorm

def batch_norm_backward(x, gamma, running_mean, running_var, dy, dmean, dvar,
                        eps, training):
    """What ``BatchNormGrad`` computes, written with ops.

    Returns
    -------
    tuple of Tensor
        (dx, dgamma, dbeta).
    """
    o = ops()
    c = x.shape[1]
    axes = [0] + list(range(2, x.ndim))
    per_channel = [1, c] + [1] * (x.ndim - 2)
    m = max(1, math.prod(x.shape) // max(1, c))
    g = o.reshape(gamma, per_channel)
    if training:
        xc = x - o.mean(x, axes, keepdims=True)
        var = o.mean(xc * xc, axes, keepdims=True)
    else:
        xc = x - o.reshape(running_mean, per_channel)
        var = o.reshape(running_var, per_channel)
    rstd = o.rsqrt(var + eps)
    xhat = xc * rstd
    sum_dy = o.sum(dy, axes, keepdims=True)
    sum_dy_xhat = o.sum(dy * xhat, axes, keepdims=True)
    if training:
        dx = (g * rstd) * (dy - (sum_dy + xhat * sum_dy_xhat) / float(m))
        dx = dx + (o.reshape(dmean, per_channel)
                   + o.reshape(dvar, per_channel) * xc * 2.0) / float(m)
    else:
        dx = dy * (g * rstd)
    return dx, o.reshape(sum_dy_xhat, [c]), o.reshape(sum_dy, [c])


@gradient("BatchNorm")
def _batch_norm(node, dy, dmean, dvar):
    x, gamma, _, running_mean, running_var = node.inputs
    dx, dgamma, dbeta = ops().batch_norm_grad(
        x, gamma, running_mean, running_var, dy, dmean, dvar,
        node.attrs["eps"], node.attrs["training"])
    return [dx, dgamma, dbeta, None, None]


@gradient("BatchNormGrad")
def _batch_norm_grad(node, ddx, ddgamma, ddbeta):
    x, gamma, running_mean, running_var, dy, dmean, dvar = node.inputs
    eps, training = node.attrs["eps"], node.attrs["training"]

    def backward(x, gamma, dy, dmean, dvar):
        return batch_norm_backward(x, gamma, running_mean, running_var, dy,
                                   dmean, dvar, eps, training)

    gx, ggamma, gdy, gdmean, gdvar = _vjp(
        backward, [x, gamma, dy, dmean, dvar], [ddx, ddgamma, ddbeta])
    return [gx, ggamma, None, None, gdy, gdmean, gdvar]


# ------------------------------------------------------------------ LayerNorm

def _normalize(x, axes, eps):
    """(xhat, rstd) of x over ``axes`` (kept as size-1 axes in rstd)."""
    o = ops()
    xc = x - o.mean(x, axes, keepdims=True)
    rstd = o.rsqrt(o.mean(xc * xc, axes, keepdims=True) + eps)
    return xc * rstd, rstd


def _input_grad(g, xhat, rstd, axes):
    """rstd * (g - mean(g) - xhat * mean(g * xhat)) over ``axes``."""
    o = ops()
    return rstd * (g - o.mean(g, axes, keepdims=True)
                   - xhat * o.mean(g * xhat, axes, keepdims=True))


def layer_norm_backward(x, gamma, dy, axis, eps):
    """What ``LayerNormGrad`` computes, written with ops: (dx, dgamma, dbeta)."""
    o = ops()
    axis = axis % x.ndim
    axes = list(range(axis, x.ndim))
    lead = list(range(axis))
    xhat, rstd = _normalize(x, axes, eps)
    dx = _input_grad(dy * gamma, xhat, rstd, axes)
    return dx, o.sum(dy * xhat, lead), o.sum(dy, lead)


def _register_affine_norm(op_name, attrs, grad_op, backward):
    """The rules of ``op_name`` (x, gamma, beta -> y) and of its backward op
    ``op_name + "Grad"`` (x, gamma, dy -> dx, dgamma, dbeta), whose attributes
    ``attrs`` are passed on, in order, to the ``ops()`` function ``grad_op``
    and to ``backward`` (its composition)."""

    @gradient(op_name)
    def _forward_rule(node, dy):
        x, gamma, _ = node.inputs
        args = [node.attrs[a] for a in attrs]
        dx, dgamma, dbeta = getattr(ops(), grad_op)(x, gamma, dy, *args)
        return [dx, dgamma, dbeta]

    @gradient(op_name + "Grad")
    def _backward_rule(node, ddx, ddgamma, ddbeta):
        x, gamma, dy = node.inputs
        args = [node.attrs[a] for a in attrs]
        return _vjp(lambda x, gamma, dy: backward(x, gamma, dy, *args),
                    [x, gamma, dy], [ddx, ddgamma, ddbeta])


_register_affine_norm("LayerNorm", ("axis", "eps"), "layer_norm_grad",
                      layer_norm_backward)


# ------------------------------------------------------------------ GroupNorm

def group_norm_backward(x, gamma, dy, groups, eps):
    """What ``GroupNormGrad`` computes, written with ops: (dx, dgamma, dbeta)."""
    o = ops()
    n, c = x.shape[0], x.shape[1]
    shape = list(x.shape)
    grouped = [n, groups, c // groups * math.prod(shape[2:])]
    per_channel = [1, c] + [1] * (x.ndim - 2)
    xhat, rstd = _normalize(o.reshape(x, grouped), [2], eps)
    g = o.reshape(dy * o.reshape(gamma, per_channel), grouped)
    dx = o.reshape(_input_grad(g, xhat, rstd, [2]), shape)
    axes = [0] + list(range(2, x.ndim))
    dgamma = o.sum(dy * o.reshape(xhat, shape), axes)
    return dx, dgamma, o.sum(dy, axes)


_register_affine_norm("GroupNorm", ("groups", "eps"), "group_norm_grad",
                      group_norm_backward)
