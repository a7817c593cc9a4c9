"""Saving and loading graphs (GraphDef files)."""

from __future__ import annotations

import os

from .. import _C
from .. import proto as P
from .._fileio import atomic_write_bytes as _atomic_write
from ..errors import PluginError
from .build import constant_feed, fill_borrowed, tensor_to_proto
from .compile import compile_graph
from .._workspace import get_workspace


def freeze(graph, captured_values) -> P.GraphDef:
    """A copy of ``graph`` whose captured tensors are constants holding
    ``captured_values`` (state updates are dropped): a pure function of its
    inputs, ready to save."""
    g = P.GraphDef()
    g.CopyFrom(graph)
    for nm, t in zip(graph.captured, captured_values):
        g.constant.append(tensor_to_proto(nm, t))
    del g.captured[:]
    del g.state_target[:]
    del g.state_update[:]
    return g


def save_graph(obj, path, *args, **kwargs) -> None:
    """Save a graph to ``path`` (written atomically).

    Parameters
    ----------
    obj : GraphDef or Function
        A GraphDef, or a ``@function`` together with example arguments
        (``save_graph(f, "f.pb", x)``): its graph for those arguments is
        saved with the current values of the tensors it captured.
    path : str or os.PathLike
    """
    from .function import Function
    if isinstance(obj, Function):
        entry, _ = obj._entry(*args, **kwargs)
        graph = fill_borrowed(entry.compiled.graph,
                              {c.name: t for c, t in zip(entry.compiled.graph.constant,
                                                         entry.constants)})
        graph = freeze(graph, entry.captured)
    elif isinstance(obj, P.GraphDef):
        graph = obj
    else:
        raise TypeError(f"save_graph expects a GraphDef or a dragon_core.function, "
                        f"got {type(obj).__name__}")
    _atomic_write(path, graph.SerializeToString())


class LoadedGraph:
    """A saved graph, callable with its inputs (tensors)."""

    def __init__(self, graph: P.GraphDef, opt_level: int = 1):
        self.graph = graph
        self._compiled = compile_graph(graph, opt_level)
        self._constants = [constant_feed(c) for c in graph.constant]
        if graph.captured:
            raise ValueError("this graph captures variables; save it with save_graph(...) "
                             "so their values are stored")

    def __call__(self, *inputs):
        if len(inputs) != len(self.graph.input):
            raise TypeError(f"graph '{self.graph.name}' takes {len(self.graph.input)} inputs, "
                            f"got {len(inputs)}")
        outs = self._compiled.run(list(inputs) + self._constants)
        return outs[0] if len(outs) == 1 else tuple(outs)


def check_providers(graph: P.GraphDef) -> None:
    """Raise PluginError naming the wheels to install when op types of the
    graph are not defined here."""
    missing = {}
    for op in graph.op:
        try:
            _C.op(op.type)
        except LookupError:
            missing.setdefault(op.type, op)
        except PluginError:
            raise
    if missing:
        lines = []
        for t, op in sorted(missing.items()):
            who = op.plugin_dist or op.plugin or "an unknown plugin"
            ver = f" (saved with version {op.plugin_version})" if op.plugin_version else ""
            fix = f"pip install {op.plugin_dist}" if op.plugin_dist else \
                f"install the plugin '{op.plugin}'"
            lines.append(f"  {t}: provided by {who}{ver}; fix: {fix}")
        raise PluginError(f"graph '{graph.name}' uses op(s) this installation does not define:\n"
                          + "\n".join(lines))


def load_graph(path, opt_level: int = 1) -> LoadedGraph:
    """Load a graph saved by :func:`save_graph`.

    The graph keeps the name it was saved with and is registered under it in
    the current workspace (``get_workspace().get_graph(name)``), which owns
    it until cleared.

    Raises
    ------
    PluginError
        If an op of the graph comes from a plugin that is not installed
        (the message says what to ``pip install``).
    ValueError
        If the file is not a valid graph.
    """
    with open(os.fspath(path), "rb") as f:
        data = f.read()
    graph = P.GraphDef()
    try:
        graph.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise ValueError(f"{path} is not a valid Dragon graph: {e}") from None
    check_providers(graph)
    loaded = LoadedGraph(graph, opt_level)
    get_workspace()._register_loaded(loaded)
    return loaded
