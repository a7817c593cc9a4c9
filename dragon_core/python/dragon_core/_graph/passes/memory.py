"""Static memory planning: tensors whose lifetimes do not overlap share a buffer.

Planned tensors are the op outputs that are not graph outputs or state
updates (inputs, constants and captured tensors are never op outputs), with a
known, non-empty size in ``value_info``. A tensor lives from the op that
writes it (``def``) to the last op that reads it (``def`` itself when nobody
reads it: the op still needs somewhere to write it). Its size is
``numel * itemsize`` rounded up to ``ALIGN`` (64) bytes.

An op annotated ``_inplace_input = i`` writes output 0 over input ``i``, so
the two tensors form one group (chains of in-place ops make longer groups)
with one buffer and the union of the lifetimes. A group is planned only if
every member is: when an in-place output is a graph output, its input is not
planned either, since their storage leaves with the result.

A view op (``Reshape``, ``Squeeze``, ``Unsqueeze``, ``Flatten``: the schema's
``view`` flag) makes its output an alias of input 0's storage, so output and
input join one group as well; a view of a tensor that is not an op output (a
graph input, constant or captured tensor) is not planned (it keeps that
tensor's storage). So a buffer is never reused while a view of it is live.

Groups are visited by ``def``; a buffer whose occupant was last read by op
``k`` is free for a group defined at op ``> k`` (never at ``k`` itself: the
op reads its inputs while writing its outputs). The group takes the smallest
free buffer that is large enough, else grows the largest free buffer (which
never costs more than a new one), else gets a new buffer.

The result is ``metadata["memory_plan"]``, JSON
``{"buffers": [bytes, ...], "assign": {"tensor name": buffer_id}}``, and a
note ``metadata["memory_note"]`` comparing the planned bytes with the sum of
the planned tensors' sizes.
"""

from __future__ import annotations

import json

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import is_view_op, register_pass

ALIGN = 64
ANNOTATION = "_inplace_input"


def tensor_bytes(info) -> int:
    """Bytes of a ``ValueInfo``'s tensor, rounded up to ``ALIGN``."""
    numel = 1
    for d in info.shape:
        numel *= int(d)
    raw = numel * as_dtype(info.dtype).itemsize
    return -(-raw // ALIGN) * ALIGN


def _find(parent: dict, x: str) -> str:
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def lifetimes(graph) -> dict:
    """``{tensor: (def, last_use)}`` in op indices, for every op output."""
    spans = {}
    for k, op in enumerate(graph.op):
        for name in op.output:
            spans[name] = (k, k)
        for name in op.input:
            if name in spans:
                spans[name] = (spans[name][0], k)
    return spans


@register_pass("memory", level=3)
def memory(graph):
    """Assign reusable buffers to the intermediate tensors of ``graph``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``metadata["memory_plan"]`` and
        ``metadata["memory_note"]``.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    spans = lifetimes(new)
    infos = {v.name: v for v in new.value_info}
    excluded = set(new.output) | set(new.state_update)
    parent = {name: name for name in spans}
    views: dict = {}
    for op in new.op:
        if op.input and len(op.output) == 1 and is_view_op(op.type, views):
            src = op.input[0]
            if src not in parent:
                excluded.add(op.output[0])  # aliases a non-op tensor
            else:
                parent[_find(parent, op.output[0])] = _find(parent, src)
        if ANNOTATION in op.attr and op.output:
            i = op.attr[ANNOTATION].i
            if 0 <= i < len(op.input):
                src = op.input[i]
                if src not in parent:
                    excluded.add(op.output[0])  # writes over a non-op tensor
                else:
                    parent[_find(parent, op.output[0])] = _find(parent, src)

    groups: dict = {}
    for name in spans:
        groups.setdefault(_find(parent, name), []).append(name)
    plan = []  # (def, last, bytes, members)
    for members in groups.values():
        if any(m in excluded or m not in infos for m in members):
            continue
        size = max(tensor_bytes(infos[m]) for m in members)
        if size == 0:
            continue
        start = min(spans[m][0] for m in members)
        end = max(spans[m][1] for m in members)
        plan.append((start, end, size, sorted(members, key=lambda m: spans[m][0])))
    plan.sort(key=lambda p: (p[0], -p[2]))

    buffers: list = []      # bytes
    busy_until: list = []   # last use of the current occupant
    assign: dict = {}
    for start, end, size, members in plan:
        free = [b for b in range(len(buffers)) if busy_until[b] < start]
        fits = [b for b in free if buffers[b] >= size]
        if fits:
            b = min(fits, key=lambda b: (buffers[b], b))
        elif free:
            b = max(free, key=lambda b: (buffers[b], -b))
            buffers[b] = size
        else:
            b = len(buffers)
            buffers.append(size)
            busy_until.append(end)
        busy_until[b] = end
        for m in members:
            assign[m] = b

    naive = sum(tensor_bytes(infos[m]) for m in assign)
    new.metadata["memory_plan"] = json.dumps({"buffers": buffers, "assign": assign},
                                             sort_keys=True)
    new.metadata["memory_note"] = (
        f"{sum(buffers)} bytes in {len(buffers)} buffers for {len(assign)} tensors "
        f"(without reuse: {naive} bytes)")
    return new
