"""Differential fuzzing of dragon_core's own API against NumPy float64.

A seeded, bounded generator draws cases over the ``dragon_core.ops``
functions and Tensor operators: element-wise ops with broadcasting, 0-d and
empty operands and Python scalars, reductions over axis tuples, negative
axes, ``()`` and ``keepdims`` (NaN included), indexing with steps (negative
ones too, NumPy's semantics), joins/splits/view ops, selection and sorting,
matmul shapes, softmax/layer_norm/cross-entropy. Inputs come contiguous or
as non-contiguous views made by dragon ops (a transpose, a stepped or offset
slice, a stride-0 broadcast). The reference is NumPy in float64, cast to
the dtype the documented promotion rules give (docs/python-api.md:
NumPy's table for two tensors; a Python scalar takes the tensor's dtype, a
float scalar or ``/`` with integers gives float32). For float64 cases the
gradient of ``sum(w * out)`` from ``GradientTape`` is checked against
central finite differences of the same function, so the file needs nothing
but NumPy (``tests/vm_torch/test_differential.py`` covers the torch-style
front end against real torch).
"""

from __future__ import annotations


import numpy as np
import pytest

import _fuzzcases

import dragon_core as dg

o = dg.ops
INTS = ["uint8", "int8", "int32", "int64"]
FLOATS = ["float16", "bfloat16", "float32", "float64"]
TOL = {"float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2), "float32": (2e-5, 2e-6),
       "float64": (1e-10, 1e-12)}


class Spec:
    """An input: shape, dtype, value kind, layout (``c``, ``t``: transposed,
    ``step``: every other element of the last axis, ``off``: offset slice,
    ``exp``: broadcast_to of size-1 axes)."""

    def __init__(self, shape, dtype, kind="", layout="c"):
        self.shape, self.dtype, self.kind, self.layout = tuple(shape), dtype, kind, layout

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}{self.kind and ':' + self.kind}/{self.layout}"


