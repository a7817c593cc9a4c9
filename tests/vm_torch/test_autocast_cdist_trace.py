"""torch's CPU autocast runs cdist and trace in float32 (its fp32 list); ours
composes both of several ops, so vm.torch casts their 16-bit inputs up itself.
Dtypes, values and gradients against real torch 2.13."""

import numpy as np
import pytest

import dragon_core.vm.torch as dt

torch = pytest.importorskip("torch")


def _run(T, name, low):
    rng = np.random.default_rng(3)
    a = T.tensor(rng.standard_normal((4, 5)).astype(np.float32)).to(low).requires_grad_()
    b = T.tensor(rng.standard_normal((3, 5)).astype(np.float32)).to(low)
    m = T.tensor(rng.standard_normal((5, 5)).astype(np.float32)).to(low).requires_grad_()
    with T.autocast("cpu", dtype=low):
        y = T.cdist(a, b) if name == "cdist" else T.trace(m)
    y.sum().backward()
    leaf = a if name == "cdist" else m
    return y.dtype, y.detach().float().numpy(), leaf.grad.dtype, leaf.grad.float().numpy()


@pytest.mark.parametrize("name", ["cdist", "trace"])
@pytest.mark.parametrize("low", ["bfloat16", "float16"])
def test_autocast_runs_cdist_and_trace_in_float32(name, low):
    ours = _run(dt, name, getattr(dt, low))
    ref = _run(torch, name, getattr(torch, low))
    assert str(ours[0]) == str(ref[0]) == "torch.float32"
    np.testing.assert_allclose(ours[1], ref[1], rtol=1e-5, atol=1e-5)
    assert str(ours[2]) == str(ref[2])          # the leaf's own dtype
    np.testing.assert_allclose(ours[3], ref[3], rtol=1e-2, atol=1e-2)


def test_outside_autocast_cdist_and_trace_keep_the_dtype():
    a = dt.ones(3, 3, dtype=dt.bfloat16)
    assert dt.trace(a).dtype == dt.bfloat16
    assert dt.cdist(a, a).dtype == dt.bfloat16
