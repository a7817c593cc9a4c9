"""Gradients of Mod, Fmod and the float functions of unary_math.cc against
central finite differences in float64, first and second order, with
broadcasting for the binary ops. Inputs stay away from the jumps of Mod /
Fmod (where a / b is an integer) and the ends of each function's domain."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

SHAPES = [(), (3,), (2, 3)]


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


UNARY = [
    ("Tan", -1.2, 1.2),
    ("Asin", -0.9, 0.9),
    ("Acos", -0.9, 0.9),
    ("Atan", -3.0, 3.0),
    ("Sinh", -2.0, 2.0),
    ("Cosh", -2.0, 2.0),
    ("Asinh", -3.0, 3.0),
    ("Acosh", 1.2, 4.0),
    ("Atanh", -0.9, 0.9),
    ("Erf", -2.5, 2.5),
]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("op, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_first_order(op, low, high, shape):
    x = _rng(op, shape).uniform(low, high, shape)
    OpCase.of(op, [np.asarray(x)]).check_grad()


@pytest.mark.parametrize("op, low, high", UNARY, ids=[u[0] for u in UNARY])
def test_unary_second_order(op, low, high):
    x = _rng(op, "2nd").uniform(low, high, (2, 3))
    OpCase.of(op, [x]).check_grad(order=2, rtol=1e-4, atol=1e-6)


def _away_from_jumps(rng, shape_a, shape_b):
    """a, b with every a / b at least 0.1 from an integer (Mod and Fmod jump
    there); drawn again whole until so (about one try in four succeeds)."""
    for _ in range(1000):
        b = rng.uniform(0.5, 2.0, shape_b) * np.where(rng.random(shape_b) < 0.5, -1.0, 1.0)
        a = rng.uniform(-5.0, 5.0, shape_a)
        q = a / b
        if (np.abs(q - np.round(q)) >= 0.1).all():
            return a, b
    raise AssertionError("could not draw operands away from the jumps")


BINARY_SHAPES = [((3,), (3,)), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2,)), ((), ())]


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=str)
@pytest.mark.parametrize("op", ["Mod", "Fmod"])
def test_mod_fmod(op, shapes):
    a, b = _away_from_jumps(_rng(op, shapes), *shapes)
    OpCase.of(op, [np.asarray(a), np.asarray(b)]).check_grad()
    OpCase.of(op, [np.asarray(a), np.asarray(b)]).check_grad(order=2, rtol=1e-4, atol=1e-6)
