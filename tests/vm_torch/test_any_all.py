"""torch.any / torch.all against real torch 2.13 over every dtype, dims,
keepdim, empty axes, NaN, and transposed / stepped / expanded layouts; and
dragon_core's bool Max / Min (the folds any/all run on) against NumPy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

DTYPES = ["bool", "uint8", "int8", "int64", "float16", "bfloat16", "float32", "float64"]
SHAPES = [(0,), (3, 0), (0, 3), (5,), (4, 7), (2, 3, 5), (3, 2000)]


def _values(shape, dt, seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 2, size=shape) * rng.random(shape)   # zeros and values in (0, 1)
    if a.size and dt not in ("bool",):
        a.flat[rng.integers(0, a.size)] = np.nan if "float" in dt else 1
    return a


@pytest.mark.parametrize("dt", DTYPES)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_any_all_as_torch(shape, dt):
    a = _values(shape, dt, len(shape) * 31 + DTYPES.index(dt))
    tt, v = torch.from_numpy(a).to(getattr(torch, dt)), vt.from_numpy(a).to(getattr(vt, dt))
    nd = len(shape)
    dims = [None, ()] + list(range(-nd, nd)) + ([(0, nd - 1)] if nd > 1 else [])
    layouts = [("plain", lambda x: x)]
    if nd >= 2:
        layouts += [("mT", lambda x: x.mT), ("step", lambda x: x[:, ::2])]
    for (lname, lay), d, kd, op in itertools.product(layouts, dims, (False, True), ("any", "all")):
        if d is None and kd:
            continue
        T, V = lay(tt), lay(v)
        r = getattr(torch, op)(T) if d is None else getattr(torch, op)(T, d, keepdim=kd)
        o = getattr(vt, op)(V) if d is None else getattr(vt, op)(V, d, keepdim=kd)
        what = f"{op} {lname} dim={d} keepdim={kd}"
        assert str(o.dtype) == str(r.dtype), what
        assert tuple(o.shape) == tuple(r.shape), what
        np.testing.assert_array_equal(o.numpy(), r.numpy(), err_msg=what)


def test_any_all_of_expanded_and_fractions():
    x = vt.tensor([0.0, 0.25]).expand(3, 2)
    assert vt.any(x, 1).tolist() == [True] * 3 and vt.all(x, 0).tolist() == [False, True]
    assert bool(vt.tensor([0.5]).any()) and not bool(vt.tensor([0.5, 0.0]).all())
    assert bool(vt.tensor([float("nan")]).all())


@pytest.mark.parametrize("op,npf", [("max", np.any), ("min", np.all)])
def test_bool_max_min_fold(op, npf):
    rng = np.random.default_rng(5)
    for shape, axes in [((0,), None), ((4, 0), [1]), ((4, 0), [0]), ((7,), None),
                        ((33, 65), [0]), ((33, 65), [1]), ((5, 6, 70000), [2]),
                        ((70000, 3), [0]), ((3, 4, 5), [0, 2])]:
        a = rng.random(shape) < 0.02
        perm = list(range(a.ndim))[::-1]
        for transposed in (False, True):
            b = a.transpose(perm) if transposed else a
            t = dg.from_numpy(a)
            t = ops.transpose(t, perm) if transposed else t   # a strided view, not a copy
            got = getattr(ops, op)(t, axes, False).numpy()
            want = npf(b, axis=None if axes is None else tuple(axes))
            np.testing.assert_array_equal(got, want, err_msg=f"{op} {shape} {axes} {transposed}")


def test_counting_path_of_devices_without_bool_extrema(monkeypatch):
    # the path a device without bool Max/Min kernels (cuda today) takes, run on the host
    from dragon_core.vm.torch import _functions as F
    monkeypatch.setitem(F._BOOL_EXTREMA, "cpu", False)
    a = np.array([[0.0, 0.5, np.nan], [0.0, 0.0, 0.0]])
    for dims in (None, 0, 1, (0, 1)):
        for op in ("any", "all"):
            r = getattr(torch, op)(torch.from_numpy(a)) if dims is None else \
                getattr(torch, op)(torch.from_numpy(a), dims)
            o = getattr(vt, op)(vt.from_numpy(a)) if dims is None else \
                getattr(vt, op)(vt.from_numpy(a), dims)
            np.testing.assert_array_equal(o.numpy(), r.numpy(), err_msg=f"{op} {dims}")
    assert vt.zeros(0, 2).all(0).tolist() == [True, True]
    assert vt.zeros(0, 2).any(0).tolist() == [False, False]
