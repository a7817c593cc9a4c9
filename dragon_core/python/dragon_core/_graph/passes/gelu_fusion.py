"""GELU fusion: the GELU block of a Linear layer as two fused ops.

A Linear layer followed by GELU, differentiated, leaves this in the graph
(the float32 product of a bfloat16-autocast matmul, say)::

    a  = Add(x, bias)                   # bias: [N] along x's last axis
    y  = Gelu(a)          -> [Cast(to=bfloat16 / float16)] -> next matmul
    g  = GeluGrad(a, dy)  -> Sum(axes = every axis but the last)  (dbias)
                          -> [Cast(to=bfloat16 / float16)]  -> dx's matmuls

Element-wise, these are passes over 4-byte tensors written and read again
(a 1024 x 1024 block: ~0.9 ms of the bfloat16 encoder step, issue 21).
This pass rewrites them into::

    y, a       = BiasGelu(x, bias; dtype)          # dtype: the Cast's
    g', dbias  = BiasGeluGrad(a, dy; dtype)        # dbias: the Sum's output

(dragon_core/src/ops/fused_act.cc): each Cast is folded into the op that
feeds it, so the float32 ``y`` and ``g`` are never written, nor read again
by the Cast and the Sum. ``a`` (the pre-activation) is still written by the
forward, for the backward to read (recomputing it there from x and bias
was slower, docs/benchmarks.md). The fused kernels compute the same bits
as the ops they replace (cpu_eigen: the same float32 add, gelu and gelu'
code, one rounding to 16 bits, and Sum's summation order for dbias).

The two halves are matched independently, each only where all its
preconditions hold (otherwise the graph is left as it is):

- forward: an ``Add`` of float32 ``x`` (rank >= 2) and ``bias`` of shape
  ``[x.shape[-1]]`` (either operand order) writing x's shape, read by
  exactly one ``Gelu`` (other readers of ``a`` keep reading it); the Gelu's
  output ``y``, if its only reader is a ``Cast`` to float16 / bfloat16 and
  it is not a graph output, is written in that dtype under the Cast's name
  (else in float32 under ``y``);
- backward: a float32 ``GeluGrad(a, dy)`` of rank >= 2 whose output ``g``
  is not a graph output and is read by exactly one ``Sum`` over every axis
  but the last (``keepdims`` either way, axes possibly negative); its other
  readers, if they are a single Cast to float16 / bfloat16, fold (else the
  fused op writes float32 ``g`` under its own name);
- backward through a view (the float32 step, whose Linear adds its bias
  inside the 2-D product, so the GELU runs on the batch's axes): ``g``'s
  only reader is a row-major view op (``Reshape``; never a strided view
  such as ``Transpose``, which may move the axes) that keeps the last axis,
  is not pinned, and is read by exactly one such ``Sum`` (its other readers, the
  next products, keep reading the view). The fused op writes float32 ``g``
  under its name and ``dbias`` as ``[N]`` under a fresh name, and a
  ``Reshape`` of it to the Sum's shape takes the Sum's place (a view).
  Inside the float32 encoder step GeluGrad and Sum took 284 + 60 µs, the
  fused op 346 (docs/benchmarks.md, session 23): one op and one read of
  the 4 MiB gradient fewer, the same time within the noise.

**The forward half runs only where a 16-bit Cast follows** (the
mixed-precision step; :data:`FUSE_FORWARD_CAST`). Since session 17 the
kernel adds the bias inside the gelu's packet loop (eagerly, 1024 x 1024, 2
threads: 265 µs against 431 before, Gelu alone 254); inside the quiet
bfloat16 encoder step (per-op minima) it took 396-412 µs against 419-425
for the ``Add``, ``Gelu`` and ``Cast`` it replaces, but in the float32 step
365-406 against 335-350 for ``Add`` and ``Gelu``, so a float32 output is
left unfused unless :data:`FUSE_FORWARD` is set. The backward half runs
everywhere.

Each half runs only where its op has a float32 kernel on the graph's device
(every device type of the graph's fed tensors, ``passes.device_types``;
cpu_eigen's, on the host). Graph outputs, state
updates and state targets are never removed or renamed. Each fused op takes the place of the op it starts from
(``BiasGelu`` the Add's, ``BiasGeluGrad`` the GeluGrad's): its inputs exist
there and every reader of its outputs comes later. Kept names keep their
``value_info``; removed ones lose it. Sub-graphs of control-flow ops are not
visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import (device_types, is_view_op, kernel_dtypes, register_pass,
                                      value_index)
from dragon_core._graph.passes._rewrite import fresh_namer, readers as _readers, rewrite
from dragon_core._graph.passes._rewrite import value_dtype as _dtype, value_shape as _shape

_F32 = "float32"
_LOW = ("bfloat16", "float16")


def _approximate(op) -> str:
    return op.attr["approximate"].s if "approximate" in op.attr else "none"


def _low_cast(op, info):
    """The 16-bit dtype a float32 -> float16/bfloat16 Cast writes, else None."""
    if op.type != "Cast" or len(op.input) != 1 or len(op.output) != 1 or "dtype" not in op.attr:
        return None
    to = as_dtype(op.attr["dtype"].dtype).name
    return to if to in _LOW and _dtype(info, op.input[0]) == _F32 else None


def _sink(graph, info, readers, pinned, name):
    """Where a float32 value ``name`` (Gelu's or GeluGrad's output) can be
    written: ``(dtype, output name, cast op index or None)``. A single Cast
    reader to 16 bits folds (the fused op writes the Cast's output); else
    float32 under ``name`` itself."""
    rs = readers.get(name, [])
    if len(rs) == 1 and name not in pinned:
        k = rs[0][0]
        to = _low_cast(graph.op[k], info)
        if to is not None:
            return to, graph.op[k].output[0], k
    return _F32, name, None


def _attr_dtype(name):
    return P.AttrValue(dtype=as_dtype(name).code)


def _new_op(template, name, op_type, inputs, outputs):
    op = P.OpDef(name=name, type=op_type, input=list(inputs), output=list(outputs),
                 plugin=template.plugin, plugin_version=template.plugin_version,
                 plugin_dist=template.plugin_dist)
    return op


def _match_sum(op, rank) -> bool:
    if op.type != "Sum" or len(op.input) != 1 or len(op.output) != 1 or "axes" not in op.attr:
        return False
    if set(op.attr) - {"axes", "keepdims"}:
        return False
    axes = {a + rank if a < 0 else a for a in op.attr["axes"].ints.values}
    return len(op.attr["axes"].ints.values) == rank - 1 and axes == set(range(rank - 1))


#: Whether the forward half (``BiasGelu``) runs everywhere; off: in the
#: float32 encoder step the fused op measured slower than its parts (module
#: docs).
FUSE_FORWARD = False
#: Whether the forward half runs where the Gelu's output is only cast to
#: float16 / bfloat16 (the mixed-precision step: the cast goes too).
FUSE_FORWARD_CAST = True


@register_pass("gelu_fusion", level=3)
def gelu_fusion(graph):
    """Fuse ``Add(bias) -> Gelu -> [Cast]`` and ``GeluGrad -> Sum & [Cast]``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``BiasGelu`` / ``BiasGeluGrad`` in place of each
        matching chain (see the module docs), or ``graph`` itself when none
        matches.
    """
    devices = device_types(graph)
    fwd_ok = ((FUSE_FORWARD or FUSE_FORWARD_CAST)
              and all(_F32 in kernel_dtypes("BiasGelu", d) for d in devices))
    bwd_ok = all(_F32 in kernel_dtypes("BiasGeluGrad", d) for d in devices)
    if not (fwd_ok or bwd_ok):
        return graph            # no kernels on this device (cuda, say)
    info = {v.name: v for v in graph.value_info}
    pinned, _, _ = value_index(graph)
    readers = _readers(graph)
    replace: dict = {}          # op index -> new OpDef
    moved: dict = {}            # Sum index -> the Reshape taking its place
    added: list = []            # (new dbias value, N)
    drop_ops, drop_info = set(), set()
    fresh = fresh_namer(graph)

    for k, op in enumerate(graph.op):
        if op.type == "Add" and fwd_ok:
            found = _match_forward(graph, info, readers, k)
            if found is None:
                continue
            x, bias, j = found
            gelu = graph.op[j]
            y_dtype, y_name, y_cast = _sink(graph, info, readers, pinned, gelu.output[0])
            if y_cast is None and not FUSE_FORWARD:
                continue
            new = _new_op(gelu, fresh(f"{gelu.name}/bias_gelu"), "BiasGelu", [x, bias],
                          [y_name, op.output[0]])
            new.attr["approximate"].CopyFrom(P.AttrValue(s=_approximate(gelu)))
            new.attr["dtype"].CopyFrom(_attr_dtype(y_dtype))
            replace[k] = new
            drop_ops.add(j)
            if y_cast is not None:
                drop_ops.add(y_cast)
                drop_info.add(gelu.output[0])
        elif op.type == "GeluGrad" and bwd_ok:
            found = _match_backward(graph, info, readers, pinned, k)
            if found is None:
                found = _match_backward_view(graph, info, readers, pinned, k)
                if found is None:
                    continue
                s, db_shape = found
                sm = graph.op[s]
                # The fused op writes dbias as [N] under a fresh name; the
                # Sum becomes a Reshape of it to the Sum's own shape (a view).
                db = fresh(f"{sm.output[0]}/bias_gelu_grad")
                new = _new_op(op, fresh(f"{op.name}/bias_gelu_grad"), "BiasGeluGrad",
                              [op.input[0], op.input[1]], [op.output[0], db])
                new.attr["approximate"].CopyFrom(P.AttrValue(s=_approximate(op)))
                new.attr["dtype"].CopyFrom(_attr_dtype(_F32))
                new.attr["keepdims"].CopyFrom(P.AttrValue(b=False))
                replace[k] = new
                view = _new_op(sm, fresh(f"{sm.name}/view"), "Reshape",
                               [db], [sm.output[0]])
                view.attr["shape"].CopyFrom(P.AttrValue(ints=P.IntList(values=list(db_shape))))
                moved[s] = view
                added.append((db, db_shape[-1]))
                continue
            s = found
            sm = graph.op[s]
            dx_dtype, dx_name, dx_cast = _F32, op.output[0], None
            others = [j for j, _ in readers.get(op.output[0], []) if j != s]
            if len(others) == 1:
                to = _low_cast(graph.op[others[0]], info)
                if to is not None:
                    dx_dtype, dx_name, dx_cast = to, graph.op[others[0]].output[0], others[0]
            keep = bool(sm.attr["keepdims"].b) if "keepdims" in sm.attr else False
            new = _new_op(op, fresh(f"{op.name}/bias_gelu_grad"), "BiasGeluGrad",
                          [op.input[0], op.input[1]], [dx_name, sm.output[0]])
            new.attr["approximate"].CopyFrom(P.AttrValue(s=_approximate(op)))
            new.attr["dtype"].CopyFrom(_attr_dtype(dx_dtype))
            new.attr["keepdims"].CopyFrom(P.AttrValue(b=keep))
            replace[k] = new
            drop_ops.add(s)
            if dx_cast is not None:
                drop_ops.add(dx_cast)
                drop_info.add(op.output[0])
    if not replace:
        return graph
    new_graph = rewrite(graph, {**replace, **moved}, drop_ops, drop_info)
    for name, n in added:
        new_graph.value_info.add(name=name, dtype=as_dtype(_F32).code, shape=[n])
    return new_graph


def _match_forward(graph, info, readers, k):
    """``(x, bias, gelu index)`` where op ``k`` is a bias Add read by one
    Gelu (and possibly other ops), else None. Rank 1 is not a bias add (two
    vectors of one shape): the element-wise fusion keeps such a chain in
    its group (the composed GeLU gradient of tests/grad)."""
    add = graph.op[k]
    if len(add.input) != 2 or len(add.output) != 1:
        return None
    a = add.output[0]
    shape = _shape(info, a)
    if _dtype(info, a) != _F32 or shape is None or len(shape) < 2:
        return None             # rank 1: an add of two vectors, left to `fusion`
    for i in (0, 1):
        u, v = add.input[i], add.input[1 - i]
        if (u != v and _shape(info, u) == shape and _shape(info, v) == (shape[-1],)
                and _dtype(info, u) == _F32 and _dtype(info, v) == _F32):
            break
    else:
        return None
    gelus = [j for j, pos in readers.get(a, []) if graph.op[j].type == "Gelu"]
    if len(gelus) != 1 or len(graph.op[gelus[0]].input) != 1 \
            or len(graph.op[gelus[0]].output) != 1:
        return None
    return u, v, gelus[0]


def _grad_output(graph, info, pinned, k):
    """``(g, shape)`` of GeluGrad ``k`` when it is float32 of rank >= 2 with
    x, dy and g of one shape and g not pinned (both backward matches need
    that), else None."""
    gg = graph.op[k]
    if len(gg.input) != 2 or len(gg.output) != 1:
        return None
    x, dy, g = gg.input[0], gg.input[1], gg.output[0]
    shape = _shape(info, x)
    if (shape is None or len(shape) < 2 or g in pinned or _shape(info, dy) != shape
            or _shape(info, g) != shape
            or not _dtype(info, x) == _dtype(info, dy) == _dtype(info, g) == _F32):
        return None
    return g, shape


def _match_backward(graph, info, readers, pinned, k):
    """The index of the bias-gradient Sum reading GeluGrad ``k``'s output,
    where the backward half applies, else None."""
    found = _grad_output(graph, info, pinned, k)
    if found is None:
        return None
    g, shape = found
    rs = readers.get(g, [])
    sums = [j for j, _ in rs if _match_sum(graph.op[j], len(shape))]
    if len(sums) != 1 or sum(j == sums[0] for j, _ in rs) != 1:
        return None
    return sums[0]


def _row_major_view(op_type: str) -> bool:
    """A view op that reads its input in row-major order (Reshape, Flatten,
    Squeeze, ...): keeping the last axis's size, it keeps every column.
    A strided view (Transpose: the ``strided_view`` schema flag) may keep
    the size but move the axes, so a Sum over its leading axes would not
    be the bias sum."""
    from dragon_core import _C
    if not is_view_op(op_type, {}):
        return False
    try:
        return not _C.op(op_type).describe().get("strided_view", False)
    except Exception:  # noqa: BLE001 - an op this process cannot resolve
        return False


def _match_backward_view(graph, info, readers, pinned, k):
    """``(sum index, sum's output shape)`` where GeluGrad ``k``'s float32
    output ``g`` is read only by one view op (a Reshape, say) that keeps its
    last axis, and that view is read by exactly one Sum over every axis but
    the last (the float32 graph, where the Linear's product is 2-D and the
    GELU runs on the batch's axes); else None. The other readers of the view
    (the next products) keep reading it."""
    found = _grad_output(graph, info, pinned, k)
    if found is None:
        return None
    g, shape = found
    rs = readers.get(g, [])
    if len(rs) != 1:
        return None
    j = rs[0][0]
    view = graph.op[j]
    if (len(view.input) != 1 or len(view.output) != 1 or view.output[0] in pinned
            or not _row_major_view(view.type)):
        return None
    vshape = _shape(info, view.output[0])
    if vshape is None or len(vshape) < 2 or vshape[-1] != shape[-1]:
        return None
    vrs = readers.get(view.output[0], [])
    sums = [i for i, _ in vrs if _match_sum(graph.op[i], len(vshape))]
    if len(sums) != 1 or sum(i == sums[0] for i, _ in vrs) != 1:
        return None
    out_shape = _shape(info, graph.op[sums[0]].output[0])
    if out_shape is None or _dtype(info, graph.op[sums[0]].output[0]) != _F32:
        return None
    return sums[0], out_shape
