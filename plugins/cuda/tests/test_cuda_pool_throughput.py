"""Pooling on cuda at the shapes its throughput paths take (pool.cu): max
pooling with 32-bit index math and the two-phase gradient (window maxima
first, then one gather per input cell), with and without dilation, and the
one-warp-per-output average pools (boxes of 32 cells or more: ResNet's
global average pool, large windows), against float64 NumPy references of
the forward and of the gradient of ``sum(y * w)``, and bit for bit the same
on a second run.

GPU tests: they skip, with the device's reason, where no cuda device
exists. ``DRAGON_CUDA_CONFORMANCE_DEVICE=cpu`` runs them with the CPU as the
device under test (float32/float64), to check the references.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

from _throughput_util import host64, need_device, rounded64, skip_half, to_device

ops = dg.ops
F = dg.nn.functional
pytestmark = pytest.mark.gpu
TOL = {"float64": (1e-12, 1e-12), "float32": (2e-6, 1e-6), "float16": (2e-3, 2e-3),
       "bfloat16": (1.6e-2, 1.6e-2)}


@pytest.fixture(autouse=True)
def _need_device():
    need_device()


def _skip_half(dtype):
    skip_half(dtype, "pooling")


def _forward_and_grad(fn, x, w, dtype):
    tx, tw = to_device(x, dtype), to_device(w, dtype)
    with dg.GradientTape() as tape:
        tape.watch(tx)
        y = fn(tx)
        s = ops.sum(y * tw)
    (dx,) = tape.gradient(s, [tx])
    return host64(y), host64(dx)


def _check(got, want, dtype, what):
    rtol, atol = TOL[dtype]
    scale = max(float(np.abs(want).max()) if want.size else 1.0, 1.0)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol * scale, err_msg=what)


# ------------------------------------------------------------ references

def _max_pool_ref(x, k, s, p, d, w):
    """y, and dx of sum(y * w): each window's first maximum (row-major)."""
    n, c, h, wd = x.shape
    oh = (h + 2 * p - d * (k - 1) - 1) // s + 1
    ow = (wd + 2 * p - d * (k - 1) - 1) // s + 1
    xp = np.full((n, c, h + 2 * p, wd + 2 * p), -np.inf)
    xp[:, :, p:p + h, p:p + wd] = x
    cand = np.stack([xp[:, :, a * d:a * d + s * (oh - 1) + 1:s, b * d:b * d + s * (ow - 1) + 1:s]
                     for a in range(k) for b in range(k)])
    arg = cand.argmax(axis=0)
    y = np.take_along_axis(cand, arg[None], axis=0)[0]
    dx = np.zeros((n, c, h + 2 * p, wd + 2 * p))
    a, b = arg // k, arg % k
    ii, jj = np.meshgrid(np.arange(oh), np.arange(ow), indexing="ij")
    rows, cols = ii * s + a * d, jj * s + b * d
    nn_, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    np.add.at(dx, (nn_[:, :, None, None], cc[:, :, None, None], rows, cols), w)
    return y, dx[:, :, p:p + h, p:p + wd]


def _box_mean_ref(x, boxes, w):
    """y[i, j] = mean of box (h0, h1, w0, w1, count); dx of sum(y * w)."""
    n, c = x.shape[:2]
    oh, ow = len(boxes), len(boxes[0])
    y = np.zeros((n, c, oh, ow))
    dx = np.zeros_like(x)
    for i in range(oh):
        for j in range(ow):
            h0, h1, w0, w1, count = boxes[i][j]
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum(axis=(2, 3)) / count
            dx[:, :, h0:h1, w0:w1] += (w[:, :, i, j] / count)[:, :, None, None]
    return y, dx


