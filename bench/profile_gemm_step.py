"""Every MatMul of the compiled encoder training step: in the step, alone, and
against the peak (issue 21, session perf21).

``python bench/profile_gemm_step.py [--runs N] [--precision float32|bfloat16]``
runs, for each precision in its own child process (so one step's buffers do
not share the caches with the other's):

* the compiled step of bench_workloads.py's encoder, N single-run profiles,
  keeping each op's **minimum** (the shared machine's load inflates means);
* for every ``MatMul`` / ``MatMulBiasAct`` of the plan, the same product
  alone, eagerly: operands of the same shapes and dtypes, a ``Transpose``
  producer rebuilt as the same strided view, the same ``transpose_a/b``,
  ``out_dtype``, bias and activation; the best of many calls with the
  operands hot in the caches (eager dispatch, a few µs, included);
* which kernel served the product alone: oneDNN's (the implementation
  ``ONEDNN_VERBOSE`` names) or cpu_eigen's (no oneDNN line);
* the float32 FMA peak of both cores measured in the same process
  (bench_peak.py; bfloat16's ``vdpbf16ps`` peak is twice it on this CPU).

It prints one row per product: shape, layout, dtypes, kernel, µs in the step,
µs alone, GFLOP/s of each, and % of the peak; then the totals.
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_workloads as bw  # noqa: E402
from models import bert  # noqa: E402

_MARK = "@@product "


def _step(dg, precision):
    import torch
    shapes = {k: tuple(v.shape) for k, v in
              bert.encoder_layer(torch.nn, bert.torch_f(), bw.HIDDEN, bw.HEADS)
              .state_dict().items()}
    state = bert.random_state(shapes)
    step, _ = bw.dragon_encoder_step(dg, state, precision, True)
    x, t = bw._encoder_data()
    return step, dg.tensor(x), dg.tensor(t)


def _products(dg, g):
    """[(op, [(shape, dtype, producer op or None)], attrs)] of every MatMul."""
    from dragon_core._dtypes import as_dtype
    info = {v.name: (tuple(v.shape), str(as_dtype(v.dtype))) for v in g.value_info}
    producer = {o: op for op in g.op for o in op.output}
    out = []
    for op in g.op:
        if not op.type.startswith("MatMul"):
            continue
        ins = [(info[n][0], info[n][1], producer.get(n)) for n in op.input]
        attrs = {k: op.attr[k] for k in op.attr}
        out.append((op, ins, attrs))
    return out


def _operand(dg, shape, dtype, prod, rng):
    """A tensor like the step's operand: a strided view when a Transpose
    (a permuting view) made it, dense otherwise."""
    if prod is not None and prod.type == "Transpose":
        perm = list(prod.attr["perm"].ints.values)
        base_shape = [0] * len(shape)
        for i, p in enumerate(perm):
            base_shape[p] = shape[i]
        base = dg.tensor(rng.standard_normal(base_shape).astype(np.float32)).astype(dtype)
        return dg.ops.transpose(base, perm), "T"
    return dg.tensor(rng.standard_normal(shape).astype(np.float32)).astype(dtype), "d"


def _dtype_name(code):
    from dragon_core._dtypes import as_dtype
    return str(as_dtype(code))


def _call(dg, op, a, b, bias, attrs):
    kw = dict(transpose_a=attrs["transpose_a"].b if "transpose_a" in attrs else False,
              transpose_b=attrs["transpose_b"].b if "transpose_b" in attrs else False)
    if op.type == "MatMulBiasAct":
        act = attrs["activation"].s if "activation" in attrs else "none"
        if "out_dtype" in attrs and attrs["out_dtype"].WhichOneof("value") == "dtype":
            kw["out_dtype"] = _dtype_name(attrs["out_dtype"].dtype)
        return lambda: dg.ops.matmul_bias_act(a, b, bias, activation=act, **kw)
    if "out_dtype" in attrs and attrs["out_dtype"].WhichOneof("value") == "dtype":
        kw["out_dtype"] = _dtype_name(attrs["out_dtype"].dtype)
    return lambda: dg.ops.matmul(a, b, **kw)


def _flops(shape_a, shape_b, ta, tb) -> float:
    m, k = (shape_a[-1], shape_a[-2]) if ta else (shape_a[-2], shape_a[-1])
    n = shape_b[-2] if tb else shape_b[-1]
    batch = int(np.prod(np.broadcast_shapes(tuple(shape_a[:-2]), tuple(shape_b[:-2])) or (1,)))
    return 2.0 * batch * m * n * k, (batch, m, k, n)


def child(precision: str, runs: int, verbose_kernels: bool) -> None:
    import dragon_core as dg
    step, x, t = _step(dg, precision)
    for _ in range(3):
        step(x, t)
    g = step.get_graph(x, t)
    prods = _products(dg, g)
    rng = np.random.default_rng(0)
    calls = []
    for op, ins, attrs in prods:
        (sa, da, pa), (sb, db, pb) = ins[0], ins[1]
        a, la = _operand(dg, sa, da, pa, rng)
        b, lb = _operand(dg, sb, db, pb, rng)
        bias = None
        if len(ins) > 2:
            bias = dg.tensor(rng.standard_normal(ins[2][0]).astype(np.float32)).astype(ins[2][1])
        calls.append((op, ins, attrs, la + lb, _call(dg, op, a, b, bias, attrs)))
    if verbose_kernels:
        libc = ctypes.CDLL(None)
        for op, *_rest, fn in calls:
            fn()  # primitive creation lines first
        for op, *_rest, fn in calls:
            sys.stdout.flush()
            libc.fflush(None)
            os.write(1, f"{_MARK}{op.name}\n".encode())
            fn()
            libc.fflush(None)
        return
    best = {}
    for _ in range(runs):
        p = step.profile(x, t, runs=1, warmup=0)
        for r in p.rows:
            best[r["name"]] = min(best.get(r["name"], float("inf")), r["mean_us"])
    alone = {}
    for op, _ins, _attrs, _lay, fn in calls:
        for _ in range(5):
            fn()
        b, count = float("inf"), 0
        end = time.perf_counter() + 0.3
        # At least 200 calls: on a loaded machine 0.3 s may hold only a few,
        # each with the process descheduled inside it.
        while time.perf_counter() < end or count < 200:
            t0 = time.perf_counter()
            fn()
            b = min(b, time.perf_counter() - t0)
            count += 1
        alone[op.name] = b * 1e6
    from bench_peak import peak_gflops
    peak32 = peak_gflops()
    peak = peak32 * (2.0 if precision == "bfloat16" else 1.0)
    print(f"## {precision}: FMA peak (float32, 2 threads, this run) {peak32:.0f} GFLOP/s; "
          f"{'vdpbf16ps peak 2x: ' + format(peak, '.0f') + ' GFLOP/s; ' if precision == 'bfloat16' else ''}"
          f"load {os.getloadavg()[0]:.1f}")
    print("| op | batch×m×k×n | layout a,b | dtypes in→out | µs step | µs alone | "
          "GFLOP/s step | GFLOP/s alone | % peak step |")
    print("|---|---|---|---|---:|---:|---:|---:|---:|")
    tot_step = tot_alone = tot_flops = 0.0
    for op, ins, attrs, lay, _fn in calls:
        ta = attrs["transpose_a"].b if "transpose_a" in attrs else False
        tb = attrs["transpose_b"].b if "transpose_b" in attrs else False
        fl, (bt, m, k, n) = _flops(ins[0][0], ins[1][0], ta, tb)
        s, a = best.get(op.name, float("nan")), alone[op.name]
        tot_step += s
        tot_alone += a
        tot_flops += fl
        out_dt = ins[0][1]
        if "out_dtype" in attrs and attrs["out_dtype"].WhichOneof("value") == "dtype":
            from dragon_core._dtypes import as_dtype
            out_dt = str(as_dtype(attrs["out_dtype"].dtype))
        flags = ("ᵀa" if ta else "") + ("ᵀb" if tb else "")
        print(f"| {op.name} | {bt}×{m}×{k}×{n} | {lay}{(' ' + flags) if flags else ''} | "
              f"{ins[0][1]}→{out_dt} | {s:.0f} | {a:.0f} | {fl / s / 1e3:.0f} | "
              f"{fl / a / 1e3:.0f} | {100 * fl / s / 1e3 / peak:.0f}% |")
    print(f"| **all {len(calls)}** | {tot_flops / 1e9:.2f} GFLOP | | | {tot_step:.0f} | "
          f"{tot_alone:.0f} | {tot_flops / tot_step / 1e3:.0f} | {tot_flops / tot_alone / 1e3:.0f} | "
          f"{100 * tot_flops / tot_step / 1e3 / peak:.0f}% |")
    print()


def kernels(precision: str) -> dict:
    """op name -> the oneDNN implementation that served it alone, or
    'cpu_eigen' (no oneDNN exec line)."""
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run([sys.executable, __file__, "--child", precision, "--kernels"],
                         env=env, capture_output=True, text=True, check=True).stdout
    found, cur = {}, None
    for line in out.splitlines():
        if line.startswith(_MARK):
            cur = line[len(_MARK):].strip()
            found[cur] = "cpu_eigen"
        elif cur and ",exec," in line and ",matmul," in line:
            m = re.search(r",matmul,([^,]+),", line)
            found[cur] = "oneDNN " + (m.group(1) if m else "?")
    return found


def main():
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 20
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1], runs, "--kernels" in sys.argv)
        return
    precs = ([sys.argv[sys.argv.index("--precision") + 1]] if "--precision" in sys.argv
             else ["float32", "bfloat16"])
    for precision in precs:
        ks = kernels(precision)
        print(f"kernels ({precision}, each product alone): "
              + "; ".join(f"{k}: {v}" for k, v in ks.items()))
        subprocess.run([sys.executable, __file__, "--child", precision, "--runs", str(runs)],
                       check=True)


if __name__ == "__main__":
    main()
