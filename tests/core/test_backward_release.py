"""backward() drops each intermediate gradient once its op's rule has read
it (as torch frees a consumed gradient), so the gradients of a long chain do
not all stay allocated until the pass ends; the values, hooks, retain_grad
and grad()/GradientTape (which keep every gradient they may return) are
unchanged."""

import numpy as np
import pytest
import torch

import dragon_core as dg
from dragon_core import _autograd

N = 1 << 18          # float32 elements: 1 MiB per tensor
DEPTH = 24


def _chain(x, depth=DEPTH):
    y = x
    for _ in range(depth):
        y = dg.ops.tanh(y) * 0.9
    return y


def _peak_during_backward(depth=DEPTH):
    x = dg.tensor(np.linspace(-1, 1, N, dtype=np.float32)).requires_grad_()
    loss = dg.ops.sum(_chain(x, depth))
    base = dg.memory.stats()["allocated"]
    dg.memory.reset_peak()
    loss.backward()
    return dg.memory.stats()["peak"] - base, x


def test_backward_peak_memory_does_not_grow_with_depth():
    # Every Tanh/Mul node's output gradient is read by its rule only; once
    # consumed it is freed, so the pass holds a few 1 MiB gradients at a
    # time, whatever the depth (all 2 * DEPTH of them stayed before).
    peak, x = _peak_during_backward()
    assert x.grad is not None
    assert peak < 8 * 4 * N, f"backward peaked {peak / 4 / N:.1f} MiB above the forward"


def test_chain_gradient_matches_torch():
    xs = np.linspace(-1, 1, 1000, dtype=np.float32)
    x = dg.tensor(xs).requires_grad_()
    dg.ops.sum(_chain(x, 6)).backward()
    tx = torch.tensor(xs, requires_grad=True)
    y = tx
    for _ in range(6):
        y = torch.tanh(y) * 0.9
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_retain_grad_and_hooks_still_see_intermediate_gradients():
    xs = np.array([0.5, -0.3, 0.2], dtype=np.float32)
    x = dg.tensor(xs).requires_grad_()
    a = x * 3.0
    b = dg.ops.tanh(a)
    seen = []
    _autograd.register_hook(b, lambda g: seen.append(g.numpy().copy()))
    _autograd.retain_grad(a)
    (b * b).sum().backward()
    tx = torch.tensor(xs, requires_grad=True)
    ta = tx * 3.0
    tb = torch.tanh(ta)
    tseen = []
    tb.register_hook(lambda g: tseen.append(g.detach().numpy().copy()))
    ta.retain_grad()
    (tb * tb).sum().backward()
    np.testing.assert_allclose(seen[0], tseen[0], rtol=1e-6)
    np.testing.assert_allclose(a.grad.numpy(), ta.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.numpy(), rtol=1e-6)


def test_grad_of_intermediate_tensors_is_kept():
    # autograd.grad may ask for a non-leaf's gradient: it must survive the
    # pass even though that tensor's node consumed it.
    xs = np.array([0.25, -0.5], dtype=np.float32)
    x = dg.tensor(xs).requires_grad_()
    a = x * 2.0
    b = dg.ops.exp(a)
    ga, gx = dg.grad(dg.ops.sum(b * a), [a, x])
    tx = torch.tensor(xs, requires_grad=True)
    ta = tx * 2.0
    tb = torch.exp(ta)
    tga, tgx = torch.autograd.grad((tb * ta).sum(), [ta, tx])
    np.testing.assert_allclose(ga.numpy(), tga.numpy(), rtol=1e-6)
    np.testing.assert_allclose(gx.numpy(), tgx.numpy(), rtol=1e-6)


def test_backward_twice_accumulates_as_before():
    # the graph itself is kept (Dragon's backward retains it): a second
    # pass gives the same gradients again
    xs = np.array([0.1, 0.7], dtype=np.float32)
    x = dg.tensor(xs).requires_grad_()
    loss = dg.ops.sum(_chain(x, 3))
    loss.backward()
    first = x.grad.numpy().copy()
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * first, rtol=1e-6)


@pytest.mark.parametrize("create_graph", [False, True])
def test_second_order_through_released_pass(create_graph):
    xs = np.array([0.3, -0.2], dtype=np.float32)
    x = dg.tensor(xs).requires_grad_()
    y = dg.ops.sum(dg.ops.tanh(x) ** 3)
    (g,) = dg.grad(y, [x], create_graph=True)
    dg.ops.sum(g).backward(create_graph=create_graph)
    tx = torch.tensor(xs, requires_grad=True)
    (tg,) = torch.autograd.grad((torch.tanh(tx) ** 3).sum(), [tx], create_graph=True)
    tg.sum().backward(create_graph=create_graph)
    np.testing.assert_allclose(x.grad.numpy(), tx.grad.detach().numpy(), rtol=1e-5)
