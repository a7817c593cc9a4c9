"""Graph mode against eager mode: an element-wise chain, MLP training, memory.

Three benchmarks; each times its comparison libraries in the same run (the
memory one starts a fresh subprocess per library, since ``VmHWM`` is
process-wide):

``chain100_1k_f32``
    A fixed chain of 100 element-wise ops (``CHAIN``: mul, add, tanh,
    sigmoid with Python-scalar constants) on a 1000-element float32 tensor,
    µs per whole chain: Dragon eager, Dragon graph (``@dg.function`` at the
    default opt level, so fusion applies when a ``FusedElementwise`` kernel
    is loaded), torch eager, and onnxruntime (the same chain built as an
    ONNX graph with ``onnx.helper``, default session options). Every result
    is checked against a NumPy float64 evaluation first.
``mlp_train_b128``
    One SGD-with-momentum training step of a 784-512-512-10 ReLU MLP on a
    batch of 128 (softmax cross-entropy as ``-mean(sum(one_hot *
    log_softmax))``, lr 0.01, momentum 0.9, torch's update rule ``v = 0.9 v +
    g; p -= lr v``), steps/s: Dragon eager with ``GradientTape`` and
    ``assign``, Dragon eager with ``requires_grad`` and ``.backward()``
    (updates written with ops, or ``dg.optim.SGD``'s fused update op),
    Dragon graph (the whole step, update included, as one ``@dg.function``)
    and torch eager (``torch.optim.SGD``). The fastest Dragon eager variant
    carries the target, the others are ``INFO``. All start from the same weights;
    their losses over 3 steps are checked against a NumPy float64 reference
    with hand-written backprop before timing.
``mlp_train_peak_rss``
    Peak RSS increase of that training loop, MiB: ``VmHWM`` before the first
    step (imports, weights, data made) and after ``RSS_WARMUP`` + ``RSS_STEPS``
    steps, in a fresh subprocess per library (the high-water mark is
    process-wide). The steady-state increase (over the last ``RSS_STEPS``
    steps only) is stored in the JSON as ``steady_mib``.

Run one RSS measurement by hand with
``python bench/bench_graph.py --rss dragon-graph`` (or ``dragon-eager``,
``torch``): it prints one JSON line.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import (INSTALL_HINTS, best_seconds, per_call_us,  # noqa: E402
                      result, skip_note, try_import)

INSTALL_HINTS.setdefault("onnxruntime", "pip install onnx onnxruntime")
INSTALL_HINTS.setdefault("onnx", "pip install onnx onnxruntime")

# ------------------------------------------------------------------ targets
#: The issue's targets: torch eager / onnxruntime on the reference machine.
CHAIN_EAGER_US = 155.0
CHAIN_GRAPH_US = 38.0
MLP_EAGER_STEPS = 491.0
MLP_GRAPH_STEPS = 640.0
RSS_MIB = 27.0          # Paddle's; torch's is 91

# ------------------------------------------------------------------ chain
#: One cycle of 10 ops, repeated 10 times. The constants keep the map's slope
#: near 1 around 0, so the output still depends on the input after 100 ops
#: (a wrong op anywhere changes it by far more than the check's tolerance).
CYCLE = [("mul", 0.99), ("add", 0.01), ("tanh", None), ("mul", 4.0),
         ("sigmoid", None), ("add", -0.5), ("mul", 2.0), ("tanh", None),
         ("mul", 0.5), ("add", -0.01)]
CHAIN = CYCLE * 10
CHAIN_N = 1000
CHAIN_CALLS = 1000      # chains per repeat
CHAIN_REPEATS = 5
CHAIN_BATCH = 10
RTOL = 1e-4

# ------------------------------------------------------------------ MLP
SIZES = (784, 512, 512, 10)
BATCH = 128
LR, MOMENTUM = 0.01, 0.9
CHECK_STEPS = 3
#: Many short runs (the best counts): stalls caused by other processes on
#: this shared machine then spoil fewer of them.
MLP_RUNS = 10
MLP_MIN_RUN_S = 0.1
RSS_WARMUP = 10
RSS_STEPS = 200
RSS_TIMEOUT_S = 120


def _chain_generic(x, tanh, sigmoid):
    """Apply ``CHAIN`` with the library's operators (``*``/``+``, scalars)."""
    for op, c in CHAIN:
        if op == "mul":
            x = x * c
        elif op == "add":
            x = x + c
        elif op == "tanh":
            x = tanh(x)
        else:
            x = sigmoid(x)
    return x