def _values(rng, shape, dt, kind):
    if dt == "bool":
        return rng.random(shape) > 0.5
    if dt in INTS:
        if kind == "uniq":
            n = int(np.prod(shape))
            return (rng.permutation(n).reshape(shape) - (0 if dt == "uint8" else n // 2)
                    ).astype(dt)
        lo = {"pos": 1}.get(kind, 0 if dt == "uint8" else -4)
        return rng.integers(lo, 6, shape).astype(dt)
    a = rng.integers(-16, 17, shape) / 8.0 if dt in ("float16", "bfloat16") \
        else rng.standard_normal(shape)
    if kind == "pos":
        a = np.abs(a) + 0.5
    elif kind == "unit":
        a = np.clip(a * 0.3, -0.875, 0.875)
    elif kind == "uniq":   # distinct, and away from every kink at 0
        a = (rng.permutation(a.size).reshape(a.shape) - a.size / 2 + 0.3) / 4.0
    elif kind == "nan" and a.size:
        a = a.copy()
        a.flat[rng.integers(0, a.size, max(1, a.size // 4))] = np.nan
    return np.asarray(a).astype(dt if dt != "bfloat16" else "float32")


def _base(rng, spec):
    """(base array, view of a dragon tensor, view of a NumPy array)."""
    shape, lay, nd = spec.shape, spec.layout, len(spec.shape)
    if lay == "t" and nd >= 2:
        perm = tuple(reversed(range(nd)))
        v = _values(rng, shape, spec.dtype, spec.kind)
        return (np.ascontiguousarray(v.transpose(perm)), lambda t: o.transpose(t, list(perm)),
                lambda a: a.transpose(perm))
    if lay == "step" and nd >= 1:
        big = shape[:-1] + (2 * shape[-1] + 1,)
        return (_values(rng, big, spec.dtype, spec.kind), lambda t: t[..., 1::2],
                lambda a: a[..., 1::2])
    if lay == "off" and nd >= 1:
        big = (shape[0] + 2,) + shape[1:]
        return (_values(rng, big, spec.dtype, spec.kind), lambda t: t[1:shape[0] + 1],
                lambda a: a[1:shape[0] + 1])
    if lay == "exp" and nd >= 1 and any(s > 1 for s in shape):
        small = tuple(1 if (s > 1 and k % 2 == 0) else s for k, s in enumerate(shape))
        if small == shape:
            small = tuple(1 if s > 1 else s for s in shape)
        return (_values(rng, small, spec.dtype, spec.kind),
                lambda t: o.broadcast_to(t, list(shape)), lambda a: np.broadcast_to(a, shape))
    return _values(rng, shape, spec.dtype, spec.kind), lambda t: t, lambda a: a


def _dg(base, dt):
    return dg.tensor(base).astype("bfloat16") if dt == "bfloat16" else dg.tensor(base)


def _np_out(t):
    if t.dtype.name == "bfloat16":
        t = t.astype("float32")
    return t.numpy().copy()


def _flat(out):
    if isinstance(out, (tuple, list)):
        return [x for item in out for x in _flat(item)]
    return [out]


def _close(got, ref, dtype, what, scale=1.0):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != NumPy's {ref.shape}"
    if ref.dtype == bool or ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    rtol, atol = TOL.get(dtype, TOL["float32"])
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64),
                               rtol=rtol * scale, atol=atol * scale, err_msg=what,
                               equal_nan=True)


def _loss_grads(fn, leaves, views, w):
    with dg.GradientTape() as tape:
        tape.watch(leaves)
        outs = [x for x in _flat(fn(*[v(t) for t, v in zip(leaves, views)]))
                if x.dtype.name == "float64"]
        loss = None
        for x, wk in zip(outs, w):
            term = o.sum(x * dg.tensor(wk))
            loss = term if loss is None else loss + term
    grads = tape.gradient(loss, leaves, unconnected_gradients="zero")
    return [g.numpy().copy() for g in grads]


def _loss(fn, arrays, views, w):
    outs = [x for x in _flat(fn(*[v(dg.tensor(a)) for a, v in zip(arrays, views)]))
            if x.dtype.name == "float64"]
    return sum(float(np.sum(x.numpy() * wk)) for x, wk in zip(outs, w))


def check(case):
    """case: dict(desc, fn (dragon), ref (NumPy float64), dtype (expected
    result dtype or a list), specs, seed[, grad, scale, raises])."""
    rng = np.random.default_rng(case["seed"])
    specs = case["specs"]
    made = [_base(rng, s) for s in specs]
    desc = f"{case['desc']} on {specs}"
    inputs = [dv(_dg(b, s.dtype)) for (b, dv, _), s in zip(made, specs)]
    if case.get("raises"):
        with pytest.raises(Exception):
            case["fn"](*inputs)
        return
    outs = _flat(case["fn"](*inputs))
    refs = _flat(case["ref"](*[nv(b.astype(np.float64) if s.dtype in FLOATS else b)
                               for (b, _, nv), s in zip(made, specs)]))
    dts = case["dtype"] if isinstance(case["dtype"], list) else [case["dtype"]] * len(outs)
    assert len(outs) == len(refs), f"{desc}: output count"
    for i, (got, ref, dt) in enumerate(zip(outs, refs, dts)):
        assert got.dtype.name == dt, f"{desc}: output {i} dtype {got.dtype.name} != {dt}"
        ref = np.asarray(ref)
        want = ref.astype(np.float32) if dt == "bfloat16" else ref.astype(dt) \
            if dt != "bool" and ref.dtype.kind == "f" and dt in INTS + FLOATS else ref
        _close(_np_out(got), want, dt, f"{desc}: output {i}", case.get("scale", 1.0))
    if not case.get("grad", True) or not all(s.dtype == "float64" for s in specs) \
            or not any(x.dtype.name == "float64" for x in outs):
        return
    # gradient of sum(w * out) vs central finite differences, float64
    w = [np.random.default_rng(k).standard_normal(tuple(x.shape)) for k, x in
         enumerate(x for x in outs if x.dtype.name == "float64")]
    bases = [b for b, _, _ in made]
    views = [dv for _, dv, _ in made]
    got = _loss_grads(case["fn"], [dg.tensor(b) for b in bases], views, w)
    eps = 1e-6
    for i, b in enumerate(bases):
        num = np.zeros(b.shape)
        for j in range(b.size):
            hi, lo = [x.copy() for x in bases], [x.copy() for x in bases]
            hi[i].flat[j] += eps
            lo[i].flat[j] -= eps
            num.flat[j] = (_loss(case["fn"], hi, views, w) - _loss(case["fn"], lo, views, w)) \
                / (2 * eps)
        np.testing.assert_allclose(got[i], num, rtol=1e-5, atol=1e-6 * case.get("scale", 1),
                                   err_msg=f"{desc}: gradient {i} vs finite differences")


# -------------------------------------------------------------- generators
LAYOUTS = ["c", "c", "t", "step", "off", "exp"]


def _pick(rng, seq):
    return seq[int(rng.integers(0, len(seq)))]


def _shape(rng, nd=None, empty=True):
    nd = int(rng.integers(0, 4)) if nd is None else nd
    sizes = [0, 1, 2, 3] if empty and rng.random() < 0.15 else [1, 2, 3, 4]
    return tuple(int(rng.choice(sizes)) for _ in range(nd))


def _bcast_pair(rng):
    a = _shape(rng)
    nd = int(rng.integers(0, len(a) + 1))
    b = tuple(1 if rng.random() < 0.3 else s for s in a[len(a) - nd:])
    if rng.random() < 0.3:
        a = tuple(1 if rng.random() < 0.3 else s for s in a)
    return (a, b) if rng.random() < 0.5 else (b, a)


def _spec(rng, shape, dt, kind=""):
    return Spec(shape, dt, kind, _pick(rng, LAYOUTS))


def _promote(a, b):
    """The documented result dtype of two tensor operands."""
    if a == b:
        return a
    if "bfloat16" in (a, b):
        other = b if a == "bfloat16" else a
        return "bfloat16" if other in ("bool", "uint8", "int8") else (
            "float32" if other in ("float16", "float32", "int32", "int64")
            else np.result_type("float32", other).name)
    return np.result_type(a, b).name


BINARY = {  # name: (numpy reference, kind a, kind b, dtypes, differentiable)
    "add": (np.add, "", "", INTS + FLOATS, True),
    "sub": (np.subtract, "", "", INTS + FLOATS, True),
    "mul": (np.multiply, "", "", INTS + FLOATS, True),
    "div": (np.divide, "", "pos", FLOATS, True),
    "maximum": (np.maximum, "uniq", "uniq", INTS + FLOATS, True),
    "minimum": (np.minimum, "uniq", "uniq", INTS + FLOATS, True),
    "pow": (np.power, "pos", "", FLOATS, True),
    "mod": (np.mod, "", "pos", INTS + FLOATS, False),
    "floor_divide": (np.floor_divide, "", "pos", INTS + FLOATS, False),
    "equal": (np.equal, "", "", ["bool"] + INTS + FLOATS, False),
    "less": (np.less, "", "", INTS + FLOATS, False),
    "greater_equal": (np.greater_equal, "", "", INTS + FLOATS, False),
    "logical_and": (np.logical_and, "", "", ["bool"], False),
    "bitwise_xor": (np.bitwise_xor, "", "", ["bool"] + INTS, False),
}
SCALARS = [2, -1, 0.5, 3]


OPERATORS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "mod": "%",
             "floor_divide": "//", "equal": "==", "less": "<", "greater_equal": ">=",
             "bitwise_xor": "^", "pow": "**"}


def gen_binary(rng):
    name = _pick(rng, sorted(BINARY))
    ref, ka, kb, dts, diff = BINARY[name]
    sa, sb = _bcast_pair(rng)
    da = _pick(rng, dts)
    mixed = name in OPERATORS and rng.random() < 0.4
    db = _pick(rng, [d for d in dts if d != "bfloat16"]) if mixed and da != "bfloat16" else da
    if {da, db} & {"uint8"} and {da, db} & {"int8", "int32", "int64"} and name in (
            "mod", "floor_divide"):
        db = da
    cmp = name in ("equal", "less", "greater_equal", "logical_and")
    if rng.random() < 0.25 and name not in ("logical_and", "bitwise_xor"):
        s = _pick(rng, SCALARS)
        if name in ("mod", "floor_divide", "div") and s < 0:
            s = 3
        if name == "pow":
            s = 2
        if da == "bool":
            s = True   # ops.*: a scalar must fit the tensor's dtype (an error otherwise)
        if da in INTS and isinstance(s, float) and name in ("mod", "floor_divide"):
            s = 3
        out = "bool" if cmp else ("float32" if da in INTS and (
            isinstance(s, float) or name == "div") else da)
        if da == "uint8" and s < 0:
            s = 2
        if da in INTS and isinstance(s, float) and name not in OPERATORS:
            s, out = 3, ("bool" if cmp else da)  # ops.*: a scalar must fit the tensor's dtype
        if name in OPERATORS and (rng.random() < 0.5 or da in INTS and isinstance(s, float)):
            sym = OPERATORS[name]
            if rng.random() < 0.5 and name in ("add", "sub", "mul"):
                fn = eval(f"lambda x: {s!r} {sym} x")  # noqa: S307 - fixed operator table
                return dict(desc=f"{s!r} {sym} x", fn=fn, ref=lambda x: ref(s, x), dtype=out,
                            specs=[_spec(rng, sa, da, ka)], grad=diff)
            fn = eval(f"lambda x: x {sym} {s!r}")  # noqa: S307
            return dict(desc=f"x {sym} {s!r}", fn=fn, ref=lambda x: ref(x, s), dtype=out,
                        specs=[_spec(rng, sa, da, ka)], grad=diff)
        return dict(desc=f"ops.{name}(x, {s!r})", fn=lambda x: getattr(o, name)(x, s),
                    ref=lambda x: ref(x, s), dtype=out, specs=[_spec(rng, sa, da, ka)],
                    grad=diff)
    out = "bool" if cmp else _promote(da, db)
    if name in ("div", "pow") and out in INTS:
        out = "float32"   # / and ** of integers compute in float32 (docs/python-api.md)
    if {da, db} == {"uint64", "int64"}:
        return None
    if mixed or rng.random() < 0.3 and name in OPERATORS:
        sym = OPERATORS[name]
        fn = eval(f"lambda a, b: a {sym} b")  # noqa: S307 - fixed operator table
        return dict(desc=f"a {sym} b", fn=fn, ref=ref, dtype=out, grad=diff,
                    specs=[_spec(rng, sa, da, ka), _spec(rng, sb, db, kb)])
    return dict(desc=f"ops.{name}", fn=lambda a, b: getattr(o, name)(a, b),
                ref=ref, dtype=out, specs=[_spec(rng, sa, da, ka), _spec(rng, sb, db, kb)],
                grad=diff)


def _erf(x):
    from math import erf
    return np.vectorize(erf, otypes=[np.float64])(x)


UNARY = {  # name: (reference, kind, dtypes, differentiable)
    "exp": (np.exp, "", FLOATS, True), "log": (np.log, "pos", FLOATS, True),
    "sqrt": (np.sqrt, "pos", FLOATS, True), "sin": (np.sin, "", FLOATS, True),
    "tanh": (np.tanh, "", FLOATS, True),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), "", FLOATS, True),
    "abs": (np.abs, "uniq", INTS + FLOATS, True), "neg": (np.negative, "", INTS + FLOATS, True),
    "square": (np.square, "", INTS + FLOATS, True), "floor": (np.floor, "", FLOATS, False),
    "ceil": (np.ceil, "", FLOATS, False), "round": (np.round, "", FLOATS, False),
    "sign": (np.sign, "", INTS + FLOATS, False), "erf": (_erf, "", FLOATS, True),
    "expm1": (np.expm1, "", FLOATS, True), "log1p": (np.log1p, "pos", FLOATS, True),
    "reciprocal": (np.reciprocal, "pos", FLOATS, True),
    "rsqrt": (lambda x: 1 / np.sqrt(x), "pos", FLOATS, True),
    "relu": (lambda x: np.maximum(x, 0), "uniq", INTS + FLOATS, True),
    "isnan": (np.isnan, "nan", FLOATS, False), "logical_not": (np.logical_not, "", ["bool"],
                                                               False),
    "asin": (np.arcsin, "unit", FLOATS, True), "atan": (np.arctan, "", FLOATS, True),
}


