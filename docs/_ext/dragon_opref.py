"""Sphinx extension: the op reference, generated from the schema registry.

``.. dragon-op-reference::`` expands, at build time, to one section per op
registered in the running core (the core's own schemas and those of every
installed plugin): its Python signature, doc, inputs and outputs with their
dtypes, attributes with their types and defaults, flags, and the kernels
that serve it -- which plugin, on which device, for which dtypes, at which
priority. Nothing is written by hand, so the page cannot drift from the
code; it describes the plugins installed where the site is built.
"""

from __future__ import annotations

import inspect
import re
from collections import defaultdict

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

import dragon_core
from dragon_core import plugin_api

# The attribute type codes of the C ABI (DgAttrType in dragon/plugin.h).
ATTR_TYPES = {1: "int", 2: "float", 3: "bool", 4: "str", 5: "list of int",
              6: "list of float", 7: "dtype"}

_SPECIAL = re.compile(r"([\\`*_|\[\]<>:])")


def esc(text) -> str:
    """``text`` as reStructuredText that renders literally."""
    return _SPECIAL.sub(r"\\\1", str(text))


def lit(text) -> str:
    """``text`` as an inline literal (backquotes cannot occur in op names)."""
    return "``" + str(text).replace("`", "'") + "``"


def op_records() -> list[dict]:
    """Every registered op's schema, sorted by name."""
    return sorted(dragon_core._C.list_ops(), key=lambda o: o["name"])


def kernel_rows(op: str) -> list[tuple]:
    """``(device, plugin, dist, priority, dtypes)`` per device and plugin."""
    groups: dict[tuple, list[str]] = defaultdict(list)
    for k in dragon_core.plugins.kernels(op):
        key = (k["device"], k["plugin"], k.get("dist") or "", k["priority"])
        groups[key].extend(d.strip() for d in k["dtypes"].split(",") if d.strip())
    rows = []
    for (device, plugin, dist, priority), dtypes in sorted(groups.items(),
                                                           key=lambda kv: (kv[0][0], -kv[0][3],
                                                                           kv[0][1])):
        rows.append((device, plugin, dist, priority, sorted(set(dtypes), key=_dtype_order)))
    return rows


_DTYPE_ORDER = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "bfloat16",
                "float32", "float64"]


def _dtype_order(name: str):
    return _DTYPE_ORDER.index(name) if name in _DTYPE_ORDER else len(_DTYPE_ORDER)


def _signature(rec: dict) -> str:
    fn = getattr(dragon_core.ops, rec["py_name"], None)
    if fn is None:
        return f"dragon_core.ops.{rec['py_name']}(...)"
    try:
        return f"dragon_core.ops.{rec['py_name']}{inspect.signature(fn)}"
    except (TypeError, ValueError):
        return f"dragon_core.ops.{rec['py_name']}(...)"


def _default(attr: dict) -> str:
    if attr.get("required"):
        return "required"
    if attr.get("optional") and attr.get("default") is None:
        return "optional (None: unset)"
    return lit(repr(attr.get("default")))


def _flags(rec: dict) -> list[str]:
    out = []
    if rec.get("no_grad"):
        out.append("not differentiable")
    if rec.get("same_dtype"):
        out.append("all tensor inputs share one dtype")
    if rec.get("stateful"):
        out.append("stateful (never deduplicated or folded)")
    if rec.get("collective"):
        out.append("collective")
    if rec.get("control"):
        out.append("control flow")
    return out


