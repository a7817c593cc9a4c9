"""SGD on bfloat16 parameters on the CPU (SgdUpdate / MultiSgdUpdate had no
bfloat16 CPU kernel and raised NoKernelError): float32 math rounded to
bfloat16 where torch's single-tensor SGD rounds, compared with real torch
2.13 over several steps."""

import numpy as np
import pytest

import dragon_core.vm.torch as dt

torch = pytest.importorskip("torch")

OPTIONS = [
    {},
    {"momentum": 0.9},
    {"momentum": 0.9, "weight_decay": 0.01},
    {"momentum": 0.9, "nesterov": True},
    {"momentum": 0.5, "dampening": 0.3, "weight_decay": 0.1},
    {"weight_decay": 0.05, "maximize": True},
]


# Sizes are multiples of 32: torch's vectorised bfloat16 add_ rounds its
# alpha (-lr, weight_decay, ...) to bfloat16 (as we do), but the scalar loop
# for the last size % 32 elements keeps it in float32, so a tail element may
# differ by one bfloat16 ulp from ours.


def _steps(mod, opts, foreach):
    rng = np.random.default_rng(0)
    p0 = rng.standard_normal(64).astype(np.float32)
    p = mod.nn.Parameter(mod.tensor(p0).to(mod.bfloat16))
    q = mod.nn.Parameter(mod.tensor(p0[:32] * 3).to(mod.bfloat16))
    kw = dict(opts)
    if foreach is not None:
        kw["foreach"] = foreach
    opt = mod.optim.SGD([p, q], lr=0.05, **kw)
    for k in range(4):
        # the same bfloat16 gradients on both sides: the optimizer alone is
        # compared (autograd's own bfloat16 rounding is tested elsewhere)
        gp = rng.standard_normal(64).astype(np.float32) * (k + 1)
        gq = rng.standard_normal(32).astype(np.float32)
        p.grad = mod.tensor(gp).to(mod.bfloat16)
        q.grad = mod.tensor(gq).to(mod.bfloat16)
        opt.step()
    return p.detach().float().numpy(), q.detach().float().numpy()


@pytest.mark.parametrize("opts", OPTIONS)
@pytest.mark.parametrize("foreach", [None, False])
def test_sgd_bfloat16_matches_torch(opts, foreach):
    ours = _steps(dt, opts, foreach)
    ref = _steps(torch, opts, False)
    for a, b in zip(ours, ref):
        assert a.dtype == b.dtype
        # every rounding point as torch's: the same bfloat16 values
        np.testing.assert_array_equal(a, b)


def test_sgd_bfloat16_parameter_stays_bfloat16():
    p = dt.nn.Parameter(dt.ones(3).to(dt.bfloat16))
    opt = dt.optim.SGD([p], lr=0.5, momentum=0.9)
    p.sum().backward()
    opt.step()
    assert p.dtype == dt.bfloat16
    np.testing.assert_array_equal(p.detach().float().numpy(), [0.5, 0.5, 0.5])


def test_sgd_bfloat16_foreach_true_raises_naming_the_kernel():
    # MultiSgdUpdate has no bfloat16 CPU kernel yet: foreach=True (which
    # requires the multi-tensor kernel) says so instead of falling back
    p = dt.nn.Parameter(dt.ones(3).to(dt.bfloat16))
    p.grad = dt.ones(3).to(dt.bfloat16)
    opt = dt.optim.SGD([p], lr=0.5, foreach=True)
    with pytest.raises(NotImplementedError, match=r"MultiSgdUpdate.*bfloat16"):
        opt.step()
