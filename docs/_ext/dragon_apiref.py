"""Sphinx extension: ``.. dragon-api:: module`` documents a public module.

It lists the module's public names (its ``__all__``, or else every public
name bound in it that is not a submodule, not a typing helper and not a
re-export of another documented module) and emits the autodoc directive for
each, so a name added to a module appears in the reference without an edit
here. The set of documented modules is :data:`MODULES`.
"""

from __future__ import annotations

import importlib
import inspect
import types

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles

# The public modules of the reference, in page order, with their titles.
MODULES = {
    "dragon_core": "dragon_core: tensors, dtypes, devices, autograd, graph mode",
    "dragon_core.ops": "dragon_core.ops: the op functions",
    "dragon_core.nn": "dragon_core.nn: layers",
    "dragon_core.nn.functional": "dragon_core.nn.functional",
    "dragon_core.nn.init": "dragon_core.nn.init",
    "dragon_core.optim": "dragon_core.optim: optimizers and gradient clipping",
    "dragon_core.optim.lr_scheduler": "dragon_core.optim.lr_scheduler",
    "dragon_core.data": "dragon_core.data: datasets, loaders, records",
    "dragon_core.memory": "dragon_core.memory: allocator statistics",
    "dragon_core.serialization": "dragon_core.serialization: checkpoints",
    "dragon_core.summary": "dragon_core.summary: TensorBoard summaries",
    "dragon_core.plugins": "dragon_core.plugins: discovery, kernel selection",
    "dragon_core.plugin_api": "dragon_core.plugin_api: the versioned API for plugins",
    "dragon_core.fusion": "dragon_core.fusion: graph fusion patterns",
    "dragon_core.custom_op": "dragon_core.custom_op: ops written in Python",
    "dragon_core.errors": "dragon_core.errors: exception classes",
}


def _is_public_module(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _owner(modname: str) -> str | None:
    """The documented module that owns objects defined in ``modname``."""
    if not modname or not _is_public_module(modname):
        return None
    best = None
    for m in MODULES:
        if modname == m or modname.startswith(m + "."):
            if best is None or len(m) > len(best):
                best = m
    return best


def _is_dtype(obj) -> bool:
    import dragon_core
    return isinstance(obj, dragon_core.dtype)


def public_names(modname: str) -> list[str]:
    """The names :func:`api_lines` documents for ``modname``."""
    mod = importlib.import_module(modname)
    explicit = getattr(mod, "__all__", None)
    names = list(explicit) if explicit is not None else sorted(vars(mod))
    out = []
    for name in names:
        if name.startswith("_") and explicit is None:
            continue
        obj = getattr(mod, name)
        if isinstance(obj, types.ModuleType):
            continue
        if explicit is None:
            defined_in = getattr(obj, "__module__", None) if (
                inspect.isclass(obj) or callable(obj)) else None
            if defined_in is None:
                # A constant: document module-level UPPER_CASE ones only.
                if not (name.isupper() and isinstance(obj, (int, float, str, tuple,
                                                            frozenset, bytes))):
                    if not _is_dtype(obj):
                        continue
            elif not defined_in.startswith("dragon_core"):
                continue  # typing helpers, pluggy markers, ...
            elif _owner(defined_in) not in (None, modname):
                continue  # a re-export documented on its own module's page
            elif (modname not in ("dragon_core", "dragon_core.plugin_api")
                  and getattr(importlib.import_module("dragon_core"), name, None) is obj):
                continue  # a top-level name (Tensor, no_grad) imported for use here
        out.append(name)
    return out


def api_lines(modname: str) -> list[str]:
    mod = importlib.import_module(modname)
    lines = [f".. automodule:: {modname}", "   :no-members:", ""]
    for name in public_names(modname):
        obj = getattr(mod, name)
        full = f"{modname}.{name}"
        # plugin_api re-exports a few top-level names (GraphPass): index them once.
        noindex = (["   :no-index:"] if modname != "dragon_core"
                   and getattr(importlib.import_module("dragon_core"), name, None) is obj
                   else [])
        if inspect.isclass(obj):
            opts = ["   :members:"]
            if issubclass(obj, BaseException):
                opts = ["   :show-inheritance:"]
            lines += [f".. autoclass:: {full}", *opts, *noindex, ""]
        elif callable(obj) and not hasattr(obj, "name") or inspect.isfunction(obj):
            lines += [f".. autofunction:: {full}", *noindex, ""]
        else:
            lines += [f".. autodata:: {full}", "   :annotation:", *noindex, ""]
    return lines


class ModuleReference(SphinxDirective):
    """``.. dragon-api:: dragon_core.nn`` -- see the module docstring."""

    required_arguments = 1
    has_content = False

    def run(self):
        # Generated from the installed packages, which Sphinx does not watch:
        # read this page again on every build.
        self.env.note_reread()
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, StringList(api_lines(self.arguments[0]),
                                                        "<api-reference>"), node)
        return node.children


def setup(app):
    app.add_directive("dragon-api", ModuleReference)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
