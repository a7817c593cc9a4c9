"""float32 Softmax / LogSoftmax along the last axis beside torch (issue 21).

For each shape ([32,128,128]: the encoder's attention probabilities;
[1024,1024], [64,1000], [8,10]) and op, three callables are timed in
interleaved rounds in one process (the machine is shared: compare the
columns of one run, not runs): Dragon's dispatch winner (cpu_eigen's
``SoftmaxF32`` kernel since issue 21), the same call pinned to mkldnn's
oneDNN kernel (the winner before), and torch's ``softmax`` /
``log_softmax``. Each keeps its best round (of the calling thread's CPU time under
OMP_NUM_THREADS=1, else of wall-clock time). Rows give microseconds per call;
the ``ratio`` row gives Dragon / torch (target < 1).

    python bench/bench_softmax.py                  # the table
    OMP_NUM_THREADS=1 python bench/bench_softmax.py
    python bench/bench_softmax.py --profile        # encoder step shares

``--profile`` prints the per-op profile shares of the compiled encoder
training step (bench_workloads.profiles' encoder part) with Softmax pinned
to mkldnn (before) and unpinned (after), in alternating subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import result, skip_note, try_import  # noqa: E402

SHAPES = [(32, 128, 128), (1024, 1024), (64, 1000), (8, 10)]
OPS = ("Softmax", "LogSoftmax")


def _reference(x, log):
    x = x.astype(np.float64)
    d = x - x.max(-1, keepdims=True)
    s = np.exp(d).sum(-1, keepdims=True)
    return d - np.log(s) if log else np.exp(d) / s


def _clock():
    """The calling thread's CPU time when every library runs on this one
    thread (OMP_NUM_THREADS=1: descheduled time on the shared machine is not
    counted), else wall-clock time."""
    if os.environ.get("OMP_NUM_THREADS") == "1":
        return time.thread_time, "thread CPU time"
    return time.perf_counter, "wall clock"


def _time_rounds(fns, rounds, target_s=0.02):
    """Best per-call microseconds of each callable, rounds interleaved.
    ``fns`` maps a name to ``(fn, around)``: ``around`` is None or a context
    manager factory entered around each timed batch (a kernel pin)."""
    import contextlib
    clock = _clock()[0]
    reps = {}
    for k, (fn, around) in fns.items():
        with (around or contextlib.nullcontext)():
            fn()
            t0 = time.perf_counter()
            fn()
            one = max(time.perf_counter() - t0, 1e-7)
        reps[k] = max(3, int(target_s / one))
    best = {k: float("inf") for k in fns}
    for _ in range(rounds):
        for k, (fn, around) in fns.items():
            with (around or contextlib.nullcontext)():
                fn()
                t0 = clock()
                for _ in range(reps[k]):
                    fn()
                best[k] = min(best[k], (clock() - t0) / reps[k] * 1e6)
    return best


def _pin(dg, op, target):
    import contextlib

    @contextlib.contextmanager
    def pinned():
        dg.plugins.pin(op, "cpu", target)
        try:
            yield
        finally:
            dg.plugins.unpin(op, "cpu")
    return pinned


def run(quick: bool = False, rounds: int = 15) -> list[dict]:
    import dragon_core as dg
    torch = try_import("torch")
    if torch is not None and os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    rounds = 3 if quick else rounds
    rng = np.random.default_rng(0)
    rows = []
    for shape in SHAPES:
        xs = (rng.standard_normal(shape) * 3).astype(np.float32)
        x = dg.tensor(xs)
        for op in OPS:
            log = op == "LogSoftmax"
            f = dg.ops.log_softmax if log else dg.ops.softmax
            bench = f"{op.lower()}_f32_{'x'.join(map(str, shape))}"
            got = f(x, -1).numpy()
            err = float(np.max(np.abs(got - _reference(xs, log))))
            if err > 1e-5:
                rows.append(result(bench, f"dg.ops.{op.lower()}", "dragon", "us", None,
                                   "lower", status="WRONG", note=f"max error {err:.2e}"))
                continue

            call = (lambda f=f: f(x, -1))
            fns = {"dragon": (call, None)}
            has_mkldnn = any(k.get("plugin") == "mkldnn" for k in dg.plugins.kernels(op))
            if has_mkldnn:
                fns["mkldnn"] = (call, _pin(dg, op, f"mkldnn::{op}"))
            if torch is not None:
                tx = torch.from_numpy(xs)
                tf = torch.log_softmax if log else torch.softmax
                fns["torch"] = (lambda tf=tf, tx=tx: tf(tx, -1), None)
            best = _time_rounds(fns, rounds)
            win = dg.plugins.explain(op, "cpu", "float32").splitlines()[-1].strip()
            rows.append(result(bench, f"dg.ops.{op.lower()} ({win.split()[1]})", "dragon", "us",
                               best["dragon"], "lower",
                               note=f"max abs error {err:.1e}; {_clock()[1]}"))
            if has_mkldnn:
                rows.append(result(bench, f"dg.ops.{op.lower()} pinned to mkldnn::{op}",
                                   "dragon", "us", best["mkldnn"], "lower",
                                   note="the winner before issue 21"))
            if torch is None:
                rows.append(result(bench, f"torch.{op.lower()}", "torch", "us", None, "lower",
                                   status="SKIP", note=skip_note("torch")))
                continue
            rows.append(result(bench, f"torch.{op.lower()}", "torch", "us", best["torch"],
                               "lower"))
            rows.append(result(bench, "ratio dragon / torch", "dragon", "x",
                               best["dragon"] / best["torch"], "lower", target=1.0))
    return rows


_PROFILE_SCRIPT = r"""
import sys
sys.path.insert(0, %r)
import numpy as np, torch, dragon_core as dg
import bench_workloads as w
from models import bert
x, t = w._encoder_data()
shapes = {k: tuple(v.shape) for k, v in
          bert.encoder_layer(torch.nn, bert.torch_f(), w.HIDDEN, w.HEADS).state_dict().items()}
