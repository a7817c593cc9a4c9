"""Under ``python -m dragon_core.distributed.run -n 2``: send/recv inside
dg.function (graph ops with the collective flag, traced order kept), mixed
with an all_reduce, for float32 / float64 / int32 and a 0-d and an empty
tensor. Results (traced run and compiled runs) go to OUT/rank<r>.npz."""

from __future__ import annotations

import os
import sys

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist

out = sys.argv[1]
dist.init_process_group()
rank = dist.get_rank()


def step(x):
    if rank == 0:
        dist.send(x * 2, dst=1, tag=7)             # rank 1 gets 2x
        back = dist.recv(x, src=1, tag=8)          # 3 * (2x) + 1
        total = dist.all_reduce(back)              # back + rank 1's x
        return back, total
    got = dist.recv(x, src=0, tag=7)
    dist.send(got * 3 + 1, dst=0, tag=8)           # result unused: must not be pruned
    total = dist.all_reduce(x)
    return got, total


res = {}
f = dg.function(step)
for dtype in ("float32", "float64", "int32"):
    for shape in ((3, 2), (), (0,)):
        for run in range(3):                       # run 0 traces, 1 and 2 are compiled
            base = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape)
            x = (base + 10 * rank + run).astype(dtype)
            a, b = f(dg.tensor(x))
            key = f"{dtype}-{'x'.join(map(str, shape)) or 'scalar'}-{run}"
            res[key + "-a"] = np.asarray(a.numpy())
            res[key + "-b"] = np.asarray(b.numpy())
np.savez(os.path.join(out, f"rank{rank}.npz"), **res)
types = [op.type for op in f.get_graph(dg.tensor(np.zeros((3, 2), np.float32))).op]
print(f"OPS {rank}", " ".join(t for t in types if t.startswith("Collective")), flush=True)
dist.barrier()
