"""GPU benchmarks: the cuda plugin beside torch on the same GPU, same run.

The rows are the performance table of issue 15 (the cuda plugin). Every
workload runs on Dragon's ``cuda`` device and, when torch sees a GPU, on
torch's in the same process, interleaved with it; a row's target is the
issue's goal applied to torch's figure *from this run* (the issue's
H100 figure when torch has no GPU here). Every result is checked against
torch (or NumPy) before it is timed, so a wrong kernel reports WRONG, not
a fast time. GPU work is asynchronous: each timed run ends with a device
synchronisation, so wall time covers the work.

``add_1elem``
    Eager ``a + b`` on one-element float32 tensors, wall µs per op (a run
    of ops, then one synchronisation). Goal: <= torch.
``matmul_4096_bf16`` / ``matmul_4096_f32``
    4096x4096 @ 4096x4096, TFLOP/s (float32 without TF32, torch's default
    too). Goal: >= 0.95x torch. Every float32 row runs torch with TF32 off
    (``torch.backends.cudnn.allow_tf32 = False``: torch's convolutions
    would otherwise use TF32 by default), as Dragon's float32 is.
``conv_fwdbwd_b8_64x56_f32``
    3x3 convolution, pad 1, 64 -> 64 channels, batch 8 of 56x56, forward
    plus input and filter gradients, ms. Goal: <= 1.1x torch.
    A second Dragon row runs with ``DRAGON_CUDNN_DETERMINISTIC=0``
    (cuDNN's atomic algorithms allowed, as torch's default; Dragon's default
    takes deterministic algorithms only).
``resnet18_train_b64_224_f32`` / ``resnet18_train_b64_224_bf16``
    One ResNet-18 training step (``bench/models/resnet.py``, SGD with
    momentum, cross-entropy) on a batch of 64 3x224x224 images, ms: float32,
    and bfloat16 autocast, channels-last in both libraries (model and
    images; Dragon's cuDNN convolutions read and write NHWC natively, see
    docs/cuda.md). Goal: <= 1.1x torch. float32 has a second
    Dragon row with ``DRAGON_CUDNN_DETERMINISTIC=0`` (a model of its own).
``mlp_train_784_512_512_10``
    MLP 784-512-512-10 (ReLU, SGD, cross-entropy), batch 128, training
    steps/s: Dragon eager and compiled (``@dg.function``, which replays a
    CUDA Graph once warm; its note says whether it did, or why not), and
    compiled with ``cuda_graph=False`` (op by op) in the same run. Goals:
    eager >= torch eager, compiled >= 2x torch eager.
``nms_5000`` / ``roi_align_512x7x7``
    dragon_vision_ops' ``nms`` of 5,000 boxes (IoU 0.5) and ``roi_align``
    of 512 rois to 7x7 bins over a 2x256x64x64 float32 map, ms, beside
    torchvision. Goal: <= torchvision.

Without a cuda device every row is SKIP with the device's reason (the path
``make test`` checks). ``DRAGON_BENCH_GPU_BUDGET_S`` (default 150) bounds
the module's time: rows left when it is spent are SKIP with a note.
``DRAGON_BENCH_GPU_DEVICE=cpu`` runs the same code on the CPU (Dragon and
torch), to check the module itself where there is no GPU; its numbers mean
nothing for the table.

Run alone with ``python bench/bench_gpu.py [--quick]``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import result, skip_note, try_import  # noqa: E402
import _gpu_models as gpu_models  # noqa: E402

# ------------------------------------------------------------------ the table
#: bench -> (metric, better, torch's H100 figure from the issue, goal as a
#: factor of torch's figure). "lower": value <= factor * torch;
#: "higher": value >= factor * torch.
TABLE = {
    "add_1elem": ("us/op", "lower", 7.8, 1.0),
    "matmul_4096_bf16": ("TFLOP/s", "higher", 771.0, 0.95),
    "matmul_4096_f32": ("TFLOP/s", "higher", 51.4, 0.95),
    "conv_fwdbwd_b8_64x56_f32": ("ms", "lower", 0.211, 1.1),
    "resnet18_train_b64_224_bf16": ("ms", "lower", 7.67, 1.1),
    "resnet18_train_b64_224_f32": ("ms", "lower", 14.8, 1.1),
    "mlp_train_784_512_512_10": ("steps/s", "higher", 889.0, 1.0),
    "nms_5000": ("ms", "lower", 1.60, 1.0),
    "roi_align_512x7x7": ("ms", "lower", 0.16, 1.0),
}
#: Dragon's implementations per bench (the rows SKIP lists when no GPU).
DRAGON_IMPLS = {
    "add_1elem": ["dg.ops.add eager"],
    "matmul_4096_bf16": ["dg.ops.matmul"],
    "matmul_4096_f32": ["dg.ops.matmul"],
    "conv_fwdbwd_b8_64x56_f32": ["conv2d + dg.grad(x, w) eager",
                                 "conv2d + dg.grad(x, w) eager, DRAGON_CUDNN_DETERMINISTIC=0"],
    "resnet18_train_b64_224_bf16": ["eager step, autocast bfloat16, channels-last"],
    "resnet18_train_b64_224_f32": ["eager step", "eager step, DRAGON_CUDNN_DETERMINISTIC=0"],
    "mlp_train_784_512_512_10": ["eager step", "@dg.function step (compiled)",
                                 "@dg.function step (compiled, cuda_graph=False)"],
    "nms_5000": ["dragon_vision_ops.nms"],
    "roi_align_512x7x7": ["dragon_vision_ops.roi_align"],
}
#: The compiled MLP's goal is twice torch's eager steps/s.
COMPILED_MLP_FACTOR = 2.0

#: The device under test: "cuda", or "cpu" to check the module without a GPU.
DEVICE = os.environ.get("DRAGON_BENCH_GPU_DEVICE", "cuda")

MLP_BATCH = 128
RES_BATCH, RES_HW, RES_CLASSES = 64, 224, 1000


def target_for(bench: str, torch_value: float | None, impl: str = "") -> float:
    """The goal of a Dragon row: the issue's factor times torch's figure from
    this run, or times the issue's figure when torch did not run."""
    _, _, figure, factor = TABLE[bench]
    if bench == "mlp_train_784_512_512_10" and "compiled" in impl:
        factor = COMPILED_MLP_FACTOR
    return factor * (torch_value if torch_value is not None else figure)