def gen_unary(rng):
    name = _pick(rng, sorted(UNARY))
    ref, kind, dts, diff = UNARY[name]
    dt = _pick(rng, dts)
    out = "bool" if name in ("isnan", "logical_not") else dt
    if name == "round" and dt in ("float16", "bfloat16"):
        kind = "unit"
    return dict(desc=f"ops.{name}", fn=lambda x: getattr(o, name)(x), ref=ref, dtype=out,
                specs=[_spec(rng, _shape(rng), dt, kind)], grad=diff)


def _axis(rng, nd):
    r = rng.random()
    if r < 0.15 or nd == 0:
        return None
    if r < 0.22:
        return ()
    if r < 0.6:
        d = int(rng.integers(0, nd))
        return d - nd if rng.random() < 0.4 else d
    k = int(rng.integers(1, nd + 1))
    return tuple(int(d) - (nd if rng.random() < 0.3 else 0) for d in rng.permutation(nd)[:k])


def _np_axis(axis):
    return tuple(axis) if isinstance(axis, tuple) else axis


REDUCE = {  # name: (reference(x, axis, keepdims), dtypes, kind)
    "sum": (np.sum, INTS + FLOATS, ""), "mean": (np.mean, FLOATS, ""),
    "prod": (np.prod, FLOATS, ""), "max": (np.max, INTS + FLOATS, "uniq"),
    "min": (np.min, INTS + FLOATS, "uniq"), "var": (np.var, FLOATS, ""),
    "std": (np.std, FLOATS, ""),
    "logsumexp": (lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis,
                                                           keepdims=keepdims)), FLOATS, ""),
}


