"""MaxPool3d, AvgPool3d and AvgPool3dGrad against float64 NumPy references
and torch.nn.functional (docs/ops.md, "3-D pooling")."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError


def _geo(x, kernel_size, strides=(), pads=(0, 0, 0), dilations=(1, 1, 1), ceil_mode=False):
    k = list(kernel_size) * (3 if len(kernel_size) == 1 else 1)
    s = list(strides) or k
    s = s * (3 if len(s) == 1 else 1)
    d = list(dilations) * (3 if len(dilations) == 1 else 1)
    p = list(pads) * (3 if len(pads) == 1 else 1)
    pb, pe = (p[:3], p[3:]) if len(p) == 6 else (p, p)
    out = []
    for i in range(3):
        span = d[i] * (k[i] - 1) + 1
        num = x.shape[2 + i] + pb[i] + pe[i] - span
        o = (num + (s[i] - 1 if ceil_mode else 0)) // s[i] + 1
        if ceil_mode and (o - 1) * s[i] >= x.shape[2 + i] + pb[i]:
            o -= 1
        out.append(o)
    return k, s, d, pb, pe, out


def max_pool3d_ref(x, kernel_size, strides=(), pads=(0, 0, 0), dilations=(1, 1, 1),
                   ceil_mode=False):
    k, s, d, pb, _, out = _geo(x, kernel_size, strides, pads, dilations, ceil_mode)
    N, C = x.shape[:2]
    y = np.zeros((N, C, *out))
    idx = np.zeros((N, C, *out), np.int64)
    for n, c, *o in itertools.product(range(N), range(C), *map(range, out)):
        best, at = None, -1
        for t in itertools.product(*map(range, k)):
            pos = [o[i] * s[i] - pb[i] + t[i] * d[i] for i in range(3)]
            if any(p < 0 or p >= x.shape[2 + i] for i, p in enumerate(pos)):
                continue
            v = x[n, c, pos[0], pos[1], pos[2]]
            if best is None or v > best or (np.isnan(v) and not np.isnan(best)):
                best, at = v, (pos[0] * x.shape[3] + pos[1]) * x.shape[4] + pos[2]
        y[n, c, o[0], o[1], o[2]] = best
        idx[n, c, o[0], o[1], o[2]] = at
    return [y, idx]


def avg_pool3d_ref(x, kernel_size, strides=(), pads=(0, 0, 0), ceil_mode=False,
                   count_include_pad=True):
    k, s, _, pb, pe, out = _geo(x, kernel_size, strides, pads, (1, 1, 1), ceil_mode)
    N, C = x.shape[:2]
    y = np.zeros((N, C, *out))
    for o in itertools.product(*map(range, out)):
        lo, hi, padded = [], [], 1
        for i in range(3):
            start = o[i] * s[i] - pb[i]
            end = min(start + k[i], x.shape[2 + i] + pe[i])
            padded *= end - start
            lo.append(max(start, 0))
            hi.append(min(end, x.shape[2 + i]))
        win = x[:, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]]
        count = padded if count_include_pad else win[0, 0].size
        y[:, :, o[0], o[1], o[2]] = win.sum(axis=(2, 3, 4)) / count
    return y


MAX_CASES = [
    ((2, 3, 4, 5, 6), {"kernel_size": [2]}),
    ((1, 2, 5, 5, 5), {"kernel_size": [3, 2, 3], "strides": [2, 1, 2], "pads": [1, 1, 1]}),
    ((1, 2, 6, 5, 7), {"kernel_size": [2, 3, 2], "dilations": [2, 1, 2], "ceil_mode": True}),
    ((1, 1, 5, 6, 5), {"kernel_size": [3], "strides": [2], "pads": [1, 0, 1, 1, 1, 0],
                       "ceil_mode": True}),
    ((0, 2, 3, 3, 3), {"kernel_size": [2]}),
]


def _ties(rng, shape, dtype):
    return rng.integers(-2, 3, shape).astype(dtype)  # many ties


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", MAX_CASES, ids=[str(i) for i in range(len(MAX_CASES))])
def test_max_pool3d(case, dtype):
    shape, attrs = case
    x = _ties(np.random.default_rng(0), shape, dtype)
    OpCase.of("MaxPool3d", [x], max_pool3d_ref, attrs=attrs,
              out_dtype=[None, "int64"]).check_forward()


def test_max_pool3d_nan_wins():
    x = np.zeros((1, 1, 2, 2, 2))
    x[0, 0, 1, 0, 1] = np.nan
    x[0, 0, 0, 0, 0] = 5.0
    y, i = dg.ops.max_pool3d(dg.tensor(x), [2])
    assert np.isnan(y.numpy()).all() and i.numpy().item() == 5


AVG_CASES = [
    ((2, 3, 4, 5, 6), {"kernel_size": [2]}),
    ((1, 2, 5, 5, 5), {"kernel_size": [3], "strides": [2], "pads": [1]}),
    ((1, 2, 5, 5, 5), {"kernel_size": [3], "strides": [2], "pads": [1],
                       "count_include_pad": False}),
    ((1, 2, 6, 5, 7), {"kernel_size": [2, 3, 2], "strides": [2, 2, 3], "ceil_mode": True,
                       "pads": [1, 1, 0]}),
    ((1, 1, 5, 6, 5), {"kernel_size": [3], "pads": [0, 1, 1, 1, 0, 1],
                       "count_include_pad": False}),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", AVG_CASES, ids=[str(i) for i in range(len(AVG_CASES))])
def test_avg_pool3d(case, dtype):
    shape, attrs = case
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    OpCase.of("AvgPool3d", [x], avg_pool3d_ref, attrs=attrs).check_forward()


def avg_pool3d_grad_ref(x, dy, kernel_size, strides=(), pads=(0, 0, 0), ceil_mode=False,
                        count_include_pad=True):
    """dx[window] += dy / count for every window (the adjoint, spelled out)."""
    k, s, _, pb, pe, out = _geo(x, kernel_size, strides, pads, (1, 1, 1), ceil_mode)
    dx = np.zeros(x.shape)
    for o in itertools.product(*map(range, out)):
        lo, hi, padded = [], [], 1
        for i in range(3):
            start = o[i] * s[i] - pb[i]
            end = min(start + k[i], x.shape[2 + i] + pe[i])
            padded *= end - start
            lo.append(max(start, 0))
            hi.append(min(end, x.shape[2 + i]))
        real = (hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2])
        count = padded if count_include_pad else real
        dx[:, :, lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] += \
            (dy[:, :, o[0], o[1], o[2]] / count)[:, :, None, None, None]
    return dx


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", AVG_CASES, ids=[str(i) for i in range(len(AVG_CASES))])
def test_avg_pool3d_grad(case, dtype):
    shape, attrs = case
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(dtype)
    dy = rng.standard_normal(avg_pool3d_ref(x, **attrs).shape).astype(dtype)
    OpCase.of("AvgPool3dGrad", [x, dy], avg_pool3d_grad_ref, attrs=attrs).check_forward()


@pytest.mark.parametrize("case", AVG_CASES, ids=[str(i) for i in range(len(AVG_CASES))])
def test_avg_pool3d_grad_is_adjoint(case):
    """<AvgPool3d(x), dy> == <x, AvgPool3dGrad(dy)> for random x, dy."""
    shape, attrs = case
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    y = avg_pool3d_ref(x, **attrs)
    dy = rng.standard_normal(y.shape)
    dx = dg.ops.avg_pool3d_grad(dg.tensor(x), dg.tensor(dy),
                                **dg.plugin_api.py_attrs("AvgPool3dGrad", attrs)).numpy()
    np.testing.assert_allclose(np.sum(y * dy), np.sum(x * dx), rtol=1e-12)


@pytest.mark.parametrize("ceil_mode", [False, True])
@pytest.mark.parametrize("pads", [0, 1])
def test_matches_torch(ceil_mode, pads):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    x = np.random.default_rng(3).standard_normal((2, 3, 7, 6, 5))
    t = torch.from_numpy(x)
    y, i = dg.ops.max_pool3d(dg.tensor(x), [3], [2], pads, ceil_mode=ceil_mode)
    ty, ti = F.max_pool3d(t, 3, 2, pads, ceil_mode=ceil_mode, return_indices=True)
    np.testing.assert_array_equal(y.numpy(), ty.numpy())
    np.testing.assert_array_equal(i.numpy(), ti.numpy())
    for cip in (True, False):
        a = dg.ops.avg_pool3d(dg.tensor(x), [3], [2], pads, ceil_mode=ceil_mode,
                              count_include_pad=cip)
        ta = F.avg_pool3d(t, 3, 2, pads, ceil_mode=ceil_mode, count_include_pad=cip)
        np.testing.assert_allclose(a.numpy(), ta.numpy(), rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.max_pool3d(_z(1, 2, 4, 4), [2]), r"MaxPool3d.*rank 5"),
    (lambda: dg.ops.max_pool3d(_z(1, 1, 4, 4, 4), [2, 2]), r"MaxPool3d.*1 or 3 values"),
    (lambda: dg.ops.max_pool3d(_z(1, 1, 4, 4, 4), [2], pads=2),
     r"MaxPool3d.*at most half the kernel"),
    (lambda: dg.ops.avg_pool3d(_z(1, 1, 1, 4, 4), [2]), r"AvgPool3d.*larger than the padded"),
    (lambda: dg.ops.avg_pool3d(_z(1, 1, 4, 4, 4), [0]), r"AvgPool3d.*must be positive"),
    (lambda: dg.ops.avg_pool3d_grad(_z(1, 1, 4, 4, 4), _z(1, 1, 3, 2, 2), [2]),
     r"AvgPool3dGrad.*must have the pooled shape"),
])
def test_bad_input(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def _z(*shape):
    return dg.tensor(np.zeros(shape, np.float32))
