"""BatchNorm / BatchNormGrad on cuda at the shapes where its throughput
kernels cut channels into several blocks, read 16-byte vectors and keep
float running moments (batchnorm.cu): against a float64 NumPy reference
of the forward (y, batch mean and variance) and of the gradients (x, gamma,
beta), on ordinary and on offset data (mean 50, std 1: the case a naive
one-pass variance gets wrong), and bit for bit the same on a second run.

GPU tests: they skip, with the device's reason, where no cuda device
exists. ``DRAGON_CUDA_CONFORMANCE_DEVICE=cpu`` runs them with the CPU as the
device under test (float32/float64), to check the tests' own reference.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

from _throughput_util import host64, need_device, rounded64, skip_half, to_device

ops = dg.ops
pytestmark = pytest.mark.gpu
#: (rtol, atol as a fraction of the largest reference value) per dtype.
TOL = {"float64": (1e-9, 1e-11), "float32": (2e-4, 2e-5), "float16": (2e-2, 8e-3),
       "bfloat16": (8e-2, 4e-2)}
EPS = 1e-5

#: [N, C, *] shapes: several blocks per channel with scalar units (S odd),
#: 16-byte vectors (S % 8 == 0), N = 1 with a long S, S = 1 (BatchNorm1d),
#: a block per channel, an empty S.
SHAPES = [(16, 6, 37, 41), (8, 4, 64, 64), (1, 2, 70000), (300, 5), (2, 3, 7, 7),
          (3, 2, 0, 4)]


@pytest.fixture(autouse=True)
def _need_device():
    need_device()


def _skip_half(dtype):
    skip_half(dtype, "batch or layer norm")


def _reference(x, g, b, rm, rv, w, training):
    """float64 forward and the gradients of sum(y * w) (+ 0.3 sum(mean) +
    0.7 sum(var) when training) with respect to x, gamma and beta."""
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, -1) + (1,) * (x.ndim - 2)
    m = x.size // x.shape[1] if x.shape[1] else 0
    if training:
        mean = x.mean(axis=axes) if m else np.full(x.shape[1], np.nan)
        var = ((x - mean.reshape(bshape)) ** 2).mean(axis=axes) if m else mean.copy()
    else:
        mean, var = rm, rv
    rstd = 1.0 / np.sqrt(var + EPS)
    xhat = (x - mean.reshape(bshape)) * rstd.reshape(bshape)
    y = xhat * g.reshape(bshape) + b.reshape(bshape)
    dbeta = w.sum(axis=axes)
    dgamma = (w * xhat).sum(axis=axes)
    if training and m:
        wm = w.mean(axis=axes).reshape(bshape)
        wx = (w * xhat).mean(axis=axes).reshape(bshape)
        dx = (g * rstd).reshape(bshape) * (w - wm - xhat * wx)
        dx = dx + 0.3 / m + 0.7 * 2.0 * (x - mean.reshape(bshape)) / m
    else:
        dx = (g * rstd).reshape(bshape) * w
    if training and m:
        return [y, mean, var, dx, dgamma, dbeta]
    return [y, mean if training else rm, var if training else rv, dx, dgamma, dbeta]


def _run(x, g, b, rm, rv, w, dtype, training, misaligned=False):
    tx = to_device(x, dtype, misaligned)
    tg, tb, trm, trv, tw = (to_device(v, dtype) for v in (g, b, rm, rv, w))
    with dg.GradientTape() as tape:
        for t in (tx, tg, tb):
            tape.watch(t)
        y, mean, var = ops.batch_norm(tx, tg, tb, trm, trv, eps=EPS, training=training)
        s = ops.sum(y * tw)
        if training and x.shape[0]:
            s = s + ops.sum(mean * 0.3) + ops.sum(var * 0.7)
    return [y, mean, var] + list(tape.gradient(s, [tx, tg, tb]))


def _inputs(shape, dtype, offset, seed=0):
    rng = np.random.default_rng(seed)
    c = shape[1]
    x = rng.standard_normal(shape) + (50.0 if offset else rng.uniform(-1, 1, (1, c) +
                                                                      (1,) * (len(shape) - 2)))
    vals = [x, rng.uniform(0.5, 1.5, c), rng.uniform(-0.5, 0.5, c),
            rng.uniform(-0.5, 0.5, c) + (50.0 if offset else 0.0), rng.uniform(0.5, 2.0, c),
            rng.uniform(-1, 1, shape)]
    return [rounded64(v, dtype) for v in vals]



NAMES = ["y", "mean", "var", "dx", "dgamma", "dbeta"]


@pytest.mark.parametrize("dtype", ("float32", "float64", "float16", "bfloat16"))
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("training", (True, False))
def test_batch_norm_wide_shapes(dtype, shape, training):
    _skip_half(dtype)
    x, g, b, rm, rv, w = _inputs(shape, dtype, offset=False)
    got = _run(x, g, b, rm, rv, w, dtype, training)
    want = _reference(x, g, b, rm, rv, w, training)
    rtol, atol = TOL[dtype]
    for name, a, r in zip(NAMES, got, want):
        a = host64(a)
        assert a.shape == r.shape, name
        scale = float(np.nanmax(np.abs(r))) if r.size and np.isfinite(r).any() else 1.0
        np.testing.assert_allclose(a, r, rtol=rtol, atol=atol * max(scale, 1.0),
                                   err_msg=f"{name} {dtype} {shape} training={training}")


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
@pytest.mark.parametrize("shape", [(16, 6, 37, 41), (8, 4, 64, 64), (1, 2, 70000)],
                         ids=lambda s: "x".join(map(str, s)))
def test_batch_norm_offset_data(dtype, shape):
    """Mean 50, standard deviation 1 (and running mean 50 in inference):
    the variance and the centred gradient sums must not cancel away."""
    _skip_half(dtype)
    x, g, b, rm, rv, w = _inputs(shape, dtype, offset=True, seed=1)
    for training in (True, False):
        got = _run(x, g, b, rm, rv, w, dtype, training)
        want = _reference(x, g, b, rm, rv, w, training)
        rtol, atol = TOL[dtype]
        for name, a, r in zip(NAMES, got, want):
            a = host64(a)
            np.testing.assert_allclose(a, r, rtol=rtol, atol=atol * max(np.abs(r).max(), 1.0),
                                       err_msg=f"{name} {dtype} {shape} training={training}")


@pytest.mark.parametrize("dtype", ("float32", "float16"))
def test_batch_norm_misaligned_view(dtype):
    """Data one element into its buffer (no 16-byte vectors): same results."""
    _skip_half(dtype)
    shape = (4, 3, 56, 56)
    x, g, b, rm, rv, w = _inputs(shape, dtype, offset=False, seed=2)
    got = _run(x, g, b, rm, rv, w, dtype, True, misaligned=True)
    want = _reference(x, g, b, rm, rv, w, True)
    rtol, atol = TOL[dtype]
    for name, a, r in zip(NAMES, got, want):
        np.testing.assert_allclose(host64(a), r, rtol=rtol, atol=atol * max(np.abs(r).max(), 1),
                                   err_msg=name)


@pytest.mark.parametrize("dtype", ("float32", "bfloat16"))
def test_batch_norm_is_deterministic(dtype):
    """Two runs on the same inputs give the same bits (fixed reduction
    order, no atomics), forward and backward."""
    _skip_half(dtype)
    x, g, b, rm, rv, w = _inputs((16, 6, 37, 41), dtype, offset=False, seed=3)
    first = [host64(t) for t in _run(x, g, b, rm, rv, w, dtype, True)]
    second = [host64(t) for t in _run(x, g, b, rm, rv, w, dtype, True)]
    for name, a, r in zip(NAMES, first, second):
        np.testing.assert_array_equal(a, r, err_msg=name)


# ------------------------------------------------------------ LayerNorm
# Rows of up to 1024 values take one warp each, wider rows a block; the
# parameter gradients sum columns in 8 row groups (nn.cu).

def _layer_norm_ref(x, g, b, w):
    mean = x.mean(-1, keepdims=True)
    rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(-1, keepdims=True) + EPS)
    xhat = (x - mean) * rstd
    gw = w * g
    dx = rstd * (gw - gw.mean(-1, keepdims=True) - xhat * (gw * xhat).mean(-1, keepdims=True))
    rows = tuple(range(x.ndim - 1))
    return [xhat * g + b, dx, (w * xhat).sum(rows), w.sum(rows)]


@pytest.mark.parametrize("dtype", ("float32", "float64", "bfloat16"))
@pytest.mark.parametrize("shape", [(8, 128, 256), (3, 1500), (1000, 33), (2, 1024)],
                         ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_rows(dtype, shape):
    _skip_half(dtype)
    rng = np.random.default_rng(sum(shape))
    x = rounded64(rng.standard_normal(shape) * 2 + 3, dtype)
    g = rounded64(rng.uniform(0.5, 1.5, shape[-1]), dtype)
    b = rounded64(rng.uniform(-0.5, 0.5, shape[-1]), dtype)
    w = rounded64(rng.uniform(-1, 1, shape), dtype)
    tx, tg, tb, tw = (to_device(v, dtype) for v in (x, g, b, w))
    with dg.GradientTape() as tape:
        for t in (tx, tg, tb):
            tape.watch(t)
        y = dg.nn.functional.layer_norm(tx, shape[-1], tg, tb, eps=EPS)
        s = ops.sum(y * tw)
    got = [y] + list(tape.gradient(s, [tx, tg, tb]))
    rtol, atol = TOL[dtype]
    for name, a, r in zip(["y", "dx", "dgamma", "dbeta"], got, _layer_norm_ref(x, g, b, w)):
        np.testing.assert_allclose(host64(a), r, rtol=rtol, atol=atol * max(np.abs(r).max(), 1),
                                   err_msg=f"{name} {dtype} {shape}")
