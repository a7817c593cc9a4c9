"""Gradient rules of BatchNorm, LayerNorm, GroupNorm and of their backward
ops, checked against central finite differences in float64: first order
(through the backward kernels) and second order (through the op
compositions the backward ops are differentiated with)."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg


def _rng(seed):
    return np.random.default_rng(seed)


def _bn_inputs(seed, shape):
    rng = _rng(seed)
    c = (shape[1],)
    return [rng.uniform(1.0, 3.0, shape), rng.uniform(0.5, 1.5, c), rng.uniform(-1, 1, c),
            rng.uniform(1.0, 3.0, c), rng.uniform(0.5, 2.0, c)]


BN_SHAPES = [(4, 3), (2, 3, 4), (1, 2, 3, 3), (3, 2, 2, 1)]


@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("order", [1, 2])
def test_batch_norm(shape, training, order):
    # The loss weighs all three outputs, so the batch_mean / batch_var
    # gradients are checked too; running_mean / running_var are no-grad.
    case = OpCase.of("BatchNorm", _bn_inputs(0, shape), attrs={"training": training})
    case.check_grad(order=order)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_grad(training):
    rng = _rng(1)
    shape = (3, 2, 2)
    x, gamma, _, rm, rv = _bn_inputs(2, shape)
    inputs = [x, gamma, rm, rv, rng.standard_normal(shape),
              rng.standard_normal(2), rng.standard_normal(2)]
    case = OpCase.of("BatchNormGrad", inputs, attrs={"training": training, "eps": 1e-3})
    case.check_grad(order=1)


def test_batch_norm_empty_batch_has_zero_parameter_gradients():
    x = dg.tensor(np.zeros((0, 3)))
    p = [dg.tensor(np.ones(3)) for _ in range(4)]
    with dg.GradientTape() as tape:
        tape.watch([x, p[0], p[1]])
        y, _, _ = dg.ops.batch_norm(x, *p)
        loss = dg.ops.sum(y)
    dx, dgamma, dbeta = tape.gradient(loss, [x, p[0], p[1]])
    assert dx.shape == (0, 3)
    np.testing.assert_array_equal(dgamma.numpy(), 0.0)
    np.testing.assert_array_equal(dbeta.numpy(), 0.0)


LN_CASES = [((3, 4), -1), ((2, 3, 4), 1), ((2, 3, 2), 0), ((1, 5), -1)]


def _ln_inputs(seed, shape, axis):
    rng = _rng(seed)
    p = shape[axis % len(shape):]
    return [rng.uniform(1.0, 3.0, shape), rng.uniform(0.5, 1.5, p), rng.uniform(-1, 1, p)]


@pytest.mark.parametrize("shape, axis", LN_CASES, ids=str)
@pytest.mark.parametrize("order", [1, 2])
def test_layer_norm(shape, axis, order):
    OpCase.of("LayerNorm", _ln_inputs(3, shape, axis),
              attrs={"axis": axis}).check_grad(order=order)


def test_layer_norm_grad():
    x, gamma, _ = _ln_inputs(4, (3, 4), -1)
    dy = _rng(5).standard_normal((3, 4))
    OpCase.of("LayerNormGrad", [x, gamma, dy], attrs={"eps": 1e-3}).check_grad(order=1)


GN_CASES = [((2, 4), 2), ((2, 4, 3), 2), ((1, 6, 2, 2), 3), ((2, 3, 2), 1), ((2, 2, 3), 2)]


def _gn_inputs(seed, shape):
    rng = _rng(seed)
    c = (shape[1],)
    return [rng.uniform(1.0, 3.0, shape), rng.uniform(0.5, 1.5, c), rng.uniform(-1, 1, c)]


@pytest.mark.parametrize("shape, groups", GN_CASES, ids=str)
@pytest.mark.parametrize("order", [1, 2])
def test_group_norm(shape, groups, order):
    OpCase.of("GroupNorm", _gn_inputs(6, shape),
              attrs={"groups": groups}).check_grad(order=order)


def test_group_norm_grad():
    x, gamma, _ = _gn_inputs(7, (2, 4, 3))
    dy = _rng(8).standard_normal((2, 4, 3))
    OpCase.of("GroupNormGrad", [x, gamma, dy],
              attrs={"groups": 2, "eps": 1e-3}).check_grad(order=1)


def test_third_order_through_layer_norm():
    """d^3/dx^3 of sum(layer_norm(x)^3) along a direction, against finite
    differences of the analytic second derivative."""
    rng = _rng(9)
    x0 = rng.uniform(1.0, 3.0, (2, 3))
    v = rng.standard_normal((2, 3))
    gamma = dg.tensor(rng.uniform(0.5, 1.5, 3))
    beta = dg.tensor(rng.uniform(-1, 1, 3))

    def second(xa, want_third):
        x = dg.tensor(xa)
        vt = dg.tensor(v)
        with dg.GradientTape() as t3:
            t3.watch(x)
            with dg.GradientTape() as t2:
                t2.watch(x)
                with dg.GradientTape() as t1:
                    t1.watch(x)
                    y = dg.ops.layer_norm(x, gamma, beta)
                    loss = dg.ops.sum(y * y * y)
                g = t1.gradient(loss, x)
                gv = dg.ops.sum(g * vt)
            h = t2.gradient(gv, x)
            hv = dg.ops.sum(h * vt)
        if not want_third:
            return hv.item()
        return t3.gradient(hv, x).numpy()

    third = second(x0, True)
    eps = 1e-5
    numeric = np.zeros_like(x0)
    for i in range(x0.size):
        d = np.zeros_like(x0)
        d.flat[i] = eps
        numeric.flat[i] = (second(x0 + d, False) - second(x0 - d, False)) / (2 * eps)
    np.testing.assert_allclose(third, numeric, rtol=1e-5, atol=1e-6)


def test_gradient_penalty_matches_in_graph_mode():
    """Second order (the backward ops' rules, with their private tapes)
    traced by @dg.function gives the eager result."""
    rng = _rng(10)
    x = dg.tensor(rng.uniform(1.0, 3.0, (3, 2, 2)))
    gamma = dg.tensor(rng.uniform(0.5, 1.5, 2))
    beta = dg.tensor(rng.uniform(-1, 1, 2))
    rm, rv = dg.tensor(np.zeros(2)), dg.tensor(np.ones(2))

    def penalty_grads(x, gamma, beta, rm, rv):
        with dg.GradientTape() as outer:
            outer.watch([x, gamma])
            with dg.GradientTape() as inner:
                inner.watch(x)
                y, _, _ = dg.ops.batch_norm(x, gamma, beta, rm, rv)
                h = dg.ops.group_norm(y * y, gamma, beta, 1)
                h = dg.ops.layer_norm(h, gamma, beta)
                loss = dg.ops.sum(h * h * h)
            dx = inner.gradient(loss, x)
            penalty = dg.ops.sum(dx * dx)
        return outer.gradient(penalty, [x, gamma])

    args = (x, gamma, beta, rm, rv)
    eager = [t.numpy() for t in penalty_grads(*args)]
    graph = [t.numpy() for t in dg.function(penalty_grads)(*args)]
    for e, g in zip(eager, graph):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
