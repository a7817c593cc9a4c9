"""Training workloads beside torch in the same run (issue 21, point 3).

``encoder_train``
    One training step of a BERT-style encoder layer (bench/models/bert.py:
    batch 8, sequence 128, hidden 256, 4 heads, GELU MLP x4, post
    LayerNorm), MSE loss against a fixed target, Adam (lr 1e-4). Dragon
    eager and ``@dg.function`` (the whole step, optimizer included), float32
    and bfloat16 autocast (``dg.autocast("cpu")`` / ``torch.autocast``);
    torch eager and, where it runs, ``torch.compile``.
``resnet18_train``
    One training step of ResNet-18 (bench/models/resnet.py) on 8 x 3x64x64,
    1000 classes, cross-entropy, SGD momentum 0.9 (lr 0.01), batch norm in
    training mode: Dragon compiled and eager vs torch eager.

Every configuration starts from the same weights; its losses over the first
steps are checked against torch's in the same precision (float32: rtol
1e-3; bfloat16: rtol 4e-2, bfloat16's 8-bit significand through a layer)
before it is timed. The configurations of one workload are timed
round-robin (20 rounds of about 0.25 s, each configuration once per
round), so a change of the shared machine's speed hits them alike. Rows
give each configuration's median round in steps/s (its best round is
stored as ``steps_per_s_best``). ``ratio`` rows give Dragon's speed over
torch eager's (and torch.compile's) as the median over rounds of the
per-round ratio: round i of two configurations ran about a second apart,
so each ratio compares them in the same state of the host, whose speed
changes for seconds at a time (docs/benchmarks.md, sessions 18 and 19).
The ratio of the best rounds is stored as ``best_of_rounds`` beside it.
Before each round the two CPUs' placement is probed (bench/placement.py: a
cache-line round trip, ~60 ns when the host put them on one die, ~400 ns on
two, where every step here runs slower); the ratio rows give the rounds'
count per placement and the median ratio of each (``by_placement``).
Everything runs inside ``_harness.steady_malloc``: torch's CPU tensors come
from glibc's malloc, whose large blocks cost page faults or not depending on
what the process did before (torch eager's bfloat16 step ran 21-23 or 19.6
ms per step by that alone); held in its fast state, torch is timed at its
best whatever ran before (Dragon's tensors come from its own pool).
``python bench/bench_workloads.py --profile`` prints the per-op profile of
each compiled Dragon step (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import placement  # noqa: E402
from _harness import best_seconds, result, skip_note, steady_malloc, try_import  # noqa: E402
from models import bert, resnet  # noqa: E402

BATCH, SEQ, HIDDEN, HEADS = 8, 128, 256, 4
RES_BATCH, RES_HW, RES_CLASSES = 8, 64, 1000
CHECK_STEPS = 3
RTOL = {"float32": 1e-3, "bfloat16": 4e-2}


# ------------------------------------------------------------------ builders
def _encoder_data():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    t = rng.standard_normal((BATCH, SEQ, HIDDEN)).astype(np.float32)
    return x, t


def encoder_state(torch) -> dict:
    """The encoder layer's starting weights (name -> float32 array), the
    same for every configuration."""
    shapes = {k: tuple(v.shape) for k, v in
              bert.encoder_layer(torch.nn, bert.torch_f(), HIDDEN, HEADS).state_dict().items()}
    return bert.random_state(shapes)


def dragon_encoder_step(dg, state, precision: str, compiled: bool):
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    opt = dg.optim.Adam(list(model.parameters()), lr=1e-4)
    bf16 = precision == "bfloat16"

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=bf16):
            out = model(x)
            loss = dg.nn.functional.mse_loss(out, t)
        loss.backward()
        opt.step()
        return loss
    return (dg.function(step) if compiled else step), model


def torch_encoder_step(torch, state, precision: str, compiled: bool):
    model = bert.encoder_layer(torch.nn, bert.torch_f(), HIDDEN, HEADS)
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    bf16 = precision == "bfloat16"

    def step(x, t):
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            loss = torch.nn.functional.mse_loss(out.float(), t)
        loss.backward()
        opt.step()
        return loss
    return torch.compile(step) if compiled else step


def _resnet_data():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((RES_BATCH, 3, RES_HW, RES_HW)).astype(np.float32)
    y = rng.integers(0, RES_CLASSES, RES_BATCH).astype(np.int64)
    return x, y


def dragon_resnet_step(dg, state, compiled: bool):
    model = resnet.resnet18(dg.nn, RES_CLASSES)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    model.train()
    opt = dg.optim.SGD(list(model.parameters()), lr=0.01, momentum=0.9)
    loss_fn = dg.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return dg.function(step) if compiled else step


def torch_resnet_step(torch, state):
    model = resnet.resnet18(torch.nn, RES_CLASSES)
    sd = model.state_dict()
    sd.update({k: torch.from_numpy(v.copy()) for k, v in state.items()})
    model.load_state_dict(sd)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


# -------------------------------------------------------------------- timing
def _check(bench, impl, library, step, args, to_float, ref, rtol):
    """None when the first losses match ``ref``, else the WRONG/ERROR row."""
    try:
        losses = [to_float(step(*args)) for _ in range(CHECK_STEPS)]
    except Exception as exc:  # report, keep going
        return result(bench, impl, library, "steps/s", None, "higher",
                      note=f"{impl} failed: {type(exc).__name__}: {str(exc)[:200]}")
    if ref is not None and not np.allclose(losses, ref, rtol=rtol, atol=0):
        return result(bench, impl, library, "steps/s", None, "higher", status="WRONG",
                      note=f"{impl}: losses {losses} vs torch {ref} (rtol {rtol})")
    return None


def _interleaved(bench, configs, timing) -> tuple[list, dict, list]:
    """Time ``configs`` [(impl, library, step, args, to_float, ref, rtol)]
    round-robin: every round runs each configuration once (``timing``'s
    min_run_s long), so a change of the machine's speed hits all of them
    alike. Before each round the CPUs' placement is probed
    (placement.round_trip_ns; stored per round in the rows). Returns rows
    (median round, in steps/s), impl -> per-round seconds per step, and the
    per-round round trips (ns, or None)."""
    rows, live = [], []
    for impl, library, step, args, to_float, ref, rtol in configs:
        bad = _check(bench, impl, library, step, args, to_float, ref, rtol)
        if bad is not None:
            rows.append(bad)
        else:
            live.append((impl, library, step, args))
    per = {impl: [] for impl, *_ in live}
    where = []
    for _ in range(timing["runs"]):
        where.append(placement.round_trip_ns() if live else None)
        for impl, _, step, args in live:
            best, _runs = best_seconds(lambda: step(*args), warmup=timing["warmup"], runs=1,
                                       min_run_s=timing["min_run_s"])
            per[impl].append(best)
    for impl, library, _, _ in live:
        rows.append(result(bench, impl, library, "steps/s", 1.0 / float(np.median(per[impl])),
                           "higher", steps_per_s_runs=[1.0 / s for s in per[impl]],
                           steps_per_s_best=1.0 / min(per[impl]),
                           placement_round_trip_ns=where,
                           note=f"median of {timing['runs']} interleaved rounds"))
    return rows, per, where


def _ratio(bench, what, ours, theirs, target=None, where=None):
    """Dragon's speed over another configuration's: the median over rounds
    of the per-round ratio (their seconds per step / ours in round i).
    ``where``: the rounds' placement probes; the row then also holds the
    median ratio of the rounds of each placement (``by_placement``)."""
    if ours is None or theirs is None:
        return None
    paired = [t / o for o, t in zip(ours, theirs)]
    extra, note = {}, "median over rounds of the per-round ratio"
    if where:
        groups: dict = {}
        for ratio, ns in zip(paired, where):
            groups.setdefault(placement.classify(ns), []).append(ratio)
        extra["by_placement"] = {kind: float(np.median(v)) for kind, v in groups.items()}
        extra["placement_round_trip_ns"] = list(where)
        note += "; rounds by CPU placement: " + placement.summary(list(where)) + "; " + ", ".join(
            f"{kind} {np.median(v):.3f}x" for kind, v in sorted(groups.items()))
    return result(bench, f"ratio {what}", "dragon", "x", float(np.median(paired)), "higher",
                  target, per_round=paired, best_of_rounds=min(theirs) / min(ours),
                  note=note, **extra)


def run(quick: bool = False, rounds: int = 20) -> list[dict]:
    """The encoder-layer and ResNet-18 training rows (see module docs);
    ``rounds`` interleaved rounds of about 0.25 s per configuration, with
    glibc's malloc held in its fast state (``_harness.steady_malloc``)."""
    with steady_malloc() as held:
        rows = _rows(quick, rounds)
    for row in rows:
        row["steady_malloc"] = held  # False: glibc refused or absent
    return rows


