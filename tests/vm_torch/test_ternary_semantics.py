"""lerp / addcmul / addcdiv dtype and error rules against real torch 2.13
(found by the type-promotion sweep): addcmul of bool or 8-bit tensors came
out int64 (the ``value`` scalar promoted), integer lerp and addcdiv
computed where torch raises, lerp(inf, end, 0.5) was NaN (torch's two-form
formula gives inf)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

DTYPES = ["bool", "uint8", "int8", "int32", "int64", "float16", "bfloat16", "float32",
          "float64"]
VALS = {"bool": [True, False, True, True, False], "uint8": [0, 1, 2, 5, 20],
        "int8": [-3, -1, 0, 2, 7], "int32": [-7000, -1, 0, 2, 7], "int64": [-4, -1, 0, 3, 7],
        "float16": [-2.5, -0.0, 0.5, 3.0, np.inf], "bfloat16": [-2.5, 0.0, 0.5, 3.0, np.inf],
        "float32": [-2.5, -1.0, 0.5, 3.0, np.inf], "float64": [-2.5, 1e-300, 0.5, 3.0, -np.inf]}

FNS = {
    "lerp": lambda m, a, b: m.lerp(a, b, 0.5),
    "lerp_w03": lambda m, a, b: m.lerp(a, b, 0.3),
    "lerp_scalar_end": lambda m, a, b: m.lerp(a, 2.0, 0.5),
    "lerp_tensor_w": lambda m, a, b: m.lerp(a, b, m.full_like(a, 0.75)),
    "addcmul": lambda m, a, b: m.addcmul(a, b, b, value=2),
    "addcmul_v1": lambda m, a, b: m.addcmul(a, b, b),
    "addcdiv": lambda m, a, b: m.addcdiv(a, b, b + 7, value=2),
}


def _t(lib, dt, zero_d):
    t = lib.tensor(np.array(VALS[dt], dtype=np.float64)).to(getattr(lib, dt))
    return t[3] if zero_d else t


@pytest.mark.parametrize("name", list(FNS))
def test_as_torch(name):
    f = FNS[name]
    for da, db, z in itertools.product(DTYPES, DTYPES, (False, True)):
        what = f"{name}({da}, {db}{' 0-d' if z else ''})"
        try:
            r = f(torch, _t(torch, da, False), _t(torch, db, z))
        except Exception:  # noqa: BLE001 (torch refuses: so must we)
            with pytest.raises(Exception):  # noqa: B017
                f(vt, _t(vt, da, False), _t(vt, db, z))
            continue
        o = f(vt, _t(vt, da, False), _t(vt, db, z))
        assert str(o.dtype) == str(r.dtype), what
        rtol = 1e-2 if "16" in str(r.dtype) else 1e-6
        np.testing.assert_allclose(o.double().numpy(), r.double().numpy(), rtol=rtol,
                                   equal_nan=True, err_msg=what)


def test_lerp_gradient():
    s, e, w = [1.0, -2.0, 3.0], [4.0, 0.5, -1.0], [0.2, 0.7, 0.5]
    grads = []
    for lib in (torch, vt):
        a, b, c = (lib.tensor(v, requires_grad=True) for v in (s, e, w))
        (lib.lerp(a, b, c) * lib.tensor([1.0, 2.0, 3.0])).sum().backward()
        grads.append([x.grad.numpy() for x in (a, b, c)])
    for g, r in zip(*grads):
        np.testing.assert_allclose(g, r, rtol=1e-6)


def test_addcmul_float_value_on_integers_raises():
    # torch truncates value=0.5 to 0 for integer tensors (adds nothing): we refuse
    x = vt.tensor([0, 1], dtype=vt.int8)
    with pytest.raises(RuntimeError, match="addcmul.*value must not be a floating point"):
        vt.addcmul(x, x, x, value=0.5)
    assert vt.addcmul(x.float(), x, x, value=0.5).tolist() == [0.0, 1.5]
