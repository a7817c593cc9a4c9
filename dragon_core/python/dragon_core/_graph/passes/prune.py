"""Dead-op elimination: drop ops whose results nobody needs.

An op is live when one of its outputs is a graph output, a state update, or
an input of a live op (transitively, walking the op list backwards). Every
other op is removed together with the ``value_info`` of its outputs; then
constants that no remaining op, graph output or state update reads are
dropped too.

Stateful ops (random) are treated like any other op: an unused
``RandomUniform`` is removed. Its only side effect is drawing a seed from the
global generator when its ``seed`` attribute is -1, so a pruned graph may
consume fewer seeds than the eager program it was traced from; the values it
returns do not change. Graph inputs and captured tensors are never removed,
even when unused, since callers feed them by position.

Collective ops (``DG_OP_COLLECTIVE``, ABI 1.3) are always live: every rank
must issue the same collectives in the same order, whether or not this rank
reads the result.
"""

from __future__ import annotations

from dragon_core import _C
from dragon_core import proto as P
from dragon_core._graph.passes import register_pass


def _keep_only(field, keep) -> None:
    """Filter a repeated message field in place, keeping items where ``keep``."""
    kept = []
    for item in field:
        if keep(item):
            copy = type(item)()
            copy.CopyFrom(item)
            kept.append(copy)
    if len(kept) != len(field):
        del field[:]
        field.extend(kept)


def _is_collective(op_type: str, cache: dict) -> bool:
    """Whether the schema marks ``op_type`` a collective (unknown: no)."""
    if op_type not in cache:
        try:
            cache[op_type] = bool(_C.op(op_type).describe().get("collective", False))
        except Exception:  # noqa: BLE001 - control ops, unknown types
            cache[op_type] = False
    return cache[op_type]


def _drop_value_info(graph, names: set) -> None:
    """Remove (in place) the ``value_info`` entries of ``names``."""
    if names:
        _keep_only(graph.value_info, lambda v: v.name not in names)


def _drop_unused_constants(graph) -> None:
    """Remove (in place, on a graph the caller owns) the constants that no op,
    graph output or state update reads, and their ``value_info``."""
    used = set(graph.output) | set(graph.state_update)
    for op in graph.op:
        used.update(op.input)
    dropped = {c.name for c in graph.constant} - used
    if dropped:
        _keep_only(graph.constant, lambda c: c.name not in dropped)
        _drop_value_info(graph, dropped)


@register_pass("prune", level=1)
def prune(graph):
    """Remove the ops and constants that no graph output or state update needs.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph holding only the live ops, in their original order.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    needed = set(new.output) | set(new.state_update)
    live = [False] * len(new.op)
    collective: dict = {}
    for k in range(len(new.op) - 1, -1, -1):
        op = new.op[k]
        if any(o in needed for o in op.output) or _is_collective(op.type, collective):
            live[k] = True
            needed.update(op.input)
    dead = {o for k, op in enumerate(new.op) if not live[k] for o in op.output}
    alive = iter(live)
    _keep_only(new.op, lambda op: next(alive))
    _drop_value_info(new, dead)
    _drop_unused_constants(new)
    return new
