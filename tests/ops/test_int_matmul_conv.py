"""int32 MatMul and Conv2d (quantized ops, ONNX MatMulInteger and
ConvInteger): exact products with two's-complement wrap-around, checked
against exact int64 / float64 NumPy references wrapped to int32, across
NumPy matmul shapes, transposes, views, conv geometries and overflowing
values."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import run_op

import dragon_core as dg
from dragon_core.errors import DragonError


def _ref(a, b, transpose_a=False, transpose_b=False):
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    if transpose_a and a64.ndim >= 2:
        a64 = np.swapaxes(a64, -1, -2)
    if transpose_b and b64.ndim >= 2:
        b64 = np.swapaxes(b64, -1, -2)
    # int64 products and sums wrap modulo 2^64, whose low 32 bits are the
    # exact int32 wrap-around.
    with np.errstate(over="ignore"):
        return np.matmul(a64, b64).astype(np.int32)


SHAPES = [
    ((3, 4), (4, 5), {}),
    ((2, 1, 3, 4), (3, 4, 2), {}),
    ((4,), (4, 3), {}),
    ((2, 3, 4), (4,), {}),
    ((4,), (4,), {}),
    ((4, 3), (5, 4), {"transpose_a": True, "transpose_b": True}),
    ((2, 4, 3), (3, 4), {"transpose_a": True, "transpose_b": True}),
    ((2, 0), (0, 3), {}),
    ((0, 3), (3, 2), {}),
    ((9, 70), (70, 33), {}),
]


@pytest.mark.parametrize("a_shape,b_shape,attrs", SHAPES)
def test_int32_matmul_matches_numpy(a_shape, b_shape, attrs):
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, a_shape).astype(np.int32)
    b = rng.integers(-128, 128, b_shape).astype(np.int32)
    y = run_op("MatMul", a, b, **attrs)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, _ref(a, b, **attrs))


def test_int32_matmul_wraps_like_twos_complement():
    rng = np.random.default_rng(1)
    a = rng.integers(-2**31, 2**31, (5, 7), dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (7, 6), dtype=np.int64).astype(np.int32)
    np.testing.assert_array_equal(run_op("MatMul", a, b), _ref(a, b))
    big = np.full((1, 2), 2**31 - 1, np.int32)
    np.testing.assert_array_equal(run_op("MatMul", big, big.T.copy()),
                                  np.array([[2]], np.int32))  # 2 * (2^31-1)^2 mod 2^32


def test_int32_matmul_of_strided_view():
    a = np.arange(15, dtype=np.int32).reshape(5, 3)
    b = np.arange(20, dtype=np.int32).reshape(5, 4) - 7
    at = dg.ops.transpose(dg.tensor(a), [1, 0])
    np.testing.assert_array_equal(dg.ops.matmul(at, dg.tensor(b)).numpy(),
                                  _ref(a.T.copy(), b))


def test_matmul_other_integer_dtypes_still_raise():
    a = np.ones((2, 2), np.int64)
    with pytest.raises(DragonError, match="MatMul"):
        run_op("MatMul", a, a)


def test_int32_matmul_mixed_dtypes_raise():
    with pytest.raises(DragonError, match="MatMul"):
        run_op("MatMul", np.ones((2, 2), np.int32), np.ones((2, 2), np.float32))


def test_int32_matmul_in_graph_mode_with_bias_and_relu():
    """The fusion pass must not turn an int32 MatMul -> Add -> Relu into the
    float-only MatMulBiasAct: the compiled graph matches NumPy."""
    a = np.arange(6, dtype=np.int32).reshape(2, 3) - 2
    b = np.arange(12, dtype=np.int32).reshape(3, 4) - 5
    c = np.arange(4, dtype=np.int32) - 2

    @dg.function
    def f(x, w, bias):
        return dg.ops.relu(dg.ops.matmul(x, w) + bias)

    y = f(dg.tensor(a), dg.tensor(b), dg.tensor(c)).numpy()
    np.testing.assert_array_equal(y, np.maximum(a.astype(np.int64) @ b + c, 0))


# ------------------------------------------------------------ int32 Conv2d

CONV = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 4, 6, 6), (4, 2, 3, 2), {"strides": [2, 1], "pads": [1, 0], "groups": 2}),
    ((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 0, 2]}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
]


@pytest.mark.parametrize("xs,ws,attrs", CONV)
@pytest.mark.parametrize("bias", [False, True])
def test_int32_conv2d_matches_exact_reference(xs, ws, attrs, bias):
    from .test_conv import conv2d_ref
    rng = np.random.default_rng(2)
    x = rng.integers(-128, 128, xs).astype(np.int32)
    w = rng.integers(-128, 128, ws).astype(np.int32)
    b = rng.integers(-1000, 1000, ws[:1]).astype(np.int32)
    args = (x, w, b) if bias else (x, w)
    y = run_op("Conv2d", *args, **attrs)
    assert y.dtype == np.int32
    # float64 holds these sums exactly (|sum| < 2^53).
    ref = conv2d_ref(*(a.astype(np.float64) for a in args), **attrs)
    np.testing.assert_array_equal(y, ref.astype(np.int64).astype(np.int32))


def test_int32_conv2d_wraps_like_twos_complement():
    x = np.full((1, 1, 2, 2), 2**31 - 1, np.int32)
    w = np.full((1, 1, 2, 2), 2**31 - 1, np.int32)
    # 4 * (2^31 - 1)^2 = 4 * (2^62 - 2^32 + 1) = 4 mod 2^32.
    np.testing.assert_array_equal(run_op("Conv2d", x, w), np.full((1, 1, 1, 1), 4, np.int32))
    rng = np.random.default_rng(3)
    x = rng.integers(-2**31, 2**31, (1, 2, 4, 4), dtype=np.int64).astype(np.int32)
    w = rng.integers(-2**31, 2**31, (2, 2, 3, 3), dtype=np.int64).astype(np.int32)
    from .test_conv import conv2d_ref  # noqa: F401 - the geometry is checked above
    ref = np.zeros((1, 2, 2, 2), np.int64)
    for o in range(2):
        for i in range(2):
            for j in range(2):
                with np.errstate(over="ignore"):
                    ref[0, o, i, j] = np.sum(x[0, :, i:i + 3, j:j + 3].astype(np.int64)
                                             * w[o].astype(np.int64))
    np.testing.assert_array_equal(run_op("Conv2d", x, w), ref.astype(np.int32))


def test_conv2d_other_integer_dtypes_raise():
    x = np.ones((1, 1, 3, 3), np.int64)
    with pytest.raises(DragonError, match="Conv2d"):
        run_op("Conv2d", x, np.ones((1, 1, 2, 2), np.int64))


def test_int32_conv2d_in_graph_mode_with_bias_and_relu():
    """Conv2dBiasAct is float-only: the fusion pass must leave an int32
    Conv2d -> Add -> Relu alone, and the graph matches NumPy."""
    from .test_conv import conv2d_ref
    rng = np.random.default_rng(4)
    x = rng.integers(-50, 50, (1, 2, 5, 5)).astype(np.int32)
    w = rng.integers(-50, 50, (3, 2, 3, 3)).astype(np.int32)
    b = rng.integers(-500, 500, (1, 3, 1, 1)).astype(np.int32)

    @dg.function
    def f(x, w, b):
        return dg.ops.relu(dg.ops.conv2d(x, w) + b)

    y = f(dg.tensor(x), dg.tensor(w), dg.tensor(b)).numpy()
    ref = np.maximum(conv2d_ref(x.astype(np.float64), w.astype(np.float64)) + b, 0)
    np.testing.assert_array_equal(y, ref.astype(np.int32))
