"""vm.torch optimizers and gradient clipping against real torch 2.13: a held
``g = p.grad`` sees ``zero_grad(set_to_none=False)``, ``clip_grad_norm_`` and
``clip_grad_value_`` (torch writes in place), and ``param_groups[i]["params"]``
holds the caller's parameters (compared by identity, passed to clipping)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dragon_core.vm.torch as vt

real = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")


def _model(T):
    lin = T.nn.Linear(3, 2)
    with T.no_grad():
        lin.weight.copy_(T.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]))
        lin.bias.copy_(T.tensor([0.5, -0.5]))
    return lin


def _backward(T, lin, k=1.0):
    lin(T.tensor([[1.0, -2.0, 3.0]])).pow(2).mul(k).sum().backward()


def _both(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, got = case(real), case(vt)
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64),
                               np.asarray(want, dtype=np.float64), rtol=1e-6)
    return got


@pytest.mark.parametrize("opt", ["SGD", "Adam", "AdamW", "RMSprop", "Adagrad", "Adadelta"])
def test_zero_grad_keeps_held_reference(opt):
    def case(T):
        lin = _model(T)
        o = getattr(T.optim, opt)(lin.parameters(), lr=0.1)
        _backward(T, lin)
        g, gb = lin.weight.grad, lin.bias.grad
        o.zero_grad(set_to_none=False)
        out = [g.tolist(), gb.tolist()]
        _backward(T, lin, 0.5)          # accumulates into the zeroed tensors
        o.step()
        return out + [g.tolist(), gb.tolist(), lin.weight.grad.tolist()]
    _both(lambda T: np.concatenate([np.ravel(x) for x in case(T)]))


def test_zero_grad_detaches_a_graph_gradient():
    def case(T):
        x = T.tensor([1.0, 2.0], requires_grad=True)
        o = T.optim.SGD([x], lr=0.1)
        (x ** 3).sum().backward(create_graph=True)
        g = x.grad
        o.zero_grad(set_to_none=False)
        return [float(g.requires_grad), float(x.grad.requires_grad)] + g.tolist()
    _both(case)


@pytest.mark.parametrize("norm_type", [2.0, 1.0, float("inf"), "inf", 3.0])
def test_clip_grad_norm_in_place(norm_type):
    def case(T):
        lin = _model(T)
        _backward(T, lin)
        g, gb = lin.weight.grad, lin.bias.grad
        total = T.nn.utils.clip_grad_norm_(lin.parameters(), 1.0, norm_type=norm_type)
        return [float(total)] + g.reshape(-1).tolist() + gb.tolist() \
            + lin.weight.grad.reshape(-1).tolist()
    _both(case)


def test_clip_grad_value_in_place():
    def case(T):
        lin = _model(T)
        _backward(T, lin)
        g = lin.weight.grad
        T.nn.utils.clip_grad_value_(lin.parameters(), 5.0)
        return g.reshape(-1).tolist() + lin.weight.grad.reshape(-1).tolist()
    _both(case)


def test_param_groups_hold_the_parameters():
    for T in (real, vt):
        lin = _model(T)
        extra = T.nn.Parameter(T.ones(2))
        o = T.optim.Adam([{"params": lin.parameters()}, {"params": extra, "lr": 0.5}],
                         lr=0.1)
        groups = o.param_groups
        assert [p is q for p, q in zip(groups[0]["params"], lin.parameters())] == [True, True]
        assert groups[1]["params"][0] is extra
        assert isinstance(groups[0]["params"][0], T.nn.Parameter)
        assert groups[1]["lr"] == 0.5 and len(groups) == 2


def test_param_groups_write_through_and_clip_by_group():
    def case(T):
        lin = _model(T)
        o = T.optim.SGD(lin.parameters(), lr=1.0)
        for group in o.param_groups:
            group["lr"] = 0.01
        _backward(T, lin)
        for group in o.param_groups:
            T.nn.utils.clip_grad_norm_(group["params"], 0.5)
        o.step()
        return lin.weight.detach().reshape(-1).tolist() + lin.bias.detach().tolist() \
            + [o.param_groups[0]["lr"]]
    _both(case)


# Gradients that share storage with other tensors (found in review): autograd
# can hand two leaves one gradient buffer, or a leaf the user's own gradient=
# tensor; writing the clipped / zeroed values into that storage changed the
# other tensors too. Compared with real torch 2.13.

def _shared_pair(T):
    a = T.nn.Parameter(T.ones(3))
    b = T.nn.Parameter(T.ones(3))
    (a + b).sum().backward()
    return a, b


@pytest.mark.parametrize("clip", ["norm", "value"])
def test_clipping_a_shared_gradient_matches_torch(clip):
    import torch
    out = {}
    for name, T in (("torch", torch), ("vt", vt)):
        a, b = _shared_pair(T)
        if clip == "norm":
            T.nn.utils.clip_grad_norm_([a, b], 1.0)
        else:
            T.nn.utils.clip_grad_value_([a, b], 0.5)
        out[name] = (a.grad.numpy().copy(), b.grad.numpy().copy())
    for x, y in zip(out["torch"], out["vt"]):
        np.testing.assert_allclose(y, x, rtol=1e-6)


@pytest.mark.parametrize("how", ["zero_grad", "clip_value"])
def test_the_users_gradient_argument_is_left_alone(how):
    import torch
    for T in (torch, vt):
        q = T.nn.Parameter(T.ones(3))
        v = T.tensor([3.0, 4.0, 0.0])
        q.backward(v)
        held = q.grad
        if how == "zero_grad":
            T.optim.SGD([q], lr=0.1).zero_grad(set_to_none=False)
            expect = [0.0, 0.0, 0.0]
        else:
            T.nn.utils.clip_grad_value_([q], 1.0)
            expect = [1.0, 1.0, 0.0]
        np.testing.assert_array_equal(v.numpy(), [3.0, 4.0, 0.0])
        np.testing.assert_array_equal(held.numpy(), expect)
        np.testing.assert_array_equal(q.grad.numpy(), expect)
