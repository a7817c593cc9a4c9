"""cpu_eigen's GEMM in every instruction-set build, on the shapes that
exercise its edges (issue 21, point 1).

Each ISA build (``DRAGON_CPU_EIGEN_ISA=base|v3`` and the CPU's best) runs in
a fresh interpreter with MatMul pinned to cpu_eigen: odd sizes around the
register blocks (1, 7, 15, 17, 33, 49, 65, 127, 129), k = 0 and 1,
products big enough to be split across the 2 threads (by rows and by
columns), every transpose_a / transpose_b combination, transposed and
strided views read in place, batched and broadcast batches, float32 and
float64, all against float64 NumPy with a bound of k * eps * sum|a_i b_i|.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from test_cpu_eigen_isa import _level

CASES = [
    # (batch shape a, batch shape b, n, k, m, transpose_a, transpose_b)
    ((), (), 1, 1, 1, False, False),
    ((), (), 7, 1, 15, False, False),
    ((), (), 17, 33, 49, False, False),
    ((), (), 65, 127, 129, True, False),
    ((), (), 129, 65, 17, False, True),
    ((), (), 33, 49, 7, True, True),
    ((), (), 5, 0, 3, False, False),
    ((), (), 300, 257, 200, False, False),    # split by rows on 2 threads
    ((), (), 48, 300, 400, False, True),      # split by columns
    ((3,), (3,), 15, 17, 33, False, False),   # batched
    ((2, 1), (3,), 9, 16, 7, True, False),    # broadcast batch
    ((4,), (), 70, 90, 60, False, True),      # shared b
]

SCRIPT = r"""
import json, sys
import numpy as np
import dragon_core as dg

dg.plugins.pin("matmul", "cpu", "cpu_eigen")
cases = json.loads(sys.argv[1])
out = []
for dtype in ("float32", "float64"):
    for i, (ba, bb, n, k, m, ta, tb) in enumerate(cases):
        rng = np.random.default_rng(i)
        sa = tuple(ba) + ((k, n) if ta else (n, k))
        sb = tuple(bb) + ((m, k) if tb else (k, m))
        a = rng.standard_normal(sa).astype(dtype)
        b = rng.standard_normal(sb).astype(dtype)
        y = dg.ops.matmul(dg.tensor(a), dg.tensor(b), transpose_a=ta, transpose_b=tb)
        out.append(y.numpy().tolist())
    # views read in place: a transposed view and a column-strided view
    rng = np.random.default_rng(99)
    a = dg.tensor(rng.standard_normal((37, 29)).astype(dtype))
    b = dg.tensor(rng.standard_normal((37, 46)).astype(dtype))
    out.append((dg.ops.transpose(a, (1, 0)) @ b).numpy().tolist())
    out.append((dg.ops.transpose(a, (1, 0)) @ b[:, ::2]).numpy().tolist())
print(json.dumps(out))
"""


def _references():
    refs = []
    for dtype in ("float32", "float64"):
        for i, (ba, bb, n, k, m, ta, tb) in enumerate(CASES):
            rng = np.random.default_rng(i)
            sa = tuple(ba) + ((k, n) if ta else (n, k))
            sb = tuple(bb) + ((m, k) if tb else (k, m))
            a = rng.standard_normal(sa).astype(dtype).astype(np.float64)
            b = rng.standard_normal(sb).astype(dtype).astype(np.float64)
            a = np.swapaxes(a, -1, -2) if ta else a
            b = np.swapaxes(b, -1, -2) if tb else b
            refs.append((dtype, a, b))
        rng = np.random.default_rng(99)
        a = rng.standard_normal((37, 29)).astype(dtype).astype(np.float64)
        b = rng.standard_normal((37, 46)).astype(dtype).astype(np.float64)
        refs.append((dtype, a.T, b))
        refs.append((dtype, a.T, b[:, ::2]))
    return refs


CAPS = [("base", 1), ("v3", 3), (None, 4)]


@pytest.mark.parametrize("cap,level", CAPS, ids=[c or "auto" for c, _ in CAPS])
def test_gemm_edges_every_isa(cap, level):
    if level > 1 and _level() < level and cap is not None:
        pytest.skip(f"this CPU has no x86-64-v{level}")
    env = dict(os.environ)
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    if cap:
        env["DRAGON_CPU_EIGEN_ISA"] = cap
    env["OMP_NUM_THREADS"] = "2"
    proc = subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(CASES)], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    refs = _references()
    assert len(got) == len(refs)
    for idx, (have, (dtype, a, b)) in enumerate(zip(got, refs)):
        want = a @ b
        have = np.asarray(have, dtype=np.float64).reshape(want.shape)
        eps = np.finfo(dtype).eps
        k = a.shape[-1]
        bound = (np.abs(a) @ np.abs(b)) * (k + 2) * eps + 1e-300
        assert np.all(np.abs(have - want) <= bound), (
            f"case {idx} ({dtype}, DRAGON_CPU_EIGEN_ISA={cap}): max error "
            f"{np.abs(have - want).max():.3g}")