def op_lines(rec: dict) -> list[str]:
    """The reStructuredText of one op's section."""
    name = rec["name"]
    lines = [f".. _op-{name.lower()}:", "", name, "~" * len(name), ""]
    lines += [f"{lit(_signature(rec))}", ""]
    if rec.get("doc"):
        lines += [esc(rec["doc"]), ""]
    lines += [f"Defined by: {lit(rec['plugin'])}.", ""]
    for title, args in (("Inputs", rec["inputs"]), ("Outputs", rec["outputs"])):
        if not args:
            continue
        lines += [f"**{title}**", ""]
        for a in args:
            marks = [m for m, on in (("variadic", a["variadic"]), ("optional", a["optional"]),
                                     ("no gradient", a["no_grad"] and title == "Inputs")) if on]
            extra = f" ({', '.join(marks)})" if marks else ""
            doc = f" -- {esc(a['doc'])}" if a.get("doc") else ""
            lines.append(f"- {lit(a['name'])}{extra}: {esc(a['dtypes'])}{doc}")
        lines.append("")
    if rec["attrs"]:
        lines += ["**Attributes**", "",
                  ".. list-table::", "   :header-rows: 1", "",
                  "   * - Python name (schema name)", "     - type", "     - default",
                  "     - meaning"]
        for a in rec["attrs"]:
            py = dragon_core._opgen.py_attr_name(name, a["name"])
            shown = lit(py) if py == a["name"] else f"{lit(py)} ({lit(a['name'])})"
            lines += [f"   * - {shown}",
                      f"     - {ATTR_TYPES.get(a['type'], 'type ' + str(a['type']))}",
                      f"     - {_default(a)}",
                      f"     - {esc(a.get('doc') or '')}"]
        lines.append("")
    flags = _flags(rec)
    if dragon_core._opgen.is_tensor_method(rec):
        flags = [*flags, f"Tensor method ``x.{rec['py_name']}(...)``"]
    if flags:
        lines += [f"**Flags**: {', '.join(flags)}.", ""]
    rows = kernel_rows(name)
    lines += ["**Kernels**", ""]
    if rows:
        lines += [".. list-table::", "   :header-rows: 1", "",
                  "   * - device", "     - plugin (wheel)", "     - priority", "     - dtypes"]
        for device, plugin, dist, priority, dtypes in rows:
            wheel = f" ({esc(dist)})" if dist else ""
            lines += [f"   * - {lit(device)}", f"     - {lit(plugin)}{wheel}",
                      f"     - {priority}", f"     - {', '.join(dtypes)}"]
    else:
        lines.append("No installed plugin provides a kernel for this op.")
    lines.append("")
    return lines


def reference_lines() -> list[str]:
    """The reStructuredText of the whole reference, grouped by defining plugin."""
    recs = op_records()
    by_plugin: dict[str, list[dict]] = defaultdict(list)
    for r in recs:
        by_plugin[r["plugin"]].append(r)
    devices = ", ".join(f"{lit(d['name'])} (from {lit(d['plugin'])})"
                        for d in dragon_core.plugins.devices())
    loaded = ", ".join(f"{lit(p.name)} {esc(p.version)}" for p in dragon_core.plugins.list()
                       if p.state == "loaded")
    lines = [f"{len(recs)} ops, generated from the schema registry of dragon-core "
             f"{esc(dragon_core.__version__)} (plugin API {esc(plugin_api.API_VERSION)}) "
             f"with the plugins {loaded or 'none'} loaded; devices: {devices or 'none'}.", ""]
    lines += ["Summary", "-------", "",
              ".. list-table::", "   :header-rows: 1", "",
              "   * - op", "     - Python", "     - defined by", "     - kernels (device: plugins)"]
    for r in recs:
        serving: dict[str, list[str]] = defaultdict(list)
        for device, plugin, _dist, _prio, _dtypes in kernel_rows(r["name"]):
            if plugin not in serving[device]:
                serving[device].append(plugin)
        kernels = "; ".join(f"{d}: {', '.join(ps)}" for d, ps in serving.items()) or "none"
        lines += [f"   * - :ref:`{r['name']} <op-{r['name'].lower()}>`",
                  f"     - {lit(r['py_name'])}", f"     - {lit(r['plugin'])}",
                  f"     - {esc(kernels)}"]
    lines.append("")
    order = sorted(by_plugin, key=lambda p: (p != "core", p))
    for plugin in order:
        title = "Ops defined by the core" if plugin == "core" else f"Ops defined by {plugin}"
        lines += [title, "-" * len(title), ""]
        for r in by_plugin[plugin]:
            lines += op_lines(r)
    return lines


class OpReference(SphinxDirective):
    """``.. dragon-op-reference::`` -- see the module docstring."""

    has_content = False

    def run(self):
        # Generated from the installed packages, which Sphinx does not watch:
        # read this page again on every build.
        self.env.note_reread()
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(reference_lines(), "<op-reference>"),
                                 node)
        return node.children


def setup(app):
    app.add_directive("dragon-op-reference", OpReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
