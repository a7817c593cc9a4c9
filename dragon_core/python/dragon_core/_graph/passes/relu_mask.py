"""Relu's backward reads Relu's output: ``ReluGrad(z, dy)`` -> ``ReluGrad(y, dy)``.

Gradient rules read an op's inputs, never its outputs (docs/autograd.md),
so Relu's rule writes ``ReluGrad(z, dy)`` with z the Relu's input. ReluGrad
reads its first input only through ``> 0``, and ``z > 0`` equals
``relu(z) > 0`` for every z (NaN compares false either way), so where an
earlier op ``y = Relu(z)`` exists, the ReluGrad may read y instead. Then the
Relu is often z's only reader: the in-place pass may let it write over z
(a batch norm's output, say), and the element-wise fusion may fold it into
the group that computes z (``Add -> Relu`` of a residual block), neither of
which is possible while the backward pass keeps z alive.

Invariants: only the first input of a ``ReluGrad`` changes, and only to the
output 0 of a ``Relu`` that reads the same name and runs earlier; nothing
else is touched (values, ``value_info`` and op order stay as they are), so
the graph computes the same bits.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._graph.passes import register_pass


@register_pass("relu_mask", level=2)
def relu_mask(graph):
    """Point each ``ReluGrad`` at the output of an earlier ``Relu`` of its x.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph in which ``ReluGrad(z, dy)`` reads ``relu(z)`` where an
        earlier op computes it.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    relu_of: dict = {}   # z -> output of the first Relu reading z
    for op in new.op:
        if op.type == "Relu" and len(op.input) == 1 and op.output:
            relu_of.setdefault(op.input[0], op.output[0])
        elif op.type == "ReluGrad" and len(op.input) == 2 and op.input[0] in relu_of:
            op.input[0] = relu_of[op.input[0]]
    return new
