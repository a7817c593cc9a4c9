"""Models with data-dependent output shapes: compiled segments around
eager nodes.

A Dragon graph sizes every tensor by shape inference before any kernel
runs, and a trace is keyed on its input shapes. ONNX NonZero, Unique,
NonMaxSuppression and Compress (with a condition computed at run time)
produce tensors whose *shape* depends on the values, so no single trace can
hold them. ``load`` therefore splits such a model's top-level node list at
those nodes:

    segment 0 (compiled)  ->  NonZero (eager)  ->  segment 1 (compiled)  -> ...

Each segment is a ``dragon_core.function`` of its own: it takes the graph
inputs and the earlier results it reads, returns what later nodes (or the
graph outputs) read, and is traced once per input signature as a whole
model would be; the nodes between segments run eagerly through the same
translations (their inputs are concrete tensors, so the host reads the
count and slices). A node whose sub-graph (If / Loop / Scan body) holds
such an op runs eagerly as a whole. A model without them is not split: it
compiles to one graph exactly as before.

The segment after a data-dependent node sees a new input shape whenever the
count changes. Its traces are cached per shape like any function's; after
``MAX_SEGMENT_TRACES`` distinct signatures (a count that keeps changing)
that segment stops tracing and runs its nodes eagerly too, through the same
kernels, so a long run does not accumulate one compiled plan per count.
"""

from __future__ import annotations

import types

import numpy as np

from .. import _C
from .._tensor import tensor
from .._graph.function import Function
from ._errors import NeedStatic
from ._load import Value, _Run, np_dtype

# ONNX ops whose output shapes depend on their input values.
DYNAMIC_OPS = frozenset({"NonZero", "Unique", "NonMaxSuppression", "Compress"})
# Distinct input signatures a segment traces before it runs eagerly.
MAX_SEGMENT_TRACES = 8


def _subgraphs(proto):
    from onnx import AttributeProto as A
    for a in proto.attribute:
        if a.type == A.GRAPH:
            yield a.g
        elif a.type == A.GRAPHS:
            yield from a.graphs


def _reads(proto) -> set:
    """Names ``proto`` reads: its inputs and, for If/Loop/Scan, every name
    its sub-graphs read (outer-scope references; a superset is harmless)."""
    names = {nm for nm in proto.input if nm}
    for g in _subgraphs(proto):
        for inner in g.node:
            names |= _reads(inner)
        names |= {o.name for o in g.output}
    return names


def _has_dynamic(graph) -> bool:
    return any(node.op_type in DYNAMIC_OPS or any(_has_dynamic(g) for g in _subgraphs(node))
               for node in graph.node)