def gen_reduce(rng):
    name = _pick(rng, sorted(REDUCE))
    ref, dts, kind = REDUCE[name]
    shape = _shape(rng, int(rng.integers(0, 4)), empty=name in ("sum", "mean", "prod"))
    dt = _pick(rng, dts)
    if dt in FLOATS and rng.random() < 0.15 and name not in ("max", "min"):
        kind = "nan"
    axis = _axis(rng, len(shape))
    keep = bool(rng.random() < 0.4)
    if name == "mean" and shape and 0 in shape:
        return None  # mean over an empty axis: NaN with a warning in NumPy
    # integer sums keep the input dtype (docs/ops.md), unlike NumPy's int64
    out = dt

    def fn(x):
        return getattr(o, name)(x, axis, keepdims=keep)
    return dict(desc=f"ops.{name}(axis={axis}, keepdims={keep})", fn=fn,
                ref=lambda x: ref(x, axis=_np_axis(axis), keepdims=keep), dtype=out,
                specs=[_spec(rng, shape, dt, kind)], scale=4,
                # (finite differences cannot see through a NaN input)
                grad=kind != "nan")


def gen_arg(rng):
    name = _pick(rng, ["argmax", "argmin"])
    shape = _shape(rng, int(rng.integers(1, 4)), empty=False)
    nd = len(shape)
    axis = int(rng.integers(-nd, nd))
    keep = bool(rng.random() < 0.4)
    ref = np.argmax if name == "argmax" else np.argmin
    dt = _pick(rng, INTS + FLOATS)
    return dict(desc=f"ops.{name}({axis}, keepdims={keep})",
                fn=lambda x: getattr(o, name)(x, axis, keepdims=keep).astype("int64"),
                ref=lambda x: ref(x, axis=axis, keepdims=keep), dtype="int64",
                specs=[_spec(rng, shape, dt, "uniq")])


