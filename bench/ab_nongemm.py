"""A/B of the non-GEMM work of the compiled encoder training steps (issue 21,
nongemm).

Each configuration is an environment (and graph passes to disable) that
cpu_eigen reads once per process, so configurations run in separate child
processes, alternating: ``--cycles`` times each, every child profiling its
steps ``--rounds`` times, one run per profile. Per op the parent keeps the
minimum over all of a configuration's profiles (the shared machine's load
inflates means) and prints, per precision, the summed minima of the
non-MatMul ops by type, their total, the MatMuls' total and the best wall
time of a step.

Configurations: ``pingpong`` (the ``state_inplace`` pass off: the optimizer
update writes fresh buffers, as before session perf21), ``old`` (float32 -> bfloat16 Casts through the AVX-512 bit
arithmetic, ``DRAGON_CPU_EIGEN_CVT_BF16=0``), ``new`` (as shipped: through
AVX512-BF16's vcvtneps2bf16 where the CPU has it) and ``stream`` (as shipped
plus MultiAdamUpdate's opt-in non-temporal moment stores,
``DRAGON_CPU_EIGEN_ADAM_STREAM=1``). A configuration may also
name graph passes to disable (``disable``), as the evaluation of the
reverted ``cast_fuse`` pass did (docs/benchmarks.md, "nongemm").

``python bench/ab_nongemm.py [--cycles N] [--rounds N] [--precision float32|bfloat16]
[--configs old,new,stream]``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SWITCHES = ("DRAGON_CPU_EIGEN_CVT_BF16", "DRAGON_CPU_EIGEN_ADAM_STREAM")

CONFIGS = {
    "old": {"disable": (), "env": {"DRAGON_CPU_EIGEN_CVT_BF16": "0"}},
    "new": {"disable": (), "env": {}},
    # MultiAdamUpdate's non-temporal moment stores (opt-in)
    "stream": {"disable": (), "env": {"DRAGON_CPU_EIGEN_ADAM_STREAM": "1"}},
    # the optimizer update writing fresh buffers (ping-pong), as before the
    # state_inplace pass (perf21)
    "pingpong": {"disable": ("state_inplace",), "env": {}},
}


def _step(dg, bert, state, precision, disable, hidden, heads):
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), hidden, heads)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    opt = dg.optim.Adam(list(model.parameters()), lr=1e-4)
    bf16 = precision == "bfloat16"

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=bf16):
            loss = dg.nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss
    return dg.function(step, disable_passes=disable)


def child(config: str, precision: str, rounds: int) -> dict:
    """Per-op minima (µs), op types and the best step wall time (s) of one
    configuration in this process."""
    import dragon_core as dg
    from bench_workloads import HEADS, HIDDEN, _encoder_data
    from models import bert
    x, t = _encoder_data()
    m = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    state = bert.random_state({k: tuple(v.shape) for k, v in m.state_dict().items()})
    args = (dg.tensor(x), dg.tensor(t))
    f = _step(dg, bert, state, precision, CONFIGS[config]["disable"], HIDDEN, HEADS)
    for _ in range(3):
        f(*args)
    best, types, wall = {}, {}, float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        f(*args)
        wall = min(wall, time.perf_counter() - t0)
        for r in f.profile(*args, runs=1, warmup=0).rows:
            types[r["name"]] = r["type"]
            best[r["name"]] = min(best.get(r["name"], float("inf")), r["mean_us"])
    return {"best": best, "types": types, "wall": wall}


def main(cycles: int, rounds: int, precisions: list, names: list) -> None:
    configs = {k: CONFIGS[k] for k in names}
    for precision in precisions:
        best = {k: {} for k in configs}
        types, wall = {}, {k: float("inf") for k in configs}
        for _ in range(cycles):
            for k, c in configs.items():
                # Inherited switches would turn the A/B into an A/A.
                env = {k: v for k, v in os.environ.items() if k not in _SWITCHES}
                env.update(c["env"])
                out = subprocess.run([sys.executable, __file__, "--child", k, precision,
                                      str(rounds)], env=env, capture_output=True, text=True,
                                     check=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                types.update(res["types"])
                wall[k] = min(wall[k], res["wall"])
                for name, us in res["best"].items():
                    best[k][name] = min(best[k].get(name, float("inf")), us)
        print(f"## {precision}: per-op minima over {cycles} x {rounds} profiles per "
              f"configuration, alternating processes (µs)")
        by_type = {k: {} for k in configs}
        for k in configs:
            for name, us in best[k].items():
                n, tot = by_type[k].get(types[name], (0, 0.0))
                by_type[k][types[name]] = (n + 1, tot + us)
        order = sorted({t for k in configs for t in by_type[k]},
                       key=lambda t: -max(by_type[k].get(t, (0, 0.0))[1] for k in configs))
        print("| op type | " + " | ".join(f"{k} (n) | {k} µs" for k in configs) + " |")
        print("|---|" + "---:|" * (2 * len(configs)))
        for typ in order:
            cells = []
            for k in configs:
                n, us = by_type[k].get(typ, (0, 0.0))
                cells += [str(n), f"{us:.1f}"]
            print(f"| {typ} | " + " | ".join(cells) + " |")
        for k in configs:
            mm = sum(us for typ, (n, us) in by_type[k].items() if typ.startswith("MatMul"))
            non = sum(us for typ, (n, us) in by_type[k].items() if not typ.startswith("MatMul"))
            print(f"{k}: non-MatMul {non / 1e3:.3f} ms, MatMul {mm / 1e3:.3f} ms, "
                  f"best step wall {wall[k] * 1e3:.2f} ms")
        print()


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        print(json.dumps(child(sys.argv[i + 1], sys.argv[i + 2], int(sys.argv[i + 3]))))
    else:
        def arg(name, default):
            return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
        main(int(arg("--cycles", 4)), int(arg("--rounds", 10)),
             [arg("--precision", None)] if "--precision" in sys.argv
             else ["float32", "bfloat16"], arg("--configs", "old,new").split(","))
