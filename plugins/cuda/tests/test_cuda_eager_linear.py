"""Eager nn.functional.linear on cuda (issue 21, session eagerbf16): with a
float32/float64 bias it runs MatMulBiasAct (cuBLAS product + bias); values
and gradients against the cpu. Never run on a GPU when written. (This
folder's conftest skips it without the dragon-cuda wheel; the ``gpu``
fixture without a device.)"""

from __future__ import annotations

import numpy as np
import pytest


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [("float32", 2e-5), ("float64", 1e-12)])
def test_eager_linear_on_cuda_matches_cpu(gpu, dtype, tol):
    dg = gpu
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 7, 16)).astype(dtype)
    w = rng.standard_normal((5, 16)).astype(dtype)
    b = rng.standard_normal((5,)).astype(dtype)
    dy = rng.standard_normal((2, 7, 5)).astype(dtype)
    got = {}
    for dev in ("cpu", "cuda"):
        tx, tw, tb = (dg.tensor(v).to(dev) for v in (x, w, b))
        for t in (tx, tw, tb):
            t.requires_grad = True
        with dg.profiler.profile() as prof:
            y = dg.nn.functional.linear(tx, tw, tb)
        assert "MatMulBiasAct" in [e.op for e in prof.events], prof.events
        y.backward(dg.tensor(dy).to(dev))
        got[dev] = [np.asarray(t.to("cpu").numpy()) for t in (y, tx.grad, tw.grad, tb.grad)]
    ref = x.astype(np.float64) @ w.astype(np.float64).T + b
    np.testing.assert_allclose(got["cuda"][0], ref, rtol=tol, atol=tol * 16)
    for c, g in zip(got["cpu"], got["cuda"]):
        np.testing.assert_allclose(g, c, rtol=tol, atol=tol * 16)