def _np_key(rng, shape):
    parts, d = [], 0
    while d < len(shape) and len(parts) < 4:
        r, n = rng.random(), shape[d]
        if r < 0.25 and n:
            parts.append(int(rng.integers(-n, n)))
            d += 1
        elif r < 0.7:
            step = _pick(rng, [None, 1, 2, -1, -2])
            start = int(rng.integers(-n - 1, n + 1)) if rng.random() < 0.5 else None
            stop = int(rng.integers(-n - 1, n + 2)) if rng.random() < 0.5 else None
            parts.append(slice(start, stop, step))
            d += 1
        elif r < 0.8:
            parts.append(None)
        elif r < 0.88:
            parts.append(Ellipsis)
            break
        else:
            d += 1
            parts.append(slice(None))
    return tuple(parts)


def gen_index(rng):
    shape = _shape(rng, int(rng.integers(1, 4)), empty=False)
    key = _np_key(rng, shape)
    dt = _pick(rng, ["float32", "float64", "int32", "bool", "float16"])
    if rng.random() < 0.2:
        idx = rng.integers(-shape[0], shape[0], int(rng.integers(1, 4)))
        return dict(desc=f"x[{idx.tolist()}]", fn=lambda x: x[dg.tensor(idx)],
                    ref=lambda x: x[idx], dtype=dt, specs=[_spec(rng, shape, dt)])
    return dict(desc=f"x[{key}]", fn=lambda x: x[key], ref=lambda x: x[key], dtype=dt,
                specs=[_spec(rng, shape, dt)])


def gen_shape(rng):
    kind = _pick(rng, ["reshape", "transpose", "broadcast_to", "squeeze", "unsqueeze",
                       "flatten", "concat", "stack", "split", "contiguous"])
    shape = _shape(rng, int(rng.integers(1, 4)))
    nd = len(shape)
    dt = _pick(rng, ["float32", "float64", "int64", "bool", "float16"])
    spec = _spec(rng, shape, dt)
    if kind == "reshape":
        new = _pick(rng, [[-1], [1, -1], list(reversed(shape)), [-1, 1]])
        return dict(desc=f"reshape{new}", fn=lambda x: o.reshape(x, new),
                    ref=lambda x: x.reshape(new), dtype=dt, specs=[spec])
    if kind == "transpose":
        p = [int(v) for v in rng.permutation(nd)]
        return dict(desc=f"transpose{p}", fn=lambda x: o.transpose(x, p),
                    ref=lambda x: x.transpose(p), dtype=dt, specs=[spec])
    if kind == "broadcast_to":
        new = [2] + [int(rng.integers(1, 4)) if s == 1 else s for s in shape]
        return dict(desc=f"broadcast_to{new}", fn=lambda x: o.broadcast_to(x, new),
                    ref=lambda x: np.broadcast_to(x, new), dtype=dt, specs=[spec])
    if kind == "squeeze":
        return dict(desc="squeeze", fn=lambda x: o.squeeze(o.unsqueeze(x, 0), 0),
                    ref=lambda x: x, dtype=dt, specs=[spec])
    if kind == "unsqueeze":
        a = int(rng.integers(-nd - 1, nd + 1))
        return dict(desc=f"unsqueeze({a})", fn=lambda x: o.unsqueeze(x, a),
                    ref=lambda x: np.expand_dims(x, a), dtype=dt, specs=[spec])
    if kind == "flatten":
        a, b = sorted(int(v) for v in rng.integers(0, nd, 2))
        new = shape[:a] + (int(np.prod(shape[a:b + 1])),) + shape[b + 1:]
        return dict(desc=f"flatten({a}, {b})", fn=lambda x: o.flatten(x, a, b - nd),
                    ref=lambda x: x.reshape(new), dtype=dt, specs=[spec])
    if kind == "contiguous":
        return dict(desc="contiguous", fn=lambda x: o.contiguous(x), ref=lambda x: x, dtype=dt,
                    specs=[spec])
    ax = int(rng.integers(-nd, nd))
    if kind in ("concat", "stack"):
        k = int(rng.integers(1, 4))
        shapes = []
        for _ in range(k):
            s = list(shape)
            if kind == "concat":
                s[ax] = int(rng.integers(0, 3))
            shapes.append(tuple(s))
        sa = int(rng.integers(-nd - 1, nd + 1)) if kind == "stack" else ax
        npf = np.concatenate if kind == "concat" else np.stack
        return dict(desc=f"{kind}(axis={sa})", fn=lambda *xs: getattr(o, kind)(list(xs), sa),
                    ref=lambda *xs: npf(xs, axis=sa), dtype=dt,
                    specs=[_spec(rng, s, dt) for s in shapes])
    n = shape[ax]
    cut = sorted(int(v) for v in rng.integers(0, n + 1, 2))
    sizes = [cut[0], cut[1] - cut[0], n - cut[1]]
    return dict(desc=f"split({sizes}, {ax})", fn=lambda x: tuple(o.split(x, sizes, ax)),
                ref=lambda x: tuple(np.split(x, [cut[0], cut[1]], axis=ax)), dtype=dt,
                specs=[spec])


