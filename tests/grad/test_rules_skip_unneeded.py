"""Gradient rules skip the operands the backward pass wants no gradient
for (issue 21): a constant factor's product and sum, a loss target's
negation. Values checked against float64 NumPy; op lists from
dragon_core.profiler."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg


def _backward_ops(loss_fn, *tensors):
    loss = loss_fn(*tensors)
    with dg.profiler.profile() as prof:
        loss.backward()
    return [e.op for e in prof.events if e.depth == 0]


@pytest.fixture
def rng():
    return np.random.default_rng(11)


def test_mul_by_constant_computes_one_product(rng):
    x = dg.tensor(rng.standard_normal((4, 5)))
    x.requires_grad = True
    types = _backward_ops(lambda x: (x * 0.125).sum(), x)
    assert types.count("Mul") == 1 and "Sum" not in types and "ReduceSum" not in types[1:], \
        types
    np.testing.assert_array_equal(x.grad.numpy(), np.full((4, 5), 0.125))


@pytest.mark.parametrize("op", ["mul", "div", "sub"])
def test_both_operands_still_differentiated(rng, op):
    a0 = rng.standard_normal((3, 4))
    b0 = rng.standard_normal((4,)) + 3.0
    a, b = dg.tensor(a0), dg.tensor(b0)
    a.requires_grad = True
    b.requires_grad = True
    f = {"mul": lambda a, b: a * b, "div": lambda a, b: a / b, "sub": lambda a, b: a - b}[op]
    f(a, b).sum().backward()
    ga = {"mul": np.broadcast_to(b0, (3, 4)), "div": np.broadcast_to(1 / b0, (3, 4)),
          "sub": np.ones((3, 4))}[op]
    gb = {"mul": a0.sum(0), "div": -(a0 / b0 ** 2).sum(0), "sub": -np.full(4, 3.0)}[op]
    np.testing.assert_allclose(a.grad.numpy(), ga, rtol=1e-14)
    np.testing.assert_allclose(b.grad.numpy(), gb, rtol=1e-13)


@pytest.mark.parametrize("op", ["mul", "div", "sub"])
def test_constant_second_operand_gets_no_work(rng, op):
    a = dg.tensor(rng.standard_normal((3, 4)))
    a.requires_grad = True
    b = dg.tensor(rng.standard_normal((3, 4)) + 3.0)
    f = {"mul": lambda a: a * b, "div": lambda a: a / b, "sub": lambda a: a - b}[op]
    types = _backward_ops(lambda a: f(a).sum(), a)
    assert "Neg" not in types, types
    assert types.count("Mul") <= (1 if op == "mul" else 0), types
    ref = {"mul": b.numpy(), "div": 1 / b.numpy(), "sub": np.ones((3, 4))}[op]
    np.testing.assert_allclose(a.grad.numpy(), ref, rtol=1e-14)


def test_constant_first_operand(rng):
    a = dg.tensor(rng.standard_normal((3, 4)))
    b = dg.tensor(rng.standard_normal((3, 4)))
    b.requires_grad = True
    types = _backward_ops(lambda b: (a * b).sum(), b)
    assert types.count("Mul") == 1, types
    np.testing.assert_array_equal(b.grad.numpy(), a.numpy())


@pytest.mark.parametrize("loss", ["mse_loss", "l1_loss", "smooth_l1_loss"])
def test_loss_target_without_grad_is_not_differentiated(rng, loss):
    x0 = rng.standard_normal((5, 3))
    t0 = rng.standard_normal((5, 3))
    x, t = dg.tensor(x0), dg.tensor(t0)
    x.requires_grad = True
    fn = getattr(dg.nn.functional, loss)
    types = _backward_ops(lambda x: fn(x, t), x)
    assert "Neg" not in types, types
    d = x0 - t0
    ref = {"mse_loss": 2 * d / d.size, "l1_loss": np.sign(d) / d.size,
           "smooth_l1_loss": np.where(np.abs(d) < 1, d, np.sign(d)) / d.size}[loss]
    np.testing.assert_allclose(x.grad.numpy(), ref, rtol=1e-13)
    # a target that requires grad still gets -g
    x2, t2 = dg.tensor(x0), dg.tensor(t0)
    x2.requires_grad = True
    t2.requires_grad = True
    fn(x2, t2).backward()
    np.testing.assert_allclose(t2.grad.numpy(), -ref, rtol=1e-13)
