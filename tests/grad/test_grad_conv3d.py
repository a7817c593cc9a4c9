"""Gradients of Conv3d, ConvTranspose3d and Conv3dBackpropFilter
(``_grads/conv3d.py``) against central finite differences in float64,
first and second order."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

GEOS = [
    ({}, (1, 2, 3, 3, 3), (2, 2, 2, 2, 2)),
    ({"strides": [2, 1, 2], "pads": [1, 0, 1], "groups": 2}, (1, 2, 4, 3, 4), (2, 1, 2, 2, 2)),
    ({"dilations": [2, 1, 1], "pads": [0, 1, 0, 1, 0, 1]}, (2, 1, 4, 3, 3), (2, 1, 2, 2, 2)),
]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("geo", GEOS, ids=["plain", "strided_grouped", "dilated_asym"])
def test_conv3d(geo, bias):
    attrs, xs, ws = geo
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(xs), rng.standard_normal(ws)]
    if bias:
        ins.append(rng.standard_normal(ws[0]))
    case = OpCase.of("Conv3d", ins, attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("geo", GEOS, ids=["plain", "strided_grouped", "dilated_asym"])
def test_conv_transpose3d(geo):
    attrs, xs, ws = geo
    rng = np.random.default_rng(1)
    x = rng.standard_normal((xs[0], ws[0], 2, 3, 2))
    w = rng.standard_normal(ws)
    case = OpCase.of("ConvTranspose3d", [x, w, rng.standard_normal(ws[1] * attrs.get(
        "groups", 1))], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("geo", GEOS, ids=["plain", "strided_grouped", "dilated_asym"])
def test_conv3d_backprop_filter(geo):
    import dragon_core as dg
    attrs, xs, ws = geo
    rng = np.random.default_rng(2)
    x = rng.standard_normal(xs)
    y = dg.ops.conv3d(dg.tensor(x), dg.tensor(np.zeros(ws)),
                      **dg.plugin_api.py_attrs("Conv3d", attrs))
    dy = rng.standard_normal(tuple(y.shape))
    case = OpCase.of("Conv3dBackpropFilter", [x, dy], attrs=dict(attrs, filter_shape=list(ws)))
    case.check_grad()
