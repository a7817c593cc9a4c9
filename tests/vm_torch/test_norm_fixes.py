"""torch.norm / linalg.vector_norm against real torch 2.13: a zero norm has a
zero gradient (it was NaN), and float16 / bfloat16 norms accumulate in
float32 (the squares of values >= 256 overflowed float16 to inf)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402


@pytest.mark.parametrize("p", [2, "fro", 3, 1.5, 0.5, -3])
@pytest.mark.parametrize("dt", ["float32", "float64", "float16"])
def test_zero_norm_gradient(p, dt):
    x = np.array([[0.0, 0.0, 0.0], [3.0, -4.0, 1.0], [0.0, 2.0, 0.0]])
    w = np.array([1.0, 2.0, 3.0])
    got = []
    for lib in (torch, vt):
        a = lib.tensor(x, dtype=getattr(lib, dt), requires_grad=True)
        n = lib.norm(a, p=p, dim=1)
        (n * lib.tensor(w, dtype=getattr(lib, dt))).sum().backward()
        got.append((n.detach().double().numpy(), a.grad.double().numpy()))
    (rn, rg), (on, og) = got
    tol = 2e-3 if dt == "float16" else 1e-6
    np.testing.assert_allclose(on, rn, rtol=tol)
    np.testing.assert_allclose(og, rg, rtol=tol, atol=tol)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
@pytest.mark.parametrize("fn", ["norm", "vector_norm"])
def test_16bit_norm_does_not_overflow(dt, fn):
    x = np.array([300.0, 400.0, -200.0, 1000.0])
    r = (torch.linalg.vector_norm if fn == "vector_norm" else torch.norm)(
        torch.tensor(x, dtype=getattr(torch, dt)))
    o = (vt.linalg.vector_norm if fn == "vector_norm" else vt.norm)(
        vt.tensor(x, dtype=getattr(vt, dt)))
    assert str(o.dtype) == str(r.dtype)
    assert float(o) == float(r) and np.isfinite(float(o))
