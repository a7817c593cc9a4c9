"""Gradients through the collectives (as ``torch.distributed.nn`` does).

The rules are collectives themselves, on the same process group, so every
rank must run backward through the same collectives in the same order (it
does when every rank runs the same program):

- all_reduce sum / avg  -> all_reduce of the gradient (sum / avg); max, min
  and prod raise (their gradient is not defined here);
- all_gather            -> reduce_scatter (sum) of the gradient;
- reduce_scatter sum / avg -> all_gather of the gradient (/ group size);
- broadcast             -> the gradients summed onto the root (every rank
  takes part; the others get zeros);
- all_to_all            -> all_to_all of the gradient (it is its own inverse).
"""

from __future__ import annotations

from .._autograd import gradient
from ._util import ops


def _attrs(node, **over):
    a = node.attrs
    tag = str(a.get("tag", "") or "")
    out = {"group": int(a.get("group", 0)), "group_size": int(a.get("group_size", 1)),
           "reduce_op": str(a.get("reduce_op", "sum")), "src": int(a.get("src", 0)),
           "tag": f"{tag}:grad" if tag else ""}
    out.update(over)
    return out


def _linear_op(node, what):
    op = str(node.attrs.get("reduce_op", "sum"))
    if op not in ("sum", "avg"):
        raise NotImplementedError(
            f"{what}: the gradient of reduce_op '{op}' is not defined (only sum and avg "
            "are differentiable)")
    return op


@gradient("CollectiveAllReduce")
def _all_reduce(node, dy):
    op = _linear_op(node, "CollectiveAllReduce")
    return [ops().collective_all_reduce(dy, **_attrs(node, reduce_op=op))]


@gradient("CollectiveAllGather")
def _all_gather(node, dy):
    (x,) = node.inputs
    n = int(node.attrs.get("group_size", 1))
    g = ops().collective_reduce_scatter(ops().reshape(dy, [n, -1]),
                                        **_attrs(node, reduce_op="sum"))
    return [ops().reshape(g, list(x.shape))]


@gradient("CollectiveReduceScatter")
def _reduce_scatter(node, dy):
    (x,) = node.inputs
    op = _linear_op(node, "CollectiveReduceScatter")
    n = int(node.attrs.get("group_size", 1))
    g = ops().reshape(ops().collective_all_gather(dy, **_attrs(node)), list(x.shape))
    return [g * (1.0 / n) if op == "avg" else g]


@gradient("CollectiveBroadcast")
def _broadcast(node, dy):
    from ..distributed import _G
    gid = int(node.attrs.get("group", 0))
    group = _G.groups[gid] if gid < len(_G.groups) else None
    if group is None:
        raise RuntimeError(f"CollectiveBroadcast gradient: process group {gid} does not "
                           "exist on this rank")
    total = ops().collective_all_reduce(dy, **_attrs(node, reduce_op="sum"))
    if group.rank() == int(node.attrs.get("src", 0)):
        return [total]
    return [ops().zeros(list(total.shape), dtype=total.dtype, device=total.device)]


@gradient("CollectiveAllToAll")
def _all_to_all(node, dy):
    return [ops().collective_all_to_all(dy, **_attrs(node))]
