"""Gradients through the collectives (dragon_core.distributed.nn), 2 ranks
under the launcher, eagerly and in dg.function, float32/float64, against
NumPy float64 central differences of the global loss (_grad_cases.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from . import _grad_cases as C
from .test_collectives import run_job

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = {"float32": 2e-5, "float64": 1e-9}


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    out = tmp_path_factory.mktemp("grads")
    p = run_job(os.path.join(HERE, "_grad_worker.py"), str(out), dist_timeout=60)
    assert p.returncode == 0, f"the 2-rank job failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    res = {}
    for r in range(C.WORLD):
        with np.load(out / f"rank{r}.npz") as z:
            res[r] = {k: z[k] for k in z.files}
    return res, p.stdout


@pytest.mark.parametrize("case", C.cases(), ids=[c[0] for c in C.cases()])
def test_gradient_matches_finite_differences(job, case):
    res, _ = job
    name, key, dtype, _mode = case
    for rank in range(C.WORLD):
        got = res[rank][name]
        want = C.reference_grad(key, rank)
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape, (got.dtype, got.shape)
        np.testing.assert_allclose(got, want, rtol=TOL[dtype], atol=TOL[dtype],
                                   err_msg=f"rank {rank}")


def test_non_linear_reductions_are_not_differentiable(job):
    _, out = job
    lines = [ln for ln in out.splitlines() if ln.startswith("RAISED")]
    assert len(lines) == 2, out
    assert all("gradient of reduce_op 'max' is not defined" in ln for ln in lines), lines
