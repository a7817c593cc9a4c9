"""Loss fusion: a mean-squared-error loss and its gradient in one op.

``mse_loss(x, t)`` differentiated (``dragon_core._grads.loss``) leaves, once
``constant_fold`` has folded the seed and the mean's divisor into one scalar::

    loss = MseLoss(x, t; reduction)          # "mean" or "sum"
    d    = Sub(x, t)
    g    = Mul(d, scale)                     # scale: 0-d, 2 dy / n for a mean

Both ops read ``x`` and ``t`` (the encoder step's 1024 x 256 float32 output
and target: MseLoss ~50 µs and the fused Sub/Mul ~75 µs inside the step,
issue 21). This pass writes one op instead::

    loss, g = MseLossAndGrad(x, t, scale; reduction)

(dragon_core/src/ops/loss.cc): one pass over ``x`` and ``t``, with the same
bits as the ops it replaces (cpu_eigen: MseLoss's terms and summation
order; ``d`` rounded to the dtype, then ``d * scale``, as Sub and Mul).

A loss is rewritten only where every condition holds (else the graph is
left as it is):

- ``MseLoss`` with reduction ``"mean"`` or ``"sum"``, ``x`` and ``t`` of one
  shape and one dtype with a kernel for ``MseLossAndGrad`` on every device
  type of the graph (``passes.device_types``);
- a ``Sub(x, t)`` (that order) whose output ``d`` is neither pinned nor read
  by anything but one ``Mul`` of ``d`` and a 0-d ``scale`` of x's dtype
  (either order), writing x's shape and dtype;
- ``scale`` exists where the loss is computed (a constant, a graph input, a
  captured tensor, or the output of an earlier op), and the Mul comes after
  the loss: the fused op takes the loss's place, so ``g`` is written before
  every op that reads it.

Graph outputs, state updates and state targets are never removed or renamed:
the fused op writes ``loss`` and ``g`` under their names (their readers and
``value_info`` are kept); ``d`` loses its. It carries ``_fused_ops`` and
``_fusion_pattern = "loss_fusion"`` as pattern fusion's ops do. Sub-graphs
of control-flow ops are not visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._graph.passes import device_types, kernel_dtypes, register_pass, value_index
from dragon_core._graph.passes._rewrite import fresh_namer, readers as _readers, rewrite
from dragon_core._graph.passes._rewrite import value_dtype as _dtype, value_shape as _shape
from dragon_core._graph.passes.linear_epilogue import _attrs

PATTERN = "loss_fusion"
FUSED = "MseLossAndGrad"


def _match(graph, info, readers, pinned, producer, k, dtypes):
    """``(sub index, mul index, scale)`` for the gradient of MseLoss ``k``,
    else None."""
    loss = graph.op[k]
    if len(loss.input) != 2 or len(loss.output) != 1:
        return None
    if "reduction" not in loss.attr or loss.attr["reduction"].s not in ("mean", "sum"):
        return None
    x, t = loss.input
    shape, dtype = _shape(info, x), _dtype(info, x)
    if shape is None or dtype not in dtypes or _shape(info, t) != shape or _dtype(info, t) != dtype:
        return None
    for j, pos in readers.get(x, []):
        sub = graph.op[j]
        if (pos != 0 or sub.type != "Sub" or list(sub.input) != [x, t] or len(sub.output) != 1
                or _attrs(sub)):
            continue
        d = sub.output[0]
        rs = readers.get(d, [])
        if d in pinned or len(rs) != 1:
            continue
        u = rs[0][0]
        mul = graph.op[u]
        if mul.type != "Mul" or len(mul.input) != 2 or len(mul.output) != 1 or _attrs(mul):
            continue
        scale = mul.input[1] if mul.input[0] == d else mul.input[0]
        if scale == d or _shape(info, scale) != () or _dtype(info, scale) != dtype:
            continue
        g = mul.output[0]
        if _shape(info, g) != shape or _dtype(info, g) != dtype:
            continue
        if u < k or producer.get(scale, -1) >= k:
            continue            # g would be written late, or scale not there yet
        return j, u, scale
    return None


@register_pass("loss_fusion", level=3)
def loss_fusion(graph):
    """Fuse ``MseLoss(x, t)`` with ``Mul(Sub(x, t), scale)``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``MseLossAndGrad`` in place of each matching loss
        (see the module docs), or ``graph`` itself when none matches.
    """
    if not any(op.type == "MseLoss" for op in graph.op):
        return graph
    dtypes = None
    for d in device_types(graph):
        have = kernel_dtypes(FUSED, d)
        dtypes = have if dtypes is None else dtypes & have
    if not dtypes:
        return graph            # no kernel on this device (cuda, say)
    info = {v.name: v for v in graph.value_info}
    pinned, producer, _ = value_index(graph)
    readers = _readers(graph)
    fresh = fresh_namer(graph)
    replace: dict = {}
    drop_ops, drop_info = set(), set()
    for k, op in enumerate(graph.op):
        if op.type != "MseLoss":
            continue
        found = _match(graph, info, readers, pinned, producer, k, dtypes)
        if found is None:
            continue
        j, u, scale = found
        sub, mul = graph.op[j], graph.op[u]
        new = P.OpDef(name=fresh(f"{op.name}/and_grad"), type=FUSED,
                      input=[op.input[0], op.input[1], scale],
                      output=[op.output[0], mul.output[0]], plugin=op.plugin,
                      plugin_version=op.plugin_version, plugin_dist=op.plugin_dist)
        new.attr["reduction"].CopyFrom(P.AttrValue(s=op.attr["reduction"].s))
        new.attr["_fused_ops"].CopyFrom(P.AttrValue(s=",".join([op.name, sub.name, mul.name])))
        new.attr["_fusion_pattern"].CopyFrom(P.AttrValue(s=PATTERN))
        replace[k] = new
        drop_ops.update((j, u))
        drop_info.add(sub.output[0])
    if not replace:
        return graph
    return rewrite(graph, replace, drop_ops, drop_info)