def _chain_reference(x: np.ndarray) -> np.ndarray:
    return _chain_generic(x.astype(np.float64), np.tanh,
                          lambda v: 1.0 / (1.0 + np.exp(-v)))


def _chain_onnx_model(onnx):
    """The chain as an ONNX model (opset 21, IR 10: onnxruntime >= 1.20)."""
    from onnx import TensorProto, helper
    nodes, inits, consts = [], [], {}
    prev = "x"
    for i, (op, c) in enumerate(CHAIN):
        out = "y" if i == len(CHAIN) - 1 else f"t{i}"
        if op in ("mul", "add"):
            key = (op, c)
            if key not in consts:
                consts[key] = f"c{len(consts)}"
                inits.append(helper.make_tensor(consts[key], TensorProto.FLOAT,
                                                [], [c]))
            nodes.append(helper.make_node(op.capitalize(), [prev, consts[key]],
                                          [out]))
        else:
            nodes.append(helper.make_node(op.capitalize(), [prev], [out]))
        prev = out
    graph = helper.make_graph(
        nodes, "chain100",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [CHAIN_N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [CHAIN_N])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)],
                              ir_version=10)
    onnx.checker.check_model(model)
    return model


def _chain_row(impl, library, fn, args, to_numpy, ref, target=None, **extra):
    metric = "us/chain"
    try:
        out = np.asarray(to_numpy(fn(*args)), dtype=np.float64)
        scale = float(np.max(np.abs(ref)))
        if out.shape != ref.shape or not np.allclose(out, ref, rtol=RTOL,
                                                     atol=RTOL * scale):
            err = float(np.max(np.abs(out - ref))) if out.shape == ref.shape else None
            return result("chain100_1k_f32", impl, library, metric, None, "lower",
                          target, status="WRONG",
                          note=f"{impl}: differs from the float64 chain "
                               f"(max abs error {err}, rtol {RTOL})")
        best, medians = per_call_us(fn, args, calls=CHAIN_CALLS,
                                    repeats=CHAIN_REPEATS, batch=CHAIN_BATCH)
    except Exception as exc:  # report, keep benchmarking the others
        return result("chain100_1k_f32", impl, library, metric, None, "lower",
                      target, note=f"{impl} failed: {type(exc).__name__}: {exc}")
    return result("chain100_1k_f32", impl, library, metric, best, "lower", target,
                  medians_us=medians, calls_per_repeat=CHAIN_CALLS, **extra)


def _fusion_summary(dg, graph) -> tuple[dict, str]:
    types = [op.type for op in graph.op]
    fused = types.count("FusedElementwise")
    info = {"graph_ops": len(types), "fused_ops": fused,
            "passes": graph.metadata.get("passes", "")}
    if fused:
        return info, ""
    try:
        kernels = dg._C.kernels("FusedElementwise")
    except Exception:  # informational only
        kernels = None
    why = ("no FusedElementwise kernel is loaded (dg._C.kernels("
           "'FusedElementwise') is empty)" if kernels == [] else
           "the fusion pass did not fire")
    return info, (f"Dragon graph: {why}, so the chain runs as {len(types)} "
                  "separate ops")


