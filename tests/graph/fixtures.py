"""Hand-built GraphDefs for the pass tests.

``graph(...)`` writes a GraphDef as a trace would: every schema attribute
resolved (defaults from ``describe()``, unset optionals as ``none``),
op names ``<Type>_<index>``, and ``value_info`` for every tensor from
``dragon_core.infer_shape``.
"""

from __future__ import annotations

import sys
from pathlib import Path

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


def encoder_step(hidden: int = 64, heads: int = 4, seed: int = 0, autocast: bool = True):
    """``(model, step)``: bench/models/bert.py's encoder layer with
    deterministic weights and an Adam training step under bfloat16
    autocast (float32 without ``autocast``; ``step(x, t)`` returns the
    loss), for the passes' end-to-end tests."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    try:
        from models import bert
    finally:
        sys.path.pop(0)
    model = bert.encoder_layer(dg.nn, bert.dragon_f(), hidden, heads)
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    state = bert.random_state(shapes, seed)
    model.load_state_dict({k: dg.tensor(v) for k, v in state.items()})
    opt = dg.optim.Adam(list(model.parameters()), lr=1e-3)

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=autocast):
            out = model(x)
            loss = dg.nn.functional.mse_loss(out, t)
        loss.backward()
        opt.step()
        return loss
    return model, step


def encoder_same_bits_without(pass_name: str, steps: int = 3, autocast: bool = True):
    """Train two copies of :func:`encoder_step`'s layer for ``steps`` steps,
    compiled with and without the pass ``pass_name``; assert the losses
    and the parameters are bit for bit equal. Returns ``(on, off, x, t)``
    (the two compiled steps and their inputs) for checks of the graphs."""
    rng = np.random.default_rng(11)
    x = dg.tensor(rng.standard_normal((2, 24, 64)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((2, 24, 64)).astype(np.float32))
    m_on, s_on = encoder_step(autocast=autocast)
    m_off, s_off = encoder_step(autocast=autocast)
    on = dg.function(s_on)
    off = dg.function(s_off, disable_passes=(pass_name,))

    def bits(a):
        a = np.ascontiguousarray(np.asarray(a))
        return a.view(f"u{a.dtype.itemsize}")
    for _ in range(steps):
        np.testing.assert_array_equal(bits(on(x, t).numpy()), bits(off(x, t).numpy()))
    for (name, p), (_, q) in zip(m_on.state_dict().items(), m_off.state_dict().items()):
        np.testing.assert_array_equal(bits(p.numpy()), bits(q.numpy()), err_msg=name)
    return on, off, x, t
