"""The Casts of an eager autocast step (issue 21): gradients of autocast
operands written in float32 by the matmul rules (the eager form of the
graph's cast_fold).

Op counts come from dragon_core.profiler (the ops the eager step
dispatches); values are checked against float64 NumPy on the
bfloat16-rounded operands.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

U_F32 = 2.0 ** -24


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), as float64."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def f32_matmul_tol(a: np.ndarray, b: np.ndarray) -> float:
    """|computed - exact| bound of a @ b accumulated and stored in float32."""
    k = a.shape[-1]
    mag = np.abs(a).max(initial=0.0) * np.abs(b).max(initial=0.0) * k
    return float(2.0 * k * U_F32 * mag + 2.0 ** -23 * mag) + 1e-12


@pytest.fixture
def rng():
    return np.random.default_rng(2121)


def _op_types(fn, *args):
    """The op types ``fn`` runs eagerly."""
    with dg.profiler.profile() as prof:
        fn(*args)
    return [e.op for e in prof.events if e.depth == 0]


def _linear_step(w, b, dtype="bfloat16"):
    def step(x):
        w.grad = None
        b.grad = None
        with dg.autocast("cpu", dtype=dtype):
            loss = (dg.nn.functional.linear(x, w, b) ** 2).sum()
        loss.backward()
        return loss
    return step


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_linear_backward_writes_float32_gradients(rng, dtype):
    """dW and dx of an autocast linear are float32 products of the 16-bit
    operands: within float32 accumulation error of the float64 reference
    (no 16-bit rounding of the product), and no Cast brings them up."""
    low = bf16 if dtype == "bfloat16" else (
        lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float64))
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    bias = rng.standard_normal((4,)).astype(np.float32)
    tx, tw, tb = dg.tensor(x), dg.tensor(w), dg.tensor(bias)
    for t in (tx, tw, tb):
        t.requires_grad = True
    with dg.autocast("cpu", dtype=dtype):
        y = dg.nn.functional.linear(tx, tw, tb)
    (y * y).sum().backward()
    xr, wr = low(x), low(w)
    dy = 2.0 * y.numpy().astype(np.float64)
    dyr = low(dy.astype(np.float32))          # the matmul rule's cast of dy
    assert tw.grad.dtype == dg.float32 and tx.grad.dtype == dg.float32
    np.testing.assert_allclose(tw.grad.numpy(), dyr.T @ xr, rtol=0,
                               atol=f32_matmul_tol(dyr.T, xr))
    np.testing.assert_allclose(tx.grad.numpy(), dyr @ wr, rtol=0,
                               atol=f32_matmul_tol(dyr, wr))
    np.testing.assert_allclose(tb.grad.numpy(), dy.sum(0), rtol=1e-6, atol=1e-5)


def test_linear_step_cast_count(rng):
    """Forward: x and W cast down; backward: dy cast down once, and the
    gradients of the two casts need no Cast (3 in all, was 5)."""
    w = dg.tensor(rng.standard_normal((4, 5)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((4,)).astype(np.float32))
    w.requires_grad = True
    b.requires_grad = True
    x = dg.tensor(rng.standard_normal((6, 5)).astype(np.float32))
    x.requires_grad = True
    types = _op_types(_linear_step(w, b), x)
    assert types.count("Cast") == 3, types
    # the forward product adds the float32 bias itself (nn/functional.py)
    assert types.count("MatMulBiasAct") == 1 and types.count("MatMul") == 2, types


def test_eager_matches_compiled(rng):
    """The eager gradients equal the compiled step's (whose cast_fold pass
    writes the same float32 products)."""
    x = rng.standard_normal((7, 5)).astype(np.float32)
    w0 = rng.standard_normal((4, 5)).astype(np.float32)
    b0 = rng.standard_normal((4,)).astype(np.float32)
    grads = []
    for compiled in (False, True):
        w, b = dg.tensor(w0), dg.tensor(b0)
        w.requires_grad = True
        b.requires_grad = True
        step = _linear_step(w, b)
        loss = (dg.function(step) if compiled else step)(dg.tensor(x))
        grads.append((float(loss.numpy()), w.grad.numpy(), b.grad.numpy()))
    (l0, gw0, gb0), (l1, gw1, gb1) = grads
    np.testing.assert_allclose(l1, l0, rtol=1e-6)
    np.testing.assert_allclose(gw1, gw0, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(gb1, gb0, rtol=1e-6, atol=1e-6)


def test_grad_of_cast_output_keeps_its_dtype(rng):
    """autograd.grad / GradientTape asked for the 16-bit cast itself get a
    16-bit gradient (the float32 one is internal to the backward pass)."""
    w = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32))
    w.requires_grad = True
    x = dg.tensor(rng.standard_normal((2, 3)).astype(np.float32)).astype("bfloat16")
    w16 = w.astype("bfloat16")
    y = dg.ops.matmul(x, w16, out_dtype="float32")
    g16, g32 = dg.grad(y.sum(), [w16, w])
    assert g16.dtype == dg.bfloat16 and g32.dtype == dg.float32
    ref = bf16(np.ones((2, 4), np.float32)).T @ bf16(x.numpy().astype(np.float32))
    np.testing.assert_allclose(g32.numpy(), ref.T, rtol=0, atol=f32_matmul_tol(ref, ref))
    np.testing.assert_array_equal(g16.numpy().astype(np.float32),
                                  bf16(g32.numpy()).astype(np.float32))


def test_bf16_leaf_gradient_stays_bf16(rng):
    """An operand that is not a Cast from float32 (a bfloat16 parameter)
    gets a bfloat16 gradient, as before."""
    w = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32)).astype("bfloat16")
    w.requires_grad = True
    x = dg.tensor(rng.standard_normal((2, 3)).astype(np.float32)).astype("bfloat16")
    dg.ops.matmul(x, w, out_dtype="float32").sum().backward()
    assert w.grad.dtype == dg.bfloat16
    ref = bf16(x.numpy().astype(np.float32)).T @ np.ones((2, 4))
    np.testing.assert_allclose(w.grad.numpy().astype(np.float64), ref, rtol=2.0 ** -8,
                               atol=1e-6)


def test_cast_rule_passes_same_dtype_gradient():
    """The Cast rule adds no op when the gradient already has the input's
    dtype (and still casts when it has not)."""
    x = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    x.requires_grad = True
    types = _op_types(lambda x: dg.grad(dg.ops.cast(x, "float32").sum(), [x])[0], x)
    assert types.count("Cast") == 1, types   # the forward identity cast only
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.cast(x, "float64")
    g = tape.gradient(y, x, output_gradients=dg.tensor(np.full((2, 3), 0.5)))
    assert g.dtype == dg.float32
    np.testing.assert_array_equal(g.numpy(), np.full((2, 3), 0.5, np.float32))


def test_attention_products_gradients(rng):
    """Both operands of a batched autocast matmul of activations (q @ k^T)
    get float32 gradients within float32 error of the reference."""
    q = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    k = rng.standard_normal((2, 3, 6, 5)).astype(np.float32)
    tq, tk = dg.tensor(q), dg.tensor(k)
    tq.requires_grad = True
    tk.requires_grad = True
    with dg.autocast("cpu"):
        s = dg.ops.matmul(tq, dg.ops.transpose(tk, (0, 1, 3, 2)))
    assert s.dtype == dg.float32
    dy = rng.standard_normal(s.shape).astype(np.float32)
    s.backward(dg.tensor(dy))
    dyr, qr, kr = bf16(dy), bf16(q), bf16(k)
    np.testing.assert_allclose(tq.grad.numpy(), dyr @ kr, rtol=0,
                               atol=f32_matmul_tol(dyr, kr))
    np.testing.assert_allclose(tk.grad.numpy(), np.swapaxes(dyr, -1, -2) @ qr, rtol=0,
                               atol=f32_matmul_tol(dyr, qr))
