"""float16 / bfloat16 CPU kernels of Softmax, LogSoftmax and SoftmaxGrad,
forward and gradient, against the float64 NumPy reference of the same
(exactly representable) 16-bit inputs.

cpu_eigen runs the float32 kernels on widened copies and rounds each output
once (``plugins/cpu_eigen/src/widen_call.h``), as torch computes 16-bit
softmax on the CPU. The bound (see tests/ops/test_half_nn.py) is

    |y - ref| <= eps_h * |ref| + 2 * terms * eps_f32 * mag + tiny

one 16-bit rounding plus the float32 computation; a kernel that
accumulated in the 16-bit type would miss it on the longer rows.
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import HALF_DTYPES, numpy_dtype, run_op

import dragon_core as dg

from .test_half_nn import EPS, _f64, _half, assert_close

SHAPES = [((7,), -1), ((3, 5), -1), ((3, 5), 0), ((2, 3, 4), 1), ((2, 3, 4), -3),
          ((4, 300), -1), ((300, 3), 0), ((0, 4), -1), ((4, 0), 0), ((2, 1, 33), 2),
          ((1, 1), -1)]


def softmax_ref(x, axis):
    x = _f64(x)
    e = np.exp(x - x.max(axis=axis, keepdims=True)) if x.size else x
    return e / e.sum(axis=axis, keepdims=True) if x.size else x


def log_softmax_ref(x, axis):
    x = _f64(x)
    if not x.size:
        return x
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,axis", SHAPES)
def test_softmax_half(dt, shape, axis):
    rng = np.random.default_rng(3)
    x = _half(rng, dt, shape, -8.0, 8.0)
    y = run_op("Softmax", x, axis=axis)
    n = shape[axis] if shape else 1
    assert_close(y, softmax_ref(x, axis), dt, terms=8 + n, what="Softmax")
    ly = run_op("LogSoftmax", x, axis=axis)
    ref = log_softmax_ref(x, axis)
    # float32 error of (x - m) - log(s): absolute, relative to |x - m| + |log s|
    mag = np.abs(ref) + 2 * np.abs(_f64(x)) + 1
    assert_close(ly, ref, dt, mag=mag, terms=8, what="LogSoftmax")


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,axis", SHAPES)
def test_softmax_grad_half(dt, shape, axis):
    rng = np.random.default_rng(4)
    y = rng.random(shape).astype(numpy_dtype(dt))
    dy = _half(rng, dt, shape)
    dx = run_op("SoftmaxGrad", y, dy, axis=axis)
    yf, dyf = _f64(y), _f64(dy)
    ref = yf * (dyf - (dyf * yf).sum(axis=axis, keepdims=True))
    mag = yf * (np.abs(dyf) + (np.abs(dyf) * yf).sum(axis=axis, keepdims=True))
    n = shape[axis] if shape else 1
    assert_close(dx, ref, dt, mag=mag, terms=n + 2, what="SoftmaxGrad")


@pytest.mark.parametrize("dt", HALF_DTYPES)
def test_softmax_half_special_values(dt):
    """NaN / +inf make their slice NaN; -inf beside finite values gives 0
    (log: -inf), as the float32 kernel."""
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0], [-np.inf, 0.0, 0.0],
                  [60000.0, 60000.0, -60000.0]], np.float32).astype(numpy_dtype(dt))
    y = _f64(run_op("Softmax", x, axis=-1))
    assert np.isnan(y[0]).all() and np.isnan(y[1]).all()
    np.testing.assert_array_equal(y[2], [0.0, 0.5, 0.5])
    np.testing.assert_array_equal(y[3], [0.5, 0.5, 0.0])
    ly = _f64(run_op("LogSoftmax", x, axis=-1))
    assert ly[2, 0] == -np.inf and np.isnan(ly[0]).all()


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("shape,axis", [((3, 6), -1), ((4, 3, 2), 1), ((5,), 0)])
def test_softmax_half_gradient(dt, op, shape, axis):
    """The gradient rules on 16-bit tensors: the float64 analytic gradient
    of the same inputs, within one 16-bit rounding of each term."""
    rng = np.random.default_rng(5)
    x = _half(rng, dt, shape, -3.0, 3.0)
    w = _half(rng, dt, shape)
    xt = dg.tensor(x)
    xt.requires_grad = True
    y = getattr(dg.ops, op)(xt, axis)
    assert y.dtype.name == dt
    y.backward(dg.tensor(w))
    g = xt.grad
    assert g.dtype.name == dt
    s = softmax_ref(x, axis)
    wf = _f64(w)
    if op == "softmax":
        ref = s * (wf - (wf * s).sum(axis=axis, keepdims=True))
        mag = s * (np.abs(wf) + (np.abs(wf) * s).sum(axis=axis, keepdims=True))
    else:
        ref = wf - s * wf.sum(axis=axis, keepdims=True)
        mag = np.abs(wf) + s * np.abs(wf).sum(axis=axis, keepdims=True)
    # y is rounded once before the gradient reads it (softmax), dx once
    err = np.abs(_f64(g.numpy()) - ref)
    bound = 4 * EPS[dt] * mag + 1e-6
    assert (err <= bound).all(), f"{op} [{dt}] gradient: worst {err.max():.3g}"


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_half_gradient_compiled(dt, op, axis):
    """A traced step records the float32 chain of the 16-bit rules (not the
    fused eager call): the compiled gradient is within the same bound of the
    float64 reference and within one 16-bit rounding of eager."""
    rng = np.random.default_rng(6)
    x = dg.tensor(_half(rng, dt, (5, 7), -3.0, 3.0))
    w = dg.tensor(_half(rng, dt, (5, 7)))

    def step(x, w):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = getattr(dg.ops, op)(x, axis)
            loss = dg.ops.sum(dg.ops.cast(y, "float32") * dg.ops.cast(w, "float32"))
        return tape.gradient(loss, x)

    eager = _f64(step(x, w).numpy())
    got = dg.function(step)(x, w)
    assert got.dtype.name == dt
    got = _f64(got.numpy())
    s = softmax_ref(x.numpy(), axis)
    wf = _f64(w.numpy())
    if op == "softmax":
        ref = s * (wf - (wf * s).sum(axis=axis, keepdims=True))
        mag = s * (np.abs(wf) + (np.abs(wf) * s).sum(axis=axis, keepdims=True))
    else:
        ref = wf - s * wf.sum(axis=axis, keepdims=True)
        mag = np.abs(wf) + s * np.abs(wf).sum(axis=axis, keepdims=True)
    for g in (eager, got):
        assert (np.abs(g - ref) <= 4 * EPS[dt] * mag + 1e-6).all(), np.abs(g - ref).max()
    assert (np.abs(got - eager) <= 2 * EPS[dt] * mag + 1e-6).all()
