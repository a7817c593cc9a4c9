"""Per-op device-time profile of the GPU training steps (issue 15).

For the ResNet-18 training step of ``bench/bench_gpu.py`` (batch 64 of
3x224x224, SGD momentum 0.9, cross-entropy; float32 and bfloat16 autocast)
and the MLP 784-512-512-10 step (batch 128), this prints where the device
time goes:

``dragon eager``
    Every op the eager step issues, timed with two events of the device
    around it on the current stream (``dg.Event``: device time on a
    stream-ordered device such as ``cuda``, the host clock on the CPU),
    summed per op type. The step itself is timed the same way; the op
    rows' sum over the step's time is the *coverage* (the rest is time
    between ops: host launch gaps when the GPU waits for Python).
``dragon compiled``
    The same step as ``@dg.function``, timed by ``Function.profile`` (the
    executor records two device events around every op of the plan;
    docs/graph.md), summed per op type.
``dragon kernels``
    Only with a GPU and a CUDA torch: the eager step under
    ``torch.profiler`` (CUPTI sees every kernel of the process, Dragon's
    included), per kernel name — pure kernel time, no launch gaps.
``torch``
    torch's own step (same weights and data; bfloat16: channels-last, as
    bench_gpu) under ``torch.profiler``: device time per kernel on a GPU,
    self CPU time per aten op on the CPU.

``--ops`` (instead of the steps)
    The memory-bound ops of those steps one by one at the steps' shapes
    (BatchNorm and its gradient at 64x64x112x112 and 64x512x7x7, ReLU and
    its gradient, Add, max pool and its gradient, the global average pool
    and its gradient, cross-entropy, softmax and the bias-gradient Sum over
    64x1000, LayerNorm and its gradient over 1024x256): device time per
    call, the sum of the op's kernels under CUPTI, Dragon beside torch's
    equivalent aten op on the same values, best of ``--rounds`` alternating
    rounds of ``--calls`` calls.

Each table lists the top ``--top`` (15) rows: calls per step, ms per step,
and share of the table's total. A section whose estimated time would pass
``--budget`` seconds (default 55) is skipped with a note, so a whole GPU
run stays under a minute. ``--device cpu`` runs every Dragon section on
the CPU at small sizes (the torch section on torch's CPU) to check the
tool where there is no GPU; its numbers say nothing about the GPU.

Usage::

    python bench/profile_gpu.py                       # cuda, full sizes
    python bench/profile_gpu.py --device cpu --quick  # check the tool
    python bench/profile_gpu.py --only resnet_f32 --modes eager --top 30
    python bench/profile_gpu.py --ops                 # single ops beside torch
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import types

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _gpu_models as gpu_models  # noqa: E402

#: Tensor operators bound in C++ (dragon_core/src/python/bind_ops.cc) -> op.
DUNDER_OPS = {
    "__add__": "Add", "__radd__": "Add", "__sub__": "Sub", "__rsub__": "Sub",
    "__mul__": "Mul", "__rmul__": "Mul", "__truediv__": "Div", "__rtruediv__": "Div",
    "__pow__": "Pow", "__rpow__": "Pow", "__matmul__": "MatMul", "__rmatmul__": "MatMul",
    "__eq__": "Equal", "__ne__": "NotEqual", "__lt__": "Less", "__le__": "LessEqual",
    "__gt__": "Greater", "__ge__": "GreaterEqual", "__neg__": "Neg",
    "__and__": "BitwiseAnd", "__rand__": "BitwiseAnd", "__or__": "BitwiseOr",
    "__ror__": "BitwiseOr", "__xor__": "BitwiseXor", "__rxor__": "BitwiseXor",
    "__floordiv__": "FloorDivide", "__rfloordiv__": "FloorDivide",
    "__mod__": "Mod", "__rmod__": "Mod",
}

WORKLOADS = ("resnet_f32", "resnet_bf16", "mlp")
MODES = ("eager", "compiled")
#: Share of the time budget per workload (of what is left when it starts).
WEIGHTS = {"resnet_f32": 0.4, "resnet_bf16": 0.4, "mlp": 0.2}


# ------------------------------------------------------------------ budget
class Budget:
    """Seconds left for the whole run; sections that would pass it skip."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        return self.end - time.monotonic()


