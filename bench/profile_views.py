"""Per-op profile of the compiled encoder training step, with each op's
producer (issue 21: Reshape / Cast of Transpose views).

``python bench/profile_views.py [--runs N] [--types Reshape,Cast,...]``
prints, for the float32 and bfloat16-autocast steps, the step time and every
op of the listed types with its mean µs and the ops that produce its inputs.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dragon_core as dg  # noqa: E402
from bench_workloads import HEADS, HIDDEN, _encoder_data, dragon_encoder_step  # noqa: E402
from models import bert  # noqa: E402


def main(runs: int, types: set) -> None:
    x, t = _encoder_data()
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = bert.random_state(shapes)
    for precision in ("float32", "bfloat16"):
        step, _ = dragon_encoder_step(dg, state, precision, True)
        args = (dg.tensor(x), dg.tensor(t))
        graph = step.get_graph(*args)
        producer = {o: op for op in graph.op for o in op.output}
        p = step.profile(*args, runs=runs)
        rows = {r["name"]: r for r in p.rows}
        print(f"## {precision}: {p.wall_us / 1e3:.2f} ms per call, {p.ops_us / 1e3:.2f} ms in ops")
        total = {}
        for op in graph.op:
            if op.type not in types:
                continue
            r = rows.get(op.name)
            us = r["mean_us"] if r else float("nan")
            total[op.type] = total.get(op.type, 0.0) + us
            src = ", ".join(f"{producer[i].type}:{producer[i].name}" if i in producer else i
                            for i in op.input)
            print(f"  {op.name:<28} {op.type:<10} {us:8.1f} µs  <- {src}")
        print("  totals: " + ", ".join(f"{k} {v:.0f} µs" for k, v in total.items()))


if __name__ == "__main__":
    a = sys.argv
    runs = int(a[a.index("--runs") + 1]) if "--runs" in a else 20
    types = set(a[a.index("--types") + 1].split(",")) if "--types" in a else {"Reshape", "Cast"}
    main(runs, types)