def _adaptive_boxes(h, wd, oh, ow):
    return [[(i * h // oh, -(-(i + 1) * h // oh), j * wd // ow, -(-(j + 1) * wd // ow),
              (-(-(i + 1) * h // oh) - i * h // oh) * (-(-(j + 1) * wd // ow) - j * wd // ow))
             for j in range(ow)] for i in range(oh)]


def _avg_boxes(h, wd, k, s, p, include_pad):
    oh, ow = (h + 2 * p - k) // s + 1, (wd + 2 * p - k) // s + 1
    out = []
    for i in range(oh):
        row = []
        for j in range(ow):
            h0, w0 = i * s - p, j * s - p
            h1, w1 = min(h0 + k, h + p), min(w0 + k, wd + p)
            if include_pad:
                count = (h1 - h0) * (w1 - w0)
            else:
                count = (min(h1, h) - max(h0, 0)) * (min(w1, wd) - max(w0, 0))
            row.append((max(h0, 0), min(h0 + k, h), max(w0, 0), min(w0 + k, wd), count))
        out.append(row)
    return out


# ------------------------------------------------------------------ tests
MAX_CASES = [((2, 3, 112, 112), 3, 2, 1, 1), ((2, 3, 15, 17), 3, 2, 1, 1),
             ((2, 2, 16, 16), 2, 2, 0, 1), ((1, 3, 13, 11), 3, 1, 1, 2),
             ((2, 2, 9, 10), 3, 2, 1, 2)]


@pytest.mark.parametrize("dtype", ("float32", "float64", "float16", "bfloat16"))
@pytest.mark.parametrize("case", MAX_CASES, ids=lambda c: f"{'x'.join(map(str, c[0]))}-k{c[1]}"
                         f"s{c[2]}p{c[3]}d{c[4]}")
def test_max_pool_and_grad(dtype, case):
    _skip_half(dtype)
    shape, k, s, p, d = case
    rng = np.random.default_rng(sum(shape) + k)
    # distinct values: a tie's winner is then a rule, not an accident
    x = rounded64(rng.permutation(np.prod(shape)).reshape(shape) / np.prod(shape) * 8 - 4,
                   dtype)
    yref, _ = _max_pool_ref(x, k, s, p, d, np.zeros(1))
    w = rounded64(rng.uniform(-1, 1, yref.shape), dtype)
    yref, dxref = _max_pool_ref(x, k, s, p, d, w)
    y, dx = _forward_and_grad(lambda t: F.max_pool2d(t, k, s, p, d), x, w, dtype)
    np.testing.assert_array_equal(y, yref)   # a maximum is one of the inputs
    _check(dx, dxref, dtype, f"max_pool2d grad {dtype} {case}")


@pytest.mark.parametrize("dtype", ("float32", "float64", "bfloat16"))
@pytest.mark.parametrize("shape,out", [((2, 5, 7, 7), (1, 1)), ((2, 3, 20, 20), (3, 2)),
                                       ((2, 3, 9, 9), (4, 4)), ((1, 2, 40, 7), (1, 1))])
def test_adaptive_avg_pool_and_grad(dtype, shape, out):
    _skip_half(dtype)
    rng = np.random.default_rng(7)
    x = rounded64(rng.uniform(-2, 2, shape), dtype)
    w = rounded64(rng.uniform(-1, 1, shape[:2] + out), dtype)
    yref, dxref = _box_mean_ref(x, _adaptive_boxes(shape[2], shape[3], *out), w)
    y, dx = _forward_and_grad(lambda t: F.adaptive_avg_pool2d(t, out), x, w, dtype)
    _check(y, yref, dtype, "adaptive_avg_pool2d")
    _check(dx, dxref, dtype, "adaptive_avg_pool2d grad")


@pytest.mark.parametrize("dtype", ("float32", "float16"))
@pytest.mark.parametrize("include_pad", (True, False))
def test_avg_pool_large_window(dtype, include_pad):
    _skip_half(dtype)
    shape, k, s, p = (2, 3, 12, 13), 7, 2, 3
    rng = np.random.default_rng(8)
    x = rounded64(rng.uniform(-2, 2, shape), dtype)
    boxes = _avg_boxes(shape[2], shape[3], k, s, p, include_pad)
    w = rounded64(rng.uniform(-1, 1, shape[:2] + (len(boxes), len(boxes[0]))), dtype)
    yref, dxref = _box_mean_ref(x, boxes, w)
    y, dx = _forward_and_grad(
        lambda t: F.avg_pool2d(t, k, s, p, count_include_pad=include_pad), x, w, dtype)
    _check(y, yref, dtype, "avg_pool2d")
    _check(dx, dxref, dtype, "avg_pool2d grad")


def test_pools_are_deterministic():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((2, 8, 56, 56))
    w = rng.standard_normal((2, 8, 28, 28))
    w1 = rng.standard_normal((2, 8, 1, 1))
    runs = [_forward_and_grad(lambda t: F.max_pool2d(t, 3, 2, 1), x, w, "float32")
            + _forward_and_grad(lambda t: F.adaptive_avg_pool2d(t, 1), x, w1, "float32")
            for _ in range(2)]
    for a, b in zip(*runs):
        np.testing.assert_array_equal(a, b)
