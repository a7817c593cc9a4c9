"""The eager Softmax gradient rule runs one SoftmaxGrad along the last
axis (issue 21): the same bits as the Mul, Sum, Sub, Mul chain it replaces (the kernel's
contract, docs/graph.md "Pattern fusion"), which a traced rule still
records for the graph's fusion."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg


def _eager_types(fn, *args):
    with dg.profiler.profile() as prof:
        out = fn(*args)
    return out, [e.op for e in prof.events if e.depth == 0]


def _grad(x, dy, axis):
    x = dg.tensor(x)
    x.requires_grad = True
    y = dg.ops.softmax(x, axis=axis)
    y.backward(dg.tensor(dy))
    return x.grad


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,axis", [((4, 7), -1), ((2, 3, 5), 1), ((3, 1), -1), ((0, 4), -1),
                                        ((6,), 0), ((2, 4, 128), -1)])
def test_softmax_rule_matches_chain(dtype, shape, axis):
    rng = np.random.default_rng(7)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(shape).astype(dtype)
    g, types = _eager_types(_grad, x, dy, axis)
    if axis in (-1, len(shape) - 1):
        assert "SoftmaxGrad" in types and "Sub" not in types, types
    else:   # the kernel sums other axes in double: the chain's bits are kept
        assert "SoftmaxGrad" not in types and "Sub" in types, types
    y = dg.ops.softmax(dg.tensor(x), axis=axis)
    tdy = dg.tensor(dy)
    chain = y * (tdy - dg.ops.sum(tdy * y, [axis], keepdims=True))
    np.testing.assert_array_equal(g.numpy(), chain.numpy())
    # float64 reference
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(axis=axis, keepdims=True)) if x.size else x64
    s = e / e.sum(axis=axis, keepdims=True) if x.size else e
    ref = s * (dy - (dy * s).sum(axis=axis, keepdims=True))
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(g.numpy(), ref, rtol=tol, atol=tol)


def test_softmax_rule_finite_differences():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 5))
    c = rng.standard_normal((3, 5))

    def f(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        return float((e / e.sum(-1, keepdims=True) * c).sum())
    g = _grad(x, c, -1).numpy()
    h = 1e-6
    num = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        p, m = x.copy(), x.copy()
        p[i] += h
        m[i] -= h
        num[i] = (f(p) - f(m)) / (2 * h)
    np.testing.assert_allclose(g, num, rtol=1e-6, atol=1e-9)


def test_softmax_second_order_through_softmax_grad():
    """create_graph: the rule's SoftmaxGrad is differentiated again."""
    rng = np.random.default_rng(9)
    x = dg.tensor(rng.standard_normal((2, 4)))
    x.requires_grad = True
    y = dg.ops.softmax(x)
    (g,) = dg.grad((y * y).sum(), [x], create_graph=True)
    (gg,) = dg.grad(g.sum(), [x])
    xv = x.numpy()

    def first(v):
        e = np.exp(v - v.max(-1, keepdims=True))
        s = e / e.sum(-1, keepdims=True)
        return (s * (2 * s - (2 * s * s).sum(-1, keepdims=True))).sum()
    h = 1e-6
    num = np.zeros_like(xv)
    for i in np.ndindex(xv.shape):
        p, m = xv.copy(), xv.copy()
        p[i] += h
        m[i] -= h
        num[i] = (first(p) - first(m)) / (2 * h)
    np.testing.assert_allclose(gg.numpy(), num, rtol=1e-5, atol=1e-8)


def test_traced_rule_records_the_chain():
    x = dg.tensor(np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))

    def f(x):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = dg.ops.softmax(x)
            loss = (y * y).sum()
        return tape.gradient(loss, x)
    types = [op.type for op in dg.function(f, opt_level=0).get_graph(x).op]
    assert "SoftmaxGrad" not in types and "Sub" in types, types
    np.testing.assert_array_equal(dg.function(f)(x).numpy(), f(x).numpy())
