"""The attention block of a multi-head attention layer as two ops.

An attention layer written with ``matmul`` and ``softmax`` (as most
models and bench/models/bert.py are) differentiates into

    forward:   s  = MatMul(q, kt)             [..., L, S]
               s' = Mul(s, scale)             (optional; scale a scalar constant)
               p  = Softmax(s', axis=-1)
               o  = MatMul(p, v)              [..., L, Ev]
    backward:  dp = MatMul(do, v, transpose_b)
               g  = SoftmaxGrad(p, dp, axis=-1)
               ds = Mul(g, scale)             (when the forward has it)
               dv = MatMul(p, do, transpose_a)
               dq = MatMul(ds, kt, transpose_b)
               dk = MatMul(ds, q, transpose_a)

This pass writes ``p, o = SoftmaxAttention(q, kt, v)`` in place of the
forward and ``dq, dk, dv = SoftmaxAttentionGrad(q, kt, v, p, do)`` in place
of the backward, under the same output names. The kernel (cpu_eigen,
AVX-512) runs each batch item's products and softmax on one thread while
its L x S block is in cache; the unfused ops wrote that block out and read
it back: in the float32 encoder step the scores went to memory and back
five times.

Under bfloat16 autocast the block has bfloat16 operands, ``out_dtype=
float32`` on the score, dp, dv, dq and dk products, and ``Cast(p)`` /
``Cast(ds)`` to bfloat16 before the products that read them; the pass takes
that form as well (the Casts go with it, the one of p only when no reader of
its output is left), fusing only blocks in the AVX512-BF16 GEMM's batch
class (every product >= 64^3 multiply-adds an item, S, E, Ev >= 16).

Invariants: float32 (or the bfloat16 form) throughout; the MatMuls have no ``out_dtype`` and the
flags above; q, kt, v (and do) share one batch shape, with no broadcasting;
L, S, E and Ev lie in [8, 256] and the batch has at least 2 items and as
many as the threads (``_C.NUM_THREADS``): the class where the batched
float32 kernel runs these products unfused, so the fused ops give the same
bits (see src/ops/softmax_attention.cc); s, s', dp, g and ds are read only inside
the pattern and are not pinned (graph outputs, state updates or targets);
the Mul's other operand is a float32 scalar constant and the backward's
scale is the forward's. The backward is fused only together with its
forward (it reads the forward's q, kt and v). Each fused op takes the place
of one of the ops it replaces where every input is already written and no
other reader of its outputs comes before it; where there is none, that
block is left as it is. Runs only when every device type of the graph has
kernels for both ops (the cpu_eigen kernel is registered on x86-64-v4 CPUs
only). Sub-graphs of control-flow ops are not visited.
"""

from __future__ import annotations

import numpy as np

from dragon_core import proto as P
from dragon_core._dtypes import as_dtype
from dragon_core._graph.build import constant_array
from dragon_core._graph.passes import device_types, kernel_dtypes, register_pass, value_index
from dragon_core._graph.passes._rewrite import fresh_namer, readers as _readers, rewrite
from dragon_core._graph.passes._rewrite import value_dtype as _dtype, value_shape as _shape
from dragon_core._graph.passes.prune import _drop_unused_constants

_F32 = "float32"
_BF16 = "bfloat16"
#: bfloat16 blocks: each product's items must be at least this many
#: multiply-adds, every row count >= 4 and column count >= 16 (the
#: AVX512-BF16 GEMM's class for batches, plugins/cpu_eigen/src/matmul_bf16.cc).
BF16_MIN_WORK = 64 * 64 * 64
#: Every side of a batch item (L, S, E, Ev) must lie in this range: the
#: batched float32 kernel's class (plugins/cpu_eigen/src/matmul.cc).
MIN_SIDE, MAX_SIDE = 8, 256


def _min_items() -> int:
    """The fewest batch items worth fusing: as many as the threads (each
    takes whole items), and 2; the batched kernel's own rule for the
    unfused products (plugins/cpu_eigen/src/matmul.cc)."""
    from dragon_core import _C
    return max(2, int(_C.NUM_THREADS))


def _f32_bits(x: float) -> int:
    return int(np.float32(x).view(np.uint32))


def _attrs(op) -> dict:
    """``op``'s attributes without the passes' private ones (``_...``)."""
    return {k: v for k, v in op.attr.items() if not k.startswith("_")}


