"""A/B of the cast_hoist pass on the bfloat16-autocast encoder training step
(issue 21): the same step compiled with and without the pass, profiled
alternately in one process (per-op minima over single-run profiles: the
shared machine's load inflates means); prints the step time, the Casts of
the attention heads (Q, K, V), all Casts, the MatMuls and the Reshapes.

``python bench/ab_cast_hoist.py [--rounds N] [--configs "hoist on,hoist off"]``
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


def _head_casts(graph) -> set:
    """Names of the Casts that read a Transpose (the head casts of Q, K, V)
    in the graph compiled without the pass; the pass keeps op names."""
    producer = {o: op for op in graph.op for o in op.output}
    return {op.name for op in graph.op if op.type == "Cast"
            and op.input[0] in producer and producer[op.input[0]].type == "Transpose"}


def main(rounds: int, configs: list) -> None:
    """Per-op minima over `rounds` single-run profiles of each configuration,
    the configurations alternating run by run (so load changes hit both)."""
    x, t = _encoder_data()
    m = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    state = bert.random_state({k: tuple(v.shape) for k, v in m.state_dict().items()})
    args = (dg.tensor(x), dg.tensor(t))
    steps = {name: _step(state, ("cast_hoist",) if name == "hoist off" else ())
             for name in configs}
    graphs = {k: f.get_graph(*args) for k, f in steps.items()}
    off_graph = _step(state, ("cast_hoist",)).get_graph(*args)
    heads = _head_casts(off_graph)
    # The attention MatMuls: those reading a head cast or a Transpose.
    producer = {o: op for op in off_graph.op for o in op.output}
    attn = {op.name for op in off_graph.op if op.type == "MatMul" and any(
        i in producer and (producer[i].name in heads or producer[i].type == "Transpose")
        for i in op.input)}
    best = {k: {} for k in steps}
    wall = {k: float("inf") for k in steps}
    for f in steps.values():
        f.profile(*args, runs=2)
    for _ in range(rounds):
        for name, f in steps.items():
            p = f.profile(*args, runs=1, warmup=0)
            wall[name] = min(wall[name], p.wall_us)
            for r in p.rows:
                best[name][r["name"]] = min(best[name].get(r["name"], float("inf")), r["mean_us"])
    print(f"per-op minima over {rounds} single-run profiles; head casts: {sorted(heads)}; "
          f"attention MatMuls: {sorted(attn)}")
    print(f"{'config':<10} {'min step ms':>11} {'sum of op minima ms':>20} {'head Casts µs':>14} "
          f"{'all Casts µs':>13} {'attn MatMuls µs':>16} {'MatMul µs':>10} {'Reshape µs':>11}")
    for name in steps:
        types = {op.name: op.type for op in graphs[name].op}
        b = best[name]

        def total(typ):
            return sum(us for n, us in b.items() if types.get(n) == typ)
        print(f"{name:<10} {wall[name] / 1e3:11.2f} {sum(b.values()) / 1e3:20.2f} "
              f"{sum(b.get(n, 0.0) for n in heads):14.1f} {total('Cast'):13.1f} "
              f"{sum(b.get(n, 0.0) for n in attn):16.1f} "
              f"{total('MatMul'):10.1f} {total('Reshape'):11.1f}")


if __name__ == "__main__":
    a = sys.argv
    cfg = a[a.index("--configs") + 1].split(",") if "--configs" in a else ["hoist on",
                                                                            "hoist off"]
    main(int(a[a.index("--rounds") + 1]) if "--rounds" in a else 30, cfg)
