"""``@dragon_core.function``: trace a Python function into a graph and run it
with the C++ executor.

The first call with a new input signature (shapes, dtypes, devices of the
tensor arguments, values of the other arguments) runs the function eagerly
while recording every op; the record becomes a GraphDef, the passes of the
optimisation level rewrite it, and the compiled plan is cached. Later calls
with the same signature run the plan: no Python per op.

What a trace sees is what the graph does: Python control flow is unrolled
for the traced values, values read back into Python (``.item()``,
``.numpy()``) are frozen into the graph, and tensors created inside the
function become constants. Use ``dragon_core.cond`` / ``while_loop`` for
data-dependent control flow. Tensors from outside the function (parameters)
are captured: every run reads their current value, and ``x.assign(value)``
inside the function updates them after the run. ``.grad`` of leaves is
state the same way (``loss.backward()`` and optimizer steps compile; see
``Function._grad_reads``). Runs that assign a variable
serialize with every other run touching it (see ``state.py`` and
docs/graph.md, "Threads").
"""

from __future__ import annotations

import functools
import os
import pickle
import struct
import threading
import time
import weakref

import numpy as np

from .. import _C
from .. import _autograd
from ..errors import InvalidArgumentError
from .._tensor import Tensor
from .build import Trace, borrowed_constants, build_graph, constant_feed, fill_borrowed
from .compile import compile_graph
from .passes import run_passes, view_roots
from .state import StateGuard
from .._workspace import get_workspace

_local = threading.local()
# ``Tensor.grad``'s setter without its checks (a compiled run checks the
# values it sets all at once, see Function._run).
_set_grad = Tensor._raw_grad.__set__

# Runs with one input signature before the next is recorded as a graph
# (allocator, cuBLAS handles and call-site state are warm by then).
_GRAPH_WARMUP = 2

# Python state that changes what a trace records without being an argument:
# today, which modules are in eval mode (dropout, batch statistics). It joins
# every plan's cache key; the object is replaced only when the value changes,
# so the per-signature fast path re-checks it with one identity test.
_mode = {"key": frozenset()}


def set_mode_key(key) -> None:
    """Record the current value of the Python state plans depend on."""
    if key != _mode["key"]:
        _mode["key"] = key


def _traces() -> list:
    stack = getattr(_local, "traces", None)
    if stack is None:
        stack = _local.traces = []
    return stack


def is_tracing() -> bool:
    """Whether a function is being traced on this thread."""
    return bool(_traces())


def _trace_hook(op, inputs, attrs, outputs):
    trace = _traces()[-1] if _traces() else None
    if trace is not None:
        trace.add(op, inputs, attrs, outputs)


_C._set_trace_hook(_trace_hook)


def note_created(t: Tensor) -> None:
    """Mark ``t`` as made inside the current trace (it becomes a constant)."""
    stack = _traces()
    if stack:
        stack[-1].created[t._id] = t


# Tensors made from host data inside a trace by any code path (a front end's
# creation functions call the core directly) are constants of the trace.
_C._set_created_hook(note_created)


def note_alias(source: Tensor, alias: Tensor) -> None:
    """Record that ``alias`` (e.g. ``source.detach()``) is the same value."""
    stack = _traces()
    if stack:
        stack[-1].add_alias(source, alias)


def note_assign(var: Tensor, value: Tensor) -> None:
    stack = _traces()
    if stack:
        stack[-1].add_assign(var, value)


def note_grad_access(leaf: Tensor, reads: bool) -> None:
    """``leaf.grad`` is touched inside the function being traced."""
    stack = _traces()
    if stack:
        stack[0].touch_grad(leaf, reads)


_autograd.set_grad_trace_hooks(note_grad_access, note_alias)


# ------------------------------------------------------------- pytrees

def _flatten(obj, leaves: list):
    """Structure of ``obj`` with tensors replaced by their leaf index."""
    if isinstance(obj, Tensor):
        leaves.append(obj)
        return ("T", len(leaves) - 1)
    if isinstance(obj, (list, tuple)):
        return (type(obj).__name__, [_flatten(o, leaves) for o in obj])
    if isinstance(obj, dict):
        return ("dict", [(k, _flatten(v, leaves)) for k, v in obj.items()])
    return ("const", obj)


