"""A/B: cpu_eigen's AVX512-BF16 GEMM against oneDNN's, on the bfloat16
encoder step's product shapes and on squares (issue 21, session bf16gemm).

Every case runs the default dispatch and oneDNN's kernel pinned
(``dg.plugins.pin(op, "cpu", "mkldnn")``) alternately, call by call, for
``--secs`` seconds, and prints the best and first-quartile time of each and
their ratio (oneDNN time / ours: above 1, ours is faster). Run it with
``DRAGON_CPU_EIGEN_BF16_GEMM=all`` to time the kernel on the classes its
``supports()`` leaves to oneDNN (the default makes both columns oneDNN
there: a ratio of ~1.00 that measures the method's noise).

Shapes: batch x sequence 1024, hidden 256, 4 heads of 64 (bench_workloads'
encoder layer), float32 products of bfloat16 operands as autocast makes them:

* ``lin256``, ``lin1024``, ``lin_h``: Linear layers, ``x @ W^T + b`` (W is
  [out, in]);
* ``dx256``, ``dx1024``: input gradients ``dy @ W``;
* ``dw256``, ``dw1024``: weight gradients ``dy^T @ x``;
* ``qk``, ``pv``, ``pvT``: attention's batched products on head-permuted
  views (``q @ k^T``, ``p @ v``, ``p^T @ dO``);
* ``sq512`` ... ``sq4096``: square bfloat16 products.

Usage: ``python bench/ab_bf16_gemm.py [case,case,...] [--secs S]``. With
``OMP_NUM_THREADS=1 DRAGON_NUM_THREADS=1`` it times one core.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import dragon_core as dg
from dragon_core import ops


def _cases():
    rng = np.random.default_rng(0)

    def bf(*s):
        return dg.tensor(rng.standard_normal(s).astype(np.float32)).astype("bfloat16")

    def f32(*s):
        return dg.tensor(rng.standard_normal(s).astype(np.float32))

    x, w, b = bf(1024, 256), bf(256, 256), f32(256)
    w1, b1, h, w2 = bf(1024, 256), f32(1024), bf(1024, 1024), bf(256, 1024)
    dy, dy1 = bf(1024, 256), bf(1024, 1024)
    q = bf(8, 128, 4, 64).permute(0, 2, 1, 3)
    k = bf(8, 128, 4, 64).permute(0, 2, 1, 3)
    p = bf(8, 4, 128, 128)
    lin = lambda a, wt, bias: (  # noqa: E731
        lambda: ops.matmul_bias_act(a, wt, bias, activation="none", transpose_b=True,
                                    out_dtype="float32"))
    cases = {
        "lin256": lin(x, w, b), "lin1024": lin(x, w1, b1), "lin_h": lin(h, w2, b),
        "dx256": lambda: ops.matmul(dy, w, out_dtype="float32"),
        "dx1024": lambda: ops.matmul(dy1, w1, out_dtype="float32"),
        "dw256": lambda: ops.matmul(dy, x, transpose_a=True, out_dtype="float32"),
        "dw1024": lambda: ops.matmul(dy1, x, transpose_a=True, out_dtype="float32"),
        "qk": lambda: ops.matmul(q, k, transpose_b=True, out_dtype="float32"),
        "pv": lambda: ops.matmul(p, k, out_dtype="float32"),
        "pvT": lambda: ops.matmul(p, q, transpose_a=True, out_dtype="float32"),
    }
    for n in (512, 1024, 2048, 4096):
        sa, sb = bf(n, n), bf(n, n)
        cases[f"sq{n}"] = (lambda sa=sa, sb=sb: ops.matmul(sa, sb))
    return cases


def _pinned(on: bool) -> None:
    for op in ("MatMul", "MatMulBiasAct"):
        if on:
            dg.plugins.pin(op, "cpu", "mkldnn")
        else:
            dg.plugins.unpin(op, "cpu")


def main(argv) -> None:
    args = list(argv[1:])
    secs = 3.0
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
        o, t = np.array(ours) * 1e3, np.array(theirs) * 1e3
        print(f"{name:<8} calls {len(o):5d}  default best {o.min():8.3f} ms  p25 {np.percentile(o, 25):8.3f}"
              f" | oneDNN best {t.min():8.3f} ms  p25 {np.percentile(t, 25):8.3f}"
              f" | oneDNN/default best {t.min() / o.min():.3f}  p25 "
              f"{np.percentile(t, 25) / np.percentile(o, 25):.3f}", flush=True)


if __name__ == "__main__":
    main(sys.argv)
