"""ReluGrad: Relu's backward as one op (docs/ops.md, "Elementwise, unary").

dx = 0 where x <= 0, else dy (a NaN x passes dy, as torch's
threshold_backward), against a float64 NumPy reference on every
float dtype, the element-wise shapes (0-d, empty, odd, large enough for the
parallel path) and strided inputs; special values; bad input; and the
compiled graph (O0/O2/O3) of a Relu's gradient, where the one op replaces
``Greater`` + ``Where`` and may write over dy in place.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import FLOAT_DTYPES, OpCase, op_case

from ._common import ELEMENTWISE_SHAPES, sample


def _relu_grad(x, dy):
    return np.where(x <= 0, 0.0, dy)


def _inputs(rng, dt, shape):
    # Exact zeros in x as well (the boundary: dx = 0 there).
    x = sample(rng, dt, shape)
    if x.size:
        x.reshape(-1)[:: 5] = 0
    return [x, sample(rng, dt, shape)]


@op_case("ReluGrad", inputs=_inputs, reference=_relu_grad, dtypes=FLOAT_DTYPES,
         shapes=ELEMENTWISE_SHAPES)
def test_relu_grad(case):
    """ReluGrad matches NumPy on every float dtype, shape and layout."""
    case.check_forward()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_special_values(dtype):
    """A -0 x gives 0; a NaN x passes dy (torch 2.13: relu's gradient at a
    NaN input is dy); where x > 0, dy passes bit for bit (NaN, -0, inf); a
    NaN dy is blocked where x <= 0 (as torch's threshold)."""
    x = np.array([np.nan, -0.0, 0.0, -np.inf, np.inf, 1e-30, 2.0, 3.0, 4.0, -1.0, -2.0],
                 dtype)
    dy = np.array([5.0, 5.0, 5.0, 5.0, 5.0, 7.0, np.nan, -0.0, -np.inf, np.nan, np.inf],
                  dtype)
    out = OpCase.of("ReluGrad", [x, dy], _relu_grad).check_forward()[0]
    assert np.isnan(out[6]) and not np.isnan(out[9])
    assert np.signbit(out[7]) and out[8] == -np.inf
    if dtype != "float16":   # 1e-30 is 0 in float16
        assert out[5] == 7.0


def test_bad_input_raises_naming_the_op():
    x = dg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(ValueError, match=r"ReluGrad.*same shape.*\[2, 3\].*\[3, 2\]"):
        dg.ops.relu_grad(x, dg.tensor(np.ones((3, 2), np.float32)))
    with pytest.raises(ValueError, match="ReluGrad"):   # no broadcasting either
        dg.ops.relu_grad(x, dg.tensor(np.ones((3,), np.float32)))
    with pytest.raises((TypeError, ValueError), match="ReluGrad"):
        dg.ops.relu_grad(x, dg.tensor(np.ones((2, 3), np.float64)))
    with pytest.raises((TypeError, ValueError), match="ReluGrad"):
        dg.ops.relu_grad(dg.tensor(np.ones((2, 3), np.int32)),
                         dg.tensor(np.ones((2, 3), np.int32)))


def test_relu_gradient_is_one_relu_grad_op():
    """The Relu rule records one ReluGrad (no Greater/Where), eagerly."""
    x = dg.tensor(np.array([-1.0, 0.0, 2.0, np.nan], np.float32))
    dy = dg.tensor(np.array([3.0, 4.0, 5.0, 6.0], np.float32))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.relu(x)
    g = tape.gradient(y, x, output_gradients=dy)
    # torch 2.13 gives [0, 0, 5, 6]: a NaN x passes dy
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 5.0, 6.0])


@pytest.mark.parametrize("level", [0, 2, 3])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compiled_relu_backward(level, dtype):
    """In a compiled step the Relu's backward is one ReluGrad, at every
    optimisation level equal to eager; at O2/O3 it writes over dy in place
    (dy is dead after it)."""
    rng = np.random.default_rng(0)
    xv = rng.standard_normal((4, 33)).astype(dtype)
    xv[0, :5] = 0
    wv = rng.standard_normal((33, 33)).astype(dtype)

    def step(x, w):
        with dg.GradientTape() as tape:
            tape.watch([x, w])
            h = dg.ops.matmul(x, w)
            y = dg.ops.relu(h * 2.0)
            loss = dg.ops.sum(y * y)
        return tape.gradient(loss, [x, w])

    x, w = dg.tensor(xv), dg.tensor(wv)
    want = [t.numpy() for t in step(x, w)]
    f = dg.function(step, opt_level=level)
    got = [t.numpy() for t in f(x, w)]
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6 if dtype == "float32" else 1e-13)
    g = f.get_graph(x, w)
    types = [o.type for o in g.op]
    assert "ReluGrad" in types and "Where" not in types, types
    rg = next(o for o in g.op if o.type == "ReluGrad")
    inplace = [a.i for k, a in rg.attr.items() if k == "_inplace_input"]
    assert inplace == ([1] if level >= 2 else []), (level, inplace)
    # The reference: h = x w, relu(2h); dL/dh = 2 * 2 relu(2h) * [2h > 0].
    h = xv.astype(np.float64) @ wv.astype(np.float64)
    dh = np.where(2 * h > 0, 2 * 2 * np.maximum(2 * h, 0), 0.0)
    np.testing.assert_allclose(got[0], dh @ wv.T.astype(np.float64),
                               rtol=1e-4 if dtype == "float32" else 1e-12, atol=1e-4)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_explain_names_the_kernel(dtype):
    """explain() shows which kernel serves ReluGrad, the same every call."""
    text = dg.plugins.explain("ReluGrad", "cpu", dtype)
    assert f"winner: ReluGrad<{dtype}> from cpu_eigen" in text
    assert dg.plugins.explain("ReluGrad", "cpu", dtype) == text
