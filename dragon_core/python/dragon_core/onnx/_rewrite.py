"""Rewrites of ONNX graphs before they are interpreted.

``fuse_gelu``: exporters without a Gelu op (opset < 20, torch's TorchScript
exporter) write GELU as ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` in five nodes.
They compute exactly ``gelu(x)``, which Dragon has as one op (one pass over
the tensor instead of the ~20 of the Erf composite), so the chain becomes a
single ``Gelu`` node when every intermediate has that one reader and is no
graph output. onnxruntime fuses the same chain.
"""

from __future__ import annotations

import math

import numpy as np


def _const_values(graph) -> dict:
    from onnx import numpy_helper
    values = {init.name: init for init in graph.initializer}
    out = {}
    for name, tp in values.items():
        if len(tp.dims) == 0 or int(np.prod(tp.dims)) == 1:
            out[name] = float(numpy_helper.to_array(tp).reshape(-1)[0])
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value" and int(np.prod(a.t.dims)) == 1:
                    out[node.output[0]] = float(numpy_helper.to_array(a.t).reshape(-1)[0])
                elif a.name == "value_float":
                    out[node.output[0]] = float(a.f)
    return out


def _near(v, want) -> bool:
    return v is not None and abs(v - want) <= 1e-6 * abs(want)


def fuse_gelu(graph):
    """A copy of ``graph`` with Erf-GELU chains as ``Gelu`` nodes (or
    ``graph`` itself when there is none)."""
    from onnx import helper
    consts = _const_values(graph)
    nodes = list(graph.node)       # one wrapper per node: ids below are stable
    readers: dict = {}
    for node in nodes:
        for nm in node.input:
            readers[nm] = readers.get(nm, 0) + 1
    outputs = {o.name for o in graph.output}
    producer = {o: node for node in nodes for o in node.output}

    def single(nm):
        return readers.get(nm, 0) == 1 and nm not in outputs

    def other(node, nm):
        a, b = node.input
        return b if a == nm else a if b == nm else None

    replace, drop = {}, set()
    for erf in nodes:
        if erf.op_type != "Erf":
            continue
        scale = producer.get(erf.input[0])
        if scale is None or scale.op_type not in ("Div", "Mul") or not single(erf.input[0]):
            continue
        x = scale.input[0]
        c = consts.get(scale.input[1])
        if scale.op_type == "Mul" and c is None:
            x, c = scale.input[1], consts.get(scale.input[0])
        want = math.sqrt(2.0) if scale.op_type == "Div" else 1.0 / math.sqrt(2.0)
        if not _near(c, want) or not single(erf.output[0]):
            continue
        users = [n for n in nodes if erf.output[0] in n.input]
        add = users[0] if users else None
        if add is None or add.op_type != "Add" or not _near(consts.get(other(add, erf.output[0])),
                                                             1.0):
            continue
        if not single(add.output[0]):
            continue
        mul1 = next((n for n in nodes if add.output[0] in n.input), None)
        if mul1 is None or mul1.op_type != "Mul":
            continue
        m1_other = other(mul1, add.output[0])
        if not single(mul1.output[0]):
            continue
        mul2 = next((n for n in nodes if mul1.output[0] in n.input), None)
        if mul2 is None or mul2.op_type != "Mul":
            continue
        m2_other = other(mul2, mul1.output[0])
        # x * (1 + erf) * 0.5, or (0.5 * x) * (1 + erf) is not matched.
        if m1_other != x or not _near(consts.get(m2_other), 0.5):
            continue
        gelu = helper.make_node("Gelu", [x], [mul2.output[0]], name=f"{erf.name}_gelu",
                                approximate="none")
        replace[id(mul2)] = gelu
        drop.update(id(n) for n in (scale, erf, add, mul1))
    if not replace:
        return graph
    g = type(graph)()
    g.CopyFrom(graph)
    del g.node[:]
    for node in nodes:
        if id(node) in drop:
            continue
        g.node.append(replace.get(id(node), node))
    return g
