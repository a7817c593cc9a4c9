"""Reductions of a dense [rows, cols] tensor over its rows (the bias
gradient's Sum) on cuda take a column kernel (reduce.cu: 32 columns per
block, 8 row groups, fixed combination order): Sum, Mean, Max, Min, Prod
against float64 NumPy (integers exactly, NaN propagated by Max/Min), for
widths around the 32-column tiles, and the same bits on a second run.

GPU tests: they skip, with the device's reason, where no cuda device
exists. ``DRAGON_CUDA_CONFORMANCE_DEVICE=cpu`` runs them on the CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

from _throughput_util import DEV, need_device

ops = dg.ops
pytestmark = pytest.mark.gpu
SHAPES = [(64, 1000), (128, 512), (33, 32), (7, 65), (4096, 40), (2, 31)]


@pytest.fixture(autouse=True)
def _need_device():
    need_device()


def _host(t):
    t = t.to("cpu")
    if str(t.dtype) in ("float16", "bfloat16"):
        t = ops.cast(t, dtype="float32")
    return np.asarray(t.numpy())


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_row_reductions_of_floats(shape, dtype):
    rng = np.random.default_rng(shape[0] + shape[1])
    x = rng.uniform(-2, 2, shape).astype(dtype)
    xd = dg.tensor(x).to(DEV)
    x64 = x.astype(np.float64)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(_host(ops.sum(xd, axis=0)), x64.sum(0), **tol)
    np.testing.assert_allclose(_host(ops.mean(xd, axis=0)), x64.mean(0), **tol)
    np.testing.assert_array_equal(_host(ops.max(xd, axis=0)), x.max(0))
    np.testing.assert_array_equal(_host(ops.min(xd, axis=0, keepdims=True)),
                                  x.min(0, keepdims=True))
    small = (1 + x[:12] / 8).astype(dtype)
    np.testing.assert_allclose(_host(ops.prod(dg.tensor(small).to(DEV), axis=0)),
                               small.astype(np.float64).prod(0), **tol)


def test_row_reductions_of_ints_bools_nan_and_16_bit():
    rng = np.random.default_rng(3)
    xi = rng.integers(-1000, 1000, (64, 100)).astype(np.int32)
    np.testing.assert_array_equal(_host(ops.sum(dg.tensor(xi).to(DEV), axis=0)),
                                  xi.sum(0, dtype=np.int64).astype(np.int32))
    xb = rng.integers(0, 2, (50, 40)).astype(bool)
    np.testing.assert_array_equal(_host(ops.sum(dg.tensor(xb).to(DEV), axis=0)), xb.sum(0))
    xf = rng.uniform(-1, 1, (40, 64)).astype(np.float32)
    xf[17, 5] = np.nan
    got = _host(ops.max(dg.tensor(xf).to(DEV), axis=0))
    assert np.isnan(got[5]) and not np.isnan(np.delete(got, 5)).any()
    np.testing.assert_array_equal(np.delete(got, 5), np.delete(xf.max(0), 5))
    if DEV == "cpu":
        return
    xh = rng.uniform(-2, 2, (64, 300)).astype(np.float32)
    t = ops.cast(dg.tensor(xh), dtype="bfloat16")
    ref = _host(t).astype(np.float64).sum(0)
    np.testing.assert_allclose(_host(ops.sum(t.to(DEV), axis=0)), ref, rtol=1e-2, atol=5e-2)


def test_row_sum_is_deterministic():
    x = dg.tensor(np.random.default_rng(4).standard_normal((256, 1000)).astype(np.float32))
    xd = x.to(DEV)
    np.testing.assert_array_equal(_host(ops.sum(xd, axis=0)), _host(ops.sum(xd, axis=0)))


# ------------------------------------------------ cross entropy, many classes

def _ce_ref(x, t, ignore, smoothing, reduction):
    x = x.astype(np.float64)
    mx = x.max(axis=1, keepdims=True)
    lse = (mx + np.log(np.exp(x - mx).sum(axis=1, keepdims=True)))[:, 0]
    keep = t != ignore
    safe = np.where(keep, t, 0)
    loss = lse - (1 - smoothing) * x[np.arange(len(t)), safe] - smoothing / x.shape[1] * x.sum(1)
    loss = np.where(keep, loss, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() / keep.sum() if reduction == "mean" else loss.sum()


@pytest.mark.parametrize("n,c", [(64, 1000), (7, 37), (300, 10)])
@pytest.mark.parametrize("reduction", ("mean", "sum", "none"))
@pytest.mark.parametrize("smoothing", (0.0, 0.1))
def test_cross_entropy_rows(n, c, reduction, smoothing):
    """Row-per-warp SoftmaxCrossEntropy (C >= 32) and the per-thread one
    (C = 10) against float64 NumPy, with ignored targets."""
    rng = np.random.default_rng(n + c)
    x = (rng.standard_normal((n, c)) * 3).astype(np.float32)
    t = rng.integers(0, c, n).astype(np.int64)
    t[::5] = -100
    got = _host(dg.nn.functional.cross_entropy(dg.tensor(x).to(DEV), dg.tensor(t).to(DEV),
                                               reduction=reduction, label_smoothing=smoothing))
    np.testing.assert_allclose(got, _ce_ref(x, t, -100, smoothing, reduction), rtol=1e-5,
                               atol=1e-5)


def test_cross_entropy_nan_row_and_determinism():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 100)).astype(np.float32)
    x[3, 41] = np.nan
    t = dg.tensor(rng.integers(0, 100, 8).astype(np.int32)).to(DEV)
    xd = dg.tensor(x).to(DEV)
    per_row = _host(dg.nn.functional.cross_entropy(xd, t, reduction="none"))
    assert np.isnan(per_row[3]) and np.isfinite(np.delete(per_row, 3)).all()
    a = _host(dg.nn.functional.cross_entropy(xd, t, reduction="sum"))
    b = _host(dg.nn.functional.cross_entropy(xd, t, reduction="sum"))
    assert np.isnan(a) and np.isnan(b)
    xd = dg.tensor(np.nan_to_num(x)).to(DEV)
    np.testing.assert_array_equal(_host(dg.nn.functional.cross_entropy(xd, t)),
                                  _host(dg.nn.functional.cross_entropy(xd, t)))


# ------------------------------------------------ softmax rows (one warp each)

@pytest.mark.parametrize("shape", [(512, 128), (64, 1000), (3, 1500), (5, 7, 33)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_softmax_rows(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(dtype)
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(-1, keepdims=True)
    lse = np.log(np.exp(shifted).sum(-1, keepdims=True))
    xd = dg.tensor(x).to(DEV)
    tol = dict(rtol=1e-12, atol=1e-14) if dtype == "float64" else dict(rtol=2e-6, atol=1e-7)
    np.testing.assert_allclose(_host(ops.softmax(xd, axis=-1)), np.exp(shifted - lse), **tol)
    # |x| up to ~20: x - max - lse rounds at ~20 eps (float32)
    tol = dict(rtol=1e-12, atol=1e-12) if dtype == "float64" else dict(rtol=2e-6, atol=2e-5)
    np.testing.assert_allclose(_host(ops.log_softmax(xd, axis=-1)), shifted - lse, **tol)


def test_softmax_rows_nan_inf_and_determinism():
    x = np.random.default_rng(6).standard_normal((6, 200)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, :] = -np.inf
    x[3, 11] = np.inf
    got = _host(ops.softmax(dg.tensor(x).to(DEV), axis=-1))
    # a NaN, an all -inf row and a +inf (inf - inf in the sum) give NaN rows,
    # as on the CPU
    assert np.isnan(got[1]).all() and np.isnan(got[2]).all() and np.isnan(got[3]).all()
    ok = [0, 4, 5]
    want = np.exp(x[ok] - x[ok].max(-1, keepdims=True))
    np.testing.assert_allclose(got[ok], want / want.sum(-1, keepdims=True), rtol=2e-6, atol=1e-7)
    xd = dg.tensor(np.nan_to_num(x, neginf=0.0, posinf=0.0)).to(DEV)
    np.testing.assert_array_equal(_host(ops.softmax(xd, axis=-1)),
                                  _host(ops.softmax(xd, axis=-1)))