def _rows(quick: bool, rounds: int) -> list[dict]:
    timing = ({"warmup": 0, "runs": 1, "min_run_s": 0.0} if quick
              else {"warmup": 1, "runs": rounds, "min_run_s": 0.25})
    dg, torch = try_import("dragon_core"), try_import("torch")
    if dg is None or torch is None:
        missing = "dragon_core" if dg is None else "torch"
        return [result("encoder_train", "all", "dragon", "steps/s", None, "higher",
                       status="SKIP", note=skip_note(missing))]
    torch.set_num_threads(2)
    rows = []
    tf = lambda t: float(t.detach())  # noqa: E731
    df = lambda t: float(t.numpy())  # noqa: E731

    # -- encoder layer
    x, t = _encoder_data()
    state = encoder_state(torch)
    tx, tt = torch.from_numpy(x), torch.from_numpy(t)
    dx, dt = dg.tensor(x), dg.tensor(t)
    for precision in ("float32", "bfloat16"):
        bench = f"encoder_train_{precision}"
        step = torch_encoder_step(torch, state, precision, False)
        ref = [tf(step(tx, tt)) for _ in range(CHECK_STEPS)]
        rtol = RTOL[precision]
        configs = [("torch eager", "torch", torch_encoder_step(torch, state, precision, False),
                    (tx, tt), tf, ref, rtol)]
        if not quick:
            configs.append(("torch.compile", "torch",
                            torch_encoder_step(torch, state, precision, True),
                            (tx, tt), tf, ref, rtol))
        configs += [("dragon eager", "dragon",
                     dragon_encoder_step(dg, state, precision, False)[0], (dx, dt), df, ref,
                     rtol),
                    ("@dg.function", "dragon",
                     dragon_encoder_step(dg, state, precision, True)[0], (dx, dt), df, ref,
                     rtol)]
        got, sp, where = _interleaved(bench, configs, timing)
        rows += got
        for r in (_ratio(bench, "dragon eager / torch eager", sp.get("dragon eager"),
                         sp.get("torch eager"), 1.0, where),
                  _ratio(bench, "dragon compiled / torch eager", sp.get("@dg.function"),
                         sp.get("torch eager"), 1.3, where),
                  _ratio(bench, "dragon compiled / torch.compile", sp.get("@dg.function"),
                         sp.get("torch.compile"), 1.0, where)):
            if r:
                rows.append(r)

    # -- ResNet-18
    x, y = _resnet_data()
    shapes = resnet.float_shapes(resnet.resnet18(torch.nn, RES_CLASSES).state_dict())
    state = resnet.random_state(shapes)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    dx, dy = dg.tensor(x), dg.tensor(y)
    bench = "resnet18_train_float32"
    step = torch_resnet_step(torch, state)
    ref = [tf(step(tx, ty)) for _ in range(CHECK_STEPS)]
    rtol = RTOL["float32"]
    got, sp, where = _interleaved(bench, [
        ("torch eager", "torch", torch_resnet_step(torch, state), (tx, ty), tf, ref, rtol),
        ("dragon eager", "dragon", dragon_resnet_step(dg, state, False), (dx, dy), df, ref,
         rtol),
        ("@dg.function", "dragon", dragon_resnet_step(dg, state, True), (dx, dy), df, ref,
         rtol)], timing)
    rows += got
    for r in (_ratio(bench, "dragon eager / torch eager", sp.get("dragon eager"),
                     sp.get("torch eager"), None, where),
              _ratio(bench, "dragon compiled / torch eager", sp.get("@dg.function"),
                     sp.get("torch eager"), 1.2, where)):
        if r:
            rows.append(r)
    return rows