def _constant_names(graph, initializers) -> set:
    """Names whose value is fixed by the model: initializers and outputs of
    Constant nodes (a Compress on them has a fixed shape)."""
    names = set(initializers)
    names |= {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    return names


def is_dynamic_node(proto, constants: set) -> bool:
    """Whether ``proto`` must run eagerly: a data-dependent op (a Compress
    only when its condition is computed at run time), or a node whose
    sub-graphs hold one."""
    if proto.op_type == "Compress":
        return len(proto.input) > 1 and proto.input[1] not in constants
    if proto.op_type in DYNAMIC_OPS:
        return True
    return any(_has_dynamic(g) for g in _subgraphs(proto))


class _Static:
    """A run of nodes compiled as one ``dragon_core.function``."""

    def __init__(self, owner, index: int, nodes: list, inputs: list, outputs: list):
        self.owner = owner
        self.nodes = nodes
        self.inputs = inputs            # names fed in, in order
        self.outputs = outputs          # names handed on, in order
        self.static: set = set()        # inputs whose values key the traces
        self.eager = False              # too many signatures: run eagerly
        self.seen: set = set()          # input signatures traced so far
        name = f"{owner.model.graph.name or 'onnx'}_segment{index}"
        self.fn = Function(self._trace, opt_level=owner._opt_level, name=name,
                           freeze=owner._freeze, owned=owner._owned)

    def _trace(self, dynamic: list, static: tuple):
        owner = self.owner
        run = _Run(owner.opset, owner.base_dir, owner._keep)
        env = {nm: Value(t) for nm, t in owner.initializers.items()}
        fixed = {nm for nm, *_ in static}
        for nm, t in zip([n for n in self.inputs if n not in fixed], dynamic):
            env[nm] = Value(t, frozenset([nm]))
        for nm, dt, shape, data in static:
            env[nm] = Value(tensor(np.frombuffer(data, np_dtype(dt)).reshape(shape)))
        run.run_graph(types.SimpleNamespace(node=self.nodes), env)
        return [env[nm].t for nm in self.outputs]

    def _args(self, env: dict):
        """(tensors of the inputs, (name, dtype, shape, bytes) of the static
        ones): the arguments of ``fn`` (the static ones key its traces)."""
        fixed = self.static
        dynamic = [env[nm] for nm in self.inputs if nm not in fixed]
        static = tuple((nm, env[nm].dtype.name, tuple(env[nm].shape), env[nm].numpy().tobytes())
                       for nm in self.inputs if nm in fixed)
        return dynamic, static

    def run(self, env: dict) -> None:
        dynamic, static = self._args(env)
        key = (tuple((t.dtype.name, tuple(t.shape), str(t.device)) for t in dynamic), static)
        if key not in self.seen and len(self.seen) >= MAX_SEGMENT_TRACES:
            self.eager = True
        if self.eager:
            outs = run_eager(self.owner, self.nodes, env)
        else:
            self.seen.add(key)
            for _ in range(len(self.inputs) + 1):
                try:
                    outs = dict(zip(self.outputs, self.fn(dynamic, static)))
                    break
                except NeedStatic as exc:
                    if exc.inputs <= {nm for nm, *_ in static}:
                        raise RuntimeError("internal: a static input was asked twice") from exc
                    # (another thread may have added them meanwhile: retry)
                    self.static = self.static | exc.inputs
                    self.seen.clear()       # keys now hold those values
                    dynamic, static = self._args(env)
            else:
                raise RuntimeError("internal: too many retraces")
        for nm in self.outputs:
            env[nm] = outs[nm]


class _Eager:
    """One node run eagerly (its output shapes depend on the values)."""

    def __init__(self, owner, proto, outputs: list):
        self.owner = owner
        self.nodes = [proto]
        self.outputs = outputs

    def run(self, env: dict) -> None:
        outs = run_eager(self.owner, self.nodes, env)
        for nm in self.outputs:
            env[nm] = outs[nm]


def run_eager(owner, nodes: list, env: dict) -> dict:
    """Interpret ``nodes`` on concrete tensors (no trace); returns name ->
    Tensor of everything they define."""
    if _C._is_tracing():
        raise RuntimeError(
            f"ONNX model '{owner.model.graph.name}': its output shapes depend on the input "
            "values (NonZero, Unique, NonMaxSuppression or a run-time Compress), so it cannot "
            "run inside a traced function (dragon_core.function); call it outside one")
    run = _Run(owner.opset, owner.base_dir, owner._keep)
    values = {nm: Value(t) for nm, t in owner.initializers.items()}
    values.update({nm: Value(t) for nm, t in env.items()})
    run.run_graph(types.SimpleNamespace(node=nodes), values)
    return {o: values[o].t for p in nodes for o in p.output if o}


class SegmentedModel:
    """The plan of a model with data-dependent shapes: compiled segments
    (``_Static``) and eager nodes (``_Eager``) in node order."""

    def __init__(self, owner, graph, constants: set):
        self.owner = owner
        steps = []          # ("static", [protos]) / ("eager", proto)
        for proto in graph.node:
            if is_dynamic_node(proto, constants):
                steps.append(("eager", proto))
            elif steps and steps[-1][0] == "static":
                steps[-1][1].append(proto)
            else:
                steps.append(("static", [proto]))
        # What each step reads and defines; what is read after it.
        reads = [set().union(*[_reads(p) for p in (s if k == "static" else [s])])
                 for k, s in steps]
        defines = [{o for p in (s if k == "static" else [s]) for o in p.output if o}
                   for k, s in steps]
        needed_after = [set(o.name for o in graph.output)]
        for r in reversed(reads[1:]):
            needed_after.append(needed_after[-1] | r)
        needed_after.reverse()
        available = set(owner.input_names)
        self.steps = []
        for i, (kind, body) in enumerate(steps):
            outs = sorted(defines[i] & needed_after[i])
            if kind == "eager":
                self.steps.append(_Eager(owner, body, outs))
            elif outs:
                ins = sorted(reads[i] & available)
                self.steps.append(_Static(owner, len(self.steps), body, ins, outs))
            available |= defines[i]

    @property
    def num_segments(self) -> int:
        """How many compiled segments the model runs."""
        return sum(isinstance(s, _Static) for s in self.steps)

    def __call__(self, feeds: dict) -> tuple:
        env = dict(feeds)
        for step in self.steps:
            step.run(env)
        owner = self.owner
        out = []
        for nm in owner.output_names:
            t = env.get(nm)
            if t is None:
                t = owner.initializers[nm]
            out.append(t)
        return tuple(out)

    def get_graphs(self, feeds: dict) -> list:
        """The optimised GraphDef of each compiled segment for these inputs."""
        env = dict(feeds)
        graphs = []
        for step in self.steps:
            if isinstance(step, _Static) and not step.eager:
                step.run(env)
                graphs.append(step.fn.get_graph(*step._args(env)))
            else:
                step.run(env)
        return graphs


def plan(owner, graph):
    """A SegmentedModel when ``graph`` has data-dependent nodes, else None
    (the model compiles to one graph)."""
    constants = _constant_names(graph, owner.initializers)
    if not any(is_dynamic_node(p, constants) for p in graph.node):
        return None
    return SegmentedModel(owner, graph, constants)