def _unflatten(spec, leaves):
    kind, payload = spec
    if kind == "T":
        return leaves[payload]
    if kind == "list":
        return [_unflatten(s, leaves) for s in payload]
    if kind == "tuple":
        return tuple(_unflatten(s, leaves) for s in payload)
    if kind == "dict":
        return {k: _unflatten(s, leaves) for k, s in payload}
    return payload


def _key_of(spec):
    kind, payload = spec
    if kind == "T":
        return "T"
    if kind in ("list", "tuple"):
        return (kind, tuple(_key_of(s) for s in payload))
    if kind == "dict":
        return ("dict", tuple((k, _key_of(s)) for k, s in payload))
    return ("const",) + _const_key(payload)


def _const_key(v) -> tuple:
    """Cache key of a non-tensor argument the trace baked in: its type and
    exact value. Equal-but-different values must not share a trace: ``1``,
    ``1.0`` and ``True`` (equal, same hash) promote differently, ``0.0`` and
    ``-0.0`` differ in sign, and two arrays whose ``repr`` is the same (NumPy
    elides long ones) may hold different values."""
    t = type(v)
    if isinstance(v, np.ndarray):
        return (t, "ndarray", v.dtype.str, v.shape, v.tobytes())
    if isinstance(v, np.generic):
        return (t, "scalar", v.dtype.str, v.tobytes())
    if isinstance(v, (float, complex)):
        return (t, "bits", struct.pack("<dd", v.real, v.imag))
    try:
        hash(v)
        return (t, v)
    except TypeError:
        pass
    try:
        return (t, "pickle", pickle.dumps(v))
    except Exception as exc:
        raise TypeError(
            f"compiled function: cannot key the plan cache on an argument of type "
            f"{t.__name__} (unhashable and not picklable), whose value the trace would bake "
            f"in; pass tensors, NumPy arrays, or hashable values") from exc


def _distinct_arguments(args, kwargs, leaves, keep=frozenset()):
    """The arguments a trace runs the function on: each tensor argument that
    does not require grad is replaced by a new tensor over the same storage
    (``_alias``: a fresh identity), so the graph tells an argument from
    another argument that is the same tensor (``f(x, x)``) and from the same
    tensor read from outside (``f(w)`` for a function reading ``w``): each
    becomes its own graph input, or the captured tensor, and a later call
    with different tensors computes what eager mode does. (A tensor that
    requires grad keeps its identity: its ``.grad`` is state of the step; so
    does one the function ``assign``s, positions ``keep``.)"""
    new = [t if t.requires_grad or i in keep else t._alias() for i, t in enumerate(leaves)]
    if all(a is b for a, b in zip(new, leaves)):
        return args, kwargs, leaves
    spec = _flatten((args, kwargs), [])
    args, kwargs = _unflatten(spec, new)
    return args, kwargs, new


class _Entry:
    """One compiled signature: the plan and what each run feeds and writes.

    ``.grad`` of leaves is state too (see :meth:`Function._grad_state`):
    ``grad_feeds`` are (captured index, leaf) whose feed is ``leaf.grad``
    at call time; ``grad_writes`` are (leaf, output index or None) set
    after a run; ``guards`` are (leaf, whether its ``.grad`` was None) that
    the trace depended on — a call where one does not hold uses another
    trace (``alternatives``).
    """

    def __init__(self, compiled, constants, captured, out_spec, num_outputs, state_targets,
                 num_grad_outputs=0, grad_feeds=(), grad_writes=(), guards=()):
        self.compiled = compiled
        self.constants = constants
        self.captured = captured
        self.out_spec = out_spec
        self.num_outputs = num_outputs
        self.num_grad_outputs = num_grad_outputs
        self.state_targets = state_targets
        self.grad_feeds = list(grad_feeds)
        self.grad_writes = list(grad_writes)
        self.guards = list(guards)
        self.alternatives: list = []
        # Runs touching variables some graph assigns serialize (state.py).
        self.guard = StateGuard(captured, state_targets)
        # Outputs (results, .grad values, assigned values) that are the
        # graph's own constants, or views sharing a constant's storage
        # (``reshape(dg.tensor(...))`` is a view at every level): the caller
        # gets a copy, so nothing it does to the result (an in-place write,
        # ``.numpy()[...] = v``) can change the graph's later runs.
        graph = compiled.graph
        consts = {c.name for c in graph.constant}
        roots = view_roots(graph)
        names = list(graph.output) + list(graph.state_update)
        self.constant_outputs = [i for i, nm in enumerate(names)
                                 if nm in consts or roots.get(nm) in consts]
        # Outputs that are an assigned variable itself (``w.assign(...);
        # return w``): eagerly the caller gets the variable object, which
        # later assigns rebind; so does a compiled call (set by _trace).
        self.variable_outputs: list = []
        # Outputs that the executor hands back as a fed tensor object (an
        # input or captured tensor) although the traced function returned
        # another tensor over its storage (``w.detach()``, which the trace
        # records as the same graph value): the caller gets a new tensor
        # over the fed storage, taken before the state is rebound, as eager
        # ``detach()`` gives (set by _trace).
        self.alias_outputs: list = []
        # Every check a run's write-back could fail is done before the run
        # (state_inplace lets the update write the variables' storage): the
        # variables it assigns and the leaves whose ``.grad`` it sets must
        # still have the shape, dtype and device they had when traced
        # (``_C.tensor_signature`` of ``write_targets``; set by _trace).
        self.write_targets: tuple = tuple(state_targets) + tuple(
            leaf for leaf, i in self.grad_writes if i is not None)
        self.write_signature = _C.tensor_signature(self.write_targets)
        # The output indices of the ``.grad`` values set (write_targets'
        # tail, same order): the run checks every written value with one
        # ``tensor_signature`` call against write_signature.
        self.grad_value_index = tuple(i for _, i in self.grad_writes if i is not None)
        self.traced_writes = [(tuple(t.shape), t.dtype.name, str(t.device))
                              for t in self.write_targets]

    def guards_hold(self) -> bool:
        return all((leaf.grad is None) == was_none for leaf, was_none in self.guards)


