"""Cast hoisting: a ``Cast`` moves above the pure view ops that feed it.

A ``Cast`` converts each element on its own, and ``Transpose``, ``Reshape``,
``Squeeze``, ``Unsqueeze`` and ``Flatten`` only move elements (schema flag
``view``; docs/graph.md "Views"), so ``Cast(view(x)) == view(Cast(x))`` bit
for bit, whatever the dtypes. Casting first reads ``x`` where its producer
wrote it, densely, instead of through a permuted view. Measured on the
bfloat16-autocast encoder training step (issue 21; docs/benchmarks.md):
autocast casts Q, K and V to bfloat16 *after* the head-split transposes, so
each of those Casts read a transposed float32 view; hoisted, each is a
contiguous cast, and the MatMul reads the transposed bfloat16 view in place
(its kernels take strided operands). A head merge ``Reshape(Transpose(x))``
cast down to 16 bits copies 16-bit values instead of float32 ones.

The pass moves a Cast only when it narrows or keeps the element size
(a widening Cast hoisted above a Reshape of a transposed view would make
that copy move wider elements). The chain walked back from the Cast is
made of single-output view ops from the list above whose outputs have
exactly one reader (the next op of the chain, then the Cast) and are not
graph outputs, state updates or state targets; the chain's root (what the
first view reads) may have other readers, which keep reading it. Rewrite:
the Cast reads the root and writes a new value, placed right before the
first view; the views read it; the last view writes the Cast's output
name, so every reader of the Cast is kept as it is; the chain's
``value_info`` entries change dtype. Runs before ``cast_fold``, so that a
Cast now reading a matmul product directly can be folded into it.
Sub-graphs of control-flow ops are not visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import is_view_op, register_pass, value_index
from dragon_core._graph.passes.prune import _drop_value_info

#: The view ops a Cast moves above (each moves elements, never changes one).
HOIST_THROUGH = ("Transpose", "Reshape", "Squeeze", "Unsqueeze", "Flatten")


def _chain(graph, k, producer, readers, pinned, taken, views):
    """The view ops (indices, root first) that Cast ``k`` reads through, and
    the root value; ``None`` when the Cast cannot move."""
    chain, name = [], graph.op[k].input[0]
    while name in producer:
        p = producer[name]
        op = graph.op[p]
        if (op.type not in HOIST_THROUGH or not is_view_op(op.type, views)
                or len(op.input) != 1 or len(op.output) != 1 or p in taken
                or name in pinned or readers.get(name) != 1):
            break
        chain.append(p)
        name = op.input[0]
    if not chain:
        return None
    chain.reverse()
    return chain, name


@register_pass("cast_hoist", level=3)
def cast_hoist(graph):
    """Move narrowing Casts above the view ops that feed them (module docs).

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph in which each movable Cast reads the root of its view
        chain (``graph`` itself when nothing moved).
    """
    info = {v.name: v for v in graph.value_info}
    pinned, producer, readers = value_index(graph)
    views: dict = {}
    moves = {}     # index of the first view of a chain -> index of its Cast
    taken = set()  # ops already part of a moved chain
    for k, cast in enumerate(graph.op):
        if (cast.type != "Cast" or len(cast.input) != 1 or len(cast.output) != 1
                or "dtype" not in cast.attr or cast.input[0] not in info):
            continue
        to = as_dtype(cast.attr["dtype"].dtype)
        if to.itemsize > as_dtype(info[cast.input[0]].dtype).itemsize:
            continue
        found = _chain(graph, k, producer, readers, pinned, taken, views)
        if found is None:
            continue
        chain, root = found
        if root not in info or any(graph.op[v].output[0] not in info for v in chain):
            continue
        moves[chain[0]] = (k, chain, root)
        taken.update(chain)
    if not moves:
        return graph
    new = P.GraphDef()
    new.CopyFrom(graph)
    del new.op[:]
    info = {v.name: v for v in new.value_info}
    moved_casts = {k for k, _, _ in moves.values()}
    new_input, new_output, drop_info = {}, {}, set()  # op index -> value name
    for first, (k, chain, root) in moves.items():
        cast = graph.op[k]
        code = as_dtype(cast.attr["dtype"].dtype).code
        hoisted, n = f"{cast.name}/hoisted:0", 0  # "<op>:<index>", fresh
        while hoisted in producer or hoisted in info or hoisted in readers:
            n += 1
            hoisted = f"{cast.name}/hoisted_{n}:0"
        vi = new.value_info.add()
        vi.CopyFrom(info[root])
        vi.name, vi.dtype = hoisted, code
        for v in chain:
            info[graph.op[v].output[0]].dtype = code
        drop_info.add(graph.op[chain[-1]].output[0])
        new_input[first] = hoisted
        new_output[chain[-1]] = cast.output[0]
    for i, op in enumerate(graph.op):
        if i in moved_casts:
            continue
        if i in moves:  # the Cast goes right before the first view
            c = new.op.add()
            c.CopyFrom(graph.op[moves[i][0]])
            c.input[0] = moves[i][2]
            c.output[0] = new_input[i]
        o = new.op.add()
        o.CopyFrom(op)
        if i in new_input:
            o.input[0] = new_input[i]
        if i in new_output:
            o.output[0] = new_output[i]
    _drop_value_info(new, drop_info)
    return new
