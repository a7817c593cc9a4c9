"""GELU gradient on one activation (issue 21): the GeluGrad op vs the
composed rule it replaced (one FusedElementwise in a compiled step) vs
torch's gelu_backward, interleaved A/B/C in one process (the machine is
shared: compare the columns of one run, not runs).

    OMP_NUM_THREADS=1 DRAGON_NUM_THREADS=1 python bench/ab_gelu_grad.py
    python bench/ab_gelu_grad.py --shape 1024 1024 --rounds 15 --mode tanh
    python bench/ab_gelu_grad.py --against /path/to/old/.venv/bin/python

``--against PYTHON`` A/Bs this checkout's kernel with another install's (say
main's, before a kernel change): rounds alternate between a process of each
interpreter, each timing its GeluGrad and torch's gelu_backward; the
GeluGrad / torch ratio of each process is load-normalised, so compare the
ratios (median over rounds) rather than the times.

Prints the median over rounds of the per-call time (ms) of each, and the
load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import dragon_core as dg
from dragon_core._grads.unary import gelu_grad_composed


def _timeit(fn, reps):
    fn()
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1e3


def _against(args):
    """Alternate rounds between this interpreter and args.against."""
    import subprocess
    import sys
    base = [__file__, "--shape", *map(str, args.shape), "--mode", args.mode,
            "--rounds", "1", "--reps", str(args.reps), "--raw"]
    ratios = {"this": [], "other": []}
    times = {"this": [], "other": []}
    for _ in range(args.rounds):
        for who, py in (("other", args.against), ("this", sys.executable)):
            out = subprocess.run([py, *base], check=True, capture_output=True, text=True)
            ours, torch_ms = map(float, out.stdout.split()[-2:])
            ratios[who].append(ours / torch_ms)
            times[who].append(ours)
    print(f"shape={args.shape} mode={args.mode} rounds={args.rounds} (alternating processes)")
    for who, name in (("other", args.against), ("this", sys.executable)):
        print(f"  {name}: GeluGrad median {statistics.median(times[who]):7.3f} ms, "
              f"GeluGrad/torch median {statistics.median(ratios[who]):.2f} "
              f"(min {min(ratios[who]):.2f}, max {max(ratios[who]):.2f})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", type=int, nargs="+", default=[1024, 1024])
    ap.add_argument("--mode", default="none", choices=["none", "tanh"])
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--against", help="another install's python: alternate A/B rounds")
    ap.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.against:
        _against(args)
        return
    rng = np.random.default_rng(0)
    xs = rng.standard_normal(args.shape).astype(np.float32)
    ds = rng.standard_normal(args.shape).astype(np.float32)
    x, dy = dg.tensor(xs), dg.tensor(ds)
    mode = args.mode

    new = dg.function(lambda a, b: dg.ops.gelu_grad(a, b, mode))
    old = dg.function(lambda a, b: gelu_grad_composed(a, b, mode))
    np.testing.assert_allclose(new(x, dy).numpy(), old(x, dy).numpy(), rtol=1e-4, atol=1e-5)
    cases = {"GeluGrad": lambda: new(x, dy), "composed(old)": lambda: old(x, dy)}
    try:
        import torch
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
        tx, td = torch.from_numpy(xs), torch.from_numpy(ds)
        approx = "tanh" if mode == "tanh" else "none"
        ref = torch.ops.aten.gelu_backward(td, tx, approximate=approx)
        np.testing.assert_allclose(new(x, dy).numpy(), ref.numpy(), rtol=1e-4, atol=1e-5)
        cases["torch gelu_backward"] = lambda: torch.ops.aten.gelu_backward(
            td, tx, approximate=approx)
    except ImportError:
        pass

    load0 = os.getloadavg()
    times = {k: [] for k in cases}
    for _ in range(args.rounds):
        for k, fn in cases.items():
            times[k].append(_timeit(fn, args.reps))
    load1 = os.getloadavg()
    if args.raw:  # for --against: GeluGrad's and torch's median ms
        print(statistics.median(times["GeluGrad"]), statistics.median(times["torch gelu_backward"]))
        return
    print(f"shape={args.shape} mode={mode} OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
          f"loadavg before={load0[0]:.2f} after={load1[0]:.2f}")
    for k, v in times.items():
        print(f"  {k:22s} median {statistics.median(v):7.3f} ms   min {min(v):7.3f} ms")


if __name__ == "__main__":
    main()
