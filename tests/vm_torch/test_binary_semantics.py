"""Binary-op semantics found by the type-promotion sweep, against real torch
2.13: atan2 at infinities, signed zeros and mixed dtypes (16-bit computed in
float32), hypot's 16-bit rounding, fmod's tensor-first signature, integer pow
with a negative tensor exponent."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -3.0, np.inf, -np.inf, np.nan, 1e-300, 1e300, 1e-40,
           -7e37, 0.7, -70000.0]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
INTS = ["bool", "uint8", "int8", "int16", "int32", "int64"]


def _pair(lib, a, b, da, db):
    return (lib.from_numpy(np.asarray(a)).to(getattr(lib, da)),
            lib.from_numpy(np.asarray(b)).to(getattr(lib, db)))


def _same(r, o, rtol):
    assert str(o.dtype) == str(r.dtype)
    r, o = r.double().numpy(), o.double().numpy()
    np.testing.assert_allclose(o, r, rtol=rtol, atol=0, equal_nan=True)
    nz = (r == 0) | np.isinf(r)
    assert (np.signbit(o[nz]) == np.signbit(r[nz])).all(), "signs of zeros / infinities"


@pytest.mark.parametrize("dt", FLOATS)
def test_atan2_special_values(dt):
    ys, xs = (g.ravel() for g in np.meshgrid(SPECIAL, SPECIAL))
    r = torch.atan2(*_pair(torch, ys, xs, dt, dt))
    o = vt.atan2(*_pair(vt, ys, xs, dt, dt))
    _same(r, o, 1e-15 if dt == "float64" else 1e-6)


@pytest.mark.parametrize("da,db", [(a, b) for a, b in itertools.product(INTS + FLOATS, repeat=2)
                                   if a in FLOATS or b in FLOATS])
def test_atan2_mixed_dtypes(da, db):
    ys, xs = (g.ravel() for g in np.meshgrid(SPECIAL, SPECIAL))
    ys, xs = [np.nan_to_num(v, nan=0.0, posinf=5.0, neginf=-5.0) if d in INTS else v
              for v, d in ((ys, da), (xs, db))]
    if "uint8" in (da, db):
        ys, xs = np.abs(ys), np.abs(xs)
    ys = np.clip(ys, -100, 100) if da in INTS else ys
    xs = np.clip(xs, -100, 100) if db in INTS else xs
    r = torch.atan2(*_pair(torch, ys, xs, da, db))
    o = vt.atan2(*_pair(vt, ys, xs, da, db))
    _same(r, o, 1e-15 if "float64" in (da, db) else 1e-6)


def test_atan2_gradient():
    y = np.array([1.0, -2.0, 0.5, 3.0, -1e-3, 4.0, -0.0])
    x = np.array([2.0, -0.5, -4.0, 0.1, -2.0, 1e-8, -5.0])
    w = np.arange(1.0, 8.0)
    grads = []
    for lib in (torch, vt):
        a, b = lib.tensor(y, requires_grad=True), lib.tensor(x, requires_grad=True)
        (lib.atan2(a, b) * lib.tensor(w)).sum().backward()
        grads.append((a.grad.numpy(), b.grad.numpy()))
    for g_ref, g in zip(*grads):
        np.testing.assert_allclose(g, g_ref, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("dt", ["float16", "bfloat16"])
def test_hypot_16bit_rounds_once(dt):
    rng = np.random.default_rng(3)
    a, b = rng.uniform(-8, 8, 400), rng.uniform(-8, 8, 400)
    r = torch.hypot(*_pair(torch, a, b, dt, dt))
    o = vt.hypot(*_pair(vt, a, b, dt, dt))
    np.testing.assert_array_equal(o.float().numpy(), r.float().numpy())


@pytest.mark.parametrize("s", [2, 2.5, True, -1])
def test_fmod_number_first_raises(s):
    with pytest.raises(TypeError):
        torch.fmod(s, torch.tensor([1.0]))
    with pytest.raises(TypeError, match="fmod"):
        vt.fmod(s, vt.tensor([1.0]))


@pytest.mark.parametrize("da,db", [("int32", "int32"), ("int8", "int64"), ("uint8", "int8"),
                                   ("int64", "int16"), ("bool", "int32")])
def test_int_pow_negative_tensor_exponent(da, db):
    base = np.array([-3, -2, -1, 0, 1, 2, 3, -1, 1, 0, 5, -1])
    exp = np.array([-1, -1, -1, -1, -1, -2, -3, -2, -7, 0, 2, 3])
    if da == "uint8":
        base = np.abs(base)
    if da == "bool":
        base = base != 0
    r = torch.pow(*_pair(torch, base, exp, da, db))
    o = vt.pow(*_pair(vt, base, exp, da, db))
    assert str(o.dtype) == str(r.dtype)
    np.testing.assert_array_equal(o.numpy(), r.numpy())
    r0 = torch.pow(2, torch.from_numpy(exp).to(getattr(torch, db)))
    o0 = vt.pow(2, vt.from_numpy(exp).to(getattr(vt, db)))
    np.testing.assert_array_equal(o0.numpy(), r0.numpy())


def test_int_pow_negative_scalar_exponent_raises():
    with pytest.raises(RuntimeError):
        torch.tensor([2]) ** -1
    with pytest.raises(Exception, match="(?i)negative"):
        vt.tensor([2]) ** -1
