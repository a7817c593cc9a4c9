"""oneDNN-backed CPU kernels (the ``mkldnn`` plugin) against torch and onnxruntime.

Every row compares libraries in the same process and run, with thread counts
matched (``torch.set_num_threads(os.cpu_count())``, onnxruntime's intra-op
threads likewise; Dragon's OpenMP pool uses every CPU by default). Every
result is checked against a float64 NumPy or torch reference before it is
timed, so a wrong kernel reports WRONG instead of a fast time. Dragon's rows
name the kernel that served each op (see :func:`served_ops`): the plugin,
and when it is ``mkldnn`` the oneDNN primitives it ran.

``conv2d_b8_64x56_f32`` / ``conv2d_fwdbwd_b8_64x56_f32``
    A 3x3 convolution, pad 1, stride 1, no bias, 64 -> 64 channels on a
    batch of 8 56x56 float32 images, ms per call, eager: the forward alone,
    and forward + input and filter gradients (``dg.grad`` /
    ``torch.autograd.grad`` with a given output gradient).
``matmul_1024_f32``
    1024x1024 @ 1024x1024 float32, GFLOP/s (the timing and check of
    ``bench_matmul.py``, here with the served kernel).
``resnet18_b8_64_f32``
    ResNet-18 inference (``bench/models/resnet.py``, eval mode) on a batch
    of 8 3x64x64 images, ms per forward: Dragon ``@dg.function(freeze=True)``
    (O3; the weights are constants, as onnxruntime's initializers, so the
    batch norms fold into the convolutions once), Dragon ``@dg.function``
    with live parameters and Dragon eager (informational), onnxruntime (the same network written with
    ``onnx.helper`` by ``bench/onnx_export.py``, CPU provider, all graph
    optimisations: batch norms folded, Relu and Add fused into the
    convolutions, NCHWc layout), torch eager
    under ``no_grad``. One set of weights in all of them; each output is
    compared with a float64 forward of torch (or of Dragon's float64
    kernels when torch is missing).

Run alone with ``python bench/bench_mkldnn.py`` (``--quick``: one short
timed run per row, for smoke tests; numbers are then not meaningful).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import ctypes
import json
import os
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import INSTALL_HINTS, best_seconds, result, skip_note, try_import

INSTALL_HINTS.setdefault("onnxruntime", 'pip install "onnx>=1.16" "onnxruntime>=1.31,<1.32"')
INSTALL_HINTS.setdefault("onnx", 'pip install "onnx>=1.16" "onnxruntime>=1.31,<1.32"')

# ------------------------------------------------------------------ targets
#: The issue's figures: torch 2.13 on the reference machine.
CONV_FWD_MS = 4.58
CONV_FWDBWD_MS = 21.6

# ------------------------------------------------------------------ problems
CONV_X = (8, 64, 56, 56)
CONV_W = (64, 64, 3, 3)
CONV_PAD = 1
RESNET_X = (8, 3, 64, 64)
#: Outputs must satisfy allclose(out, ref, rtol=RTOL, atol=RTOL * max|ref|)
#: against the float64 reference: float32 sums of up to 4608 (ResNet) or
#: 25088 (filter gradient) products stay well inside it, a wrong tap, pad or
#: normalisation does not.
RTOL = 5e-4

#: ``best_seconds`` settings: the normal run, and ``--quick`` (smoke tests).
TIMING = {"full": {"warmup": 3, "runs": 7, "min_run_s": 0.25},
          "quick": {"warmup": 1, "runs": 1, "min_run_s": 0.0}}


# ============================================================ which kernel ran

def _onednn_library():
    """The oneDNN library loaded in this process (by the mkldnn plugin), or None.

    torch links its own oneDNN statically, so this handle only sees the
    plugin's primitives.
    """
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "libdnnl.so" in line})
    except OSError:
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        if hasattr(lib, "dnnl_set_verbose"):
            return lib
    return None


@contextlib.contextmanager
def _stdout_to(path: str):
    """Send file descriptor 1 (C ``printf`` included) to ``path`` meanwhile."""
    libc = ctypes.CDLL(None)
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(path, "wb") as sink:
            os.dup2(sink.fileno(), 1)
            try:
                yield
            finally:
                libc.fflush(None)
                os.dup2(saved, 1)
    finally:
        os.close(saved)


def _env_verbose_level() -> int:
    """The level ``ONEDNN_VERBOSE`` asked for (0 when unset or not a number)."""
    level = os.environ.get("ONEDNN_VERBOSE", "0")
    return int(level) if level.isdigit() else 0


def onednn_primitives(fn) -> collections.Counter:
    """Run ``fn()`` once with oneDNN's verbose mode on; count what ran.

    Returns
    -------
    collections.Counter
        ``"kind:implementation:propagation"`` (e.g.
        ``"convolution:brg:avx512_core:forward_inference"``) -> executions;
        empty when no oneDNN library is loaded.
    """
    lib = _onednn_library()
    if lib is None:
        fn()
        return collections.Counter()
    fd, path = tempfile.mkstemp(prefix="dg_onednn_", suffix=".log")
    os.close(fd)
    try:
        with _stdout_to(path):
            lib.dnnl_set_verbose(1)
            try:
                fn()
            finally:
                lib.dnnl_set_verbose(_env_verbose_level())
        with open(path, errors="replace") as f:
            lines = f.read().splitlines()
    finally:
        os.unlink(path)
    counts = collections.Counter()
    for line in lines:
        fields = line.split(",")
        if "exec" in fields and fields[0].startswith(("onednn_verbose", "dnnl_verbose")):
            i = fields.index("exec")
            kind, impl, prop = (fields[i + 2:i + 5] + ["?"] * 3)[:3]
            counts[f"{kind}:{impl}:{prop}"] += 1
    return counts


def dispatch_order(dg, op: str, dtype: str = "float32") -> list[dict]:
    """The CPU kernels of ``op`` for ``dtype`` in the core's selection order:
    a pinned kernel or plugin first, then priority, fewer dtypes, plugin
    name, kernel name (``Registry::Order`` in dragon_core/src/core)."""
    ks = [k for k in dg.plugins.kernels(op) if k["device"] == "cpu"
          and dtype in [d.strip() for d in k["dtypes"].split(",")]]
    pin = dg._C.pins().get((op, "cpu"))
    return sorted(ks, key=lambda k: (pin not in (k["name"], k["plugin"]), -k["priority"],
                                     len(k["dtypes"].split(",")), k["plugin"], k["name"]))


@contextlib.contextmanager
def _pinned(dg, op: str, target: str):
    """Pin ``op`` on cpu to ``target`` meanwhile, restoring any earlier pin."""
    before = dg._C.pins().get((op, "cpu"))
    dg.plugins.pin(op, "cpu", target)
    try:
        yield
    finally:
        if before is None:
            dg.plugins.unpin(op, "cpu")
        else:
            dg.plugins.pin(op, "cpu", before)


def _primitive_summary(counts: collections.Counter) -> str:
    return ", ".join(f"{k} x{n}" for k, n in sorted(counts.items())) or "none"


def served_ops(dg, fn, ops, dtype: str = "float32") -> dict:
    """Which kernel served each op of ``ops`` while ``fn()`` ran.

    The core records no per-call kernel, so it is measured: ``fn()`` runs once
    with oneDNN's verbose log on, then once per op whose first candidate is
    an ``mkldnn`` kernel with that op pinned to the next plugin; the oneDNN
    primitives that disappear are the ones that op's kernel ran. An
    ``mkldnn`` winner that ran none declined the call (its ``supports()``
    said no) and the next candidate served it.

    Parameters
    ----------
    dg : module
        ``dragon_core``.
    fn : callable
        Runs the workload once (untimed).
    ops : dict of str to int, or iterable of str
        Op names (with how many times the workload calls each, if known).
    dtype : str
        The dispatch dtype.

    Returns
    -------
    dict of str to dict
        Op -> ``{"plugin", "kernel", "calls", "onednn", "text"}``.
    """
    ops = dict(ops) if isinstance(ops, dict) else {op: None for op in ops}
    # A first call may trace (graph mode runs the Python function eagerly
    # once): it must not count as the workload's own primitives.
    fn()
    baseline = onednn_primitives(fn)
    out = {}
    for op, calls in ops.items():
        order = dispatch_order(dg, op, dtype)
        entry = {"plugin": None, "kernel": None, "calls": calls, "onednn": {}}
        times = f" x{calls}" if calls else ""
        if not order:
            entry["text"] = f"{op}{times}: no {dtype} CPU kernel"
            out[op] = entry
            continue
        first = order[0]
        others = [k for k in order if k["plugin"] != first["plugin"]]
        entry.update(plugin=first["plugin"], kernel=first["name"])
        if first["plugin"] != "mkldnn":
            why = ("only candidate" if len(order) == 1
                   else f"first of {len(order)} candidates; no oneDNN involved")
            entry["text"] = f"{op}{times}: {first['name']} [{first['plugin']}] ({why})"
        elif not others:
            entry["text"] = (f"{op}{times}: {first['name']} [mkldnn] (only candidate; oneDNN "
                             f"ran {_primitive_summary(baseline)})")
        else:
            with _pinned(dg, op, others[0]["plugin"]):
                without = onednn_primitives(fn)
            own = baseline - without
            entry["onednn"] = dict(own)
            if own:
                entry["text"] = (f"{op}{times}: {first['name']} [mkldnn] (oneDNN "
                                 f"{_primitive_summary(own)})")
            else:
                entry.update(plugin=others[0]["plugin"], kernel=others[0]["name"])
                entry["text"] = (f"{op}{times}: {others[0]['name']} [{others[0]['plugin']}] "
                                 f"(mkldnn's {first['name']} declined: it ran no oneDNN "
                                 "primitive)")
        out[op] = entry
    return out


def served_note(served: dict) -> str:
    """One line for a row's note: ``Dragon kernels: op: kernel [plugin] ...``."""
    return "Dragon kernels: " + "; ".join(e["text"] for e in served.values())


