"""MatMul / MatMulBiasAct ``out_dtype``: float32 products of 16-bit operands.

References are float64 NumPy on the 16-bit operands (exactly representable
in float64). The kernels accumulate in float32 and, with out_dtype=float32,
store the accumulator unrounded: the error bound is the float32
accumulation's, 2 k 2**-24 sum|a_i b_i| (bounded by k max|a| max|b|), far
below the 2**-8 of a bfloat16-rounded product, which the tests also check
the result is not. Both kernels are run: oneDNN's (mkldnn plugin,
bfloat16) and cpu_eigen's (float16 and bfloat16, pinned).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import plugins

U_F32 = 2.0 ** -24
HALF = {"bfloat16": dg.bfloat16, "float16": dg.float16}

# (shape a, shape b, transpose_a, transpose_b)
CASES = [
    ((5, 7), (7, 3), False, False),
    ((7, 5), (7, 3), True, False),
    ((5, 7), (3, 7), False, True),
    ((2, 3, 4, 6), (6, 5), False, False),        # batch @ matrix
    ((4, 6), (2, 1, 6, 5), False, False),        # broadcast batch on b
    ((2, 1, 4, 6), (3, 6, 5), False, False),     # broadcast batch on both
    ((9,), (9, 4), False, False),                # vector @ matrix
    ((4, 9), (9,), False, False),                # matrix @ vector
    ((9,), (9,), False, False),                  # 0-d result
    ((3, 0), (0, 2), False, False),              # k = 0: zeros
    ((0, 4), (4, 2), False, False),              # empty product
    ((64, 128), (128, 48), False, False),        # a size the GEMM blocks
]


def _rounded(rng, shape, dtype):
    """Random values exactly representable in ``dtype``, as (tensor, float64)."""
    t = dg.tensor(rng.standard_normal(shape).astype(np.float32)).astype(dtype)
    return t, t.astype("float64").numpy()


def _ref(a, b, ta, tb):
    if ta and a.ndim >= 2:
        a = np.swapaxes(a, -1, -2)
    if tb and b.ndim >= 2:
        b = np.swapaxes(b, -1, -2)
    return np.matmul(a, b)


def _tol(a, b):
    k = a.shape[-1] if a.ndim else 1
    k = max(k, b.shape[0] if b.ndim == 1 else b.shape[-2])
    mag = np.abs(a).max(initial=0.0) * np.abs(b).max(initial=0.0)
    return 2.0 * k * U_F32 * mag * k + 1e-12


@pytest.fixture(params=["default", "cpu_eigen"])
def kernel(request):
    """Run each test with the default kernel (oneDNN when the mkldnn plugin
    is installed) and with cpu_eigen's pinned."""
    if request.param == "cpu_eigen":
        plugins.pin("MatMul", "cpu", "cpu_eigen")
        yield "cpu_eigen"
        plugins.unpin("MatMul", "cpu")
    else:
        yield "default"


@pytest.fixture
def rng():
    return np.random.default_rng(2121)


@pytest.mark.parametrize("sa,sb,ta,tb", CASES)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_forward_float32_product(rng, kernel, dtype, sa, sb, ta, tb):
    a, an = _rounded(rng, sa, dtype)
    b, bn = _rounded(rng, sb, dtype)
    y = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype=dg.float32)
    ref = _ref(an, bn, ta, tb)
    assert y.dtype == dg.float32
    assert tuple(y.shape) == ref.shape
    out = y.numpy().astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=0, atol=_tol(an, bn))
    # The 16-bit product is the float32 one rounded once.
    y16 = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert y16.dtype == HALF[dtype]
    np.testing.assert_array_equal(y.astype(dtype).astype("float32").numpy(),
                                  y16.astype("float32").numpy())


def test_not_rounded_to_16_bits(rng, kernel):
    """The float32 product keeps bits a bfloat16 one has not."""
    a, an = _rounded(rng, (32, 64), "bfloat16")
    b, bn = _rounded(rng, (64, 16), "bfloat16")
    out = dg.ops.matmul(a, b, out_dtype="float32").numpy()
    bits = out.view(np.uint32) & 0xFFFF
    assert np.count_nonzero(bits) > out.size // 2
    np.testing.assert_allclose(out, an @ bn, rtol=0, atol=_tol(an, bn))


