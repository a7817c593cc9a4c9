"""BatchNorm / BatchNormGrad in training mode: cpu_eigen's one-pass shifted
statistics (plugins/cpu_eigen/src/norm.cc) against the float64 two-pass
NumPy reference of test_norm.py, on ResNet-18's shapes, edge shapes (batch
1, 1x1 spatial, odd channels, spatial sizes that are not a multiple of the
kernel's 8 lanes), far-from-zero channels whose first value (the shift) is
an outlier, and non-finite first values (the two-pass fallback).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase

from .test_norm import batch_norm_grad_ref, batch_norm_ref

SHAPES = [(8, 64, 16, 16), (8, 512, 2, 2), (8, 256, 4, 4), (1, 3, 1, 1), (1, 5, 7, 3),
          (2, 7, 3, 5), (3, 2, 17), (5, 3)]


def _inputs(rng, dt, shape, offset=2.0, grad=False):
    c = (shape[1],)
    x = (offset + rng.standard_normal(shape)).astype(dt)
    gamma = rng.uniform(0.5, 1.5, c).astype(dt)
    rm = rng.uniform(-1, 1, c).astype(dt)
    rv = rng.uniform(0.5, 2, c).astype(dt)
    if grad:
        return [x, gamma, rm, rv, rng.standard_normal(shape).astype(dt),
                rng.standard_normal(c).astype(dt), rng.standard_normal(c).astype(dt)]
    return [x, gamma, rng.uniform(-1, 1, c).astype(dt), rm, rv]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_training_statistics_match_two_pass_reference(shape, dtype):
    rng = np.random.default_rng(len(shape) * 100 + shape[1])
    OpCase.of("BatchNorm", _inputs(rng, dtype, shape), batch_norm_ref,
              tol=10).check_forward()
    OpCase.of("BatchNormGrad", _inputs(rng, dtype, shape, grad=True), batch_norm_grad_ref,
              tol=20).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_far_from_zero_with_an_outlier_as_the_shift(dtype):
    """Channels at 1e4 with spread 1 whose first value is 30 spreads away:
    the shifted sums keep the variance (cancellation ~ 30^2, not 1e8)."""
    rng = np.random.default_rng(5)
    x = 1e4 + rng.standard_normal((16, 3, 6, 6))
    x[0, :, 0, 0] += 30.0
    x = x.astype(dtype)
    c = np.ones(3, dtype)
    y, mean, var = dg.ops.batch_norm(*(dg.tensor(a) for a in (x, c, 0 * c, c, c)))
    want = batch_norm_ref(x.astype(np.float64), *(a.astype(np.float64) for a in (c, 0 * c, c, c)))
    rtol = 1e-4 if dtype == "float32" else 1e-10
    np.testing.assert_allclose(var.numpy(), want[2], rtol=rtol)
    np.testing.assert_allclose(mean.numpy(), want[1], rtol=1e-7 if dtype == "float32" else 1e-14)
    np.testing.assert_allclose(y.numpy(), want[0], atol=2e-3 if dtype == "float32" else 1e-9)
    ins = [x, c, c, c, rng.standard_normal(x.shape).astype(dtype),
           rng.standard_normal(3).astype(dtype), rng.standard_normal(3).astype(dtype)]
    got = dg.ops.batch_norm_grad(*(dg.tensor(a) for a in ins))
    ref = batch_norm_grad_ref(*(a.astype(np.float64) for a in ins))
    for g, r in zip(got, ref):
        scale = np.abs(r).max()
        np.testing.assert_allclose(g.numpy(), r, rtol=0,
                                   atol=(2e-3 if dtype == "float32" else 1e-9) * scale)


@pytest.mark.parametrize("first", [np.inf, -np.inf, np.nan])
def test_non_finite_first_value(first):
    """An infinite or NaN first value gives NumPy's statistics (inf mean,
    NaN variance; NaN for NaN), not the NaN that x - inf would make."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    x[0, 0, 0] = first
    c = np.ones(2, np.float32)
    _, mean, var = dg.ops.batch_norm(*(dg.tensor(a) for a in (x, c, 0 * c, c, c)))
    with np.errstate(invalid="ignore"):
        want = batch_norm_ref(x.astype(np.float64),
                              *(a.astype(np.float64) for a in (c, 0 * c, c, c)))
    np.testing.assert_allclose(mean.numpy(), want[1], rtol=1e-6)
    np.testing.assert_allclose(var.numpy(), want[2], rtol=1e-5)
    assert np.isfinite(var.numpy()[1])


def test_empty_batch_keeps_nan_statistics_and_empty_gradients():
    x = np.zeros((0, 3, 2, 2), np.float32)
    p = np.ones(3, np.float32)
    _, mean, var = dg.ops.batch_norm(*(dg.tensor(a) for a in (x, p, p, p, p)))
    assert np.isnan(mean.numpy()).all() and np.isnan(var.numpy()).all()
    dx, dgamma, dbeta = dg.ops.batch_norm_grad(
        *(dg.tensor(a) for a in (x, p, p, p, x, p, p)))
    assert dx.shape == (0, 3, 2, 2)
    np.testing.assert_array_equal(dgamma.numpy(), np.zeros(3))
    np.testing.assert_array_equal(dbeta.numpy(), np.zeros(3))


_ISA_SCRIPT = """
import sys
import numpy as np
import dragon_core as dg
rng = np.random.default_rng(9)
out = {}
for shape in [(8, 64, 16, 16), (8, 512, 2, 2), (3, 5, 7, 3), (2, 3, 1, 1)]:
    x = (3.0 + rng.standard_normal(shape)).astype(np.float32)
    c = rng.uniform(0.5, 1.5, shape[1]).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    t = [dg.tensor(a) for a in (x, c, c, c, c)]
    y, m, v = dg.ops.batch_norm(*t)
    z = dg.tensor(np.zeros(shape[1], np.float32))
    dx, dgm, dbt = dg.ops.batch_norm_grad(t[0], t[1], t[3], t[4], dg.tensor(dy), z, z)
    for k, a in zip("ymvxgb", (y, m, v, dx, dgm, dbt)):
        out[f"{k}{shape}"] = a.numpy()
np.savez(sys.argv[1], **out)
"""


def test_instruction_set_builds_agree(tmp_path):
    """The baseline, x86-64-v3 and best builds of the statistics sums
    (DRAGON_CPU_EIGEN_ISA caps the choice, read once per process) give the
    same results up to rounding (FMA contraction differs between builds)."""
    import os
    import subprocess
    import sys
    results = {}
    for isa in ("base", "v3", ""):
        env = dict(os.environ, DRAGON_CPU_EIGEN_ISA=isa)
        path = tmp_path / f"{isa or 'best'}.npz"
        subprocess.run([sys.executable, "-c", _ISA_SCRIPT, str(path)], env=env, check=True)
        results[isa] = dict(np.load(path))
    for isa in ("v3", ""):
        for k, a in results["base"].items():
            np.testing.assert_allclose(results[isa][k], a, rtol=1e-5, atol=1e-5, err_msg=k)
