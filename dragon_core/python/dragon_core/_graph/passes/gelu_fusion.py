"""GELU fusion: the GELU block of a Linear layer as two fused ops.

A Linear layer followed by GELU, differentiated, leaves this in the graph
(the float32 product of a bfloat16-autocast matmul, say)::

    a  = Add(x, bias)                   # bias: [N] along x's last axis
    y  = Gelu(a)          -> [Cast(to=bfloat16 / float16)] -> next matmul
    g  = GeluGrad(a, dy)  -> Sum(axes = every axis but the last)  (dbias)
                          -> [Cast(to=bfloat16 / float16)]  -> dx's matmuls

Element-wise, these are memory-bound passes over 4-byte tensors written and
read again (a 1024 x 1024 block: ~0.9 ms of the bfloat16 encoder step,
issue 21). This pass rewrites them into::

    y          = BiasGelu(x, bias; dtype)           # the Cast's dtype
    g', dbias  = BiasGeluGrad(x, bias, dy; dtype)   # dbias: the Sum's output

(dragon_core/src/ops/fused_act.cc): the pre-activation ``a`` is never
stored, the backward recomputes it from ``x`` and ``bias`` (the same float32
add), and each Cast is folded into the op that feeds it, so the float32
``y`` and ``g`` are never written either. The fused kernels compute the same
bits as the ops they replace (cpu_eigen: the same float32 add, gelu, gelu'
code, one rounding to 16 bits, and Sum's summation order for dbias).

Preconditions, all checked; otherwise the graph is left as it is:

- ``Add`` with float32 operands, one of them ``x`` of rank >= 1 (>= 2 with
  a backward) and the other of shape ``[x.shape[-1]]``, writing x's shape;
- ``a``'s readers are exactly one ``Gelu`` and at most one ``GeluGrad``
  (reading it as its x, with the Gelu's ``approximate``);
- the GeluGrad's output has exactly one ``Sum`` reader, over every axis but
  the last (``keepdims`` either way), and its other readers are either a
  single ``Cast`` to float16/bfloat16 (folded) or any ops (then the fused
  op writes float32 under the GeluGrad's name);
- the Gelu's output likewise: a single Cast reader folds;
- ``a``, and every value that disappears, is not a graph output, state
  update or state target; a forward without backward (inference) fuses
  the forward alone. Sub-graphs of control-flow ops are not visited.

Both fused ops take the place of the op they start from (``BiasGelu`` the
Add's, ``BiasGeluGrad`` the GeluGrad's): their inputs exist there and every
reader of their outputs comes later. The kept names (the Cast outputs, the
Sum output) keep their ``value_info``; the removed ones lose it.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import register_pass, value_index
from dragon_core._graph.passes.prune import _drop_value_info, _keep_only

_F32 = "float32"
_LOW = ("bfloat16", "float16")


def _dtype(info, name):
    v = info.get(name)
    return as_dtype(v.dtype).name if v is not None else None


def _shape(info, name):
    v = info.get(name)
    return tuple(v.shape) if v is not None else None


def _approximate(op) -> str:
    return op.attr["approximate"].s if "approximate" in op.attr else "none"


def _readers(graph) -> dict:
    """``{value: [(op index, input position), ...]}``."""
    out: dict = {}
    for k, op in enumerate(graph.op):
        for i, name in enumerate(op.input):
            out.setdefault(name, []).append((k, i))
    return out


def _low_cast(op, info):
    """The 16-bit dtype a float32 -> float16/bfloat16 Cast writes, else None."""
    if op.type != "Cast" or len(op.input) != 1 or len(op.output) != 1 or "dtype" not in op.attr:
        return None
    to = as_dtype(op.attr["dtype"].dtype).name
    return to if to in _LOW and _dtype(info, op.input[0]) == _F32 else None


def _sink(graph, info, readers, pinned, name):
    """Where a float32 value ``name`` (Gelu's or GeluGrad's output) can be
    written: ``(dtype, output name, cast op index or None)``. A single Cast
    reader to 16 bits folds (the fused op writes the Cast's output); else
    float32 under ``name`` itself."""
    rs = readers.get(name, [])
    if len(rs) == 1 and name not in pinned:
        k = rs[0][0]
        to = _low_cast(graph.op[k], info)
        if to is not None:
            return to, graph.op[k].output[0], k
    return _F32, name, None


def _attr_dtype(name):
    return P.AttrValue(dtype=as_dtype(name).code)


def _new_op(template, name, op_type, inputs, outputs):
    op = P.OpDef(name=name, type=op_type, input=list(inputs), output=list(outputs),
                 plugin=template.plugin, plugin_version=template.plugin_version,
                 plugin_dist=template.plugin_dist)
    return op


def _match_sum(op, rank) -> bool:
    if op.type != "Sum" or len(op.input) != 1 or len(op.output) != 1 or "axes" not in op.attr:
        return False
    if set(op.attr) - {"axes", "keepdims"}:
        return False
    axes = {a + rank if a < 0 else a for a in op.attr["axes"].ints.values}
    return len(op.attr["axes"].ints.values) == rank - 1 and axes == set(range(rank - 1))


@register_pass("gelu_fusion", level=3)
def gelu_fusion(graph):
    """Fuse ``Add(bias) -> Gelu -> [Cast]`` and ``GeluGrad -> Sum & [Cast]``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``BiasGelu`` / ``BiasGeluGrad`` in place of each
        matching chain (see the module docs), or ``graph`` itself when none
        matches.
    """
    info = {v.name: v for v in graph.value_info}
    pinned, producer, _ = value_index(graph)
    readers = _readers(graph)
    replace: dict = {}          # op index -> new OpDef
    drop_ops, drop_info = set(), set()
    taken = {op.name for op in graph.op}

    def fresh(base):
        name, n = base, 0
        while name in taken:
            n += 1
            name = f"{base}_{n}"
        taken.add(name)
        return name

    for k, add in enumerate(graph.op):
        if add.type != "Add" or len(add.input) != 2 or len(add.output) != 1:
            continue
        a = add.output[0]
        if a in pinned or _dtype(info, a) != _F32:
            continue
        shape = _shape(info, a)
        x = bias = None
        for i in (0, 1):
            u, v = add.input[i], add.input[1 - i]
            su, sv = _shape(info, u), _shape(info, v)
            if (su is not None and len(su) >= 1 and su == shape and sv == (su[-1],)
                    and _dtype(info, u) == _F32 and _dtype(info, v) == _F32):
                x, bias = u, v
                break
        if x is None or x == bias:
            continue
        rs = readers.get(a, [])
        gelus = [j for j, pos in rs if graph.op[j].type == "Gelu" and pos == 0]
        grads = [j for j, pos in rs if graph.op[j].type == "GeluGrad" and pos == 0]
        if len(gelus) != 1 or len(grads) > 1 or len(gelus) + len(grads) != len(rs):
            continue
        gelu = graph.op[gelus[0]]
        mode = _approximate(gelu)
        if len(gelu.output) != 1:
            continue
        plan = []
        if grads:
            gg = graph.op[grads[0]]
            if (len(gg.input) != 2 or len(gg.output) != 1 or gg.input[1] == a
                    or _approximate(gg) != mode or len(shape) < 2
                    or _shape(info, gg.input[1]) != shape
                    or _dtype(info, gg.input[1]) != _F32):
                continue
            g = gg.output[0]
            if g in pinned:
                continue
            g_readers = readers.get(g, [])
            sums = [j for j, _ in g_readers if _match_sum(graph.op[j], len(shape))]
            if len(sums) != 1:
                continue
            others = [(j, pos) for j, pos in g_readers if j != sums[0]]
            if len(others) + 1 != len(g_readers):
                continue            # the Sum reads g twice: not a bias gradient
            dx_dtype, dx_name, dx_cast = _F32, g, None
            if len(others) == 1:
                to = _low_cast(graph.op[others[0][0]], info)
                if to is not None:
                    dx_dtype, dx_name, dx_cast = to, graph.op[others[0][0]].output[0], others[0][0]
            plan.append((grads[0], sums[0], dx_dtype, dx_name, dx_cast))
        y_dtype, y_name, y_cast = _sink(graph, info, readers, pinned, gelu.output[0])
        # The forward.
        op = _new_op(gelu, fresh(f"{gelu.name}/bias_gelu"), "BiasGelu", [x, bias], [y_name])
        op.attr["approximate"].CopyFrom(P.AttrValue(s=mode))
        op.attr["dtype"].CopyFrom(_attr_dtype(y_dtype))
        replace[k] = op
        drop_ops.update({gelus[0]} | ({y_cast} if y_cast is not None else set()))
        drop_info.add(a)
        if y_cast is not None:
            drop_info.add(gelu.output[0])
        # The backward.
        for j, s, dx_dtype, dx_name, dx_cast in plan:
            gg, sm = graph.op[j], graph.op[s]
            keep = bool(sm.attr["keepdims"].b) if "keepdims" in sm.attr else False
            op = _new_op(gg, fresh(f"{gg.name}/bias_gelu_grad"), "BiasGeluGrad",
                         [x, bias, gg.input[1]], [dx_name, sm.output[0]])
            op.attr["approximate"].CopyFrom(P.AttrValue(s=mode))
            op.attr["dtype"].CopyFrom(_attr_dtype(dx_dtype))
            op.attr["keepdims"].CopyFrom(P.AttrValue(b=keep))
            replace[j] = op
            drop_ops.add(s)
            if dx_cast is not None:
                drop_ops.add(dx_cast)
                drop_info.add(gg.output[0])
    if not replace:
        return graph
    new = P.GraphDef()
    new.CopyFrom(graph)
    for k, op in replace.items():
        new.op[k].CopyFrom(op)
    flags = iter(range(len(new.op)))
    _keep_only(new.op, lambda op: next(flags) not in drop_ops)
    _drop_value_info(new, drop_info)
    return new
