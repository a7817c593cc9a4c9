"""ONNX models imported with ``dragon_core.onnx.load`` against onnxruntime on
the same model file, in the same run.

Rows
----
``onnx_resnet18_b8_64_f32``
    ResNet-18 (``bench/models/resnet.py``'s weights, written node by node by
    ``bench/onnx_export.py``: Conv, BatchNormalization, Relu, MaxPool, Add,
    GlobalAveragePool, Flatten, Gemm; opset 21) on a batch of 8x3x64x64.
    Dragon: ``dgx.load(model, freeze=True)`` (initializers compiled in, so
    the batch norms fold into the convolutions once, as onnxruntime's
    ORT_ENABLE_ALL does) and ``dgx.load(model)`` (zero-copy initializers,
    the fold recomputed per call). onnxruntime: CPU provider,
    ORT_ENABLE_ALL, one intra-op thread per core (and, as information,
    the same with its pool's spinning off, the counterpart of the passive
    OpenMP wait Dragon uses). Target, for each way of importing: <=
    onnxruntime with its defaults. An informational row times the same network built with
    ``dg.nn`` and compiled with ``@dg.function(freeze=True)``: the import
    should cost nothing over it.
``onnx_bert_layer_b8_s128_h256``
    A BERT-style encoder layer (``bench/models/bert.py``: 4 heads, hidden
    256, feed-forward 1024, GELU via Erf, post-LayerNorm) exported by
    ``torch.onnx.export`` (TorchScript exporter, opset 17) on a batch of
    8x128x256. Same Dragon/onnxruntime rows and target. Without torch the
    model is exported from Dragon's module instead (``dgx.export``).

Each benchmark also has two rows timed on one thread in a child process
(``DRAGON_NUM_THREADS=1``, onnxruntime ``intra_op_num_threads=1``): the
median *CPU time* per call (``time.process_time``) of ``dgx.load(model)``
and of onnxruntime, interleaved call by call, with the target Dragon <=
onnxruntime. On the shared 2-CPU machine the wall-clock rows above mostly
measure how often a descheduled OpenMP thread holds up a barrier; CPU time
on one thread is what each library's kernels and graph cost, whatever the
load.

Every output is checked against a float64 reference before it is timed
(torch float64 where installed, else Dragon's float64 forward). The
implementations of one benchmark are timed in three interleaved rounds (the
best run of all rounds counts), so a change of load on the shared machine
affects them alike.
"""

from __future__ import annotations

import os

import numpy as np
from _harness import best_seconds, result, skip_note, try_import

RESNET_X = (8, 3, 64, 64)
BERT_X = (8, 128, 256)
RTOL = 5e-4
#: Timed rounds per implementation, interleaved (see ``_measure``).
ROUNDS = 3
TIMING = {"full": {"warmup": 3, "runs": 9, "min_run_s": 0.25},
          "quick": {"warmup": 1, "runs": 1, "min_run_s": 0.0}}
INSTALL = 'pip install "onnx>=1.16" "onnxruntime>=1.31,<1.32"'


def _close(out, ref) -> str:
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    if np.allclose(out, ref, rtol=RTOL, atol=RTOL * scale):
        return ""
    return f"max abs error {float(np.max(np.abs(out - ref))):.3g} (scale {scale:.3g})"


def _measure(bench, impls, ref, timing, target_of):
    """Check every implementation, then time them in interleaved rounds
    (each round times every implementation once, best run of all rounds
    counts), so load changes on a shared machine hit them alike.

    ``impls``: list of (impl, library, fn, extra). ``target_of(values)``
    gives the target of the first row from the measured values."""
    rows, live = [], []
    for impl, library, fn, extra in impls:
        try:
            problem = _close(fn(), ref)
        except Exception as exc:  # noqa: BLE001 (report, keep benchmarking the others)
            problem = f"failed: {type(exc).__name__}: {exc}"
        rows.append([impl, library, problem, [], extra])
        if not problem:
            live.append(rows[-1])
    rounds = 1 if timing["runs"] <= 1 else ROUNDS
    for r in range(rounds):
        for row, (_, _, fn, _) in ((row, impls[i]) for i, row in enumerate(rows)):
            if row[2]:
                continue
            _, per_run = best_seconds(fn, warmup=timing["warmup"] if r == 0 else 1,
                                      runs=max(1, timing["runs"] // rounds),
                                      min_run_s=timing["min_run_s"])
            row[3] += per_run
    values = {row[1] + ":" + row[0]: (min(row[3]) * 1e3 if row[3] else None) for row in rows}
    out = []
    for k, (impl, library, problem, per_run, extra) in enumerate(rows):
        target = target_of(values) if k < 2 else None
        if problem:
            status = "WRONG" if not problem.startswith("failed") else None
            out.append(result(bench, impl, library, "ms", None, "lower", target,
                              status=status, note=f"{library} {impl}: {problem}"))
            continue
        out.append(result(bench, impl, library, "ms", min(per_run) * 1e3, "lower", target,
                          ms_per_run=[t * 1e3 for t in per_run], **extra))
    return out


def _ort_session(ort, model_bytes: bytes, spin: bool = True):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    if not spin:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])


