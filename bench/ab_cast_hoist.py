"""A/B of the cast_hoist pass on the bfloat16-autocast encoder training step
(issue 21): the same step compiled with and without the pass, profiled
alternately in one process; prints per round the step time, the Casts of
the attention heads (Q, K, V), all Casts, and the MatMuls.

``python bench/ab_cast_hoist.py [--rounds N] [--runs N]``
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import dragon_core as dg  # noqa: E402
from bench_workloads import HEADS, HIDDEN, _encoder_data  # noqa: E402
from models import bert  # noqa: E402


def _step(state, disable):
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    opt = dg.optim.Adam(list(model.parameters()), lr=1e-4)

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=True):
            loss = dg.nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss
    return dg.function(step, disable_passes=disable)


def _summary(p, graph):
    producer = {o: op for op in graph.op for o in op.output}
    rows = {r["name"]: r["mean_us"] for r in p.rows}
    heads = 0.0
    for op in graph.op:
        # The head casts: of a Transpose (hoist off) or feeding one (hoist on).
        if op.type == "Cast":
            src = producer.get(op.input[0])
            feeds_t = any(o.type == "Transpose" and o.input[0] == op.output[0] for o in graph.op)
            if (src is not None and src.type == "Transpose") or feeds_t:
                heads += rows.get(op.name, 0.0)
    by = {t: us for t, _, us in p.by_type()}
    return p.wall_us / 1e3, heads, by.get("Cast", 0.0), by.get("MatMul", 0.0), \
        by.get("Reshape", 0.0)


def main(rounds: int, runs: int) -> None:
    x, t = _encoder_data()
    m = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    state = bert.random_state({k: tuple(v.shape) for k, v in m.state_dict().items()})
    args = (dg.tensor(x), dg.tensor(t))
    steps = {"hoist on": _step(state, ()), "hoist off": _step(state, ("cast_hoist",))}
    graphs = {k: f.get_graph(*args) for k, f in steps.items()}
    print(f"{'config':<10} {'step ms':>8} {'QKV casts µs':>13} {'all Casts µs':>13} "
          f"{'MatMul µs':>10} {'Reshape µs':>11}")
    for r in range(rounds):
        for name, f in steps.items():
            p = f.profile(*args, runs=runs)
            s = _summary(p, graphs[name])
            print(f"{name:<10} {s[0]:8.2f} {s[1]:13.1f} {s[2]:13.1f} {s[3]:10.1f} {s[4]:11.1f}")


if __name__ == "__main__":
    a = sys.argv
    main(int(a[a.index("--rounds") + 1]) if "--rounds" in a else 4,
         int(a[a.index("--runs") + 1]) if "--runs" in a else 10)
