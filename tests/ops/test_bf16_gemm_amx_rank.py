"""Where oneDNN runs bfloat16 products on AMX tiles, cpu_eigen's AVX512-BF16
GEMM ranks below it (issue 21; docs/benchmarks.md, "Session 24").

On a CPU with AMX-BF16 (Sapphire Rapids and later) oneDNN's tile kernels
ran a 2048^3 bfloat16 product ~10x faster than the vdpbf16ps kernel, which
measured faster than oneDNN only on CPUs without AMX. So the kernel's
registration depends on ``AmxServesBf16`` (CPUID, XCR0, the kernel's
ARCH_GET_XCOMP_SUPP, ``ONEDNN_MAX_CPU_ISA``), which
``DRAGON_CPU_EIGEN_AMX=on|off`` overrides: with AMX, ``MatMulBf16Avx512``
and ``MatMulBiasActBf16Avx512`` register at priority 5 (below oneDNN's 10),
so do their ``MatMulBiasAdd`` kernel (mkldnn's oneDNN one, at 10, takes the
op) and the bfloat16 ``SoftmaxAttention`` kernels are not registered (the
attention pass leaves those products unfused, for oneDNN). ``DRAGON_CPU_EIGEN_BF16_GEMM=all`` puts the
kernel first again. Every case runs in a child process: the switches are
read once, at load.
"""
import json
import os
import subprocess
import sys

import pytest

from ._common import bf16_gemm_marker, cpu_flags, onednn_runs_amx

pytestmark = bf16_gemm_marker()

_PROBE = r"""
import json, numpy as np, dragon_core as dg
from dragon_core import plugins

def cpu(op):
    return {k["name"]: k for k in plugins.kernels(op) if k["device"] == "cpu"}

mm = cpu("MatMul")
out = {
    "matmul_priority": mm["MatMulBf16Avx512"]["priority"],
    "bias_act_priority": cpu("MatMulBiasAct")["MatMulBiasActBf16Avx512"]["priority"],
    "bias_add_priority": cpu("MatMulBiasAdd")["MatMulBiasAddBf16Avx512"]["priority"],
    "bias_add_winner": [l for l in plugins.explain("MatMulBiasAdd", "cpu", "bfloat16").splitlines()
                        if l.strip().startswith("winner:")][0].split()[1],
    "attention_bf16": any("bfloat16" in k["dtypes"]
                          for k in cpu("SoftmaxAttention").values()),
    "winner": [l for l in plugins.explain("MatMul", "cpu", "bfloat16").splitlines()
               if l.strip().startswith("winner:")][0].split()[1],
    "onednn": "MatMulOneDNN" in mm,
}
# A product of the class the kernel takes by default without AMX (a
# 1024-row Linear layer) gives the bits of whichever kernel won, within
# bfloat16's bound of the float64 product either way.
rng = np.random.default_rng(3)
a = dg.tensor(rng.standard_normal((1024, 256)).astype(np.float32)).astype("bfloat16")
b = dg.tensor(rng.standard_normal((256, 256)).astype(np.float32)).astype("bfloat16")
y = dg.ops.matmul(a, b, out_dtype="float32").numpy()
ref = a.astype("float64").numpy() @ b.astype("float64").numpy()
bound = 256 * 2.0 ** -23 * (np.abs(a.astype("float64").numpy()) @ np.abs(b.astype("float64").numpy()))
out["within_bound"] = bool(np.all(np.abs(y - ref) <= bound + 1e-30))
print("PROBE " + json.dumps(out))
"""


