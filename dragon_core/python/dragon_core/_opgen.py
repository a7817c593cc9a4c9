"""Generates ``dragon_core.ops.<py_name>`` from the schema registry.

Each op gets a real Python function: its signature comes from the schema
(inputs, then attributes in schema order with their defaults) and its
docstring from the schema's docs. The function body is one call into the
C++ dispatcher.
"""

from __future__ import annotations

import keyword
import numbers

from . import _C

_ATTR_TYPES = {1: "int", 2: "float", 3: "bool", 4: "str", 5: "sequence of int",
               6: "sequence of float", 7: "dtype"}


def _safe(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


# ------------------------------------------------------- Python argument names
# The C++ schema attribute names are ABI (kernels read them); the Python names
# follow NumPy / the array API standard. The mapping lives here, in the
# Python layer, and applies to every op, the core's and plugins' alike, so an
# op added later gets the convention without being listed.

#: schema attribute name -> Python argument name, for every op.
PY_ATTR_NAMES: dict[str, str] = {"axes": "axis", "keep_dims": "keepdims", "dims": "axis"}

#: (op, schema attribute) -> Python name, where NumPy uses another name for
#: that op (``numpy.transpose(a, axes)``).
PY_ATTR_NAMES_PER_OP: dict[tuple[str, str], str] = {("Transpose", "perm"): "axes"}

#: Old or foreign keyword -> the argument that replaces it. Passing one of
#: these raises a TypeError naming the replacement; it is never accepted.
OLD_NAMES: dict[str, str] = {"axes": "axis", "dims": "axis", "keep_dims": "keepdims",
                             "perm": "axes"}

#: PyTorch names: they live in ``dragon_core.vm.torch`` only.
TORCH_NAMES: dict[str, str] = {"dim": "axis", "keepdim": "keepdims"}

#: (op, schema attribute) -> default in Python for a schema-required
#: attribute that NumPy makes optional; None is filled by the op's function.
PY_OPTIONAL: set[tuple[str, str]] = {("Slice", "steps")}


def py_attr_name(op: str, attr: str) -> str:
    """The Python argument name of schema attribute ``attr`` of ``op``."""
    return PY_ATTR_NAMES_PER_OP.get((op, attr), PY_ATTR_NAMES.get(attr, attr))


# ------------------------------------------------------------------ padding
# One padding layout for every op, NumPy's ``np.pad(pad_width=...)``: a
# ``pads`` argument is an int (every side alike), a sequence of N ints (one
# per padded axis, both sides alike) or a sequence of N ``(before, after)``
# pairs, outermost axis first. The padded axes are the spatial ones for an
# op whose schema gives ``pads`` a default of N values (Conv2d: 2, Conv3d:
# 3), every axis of the first input otherwise (Pad, as np.pad). The C++
# attribute keeps its own layout (ABI), chosen per op below; the conversion
# happens here only, keyed by the schema attribute name, so a plugin op with
# a ``pads`` attribute gets the same convention.

#: op -> C++ layout of its ``pads`` attribute, where it is not the default
#: ``"begins_ends"`` (N values when both sides are alike, else the N befores
#: then the N afters, as ONNX). ``"pairs"``: ``[b0, a0, b1, a1, ...]``.
PADS_LAYOUT: dict[str, str] = {"Pad": "pairs"}

#: How the pairs read for N spatial axes (in error messages).
_SIDES = {2: "(top, bottom), (left, right)",
          3: "(front, back), (top, bottom), (left, right)"}


def _pads_form(n, spatial: bool = True) -> str:
    if spatial and n in _SIDES:
        return _SIDES[n]
    if n is None or n > 3:
        return "(before0, after0), (before1, after1), ..."
    return ", ".join(f"(before{i}, after{i})" for i in range(n)) + ("," if n == 1 else "")


def _count(n, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def pads_axes(op: str, default, x=None):
    """How many axes the ``pads`` of ``op`` covers: the length of its schema
    default, or the rank of the first input ``x`` when it has none."""
    if default:
        return len(default)
    if x is None:
        return None
    nd = getattr(x, "ndim", None)
    if nd is None:
        import numpy as np
        nd = np.ndim(x)
    return int(nd)


def pads_to_pairs(op: str, value, n):
    """Python ``pads`` (int, N ints or N pairs) -> a tuple of N
    ``(before, after)`` pairs of int; raises ``ArgumentTypeError`` (a
    TypeError and a ValueError) for any other form, a flat list of the old
    layouts included."""
    from .errors import ArgumentTypeError
    if hasattr(value, "tolist") and not _is_int(value):
        value = value.tolist()
    form = _pads_form(n, PADS_LAYOUT.get(op) != "pairs")
    if _is_int(value):
        if n is None:
            raise ArgumentTypeError(f"{op}: pads={value!r} needs the input's rank", op=op)
        return tuple((int(value), int(value)) for _ in range(n))
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        raise ArgumentTypeError(
            f"{op}: pads must be an int, {n} ints (one per padded axis, both sides) or "
            f"{n} (before, after) pairs, e.g. ({form}); got {value!r}", op=op)
    items = list(value)
    if all(_is_int(v) for v in items):
        if len(items) != n:
            hint = ""
            if n and len(items) == 2 * n:
                if PADS_LAYOUT.get(op) == "pairs":
                    old = tuple(zip(items[0::2], items[1::2]))
                else:
                    old = tuple(zip(items[:n], items[n:]))
                hint = (f"; the old flat layout is gone: for these values pass "
                        f"{tuple(tuple(int(b) for b in p) for p in old)!r}")
            raise ArgumentTypeError(
                f"{op}: pads={value!r} is a flat list of {_count(len(items), 'value', 'values')}, but {op} pads "
                f"{_count(n, 'axis', 'axes')}: pass an int, {_count(n, 'int', 'ints')} (both "
                f"sides alike) or {_count(n, '(before, after) pair', '(before, after) pairs')}, "
                f"outermost axis first: ({form}){hint} (see docs/python-api.md)", op=op)
        return tuple((int(v), int(v)) for v in items)
    pairs = []
    for v in items:
        if hasattr(v, "tolist"):
            v = v.tolist()
        if not (isinstance(v, (list, tuple)) and len(v) == 2 and all(_is_int(e) for e in v)):
            raise ArgumentTypeError(
                f"{op}: pads={value!r} mixes forms or holds a bad entry {v!r}: pass an int, "
                f"{n} ints or {n} (before, after) pairs of int: ({form})", op=op)
        pairs.append((int(v[0]), int(v[1])))
    if len(pairs) != n:
        raise ArgumentTypeError(
            f"{op}: pads={value!r} has {len(pairs)} (before, after) pairs, but {op} pads "
            f"{n} axes: ({form})", op=op)
    return tuple(pairs)


def pads_to_schema(op: str, value, n) -> list:
    """Python ``pads`` -> the C++ attribute of ``op`` (see :data:`PADS_LAYOUT`)."""
    pairs = pads_to_pairs(op, value, n)
    if PADS_LAYOUT.get(op) == "pairs":
        return [v for p in pairs for v in p]
    if all(b == a for b, a in pairs):
        return [b for b, _ in pairs]
    return [b for b, _ in pairs] + [a for _, a in pairs]


def pads_from_schema(op: str, value, n=None) -> tuple:
    """The C++ ``pads`` attribute of ``op`` (as a graph node or a gradient
    rule reads it) -> N ``(before, after)`` pairs, what the op's Python
    function takes back. ``n`` is the number of padded axes (needed only
    when a single value stands for every axis)."""
    v = [int(e) for e in value]
    if PADS_LAYOUT.get(op) == "pairs":
        if len(v) % 2:
            raise ValueError(f"{op}: pads attribute {v} does not hold (before, after) pairs")
        return tuple(zip(v[0::2], v[1::2]))
    if len(v) == 1 and n:
        v = v * n
    if n is None or len(v) == n:
        return tuple((e, e) for e in v)
    if len(v) == 2 * n:
        return tuple(zip(v[:n], v[n:]))
    raise ValueError(f"{op}: pads attribute {v} does not hold 1, {n} or {2 * n} values")


# ------------------------------------------------------------ Tensor methods
#: op -> whether it is a Tensor method, where the default rule (below) is not
#: what the op wants. Plugins set entries through
#: ``dragon_core.plugin_api.set_tensor_method``.
TENSOR_METHOD: dict[str, bool] = {
    # fusion-internal ops: the graph passes emit them, users call the plain op
    "Conv2dBiasAct": False, "MatMulBiasAct": False, "RoiPoolGather": False,
    # index-returning helper of max_pool2d's gradient
    "MaxPool2dIndices": False,
    # collectives: users call dragon_core.distributed, which owns groups and
    # ordering; the raw graph ops take internal group ids
    "CollectiveAllReduce": False, "CollectiveBroadcast": False,
    "CollectiveAllGather": False, "CollectiveReduceScatter": False,
    "CollectiveAllToAll": False,
}

#: Suffixes of ops that are never methods by default: gradients and
#: optimizer updates (``x.adam_update`` makes no sense on a tensor).
NOT_METHOD_SUFFIXES = ("Grad", "BackpropFilter", "BackpropInput", "Update")


def is_tensor_method(desc: dict) -> bool:
    """Whether the op of schema description ``desc`` is a Tensor method.

    An entry of :data:`TENSOR_METHOD` decides; otherwise an op is a method
    when its first input is one tensor and it is not a gradient or an
    optimizer update (its name ends in one of :data:`NOT_METHOD_SUFFIXES`).
    """
    flag = TENSOR_METHOD.get(desc["name"])
    if flag is not None:
        return flag
    if not desc["inputs"] or desc["inputs"][0]["variadic"]:
        return False
    return not desc["name"].endswith(NOT_METHOD_SUFFIXES)


def _bad_keywords(op: str, py_name: str, given: dict, params: tuple):
    """Raise the TypeError for keywords the function does not take."""
    import difflib
    name = sorted(given)[0]
    if name in params:  # cannot happen through Python's binding; kept for safety
        raise TypeError(f"{py_name}() got multiple values for argument '{name}'")
    new = TORCH_NAMES.get(name)
    if new is not None and new in params:
        raise TypeError(f"{py_name}() got the PyTorch argument name '{name}' (op {op}); "
                        f"dragon_core.ops uses NumPy's names: use '{new}=' (or "
                        f"dragon_core.vm.torch for PyTorch's API)")
    new = OLD_NAMES.get(name)
    if new is not None and new in params:
        raise TypeError(f"{py_name}() got '{name}=', which is now '{new}=' (op {op}; "
                        f"see docs/python-api.md)")
    close = difflib.get_close_matches(name, params, n=2)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    raise TypeError(f"{py_name}() got an unexpected keyword argument '{name}' (op {op}; "
                    f"it takes {', '.join(params) or 'no keywords'}){hint}")


def _axis_arg(value):
    """``axis`` given as an int, a sequence of int or None -> the schema's list."""
    if value is None:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return [int(value)]
    return value


def _doc(desc: dict) -> str:
    lines = [desc["doc"].strip() or f"The {desc['name']} op.", ""]
    lines += ["Parameters", "----------"]
    for i in desc["inputs"]:
        kind = "sequence of Tensor" if i["variadic"] else "Tensor"
        if i["optional"]:
            kind += ", optional"
        lines.append(f"{_safe(i['name'])} : {kind}")
        text = (i["doc"] + " " if i["doc"] else "") + f"Dtypes: {i['dtypes']}."
        lines.append(f"    {text}")
    for a in desc["attrs"]:
        kind = _ATTR_TYPES.get(a["type"], "object")
        name = _safe(py_attr_name(desc["name"], a["name"]))
        if name == "axis" and a["type"] == 5:
            kind = "int or sequence of int"
        doc = a["doc"]
        if a["name"] == "pads" and a["type"] == 5:
            kind = "int, sequence of int or sequence of (int, int)"
            n = len(a["default"]) if a["default"] else None
            what = f"the {n} spatial axes" if n else "every axis of the input, as np.pad"
            doc = (f"Padding of {what}: an int (every side), one int per axis (both sides) or "
                   f"one (before, after) pair per axis, outermost first.")
        if a["required"] and (desc["name"], a["name"]) not in PY_OPTIONAL:
            head = f"{name} : {kind}"
        elif a["optional"] or a["required"]:
            head = f"{name} : {kind}, optional"
        else:
            head = f"{name} : {kind}, default {a['default']!r}"
        lines.append(head)
        if doc:
            lines.append(f"    {doc}")
    if not desc["inputs"]:
        lines.append("device : str, optional")
        lines.append("    Where to create the result (default: the host, 'cpu').")
    lines += ["", "Returns", "-------"]
    outs = desc["outputs"]
    if len(outs) == 1 and outs[0]["variadic"]:
        lines.append("list of Tensor")
    elif len(outs) == 1:
        lines.append("Tensor")
    else:
        lines.append("tuple of Tensor")
    for o in outs:
        if o["doc"]:
            lines.append(f"    {o['name']}: {o['doc']}")
    lines += ["", f"Notes", "-----", f"Op ``{desc['name']}``, defined by ``{desc['plugin']}``."]
    return "\n".join(lines)


def _none_given(op: str, attr: dict):
    """None for an attribute that has a default: an error, not the default
    (``keepdims=None`` is not a bool)."""
    from .errors import ArgumentTypeError
    kind = _ATTR_TYPES.get(attr["type"], "value")
    raise ArgumentTypeError(f"{op}: attribute '{attr['name']}' expects a {kind}, got None "
                            f"(omit it for the default {attr['default']!r})", op=op)


def make_op(desc: dict):
    """Build the Python function of one op from its schema description.

    The function takes the Python names of the attributes (see
    :data:`PY_ATTR_NAMES`), accepts an int for an ``axis`` the schema keeps
    as a list, and raises a TypeError naming the new argument for an old or
    PyTorch keyword. It checks one more thing itself: None for an attribute
    that has a default is an error (the runtime reads None as 'unset', which
    only optional attributes may be). Every other check is the runtime's.
    """
    op = desc["name"]
    handle = _C.op(op)
    params, input_names, attr_names, defaults = [], [], [], {}
    checks = []
    seen_default = False
    for i in desc["inputs"]:
        n = _safe(i["name"])
        input_names.append(n)
        if i["optional"]:
            params.append(f"{n}=None")
            seen_default = True
        else:
            params.append(n)
    for a in desc["attrs"]:
        n = _safe(py_attr_name(op, a["name"]))
        attr_names.append(n)
        py_optional = (op, a["name"]) in PY_OPTIONAL
        if a["required"] and not py_optional and not seen_default:
            params.append(n)
        else:
            seen_default = True
            default = None if (a["optional"] or a["required"]) else a["default"]
            if isinstance(default, list):
                default = tuple(default)
            key = f"_d_{n}"
            defaults[key] = default
            params.append(f"{n}={key}")
            if not (a["optional"] or a["required"]):
                defaults[f"_a_{n}"] = a
                checks.append(f"    if {n} is None:\n        _none({op!r}, _a_{n})\n")
        if n == "axis" and a["type"] == 5:
            checks.append(f"    {n} = _axis({n})\n")
        if a["name"] == "pads" and a["type"] == 5:
            defaults["_pd"] = a["default"] or None
            first = input_names[0] if input_names else "None"
            checks.append(f"    if {n} is not None:\n        {n} = _pads({op!r}, {n}, "
                          f"_pads_axes({op!r}, _pd, {first}))\n")
        if py_optional and a["name"] == "steps":
            checks.append(f"    if {n} is None:\n        {n} = [1] * len(starts)\n")
    device = not desc["inputs"]
    if device:
        params.append("*")
        params.append("device=None")
    params.append("**_kw")
    names = tuple(input_names + attr_names + (["device"] if device else []))
    checks.insert(0, f"    if _kw:\n        _bad({op!r}, {desc['py_name']!r}, _kw, _names)\n")
    args = "".join(f"{n}, " for n in input_names)
    attrs = "".join(f"{n}, " for n in attr_names)
    call = f"_call(_h, ({args}), ({attrs}){', device' if device else ''})"
    src = (f"def {desc['py_name']}({', '.join(params)}):\n" + "".join(checks)
           + f"    return {call}\n")
    ns = {"_call": _C.call, "_h": handle, "_none": _none_given, "_bad": _bad_keywords,
          "_axis": _axis_arg, "_names": names, "_pads": pads_to_schema,
          "_pads_axes": pads_axes, **defaults}
    exec(compile(src, f"<dragon_core.ops.{desc['py_name']}>", "exec"), ns)  # noqa: S102
    fn = ns[desc["py_name"]]
    fn.__doc__ = _doc(desc)
    fn.__module__ = "dragon_core.ops"
    fn.__qualname__ = desc["py_name"]
    fn._dragon_op = op
    import inspect
    sig = inspect.signature(fn)
    fn.__signature__ = sig.replace(parameters=[p for p in sig.parameters.values()
                                               if p.kind is not p.VAR_KEYWORD])
    return fn


def generate(namespace: dict) -> list[str]:
    """(Re)generate every op function into ``namespace``; returns new names."""
    added = []
    for desc in _C.list_ops():
        name = desc["py_name"]
        existing = namespace.get(name)
        if existing is not None and getattr(existing, "_dragon_op", None) == desc["name"]:
            continue
        if existing is not None and getattr(existing, "_dragon_override", False):
            namespace["_" + name + "_op"] = make_op(desc)
            continue
        namespace[name] = make_op(desc)
        added.append(name)
    return added
