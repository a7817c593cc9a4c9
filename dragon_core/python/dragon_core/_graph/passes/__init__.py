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
_OWNERS: dict = {}   # plugin pass name -> (plugin object, plugin name)
_ORDER = ["prune", "cse", "cast_hoist", "cast_fold", "matmul_transpose", "gelu_fusion", "linear_epilogue",
          "sum_cast",
          "constant_fold", "loss_fusion",
          "relu_mask",
          "pattern_fusion", "attention_fusion", "inplace", "fusion", "ddp_buckets", "state_inplace", "memory"]


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


def is_view_op(op_type: str, cache: dict) -> bool:
    """Whether ``op_type``'s schema has the view flag (``describe()["view"]``: its
    output may alias input 0's storage); False for unknown ops."""
    if op_type not in cache:
        from dragon_core import _C
        try:
            cache[op_type] = bool(_C.op(op_type).describe().get("view", False))
        except Exception:  # noqa: BLE001 - an op this process cannot resolve
            cache[op_type] = False
    return cache[op_type]


def view_roots(graph) -> dict:
    """``{tensor: root}`` for every output of a view op (Reshape, Squeeze,
    Unsqueeze, Flatten, ...), following chains of views: ``root`` is the
    tensor whose storage it may share at run time (the executor aliases a
    contiguous input, so the passes assume it always does)."""
    cache: dict = {}
    roots: dict = {}
    for op in graph.op:
        if op.input and len(op.output) == 1 and is_view_op(op.type, cache):
            src = op.input[0]
            roots[op.output[0]] = roots.get(src, src)
    return roots


def value_index(graph) -> tuple:
    """``(pinned, producer, readers)`` of ``graph``: the values a pass may
    not remove or rename (graph outputs, state updates and targets), the
    index of the op writing each value, and how many op inputs read each."""
    pinned = set(graph.output) | set(graph.state_update) | set(graph.state_target)
    producer, readers = {}, {}
    for k, op in enumerate(graph.op):
        for name in op.output:
            producer[name] = k
        for name in op.input:
            readers[name] = readers.get(name, 0) + 1
    return pinned, producer, readers


def device_type(graph) -> str:
    """The device type a graph runs on: ``metadata["device"]`` without its
    index (``"cpu:0"`` -> ``"cpu"``); the host (``"cpu"``) when absent."""
    return (graph.metadata.get("device", "") or "cpu").partition(":")[0]


def device_types(graph) -> list:
    """Every device type a graph's fed tensors live on
    (``metadata["devices"]``, written when the graph is built from a trace)
    and :func:`device_type`'s. A pass that inserts an op whose kernels
    exist on some devices only must find one on each of these: a compiled
    step without arguments over captured cuda parameters has no
    ``metadata["device"]``, which :func:`device_type` reads as the host."""
    kinds = [k for k in graph.metadata.get("devices", "").split(",") if k]
    first = device_type(graph)
    return kinds + [first] if first not in kinds else kinds


class GraphPass:
    """A graph pass a plugin adds (the ``dragon_graph_passes`` hook).

    Parameters
    ----------
    name : str
        Unique among all passes; ``DRAGON_DISABLE_PASSES`` and
        ``disable_passes=`` take it.
    fn : callable
        ``fn(graph) -> graph``, a pure GraphDef -> GraphDef function that
        keeps the conventions of docs/graph.md (``value_info`` for every
        tensor it adds). It must leave a graph it does not apply to as it is.
    after : str
        The built-in pass it runs right after (one of ``prune``, ``cse``,
        ``constant_fold``, ``pattern_fusion``, ``inplace``, ``fusion``,
        ``memory``).
    level : int, default 3
        The lowest optimisation level it runs at.
    """

    def __init__(self, name: str, fn, after: str, level: int = 3):
        if after not in _ORDER:
            raise ValueError(f"GraphPass '{name}': after={after!r} is not a built-in pass "
                             f"({', '.join(_ORDER)})")
        if not 0 <= level <= 3:
            raise ValueError(f"GraphPass '{name}': level must be 0..3, got {level}")
        self.name, self.fn, self.after, self.level = name, fn, after, level

    def __repr__(self):
        return f"GraphPass({self.name!r}, after={self.after!r}, level={self.level})"


