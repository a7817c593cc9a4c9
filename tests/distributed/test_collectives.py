"""Every collective x dtype x group, eagerly (sync and async) and inside
dg.function, on 2 ranks under ``python -m dragon_core.distributed.run``,
against NumPy float64 references (tests/distributed/_cases.py)."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from . import _cases

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = _cases.cases()
TOL = {"float32": 1e-6, "float64": 1e-12, "float16": 1e-3, "bfloat16": 8e-3}


def run_job(script, *args, n=2, timeout_s=240, dist_timeout=None, env=None):
    cmd = [sys.executable, "-m", "dragon_core.distributed.run", "-n", str(n)]
    if dist_timeout is not None:
        cmd += ["--timeout", str(dist_timeout)]
    cmd += [script, *args]
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=e)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("collectives")
    p = run_job(os.path.join(HERE, "_worker.py"), str(out), dist_timeout=60)
    assert p.returncode == 0, f"the 2-rank job failed:\n{p.stdout[-4000:]}\n{p.stderr[-4000:]}"
    res = {}
    for r in range(_cases.WORLD):
        with np.load(out / f"rank{r}.npz") as z:
            res[r] = {k: z[k] for k in z.files}
    return res


def test_case_count():
    kinds = {c[1] for c in CASES}
    assert kinds >= {"all_reduce", "all_reduce_async", "broadcast", "all_gather",
                     "all_gather_tensor", "reduce_scatter", "reduce_scatter_list",
                     "all_to_all", "all_to_all_single", "send_recv", "graph_all_reduce",
                     "graph_broadcast", "graph_all_gather", "graph_reduce_scatter",
                     "graph_all_to_all"}
    assert {c[2] for c in CASES} == set(_cases.DTYPES)
    assert {c[4] for c in CASES} == set(_cases.GROUPS)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_collective_matches_numpy(results, case):
    name, kind, dtype, shape, group, extra = case
    for rank in _cases.GROUPS[group]:
        got = results[rank][name]
        want = _cases.expected(name, kind, dtype, shape, group, extra, rank)
        if dtype == "bfloat16":
            got = got.view(_cases.np_dtype("bfloat16"))
        assert got.shape == want.shape, (rank, got.shape, want.shape)
        assert got.dtype == want.dtype, (rank, got.dtype, want.dtype)
        if dtype in TOL:
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                       rtol=TOL[dtype], atol=TOL[dtype], err_msg=f"rank {rank}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"rank {rank}")
    # a rank outside the group produced nothing for it
    for rank in set(range(_cases.WORLD)) - set(_cases.GROUPS[group]):
        assert name not in results[rank]
