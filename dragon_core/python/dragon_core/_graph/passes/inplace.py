"""In-place planning: let an op write output 0 over a dead input.

An op gets the annotation ``_inplace_input = i`` (an int ``AttrValue``, the
index into ``OpDef.input``) when input ``i``:

- is listed in the schema's ``inplace_inputs`` bitmask (ops with a variadic
  input are skipped: the bitmask indexes schema inputs, not tensors);
- is written by an earlier op, so it is not a graph input, constant or
  captured tensor, and it is not a graph output or a state update;
- is read by no later op, and appears only once among this op's inputs
  (``Add(x, x)`` stays out of place; the executor would refuse it anyway,
  as the input is then referenced twice);
- has the same shape and dtype as output 0 in ``value_info`` (so a
  broadcasting ``Add`` is in place only on its full-size operand, and
  ``LogicalNot``, whose output is bool, never is).

Views (ops with the ``view`` schema flag, such as ``Reshape``) share their
input's storage at run time, so an input qualifies only if its whole alias
group (the root tensor and every view of it, ``view_roots``) is dead: the
root is written by an op and not pinned, no member is pinned, and no other
member is read by this op or any later one.

A strided view (the output of an op with the ``strided_view`` schema flag,
``Transpose``) never qualifies: its bytes are not in the output's row-major
order, and a kernel that reads strides (every element-wise kernel of the
``cuda`` plugin, say) would read elements it had already overwritten. The
op then writes a buffer of its own (the executor also refuses to write in
place over a non-contiguous input).

When several inputs qualify, the lowest index wins. Output 0 may itself be a
graph output or a state update: the input is dead, so its buffer simply moves
to the caller or the variable (``memory`` then plans neither tensor).
Control-flow ops (variadic inputs) are never annotated; an input produced by
one may alias an operand, which the executor's own check (the slot must hold
the only reference to the storage) keeps safe. The pass recomputes every
``_inplace_input`` annotation from scratch, so running it twice changes
nothing.
"""

from __future__ import annotations

from dragon_core import _C
from dragon_core import proto as P
from dragon_core._graph.passes import register_pass, view_roots

ANNOTATION = "_inplace_input"


def _mask(op_type: str, cache: dict) -> int:
    """The schema's in-place bitmask, 0 for unknown or variadic-input ops."""
    if op_type not in cache:
        try:
            desc = _C.op(op_type).describe()
        except Exception:  # noqa: BLE001 - an op this process cannot resolve
            cache[op_type] = 0
        else:
            variadic = any(i["variadic"] for i in desc["inputs"])
            cache[op_type] = 0 if variadic else int(desc["inplace_inputs"])
    return cache[op_type]


def _strided_views(graph) -> set:
    """The outputs of strided-view ops (``describe()["strided_view"]``:
    ``Transpose``), which alias their input with permuted strides."""
    cache: dict = {}
    out = set()
    for op in graph.op:
        if op.type not in cache:
            try:
                cache[op.type] = bool(_C.op(op.type).describe().get("strided_view", False))
            except Exception:  # noqa: BLE001 - an op this process cannot resolve
                cache[op.type] = False
        if cache[op.type]:
            out.update(op.output)
    return out


@register_pass("inplace", level=2)
def inplace(graph):
    """Annotate the ops whose output 0 can reuse a dead input's buffer.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph whose eligible ops carry ``_inplace_input``.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    produced = {o for op in new.op for o in op.output}
    pinned = set(new.output) | set(new.state_update) | set(new.state_target)
    pinned |= set(new.input) | set(new.captured) | {c.name for c in new.constant}
    last_read: dict = {}
    for k, op in enumerate(new.op):
        for name in op.input:
            last_read[name] = k
    infos = {v.name: (v.dtype, tuple(v.shape)) for v in new.value_info}
    roots = view_roots(new)
    members: dict = {}  # root -> every tensor sharing its storage
    for name, root in roots.items():
        members.setdefault(root, {root}).add(name)
    masks: dict = {}
    strided = _strided_views(new)
    for k, op in enumerate(new.op):
        if ANNOTATION in op.attr:
            del op.attr[ANNOTATION]
        mask = _mask(op.type, masks)
        if not mask or not op.output or op.output[0] not in infos:
            continue
        for i, name in enumerate(op.input):
            if not (mask >> i) & 1:
                continue
            if (name not in produced or name in pinned or name in strided
                    or last_read[name] != k
                    or list(op.input).count(name) != 1
                    or infos.get(name) != infos[op.output[0]]):
                continue
            group = members.get(roots.get(name, name), ())
            if any(m != name and (m not in produced or m in pinned
                                  or last_read.get(m, -1) >= k) for m in group):
                continue  # another view of the same storage is still live
            op.attr[ANNOTATION].i = i
            break
    return new