def _cumsum_ref(x, axis, exclusive, reverse):
    y = np.flip(x, axis) if reverse else x
    c = np.cumsum(y, axis=axis)
    if exclusive:
        c = c - y
    return np.flip(c, axis) if reverse else c


def gen_select(rng):
    kind = _pick(rng, ["where", "clip", "sort", "topk", "cumsum", "gather", "take",
                       "index_select"])
    shape = _shape(rng, int(rng.integers(1, 4)))
    nd = len(shape)
    ax = int(rng.integers(-nd, nd))
    # (sort and cumsum take no float16: a named InvalidArgumentError, see gen_bad)
    dt = _pick(rng, ["float32", "float64", "int32", "int64"] + (
        [] if kind in ("sort", "topk", "cumsum") else ["float16"]))
    if kind == "where":
        sa, sb = _bcast_pair(rng)
        m = rng.random(sa) > 0.5
        return dict(desc="where(m, a, b)", fn=lambda a, b: o.where(dg.tensor(m), a, b),
                    ref=lambda a, b: np.where(m, a, b), dtype=dt,
                    specs=[_spec(rng, sa, dt), _spec(rng, sb, dt)])
    if kind == "clip":
        lo, hi = _pick(rng, [(-0.5, 0.5), (None, 0.25), (0, None), (-1, 2)])
        return dict(desc=f"clip({lo}, {hi})", fn=lambda x: o.clip(x, lo, hi),
                    ref=lambda x: np.clip(x, lo, hi), dtype=dt,
                    specs=[_spec(rng, shape, dt, "uniq")])
    if kind == "sort":
        desc_ = bool(rng.random() < 0.5)

        def ref(x):
            idx = np.argsort(-x if desc_ else x, axis=ax, kind="stable")
            return np.take_along_axis(x, idx, ax), idx
        return dict(desc=f"sort({ax}, descending={desc_})",
                    fn=lambda x: tuple(o.sort(x, ax, descending=desc_, stable=True)),
                    ref=ref, dtype=[dt, "int64"], specs=[_spec(rng, shape, dt, "uniq")])
    if kind == "topk":
        n = shape[ax]
        k = int(rng.integers(0, n + 1))
        largest = bool(rng.random() < 0.5)

        def ref(x):
            idx = np.argsort(-x if largest else x, axis=ax, kind="stable")
            idx = np.take(idx, np.arange(k), axis=ax)
            return np.take_along_axis(x, idx, ax), idx
        return dict(desc=f"topk({k}, {ax}, largest={largest})",
                    fn=lambda x: tuple(o.topk(x, k, ax, largest=largest)), ref=ref,
                    dtype=[dt, "int64"], specs=[_spec(rng, shape, dt, "uniq")])
    if kind == "cumsum":
        ex, rev = bool(rng.random() < 0.4), bool(rng.random() < 0.4)
        return dict(desc=f"cumsum({ax}, exclusive={ex}, reverse={rev})",
                    fn=lambda x: o.cumsum(x, ax, exclusive=ex, reverse=rev),
                    ref=lambda x: _cumsum_ref(x, ax, ex, rev), dtype=dt,
                    specs=[_spec(rng, shape, dt)], scale=4)
    n = shape[ax]
    if n == 0:
        return None
    idx = rng.integers(0, n, _shape(rng, 1 if kind == "index_select" else int(
        rng.integers(1, 3)), empty=False))
    if kind == "take":
        flat = rng.integers(0, max(int(np.prod(shape)), 1), 3)
        if not int(np.prod(shape)):
            return None
        return dict(desc=f"take({flat.tolist()})", fn=lambda x: o.take(x, dg.tensor(flat)),
                    ref=lambda x: np.take(x, flat), dtype=dt, specs=[_spec(rng, shape, dt)])
    op = o.gather if kind == "gather" else o.index_select
    return dict(desc=f"{kind}(idx={idx.tolist()}, axis={ax})",
                fn=lambda x: op(x, dg.tensor(idx), ax),
                ref=lambda x: np.take(x, idx, axis=ax), dtype=dt, specs=[_spec(rng, shape, dt)])


