"""Linear epilogue: a mixed-precision Linear layer's bias, and the residual
added after it, inside its product.

Under bfloat16 autocast a Linear layer records its product in float32 and
adds the bias after it::

    m = MatMul(a, w; out_dtype=float32)      # a, w: bfloat16, 2-D
    r = [Reshape(m)]                         # back to the input's batch axes
    s = Add(r, bias)                         # bias: float32 [n_out]
    y = Cast(s, bfloat16)                    # the next product's operand, or
    z = Add(s, residual)                     # a residual connection (float32)

Each of ``m``, ``s`` is a float32 tensor written by one op and read back by
the next (a 1024 x 256 block: ~30 µs for the Add and the Cast of each of
attention's q, k and v, ~80 µs for the bias and residual of each sublayer
of the encoder step, issue 21). This pass writes one op instead::

    y = MatMulBiasAdd(a, w, bias; dtype=bfloat16, shape=r's shape)
    z = MatMulBiasAdd(a, w, bias, residual; dtype=float32, shape=r's shape)

(dragon_core/src/ops/matmul_bias_add.cc): the bias and the residual are
added to the float32 sums in the product's epilogue, in the order of the
Adds, and a bfloat16 ``y`` is rounded once as the Cast rounds: the same
bits (cpu_eigen's kernel; tests/graph/test_linear_epilogue.py).

A chain is rewritten only where every condition holds (else the graph is
left as it is):

- the MatMul has 2-D operands of one 16-bit dtype with a kernel for
  ``MatMulBiasAdd`` on every device type of the graph
  (``passes.device_types``; cpu_eigen registers it only where its
  AVX512-BF16 GEMM runs), and ``out_dtype=float32``;
- ``m``, the Reshape's output and ``s`` each have exactly one reader (the
  next op of the chain) and are neither graph outputs nor state updates;
  the Reshape keeps the last axis (the bias runs along the product's
  columns);
- the Add adds a float32 ``bias`` of shape ``[m.shape[-1]]`` (either
  operand order);
- ``s``'s one reader is a Cast to the operands' dtype, or an Add of a
  float32 ``residual`` of ``s``'s shape (either order) writing float32.

Other bias Adds stay: one read by a Gelu belongs to ``gelu_fusion`` (which
runs before), one read by anything else is left to the element-wise
fusion. The fused op takes the place of the chain's last op (every input
exists there: ``a``, ``w`` and ``bias`` come before the MatMul, the residual
before the last Add) and writes that op's output under its name, so its
readers and ``value_info`` are kept; ``m``, ``r`` and ``s`` lose theirs. It
carries ``_fused_ops`` and ``_fusion_pattern = "linear_epilogue"`` as
pattern fusion's ops do. Sub-graphs of control-flow ops are not visited.
"""

from __future__ import annotations

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.passes import device_types, kernel_dtypes, register_pass, value_index
from dragon_core._graph.passes._rewrite import fresh_namer, readers as _readers, rewrite
from dragon_core._graph.passes._rewrite import value_dtype as _dtype, value_shape as _shape

PATTERN = "linear_epilogue"
_F32 = "float32"
_LOW = ("bfloat16", "float16")


def _only_reader(readers, pinned, name):
    """The index of the one op reading ``name`` once, else None (also for a
    pinned value: a graph output or a state update)."""
    rs = readers.get(name, [])
    if name in pinned or len(rs) != 1:
        return None
    return rs[0][0]


def _attrs(op) -> list:
    """The op's attributes, annotations (names starting with "_") aside."""
    return [n for n in op.attr if not n.startswith("_")]


def _out_dtype(op) -> str | None:
    if "out_dtype" not in op.attr or op.attr["out_dtype"].WhichOneof("value") != "dtype":
        return None
    return as_dtype(op.attr["out_dtype"].dtype).name


def _bias_add(op, info, x):
    """The bias of an Add of ``x`` and a float32 ``[x.shape[-1]]`` vector
    writing x's shape in float32, else None."""
    if op.type != "Add" or len(op.input) != 2 or len(op.output) != 1 or _attrs(op):
        return None
    shape = _shape(info, x)
    other = op.input[1] if op.input[0] == x else op.input[0] if op.input[1] == x else None
    if other is None or other == x or shape is None or not shape:
        return None
    if (_shape(info, other) != (shape[-1],) or _dtype(info, other) != _F32
            or _dtype(info, op.output[0]) != _F32 or _shape(info, op.output[0]) != shape):
        return None
    return other


