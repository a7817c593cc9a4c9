"""Helpers the op-fusing passes (gelu_fusion, attention_fusion) share: value
lookups in ``value_info``, the readers of each value, fresh op names, and the
final rewrite of a graph from ``{index: new op}`` and the ops and values to
drop. Not a pass (not in ``_ORDER``)."""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype


def value_dtype(info: dict, name: str):
    """The dtype name of ``name`` in ``info`` (``value_info`` by name), else None."""
    v = info.get(name)
    return as_dtype(v.dtype).name if v is not None else None


def value_shape(info: dict, name: str):
    """The shape of ``name`` in ``info`` as a tuple, else None."""
    v = info.get(name)
    return tuple(v.shape) if v is not None else None


def readers(graph) -> dict:
    """``{value: [(op index, input position), ...]}``."""
    out: dict = {}
    for k, op in enumerate(graph.op):
        for i, name in enumerate(op.input):
            out.setdefault(name, []).append((k, i))
    return out


def fresh_namer(graph):
    """``fresh(base)``: ``base``, or ``base_<n>``, unused by the graph's ops
    and by every name it returned before."""
    taken = {op.name for op in graph.op}

    def fresh(base: str) -> str:
        name, n = base, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        return name
    return fresh


def rewrite(graph, replace: dict, drop_ops: set, drop_info: set):
    """A copy of ``graph`` with op ``k`` replaced by ``replace[k]``, the ops
    at the indices ``drop_ops`` removed and the ``value_info`` of
    ``drop_info`` dropped."""
    from dragon_core._graph.passes.prune import _drop_value_info, _keep_only
    new_graph = P.GraphDef()
    new_graph.CopyFrom(graph)
    for k, op in replace.items():
        new_graph.op[k].CopyFrom(op)
    flags = iter(range(len(new_graph.op)))
    _keep_only(new_graph.op, lambda op: next(flags) not in drop_ops)
    _drop_value_info(new_graph, drop_info)
    return new_graph