def test_same_dtype_out_is_plain_matmul(rng):
    for dtype in ("float32", "float64", "bfloat16"):
        a, _ = _rounded(rng, (3, 4), dtype)
        b, _ = _rounded(rng, (4, 2), dtype)
        y = dg.ops.matmul(a, b, out_dtype=dtype)
        assert y.dtype == a.dtype
        np.testing.assert_array_equal(y.astype("float64").numpy(),
                                      dg.ops.matmul(a, b).astype("float64").numpy())


@pytest.mark.parametrize("a_dtype,out", [("bfloat16", "float64"), ("float32", "bfloat16"),
                                         ("float32", "float64"), ("float64", "float32"),
                                         ("bfloat16", "float16")])
def test_bad_out_dtype_raises(rng, a_dtype, out):
    a, _ = _rounded(rng, (3, 4), a_dtype)
    b, _ = _rounded(rng, (4, 2), a_dtype)
    with pytest.raises(ValueError, match=r"MatMul.*out_dtype .*" + out):
        dg.ops.matmul(a, b, out_dtype=out)


def test_mixed_operands_raise(rng):
    a, _ = _rounded(rng, (3, 4), "bfloat16")
    b, _ = _rounded(rng, (4, 2), "float32")
    with pytest.raises(ValueError, match="MatMul"):
        dg.ops.matmul(a, b, out_dtype="float32")


# ------------------------------------------------------------ MatMulBiasAct
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("sa,sb", [((6, 8), (8, 5)), ((2, 6, 8), (8, 5)), ((0, 8), (8, 5)),
                                   ((6, 0), (0, 5))])
def test_bias_act_float32_product(rng, act, sa, sb):
    a, an = _rounded(rng, sa, "bfloat16")
    b, bn = _rounded(rng, sb, "bfloat16")
    bias_np = rng.standard_normal(sb[-1]).astype(np.float32)
    y = dg.ops.matmul_bias_act(a, b, dg.tensor(bias_np), activation=act,
                               out_dtype="float32")
    ref = an @ bn + bias_np.astype(np.float64)
    if act == "relu":
        ref = np.maximum(ref, 0.0)
    assert y.dtype == dg.float32 and tuple(y.shape) == ref.shape
    np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=_tol(an, bn) + 1e-6)


def test_bias_act_bias_dtype_checked(rng):
    a, _ = _rounded(rng, (3, 4), "bfloat16")
    b, _ = _rounded(rng, (4, 2), "bfloat16")
    with pytest.raises(ValueError, match=r"MatMulBiasAct.*bias must have the product's dtype "
                                         r"float32, got bfloat16"):
        dg.ops.matmul_bias_act(a, b, dg.ops.zeros([2], dtype="bfloat16"),
                               activation="none", out_dtype="float32")
    with pytest.raises(ValueError, match=r"MatMulBiasAct.*bias must have the product's dtype "
                                         r"bfloat16, got float32"):
        dg.ops.matmul_bias_act(a, b, dg.ops.zeros([2]), activation="none")


# --------------------------------------------------------------- gradients
@pytest.mark.parametrize("sa,sb,ta,tb", [((5, 7), (7, 3), False, False),
                                         ((7, 5), (3, 7), True, True),
                                         ((2, 4, 6), (6, 5), False, False),
                                         ((9,), (9, 4), False, False),
                                         ((3, 0), (0, 2), False, False)])
def test_gradient(rng, sa, sb, ta, tb):
    """dy (float32) is rounded to the operands' bfloat16; each gradient is
    the float32-accumulated product rounded to bfloat16, the operand's dtype."""
    a, an = _rounded(rng, sa, "bfloat16")
    b, bn = _rounded(rng, sb, "bfloat16")
    a.requires_grad = True
    b.requires_grad = True
    y = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype="float32")
    dy_np = rng.standard_normal(tuple(y.shape)).astype(np.float32)
    da, db = dg.grad([y], [a, b], grad_outputs=[dg.tensor(dy_np)])
    assert da.dtype == dg.bfloat16 and db.dtype == dg.bfloat16
    dyb = dg.tensor(dy_np).astype("bfloat16").astype("float64").numpy()
    # Reference: y is linear in each operand, so d<dy, y>/d operand[i] is
    # <dy, matmul with operand = e_i> (float64, exact on the rounded values).
    def grads(dy, x, w):
        gx = np.array([np.sum(dy * _ref(e.reshape(sa), w, ta, tb))
                       for e in np.eye(x.size)]).reshape(sa)
        gw = np.array([np.sum(dy * _ref(x, e.reshape(sb), ta, tb))
                       for e in np.eye(w.size)]).reshape(sb)
        return gx, gw
    dA, dB = grads(dyb, an, bn)
    # |terms| bound: each gradient is rounded to bfloat16 once per batch item
    # and once more by the bfloat16 sum over broadcast batch axes.
    mA, mB = grads(np.abs(dyb), np.abs(an), np.abs(bn))
    for got, want, mag in ((da, dA, mA), (db, dB, mB)):
        got = got.astype("float64").numpy()
        assert got.shape == want.shape
        tol = 3 * 2.0 ** -8 * mag + 1e-12
        assert np.all(np.abs(got - want) <= tol), (got, want)


