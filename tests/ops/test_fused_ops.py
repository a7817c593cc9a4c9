"""The fused ops Conv2dBiasAct and MatMulBiasAct against float64 NumPy.

The fusion pass writes them into graphs; here they are called directly so
every backend's kernel is held to the unfused reference: act(op(...) + b).
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import FLOAT_DTYPES, LAYOUTS, OpCase, strided

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

from .test_conv import conv2d_ref


def _act(y, activation):
    return np.maximum(y, 0.0) if activation == "relu" else y


def conv2d_bias_act_ref(x, w, b=None, activation="relu", **geo):
    return _act(conv2d_ref(x, w, b, **geo), activation)


def matmul_bias_act_ref(a, b, bias=None, transpose_a=False,
                        transpose_b=False, activation="relu"):
    if transpose_a and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if transpose_b and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b)
    if bias is not None:
        y = y + bias
    return _act(y, activation)


def _arrays(shapes, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    out = [rng.uniform(-1.0, 1.0, s).astype(dtype) for s in shapes]
    return [strided(a) for a in out] if layout == "strided" else out


CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((1, 4, 9, 9), (6, 2, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 1], "groups": 2}),
    ((3, 2, 5, 5), (2, 2, 1, 1), False, {"dilations": [1, 1]}),
    ((1, 2, 8, 8), (3, 2, 3, 3), True,
     {"pads": [1, 0, 2, 1], "dilations": [2, 2]}),
    ((0, 3, 5, 5), (4, 3, 3, 3), True, {"pads": [1, 1]}),   # empty batch
]


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", CONV_CASES)
def test_conv2d_bias_act(xs, ws, bias, attrs, dtype, layout, activation):
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    arrays = _arrays(shapes, dtype, layout, seed=sum(xs) + sum(ws))
    OpCase.of("Conv2dBiasAct", arrays, conv2d_bias_act_ref,
              attrs={"activation": activation, **attrs},
              tol=20).check_forward()


MATMUL_CASES = [
    ((5, 7), (7, 3), True, {}),
    ((4, 6), (3, 6), True, {"transpose_b": True}),
    ((6, 4), (6, 3), False, {"transpose_a": True}),
    ((2, 3, 4), (4, 5), True, {}),            # batch of a, shared b
    ((2, 1, 3, 4), (3, 4, 2), True, {}),      # broadcast batch dims
    ((4,), (4, 3), True, {}),                 # 1-D a
    ((0, 4), (4, 3), True, {}),               # empty rows
    ((3, 0), (0, 2), True, {}),               # empty inner axis: bias only
]


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("sa, sb, bias, attrs", MATMUL_CASES)
def test_matmul_bias_act(sa, sb, bias, attrs, dtype, layout, activation):
    n = sb[-2] if attrs.get("transpose_b") else sb[-1]
    shapes = [sa, sb] + ([(n,)] if bias else [])
    arrays = _arrays(shapes, dtype, layout, seed=len(sa) * 10 + sum(sb))
    OpCase.of("MatMulBiasAct", arrays, matmul_bias_act_ref,
              attrs={"activation": activation, **attrs},
              tol=20).check_forward()


def test_fused_ops_equal_their_unfused_graphs():
    """The fused result is bit-for-bit the op, the add and the relu run
    one after the other (same kernel order per element)."""
    rng = np.random.default_rng(3)
    a = dg.tensor(rng.standard_normal((16, 9)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((9, 5)).astype(np.float32))
    c = dg.tensor(rng.standard_normal(5).astype(np.float32))
    fused = dg.ops.matmul_bias_act(a, b, c).numpy()
    plain = dg.ops.relu(dg.ops.matmul(a, b) + c).numpy()
    np.testing.assert_allclose(fused, plain, rtol=1e-6, atol=1e-6)
    assert (fused >= 0).all() and (fused == 0).any()


@pytest.mark.parametrize("op, args, kwargs, words", [
    ("matmul_bias_act", [(3, 4), (4, 5), (4,)], {}, ["bias", "[5]", "[4]"]),
    ("matmul_bias_act", [(3, 4), (4, 5), (5,)], {"activation": "tanh"},
     ["activation", "tanh"]),
    ("conv2d_bias_act", [(1, 2, 5, 5), (3, 2, 3, 3), (2,)], {},
     ["bias", "[3]"]),
    ("conv2d_bias_act", [(1, 2, 5, 5), (3, 2, 3, 3)], {"activation": "gelu"},
     ["activation", "gelu"]),
])
def test_fused_op_errors_name_the_problem(op, args, kwargs, words):
    tensors = [dg.tensor(np.zeros(s, np.float32)) for s in args]
    with pytest.raises(InvalidArgumentError) as info:
        getattr(dg.ops, op)(*tensors, **kwargs)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_fused_relu_keeps_nan_and_clears_negative_zero(dtype):
    """The fused relu has the core Relu's semantics whatever backend serves
    it (mkldnn's relu post-op alone would turn NaN into 0): NaN and inf
    pre-activations give NaN and inf, -inf and -0 give +0."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((6, 4)).astype(dtype)
    a[1, 2], a[3, 0] = np.nan, np.inf
    b = np.abs(rng.standard_normal((4, 5))).astype(dtype)
    c = np.zeros(5, dtype)
    fused = dg.ops.matmul_bias_act(dg.tensor(a), dg.tensor(b), dg.tensor(c)).numpy()
    plain = dg.ops.relu(dg.ops.matmul(dg.tensor(a), dg.tensor(b)) + dg.tensor(c)).numpy()
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
    assert np.isnan(fused[1]).all() and np.isinf(fused[3]).any()
    np.testing.assert_allclose(fused, plain, rtol=1e-5, atol=1e-6)
    neg = dg.ops.matmul_bias_act(dg.tensor(np.array([[-0.0], [-np.inf]], dtype)),
                                 dg.tensor(np.array([[1.0]], dtype))).numpy()
    assert (neg == 0).all() and not np.signbit(neg).any()

    x = rng.standard_normal((2, 3, 6, 6)).astype(dtype)
    x[0, 1, 2, 2] = np.nan
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    fused = dg.ops.conv2d_bias_act(dg.tensor(x), dg.tensor(w), pads=[1, 1]).numpy()
    plain = dg.ops.relu(dg.ops.conv2d(dg.tensor(x), dg.tensor(w), pads=[1, 1])).numpy()
    np.testing.assert_array_equal(np.isnan(fused), np.isnan(plain))
    assert np.isnan(fused).sum() > 0
    np.testing.assert_allclose(fused, plain, rtol=1e-4, atol=1e-4)