state = bert.random_state(shapes)
for precision in ("float32", "bfloat16"):
    step, _ = w.dragon_encoder_step(dg, state, precision, True)
    p = step.profile(dg.tensor(x), dg.tensor(t), runs=%d)
    total = p.ops_us or 1.0
    parts = {typ: (n, us) for typ, n, us in p.by_type()}
    line = [f"{precision}: {p.wall_us / 1e3:.2f} ms/step"]
    for typ in ("Softmax", "SoftmaxGrad"):
        n, us = parts.get(typ, (0, 0.0))
        line.append(f"{typ} {us:.0f} us ({100 * us / total:.1f}%%)")
    print("; ".join(line))
"""


def profile(rounds: int = 4, runs: int = 10) -> None:
    """Encoder step shares of Softmax / SoftmaxGrad, mkldnn pinned (before)
    vs not (after), in alternating subprocesses; prints each round and the
    smallest time (and its share) of each op over the rounds."""
    import re
    here = os.path.dirname(os.path.abspath(__file__))
    script = _PROFILE_SCRIPT % (here, runs)
    best = {}
    for r in range(rounds):
        for label, pin in (("before (Softmax pinned to mkldnn)",
                            "Softmax:cpu=mkldnn::Softmax"), ("after", "")):
            env = dict(os.environ)
            env.pop("DRAGON_KERNEL_PIN", None)
            if pin:
                env["DRAGON_KERNEL_PIN"] = pin
            out = subprocess.run([sys.executable, "-c", script], env=env, check=True,
                                 capture_output=True, text=True).stdout.strip()
            print(f"round {r + 1}, {label}:")
            print("  " + out.replace("\n", "\n  "))
            for line in out.splitlines():
                precision = line.split(":")[0]
                for typ, us, share in re.findall(r"(\w+) (\d+) us \(([\d.]+)%\)", line):
                    key = (label, precision, typ)
                    if key not in best or float(us) < best[key][0]:
                        best[key] = (float(us), float(share))
    print("smallest over the rounds:")
    for (label, precision, typ), (us, share) in sorted(best.items()):
        print(f"  {label:<36} {precision:<9} {typ:<12} {us:7.0f} us ({share:.1f}%)")


if __name__ == "__main__":
    if "--profile" in sys.argv:
        profile()
    else:
        print(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')} "
              f"loadavg={os.getloadavg()[0]:.2f}")
        for row in run(quick="--quick" in sys.argv):
            v = row["value"]
            print(f"{row['bench']:<30} {row['impl']:<46} "
                  f"{'-' if v is None else f'{v:9.2f}'} {row['status']:<5} {row['note']}")
