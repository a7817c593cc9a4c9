"""Cast folding: a matmul writes the dtype its product is cast to.

``MatMul`` and ``MatMulBiasAct`` with 16-bit float operands accumulate in
float32 and can write float32 (``out_dtype``, docs/mixed-precision.md). In a
mixed-precision graph their products are often cast right away: up to
float32 (a weight's gradient going to the float32 optimizer, a gradient or
activation read by a float32 op) or, from a float32 product, down to the
operands' dtype (a product read by the next bfloat16 matmul). This pass
folds such a ``Cast`` into the product:

- **up**: ``Cast(to=float32)`` of a product of dtype float16/bfloat16
  (``out_dtype`` unset) becomes ``out_dtype=float32``. The product is then
  written unrounded instead of rounded to 16 bits and widened: at least as
  accurate, not bit-identical (hence level 3, beside the other fusions);
- **down**: ``Cast(to=the operands' dtype)`` of a product with
  ``out_dtype=float32`` drops the ``out_dtype``: the kernel rounds the
  float32 accumulator once, to nearest even, as the Cast did (bit-identical).
  A Cast back up to float32 of such a product is then not folded up: that
  would undo the rounding the graph asked for (``y.to(bfloat16).float()``).

The Cast may read the product through a chain of view ops (``Reshape``,
``Squeeze``, ...: dtype-agnostic, schema flag ``view``). Invariants: the
product and every value of the view chain have exactly one reader (the next
op of the chain, then the Cast) and none is a graph output, state update or
state target; a ``MatMulBiasAct`` with a bias is left alone (its bias has
the product's dtype); the op of the chain before the Cast is renamed to write the
Cast's output, so every reader of the Cast's output is kept as it is; the
chain's ``value_info`` entries change dtype. Sub-graphs of control-flow ops
are not visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import is_view_op, register_pass, value_index
from dragon_core._graph.passes.prune import _drop_value_info, _keep_only

#: Ops whose product may be written in float32 from 16-bit operands.
PRODUCT_OPS = ("MatMul", "MatMulBiasAct")
_LOW = ("bfloat16", "float16")


def _out_dtype(op):
    a = op.attr.get("out_dtype")
    if a is None or a.WhichOneof("value") in (None, "none"):
        return None
    return as_dtype(a.dtype).name


@register_pass("cast_fold", level=3)
def cast_fold(graph):
    """Fold Casts of matmul products into the products' ``out_dtype``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph in which each foldable Cast is gone (see module docs).
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    info = {v.name: v for v in new.value_info}
    pinned, producer, readers = value_index(new)
    views: dict = {}
    drop_ops, drop_info = set(), set()
    # Products whose float32 out_dtype a down fold dropped: a Cast back up
    # (x.to(bfloat16).to(float32), a deliberate rounding) must not then fold
    # up as well, which would remove the rounding altogether.
    rounded: set = set()
    for k, cast in enumerate(new.op):
        if cast.type != "Cast" or len(cast.input) != 1 or "dtype" not in cast.attr:
            continue
        to = as_dtype(cast.attr["dtype"].dtype).name
        # Walk back through single-reader views to the producer.
        chain, name = [], cast.input[0]
        while True:
            if name in pinned or readers.get(name) != 1 or name not in producer:
                chain = None
                break
            p = new.op[producer[name]]
            if p.type in PRODUCT_OPS and len(p.output) == 1 and producer[name] not in drop_ops:
                break
            if (len(p.input) >= 1 and len(p.output) == 1 and is_view_op(p.type, views)
                    and producer[name] not in drop_ops):
                chain.append(producer[name])
                name = p.input[0]
                continue
            chain = None
            break
        if (chain is None or name not in info or not new.op[producer[name]].input
                or any(new.op[v].output[0] not in info for v in chain)):
            continue
        mm_index = producer[name]
        mm = new.op[mm_index]
        if len(mm.input) > 2 and mm.input[2]:
            continue   # a bias has the product's dtype: changing it would not fit
        operand = info.get(mm.input[0])
        if operand is None:
            continue
        operand_dtype = as_dtype(operand.dtype).name
        out = _out_dtype(mm)
        if out is None and operand_dtype in _LOW and to == "float32":
            if mm_index in rounded:
                continue   # its 16-bit output is a rounding the graph asked for
            mm.attr["out_dtype"].CopyFrom(P.AttrValue(dtype=as_dtype("float32").code))
        elif out == "float32" and operand_dtype in _LOW and to == operand_dtype:
            mm.attr["out_dtype"].CopyFrom(P.AttrValue(none=True))
            rounded.add(mm_index)
        else:
            continue
        # The product and the views now hold `to`; the last of them writes
        # the Cast's output.
        code = as_dtype(to).code
        info[name].dtype = code
        for v in chain:
            info[new.op[v].output[0]].dtype = code
        last = new.op[chain[0]] if chain else mm
        drop_info.add(last.output[0])
        last.output[0] = cast.output[0]
        producer[cast.output[0]] = chain[0] if chain else mm_index
        drop_ops.add(k)
    if not drop_ops:
        return graph
    flags = iter(range(len(new.op)))
    _keep_only(new.op, lambda op: next(flags) not in drop_ops)
    _drop_value_info(new, drop_info)
    return new
