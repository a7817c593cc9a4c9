"""The cast_fold pass: Casts of matmul products folded into ``out_dtype``
(dragon_core/_graph/passes/cast_fold.py)."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg


@pytest.fixture
def operands():
    rng = np.random.default_rng(7)
    a = dg.tensor(rng.standard_normal((2, 6, 8)).astype(np.float32)).astype("bfloat16")
    b = dg.tensor(rng.standard_normal((8, 5)).astype(np.float32)).astype("bfloat16")
    return a, b


def _types(fn, *args):
    return [op.type for op in fn.get_graph(*args).op]


def _matmul(fn, *args):
    (mm,) = [op for op in fn.get_graph(*args).op if op.type == "MatMul"]
    return mm


def _out_dtype(op):
    from dragon_core._graph.build import attr_from_proto
    return attr_from_proto(op.attr["out_dtype"]) if "out_dtype" in op.attr else None


def test_up_cast_folded(operands):
    a, b = operands

    def f(a, b):
        return dg.ops.relu(dg.ops.matmul(a, b).astype("float32"))

    g = dg.function(f)
    out = g(a, b)
    assert "Cast" not in _types(g, a, b)
    assert _out_dtype(_matmul(g, a, b)) == "float32"
    assert out.dtype == dg.float32
    # The fold writes the float32 accumulator: the product of out_dtype=float32.
    want = dg.ops.relu(dg.ops.matmul(a, b, out_dtype="float32"))
    np.testing.assert_array_equal(out.numpy(), want.numpy())
    # Within one bfloat16 rounding of the unfolded (eager) result.
    eager = f(a, b).numpy()
    np.testing.assert_allclose(out.numpy(), eager, rtol=2.0 ** -8, atol=1e-6)
    off = dg.function(f, disable_passes=("cast_fold",))
    assert "Cast" in _types(off, a, b)
    np.testing.assert_array_equal(off(a, b).numpy(), eager)


def test_up_cast_through_reshape(operands):
    a, b = operands

    def f(a, b):
        return dg.ops.softmax(dg.ops.reshape(dg.ops.matmul(a, b), [12, 5]).astype("float32"), -1)

    g = dg.function(f)
    out = g(a, b)
    types = _types(g, a, b)
    assert "Cast" not in types and "Reshape" in types
    assert out.dtype == dg.float32 and tuple(out.shape) == (12, 5)
    want = dg.ops.softmax(dg.ops.reshape(dg.ops.matmul(a, b, out_dtype="float32"), [12, 5]), -1)
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)


def test_down_cast_folded_bit_identical(operands):
    a, b = operands

    def f(a, b):
        y = dg.ops.matmul(a, b, out_dtype="float32").astype("bfloat16")
        return dg.ops.matmul(y, b, transpose_b=True, out_dtype="float32")

    g = dg.function(f)
    out = g(a, b)
    assert "Cast" not in _types(g, a, b)
    np.testing.assert_array_equal(out.numpy(), f(a, b).numpy())


def test_not_folded_with_other_readers(operands):
    a, b = operands

    def f(a, b):
        y = dg.ops.matmul(a, b)
        return y.astype("float32") + dg.ops.relu(y).astype("float32") * 0

    g = dg.function(f)
    g(a, b)
    assert _out_dtype(_matmul(g, a, b)) is None


def test_not_folded_when_product_is_an_output(operands):
    a, b = operands

    def f(a, b):
        y = dg.ops.matmul(a, b)
        return y, y.astype("float32")

    g = dg.function(f)
    y, y32 = g(a, b)
    assert y.dtype == dg.bfloat16 and y32.dtype == dg.float32
    assert "Cast" in _types(g, a, b)
    np.testing.assert_array_equal(y.astype("float32").numpy(), y32.numpy())


def test_float32_product_left_alone():
    rng = np.random.default_rng(1)
    a = dg.tensor(rng.standard_normal((4, 4)).astype(np.float32))

    def f(a):
        return dg.ops.matmul(a, a).astype("float64")

    g = dg.function(f)
    np.testing.assert_array_equal(g(a).numpy(), f(a).numpy())
    assert "Cast" in _types(g, a)


def test_autocast_training_graph_has_fewer_casts():
    """In a compiled autocast step the Cast down of a float32 product read
    by the next matmul is folded into the product. (The weight gradients'
    casts back to float32 are not in the trace at all: the matmul rules
    write those gradients in float32, tests/nn/test_amp_eager_casts.py.)"""
    rng = np.random.default_rng(3)
    model = dg.nn.Sequential(dg.nn.Linear(8, 16, bias=False), dg.nn.Linear(16, 4))
    opt = dg.optim.Adam(model.parameters(), lr=1e-3)
    x = dg.tensor(rng.standard_normal((5, 8)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu"):
            loss = dg.nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss

    on = dg.function(step)
    on(x, t)
    casts_on = _types(on, x, t).count("Cast")
    off = dg.function(step, disable_passes=("cast_fold",))
    off(x, t)
    casts_off = _types(off, x, t).count("Cast")
    assert casts_on < casts_off


def test_biased_fused_product_left_alone(operands):
    """MatMulBiasAct's bias has the product's dtype: its Cast stays."""
    a, b = operands
    bias = dg.ops.zeros([5], dtype="bfloat16") + 0.5

    def f(a, b, bias):
        return dg.ops.matmul_bias_act(a, b, bias, activation="none").astype("float32")

    g = dg.function(f)
    np.testing.assert_array_equal(g(a, b, bias).numpy(), f(a, b, bias).numpy())
    assert "Cast" in _types(g, a, b, bias)