def _matmul(op, ta: bool, tb: bool, out=None) -> bool:
    """Whether ``op`` is a plain two-operand MatMul with these flags and
    ``out_dtype`` (None: unset, the inputs' dtype)."""
    if op.type != "MatMul" or len(op.input) != 2 or len(op.output) != 1:
        return False
    for key, attr in _attrs(op).items():
        which = attr.WhichOneof("value")
        if key == "out_dtype":
            if out is None and which != "none":
                return False
            if out is not None and (which != "dtype" or as_dtype(attr.dtype).name != out):
                return False
        elif key in ("transpose_a", "transpose_b"):
            if which != "b":
                return False
        else:
            return False
    if out is not None and "out_dtype" not in op.attr:
        return False
    flags = (op.attr["transpose_a"].b if "transpose_a" in op.attr else False,
             op.attr["transpose_b"].b if "transpose_b" in op.attr else False)
    return flags == (ta, tb)


def _bf16_cast(op) -> bool:
    """Whether ``op`` is a Cast to bfloat16."""
    return (op.type == "Cast" and len(op.input) == 1 and len(op.output) == 1
            and set(_attrs(op)) == {"dtype"} and as_dtype(op.attr["dtype"].dtype).name == _BF16)


def _last_axis(op, rank) -> bool:
    if set(_attrs(op)) != {"axis"}:
        return False
    axis = op.attr["axis"].i
    return axis in (-1, rank - 1)


def _scalar(constants, name):
    """The value of a float32 single-element constant, else None."""
    c = constants.get(name)
    if c is None or as_dtype(c.dtype).name != _F32 or int(np.prod(tuple(c.shape))) != 1:
        return None
    try:
        return float(np.asarray(constant_array(c)).reshape(-1)[0])
    except ValueError:          # a borrowed constant whose value is not here
        return None


