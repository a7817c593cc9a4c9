"""int32 MatMul (quantized ops, ONNX MatMulInteger): exact products with
two's-complement wrap-around, checked against int64 NumPy (exact, then
wrapped to int32) across NumPy matmul shapes, transposes, views and
overflowing values."""

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
