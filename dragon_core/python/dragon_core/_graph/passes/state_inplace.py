"""In-place optimizer updates: let the update op write a variable's storage.

A compiled training step feeds each captured variable (a parameter, an
optimizer moment) to the update op (``MultiAdamUpdate``, ...) and rebinds
the variable to the op's output after the run, so without this pass p, m
and v move to fresh buffers at every step (ping-pong) and the update writes
memory it then has to read for ownership. This pass marks the op so that the
executor may hand it the variable's own storage as the output
(``ANNOTATION``, ``_state_inplace``: an int list of (output, input) index
pairs).

A pair (output ``j``, input ``i``) is annotated when:

- the op type is in ``_PAIRS`` (its kernels read every element of input
  ``i`` before writing the same element of output ``j``, so the output may
  be the input's buffer: true of cpu_eigen's and cuda's kernels);
- input ``i`` is a captured tensor (a variable fed at every run), read only
  once by this op, not a graph output, and no view of it is a graph output;
- output ``j`` is the state update of exactly that variable (the graph
  rebinds it to output ``j``) and of no other, and is not a graph output.

At most one op per graph is annotated, and it is moved to the end of the
graph (legal: no op reads its outputs, which is required): a run that fails
in any other op has then written nothing in place, so, as without this
pass, a failed step leaves every variable as it was. The op itself checks
its inputs before it writes. Ops reading the old value of the variable (or a
view of it) now all run before the update.

The executor (``Plan::RunSequential``) still decides at every run, and
writes in place only when nobody else can see the storage: the fed tensor
is dense and alone on its storage (no view, no NumPy array or DLPack export
of it, not external or read-only memory). Otherwise the op writes a fresh
buffer, as before. So what a caller observes is unchanged: the variable
object holds the new value after the run, as ``assign`` gives it, and a
view, a NumPy array or a returned tensor taken before the run keeps the
old value (see docs/graph.md, "In-place optimizer updates").

The pass recomputes its annotation from scratch, so running it twice
changes nothing but the position of an already moved op (already last).
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._graph.passes import register_pass, view_roots

ANNOTATION = "_state_inplace"


def _multi(roles_in: tuple, first: int, per_param: int):
    """Pairs of a multi-tensor update: inputs ``first + r * n + k`` (``n``
    parameters, ``per_param`` inputs each after ``first``), outputs
    ``q * n + k`` for output role ``q`` reading input role ``roles_in[q]``."""
    def pairs(op) -> list:
        total = len(op.input) - first
        if total <= 0 or total % per_param:
            return []
        n = total // per_param
        if len(op.output) != n * len(roles_in):
            return []
        return [(q * n + k, first + r * n + k)
                for q, r in enumerate(roles_in) for k in range(n)]
    return pairs


def _single(table: tuple):
    def pairs(op) -> list:
        return [(j, i) for j, i in table if j < len(op.output) and i < len(op.input)]
    return pairs


# op type -> (op -> [(output, input)]): the outputs that may be written over
# the inputs (the new param over the param, the new moments over theirs).
_PAIRS = {
    # lr, params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps
    "MultiAdamUpdate": _multi((0, 2, 3, 4), 1, 6),
    # lr, params, grads, momentum_bufs
    "MultiSgdUpdate": _multi((0, 2), 1, 3),
    # param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, lr, step
    "AdamUpdate": _single(((0, 0), (1, 2), (2, 3), (3, 4))),
    # param, grad, momentum_buf, lr
    "SgdUpdate": _single(((0, 0), (1, 2))),
}


def _eligible(graph, k: int, op, target_of: dict, captured: set, outputs: set,
              returned_roots: set) -> list:
    """The (output, input) pairs of op ``k`` that may be written in place."""
    pairs_of = _PAIRS.get(op.type)
    if pairs_of is None:
        return []
    produced = set(op.output)
    for later in graph.op[k + 1:]:
        if produced.intersection(later.input):
            return []      # cannot move to the end
    inputs = list(op.input)
    out = []
    for j, i in pairs_of(op):
        src, dst = inputs[i], op.output[j]
        if (src not in captured or target_of.get(dst) != src or inputs.count(src) != 1
                or src in outputs or dst in outputs or src in returned_roots):
            continue
        out.append((j, i))
    return out


@register_pass("state_inplace", level=2)
def state_inplace(graph):
    """Annotate (and move last) the optimizer update that may write its
    variables' storage in place.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph: the same ops, with at most one carrying
        ``_state_inplace``, which is then the last op.
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    for op in new.op:
        if ANNOTATION in op.attr:
            del op.attr[ANNOTATION]
    if not new.state_update or not any(op.type in _PAIRS for op in new.op):
        return new
    counts: dict = {}
    for upd in new.state_update:
        counts[upd] = counts.get(upd, 0) + 1
    target_of = {upd: tgt for tgt, upd in zip(new.state_target, new.state_update)
                 if counts[upd] == 1}
    captured = set(new.captured)
    outputs = set(new.output)
    roots = view_roots(new)
    # Captured tensors a graph output is a view of (the caller would hold
    # the old storage).
    returned_roots = {roots[o] for o in outputs if o in roots}
    best, best_k, best_pairs = -1, -1, []
    sizes = {v.name: v for v in new.value_info}
    for k, op in enumerate(new.op):
        pairs = _eligible(new, k, op, target_of, captured, outputs, returned_roots)
        if not pairs:
            continue
        # The op with the most elements in place wins (usually the only one).
        weight = 0
        for _, i in pairs:
            info = sizes.get(op.input[i])
            numel = 1
            for d in (info.shape if info is not None else ()):
                numel *= int(d)
            weight += numel
        if weight > best:
            best, best_k, best_pairs = weight, k, pairs
    if best_k < 0:
        return new
    chosen = P.OpDef()
    chosen.CopyFrom(new.op[best_k])
    chosen.attr[ANNOTATION].ints.values.extend([x for pair in best_pairs for x in pair])
    ops = [P.OpDef() for _ in range(len(new.op) - 1)]
    rest = [op for k, op in enumerate(new.op) if k != best_k]
    for dst, src in zip(ops, rest):
        dst.CopyFrom(src)
    del new.op[:]
    new.op.extend(ops)
    new.op.append(chosen)
    return new
