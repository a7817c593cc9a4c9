"""A transposed product computed as the product of the transposes.

``Transpose(MatMul(a, b), perm)`` whose ``perm`` swaps the last two axes
(and keeps the leading ones) is ``MatMul(b, a)`` with each operand's
``transpose_*`` flag flipped and the two swapped: ``(op(a) op(b))^T =
op(b)^T op(a)^T``. This pass writes that product under the Transpose's
output name and drops the Transpose.

Why: a Transpose is a strided view, and the ops after it read it element by
element. In the attention backward, the key gradient comes out of autodiff
as ``(q^T dS)^T`` followed by the head merge ``[B, H, S, D] -> [B, S, H*D]``;
the two views compose into one whose last axis is strided, which the head
merge's Reshape copied through an element gather (150 us of the bfloat16
encoder step) and which ``sum_cast`` cannot read in runs. As ``dS^T q`` the
product is written in the layout the head merge wants, like the query's and
value's gradients, and ``sum_cast`` (which runs after this pass) reads it
in place.

Invariants: the MatMul (not MatMulBiasAct: its bias runs along the last
axis) has one output, read by the Transpose alone and not pinned (graph
output, state update or target); the Transpose's own output is not swapped
straight back by a second such Transpose (its only reader: the pair is a
dense view of the product as it is, and the rewrite would leave one
strided view); a Transpose without ``perm`` counts for rank 2 (it reverses
the axes); both operands have rank >= 2 in the
graph's value_info (a 1-D operand's promoted axis is removed from the
output, so the identity does not hold) and the product's rank is the
perm's. Every output element is the same sum of the same products over k
(each product's factors swapped); the MatMul kernels that accumulate over k
in order (cpu_eigen's AVX512-BF16 and batched float32 GEMMs) give the same
bits, others agree to float rounding. ``out_dtype`` and the MatMul's other
attributes are kept; the new op keeps the MatMul's name and place. Sub-graphs
of control-flow ops are not visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._graph.passes import register_pass, value_index
from dragon_core._graph.passes.prune import _drop_value_info


def _swaps_last_two(op, rank_of) -> int:
    """The rank of a Transpose whose perm swaps the last two axes and keeps
    the others in place (negative entries allowed; no perm reverses the
    axes, a swap for rank 2), else 0. ``rank_of(name)`` is a value's rank
    (-1 when unknown)."""
    if op.type != "Transpose" or len(op.input) != 1 or len(op.output) != 1:
        return 0
    if "perm" not in op.attr or not op.attr["perm"].ints.values:
        return 2 if rank_of(op.input[0]) == 2 else 0
    perm = list(op.attr["perm"].ints.values)
    rank = len(perm)
    if rank < 2:
        return 0
    norm = [p + rank if p < 0 else p for p in perm]
    want = list(range(rank - 2)) + [rank - 1, rank - 2]
    return rank if norm == want else 0


def _flag(op, name: str) -> bool:
    return bool(op.attr[name].b) if name in op.attr else False


@register_pass("matmul_transpose", level=3)
def matmul_transpose(graph):
    """Rewrite ``Transpose(MatMul(a, b))`` over the last two axes as
    ``MatMul(b, a)`` with flipped flags.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with every such pair rewritten (see the module docs),
        or ``graph`` itself when there is none.
    """
    info = {v.name: v for v in graph.value_info}
    pinned, producer, readers = value_index(graph)

    def rank(name):
        v = info.get(name)
        return len(v.shape) if v is not None else -1

    only_reader = {}   # value -> the index of the op reading it, when one op reads it once
    for k, op in enumerate(graph.op):
        for name in op.input:
            if readers.get(name) == 1:
                only_reader[name] = k
    rewrites = {}   # MatMul index -> Transpose index
    for k, op in enumerate(graph.op):
        r = _swaps_last_two(op, rank)
        if not r:
            continue
        y = op.input[0]
        if y not in producer or y in pinned or readers.get(y) != 1:
            continue
        nxt = only_reader.get(op.output[0])
        if nxt is not None and _swaps_last_two(graph.op[nxt], rank):
            continue   # swapped back right after: the product is dense as it is
        mm = graph.op[producer[y]]
        if (mm.type != "MatMul" or len(mm.input) != 2 or len(mm.output) != 1
                or rank(mm.input[0]) < 2 or rank(mm.input[1]) < 2 or rank(y) != r):
            continue
        rewrites[producer[y]] = k
    if not rewrites:
        return graph

    new = P.GraphDef()
    new.CopyFrom(graph)
    drop_ops, drop_info = set(), set()
    for mi, ti in rewrites.items():
        mm, tr = new.op[mi], graph.op[ti]
        a, b = mm.input[0], mm.input[1]
        ta, tb = _flag(mm, "transpose_a"), _flag(mm, "transpose_b")
        drop_info.add(mm.output[0])
        del mm.input[:]
        mm.input.extend([b, a])
        mm.attr["transpose_a"].CopyFrom(P.AttrValue(b=not tb))
        mm.attr["transpose_b"].CopyFrom(P.AttrValue(b=not ta))
        mm.output[0] = tr.output[0]
        drop_ops.add(ti)
    out_ops = [op for k, op in enumerate(new.op) if k not in drop_ops]
    del new.op[:]
    new.op.extend(out_ops)
    _drop_value_info(new, drop_info)
    return new
