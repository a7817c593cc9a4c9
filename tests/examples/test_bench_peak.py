"""``bench/bench_peak.py``: the FMA and AMX peak microbenchmarks that the
GEMM rows of ``make bench`` are measured against (issue 21).

The microbenchmarks are built at run time with the system compiler, as
``make bench`` builds them; the checks are that each produces a plausible
rate (positive, below what the instruction could do at 6 GHz), that the
AMX rows appear exactly on CPUs with AMX, and that the GEMM rows name the
right yardstick.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import bench_gemm  # noqa: E402
import bench_peak  # noqa: E402

X86 = os.uname().machine == "x86_64"
HAS_CXX = bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++"))
GHZ_BOUND = 6.0  # no CPU of this decade sustains more


def _rows():
    rows = bench_peak.run(quick=True)
    assert rows, "bench_peak.run() produced no rows"
    return rows


@pytest.mark.skipif(not (X86 and HAS_CXX), reason="needs an x86-64 CPU and a C++ compiler")
def test_fma_rows_are_plausible():
    rows = [r for r in _rows() if r["bench"] == bench_peak.BENCH]
    widths = {512, 256} if bench_peak._has_avx512() else {256}
    assert {(w, t) for w in widths for t in (1, 2)} == {
        (int(r["impl"].split()[0][3:]), int(r["impl"].split()[1][1:])) for r in rows}
    for r in rows:
        width, threads = int(r["impl"].split()[0][3:]), int(r["impl"].split()[1][1:])
        # Two FMA ports, width/32 lanes, 2 flops per lane, per thread.
        bound = 2 * (width // 32) * 2 * GHZ_BOUND * threads
        assert 0 < r["value"] < bound, r


@pytest.mark.skipif(not (X86 and HAS_CXX), reason="needs an x86-64 CPU and a C++ compiler")
def test_amx_rows_exactly_where_the_cpu_has_amx():
    rows = [r for r in _rows() if r["bench"] == "amx_peak_bf16"]
    if not bench_peak._has_amx():
        assert rows == []
        assert bench_peak.amx_peak_gflops() is None
        return
    assert [r["impl"] for r in rows] == ["amx x1 threads", "amx x2 threads"], rows
    for r, threads in zip(rows, (1, 2)):
        # One TDPBF16PS (16384 flops) per 16 cycles at most, per thread.
        assert 0 < r["value"] < 16384 / 16 * GHZ_BOUND * threads, r
    # The cached peak is the best measurement so far, these rows included.
    peak = bench_peak.amx_peak_gflops()
    assert peak >= max(r["value"] for r in rows)
    # The tile unit outruns float32 FMAs by far on any CPU that has it.
    assert peak > bench_peak.peak_gflops(2)


def test_gemm_rows_name_their_yardstick():
    assert bench_gemm._of_peak(300.0, "float32", 400.0, 2000.0) == (
        "75% of the 400 GFLOP/s FMA peak")
    assert bench_gemm._of_peak(1500.0, "bfloat16", 400.0, 2000.0) == (
        "75% of the 2000 GFLOP/s AMX peak")
    # No AMX (or no measurement): bfloat16 rows claim no fraction.
    assert bench_gemm._of_peak(1500.0, "bfloat16", 400.0, None) == ""
    assert bench_gemm._of_peak(300.0, "float32", None, 2000.0) == ""


def test_no_amx_rows_or_peak_without_amx(monkeypatch):
    # A CPU without AMX (whatever this one has): no rows, no bfloat16 peak,
    # so bench_gemm's bfloat16 rows claim no fraction of one.
    monkeypatch.setattr(bench_peak, "_cpu_flags", lambda: {"avx512f", "fma"})
    monkeypatch.setattr(bench_peak, "_AMX_LIB", None)
    monkeypatch.setattr(bench_peak, "_AMX_CACHE", {})
    assert bench_peak._amx_rows(quick=True) == []
    assert bench_peak.amx_peak_gflops() is None
