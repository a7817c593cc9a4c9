"""nn.Module mechanics: registration, traversal, modes, state dicts, to()."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import nn


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.scale = nn.Parameter(dg.tensor(np.float32(2.0)))
        self.register_buffer("count", dg.ops.zeros([1]))
        self.register_buffer("scratch", dg.ops.zeros([2]), persistent=False)

    def forward(self, x):
        return self.fc(x) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = Block()
        self.b = Block()
        self.shared = self.a.fc          # the same module twice
        self.head = nn.Linear(4, 2, bias=False)

    def forward(self, x):
        return self.head(self.b(x) + self.a(x))


def test_registration_and_names():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    # PyTorch's order: a module's own members, then its children's.
    assert names == ["a.scale", "a.fc.weight", "a.fc.bias", "b.scale", "b.fc.weight",
                     "b.fc.bias", "head.weight"]
    assert len(list(net.parameters())) == 7
    assert [n for n, _ in net.named_buffers()] == ["a.count", "a.scratch", "b.count",
                                                   "b.scratch"]
    assert [n for n, _ in net.named_modules()] == ["", "a", "a.fc", "b", "b.fc", "head"]
    assert [n for n, _ in net.named_children()] == ["a", "b", "shared", "head"]
    assert all(p.requires_grad for p in net.parameters())
    assert net.head.bias is None
    assert isinstance(net.a.scale, nn.Parameter)


def test_reassignment_and_errors():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="parameter 'weight'"):
        m.weight = dg.ops.zeros([2, 2])
    m.weight = nn.Parameter(dg.ops.ones([2, 2]))
    assert np.all(m.weight.numpy() == 1)
    del m.bias
    assert "bias" not in dict(m.named_parameters())

    class Early(nn.Module):
        def __init__(self):
            self.w = nn.Parameter(dg.ops.zeros([1]))

    with pytest.raises(AttributeError, match="super\\(\\).__init__"):
        Early()
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        m.nope
    with pytest.raises(KeyError):
        m.register_buffer("a.b", dg.ops.zeros([1]))
    with pytest.raises(TypeError):
        m.register_parameter("p", dg.ops.zeros([1]))


def test_state_dict_roundtrip_and_strict():
    src, dst = Net(), Net()
    sd = src.state_dict()
    assert "a.scratch" not in sd and "a.count" in sd
    assert list(sd) == ["a.scale", "a.count", "a.fc.weight", "a.fc.bias", "b.scale",
                        "b.count", "b.fc.weight", "b.fc.bias", "head.weight"]
    dst.load_state_dict(sd)
    x = dg.tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    np.testing.assert_array_equal(src(x).numpy(), dst(x).numpy())
    # Loaded values are copies: changing the source later does not leak.
    src.head.weight.assign(src.head.weight * 0.0)
    assert np.any(dst.head.weight.numpy() != 0)

    bad = dict(sd)
    bad.pop("head.weight")
    bad["extra"] = dg.ops.zeros([1])
    before = dst.head.weight.numpy().copy()
    with pytest.raises(KeyError, match="missing keys \\['head.weight'\\].*unexpected keys "
                                       "\\['extra'\\]"):
        dst.load_state_dict(bad)
    missing, unexpected = dst.load_state_dict(bad, strict=False)
    assert missing == ["head.weight"] and unexpected == ["extra"]
    np.testing.assert_array_equal(dst.head.weight.numpy(), before)

    wrong = dict(sd)
    wrong["head.weight"] = dg.ops.zeros([3, 3])
    a_before = dst.a.fc.weight.numpy().copy()
    with pytest.raises(ValueError, match="head.weight.*\\(3, 3\\).*\\(2, 4\\)"):
        dst.load_state_dict(wrong)
    # Nothing was copied before the shape error (a.fc comes first in order).
    np.testing.assert_array_equal(dst.a.fc.weight.numpy(), a_before)


def test_load_state_dict_accepts_numpy_and_casts():
    m = nn.Linear(2, 3)
    sd = {k: v.numpy().astype(np.float64) + 1.0 for k, v in m.state_dict().items()}
    m.load_state_dict(sd)
    assert m.weight.dtype == dg.float32
    np.testing.assert_allclose(m.weight.numpy(), sd["weight"].astype(np.float32))


def test_train_eval_and_apply():
    net = Net()
    assert net.training and net.a.fc.training
    net.eval()
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen.count("Linear") == 4   # a.fc twice, as PyTorch
    with pytest.raises(TypeError):
        net.train("yes")


def test_zero_grad_and_requires_grad():
    m = nn.Linear(3, 2)
    x = dg.ops.ones([4, 3])
    m(x).sum().backward()
    assert m.weight.grad is not None
    m.zero_grad(set_to_none=False)
    assert np.all(m.weight.grad.numpy() == 0)
    m.zero_grad()
    assert m.weight.grad is None
    m.requires_grad_(False)
    assert not any(p.requires_grad for p in m.parameters())


def test_to_dtype_replaces_parameters():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    m.to(dg.float64)
    assert all(p.dtype == dg.float64 for p in m.parameters())
    assert all(b.dtype == dg.float64 for b in m.buffers())
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in m.parameters())
    m.float()
    assert m[0].weight.dtype == dg.float32


def test_repr():
    text = repr(nn.Sequential(nn.Linear(3, 2), nn.ReLU()))
    assert "(0): Linear(in_features=3, out_features=2, bias=True)" in text
    assert "(1): ReLU()" in text


def test_linear_matches_numpy_and_torch_init_bounds():
    dg.manual_seed(0)
    m = nn.Linear(50, 7)
    w, b = m.weight.numpy(), m.bias.numpy()
    bound = 1 / math.sqrt(50)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound
    x = np.random.default_rng(1).standard_normal((2, 3, 50)).astype(np.float32)
    y = m(dg.tensor(x)).numpy()
    np.testing.assert_allclose(y, x @ w.T + b, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="linear: input of shape \\(2, 4\\)"):
        m(dg.ops.zeros([2, 4]))


def test_containers():
    seq = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 1))
    assert len(seq) == 3 and isinstance(seq[-1], nn.Linear)
    assert isinstance(seq[1:], nn.Sequential) and len(seq[1:]) == 2
    with pytest.raises(IndexError):
        seq[3]
    ml = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    ml.insert(0, nn.ReLU())
    del ml[1]
    assert [type(m).__name__ for m in ml] == ["ReLU", "Linear", "Linear"]
    assert len(list(ml.parameters())) == 4
    md = nn.ModuleDict({"enc": nn.Linear(2, 2)})
    md["dec"] = nn.Linear(2, 2)
    assert "dec" in md and len(list(md.parameters())) == 4


def test_module_in_graph_mode_matches_eager():
    net = Net()
    x = dg.tensor(np.random.default_rng(2).standard_normal((6, 3)).astype(np.float32))
    f = dg.function(lambda x: net(x))
    np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6, atol=1e-6)
    # Captured parameters: an update is seen by the next run without a retrace.
    net.head.weight.assign(net.head.weight * 2.0)
    np.testing.assert_allclose(f(x).numpy(), net(x).numpy(), rtol=1e-6, atol=1e-6)
    assert f.trace_count == 1


def test_train_eval_plans_are_cached_separately():
    net = nn.Sequential(nn.Linear(3, 3), nn.Dropout(0.5))
    f = dg.function(lambda x: net(x))
    x = dg.ops.ones([4, 3])
    f(x)
    net.eval()
    y = f(x)
    np.testing.assert_allclose(y.numpy(), net(x).numpy(), rtol=1e-6)   # no dropout
    net.train()
    f(x)
    net.eval()
    f(x)
    assert f.trace_count == 2