def test_gradient_float32_parameters_through_cast(rng):
    """The autocast pattern: float32 parameters cast down, a float32 product;
    the float32 gradients match float64 on the rounded values."""
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    tx, tw = dg.tensor(x), dg.tensor(w)
    tw.requires_grad = True
    y = dg.ops.matmul(tx.astype("bfloat16"), tw.astype("bfloat16"), transpose_b=True,
                      out_dtype="float32")
    loss = (y * y).sum()
    (gw,) = dg.grad([loss], [tw])
    assert gw.dtype == dg.float32
    xb = dg.tensor(x).astype("bfloat16").astype("float64").numpy()
    wb = dg.tensor(w).astype("bfloat16").astype("float64").numpy()
    yref = xb @ wb.T
    np.testing.assert_allclose(y.numpy(), yref, rtol=0, atol=_tol(xb, wb))
    dyb = dg.tensor((2 * y.numpy()).astype(np.float32)).astype("bfloat16") \
        .astype("float64").numpy()
    want = dyb.T @ xb
    np.testing.assert_allclose(gw.numpy(), want, rtol=2.0 ** -8,
                               atol=6 * U_F32 * np.abs(dyb).max() * np.abs(xb).max() * 6)


def test_compiled_matches_eager(rng):
    a, _ = _rounded(rng, (2, 6, 8), "bfloat16")
    b, _ = _rounded(rng, (8, 5), "bfloat16")

    def f(a, b):
        return dg.ops.softmax(dg.ops.matmul(a, b, out_dtype="float32"), -1)

    eager = f(a, b)
    g = dg.function(f)
    out = g(a, b)
    assert out.dtype == dg.float32
    np.testing.assert_array_equal(out.numpy(), eager.numpy())
    mm = [op for op in g.get_graph(a, b).op if op.type == "MatMul"]
    assert len(mm) == 1 and "out_dtype" in mm[0].attr


# ------------------------------------------- Cast float32 <-> bfloat16 bits
def _bf16_bits_reference(u: np.ndarray) -> np.ndarray:
    """float32 bits -> bfloat16 bits: nearest, ties to even; NaN -> the
    quiet NaN of its sign."""
    u = u.astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = ((u >> 16) & 0x8000) | 0x7FC0
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, nan, rounded).astype(np.uint16)


@pytest.mark.parametrize("n", [1, 7, 1000, 300_001])
def test_cast_float32_to_bfloat16_bits(n):
    """The vectorised Cast (autocast's down-casts) rounds every class of
    float32 as the reference: ties, carries into the exponent, overflow to
    inf, subnormals, signed zeros, inf and NaN payloads."""
    rng = np.random.default_rng(n)
    special = np.array([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
                        0x7F800001, 0xFFBFFFFF, 0x00000001, 0x00008000, 0x00018000,
                        0x007FFFFF, 0x7F7FFFFF, 0x7F7F8000, 0xFF7F8000, 0x3F808000,
                        0x3F818000, 0x3F80FFFF, 0x3FFF8000], np.uint32)
    u = rng.integers(0, 2 ** 32, n, dtype=np.uint64).astype(np.uint32)
    u[: min(n, special.size)] = special[: min(n, special.size)]
    # Ties: low 16 bits exactly 0x8000 on a quarter of the values.
    u[n // 2:: 4] = (u[n // 2:: 4] & 0xFFFF0000) | 0x8000
    x = u.view(np.float32)
    got = dg.tensor(x).astype("bfloat16").numpy().view(np.uint16)
    np.testing.assert_array_equal(got, _bf16_bits_reference(u))
    back = dg.tensor(x).astype("bfloat16").astype("float32").numpy().view(np.uint32)
    np.testing.assert_array_equal(back, _bf16_bits_reference(u).astype(np.uint32) << 16)