def matmul_tflops(n: int, seconds: float) -> float:
    """TFLOP/s of an n x n @ n x n product done in ``seconds``."""
    return 2.0 * n ** 3 / seconds / 1e12


def skip_rows(note: str, torch_too: bool = True) -> list[dict]:
    """Every row of the table as SKIP with ``note``."""
    rows = []
    for bench, impls in DRAGON_IMPLS.items():
        metric, better, _, _ = TABLE[bench]
        for impl in impls:
            rows.append(result(bench, impl, "dragon", metric, None, better, status="SKIP",
                               note=note))
        if torch_too:
            rows.append(result(bench, "-", "torch", metric, None, better, status="SKIP",
                               note=note))
    return rows


class Budget:
    """A deadline for the module; rows past it are skipped, not cut off."""

    def __init__(self, seconds: float):
        self.end = time.monotonic() + seconds
        self.seconds = seconds

    def left(self) -> float:
        return self.end - time.monotonic()


def time_runs(fn, sync, budget: Budget, min_run_s: float = 0.2, runs: int = 5,
              max_reps: int = 200, slow_s: float = 5.0) -> tuple[float, str]:
    """Best seconds per call of ``fn`` over ``runs`` runs, each ``reps``
    calls then ``sync()``; reps and runs shrink to fit the budget. Returns
    (seconds, note): a call slower than ``slow_s`` (or than what is left of
    the budget) is timed once after its warm-up, and the note says so."""
    t0 = time.perf_counter()
    fn()
    sync()  # warm-up: plans, cuBLAS handles, allocator pools
    warm = time.perf_counter() - t0
    if warm > slow_s or 2 * warm > budget.left():
        return warm, f"one call timed, warm-up included ({warm:.2f} s): too slow to repeat"
    t0 = time.perf_counter()
    fn()
    sync()
    once = max(time.perf_counter() - t0, 1e-7)
    if once > slow_s or 2 * once > budget.left():
        return once, "one call timed after the warm-up: too slow to repeat"
    reps = int(max(1, min(max_reps, min_run_s / once)))
    runs = int(max(1, min(runs, budget.left() / 4 / (once * reps + 1e-9))))
    best = float("inf")
    for _ in range(runs):
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (time.perf_counter() - t0) / reps)
    return best, ""