def profiles(runs: int = 10) -> str:
    """The per-op profile of each compiled Dragon step, as text."""
    import dragon_core as dg
    import torch
    out = []
    x, t = _encoder_data()
    state = encoder_state(torch)
    for precision in ("float32", "bfloat16"):
        step, _ = dragon_encoder_step(dg, state, precision, True)
        p = step.profile(dg.tensor(x), dg.tensor(t), runs=runs)
        out.append(f"## encoder layer training step, {precision}\n{_by_type(p)}")
    x, y = _resnet_data()
    state = resnet.random_state(resnet.float_shapes(
        resnet.resnet18(torch.nn, RES_CLASSES).state_dict()))
    step = dragon_resnet_step(dg, state, True)
    p = step.profile(dg.tensor(x), dg.tensor(y), runs=runs)
    out.append(f"## ResNet-18 training step, float32\n{_by_type(p)}")
    return "\n\n".join(out)


def _by_type(p) -> str:
    lines = [f"{p.wall_us / 1e3:.2f} ms per call, {p.ops_us / 1e3:.2f} ms in ops",
             "", "| op type | ops | ms/step | share |", "|---|---:|---:|---:|"]
    total = p.ops_us or 1.0
    for typ, n, us in p.by_type()[:15]:
        lines.append(f"| {typ} | {n} | {us / 1e3:.2f} | {100 * us / total:.1f}% |")
    return "\n".join(lines)


if __name__ == "__main__":
    if "--profile" in sys.argv:
        print(profiles())
    else:
        rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 20
        for r in run(quick="--quick" in sys.argv, rounds=rounds):
            v = r["value"]
            print(f"{r['bench']:<26} {r['impl']:<34} {'-' if v is None else f'{v:.3f}':>9} "
                  f"{r['status']:<6} {r['note'][:90]}")
