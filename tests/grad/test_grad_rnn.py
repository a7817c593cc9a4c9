"""Gradients of Lstm and Gru (``_grads/rnn.py``, the vector-Jacobian product
of the unrolled composition) against central finite differences in float64,
first and second order, and against torch autograd."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg



def make_inputs(kind, T, N, I, H, direction="forward", layout=0, n_inputs=8, seed=0):
    """X, W, R, B, sequence_lens, initial_h, initial_c, P (the first n_inputs),
    float64; lengths in [1, T]."""
    rng = np.random.default_rng(seed)
    G = 4 if kind == "Lstm" else 3
    D = 2 if direction == "bidirectional" else 1
    state = (N, D, H) if layout else (D, N, H)
    shapes = [(N, T, I) if layout else (T, N, I), (D, G * H, I), (D, G * H, H), (D, 2 * G * H),
              None, state, state, (D, 3 * H)]
    n_max = 8 if kind == "Lstm" else 6
    return [rng.integers(min(1, T), T + 1, N).astype(np.int64) if s is None
            else 0.7 * rng.standard_normal(s) for s in shapes[:min(n_inputs, n_max)]]


CONFIGS = [
    # (T, N, I, H, direction, layout, n_inputs, attrs)
    (3, 2, 3, 2, "forward", 0, 3, {}),
    (3, 2, 2, 2, "reverse", 1, 6, {}),
    (2, 2, 2, 2, "bidirectional", 0, 8, {}),
    (3, 1, 2, 2, "forward", 0, 7, {"clip": 0.6}),
    (3, 3, 2, 2, "bidirectional", 1, 5, {}),
    (0, 2, 2, 2, "forward", 0, 6, {}),
]


def _id(c):
    return f"T{c[0]}-{c[4]}-l{c[5]}-in{c[6]}-{c[7]}"


@pytest.mark.parametrize("cfg", CONFIGS, ids=[_id(c) for c in CONFIGS])
@pytest.mark.parametrize("extra", [{}, {"input_forget": True}], ids=["", "input_forget"])
def test_lstm(cfg, extra):
    T, N, I, H, direction, layout, n_in, attrs = cfg
    xs = make_inputs("Lstm", T, N, I, H, direction, layout, n_in, seed=1)
    case = OpCase.of("Lstm", xs, attrs=dict(attrs, direction=direction, layout=layout,
                                            **extra))
    case.check_grad()
    if direction == "reverse" and not extra:  # second order: one config (slow)
        case.check_grad(order=2)


@pytest.mark.parametrize("cfg", CONFIGS, ids=[_id(c) for c in CONFIGS])
@pytest.mark.parametrize("extra", [{}, {"linear_before_reset": True}], ids=["", "lbr"])
def test_gru(cfg, extra):
    T, N, I, H, direction, layout, n_in, attrs = cfg
    xs = make_inputs("Gru", T, N, I, H, direction, layout, min(n_in, 6), seed=2)
    case = OpCase.of("Gru", xs, attrs=dict(attrs, direction=direction, layout=layout,
                                           **extra))
    case.check_grad()
    if direction == "reverse" and not extra:  # second order: one config (slow)
        case.check_grad(order=2)


def test_lstm_grad_matches_torch():
    torch = pytest.importorskip("torch")
    T, N, I, H = 5, 2, 3, 4
    m = torch.nn.LSTM(I, H).double()
    x = torch.randn(T, N, I, dtype=torch.float64, requires_grad=True)
    y, _ = m(x)
    dy = torch.randn_like(y)
    y.backward(dy)

    def reorder(w):
        i, f, g, o = np.split(w, 4)
        return np.concatenate([i, o, f, g])
    W = reorder(m.weight_ih_l0.detach().numpy())[None]
    R = reorder(m.weight_hh_l0.detach().numpy())[None]
    B = np.concatenate([reorder(m.bias_ih_l0.detach().numpy()),
                        reorder(m.bias_hh_l0.detach().numpy())])[None]
    ts = [dg.tensor(a) for a in (x.detach().numpy(), W, R, B)]
    with dg.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        Y, _, _ = dg.ops.lstm(*ts)
    gx, gw = tape.gradient(Y, ts[:2], output_gradients=dg.tensor(
        dy.numpy().reshape(T, 1, N, H)))
    np.testing.assert_allclose(gx.numpy(), x.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gw.numpy()[0], reorder(m.weight_ih_l0.grad.numpy()),
                               rtol=1e-10, atol=1e-12)
