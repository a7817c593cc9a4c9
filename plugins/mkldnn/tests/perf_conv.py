"""Convolution timings: the mkldnn plugin against torch and cpu_eigen.

Not a test (pytest does not collect it). Run from the repository root:

    .venv/bin/python plugins/mkldnn/tests/perf_conv.py [--rounds 4]
        [--repeat 10] [--layouts auto,nhwc,any] [--threads N]

Each contender (torch; the mkldnn plugin in each layout of
DRAGON_MKLDNN_CONV_LAYOUT, read once per process; cpu_eigen pinned) runs
in its own child process, round-robin for --rounds rounds so that all see
the same load on a shared machine. Every timing is the best over rounds of
the best of --repeat runs after warm-up, in milliseconds; torch runs with
torch.set_num_threads equal to the OpenMP thread count oneDNN uses
(OMP_NUM_THREADS=--threads for every child).

With --primitives it prints instead, for the first shape's
forward+backward, oneDNN's own execution time of every primitive (verbose
log; torch 2.13 bundles oneDNN 3.12), the best per position over
iterations and rounds: reorders and convolutions separately, and far less
sensitive to a busy machine than wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

#: (name, x shape, w shape, attributes)
SHAPES = [
    ("resnet 8x64x56x56 3x3", (8, 64, 56, 56), (64, 64, 3, 3), {"pads": [1, 1]}),
    ("lenet1 64x1x28x28 5x5", (64, 1, 28, 28), (6, 1, 5, 5), {}),
    ("lenet2 64x6x12x12 5x5", (64, 6, 12, 12), (16, 6, 5, 5), {}),
]


def best_ms(fn, repeat):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def time_dragon(kernel, repeat):
    """{shape name: (forward ms, forward+backward ms)} for kernel "mkldnn"
    or "cpu_eigen" (pinned)."""
    import dragon_core as dg
    if kernel == "cpu_eigen":
        for op in ("Conv2d", "ConvTranspose2d", "Conv2dBackpropFilter"):
            dg.plugins.pin(op, "cpu", "cpu_eigen")
    rng = np.random.default_rng(0)
    out = {}
    for name, xs, ws, attrs in SHAPES:
        x = dg.tensor(rng.standard_normal(xs).astype(np.float32))
        w = dg.tensor(rng.standard_normal(ws).astype(np.float32))

        def fwd():
            return dg.ops.conv2d(x, w, **attrs).numpy()

        def fwd_bwd():
            with dg.GradientTape() as tape:
                tape.watch(x)
                tape.watch(w)
                y = dg.ops.conv2d(x, w, **attrs)
            dx, dw = tape.gradient(y, [x, w])
            return dx.numpy(), dw.numpy()

        out[name] = (best_ms(fwd, repeat), best_ms(fwd_bwd, repeat))
    return out


def time_torch(threads, repeat):
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    rng = np.random.default_rng(0)
    out = {}
    for name, xs, ws, attrs in SHAPES:
        x = torch.tensor(rng.standard_normal(xs).astype(np.float32),
                         requires_grad=True)
        w = torch.tensor(rng.standard_normal(ws).astype(np.float32),
                         requires_grad=True)
        pad = tuple(attrs.get("pads", [0, 0]))

        def fwd():
            with torch.no_grad():
                return F.conv2d(x, w, padding=pad)

        def fwd_bwd():
            y = F.conv2d(x, w, padding=pad)
            return torch.autograd.grad(y, [x, w], torch.ones_like(y))

        out[name] = (best_ms(fwd, repeat), best_ms(fwd_bwd, repeat))
    return out, torch.__version__


def primitive_child(kind, iters):
    """Runs the first shape's forward+backward `iters` times with oneDNN's
    verbose log on stdout (set by the parent)."""
    name, xs, ws, attrs = SHAPES[0]
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    if kind == "torch":
        import torch
        import torch.nn.functional as F
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
        xt = torch.tensor(x, requires_grad=True)
        wt = torch.tensor(w, requires_grad=True)
        for _ in range(iters):
            y = F.conv2d(xt, wt, padding=tuple(attrs["pads"]))
            torch.autograd.grad(y, [xt, wt], torch.ones_like(y))
        return
    import dragon_core as dg
    xd, wd = dg.tensor(x), dg.tensor(w)
    for _ in range(iters):
        with dg.GradientTape() as tape:
            tape.watch([xd, wd])
            y = dg.ops.conv2d(xd, wd, **attrs)
        [g.numpy() for g in tape.gradient(y, [xd, wd])]


def primitive_table(env, runs, rounds, iters):
    """oneDNN's own exec times (ms) of every primitive of one
    forward+backward, the best over iterations and rounds per position in
    the sequence: less sensitive to a busy machine than wall time."""
    table = {}
    for _ in range(rounds):
        for label, kind, extra in runs:
            if kind == "cpu_eigen":
                continue
            cmd = [sys.executable, __file__, "--child", kind, "--primitives",
                   "--repeat", str(iters)]
            done = subprocess.run(cmd, env={**env, **extra, "ONEDNN_VERBOSE": "1"},
                                  capture_output=True, text=True, check=True)
            rows = []
            for line in done.stdout.splitlines():
                f = line.replace("onednn_verbose,v1,primitive,",
                                 "onednn_verbose,").split(",")
                if len(f) > 6 and f[1] == "exec":
                    rows.append((f"{f[3]} {f[4]} {f[5]}", float(f[-1])))
            per = len(rows) // iters
            best = table.setdefault(label, [[r[0], float("inf")]
                                            for r in rows[:per]])
            for i in range(1, iters):  # skip the first (JIT, page faults)
                for j, (_, t) in enumerate(rows[i * per:(i + 1) * per]):
                    best[j][1] = min(best[j][1], t)
    for label, rows in table.items():
        print(f"\n{label}: {SHAPES[0][0]} forward+backward, oneDNN exec ms")
        for what, t in rows:
            print(f"  {t:8.3f}  {what}")
        print(f"  {sum(t for _, t in rows):8.3f}  total")


def child(args):
    if args.primitives:
        return primitive_child(args.child, args.repeat)
    if args.child == "torch":
        res, version = time_torch(args.threads, args.repeat)
        print(json.dumps({"res": res, "version": version}))
    else:
        print(json.dumps({"res": time_dragon(args.child, args.repeat)}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--layouts", default="auto,nhwc,any")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--child", default=None)
    ap.add_argument("--primitives", action="store_true",
                    help="print oneDNN's per-primitive exec times instead")
    args = ap.parse_args()
    if args.child:
        return child(args)
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    runs = [("torch", "torch", {})]
    runs += [(f"mkldnn[{lay}]", "mkldnn",
              {"DRAGON_MKLDNN_CONV_LAYOUT": lay})
             for lay in args.layouts.split(",")]
    runs.append(("cpu_eigen", "cpu_eigen", {}))
    if args.primitives:
        return primitive_table(env, runs, args.rounds, args.repeat)
    table = {}
    # Round-robin over the contenders, so that each sees the same share of
    # a busy machine; the best time over all rounds is kept.
    for _ in range(args.rounds):
        for label, kind, extra in runs:
            cmd = [sys.executable, __file__, "--child", kind,
                   "--repeat", str(args.repeat), "--threads",
                   str(args.threads)]
            done = subprocess.run(cmd, env={**env, **extra},
                                  capture_output=True, text=True, check=True)
            data = json.loads(done.stdout.strip().splitlines()[-1])
            if "version" in data:
                label = f"torch {data['version']}"
            best = table.setdefault(label, data["res"])
            for name, times in data["res"].items():
                best[name] = [min(a, b) for a, b in zip(best[name], times)]
    print(f"threads={args.threads} rounds={args.rounds} repeat={args.repeat}"
          " (best, ms)")
    for name, *_ in SHAPES:
        print(f"\n{name}")
        for label, res in table.items():
            f, fb = res[name]
            print(f"  {label:<22} forward {f:8.3f}   forward+backward {fb:8.3f}")


if __name__ == "__main__":
    main()
