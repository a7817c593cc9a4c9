"""A/B of the attention products inside the compiled encoder training step
(issue 21, session attn): cpu_eigen's batched small-GEMM on or off.

Configurations are environments that cpu_eigen reads once per process, so
they run in separate child processes, alternating, ``--cycles`` times each;
every child profiles the compiled step ``--rounds`` times (one run per
profile) and the parent keeps each op's minimum over all of a
configuration's profiles (the shared machine's load inflates means). It
prints, per precision, the six attention products (q k^T, p v and their
gradients: the MatMuls with a batch of 32), all 21 MatMuls, the rest, and
the best wall time of a step.

``off``: DRAGON_CPU_EIGEN_BATCHED_GEMM=off (main's dispatch);
``new``: the default dispatch of this build.

``python bench/ab_attn_step.py [--cycles N] [--rounds N] [--precision float32|bfloat16]
[--configs off,new]``
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_SWITCHES = ("DRAGON_CPU_EIGEN_BATCHED_GEMM",)
CONFIGS = {
    "off": {"DRAGON_CPU_EIGEN_BATCHED_GEMM": "off"},
    "new": {},
}


def child(precision: str, rounds: int) -> dict:
    import dragon_core as dg
    import bench_workloads as bw
    import torch
    from models import bert
    shapes = {k: tuple(v.shape) for k, v in
              bert.encoder_layer(torch.nn, bert.torch_f(), bw.HIDDEN, bw.HEADS)
              .state_dict().items()}
    state = bert.random_state(shapes)
    f, _ = bw.dragon_encoder_step(dg, state, precision, True)
    x, t = bw._encoder_data()
    args = (dg.tensor(x), dg.tensor(t))
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


ATTN = ("MatMul_3", "MatMul_4", "MatMul_14", "MatMul_15", "MatMul_16", "MatMul_17")


def main(cycles, rounds, precisions, names):
    for precision in precisions:
        best = {k: {} for k in names}
        types, wall = {}, {k: float("inf") for k in names}
        for _ in range(cycles):
            for k in names:
                env = {a: b for a, b in os.environ.items() if a not in _SWITCHES}
                env.update(CONFIGS[k])
                out = subprocess.run([sys.executable, __file__, "--child", precision,
                                      str(rounds)], env=env, capture_output=True, text=True,
                                     check=True)
                res = json.loads(out.stdout.strip().splitlines()[-1])
                types.update(res["types"])
                wall[k] = min(wall[k], res["wall"])
                for name, us in res["best"].items():
                    best[k][name] = min(best[k].get(name, float("inf")), us)
        print(f"## {precision}: per-op minima over {cycles} x {rounds} profiles per "
              f"configuration, alternating processes (µs)")
        print("| op | " + " | ".join(names) + " |")
        print("|---|" + "---:|" * len(names))
        for op in ATTN:
            print(f"| {op} | " + " | ".join(f"{best[k].get(op, float('nan')):.1f}"
                                           for k in names) + " |")
        for k in names:
            att = sum(best[k][op] for op in ATTN)
            mm = sum(us for n, us in best[k].items() if types[n].startswith("MatMul"))
            rest = sum(us for n, us in best[k].items() if not types[n].startswith("MatMul"))
            print(f"{k}: attention x6 {att:.1f} µs, MatMul x21 {mm / 1e3:.3f} ms, "
                  f"other ops {rest / 1e3:.3f} ms, best step wall {wall[k] * 1e3:.2f} ms")
        print(flush=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        print(json.dumps(child(sys.argv[i + 1], int(sys.argv[i + 2]))))
    else:
        def arg(name, default):
            return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
        main(int(arg("--cycles", 3)), int(arg("--rounds", 8)),
             [arg("--precision", None)] if "--precision" in sys.argv
             else ["float32", "bfloat16"],
             arg("--configs", "off,new").split(","))