# ------------------------------------------------------------ eager op timer
class EagerOpTimer:
    """Times every eager op with two events on the device's current stream.

    While active (a context manager), every path by which Python runs an op
    is wrapped: ``dragon_core._C.call`` (module attribute), the ``_call``
    each generated ``dragon_core.ops`` function holds, and the Tensor
    operators bound in C++. Only the outermost op of a nesting is timed.
    ``collect()`` waits for the events and returns {op: [calls, ms]}.
    """

    def __init__(self, dg, device: str):
        self.dg, self.device = dg, device
        self.stream = dg.current_stream(device)
        self.depth = 0
        self.pending: list = []
        self.free: list = []
        self._undo: list = []

    def _event(self):
        return self.free.pop() if self.free else self.dg.Event(enable_timing=True)

    def timed(self, name: str, fn, *args, **kwargs):
        if self.depth:
            return fn(*args, **kwargs)
        self.depth += 1
        try:
            e0 = self._event()
            e0.record(self.stream)
            out = fn(*args, **kwargs)
            e1 = self._event()
            e1.record(self.stream)
            self.pending.append((name, e0, e1))
            return out
        finally:
            self.depth -= 1

    def __enter__(self):
        C = self.dg._C
        orig_call = C.call

        def call(h, *args, **kwargs):
            return self.timed(h.name, orig_call, h, *args, **kwargs)
        C.call = call
        self._undo.append(lambda: setattr(C, "call", orig_call))
        # Generated op functions hold _C.call in their own globals.
        for obj in gc.get_objects():
            g = obj.__globals__ if type(obj) is types.FunctionType else None
            if g is not None and g.get("_call") is orig_call:
                g["_call"] = call
                self._undo.append(lambda g=g: g.__setitem__("_call", orig_call))
        cls = self.dg.Tensor
        for dunder, op in DUNDER_OPS.items():
            orig = cls.__dict__.get(dunder)
            if orig is None:
                continue

            def method(a, *args, _f=orig, _n=op, **kwargs):
                return self.timed(_n, _f, a, *args, **kwargs)
            setattr(cls, dunder, method)
            self._undo.append(lambda d=dunder, o=orig: setattr(cls, d, o))
        return self

    def __exit__(self, *exc):
        while self._undo:
            self._undo.pop()()
        return False

    def collect(self) -> dict:
        """{op type: [calls, ms]} of the ops timed since the last collect."""
        acc: dict = {}
        for name, e0, e1 in self.pending:
            ms = e0.elapsed_time(e1)
            row = acc.setdefault(name, [0, 0.0])
            row[0] += 1
            row[1] += ms
            self.free += (e0, e1)
        self.pending = []
        return acc


# ------------------------------------------------------------------ tables
def table(title: str, rows: list, runs: int, top: int, header: str = "",
          name_width: int = 34) -> dict:
    """Print one profile table and return it as a dict (for ``--json``).

    ``rows``: (name, calls, total ms over ``runs`` steps)."""
    rows = sorted(rows, key=lambda r: -r[2])
    total = sum(r[2] for r in rows) or 1.0
    print(f"\n== {title} ==")
    if header:
        print(header)
    print(f"{'op':<{name_width}} {'calls/step':>10} {'ms/step':>10} {'share':>7}")
    for name, calls, ms in rows[:top]:
        shown = name if len(name) <= name_width else name[:name_width - 3] + "..."
        print(f"{shown:<{name_width}} {calls / runs:>10.1f} {ms / runs:>10.3f} "
              f"{100 * ms / total:>6.1f}%")
    rest = rows[top:]
    if rest:
        print(f"({len(rest)} more, {sum(r[2] for r in rest) / runs:.3f} ms/step, "
              f"{100 * sum(r[2] for r in rest) / total:.1f}%)")
    print(f"{'total':<{name_width}} {sum(r[1] for r in rows) / runs:>10.1f} "
          f"{total / runs:>10.3f}")
    return {"title": title, "header": header, "runs": runs,
            "rows": [{"name": n, "calls_per_step": c / runs, "ms_per_step": ms / runs,
                      "share": ms / total} for n, c, ms in rows]}


