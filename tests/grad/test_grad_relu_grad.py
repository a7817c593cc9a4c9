"""Gradient of ReluGrad (``dragon_core/_grads/unary.py``) against central
finite differences in float64: linear in dy with Relu's mask, piecewise
constant in x (no gradient). Relu's own first and second order are in
test_grad_unary.py; its rule is this op.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase

SHAPES = [(), (3,), (2, 3), (2, 3, 1, 1)]


def _x(rng, shape):
    """|x| in [0.2, 2] with a random sign (away from the step at 0)."""
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return np.asarray(rng.uniform(0.2, 2.0, shape) * sign)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_relu_grad_gradient(shape, order):
    rng = np.random.default_rng(len(shape) * 10 + order)
    case = OpCase.of("ReluGrad", [_x(rng, shape), np.asarray(rng.standard_normal(shape))])
    case.check_grad(order=order)      # wrt dy (x is marked no-grad)


def test_relu_third_order_through_relu_grad():
    """d/dx of <d relu / dx, v> is zero away from 0, and the rule of the
    rule (ReluGrad's) keeps the mask: the gradient with respect to the
    upstream gradient is ReluGrad(x, .) again."""
    rng = np.random.default_rng(3)
    xv = _x(rng, (5,))
    x = dg.tensor(xv)
    dy = dg.tensor(rng.standard_normal(5))
    v = dg.tensor(rng.standard_normal(5))
    with dg.GradientTape() as outer:
        outer.watch([x, dy])
        g = dg.ops.relu_grad(x, dy)
        s = dg.ops.sum(g * v)
    gx, gdy = outer.gradient(s, [x, dy], unconnected_gradients="zero")
    np.testing.assert_array_equal(gx.numpy(), np.zeros(5))
    np.testing.assert_array_equal(gdy.numpy(), np.where(xv > 0, v.numpy(), 0.0))
