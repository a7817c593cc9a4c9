"""Gradient clipping by norm and by value, on .grad and on explicit
gradient lists, eager and inside @dg.function."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.optim import (clip_grad_norm_, clip_grad_value_, clip_grads_by_norm,
                               clip_grads_by_value, total_norm)


def _grads(rng, dtype="float64"):
    return [rng.uniform(-2, 2, s).astype(dtype) for s in [(3, 4), (5,), (), (0, 2)]]


def _np_norm(arrays, p):
    flat = np.concatenate([a.reshape(-1).astype(np.float64) for a in arrays])
    if p == float("inf"):
        return np.abs(flat).max()
    return (np.abs(flat) ** p).sum() ** (1.0 / p)


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf"), "inf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_total_norm(rng, p, dtype):
    gs = _grads(rng, dtype)
    got = total_norm([dg.tensor(g) for g in gs], p)
    assert got.shape == () and got.dtype.name == dtype
    pf = float("inf") if p == "inf" else p
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.item(), _np_norm(gs, pf), rtol=tol)


@pytest.mark.parametrize("p", [2.0, float("inf")])
def test_clip_grad_norm_scales_grads_and_returns_norm(rng, p):
    gs = _grads(rng)
    params = []
    for g in gs:
        t = dg.tensor(np.zeros_like(g)).requires_grad_()
        t.grad = dg.tensor(g)
        params.append(t)
    norm = clip_grad_norm_(params, max_norm=0.5, norm_type=p)
    want = _np_norm(gs, p)
    np.testing.assert_allclose(norm.item(), want, rtol=1e-12)
    scale = 0.5 / (want + 1e-6)
    for t, g in zip(params, gs):
        np.testing.assert_allclose(t.grad.numpy(), g * scale, rtol=1e-12)
    np.testing.assert_allclose(_np_norm([t.grad.numpy() for t in params], p), 0.5, rtol=1e-5)


def test_small_norm_is_left_alone(rng):
    gs = _grads(rng)
    clipped, norm = clip_grads_by_norm([dg.tensor(g) for g in gs], max_norm=1e6)
    for c, g in zip(clipped, gs):
        np.testing.assert_array_equal(c.numpy(), g)


def test_clip_grads_by_norm_keeps_none_and_mixed_dtypes():
    grads = [dg.tensor(np.array([3.0], np.float32)), None, dg.tensor(np.array([4.0]))]
    clipped, norm = clip_grads_by_norm(grads, max_norm=1.0)
    assert clipped[1] is None
    assert clipped[0].dtype.name == "float32" and clipped[2].dtype.name == "float64"
    np.testing.assert_allclose(norm.item(), 5.0)
    np.testing.assert_allclose(clipped[0].numpy(), [0.6], rtol=1e-5)
    np.testing.assert_allclose(clipped[2].numpy(), [0.8], rtol=1e-5)


def test_clip_by_norm_in_graph_mode(rng):
    gs = _grads(rng)

    @dg.function
    def clip(grads, max_norm):
        return clip_grads_by_norm(grads, max_norm)

    for max_norm in (0.5, 1e6):
        got, norm = clip([dg.tensor(g) for g in gs], max_norm)
        want, want_norm = clip_grads_by_norm([dg.tensor(g) for g in gs], max_norm)
        np.testing.assert_allclose(norm.item(), want_norm.item(), rtol=1e-14)
        for a, b in zip(got, want):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-14)


def test_clip_by_value(rng):
    gs = _grads(rng)
    params = []
    for g in gs:
        t = dg.tensor(np.zeros_like(g)).requires_grad_()
        t.grad = dg.tensor(g)
        params.append(t)
    params.append(dg.tensor(np.zeros(2)).requires_grad_())   # no grad: skipped
    clip_grad_value_(params, 0.7)
    for t, g in zip(params, gs):
        np.testing.assert_array_equal(t.grad.numpy(), np.clip(g, -0.7, 0.7))
    assert params[-1].grad is None
    out = clip_grads_by_value([dg.tensor(gs[0]), None], 0.1)
    assert out[1] is None
    np.testing.assert_array_equal(out[0].numpy(), np.clip(gs[0], -0.1, 0.1))


def test_nonfinite_norm():
    t = dg.tensor(np.zeros(2)).requires_grad_()
    t.grad = dg.tensor(np.array([np.inf, 1.0]))
    with pytest.raises(RuntimeError, match="total norm"):
        clip_grad_norm_([t], 1.0, error_if_nonfinite=True)
    assert np.isinf(clip_grad_norm_([t], 1.0).item())


def test_bad_input():
    g = dg.tensor(np.ones(2))
    with pytest.raises(ValueError, match="max_norm"):
        clip_grads_by_norm([g], 0.0)
    with pytest.raises(ValueError, match="norm_type"):
        total_norm([g], -1.0)
    with pytest.raises(ValueError, match="no gradients"):
        total_norm([None])
    with pytest.raises(ValueError, match="clip_value"):
        clip_grads_by_value([g], -1.0)
    with pytest.raises(TypeError, match="Tensors"):
        clip_grads_by_value([np.ones(2)], 1.0)
    with pytest.raises(TypeError, match="floating point"):
        total_norm([dg.tensor(np.ones(2, np.int64))])