def skipped(title: str, why: str) -> dict:
    print(f"\n== {title} ==\nSKIP: {why}")
    return {"title": title, "skipped": why}


# -------------------------------------------------------------- workloads
# The steps of bench_gpu.py (bench/_gpu_models.py): a factory of fresh
# Dragon steps ``step(x, y) -> loss`` (eager, or compiled with dg.function),
# the device inputs, and torch's step closure (None without torch).
def build_resnet(dg, torch, device: str, precision: str, batch: int, hw: int):
    x, y = gpu_models.resnet_inputs(batch, hw)
    state = gpu_models.resnet_state(dg, torch)
    bf16 = precision == "bfloat16"
    data = (dg.tensor(x).to(device), dg.tensor(y).to(device))
    torch_step = None
    if torch is not None:
        torch_step = gpu_models.torch_resnet(torch, state, x, y, device, bf16)[0]
    return (lambda: gpu_models.dragon_resnet(dg, state, device, bf16)), data, torch_step


def build_mlp(dg, torch, device: str, batch: int):
    ws, bs, x, y = gpu_models.mlp_inputs(batch)
    data = (dg.tensor(x).to(device), dg.tensor(y).to(device))
    torch_step = None
    if torch is not None:
        torch_step = gpu_models.torch_mlp(torch, ws, bs, x, y, device)[0]
    return (lambda: gpu_models.dragon_mlp(dg, ws, bs, device)), data, torch_step


# ---------------------------------------------------------------- sections
def _loss(dg, t) -> float:
    t = t.to("cpu")
    if t.dtype.name in ("float16", "bfloat16"):
        t = t.to("float32")
    return float(np.asarray(t.numpy()))


def _runs_for(step_s: float, max_runs: int, budget: Budget, share: float = 0.1) -> int:
    """Steps to time: at most ``max_runs``, at least 1, about ``share`` of
    the budget (a 1.3 s step gets one run of a 22 s one)."""
    return int(max(1, min(max_runs, budget.seconds * share / max(step_s, 1e-6))))


def dragon_eager(dg, name, factory, data, device, sync, args, budget) -> dict:
    title = f"{name} | dragon eager, per op type (device events around each op)"
    step = factory()
    t0 = time.perf_counter()
    loss = step(*data)
    sync()
    first = time.perf_counter() - t0
    t0 = time.perf_counter()
    step(*data)
    sync()
    step_s = time.perf_counter() - t0
    if budget.left() < 2 * step_s:
        return skipped(title, f"a step takes {step_s:.2f} s; {budget.left():.1f} s of the "
                              f"{budget.seconds:.0f} s budget left")
    runs = _runs_for(step_s, args.runs, budget)
    stream = dg.current_stream(device)
    with EagerOpTimer(dg, device) as timer:
        s0, s1 = dg.Event(enable_timing=True), dg.Event(enable_timing=True)
        s0.record(stream)
        for _ in range(runs):
            step(*data)
        s1.record(stream)
        sync()
        ops = timer.collect()
    step_ms = s0.elapsed_time(s1)
    ops_ms = sum(ms for _, ms in ops.values())
    header = (f"{runs} steps timed; first step {first * 1e3:.1f} ms wall (warm-up), then "
              f"{step_s * 1e3:.1f} ms wall; {step_ms / runs:.3f} ms/step on the device "
              f"(events around the step), ops {ops_ms / runs:.3f} ms/step "
              f"(coverage {100 * ops_ms / max(step_ms, 1e-9):.1f}%); "
              f"first loss {_loss(dg, loss):.5f}")
    out = table(title, [(n, c, ms) for n, (c, ms) in ops.items()], runs, args.top, header)
    out.update(step_ms=step_ms / runs, first_loss=_loss(dg, loss), step_s=step_s)
    return out


