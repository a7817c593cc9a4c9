"""Run Dragon's benchmarks, print a table, write ``bench/results/latest.json``.

Usage::

    python bench/run.py               # every bench/bench_*.py module
    python bench/run.py -k matmul     # modules whose topic contains "matmul"
    python bench/run.py --list        # list the modules and exit
    python bench/run.py --strict      # exit 1 if a target is missed
    python bench/run.py --quick       # short runs where a module supports it

A benchmark module is ``bench/bench_<topic>.py`` exposing
``run() -> list[dict]`` (rows built with ``_harness.result``); a module whose
``run`` takes a ``quick`` argument gets ``quick=True`` under ``--quick`` (one
short timed run per row, same checks). Modules run in
this one process, in name order. The exit status is 0 unless ``--strict`` is
given and a row is MISS, WRONG or ERROR: a benchmark reports, it does not
gate (the machines are shared, so timings are noisy).
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import inspect
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

import _harness  # noqa: E402  (needs BENCH_DIR on sys.path)

BAD = ("MISS", "WRONG", "ERROR")


def discover() -> list[Path]:
    """Return ``bench/bench_*.py`` in name order."""
    return sorted(BENCH_DIR.glob("bench_*.py"))


def topic(path: Path) -> str:
    """``bench_matmul.py`` -> ``matmul``."""
    return path.stem[len("bench_"):]


def run_module(path: Path, quick: bool = False) -> list[dict]:
    """Import one benchmark module and return its rows (an ERROR row if it
    cannot be imported or its ``run()`` raises); ``quick`` is passed on to a
    ``run`` that accepts it."""
    name = path.stem
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        takes_quick = "quick" in inspect.signature(module.run).parameters
        rows = module.run(quick=True) if quick and takes_quick else module.run()
        if not isinstance(rows, list) or not all(isinstance(r, dict)
                                                 for r in rows):
            raise TypeError(f"{name}.run() must return a list of dicts, "
                            f"got {type(rows).__name__}")
        return rows
    except Exception as exc:
        last = traceback.extract_tb(exc.__traceback__)[-1]
        where = f"{Path(last.filename).name}:{last.lineno}"
        return [_harness.result(topic(path), f"{name}.run()", "-", "-", None,
                                "lower", status="ERROR",
                                note=f"{type(exc).__name__}: {exc} ({where})")]


def _version(module_name: str) -> str | None:
    """The version of an imported module, else of the installed
    distribution of that name (a run of modules that never import torch,
    ``-k peak`` say, must not report torch missing); None when absent."""
    module = sys.modules.get(module_name)
    if module is not None:
        return getattr(module, "__version__", None)
    try:
        return importlib.metadata.version(module_name.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"],
                             cwd=BENCH_DIR, capture_output=True, text=True,
                             timeout=5)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_info() -> dict:
    """What the numbers depend on: versions, CPU, threads, load, BLAS."""
    info = {
        "time_utc": datetime.datetime.now(datetime.timezone.utc)
                    .isoformat(timespec="seconds"),
        "git_commit": _git_commit(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "loadavg_1m_after": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
        "numpy": _version("numpy"),
        "torch": _version("torch"),
        "dragon_core": _version("dragon_core"),
        "env": {k: os.environ[k] for k in (
            "OMP_NUM_THREADS", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE",
            "OPENBLAS_NUM_THREADS", "DRAGON_PLUGINS", "DRAGON_DISABLE_PLUGINS",
            "DRAGON_KERNEL_PIN") if k in os.environ},
        "openblas": _harness.openblas_info(),
    }
    torch = sys.modules.get("torch")
    if torch is not None:
        info["torch_threads"] = torch.get_num_threads()
    dg = sys.modules.get("dragon_core")
    if dg is not None:
        try:
            info["dragon_plugins"] = [
                {"name": p.name, "version": p.version, "state": p.state}
                for p in dg.plugins.list()]
            info["cuda_devices"] = [dg.cuda.get_device_name(i) for i in range(dg.cuda.device_count())]
        except Exception as exc:  # informational only
            info["dragon_plugins"] = f"unavailable: {exc}"
    return info


def _fmt_value(row: dict) -> str:
    value = row["value"]
    if value is None:
        return "-"
    digits = 3 if value < 10 else 1
    return f"{value:.{digits}f} {row['metric']}"


def _fmt_target(row: dict) -> str:
    if row.get("target") is None:
        return ""
    sign = "<=" if row["better"] == "lower" else ">="
    return f"{sign} {row['target']:g}"


def print_table(rows: list[dict], info: dict) -> None:
    """Print the rows as a table followed by their notes."""
    versions = ", ".join(f"{k} {info[k]}" for k in ("dragon_core", "numpy",
                                                    "torch") if info.get(k))
    load = info.get("loadavg_1m_before")
    print(f"Dragon benchmarks: {info['cpu']}, {info['cpu_count']} CPUs, "
          + (f"load {load:.2f} before the run, " if load is not None else "")
          + f"Python {info['python']}"
          + (f", {versions}" if versions else ""))
    header = ("benchmark", "implementation", "result", "target", "status")
    table = [header]
    notes: list[str] = []
    for row in rows:
        status = row["status"]
        if row.get("note"):
            if row["note"] not in notes:
                notes.append(row["note"])
            status += f" [{notes.index(row['note']) + 1}]"
        table.append((row["bench"], f"{row['library']}: {row['impl']}",
                      _fmt_value(row), _fmt_target(row), status))
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) if j != 2 else c.rjust(w)
                        for j, (c, w) in enumerate(zip(r, widths))).rstrip())
        if i == 0:
            print("  ".join("-" * w for w in widths))
    for i, note in enumerate(notes, 1):
        print(f"[{i}] {note}")
    blas = info.get("openblas") or {}
    coretype = info["env"].get("OPENBLAS_CORETYPE")
    print("NumPy rows are informational (no target): NumPy's matmul speed is "
          "that of the OpenBLAS kernel it runs"
          + (f" (here {blas['corename']})" if blas.get("corename") else "")
          + ".")
    if coretype:
        print(f"OPENBLAS_CORETYPE={coretype} is set on this machine (it keeps "
              "old OpenBLAS builds correct) and slows a current NumPy; to "
              "compare, unset OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE together "
              "for that one command. Do not change them in tests or CI.")
    # The load before the run: the benchmarks themselves load every core.
    load, cpus = info.get("loadavg_1m_before"), info.get("cpu_count") or 1
    if load is not None and load > 0.5 * cpus:
        print(f"The machine was busy (1-minute load {load:.1f} on {cpus} CPUs): "
              "timings are pessimistic, throughput most of all. Re-run when "
              "it is idle before comparing with a target.")
    if info.get("torch") is None:
        print("torch is not installed: "
              f"{_harness.INSTALL_HINTS['torch']}, then re-run.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-k", dest="pattern", default="",
                        help="run only modules whose topic contains this")
    parser.add_argument("--list", action="store_true",
                        help="list benchmark modules and exit")
    parser.add_argument("--json", type=Path,
                        default=BENCH_DIR / "results" / "latest.json",
                        help="where to write the results "
                             "(default: bench/results/latest.json)")
    parser.add_argument("--strict", action="store_true",
                        help="exit 1 if any row is MISS, WRONG or ERROR")
    parser.add_argument("--quick", action="store_true",
                        help="short timed runs in the modules that support it "
                             "(smoke tests; the numbers are not meaningful)")
    args = parser.parse_args(argv)

    modules = [p for p in discover() if args.pattern in topic(p)]
    if args.list:
        for path in modules:
            print(f"{topic(path):20s} {path.relative_to(BENCH_DIR.parent)}")
        return 0
    if not modules:
        print(f"no benchmark module matches -k {args.pattern!r}",
              file=sys.stderr)
        return 2

    rows = []
    load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    start = time.perf_counter()
    for path in modules:
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        rows.extend(run_module(path, args.quick))
    elapsed = time.perf_counter() - start

    info = machine_info()
    info["elapsed_s"] = round(elapsed, 2)
    info["loadavg_1m_before"] = load_before
    info["quick"] = args.quick
    print_table(rows, info)

    args.json.parent.mkdir(parents=True, exist_ok=True)
    with open(args.json, "w") as f:
        json.dump({"meta": info, "results": rows}, f, indent=2)
        f.write("\n")
    print(f"wrote {args.json} ({elapsed:.1f} s)")

    bad = [r for r in rows if r["status"] in BAD]
    return 1 if args.strict and bad else 0


if __name__ == "__main__":
    sys.exit(main())