def _match(graph, info, readers, pinned, k, dtypes):
    """``(last op index, [dropped op indices], [dropped values], fused OpDef
    parts)`` for the chain starting at MatMul ``k``, else None."""
    mm = graph.op[k]
    if mm.type != "MatMul" or len(mm.input) != 2 or len(mm.output) != 1:
        return None
    a, b = mm.input
    low = _dtype(info, a)
    if (low not in _LOW or low not in dtypes or _dtype(info, b) != low
            or _out_dtype(mm) != _F32 or len(_shape(info, a) or ()) != 2
            or len(_shape(info, b) or ()) != 2):
        return None
    chain, values = [], []

    def take(i):
        """Op ``i`` joins the chain: its output and that output's one reader."""
        chain.append(i)
        values.append(graph.op[i].output[0])
        return values[-1], _only_reader(readers, pinned, values[-1])

    x, j = take(k)
    if j is not None and graph.op[j].type == "Reshape" and len(graph.op[j].input) == 1:
        x, j = take(j)
        # the bias runs along the product's columns: a Reshape that splits
        # or merges the last axis would put it along another axis
        if (_shape(info, x) or (None,))[-1] != (_shape(info, mm.output[0]) or (None,))[-1]:
            return None
    bias = None if j is None else _bias_add(graph.op[j], info, x)
    if bias is None:
        return None
    s, t = take(j)
    if t is None:
        return None
    last = graph.op[t]
    shape = _shape(info, x)
    if last.type == "Cast":
        if (len(last.output) != 1 or "dtype" not in last.attr
                or as_dtype(last.attr["dtype"].dtype).name != low):
            return None
        inputs, out_dtype = [a, b, bias], low
    elif (last.type == "Add" and len(last.input) == 2 and len(last.output) == 1
          and not _attrs(last)):
        res = last.input[1] if last.input[0] == s else last.input[0]
        if (res == s or _dtype(info, res) != _F32 or _shape(info, res) != shape
                or _dtype(info, last.output[0]) != _F32
                or _shape(info, last.output[0]) != shape):
            return None
        inputs, out_dtype = [a, b, bias, res], _F32
    else:
        return None
    return t, chain, values, (inputs, out_dtype, shape)


@register_pass("linear_epilogue", level=3)
def linear_epilogue(graph):
    """Fuse ``MatMul(float32 out) -> [Reshape] -> Add(bias) -> Cast | Add(residual)``.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``MatMulBiasAdd`` in place of each matching chain
        (see the module docs), or ``graph`` itself when none matches.
    """
    devices = device_types(graph)
    dtypes = set(_LOW)
    for d in devices:
        dtypes &= kernel_dtypes("MatMulBiasAdd", d)
    if not dtypes:
        return graph            # no kernel here (no AVX512-BF16, another device)
    info = {v.name: v for v in graph.value_info}
    pinned, _, _ = value_index(graph)
    readers = _readers(graph)
    fresh = fresh_namer(graph)
    replace: dict = {}
    drop_ops, drop_info = set(), set()
    for k, op in enumerate(graph.op):
        if op.type != "MatMul":
            continue
        found = _match(graph, info, readers, pinned, k, dtypes)
        if found is None:
            continue
        t, chain, values, (inputs, out_dtype, shape) = found
        last = graph.op[t]
        mm = graph.op[k]
        new = P.OpDef(name=fresh(f"{mm.name}/bias_add"), type="MatMulBiasAdd",
                      input=inputs, output=[last.output[0]], plugin=mm.plugin,
                      plugin_version=mm.plugin_version, plugin_dist=mm.plugin_dist)
        for flag in ("transpose_a", "transpose_b"):
            new.attr[flag].CopyFrom(P.AttrValue(b=bool(mm.attr[flag].b) if flag in mm.attr
                                                else False))
        new.attr["dtype"].CopyFrom(P.AttrValue(dtype=as_dtype(out_dtype).code))
        new.attr["shape"].CopyFrom(P.AttrValue(ints=P.IntList(values=list(shape))))
        names = [graph.op[i].name for i in chain] + [last.name]
        new.attr["_fused_ops"].CopyFrom(P.AttrValue(s=",".join(names)))
        new.attr["_fusion_pattern"].CopyFrom(P.AttrValue(s=PATTERN))
        replace[t] = new
        drop_ops.update(chain)
        drop_info.update(values)
    if not replace:
        return graph
    return rewrite(graph, replace, drop_ops, drop_info)
