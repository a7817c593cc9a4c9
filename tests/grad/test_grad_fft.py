"""Gradient rules of the DFT family (``_grads/fft.py``) and of the spectral
functions built on it, against central finite differences in float64, first
and second order: cut and zero-padded lengths, odd and even n (Irfft's
zero and n/2 frequencies), prime lengths (Bluestein), every norm, axes."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

CASES = [((1, 2), {}), ((7, 2), {}), ((3, 5, 2), {"axis": 0}), ((2, 6, 2), {"n": 4}),
         ((2, 6, 2), {"n": 9, "norm": "ortho"}), ((4, 3, 2), {"axis": -2, "norm": "forward"}),
         ((2, 3, 4, 2), {"axis": 1, "n": 5}), ((0, 4, 2), {})]


def _x(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


@pytest.mark.parametrize("op", ["Fft", "Ifft"])
@pytest.mark.parametrize("shape, attrs", CASES, ids=str)
def test_complex(op, shape, attrs):
    case = OpCase.of(op, [_x(shape)], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shape, attrs", [((1,), {}), ((8,), {}), ((7,), {}), ((3, 5), {"axis": 0}),
                                          ((2, 6), {"n": 4}), ((2, 6), {"n": 11, "norm": "ortho"}),
                                          ((4, 3), {"axis": 0, "norm": "forward", "n": 6}),
                                          ((2, 13, 3), {"axis": 1})], ids=str)
def test_rfft(shape, attrs):
    case = OpCase.of("Rfft", [_x(shape, 1)], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shape, attrs", [((2, 2), {}), ((5, 2), {}), ((5, 2), {"n": 9}),
                                          ((3, 4, 2), {"axis": 0}),
                                          ((2, 6, 2), {"n": 4, "norm": "ortho"}),
                                          ((2, 4, 2), {"n": 13, "norm": "forward"}),
                                          ((3, 2, 2), {"axis": -2, "n": 1}),
                                          ((2, 7, 3, 2), {"axis": 1, "n": 12})], ids=str)
def test_irfft(shape, attrs):
    case = OpCase.of("Irfft", [_x(shape, 2)], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


def _fd(f, x, eps=1e-6):
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        d = np.zeros_like(x)
        d[i] = eps
        g[i] = (f(x + d) - f(x - d)) / (2 * eps)
    return g


@pytest.mark.parametrize("kw", [{}, {"onesided": True, "dft_length": 5},
                                {"inverse": True, "onesided": True}], ids=str)
def test_dft_composite_gradient(kw):
    x0 = _x((2, 4, 1), 3)
    w = _x(dg.ops.dft(dg.tensor(x0), **kw).shape, 4)

    def loss(a):
        return float((dg.ops.dft(dg.tensor(a), **kw).numpy() * w).sum())

    x = dg.tensor(x0)
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.dft(x, **kw)
    g = tape.gradient(y, x, output_gradients=dg.tensor(w)).numpy()
    np.testing.assert_allclose(g, _fd(loss, x0), rtol=1e-6, atol=1e-8)


def test_stft_gradient_signal_and_window():
    s0, w0 = _x((1, 12, 1), 5), _x((4,), 6)
    out_shape = dg.ops.stft(dg.tensor(s0), 3, dg.tensor(w0)).shape
    v = _x(out_shape, 7)
    s, win = dg.tensor(s0), dg.tensor(w0)
    with dg.GradientTape() as tape:
        tape.watch(s)
        tape.watch(win)
        y = dg.ops.stft(s, 3, win)
    gs, gw = tape.gradient(y, [s, win], output_gradients=dg.tensor(v))

    def loss(a, b):
        return float((dg.ops.stft(dg.tensor(a), 3, dg.tensor(b)).numpy() * v).sum())

    np.testing.assert_allclose(gs.numpy(), _fd(lambda a: loss(a, w0), s0), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(gw.numpy(), _fd(lambda b: loss(s0, b), w0), rtol=1e-6, atol=1e-8)