class Profile:
    """Per-op times of a compiled graph (``Function.profile``).

    Attributes
    ----------
    name : str
        The graph's name.
    runs : int
        How many runs were timed: the profiling calls, plus any other
        thread's runs of the same plan meanwhile (runs never overlap).
    wall_us : float
        Mean wall time of one profiling call, µs (Python call overhead
        included).
    rows : list of dict
        Per op, in graph order: ``name``, ``type``, ``calls``,
        ``total_us`` (over all runs), ``mean_us`` (per run), ``share``
        (of the summed op time).
    """

    def __init__(self, name: str, rows: list, runs: int, wall_ns_per_call: float):
        self.name, self.runs = name, max(int(runs), 1)
        runs = self.runs
        self.wall_us = wall_ns_per_call / 1e3
        total = sum(r["total_ns"] for r in rows) or 1
        self.rows = [{"name": r["name"], "type": r["type"], "calls": r["calls"],
                      "total_us": r["total_ns"] / 1e3,
                      "mean_us": r["total_ns"] / 1e3 / runs,
                      "share": r["total_ns"] / total} for r in rows]

    @property
    def ops_us(self) -> float:
        """Mean summed op time of one run, µs."""
        return sum(r["mean_us"] for r in self.rows)

    def by_type(self) -> list:
        """(op type, ops of that type, mean µs per run) by time, largest first."""
        acc: dict = {}
        for r in self.rows:
            n, us = acc.get(r["type"], (0, 0.0))
            acc[r["type"]] = (n + 1, us + r["mean_us"])
        return sorted(((t, n, us) for t, (n, us) in acc.items()), key=lambda x: -x[2])

    def __str__(self) -> str:
        lines = [f"graph '{self.name}': {self.runs} runs, {self.wall_us:.1f} µs per call, "
                 f"{self.ops_us:.1f} µs in ops",
                 f"{'op':<32} {'type':<22} {'µs/run':>9} {'share':>6}"]
        for r in sorted(self.rows, key=lambda r: -r["mean_us"]):
            lines.append(f"{r['name'][:32]:<32} {r['type'][:22]:<22} "
                         f"{r['mean_us']:>9.1f} {100 * r['share']:>5.1f}%")
        lines.append("by type: " + ", ".join(f"{t} x{n} {us:.1f} µs"
                                              for t, n, us in self.by_type()))
        return "\n".join(lines)

    __repr__ = __str__


