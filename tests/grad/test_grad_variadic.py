"""Gradients of Neg and of the variadic Concat/Stack through the op-case kit."""

import numpy as np
import pytest

from dragon_sdk.testing import OpCase


def _r(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("order", [1, 2])
def test_neg(order):
    OpCase.of("Neg", [_r(2, 3)]).check_grad(order=order)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("inputs, axis", [
    ([_r(2, 3), _r(1, 3, seed=1)], 0),
    ([_r(2, 1), _r(2, 2, seed=1), _r(2, 3, seed=2)], -1),
])
def test_concat(inputs, axis, order):
    OpCase.of("Concat", [inputs], attrs={"axis": axis}).check_grad(order=order)


@pytest.mark.parametrize("order", [1, 2])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_stack(axis, order):
    OpCase.of("Stack", [[_r(2, 3), _r(2, 3, seed=1)]], attrs={"axis": axis}).check_grad(
        order=order)