def _rows(bench, model_bytes, x, ref, timing, dg, ort, extra_impls=()):
    import dragon_core.onnx as dgx
    sess = _ort_session(ort, model_bytes)
    calm = _ort_session(ort, model_bytes, spin=False)
    name = sess.get_inputs()[0].name
    dx = dg.tensor(x)
    frozen = dgx.load(model_bytes, freeze=True)
    live = dgx.load(model_bytes)
    ort_impl = "InferenceSession CPU, ORT_ENABLE_ALL"
    impls = [("dgx.load(model, freeze=True) (O3)", "dragon", lambda: frozen(dx)[0].numpy(), {}),
             ("dgx.load(model) (O3, zero-copy initializers)", "dragon",
              lambda: live(dx)[0].numpy(), {}),
             *extra_impls,
             (ort_impl + ", allow_spinning=0 (information)", "onnxruntime",
              lambda: calm.run(None, {name: x})[0], {}),
             (ort_impl, "onnxruntime", lambda: sess.run(None, {name: x})[0],
              {"version": ort.__version__, "threads": os.cpu_count()})]

    def target_of(values):
        v = values.get("onnxruntime:" + ort_impl)
        return None if v is None else round(v, 3)
    rows = _measure(bench, impls, ref, timing, target_of)
    ort_value = rows[-1]["value"]
    for row in rows:
        if row["library"] == "dragon" and row["value"] and ort_value:
            ratio = row["value"] / ort_value
            row["vs"] = {"onnxruntime": ratio}
            row["note"] = "; ".join(t for t in (f"{ratio:.2f}x onnxruntime's time in this "
                                                "run", row.get("note", "")) if t)
    return rows


#: Calls per library in the one-thread CPU-time rows (interleaved).
CPU_CALLS = {"full": 40, "quick": 2}


def _cpu_child(model_path: str, x_path: str, calls: int) -> None:
    """In a child with one thread: check, then time CPU per call; prints JSON."""
    import json
    import time
    import dragon_core as dg
    import dragon_core.onnx as dgx
    import onnxruntime as ort
    with open(model_path, "rb") as f:
        model_bytes = f.read()
    x = np.load(x_path)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    fn, dx = dgx.load(model_bytes), dg.tensor(x)
    fns = {"dragon": lambda: fn(dx)[0].numpy(),
           "onnxruntime": lambda: sess.run(None, {name: x})[0]}
    out = {k: {"cpu_ms": []} for k in fns}
    for k, f in fns.items():   # outputs for the parent's check, beside x
        np.save(os.path.join(os.path.dirname(x_path), f"{k}.npy"), np.asarray(f()))
    for _ in range(2):
        for f in fns.values():
            f()
    for _ in range(calls):
        for k, f in fns.items():
            t0 = time.process_time()
            f()
            out[k]["cpu_ms"].append((time.process_time() - t0) * 1e3)
    print("CPU_ROWS " + json.dumps(out))


def _cpu_rows(bench, model_bytes, x, ref, quick):
    """The one-thread CPU-time rows (module docstring), from a child process."""
    import json
    import subprocess
    import sys
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        mp, xp = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "x.npy")
        with open(mp, "wb") as f:
            f.write(model_bytes)
        np.save(xp, x)
        env = dict(os.environ, DRAGON_NUM_THREADS="1", OMP_NUM_THREADS="1")
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--cpu-child", mp, xp,
                               str(CPU_CALLS["quick" if quick else "full"])],
                              capture_output=True, text=True, env=env, timeout=900)
        saved = {lib: os.path.join(tmp, f"{lib}.npy") for lib in ("dragon", "onnxruntime")}
        outs = {lib: np.load(path) for lib, path in saved.items() if os.path.exists(path)}
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("CPU_ROWS ")), None)
    if proc.returncode or line is None or len(outs) != 2:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return [result(bench, "1 thread, CPU time", "dragon", "ms", None, "lower",
                       note=f"one-thread child failed: {' | '.join(tail)}")]
    data = json.loads(line[len("CPU_ROWS "):])
    med = {k: float(np.median(v["cpu_ms"])) for k, v in data.items()}
    rows = []
    impls = {"dragon": "dgx.load(model), 1 thread, median CPU time per call",
             "onnxruntime": "InferenceSession CPU, 1 thread, median CPU time per call"}
    for lib in ("dragon", "onnxruntime"):
        problem = _close(outs[lib], ref)
        target = round(med["onnxruntime"], 3) if lib == "dragon" else None
        if problem:
            rows.append(result(bench, impls[lib], lib, "ms", None, "lower", target,
                               status="WRONG", note=f"{lib} 1 thread: {problem}"))
            continue
        row = result(bench, impls[lib], lib, "ms", med[lib], "lower", target,
                     cpu_ms_per_call=data[lib]["cpu_ms"])
        if lib == "dragon":
            ratio = med["dragon"] / med["onnxruntime"]
            row["vs"] = {"onnxruntime": ratio}
            row["note"] = f"{ratio:.2f}x onnxruntime's CPU time in this run (one thread each)"
        rows.append(row)
    return rows