class _Matcher:
    def __init__(self, graph):
        self.g = graph
        self.info = {v.name: v for v in graph.value_info}
        self.pinned, self.producer, _ = value_index(graph)
        self.readers = _readers(graph)
        self.constants = {c.name: c for c in graph.constant}

    def op_of(self, name):
        k = self.producer.get(name)
        return (k, self.g.op[k]) if k is not None else (None, None)

    def private(self, name, count=1) -> bool:
        """``name`` is read by exactly ``count`` op inputs and not pinned."""
        return name not in self.pinned and len(self.readers.get(name, [])) == count

    def scale_of(self, mul, x):
        """The scalar a ``Mul`` reading ``x`` multiplies it by, else None."""
        if mul.type != "Mul" or len(mul.input) != 2 or len(mul.output) != 1 or _attrs(mul):
            return None
        other = mul.input[1] if mul.input[0] == x else mul.input[0]
        if other == x or x not in mul.input:
            return None
        if _shape(self.info, mul.output[0]) != _shape(self.info, x):
            return None
        return _scalar(self.constants, other)

    def forward(self, k):
        """The forward block around Softmax ``k``: a dict, else None."""
        sm = self.g.op[k]
        if len(sm.input) != 1 or len(sm.output) != 1:
            return None
        x, p = sm.input[0], sm.output[0]
        shape = _shape(self.info, p)
        if shape is None or len(shape) < 2 or not _last_axis(sm, len(shape)):
            return None
        if not self.private(x):
            return None
        j, prod = self.op_of(x)
        if prod is None:
            return None
        removed, scale = [k], None
        if prod.type == "Mul":
            s = next((n for n in prod.input if n != x and self.op_of(n)[1] is not None
                      and self.op_of(n)[1].type == "MatMul"), None)
            if s is None or not self.private(s):
                return None
            scale = self.scale_of(prod, s)
            if scale is None:
                return None
            removed.append(j)
            j, prod = self.op_of(s)
        low = _dtype(self.info, prod.input[0]) == _BF16
        if not _matmul(prod, False, False, _F32 if low else None):
            return None
        removed.append(j)
        q, kt = prod.input
        # bfloat16: p is read through one Cast to bfloat16 (p16) by the second
        # product (and the backward's p^T do).
        p16, cast = p, None
        if low:
            casts = [r for r, _ in self.readers.get(p, []) if _bf16_cast(self.g.op[r])]
            if len(casts) != 1 or self.g.op[casts[0]].output[0] in self.pinned:
                return None
            cast = casts[0]
            p16 = self.g.op[cast].output[0]
        outs = [(r, pos) for r, pos in self.readers.get(p16, [])
                if pos == 0 and _matmul(self.g.op[r], False, False)]
        if len(outs) != 1:
            return None
        r = outs[0][0]
        v, o = self.g.op[r].input[1], self.g.op[r].output[0]
        removed.append(r)
        qs, ks, vs = (_shape(self.info, n) for n in (q, kt, v))
        if qs is None or ks is None or vs is None or not len(qs) == len(ks) == len(vs) >= 2:
            return None
        batch = qs[:-2]
        L, E = qs[-2:]
        if ks[:-2] != batch or vs[:-2] != batch or ks[-2] != E or vs[-2] != ks[-1]:
            return None
        S, Ev = ks[-1], vs[-1]
        if not all(MIN_SIDE <= d <= MAX_SIDE for d in (L, S, E, Ev)):
            return None
        if int(np.prod(batch)) < _min_items():
            return None
        if shape != batch + (L, S):
            return None
        t = _BF16 if low else _F32
        if not (all(_dtype(self.info, n) == t for n in (q, kt, v, o))
                and _dtype(self.info, p) == _dtype(self.info, x) == _F32):
            return None
        if low and (L * S * min(E, Ev) < BF16_MIN_WORK or min(S, E, Ev) < 16):
            return None
        return dict(q=q, kt=kt, v=v, p=p, o=o, scale=scale, removed=removed,
                    shape=batch + (L, Ev), low=low, p16=p16, cast=cast)

    def backward(self, f):
        """The backward block of forward ``f``: a dict, else None."""
        p, low = f["p"], f["low"]
        out = _F32 if low else None     # the bfloat16 products write float32
        grads = [(r, pos) for r, pos in self.readers.get(p, [])
                 if self.g.op[r].type == "SoftmaxGrad"]
        dvs = [(r, pos) for r, pos in self.readers.get(f["p16"], [])
               if pos == 0 and _matmul(self.g.op[r], True, False, out)]
        if len(grads) != 1 or len(dvs) != 1 or grads[0][1] != 0:
            return None
        kg, sg = grads[0][0], self.g.op[grads[0][0]]
        kv, dv_op = dvs[0][0], self.g.op[dvs[0][0]]
        if len(sg.input) != 2 or len(sg.output) != 1 or not _last_axis(sg, len(_shape(self.info, p))):
            return None
        do = dv_op.input[1]
        dp = sg.input[1]
        kp, dp_op = self.op_of(dp)
        if (dp_op is None or not _matmul(dp_op, False, True, out) or not self.private(dp)
                or list(dp_op.input) != [do, f["v"]]):
            return None
        if (_shape(self.info, do) != f["shape"]
                or _dtype(self.info, do) != (_BF16 if low else _F32)):
            return None
        removed = [kp, kg, kv]
        ds = sg.output[0]
        if f["scale"] is not None:
            if not self.private(ds):
                return None
            km = self.readers[ds][0][0]
            mul = self.g.op[km]
            scale = self.scale_of(mul, ds)
            if scale is None or _f32_bits(scale) != _f32_bits(f["scale"]):
                return None
            removed.append(km)
            ds = mul.output[0]
        if low:     # ds reaches the products through one Cast to bfloat16
            if not self.private(ds) or not _bf16_cast(self.g.op[self.readers[ds][0][0]]):
                return None
            kc = self.readers[ds][0][0]
            removed.append(kc)
            ds = self.g.op[kc].output[0]
        if not self.private(ds, 2):
            return None
        dq = dk = None
        for r, pos in self.readers[ds]:
            op = self.g.op[r]
            if pos != 0:
                return None
            if _matmul(op, False, True, out) and op.input[1] == f["kt"]:
                dq, kq = op.output[0], r
            elif _matmul(op, True, False, out) and op.input[1] == f["q"]:
                dk, kk = op.output[0], r
        if dq is None or dk is None:
            return None
        removed += [kq, kk]
        return dict(do=do, dq=dq, dk=dk, dv=dv_op.output[0], removed=removed)

    def heads_last(self, name):
        """``(index, output)`` of the Transpose that alone reads ``name``
        when it swaps axes 1 and 2 of a rank-4 value (the head merge's
        first step), else None."""
        rs = self.readers.get(name, [])
        shape = _shape(self.info, name)
        if name in self.pinned or len(rs) != 1 or shape is None or len(shape) != 4:
            return None
        k = rs[0][0]
        op = self.g.op[k]
        if (op.type != "Transpose" or len(op.input) != 1 or len(op.output) != 1
                or set(_attrs(op)) != {"perm"}):
            return None
        perm = [p + 4 if p < 0 else p for p in op.attr["perm"].ints.values]
        return (k, op.output[0]) if perm == [0, 2, 1, 3] else None

    def place(self, removed, inputs, outputs):
        """An index among ``removed`` where an op reading ``inputs`` and
        writing ``outputs`` can stand, else None."""
        gone = set(removed)
        first_read = min((r for n in outputs for r, _ in self.readers.get(n, [])
                          if r not in gone), default=len(self.g.op))
        last_write = max((self.producer[n] for n in inputs if n in self.producer),
                         default=-1)
        for k in sorted(removed):
            if last_write < k < first_read:
                return k
        return None


