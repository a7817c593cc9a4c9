"""Which of oneDNN's float32 implementations runs a MatMul (matmul.cc).

oneDNN offers its brgemm kernel first for float32 products on AVX-512 and
its JIT GEMM ("gemm:jit") after it; the plugin takes the JIT GEMM for a
single product with every axis >= 512 and >= 2^30 multiply-adds, where it
measured faster (plugins/mkldnn/docs/matmul.md, "Performance"), and
oneDNN's first choice elsewhere. ``DRAGON_MKLDNN_JIT_GEMM=on|off`` forces
it either way. Each setting runs in a child process (the variable is read
once) with ``ONEDNN_VERBOSE=1``, which names the implementation of every
primitive it executes; the child also checks every result against float64.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    os.uname().machine != "x86_64", reason="oneDNN's JIT GEMM is x86-64 only")

# name: (m, k, n, transpose_a, transpose_b, bias, batch)
CASES = {
    "2048^3": (2048, 2048, 2048, False, False, False, 1),
    "1536^3 (brgemm tail blocks)": (1536, 1536, 1536, False, False, False, 1),
    "2048x512x2048, a transposed": (2048, 512, 2048, True, False, False, 1),
    "linear 2048x1024 -> 1024, bias": (2048, 1024, 1024, False, True, True, 1),
    "1024^3": (1024, 1024, 1024, False, False, False, 1),
    "1024x512x1024 (below 2^30)": (1024, 512, 1024, False, False, False, 1),
    "4096x256x4096 (an axis < 512)": (4096, 256, 4096, False, False, False, 1),
    "batch 2 of 1024x2048x1024": (1024, 2048, 1024, False, False, False, 2),
}
LARGE = {"2048^3", "1536^3 (brgemm tail blocks)", "2048x512x2048, a transposed",
         "linear 2048x1024 -> 1024, bias", "1024^3"}

CHILD = """
import ctypes, json, sys
import numpy as np, dragon_core as dg
libc = ctypes.CDLL(None)
dg.plugins.pin("MatMul", "cpu", "mkldnn")
dg.plugins.pin("MatMulBiasAct", "cpu", "mkldnn")
rng = np.random.default_rng(0)
eps = np.finfo(np.float32).eps
for name, (m, k, n, ta, tb, bias, batch) in json.loads(sys.argv[1]).items():
    lead = (batch,) if batch > 1 else ()
    a = rng.standard_normal(lead + ((k, m) if ta else (m, k))).astype(np.float32)
    b = rng.standard_normal(lead + ((n, k) if tb else (k, n))).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    a64 = np.swapaxes(a, -1, -2).astype(np.float64) if ta else a.astype(np.float64)
    b64 = np.swapaxes(b, -1, -2).astype(np.float64) if tb else b.astype(np.float64)
    want = a64 @ b64 + (c if bias else 0.0)
    bound = np.abs(a64) @ np.abs(b64) + (np.abs(c) if bias else 0.0)
    libc.printf(("CASE " + name + "\\n").encode()); libc.fflush(None)
    if bias:
        y = dg.nn.functional.linear(dg.tensor(a), dg.tensor(b), dg.tensor(c))
    else:
        y = dg.ops.matmul(dg.tensor(a), dg.tensor(b), transpose_a=ta, transpose_b=tb)
    got = y.numpy()
    libc.printf(b"DONE\\n"); libc.fflush(None)
    err = np.abs(got - want) / (4 * np.sqrt(k) * eps * bound + 1e-30)
    assert got.shape == want.shape and err.max() <= 1.0, (name, float(err.max()))
"""


def _implementations(mode: str | None, names) -> dict:
    """{case: the oneDNN matmul implementations it executed} in a child
    run with DRAGON_MKLDNN_JIT_GEMM=mode (unset when None)."""
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    env.pop("DRAGON_MKLDNN_JIT_GEMM", None)
    if mode is not None:
        env["DRAGON_MKLDNN_JIT_GEMM"] = mode
    cases = {name: CASES[name] for name in names}
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(CHILD), json.dumps(cases)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    impls, current = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
            impls[current] = []
        elif line.startswith("DONE"):
            current = None
        elif current and line.startswith("onednn_verbose") and ",exec," in line:
            fields = line.split(",")
            if fields[3] == "matmul":
                impls[current].append(fields[4])
    assert set(impls) == set(names), out.stdout[-3000:]
    assert all(impls.values()), ("a case ran no oneDNN matmul", impls)
    return impls


@pytest.fixture(scope="module")
def auto():
    return _implementations(None, list(CASES))


@pytest.fixture(scope="module")
def off():
    return _implementations("off", list(CASES))


def test_large_float32_products_run_the_jit_gemm(auto):
    for name in LARGE:
        assert all(i.startswith("gemm:jit") for i in auto[name]), (name, auto[name])


def test_other_products_keep_onednns_first_choice(auto, off):
    for name in set(CASES) - LARGE:
        assert auto[name] == off[name], (name, auto[name], off[name])


def test_off_never_runs_the_jit_gemm_where_onednn_ranks_another_first(off):
    # oneDNN's own first choice on this CPU: on AVX-512 that is brgemm; a
    # CPU where it is the JIT GEMM anyway has nothing to switch off.
    first = off["1024x512x1024 (below 2^30)"][0]
    for name in LARGE:
        assert off[name] == [first] or first.startswith("gemm:jit"), (name, off[name])


def test_on_takes_the_jit_gemm_for_any_float32_product():
    got = _implementations("on", ["1024x512x1024 (below 2^30)", "4096x256x4096 (an axis < 512)"])
    for name, impls in got.items():
        assert all(i.startswith("gemm:jit") for i in impls), (name, impls)


def test_a_bad_setting_warns_and_keeps_auto():
    code = ("import numpy as np, dragon_core as dg\n"
            "a = dg.tensor(np.ones((8, 8), np.float32))\n"
            "print(float(dg.ops.matmul(a, a).numpy()[0, 0]))\n")
    env = dict(os.environ, DRAGON_MKLDNN_JIT_GEMM="fast")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "8.0"
    assert "DRAGON_MKLDNN_JIT_GEMM=fast is not one of auto, on, off" in out.stderr


def test_bfloat16_products_are_not_affected():
    # The rule is float32 only: a large bfloat16 product keeps oneDNN's
    # first choice (its AMX or AVX512-BF16 kernel).
    code = ("import ctypes, numpy as np, dragon_core as dg\n"
            "dg.plugins.pin('MatMul', 'cpu', 'mkldnn')\n"
            "a = dg.tensor(np.ones((2048, 2048), np.float32)).astype(dg.bfloat16)\n"
            "ctypes.CDLL(None).printf(b'CASE bf16\\n'); ctypes.CDLL(None).fflush(None)\n"
            "y = dg.ops.matmul(a, a); y.numpy()\n")
    outs = []
    for mode in ("auto", "off"):
        env = dict(os.environ, ONEDNN_VERBOSE="1", DRAGON_MKLDNN_JIT_GEMM=mode)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env=env, timeout=300)
        assert out.returncode == 0, out.stderr[-3000:]
        after = out.stdout.split("CASE bf16", 1)[1]
        outs.append([ln.split(",")[4] for ln in after.splitlines()
                     if ln.startswith("onednn_verbose") and ",exec," in ln
                     and ln.split(",")[3] == "matmul"])
    assert outs[0] and outs[0] == outs[1], outs
    assert not any(i.startswith("gemm:jit") for i in outs[0]), outs
