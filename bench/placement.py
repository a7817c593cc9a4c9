"""Where the host put this process's two CPUs: one die or two.

On the shared virtual machine the benchmarks run on (docs/benchmarks.md,
session 21) the host moves the two vCPUs between one die (a shared L3) and
two, every few seconds to minutes, and the compiled training steps run
~20% slower on two dies (torch eager's bfloat16 step ~25% slower). A
ratio measured in one placement says little about the other, so the
workload benchmark records the placement with every timed round.

``bench/native/placement.cc`` bounces one cache line between two threads
pinned to the first two CPUs of the process's affinity mask; the round
trip was 50-75 ns on one die and 330-460 ns on two on that machine. It is
built once per process with the system C++ compiler into a temporary shared
object and called through ctypes, like bench_peak.py's FMA loop.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
from pathlib import Path
from typing import Optional

from _harness import native_library

SOURCE = Path(__file__).resolve().parent / "native" / "placement.cc"

# Round trips below ONE_DIE_NS are one die, above TWO_DIES_NS two dies
# (session 21 measured 50-75 and 330-460 ns; between the two, a run that
# straddled a move or shared the CPUs with something else).
ONE_DIE_NS = 160.0
TWO_DIES_NS = 250.0

_LIB = None
_FAILED = False


def _lib():
    """The compiled probe (built once per process); None without a C++
    compiler, off Linux, or when the build fails."""
    global _LIB, _FAILED
    if _LIB is not None or _FAILED:
        return _LIB
    lib = None
    if hasattr(os, "sched_getaffinity"):
        try:
            lib = native_library(SOURCE, ["-O2", "-pthread"])
        except (OSError, subprocess.CalledProcessError):
            lib = None
    if lib is None:
        _FAILED = True
        return None
    lib.placement_round_trip_ns.restype = ctypes.c_double
    lib.placement_round_trip_ns.argtypes = [ctypes.c_int64]
    _LIB = lib
    return lib


def round_trip_ns(trips: int = 20000) -> Optional[float]:
    """Nanoseconds per cache-line round trip between the first two CPUs
    this process may use (``trips`` round trips: ~1-10 ms), or None when it
    cannot be measured (fewer than two CPUs, no compiler, pinning refused).

    Run it while nothing else of this process computes: it spins both CPUs.
    """
    if trips <= 0:
        raise ValueError(f"round_trip_ns: trips must be positive, got {trips}")
    lib = _lib()
    if lib is None:
        return None
    ns = lib.placement_round_trip_ns(trips)
    return ns if ns > 0 else None


def classify(ns: Optional[float]) -> str:
    """"one die", "two dies", "between" (a move during the probe, or a busy
    machine) or "unknown" (not measured) for a round trip in ns."""
    if ns is None:
        return "unknown"
    if ns < ONE_DIE_NS:
        return "one die"
    if ns > TWO_DIES_NS:
        return "two dies"
    return "between"


def summary(per_round: list) -> str:
    """A one-line count of the rounds per placement, e.g. ``"one die 14,
    two dies 5, between 1 (round trip median 62 ns)"``."""
    known = [ns for ns in per_round if ns is not None]
    if not known:
        return "placement not measured"
    counts: dict = {}
    for ns in per_round:
        kind = classify(ns)
        counts[kind] = counts.get(kind, 0) + 1
    order = ("one die", "two dies", "between", "unknown")
    parts = [f"{kind} {counts[kind]}" for kind in order if kind in counts]
    known.sort()
    mid = known[len(known) // 2]
    return f"{', '.join(parts)} (round trip median {mid:.0f} ns)"