def _host(t) -> np.ndarray:
    """A Dragon tensor's values on the host (16-bit floats as float32)."""
    t = t.to("cpu")
    if t.dtype.name in ("float16", "bfloat16"):
        t = t.to("float32")
    return np.asarray(t.numpy())


def _close(got, want, rtol, atol) -> bool:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol))


# ------------------------------------------------------------------ workloads
# Each builder returns {library: (impl, fn, check)}: ``fn()`` runs the
# workload once (asynchronously), ``check(out)`` says whether ``fn()``'s
# output is right. Builders get ``ctx`` (dg, torch or None, quick).

def _add_1elem(ctx):
    dg, torch = ctx["dg"], ctx["torch"]
    a, b = (dg.tensor(np.array([v], np.float32)).to(DEVICE) for v in (1.5, 2.0))
    out = {"dragon": ("dg.ops.add eager", lambda: dg.ops.add(a, b),
                      lambda y: _close(_host(y), [3.5], 0, 0))}
    if torch is not None:
        ta, tb = (torch.tensor([v], device=DEVICE) for v in (1.5, 2.0))
        out["torch"] = ("a + b eager", lambda: ta + tb,
                        lambda y: _close(y.cpu().numpy(), [3.5], 0, 0))
    return out


def _matmul(dtype):
    def build(ctx):
        dg, torch = ctx["dg"], ctx["torch"]
        n = 1024 if ctx["quick"] else 4096
        rng = np.random.default_rng(3)
        a, b = (rng.uniform(-1, 1, (n, n)).astype(np.float32) for _ in range(2))
        want = a[:64].astype(np.float64) @ b[:, :64].astype(np.float64)
        tol = (5e-2, 5e-1) if dtype == "bfloat16" else (1e-3, 1e-3)
        da, db = (dg.ops.cast(dg.tensor(v), dtype=dtype).to(DEVICE) for v in (a, b))

        def dcheck(y):
            return _close(_host(y)[:64, :64], want, *tol)
        out = {"dragon": ("dg.ops.matmul", lambda: dg.ops.matmul(da, db), dcheck)}
        if torch is not None:
            tdt = getattr(torch, dtype)
            ta, tb = (torch.from_numpy(v).to(DEVICE, tdt) for v in (a, b))
            out["torch"] = ("torch.matmul", lambda: torch.matmul(ta, tb),
                            lambda y: _close(y[:64, :64].float().cpu().numpy(), want, *tol))
        ctx["flops_n"] = n
        return out
    return build


def _nondeterministic(fn):
    """``fn`` run with DRAGON_CUDNN_DETERMINISTIC=0 (read per call by the
    cuda plugin: cuDNN's atomic algorithms allowed, as torch's default)."""
    def run():
        old = os.environ.get("DRAGON_CUDNN_DETERMINISTIC")
        os.environ["DRAGON_CUDNN_DETERMINISTIC"] = "0"
        try:
            return fn()
        finally:
            if old is None:
                del os.environ["DRAGON_CUDNN_DETERMINISTIC"]
            else:
                os.environ["DRAGON_CUDNN_DETERMINISTIC"] = old
    return run


NONDET = ", DRAGON_CUDNN_DETERMINISTIC=0"


