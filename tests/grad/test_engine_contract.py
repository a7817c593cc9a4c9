"""The backward loop's checks on what a gradient rule returns: one
gradient per input, each of its input's shape; a rule that breaks either
gets an error naming the op, never a silently wrong .grad."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import _autograd, ops
from dragon_core.errors import InvalidArgumentError


@pytest.fixture
def exp_rule(monkeypatch):
    """Replace Exp's rule for one test."""
    def install(rule):
        monkeypatch.setitem(_autograd._RULES, "Exp", rule)
    return install


def _x():
    x = dg.tensor(np.array([[0.5, 1.0, -1.0], [2.0, 0.0, 0.25]], np.float32))
    x.requires_grad = True
    return x


def test_a_gradient_of_the_wrong_shape_names_the_op(exp_rule):
    exp_rule(lambda node, dy: [ops.sum(dy, [0])])
    x = _x()
    with pytest.raises(InvalidArgumentError,
                       match=r"gradient rule of Exp returned shape \(3,\) for input 0, "
                             r"whose shape is \(2, 3\)"):
        ops.sum(ops.exp(x)).backward()
    assert x.grad is None


def test_the_wrong_number_of_gradients_names_the_op(exp_rule):
    exp_rule(lambda node, dy: [dy, dy])
    x = _x()
    with pytest.raises(InvalidArgumentError,
                       match="gradient rule of Exp returned 2 gradients for 1 inputs"):
        ops.sum(ops.exp(x)).backward()


def test_gradients_of_a_shared_input_accumulate():
    # x feeds three ops: the loop adds the three gradients
    xv = np.array([0.5, -1.0, 2.0])
    x = dg.tensor(xv)
    x.requires_grad = True
    y = ops.sum(ops.exp(x) + ops.tanh(x) + x * x)
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xv) + 1 - np.tanh(xv) ** 2 + 2 * xv,
                               rtol=1e-12)
