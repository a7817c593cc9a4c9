"""Dragon ``GraphDef`` → TensorBoard ``GraphDef`` (the graph dashboard's format).

Every graph input, constant and captured tensor becomes a source node
(op types ``Input``, ``Const``, ``Variable``); every Dragon op becomes a node
named after the op (``MatMul_3``) with its op type and its inputs written as
``producer:output_index``; graph outputs and state updates become ``Output``
and ``Assign`` nodes. Each node carries its outputs' shapes in
``_output_shapes`` (drawn on the edges by TensorBoard), its dtype(s) and its
attributes.
"""

from __future__ import annotations

import re

_BAD_CHARS = re.compile(r"[^A-Za-z0-9_./]")

# Dragon dtype name -> TensorFlow DataType enum name (TensorBoard's types.proto).
_TF_TYPES = {"bool": "DT_BOOL", "uint8": "DT_UINT8", "int8": "DT_INT8",
             "int16": "DT_INT16", "int32": "DT_INT32", "int64": "DT_INT64",
             "float16": "DT_HALF", "bfloat16": "DT_BFLOAT16", "float32": "DT_FLOAT",
             "float64": "DT_DOUBLE", "uint16": "DT_UINT16", "uint32": "DT_UINT32",
             "uint64": "DT_UINT64"}


class _Namer:
    """Unique TensorBoard node names (``[A-Za-z0-9.][A-Za-z0-9_./]*``)."""

    def __init__(self):
        self.used: set[str] = set()

    def __call__(self, name: str) -> str:
        base = _BAD_CHARS.sub("_", name) or "node"
        if not re.match(r"[A-Za-z0-9.]", base):
            base = "n" + base
        out, k = base, 1
        while out in self.used:
            out, k = f"{base}_{k}", k + 1
        self.used.add(out)
        return out


def to_tensorboard(graph, pb) -> object:
    """Convert a Dragon ``GraphDef`` to TensorBoard's ``GraphDef``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
    pb : module namespace
        Holds TensorBoard's proto modules (``graph_pb2``, ``node_def_pb2``,
        ``attr_value_pb2``, ``tensor_shape_pb2``, ``types_pb2``).

    Returns
    -------
    GraphDef
        TensorBoard's (tensorboardX.proto.graph_pb2) message.

    Raises
    ------
    ValueError
        If an op reads a tensor that nothing in the graph produces.
    """
    from .._dtypes import as_dtype

    AttrValue = pb.attr_value_pb2.AttrValue
    info = {v.name: v for v in graph.value_info}
    out = pb.graph_pb2.GraphDef()
    namer = _Namer()
    producer: dict[str, str] = {}   # tensor name -> "node:index" (or "node")

    def shape_attr(names):
        shapes = []
        for nm in names:
            shp = pb.tensor_shape_pb2.TensorShapeProto()
            v = info.get(nm)
            if v is None:
                shp.unknown_rank = True
            else:
                for d in v.shape:
                    shp.dim.add(size=int(d))
            shapes.append(shp)
        return AttrValue(list=AttrValue.ListValue(shape=shapes))

    def dtype_enum(code: int) -> int:
        return pb.types_pb2.DataType.Value(_TF_TYPES[as_dtype(code).name])

    def add_node(name: str, op: str, inputs=(), outputs=()):
        node = out.node.add(name=namer(name), op=op)
        node.input.extend(ref(t) for t in inputs)
        if outputs:
            node.attr["_output_shapes"].CopyFrom(shape_attr(outputs))
            dts = [info[t].dtype for t in outputs if t in info]
            if len(dts) == len(outputs):
                if len(dts) == 1:
                    node.attr["T"].CopyFrom(AttrValue(type=dtype_enum(dts[0])))
                else:
                    node.attr["T"].CopyFrom(AttrValue(list=AttrValue.ListValue(
                        type=[dtype_enum(d) for d in dts])))
        for i, t in enumerate(outputs):
            producer[t] = node.name if i == 0 else f"{node.name}:{i}"
        return node

    def ref(tensor: str) -> str:
        if tensor not in producer:
            raise ValueError(f"graph '{graph.name}': tensor '{tensor}' is read but nothing "
                             f"in the graph produces it")
        return producer[tensor]

    for nm in graph.input:
        add_node(f"input/{nm}", "Input", outputs=[nm])
    for c in graph.constant:
        add_node(f"constant/{c.name}", "Const", outputs=[c.name])
    for nm in graph.captured:
        add_node(f"captured/{nm}", "Variable", outputs=[nm])
    for op in graph.op:
        node = add_node(op.name or op.type, op.type, op.input, op.output)
        for key in sorted(op.attr):
            value = _attr(op.attr[key], AttrValue, dtype_enum)
            if value is not None:
                node.attr[_attr_key(key)].CopyFrom(value)
        if op.plugin:
            provider = op.plugin + (f" {op.plugin_version}" if op.plugin_version else "")
            node.attr["plugin"].CopyFrom(AttrValue(s=provider.encode()))
    for i, nm in enumerate(graph.output):
        add_node(f"output/{i}", "Output", inputs=[nm])
    for i, (target, update) in enumerate(zip(graph.state_target, graph.state_update)):
        add_node(f"assign/{i}", "Assign", inputs=[target, update])
    return out


def _attr_key(key: str) -> str:
    # Leading-underscore attributes are annotations written by passes;
    # TensorBoard hides such names, so keep them visible under a prefix.
    return "annotation" + key if key.startswith("_") else key


def _attr(a, AttrValue, dtype_enum):
    """A Dragon AttrValue as a TensorBoard AttrValue (None when unset)."""
    which = a.WhichOneof("value")
    if which is None or which == "none":
        return None
    if which == "i":
        return AttrValue(i=a.i)
    if which == "f":
        return AttrValue(f=a.f)
    if which == "b":
        return AttrValue(b=a.b)
    if which == "s":
        return AttrValue(s=a.s.encode())
    if which == "ints":
        return AttrValue(list=AttrValue.ListValue(i=list(a.ints.values)))
    if which == "floats":
        return AttrValue(list=AttrValue.ListValue(f=list(a.floats.values)))
    if which == "dtype":
        return AttrValue(type=dtype_enum(a.dtype))
    if which == "graph":
        g = a.graph
        return AttrValue(s=f"sub-graph '{g.name}' with {len(g.op)} ops".encode())
    return None  # pragma: no cover - a newer AttrValue kind
