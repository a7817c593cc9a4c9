"""The eager bfloat16 encoder-layer training step beside torch eager (issue 21).

The step of ``bench_workloads.py`` (batch 8, sequence 128, hidden 256,
4 heads, GELU MLP x4, MSE, Adam) under ``autocast("cpu")``, Dragon eager
and torch eager timed round-robin in one process (``--rounds`` rounds of
``--steps`` steps each; each keeps its best round), so load changes hit
both alike. Run it under two builds in alternating processes for an A/B of
Dragon versions: the torch row is the common yardstick.

``--ab`` times, in one process, the step with this branch's eager changes
switched off (the op sequence of main: no float32 gradient products, MatMul
+ Add for the linear bias, the Softmax rule's op chain, every operand's
gradient computed, no autocast cast cache) and on, alternating rounds, beside torch eager.

``--profile`` prints, instead, the per-op profile of one eager step of each
library: Dragon's from ``dragon_core.profiler`` (op types, counts, host
time; the Casts by dtype pair and shape) and torch's from
``torch.profiler`` (self CPU time per aten op).
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_workloads as bw  # noqa: E402


def _setup(precision="bfloat16"):
    import dragon_core as dg
    import torch
    torch.set_num_threads(2)
    x, t = bw._encoder_data()
    state = bw.encoder_state(torch)
    dstep, _ = bw.dragon_encoder_step(dg, state, precision, False)
    tstep = bw.torch_encoder_step(torch, state, precision, False)
    return dg, torch, (dstep, (dg.tensor(x), dg.tensor(t))), (tstep, (torch.from_numpy(x),
                                                                       torch.from_numpy(t)))


def time_steps(rounds: int = 7, steps: int = 20, precision: str = "bfloat16") -> dict:
    """Best-round seconds per step of Dragon eager and torch eager."""
    dg, torch, (dstep, dargs), (tstep, targs) = _setup(precision)
    losses = [(float(dstep(*dargs).numpy()), float(tstep(*targs).detach())) for _ in range(3)]
    best = {"dragon eager": float("inf"), "torch eager": float("inf")}
    for _ in range(rounds):
        for name, (fn, args) in (("dragon eager", (dstep, dargs)), ("torch eager", (tstep, targs))):
            start = time.perf_counter()
            for _ in range(steps):
                fn(*args)
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    best["losses"] = losses
    return best


def profiles(steps: int = 10, precision: str = "bfloat16") -> str:
    """The per-op profiles of one eager step (mean over ``steps``)."""
    dg, torch, (dstep, dargs), (tstep, targs) = _setup(precision)
    for _ in range(3):
        dstep(*dargs)
        tstep(*targs)
    out = []
    with dg.profiler.profile() as prof:
        for _ in range(steps):
            dstep(*dargs)
    rows = prof.by_type()
    total = prof.total_us() or 1.0
    lines = [f"## Dragon eager, {precision}: {prof.count() / steps:.0f} ops/step, "
             f"{prof.total_us() / steps / 1e3:.2f} ms/step in ops", "",
             "| op type | ops/step | ms/step | share |", "|---|---:|---:|---:|"]
    for op, n, us in rows[:20]:
        lines.append(f"| {op} | {n / steps:g} | {us / steps / 1e3:.3f} | "
                     f"{100 * us / total:.1f}% |")
    casts: dict = {}
    for e in prof.events:
        if e.depth == 0 and e.op == "Cast":
            key = (e.in_dtypes[0], e.out_dtypes[0], e.in_shapes[0])
            n, us = casts.get(key, (0, 0.0))
            casts[key] = (n + 1, us + e.us)
    lines += ["", "| Cast | shape | per step | ms/step |", "|---|---|---:|---:|"]
    for (src, dst, shape), (n, us) in sorted(casts.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {src} -> {dst} | {list(shape)} | {n / steps:g} | "
                     f"{us / steps / 1e3:.3f} |")
    out.append("\n".join(lines))
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as tprof:
        for _ in range(steps):
            tstep(*targs)
    trows = [(e.key, e.count / steps, e.self_cpu_time_total / steps / 1e3)
             for e in tprof.key_averages()]
    trows.sort(key=lambda r: -r[2])
    ttotal = sum(r[2] for r in trows) or 1.0
    lines = [f"## torch eager, {precision}: {ttotal:.2f} ms/step self CPU time", "",
             "| aten op | calls/step | ms/step | share |", "|---|---:|---:|---:|"]
    for key, n, ms in trows[:20]:
        lines.append(f"| {key} | {n:g} | {ms:.3f} | {100 * ms / ttotal:.1f}% |")
    out.append("\n".join(lines))
    return "\n\n".join(out)


class _EagerChanges:
    """Switch the eager-step changes of issue 21 off (``off()``) and back on,
    for an A/B of one process: every switch is a module attribute the rules
    read at call time."""

    def __init__(self):
        from dragon_core import _autograd
        from dragon_core._grads import arithmetic, linalg, loss, unary
        from dragon_core.nn import functional
        self._saved = [(linalg, "_float32_grad", linalg._float32_grad),
                       (functional, "eager_fused", functional.eager_fused),
                       (unary, "eager_fused", unary.eager_fused),
                       (arithmetic, "needs_grad", arithmetic.needs_grad),
                       (loss, "needs_grad", loss.needs_grad)]
        self._autograd = _autograd
        from dragon_core import amp
        self._init = amp.autocast.__init__
        self._defaults = self._init.__defaults__   # (..., cache_enabled=True)

    def off(self):
        for mod, name, _ in self._saved:
            setattr(mod, name, {"_float32_grad": lambda t: None,
                                "eager_fused": lambda *a, **k: False,
                                "needs_grad": lambda node, i: True}[name])
        self._init.__defaults__ = self._defaults[:-1] + (False,)

    def on(self):
        for mod, name, fn in self._saved:
            setattr(mod, name, fn)
        self._init.__defaults__ = self._defaults


def ab(rounds: int = 7, steps: int = 10, precision: str = "bfloat16") -> dict:
    """Best-round seconds per step: Dragon eager with the changes off
    ("before") and on ("after"), torch eager, round-robin in one process;
    also the op counts of one step of each Dragon variant."""
    dg, torch, (dstep, dargs), (tstep, targs) = _setup(precision)
    sw = _EagerChanges()
    counts, losses = {}, {}
    for name, switch in (("before", sw.off), ("after", sw.on)):
        switch()
        for _ in range(2):
            dstep(*dargs)
        with dg.profiler.profile() as prof:
            losses[name] = float(dstep(*dargs).numpy())
        counts[name] = (prof.count(), prof.count("Cast"))
    best = {"before": float("inf"), "after": float("inf"), "torch": float("inf")}
    for r in range(rounds):
        order = (("before", sw.off), ("after", sw.on)) if r % 2 == 0 else \
            (("after", sw.on), ("before", sw.off))
        for name, switch in order + (("torch", None),):
            if switch is not None:
                switch()
            fn, args = (tstep, targs) if name == "torch" else (dstep, dargs)
            start = time.perf_counter()
            for _ in range(steps):
                fn(*args)
            best[name] = min(best[name], (time.perf_counter() - start) / steps)
    sw.on()
    best["counts"] = counts
    best["losses"] = losses
    return best


if __name__ == "__main__":
    prec = "float32" if "--float32" in sys.argv else "bfloat16"
    if "--profile" in sys.argv:
        print(profiles(precision=prec))
    elif "--ab" in sys.argv:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
        steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 10
        r = ab(rounds, steps, prec)
        b, a, t = (1.0 / r[k] for k in ("before", "after", "torch"))
        print(f"{prec} dragon eager before {b:.2f} steps/s ({r['counts']['before'][0]} ops, "
              f"{r['counts']['before'][1]} Casts), after {a:.2f} steps/s "
              f"({r['counts']['after'][0]} ops, {r['counts']['after'][1]} Casts): "
              f"x{a / b:.3f}; torch eager {t:.2f} steps/s; ratio to torch before "
              f"{b / t:.3f}, after {a / t:.3f}; losses {r['losses']}")
    else:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 7
        steps = int(sys.argv[sys.argv.index("--steps") + 1]) if "--steps" in sys.argv else 20
        r = time_steps(rounds, steps, prec)
        d, t = 1.0 / r["dragon eager"], 1.0 / r["torch eager"]
        print(f"{prec} dragon eager {d:.2f} steps/s  torch eager {t:.2f} steps/s  "
              f"ratio {d / t:.3f}  losses {r['losses'][0]}")
