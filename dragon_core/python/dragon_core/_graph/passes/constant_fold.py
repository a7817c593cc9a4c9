"""Constant folding: evaluate at compile time the ops that read only constants.

Walking the ops in order, an op is folded when it is not stateful and every
input is a constant of the graph (``graph.constant``, including the ones this
pass created for earlier ops, so chains fold in one pass; ops with no inputs,
such as ``Fill``, qualify). The op runs eagerly through the dispatcher
(``dragon_core._C.call``) where the plan would run it (an op without inputs
on the graph's device, the others where their inputs are) and each output
becomes a new ``TensorProto`` constant with the output's name (and its
device: the plan is fed the value there), so no use is renamed; its
``value_info`` is rewritten from the computed tensor. Constants that nobody
reads any more are dropped afterwards.

An op is left in place when:

- it is stateful (random ops draw new values each run);
- an output is larger than ``FOLD_LIMIT_BYTES`` (1 MiB) and than the
  largest constant the op reads, according to ``value_info`` (or its size
  is unknown), so a ``Fill`` of a huge shape does not bloat the saved graph,
  while an op that maps a big constant to a result of its size (a frozen
  convolution weight scaled by a folded batch norm) still folds: its input
  is dropped when nothing else reads it;
- an output is a graph output or a state update: the run would otherwise
  return (or bind a variable to) the same constant tensor every time, which a
  caller mutating its result in place would corrupt;
- evaluating it fails (no host kernel, an error the run should report, a dtype
  NumPy cannot hold without ``ml_dtypes``): the error then surfaces at run
  time, with the graph's op name.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import _C
from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.build import (attrs_tuple, constant_nbytes, schema, tensor_from_proto,
                                     tensor_to_proto)
from dragon_core._graph.passes import register_pass
from dragon_core._graph.passes.prune import _drop_unused_constants, _keep_only

FOLD_LIMIT_BYTES = 1 << 20


def _bytes(info) -> int:
    numel = int(np.prod(info.shape, dtype=np.int64)) if len(info.shape) else 1
    return numel * as_dtype(info.dtype).itemsize


def _fold_limit(op, consts: dict) -> int:
    """The most bytes an output of ``op`` may have to be folded: the larger
    of FOLD_LIMIT_BYTES and the biggest constant it reads."""
    return max([FOLD_LIMIT_BYTES] + [constant_nbytes(consts[n]) for n in op.input])


def _too_big(op, infos: dict, consts: dict) -> bool:
    """Whether an output of ``op`` exceeds :func:`_fold_limit` according to
    ``value_info`` (or has no known size)."""
    limit = _fold_limit(op, consts)
    for name in op.output:
        info = infos.get(name)
        if info is None or _bytes(info) > limit:
            return True
    return False


def _evaluate(op, desc: dict, values: dict, device=None) -> list:
    """Run ``op`` on the constant tensors ``values``; returns its outputs.
    ``device``: where an op without inputs runs (the plan runs those on its
    first input's device, the graph's ``device`` metadata)."""
    ins = desc["inputs"]
    flat = [values[n] for n in op.input]
    n_fixed = sum(1 for i in ins if not i["variadic"])
    args, pos = [], 0
    for spec in ins:
        if spec["variadic"]:
            count = len(flat) - n_fixed
            args.append(flat[pos:pos + count])
            pos += count
        elif pos < len(flat):
            args.append(flat[pos])
            pos += 1
        else:
            args.append(None)  # an optional input left out
    with dg.no_grad():
        out = _C.call(_C.op(op.type), tuple(args), attrs_tuple(op.type, op),
                      device if not flat else None)
    return list(out) if isinstance(out, (list, tuple)) else [out]


@register_pass("constant_fold", level=1)
def constant_fold(graph):
    """Replace the ops computable from constants alone by their results.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph where the folded ops' outputs are constants.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    consts = {c.name: c for c in new.constant}
    infos = {v.name: v for v in new.value_info}
    pinned = set(new.output) | set(new.state_update)
    device = new.metadata.get("device") or None
    values: dict = {}
    folded = set()
    for k, op in enumerate(new.op):
        if not all(n in consts for n in op.input) or pinned.intersection(op.output):
            continue
        try:
            desc = schema(op.type)
        except Exception:  # noqa: BLE001 - an op type this process lacks: leave it
            continue
        if desc["stateful"] or _too_big(op, infos, consts):
            continue
        try:
            for n in op.input:
                if n not in values:
                    values[n] = tensor_from_proto(consts[n])
            results = _evaluate(op, desc, values, device)
            if len(results) != len(op.output):
                continue
            protos = [tensor_to_proto(name, t) for name, t in zip(op.output, results)]
        except Exception:  # noqa: BLE001 - the run reports it, with context
            continue
        limit = _fold_limit(op, consts)
        if any(len(p.data) > limit for p in protos):
            continue
        for name, t, proto in zip(op.output, results, protos):
            values[name] = t
            consts[name] = proto
            new.constant.append(proto)
            info = infos[name]
            info.dtype = proto.dtype
            del info.shape[:]
            info.shape.extend(proto.shape)
        folded.add(k)
    if not folded:
        return new
    index = iter(range(len(new.op)))
    _keep_only(new.op, lambda op: next(index) not in folded)
    _drop_unused_constants(new)
    return new