def _probe(**env_vars):
    env = dict(os.environ)
    for k in ("DRAGON_CPU_EIGEN_AMX", "DRAGON_CPU_EIGEN_BF16_GEMM",
              "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        env.pop(k, None)
    env.update(env_vars)
    out = subprocess.run([sys.executable, "-c", _PROBE], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [l for l in out.stdout.splitlines() if l.startswith("PROBE ")][0]
    return json.loads(line[len("PROBE "):]), out.stderr


def test_with_amx_the_kernel_ranks_below_onednn_and_its_fused_ops_go():
    got, _ = _probe(DRAGON_CPU_EIGEN_AMX="on")
    assert got["matmul_priority"] == 5 and got["bias_act_priority"] == 5, got
    assert got["bias_add_priority"] == 5 and not got["attention_bf16"], got
    assert got["winner"] == ("MatMulOneDNN" if got["onednn"] else "MatMulBf16Avx512"), got
    assert got["bias_add_winner"] == ("MatMulBiasAddOneDNN" if got["onednn"]
                                      else "MatMulBiasAddBf16Avx512"), got
    assert got["within_bound"], got


def test_without_amx_the_kernel_ranks_first_with_its_fused_ops():
    got, _ = _probe(DRAGON_CPU_EIGEN_AMX="off")
    assert got["matmul_priority"] == 20 and got["bias_act_priority"] == 20, got
    assert got["bias_add_priority"] == 20 and got["attention_bf16"], got
    assert got["winner"] == "MatMulBf16Avx512", got
    assert got["bias_add_winner"] == "MatMulBiasAddBf16Avx512", got
    assert got["within_bound"], got


def test_bf16_gemm_all_puts_the_kernel_first_even_with_amx():
    got, _ = _probe(DRAGON_CPU_EIGEN_AMX="on", DRAGON_CPU_EIGEN_BF16_GEMM="all")
    assert got["matmul_priority"] == 20 and got["bias_add_priority"] == 20, got
    assert got["attention_bf16"], got
    assert got["winner"] == "MatMulBf16Avx512", got


def test_detection_follows_the_cpu_and_onednn_isa_cap():
    """auto: AMX where /proc/cpuinfo lists amx_bf16 and amx_tile (Linux
    grants tile data to a process on request), unless ONEDNN_MAX_CPU_ISA
    caps oneDNN below AMX."""
    amx = {"amx_bf16", "amx_tile"} <= cpu_flags()
    assert onednn_runs_amx() == amx or os.environ.get("DRAGON_CPU_EIGEN_AMX") \
        or os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA")
    got, _ = _probe()
    assert got["matmul_priority"] == (5 if amx else 20), (amx, got)
    assert got["bias_add_priority"] == (5 if amx else 20), (amx, got)
    assert got["attention_bf16"] == (not amx), (amx, got)
    capped, _ = _probe(ONEDNN_MAX_CPU_ISA="avx512_core_bf16")
    assert capped["matmul_priority"] == 20 and capped["attention_bf16"], capped
    old_name, _ = _probe(DNNL_MAX_CPU_ISA="AVX2")
    assert old_name["matmul_priority"] == 20, old_name
    uncapped, _ = _probe(ONEDNN_MAX_CPU_ISA="ALL")
    assert uncapped["matmul_priority"] == got["matmul_priority"], uncapped


def test_a_bad_switch_value_warns_and_means_auto():
    got, err = _probe(DRAGON_CPU_EIGEN_AMX="yes")
    assert "DRAGON_CPU_EIGEN_AMX=yes is not auto, on or off" in err, err
    auto, _ = _probe()
    assert got["matmul_priority"] == auto["matmul_priority"], (got, auto)


@pytest.mark.skipif(not {"amx_bf16", "amx_tile"} <= cpu_flags(), reason="no AMX on this CPU")
def test_on_an_amx_cpu_a_bf16_linear_layer_runs_on_onednn():
    """Through ONEDNN_VERBOSE: the default route of a 1024-row bfloat16
    Linear layer is oneDNN's matmul (on tiles: its implementation name
    says amx)."""
    from dragon_core import plugins
    if not any(k["name"] == "MatMulOneDNN" for k in plugins.kernels("MatMul")):
        pytest.skip("mkldnn is not installed")
    script = _PROBE.replace('print("PROBE " + json.dumps(out))', "")
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    for k in ("DRAGON_CPU_EIGEN_AMX", "DRAGON_CPU_EIGEN_BF16_GEMM", "ONEDNN_MAX_CPU_ISA"):
        env.pop(k, None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    execs = [l for l in out.stdout.splitlines()
             if l.startswith("onednn_verbose,") and ",exec," in l and ",matmul," in l]
    assert execs and all("amx" in l for l in execs), out.stdout[-3000:]