def bench_resnet(dg, torch, ort, timing):
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models.resnet import float_shapes, random_state, resnet18
    from onnx_export import resnet18_onnx
    bench = "onnx_resnet18_b8_64_f32"
    model = resnet18(dg.nn)
    state = random_state(float_shapes(model.state_dict()))
    x = np.random.default_rng(1).standard_normal(RESNET_X).astype(np.float32)
    if torch is not None:
        tm = resnet18(torch.nn).eval().double()
        tm.load_state_dict({k: torch.from_numpy(v).double() for k, v in state.items()},
                           strict=False)
        with torch.no_grad():
            ref = tm(torch.from_numpy(x).double()).numpy()
    else:
        model = model.double()
        model.load_state_dict({k: v.astype(np.float64) for k, v in state.items()})
        ref = model.eval()(dg.tensor(x.astype(np.float64))).numpy()
    onnx_model = resnet18_onnx(state, list(x.shape))
    # The same network written with dg.nn: what the import should match.
    native = resnet18(dg.nn)
    native.load_state_dict(state)
    native.eval()
    frozen = dg.function(lambda t: native(t), freeze=True)
    dx = dg.tensor(x)
    extra = [("dg.nn ResNet-18, @dg.function(freeze=True) (not imported)", "dragon",
              lambda: frozen(dx).numpy(), {})]
    model_bytes = onnx_model.SerializeToString()
    return _rows(bench, model_bytes, x, ref, timing, dg, ort, extra) + \
        _cpu_rows(bench, model_bytes, x, ref, timing["runs"] <= 1)


def bench_bert(dg, torch, ort, timing):
    import io
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from models import bert
    import dragon_core.onnx as dgx
    bench = "onnx_bert_layer_b8_s128_h256"
    hidden = BERT_X[2]
    dm = bert.encoder_layer(dg.nn, bert.dragon_f(), hidden=hidden, heads=4)
    state = bert.random_state({k: tuple(v.shape) for k, v in dm.state_dict().items()})
    dm.load_state_dict(state)
    dm.eval()
    x = np.random.default_rng(2).standard_normal(BERT_X).astype(np.float32)
    if torch is not None:
        tm = bert.encoder_layer(torch.nn, bert.torch_f(), hidden=hidden, heads=4)
        tm.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
        tm.eval()
        buf = io.BytesIO()
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(tm, (torch.from_numpy(x),), buf, dynamo=False, opset_version=17,
                              input_names=["x"], output_names=["y"])
        model_bytes = buf.getvalue()
        with torch.no_grad():
            ref = tm.double()(torch.from_numpy(x).double()).numpy()
    else:
        model_bytes = dgx.export(dm, [x], None).SerializeToString()
        d64 = bert.encoder_layer(dg.nn, bert.dragon_f(), hidden=hidden, heads=4).double()
        d64.load_state_dict({k: v.astype(np.float64) for k, v in state.items()})
        ref = d64.eval()(dg.tensor(x.astype(np.float64))).numpy()
    return _rows(bench, model_bytes, x, ref, timing, dg, ort) + \
        _cpu_rows(bench, model_bytes, x, ref, timing["runs"] <= 1)


def run(quick: bool = False) -> list[dict]:
    """The rows of the module docstring."""
    timing = TIMING["quick" if quick else "full"]
    dg, ort, onnx = try_import("dragon_core"), try_import("onnxruntime"), try_import("onnx")
    torch = try_import("torch")
    if torch is not None:
        torch.set_num_threads(os.cpu_count())
    rows = []
    for bench, fn in (("onnx_resnet18_b8_64_f32", bench_resnet),
                      ("onnx_bert_layer_b8_s128_h256", bench_bert)):
        if dg is None or ort is None or onnx is None:
            missing = "dragon_core" if dg is None else ("onnxruntime" if ort is None else "onnx")
            note = skip_note(missing) if missing == "dragon_core" else f"{missing}: {INSTALL}"
            rows.append(result(bench, "import", "dragon", "ms", None, "lower", status="SKIP",
                               note=note))
            continue
        try:
            rows += fn(dg, torch, ort, timing)
        except Exception as exc:  # noqa: BLE001
            rows.append(result(bench, "import", "dragon", "ms", None, "lower",
                               note=f"{type(exc).__name__}: {exc}"))
    return rows


if __name__ == "__main__":
    import sys
    if len(sys.argv) == 5 and sys.argv[1] == "--cpu-child":
        _cpu_child(sys.argv[2], sys.argv[3], int(sys.argv[4]))
