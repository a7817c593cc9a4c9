"""A leaf's ``.grad`` owns its memory, as torch's AccumulateGrad makes it.

Before, the first gradient stored on a leaf was an alias of whatever tensor
the backward pass produced: one rule's gradient handed to two leaves (``a +
b``), the caller's ``gradient=`` tensor, or a retained non-leaf gradient. An
in-place op on one ``.grad`` (``mul_``, ``zero_``, an optimizer written by
hand) then changed the other leaf's gradient or the caller's tensor too.
Each case is run on real torch 2.13 and on vm.torch.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.vm.torch as vt

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")


def _case_two_leaves(T):
    a, b = T.nn.Parameter(T.ones(3)), T.nn.Parameter(T.ones(3))
    (a + b).sum().backward()
    a.grad.mul_(5)
    return [a.grad, b.grad]


def _case_gradient_argument(T):
    q, v = T.nn.Parameter(T.ones(3)), T.tensor([3.0, 4.0, 0.0])
    q.backward(v)
    q.grad.zero_()
    return [v, q.grad]


def _case_non_leaf_gradient_argument(T):
    x, v = T.nn.Parameter(T.ones(2, 2)), T.tensor([1.0, 2.0, 3.0, 4.0])
    x.reshape(4).backward(v)
    x.grad.add_(1)
    return [v, x.grad]


def _case_retained_grad(T):
    x = T.nn.Parameter(T.ones(4))
    y = x.reshape(2, 2)
    y.retain_grad()
    (y * 3).sum().backward()
    x.grad.mul_(2)
    return [y.grad, x.grad]


def _case_expand(T):
    w = T.nn.Parameter(T.ones(3))
    u = T.nn.Parameter(T.ones(3))
    (w.expand(2, 3) + u.expand(2, 3)).sum().backward()
    w.grad.sub_(1)
    return [w.grad, u.grad]


@pytest.mark.parametrize("case", [_case_two_leaves, _case_gradient_argument,
                                  _case_retained_grad, _case_expand])
def test_in_place_on_one_grad_leaves_the_others_as_torch(case):
    want = [t.detach().numpy().copy() for t in case(torch)]
    got = [t.detach().numpy().copy() for t in case(vt)]
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_gradient_argument_through_a_view_is_not_written():
    # torch 2.13 steals the caller's v here (reshape's backward passes a view
    # of it and AccumulateGrad keeps it), so x.grad.add_(1) changes v
    # ([2, 3, 4, 5]); vm.torch copies, as torch does for a leaf target.
    want_torch = [t.detach().numpy().copy() for t in _case_non_leaf_gradient_argument(torch)]
    np.testing.assert_array_equal(want_torch[0], [2.0, 3.0, 4.0, 5.0])
    v, g = (t.detach().numpy().copy() for t in _case_non_leaf_gradient_argument(vt))
    np.testing.assert_array_equal(v, [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_array_equal(g, [[2.0, 3.0], [4.0, 5.0]])


def test_native_api_gradient_argument_is_not_aliased():
    q = dg.tensor(np.ones(3, np.float32))
    q.requires_grad = True
    v = dg.tensor(np.array([3.0, 4.0, 0.0], np.float32))
    q.backward(v)
    np.testing.assert_array_equal(q.grad.numpy(), [3.0, 4.0, 0.0])
    assert not q.grad._same_storage(v)
