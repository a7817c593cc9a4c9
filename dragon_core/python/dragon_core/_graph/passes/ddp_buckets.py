"""DDP bucket scheduling: start every bucket's all-reduce as early as its
gradients allow, wait for it as late as its readers allow.

A compiled ``DistributedDataParallel`` step holds, per gradient bucket, a
``DDPAllReduceStart(flat) -> token`` op and a ``DDPAllReduceWait(token,
flat) -> sum`` op (see ``dragon_core/distributed/ddp.py``). The executor runs
ops in list order, so overlap depends on where these two sit. This pass
moves each start to right after the last op producing one of its inputs
(the bucket's flattened gradients), and each wait to right before the first
op reading its output; every other op keeps its relative order, so the
result is still a topological order. Starts keep their relative order
(every rank must issue the collectives in the same order), and so do waits.

A graph without these ops is returned unchanged.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._graph.passes import register_pass

START, WAIT = "DDPAllReduceStart", "DDPAllReduceWait"


@register_pass("ddp_buckets", level=1)
def ddp_buckets(graph):
    """Reorder the DDP start/wait ops of ``graph`` (see the module docstring).

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        ``graph`` itself when it has no DDP op, else a reordered copy.
    """
    ops = list(graph.op)
    if not any(op.type in (START, WAIT) for op in ops):
        return graph
    producer = {}
    for k, op in enumerate(ops):
        for o in op.output:
            producer[o] = k
    keys = []
    last_start = -1.0
    for k, op in enumerate(ops):
        if op.type == START:
            after = max((producer.get(i, -1) for i in op.input), default=-1)
            key = max(float(after) + 0.5, last_start)   # keep starts in order
            last_start = key
            keys.append((key, 1, k))
        else:
            keys.append((float(k), 0, k))
    # Waits: right before the first reader (an op, or the end of the graph).
    # Processed last to first so that an earlier wait stays before a later one.
    first_reader_key = float(len(ops))
    placed = {}
    for k in range(len(ops) - 1, -1, -1):
        op = ops[k]
        if op.type != WAIT:
            continue
        readers = [j for j in range(k + 1, len(ops))
                   if any(i in op.output for i in ops[j].input)]
        key = keys[readers[0]][0] - 0.25 if readers else float(len(ops))
        key = min(key, first_reader_key)
        first_reader_key = key
        placed[k] = key
    for k, key in placed.items():
        keys[k] = (key, 0, k)
    order = [k for _, _, k in sorted(keys)]
    new = P.GraphDef()
    new.CopyFrom(graph)
    del new.op[:]
    for k in order:
        new.op.add().CopyFrom(ops[k])
    return new
