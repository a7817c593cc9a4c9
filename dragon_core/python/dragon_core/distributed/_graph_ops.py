"""The collectives as graph ops: the schemas are the core's
(dragon_core/src/ops/collective.cc), the kernels dragon-nccl-dist's (MPI on
cpu, NCCL on cuda); this module emits the ops while tracing.

Each op carries ``DG_OP_COLLECTIVE`` (ABI 1.3): the graph passes never
prune, merge or fold it and the executor keeps collectives in their traced
order. Without dragon-nccl-dist a graph run fails with the registry's
no-kernel error, which names the wheel.

The first time a traced collective runs on a rank (per trace tag), the
plugin's kernel exchanges the collective's fingerprint (kind, dtype, element
count, reduction/root) with every rank of its group: ranks that issue
collectives in different orders get an error at the first run naming each
rank's collective, instead of exchanging mismatched buffers.
"""

from __future__ import annotations

import itertools

from .. import _C

#: kind -> op name
_KINDS = {
    "all_reduce": "CollectiveAllReduce",
    "broadcast": "CollectiveBroadcast",
    "all_gather": "CollectiveAllGather",
    "reduce_scatter": "CollectiveReduceScatter",
    "all_to_all": "CollectiveAllToAll",
}

_trace_counter = itertools.count(1)
_defined = False


def _spec_shape(kind, shape, size):
    shape = tuple(shape)
    if kind == "all_gather":
        return (size,) + shape
    if kind == "reduce_scatter":
        return (shape[0] // size,) + shape[1:]
    return shape


def define_schemas() -> None:
    """Check that the core defines the five collective ops
    (dragon_core/src/ops/collective.cc)."""
    global _defined
    if _defined:
        return
    for name in _KINDS.values():
        if not _C.op(name).describe()["collective"]:
            raise RuntimeError(f"dragon_core.distributed: {name} is not a collective op")
    _defined = True


def traced(kind, tensor, group, reduce_op="sum", src=0):
    """Emit the op for ``kind`` into the graph being traced."""
    from .. import ops
    from . import _check_store_world_device
    _check_store_world_device(kind, tensor)
    define_schemas()
    ops._refresh()
    fn = getattr(ops, "collective_" + kind)
    return fn(tensor, group=group.id, group_size=group.size(), reduce_op=reduce_op,
              src=int(src), tag=f"{kind}#{next(_trace_counter)}")


def traced_p2p(kind, tensor, group, peer, tag=0):
    """Emit ``send`` / ``recv`` into the graph being traced: a
    ``CollectiveStart`` + ``CollectiveWait`` pair of dragon-nccl-dist (both
    carry the collective flag, so they are never pruned and keep their
    traced order against the other collectives). Returns the Wait's output:
    the received tensor for ``recv``, an empty one for ``send``."""
    from .. import ops
    from . import _check_store_world_device
    _check_store_world_device(kind, tensor)
    ops._refresh()
    h = ops.collective_start(tensor, kind=kind, group=group.id, group_size=group.size(),
                             peer=int(peer), tag_id=int(tag))
    return ops.collective_wait(h, tensor, kind=kind, group_size=group.size())