def _conv_fwdbwd(ctx):
    dg, torch = ctx["dg"], ctx["torch"]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    w = (rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32)
    dy = rng.standard_normal((8, 64, 56, 56)).astype(np.float32)
    gx, gw, gdy = (dg.tensor(v).to(DEVICE) for v in (x, w, dy))
    gx.requires_grad_(True)
    gw.requires_grad_(True)

    def dragon():
        y = dg.nn.functional.conv2d(gx, gw, padding=1)
        return dg.grad([y], [gx, gw], grad_outputs=[gdy])
    out = {"dragon": ("conv2d + dg.grad(x, w) eager", dragon, None),
           "dragon:nondet": ("conv2d + dg.grad(x, w) eager" + NONDET, _nondeterministic(dragon),
                             None)}
    if torch is not None:
        tx, tw, tdy = (torch.from_numpy(v).to(DEVICE) for v in (x, w, dy))
        tx.requires_grad_(True)
        tw.requires_grad_(True)

        def torch_fn():
            y = torch.nn.functional.conv2d(tx, tw, padding=1)
            return torch.autograd.grad(y, (tx, tw), tdy)
        ref = [g.cpu().numpy() for g in torch_fn()]
        out["torch"] = ("conv2d + autograd.grad(x, w) eager", torch_fn, None)
        check = (lambda gs: all(_close(_host(g), r, 1e-3, 1e-3) for g, r in zip(gs, ref)))
        out["dragon"] = (out["dragon"][0], dragon, check)
        out["dragon:nondet"] = (out["dragon:nondet"][0], out["dragon:nondet"][1], check)
    return out


def _resnet(precision):
    def build(ctx):
        dg, torch = ctx["dg"], ctx["torch"]
        batch, hw = (4, 64) if ctx["quick"] else (RES_BATCH, RES_HW)
        x, y = gpu_models.resnet_inputs(batch, hw)
        state = gpu_models.resnet_state(dg, torch)
        bf16 = precision == "bfloat16"
        dx, dy = dg.tensor(x).to(DEVICE), dg.tensor(y).to(DEVICE)
        if bf16:  # channels-last, as torch's row
            dx = dx.to(memory_format=dg.channels_last)

        def dragon_step():  # a model of its own per row: each row's first loss is checked
            step = gpu_models.dragon_resnet(dg, state, DEVICE, bf16, channels_last=bf16)
            return lambda: step(dx, dy)
        impl = "eager step, autocast bfloat16, channels-last" if bf16 else "eager step"
        out = {"dragon": (impl, dragon_step(), None)}
        if not bf16:
            out["dragon:nondet"] = (impl + NONDET, _nondeterministic(dragon_step()), None)
        if torch is not None:
            # The first step's loss (same weights and data) before any update.
            torch_fn, first = gpu_models.torch_resnet(torch, state, x, y, DEVICE, bf16)
            tol = 5e-2 if bf16 else 1e-3
            out["torch"] = ("eager step, autocast bfloat16, channels-last" if bf16
                            else "eager step", torch_fn, None)
            check = (lambda loss, first=first, tol=tol: _close(float(_host(loss)), first, tol,
                                                               tol))
            for key in [k for k in out if k.startswith("dragon")]:
                out[key] = (out[key][0], out[key][1], check)
        return out
    return build


def _mlp(ctx):
    dg, torch = ctx["dg"], ctx["torch"]
    ws, bs, x, y = gpu_models.mlp_inputs(MLP_BATCH)
    dx, dy = dg.tensor(x).to(DEVICE), dg.tensor(y).to(DEVICE)

    def dragon_step(compiled, cuda_graph=True):
        step = gpu_models.dragon_mlp(dg, ws, bs, DEVICE)
        if not compiled:
            return (lambda: step(dx, dy)), None
        f = dg.function(step, cuda_graph=cuda_graph)

        def graph_note():
            st = f.cuda_graph_status(dx, dy)
            if not st["enabled"]:
                return "CUDA Graph off"
            if st["state"] == "replayed":
                return f"ran as a CUDA Graph ({st['replays']} replays)"
            return f"not a CUDA Graph: {st['state']}" + (f" ({st['reason']})" if st["reason"]
                                                         else "")
        return (lambda: f(dx, dy)), graph_note
    eager, _ = dragon_step(False)
    graphed, graph_note = dragon_step(True)
    plain, plain_note = dragon_step(True, cuda_graph=False)
    out = {"dragon": ("eager step", eager, None),
           "dragon:compiled": ("@dg.function step (compiled)", graphed, None, graph_note),
           "dragon:compiled-nograph": ("@dg.function step (compiled, cuda_graph=False)", plain,
                                       None, plain_note)}
    if torch is not None:
        torch_fn, first = gpu_models.torch_mlp(torch, ws, bs, x, y, DEVICE)
        out["torch"] = ("eager step", torch_fn, None)
        check = (lambda loss, first=first: _close(float(_host(loss)), first, 1e-4, 1e-4))
        for key in ("dragon", "dragon:compiled", "dragon:compiled-nograph"):
            out[key] = (out[key][0], out[key][1], check) + tuple(out[key][3:])
    return out


