"""Cast fusion: a narrowing ``Cast`` joins the element-wise op that feeds it.

Under bfloat16 autocast the training step casts several float32 element-wise
results down for the next matmul: the bias add of Q, K and V, the MLP's GELU,
the scaled softmax gradient (issue 21; docs/benchmarks.md). Each such
producer writes a float32 tensor that only the Cast reads back. This pass
turns ``Cast(y, dtype)`` over ``y = op(...)`` into one
``FusedElementwiseCast`` op that runs the producer's program in float32 and
stores only the rounded result: the float32 tensor is neither written nor
read back (8 bytes an element less traffic), and one op less runs.

It fires when

- the Cast converts float32 (or float64) to bfloat16 or float16;
- its input ``y`` is the only output of a ``FusedElementwise`` op of that
  dtype, or of a single fusable element-wise op (the ops the ``fusion`` pass
  fuses: ``Add``, ``Mul``, ``Gelu``, ...; one instruction then) whose inputs
  and output have that dtype in ``value_info``;
- the Cast is ``y``'s only reader, and ``y`` is not a graph output, a state
  update or a state target;
- a ``FusedElementwiseCast`` kernel for the inputs' dtype exists on the
  graph's device (``metadata["device"]``; the pass leaves other graphs
  alone, so a device without the kernel never sees the op).

The new op takes the producer's place (its inputs were ready there; every
reader of the Cast's output comes after the Cast, so after it too) and
writes the Cast's output name, whose ``value_info`` is kept; ``y``'s entry
is dropped. Its ``_fused_ops`` annotation lists the ops it replaces.
Results are bit for bit those of the two ops: the program is the producer's
(FusedElementwise's kernel computes each instruction with the table the
unfused op uses), and the cpu_eigen kernel rounds the result with the Cast
kernel's own conversion (nearest, ties to even). Runs after ``fusion`` (so
that a whole fused chain and its Cast become one op) and recomputes the
``_inplace_input`` annotations when the graph has them, as ``fusion`` does.
Sub-graphs of control-flow ops are not visited.
"""

from __future__ import annotations

from dragon_core import _C
from dragon_core import proto as P
from dragon_core._graph.passes import device_type, kernel_dtypes, register_pass
from dragon_core._graph.passes.fusion import (ANNOTATION, BINARY, FUSED, _fuse, _Graph,
                                              _opcode)
from dragon_core._graph.passes.prune import _drop_value_info, _keep_only

OP = "FusedElementwiseCast"

_F16, _BF16, _F32, _F64 = 6, 7, 8, 9  # DgDType codes (dragon/plugin.h)
_WIDE = {_F32: "float32", _F64: "float64"}
_NARROW = {_F16, _BF16}


def _provider() -> tuple:
    """(plugin, version, dist) of the FusedElementwiseCast schema."""
    plugin = _C.op(OP).describe()["plugin"]
    for rec in _C.plugins():
        if rec["name"] == plugin:
            return plugin, rec["version"], rec["dist"]
    return plugin, "", ""


def _cast_target(op) -> int | None:
    """The dtype code a Cast converts to (None when it has no ``dtype``)."""
    if "dtype" not in op.attr:
        return None
    return int(op.attr["dtype"].dtype) if op.attr["dtype"].HasField("dtype") else None


@register_pass("cast_fuse", level=3)
def cast_fuse(graph):
    """Merge each narrowing Cast into the element-wise op that feeds it.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph (an unchanged copy when nothing qualifies or no
        ``FusedElementwiseCast`` kernel exists on the graph's device).
    """
    new = P.GraphDef()
    new.CopyFrom(graph)
    dtypes = kernel_dtypes(OP, device_type(graph))
    if not dtypes:
        return new
    wide = {code for code, name in _WIDE.items() if name in dtypes}
    index = _Graph(graph, {_WIDE[c] for c in wide})
    info = index.info
    used_names = {op.name for op in graph.op}
    provider = None
    replaced, removed, dropped, folded = {}, set(), set(), set()
    for kc, cast in enumerate(graph.op):
        if cast.type != "Cast" or len(cast.input) != 1 or len(cast.output) != 1:
            continue
        to = _cast_target(cast)
        y = cast.input[0]
        if to not in _NARROW or y not in info or info[y][0] not in wide:
            continue
        if cast.output[0] not in info or info[cast.output[0]][0] != to:
            continue
        p = index.producer.get(y)
        if (p is None or p in replaced or p in removed or y in index.pinned
                or index.readers.get(y) != [kc]):
            continue
        prod = graph.op[p]
        if len(prod.output) != 1:
            continue
        if provider is None:
            provider = _provider()
        name, i = f"{OP}_{p}", 0
        while name in used_names:
            i += 1
            name = f"{OP}_{p}_{i}"
        if prod.type == FUSED:
            names = list(prod.input) + [y]
            if {info[n][0] if n in info else None for n in names} != {info[y][0]}:
                continue
            fused = P.OpDef(name=name, type=OP, input=list(prod.input), output=[y])
            for key in ("program", "constants", "result"):
                if key in prod.attr:
                    fused.attr[key].CopyFrom(prod.attr[key])
            members = prod.attr[ANNOTATION].s if ANNOTATION in prod.attr else prod.name
            fused.attr[ANNOTATION].s = f"{members},{cast.name}"
            fused.plugin, fused.plugin_version, fused.plugin_dist = provider
            made_folded = set()
        elif index.fusable.get(p) == info[y][0] and _opcode(prod) is not None:
            expected = 2 if prod.type in BINARY else 1
            if len(prod.input) != expected:
                continue
            made = _fuse(index, [p], name, provider)
            if made is None:
                continue
            fused, _internal, made_folded = made
            fused.type = OP
            fused.attr[ANNOTATION].s = f"{prod.name},{cast.name}"
        else:
            continue
        del fused.output[:]
        fused.output.append(cast.output[0])
        fused.attr["dtype"].dtype = to
        used_names.add(name)
        replaced[p] = fused
        removed.add(kc)
        dropped.add(y)
        folded |= made_folded
    if not replaced:
        return new
    del new.op[:]
    for k, op in enumerate(graph.op):
        if k in replaced:
            new.op.append(replaced[k])
        elif k not in removed:
            new.op.append(op)
    read = set(new.output) | set(new.state_update)
    for op in new.op:
        read.update(op.input)
    gone = folded - read
    if gone:
        _keep_only(new.constant, lambda c: c.name in read or c.name not in gone)
    _drop_value_info(new, dropped | gone)
    if any("_inplace_input" in op.attr for op in graph.op):
        from dragon_core._graph.passes.inplace import inplace
        new = inplace(new)
    return new
