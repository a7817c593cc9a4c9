"""Activations at special values (NaN, +-inf, +-0, subnormals), forward and
gradient, against real torch 2.13 on the CPU (float32).

Cases where torch itself differs between dtypes or where we keep the limit
value instead of torch's NaN are in docs/from-pytorch.md, "Activations at
special values", and are not asserted here.
"""

import numpy as np
import pytest

import dragon_core.vm.torch as dt
import dragon_core.vm.torch.nn.functional as dF

torch = pytest.importorskip("torch")
tF = torch.nn.functional

NAN, INF = float("nan"), float("inf")
VALUES = [NAN, INF, -INF, 0.0, 1e-45, -1e-45, 2.0, -2.0, 7.0, -7.0, 0.5, -0.5]


def _run(mod, F, name, g, dtype):
    x = mod.tensor(VALUES, dtype=getattr(mod, dtype), requires_grad=True)
    y = _CALLS[name](F, x)
    y.backward(mod.full_like(y, g))
    return y.detach().float().numpy(), x.grad.float().numpy()


_CALLS = {
    "relu": lambda F, x: F.relu(x),
    "relu6": lambda F, x: F.relu6(x),
    "elu": lambda F, x: F.elu(x),
    "elu_alpha": lambda F, x: F.elu(x, 0.5),
    "celu": lambda F, x: F.celu(x),
    "celu_alpha": lambda F, x: F.celu(x, 2.0),
    "selu": lambda F, x: F.selu(x),
    "hardsigmoid": lambda F, x: F.hardsigmoid(x),
    "hardswish": lambda F, x: F.hardswish(x),
    "threshold": lambda F, x: F.threshold(x, 1.0, 20.0),
    "hardshrink": lambda F, x: F.hardshrink(x),
    "softshrink": lambda F, x: F.softshrink(x),
    "logsigmoid": lambda F, x: F.logsigmoid(x),
}

# hardswish(-inf): torch's x * relu6(x + 3) / 6 is -inf * 0 = NaN; we keep
# the limit 0 (docs/from-pytorch.md)
_SKIP_FWD = {"hardswish": [VALUES.index(-INF)]}


def _assert_same(ours, ref, what):
    assert np.array_equal(np.isnan(ours), np.isnan(ref)), (what, ours, ref)
    ok = ~np.isnan(ref)
    np.testing.assert_allclose(ours[ok], ref[ok], rtol=1e-6, atol=0, err_msg=what)


# under an infinite dy, hardswish's middle branch x (x + 3) / 6 is a
# product, whose rule gives inf * 0 = NaN at x = 0 (torch: inf); open, see
# docs/from-pytorch.md
_CASES = [(n, g) for n in sorted(_CALLS) for g in (1.0, INF, -INF)
          if not (n == "hardswish" and g != 1.0)]


@pytest.mark.parametrize("name,g", _CASES)
def test_activation_special_values_match_torch(name, g):
    y, gx = _run(dt, dF, name, g, "float32")
    ty, tgx = _run(torch, tF, name, g, "float32")
    keep = [k for k in range(len(VALUES)) if k not in _SKIP_FWD.get(name, [])]
    if g == 1.0:
        _assert_same(y[keep], ty[keep], f"{name} forward")
    _assert_same(gx, tgx, f"{name} gradient, dy = {g}")


def test_relu_gradient_passes_at_nan_x_native():
    # the ReluGrad kernel itself: a NaN x passes dy (torch's
    # threshold_backward tests x <= 0), -0, 0 and negatives block it
    import dragon_core as dg
    x = dg.tensor(np.array([NAN, 0.0, -0.0, -1.0, 2.0, -INF, INF], np.float32))
    dy = dg.tensor(np.array([3.0, 3.0, 3.0, NAN, 5.0, INF, -INF], np.float32))
    got = dg.ops.relu_grad(x, dy).numpy()
    np.testing.assert_array_equal(got, np.array([3.0, 0, 0, 0, 5.0, 0, -INF], np.float32))


def test_logsigmoid_inf_is_positive_zero():
    y = dF.logsigmoid(dt.tensor([INF])).numpy()
    assert y[0] == 0.0 and not np.signbit(y[0])
