"""Workspace: the owner of named tensors, compiled graphs and their plans.

A workspace is the unit of isolation and of release. Everything a program
names or compiles lands in the workspace that is current when it is made:

- **named tensors** (``feed_tensor`` / ``fetch_tensor``): values a program
  shares by name, as a graph's feeds and fetches;
- **compiled graphs**: every ``dragon_core.function`` keeps one cache of
  traced signatures per workspace (the GraphDef, the executor's plan with its
  planned buffers, the constants); the workspace holds those caches, so
  leaving or clearing it drops them, and the same function traced in two
  workspaces owns two independent plans;
- **loaded graphs** (``dragon_core.load_graph``), registered under the name
  they were saved with.

``with Workspace() as ws:`` makes ``ws`` current on this thread until the
block ends (blocks nest). A thread outside any block uses the process's
default workspace, shared by all threads, so a function traced on one thread
is reused by another, as it was before workspaces owned plans.
``ws.clear()`` frees what the workspace owns; :meth:`Workspace.memory_stats`
says how much that is.
"""

from __future__ import annotations

import threading
import weakref



class _Local(threading.local):
    # Class-level defaults: reading them on a thread that never set them
    # raises no AttributeError internally (get_workspace() is on every
    # compiled function's call path: ~0.05 us instead of ~2 us).
    current = None
    stack = None


_local = _Local()


class _PlanCache:
    """One function's compiled signatures inside one workspace.

    ``cache`` maps a full signature key to its entry, ``fast`` a
    tensor-only signature to the same entries, ``mode_key`` is the Python
    state (eval modules) ``fast`` was filled under.
    """

    __slots__ = ("ws", "name", "cache", "fast", "mode_key", "__weakref__")

    def __init__(self, ws: "Workspace", name: str, mode_key):
        self.ws = ws
        self.name = name
        self.cache: dict = {}
        self.fast: dict = {}
        self.mode_key = mode_key