def served_plugins(served: dict) -> str:
    """The plugin that served every op; when they differ, ``Conv2d=mkldnn,
    ...`` for up to three ops, else ops per plugin (for a table cell)."""
    by_plugin = collections.Counter(str(e["plugin"]) for e in served.values())
    if len(by_plugin) == 1:
        return next(iter(by_plugin))
    if len(served) <= 3:
        return ", ".join(f"{op}={e['plugin']}" for op, e in served.items())
    return ", ".join(f"{plugin}: {n} ops" for plugin, n in by_plugin.most_common())


# ============================================================ shared helpers

def _close(out, ref) -> str:
    """"" when ``out`` matches the float64 ``ref``, else what differs."""
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        return f"shape {out.shape}, expected {ref.shape}"
    scale = float(np.max(np.abs(ref))) if ref.size else 0.0
    if np.allclose(out, ref, rtol=RTOL, atol=RTOL * scale):
        return ""
    return (f"max abs error {float(np.max(np.abs(out - ref))):.3g} "
            f"(max |ref| {scale:.3g}, rtol {RTOL})")


def _timed_row(bench, impl, library, fn, check, target, timing, metric="ms",
               better="lower", value_of=lambda seconds: seconds * 1e3, note="", **extra):
    """Check ``fn()`` with ``check(out) -> problem`` ("" when right), then time
    it; the row's value is ``value_of(best seconds per call)``."""
    try:
        problem = check(fn())
        if problem:
            return result(bench, impl, library, metric, None, better, target,
                          status="WRONG", note=f"{library} {impl}: {problem}")
        best, per_run = best_seconds(fn, **timing)
    except Exception as exc:  # noqa: BLE001 (report, keep benchmarking the others)
        return result(bench, impl, library, metric, None, better, target,
                      note=f"{library} {impl} failed: {type(exc).__name__}: {exc}")
    return result(bench, impl, library, metric, value_of(best), better, target, note=note,
                  ms_per_run=[t * 1e3 for t in per_run], **extra)