def gen_matmul(rng):
    m, k, n = (int(rng.integers(1, 4)) for _ in range(3))
    ba = tuple(int(rng.integers(1, 3)) for _ in range(int(rng.integers(0, 3))))
    bb = tuple(_pick(rng, [1, s]) for s in ba[len(ba) - int(rng.integers(0, len(ba) + 1)):])
    if rng.random() < 0.5:
        ba, bb = bb, ba
    sa = _pick(rng, [ba + (m, k), (k,)])
    sb = _pick(rng, [bb + (k, n), (k,)])
    dt = _pick(rng, ["float32", "float64", "float64", "float16", "bfloat16"])
    return dict(desc="matmul", fn=lambda a, b: o.matmul(a, b), ref=np.matmul, dtype=dt,
                specs=[_spec(rng, sa, dt), _spec(rng, sb, dt)], scale=2 * k)


def _ln_ref(x, g, b, axis, eps):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mu = x.mean(axes, keepdims=True)
    var = ((x - mu) ** 2).mean(axes, keepdims=True)
    return (x - mu) / np.sqrt(var + eps) * g + b


def _sm(x, ax):
    if not x.size:
        return x
    e = np.exp(x - x.max(ax, keepdims=True))
    return e / e.sum(ax, keepdims=True)


def gen_nn(rng):
    kind = _pick(rng, ["softmax", "log_softmax", "layer_norm", "cross_entropy"])
    dt = _pick(rng, ["float32", "float64", "float64"])
    if kind in ("softmax", "log_softmax"):
        shape = _shape(rng, int(rng.integers(1, 4)))
        ax = int(rng.integers(-len(shape), len(shape)))
        ref = (lambda x: _sm(x, ax)) if kind == "softmax" else (
            lambda x: np.log(_sm(x, ax)))
        return dict(desc=f"{kind}({ax})", fn=lambda x: getattr(o, kind)(x, ax), ref=ref,
                    dtype=dt, specs=[_spec(rng, shape, dt)], scale=4)
    if kind == "layer_norm":
        shape = _shape(rng, int(rng.integers(1, 4)), empty=False)
        ax = int(rng.integers(-len(shape), len(shape)))
        ns = shape[ax % len(shape):]
        eps = _pick(rng, [1e-5, 0.1])
        return dict(desc=f"layer_norm(axis={ax}, eps={eps})",
                    fn=lambda x, g, b: o.layer_norm(x, g, b, ax, eps),
                    ref=lambda x, g, b: _ln_ref(x, g, b, ax, eps), dtype=dt,
                    specs=[_spec(rng, shape, dt), _spec(rng, ns, dt), _spec(rng, ns, dt)],
                    scale=8)
    n, c = int(rng.integers(1, 5)), int(rng.integers(2, 5))
    tgt = rng.integers(0, c, n)
    ign = -100
    if rng.random() < 0.4 and n > 1:
        tgt[0] = ign = _pick(rng, [-100, 1]) if rng.random() < 0.5 else -100
        if ign == 1:
            tgt[0] = 1
    ls = _pick(rng, [0.0, 0.1])
    red = _pick(rng, ["mean", "sum", "none"])
    if red == "mean" and (tgt == ign).all():
        return None   # a mean over no kept target is NaN: finite differences say nothing

    def ref(x):
        lp = np.log(_sm(x, 1))
        keep = tgt != ign
        safe = np.where(keep, tgt, 0)
        nll = -lp[np.arange(n), safe]
        loss = (1 - ls) * nll - ls * lp.mean(1)
        loss = np.where(keep, loss, 0.0)
        if red == "none":
            return loss
        return loss.sum() if red == "sum" else loss.sum() / max(keep.sum(), 1) \
            if keep.sum() else np.float64(np.nan)
    return dict(desc=f"softmax_cross_entropy(ign={ign}, ls={ls}, red={red})",
                fn=lambda x: o.softmax_cross_entropy(x, dg.tensor(tgt), ignore_index=ign,
                                                     label_smoothing=ls, reduction=red),
                ref=ref, dtype=dt, specs=[_spec(rng, (n, c), dt)], scale=4)


