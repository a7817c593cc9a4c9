"""The native optimizers and clipping write ``.grad`` in place, and the
optimizer's ``state`` is a mutable mapping (``del``, ``pop``, ``clear``).

Before, ``zero_grad(set_to_none=False)``, ``clip_grad_norm_`` and
``clip_grad_value_`` rebound ``p.grad`` to a new tensor, so a reference
``h = p.grad`` taken before (a hook, a logging list) kept the old values,
where torch's in-place writes show through; and ``del opt.state[p]`` raised.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg


def _param(values):
    p = dg.tensor(np.asarray(values, np.float32))
    p.requires_grad = True
    (p * p).sum().backward()  # grad = 2 p
    return p


def test_zero_grad_keeps_the_gradient_tensor():
    p = _param([3.0, 4.0])
    opt = dg.optim.SGD([p], lr=0.1)
    held = p.grad
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(held.numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(p.grad.numpy(), [0.0, 0.0])


def test_clip_grad_norm_scales_the_held_gradient():
    p = _param([3.0, 4.0])          # grad [6, 8], norm 10
    held = p.grad
    norm = dg.optim.clip_grad_norm_([p], 1.0)
    assert float(norm.numpy()) == pytest.approx(10.0)
    np.testing.assert_allclose(held.numpy(), [0.6, 0.8], rtol=1e-5)
    np.testing.assert_allclose(p.grad.numpy(), [0.6, 0.8], rtol=1e-5)


def test_clip_grad_value_clamps_the_held_gradient():
    p = _param([3.0, -4.0])         # grad [6, -8]
    held = p.grad
    dg.optim.clip_grad_value_([p], 5.0)
    np.testing.assert_array_equal(held.numpy(), [5.0, -5.0])


def test_state_is_a_mutable_mapping():
    p, q = _param([1.0]), _param([2.0])
    opt = dg.optim.Adam([p, q], lr=0.1)
    opt.step()
    assert p in opt.state and q in opt.state
    del opt.state[p]
    assert p not in opt.state and q in opt.state
    assert opt.state.pop(q) is not None
    assert opt.state.pop(q, "gone") == "gone"
    opt.state[p]["x"] = 1
    opt.state.clear()
    assert len(opt.state) == 0 and p not in opt.state
    opt.step()                      # fresh state again
    assert p in opt.state
