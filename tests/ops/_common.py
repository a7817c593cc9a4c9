"""Input generators and reference helpers shared by the op tests."""

from __future__ import annotations

import numpy as np

from dragon_sdk.testing import is_float, numpy_dtype

INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)

#: Shapes every element-wise op is tried on: 0-d, empty, odd sizes, 3-D and
#: one large enough (33667 elements) to take the kernels' parallel path.
ELEMENTWISE_SHAPES = [(), (0,), (3, 0), (7,), (2, 3, 4), (257, 131)]


def sample(rng: np.random.Generator, dtype: str, shape, low: float = -3.0,
           high: float = 3.0) -> np.ndarray:
    """Random values of ``dtype`` in [low, high] (bools: fair coin).

    Integers are drawn from [ceil(low), floor(high)], clamped to the dtype's
    range (so uint8 never gets negative values).
    """
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if is_float(dtype):
        return rng.uniform(low, high, shape).astype(numpy_dtype(dtype))
    info = np.iinfo(numpy_dtype(dtype))
    lo = max(int(np.ceil(low)), int(info.min))
    hi = min(int(np.floor(high)), int(info.max))
    return rng.integers(lo, hi, shape, endpoint=True).astype(dtype)


def small_ints(rng: np.random.Generator, dtype: str, shape, low: int = -2,
               high: int = 2) -> np.ndarray:
    """Few distinct values (ties, zeros) in any dtype, floats included."""
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if not is_float(dtype) and np.iinfo(numpy_dtype(dtype)).min == 0:
        low, high = 0, high - low
    return rng.integers(low, high, shape, endpoint=True).astype(
        numpy_dtype(dtype))


def nonzero(rng: np.random.Generator, dtype: str, shape, low: float = 0.25,
            high: float = 3.0) -> np.ndarray:
    """Values with |x| in [low, high] and a random sign."""
    mag = rng.uniform(low, high, shape)
    sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (mag * sign).astype(numpy_dtype(dtype))


def norm_axes(axes, ndim: int):
    """Schema axes (None = all, [] = none, negatives) as a NumPy axis tuple."""
    if axes is None:
        return tuple(range(ndim))
    return tuple(a % ndim if ndim else a for a in axes)


def cpu_has_avx512_bf16() -> bool:
    """Whether this CPU reports AVX512_BF16 (/proc/cpuinfo; False elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            return "avx512_bf16" in f.read()
    except OSError:
        return False


def cpu_flags() -> set:
    """The CPU's feature flags from /proc/cpuinfo (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def onednn_runs_amx() -> bool:
    """Whether cpu_eigen ranks its AVX512-BF16 GEMM below oneDNN's AMX
    kernels in a child process with this environment under the default
    DRAGON_CPU_EIGEN_BF16_GEMM (plugins/cpu_eigen/src/matmul_bf16.cc,
    AmxServesBf16): DRAGON_CPU_EIGEN_AMX=on/off, else AMX-BF16 and AMX-TILE
    in /proc/cpuinfo and no ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA) cap
    below AMX."""
    import os
    switch = os.environ.get("DRAGON_CPU_EIGEN_AMX", "auto")
    if switch in ("on", "off"):
        return switch == "on"
    for name in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        cap = os.environ.get(name, "").upper()
        if cap:
            if cap not in ("ALL", "DEFAULT") and "AMX" not in cap:
                return False
            break
    return {"amx_bf16", "amx_tile"} <= cpu_flags()


def bf16_gemm_marker():
    """A skipif marker for tests of cpu_eigen's AVX512-BF16 GEMM
    (``MatMulBf16Avx512``): the kernel must be registered and the CPU have
    AVX512_BF16."""
    import pytest

    from dragon_core import plugins
    kernels = {k["name"] for k in plugins.kernels("MatMul") if k["device"] == "cpu"}
    return pytest.mark.skipif(
        not ("MatMulBf16Avx512" in kernels and cpu_has_avx512_bf16()),
        reason="no AVX512_BF16 on this CPU")


def script_hash(script: str, env: dict, timeout: int = 300) -> str:
    """What ``script`` (which prints a hash of its results) prints in a child
    process with ``env`` added to the environment."""
    import os
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", script], env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.strip()


def hashes_per_thread_count(script: str, timeout: int, env: dict | None = None) -> dict:
    """script_hash with 1, 2 and 3 threads (and ``env``): the hash per thread
    count (the callers assert they are all equal)."""
    return {t: script_hash(script, dict(env or {}, OMP_NUM_THREADS=str(t),
                                        DRAGON_NUM_THREADS=str(t)), timeout)
            for t in (1, 2, 3)}


def bf16_gemm_hashes_per_thread_count(script: str, timeout: int) -> dict:
    """hashes_per_thread_count with cpu_eigen's bf16 GEMM taking every call
    it can."""
    return hashes_per_thread_count(script, timeout, {"DRAGON_CPU_EIGEN_BF16_GEMM": "all"})
