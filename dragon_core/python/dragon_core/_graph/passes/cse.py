"""Common-subexpression elimination: compute each distinct op once.

Two ops are the same computation when they have the same type, the same
provider plugin, the same input names (after earlier merges are applied) and
equal attributes, compared as serialized ``AttrValue`` messages (annotations
included). Walking the ops in order, a duplicate is dropped and every use of
its outputs is renamed to the matching output of the first op: op inputs,
graph outputs and state updates. So a graph output written by a duplicate
stays a graph output under the kept op's name (``output`` may then list one
name twice; the run returns that tensor at both positions). Graph inputs,
constants, captured tensors and state targets are never renamed.

Stateful ops (random) are never merged: two ``RandomUniform`` ops with equal
attributes are two draws.
"""

from __future__ import annotations

from dragon_core import _C
from dragon_core import proto as P
from dragon_core._graph.passes import register_pass
from dragon_core._graph.passes.prune import _drop_value_info, _keep_only


def _is_stateful(op_type: str, cache: dict) -> bool:
    """Whether the schema marks ``op_type`` stateful (unknown types count as
    stateful, so they are left alone)."""
    if op_type not in cache:
        try:
            cache[op_type] = bool(_C.op(op_type).describe()["stateful"])
        except Exception:  # noqa: BLE001 - an op this process cannot resolve
            cache[op_type] = True
    return cache[op_type]


def _key(op) -> tuple:
    attrs = tuple(sorted((name, value.SerializeToString(deterministic=True))
                         for name, value in op.attr.items()))
    return (op.type, op.plugin, tuple(op.input), len(op.output), attrs)


@register_pass("cse", level=1)
def cse(graph):
    """Merge ops that compute the same thing from the same inputs.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph without duplicate ops, uses renamed to the kept outputs.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    stateful: dict = {}
    rename: dict = {}
    seen: dict = {}
    keep = []
    for op in new.op:
        for i, name in enumerate(op.input):
            if name in rename:
                op.input[i] = rename[name]
        if _is_stateful(op.type, stateful):
            keep.append(True)
            continue
        key = _key(op)
        first = seen.get(key)
        if first is None:
            seen[key] = op
            keep.append(True)
            continue
        for dup, kept in zip(op.output, first.output):
            rename[dup] = kept
        keep.append(False)
    if not rename:
        return new
    flags = iter(keep)
    _keep_only(new.op, lambda op: next(flags))
    for field in (new.output, new.state_update):
        for i, name in enumerate(field):
            if name in rename:
                field[i] = rename[name]
    _drop_value_info(new, set(rename))
    return new
