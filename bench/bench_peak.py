"""The machine's float32 FMA peak (GFLOP/s), the yardstick of the GEMM rows.

``bench/native/fma_peak.cc`` runs 12 independent register-only FMA chains
per thread (no memory traffic), AVX-512 and AVX2, on 1 and 2 threads. It is
built here with the system C++ compiler (``$CXX`` or ``g++``) into a
temporary shared object and called through ctypes. The best of many short
runs is reported: on a shared machine a run only measures the peak when no
other process takes its core, so the maximum is the estimate (still a lower
bound of the hardware's peak). ``peak_gflops()`` is what bench_gemm.py
divides by.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import time
from pathlib import Path

from _harness import native_library, result

BENCH = "fma_peak_f32"
SOURCE = Path(__file__).resolve().parent / "native" / "fma_peak.cc"
_LIB = None
_CACHE: dict = {}


def _lib():
    """The compiled microbenchmark (built once per process); None without
    a compiler or an x86-64 CPU."""
    global _LIB
    if _LIB is not None:
        return _LIB
    if os.uname().machine != "x86_64":
        return None
    lib = native_library(SOURCE, ["-O2", "-mavx512f", "-mfma", "-fopenmp"])
    if lib is None:
        return None
    lib.fma_peak.restype = ctypes.c_double
    lib.fma_peak.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    _LIB = lib
    return lib


def _has_avx512() -> bool:
    try:
        return " avx512f " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def measure(width: int, threads: int, rounds: int = 40, iters: int = 2_000_000) -> float:
    """Best FLOP/s of ``rounds`` short runs (each ``iters`` x 12 FMAs per thread)."""
    lib = _lib()
    best = 0.0
    for _ in range(rounds):
        best = max(best, lib.fma_peak(width, threads, iters))
        time.sleep(0.002)   # let the scheduler give the cores back
    return best / 1e9


def peak_gflops(threads: int = 2) -> float | None:
    """The measured float32 FMA peak on ``threads`` threads (cached), using
    the widest vectors the CPU has; None when it cannot be measured."""
    if threads not in _CACHE:
        if _lib() is None:
            return None
        width = 512 if _has_avx512() else 256
        _CACHE[threads] = measure(width, threads)
    return _CACHE[threads]


def run(quick: bool = False) -> list[dict]:
    """Rows: the FMA peak for AVX-512 / AVX2 on 1 and 2 threads."""
    rows = []
    try:
        lib = _lib()
    except (OSError, subprocess.CalledProcessError) as exc:
        return [result(BENCH, "fma_peak", "native", "GFLOP/s", None, "higher",
                       status="SKIP", note=f"cannot build the microbenchmark: {exc}")]
    if lib is None:
        return [result(BENCH, "fma_peak", "native", "GFLOP/s", None, "higher",
                       status="SKIP", note="needs an x86-64 CPU and a C++ compiler")]
    widths = (512, 256) if _has_avx512() else (256,)
    for width in widths:
        for threads in (1, 2):
            g = measure(width, threads, rounds=10 if quick else 40)
            if width == (512 if _has_avx512() else 256):
                _CACHE[threads] = max(_CACHE.get(threads, 0.0), g)
            rows.append(result(BENCH, f"fma{width} x{threads} threads", "native", "GFLOP/s",
                               g, "higher", note="best of short runs (register-only FMAs)"))
    return rows
