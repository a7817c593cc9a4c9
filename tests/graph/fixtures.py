"""Hand-built GraphDefs for the pass tests.

``graph(...)`` writes a GraphDef as a trace would: every schema attribute
resolved (defaults from ``describe()``, unset optionals as ``none``),
op names ``<Type>_<index>``, and ``value_info`` for every tensor from
``dragon_core.infer_shape``.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import proto as P

_KIND = {1: "i", 2: "f", 3: "b", 4: "s", 7: "dtype"}


def attr(value, kind: int) -> P.AttrValue:
    """An ``AttrValue`` of schema type ``kind`` (None = unset optional)."""
    out = P.AttrValue()
    if value is None:
        out.none = True
    elif kind == 5:
        out.ints.values.extend(int(v) for v in value)
    elif kind == 6:
        out.floats.values.extend(float(v) for v in value)
    elif kind == 7:
        out.dtype = dg.as_dtype(value).code
    else:
        setattr(out, _KIND[kind], value)
    return out


def _flat(names):
    out = []
    for n in names:
        out.extend(n if isinstance(n, (list, tuple)) else [n])
    return out


def graph(inputs=(), ops=(), outputs=(), constants=(), captured=(), state=(), name="g"):
    """Build a GraphDef.

    Parameters
    ----------
    inputs, captured : sequence of (str, dtype, tuple)
        Name, dtype and shape of each graph input / captured tensor.
    ops : sequence of (str, list, list, dict)
        ``(type, inputs, outputs, attrs)``; a variadic input is a nested
        list; attrs by name (missing ones take their defaults); names
        starting with ``_`` are annotations, given as ints.
    outputs : sequence of str
    constants : sequence of (str, numpy.ndarray)
    state : sequence of (str, str)
        ``(state_target, state_update)`` pairs.

    Returns
    -------
    dragon_core.proto.GraphDef
    """
    g = P.GraphDef(name=name)
    meta = {}
    for n, dt, shape in inputs:
        g.input.append(n)
        meta[n] = (tuple(shape), dg.as_dtype(dt).name)
    for n, dt, shape in captured:
        g.captured.append(n)
        meta[n] = (tuple(shape), dg.as_dtype(dt).name)
    for n, arr in constants:
        arr = np.ascontiguousarray(arr)
        code = dg.as_dtype(arr.dtype).code
        g.constant.add(name=n, dtype=code, shape=arr.shape, data=arr.tobytes())
        meta[n] = (arr.shape, dg.as_dtype(code).name)
    for k, (op_type, ins, outs, attrs) in enumerate(ops):
        desc = dg._C.op(op_type).describe()
        op = g.op.add(name=f"{op_type}_{k}", type=op_type, input=_flat(ins),
                      output=outs, plugin=desc["plugin"])
        schema_names = [a["name"] for a in desc["attrs"]]
        unknown = {a for a in attrs if not a.startswith("_")} - set(schema_names)
        assert not unknown, f"{op_type}: unknown attrs {unknown}"
        for a in desc["attrs"]:
            value = attrs.get(a["name"], a["default"])
            assert value is not None or not a["required"], f"{op_type}: {a['name']} required"
            op.attr[a["name"]].CopyFrom(attr(value, a["type"]))
        for a, value in attrs.items():
            if a.startswith("_"):
                op.attr[a].i = int(value)
        kept = {a: v for a, v in attrs.items() if not a.startswith("_")}
        inferred = dg.infer_shape(op_type, [meta[n] for n in op.input], **kept)
        assert len(inferred) == len(outs), f"{op_type}: {len(inferred)} outputs"
        for n, m in zip(outs, inferred):
            meta[n] = m
    g.output.extend(outputs)
    for target, update in state:
        g.state_target.append(target)
        g.state_update.append(update)
    for n, (shape, dt) in meta.items():
        g.value_info.add(name=n, dtype=dg.as_dtype(dt).code, shape=shape)
    return g


def op_summary(g) -> list:
    """``[(type, inputs, outputs), ...]`` of a GraphDef, for exact checks."""
    return [(op.type, list(op.input), list(op.output)) for op in g.op]


def constant_array(g, name: str) -> np.ndarray:
    """A graph constant's value as a NumPy array."""
    for c in g.constant:
        if c.name == name:
            dt = dg.as_dtype(c.dtype).numpy
            return np.frombuffer(c.data, dtype=dt).reshape(tuple(c.shape))
    raise KeyError(name)
