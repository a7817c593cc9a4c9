"""Per-op detail of the compiled encoder training steps (issue 21, nongemm).

``python bench/profile_nongemm.py [--runs N] [--precision float32|bfloat16]
[--graph]`` prints, for the float32 and the bfloat16-autocast compiled step of
bench_workloads.py's encoder (each precision in its own child process, so
that one step's buffers do not share the caches with the other's), every
op that is not a MatMul: its type, output dtype/shape, the bytes it reads
and writes (from the graph's value_info: inputs + outputs; a view op that
aliases its input moves nothing, but is counted), the minimum over N
single-run profiles of its time (the shared machine's load inflates means),
and its effective bandwidth (ops under 5 µs are left out of the per-op
table) beside two references measured in the same
process: a Dragon ``Neg`` (read + write, the plugin's threads) over a 1 MB
and a 16 MB float32 tensor, the first in the L2 caches, the second not.
``--graph`` also prints the ops in graph order with their inputs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_workloads as bw  # noqa: E402
from models import bert  # noqa: E402

_SIZES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8, "int64": 8,
          "int32": 4, "bool": 1, "uint8": 1, "int8": 1}


def neg_bandwidth(dg, nbytes: int, reps: int = 50) -> float:
    """Best read + write bandwidth (GB/s) of a Dragon Neg over nbytes of
    float32 (the plugin's threads, as the step's ops run)."""
    x = dg.tensor(np.ones(nbytes // 4, np.float32))
    best = 1e9
    for _ in range(reps):
        t = time.perf_counter()
        dg.ops.neg(x)
        best = min(best, time.perf_counter() - t)
    return 2 * nbytes / best / 1e9


def _value_bytes(graph):
    from dragon_core._dtypes import as_dtype
    info = {}
    for vi in graph.value_info:
        try:
            dt = str(as_dtype(vi.dtype))
        except Exception:  # noqa: BLE001
            dt = str(vi.dtype)
        shape = tuple(vi.shape) if hasattr(vi, "shape") else ()
        info[vi.name] = (dt, shape)
    return info


def profile(precision: str, runs: int, show_graph: bool) -> None:
    import dragon_core as dg
    import torch
    x, t = bw._encoder_data()
    shapes = {k: tuple(v.shape) for k, v in
              bert.encoder_layer(torch.nn, bert.torch_f(), bw.HIDDEN, bw.HEADS)
              .state_dict().items()}
    state = bert.random_state(shapes)
    step, _ = bw.dragon_encoder_step(dg, state, precision, True)
    xt, tt = dg.tensor(x), dg.tensor(t)
    for _ in range(3):
        step(xt, tt)
    best, types, walls = {}, {}, []
    for _ in range(runs):
        p = step.profile(xt, tt, runs=1, warmup=0)
        walls.append(p.wall_us)
        for r in p.rows:
            types[r["name"]] = r["type"]
            best[r["name"]] = min(best.get(r["name"], float("inf")), r["mean_us"])
    bw_l2, bw_big = neg_bandwidth(dg, 1 << 20), neg_bandwidth(dg, 16 << 20)
    g = step.get_graph(xt, tt)
    info = _value_bytes(g)
    byname = {op.name: op for op in g.op}
    total = sum(best.values())
    mm = sum(us for n, us in best.items() if types[n].startswith("MatMul"))
    print(f"## {precision}: best wall {min(walls) / 1e3:.2f} ms/step; sum of per-op minima "
          f"{total / 1e3:.2f} ms: MatMul {mm / 1e3:.2f} ms, the rest {(total - mm) / 1e3:.2f} ms")
    print(f"reference bandwidth (Dragon Neg, read + write): 1 MB {bw_l2:.0f} GB/s, "
          f"16 MB {bw_big:.0f} GB/s")
    rows = []
    for name, us in best.items():
        if types[name].startswith("MatMul"):
            continue
        op = byname.get(name)
        nb, desc = 0, ""
        if op is not None:
            for nm in list(op.input) + list(op.output):
                if nm in info:
                    dt, sh = info[nm]
                    nb += int(np.prod(sh, dtype=np.int64)) * _SIZES.get(dt, 4)
            if op.output and op.output[0] in info:
                dt, sh = info[op.output[0]]
                desc = f"{dt}{list(sh)}"
        rows.append((us, types[name], name, desc, nb))
    by_type = {}
    for us, typ, _n, _d, nb in rows:
        c, u, b = by_type.get(typ, (0, 0.0, 0))
        by_type[typ] = (c + 1, u + us, b + nb)
    print("\n| op type | ops | µs | MB moved | GB/s | % of 16 MB Neg |")
    print("|---|---:|---:|---:|---:|---:|")
    for typ, (c, u, b) in sorted(by_type.items(), key=lambda kv: -kv[1][1]):
        gbs = b / (u * 1e-6) / 1e9 if u > 0 else 0.0
        print(f"| {typ} | {c} | {u:.1f} | {b / 1e6:.2f} | {gbs:.1f} | {100 * gbs / bw_big:.0f}% |")
    print("\n| op | type | out | MB moved | µs | GB/s |")
    print("|---|---|---|---:|---:|---:|")
    for us, typ, name, desc, nb in [r for r in sorted(rows, reverse=True) if r[0] >= 5.0]:
        gbs = nb / (us * 1e-6) / 1e9 if us > 0 else 0.0
        print(f"| {name[:28]} | {typ} | {desc} | {nb / 1e6:.2f} | {us:.1f} | {gbs:.1f} |")
    if show_graph:
        for op in g.op:
            ins = [f"{n}:{info.get(n, ('?', ()))[0]}{list(info.get(n, ('?', ()))[1])}"
                   for n in op.input]
            print(op.type, op.name, "<-", ", ".join(ins)[:300])
    print()


def main():
    runs = int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 30
    show = "--graph" in sys.argv
    if "--child" in sys.argv:
        profile(sys.argv[sys.argv.index("--child") + 1], runs, show)
        return
    precs = ([sys.argv[sys.argv.index("--precision") + 1]] if "--precision" in sys.argv
             else ["float32", "bfloat16"])
    for precision in precs:
        args = [sys.executable, __file__, "--child", precision, "--runs", str(runs)]
        if show:
            args.append("--graph")
        subprocess.run(args, check=True)


if __name__ == "__main__":
    main()
