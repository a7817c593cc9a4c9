"""Gradient of Expm1 (d/dx (e^x - 1) = e^x) against central finite
differences in float64, first and second order, and through autograd."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_sdk.testing import OpCase

SHAPES = [(), (3,), (2, 3)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_expm1_gradient(shape):
    """d/dx (e^x - 1) = e^x, against central finite differences (float64)."""
    x = np.random.default_rng(zlib.crc32(repr(shape).encode())).uniform(-3, 3, shape)
    OpCase.of("Expm1", [np.asarray(x)]).check_grad()


def test_expm1_second_order_gradient():
    x = np.random.default_rng(7).uniform(-2, 2, (2, 3))
    OpCase.of("Expm1", [x]).check_grad(order=2, rtol=1e-4, atol=1e-6)


def test_expm1_gradient_through_autograd_matches_exp():
    x = dg.tensor(np.linspace(-2, 2, 9))
    x.requires_grad = True
    ops.sum(ops.expm1(x)).backward()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(np.linspace(-2, 2, 9)), rtol=1e-15)