def _vision(which):
    def build(ctx):
        dg, torch = ctx["dg"], ctx["torch"]
        vops = try_import("dragon_vision_ops")
        if vops is None:
            raise RuntimeError(skip_note("dragon_vision_ops"))
        tv = try_import("torchvision") if torch is not None else None
        if torch is not None and tv is None:
            ctx.setdefault("torch_notes", {})[ctx["bench"]] = skip_note("torchvision")
        rng = np.random.default_rng(6)
        if which == "nms":
            xy = rng.uniform(0, 1000, (5000, 2))
            wh = rng.uniform(10, 120, (5000, 2))
            boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
            scores = rng.uniform(0, 1, 5000).astype(np.float32)
            db, ds = dg.tensor(boxes).to(DEVICE), dg.tensor(scores).to(DEVICE)
            out = {"dragon": ("dragon_vision_ops.nms", lambda: vops.nms(db, ds, 0.5), None)}
            if tv is not None:
                tb, ts = torch.from_numpy(boxes).to(DEVICE), torch.from_numpy(scores).to(DEVICE)
                keep = tv.ops.nms(tb, ts, 0.5).cpu().numpy()
                out["torch"] = ("torchvision.ops.nms", lambda: tv.ops.nms(tb, ts, 0.5), None)
                out["dragon"] = (out["dragon"][0], out["dragon"][1],
                                 lambda k: np.array_equal(_host(k), keep))
            return out
        feat = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
        xy = rng.uniform(0, 200, (512, 2))
        wh = rng.uniform(8, 56, (512, 2))
        rois = np.concatenate([rng.integers(0, 2, (512, 1)), xy, xy + wh], 1).astype(np.float32)
        df, dr = dg.tensor(feat).to(DEVICE), dg.tensor(rois).to(DEVICE)
        args = dict(output_size=(7, 7), spatial_scale=0.25, sampling_ratio=2, aligned=True)
        out = {"dragon": ("dragon_vision_ops.roi_align",
                          lambda: vops.roi_align(df, dr, **args), None)}
        if tv is not None:
            tf, tr = torch.from_numpy(feat).to(DEVICE), torch.from_numpy(rois).to(DEVICE)
            want = tv.ops.roi_align(tf, tr, **args).cpu().numpy()
            out["torch"] = ("torchvision.ops.roi_align",
                            lambda: tv.ops.roi_align(tf, tr, **args), None)
            out["dragon"] = (out["dragon"][0], out["dragon"][1],
                             lambda t: _close(_host(t), want, 1e-4, 1e-5))
        return out
    return build


BUILDERS = {
    "add_1elem": _add_1elem,
    "matmul_4096_bf16": _matmul("bfloat16"),
    "matmul_4096_f32": _matmul("float32"),
    "conv_fwdbwd_b8_64x56_f32": _conv_fwdbwd,
    "mlp_train_784_512_512_10": _mlp,
    "nms_5000": _vision("nms"),
    "roi_align_512x7x7": _vision("roi_align"),
    "resnet18_train_b64_224_f32": _resnet("float32"),
    "resnet18_train_b64_224_bf16": _resnet("bfloat16"),
}


def _to_value(bench: str, seconds: float, ctx: dict) -> float:
    metric = TABLE[bench][0]
    if metric == "us/op":
        return seconds * 1e6
    if metric == "ms":
        return seconds * 1e3
    if metric == "steps/s":
        return 1.0 / seconds
    return matmul_tflops(ctx.get("flops_n", 4096), seconds)


