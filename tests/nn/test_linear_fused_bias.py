"""nn.functional.linear adds the bias inside the product (MatMulBiasAct)
where that gives the values of MatMul + Add: float32/float64 products,
autocast's float32 product of 16-bit operands included (issue 21).

References are float64 NumPy; op types come from dragon_core.profiler.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.nn import functional as F

U_F32 = 2.0 ** -24


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), as float64."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


@pytest.fixture
def rng():
    return np.random.default_rng(1221)


def _types(fn, *args):
    """The op types ``fn`` runs eagerly."""
    with dg.profiler.profile() as prof:
        fn(*args)
    return [e.op for e in prof.events if e.depth == 0]


def _tol(x, w, b, eps):
    k = x.shape[-1]
    mag = np.abs(x).max(initial=0.0) * np.abs(w).max(initial=0.0) * k
    return float(2 * k * eps * (mag + np.abs(b).max(initial=0.0))) + 1e-12


@pytest.mark.parametrize("dtype,eps", [("float32", U_F32), ("float64", 2.0 ** -53)])
@pytest.mark.parametrize("shape", [(6, 5), (2, 3, 5), (5,), (0, 5), (2, 0, 5)])
def test_linear_forward_fused(rng, dtype, eps, shape):
    x = rng.standard_normal(shape).astype(dtype)
    w = rng.standard_normal((4, 5)).astype(dtype)
    b = rng.standard_normal((4,)).astype(dtype)
    tx, tw, tb = dg.tensor(x), dg.tensor(w), dg.tensor(b)
    y = F.linear(tx, tw, tb)
    assert y.dtype.name == dtype and tuple(y.shape) == shape[:-1] + (4,)
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b
    np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=_tol(x, w, b, eps))
    types = _types(lambda x: F.linear(x, tw, tb), tx)
    assert "MatMulBiasAct" in types and "Add" not in types, types
    # the separate ops give the same values (one rounding of the sum)
    unfused = dg.ops.matmul(tx.reshape([-1, 5]), tw, transpose_b=True) + tb
    np.testing.assert_allclose(y.numpy().reshape(-1, 4), unfused.numpy(), rtol=0,
                               atol=4 * eps * (np.abs(ref).max(initial=0.0) + 1.0))


def test_linear_gradients_float64_finite_differences(rng):
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((2, 4))
    b = rng.standard_normal((2,))
    c = rng.standard_normal((3, 2))
    tx, tw, tb = dg.tensor(x), dg.tensor(w), dg.tensor(b)
    for t in (tx, tw, tb):
        t.requires_grad = True
    (F.linear(tx, tw, tb) * dg.tensor(c)).sum().backward()

    def f(x, w, b):
        return float(((x @ w.T + b) * c).sum())
    h = 1e-6
    for arr, got in ((x, tx.grad), (w, tw.grad), (b, tb.grad)):
        num = np.zeros_like(arr)
        for i in np.ndindex(arr.shape):
            p, m = arr.copy(), arr.copy()
            p[i] += h
            m[i] -= h
            args = [p if a is arr else a for a in (x, w, b)]
            margs = [m if a is arr else a for a in (x, w, b)]
            num[i] = (f(*args) - f(*margs)) / (2 * h)
        np.testing.assert_allclose(got.numpy(), num, rtol=1e-6, atol=1e-8)


def test_linear_autocast_float32_bias_unrounded(rng):
    """Under autocast the operands are bfloat16, the bias stays float32 and
    is added to the float32 product."""
    x = rng.standard_normal((2, 7, 8)).astype(np.float32)
    w = rng.standard_normal((3, 8)).astype(np.float32)
    b = (rng.standard_normal((3,)) + 1 / 3).astype(np.float32)
    tx, tw, tb = dg.tensor(x), dg.tensor(w), dg.tensor(b)
    with dg.autocast("cpu"):
        y = F.linear(tx, tw, tb)
    assert y.dtype == dg.float32
    ref = bf16(x) @ bf16(w).T + b.astype(np.float64)
    np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=_tol(x, w, b, U_F32))
    with dg.autocast("cpu"):
        types = _types(lambda x: F.linear(x, tw, tb), tx)
    assert types.count("Cast") == 2 and "MatMulBiasAct" in types, types


def test_matmul_bias_act_under_autocast(rng):
    """The op itself under autocast: a float32 bias is added to the float32
    product (it was cast to bfloat16 and then refused); with an explicit
    bfloat16 out_dtype the bias is cast to bfloat16 too."""
    a = rng.standard_normal((4, 6)).astype(np.float32)
    bm = rng.standard_normal((6, 3)).astype(np.float32)
    bias = rng.standard_normal((3,)).astype(np.float32)
    ta, tb, tbias = dg.tensor(a), dg.tensor(bm), dg.tensor(bias)
    with dg.autocast("cpu"):
        y = dg.ops.matmul_bias_act(ta, tb, tbias, activation="relu")
        y16 = dg.ops.matmul_bias_act(ta, tb, tbias, activation="none", out_dtype="bfloat16")
    assert y.dtype == dg.float32 and y16.dtype == dg.bfloat16
    prod = bf16(a) @ bf16(bm)
    np.testing.assert_allclose(y.numpy(), np.maximum(prod + bias, 0), rtol=0,
                               atol=_tol(a, bm, bias, U_F32))
    ref16 = prod + bf16(bias)
    np.testing.assert_allclose(y16.numpy().astype(np.float64), ref16,
                               rtol=2.0 ** -8, atol=_tol(a, bm, bias, U_F32))


def test_bfloat16_product_keeps_separate_add(rng):
    """A bfloat16 model (no autocast) keeps MatMul + Add: fusing would round
    the sum once instead of twice."""
    x = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32)).astype("bfloat16")
    w = dg.tensor(rng.standard_normal((2, 4)).astype(np.float32)).astype("bfloat16")
    b = dg.tensor(rng.standard_normal((2,)).astype(np.float32)).astype("bfloat16")
    types = _types(lambda x: F.linear(x, w, b), x)
    assert "MatMulBiasAct" not in types and "Add" in types, types


def test_no_fused_kernel_uses_two_ops(rng, monkeypatch):
    """Where the device has no MatMulBiasAct kernel for the dtype, linear
    runs MatMul + Add (the same values)."""
    x = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((2,)).astype(np.float32))
    fused = F.linear(x, w, b).numpy()
    from dragon_core._grads import _util
    monkeypatch.setitem(_util._KERNELS, ("MatMulBiasAct", "cpu", dg.float32.code), False)
    types = _types(lambda x: F.linear(x, w, b), x)
    assert "MatMulBiasAct" not in types and "Add" in types, types
    np.testing.assert_allclose(F.linear(x, w, b).numpy(), fused, rtol=1e-6, atol=1e-6)


def test_traced_linear_records_matmul_and_add(rng):
    """A traced call records MatMul + Add, for the graph's pattern fusion
    (which also takes a following Relu into MatMulBiasAct)."""
    x = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((2, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((2,)).astype(np.float32))
    g = dg.function(lambda x: F.linear(x, w, b), opt_level=0)
    types = [op.type for op in g.get_graph(x).op]
    assert "MatMulBiasAct" not in types and "Add" in types, types
    np.testing.assert_allclose(g(x).numpy(), F.linear(x, w, b).numpy(), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 2, 3, 4), (0, 3, 4)])
def test_traced_linear_rank3_fuses_bias_into_product(rng, shape):
    """On an input of rank > 2 a traced float32 linear adds the bias to the
    2-D product before the reshape back, so pattern fusion sees MatMul ->
    Add and makes them one MatMulBiasAct (with the Reshape between them it
    matched nothing); values and gradients are those of x @ w.T + b."""
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((5, 4)).astype(np.float32)
    b = rng.standard_normal((5,)).astype(np.float32)
    c = rng.standard_normal(shape[:-1] + (5,)).astype(np.float32)
    tx, tw, tb, tc = (dg.tensor(v) for v in (x, w, b, c))
    for t in (tx, tw, tb):
        t.requires_grad = True

    raw = [op.type for op in dg.function(lambda x: F.linear(x, tw, tb),
                                         opt_level=0).get_graph(tx).op]
    assert raw.index("Add") < max(i for i, t in enumerate(raw) if t == "Reshape"), raw

    g = dg.function(lambda x: F.linear(x, tw, tb))
    types = [op.type for op in g.get_graph(tx).op]
    assert "MatMulBiasAct" in types and "Add" not in types and "MatMul" not in types, types
    x64, w64, b64 = (v.astype(np.float64) for v in (x, w, b))
    ref = x64 @ w64.T + b64
    np.testing.assert_allclose(g(tx).numpy(), ref, rtol=0, atol=_tol(x, w, b, U_F32))

    def loss(x):
        return (F.linear(x, tw, tb) * tc).sum()

    def value_and_grads(x):
        out = loss(x)
        return (out,) + tuple(dg.grad(out, [x, tw, tb]))
    step = dg.function(value_and_grads)
    assert "MatMulBiasAct" in [op.type for op in step.get_graph(tx).op]
    out, gx, gw, gb = step(tx)
    np.testing.assert_allclose(float(out.numpy()), float((ref * c).sum()), rtol=1e-5, atol=1e-5)
    c64 = c.astype(np.float64).reshape(-1, 5)
    np.testing.assert_allclose(gx.numpy().reshape(-1, 4), c64 @ w64, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gw.numpy(), c64.T @ x64.reshape(-1, 4), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gb.numpy(), c64.sum(axis=0), rtol=1e-5, atol=1e-5)


def test_traced_linear_rank3_under_autocast_keeps_add_after_reshape(rng):
    """Under autocast the Add stays after the reshape, beside what follows it
    (gelu_fusion takes Add -> Gelu -> Cast), and no MatMulBiasAct forms."""
    x = dg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((5,)).astype(np.float32))

    def f(x):
        with dg.autocast("cpu"):
            return F.linear(x, w, b)
    raw = [op.type for op in dg.function(f, opt_level=0).get_graph(x).op]
    assert raw.index("Add") > raw.index("MatMul") + 1 and raw[raw.index("Add") - 1] == "Reshape", raw
    g = dg.function(f)
    types = [op.type for op in g.get_graph(x).op]
    assert "MatMulBiasAct" not in types, types
    ref = bf16(x.numpy()).reshape(-1, 4) @ bf16(w.numpy()).T + b.numpy().astype(np.float64)
    np.testing.assert_allclose(g(x).numpy().reshape(-1, 5), ref, rtol=0,
                               atol=_tol(x.numpy(), w.numpy(), b.numpy(), U_F32))


def test_eager_linear_rank3_keeps_the_add_after_the_reshape(rng, monkeypatch):
    """Eagerly (no fused kernel for the dtype here) the bias is added after
    the reshape, as before: the reorder is for traced graphs only."""
    x = dg.tensor(rng.standard_normal((2, 3, 4)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((5,)).astype(np.float32))
    from dragon_core._grads import _util
    monkeypatch.setitem(_util._KERNELS, ("MatMulBiasAct", "cpu", dg.float32.code), False)
    types = _types(lambda x: F.linear(x, w, b), x)
    assert types[-2:] == ["Reshape", "Add"], types
