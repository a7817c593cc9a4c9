"""The machine's float32 FMA peak and AMX bfloat16 peak (GFLOP/s), the
yardsticks of the GEMM rows.

``bench/native/fma_peak.cc`` runs 12 independent register-only FMA chains
per thread (no memory traffic), AVX-512 and AVX2, on 1 and 2 threads. It is
built here with the system C++ compiler (``$CXX`` or ``g++``) into a
temporary shared object and called through ctypes. The best of many short
runs is reported: on a shared machine a run only measures the peak when no
other process takes its core, so the maximum is the estimate (still a lower
bound of the hardware's peak). ``peak_gflops()`` is what bench_gemm.py
divides its float32 rows by.

On a CPU with AMX (``amx_bf16`` and ``amx_tile`` in /proc/cpuinfo),
``bench/native/amx_peak.cc`` likewise runs TDPBF16PS on four accumulator
tiles (two A, two B tiles; registers only) on 1 and 2 threads.
``amx_peak_gflops()`` is the best of either thread count: on the
project's Emerald Rapids VM the tile rate per thread varies by more than
2x between runs, and two threads have measured anywhere from less than
one thread's rate to twice it (Session 25 in docs/benchmarks.md), so the
best of both is the ceiling a bfloat16 GEMM can be measured against.
bench_gemm.py divides its bfloat16 rows by it.
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
AMX_SOURCE = Path(__file__).resolve().parent / "native" / "amx_peak.cc"
_LIB = None
_AMX_LIB = None
_CACHE: dict = {}
_AMX_CACHE: dict = {}


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


def _cpu_flags() -> set:
    """The flags of /proc/cpuinfo's first processor (empty off Linux)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _has_avx512() -> bool:
    return "avx512f" in _cpu_flags()


def _has_amx() -> bool:
    return {"amx_bf16", "amx_tile"} <= _cpu_flags()


def _amx_lib():
    """The compiled AMX microbenchmark (built once per process); None
    without AMX or a compiler."""
    global _AMX_LIB
    if _AMX_LIB is None and os.uname().machine == "x86_64" and _has_amx():
        lib = native_library(AMX_SOURCE, ["-O2", "-mamx-tile", "-mamx-bf16", "-fopenmp"])
        if lib is not None:
            lib.amx_peak.restype = ctypes.c_double
            lib.amx_peak.argtypes = [ctypes.c_int, ctypes.c_int64]
        _AMX_LIB = lib
    return _AMX_LIB


def measure_amx(threads: int, rounds: int = 40, iters: int = 20_000) -> float | None:
    """Best bfloat16 FLOP/s (GFLOP/s) of ``rounds`` short AMX runs (each
    ``iters`` x 4 TDPBF16PS per thread, ~0.5 ms); None where Linux refuses
    the tile state."""
    lib = _amx_lib()
    best = 0.0
    for _ in range(rounds):
        got = lib.amx_peak(threads, iters)
        if got < 0:
            return None
        best = max(best, got)
        time.sleep(0.002)
    return best / 1e9


def amx_peak_gflops() -> float | None:
    """The measured AMX bfloat16 peak (cached): the better of 1 and 2
    threads; None without AMX, a compiler, or the OS's tile state."""
    if "best" not in _AMX_CACHE:
        try:
            if _amx_lib() is None:
                return None
        except (OSError, subprocess.CalledProcessError):
            return None
        got = [measure_amx(t) for t in (1, 2)]
        _AMX_CACHE["best"] = None if None in got else max(got)
    return _AMX_CACHE["best"]


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
    """Rows: the FMA peak for AVX-512 / AVX2 on 1 and 2 threads, and the
    AMX bfloat16 peak on 1 and 2 threads where the CPU has AMX."""
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
    rows += _amx_rows(quick)
    return rows


def _amx_rows(quick: bool) -> list[dict]:
    """Rows: the AMX bfloat16 peak on 1 and 2 threads (none without AMX)."""
    if not _has_amx() or os.uname().machine != "x86_64":
        return []

    def skip(note: str) -> list[dict]:
        return [result("amx_peak_bf16", "amx", "native", "GFLOP/s", None, "higher",
                       status="SKIP", note=note)]

    try:
        lib = _amx_lib()
    except (OSError, subprocess.CalledProcessError) as exc:
        return skip(f"cannot build the microbenchmark: {exc}")
    if lib is None:
        return skip("needs a C++ compiler")
    rows, got = [], []
    for threads in (1, 2):
        g = measure_amx(threads, rounds=10 if quick else 40)
        if g is None:
            return skip("Linux refused the AMX tile state")
        got.append(g)
        rows.append(result("amx_peak_bf16", f"amx x{threads} threads", "native", "GFLOP/s", g,
                           "higher", note="best of short runs (register-only TDPBF16PS)"))
    _AMX_CACHE["best"] = max(_AMX_CACHE.get("best") or 0.0, *got)
    return rows
