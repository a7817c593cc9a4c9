"""Shared helpers for the benchmark modules in ``bench/``.

A benchmark module is a file ``bench/bench_<topic>.py`` exposing
``run() -> list[dict]``; each dict is one result row built with
:func:`result`. ``bench/run.py`` discovers the modules, runs them in one
process, prints a table and writes ``bench/results/latest.json``.

Timing rules used by every module:

- ``time.perf_counter_ns`` only; the garbage collector is off while a timed
  loop runs (as :mod:`timeit` does).
- Fast calls (microseconds) are timed in batches so the timer's own cost
  (~50 ns) is amortised; the per-call figure of a repeat is the median of its
  batches (robust to the other processes sharing this machine), and the
  reported number is the best of several repeats.
- Slow calls (milliseconds) are warmed up, then timed over runs of at least
  ``min_run_s`` seconds; the best run is reported.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import math
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Optional

#: How to get each optional comparison library.
INSTALL_HINTS = {
    "torch": "pip install torch==2.13.0  (a local CPU wheel on these machines)",
    "dragon_core": "make demo  (installs dragon-sdk, dragon-core and "
                   "dragon-cpu-eigen into .venv)",
}

_import_errors: dict[str, str] = {}


def try_import(name: str) -> Optional[Any]:
    """Import module ``name`` or return None, remembering why it failed.

    Parameters
    ----------
    name : str
        Module name, e.g. ``"torch"``.

    Returns
    -------
    module or None
        The module, or None when it cannot be imported (the reason is then
        available from :func:`import_error`).
    """
    try:
        return importlib.import_module(name)
    except Exception as exc:  # any failure means "not available here"
        _import_errors[name] = f"{type(exc).__name__}: {exc}"
        return None


def import_error(name: str) -> str:
    """Return why :func:`try_import` could not import ``name`` (or "")."""
    return _import_errors.get(name, "")


def skip_note(name: str) -> str:
    """A one-line note for a row skipped because ``name`` is missing."""
    hint = INSTALL_HINTS.get(name, f"pip install {name}")
    why = import_error(name)
    return f"{name} not importable ({why}); install with: {hint}"


def result(bench: str, impl: str, library: str, metric: str,
           value: Optional[float], better: str,
           target: Optional[float] = None, status: Optional[str] = None,
           note: str = "", **extra: Any) -> dict:
    """Build one result row.

    Parameters
    ----------
    bench : str
        Benchmark id, e.g. ``"add_1elem_f32"``; rows of one benchmark share it.
    impl : str
        What was timed, e.g. ``"dg.ops.add(a, b)"``.
    library : str
        ``"dragon"``, ``"numpy"``, ``"torch"``, ...
    metric : str
        Unit of ``value``, e.g. ``"us/op"`` or ``"GFLOP/s"``.
    value : float or None
        The measurement; None when the row was skipped or failed.
    better : {"lower", "higher"}
        Which direction is better, used to judge ``target``.
    target : float or None
        The goal for this row; None for informational rows.
    status : str or None
        Force a status (``"SKIP"``, ``"ERROR"``, ``"WRONG"``, ``"INFO"``);
        by default it is computed from ``value`` and ``target``.
    note : str
        Free text shown under the table.
    **extra
        Further fields stored in the JSON (e.g. raw samples).

    Returns
    -------
    dict
        The row.
    """
    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', got {better!r}")
    if status is None:
        if value is None:
            status = "ERROR"
        elif target is None:
            status = "INFO"
        elif better == "lower":
            status = "PASS" if value <= target else "MISS"
        else:
            status = "PASS" if value >= target else "MISS"
    row = {"bench": bench, "impl": impl, "library": library,
           "metric": metric, "value": value, "better": better,
           "target": target, "status": status, "note": note}
    row.update(extra)
    return row


def per_call_us(fn: Callable[..., Any], args: tuple, calls: int = 20000,
                repeats: int = 5, batch: int = 100) -> tuple[float, list]:
    """Time a fast call: best of ``repeats`` medians, in microseconds per call.

    Each repeat makes about ``calls`` calls in batches of ``batch``; a batch
    is timed as a whole and divided by ``batch``. The repeat's figure is the
    median over its batches; the result is the smallest repeat figure. The
    Python loop around the call is included (a few ns), as it would be in a
    user's program.

    Parameters
    ----------
    fn : callable
        The function to call as ``fn(*args)``.
    args : tuple
        Its arguments, built once outside the timed region.
    calls : int
        Calls per repeat.
    repeats : int
        Number of repeats.
    batch : int
        Calls per timed batch.

    Returns
    -------
    best : float
        Best median, µs per call.
    medians : list of float
        The median of every repeat, µs per call.
    """
    loops = max(1, calls // batch)
    inner = range(batch)
    clock = time.perf_counter_ns
    for _ in range(batch * 10):  # warm caches, allocator pools, lookups
        fn(*args)
    medians = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            samples = []
            for _ in range(loops):
                t0 = clock()
                for _ in inner:
                    fn(*args)
                samples.append((clock() - t0) / batch)
            medians.append(statistics.median(samples) / 1000.0)
    finally:
        if gc_was_enabled:
            gc.enable()
    return min(medians), medians


def best_seconds(fn: Callable[[], Any], warmup: int = 3, runs: int = 7,
                 min_run_s: float = 0.25) -> tuple[float, list]:
    """Time a slow call: best per-call seconds over several runs.

    Parameters
    ----------
    fn : callable
        Called as ``fn()``.
    warmup : int
        Untimed calls first (thread pools, packing buffers, page faults).
    runs : int
        Timed runs.
    min_run_s : float
        Each run repeats ``fn`` enough times to last about this long.

    Returns
    -------
    best : float
        Smallest per-call time of any run, in seconds.
    per_run : list of float
        Per-call time of every run, in seconds.
    """
    for _ in range(warmup):
        fn()
    t0 = time.perf_counter_ns()
    fn()
    once = max((time.perf_counter_ns() - t0) / 1e9, 1e-9)
    reps = max(1, math.ceil(min_run_s / once))
    per_run = []
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            t0 = time.perf_counter_ns()
            for _ in range(reps):
                fn()
            per_run.append((time.perf_counter_ns() - t0) / 1e9 / reps)
    finally:
        if gc_was_enabled:
            gc.enable()
    return min(per_run), per_run


def native_library(source: Path, flags: list) -> Optional[ctypes.CDLL]:
    """``source`` (a file under bench/native/) built with the system C++
    compiler (``$CXX``, else g++ or clang++) and ``flags`` into a temporary
    shared object, loaded through ctypes. None when there is no compiler;
    a failed build raises ``subprocess.CalledProcessError``."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        return None
    out = Path(tempfile.mkdtemp(prefix=f"dg_{source.stem}_")) / f"{source.stem}.so"
    subprocess.run([cxx, *flags, "-shared", "-fPIC", str(source), "-o", str(out)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(out))


# glibc's mallopt parameters and their defaults (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_THRESHOLD = 128 * 1024


@contextlib.contextmanager
def steady_malloc(threshold: int = 32 * 1024 * 1024):
    """Keep glibc's malloc in one state while timing libraries that allocate
    through it (torch's CPU tensors do; Dragon's pool does not).

    By default glibc serves blocks from 128 KiB up with mmap and returns
    them with munmap, but raises that threshold each time it frees such a
    block: a process starts by paying page faults for every large tensor and
    may stop doing so later, depending on what ran before (torch eager's
    bfloat16 encoder step: ~21-23 ms per step in a fresh process, ~19.6 in
    one where the threshold had risen; docs/benchmarks.md, session 19).
    Inside this block both the mmap and the trim thresholds are
    ``threshold`` (32 MiB, the most glibc accepts for mmap on 64-bit), so
    such blocks stay in the heap: every library runs in its fast state,
    whatever ran before. Afterwards both are set back to glibc's initial
    128 KiB (fixed from then on, not adjusted as glibc's own default is).
    Yields whether the setting took (False off glibc).
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
        mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    except (OSError, AttributeError):
        yield False
        return
    ok = (mallopt(_M_MMAP_THRESHOLD, threshold) == 1
          and mallopt(_M_TRIM_THRESHOLD, threshold) == 1)
    try:
        yield ok
    finally:
        mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)


def openblas_info() -> dict:
    """Describe the OpenBLAS that NumPy loaded (core type, threads), if any.

    Reads ``/proc/self/maps`` for the loaded library and asks it through
    ctypes, as threadpoolctl does; returns an empty dict when that fails.
    """
    try:
        import numpy  # noqa: F401  (loads OpenBLAS)
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in line.lower() and "/" in line})
    except OSError:
        return {}
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        info = {"library": path}
        for suffix in ("64_", "_64", ""):
            for prefix in ("scipy_openblas", "openblas"):
                name = f"{prefix}_get_corename{suffix}"
                if "corename" not in info and hasattr(lib, name):
                    fn = getattr(lib, name)
                    fn.restype = ctypes.c_char_p
                    info["corename"] = fn().decode()
                name = f"{prefix}_get_num_threads{suffix}"
                if "threads" not in info and hasattr(lib, name):
                    info["threads"] = int(getattr(lib, name)())
        return info
    return {}
