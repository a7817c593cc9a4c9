"""An NCCL world of one joined by environment rendezvous -- no MPI at all:
``MASTER_ADDR=127.0.0.1 MASTER_PORT=<free> RANK=0 WORLD_SIZE=1 python
_env_nccl_worker.py`` (test_nccl_dist.py, GPU check). The unique id of each
process group goes through the TCP store rank 0 serves; the communicators
are real (``ncclCommInitRankConfig``) and every collective below runs on
the GPU against NumPy (with one rank every reduction is the identity, the
gather a new leading axis of 1). Prints ``ENV NCCL OK``.
"""

from __future__ import annotations

import os

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist

assert "OMPI_COMM_WORLD_SIZE" not in os.environ and "PMIX_RANK" not in os.environ
dist.init_process_group(backend="nccl", init_method="env://", timeout=120)
assert (dist.get_rank(), dist.get_world_size(), dist.get_backend()) == (0, 1, "nccl")
assert dist._G.lib is None, "MPI was opened: the world must not need it"
assert dist._G.rdzv is not None and dist._G.rdzv.method == "env://"
print("init: communicator created through the store", flush=True)

rng = np.random.default_rng(0)
checked = 0
for dt in ("float32", "float64", "float16", "int32", "int64"):
    x = rng.uniform(-3, 3, (4, 3)).astype(dt)
    ops = ("sum", "max", "min", "prod") + (("avg",) if dt.startswith("float") else ())
    for op in ops:
        t = dg.tensor(x).to("cuda")
        out = dist.all_reduce(t, op=op)
        assert out is t and str(t.device).startswith("cuda"), (dt, op, t.device)
        np.testing.assert_array_equal(t.cpu().numpy(), x, err_msg=f"all_reduce {op} {dt}")
        checked += 1
    t = dg.tensor(x).to("cuda")
    dist.broadcast(t, src=0)
    np.testing.assert_array_equal(t.cpu().numpy(), x, err_msg=f"broadcast {dt}")
    w = dist.all_reduce(t, async_op=True)
    assert w.wait() is t and w.is_completed()
    np.testing.assert_array_equal(t.cpu().numpy(), x, err_msg=f"async all_reduce {dt}")
    checked += 2

print(f"eager: {checked} collectives", flush=True)

# Inside dg.function every collective is a graph op on cuda (NCCL kernels).
x = rng.standard_normal((2, 5)).astype(np.float32)
xc = dg.tensor(x).to("cuda")
gather = dg.function(lambda t: dist.all_gather(None, t) * 2.0)
np.testing.assert_allclose(gather(xc).cpu().numpy(), 2.0 * x[None], rtol=0, atol=0)
reduce = dg.function(lambda t: dist.all_reduce(t, op="avg") + 1.0)
np.testing.assert_allclose(reduce(xc).cpu().numpy(), x + 1.0, rtol=1e-7)
types = [op.type for op in reduce.get_graph(xc).op]
assert "CollectiveAllReduce" in types, types
checked += 2

print("traced: all_gather, all_reduce", flush=True)

# A process group's id goes through the store under its own key.
g = dist.new_group([0])
assert g is not None and (g.rank(), g.size(), g.id) == (0, 1, 1)
t = dg.tensor(x).to("cuda")
dist.all_reduce(t, op="max", group=g)
np.testing.assert_array_equal(t.cpu().numpy(), x)
dist.barrier()
dist.barrier(group=g)
checked += 1

# cpu tensors have no backend in this world: a clear error, not MPI.
try:
    dist.all_reduce(dg.tensor([1.0]))
    raise AssertionError("a cpu all_reduce ran in an NCCL-only world")
except RuntimeError as e:
    assert "cuda tensors only" in str(e), e

print("group and barriers", flush=True)

# A store world can be initialised again (a new store, a new communicator:
# destroy_process_group destroyed the old ones, issue 16).
dist.destroy_process_group()
assert not dist.is_initialized()
dist.init_process_group(backend="nccl", init_method="env://", timeout=120)
t = dg.tensor(x).to("cuda")
dist.all_reduce(t)
np.testing.assert_array_equal(t.cpu().numpy(), x)
dist.destroy_process_group()
print(f"ENV NCCL OK: {checked + 1} collectives on cuda through env:// (no MPI)", flush=True)
