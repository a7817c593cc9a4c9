"""Differentiable collectives (as ``torch.distributed.nn.functional``).

Each function returns a **new** tensor (never in place) and is recorded by
autograd, eagerly and inside ``dragon_core.function``; backward runs the
adjoint collective on the same group (see ``dragon_core/_grads/collective.py``):

==================  ==========================================
forward             backward
==================  ==========================================
all_reduce sum/avg  all_reduce of the gradient (sum/avg)
all_gather          reduce_scatter (sum) of the gradient
reduce_scatter      all_gather of the gradient (/ size for avg)
broadcast           gradients summed onto ``src`` (zeros elsewhere)
all_to_all          all_to_all of the gradient
==================  ==========================================

Every rank must run backward (it takes part in the collectives).
"""

from __future__ import annotations

from . import _call, _check_store_world_device, _graph_ops, _group, _group_rank, _tracing

__all__ = ["all_reduce", "broadcast", "all_gather", "reduce_scatter", "all_to_all"]


def _run(kind, x, g, reduce_op="sum", src=0):
    from .. import Tensor, ops
    if not isinstance(x, Tensor):
        raise TypeError(f"dragon_core.distributed.nn.{kind}: expected a dragon_core Tensor, "
                        f"got {type(x).__name__}")
    _check_store_world_device(f"dragon_core.distributed.nn.{kind}", x)
    if _tracing():
        return _graph_ops.traced(kind, x, g, reduce_op=reduce_op, src=src)
    return _call(kind, g, lambda: getattr(ops, "collective_" + kind)(
        x, group=g.id, group_size=g.size(), reduce_op=reduce_op, src=int(src)))


def all_reduce(tensor, op: str = "sum", group=None):
    """The reduction of ``tensor`` over the ranks (a new tensor).

    Parameters
    ----------
    tensor : Tensor
    op : {"sum", "avg", "max", "min", "prod"}
        Only ``sum`` and ``avg`` are differentiable.
    group : ProcessGroup, optional
    """
    return _run("all_reduce", tensor, _group(group), reduce_op=str(op).lower())


def broadcast(tensor, src: int = 0, group=None):
    """World rank ``src``'s ``tensor`` on every rank (a new tensor)."""
    g = _group(group)
    return _run("broadcast", tensor, g, src=_group_rank("broadcast", g, src))


def all_gather(tensor, group=None):
    """Every rank's ``tensor`` stacked in rank order: shape
    ``(size, *tensor.shape)``."""
    return _run("all_gather", tensor, _group(group))


def reduce_scatter(tensor, op: str = "sum", group=None):
    """Block ``rank`` (of ``size`` equal blocks along axis 0) of the
    reduction of ``tensor`` over the ranks."""
    return _run("reduce_scatter", tensor, _group(group), reduce_op=str(op).lower())


def all_to_all(tensor, group=None):
    """Block ``j`` (of ``size`` equal blocks along axis 0) goes to rank ``j``;
    block ``i`` of the result came from rank ``i``."""
    return _run("all_to_all", tensor, _group(group))