class Function:
    """A Python function compiled to a Dragon graph (see module docs).

    Attributes
    ----------
    opt_level : int
        0 (no passes, nothing freed early) to 3 (all passes, default).
    """

    def __init__(self, fn, input_signature=None, opt_level: int = 3, name: str | None = None,
                 parallel: int = 0, disable_passes=(), freeze: bool = False,
                 autocast=None, owned=None, cuda_graph: bool = True):
        if not 0 <= opt_level <= 3:
            raise ValueError(f"opt_level must be 0..3, got {opt_level}")
        if parallel < 0:
            raise ValueError(f"parallel must be >= 0 (worker threads), got {parallel}")
        self.parallel = parallel
        self.cuda_graph = bool(cuda_graph)
        if isinstance(disable_passes, str):   # one name, or "a,b" as the variable takes
            disable_passes = disable_passes.split(",")
        self.disable_passes = tuple(n.strip() for n in disable_passes if n.strip())
        self.freeze = bool(freeze)
        # ``owned``: a callable returning the tensors ``fn`` owns and never
        # changes (an imported ONNX model's initializers, internal). They are
        # constants of every trace, borrowed with no copy (build_graph).
        self._owned = owned
        if autocast is not None:
            from ..amp import autocast as _autocast_cls
            # Checked now (dtype bfloat16 or float16), entered at every trace.
            autocast = _autocast_cls("cpu", dtype=autocast).dtype
        self.autocast = autocast
        self._fn = fn
        self.input_signature = input_signature
        self.opt_level = opt_level
        self.name = name or getattr(fn, "__name__", "function")
        # The compiled signatures live in the current workspace (one cache
        # per workspace, see _workspace.py); _pc_ref is the last one used.
        self._pc_ref = None
        self.trace_count = 0
        # One thread traces a signature; the others wait and reuse its plan
        # (a trace runs the function eagerly, assignments included).
        self._trace_lock = threading.RLock()
        functools.update_wrapper(self, fn)

    def _plans(self):
        """This function's plan cache in the current workspace."""
        ws = get_workspace()
        pc = self._pc_ref() if self._pc_ref is not None else None
        if pc is None or pc.ws is not ws:
            pc = ws._plan_cache(self, _mode["key"])
            self._pc_ref = weakref.ref(pc)
        return pc

    @property
    def _cache(self) -> dict:
        """Signature key -> compiled entry, in the current workspace."""
        return self._plans().cache

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        bound = getattr(obj, "__dragon_functions__", None)
        if bound is None:
            bound = {}
            try:
                obj.__dragon_functions__ = bound
            except AttributeError:
                return functools.partial(self.__call__, obj)
        f = bound.get(id(self))
        if f is None:
            f = bound[id(self)] = Function(functools.partial(self._fn, obj), self.input_signature,
                                           self.opt_level, self.name, self.parallel,
                                           self.disable_passes, self.freeze, self.autocast,
                                           cuda_graph=self.cuda_graph)
        return f

    def _check_signature(self, leaves):
        sig = self.input_signature
        if sig is None:
            return
        if len(sig) != len(leaves):
            raise TypeError(f"{self.name}: input_signature has {len(sig)} tensors, "
                            f"called with {len(leaves)}")
        for i, (spec, t) in enumerate(zip(sig, leaves)):
            shape, dtype = spec
            if dtype is not None and t.dtype != dtype:
                raise TypeError(f"{self.name}: argument {i} has dtype {t.dtype}, the signature "
                                f"says {dtype}")
            if shape is not None and (len(shape) != t.ndim or any(
                    s is not None and s != d for s, d in zip(shape, t.shape))):
                raise TypeError(f"{self.name}: argument {i} has shape {tuple(t.shape)}, the "
                                f"signature says {tuple(shape)}")

    def get_graph(self, *args, **kwargs):
        """The optimised GraphDef for these arguments (traces if needed).

        Constants the graph borrows (see ``owned``) have their values
        filled in, so the GraphDef stands on its own."""
        entry = self._entry(*args, **kwargs)[0]
        graph = entry.compiled.graph
        return fill_borrowed(graph, {c.name: t for c, t in zip(graph.constant,
                                                                 entry.constants)})

    def profile(self, *args, runs: int = 100, warmup: int = 3, **kwargs) -> "Profile":
        """Run the compiled graph ``runs`` times and time every op.

        The call runs exactly as ``self(*args, **kwargs)`` does (state
        updates included: a training step trains ``warmup + runs`` times), with
        the executor reading a clock around each op. Sub-graphs of ``cond`` /
        ``while_loop`` count as their control op.

        Parameters
        ----------
        runs : int, default 100
            Timed runs.
        warmup : int, default 3
            Untimed runs first (caches, allocator, oneDNN primitives).

        Returns
        -------
        Profile
            One row per op of the optimised graph (name, type, calls,
            total and mean µs, share of the ops' time); ``print`` it for a
            table sorted by time, or read ``.rows``.
        """
        if runs < 1 or warmup < 0:
            raise ValueError(f"{self.name}.profile: runs must be >= 1 and warmup >= 0, "
                             f"got runs={runs}, warmup={warmup}")
        entry, _ = self._entry(*args, **kwargs)
        for _ in range(warmup):
            self(*args, **kwargs)
        plan = entry.compiled.plan
        plan.set_profiling(True)
        try:
            t0 = time.perf_counter_ns()
            for _ in range(runs):
                self(*args, **kwargs)
            wall_ns = time.perf_counter_ns() - t0
            rows = plan.profile()
            # One snapshot: a run of another thread may start right after
            # profile() returns, so profile_runs read later could be ahead.
            timed = max((r["calls"] for r in rows), default=plan.profile_runs)
        finally:
            plan.set_profiling(False)
        # Other threads may have run the plan meanwhile: per-run means divide
        # by every timed run (the wall time is this thread's calls only).
        return Profile(self.name, rows, timed, wall_ns / runs)

    def cuda_graph_status(self, *args, **kwargs) -> dict:
        """Whether the compiled run for these arguments replays a recorded
        graph (CUDA Graphs), and if not, why.

        Traces the function if this signature is new (as :meth:`get_graph`),
        but does not run it.

        Returns
        -------
        dict
            ``enabled`` (False with ``cuda_graph=False`` or
            ``DRAGON_CUDA_GRAPHS=0``), ``state`` (``"off"``, ``"warming up"``,
            ``"captured"`` (the last run recorded the graph), ``"replayed"``,
            ``"ineligible"`` or ``"failed"``), ``reason`` (why not, for the
            last two), ``captures``, ``replays``, ``normal_runs`` (runs op by
            op while enabled) and ``graphs`` (recorded graphs kept).
        """
        entry, leaves = self._entry(*args, **kwargs)
        if entry.guards or entry.alternatives:
            entry = self._select(entry, args, kwargs, leaves)
        return dict(entry.compiled.plan.capture_status())

    def explain(self, *args, **kwargs) -> str:
        """A short report of the compiled run for these arguments: the
        graph's size and whether it runs as a recorded graph (see
        :meth:`cuda_graph_status`)."""
        entry = self._entry(*args, **kwargs)[0]
        plan = entry.compiled.plan
        st = self.cuda_graph_status(*args, **kwargs)
        if not st["enabled"]:
            graph = "off (cuda_graph=False or DRAGON_CUDA_GRAPHS=0)"
        elif st["state"] in ("ineligible", "failed"):
            graph = f"{st['state']}: {st['reason']}"
        else:
            graph = (f"{st['state']} ({st['captures']} captures, {st['replays']} replays, "
                     f"{st['normal_runs']} runs op by op)")
        return (f"function '{self.name}': {plan.num_ops} ops, "
                f"{plan.planned_bytes} planned bytes\n  graph capture: {graph}")

    def _entry(self, *args, **kwargs):
        leaves: list = []
        spec = _flatten((args, kwargs), leaves)
        self._check_signature(leaves)
        key = (_key_of(spec), tuple((tuple(t.shape), t._dtype_code, t._device_name,
                                     t._device_index) for t in leaves), _mode["key"],
               _C._autocast_get())
        cache = self._plans().cache
        entry = cache.get(key)
        if entry is None:
            with self._trace_lock:
                entry = cache.get(key)
                if entry is None:
                    entry = cache[key] = self._trace(args, kwargs, leaves)
        return entry, leaves

    def _trace(self, args, kwargs, leaves, keep=frozenset()) -> _Entry:
        if not keep:
            self.trace_count += 1
        given = (args, kwargs, leaves)
        trace = Trace()
        _traces().append(trace)
        _C._trace_enter()
        autocast_prev = None
        if self.autocast is not None:
            from ..amp import _apply_table
            _apply_table()
            autocast_prev = _C._autocast_set(self.autocast.code)
        try:
            args, kwargs, leaves = _distinct_arguments(args, kwargs, leaves, keep)
            result = self._fn(*args, **kwargs)
        finally:
            if autocast_prev is not None:
                _C._autocast_set(autocast_prev)
            _C._trace_exit()
            _traces().pop()
            trace.restore()
            grad_finals = trace.restore_grads()
        # An argument the function assigns is a variable the caller passes:
        # it keeps its identity (its state_target is the caller's tensor);
        # trace again without its stand-in.
        assigned = {i for i, (a, b) in enumerate(zip(leaves, given[2]))
                    if a is not b and a._id in trace.assigned}
        if assigned:
            return self._trace(*given, keep=frozenset(keep | assigned))
        out_leaves: list = []
        out_spec = _flatten(result, out_leaves)
        num_outputs = len(out_leaves)
        grad_writes = self._grad_writes(trace, grad_finals, out_leaves)
        owned = {t._id: t for t in self._owned()} if self._owned is not None else None
        graph, constants, captured = build_graph(self.name, trace, leaves, out_leaves,
                                                 freeze=self.freeze, owned=owned)
        # Constants: the traced tensors, or values passes computed (folding).
        by_name = {c.name: t for c, t in zip(graph.constant, constants)}
        if self.parallel:
            graph.metadata["parallel"] = str(self.parallel)
        if self.disable_passes:
            graph.metadata["disable_passes"] = ",".join(self.disable_passes)
        with borrowed_constants(by_name):
            graph = run_passes(graph, self.opt_level)
            compiled = compile_graph(graph, self.opt_level)
            const_feeds = [by_name[c.name] if c.name in by_name else constant_feed(c)
                           for c in graph.constant]
        if self.parallel:
            compiled.plan.set_parallel(self.parallel)
        if self.cuda_graph and os.environ.get("DRAGON_CUDA_GRAPHS", "1") != "0":
            # Feeds are (leaves, constants, captured): constants are read in
            # place by a recorded graph, the rest copied into its buffers.
            first = len(leaves)
            compiled.plan.set_capture(True, _GRAPH_WARMUP, first, first + len(const_feeds))
        cap_by_name = {f"captured:{i}": t for i, t in enumerate(captured)}
        captured_feeds = [cap_by_name[nm] for nm in graph.captured]
        state_targets = [cap_by_name[nm] for nm in graph.state_target]
        grad_feeds, guards = self._grad_reads(trace, captured_feeds)
        if self.freeze and (grad_feeds or grad_writes):
            raise ValueError(f"{self.name}: freeze=True is for inference, but the function "
                             "reads or writes .grad (backward(), an optimizer step); "
                             "compile it without freeze")
        entry = _Entry(compiled, const_feeds, captured_feeds, out_spec, num_outputs,
                       state_targets, len(out_leaves) - num_outputs, grad_feeds, grad_writes,
                       guards)
        by_id = {t._id: t for t in state_targets}
        entry.variable_outputs = [(i, by_id[t._id]) for i, t in enumerate(out_leaves[:num_outputs])
                                  if t._id in by_id and by_id[t._id] is t]
        fed = {f"input:{i}": t for i, t in enumerate(leaves)}
        fed.update(cap_by_name)
        final = list(compiled.graph.output)
        entry.alias_outputs = [i for i in range(num_outputs)
                               if final[i] in fed and fed[final[i]] is not out_leaves[i]]
        return entry

    @staticmethod
    def _grad_writes(trace, finals: dict, out_leaves: list) -> list:
        """(leaf, output index or None) for each ``.grad`` the trace changed;
        the new values join ``out_leaves`` as extra graph outputs."""
        writes = []
        for uid, (leaf, original, _) in trace.grads.items():
            final = finals[uid]
            if final is original:
                continue
            if final is None:
                writes.append((leaf, None))
            else:
                writes.append((leaf, len(out_leaves)))
                out_leaves.append(final)
        return writes

    @staticmethod
    def _grad_reads(trace, captured: list):
        """Which captured tensors are a leaf's ``.grad`` from before the
        call (fed from ``leaf.grad`` at every run, never frozen), and the
        guards: the None-ness of each ``.grad`` the trace depended on."""
        owners = {}
        for leaf, original, _ in trace.grads.values():
            if original is not None:
                owners[original._id] = leaf
        for t in captured:
            # A parameter's .grad read by user code the framework did not see.
            if t.requires_grad:
                g = t.grad
                if g is not None:
                    owners.setdefault(g._id, t)
        feeds = [(i, owners[t._id]) for i, t in enumerate(captured) if t._id in owners]
        guards = {leaf._id: (leaf, original is None)
                  for leaf, original, reads in trace.grads.values() if reads}
        for _, leaf in feeds:
            guards[leaf._id] = (leaf, False)
        return feeds, list(guards.values())

    def __call__(self, *args, **kwargs):
        if is_tracing():
            # Inside another trace: inline, so the outer graph sees the ops.
            return self._fn(*args, **kwargs)
        pc = self._pc_ref() if self._pc_ref is not None else None
        if pc is None or pc.ws is not get_workspace():
            pc = self._plans()
        if pc.mode_key is not _mode["key"]:
            pc.fast.clear()
            pc.mode_key = _mode["key"]
        fast_key = None if kwargs else _C.tensor_signature(args)
        autocast = _C._autocast_get()
        if autocast >= 0 and fast_key is not None:
            fast_key = (fast_key, autocast)   # a plan per eager autocast state
        entry = pc.fast.get(fast_key) if fast_key is not None else None
        if entry is not None:
            leaves = args
        else:
            entry, leaves = self._entry(*args, **kwargs)
            if fast_key is not None:
                pc.fast[fast_key] = entry
        if entry.guards or entry.alternatives:
            entry = self._select(entry, args, kwargs, leaves)
        outs = entry.guard.run(lambda: self._run(entry, leaves))
        return _unflatten(entry.out_spec, outs[:entry.num_outputs])

    def _select(self, entry: _Entry, args, kwargs, leaves) -> _Entry:
        """The trace of this signature whose ``.grad`` guards hold now
        (traced anew when none does: ``.grad`` None then, a tensor now)."""
        for cand in [entry] + entry.alternatives:
            if cand.guards_hold():
                return cand
        with self._trace_lock:
            for cand in entry.alternatives:
                if cand.guards_hold():
                    return cand
            new = self._trace(args, kwargs, list(leaves))
            entry.alternatives.append(new)
            return new

    @staticmethod
    def _run(entry: _Entry, leaves) -> list:
        """One run of the plan: feeds in, state rebound, outputs back (the
        caller holds the entry's state locks)."""
        captured = entry.captured
        if entry.grad_feeds:
            captured = list(captured)
            for i, leaf in entry.grad_feeds:
                captured[i] = leaf.grad
        if entry.write_targets and (_C.tensor_signature(entry.write_targets)
                                    != entry.write_signature):
            Function._write_targets_changed(entry)
        feeds = list(leaves) + entry.constants + captured
        outs = entry.compiled.run(feeds)
        for i in entry.constant_outputs:
            outs[i] = outs[i]._clone()
        for i in entry.alias_outputs:
            outs[i] = outs[i]._alias()
        n = entry.num_outputs + entry.num_grad_outputs
        values = outs[n:]
        # All or nothing: the variables were checked before the run; the
        # values it computed are checked again before the first write-back
        # (an internal error if this ever fires: the graph computed another
        # shape than it was traced with). One signature of all the values
        # (shape, dtype, device each) against the targets' traced one: a
        # training step writes ~80 values, and checking them one by one in
        # Python cost ~80 us a run.
        if values or entry.grad_value_index:
            values += [outs[i] for i in entry.grad_value_index]
            if _C.tensor_signature(tuple(values)) != entry.write_signature:
                Function._written_value_mismatch(entry, values)
        # The values now have their leaves' shape, dtype and device, which
        # is all ``Tensor.grad``'s setter checks: set them directly.
        for leaf, i in entry.grad_writes:
            _set_grad(leaf, None if i is None else outs[i])
        for var, value in zip(entry.state_targets, values):
            var._rebind(value)
        for i, var in entry.variable_outputs:
            outs[i] = var
        return outs

    @staticmethod
    def _written_value_mismatch(entry: _Entry, values):
        """Raise the internal error for a computed value whose shape, dtype
        or device is not its target's (found before any write-back)."""
        for var, value in zip(entry.write_targets, values):
            if (tuple(var.shape) != tuple(value.shape) or var._dtype_code != value._dtype_code
                    or (var._device_name, var._device_index)
                    != (value._device_name, value._device_index)):
                raise InvalidArgumentError(
                    f"compiled function: internal error: the graph computed a "
                    f"{value.dtype.name} value of shape {tuple(value.shape)} on {value.device} "
                    f"for a tensor {var.dtype.name} of shape {tuple(var.shape)} on "
                    f"{var.device} it assigns (or whose .grad it sets); nothing was rebound, "
                    f"but an update written in place may have run")
        raise InvalidArgumentError(
            "compiled function: internal error: the values the graph computed do not match "
            "the tensors it assigns; nothing was rebound")

    @staticmethod
    def _write_targets_changed(entry: _Entry):
        """Raise the error for a variable or ``.grad`` leaf whose shape,
        dtype or device changed since tracing (checked before the run, so
        nothing has been written)."""
        n = len(entry.state_targets)
        for k, t in enumerate(entry.write_targets):
            traced = entry.traced_writes[k]
            now = (tuple(t.shape), t.dtype.name, str(t.device))
            if now != traced:
                changed = ("shape" if now[0] != traced[0]
                           else "dtype" if now[1] != traced[1] else "device")
                what = ("a variable it assigns" if k < n
                        else "a leaf whose .grad it sets")
                raise InvalidArgumentError(
                    f"compiled function: {what} is now {now[1]} of shape {now[0]} on "
                    f"{now[2]}, but the graph was traced for {traced[1]} of shape "
                    f"{traced[0]} on {traced[2]}; its {changed} changed after tracing (e.g. "
                    f"through `.data = ...`). No state was updated; compile a new function "
                    f"for the new {changed}")
        raise InvalidArgumentError("compiled function: the variables it assigns changed "
                                   "since tracing. No state was updated")


