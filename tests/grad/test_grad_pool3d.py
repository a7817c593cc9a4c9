"""Gradients of MaxPool3d, AvgPool3d and AvgPool3dGrad (``_grads/pool3d.py``)
against central finite differences in float64, first and second order."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

ATTRS = [
    {"kernel_size": [2]},
    {"kernel_size": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 1, 1], "ceil_mode": True},
    {"kernel_size": [3], "pads": [0, 1, 1, 1, 0, 1]},
]


def _distinct(shape, seed):
    n = int(np.prod(shape))
    return (np.random.default_rng(seed).permutation(n) * 0.1).reshape(shape)


@pytest.mark.parametrize("attrs", ATTRS, ids=str)
def test_max_pool3d(attrs):
    case = OpCase.of("MaxPool3d", [_distinct((1, 2, 4, 5, 4), 0)],
                     attrs=dict(attrs, dilations=[1, 1, 1]))
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("cip", [True, False])
@pytest.mark.parametrize("attrs", ATTRS, ids=str)
def test_avg_pool3d(attrs, cip):
    x = np.random.default_rng(1).standard_normal((1, 2, 4, 5, 4))
    case = OpCase.of("AvgPool3d", [x], attrs=dict(attrs, count_include_pad=cip))
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("attrs", ATTRS, ids=str)
def test_avg_pool3d_grad(attrs):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 4, 5, 4))
    y = dg.ops.avg_pool3d(dg.tensor(x), **dg.plugin_api.py_attrs("AvgPool3d", attrs))
    dy = rng.standard_normal(tuple(y.shape))
    OpCase.of("AvgPool3dGrad", [x, dy], attrs=attrs).check_grad(wrt=[1])
