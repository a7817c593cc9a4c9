"""Gradients of the fused ops (Conv2dBiasAct, MatMulBiasAct) against finite
differences, first and second order."""

import numpy as np
import pytest
from dragon_sdk.testing import OpCase


def _arrays(shapes, seed):
    rng = np.random.default_rng(seed)
    # Away from 0 so no pre-activation sits on relu's kink.
    return [rng.uniform(0.2, 1.0, s) * rng.choice([-1.0, 1.0], s)
            for s in shapes]


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_bias_act_grad(activation, bias):
    shapes = [(2, 2, 5, 4), (3, 2, 3, 2)] + ([(3,)] if bias else [])
    case = OpCase.of("Conv2dBiasAct", _arrays(shapes, 1),
                     attrs={"activation": activation, "pads": [1, 0],
                            "strides": [2, 1]})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("shapes, attrs", [
    ([(4, 3), (3, 5), (5,)], {}),
    ([(2, 4, 3), (5, 3), (5,)], {"transpose_b": True}),
    ([(3,), (3, 4)], {}),
])
def test_matmul_bias_act_grad(activation, shapes, attrs):
    case = OpCase.of("MatMulBiasAct", _arrays(shapes, 2),
                     attrs={"activation": activation, **attrs})
    case.check_grad()
    case.check_grad(order=2)