def _skip(bench, impl, library, metric, better, name, target=None):
    return result(bench, impl, library, metric, None, better, target, status="SKIP",
                  note=skip_note(name))


def eager_ops(dg, fn) -> collections.Counter:
    """Op name -> calls of the ops ``fn()`` runs eagerly: the graph
    ``@dg.function`` traces from it at opt level 0 (no pass rewrites it).
    Tracing runs ``fn`` once."""
    graph = dg.function(fn, opt_level=0, name="eager_ops").get_graph()
    return collections.Counter(op.type for op in graph.op)


def _served_or_note(dg, fn, ops=None):
    """``served_ops`` (over ``eager_ops(fn)`` when ``ops`` is None) and its
    note; a failure becomes the note instead."""
    try:
        served = served_ops(dg, fn, eager_ops(dg, fn) if ops is None else ops)
        return served, served_note(served)
    except Exception as exc:  # noqa: BLE001 (informational: never hides the timing)
        return {}, f"could not tell which kernels served: {type(exc).__name__}: {exc}"


# ============================================================ conv2d

def _windows(a: np.ndarray, pad: int, k: int) -> np.ndarray:
    """``[N, C, H', W', k, k]`` sliding windows of zero-padded NCHW ``a``."""
    a = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    return np.lib.stride_tricks.sliding_window_view(a, (k, k), axis=(2, 3))