def gen_bad(rng):
    """Bad inputs: each must raise a clear error, never compute."""
    kind = _pick(rng, ["shape", "axis", "index", "gather", "matmul", "reshape", "dtype",
                       "mixed", "sort16", "scalar"])
    cases = {
        "shape": (lambda a, b: o.add(a, b), [Spec((2, 3), "float32"), Spec((4,), "float32")]),
        "axis": (lambda a: o.sum(a, 3), [Spec((2, 3), "float32")]),
        "index": (lambda a: a[5], [Spec((2, 3), "float32")]),
        "gather": (lambda a: o.gather(a, dg.tensor(np.array([7])), 1),
                   [Spec((2, 3), "float32")]),
        "matmul": (lambda a, b: o.matmul(a, b), [Spec((2, 3), "float32"),
                                                 Spec((4, 2), "float32")]),
        "reshape": (lambda a: o.reshape(a, [4, -1]), [Spec((2, 3), "float32")]),
        "dtype": (lambda a: o.exp(a), [Spec((2, 3), "int32")]),
        "mixed": (lambda a, b: o.add(a, b), [Spec((2, 3), "float32"), Spec((3,), "int32")]),
        "sort16": (lambda a: o.sort(a), [Spec((4,), "float16")]),
        "scalar": (lambda a: o.sub(a, 0.5), [Spec((3,), "int32")]),
    }
    fn, specs = cases[kind]
    return dict(desc=f"bad {kind}", fn=fn, specs=specs, raises=True, ref=None, dtype=None)


GENERATORS = {
    "binary": (gen_binary, 200), "unary": (gen_unary, 100), "reduce": (gen_reduce, 150),
    "arg": (gen_arg, 30), "index": (gen_index, 100), "shape": (gen_shape, 80),
    "select": (gen_select, 100), "matmul": (gen_matmul, 40), "nn": (gen_nn, 60),
    "bad": (gen_bad, 20),
}


def _case(cat, i):
    return _fuzzcases.draw(GENERATORS, cat, i, 104729)


OFFSET = _fuzzcases.OFFSET  # DRAGON_FUZZ_OFFSET (tests/_fuzzcases.py)
CASES = _fuzzcases.cases(GENERATORS)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("cat,i", CASES, ids=[f"{c}-{i}" for c, i in CASES])
def test_differential_numpy(cat, i):
    check(_case(cat, i))


@pytest.mark.parametrize("dt", ["float16", "bfloat16", "float32", "float64", "int32"])
def test_where_scalar_takes_the_other_value_dtype(dt):
    """``where(cond, 0.5, y)``: the scalar takes y's dtype (it took the bool
    condition's, then refused or, for 0/1, silently became a bool)."""
    m = np.array([True, False, True])
    y = np.array([1.0, 2.0, 3.0]).astype("float32" if dt == "bfloat16" else dt)
    v = 0 if dt == "int32" else 0.5
    got = o.where(dg.tensor(m), v, _dg(y, dt))
    assert got.dtype.name == dt
    np.testing.assert_array_equal(_np_out(got), np.where(m, v, y).astype(
        "float32" if dt == "bfloat16" else dt))
    got = o.where(dg.tensor(m), _dg(y, dt), v)
    assert got.dtype.name == dt


@pytest.mark.parametrize("op", ["max", "min"])
def test_extremum_gradient_of_nan_goes_to_the_nan(op):
    """A NaN max/min takes its gradient from the NaN elements (it was 0
    everywhere: x == NaN is false), shared evenly; other slices as before."""
    x = dg.tensor(np.array([[1.0, np.nan, 3.0, np.nan], [4.0, 5.0, 5.0, -1.0]]))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = o.sum(getattr(o, op)(x, 1))
    (g,) = tape.gradient(y, [x])
    want = [[0, 0.5, 0, 0.5], [0, 0.5, 0.5, 0]] if op == "max" else [[0, 0.5, 0, 0.5],
                                                                       [0, 0, 0, 1]]
    np.testing.assert_array_equal(g.numpy(), want)


def test_counts():
    """Bounded and reproducible."""
    assert len(CASES) == sum(n for _, n in GENERATORS.values()) >= 800
    assert _case("reduce", 5)["desc"] == _case("reduce", 5)["desc"]
