"""GradientTape watches tensors that require grad (issue 13, item 4).

docs/python-api.md promises ``tape.watch(x)  # or tensors with
requires_grad``: a tape must never silently return None for such a source.
"""

import warnings

import numpy as np
import pytest

import dragon_core as dg


def test_tape_watches_requires_grad_without_watch():
    w = dg.tensor([1.0, 2.0]).requires_grad_()
    with dg.GradientTape() as tape:
        y = dg.ops.sum(w * w)
    g = tape.gradient(y, w)
    assert g is not None
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    # The tape does not accumulate into .grad (that is backward()'s job).
    assert w.grad is None


def test_tape_mixes_watched_and_requires_grad_sources():
    x = dg.tensor(np.float32(3.0))
    w = dg.tensor(np.float32(2.0)).requires_grad_()
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = x * x * w
    gx, gw = tape.gradient(y, [x, w])
    np.testing.assert_allclose(float(gx), 2 * 3.0 * 2.0)
    np.testing.assert_allclose(float(gw), 9.0)


def test_watch_accessed_variables_false_keeps_explicit_watch_only():
    w = dg.tensor([1.0, 2.0]).requires_grad_()
    with dg.GradientTape(watch_accessed_variables=False) as tape:
        y = dg.ops.sum(w * w)
    with pytest.warns(UserWarning, match="never watched"):
        assert tape.gradient(y, w) is None


def test_unwatched_source_warns_instead_of_silent_none():
    x = dg.tensor([1.0, 2.0])
    with dg.GradientTape() as tape:
        y = dg.ops.sum(x * x)
    with pytest.warns(UserWarning, match="tape.watch"):
        assert tape.gradient(y, x) is None


def test_watched_but_unconnected_source_is_none_without_warning():
    x = dg.tensor([1.0, 2.0])
    z = dg.tensor([3.0])
    with dg.GradientTape() as tape:
        tape.watch([x, z])
        y = dg.ops.sum(x * x)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        gx, gz = tape.gradient(y, [x, z])
    assert gz is None
    np.testing.assert_allclose(gx.numpy(), [2.0, 4.0])


def test_unused_parameters_are_none_without_a_misleading_warning():
    """A parameter that requires grad but that no op read this step (an
    unused layer) is unconnected, not unwatched: None, and no 'call
    tape.watch' warning (it was emitted for every unused parameter)."""
    used, unused = dg.nn.Linear(2, 2), dg.nn.Linear(2, 2)
    x = dg.tensor(np.ones((1, 2), np.float32))
    with dg.GradientTape() as tape:
        loss = dg.ops.sum(used(x))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        grads = tape.gradient(loss, list(used.parameters()) + list(unused.parameters()))
    assert [g is None for g in grads] == [False, False, True, True]

def test_linear_sgd_loop_with_tape_learns_like_numpy():
    """An nn.Linear + SGD loop written with the tape and no watch() learns,
    and every step equals the NumPy reference."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    y = (x @ np.array([[1.5], [-2.0], [0.5]], np.float32) + 0.3).astype(np.float32)
    model = dg.nn.Linear(3, 1)
    w_ref = model.weight.numpy().astype(np.float64)   # (out, in)
    b_ref = model.bias.numpy().astype(np.float64)
    opt = dg.optim.SGD(model.parameters(), lr=0.1)
    params = list(model.parameters())
    xt, yt = dg.tensor(x), dg.tensor(y)
    losses = []
    for _ in range(30):
        with dg.GradientTape() as tape:
            loss = dg.ops.mean((model(xt) - yt) ** 2)
        grads = tape.gradient(loss, params)
        assert all(g is not None for g in grads)
        opt.step(grads)
        losses.append(float(loss))
        # NumPy reference step.
        err = x @ w_ref.T + b_ref - y
        gw = 2 * err.T @ x / err.size
        gb = 2 * err.sum(0) / err.size
        w_ref -= 0.1 * gw
        b_ref -= 0.1 * gb
        np.testing.assert_allclose(model.weight.numpy(), w_ref, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(model.bias.numpy(), b_ref, rtol=1e-4, atol=1e-5)
    assert losses[-1] < 0.05 * losses[0]
