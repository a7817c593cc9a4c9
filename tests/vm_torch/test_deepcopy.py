"""copy.deepcopy of vm.torch tensors against torch 2.13: a leaf's copy keeps
requires_grad and a copy of .grad (equal values, another tensor), shared
references stay shared, and an intermediate of the autograd graph raises as
in torch (a copy would silently leave the graph)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import dragon_core.vm.torch as dt


@pytest.mark.parametrize("lib", [torch, dt], ids=["torch", "dragon"])
def test_leaf_copy_keeps_grad_and_requires_grad(lib):
    a = lib.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (a * a).sum().backward()
    b = copy.deepcopy(a)
    assert b.requires_grad and b.is_leaf
    assert b.grad is not None and b.grad is not a.grad
    np.testing.assert_array_equal(b.grad.numpy(), [2.0, -4.0, 6.0])
    np.testing.assert_array_equal(b.detach().numpy(), a.detach().numpy())
    # The copies are independent.
    with lib.no_grad():
        b.grad.mul_(0.0)
        b.add_(1.0)
    np.testing.assert_array_equal(a.grad.numpy(), [2.0, -4.0, 6.0])
    np.testing.assert_array_equal(a.detach().numpy(), [1.0, -2.0, 3.0])


@pytest.mark.parametrize("lib", [torch, dt], ids=["torch", "dragon"])
def test_no_grad_tensor_and_shared_references(lib):
    x = lib.ones(2, 3)
    pair = copy.deepcopy([x, x])
    assert pair[0] is pair[1] and pair[0] is not x
    assert not pair[0].requires_grad and pair[0].grad is None
    with lib.no_grad():
        y = lib.ones(2, requires_grad=True) * 3
    z = copy.deepcopy(y)
    assert not z.requires_grad
    np.testing.assert_array_equal(z.numpy(), [3.0, 3.0])


@pytest.mark.parametrize("lib", [torch, dt], ids=["torch", "dragon"])
def test_intermediate_raises(lib):
    c = lib.ones(2, requires_grad=True) * 3
    with pytest.raises(RuntimeError, match="graph leaves"):
        copy.deepcopy(c)
    d = copy.deepcopy(c.detach())
    np.testing.assert_array_equal(d.numpy(), [3.0, 3.0])
