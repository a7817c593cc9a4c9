"""float64 NumPy references (forward, analytic gradients and central finite
differences) for vm.torch's cummax/cummin, index_copy, scatter_reduce,
copysign, xlogy and cumprod under autograd. They need no torch; the
comparisons with real torch are in test_gaps_torch.py."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core.vm.torch as vt


def _grad(fn, x, w, *others):
    """d sum(w * fn(x, *others)) / dx through vm.torch autograd (float64)."""
    t = vt.tensor(x, requires_grad=True)
    out = fn(t, *others)
    out = out[0] if isinstance(out, tuple) else out
    (g,) = vt.autograd.grad((out * vt.tensor(w)).sum(), [t])
    return g.numpy()


def _fd(fn_np, x, w, eps=1e-6):
    """Central finite differences of sum(w * fn_np(x))."""
    g = np.zeros_like(x)
    flat, gf = x.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + eps
        hi = np.sum(w * fn_np(x))
        flat[i] = old - eps
        lo = np.sum(w * fn_np(x))
        flat[i] = old
        gf[i] = (hi - lo) / (2 * eps)
    return g


# ------------------------------------------------------- cummax / cummin
def cum_ref(x, axis, kind):
    """The running extremum and its index (latest tie; NaN sticks, latest NaN)."""
    a = np.moveaxis(np.asarray(x), axis, -1)
    vals, idx = np.empty_like(a), np.zeros(a.shape, np.int64)
    for pos in np.ndindex(a.shape[:-1]):
        best, at = None, 0
        for i, v in enumerate(a[pos]):
            if best is None or np.isnan(v) or (not np.isnan(best) and (
                    v >= best if kind == "max" else v <= best)):
                best, at = v, i
            vals[pos + (i,)], idx[pos + (i,)] = best, at
    return np.moveaxis(vals, -1, axis), np.moveaxis(idx, -1, axis)


@pytest.mark.parametrize("kind", ["max", "min"])
@pytest.mark.parametrize("shape,axis", [((6,), 0), ((3, 5), 1), ((3, 5), -2), ((2, 3, 4), 1),
                                        ((0, 3), 0), ((2, 0), -1)])
@pytest.mark.parametrize("dt", ["float64", "float32", "int64", "bool"])
def test_cum_extreme_reference(kind, shape, axis, dt):
    rng = np.random.default_rng(0)
    if dt == "bool":
        x = rng.random(shape) > 0.5
    else:
        x = rng.integers(-3, 4, shape).astype(dt)   # many ties
        if dt == "float64" and x.size:
            x.reshape(-1)[::7] = np.nan
    v, i = getattr(vt, "cum" + kind)(vt.tensor(x), axis)
    rv, ri = cum_ref(x, axis, kind)
    np.testing.assert_array_equal(v.numpy(), rv)
    np.testing.assert_array_equal(i.numpy(), ri)
    assert v.dtype == vt.tensor(x).dtype and i.dtype == vt.int64
    if dt == "float64":
        x = rng.standard_normal(shape)            # distinct values: differentiable
        w = rng.standard_normal(shape)
        g = _grad(lambda t: getattr(vt, "cum" + kind)(t, axis), x, w)
        _, ri = cum_ref(x, axis, kind)
        want = np.zeros_like(x)                   # each output's weight to its source
        for pos in np.ndindex(x.shape):
            src = list(pos)
            src[axis] = ri[pos]
            want[tuple(src)] += w[pos]
        np.testing.assert_allclose(g, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(g, _fd(lambda a: cum_ref(a, axis, kind)[0], x.copy(), w),
                                   atol=1e-6)


# ------------------------------------------------------------ index_copy
@pytest.mark.parametrize("shape,dim,index", [((4, 3), 0, [2, 0]), ((4, 3), -1, [1, 2]),
                                             ((2, 3, 4), 1, [2]), ((5,), 0, [])])
def test_index_copy_reference(shape, dim, index):
    rng = np.random.default_rng(1)
    x = rng.standard_normal(shape)
    sshape = list(shape)
    sshape[dim] = len(index)
    s = rng.standard_normal(sshape)
    want = x.copy()
    sl = [slice(None)] * len(shape)
    for k, i in enumerate(index):
        sl[dim] = i
        src = [slice(None)] * len(shape)
        src[dim] = k
        want[tuple(sl)] = s[tuple(src)]
    idx = vt.tensor(np.array(index, np.int64))
    got = vt.index_copy(vt.tensor(x), dim, idx, vt.tensor(s))
    np.testing.assert_array_equal(got.numpy(), want)
    w = rng.standard_normal(shape)
    gx = _grad(lambda t: vt.index_copy(t, dim, idx, vt.tensor(s)), x, w)
    gs = _grad(lambda t: vt.index_copy(vt.tensor(x), dim, idx, t), s, w)
    keep = np.ones(shape[dim], bool)
    keep[index] = False
    mshape = [1] * len(shape)
    mshape[dim] = -1
    np.testing.assert_array_equal(gx, w * keep.reshape(mshape))
    np.testing.assert_array_equal(gs, np.take(w, np.array(index, np.int64), axis=dim))


# -------------------------------------------------------- scatter_reduce
_UFUNC = {"sum": np.add, "prod": np.multiply, "amax": np.maximum, "amin": np.minimum,
          "mean": np.add}
_IDENT = {"sum": 0.0, "mean": 0.0, "prod": 1.0, "amax": -np.inf, "amin": np.inf}


def scatter_reduce_ref(x, dim, index, src, reduce, include_self):
    out = x.astype(np.float64).copy()
    touched = np.zeros(x.shape, bool)
    count = np.zeros(x.shape)
    target = []
    for pos in np.ndindex(index.shape):
        p = list(pos)
        p[dim] = index[pos]
        target.append((tuple(p), src[pos]))
        touched[tuple(p)] = True
    if not include_self:
        out[touched] = _IDENT[reduce]
    else:
        count += 1
    for p, v in target:
        out[p] = _UFUNC[reduce](out[p], v)
        count[p] += 1
    if reduce == "mean":
        out = np.where(count > 0, out / np.maximum(count, 1), x)
    return out


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("shape,dim,ishape", [((4, 3), 0, (5, 3)), ((3, 4), -1, (2, 6)),
                                              ((2, 3, 4), 1, (2, 4, 3)), ((5,), 0, (0,))])
def test_scatter_reduce_reference(reduce, include_self, shape, dim, ishape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    s = rng.standard_normal(ishape)
    index = rng.integers(0, shape[dim], ishape)
    want = scatter_reduce_ref(x, dim % len(shape), index, s, reduce, include_self)
    it = vt.tensor(index)
    got = vt.scatter_reduce(vt.tensor(x), dim, it, vt.tensor(s), reduce,
                            include_self=include_self)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=1e-13)
    # gradients against finite differences (distinct values: no ties)
    w = rng.standard_normal(shape)
    gx = _grad(lambda t: vt.scatter_reduce(t, dim, it, vt.tensor(s), reduce,
                                           include_self=include_self), x, w)
    fx = _fd(lambda a: scatter_reduce_ref(a, dim % len(shape), index, s, reduce,
                                          include_self), x.copy(), w)
    np.testing.assert_allclose(gx, fx, atol=1e-6)
    if s.size:
        gs = _grad(lambda t: vt.scatter_reduce(vt.tensor(x), dim, it, t, reduce,
                                               include_self=include_self), s, w)
        fs = _fd(lambda a: scatter_reduce_ref(x, dim % len(shape), index, a, reduce,
                                              include_self), s.copy(), w)
        np.testing.assert_allclose(gs, fs, atol=1e-6)


# ------------------------------------------------------ copysign, xlogy
def test_copysign_reference():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5))
    y = rng.standard_normal((5,))
    y[0], y[1] = -0.0, 0.0
    got = vt.copysign(vt.tensor(x), vt.tensor(y))
    np.testing.assert_array_equal(got.numpy(), np.copysign(x, y))
    w = rng.standard_normal((4, 5))
    g = _grad(lambda t: vt.copysign(t, vt.tensor(y)), x, w)
    np.testing.assert_allclose(g, _fd(lambda a: np.copysign(a, y), x.copy(), w), atol=1e-6)
    assert vt.copysign(vt.tensor([1, -2]), -1).dtype == vt.float32


def xlogy_ref(x, y):
    with np.errstate(divide="ignore", invalid="ignore"):
        out = x * np.log(y)
    return np.where((x == 0) & ~np.isnan(y), 0.0, out)


def test_xlogy_reference():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, 4))
    x[0, :2] = 0.0
    y = rng.random((3, 4)) + 0.1
    y[1, 0] = np.nan
    got = vt.xlogy(vt.tensor(x), vt.tensor(y)).numpy()
    np.testing.assert_allclose(got, xlogy_ref(x, y), rtol=1e-14, equal_nan=True)
    y[1, 0] = 0.5
    w = rng.standard_normal((3, 4))
    gx = _grad(lambda t: vt.xlogy(t, vt.tensor(y)), x, w)
    # torch's rule: d/dx = log(y), 0 only where x == 0 and y <= 0 (y > 0 here)
    np.testing.assert_allclose(gx, w * np.log(y), rtol=1e-12)
    gx0 = _grad(lambda t: vt.xlogy(t, vt.tensor([0.0, -1.0, 2.0])), np.zeros(3), np.ones(3))
    np.testing.assert_allclose(gx0, [0.0, 0.0, np.log(2.0)], rtol=1e-15)
    gy = _grad(lambda t: vt.xlogy(vt.tensor(x), t), y, w)
    np.testing.assert_allclose(gy, _fd(lambda a: xlogy_ref(x, a), y.copy(), w), atol=1e-6)
    np.testing.assert_allclose(vt.special.xlogy(vt.tensor(x), vt.tensor(y)).numpy(),
                               xlogy_ref(x, y), rtol=1e-14)


# -------------------------------------------------------------- cumprod
@pytest.mark.parametrize("shape,axis", [((7,), 0), ((3, 9), 1), ((4, 3), -2), ((2, 5, 3), 1),
                                        ((1, 1), 0), ((0, 4), 1)])
@pytest.mark.parametrize("zeros", [False, True])
def test_cumprod_autograd_reference(shape, axis, zeros):
    rng = np.random.default_rng(5)
    x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
    if zeros and x.size:
        x.reshape(-1)[1::3] = 0.0
    t = vt.tensor(x, requires_grad=True)
    out = vt.cumprod(t, axis)
    np.testing.assert_allclose(out.detach().numpy(), np.cumprod(x, axis), rtol=1e-14)
    w = rng.standard_normal(shape)
    g = _grad(lambda a: vt.cumprod(a, axis), x, w)
    np.testing.assert_allclose(g, _fd(lambda a: np.cumprod(a, axis), x.copy(), w), atol=1e-6)
