"""Graph passes: pure GraphDef -> GraphDef functions, one per file.

See docs/graph.md for the GraphDef conventions every pass keeps. A pass can
be switched off by name, whatever the level: ``DRAGON_DISABLE_PASSES=a,b``
in the environment (read each time a graph is optimised) or
``graph.metadata["disable_passes"] = "a,b"`` for one graph.
"""

from __future__ import annotations

import importlib
import os

_PASSES: list = []   # (order, name, level, fn)
_ORDER = ["prune", "cse", "constant_fold", "pattern_fusion", "inplace", "fusion", "memory"]


def register_pass(name: str, level: int):
    """Register ``fn(graph) -> graph`` to run at optimisation level >= ``level``."""
    def deco(fn):
        order = _ORDER.index(name) if name in _ORDER else len(_ORDER)
        _PASSES.append((order, name, level, fn))
        _PASSES.sort(key=lambda p: (p[0], p[1]))
        return fn
    return deco


def kernel_dtypes(op_type: str, device_type: str) -> set:
    """The dtype names with a kernel for ``op_type`` on ``device_type`` (a
    device type such as ``"cpu"``, no index), per ``_C.kernels``; empty when
    the op is not registered."""
    from dragon_core import _C
    try:
        kernels = _C.kernels(op_type)
    except LookupError:
        return set()
    out = set()
    for k in kernels:
        if k["device"] == device_type:
            out.update(d.strip() for d in k["dtypes"].split(","))
    return out


def device_type(graph) -> str:
    """The device type a graph runs on: ``metadata["device"]`` without its
    index (``"cpu:0"`` -> ``"cpu"``); the host (``"cpu"``) when absent."""
    return (graph.metadata.get("device", "") or "cpu").partition(":")[0]


def passes_for(level: int) -> list:
    """(name, fn) of the passes that run at ``level``, in order."""
    _load_all()
    return [(name, fn) for _, name, lv, fn in _PASSES if lv <= level]


_loaded = False


def _load_all():
    global _loaded
    if _loaded:
        return
    _loaded = True
    for name in _ORDER:
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise


def disabled_passes(graph) -> set:
    """The pass names switched off for ``graph`` (environment and metadata).

    Raises
    ------
    ValueError
        If a name is not a registered pass (a typo would silently keep it on).
    """
    names = set()
    for spec in (os.environ.get("DRAGON_DISABLE_PASSES", ""),
                 graph.metadata.get("disable_passes", "")):
        names.update(n.strip() for n in spec.split(",") if n.strip())
    _load_all()
    known = {p[1] for p in _PASSES}
    unknown = names - known
    if unknown:
        raise ValueError(f"DRAGON_DISABLE_PASSES / metadata['disable_passes'] name unknown "
                         f"pass(es) {sorted(unknown)}; the passes are {sorted(known)}")
    return names


def run_passes(graph, level: int):
    """Run every pass of ``level`` on ``graph``, except the disabled ones
    (:func:`disabled_passes`); returns the new graph."""
    names = []
    off = disabled_passes(graph)
    for name, fn in passes_for(level):
        if name in off:
            continue
        graph = fn(graph)
        names.append(name)
    graph.metadata["opt_level"] = str(level)
    graph.metadata["passes"] = ",".join(names)
    return graph