def conv_reference(x, w, dy, pad):
    """float64 forward and gradients of a stride-1 convolution, from the
    definition ``y[n,o,i,j] = sum_{c,p,q} x[n,c,i+p-pad,j+q-pad] w[o,c,p,q]``.

    Returns
    -------
    y, dx, dw : numpy.ndarray
        The output, and the gradients of ``<y, dy>`` with respect to x and w.
    """
    x, w, dy = (a.astype(np.float64) for a in (x, w, dy))
    k = w.shape[-1]
    y = np.tensordot(_windows(x, pad, k), w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    # dx[n,c,i,j] = sum_{o,p,q} dy[n,o,i-p+pad,j-q+pad] w[o,c,p,q]: the flipped filter.
    flipped = w[:, :, ::-1, ::-1]
    dx = np.tensordot(_windows(dy, k - 1 - pad, k), flipped,
                      axes=([1, 4, 5], [0, 2, 3])).transpose(0, 3, 1, 2)
    dw = np.tensordot(dy, _windows(x, pad, k), axes=([0, 2, 3], [0, 2, 3]))
    return y, dx, dw


def _conv_dragon_rows(dg, x, w, dy, refs, timing):
    y_ref, dx_ref, dw_ref = refs
    F = dg.nn.functional
    dx_t, dw_t, ddy = dg.tensor(x), dg.tensor(w), dg.tensor(dy)
    fwd = lambda: F.conv2d(dx_t, dw_t, padding=CONV_PAD)
    served, note = _served_or_note(dg, fwd)
    rows = [_timed_row("conv2d_b8_64x56_f32", f"F.conv2d eager [{served_plugins(served)}]",
                       "dragon", fwd, lambda y: _close(y.numpy(), y_ref), 
                       CONV_FWD_MS, timing, note=note, served=served)]

    gx, gw = dg.tensor(x), dg.tensor(w)
    gx.requires_grad_(True)
    gw.requires_grad_(True)

    def fwdbwd():
        y = F.conv2d(gx, gw, padding=CONV_PAD)
        return dg.grad([y], [gx, gw], grad_outputs=[ddy])

    def check(grads):
        return _close(grads[0].numpy(), dx_ref) or _close(grads[1].numpy(), dw_ref)
    served, note = _served_or_note(dg, fwdbwd)   # the forward's and gradient rule's ops
    rows.append(_timed_row("conv2d_fwdbwd_b8_64x56_f32",
                           f"conv2d + dg.grad(x, w) eager [{served_plugins(served)}]",
                           "dragon", fwdbwd, check, CONV_FWDBWD_MS, timing,
                           note=note, served=served))
    return rows


def _conv_torch_rows(torch, x, w, dy, refs, timing):
    y_ref, dx_ref, dw_ref = refs
    F = torch.nn.functional
    tx, tw, tdy = (torch.from_numpy(a.copy()) for a in (x, w, dy))
    rows = [_timed_row("conv2d_b8_64x56_f32", "F.conv2d eager", "torch",
                       lambda: F.conv2d(tx, tw, padding=CONV_PAD),
                       lambda y: _close(y.numpy(), y_ref), None, timing,
                       threads=torch.get_num_threads())]
    gx, gw = tx.clone().requires_grad_(True), tw.clone().requires_grad_(True)

    def fwdbwd():
        return torch.autograd.grad(F.conv2d(gx, gw, padding=CONV_PAD), (gx, gw), tdy)

    def check(grads):
        return _close(grads[0].numpy(), dx_ref) or _close(grads[1].numpy(), dw_ref)
    rows.append(_timed_row("conv2d_fwdbwd_b8_64x56_f32", "conv2d + autograd.grad(x, w) eager",
                           "torch", fwdbwd, check, None, timing,
                           threads=torch.get_num_threads()))
    return rows


def bench_conv(dg, torch, timing) -> list[dict]:
    """The 3x3 convolution, forward and forward + backward, ms per call."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal(CONV_X).astype(np.float32)
    w = (rng.standard_normal(CONV_W) / np.sqrt(np.prod(CONV_W[1:]))).astype(np.float32)
    dy = rng.standard_normal((CONV_X[0], CONV_W[0]) + CONV_X[2:]).astype(np.float32)
    refs = conv_reference(x, w, dy, CONV_PAD)
    rows = []  # Dragon's rows, then torch's; sorted by benchmark below
    if dg is None:
        rows += [_skip(b, "eager", "dragon", "ms", "lower", "dragon_core", t)
                 for b, t in (("conv2d_b8_64x56_f32", CONV_FWD_MS),
                              ("conv2d_fwdbwd_b8_64x56_f32", CONV_FWDBWD_MS))]
    else:
        rows += _conv_dragon_rows(dg, x, w, dy, refs, timing)
    if torch is None:
        rows += [_skip(b, "eager", "torch", "ms", "lower", "torch")
                 for b in ("conv2d_b8_64x56_f32", "conv2d_fwdbwd_b8_64x56_f32")]
    else:
        rows += _conv_torch_rows(torch, x, w, dy, refs, timing)
    return sorted(rows, key=lambda r: r["bench"] != "conv2d_b8_64x56_f32")


# ============================================================ matmul

def bench_matmul_rows(dg, torch, timing) -> list[dict]:
    """bench_matmul.py's problem, check and GFLOP/s, with the served kernel."""
    import bench_matmul as bm
    rng = np.random.default_rng(0)
    x = rng.standard_normal((bm.N, bm.N)).astype(np.float32)
    y = rng.standard_normal((bm.N, bm.N)).astype(np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    gflops = {"metric": "GFLOP/s", "better": "higher",
              "value_of": lambda seconds: bm.FLOPS / seconds / 1e9}
    rows = []
    if dg is None:
        rows.append(_skip(bm.BENCH, "dg.ops.matmul(a, b)", "dragon", "GFLOP/s", "higher",
                          "dragon_core", bm.TARGET_GFLOPS))
    else:
        a, b = dg.tensor(x), dg.tensor(y)
        call = lambda: dg.ops.matmul(a, b)
        served, note = _served_or_note(dg, call)
        rows.append(_timed_row(bm.BENCH, f"dg.ops.matmul(a, b) [{served_plugins(served)}]",
                               "dragon", call, lambda t: bm._close(t.numpy(), ref),
                               bm.TARGET_GFLOPS, timing, note=note, served=served, **gflops))
    if torch is None:
        rows.append(_skip(bm.BENCH, "torch.matmul(a, b)", "torch", "GFLOP/s", "higher",
                          "torch"))
    else:
        ta, tb = torch.from_numpy(x), torch.from_numpy(y)
        rows.append(_timed_row(bm.BENCH, "torch.matmul(a, b)", "torch",
                               lambda: torch.matmul(ta, tb),
                               lambda r: bm._close(r.numpy(), ref), None, timing,
                               threads=torch.get_num_threads(), **gflops))
    return rows


# ============================================================ ResNet-18

def _load_torch_resnet(torch, state, dtype):
    from models.resnet import resnet18
    model = resnet18(torch.nn).eval().to(dtype)
    missing, unexpected = model.load_state_dict(
        {k: torch.from_numpy(v).to(dtype) for k, v in state.items()}, strict=False)
    if unexpected or any(not k.endswith("num_batches_tracked") for k in missing):
        raise KeyError(f"torch ResNet-18: missing {missing}, unexpected {unexpected}")
    return model


def resnet_reference(dg, torch, state, x) -> tuple[np.ndarray, str]:
    """The float64 forward: torch's if installed, else Dragon's float64
    kernels (cpu_eigen: oneDNN has no float64). Returns (output, source)."""
    if torch is not None:
        model = _load_torch_resnet(torch, state, torch.float64)
        with torch.no_grad():
            return model(torch.from_numpy(x).double()).numpy(), "torch float64"
    from models.resnet import resnet18
    model = resnet18(dg.nn).double()
    model.load_state_dict({k: v.astype(np.float64) for k, v in state.items()})
    model.eval()
    return model(dg.tensor(x.astype(np.float64))).numpy(), "Dragon float64 (cpu_eigen)"


def _dragon_resnet(dg, state):
    """Dragon's ResNet-18 in eval mode with the weights of ``state``."""
    from models.resnet import resnet18
    model = resnet18(dg.nn)
    model.load_state_dict(state)
    return model.eval()


def _resnet_dragon_rows(dg, model, x, ref, timing, graph_target):
    bench = "resnet18_b8_64_f32"
    dx = dg.tensor(x)
    # Inference graphs freeze the weights (as onnxruntime's initializers
    # are constants): the batch-norm fold is then computed once.
    frozen = dg.function(lambda t: model(t), name="resnet18_forward", freeze=True)
    live = dg.function(lambda t: model(t), name="resnet18_forward_live")
    check = lambda y: _close(y.numpy(), ref)
    try:
        ops = collections.Counter(op.type for op in frozen.get_graph(dx).op)
        served, note = _served_or_note(dg, lambda: frozen(dx), ops)
    except Exception as exc:  # noqa: BLE001
        served, note = {}, f"tracing ResNet-18 failed: {type(exc).__name__}: {exc}"
    graph = _timed_row(bench, f"@dg.function(freeze=True) forward (O3) "
                       f"[{served_plugins(served)}]", "dragon", lambda: frozen(dx), check,
                       graph_target, timing, note=note, served=served)
    graph_live = _timed_row(bench, "@dg.function forward (O3), live parameters", "dragon",
                            lambda: live(dx), check, None, timing)
    eager = _timed_row(bench, "eager forward", "dragon", lambda: model(dx), check, None,
                       timing)
    return [graph, graph_live, eager]


def _ort_session(ort, onnx_model):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = os.cpu_count()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(onnx_model.SerializeToString(), opts,
                                providers=["CPUExecutionProvider"])


def _resnet_ort_row(state, x, ref, timing):
    bench = "resnet18_b8_64_f32"
    impl = "InferenceSession CPU, ORT_ENABLE_ALL"
    ort, onnx = try_import("onnxruntime"), try_import("onnx")
    if ort is None or onnx is None:
        return _skip(bench, impl, "onnxruntime", "ms", "lower",
                     "onnxruntime" if ort is None else "onnx")
    from onnx_export import resnet18_onnx
    try:
        session = _ort_session(ort, resnet18_onnx(state, list(x.shape)))
    except Exception as exc:  # noqa: BLE001
        return result(bench, impl, "onnxruntime", "ms", None, "lower",
                      note=f"building the ONNX ResNet-18 failed: {type(exc).__name__}: {exc}")
    feed = {"x": x}
    return _timed_row(bench, impl, "onnxruntime", lambda: session.run(None, feed)[0],
                      lambda y: _close(y, ref), None, timing,
                      version=ort.__version__, threads=os.cpu_count())


def _resnet_torch_row(torch, state, x, ref, timing):
    model = _load_torch_resnet(torch, state, torch.float32)
    tx = torch.from_numpy(x)

    def forward():
        with torch.no_grad():
            return model(tx)
    return _timed_row("resnet18_b8_64_f32", "eager forward, no_grad", "torch", forward,
                      lambda y: _close(y.numpy(), ref), None, timing,
                      threads=torch.get_num_threads())


def bench_resnet(dg, torch, timing) -> list[dict]:
    """ResNet-18 inference: Dragon graph (and eager), onnxruntime, torch."""
    from models.resnet import float_shapes, random_state, resnet18
    bench = "resnet18_b8_64_f32"
    if dg is None and torch is None:
        return [_skip(bench, "forward", "dragon", "ms", "lower", "dragon_core")]
    template = resnet18(dg.nn if dg is not None else torch.nn)
    state = random_state(float_shapes(template.state_dict()))
    model = None
    if dg is not None:
        # The ONNX model and torch's take their weights from Dragon's model.
        model = _dragon_resnet(dg, state)
        state = {k: v.numpy() for k, v in model.state_dict().items()}
    x = np.random.default_rng(1).standard_normal(RESNET_X).astype(np.float32)
    ref, source = resnet_reference(dg, torch, state, x)
    ort_row = _resnet_ort_row(state, x, ref, timing)
    torch_row = (_resnet_torch_row(torch, state, x, ref, timing) if torch is not None
                 else _skip(bench, "eager forward", "torch", "ms", "lower", "torch"))
    rows = [ort_row, torch_row]
    if dg is None:
        rows.insert(0, _skip(bench, "@dg.function(freeze=True) forward", "dragon", "ms", "lower",
                             "dragon_core"))
    else:
        # Dragon's graph mode is held to onnxruntime's time of this same run.
        target = None if ort_row["value"] is None else round(ort_row["value"], 2)
        rows[:0] = _resnet_dragon_rows(dg, model, x, ref, timing, target)
    for row in rows:
        row["reference"] = source
    return rows


# ============================================================ entry points

def run(quick: bool = False) -> list[dict]:
    """Every benchmark of this module (see the module docstring).

    Parameters
    ----------
    quick : bool
        One short timed run per row (smoke tests); the checks are unchanged.

    Returns
    -------
    list of dict
        One row per implementation (see ``_harness.result``).
    """
    timing = TIMING["quick" if quick else "full"]
    dg, torch = try_import("dragon_core"), try_import("torch")
    if torch is not None:
        torch.set_num_threads(os.cpu_count())
    rows = (bench_conv(dg, torch, timing) + bench_matmul_rows(dg, torch, timing)
            + bench_resnet(dg, torch, timing))
    add_ratios(rows)
    return rows


def add_ratios(rows: list[dict]) -> None:
    """Give each timed Dragon row ``vs``: library -> its value over that
    library's in the same benchmark and run (a time ratio above 1, or a
    throughput ratio below 1, means Dragon was slower), also stated at the
    front of its note. On a shared machine the ratios are steadier than the
    numbers."""
    for row in rows:
        if row["library"] != "dragon" or not row["value"]:
            continue
        row["vs"] = {r["library"]: row["value"] / r["value"] for r in rows
                     if r["bench"] == row["bench"] and r["library"] != "dragon" and r["value"]}
        if row["vs"]:
            what = "time" if row["better"] == "lower" else row["metric"]
            ratios = ", ".join(f"{v:.2f}x {lib}'s" for lib, v in row["vs"].items())
            row["note"] = "; ".join(t for t in (f"{ratios} {what} in this run", row["note"]) if t)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="one short timed run per row (smoke test; checks unchanged)")
    parser.add_argument("--json", type=str, default=None,
                        help="also write the rows and machine info to this JSON file")
    args = parser.parse_args(argv)
    import run as bench_run
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    rows = run(quick=args.quick)
    info = bench_run.machine_info()
    info["loadavg_1m_before"] = load
    info["quick"] = args.quick
    bench_run.print_table(rows, info)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": info, "results": rows}, f, indent=2, default=str)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
