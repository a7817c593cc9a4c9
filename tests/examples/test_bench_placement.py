"""bench/placement.py: the probe of where the host put the two CPUs, which
the workload benchmark records with every timed round.

The probe's value depends on the host (~60 ns one die, ~400 ns two dies on
the development machine); these tests check what does not: it measures a
positive time when two CPUs are there, reports None (not a number, not a
hang) when only one is, leaves the caller's affinity as it was, and the
classification and the summary the ratio rows print.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
try:
    import placement
finally:
    sys.path.pop(0)

HAVE_CXX = bool(os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++"))
CPUS = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
needs_two = pytest.mark.skipif(not HAVE_CXX or len(CPUS) < 2,
                               reason="needs a C++ compiler and two CPUs to pin")


@needs_two
def test_round_trip_is_measured_and_affinity_restored():
    before = os.sched_getaffinity(0)
    ns = placement.round_trip_ns(2000)
    assert ns is not None and 0.0 < ns < 1e6, ns
    assert os.sched_getaffinity(0) == before


@needs_two
def test_one_cpu_gives_none_promptly():
    # A process allowed a single CPU cannot place two threads: None, at once
    # (the probe never starts a partner that would share the CPU).
    code = (
        "import os, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'bench')!r})\n"
        "import placement\n"
        f"os.sched_setaffinity(0, {{{CPUS[0]}}})\n"
        "t = time.perf_counter()\n"
        "print(placement.round_trip_ns(200000), time.perf_counter() - t)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    assert out[0] == "None"
    assert float(out[1]) < 60.0  # includes building the probe


def test_bad_trip_count_raises():
    with pytest.raises(ValueError, match="trips must be positive"):
        placement.round_trip_ns(0)


@pytest.mark.parametrize("ns, kind", [(55.0, "one die"), (159.9, "one die"), (160.0, "between"),
                                      (250.0, "between"), (250.1, "two dies"),
                                      (460.0, "two dies"), (None, "unknown")])
def test_classify(ns, kind):
    assert placement.classify(ns) == kind


def test_summary_counts_rounds_per_placement():
    line = placement.summary([60.0, 70.0, 400.0, None, 200.0, 65.0])
    assert line == "one die 3, two dies 1, between 1, unknown 1 (round trip median 70 ns)"
    assert placement.summary([None, None]) == "placement not measured"
    assert placement.summary([]) == "placement not measured"
