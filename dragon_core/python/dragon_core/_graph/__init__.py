"""Graph mode: tracing, IR, passes, compilation (see docs/graph.md)."""

from .function import Function, function, is_tracing  # noqa: F401
from .io import load_graph, save_graph  # noqa: F401
from .control import cond, while_loop  # noqa: F401
