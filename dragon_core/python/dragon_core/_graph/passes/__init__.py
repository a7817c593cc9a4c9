"""Graph passes: pure GraphDef -> GraphDef functions, one per file.

See docs/graph.md for the GraphDef conventions every pass keeps.
"""

from __future__ import annotations

import importlib

_PASSES: list = []   # (order, name, level, fn)
_ORDER = ["prune", "cse", "constant_fold", "inplace", "fusion", "memory"]


def register_pass(name: str, level: int):
    """Register ``fn(graph) -> graph`` to run at optimisation level >= ``level``."""
    def deco(fn):
        order = _ORDER.index(name) if name in _ORDER else len(_ORDER)
        _PASSES.append((order, name, level, fn))
        _PASSES.sort(key=lambda p: (p[0], p[1]))
        return fn
    return deco


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


def run_passes(graph, level: int):
    """Run every pass of ``level`` on ``graph``; returns the new graph."""
    names = []
    for name, fn in passes_for(level):
        graph = fn(graph)
        names.append(name)
    graph.metadata["opt_level"] = str(level)
    graph.metadata["passes"] = ",".join(names)
    return graph