def _bench_rows(bench: str, ctx: dict, budget: Budget) -> list[dict]:
    metric, better, _, _ = TABLE[bench]
    dg, torch = ctx["dg"], ctx["torch"]
    ctx["bench"] = bench
    impls = BUILDERS[bench](ctx)
    gpu = DEVICE == "cuda"
    dsync = (lambda: dg.cuda.synchronize()) if gpu else (lambda: None)  # noqa: E731
    tsync = (lambda: torch.cuda.synchronize()) if gpu else (lambda: None)  # noqa: E731
    rows, torch_value = [], None
    # torch first: its figure sets Dragon's targets.
    order = sorted(impls, key=lambda k: (k != "torch", k))
    for key in order:
        impl, fn, check, *extra = impls[key]
        note_fn = extra[0] if extra else None  # says how the row ran (after timing)
        library = "torch" if key == "torch" else "dragon"
        if budget.left() <= 0:
            rows.append(result(bench, impl, library, metric, None, better, status="SKIP",
                               note=f"the module's time budget ({budget.seconds:.0f} s, "
                                    "DRAGON_BENCH_GPU_BUDGET_S) was spent"))
            continue
        target = None if library == "torch" else target_for(bench, torch_value, impl)
        try:
            if check is not None and not check(fn()):
                rows.append(result(bench, impl, library, metric, None, better, target,
                                   status="WRONG", note=f"{bench}: {impl} disagrees with "
                                   "torch/NumPy; not timed"))
                continue
            s, timing_note = time_runs(fn, dsync if library == "dragon" else tsync, budget,
                                       min_run_s=0.05 if ctx["quick"] else 0.2,
                                       runs=2 if ctx["quick"] else 5)
        except Exception as exc:  # a row's failure must not stop the table
            rows.append(result(bench, impl, library, metric, None, better, target,
                               status="ERROR", note=f"{bench} ({library}): "
                               f"{type(exc).__name__}: {str(exc)[:300]}"))
            continue
        value = _to_value(bench, s, ctx)
        if library == "torch":
            torch_value = value
        notes = [n for n in (timing_note, note_fn() if note_fn else "") if n]
        rows.append(result(bench, impl, library, metric, value, better, target,
                           note=f"{bench} ({library}): {'; '.join(notes)}" if notes else "",
                           device=ctx["device_name"]))
    if "torch" not in impls:
        rows.append(result(bench, "-", "torch", metric, None, better, status="SKIP",
                           note=ctx.get("torch_notes", {}).get(bench, ctx["torch_note"])))
    return rows


def run(quick: bool = False, only=None) -> list[dict]:
    """The rows of the table (see the module docs); all SKIP without a
    cuda device. ``only``: the benches to run (default all)."""
    dg = try_import("dragon_core")
    if dg is None:
        return skip_rows(skip_note("dragon_core"))
    if DEVICE == "cuda" and not dg.cuda.is_available():
        return skip_rows(f"no cuda device: {dg.cuda.unavailable_reason()}")
    torch = try_import("torch")
    torch_note = ""
    if torch is None:
        torch_note = skip_note("torch") + "; the targets use the issue's H100 figures"
    elif DEVICE == "cuda" and not torch.cuda.is_available():
        torch, torch_note = None, ("torch sees no GPU; the targets use the issue's H100 "
                                   "figures")
    if torch is not None:
        # float32 means float32 on both sides: torch's convolutions default to
        # TF32 on Ampere and later (its matmuls do not); Dragon's float32 is
        # TF32 only with DRAGON_CUDA_ALLOW_TF32=1.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    budget = Budget(float(os.environ.get("DRAGON_BENCH_GPU_BUDGET_S", "150")))
    ctx = {"dg": dg, "torch": torch, "quick": quick, "torch_note": torch_note,
           "device_name": dg.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE}
    rows = []
    for bench in BUILDERS:
        if only is not None and bench not in only:
            continue
        try:
            rows += _bench_rows(bench, ctx, budget)
        except Exception as exc:  # the builder itself failed
            metric, better, _, _ = TABLE[bench]
            rows.append(result(bench, "setup", "dragon", metric, None, better, status="ERROR",
                               note=f"{bench}: {type(exc).__name__}: {str(exc)[:300]}"))
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="short runs, smaller sizes")
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = run(quick=args.quick)
    for r in rows:
        value = "-" if r["value"] is None else f"{r['value']:.4g} {r['metric']}"
        target = "" if r["target"] is None else f" (target {r['target']:.4g})"
        print(f"{r['bench']:30s} {r['library']:7s} {r['impl']:42s} {value:>16s}{target} "
              f"{r['status']}" + (f"  {r['note']}" if r["note"] else ""))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
