"""bfloat16 autocast encoder step: float32 matmul products vs the old policy.

A/B in one process (issue 21, bf16 work): the encoder layer training step of
``bench_workloads`` under ``dg.autocast("cpu")``, eager and ``@dg.function``,

* **new**: ``MatMul`` / ``MatMulBiasAct`` write their products as float32
  (``amp.FLOAT32_OUTPUT_OPS``) and the ``cast_fold`` graph pass folds the
  remaining Casts of products into ``out_dtype``;
* **old**: products returned in bfloat16 and cast back up by their float32
  readers (``FLOAT32_OUTPUT_OPS = ()``, ``cast_fold`` disabled), as before.

The configurations are timed round-robin (best round of each), so load on
the shared machine hits them alike; the first losses of both are checked
against each other (bfloat16 tolerance). ``--profile`` prints the per-op
profile of both compiled steps (Cast count and share).

    python bench/ab_amp.py [--rounds 5] [--profile] [--cpu-time] [--casts]

``--casts`` first times the Cast kernel alone (float32 <-> bfloat16 of an
encoder activation, 256K and 1M elements) beside torch's ``.to()``,
interleaved, best of 7 rounds of 50 calls.

``--cpu-time`` times with the process's CPU time instead of the wall clock:
with ``OMP_NUM_THREADS=1`` that measures the work itself, free of the time
spent waiting for a core on a loaded machine (where a 2-thread OpenMP
region's barrier costs more than a small op).
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_workloads import HEADS, HIDDEN, _by_type, _encoder_data  # noqa: E402
from models import bert  # noqa: E402


def _policy(dg, new: bool) -> None:
    """Switch autocast's matmul output policy (the op table is re-sent)."""
    from dragon_core import amp
    amp.FLOAT32_OUTPUT_OPS = ("MatMul", "MatMulBiasAct") if new else ()
    amp._table_key[0] = None
    for name in ("MatMul", "MatMulBiasAct"):   # drop the old policy first
        dg._C._autocast_policy(name, 0)
    amp._apply_table()


def _step(dg, state, new: bool, compiled: bool):
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), HIDDEN, HEADS)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    opt = dg.optim.Adam(list(model.parameters()), lr=1e-4)

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu"):
            loss = dg.nn.functional.mse_loss(model(x), t)
        loss.backward()
        opt.step()
        return loss
    if not compiled:
        return step
    return dg.function(step, disable_passes=() if new else ("cast_fold",))


def main(rounds: int = 5, profile: bool = False, cpu_time: bool = False) -> None:
    import dragon_core as dg
    clock = time.process_time if cpu_time else time.perf_counter
    x, t = _encoder_data()
    shapes = {"query.weight": (HIDDEN, HIDDEN), "key.weight": (HIDDEN, HIDDEN),
              "value.weight": (HIDDEN, HIDDEN), "attn_out.weight": (HIDDEN, HIDDEN),
              "ffn_in.weight": (4 * HIDDEN, HIDDEN), "ffn_out.weight": (HIDDEN, 4 * HIDDEN)}
    for name in ("query", "key", "value", "attn_out"):
        shapes[f"{name}.bias"] = (HIDDEN,)
    shapes.update({"ffn_in.bias": (4 * HIDDEN,), "ffn_out.bias": (HIDDEN,),
                   "ln1.weight": (HIDDEN,), "ln1.bias": (HIDDEN,),
                   "ln2.weight": (HIDDEN,), "ln2.bias": (HIDDEN,)})
    state = bert.random_state(shapes)
    dx, dt = dg.tensor(x), dg.tensor(t)
    configs = {}
    for new in (False, True):
        for compiled in (False, True):
            _policy(dg, new)
            fn = _step(dg, state, new, compiled)
            losses = [float(fn(dx, dt).numpy()) for _ in range(3)]   # traces here
            configs[(new, compiled)] = (fn, losses)
    for compiled in (False, True):
        old, new = configs[(False, compiled)][1], configs[(True, compiled)][1]
        ok = np.allclose(old, new, rtol=4e-2)
        print(f"{'compiled' if compiled else 'eager':<9} first losses old {old[0]:.5f} "
              f"new {new[0]:.5f} {'ok' if ok else 'WRONG'}")
    best = {k: float("inf") for k in configs}
    for _ in range(rounds):
        for key, (fn, _) in configs.items():
            _policy(dg, key[0])
            t0 = clock()
            for _ in range(5):
                loss = fn(dx, dt)
            loss.numpy()
            best[key] = min(best[key], (clock() - t0) / 5)
    for compiled in (False, True):
        o, n = best[(False, compiled)], best[(True, compiled)]
        print(f"{'compiled' if compiled else 'eager':<9} old {1e3 * o:8.2f} ms  new "
              f"{1e3 * n:8.2f} ms  old/new {o / n:.3f}")
    if profile:
        for new in (False, True):
            _policy(dg, new)
            fn = configs[(new, True)][0]
            p = fn.profile(dx, dt, runs=10)
            print(f"\n## {'new' if new else 'old'} policy, compiled\n{_by_type(p)}")
    _policy(dg, True)


def casts(rounds: int = 7) -> None:
    """The Cast kernel beside torch (see module docs)."""
    import dragon_core as dg
    import torch
    for n in (1 << 18, 1 << 20):
        x32 = np.random.default_rng(0).standard_normal(n).astype(np.float32)
        d32, t32 = dg.tensor(x32), torch.from_numpy(x32)
        d16, t16 = d32.astype("bfloat16"), t32.bfloat16()
        calls = {"dragon f32->bf16": lambda: d32.astype("bfloat16"),
                 "torch f32->bf16": lambda: t32.bfloat16(),
                 "dragon bf16->f32": lambda: d16.astype("float32"),
                 "torch bf16->f32": lambda: t16.float()}
        best = {k: float("inf") for k in calls}
        for _ in range(rounds):
            for k, f in calls.items():
                t0 = time.perf_counter()
                for _ in range(50):
                    f()
                best[k] = min(best[k], (time.perf_counter() - t0) / 50)
        print(f"n={n:>8}  " + "  ".join(f"{k} {1e6 * v:7.1f} us" for k, v in best.items()))


if __name__ == "__main__":
    if "--casts" in sys.argv:
        casts()
    rounds = int(sys.argv[sys.argv.index("--rounds") + 1]) if "--rounds" in sys.argv else 5
    main(rounds, "--profile" in sys.argv, "--cpu-time" in sys.argv)
