"""SoftmaxGrad(y, dy) -> y * (dy - sum(dy * y, axis)) (issue 21): the
cpu_eigen kernel against float64 NumPy on every axis, empty and odd shapes,
both float dtypes and strided inputs; bit for bit the chain Mul, Sum, Sub,
Mul that Softmax's gradient rule writes, along the last axis (including Sum's
chunked split of few long rows); the ``softmax_grad`` fusion pattern in
compiled graphs (fused, same bits as the unfused graph and as eager); shape
errors. Its gradient rule: tests/grad/test_grad_softmax_grad.py."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import op_case


def _reference(y, dy, axis=-1):
    y, dy = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def _inputs(rng, dt, shape):
    y = rng.random(shape) + 0.05
    return [y.astype(dt), rng.standard_normal(shape).astype(dt)]


SHAPES = [(7,), (3, 5), (2, 3, 4), (0, 4), (4, 0), (2, 1, 33)]


@op_case("SoftmaxGrad", inputs=_inputs, reference=_reference, shapes=SHAPES,
         attrs=[{}, {"axis": 0}, {"axis": 1}, {"axis": -2}],
         select=lambda c: -len(c.shape) <= c.attrs.get("axis", -1) < len(c.shape))
def test_softmax_grad_forward(case):
    case.check_forward()


def _composed(y, dy, axis=-1):
    o = dg.ops
    return y * (dy - o.sum(dy * y, [axis], keepdims=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", [(8, 4, 128, 128), (3, 40000), (1, 70000), (5, 1),
                                   (1, 7), (17, 300)])
def test_softmax_grad_bitwise_equals_the_chain(shape, dtype, rng):
    """Along the last axis the fused op reproduces the unfused ops' bits
    (products rounded to the dtype, Sum's fold and its chunks)."""
    y, dy = (dg.tensor(a) for a in _inputs(rng, dtype, shape))
    fused = dg.ops.softmax_grad(y, dy).numpy()
    want = _composed(y, dy).numpy()
    assert fused.tobytes() == want.tobytes()
    np.testing.assert_allclose(fused, _reference(y.numpy(), dy.numpy()),
                               rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-6)


def test_softmax_grad_shape_errors():
    y = dg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match="SoftmaxGrad.*dy must have y's shape"):
        dg.ops.softmax_grad(y, dg.tensor(np.ones((2, 1), np.float32)))
    with pytest.raises(ValueError, match="SoftmaxGrad"):
        dg.ops.softmax_grad(y, y, axis=2)
    with pytest.raises((TypeError, ValueError), match="SoftmaxGrad"):
        dg.ops.softmax_grad(y, dg.tensor(np.ones((2, 3), np.float64)))


def _attention_grad(x, w):
    """d/dx of sum(softmax(x * 0.125) * w): the encoder's attention backward."""
    with dg.GradientTape() as tape:
        tape.watch(x)
        loss = dg.ops.sum(dg.ops.softmax(x * 0.125, -1) * w)
    return tape.gradient(loss, x)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_grad_pattern_in_compiled_graph(dtype, rng):
    x = dg.tensor(rng.standard_normal((2, 3, 16, 16)).astype(dtype))
    w = dg.tensor(rng.standard_normal((2, 3, 16, 16)).astype(dtype))
    eager = _attention_grad(x, w).numpy()
    fn = dg.function(_attention_grad)
    got = fn(x, w).numpy()
    fused = dg.fusion.fused_ops(fn.get_graph(x, w))
    assert any(t == "SoftmaxGrad" for t, _ in fused.values()), fused
    plain = dg.function(_attention_grad, disable_passes=("pattern_fusion",))
    unfused = plain(x, w).numpy()
    assert not any(t == "SoftmaxGrad" for t, _ in
                   dg.fusion.fused_ops(plain.get_graph(x, w)).values())
    assert got.tobytes() == unfused.tobytes() == eager.tobytes()
    y = _softmax64(x.numpy().astype(np.float64) * 0.125)
    ref = 0.125 * _reference(y, w.numpy().astype(np.float64))
    np.testing.assert_allclose(got, ref, rtol=1e-4 if dtype == "float32" else 1e-12,
                               atol=1e-6)


def _softmax64(v):
    e = np.exp(v - v.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_softmax_grad_pattern_declines_other_axes_and_shared_values(rng):
    """Not the last axis, or a product read elsewhere: the chain stays."""
    x = dg.tensor(rng.standard_normal((4, 5)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((4, 5)).astype(np.float32))

    def along0(x, w):
        with dg.GradientTape() as tape:
            tape.watch(x)
            loss = dg.ops.sum(dg.ops.softmax(x, 0) * w)
        return tape.gradient(loss, x)

    def shared(x, w):
        y = dg.ops.softmax(x, -1)
        p = w * y
        return y * (w - dg.ops.sum(p, [-1], keepdims=True)), p

    for f in (along0, shared):
        fn = dg.function(f)
        got = fn(x, w)
        assert not any(t == "SoftmaxGrad" for t, _ in
                       dg.fusion.fused_ops(fn.get_graph(x, w)).values())
        want = f(x, w)
        got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for a, b in zip(got, want):
            assert a.numpy().tobytes() == b.numpy().tobytes()
