"""Dispatch cost of oneDNN MatMuls that cycle through many problems (issue 21,
session perf21): the mkldnn plugin's per-thread memo of bound primitives.

A transformer layer's compiled training step runs 21 MatMuls of about 15
distinct problems in a fixed cycle. ``--child`` runs such a cycle eagerly:
``--problems`` small float32 products (8 x k x 8, k = 8, 16, ...: the
arithmetic is negligible, so the time is the dispatch), one after another,
and prints the best time per product over many cycles, in µs, and the
thread CPU time per product. The parent alternates two Python interpreters
(``--a`` and ``--b``: two venvs with different builds) in separate
processes, ``--cycles`` times each, and prints both.

``python bench/ab_matmul_memo.py --a /work/main/.venv/bin/python --b .venv/bin/python``
"""

from __future__ import annotations

import os
import subprocess
import sys
import time


def child(problems: int, seconds: float) -> None:
    import numpy as np

    import dragon_core as dg
    rng = np.random.default_rng(0)
    pairs = []
    for i in range(problems):
        k = 8 * (i + 1)
        a = dg.tensor(rng.standard_normal((8, k)).astype(np.float32))
        b = dg.tensor(rng.standard_normal((k, 8)).astype(np.float32))
        pairs.append((a, b))
    for _ in range(20):
        for a, b in pairs:
            dg.ops.matmul(a, b)
    best = float("inf")
    cpu0, n = time.thread_time(), 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        for a, b in pairs:
            dg.ops.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
        n += 1
    cpu = (time.thread_time() - cpu0) / (n * problems)
    print(f"{best / problems * 1e6:.3f} {cpu * 1e6:.3f}")


def main() -> None:
    def arg(name, default):
        return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default
    pys = {"a": arg("--a", sys.executable), "b": arg("--b", sys.executable)}
    problems, cycles = int(arg("--problems", 15)), int(arg("--cycles", 4))
    res = {k: [] for k in pys}
    for _ in range(cycles):
        for k, py in pys.items():
            out = subprocess.run([py, __file__, "--child", str(problems), "1.0"],
                                 capture_output=True, text=True, check=True,
                                 env=dict(os.environ, OMP_NUM_THREADS="2"))
            res[k].append(tuple(float(v) for v in out.stdout.split()))
    print(f"{problems} problems in a cycle, load {os.getloadavg()[0]:.1f}")
    for k, py in pys.items():
        best = min(r[0] for r in res[k])
        cpu = min(r[1] for r in res[k])
        print(f"{k} ({py}): best {best:.2f} µs per MatMul, thread CPU {cpu:.2f} µs per MatMul; "
              f"runs {[round(r[0], 2) for r in res[k]]}")


if __name__ == "__main__":
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        child(int(sys.argv[i + 1]), float(sys.argv[i + 2]))
    else:
        main()
