"""cpu_eigen picks its instruction set at run time (issue 20).

The library is compiled for the plain x86-64 baseline; GEMM and the float
element-wise kernels are also compiled for x86-64-v2/v3/v4 and chosen for
the CPU at first use. ``DRAGON_CPU_EIGEN_ISA=base|v2|v3`` caps the choice,
which lets this test run every build this CPU can run, in a fresh
interpreter each, against float64 NumPy references, and check from the
debug log which GEMM build served.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np
import pytest

SCRIPT = r"""
import json, sys
import numpy as np
import dragon_core as dg

for op in ("matmul", "conv2d", "exp", "tanh", "floor", "sqrt", "add"):
    dg.plugins.pin(op, "cpu", "cpu_eigen")
rng = np.random.default_rng(0)
out = {}
for dtype in ("float32", "float64"):
    a = rng.standard_normal((67, 129)).astype(dtype)
    b = rng.standard_normal((129, 45)).astype(dtype)
    x = rng.standard_normal((2, 3, 9, 8)).astype(dtype)
    w = rng.standard_normal((4, 3, 3, 3)).astype(dtype)
    e = rng.uniform(-3, 3, 1003).astype(dtype)
    out[dtype] = {
        "matmul": (dg.tensor(a) @ dg.tensor(b)).numpy().tolist(),
        "conv2d": dg.ops.conv2d(dg.tensor(x), dg.tensor(w)).numpy().tolist(),
        "exp": dg.ops.exp(dg.tensor(e)).numpy().tolist(),
        "tanh": dg.ops.tanh(dg.tensor(e)).numpy().tolist(),
        "floor": dg.ops.floor(dg.tensor(e)).numpy().tolist(),
        "sqrt": dg.ops.sqrt(dg.tensor(np.abs(e))).numpy().tolist(),
        "add": (dg.tensor(e) + dg.tensor(e[::-1].copy())).numpy().tolist(),
    }
print(json.dumps(out))
"""


def _cpu_flags() -> set[str]:
    from tests.ops._common import cpu_flags
    return cpu_flags()


def _level() -> int:
    """The x86-64 level of this CPU (1 when it is not x86-64)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return 1
    f = _cpu_flags()
    v2 = {"ssse3", "sse4_1", "sse4_2", "popcnt"} <= f
    v3 = v2 and {"avx2", "fma", "bmi2"} <= f
    v4 = v3 and {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"} <= f
    return 4 if v4 else 3 if v3 else 2 if v2 else 1


def _references(dtype):
    rng = np.random.default_rng(0)
    refs = {}
    for dt in ("float32", "float64"):
        a = rng.standard_normal((67, 129)).astype(dt).astype(np.float64)
        b = rng.standard_normal((129, 45)).astype(dt).astype(np.float64)
        x = rng.standard_normal((2, 3, 9, 8)).astype(dt).astype(np.float64)
        w = rng.standard_normal((4, 3, 3, 3)).astype(dt).astype(np.float64)
        e = rng.uniform(-3, 3, 1003).astype(dt).astype(np.float64)
        conv = np.zeros((2, 4, 7, 6))
        for i in range(7):
            for j in range(6):
                conv[:, :, i, j] = np.einsum("nchw,ochw->no", x[:, :, i:i + 3, j:j + 3], w)
        refs[dt] = {"matmul": a @ b, "conv2d": conv, "exp": np.exp(e), "tanh": np.tanh(e),
                    "floor": np.floor(e), "sqrt": np.sqrt(np.abs(e)), "add": e + e[::-1]}
    return refs[dtype]


CAPS = [("base", 1), ("v2", 2), ("v3", 3), (None, 4)]


@pytest.mark.parametrize("cap,level", CAPS, ids=[c or "auto" for c, _ in CAPS])
def test_every_isa_build_matches_numpy(cap, level):
    cpu = _level()
    env = dict(os.environ, DRAGON_LOG_LEVEL="0")
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    if cap:
        env["DRAGON_CPU_EIGEN_ISA"] = cap
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    for dtype, tol in (("float32", 2e-5), ("float64", 1e-12)):
        ref = _references(dtype)
        for name, want in ref.items():
            have = np.asarray(got[dtype][name], dtype=np.float64)
            scale = max(1.0, float(np.abs(want).max()))
            # Products sum up to 129 terms; element-wise ops are one step.
            terms = 129 if name in ("matmul", "conv2d") else 1
            np.testing.assert_allclose(have, want, rtol=tol, atol=tol * scale * terms,
                                       err_msg=f"{name} {dtype} DRAGON_CPU_EIGEN_ISA={cap}")
    # The GEMM build that served: the baseline below v3, else the best one
    # the CPU has within the cap.
    used = min(level, cpu)
    gemm = [ln for ln in proc.stderr.splitlines() if "cpu_eigen MatMul uses" in ln]
    assert gemm, proc.stderr
    if used >= 3:
        assert f"x86-64-v{used}" in gemm[0], gemm[0]
    else:
        assert "baseline" in gemm[0], gemm[0]
