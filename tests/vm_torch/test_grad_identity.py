"""``p.grad`` returns the same Python object while the gradient tensor is the
same (torch users compare gradients by identity), as real torch 2.13."""

import gc

import pytest

import dragon_core.vm.torch as dt

torch = pytest.importorskip("torch")


@pytest.mark.parametrize("mod", [dt, torch], ids=["dragon", "torch"])
def test_grad_is_grad(mod):
    p = mod.nn.Parameter(mod.ones(3))
    (p * 2).sum().backward()
    assert p.grad is p.grad
    g = p.grad
    (p * 3).sum().backward()          # accumulated in place
    assert g is p.grad
    assert g.tolist() == [5.0, 5.0, 5.0]


@pytest.mark.parametrize("mod", [dt, torch], ids=["dragon", "torch"])
def test_assigned_grad_is_returned(mod):
    p = mod.nn.Parameter(mod.ones(3))
    w = mod.zeros(3)
    p.grad = w
    assert p.grad is w
    p.grad = None
    assert p.grad is None


def test_grad_cache_does_not_keep_a_dropped_gradient_alive():
    import weakref
    p = dt.nn.Parameter(dt.ones(3))
    (p * 2).sum().backward()
    inner = weakref.ref(p.grad._t)
    p.grad = None
    gc.collect()
    assert inner() is None
