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


# ------------------------------------------------------------------ Det

def _det_ref(x):
    x = np.asarray(x, np.float64)
    if x.shape[-1] == 0:
        return np.ones(x.shape[:-2])
    return np.linalg.det(x)


def _singular(rng, n, rank):
    """An n x n matrix of the given rank (float64)."""
    a = rng.standard_normal((n, rank))
    b = rng.standard_normal((rank, n))
    return a @ b


DET_SHAPES = [(1, 1), (2, 2), (3, 3), (5, 5), (4, 3, 3), (2, 3, 4, 4), (0, 0), (2, 0, 0),
              (0, 3, 3), (16, 16)]


@pytest.mark.parametrize("shape", DET_SHAPES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det(dtype, shape, rng):
    """np.linalg.det in float64 (a 0x0 matrix: 1); batches, empty batches."""
    x = rng.standard_normal(shape).astype(dtype)
    OpCase.of("Det", [x], _det_ref).check_forward()


def test_det_singular_and_permuted(rng):
    """Exactly singular matrices give 0 (a zero pivot, a repeated row);
    row swaps flip the sign; a permutation matrix gives +-1 exactly."""
    import dragon_core as dg

    a = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [0.0, 1.0, 5.0]])
    z = np.zeros((3, 3))
    p = np.eye(4)[[2, 0, 3, 1]]
    x = rng.standard_normal((3, 3))
    batch = np.stack([a, z, x, x[[1, 0, 2]]])
    got = dg.ops.det(dg.from_numpy(batch)).numpy()
    np.testing.assert_allclose(got, [0.0, 0.0, np.linalg.det(x), -np.linalg.det(x)],
                               rtol=1e-12, atol=1e-12)
    assert dg.ops.det(dg.from_numpy(p)).numpy() == np.linalg.det(p).round()


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 4), (0, 2, 2)])
def test_det_grad(shape, rng):
    """Finite differences of det (float64) for invertible matrices."""
    x = rng.standard_normal(shape)
    OpCase.of("Det", [x], _det_ref).check_grad()


@pytest.mark.parametrize("n, rank", [(3, 2), (4, 3), (4, 2), (1, 0)])
def test_det_grad_singular(n, rank, rng):
    """At a singular matrix the gradient is the cofactor matrix (nonzero at
    rank n-1, zero below), computed from minors: matches central finite
    differences (det is a polynomial, so they are exact to rounding)."""
    import dragon_core as dg

    x = _singular(rng, n, rank) if rank else np.zeros((n, n))
    t = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(t)
        y = dg.ops.det(t)
    (g,) = tape.gradient(y, [t])
    eps = 1e-6
    want = np.zeros_like(x)
    for i in range(n):
        for j in range(n):
            e = np.zeros_like(x)
            e[i, j] = eps
            want[i, j] = (_det_ref(x + e) - _det_ref(x - e)) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-8)
    if rank == n - 1:
        assert np.abs(want).max() > 1e-3


@pytest.mark.parametrize("x, words", [
    (np.zeros((2, 3)), ["[2, 3]", "square"]),
    (np.zeros((3,)), ["[3]", "square"]),
    (np.zeros((2, 2), np.int32), ["int32"]),
])
def test_det_bad_input(x, words):
    import dragon_core as dg

    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.det(dg.from_numpy(x))
    msg = str(info.value)
    assert "Det" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


@pytest.mark.parametrize("shape", [(1, 1), (3, 3), (2, 4, 4), (0, 2, 2), (2, 0, 0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_det_grad_op(dtype, shape, rng):
    """"DetGrad" (Det's gradient kernel) directly: dy * det(x) * inv(x)^T
    for invertible x, in float64."""
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape[:-2]).astype(dtype)

    def ref(x, dy):
        if x.shape[-1] == 0:
            return np.zeros(x.shape)
        inv_t = np.swapaxes(np.linalg.inv(x), -1, -2)
        return dy[..., None, None] * np.linalg.det(x)[..., None, None] * inv_t
    OpCase.of("DetGrad", [x, dy], ref).check_forward()


def test_det_grad_large_singular_raises():
    """A singular matrix larger than 32x32 would need n^2 minors: its
    gradient is refused with an error naming the op and the size, never
    silently replaced (an invertible one of that size is fine)."""
    import dragon_core as dg

    x = np.zeros((40, 40))
    dy = np.ones(())
    with pytest.raises(dg.errors.DragonError) as info:
        dg.ops.det_grad(dg.from_numpy(x), dg.from_numpy(dy))
    msg = str(info.value)
    assert "DetGrad" in msg and "40x40" in msg and "singular" in msg, msg
    a = np.eye(40) * 2.0
    got = dg.ops.det_grad(dg.from_numpy(a), dg.from_numpy(dy)).numpy()
    np.testing.assert_allclose(got, np.linalg.det(a) * np.linalg.inv(a).T, rtol=1e-12)
