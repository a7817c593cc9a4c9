"""Rewrites of ONNX graphs before they are interpreted.

``fuse_gelu``: exporters without a Gelu op (opset < 20, torch's TorchScript
exporter) write GELU as ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` in five nodes.
They compute exactly ``gelu(x)``, which Dragon has as one op (one pass over
the tensor instead of the ~20 of the Erf composite), so the chain becomes a
single ``Gelu`` node when every intermediate has that one reader and is no
graph output. onnxruntime fuses the same chain.

``fuse_layer_norm``: the ReduceMean-based layer norm of exports below
opset 17 becomes one ``LayerNormalization`` node (see its section below).
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
    return _rebuilt(graph, nodes, replace, drop)


# ------------------------------------------------------------ layer norm
#
# ``fuse_layer_norm``: exporters targeting opsets without LayerNormalization
# (< 17; torch's TorchScript exporter there) write it as
#     mean = ReduceMean(x, axes=[-1]); d = Sub(x, mean)
#     var = ReduceMean(Pow(d, 2), axes=[-1])
#     y = Div(d, Sqrt(Add(var, eps))) [* gamma] [+ beta]
# nine nodes and two reductions over the input that Dragon's LayerNorm op
# (one pass, mkldnn's kernel) computes exactly, so the chain becomes one
# LayerNormalization node when every intermediate is read only inside the
# chain and is no graph output, gamma and beta are constants of at most one
# axis (LayerNormalization broadcasts them along the normalised axis only),
# and the reductions are over the last axis with keepdims.


def _initializer_dims(graph) -> dict:
    """name -> dims of every initializer, and of an Identity of one."""
    dims = {init.name: list(init.dims) for init in graph.initializer}
    for node in graph.node:
        if node.op_type == "Identity" and node.input and node.input[0] in dims:
            dims[node.output[0]] = dims[node.input[0]]
        elif node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value":
                    dims[node.output[0]] = list(a.t.dims)
    return dims


def _int_values(graph) -> dict:
    """name -> list of ints of the int64 initializers and Constants (the
    ``axes`` input of ReduceMean from opset 18)."""
    from onnx import numpy_helper
    out = {init.name: [int(v) for v in numpy_helper.to_array(init).reshape(-1)]
           for init in graph.initializer if init.data_type == 7}
    for node in graph.node:
        if node.op_type == "Constant" and len(node.output) == 1:
            for a in node.attribute:
                if a.name == "value" and a.t.data_type == 7:
                    out[node.output[0]] = [int(v) for v in
                                           numpy_helper.to_array(a.t).reshape(-1)]
    return out


def _is_last_axis_mean(node, ints) -> bool:
    """A ReduceMean over the last axis only, keeping it."""
    if node is None or node.op_type != "ReduceMean":
        return False
    attrs = {a.name: a for a in node.attribute}
    if "keepdims" in attrs and attrs["keepdims"].i != 1:
        return False
    if "axes" in attrs:
        axes = list(attrs["axes"].ints)
    elif len(node.input) > 1 and node.input[1]:
        axes = ints.get(node.input[1])
    else:
        return False          # no axes: every axis
    return axes == [-1]


def fuse_layer_norm(graph):
    """A copy of ``graph`` with decomposed layer norms as
    ``LayerNormalization`` nodes (or ``graph`` itself when there is none)."""
    from onnx import helper
    consts = _const_values(graph)
    dims = _initializer_dims(graph)
    ints = _int_values(graph)
    nodes = list(graph.node)
    readers: dict = {}
    for node in nodes:
        for nm in node.input:
            readers.setdefault(nm, []).append(node)
    outputs = {o.name for o in graph.output}

    def only_reader(nm, count=1):
        """The reader of ``nm`` when it has exactly ``count`` (1: that one
        node; else the list) and is no graph output."""
        rs = readers.get(nm, [])
        if nm in outputs or len(rs) != count:
            return None
        return rs[0] if count == 1 else rs

    def other(node, nm):
        a, b = node.input
        return b if a == nm else a if b == nm else None

    def small_constant(nm):
        return nm in dims and len(dims[nm]) <= 1

    replace, drop = {}, set()
    for mean in nodes:
        if not _is_last_axis_mean(mean, ints):
            continue
        x = mean.input[0]
        sub = only_reader(mean.output[0])
        if sub is None or sub.op_type != "Sub" or list(sub.input) != [x, mean.output[0]]:
            continue
        pair = only_reader(sub.output[0], 2)
        if pair is None:
            continue
        pow_ = next((n for n in pair if n.op_type == "Pow"), None)
        div = next((n for n in pair if n.op_type == "Div"), None)
        if pow_ is None or div is None or pow_.input[0] != sub.output[0] or \
                not _near(consts.get(pow_.input[1]), 2.0) or div.input[0] != sub.output[0]:
            continue
        var = only_reader(pow_.output[0])
        if not _is_last_axis_mean(var, ints):
            continue
        add_eps = only_reader(var.output[0])
        if add_eps is None or add_eps.op_type != "Add":
            continue
        eps = consts.get(other(add_eps, var.output[0]))
        if eps is None or not eps >= 0.0:
            continue
        sqrt = only_reader(add_eps.output[0])
        if sqrt is None or sqrt.op_type != "Sqrt" or only_reader(sqrt.output[0]) is not div \
                or div.input[1] != sqrt.output[0]:
            continue
        mul = only_reader(div.output[0])
        if mul is None or mul.op_type != "Mul" or not small_constant(other(mul, div.output[0])):
            continue
        gamma, last, chain = other(mul, div.output[0]), mul, [mean, sub, pow_, var, add_eps,
                                                              sqrt, div]
        beta = None
        add_beta = only_reader(mul.output[0])
        if add_beta is not None and add_beta.op_type == "Add" and \
                small_constant(other(add_beta, mul.output[0])):
            beta, last = other(add_beta, mul.output[0]), add_beta
            chain.append(mul)
        ln = helper.make_node("LayerNormalization", [x, gamma] + ([beta] if beta else []),
                              [last.output[0]], name=f"{mean.name}_layer_norm", axis=-1,
                              epsilon=float(eps))
        replace[id(last)] = ln
        drop.update(id(n) for n in chain)
    return _rebuilt(graph, nodes, replace, drop)


def _rebuilt(graph, nodes, replace: dict, drop: set):
    """``graph`` with each node whose id is in ``replace`` swapped for its
    replacement and those in ``drop`` left out (order kept); ``graph``
    itself when nothing changed."""
    if not replace:
        return graph
    g = type(graph)()
    g.CopyFrom(graph)
    del g.node[:]
    for node in nodes:
        if id(node) not in drop:
            g.node.append(replace.get(id(node), node))
    return g
