"""From an optimised GraphDef to the executor's flat plan (``_C.Plan``)."""

from __future__ import annotations

import json

from .. import _C
from .build import RAISES, attrs_tuple

# The annotation of passes/state_inplace.py (an int list of output, input pairs).
STATE_INPLACE = "_state_inplace"


class CompiledGraph:
    """A GraphDef compiled for the C++ executor.

    ``feed_names`` is the order in which :meth:`run` expects its feeds:
    graph inputs, then constants, then captured tensors. :meth:`run`
    returns the graph outputs followed by the state updates.
    """

    def __init__(self, graph, plan, feed_names):
        self.graph = graph
        self.plan = plan
        self.feed_names = feed_names

    def run(self, feeds: list) -> list:
        return self.plan.run(feeds)


_CONTROL = ("Cond", "While")


def compile_graph(graph, level: int, sub: bool = False) -> CompiledGraph:
    """Compile ``graph`` (already optimised for ``level``).

    A sub-graph (``sub=True``, the branch of a Cond or the body of a While)
    is fed its inputs then its captured tensors; its constants are stored in
    its plan.
    """
    if sub:
        feed_names = list(graph.input) + list(graph.captured) + [c.name for c in graph.constant]
    else:
        feed_names = list(graph.input) + [c.name for c in graph.constant] + list(graph.captured)
    slot: dict = {}
    for nm in feed_names:
        slot.setdefault(nm, len(slot))
    for op in graph.op:
        for nm in op.output:
            if nm in slot:
                raise ValueError(f"graph '{graph.name}': tensor '{nm}' is written twice")
            slot[nm] = len(slot)
    missing = [nm for op in graph.op for nm in op.input if nm not in slot]
    missing += [nm for nm in list(graph.output) + list(graph.state_update) if nm not in slot]
    if missing:
        raise ValueError(f"graph '{graph.name}': tensors {sorted(set(missing))} are read but "
                         "never written")

    # Liveness: a tensor is released after its last reader, unless it must
    # survive the run (outputs, state updates) or belongs to the caller.
    keep = set(graph.output) | set(graph.state_update) | set(feed_names)
    last_use: dict = {}
    for k, op in enumerate(graph.op):
        for nm in op.input:
            last_use[nm] = k
        for nm in op.output:
            last_use.setdefault(nm, k)  # written but never read: dies at once
    release_at: dict = {}
    if level >= 1:
        for nm, k in last_use.items():
            if nm not in keep:
                release_at.setdefault(k, []).append(slot[nm])

    plan_meta = json.loads(graph.metadata["memory_plan"]) if "memory_plan" in graph.metadata \
        else {"buffers": [], "assign": {}}
    assign = plan_meta.get("assign", {})
    if any(op.type in _CONTROL for op in graph.op):
        # Sub-graph results may alias their operands: no static buffers.
        plan_meta, assign = {"buffers": []}, {}

    # Inputs fed from the graph's constants (same storage every run, never
    # written): kernels may keep what they derive from them (docs/abi.md).
    constant_names = {c.name for c in graph.constant}
    out_slots = [slot[nm] for nm in graph.output] + [slot[nm] for nm in graph.state_update]
    plan = _C.Plan(graph.name or "graph", len(slot), [slot[nm] for nm in feed_names], out_slots)
    for k, op in enumerate(graph.op):
        if op.type in _CONTROL:
            keys = ("then_branch", "else_branch") if op.type == "Cond" else \
                ("cond_graph", "body_graph")
            subs = [_compile_sub(op.attr[key].graph, level) for key in keys]
            max_it = op.attr["maximum_iterations"].i if "maximum_iterations" in op.attr else -1
            plan.add_control(op.type, op.name, [slot[nm] for nm in op.input],
                             [slot[nm] for nm in op.output], subs[0].plan, subs[1].plan,
                             op.attr["num_operands"].i, op.attr["num_then_captures"].i,
                             op.attr["num_else_captures"].i, max_it, release_at.get(k, []))
            continue
        inplace = -1
        if "_inplace_input" in op.attr:
            inplace = slot[op.input[op.attr["_inplace_input"].i]]
        buffers = [int(assign.get(nm, -1)) for nm in op.output]
        if STATE_INPLACE in op.attr:
            # Output j may be written over captured input i (passes/
            # state_inplace.py): the executor reads -2 - slot as "the storage
            # of this slot, if nobody else can see it" (executor.h).
            pairs = list(op.attr[STATE_INPLACE].ints.values)
            for j, i in zip(pairs[0::2], pairs[1::2]):
                if buffers[j] < 0:
                    buffers[j] = -2 - slot[op.input[i]]
        if all(b == -1 for b in buffers):
            buffers = []
        constant_inputs = sum(1 << i for i, nm in enumerate(op.input[:64])
                              if nm in constant_names)
        plan.add_op(op.type, op.name, [slot[nm] for nm in op.input],
                    [slot[nm] for nm in op.output], attrs_tuple(op.type, op),
                    release_at.get(k, []), inplace, buffers, constant_inputs)
    if plan_meta.get("buffers"):
        plan.set_buffers([int(b) for b in plan_meta["buffers"]])
    if sub and graph.constant:
        from .build import constant_feed
        plan.set_constants([constant_feed(c) for c in graph.constant])
    return CompiledGraph(graph, plan, feed_names)


def _compile_raising(graph) -> CompiledGraph:
    """The plan of a sub-graph that only raises (``RAISES`` metadata)."""
    rec = json.loads(graph.metadata[RAISES])
    feed_names = list(graph.input) + list(graph.captured)
    plan = _C.Plan(graph.name or "graph", len(feed_names), list(range(len(feed_names))), [])
    plan.set_error(int(rec["code"]), int(rec["kind"]), str(rec["message"]), str(rec["op"]))
    return CompiledGraph(graph, plan, feed_names)


def _compile_sub(graph, level: int) -> CompiledGraph:
    from .passes import run_passes
    if RAISES in graph.metadata:
        return _compile_raising(graph)
    g = run_passes(graph, min(level, 2))
    return compile_graph(g, level, sub=True)
