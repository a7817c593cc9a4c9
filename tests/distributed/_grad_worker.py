"""Under ``python -m dragon_core.distributed.run -n 2``: the gradient of
sum(w_r * C(x_r)) for every case of _grad_cases.py, eagerly and in
dg.function, saved to OUT/rank<r>.npz; plus the error for a
non-differentiable reduction."""

from __future__ import annotations

import os
import sys

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist
from dragon_core.distributed import nn as dnn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _grad_cases as C  # noqa: E402

out = sys.argv[1]
dist.init_process_group()
rank = dist.get_rank()


def grad_of(kind, kw, x, w):
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = getattr(dnn, kind)(x, **kw)
        loss = dg.ops.sum(y * w)
    return tape.gradient(loss, x)


res = {}
for name, key, dtype, mode in C.cases():
    kind, kw, shape = C.KINDS[key]
    x = dg.tensor(C.x_of(rank, shape).astype(dtype))
    w = dg.tensor(C.w_of(rank, key).astype(dtype))
    if mode == "graph":
        f = dg.function(lambda x, w, kind=kind, kw=kw: grad_of(kind, kw, x, w))
        f(x, w)                              # trace (and run)
        g = f(x, w)                          # the compiled graph
    else:
        g = grad_of(kind, kw, x, w)
    res[name] = np.asarray(g.numpy())

try:
    grad_of("all_reduce", {"op": "max"}, dg.tensor(np.ones(3, np.float32)),
            dg.tensor(np.ones(3, np.float32)))
except NotImplementedError as e:
    print("RAISED", e, flush=True)
np.savez(os.path.join(out, f"rank{rank}.npz"), **res)
dist.barrier()
