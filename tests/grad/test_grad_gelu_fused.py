"""The exact GELU's gradient in a compiled step is one GeluGrad op (issue
21). The composed form it replaced (``gelu_grad_composed``, kept as the A/B
reference) is still one FusedElementwise: its series/quotient switch at
|x| = 0.1 is built from element-wise table ops (abs, ceil, maximum), not
comparisons, a bitwise and and a cast, which would be four more ops over
the whole activation. The
values are checked against the closed form in float64 (eager and compiled)
and the fused float32/bfloat16 step against its eager run."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg


def _closed_form(x):
    """d gelu(x) / dx = Phi(x) + x phi(x), float64."""
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x.ravel()]).reshape(x.shape)
    return cdf + x * pdf


def _ones(x):
    return dg.ops.ones(list(x.shape), x.dtype)


def _grad(x, dy):
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.gelu(x, "none")
    return tape.gradient(y, x, output_gradients=dy)


def _points(dtype):
    rng = np.random.default_rng(0)
    edge = [0.0, -0.0, 0.05, -0.0999, 0.0999, 0.1, -0.1, 0.1001, 3.0, -3.0, -7.5, 8.0,
            -40.0, 40.0]
    return np.concatenate([edge, rng.standard_normal(997) * 2]).astype(dtype)


def test_compiled_gradient_is_one_gelu_grad_op():
    f = dg.function(_grad)
    x = dg.tensor(_points("float32"))
    g = f.get_graph(x, _ones(x))
    types = [op.type for op in g.op]
    assert types == ["GeluGrad"], types


def _composed(x, dy):
    from dragon_core._grads.unary import gelu_grad_composed
    return gelu_grad_composed(x, dy, "none")


def test_composed_gradient_is_one_fused_op():
    f = dg.function(_composed)
    x = dg.tensor(_points("float32"))
    g = f.get_graph(x, _ones(x))
    types = [op.type for op in g.op]
    assert types.count("FusedElementwise") == 1, types
    for t in ("Less", "Greater", "BitwiseAnd", "Cast", "Exp", "Div"):
        assert t not in types, types


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-14), ("float32", 2e-6)])
def test_matches_closed_form_eager_and_compiled(dtype, tol):
    xs = _points(dtype)
    x = dg.tensor(xs)
    dy = _ones(x)
    want = _closed_form(xs.astype(np.float64))
    for got in (_grad(x, dy), dg.function(_grad)(x, dy)):
        assert got.dtype == dtype
        np.testing.assert_allclose(got.numpy().astype(np.float64), want, rtol=tol, atol=tol)


def test_nan_input_gives_nan_gradient():
    x = dg.tensor(np.array([np.nan, 1.0, np.nan, -0.05]))
    got = _grad(x, _ones(x)).numpy()
    assert np.isnan(got[[0, 2]]).all() and np.isfinite(got[[1, 3]]).all()


def test_bfloat16_compiled_matches_eager():
    x = dg.ops.cast(dg.tensor(_points("float32")), "bfloat16")
    dy = _ones(x)
    eager = dg.ops.cast(_grad(x, dy), "float64").numpy()
    compiled = dg.ops.cast(dg.function(_grad)(x, dy), "float64").numpy()
    xs = dg.ops.cast(x, "float64").numpy()
    np.testing.assert_allclose(eager, _closed_form(xs), rtol=3e-2, atol=3e-2)
    np.testing.assert_allclose(compiled, _closed_form(xs), rtol=3e-2, atol=3e-2)
