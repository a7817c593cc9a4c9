"""torch.nn.init on views writes through to the base, as torch does (the
dragon initialisers rebind the handle to new memory, which left a view's
base unchanged: nn.init.constant_(x[0], 4.) did nothing to x)."""
import numpy as np
import pytest

from dragon_core.vm import torch

real = pytest.importorskip("torch")


@pytest.mark.parametrize("view", [lambda x: x[0], lambda x: x[:, 1], lambda x: x.t(),
                                  lambda x: x[1:, ::2], lambda x: x.diagonal()])
@pytest.mark.parametrize("init", [("constant_", (4.0,)), ("zeros_", ()), ("ones_", ())])
def test_deterministic_init_of_a_view_writes_the_base(view, init):
    name, args = init
    x, rx = torch.full((3, 4), 7.0), real.full((3, 4), 7.0)
    getattr(torch.nn.init, name)(view(x), *args)
    getattr(real.nn.init, name)(view(rx), *args)
    np.testing.assert_array_equal(x.numpy(), rx.numpy())


def test_random_init_of_a_view_writes_only_the_view():
    x = torch.zeros(64, 8)
    v = x[:, 2]
    out = torch.nn.init.uniform_(v, 1.0, 2.0)
    assert out is v
    a = x.numpy()
    assert np.all((a[:, 2] >= 1.0) & (a[:, 2] < 2.0))
    assert np.all(np.delete(a, 2, axis=1) == 0.0)
    np.testing.assert_array_equal(v.numpy(), a[:, 2])


def test_parameter_init_keeps_the_parameter_and_its_optimizer():
    lin = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1)
    w = lin.weight
    torch.nn.init.constant_(lin.weight, 0.5)
    assert lin.weight is w and w.requires_grad
    lin(torch.ones(1, 3)).sum().backward()
    opt.step()
    np.testing.assert_allclose(lin.weight.detach().numpy(), np.full((2, 3), 0.4), rtol=1e-6)