def _new_op(template, name, op_type, inputs, outputs, scale):
    op = P.OpDef(name=name, type=op_type, input=list(inputs), output=list(outputs),
                 plugin=template.plugin, plugin_version=template.plugin_version,
                 plugin_dist=template.plugin_dist)
    op.attr["scale"].CopyFrom(P.AttrValue(f=1.0 if scale is None else scale))
    op.attr["has_scale"].CopyFrom(P.AttrValue(b=scale is not None))
    return op


@register_pass("attention_fusion", level=3)
def attention_fusion(graph):
    """Fuse ``MatMul -> [Mul] -> Softmax -> MatMul`` and its backward.

    Parameters
    ----------
    graph : dragon_core.proto.GraphDef
        The graph; left unchanged.

    Returns
    -------
    dragon_core.proto.GraphDef
        A new graph with ``SoftmaxAttention`` / ``SoftmaxAttentionGrad`` in
        place of each matching block (see the module docs), or ``graph``
        itself when none matches.
    """
    devices = device_types(graph)
    dtypes = {_F32, _BF16}
    for d in devices:
        dtypes &= kernel_dtypes("SoftmaxAttention", d) & kernel_dtypes("SoftmaxAttentionGrad", d)
    if not dtypes:
        return graph            # no kernels here (not x86-64-v4, or cuda)
    m = _Matcher(graph)
    replace: dict = {}          # op index -> new OpDef
    drop_ops, drop_info = set(), set()
    fresh = fresh_namer(graph)

    def outputs(names, keys, removed, new):
        """The names the fused op writes (a head-merge Transpose's output
        where one alone reads the value) and its ``*_heads_last`` flags."""
        final = []
        for name, key in zip(names, keys):
            h = m.heads_last(name) if key else None
            if h is None:
                final.append(name)
                continue
            removed.append(h[0])
            final.append(h[1])
            new.attr[key].CopyFrom(P.AttrValue(b=True))
        return final

    def drop_cast(f):
        """The Cast of p to bfloat16 goes when every reader of its output
        went (the second product, and the backward's p^T do when fused)."""
        if f["cast"] is not None and all(r in drop_ops or r in replace
                                         for r, _ in m.readers.get(f["p16"], [])):
            drop_ops.add(f["cast"])
            drop_info.add(f["p16"])

    def commit(at, new, removed, final):
        replace[at] = new
        drop_ops.update(set(removed) - {at})
        drop_info.update(n for j in removed for n in graph.op[j].output if n not in final)
        for n in final:
            m.producer[n] = at

    for k, op in enumerate(graph.op):
        if op.type != "Softmax":
            continue
        f = m.forward(k)
        if f is None or set(f["removed"]) & (drop_ops | set(replace)):
            continue
        if (_BF16 if f["low"] else _F32) not in dtypes:
            continue
        inputs = [f["q"], f["kt"], f["v"]]
        new = _new_op(op, fresh(f"{op.name}/attention"), "SoftmaxAttention", inputs, [],
                      f["scale"])
        removed = list(f["removed"])
        final = outputs([f["p"], f["o"]], [None, "o_heads_last"], removed, new)
        at = m.place(removed, inputs, final)
        if at is None or set(removed) & (drop_ops | set(replace)):
            continue
        new.output.extend(final)
        commit(at, new, removed, final)
        b = m.backward(f)
        if b is None or set(b["removed"]) & (drop_ops | set(replace)):
            drop_cast(f)
            continue
        inputs = [f["q"], f["kt"], f["v"], f["p"], b["do"]]
        new = _new_op(op, fresh(f"{op.name}/attention_grad"), "SoftmaxAttentionGrad",
                      inputs, [], f["scale"])
        removed = list(b["removed"])
        final = outputs([b["dq"], b["dk"], b["dv"]],
                        ["dq_heads_last", "dk_heads_last", "dv_heads_last"], removed, new)
        at = m.place(removed, inputs, final)
        if at is None or set(removed) & (drop_ops | set(replace)):
            drop_cast(f)
            continue
        new.output.extend(final)
        commit(at, new, removed, final)
        drop_cast(f)
    if not replace:
        return graph
    new_graph = rewrite(graph, replace, drop_ops, drop_info)
    _drop_unused_constants(new_graph)     # the scale the Muls read
    return new_graph