def dragon_compiled(dg, name, factory, data, sync, args, budget, est_s) -> dict:
    title = f"{name} | dragon compiled (@dg.function), per op type (Function.profile)"
    if budget.left() < 4 * est_s:
        return skipped(title, f"a step takes about {est_s:.2f} s; {budget.left():.1f} s of the "
                              f"{budget.seconds:.0f} s budget left (trace + warm-up + runs)")
    fn = dg.function(factory())
    t0 = time.perf_counter()
    loss = fn(*data)       # trace, compile, run
    sync()
    trace_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    fn(*data)
    sync()
    step_s = time.perf_counter() - t0
    runs = _runs_for(step_s, args.runs, budget)
    prof = fn.profile(*data, runs=runs, warmup=0)
    by_type = [(t, n * prof.runs, us * prof.runs / 1e3) for t, n, us in prof.by_type()]
    header = (f"{prof.runs} steps timed; trace + first step {trace_s:.2f} s, then "
              f"{step_s * 1e3:.1f} ms wall; {prof.wall_us / 1e3:.3f} ms/call wall while "
              f"profiling, ops {prof.ops_us / 1e3:.3f} ms/step; {len(prof.rows)} ops in the "
              f"plan; first loss {_loss(dg, loss):.5f}")
    out = table(title, by_type, prof.runs, args.top, header)
    out.update(step_ms=prof.ops_us / 1e3, step_s=step_s, first_loss=_loss(dg, loss))
    return out


