"""GELU forward and backward on one float32 activation (issue 21), beside
torch, interleaved in one process (the machine is shared: compare the
columns of one run, not runs):

    OMP_NUM_THREADS=1 DRAGON_NUM_THREADS=1 python bench/bench_gelu.py
    OMP_NUM_THREADS=2 DRAGON_NUM_THREADS=2 python bench/bench_gelu.py --mode tanh

Also a bench/run.py module (``run()``: the exact form at [1024, 1024] with
the process's threads, ratios against torch with target 1.0).

Rows: dg.ops.gelu as dispatched (cpu_eigen's float kernel), the same op
pinned to mkldnn (oneDNN's gelu_erf; exact form only), torch's gelu;
dg.ops.gelu_grad (cpu_eigen) and torch's gelu_backward. Each round times
every row once (``--reps`` calls each), rounds alternate the rows; prints
the median and min per-call time (us) over rounds, the ratio of medians to
torch's, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import dragon_core as dg


def _timeit(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e6


def _pinned(fn, plugin):
    def run():
        dg.plugins.pin("Gelu", "cpu", plugin)
        try:
            return fn()
        finally:
            dg.plugins.unpin("Gelu", "cpu")
    return run


def measure(shape=(1024, 1024), mode="none", rounds=15, reps=20, threads=None):
    """Per-call times (us) of every row, ``{row: [one per round]}``, after
    checking dragon's values against torch's; ``threads`` sets torch's
    (default: OMP_NUM_THREADS, else torch's own)."""
    import torch
    threads = threads or int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads()))
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(shape).astype(np.float32)
    ds = rng.standard_normal(shape).astype(np.float32)
    x, dy = dg.tensor(xs), dg.tensor(ds)
    tx, td = torch.from_numpy(xs), torch.from_numpy(ds)
    rows = {
        "dragon gelu": lambda: dg.ops.gelu(x, mode),
        "torch gelu": lambda: torch.nn.functional.gelu(tx, approximate=mode),
        "dragon gelu_grad": lambda: dg.ops.gelu_grad(x, dy, mode),
        "torch gelu_backward": lambda: torch.ops.aten.gelu_backward(td, tx, approximate=mode),
    }
    if mode == "none" and any(k["plugin"] == "mkldnn" for k in dg.plugins.kernels("Gelu")):
        rows["dragon gelu, mkldnn pinned"] = _pinned(rows["dragon gelu"], "mkldnn")
    # Same values (within the kernels' accuracy) before timing anything.
    np.testing.assert_allclose(rows["dragon gelu"]().numpy(), rows["torch gelu"]().numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(rows["dragon gelu_grad"]().numpy(),
                               rows["torch gelu_backward"]().numpy(), rtol=1e-5, atol=1e-6)
    for fn in rows.values():
        fn()
    times = {k: [] for k in rows}
    for _ in range(rounds):
        for k, fn in rows.items():
            times[k].append(_timeit(fn, reps))
    return times, threads


def run(quick: bool = False) -> list:
    """Rows for bench/run.py: us per call of each row (INFO), and
    dragon / torch ratios of the medians with target 1.0 (issue 21: the
    float32 exact form at least as fast as torch's, forward and backward)."""
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _harness import result, skip_note, try_import
    if try_import("torch") is None:
        return [result("gelu_f32", "torch", "torch", "us/call", None, "lower",
                       status="SKIP", note=skip_note("torch"))]
    times, threads = measure(rounds=5 if quick else 15, reps=5 if quick else 20)
    med = {k: statistics.median(v) for k, v in times.items()}
    out = []
    for k, v in med.items():
        out.append(result("gelu_f32", f"{k} [1024,1024] {threads} thr", k.split()[0],
                          "us/call", v, "lower", status="INFO",
                          note=f"min {min(times[k]):.1f} us over {len(times[k])} rounds"))
    for ours, theirs in (("dragon gelu", "torch gelu"),
                         ("dragon gelu_grad", "torch gelu_backward")):
        out.append(result("gelu_f32", f"ratio {ours} / {theirs}", "dragon", "x",
                          med[ours] / med[theirs], "lower", target=1.0,
                          note="medians, rows interleaved in one process"))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--mode", default="none", choices=["none", "tanh"])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    load0 = os.getloadavg()
    times, threads = measure(tuple(args.shape), args.mode, args.rounds, args.reps)
    load1 = os.getloadavg()
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"shape={args.shape} mode={args.mode} threads={threads} rounds={args.rounds} "
          f"reps={args.reps} loadavg before={load0[0]:.2f} after={load1[0]:.2f}")
    for k, v in times.items():
        ref = med["torch gelu_backward" if "grad" in k else "torch gelu"]
        print(f"  {k:28s} median {med[k]:8.1f} us   min {min(v):8.1f} us   "
              f"/torch {med[k] / ref:5.2f}")


if __name__ == "__main__":
    main()
