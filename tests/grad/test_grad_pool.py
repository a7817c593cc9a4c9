"""Gradient rules of the pooling ops and of their gradient helper ops,
checked against central finite differences in float64 (first order, and
second order through nested tapes)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg


def _distinct(seed, shape):
    """Values at least 0.1 apart, so no finite-difference step changes
    which cell of a window is the maximum."""
    n = math.prod(shape)
    rng = np.random.default_rng(seed)
    return (rng.permutation(n).reshape(shape) * 0.1 - n * 0.05
            + rng.uniform(-0.01, 0.01, shape))


MAX_ATTRS = [
    {"kernel_size": [2, 2]},
    {"kernel_size": [3, 3], "strides": [1, 1], "pads": [1, 1]},
    {"kernel_size": [3, 2], "strides": [2, 1], "pads": [1, 1], "ceil_mode": True},
    {"kernel_size": [2, 2], "strides": [1, 2], "dilations": [2, 1]},
]
AVG_ATTRS = [
    {"kernel_size": [2, 2]},
    {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1], "ceil_mode": True},
    {"kernel_size": [3, 2], "strides": [1, 2], "pads": [1, 1],
     "count_include_pad": False},
]
SHAPES = [(2, 2, 5, 4), (1, 1, 3, 3), (0, 2, 4, 4)]


def _ids(values):
    return [",".join(f"{k}={v}" for k, v in a.items()) for a in values]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attrs", MAX_ATTRS, ids=_ids(MAX_ATTRS))
@pytest.mark.parametrize("order", [1, 2])
def test_max_pool2d(attrs, shape, order):
    OpCase.of("MaxPool2d", [_distinct(0, shape)], attrs=attrs).check_grad(order=order)


@pytest.mark.parametrize("attrs", MAX_ATTRS, ids=_ids(MAX_ATTRS))
def test_max_pool2d_grad(attrs):
    x = _distinct(1, (2, 1, 5, 4))
    dy = dg.ops.max_pool2d(dg.tensor(x), **attrs)
    dy = np.random.default_rng(2).standard_normal(dy.shape)
    # wrt dy (linear; its adjoint gathers at the maxima) and wrt x (zero:
    # the selection is piecewise constant), to first and second order.
    case = OpCase.of("MaxPool2dGrad", [x, dy], attrs=attrs)
    case.check_grad(order=1)
    case.check_grad(order=2)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("attrs", AVG_ATTRS, ids=_ids(AVG_ATTRS))
@pytest.mark.parametrize("order", [1, 2])
def test_avg_pool2d(attrs, shape, order):
    x = np.random.default_rng(3).standard_normal(shape)
    OpCase.of("AvgPool2d", [x], attrs=attrs).check_grad(order=order)


@pytest.mark.parametrize("attrs", AVG_ATTRS, ids=_ids(AVG_ATTRS))
@pytest.mark.parametrize("order", [1, 2])
def test_avg_pool2d_grad(attrs, order):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 1, 5, 4))
    dy = rng.standard_normal(dg.ops.avg_pool2d(dg.tensor(x), **attrs).shape)
    OpCase.of("AvgPool2dGrad", [x, dy], attrs=attrs).check_grad(order=order)


ADAPTIVE = [[1, 1], [2, 3], [4, 6]]


@pytest.mark.parametrize("output_size", ADAPTIVE, ids=str)
@pytest.mark.parametrize("order", [1, 2])
def test_adaptive_avg_pool2d(output_size, order):
    x = np.random.default_rng(5).standard_normal((2, 2, 3, 5))
    OpCase.of("AdaptiveAvgPool2d", [x],
              attrs={"output_size": output_size}).check_grad(order=order)


@pytest.mark.parametrize("output_size", ADAPTIVE, ids=str)
@pytest.mark.parametrize("order", [1, 2])
def test_adaptive_avg_pool2d_grad(output_size, order):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 3, 5))
    dy = rng.standard_normal((1, 2) + tuple(output_size))
    OpCase.of("AdaptiveAvgPool2dGrad", [x, dy],
              attrs={"output_size": output_size}).check_grad(order=order)


def test_max_pool2d_gradient_of_ties_is_deterministic():
    """On ties the gradient goes to the first cell of each window, every run,
    through both autograd front ends."""
    x = dg.tensor(np.zeros((1, 1, 4, 4)))
    x.requires_grad = True
    y = dg.ops.max_pool2d(x, [2, 2], [1, 1])
    dg.ops.sum(y).backward()
    want = np.zeros((4, 4))
    want[:3, :3] = 1.0
    np.testing.assert_array_equal(x.grad.numpy()[0, 0], want)
