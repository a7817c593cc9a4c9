"""MatMul with NumPy matmul semantics (docs/ops.md, "Linear algebra")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import FLOAT_DTYPES, OpCase, op_case


def _matmul(a, b, transpose_a=False, transpose_b=False):
    if transpose_a and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if transpose_b and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def _operands(rng, dt, shapes, attrs):
    """Operands whose shapes *after* the transpose flags are `shapes`."""
    out = []
    for shape, flag in zip(shapes, ("transpose_a", "transpose_b")):
        shape = tuple(shape)
        if attrs.get(flag) and len(shape) >= 2:
            shape = shape[:-2] + (shape[-1], shape[-2])
        out.append(rng.standard_normal(shape).astype(dt))
    return out


#: Logical (post-transpose) operand shapes.
SHAPE_PAIRS = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((4,), (4,)),            # dot product: 0-d result
    ((4,), (4, 3)),          # vector @ matrix
    ((3, 4), (4,)),          # matrix @ vector
    ((2, 3, 4), (4, 5)),     # batch @ matrix
    ((4,), (2, 4, 3)),       # vector @ batch
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch dims
    ((0, 4), (4, 3)),        # empty rows
    ((3, 0), (0, 5)),        # empty inner dim: zeros
    ((2, 0, 4), (4, 3)),     # empty batch
    ((33, 70), (70, 65)),    # larger than one register tile in every dim
]

TRANSPOSES = [{}, {"transpose_a": True}, {"transpose_b": True},
              {"transpose_a": True, "transpose_b": True}]


@op_case("MatMul", inputs=_operands, reference=_matmul, dtypes=FLOAT_DTYPES,
         attrs=TRANSPOSES, shapes=SHAPE_PAIRS, tol=20, py_name="matmul")
def test_matmul(case):
    """matmul matches NumPy for every operand rank, batch and transpose."""
    case.check_forward()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_large(dtype):
    """A product big enough for blocked/parallel GEMM paths."""
    rng = np.random.default_rng(7)
    a = rng.standard_normal((130, 257)).astype(dtype)
    b = rng.standard_normal((257, 129)).astype(dtype)
    OpCase.of("MatMul", [a, b], _matmul, tol=100,
              py_name="matmul").check_forward()
    OpCase.of("MatMul", [b.T, a.T], _matmul, tol=100,
              py_name="matmul").check_forward()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_empty_inner_dimension_gives_zeros(dtype):
    """K = 0: the product is all zeros, not uninitialised memory."""
    a = np.ones((3, 0), dtype)
    b = np.ones((0, 4), dtype)
    out = OpCase.of("MatMul", [a, b], _matmul,
                    py_name="matmul").check_forward()[0]
    np.testing.assert_array_equal(out, np.zeros((3, 4), dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_transpose_is_ignored_for_vectors(dtype):
    """transpose_a/transpose_b do nothing to 1-D operands."""
    a = np.arange(3, dtype=dtype)
    b = np.arange(6, dtype=dtype).reshape(3, 2)
    out = OpCase.of("MatMul", [a, b], _matmul, py_name="matmul",
                    attrs={"transpose_a": True}).check_forward()[0]
    np.testing.assert_array_equal(out, a @ b)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_matmul_propagates_nan_and_inf(dtype):
    """IEEE values flow through the product (no fast-math shortcuts)."""
    a = np.array([[np.nan, 1.0], [np.inf, 0.0], [1.0, 2.0]], dtype)
    b = np.array([[1.0, 0.0], [2.0, 3.0]], dtype)
    out = OpCase.of("MatMul", [a, b], _matmul,
                    py_name="matmul").check_forward()[0]
    assert np.isnan(out[0]).all()
    assert np.isposinf(out[1, 0]) and np.isnan(out[1, 1])  # inf * 0 = NaN