class Workspace:
    """A namespace that owns named tensors and compiled graphs.

    Parameters
    ----------
    name : str, optional
        A label for messages and ``repr``.

    Notes
    -----
    The default workspace (:func:`get_workspace` outside any ``with``
    block) is shared by every thread; ``with Workspace():`` is per thread
    and nests. A tensor, plan or graph made in a workspace stays alive until
    :meth:`clear` or until the workspace itself is dropped.

    Examples
    --------
    >>> import dragon_core as dg
    >>> with dg.Workspace() as ws:
    ...     ws.feed_tensor("x", dg.tensor([1.0, 2.0]))
    ...     ws.has_tensor("x")
    True
    """

    def __init__(self, name: str = ""):
        self.name = name
        self._tensors: dict = {}
        # Function -> its _PlanCache here; weak, so a function that dies
        # takes its plans with it.
        self._plans: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._loaded: dict = {}  # name -> LoadedGraph
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return (f"Workspace({self.name!r}: {len(self._tensors)} tensors, "
                f"{len(self.graph_names())} graphs)")

    # ------------------------------------------------------------ tensors

    def feed_tensor(self, name: str, value) -> None:
        """Store ``value`` (converted to a tensor) under ``name``.

        Parameters
        ----------
        name : str
        value : Tensor or array_like
            A Tensor is stored as is (no copy); anything else goes through
            ``dragon_core.tensor``.
        """
        from ._tensor import Tensor, tensor
        if not isinstance(name, str) or not name:
            raise TypeError(f"Workspace.feed_tensor: the name must be a non-empty str, "
                            f"got {name!r}")
        with self._lock:
            self._tensors[name] = value if isinstance(value, Tensor) else tensor(value)

    def fetch_tensor(self, name: str):
        """The tensor stored under ``name``.

        Raises
        ------
        KeyError
            If no tensor has that name (the message lists the names).
        """
        try:
            return self._tensors[name]
        except KeyError:
            names = ", ".join(sorted(self._tensors)) or "(none)"
            raise KeyError(f"workspace {self.name!r} has no tensor '{name}'; it has: {names}") \
                from None

    def has_tensor(self, name: str) -> bool:
        """Whether a tensor named ``name`` exists."""
        return name in self._tensors

    def tensor_names(self) -> list[str]:
        """The names of the stored tensors, sorted."""
        return sorted(self._tensors)

    def release_tensor(self, name: str) -> None:
        """Forget the tensor ``name`` (its memory is freed when nothing
        else holds it); KeyError if there is none."""
        with self._lock:
            if name not in self._tensors:
                self.fetch_tensor(name)  # raises with the list of names
            del self._tensors[name]

    # ------------------------------------------------------------- graphs

    def _plan_cache(self, fn, mode_key) -> _PlanCache:
        """The plan cache of ``fn`` (a ``Function``) here, made on first use."""
        with self._lock:
            pc = self._plans.get(fn)
            if pc is None:
                pc = self._plans[fn] = _PlanCache(self, fn.name, mode_key)
            return pc

    def _register_loaded(self, graph) -> None:
        with self._lock:
            self._loaded[graph.graph.name] = graph

    def graph_names(self) -> list[str]:
        """Names of the graphs this workspace holds: functions with at least
        one compiled signature here, and loaded graphs; sorted."""
        with self._lock:
            names = {pc.name for pc in self._plans.values() if pc.cache}
            names.update(self._loaded)
        return sorted(names)

    def get_graph(self, name: str):
        """The GraphDefs this workspace holds under ``name``: one per compiled
        signature of a function of that name, or the loaded graph's.

        Raises
        ------
        KeyError
            If nothing here has that name (the message lists the names).
        """
        with self._lock:
            graphs = [e.compiled.graph for pc in self._plans.values() if pc.name == name
                      for e in _entries(pc)]
            if name in self._loaded:
                graphs.append(self._loaded[name].graph)
        if not graphs:
            names = ", ".join(self.graph_names()) or "(none)"
            raise KeyError(f"workspace {self.name!r} has no graph '{name}'; it has: {names}")
        return graphs

    # ------------------------------------------------------------- memory

    def memory_stats(self) -> dict:
        """What this workspace holds, and how many bytes.

        Returns
        -------
        dict
            ``tensors`` (named tensors) and ``tensor_bytes`` (their bytes);
            ``graphs`` (graph names), ``plans`` (compiled signatures, loaded
            graphs included), ``planned_bytes`` (static buffers of their
            memory plans) and ``constant_bytes`` (the constants they feed).
            Bytes are counted once per storage, as the tensors report them;
            the device allocator's own view is ``dragon_core.memory.stats``.
        """
        with self._lock:
            tensors = list(self._tensors.values())
            entries = [e for pc in self._plans.values() for e in _entries(pc)]
            loaded = list(self._loaded.values())
        seen: set = set()

        def nbytes(ts):
            total = 0
            for t in ts:
                if t is None or id(t) in seen:
                    continue
                seen.add(id(t))
                total += t.nbytes
            return total
        planned = sum(e.compiled.plan.planned_bytes for e in entries)
        planned += sum(g._compiled.plan.planned_bytes for g in loaded)
        consts = nbytes([c for e in entries for c in e.constants])
        consts += nbytes([c for g in loaded for c in g._constants])
        return {"tensors": len(tensors), "tensor_bytes": nbytes(tensors),
                "graphs": len(self.graph_names()), "plans": len(entries) + len(loaded),
                "planned_bytes": int(planned), "constant_bytes": int(consts)}

    def clear(self) -> None:
        """Free what this workspace owns: named tensors, every function's
        compiled plans here (a later call traces again) and loaded graphs.
        Memory returns to the allocator once nothing else holds it."""
        with self._lock:
            caches = list(self._plans.values())
            self._plans = weakref.WeakKeyDictionary()
            self._tensors.clear()
            self._loaded.clear()
        for pc in caches:
            pc.cache.clear()
            pc.fast.clear()
            pc.ws = None  # a function still pointing at it makes a new one

    # ------------------------------------------------------------ context

    def __enter__(self) -> "Workspace":
        stack = _stack()
        stack.append(self)
        _local.current = self
        return self

    def __exit__(self, *exc) -> None:
        stack = _stack()
        if not stack or stack[-1] is not self:
            raise RuntimeError(f"workspace {self.name!r}: `with` blocks must end in the "
                               "order they began (on the thread that began them)")
        stack.pop()
        _local.current = stack[-1] if stack else None

    def as_default(self) -> "Workspace":
        """``self``, for ``with ws.as_default():`` (the TensorFlow habit)."""
        return self


def _entries(pc: _PlanCache) -> list:
    out = []
    for e in pc.cache.values():
        out.append(e)
        out.extend(e.alternatives)
    return out


def _stack() -> list:
    s = _local.stack
    if s is None:
        s = _local.stack = []
    return s


_default = Workspace("default")


def get_workspace() -> Workspace:
    """The current workspace of this thread: the innermost ``with
    Workspace()`` block's, else the process's default workspace."""
    return _local.current or _default


def default_workspace() -> Workspace:
    """The process's default workspace (shared by every thread)."""
    return _default