def bench_chain() -> list[dict]:
    """The 100-op element-wise chain in every library (µs per chain)."""
    rows = []
    x = np.random.default_rng(0).uniform(-1.0, 1.0, CHAIN_N).astype(np.float32)
    ref = _chain_reference(x)

    dg = try_import("dragon_core")
    if dg is None:
        for impl, target in (("eager", CHAIN_EAGER_US), ("@dg.function", CHAIN_GRAPH_US)):
            rows.append(result("chain100_1k_f32", impl, "dragon", "us/chain", None,
                               "lower", target, status="SKIP",
                               note=skip_note("dragon_core")))
    else:
        dx = dg.tensor(x)
        to_np = lambda t: t.numpy()  # noqa: E731
        eager = lambda t: _chain_generic(t, dg.ops.tanh, dg.ops.sigmoid)  # noqa: E731
        rows.append(_chain_row("eager", "dragon", eager, (dx,), to_np, ref,
                               CHAIN_EAGER_US))
        graph_fn = dg.function(eager, name="chain100")
        try:
            graph_fn(dx)                     # trace (an eager run) and compile
            info, note = _fusion_summary(dg, graph_fn.get_graph(dx))
        except Exception as exc:
            info, note = {}, f"tracing the chain failed: {type(exc).__name__}: {exc}"
        row = _chain_row("@dg.function (O3)", "dragon", graph_fn, (dx,), to_np, ref,
                         CHAIN_GRAPH_US, **info)
        if note and not row["note"]:
            row["note"] = note
        rows.append(row)

    torch = try_import("torch")
    if torch is None:
        rows.append(result("chain100_1k_f32", "eager", "torch", "us/chain", None,
                           "lower", status="SKIP", note=skip_note("torch")))
    else:
        tx = torch.from_numpy(x.copy())
        rows.append(_chain_row("eager", "torch",
                               lambda t: _chain_generic(t, torch.tanh, torch.sigmoid),
                               (tx,), lambda t: t.numpy(), ref,
                               threads=torch.get_num_threads()))

    onnx, ort = try_import("onnx"), try_import("onnxruntime")
    if onnx is None or ort is None:
        rows.append(result("chain100_1k_f32", "InferenceSession.run", "onnxruntime",
                           "us/chain", None, "lower", status="SKIP",
                           note=skip_note("onnx" if onnx is None else "onnxruntime")))
    else:
        try:
            sess = ort.InferenceSession(_chain_onnx_model(onnx).SerializeToString(),
                                        providers=["CPUExecutionProvider"])
            feed = {"x": x}
            rows.append(_chain_row("InferenceSession.run", "onnxruntime", sess.run,
                                   (["y"], feed), lambda outs: outs[0], ref,
                                   version=ort.__version__))
        except Exception as exc:
            rows.append(result("chain100_1k_f32", "InferenceSession.run",
                               "onnxruntime", "us/chain", None, "lower",
                               note=f"building the session failed: "
                                    f"{type(exc).__name__}: {exc}"))
    return rows


# ------------------------------------------------------------------ MLP

def _mlp_init():
    """Initial weights (He normal, small biases), one batch and its labels."""
    rng = np.random.default_rng(0)
    params = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        params.append((rng.standard_normal((fan_in, fan_out))
                       * np.sqrt(2.0 / fan_in)).astype(np.float32))
        params.append((rng.standard_normal(fan_out) * 0.01).astype(np.float32))
    x = rng.standard_normal((BATCH, SIZES[0])).astype(np.float32)
    y = rng.integers(0, SIZES[-1], BATCH).astype(np.int64)
    return params, x, y


def _mlp_reference_losses(params, x, y, steps: int) -> list[float]:
    """Losses of ``steps`` training steps in float64 with explicit backprop."""
    p = [a.astype(np.float64) for a in params]
    v = [np.zeros_like(a) for a in p]
    x = x.astype(np.float64)
    onehot = np.eye(SIZES[-1])[y]
    losses = []
    for _ in range(steps):
        w1, b1, w2, b2, w3, b3 = p
        z1 = x @ w1 + b1
        h1 = np.maximum(z1, 0)
        z2 = h1 @ w2 + b2
        h2 = np.maximum(z2, 0)
        logits = h2 @ w3 + b3
        shifted = logits - logits.max(axis=1, keepdims=True)
        logp = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
        losses.append(float(-np.mean(np.sum(onehot * logp, axis=1))))
        dlogits = (np.exp(logp) - onehot) / len(x)
        dz2 = (dlogits @ w3.T) * (z2 > 0)
        dz1 = (dz2 @ w2.T) * (z1 > 0)
        grads = [x.T @ dz1, dz1.sum(0), h1.T @ dz2, dz2.sum(0),
                 h2.T @ dlogits, dlogits.sum(0)]
        for i, g in enumerate(grads):
            v[i] = MOMENTUM * v[i] + g
            p[i] = p[i] - LR * v[i]
    return losses


def _dragon_loss(dg, params, x, y):
    ops = dg.ops
    w1, b1, w2, b2, w3, b3 = params
    h = ops.relu(x @ w1 + b1)
    h = ops.relu(h @ w2 + b2)
    logits = h @ w3 + b3
    onehot = ops.one_hot(y, SIZES[-1])
    return -ops.mean(ops.sum(onehot * ops.log_softmax(logits, axis=-1), axis=[1]))


