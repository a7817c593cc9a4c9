"""A/B: cpu_eigen's float32 batched small-GEMM (MatMulBatchedF32Avx512)
against oneDNN's matmul, on the encoder step's attention products and on
items at the edges of the kernel's class (issue 21, session attn).

Every case runs the default dispatch and oneDNN's kernel pinned
(``dg.plugins.pin("MatMul", "cpu", "mkldnn")``) alternately, call by call,
for ``--secs`` seconds, and prints the best and first-quartile time of each
and their ratio (oneDNN time / default: above 1, the default is faster).
Run with ``DRAGON_CPU_EIGEN_BATCHED_GEMM=all`` to time the kernel on cases
its ``supports()`` declines (by default both columns are oneDNN there).

Attention shapes (bench_workloads' encoder: batch 8, 4 heads, sequence 128,
head 64), operands as the compiled step has them ([B, H, S, D] views of
dense [B, S, H, D] tensors, "h"):
``qk`` q k^T, ``pv`` p v, ``dp`` dO v^T, ``dv`` p^T dO, ``dq`` dS k,
``dk`` dS^T q. Edges: ``sq32``, ``sq64``, ``sq128``, ``sq256`` (batch 32 of
n = m = k = s, dense), ``sq31``, ``sq257``.

Usage: ``python bench/ab_batched_f32.py [case,case,...] [--secs S]``.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import dragon_core as dg
from dragon_core import ops


def _cases():
    rng = np.random.default_rng(0)

    def f32(*s):
        return dg.tensor(rng.standard_normal(s).astype(np.float32))

    def heads():
        return f32(8, 128, 4, 64).permute(0, 2, 1, 3)

    q, k, v, do = heads(), heads(), heads(), heads()
    p, ds = f32(8, 4, 128, 128), f32(8, 4, 128, 128)
    cases = {
        "qk": lambda: ops.matmul(q, k, transpose_b=True),
        "pv": lambda: ops.matmul(p, v),
        "dp": lambda: ops.matmul(do, v, transpose_b=True),
        "dv": lambda: ops.matmul(p, do, transpose_a=True),
        "dq": lambda: ops.matmul(ds, k),
        "dk": lambda: ops.matmul(ds, q, transpose_a=True),
    }
    for s in (8, 16, 31, 32, 64, 96, 128, 160, 192, 256, 257):
        batch = 32 if s <= 128 else 8
        sa, sb = f32(batch, s, s), f32(batch, s, s)
        cases[f"sq{s}"] = (lambda sa=sa, sb=sb: ops.matmul(sa, sb))
    return cases


def _pinned(on: bool) -> None:
    if on:
        dg.plugins.pin("MatMul", "cpu", "mkldnn")
    else:
        dg.plugins.unpin("MatMul", "cpu")


def main(argv) -> None:
    args = list(argv[1:])
    secs = 2.0
    if "--secs" in args:
        i = args.index("--secs")
        secs = float(args[i + 1])
        del args[i:i + 2]
    names = [a for a in args if not a.startswith("--")]
    cases = _cases()
    sel = names[0].split(",") if names else list(cases)
    for name in sel:
        fn = cases[name]
        fn()
        _pinned(True)
        fn()
        _pinned(False)
        ours, theirs = [], []
        end = time.perf_counter() + secs
        while time.perf_counter() < end or len(ours) < 3:
            t = time.perf_counter()
            fn()
            ours.append(time.perf_counter() - t)
            _pinned(True)
            t = time.perf_counter()
            fn()
            theirs.append(time.perf_counter() - t)
            _pinned(False)
        o, t = np.array(ours) * 1e6, np.array(theirs) * 1e6
        print(f"{name:<6} calls {len(o):5d}  default best {o.min():7.1f} us  p25 {np.percentile(o, 25):7.1f}"
              f" | oneDNN best {t.min():7.1f} us  p25 {np.percentile(t, 25):7.1f}"
              f" | oneDNN/default best {t.min() / o.min():.3f}  p25 "
              f"{np.percentile(t, 25) / np.percentile(o, 25):.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