def plugin_passes() -> list:
    """The passes plugins declare (``dragon_graph_passes``), by name.

    A plugin whose hook raises, declares something that is not a GraphPass,
    or reuses the name of another pass is marked broken (its error and
    traceback in ``dragon_core.plugins.list()``, one PluginWarning) and
    left out with all its passes and patterns: graph mode goes on without it.

    Raises
    ------
    dragon_core.errors.PluginError
        Only under ``DRAGON_STRICT=1``, for such a plugin.
    """
    from dragon_core import plugins
    taken = {p[1]: "a built-in pass" for p in _PASSES}
    found: dict = {}
    for name, plugin, declared in plugins._hook_results("dragon_graph_passes"):
        problem = ""
        for gp in declared:
            if not isinstance(gp, GraphPass):
                problem = f"returned {gp!r}, which is not a dragon_core.GraphPass"
            elif gp.name in taken or sum(g.name == gp.name for g in declared) > 1:
                problem = (f"declared graph pass '{gp.name}', which reuses the name of "
                           f"{taken.get(gp.name, 'another of its passes')}")
            if problem:
                break
        if problem:
            plugins._hook_failed(plugin, name, "dragon_graph_passes", message=problem)
            continue
        for gp in declared:
            taken[gp.name] = f"the pass of plugin '{name}'"
            found[gp.name] = gp
            _OWNERS[gp.name] = (plugin, name)
    return sorted(found.values(), key=lambda gp: gp.name)


def passes_for(level: int, plugin: list | None = None) -> list:
    """(name, fn) of the passes that run at ``level``, in order: the
    built-in ones, each followed by the plugin passes declared after it
    (by name). ``plugin`` is :func:`plugin_passes` when already known."""
    _load_all()
    plugin = plugin_passes() if plugin is None else plugin
    extra = [gp for gp in plugin if gp.level <= level]
    out = []
    for _, name, lv, fn in _PASSES:
        if lv <= level:
            out.append((name, fn))
        out.extend((gp.name, gp.fn) for gp in extra if gp.after == name)
    return out


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


_warned_env: set = set()


def disabled_passes(graph, plugin: list | None = None) -> set:
    """The pass names switched off for ``graph`` (environment and metadata).

    An unknown name in ``graph.metadata["disable_passes"]`` (what
    ``dg.function(disable_passes=...)`` writes) is an error: a typo would
    silently keep the pass on. An unknown name in ``DRAGON_DISABLE_PASSES``
    only warns (once per name): the variable is set machine-wide and may name
    the pass of a plugin this environment does not have (``nchw16c`` of
    mkldnn, say).

    Raises
    ------
    ValueError
        If the metadata names a pass that is not registered.
    """
    _load_all()
    plugin = plugin_passes() if plugin is None else plugin
    known = {p[1] for p in _PASSES} | {gp.name for gp in plugin}

    def split(spec):
        return {n.strip() for n in spec.split(",") if n.strip()}
    env = split(os.environ.get("DRAGON_DISABLE_PASSES", ""))
    meta = split(graph.metadata.get("disable_passes", ""))
    unknown = meta - known
    if unknown:
        raise ValueError(f"disable_passes / metadata['disable_passes'] name unknown "
                         f"pass(es) {sorted(unknown)}; the passes are {sorted(known)}")
    new = env - known - _warned_env
    if new:
        import warnings
        _warned_env.update(new)
        warnings.warn(f"DRAGON_DISABLE_PASSES names pass(es) {sorted(new)} that no loaded "
                      f"code registers (a typo, or a plugin not installed here); the passes "
                      f"are {sorted(known)}", UserWarning, stacklevel=2)
    return (env | meta) & known


def run_passes(graph, level: int):
    """Run every pass of ``level`` on ``graph``, except the disabled ones
    (:func:`disabled_passes`); returns the new graph."""
    from dragon_core import fusion
    names = []
    # Every plugin hook is consulted before any pass runs, so that a plugin
    # whose hook fails (and is marked broken) is left out of this graph as a
    # whole, its passes and its patterns alike.
    fusion.patterns()
    plugin = plugin_passes()          # one hook call per graph
    off = disabled_passes(graph, plugin)
    mine = {gp.name for gp in plugin}
    for name, fn in passes_for(level, plugin):
        if name in off:
            continue
        if name in mine:
            new = _run_plugin_pass(name, fn, graph)
            if new is None:
                continue      # it failed: its plugin is now broken
            graph = new
        else:
            graph = fn(graph)
        names.append(name)
    graph.metadata["opt_level"] = str(level)
    graph.metadata["passes"] = ",".join(names)
    return graph


def _run_plugin_pass(name: str, fn, graph):
    """A plugin's pass on a copy of ``graph``: its result, or None when it
    raised or returned no GraphDef -- then its plugin is marked broken (as
    for a failing hook) and the graph goes on as it was, never the core
    failing every compiled function for one plugin's bug."""
    from dragon_core import plugins
    from dragon_core import proto as P
    owner = _OWNERS.get(name)
    if owner is not None and plugins._is_broken(owner[0]):
        return None               # broken by an earlier pass of this graph
    before = P.GraphDef()
    before.CopyFrom(graph)        # a pass that fails half-way may have edited it
    try:
        new = fn(before)
        if not isinstance(new, P.GraphDef):
            raise TypeError(f"it returned {type(new).__name__}, not a GraphDef")
        return new
    except Exception as e:  # noqa: BLE001 - a bug in the declaring plugin
        if owner is None:
            raise
        plugins._hook_failed(owner[0], owner[1], f"graph pass '{name}'", exc=e)
        return None
