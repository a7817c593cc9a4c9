"""Sum and Cast of one gradient: one ``SumCastGrad`` op that reads it once.

In a mixed-precision training step the backward pass of every Linear layer
reads its float32 output gradient ``g`` twice: a ``Sum`` over the leading
axes (the bias gradient, float32) and a ``Cast`` to float16/bfloat16 (the
operand of the two gradient MatMuls; ``cast_hoist`` has moved it above the
Reshape that flattens it). This pass replaces such a pair by one
``SumCastGrad(g)`` writing both outputs under their old names (its kernel's
sum is bit for bit Sum's, its cast bit for bit Cast's; docs/graph.md "Sum
and Cast of one gradient").

When ``g`` is a ``Reshape`` of a transposed view (the attention head merge
``[B, H, S, D] -> [B, S, H, D] -> [B, S, H*D]``, which the dispatcher makes
as a dense copy) and the Sum and the Cast are its only readers, the fused op
reads the transposed view itself (its kernel takes strided inputs), with the
Reshape's shape as its ``shape`` attribute, and writes the cast in the
merged layout: the copy is gone.

Invariants: ``g`` is float32 and produced by an op of the graph that is not
a strided view (a ``Transpose`` output is folded by Sum in memory order, a
graph input may arrive strided; the fused op sums in row-major order, as
Sum does a dense tensor); the Sum reads only ``g``, sums axes ``0..p-1``
(any order, negative allowed; 1 <= p <= rank) and the Cast goes from
float32 to float16/bfloat16. A ``GeluGrad`` output is left alone
(``LEFT_TO_OTHERS``): the GELU block's fusion takes its Sum and Cast
together with the GeluGrad. Other readers of ``g`` keep reading it. The
fused op takes the place of the first of the two, so every reader still
comes after its producer; it carries ``_fused_ops`` (the names of the ops
replaced) and ``_fusion_pattern = "sum_cast"``, as pattern fusion's ops
(``dragon_core.fusion.fused_ops(graph)`` lists them). Nothing else changes.
Sub-graphs of control-flow ops are not visited. On a device with no
float32 ``SumCastGrad`` kernel (any but the CPU today) the pass does nothing.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import device_types, kernel_dtypes, register_pass, value_index
from dragon_core._graph.passes.prune import _drop_value_info

PATTERN = "sum_cast"
_LOW = ("bfloat16", "float16")
#: Producers whose gradient's Sum and Cast another fusion takes together
#: with the producer itself (GeluGrad: the GELU block's own fused op).
LEFT_TO_OTHERS = ("GeluGrad",)


def _strided_view(op_type: str, cache: dict) -> bool:
    """Whether ``op_type``'s output may be a non-contiguous view of its
    input (schema flag ``strided_view``: Transpose)."""
    if op_type not in cache:
        from dragon_core import _C
        try:
            cache[op_type] = bool(_C.op(op_type).describe().get("strided_view", False))
        except Exception:  # noqa: BLE001 - an op this process cannot resolve
            cache[op_type] = False
    return cache[op_type]


def _last_axis_dense(graph, producer: dict, name: str) -> bool:
    """Whether the last axis of ``name``, a chain of ``Transpose`` views, is
    the last (unit-stride) axis of the dense tensor under the chain.

    The fused kernel reads such a view in runs along its last axis; a view
    whose last axis is strided (the key gradient's double transpose in the
    attention backward, ``[B, H, D, S] -> [B, S, H, D]``) has no runs and
    went through a slow element-wise gather (208 us against 85 for the
    Reshape copy, Sum and Cast it replaced), so its Reshape stays.
    """
    axis, rank = None, None
    while name in producer:
        op = graph.op[producer[name]]
        if op.type != "Transpose":
            break
        perm = list(op.attr["perm"].ints.values) if "perm" in op.attr else []
        if not perm or (rank is not None and len(perm) != rank):
            return False
        rank = len(perm)
        a = perm[rank - 1 if axis is None else axis]
        axis = a + rank if a < 0 else a
        name = op.input[0]
    return axis is not None and axis == rank - 1


def _leading_axes(op, rank: int):
    """p when Sum ``op`` folds exactly axes 0..p-1 of a rank-``rank`` input
    (1 <= p <= rank), else None."""
    if "axes" not in op.attr or op.attr["axes"].WhichOneof("value") in (None, "none"):
        axes = list(range(rank))          # unset: every axis
    else:
        axes = list(op.attr["axes"].ints.values)
    norm = sorted(a + rank if a < 0 else a for a in axes)
    if not norm or norm != list(range(len(norm))) or norm[-1] >= rank:
        return None
    return len(norm)


@register_pass("sum_cast", level=3)
def sum_cast(graph):
    """Fuse each float32 gradient's leading-axes Sum and 16-bit Cast.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with a ``SumCastGrad`` for every such pair (see the
        module docs), or ``graph`` itself when there is none.
    """
    if not all("float32" in kernel_dtypes("SumCastGrad", d) for d in device_types(graph)):
        return graph   # no kernel on this device (cpu_eigen's is the only one)
    info = {v.name: v for v in graph.value_info}
    pinned, producer, readers = value_index(graph)
    strided: dict = {}

    def dtype(name):
        v = info.get(name)
        return as_dtype(v.dtype).name if v is not None else None

    sums, casts = {}, {}   # value -> index of its first fusable Sum / Cast
    for k, op in enumerate(graph.op):
        if len(op.input) != 1 or len(op.output) != 1:
            continue
        x = op.input[0]
        if op.type == "Sum" and dtype(x) == "float32" and x in info:
            p = _leading_axes(op, len(info[x].shape))
            if p is not None:
                sums.setdefault(x, (k, p))
        elif (op.type == "Cast" and "dtype" in op.attr and dtype(x) == "float32"
              and as_dtype(op.attr["dtype"].dtype).name in _LOW):
            casts.setdefault(x, k)
    pairs = [(x, sums[x], casts[x]) for x in sums if x in casts and x in producer
             and graph.op[producer[x]].type not in LEFT_TO_OTHERS
             and not _strided_view(graph.op[producer[x]].type, strided)]
    if not pairs:
        return graph

    new = P.GraphDef()
    new.CopyFrom(graph)
    drop_ops, drop_info = set(), set()
    place = {}   # op index -> the fused op that takes its place
    taken = {op.name for op in graph.op}
    for x, (si, p), ci in sorted(pairs, key=lambda t: min(t[1][0], t[2])):
        s_op, c_op = graph.op[si], graph.op[ci]
        fused = P.OpDef()
        fused.type = "SumCastGrad"
        n = 0
        while f"SumCastGrad_{n}" in taken:
            n += 1
        fused.name = f"SumCastGrad_{n}"
        taken.add(fused.name)
        source, replaced = x, [s_op.name, c_op.name]
        shape = list(info[x].shape)
        reshape = graph.op[producer[x]]
        if (reshape.type == "Reshape" and readers.get(x) == 2 and x not in pinned
                and reshape.input and reshape.input[0] in producer
                and _strided_view(graph.op[producer[reshape.input[0]]].type, strided)
                and _last_axis_dense(graph, producer, reshape.input[0])
                and shape and all(d >= 0 for d in shape)):
            # The head merge: read the transposed view, drop the copy.
            source = reshape.input[0]
            replaced.append(reshape.name)
            drop_ops.add(producer[x])
            drop_info.add(x)
            fused.attr["shape"].ints.values.extend(shape)
        fused.input.append(source)
        fused.output.extend([s_op.output[0], c_op.output[0]])
        fused.attr["dtype"].CopyFrom(c_op.attr["dtype"])
        fused.attr["num_leading"].CopyFrom(P.AttrValue(i=p))
        keep = s_op.attr["keepdims"].b if "keepdims" in s_op.attr else False
        fused.attr["keepdims"].CopyFrom(P.AttrValue(b=keep))
        fused.attr["_fused_ops"].CopyFrom(P.AttrValue(s=",".join(replaced)))
        fused.attr["_fusion_pattern"].CopyFrom(P.AttrValue(s=PATTERN))
        first, second = min(si, ci), max(si, ci)
        place[first] = fused
        drop_ops.add(second)
    out_ops = []
    for k, op in enumerate(new.op):
        if k in place:
            out_ops.append(place[k])
        elif k not in drop_ops:
            out_ops.append(op)
    del new.op[:]
    new.op.extend(out_ops)
    _drop_value_info(new, drop_info)
    return new