def make_dragon_step(dg, init, mode: str):
    """A Dragon training step ``step(x, y) -> loss`` with its own weights.

    ``mode`` is ``"tape"`` (GradientTape + assign), ``"backward"``
    (requires_grad leaves + ``.backward()``, updates under ``no_grad``) or
    ``"optim"`` (requires_grad leaves, ``.backward()`` and ``dg.optim.SGD``'s
    fused update op) or ``"graph"`` (the tape step compiled whole with ``@dg.function``; the
    weights and velocities are captured, ``assign`` makes them state).
    """
    params = [dg.tensor(a.copy()) for a in init]
    vels = [dg.ops.zeros(list(a.shape)) for a in init]
    if mode == "optim":
        for p in params:
            p.requires_grad_(True)
        opt = dg.optim.SGD(params, lr=LR, momentum=MOMENTUM)

        def step(x, y):
            opt.zero_grad()
            loss = _dragon_loss(dg, params, x, y)
            loss.backward()
            opt.step()
            return loss
        return step
    if mode == "backward":
        for p in params:
            p.requires_grad_(True)

        def step(x, y):
            loss = _dragon_loss(dg, params, x, y)
            loss.backward()
            with dg.no_grad():
                for p, v in zip(params, vels):
                    v.assign(v * MOMENTUM + p.grad)
                    p.assign(p - v * LR)
                    p.grad = None
            return loss
        return step

    def step(x, y):
        with dg.GradientTape() as tape:
            tape.watch(params)
            loss = _dragon_loss(dg, params, x, y)
        grads = tape.gradient(loss, params)
        for p, v, g in zip(params, vels, grads):
            v.assign(v * MOMENTUM + g)
            p.assign(p - v * LR)
        return loss
    if mode == "graph":
        return dg.function(step, name="mlp_train_step")
    return step


def make_torch_step(torch, init):
    """The same step in torch eager (same tensors and ops, optim.SGD)."""
    params = [torch.tensor(a.copy(), requires_grad=True) for a in init]
    opt = torch.optim.SGD(params, lr=LR, momentum=MOMENTUM)
    one_hot = torch.nn.functional.one_hot

    def step(x, y):
        w1, b1, w2, b2, w3, b3 = params
        h = torch.relu(x @ w1 + b1)
        h = torch.relu(h @ w2 + b2)
        logits = h @ w3 + b3
        onehot = one_hot(y, SIZES[-1]).to(torch.float32)
        loss = -(onehot * torch.log_softmax(logits, dim=-1)).sum(dim=1).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return loss
    return step


def _mlp_row(impl, library, step, args, to_float, ref_losses, target=None,
             **extra):
    bench, metric = "mlp_train_b128", "steps/s"
    try:
        losses = [to_float(step(*args)) for _ in range(CHECK_STEPS)]
        if not np.allclose(losses, ref_losses, rtol=RTOL, atol=0):
            return result(bench, impl, library, metric, None, "higher", target,
                          status="WRONG",
                          note=f"{library} {impl}: losses {losses} differ from the "
                               f"float64 reference {ref_losses} (rtol {RTOL})")
        best, per_run = best_seconds(lambda: step(*args), warmup=2, runs=MLP_RUNS,
                                     min_run_s=MLP_MIN_RUN_S)
        final = to_float(step(*args))
    except Exception as exc:
        return result(bench, impl, library, metric, None, "higher", target,
                      note=f"{library} {impl} failed: {type(exc).__name__}: {exc}")
    return result(bench, impl, library, metric, 1.0 / best, "higher", target,
                  steps_per_s_runs=[1.0 / s for s in per_run],
                  losses=losses, final_loss=final, **extra)


def bench_mlp() -> list[dict]:
    """Training steps/s of the MLP in Dragon (eager, graph) and torch."""
    rows = []
    init, x, y = _mlp_init()
    ref = _mlp_reference_losses(init, x, y, CHECK_STEPS)

    dg = try_import("dragon_core")
    if dg is None:
        for impl, target in (("eager", MLP_EAGER_STEPS), ("@dg.function step",
                                                          MLP_GRAPH_STEPS)):
            rows.append(result("mlp_train_b128", impl, "dragon", "steps/s", None,
                               "higher", target, status="SKIP",
                               note=skip_note("dragon_core")))
    else:
        dx, dy = dg.tensor(x), dg.tensor(y)
        to_float = lambda t: float(t.numpy())  # noqa: E731
        eager = [_mlp_row(impl, "dragon", make_dragon_step(dg, init, mode), (dx, dy),
                          to_float, ref, MLP_EAGER_STEPS, mode=mode)
                 for mode, impl in (("tape", "eager GradientTape + assign"),
                                    ("backward", "eager requires_grad + backward()"),
                                    ("optim", "eager backward() + dg.optim.SGD"))]
        # The fastest eager variant carries the target, the others inform.
        timed = [r for r in eager if r["value"] is not None]
        if len(timed) == len(eager):
            fastest = max(timed, key=lambda r: r["value"])
            for r in timed:
                if r is not fastest:
                    r["target"], r["status"] = None, "INFO"
        rows.extend(eager)
        rows.append(_mlp_row("@dg.function step (O3)", "dragon",
                             make_dragon_step(dg, init, "graph"), (dx, dy), to_float,
                             ref, MLP_GRAPH_STEPS))

    torch = try_import("torch")
    if torch is None:
        rows.append(result("mlp_train_b128", "eager + optim.SGD", "torch", "steps/s",
                           None, "higher", status="SKIP", note=skip_note("torch")))
    else:
        tx, ty = torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
        rows.append(_mlp_row("eager + optim.SGD", "torch", make_torch_step(torch, init),
                             (tx, ty), lambda t: float(t.detach()), ref,
                             threads=torch.get_num_threads()))
    return rows