def torch_profile(torch, title, fn, runs, device, top, kernels_only: bool) -> dict:
    """``fn`` run ``runs`` times under torch.profiler: per kernel (device
    events) on a GPU, per aten op (self CPU time) on the CPU."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    gpu = device != "cpu"
    acts = [ProfilerActivity.CUDA] if (gpu and kernels_only) else (
        [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else []))
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    sync()
    with profile(activities=acts) as prof:
        for _ in range(runs):
            fn()
        sync()
    acc: dict = {}
    for e in prof.events():
        if gpu:
            # device activity only: kernels, copies, memsets (not the
            # annotations of user ranges, e.g. torch's Optimizer.step, which
            # span kernels already counted)
            if e.device_type == DeviceType.CPU or getattr(e, "is_user_annotation", False):
                continue
            us = e.time_range.elapsed_us()
        else:
            if e.device_type != DeviceType.CPU or e.is_async:
                continue
            us = e.self_cpu_time_total
        row = acc.setdefault(e.name, [0, 0.0])
        row[0] += 1
        row[1] += us / 1e3
    what = "device time per kernel (CUPTI)" if gpu else "self CPU time per op"
    return table(f"{title}, {what}", [(n, c, ms) for n, (c, ms) in acc.items()], runs, top,
                 name_width=60 if gpu else 34)


def _guarded(title: str, fn) -> dict:
    """``fn()``, or a skipped section naming the error: one section's
    failure must not hide the others."""
    try:
        return fn()
    except Exception as exc:  # noqa: BLE001 - reported in the table
        return skipped(title, f"ERROR {type(exc).__name__}: {str(exc)[:400]}")


def _torch_eager(torch, title, torch_step, device, args, budget) -> dict:
    gpu = device != "cpu"
    tsync = torch.cuda.synchronize if gpu else (lambda: None)
    t0 = time.perf_counter()
    first = float(torch_step().detach())
    tsync()
    torch_step()
    tsync()
    t_s = (time.perf_counter() - t0) / 2
    sec = torch_profile(torch, title, torch_step, _runs_for(t_s, args.runs, budget), device,
                        args.top, kernels_only=False)
    sec["first_loss"] = first
    print(f"torch first loss {first:.5f}")
    return sec


def _dragon_kernels(dg, torch, title, factory, data, device, args, budget, est_s) -> dict:
    if budget.left() < 3 * est_s:
        return skipped(title, f"{budget.left():.1f} s of the budget left")
    step = factory()
    step(*data)
    return torch_profile(torch, title, lambda: step(*data), _runs_for(est_s, args.runs, budget),
                         device, args.top, kernels_only=True)


def run_workload(name, dg, torch, factory, data, torch_step, device, args, budget) -> list:
    gpu = device != "cpu"
    sync = (lambda: dg.synchronize(device)) if gpu else (lambda: None)
    out = []
    est_s = 0.0
    if "eager" in args.modes:
        sec = _guarded(f"{name} | dragon eager", lambda: dragon_eager(
            dg, name, factory, data, device, sync, args, budget))
        est_s = sec.get("step_s", est_s)
        out.append(sec)
    if "compiled" in args.modes:
        out.append(_guarded(f"{name} | dragon compiled", lambda: dragon_compiled(
            dg, name, factory, data, sync, args, budget, est_s)))
        est_s = est_s or out[-1].get("step_s", 0.0)
    torch_gpu = torch is not None and (not gpu or torch.cuda.is_available())
    if gpu and torch_gpu and "eager" in args.modes:
        title = f"{name} | dragon eager kernels (torch.profiler)"
        out.append(_guarded(title, lambda: _dragon_kernels(
            dg, torch, title, factory, data, device, args, budget, est_s)))
    title = f"{name} | torch eager"
    if torch_step is None or not torch_gpu:
        why = "torch is not installed" if torch is None else "torch sees no GPU"
        out.append(skipped(title, why))
    elif budget.left() < 5:
        out.append(skipped(title, f"{budget.left():.1f} s of the budget left"))
    else:
        out.append(_guarded(title, lambda: _torch_eager(torch, title, torch_step, device, args,
                                                        budget)))
    return out


# ------------------------------------------------------------ single ops
def op_cases(dg, torch, device: str, quick: bool) -> list:
    """(name, dragon fn, torch fn or None) for the memory-bound ops of the
    ResNet-18 / encoder steps at their step's shapes (batch 64; ``quick``:
    small shapes), same values on both sides."""
    rng = np.random.default_rng(0)
    big = (2, 8, 16, 16) if quick else (64, 64, 112, 112)
    mid = (2, 8, 8, 8) if quick else (64, 64, 56, 56)
    late = (2, 16, 7, 7) if quick else (64, 512, 7, 7)
    rows = (16, 256) if quick else (1024, 256)
    cases = []

    def both(shape, dtype=np.float32, scale=1.0):
        a = (rng.standard_normal(shape) * scale).astype(dtype)
        d = dg.tensor(a).to(device)
        t = torch.from_numpy(a).to(device) if torch is not None else None
        return d, t

    ops = dg.ops
    for shape in (big, late):
        c = shape[1]
        x, tx = both(shape)
        dy, tdy = both(shape)
        g, tg = both((c,))
        b, tb = both((c,))
        rm, trm = both((c,))
        rv = dg.tensor(np.ones(c, np.float32)).to(device)
        zc = dg.tensor(np.zeros(c, np.float32)).to(device)
        tag = "x".join(map(str, shape))
        tfwd = tbwd = None
        if torch is not None:
            trv = torch.ones(c, device=device)
            _, tsm, tsi = torch.ops.aten.native_batch_norm(tx, tg, tb, trm.clone(), trv.clone(),
                                                           True, 0.1, 1e-5)

            def tfwd(tx=tx, tg=tg, tb=tb, trm=trm, trv=trv):
                return torch.ops.aten.native_batch_norm(tx, tg, tb, trm, trv, True, 0.1, 1e-5)

            def tbwd(tx=tx, tg=tg, trm=trm, trv=trv, tdy=tdy, tsm=tsm, tsi=tsi):
                return torch.ops.aten.native_batch_norm_backward(
                    tdy, tx, tg, trm, trv, tsm, tsi, True, 1e-5, [True, True, True])
        cases.append((f"BatchNorm train {tag}",
                      lambda x=x, g=g, b=b, rm=rm, rv=rv: ops.batch_norm(x, g, b, rm, rv), tfwd))
        cases.append((f"BatchNormGrad train {tag}",
                      lambda x=x, g=g, rm=rm, rv=rv, dy=dy, zc=zc: ops.batch_norm_grad(
                          x, g, rm, rv, dy, zc, zc), tbwd))
    x, tx = both(big)
    dy, tdy = both(big)
    cases.append((f"Relu {'x'.join(map(str, big))}", lambda x=x: ops.relu(x),
                  (lambda tx=tx: torch.relu(tx)) if torch is not None else None))
    cases.append((f"ReluGrad {'x'.join(map(str, big))}", lambda x=x, dy=dy: ops.relu_grad(x, dy),
                  (lambda tx=tx, tdy=tdy: torch.ops.aten.threshold_backward(tdy, tx, 0.0))
                  if torch is not None else None))
    a, ta = both(mid)
    b2, tb2 = both(mid)
    cases.append((f"Add {'x'.join(map(str, mid))}", lambda a=a, b2=b2: a + b2,
                  (lambda ta=ta, tb2=tb2: ta + tb2) if torch is not None else None))
    pooled = (big[0], big[1], (big[2] - 1) // 2 + 1, (big[3] - 1) // 2 + 1)
    pdy, tpdy = both(pooled)
    tp = tpi = None
    if torch is not None:
        _, tidx = torch.ops.aten.max_pool2d_with_indices(tx, [3, 3], [2, 2], [1, 1])

        def tp(tx=tx):
            return torch.ops.aten.max_pool2d_with_indices(tx, [3, 3], [2, 2], [1, 1])

        def tpi(tx=tx, tpdy=tpdy, tidx=tidx):
            return torch.ops.aten.max_pool2d_with_indices_backward(
                tpdy, tx, [3, 3], [2, 2], [1, 1], [1, 1], False, tidx)
    cases.append((f"MaxPool2d k3s2p1 {'x'.join(map(str, big))}",
                  lambda x=x: dg.nn.functional.max_pool2d(x, 3, 2, 1), tp))
    cases.append((f"MaxPool2dGrad k3s2p1 {'x'.join(map(str, big))}",
                  lambda x=x, pdy=pdy: ops.max_pool2d_grad(x, pdy, [3, 3], [2, 2], [1, 1]), tpi))
    x, tx = both(late)
    gdy, tgdy = both(late[:2] + (1, 1))
    cases.append((f"AdaptiveAvgPool2d {'x'.join(map(str, late))}",
                  lambda x=x: dg.nn.functional.adaptive_avg_pool2d(x, 1),
                  (lambda tx=tx: torch.nn.functional.adaptive_avg_pool2d(tx, 1))
                  if torch is not None else None))
    cases.append((f"AdaptiveAvgPool2dGrad {'x'.join(map(str, late))}",
                  lambda x=x, gdy=gdy: ops.adaptive_avg_pool2d_grad(x, gdy, [1, 1]),
                  (lambda tx=tx, tgdy=tgdy: torch.ops.aten._adaptive_avg_pool2d_backward(tgdy, tx))
                  if torch is not None else None))
    n, k = (8, 100) if quick else (64, 1000)
    lg, tlg = both((n, k), scale=3.0)
    tgt = rng.integers(0, k, n).astype(np.int64)
    dt = dg.tensor(tgt).to(device)
    tt = torch.from_numpy(tgt).to(device) if torch is not None else None
    cases.append((f"SoftmaxCrossEntropy {n}x{k}", lambda lg=lg, dt=dt: ops.softmax_cross_entropy(
        lg, dt), (lambda tlg=tlg, tt=tt: torch.nn.functional.cross_entropy(tlg, tt))
        if torch is not None else None))
    cases.append((f"Softmax {n}x{k}", lambda lg=lg: ops.softmax(lg, axis=-1),
                  (lambda tlg=tlg: torch.softmax(tlg, -1)) if torch is not None else None))
    cases.append((f"Sum axis 0 {n}x{k}", lambda lg=lg: ops.sum(lg, axis=0),
                  (lambda tlg=tlg: torch.sum(tlg, 0)) if torch is not None else None))
    x, tx = both(rows)
    dy, tdy = both(rows)
    g, tg = both(rows[1:])
    b, tb = both(rows[1:])
    tln = tlnb = None
    if torch is not None:
        _, tmean, trstd = torch.ops.aten.native_layer_norm(tx, [rows[1]], tg, tb, 1e-5)

        def tln(tx=tx, tg=tg, tb=tb):
            return torch.ops.aten.native_layer_norm(tx, [rows[1]], tg, tb, 1e-5)

        def tlnb(tx=tx, tg=tg, tb=tb, tdy=tdy, tmean=tmean, trstd=trstd):
            return torch.ops.aten.native_layer_norm_backward(tdy, tx, [rows[1]], tmean, trstd,
                                                             tg, tb, [True, True, True])
    cases.append((f"LayerNorm {rows[0]}x{rows[1]}", lambda x=x, g=g, b=b: ops.layer_norm(x, g, b),
                  tln))
    cases.append((f"LayerNormGrad {rows[0]}x{rows[1]}",
                  lambda x=x, g=g, dy=dy: ops.layer_norm_grad(x, g, dy), tlnb))
    return cases


def _device_ms(torch, fn, calls: int, device: str) -> float:
    """Device time of one call of ``fn``: the sum of the kernels' durations
    over ``calls`` calls (CUPTI, through torch.profiler) / calls; wall time
    on the CPU."""
    if device == "cpu" or torch is None:
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        return (time.perf_counter() - t0) * 1e3 / calls
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    us = sum(e.time_range.elapsed_us() for e in prof.events()
             if e.device_type != DeviceType.CPU and not getattr(e, "is_user_annotation", False))
    return us / 1e3 / calls


def run_ops(dg, torch, device, args) -> dict:
    """The single-op table: Dragon's and torch's device time per call,
    alternating rounds (each side keeps its best), and the ratio."""
    sync = (lambda: dg.synchronize(device)) if device != "cpu" else (lambda: None)
    rows = []
    print("\n== single ops: device time per call (kernels only, CUPTI; best of "
          f"{args.rounds} alternating rounds) ==")
    print(f"{'op':<44} {'dragon ms':>10} {'torch ms':>10} {'ratio':>7}")
    for name, dfn, tfn in op_cases(dg, torch if device != "cpu" else None, device, args.quick):
        try:
            dfn()
            if tfn is not None:
                tfn()
            sync()
            best_d = best_t = float("inf")
            for _ in range(args.rounds):
                best_d = min(best_d, _device_ms(torch, dfn, args.calls, device))
                if tfn is not None:
                    best_t = min(best_t, _device_ms(torch, tfn, args.calls, device))
            tms = best_t if tfn is not None else None
            ratio = f"{best_d / tms:7.2f}" if tms else "      -"
            print(f"{name:<44} {best_d:>10.4f} "
                  f"{(f'{tms:.4f}' if tms is not None else '-'):>10} {ratio}")
            rows.append({"name": name, "dragon_ms": best_d, "torch_ms": tms})
        except Exception as exc:  # noqa: BLE001 - one op's failure is a row
            print(f"{name:<44} ERROR {type(exc).__name__}: {str(exc)[:200]}")
            rows.append({"name": name, "error": f"{type(exc).__name__}: {exc}"})
    return {"title": "single ops", "rows": rows}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default) or cpu")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes (ResNet batch 2 of 32x32, MLP batch 16)")
    parser.add_argument("--batch", type=int, help="ResNet batch (default 64; cpu: 4)")
    parser.add_argument("--hw", type=int, help="ResNet image side (default 224; cpu: 64)")
    parser.add_argument("--only", default=",".join(WORKLOADS),
                        help=f"comma-separated workloads of {', '.join(WORKLOADS)}")
    parser.add_argument("--modes", default=",".join(MODES), help="eager,compiled")
    parser.add_argument("--runs", type=int, default=5, help="most steps timed per section")
    parser.add_argument("--top", type=int, default=15, help="rows per table")
    parser.add_argument("--budget", type=float, default=55.0, help="seconds for the whole run")
    parser.add_argument("--no-torch", action="store_true", help="leave torch out")
    parser.add_argument("--json", help="also write every table to this file")
    parser.add_argument("--ops", action="store_true",
                        help="only the single-op table (BatchNorm, pools, ReLU, Add, losses, "
                             "LayerNorm at the steps' shapes, Dragon beside torch)")
    parser.add_argument("--rounds", type=int, default=3, help="--ops: alternating rounds")
    parser.add_argument("--calls", type=int, default=20, help="--ops: calls per round")
    args = parser.parse_args(argv)
    args.only = [w.strip() for w in args.only.split(",") if w.strip()]
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [w for w in args.only if w not in WORKLOADS] + [m for m in args.modes
                                                          if m not in MODES]
    if bad or args.runs < 1 or args.top < 1:
        parser.error(f"unknown workload/mode {bad} (workloads {WORKLOADS}, modes {MODES}), "
                     "or --runs/--top below 1")
    budget = Budget(args.budget)
    import dragon_core as dg
    device = args.device
    gpu = device != "cpu"
    if gpu and not dg.cuda.is_available():
        print(f"no cuda device: {dg.cuda.unavailable_reason()} (use --device cpu to check "
              "the tool)")
        return 1
    torch = None
    if not args.no_torch:
        try:
            import torch
            torch.backends.cudnn.allow_tf32 = False  # float32 is float32 on both sides
            torch.backends.cuda.matmul.allow_tf32 = False
        except ImportError:
            torch = None
    if args.quick:
        batch, hw, mlp_batch = args.batch or 2, args.hw or 32, 16
    else:
        batch = args.batch or (64 if gpu else 4)
        hw = args.hw or (224 if gpu else 64)
        mlp_batch = 128
    dev_name = dg.cuda.get_device_name(0) if gpu else "cpu"
    print(f"profile_gpu: device {device} ({dev_name}); torch "
          f"{getattr(torch, '__version__', 'absent')}; ResNet-18 batch {batch} of 3x{hw}x{hw}, "
          f"MLP batch {mlp_batch}; budget {args.budget:.0f} s")
    sections = []
    if args.ops:
        sections.append(run_ops(dg, torch, device, args))
        args.only = []
    for k, w in enumerate(args.only):
        if budget.left() <= 0:
            sections.append(skipped(w, "the time budget is spent"))
            continue
        # Each workload gets its weight's part of what is left, so a slow
        # one cannot starve the next (MLP steps are short).
        weights = [WEIGHTS[x] for x in args.only[k:]]
        part = Budget(budget.left() * weights[0] / sum(weights))
        try:
            if w == "mlp":
                name = f"mlp_784_512_512_10 b{mlp_batch} f32"
                factory, data, tstep = build_mlp(dg, torch, device, mlp_batch)
            else:
                prec = "bfloat16" if w == "resnet_bf16" else "float32"
                label = "bf16 autocast" if prec == "bfloat16" else "f32"
                name = f"resnet18 b{batch} {hw}x{hw} {label}"
                factory, data, tstep = build_resnet(dg, torch, device, prec, batch, hw)
            sections += run_workload(name, dg, torch, factory, data, tstep, device, args, part)
        except Exception as exc:  # one workload's failure must not hide the others
            sections.append(skipped(w, f"ERROR {type(exc).__name__}: {str(exc)[:400]}"))
    print(f"\nprofile_gpu: done in {args.budget - budget.left():.1f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": dev_name, "sections": sections}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
