"""Per-round trace of the encoder workload, and what each estimator makes of it.

bench_workloads.py times its configurations round-robin and reduces each
configuration's rounds to one number. This script runs the same four
encoder configurations (torch eager, torch.compile, Dragon eager, Dragon
compiled) round-robin for a while, keeps every round, and then cuts the
trace into benchmark-sized runs to compare ways of turning rounds into the
compiled ÷ torch eager ratio (docs/benchmarks.md, "Session 19"):

* best of N rounds each, then the ratio of the two bests;
* the median over rounds of the per-round ratio (what bench_workloads
  reports: round i of the two configurations ran about a second apart).

    python bench/trace_rounds.py [--precision float32|bfloat16] [--steady-malloc]
                                 [--seconds 150] [--round-s 0.25] [--json out.json]

``--steady-malloc`` traces inside ``_harness.steady_malloc`` (as
bench_workloads.py times), without it glibc's malloc starts in its default
state.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_workloads as bw  # noqa: E402
from _harness import steady_malloc  # noqa: E402

CONFIGS = ("torch eager", "torch.compile", "dragon eager", "dragon compiled")


def trace(precision: str, seconds: float, round_s: float) -> dict:
    """Round-robin rounds of about ``round_s`` for ``seconds``: config ->
    list of seconds per step, one entry per round."""
    import dragon_core as dg
    import torch
    torch.set_num_threads(2)
    x, t = bw._encoder_data()
    state = bw.encoder_state(torch)
    tx, tt = torch.from_numpy(x), torch.from_numpy(t)
    dx, dt = dg.tensor(x), dg.tensor(t)
    steps = {
        "torch eager": (bw.torch_encoder_step(torch, state, precision, False), (tx, tt)),
        "torch.compile": (bw.torch_encoder_step(torch, state, precision, True), (tx, tt)),
        "dragon eager": (bw.dragon_encoder_step(dg, state, precision, False)[0], (dx, dt)),
        "dragon compiled": (bw.dragon_encoder_step(dg, state, precision, True)[0], (dx, dt)),
    }
    for fn, args in steps.values():
        for _ in range(3):
            fn(*args)
    rounds = {k: [] for k in CONFIGS}
    end = time.time() + seconds
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        while time.time() < end:
            for k in CONFIGS:
                fn, args = steps[k]
                t0, n = time.perf_counter(), 0
                while time.perf_counter() - t0 < round_s:
                    fn(*args)
                    n += 1
                rounds[k].append((time.perf_counter() - t0) / n)
    finally:
        if gc_was_enabled:
            gc.enable()
    return rounds


def summary(rounds: dict) -> str:
    """The per-configuration spread and the estimators over runs cut from
    the trace, as text."""
    n = min(len(v) for v in rounds.values())
    per = {k: np.asarray(v[:n]) for k, v in rounds.items()}
    lines = [f"{n} rounds per configuration; ms per step:"]
    for k, v in per.items():
        ms = v * 1e3
        lines.append(f"  {k:16s} min {ms.min():7.2f}  median {np.median(ms):7.2f}  "
                     f"max {ms.max():7.2f}  min/median {ms.min() / np.median(ms):.3f}")
    theirs, ours = per["torch eager"], per["dragon compiled"]
    lines.append("compiled / torch eager over runs cut from the trace:")
    for size in (5, 10, 20):
        best, paired = [], []
        for s in range(0, n - size + 1, size):
            a, b = theirs[s:s + size], ours[s:s + size]
            best.append(a.min() / b.min())
            paired.append(float(np.median(a / b)))
        if not best:
            continue
        for name, r in (("best of rounds", best), ("median paired", paired)):
            r = np.asarray(r)
            lines.append(f"  {size:2d} rounds, {name:15s}: {len(r):3d} runs, min {r.min():.3f} "
                         f"median {np.median(r):.3f} max {r.max():.3f}, "
                         f"{int(np.sum(r < 1.3))} below 1.3")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--precision", default="float32", choices=("float32", "bfloat16"))
    ap.add_argument("--seconds", type=float, default=150.0)
    ap.add_argument("--round-s", type=float, default=0.25)
    ap.add_argument("--json", help="also write the rounds here")
    ap.add_argument("--steady-malloc", action="store_true",
                    help="hold glibc's malloc in its fast state (_harness.steady_malloc)")
    args = ap.parse_args()
    if args.steady_malloc:
        with steady_malloc():
            rounds = trace(args.precision, args.seconds, args.round_s)
    else:
        rounds = trace(args.precision, args.seconds, args.round_s)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rounds, f)
    print(summary(rounds))


if __name__ == "__main__":
    main()