def function(fn=None, *, input_signature=None, opt_level: int = 3, name: str | None = None,
             parallel: int = 0, disable_passes=(), freeze: bool = False, autocast=None,
             cuda_graph: bool = True):
    """Compile a Python function into a Dragon graph (decorator).

    Parameters
    ----------
    fn : callable
        The function; its tensor arguments (also inside lists, tuples and
        dicts) become graph inputs.
    input_signature : list of tuple, optional
        One ``(shape, dtype)`` pair per argument; every call is checked
        against it (None entries match anything).
    opt_level : int, default 3
        Optimisation level (see docs/graph.md).
    name : str, optional
        The graph's name (default: the function's).
    parallel : int, default 0
        Run independent ops concurrently on this many worker threads
        (dependency-driven, as Paddle's ParallelExecutor); 0 runs ops in
        order. Parallel runs do not reuse buffers in place.
    disable_passes : str or sequence of str, optional
        Passes of the level not to run, by name (e.g. ``("pattern_fusion",)``
        or ``"pattern_fusion"`` keeps convolutions and matmuls unfused; a
        string may list several, comma-separated); an unknown name raises
        ValueError. ``DRAGON_DISABLE_PASSES=a,b`` does the same for every
        function.
    freeze : bool, default False
        For inference: bake the tensors the function reads but does not
        ``assign``, directly or through a ``detach()`` alias made inside it
        (the parameters), into the graph as constants with their
        values at trace time, as ``torch.jit.freeze`` does, so constant
        folding precomputes what depends on them only (e.g. batch norm
        folded into the convolution weights, once). The graph keeps its own
        copy of them, so later changes to those tensors (``assign``, in-place
        writes) are not seen by the compiled graph: make a new function after
        loading new weights.
    autocast : dtype, optional
        ``"bfloat16"`` or ``"float16"``: trace the function inside
        ``dragon_core.autocast("cpu", dtype=autocast)`` (matmuls and
        convolutions in that dtype, reductions, norms and losses in float32;
        see docs/mixed-precision.md). Calling a compiled function inside an
        eager ``autocast`` block also traces it under that autocast (a
        separate plan per autocast state).
    cuda_graph : bool, default True
        On a device that can record work (CUDA Graphs on ``cuda``; ABI 1.5
        graph capture), the third run with one input signature is recorded
        and later runs replay it on the current stream: one launch instead
        of one per op. Inputs are copied into the graph's own buffers and
        outputs come back as fresh tensors, so results are the same as op
        by op. Functions that read the host during a run (``cond``,
        ``while_loop``), draw fresh random seeds, run collectives or use
        ``parallel`` are run op by op; :meth:`Function.cuda_graph_status`
        and :meth:`Function.explain` say why. ``False`` opts out;
        ``DRAGON_CUDA_GRAPHS=0`` turns capture off for every function.

    Examples
    --------
    >>> import dragon_core as dg
    >>> @dg.function
    ... def f(x):
    ...     return dg.ops.relu(x * 2.0 + 1.0)
    """
    if fn is None:
        return lambda f: Function(f, input_signature, opt_level, name, parallel,
                                  disable_passes, freeze, autocast, cuda_graph=cuda_graph)
    return Function(fn, input_signature, opt_level, name, parallel, disable_passes, freeze,
                    autocast, cuda_graph=cuda_graph)
