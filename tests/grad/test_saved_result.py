"""Rules that read the op's own result (``gradient(..., reads_result=True)``:
Softmax, Exp, Tanh, Sigmoid, Reciprocal, Rsqrt) take it from the forward eagerly
instead of recomputing it, as torch's saved result does, but only while that
tensor is alive and provably unchanged; otherwise they recompute it from the
input. Either way the gradient has the same bits, and a result written after
the op can never make it wrong.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import _autograd, ops

# (op type, forward, input maker, float64 derivative dy/dx element-wise)
CASES = [
    ("Exp", ops.exp, lambda r, s: r.uniform(-2, 2, s), np.exp),
    ("Tanh", ops.tanh, lambda r, s: r.uniform(-2, 2, s), lambda x: 1 - np.tanh(x) ** 2),
    ("Reciprocal", ops.reciprocal, lambda r, s: r.uniform(0.5, 2, s), lambda x: -1 / x ** 2),
    ("Rsqrt", ops.rsqrt, lambda r, s: r.uniform(0.5, 2, s), lambda x: -0.5 * x ** -1.5),
    ("Sigmoid", ops.sigmoid, lambda r, s: r.uniform(-4, 4, s),
     lambda x: np.exp(-x) / (1 + np.exp(-x)) ** 2),
]
SHAPES = [(), (0,), (7,), (3, 33)]


def _softmax_grad_ref(x, dy):
    y = np.exp(x - x.max(-1, keepdims=True))
    y /= y.sum(-1, keepdims=True)
    return y * (dy - (dy * y).sum(-1, keepdims=True))


def _run(fn, x_np, dy_np, dtype, before_backward=None):
    """x.grad of fn at x for output gradient dy, and the op types the
    backward pass dispatched."""
    x = dg.tensor(x_np.astype(np.float32)).astype(dtype)
    x.requires_grad = True
    y = fn(x)
    if before_backward is not None:
        before_backward(y)
    with dg.profiler.profile() as prof:
        y.backward(dg.tensor(dy_np.astype(np.float32)).astype(dtype))
    return x.grad, [e.op for e in prof.events if e.depth == 0]


def _export(y):
    y.numpy()       # a writable NumPy view: writes through it bypass the version


def _f64(t):
    return t.astype(dg.float64).numpy()


def _rounded(a, dtype):
    """``a`` as _run hands it to the op (through float32 to ``dtype``), in float64."""
    return _f64(dg.tensor(a.astype(np.float32)).astype(dtype))


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op,fn,make,deriv", CASES, ids=[c[0] for c in CASES])
def test_rule_reads_the_result_with_the_bits_of_the_recomputation(op, fn, make, deriv, shape,
                                                                  dtype):
    rng = np.random.default_rng(3)
    x, dy = make(rng, shape), rng.standard_normal(shape)
    reused, reused_ops = _run(fn, x, dy, dtype)
    recomputed, recomputed_ops = _run(fn, x, dy, dtype, before_backward=_export)
    # one op fewer (Sigmoid's rule runs sigmoid(-x) either way)
    assert recomputed_ops.count(op) == reused_ops.count(op) + 1, (reused_ops, recomputed_ops)
    np.testing.assert_array_equal(_f64(reused), _f64(recomputed))
    # and both are the derivative (float64 reference, the input as rounded)
    xr, dyr = _rounded(x, dtype), _rounded(dy, dtype)
    tol = {"float64": 1e-12, "float32": 1e-5, "bfloat16": 3e-2}[dtype]
    np.testing.assert_allclose(_f64(reused), deriv(xr) * dyr, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
@pytest.mark.parametrize("shape,axis", [((4, 9), -1), ((2, 3, 5), 1), ((0, 4), -1), ((6,), 0)])
def test_softmax_rule_reads_the_result(shape, axis, dtype):
    rng = np.random.default_rng(5)
    x, dy = rng.standard_normal(shape), rng.standard_normal(shape)
    fn = lambda t: ops.softmax(t, axis)  # noqa: E731
    reused, reused_ops = _run(fn, x, dy, dtype)
    recomputed, recomputed_ops = _run(fn, x, dy, dtype, before_backward=_export)
    assert "Softmax" not in reused_ops and "Softmax" in recomputed_ops
    np.testing.assert_array_equal(_f64(reused), _f64(recomputed))
    xr, dyr = _rounded(x, dtype), _rounded(dy, dtype)
    want = np.moveaxis(_softmax_grad_ref(np.moveaxis(xr, axis, -1), np.moveaxis(dyr, axis, -1)),
                       -1, axis)
    tol = {"float64": 1e-12, "float32": 1e-5, "bfloat16": 3e-2}[dtype]
    np.testing.assert_allclose(_f64(reused), want, rtol=tol, atol=tol)


def test_a_result_written_in_place_after_the_op_is_recomputed_not_trusted():
    rng = np.random.default_rng(11)
    x, dy = rng.uniform(-2, 2, (3, 5)), rng.standard_normal((3, 5))
    grad, types = _run(ops.exp, x, dy, "float32", before_backward=lambda y: y._bump_version())
    assert "Exp" in types
    clean, _ = _run(ops.exp, x, dy, "float32")
    np.testing.assert_array_equal(grad.numpy(), clean.numpy())


def test_a_write_through_the_torch_front_end_is_seen():
    # vm.torch writes a tensor in place through NumPy: never trusted after
    import dragon_core.vm.torch as T
    x = T.tensor(np.linspace(-1, 1, 6, dtype=np.float32), requires_grad=True)
    y = T.tanh(x)
    node = y._t._grad_fn
    with dg.no_grad():                  # as the rule runs in a backward pass
        assert _autograd.saved_result(node) is not None
        np.copyto(y._t.numpy(), np.zeros(6, np.float32))     # behind the counter
        assert _autograd.saved_result(node) is None


@pytest.mark.parametrize("write", ["assign", "data"])
def test_rebinding_the_output_leaves_the_saved_memory(write):
    # assign / .data = give the output new memory; the op's memory, held by
    # the node, still holds its result
    rng = np.random.default_rng(11)
    x, dy = rng.uniform(-2, 2, (3, 5)), rng.standard_normal((3, 5))
    junk = dg.tensor(np.full((3, 5), 123.0, np.float32))

    def rebind(y):
        if write == "assign":
            y.assign(junk)
        else:
            y.data = junk

    grad, types = _run(ops.exp, x, dy, "float32", before_backward=rebind)
    assert "Exp" not in types
    clean, _ = _run(ops.exp, x, dy, "float32")
    np.testing.assert_array_equal(grad.numpy(), clean.numpy())


def test_saved_result_outlives_the_output_and_never_serves_a_recorded_rule():
    xv = np.array([0.5, -1.0, 2.0], np.float32)
    x = dg.tensor(xv)
    x.requires_grad = True
    y = ops.tanh(x)
    node = y._grad_fn
    del y
    gc.collect()
    with dg.no_grad():
        held = _autograd.saved_result(node)
        assert held._grad_fn is None and not held.requires_grad
        np.testing.assert_array_equal(held.numpy(), ops.tanh(dg.tensor(xv)).numpy())
    with dg.enable_grad():       # create_graph: the rule must record through x
        assert _autograd.saved_result(node) is None
        (dx,) = _autograd._RULES["Tanh"](node, dg.tensor(np.ones(3, np.float32)))
        assert dx.requires_grad
    np.testing.assert_allclose(dx.numpy(), 1 - np.tanh(xv) ** 2, rtol=1e-6)


def test_the_saved_alias_closes_no_cycle():
    # the node holds the output's memory, not the output: dropping the
    # output frees its node by reference counting, with no collector run
    import weakref
    x = dg.tensor(np.ones(4, np.float32))
    x.requires_grad = True
    y = ops.exp(x)
    node = weakref.ref(y._grad_fn)
    gc.disable()
    try:
        del y
        assert node() is None
    finally:
        gc.enable()


@pytest.mark.parametrize("op,fn,make,deriv", CASES[:2], ids=["Exp", "Tanh"])
def test_second_order_through_the_saved_result(op, fn, make, deriv):
    # create_graph: the rule's ops on the saved result record through its
    # node, so the second derivative is the op's; both paths give it
    rng = np.random.default_rng(2)
    xv = make(rng, (6,))
    second = {"Exp": np.exp, "Tanh": lambda v: -2 * np.tanh(v) * (1 - np.tanh(v) ** 2)}[op]
    results = []
    for export in (False, True):
        x = dg.tensor(xv)
        x.requires_grad = True
        y = fn(x)
        if export:
            _export(y)
        (g,) = dg.grad([ops.sum(y)], [x], create_graph=True)
        (gg,) = dg.grad([ops.sum(g)], [x])
        np.testing.assert_allclose(g.numpy(), deriv(xv), rtol=1e-12)
        np.testing.assert_allclose(gg.numpy(), second(xv), rtol=1e-12)
        results.append(gg.numpy())
    np.testing.assert_array_equal(results[0], results[1])


def test_traced_rules_recompute_and_match_eager():
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((4, 16)).astype(np.float32)

    def loss_grad(x):
        x.requires_grad = True
        loss = ops.sum(ops.softmax(x, -1) * ops.exp(x))
        (g,) = dg.grad([loss], [x])
        return g

    eager = loss_grad(dg.tensor(xv)).numpy()
    compiled = dg.function(loss_grad)(dg.tensor(xv)).numpy()
    np.testing.assert_allclose(compiled, eager, rtol=1e-6, atol=1e-6)
    # inside the trace no node holds a result: the graph recomputes (CSE
    # merges it with the forward op)
    held = []

    def record(x):
        x.requires_grad = True
        y = ops.exp(x)
        held.append(y._grad_fn.result)
        return y

    dg.function(record)(dg.tensor(xv))
    assert held == [None]
