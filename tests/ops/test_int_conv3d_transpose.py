"""int32 Conv3d, ConvTranspose2d and ConvTranspose3d (quantized
convolutions): exact sums wrapped to int32 (two's complement), checked
against exact int64 NumPy references written from the definitions (a
direct sum over taps; int64 arithmetic wraps modulo 2^64, whose low 32 bits
are the int32 wrap-around), across geometries (strides, pads, dilations,
groups, output_padding, bias, empty batch) and overflowing values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from dragon_sdk.testing import run_op

import dragon_core as dg
from dragon_core.errors import DragonError


def _pads(pads, nd):
    """(begin, end) per axis from nd (symmetric) or 2 * nd values."""
    pads = list(pads)
    if len(pads) == nd:
        return pads, pads
    return pads[:nd], pads[nd:]


def conv_ref(x, w, b=None, strides=None, pads=None, dilations=None, groups=1):
    """y[n, o, i] = b[o] + sum_{c, k} x[n, g*Cg + c, i*s - p + k*d] * w[o, c, k]."""
    nd = x.ndim - 2
    s = strides or [1] * nd
    d = dilations or [1] * nd
    pb, pe = _pads(pads or [0] * nd, nd)
    n, cin = x.shape[:2]
    o_all, cg = w.shape[:2]
    ks = w.shape[2:]
    outs = [(x.shape[2 + a] + pb[a] + pe[a] - d[a] * (ks[a] - 1) - 1) // s[a] + 1
            for a in range(nd)]
    og = o_all // groups
    y = np.zeros((n, o_all) + tuple(outs), np.int64)
    x64, w64 = x.astype(np.int64), w.astype(np.int64)
    with np.errstate(over="ignore"):
        for o in range(o_all):
            g = o // og
            for pos in itertools.product(*[range(v) for v in outs]):
                for k in itertools.product(*[range(v) for v in ks]):
                    src = [pos[a] * s[a] - pb[a] + k[a] * d[a] for a in range(nd)]
                    if any(v < 0 or v >= x.shape[2 + a] for a, v in enumerate(src)):
                        continue
                    xs = x64[(slice(None), slice(g * cg, (g + 1) * cg)) + tuple(src)]
                    y[(slice(None), o) + pos] += xs @ w64[(o, slice(None)) + k]
            if b is not None:
                y[:, o] += np.int64(b[o])
    return y.astype(np.int32)


def conv_transpose_ref(x, w, b=None, strides=None, pads=None, output_padding=None,
                       dilations=None, groups=1):
    """y[n, g*Og + o, i*s - p + k*d] += x[n, g*Cg + c, i] * w[g*Cg + c, o, k]."""
    nd = x.ndim - 2
    s = strides or [1] * nd
    d = dilations or [1] * nd
    op = output_padding or [0] * nd
    pb, pe = _pads(pads or [0] * nd, nd)
    n, cin = x.shape[:2]
    og = w.shape[1]
    ks = w.shape[2:]
    cg = cin // groups
    outs = [(x.shape[2 + a] - 1) * s[a] - pb[a] - pe[a] + d[a] * (ks[a] - 1) + op[a] + 1
            for a in range(nd)]
    y = np.zeros((n, og * groups) + tuple(outs), np.int64)
    x64, w64 = x.astype(np.int64), w.astype(np.int64)
    with np.errstate(over="ignore"):
        for c in range(cin):
            g = c // cg
            for pos in itertools.product(*[range(v) for v in x.shape[2:]]):
                xv = x64[(slice(None), c) + pos]                  # [N]
                for k in itertools.product(*[range(v) for v in ks]):
                    dst = [pos[a] * s[a] - pb[a] + k[a] * d[a] for a in range(nd)]
                    if any(v < 0 or v >= outs[a] for a, v in enumerate(dst)):
                        continue
                    wv = w64[(c, slice(None)) + k]                 # [Og]
                    y[(slice(None), slice(g * og, (g + 1) * og)) + tuple(dst)] += \
                        xv[:, None] * wv[None, :]
        if b is not None:
            y += b.astype(np.int64).reshape((1, -1) + (1,) * nd)
    return y.astype(np.int32)


def _ints(rng, shape, lo=-128, hi=128):
    return rng.integers(lo, hi, shape).astype(np.int32)


CONV3D = [
    ((2, 3, 4, 5, 4), (4, 3, 2, 3, 2), {}),
    ((1, 4, 5, 5, 6), (4, 2, 3, 2, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1], "groups": 2}),
    ((1, 2, 6, 5, 5), (3, 2, 2, 2, 2), {"dilations": [2, 1, 2], "pads": [1, 1, 0]}),
    ((0, 2, 3, 3, 3), (2, 2, 2, 2, 2), {}),
    ((1, 1, 1, 1, 1), (1, 1, 1, 1, 1), {}),
]

CONVT2D = [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 4, 3, 4), (4, 3, 3, 2), {"strides": [2, 3], "pads": [1, 0], "output_padding": [1, 2],
                                  "groups": 2}),
    ((1, 2, 4, 4), (2, 3, 2, 3), {"dilations": [2, 1], "pads": [1, 0, 0, 1]}),
    ((0, 2, 3, 3), (2, 2, 2, 2), {}),
]

CONVT3D = [
    ((2, 2, 3, 3, 2), (2, 3, 2, 2, 2), {}),
    ((1, 4, 2, 3, 3), (4, 2, 2, 3, 2), {"strides": [2, 1, 2], "pads": [1, 1, 0],
                                        "output_padding": [1, 0, 1], "groups": 2}),
    ((1, 2, 3, 2, 3), (2, 2, 2, 2, 2), {"dilations": [1, 2, 2]}),
    ((0, 2, 2, 2, 2), (2, 2, 2, 2, 2), {}),
]


@pytest.mark.parametrize("xs, ws, attrs", CONV3D)
@pytest.mark.parametrize("bias", [False, True])
def test_int32_conv3d_matches_exact_reference(xs, ws, attrs, bias):
    rng = np.random.default_rng(0)
    x, w, b = _ints(rng, xs), _ints(rng, ws), _ints(rng, ws[:1], -1000, 1000)
    args = (x, w, b) if bias else (x, w)
    y = run_op("Conv3d", *args, **attrs)
    assert y.dtype == np.int32
    np.testing.assert_array_equal(y, conv_ref(x, w, b if bias else None, **attrs))


@pytest.mark.parametrize("op, cases", [("ConvTranspose2d", CONVT2D),
                                       ("ConvTranspose3d", CONVT3D)])
@pytest.mark.parametrize("bias", [False, True])
def test_int32_conv_transpose_matches_exact_reference(op, cases, bias):
    rng = np.random.default_rng(1)
    for xs, ws, attrs in cases:
        x, w = _ints(rng, xs), _ints(rng, ws)
        b = _ints(rng, (ws[1] * attrs.get("groups", 1),), -1000, 1000)
        args = (x, w, b) if bias else (x, w)
        y = run_op(op, *args, **attrs)
        assert y.dtype == np.int32
        np.testing.assert_array_equal(y, conv_transpose_ref(x, w, b if bias else None, **attrs),
                                      err_msg=f"{op} {xs} {ws} {attrs}")


def test_float_reference_agrees_with_the_float_kernels():
    """The references above are the ops' definitions: the float64 kernels
    give the same numbers on small integers (exact in float64)."""
    rng = np.random.default_rng(2)
    for op, ref, (xs, ws, attrs) in [("Conv3d", conv_ref, CONV3D[1]),
                                     ("ConvTranspose2d", conv_transpose_ref, CONVT2D[1]),
                                     ("ConvTranspose3d", conv_transpose_ref, CONVT3D[1])]:
        x, w = _ints(rng, xs, -20, 20), _ints(rng, ws, -20, 20)
        y = run_op(op, x.astype(np.float64), w.astype(np.float64), **attrs)
        np.testing.assert_array_equal(y, ref(x, w, **attrs).astype(np.float64), err_msg=op)


@pytest.mark.parametrize("op, xs, ws", [("Conv3d", (1, 2, 3, 3, 3), (2, 2, 2, 2, 2)),
                                        ("ConvTranspose2d", (1, 2, 3, 3), (2, 2, 2, 2)),
                                        ("ConvTranspose3d", (1, 2, 2, 2, 2), (2, 2, 2, 2, 2))])
def test_int32_wraps_like_twos_complement(op, xs, ws):
    rng = np.random.default_rng(3)
    x = rng.integers(-2**31, 2**31, xs, dtype=np.int64).astype(np.int32)
    w = rng.integers(-2**31, 2**31, ws, dtype=np.int64).astype(np.int32)
    b = rng.integers(-2**31, 2**31, (2,), dtype=np.int64).astype(np.int32)
    ref = conv_ref if op == "Conv3d" else conv_transpose_ref
    np.testing.assert_array_equal(run_op(op, x, w, b), ref(x, w, b))
    # (2^31 - 1)^2 * taps wraps: every product is 1 mod 2^32.
    big_x = np.full(xs, 2**31 - 1, np.int32)
    big_w = np.full(ws, 2**31 - 1, np.int32)
    np.testing.assert_array_equal(run_op(op, big_x, big_w), ref(big_x, big_w))


@pytest.mark.parametrize("op, nd", [("Conv3d", 3), ("ConvTranspose2d", 2),
                                    ("ConvTranspose3d", 3)])
def test_other_integer_dtypes_and_mixed_dtypes_raise(op, nd):
    x = np.ones((1, 1) + (3,) * nd, np.int64)
    w = np.ones((1, 1) + (2,) * nd, np.int64)
    with pytest.raises(DragonError, match=op):
        run_op(op, x, w)
    with pytest.raises(DragonError, match=op):
        run_op(op, x.astype(np.int32), w.astype(np.float32))


def test_int32_conv_transpose_in_graph_mode():
    rng = np.random.default_rng(4)
    x, w = _ints(rng, (1, 2, 3, 3), -50, 50), _ints(rng, (2, 3, 2, 2), -50, 50)

    @dg.function
    def f(a, b):
        return dg.ops.conv_transpose2d(a, b, strides=[2, 2]) + dg.ops.conv_transpose2d(a, b,
                                                                                   strides=[2, 2])

    y = f(dg.tensor(x), dg.tensor(w)).numpy()
    np.testing.assert_array_equal(y, 2 * conv_transpose_ref(x, w, strides=[2, 2]))
