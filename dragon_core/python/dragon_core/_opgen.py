"""Generates ``dragon_core.ops.<py_name>`` from the schema registry.

Each op gets a real Python function: its signature comes from the schema
(inputs, then attributes in schema order with their defaults) and its
docstring from the schema's docs. The function body is one call into the
C++ dispatcher.
"""

from __future__ import annotations

import keyword

from . import _C

_ATTR_TYPES = {1: "int", 2: "float", 3: "bool", 4: "str", 5: "sequence of int",
               6: "sequence of float", 7: "dtype"}


def _safe(name: str) -> str:
    return name + "_" if keyword.iskeyword(name) else name


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
        if a["required"]:
            head = f"{_safe(a['name'])} : {kind}"
        elif a["optional"]:
            head = f"{_safe(a['name'])} : {kind}, optional"
        else:
            head = f"{_safe(a['name'])} : {kind}, default {a['default']!r}"
        lines.append(head)
        if a["doc"]:
            lines.append(f"    {a['doc']}")
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

    The function checks one thing itself: None for an attribute that has a
    default is an error (the runtime reads None as 'unset', which only
    optional attributes may be). Every other check is the runtime's.
    """
    handle = _C.op(desc["name"])
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
        n = _safe(a["name"])
        attr_names.append(n)
        if a["required"] and not seen_default:
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
                checks.append(f"    if {n} is None:\n        _none({desc['name']!r}, _a_{n})\n")
    device = not desc["inputs"]
    if device:
        params.append("*")
        params.append("device=None")
    args = "".join(f"{n}, " for n in input_names)
    attrs = "".join(f"{n}, " for n in attr_names)
    call = f"_call(_h, ({args}), ({attrs}){', device' if device else ''})"
    src = (f"def {desc['py_name']}({', '.join(params)}):\n" + "".join(checks)
           + f"    return {call}\n")
    ns = {"_call": _C.call, "_h": handle, "_none": _none_given, **defaults}
    exec(compile(src, f"<dragon_core.ops.{desc['py_name']}>", "exec"), ns)  # noqa: S102
    fn = ns[desc["py_name"]]
    fn.__doc__ = _doc(desc)
    fn.__module__ = "dragon_core.ops"
    fn.__qualname__ = desc["py_name"]
    fn._dragon_op = desc["name"]
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