# ------------------------------------------------------------------ RSS

def _vm_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def rss_child(which: str) -> dict:
    """Measure the training loop's peak RSS in this (fresh) process.

    Returns
    -------
    dict
        ``increase_mib`` (VmHWM after warm-up and the timed steps minus
        VmHWM before the first step), ``steady_mib`` (the increase over the
        last ``RSS_STEPS`` steps only), ``baseline_mib``, ``final_loss``.
    """
    init, x, y = _mlp_init()
    if which == "torch":
        import torch
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        step = make_torch_step(torch, init)
        args, to_float = (tx, ty), (lambda t: float(t.detach()))
    else:
        import dragon_core as dg
        mode = {"dragon-graph": "graph", "dragon-eager": "tape"}[which]
        step = make_dragon_step(dg, init, mode)
        args, to_float = (dg.tensor(x), dg.tensor(y)), (lambda t: float(t.numpy()))
    base = _vm_kib("VmHWM")
    for _ in range(RSS_WARMUP):
        step(*args)
    mid = _vm_kib("VmHWM")
    for _ in range(RSS_STEPS):
        loss = step(*args)
    end = _vm_kib("VmHWM")
    return {"which": which, "baseline_mib": base / 1024, "increase_mib": (end - base) / 1024,
            "steady_mib": (end - mid) / 1024, "vmrss_end_mib": _vm_kib("VmRSS") / 1024,
            "final_loss": to_float(loss)}


def _rss_row(which, library, impl, target=None):
    bench, metric = "mlp_train_peak_rss", "MiB"
    try:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--rss", which],
                              capture_output=True, text=True, timeout=RSS_TIMEOUT_S)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
            raise RuntimeError(f"subprocess exited with {proc.returncode}: {tail}")
        data = json.loads(proc.stdout.strip().splitlines()[-1])
    except Exception as exc:
        return result(bench, impl, library, metric, None, "lower", target,
                      note=f"{library} RSS run failed: {type(exc).__name__}: {exc}")
    if not np.isfinite(data["final_loss"]):
        return result(bench, impl, library, metric, None, "lower", target,
                      status="WRONG", note=f"{library} {impl}: loss became "
                                           f"{data['final_loss']}")
    return result(bench, impl, library, metric, data["increase_mib"], "lower", target,
                  **{k: v for k, v in data.items() if k != "which"})


def bench_rss() -> list[dict]:
    """Peak RSS increase of the training loop, one subprocess per library."""
    impl_steps = f"{RSS_WARMUP}+{RSS_STEPS} steps"
    rows = []
    if try_import("dragon_core") is None:
        rows.append(result("mlp_train_peak_rss", impl_steps, "dragon", "MiB", None,
                           "lower", RSS_MIB, status="SKIP", note=skip_note("dragon_core")))
    else:
        rows.append(_rss_row("dragon-graph", "dragon", f"@dg.function, {impl_steps}",
                             RSS_MIB))
        rows.append(_rss_row("dragon-eager", "dragon", f"eager tape, {impl_steps}",
                             RSS_MIB))
    if try_import("torch") is None:
        rows.append(result("mlp_train_peak_rss", impl_steps, "torch", "MiB", None,
                           "lower", status="SKIP", note=skip_note("torch")))
    else:
        rows.append(_rss_row("torch", "torch", f"eager, {impl_steps}"))
    return rows


def run() -> list[dict]:
    """All three graph-mode benchmarks (see the module docstring).

    Returns
    -------
    list of dict
        One row per implementation (see ``_harness.result``).
    """
    return bench_chain() + bench_mlp() + bench_rss()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--rss":
        print(json.dumps(rss_child(sys.argv[2])))
    else:
        sys.exit("usage: bench_graph.py --rss {dragon-graph,dragon-eager,torch}  "
                 "(run the benchmarks with bench/run.py -k graph)")
