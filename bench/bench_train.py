"""Training a small CNN: LeNet-5 steps/s, Dragon (eager, graph) vs torch.

``lenet5_train_b64``
    One training step of LeNet-5 on a batch of 64 1x28x28 images: conv 1->6
    5x5 (pad 2), ReLU, max-pool 2, conv 6->16 5x5, ReLU, max-pool 2, then
    400-120-84-10 fully connected with ReLU, softmax cross-entropy, SGD with
    momentum 0.9 and lr 0.01. Dragon eager (``nn`` + ``loss.backward()`` +
    ``optim.SGD``), Dragon graph (the same step, update included, compiled
    with ``@dg.function``) and torch eager. All start from the same weights;
    Dragon's losses over 3 steps are checked against torch's (when torch is
    installed) before timing. The target is the issue's figure for torch on
    the reference machine; compare with the torch row of the same run.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import best_seconds, result, skip_note, try_import  # noqa: E402

LENET_STEPS = 294.0      # torch's on the reference machine (issue 4)
BATCH = 64
LR, MOMENTUM = 0.01, 0.9
CHECK_STEPS = 3
RTOL = 2e-4
RUNS = 5
MIN_RUN_S = 0.4
#: The ops whose serving kernel the Dragon rows name (counts from the graph step).
SERVED_OPS = ("Conv2d", "ConvTranspose2d", "Conv2dBackpropFilter", "MaxPool2d",
              "MaxPool2dGrad", "MatMul")


def _init():
    """Weights (torch layout: conv [O, C, kh, kw], linear [out, in]), a batch."""
    rng = np.random.default_rng(0)

    def u(shape, fan_in):
        bound = 1.0 / np.sqrt(fan_in)
        return rng.uniform(-bound, bound, shape).astype(np.float32)
    shapes = [((6, 1, 5, 5), 25), ((6,), 25), ((16, 6, 5, 5), 150), ((16,), 150),
              ((120, 400), 400), ((120,), 400), ((84, 120), 120), ((84,), 120),
              ((10, 84), 84), ((10,), 84)]
    weights = [u(s, f) for s, f in shapes]
    x = rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32)
    y = rng.integers(0, 10, BATCH).astype(np.int64)
    return weights, x, y


def _lenet5(nn):
    """LeNet-5 from ``nn`` (``dg.nn`` or ``torch.nn``: the same names)."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))


def make_dragon_step(dg, weights, graph: bool):
    model = _lenet5(dg.nn)
    model.load_state_dict(dict(zip(model.state_dict().keys(), weights)))
    params = list(model.parameters())
    opt = dg.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    loss_fn = dg.nn.CrossEntropyLoss()
    if not graph:
        def step(x, y):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            return loss
        return step

    @dg.function
    def step(x, y):
        with dg.GradientTape() as tape:
            tape.watch(params)
            loss = loss_fn(model(x), y)
        opt.step(tape.gradient(loss, params))
        return loss
    return step


def make_torch_step(torch, weights):
    model = _lenet5(torch.nn)
    with torch.no_grad():
        for p, w in zip(model.parameters(), weights):
            p.copy_(torch.from_numpy(w))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return step


def _row(impl, library, step, args, to_float, ref, target=None, timing=None, **extra):
    bench, metric = "lenet5_train_b64", "steps/s"
    try:
        losses = [to_float(step(*args)) for _ in range(CHECK_STEPS)]
        if ref is not None and not np.allclose(losses, ref, rtol=RTOL, atol=0):
            return result(bench, impl, library, metric, None, "higher", target,
                          status="WRONG", note=f"{library} {impl}: losses {losses} differ "
                                               f"from torch's {ref} (rtol {RTOL})")
        best, per_run = best_seconds(lambda: step(*args),
                                     **(timing or {"warmup": 2, "runs": RUNS,
                                                   "min_run_s": MIN_RUN_S}))
    except Exception as exc:
        return result(bench, impl, library, metric, None, "higher", target,
                      note=f"{library} {impl} failed: {type(exc).__name__}: {exc}")
    return result(bench, impl, library, metric, 1.0 / best, "higher", target,
                  steps_per_s_runs=[1.0 / s for s in per_run], losses=losses, **extra)


def run(quick: bool = False) -> list[dict]:
    """LeNet-5 training steps/s; ``quick``: one short timed run per row."""
    timing = {"warmup": 1, "runs": 1, "min_run_s": 0.0} if quick else None
    weights, x, y = _init()
    rows, ref = [], None
    torch = try_import("torch")
    if torch is None:
        rows.append(result("lenet5_train_b64", "eager + optim.SGD", "torch", "steps/s", None,
                           "higher", status="SKIP", note=skip_note("torch")))
    else:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        step = make_torch_step(torch, weights)
        ref = [float(step(tx, ty).detach()) for _ in range(CHECK_STEPS)]
        rows.append(_row("eager + optim.SGD", "torch", make_torch_step(torch, weights),
                         (tx, ty), lambda t: float(t.detach()), ref, timing=timing,
                         threads=torch.get_num_threads()))
    dg = try_import("dragon_core")
    if dg is None:
        rows.append(result("lenet5_train_b64", "eager", "dragon", "steps/s", None, "higher",
                           LENET_STEPS, status="SKIP", note=skip_note("dragon_core")))
        return rows
    dx, dy = dg.tensor(x), dg.tensor(y)
    to_float = lambda t: float(t.numpy())  # noqa: E731
    for impl, graph in (("eager nn + backward() + optim.SGD", False),
                        ("@dg.function step (O3)", True)):
        row = _row(impl, "dragon", make_dragon_step(dg, weights, graph), (dx, dy), to_float,
                   ref, LENET_STEPS, timing)
        _add_served(row, dg, weights, graph, (dx, dy))
        rows.append(row)
    return rows


def _add_served(row: dict, dg, weights, graph: bool, args) -> None:
    """Name in ``row`` the kernels that served the step's heavy ops (measured
    on a fresh step with its own weights, after the timing)."""
    from bench_mkldnn import served_note, served_ops, served_plugins
    try:
        graph_ops = [op.type for op in make_dragon_step(dg, weights, True).get_graph(*args).op]
        ops = {t: graph_ops.count(t) for t in SERVED_OPS if t in graph_ops}
        step = make_dragon_step(dg, weights, graph)
        served = served_ops(dg, lambda: step(*args), ops)
    except Exception as exc:  # noqa: BLE001 (informational: never hides the timing)
        row["note"] = row["note"] or f"could not tell which kernels served: {exc}"
        return
    row["impl"] += f" [{served_plugins(served)}]"
    row["served"] = served
    row["note"] = row["note"] or served_note(served)
