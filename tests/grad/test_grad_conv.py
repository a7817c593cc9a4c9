"""Gradient rules of Conv2d, ConvTranspose2d and Conv2dBackpropFilter,
checked against central finite differences in float64
(``OpCase.check_grad``): first order for every input (bias included) over
strides, 2- and 4-value pads, dilations, groups and 1x1 kernels, and second
order (Hessian-vector products through nested tapes) for all three ops,
since each one's gradient is built from the other two. Shapes are tiny: a
finite-difference check costs two op runs per input element.
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

#: (x shape, w shape, with bias, attributes) for Conv2d.
CONV = [
    ((2, 2, 4, 4), (3, 2, 2, 2), True, {}),
    ((1, 2, 5, 4), (2, 2, 3, 2), True, {"strides": [2, 1], "pads": [1, 1]}),
    ((1, 2, 6, 5), (2, 2, 2, 2), False,
     {"strides": [2, 2], "pads": [0, 1, 1, 0]}),  # a row left over: output_padding
    ((1, 1, 6, 5), (2, 1, 2, 2), False, {"dilations": [2, 1], "pads": [1, 0]}),
    ((1, 4, 3, 3), (4, 2, 2, 2), True, {"groups": 2}),
    ((1, 3, 4, 4), (3, 1, 3, 3), False, {"groups": 3, "pads": [1, 1]}),
    ((2, 3, 3, 2), (2, 3, 1, 1), True, {}),  # 1x1
]

#: (x shape, w shape, with bias, attributes) for ConvTranspose2d.
TRANSPOSE = [
    ((2, 2, 3, 3), (2, 3, 2, 2), True, {}),
    ((1, 2, 2, 3), (2, 2, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}),
    ((1, 2, 3, 2), (2, 1, 2, 2), False, {"dilations": [1, 2]}),
    ((1, 4, 2, 2), (4, 1, 2, 3), True, {"groups": 2, "strides": [1, 2]}),
    ((2, 3, 2, 2), (3, 2, 1, 1), False, {}),  # 1x1
]

#: (x shape, filter shape, attributes) for Conv2dBackpropFilter.
FILTER = [
    ((2, 2, 4, 4), (3, 2, 2, 2), {}),
    ((1, 2, 5, 5), (2, 1, 3, 2),
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "groups": 2}),
    ((1, 1, 5, 4), (2, 1, 2, 2), {"dilations": [2, 1]}),
]


def _id(case):
    x, w = case[0], case[1]
    tag = "x".join(map(str, x)) + "_" + "x".join(map(str, w))
    return tag + "".join(f"-{k}={v}" for k, v in case[-1].items())


def _arrays(shapes, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1.0, 1.0, s) for s in shapes]


def _conv_case(xs, ws, bias, attrs, seed=0):
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    return OpCase.of("Conv2d", _arrays(shapes, seed), attrs=attrs)


def _transpose_case(xs, ws, bias, attrs, seed=0):
    shapes = [xs, ws] + ([(ws[1] * attrs.get("groups", 1),)] if bias else [])
    return OpCase.of("ConvTranspose2d", _arrays(shapes, seed), attrs=attrs)


def _filter_case(xs, fs, attrs, seed=0):
    """Conv2dBackpropFilter with a dy of the matching output shape."""
    x = dg.tensor(np.zeros(xs))
    w = dg.tensor(np.zeros(fs))
    y_shape = tuple(dg.ops.conv2d(x, w, **dg.plugin_api.py_attrs("Conv2d", attrs)).shape)
    return OpCase.of("Conv2dBackpropFilter", _arrays([xs, y_shape], seed),
                     attrs={"filter_shape": list(fs), **attrs})


@pytest.mark.parametrize("xs, ws, bias, attrs", CONV, ids=[_id(c) for c in CONV])
def test_conv2d_grad(xs, ws, bias, attrs):
    """First order, every input (x, w and b when given)."""
    case = _conv_case(xs, ws, bias, attrs)
    case.check_grad()


@pytest.mark.parametrize("xs, ws, bias, attrs", [CONV[0], CONV[2], CONV[4]],
                         ids=[_id(c) for c in (CONV[0], CONV[2], CONV[4])])
def test_conv2d_grad_second_order(xs, ws, bias, attrs):
    """Hessian-vector products: the rule (ConvTranspose2d and
    Conv2dBackpropFilter) is itself differentiable and right."""
    _conv_case(xs, ws, bias, attrs, seed=1).check_grad(order=2)


@pytest.mark.parametrize("xs, ws, bias, attrs", TRANSPOSE,
                         ids=[_id(c) for c in TRANSPOSE])
def test_conv_transpose2d_grad(xs, ws, bias, attrs):
    _transpose_case(xs, ws, bias, attrs).check_grad()


def test_conv_transpose2d_grad_second_order():
    _transpose_case(*TRANSPOSE[1], seed=2).check_grad(order=2)


@pytest.mark.parametrize("xs, fs, attrs", FILTER, ids=[_id(c) for c in FILTER])
def test_conv2d_backprop_filter_grad(xs, fs, attrs):
    _filter_case(xs, fs, attrs).check_grad()


def test_conv2d_backprop_filter_grad_second_order():
    _filter_case(*FILTER[1], seed=3).check_grad(order=2)


def test_conv2d_grad_shapes_float32():
    """Float32 gradients have the inputs' shapes and dtype, for a stride
    that leaves input rows uncovered (the output_padding path)."""
    rng = np.random.default_rng(4)
    x = dg.tensor(rng.standard_normal((2, 3, 8, 7)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    b = dg.tensor(rng.standard_normal(4).astype(np.float32))
    with dg.GradientTape() as tape:
        tape.watch([x, w, b])
        loss = dg.ops.sum(dg.ops.conv2d(x, w, b, strides=[3, 2]))
    dx, dw, db = tape.gradient(loss, [x, w, b])
    for g, t in ((dx, x), (dw, w), (db, b)):
        assert tuple(g.shape) == tuple(t.shape) and g.dtype == t.dtype
    # d loss / d b[o] counts output positions: N * Ho * Wo.
    np.testing.assert_allclose(db.numpy(), np.full(4, 2 * 2 * 3), rtol=1e-6)
