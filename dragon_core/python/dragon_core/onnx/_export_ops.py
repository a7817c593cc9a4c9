"""Dragon op -> ONNX nodes, one small function per Dragon op type.

A translation gets the emitter ``e`` (``e.node(...)``, ``e.const(...)``,
``e.shape(name)``, ``e.dtype(name)``, ``e.opset``), the ONNX names of the
op's inputs and outputs, and its attributes (every schema attribute,
resolved), and emits nodes that write exactly those outputs:

    @export_op("Relu")
    def _relu(e, ins, outs, a):
        e.node("Relu", ins, outs)

Plugin ops without a translation here are written to their plugin's own
domain (``ai.dragon.<plugin>``) with their attributes, which
``dragon_core.onnx.load`` reads back; core ops without one are an error.
"""

from __future__ import annotations

import math

import numpy as np

EXPORT: dict = {}


def export_op(*names):
    def deco(fn):
        for nm in names:
            EXPORT[nm] = fn
        return fn
    return deco


def _simple(onnx_type):
    return lambda e, ins, outs, a: e.node(onnx_type, ins, outs)


for _dg, _ox in {"Add": "Add", "Sub": "Sub", "Mul": "Mul", "Div": "Div", "Pow": "Pow",
                 "Abs": "Abs", "Exp": "Exp", "Log": "Log", "Sqrt": "Sqrt",
                 "Reciprocal": "Reciprocal", "Sigmoid": "Sigmoid", "Tanh": "Tanh",
                 "Relu": "Relu", "Floor": "Floor", "Ceil": "Ceil", "Round": "Round",
                 "Sign": "Sign", "Sin": "Sin", "Cos": "Cos", "Equal": "Equal",
                 "Greater": "Greater", "Less": "Less", "GreaterEqual": "GreaterOrEqual",
                 "LessEqual": "LessOrEqual", "LogicalAnd": "And", "LogicalOr": "Or",
                 "LogicalNot": "Not", "Maximum": "Max", "Minimum": "Min", "Where": "Where",
                 "Contiguous": "Identity"}.items():
    export_op(_dg)(_simple(_ox))


@export_op("Neg")
def _neg(e, ins, outs, a):
    if e.dtype(ins[0]).startswith("uint"):        # ONNX Neg takes signed types
        e.node("Sub", [e.scalar(0, ins[0]), ins[0]], outs)
    else:
        e.node("Neg", ins, outs)


@export_op("NotEqual")
def _not_equal(e, ins, outs, a):
    e.node("Not", [e.node("Equal", ins)], outs)


@export_op("Rsqrt")
def _rsqrt(e, ins, outs, a):
    e.node("Reciprocal", [e.node("Sqrt", ins)], outs)


@export_op("Square")
def _square(e, ins, outs, a):
    e.node("Mul", [ins[0], ins[0]], outs)


@export_op("Log1p")
def _log1p(e, ins, outs, a):
    e.node("Log", [e.node("Add", [ins[0], e.scalar(1, ins[0])])], outs)


@export_op("Cast")
def _cast(e, ins, outs, a):
    if e.dtype(ins[0]) == e.dtype(outs[0]):
        e.node("Identity", ins, outs)     # onnxruntime drops a no-op Cast an If reads
        return
    e.node("Cast", ins, outs, to=e.onnx_dtype(e.dtype(outs[0])))


@export_op("LeakyRelu")
def _leaky(e, ins, outs, a):
    e.node("LeakyRelu", ins, outs, alpha=float(a["alpha"]))


@export_op("Elu")
def _elu(e, ins, outs, a):
    e.node("Elu", ins, outs, alpha=float(a["alpha"]))


@export_op("Softplus")
def _softplus(e, ins, outs, a):
    # Dragon: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
    x, beta, thr = ins[0], float(a["beta"]), float(a["threshold"])
    bx = x if beta == 1.0 else e.node("Mul", [x, e.scalar(beta, x)])
    sp = e.node("Softplus", [bx])
    if beta != 1.0:
        sp = e.node("Div", [sp, e.scalar(beta, x)])
    e.node("Where", [e.node("Greater", [bx, e.scalar(thr, x)]), x, sp], outs)


@export_op("Gelu")
def _gelu(e, ins, outs, a):
    approx = a.get("approximate", "none")
    if e.opset >= 20:
        e.node("Gelu", ins, outs, approximate=approx)
        return
    x = ins[0]
    if approx == "tanh":
        inner = e.node("Mul", [e.node("Add", [x, e.node("Mul", [
            e.scalar(0.044715, x), e.node("Mul", [x, e.node("Mul", [x, x])])])]),
            e.scalar(math.sqrt(2 / math.pi), x)])
        t = e.node("Tanh", [inner])
    else:
        t = e.node("Erf", [e.node("Mul", [x, e.scalar(1 / math.sqrt(2), x)])])
    half = e.node("Mul", [x, e.scalar(0.5, x)])
    e.node("Mul", [half, e.node("Add", [t, e.scalar(1.0, x)])], outs)


@export_op("Clip")
def _clip(e, ins, outs, a):
    lo = e.scalar(a["min"], ins[0]) if a.get("min") is not None else ""
    hi = e.scalar(a["max"], ins[0]) if a.get("max") is not None else ""
    e.node("Clip", [ins[0], lo, hi], outs)


# ------------------------------------------------------------- matmul

def _swap_last(e, x):
    rank = len(e.shape(x))
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return e.node("Transpose", [x], perm=perm)


@export_op("MatMul")
def _matmul(e, ins, outs, a):
    x, w = ins[0], ins[1]
    if a.get("transpose_a") and len(e.shape(x)) >= 2:
        x = _swap_last(e, x)
    if a.get("transpose_b") and len(e.shape(w)) >= 2:
        if len(e.shape(x)) == 2 and len(e.shape(w)) == 2:
            e.node("Gemm", [x, w], outs, transB=1)
            return
        w = _swap_last(e, w)
    e.node("MatMul", [x, w], outs)


@export_op("MatMulBiasAct")
def _matmul_bias_act(e, ins, outs, a):
    mm = e.fresh("matmul")
    _matmul(e, ins[:2], [mm], a)
    y = e.node("Add", [mm, ins[2]]) if len(ins) > 2 and ins[2] else mm
    _activation(e, y, outs, a.get("activation", "none"))


def _activation(e, y, outs, act):
    if act == "relu":
        e.node("Relu", [y], outs)
    elif act in ("none", "", None):
        e.node("Identity", [y], outs)
    else:
        raise NotImplementedError(f"fused activation '{act}'")


# -------------------------------------------------------- convolution

def _onnx_pads(p, n):
    """A ``pads`` attribute (1 value, N for both sides, or N begins then N
    ends) -> ONNX's ``[x1_begin, ..., xN_begin, x1_end, ..., xN_end]``."""
    p = [int(v) for v in p]
    if len(p) == 1:
        p = p * n
    return p + p if len(p) == n else p


def _pads4(p):
    return _onnx_pads(p, 2)


@export_op("Conv2d")
def _conv(e, ins, outs, a):
    w = e.shape(ins[1])
    e.node("Conv", [i for i in ins if i] if len(ins) < 3 or ins[2] else ins[:2], outs,
           kernel_shape=list(w[2:]), strides=list(a["strides"]), pads=_pads4(a["pads"]),
           dilations=list(a["dilations"]), group=int(a["groups"]))


@export_op("Conv2dBiasAct")
def _conv_bias_act(e, ins, outs, a):
    y = e.fresh("conv")
    _conv(e, ins, [y], a)
    _activation(e, y, outs, a.get("activation", "relu"))


@export_op("ConvTranspose2d")
def _conv_transpose(e, ins, outs, a):
    w = e.shape(ins[1])
    e.node("ConvTranspose", [i for i in ins if i], outs, kernel_shape=list(w[2:]),
           strides=list(a["strides"]), pads=_pads4(a["pads"]),
           output_padding=list(a["output_padding"]), dilations=list(a["dilations"]),
           group=int(a["groups"]))


def _pool_geometry(a):
    k = list(a["kernel_size"]) * (2 if len(a["kernel_size"]) == 1 else 1)
    s = list(a["strides"]) or k
    s = s * 2 if len(s) == 1 else s
    return k, s, _pads4(a["pads"])


def _pool_node(e, op_type, ins, outs, k, s, d, pads, ceil, **attrs):
    """An ONNX pooling node for a pooling of Dragon's. In ceil mode Dragon
    (as PyTorch, onnxruntime and onnx's reference evaluator) drops a last
    window that would start in the end padding; onnx's shape inference does
    not (it infers one more cell, which the checker rejects against the
    traced shapes, and onnxruntime's memory planner trusts). There the node
    is written in floor mode with the end pads that give Dragon's windows:
    the part of a window past the padded input is ignored by MaxPool and by
    an AveragePool that excludes pads; one that counts pads gets the pads
    as explicit zeros (a Pad), so it counts those and not the part past
    them, as Dragon does."""
    n = len(k)
    d = list(d) if d is not None else None
    if ceil:
        ins_, got = e.shape(ins[0])[2:], list(e.shape(outs[0])[2:])
        begins, ends = list(pads[:n]), list(pads[n:])
        eff = [(kk - 1) * dd + 1 for kk, dd in zip(k, d or [1] * n)]
        inferred = [-(-(i + b + en - ke) // ss) + 1
                    for i, b, en, ke, ss in zip(ins_, begins, ends, eff, s)]
        if inferred != got:
            need = [max((o - 1) * ss + ke - i - b, 0)
                    for i, b, ke, ss, o in zip(ins_, begins, eff, s, got)]
            if any((i + b + nd - ke) // ss + 1 != o
                   for i, b, nd, ke, ss, o in zip(ins_, begins, need, eff, s, got)):
                raise NotImplementedError(f"ceil_mode pooling of {list(e.shape(ins[0]))} to "
                                          f"{got} (kernel {k}, strides {s}, pads {pads})")
            x = ins[0]
            if attrs.get("count_include_pad") and any(nd > en for nd, en in zip(need, ends)):
                full = [0, 0] + begins + [0, 0] + [min(en, nd) for en, nd in zip(ends, need)]
                x = e.node("Pad", [x, e.const(np.array(full, np.int64)), e.scalar(0, x)],
                           mode="constant")
                begins, ends = [0] * n, [max(nd - en, 0) for nd, en in zip(need, ends)]
                attrs["count_include_pad"] = 0
            else:
                ends = need
            ins, pads, ceil = [x] + list(ins[1:]), begins + ends, False
    if d is not None:
        attrs["dilations"] = d
    e.node(op_type, ins, outs, kernel_shape=list(k), strides=list(s), pads=list(pads),
           ceil_mode=int(bool(ceil)), **attrs)


@export_op("MaxPool2d")
def _max_pool(e, ins, outs, a):
    k, s, p = _pool_geometry(a)
    d = list(a["dilations"])
    _pool_node(e, "MaxPool", ins, outs, k, s, d * 2 if len(d) == 1 else d, p,
               bool(a["ceil_mode"]))


@export_op("AvgPool2d")
def _avg_pool(e, ins, outs, a):
    k, s, p = _pool_geometry(a)
    _pool_node(e, "AveragePool", ins, outs, k, s, None, p, bool(a["ceil_mode"]),
               count_include_pad=int(bool(a["count_include_pad"])))


@export_op("AdaptiveAvgPool2d")
def _adaptive_avg(e, ins, outs, a):
    size = list(a["output_size"])
    size = size * 2 if len(size) == 1 else size
    h, w = e.shape(ins[0])[2:]
    if size == [1, 1]:
        e.node("GlobalAveragePool", ins, outs)
    elif h % size[0] == 0 and w % size[1] == 0:
        k = [h // size[0], w // size[1]]
        e.node("AveragePool", ins, outs, kernel_shape=k, strides=k)
    else:
        raise NotImplementedError(f"adaptive average pooling of {h}x{w} to {size} (bins of "
                                  "unequal size have no ONNX op)")


# -------------------------------------------------------- normalisation

@export_op("BatchNorm")
def _batch_norm(e, ins, outs, a):
    if a.get("training"):
        raise NotImplementedError("BatchNorm with training=True (export the module in eval "
                                  "mode)")
    e.node("BatchNormalization", ins, [outs[0]], epsilon=float(a["eps"]))
    for j, i in ((1, 3), (2, 4)):
        if len(outs) > j and e.used(outs[j]):
            e.node("Identity", [ins[i]], [outs[j]])


@export_op("LayerNorm")
def _layer_norm(e, ins, outs, a):
    if e.opset >= 17:
        e.node("LayerNormalization", ins, outs, axis=int(a["axis"]), epsilon=float(a["eps"]))
        return
    x = ins[0]
    rank = len(e.shape(x))
    axes = list(range(int(a["axis"]) % rank, rank))
    m = e.reduce("ReduceMean", x, axes)
    d = e.node("Sub", [x, m])
    v = e.reduce("ReduceMean", e.node("Mul", [d, d]), axes)
    y = e.node("Div", [d, e.node("Sqrt", [e.node("Add", [v, e.scalar(float(a["eps"]), x)])])])
    e.node("Add", [e.node("Mul", [y, ins[1]]), ins[2]], outs)


@export_op("GroupNorm")
def _group_norm(e, ins, outs, a):
    x, g = ins[0], int(a["groups"])
    shape = e.shape(x)
    c = shape[1]
    # The batch axis is copied (0), the result reshaped to x's own shape:
    # a dynamic batch axis stays dynamic.
    xg = e.node("Reshape", [x, e.const(np.array([0, g, -1], np.int64))])
    m = e.reduce("ReduceMean", xg, [2])
    d = e.node("Sub", [xg, m])
    v = e.reduce("ReduceMean", e.node("Mul", [d, d]), [2])
    y = e.node("Div", [d, e.node("Sqrt", [e.node("Add", [v, e.scalar(float(a["eps"]), x)])])])
    y = e.node("Reshape", [y, e.node("Shape", [x])])
    cshape = e.const(np.array([c] + [1] * (len(shape) - 2), np.int64))
    e.node("Add", [e.node("Mul", [y, e.node("Reshape", [ins[1], cshape])]),
                   e.node("Reshape", [ins[2], cshape])], outs)


@export_op("Softmax")
def _softmax(e, ins, outs, a):
    e.node("Softmax", ins, outs, axis=int(a["axis"]))


@export_op("LogSoftmax")
def _log_softmax(e, ins, outs, a):
    e.node("LogSoftmax", ins, outs, axis=int(a["axis"]))


@export_op("Dropout")
def _dropout(e, ins, outs, a):
    if float(a.get("p", 0.0)) != 0.0:
        raise NotImplementedError("Dropout with p > 0 (export the module in eval mode)")
    e.node("Identity", ins[:1], outs[:1])


# ------------------------------------------------------------- shapes

@export_op("Reshape", "Flatten", "Squeeze", "Unsqueeze")
def _reshape(e, ins, outs, a):
    out_shape = list(e.shape(outs[0]))
    in_shape = list(e.shape(ins[0]))
    # The leading axis is written as 0 ("copy") when the reshape leaves it
    # alone, else as -1 (inferred): both give the traced shape, and a
    # dynamic batch axis stays dynamic through flattening reshapes
    # ([b, s, h] -> [b * s, h] -> [b, s, h]).
    target = list(out_shape)
    if 0 in target:
        # An empty result: ONNX reads a 0 in the target as "copy that
        # input axis" unless allowzero=1, which writes it as a size.
        e.node("Reshape", [ins[0], e.const(np.array(target, np.int64))], outs, allowzero=1)
        return
    if target:
        target[0] = 0 if (in_shape and target[0] == in_shape[0]) else -1
    e.node("Reshape", [ins[0], e.const(np.array(target, np.int64))], outs)


@export_op("BroadcastTo")
def _broadcast_to(e, ins, outs, a):
    e.node("Expand", [ins[0], e.const(np.array(e.shape(outs[0]), np.int64))], outs)


@export_op("Transpose")
def _transpose(e, ins, outs, a):
    perm = a.get("perm")
    if perm is None:
        perm = list(range(len(e.shape(ins[0]))))[::-1]
    e.node("Transpose", ins, outs, perm=[int(p) for p in perm])


@export_op("Concat")
def _concat(e, ins, outs, a):
    e.node("Concat", ins, outs, axis=int(a["axis"]))


@export_op("Stack")
def _stack(e, ins, outs, a):
    axis = int(a["axis"])
    rank = len(e.shape(ins[0])) + 1
    ax = e.const(np.array([axis % rank], np.int64))
    e.node("Concat", [e.node("Unsqueeze", [x, ax]) for x in ins], outs, axis=axis)


@export_op("Slice")
def _slice(e, ins, outs, a):
    starts, ends = list(a["starts"]), list(a["ends"])
    axes = list(a["axes"]) if a.get("axes") is not None else list(range(len(starts)))
    shape = e.shape(ins[0])
    for i, (st, ax) in enumerate(zip(a["steps"], axes)):
        if st < 0 and starts[i] < -shape[ax]:
            # Dragon (as NumPy) reads nothing from a start before the first
            # element with a negative step; ONNX clamps it to 0 and reads
            # that element. Written as the empty range it is.
            starts[i], ends[i] = 0, 0
    e.node("Slice", [ins[0], e.const(np.array(starts, np.int64)),
                     e.const(np.array(ends, np.int64)),
                     e.const(np.array(axes, np.int64)),
                     e.const(np.array(a["steps"], np.int64))], outs)


@export_op("Split")
def _split(e, ins, outs, a):
    e.node("Split", [ins[0], e.const(np.array(a["sizes"], np.int64))], outs,
           axis=int(a["axis"]))


@export_op("Gather")
def _gather(e, ins, outs, a):
    e.node("Gather", ins, outs, axis=int(a["axis"]))


@export_op("Embedding")
def _embedding(e, ins, outs, a):
    e.node("Gather", ins[:2], outs, axis=0)


@export_op("Pad")
def _pad(e, ins, outs, a):
    p = list(a["pads"])   # Pad's attribute: [b0, a0, b1, a1, ...]
    pads = p[0::2] + p[1::2]
    e.node("Pad", [ins[0], e.const(np.array(pads, np.int64)),
                   e.scalar(a.get("value", 0.0), ins[0])], outs, mode=a.get("mode", "constant"))


@export_op("Fill")
def _fill(e, ins, outs, a):
    dtype = e.dtype(outs[0])
    value = a.get("int_value") if a.get("int_value") is not None else a["value"]
    from onnx import numpy_helper
    val = numpy_helper.from_array(np.array([value]).astype(e.np_dtype(dtype)), "value")
    e.node("ConstantOfShape", [e.const(np.array(a["shape"], np.int64))], outs, value=val)


# ----------------------------------------------------------- reductions

# Integer dtypes ONNX's Reduce* do not take (ReduceSum/Prod: 32- and 64-bit
# only; ReduceMax/Min add 8-bit): reduced in int32 and cast back, which
# wraps as Dragon's reduction in the narrow dtype does.
_REDUCE_NARROW = {"ReduceSum": ("int8", "int16", "uint8", "uint16"),
                  "ReduceProd": ("int8", "int16", "uint8", "uint16"),
                  "ReduceMax": ("int16", "uint16"), "ReduceMin": ("int16", "uint16")}


def _bool_any_all(e, x, out, axes, keep, is_any):
    """any / all (bool Max / Min) without bool ReduceMax/Min, which ONNX
    rejects before opset 20 and onnxruntime gets wrong on an empty axis:
    any = ReduceSum(Cast(x, int64)) > 0, all = ReduceSum(Cast(Not(x), int64)) == 0.
    An empty reduced axis sums to 0: any is False and all is True, as in Dragon."""
    counted = x if is_any else e.node("Not", [x])
    total = e.reduce("ReduceSum", e.node("Cast", [counted], to=e.onnx_dtype("int64")),
                     axes, keepdims=keep)
    e.node("Greater" if is_any else "Equal", [total, e.const(np.array(0, np.int64))], [out])


def _reduction(onnx_type):
    def run(e, ins, outs, a):
        axes = a.get("axes")
        if axes is not None and len(axes) == 0:
            e.node("Identity", ins, outs)
            return
        axes = None if axes is None else list(axes)
        keep = bool(a.get("keepdims", False))
        dtype = e.dtype(ins[0])
        if dtype == "bool" and onnx_type in ("ReduceMax", "ReduceMin"):
            _bool_any_all(e, ins[0], outs[0], axes, keep, onnx_type == "ReduceMax")
            return
        if dtype in _REDUCE_NARROW.get(onnx_type, ()):
            wide = e.reduce(onnx_type, e.node("Cast", ins, to=e.onnx_dtype("int32")), axes,
                            keepdims=keep)
            e.node("Cast", [wide], outs, to=e.onnx_dtype(dtype))
            return
        e.reduce(onnx_type, ins[0], axes, keepdims=keep, out=outs[0])
    return run


for _dg, _ox in {"Sum": "ReduceSum", "Mean": "ReduceMean", "Max": "ReduceMax",
                 "Min": "ReduceMin", "Prod": "ReduceProd",
                 "LogSumExp": "ReduceLogSumExp"}.items():
    export_op(_dg)(_reduction(_ox))


@export_op("Var", "Std")
def _var(e, ins, outs, a, _std=None):
    x = ins[0]
    axes = a.get("axes")
    shape = e.shape(x)
    axes = list(range(len(shape))) if axes is None else [int(v) % len(shape) for v in axes]
    count = int(np.prod([shape[i] for i in axes])) if axes else 1
    m = e.reduce("ReduceMean", x, axes)
    d = e.node("Sub", [x, m])
    ss = e.reduce("ReduceSum", e.node("Mul", [d, d]), axes, keepdims=bool(a["keepdims"]))
    ddof = int(a.get("ddof", 0))
    v_out = outs[0] if e.op_type == "Var" else None
    v = e.node("Div", [ss, e.scalar(float(max(count - ddof, 0)), x)],
               [v_out] if v_out else None)
    if e.op_type == "Std":
        e.node("Sqrt", [v], outs)


def _arg(onnx_type):
    def run(e, ins, outs, a):
        x = ins[0]
        axis = a.get("axis")
        if axis is None:
            x = e.node("Reshape", [x, e.const(np.array([-1], np.int64))])
            axis = 0
        e.node(onnx_type, [x], outs, axis=int(axis), keepdims=int(bool(a["keepdims"])))
    return run


export_op("ArgMax")(_arg("ArgMax"))
export_op("ArgMin")(_arg("ArgMin"))


# ----------------------------------------------------- resize & vision

@export_op("Interpolate")
def _interpolate(e, ins, outs, a):
    mode = a.get("mode", "nearest")
    align = bool(a.get("align_corners"))
    attrs = {}
    if mode == "nearest":
        attrs = dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                     nearest_mode="floor")
    elif mode == "nearest-exact":
        attrs = dict(mode="nearest", coordinate_transformation_mode="half_pixel",
                     nearest_mode="round_prefer_ceil")
    else:
        # half_pixel, not pytorch_half_pixel: the latter reads source 0 for
        # an output axis of length 1, where Dragon (as PyTorch) reads the
        # centre; the two agree for every longer axis.
        attrs = dict(mode="cubic" if mode == "bicubic" else "linear",
                     coordinate_transformation_mode="align_corners" if align else
                     "half_pixel")
        if mode == "bicubic":
            attrs["cubic_coeff_a"] = -0.75
    x = ins[0]
    if a.get("scale_factor") is not None and not align:
        sf = [float(v) for v in a["scale_factor"]]
        sf = sf * (len(e.shape(x)) - 2) if len(sf) == 1 else sf
        scales = e.const(np.array([1.0, 1.0] + sf, np.float32))
        e.node("Resize", [x, "", scales], outs, **attrs)
    else:
        # Resize's sizes cover every axis: the batch and channel sizes are
        # read from x (Shape), so a dynamic batch axis is kept, not resized
        # to the traced batch.
        lead = e.node("Shape", [x], start=0, end=2)
        spatial = e.const(np.array(e.shape(outs[0])[2:], np.int64))
        sizes = e.node("Concat", [lead, spatial], axis=0)
        e.node("Resize", [x, "", "", sizes], outs, **attrs)


@export_op("GridSample")
def _grid_sample(e, ins, outs, a):
    """GridSample-16 names its modes bilinear/bicubic and is 4-D only;
    GridSample-20 says linear/cubic and takes 5-D inputs. ONNX pads a cubic
    point before sampling where Dragon (as PyTorch) pads each cell, so
    bicubic exports only with zeros padding (where the two agree)."""
    mode = a.get("mode", "bilinear")
    pad = a.get("padding_mode", "zeros")
    if len(e.shape(ins[0])) == 5 and e.opset < 20:
        raise NotImplementedError(f"5-D GridSample needs opset 20, exporting opset {e.opset}")
    if mode == "bicubic" and pad != "zeros":
        raise NotImplementedError(
            f"GridSample mode='bicubic' with padding_mode='{pad}': ONNX pads the point, "
            "Dragon each of its 16 cells (they differ outside the image)")
    if e.opset >= 20:
        mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    e.node("GridSample", ins, outs, mode=mode, padding_mode=pad,
           align_corners=int(bool(a.get("align_corners"))))


@export_op("RoiAlign")
def _roi_align(e, ins, outs, a):
    """Dragon's [K, 5] rois (batch index first) are ONNX's rois [K, 4] and
    batch_indices [K]; aligned=True is coordinate_transformation_mode
    half_pixel, False output_half_pixel (the legacy form)."""
    x, rois = ins[0], ins[1]
    idx = e.node("Cast", [e.node("Reshape", [
        e.node("Slice", [rois, e.const(np.array([0], np.int64)),
                         e.const(np.array([1], np.int64)), e.const(np.array([1], np.int64))]),
        e.const(np.array([-1], np.int64))])], to=7)
    boxes = e.node("Slice", [rois, e.const(np.array([1], np.int64)),
                             e.const(np.array([5], np.int64)), e.const(np.array([1], np.int64))])
    size = list(a["output_size"])
    size = size * 2 if len(size) == 1 else size
    ratio = int(a.get("sampling_ratio", -1))
    extra = {}
    if e.opset >= 16:
        extra["coordinate_transformation_mode"] = ("half_pixel" if a.get("aligned", True)
                                                   else "output_half_pixel")
    elif a.get("aligned", True):
        raise NotImplementedError(f"RoiAlign aligned=True needs opset 16 "
                                  f"(coordinate_transformation_mode), exporting opset {e.opset}")
    e.node("RoiAlign", [x, boxes, idx], outs, mode=a.get("mode", "avg"),
           output_height=int(size[0]), output_width=int(size[1]),
           sampling_ratio=max(ratio, 0), spatial_scale=float(a.get("spatial_scale", 1.0)),
           **extra)


@export_op("Nms")
def _nms(e, ins, outs, a):
    """Dragon's padded NMS (kept indices by decreasing score, then -1; and
    their count) from ONNX NonMaxSuppression's [M, 3] selection."""
    boxes, scores = ins[0], ins[1]
    n = e.shape(boxes)[0]
    b3 = e.node("Unsqueeze", [boxes, e.const(np.array([0], np.int64))])
    s3 = e.node("Reshape", [scores, e.const(np.array([1, 1, -1], np.int64))])
    sel = e.node("NonMaxSuppression", [b3, s3, e.const(np.array([n], np.int64)),
                                       e.const(np.array([a["iou_threshold"]], np.float32))])
    keep = e.node("Reshape", [e.node("Slice", [sel, e.const(np.array([2], np.int64)),
                                               e.const(np.array([3], np.int64)),
                                               e.const(np.array([1], np.int64))]),
                              e.const(np.array([-1], np.int64))])
    count = e.node("Shape", [keep])
    pad = e.node("Concat", [e.const(np.array([0], np.int64)),
                            e.node("Sub", [e.const(np.array([n], np.int64)), count])], axis=0)
    e.node("Pad", [keep, pad, e.const(np.array(-1, np.int64))], [outs[0]], mode="constant")
    if len(outs) > 1:
        e.node("Reshape", [count, e.const(np.array([], np.int64))], [outs[1]])


# ------------------------------------------------------ indices, losses

@export_op("OneHot")
def _one_hot(e, ins, outs, a):
    dtype = e.dtype(outs[0])
    values = e.const(np.array([a["off_value"], a["on_value"]]).astype(e.np_dtype(dtype)))
    e.node("OneHot", [ins[0], e.const(np.array(int(a["depth"]), np.int64)), values], outs,
           axis=int(a["axis"]))


@export_op("ScatterAdd")
def _scatter_add(e, ins, outs, a):
    """Dragon's index-add (updates x.shape[:axis] + indices.shape +
    x.shape[axis+1:]) as ScatterElements(reduction='add') with the indices
    expanded to the updates' shape."""
    _scatter_elements(e, ins, outs, a, "add")


@export_op("ScatterReduce")
def _scatter_reduce(e, ins, outs, a):
    """As ScatterAdd, with ScatterElements' reduction add/mul/max/min
    (max and min need opset 18)."""
    red = a.get("reduction", "add")
    if red in ("max", "min") and e.opset < 18:
        raise NotImplementedError(f"ScatterElements reduction='{red}' needs opset 18, "
                                  f"exporting at {e.opset}")
    _scatter_elements(e, ins, outs, a, red)


@export_op("Det")
def _det(e, ins, outs, a):
    e.node("Det", [ins[0]], outs)


def _scatter_elements(e, ins, outs, a, reduction):
    x, idx, upd = ins
    shape = list(e.shape(x))
    rank = len(shape)
    axis = int(a["axis"]) % rank
    count = int(np.prod(e.shape(idx)))
    ushape = shape[:axis] + [count] + shape[axis + 1:]
    flat_u = e.node("Reshape", [upd, e.const(np.array(ushape, np.int64))])
    ishape = [1] * axis + [count] + [1] * (rank - axis - 1)
    ii = e.node("Reshape", [idx, e.const(np.array(ishape, np.int64))])
    if e.dtype(idx) != "int64":
        ii = e.node("Cast", [ii], to=7)
    ii = e.node("Expand", [ii, e.const(np.array(ushape, np.int64))])
    e.node("ScatterElements", [x, ii, flat_u], outs, axis=axis, reduction=reduction)


def _reduce_loss(e, loss, outs, reduction):
    if reduction == "none":
        e.node("Identity", [loss], outs)
    elif reduction == "sum":
        e.node("ReduceSum", [loss], outs, keepdims=0)
    else:
        e.node("ReduceMean", [loss], outs, keepdims=0)


@export_op("MseLoss")
def _mse(e, ins, outs, a):
    d = e.node("Sub", ins)
    _reduce_loss(e, e.node("Mul", [d, d]), outs, a["reduction"])


@export_op("L1Loss")
def _l1(e, ins, outs, a):
    _reduce_loss(e, e.node("Abs", [e.node("Sub", ins)]), outs, a["reduction"])


@export_op("NllLoss")
def _nll(e, ins, outs, a):
    t = ins[1] if e.dtype(ins[1]) == "int64" else e.node("Cast", [ins[1]], to=7)
    e.node("NegativeLogLikelihoodLoss", [ins[0], t], outs, reduction=a["reduction"],
           ignore_index=int(a["ignore_index"]))


@export_op("SoftmaxCrossEntropy")
def _sce(e, ins, outs, a):
    if float(a.get("label_smoothing", 0.0)) != 0.0:
        raise NotImplementedError("label_smoothing (ONNX SoftmaxCrossEntropyLoss has none)")
    t = ins[1] if e.dtype(ins[1]) == "int64" else e.node("Cast", [ins[1]], to=7)
    e.node("SoftmaxCrossEntropyLoss", [ins[0], t], outs, reduction=a["reduction"],
           ignore_index=int(a["ignore_index"]))


# ------------------------------------------- the growing op library

for _dg, _ox in {"Erf": "Erf", "Tan": "Tan", "Asin": "Asin", "Acos": "Acos", "Atan": "Atan",
                 "Sinh": "Sinh", "Cosh": "Cosh", "Asinh": "Asinh", "Acosh": "Acosh",
                 "Atanh": "Atanh", "IsNan": "IsNaN", "IsInf": "IsInf"}.items():
    export_op(_dg)(_simple(_ox))

_INTS = ("uint8", "int8", "int16", "int32", "int64")


@export_op("IsFinite")
def _isfinite(e, ins, outs, a):
    if e.dtype(ins[0]) in _INTS:
        e.node("Not", [e.node("Equal", [ins[0], ins[0]])], [e.fresh("unused")])
        e.node("ConstantOfShape", [e.node("Shape", ins)], outs,
               value=e.helper.make_tensor("value", 9, [1], [True]))
        return
    bad = e.node("Or", [e.node("IsNaN", ins), e.node("IsInf", ins)])
    e.node("Not", [bad], outs)


def _trunc(e, q, outs=None):
    neg = e.node("Less", [q, e.scalar(0, q)])
    return e.node("Where", [neg, e.node("Ceil", [q]), e.node("Floor", [q])], outs)


@export_op("TruncDivide")
def _trunc_divide(e, ins, outs, a):
    if e.dtype(ins[0]) in _INTS:
        e.node("Div", ins, outs)              # ONNX integer Div truncates
    else:
        _trunc(e, e.node("Div", ins), outs)


@export_op("FloorDivide")
def _floor_divide(e, ins, outs, a):
    if e.dtype(ins[0]) in _INTS:
        # a - mod(a, b) is a multiple of b: the truncating Div is exact.
        rem = e.node("Mod", ins, fmod=0)
        e.node("Div", [e.node("Sub", [ins[0], rem]), ins[1]], outs)
    else:
        e.node("Floor", [e.node("Div", ins)], outs)


@export_op("Mod")
def _mod(e, ins, outs, a):
    if e.dtype(ins[0]) in _INTS:
        e.node("Mod", ins, outs, fmod=0)
    else:
        q = e.node("Floor", [e.node("Div", ins)])
        e.node("Sub", [ins[0], e.node("Mul", [q, ins[1]])], outs)


@export_op("Fmod")
def _fmod(e, ins, outs, a):
    e.node("Mod", ins, outs, fmod=1)


def _bitwise(onnx_type, logical):
    def run(e, ins, outs, a):
        if e.dtype(ins[0]) == "bool":
            e.node(logical, ins, outs)
            return
        if e.opset < 18:
            raise NotImplementedError(f"{onnx_type} of {e.dtype(ins[0])} needs opset 18, "
                                      f"exporting opset {e.opset}")
        e.node(onnx_type, ins, outs)
    return run


export_op("BitwiseAnd")(_bitwise("BitwiseAnd", "And"))
export_op("BitwiseOr")(_bitwise("BitwiseOr", "Or"))
export_op("BitwiseXor")(_bitwise("BitwiseXor", "Xor"))
export_op("BitwiseNot")(_bitwise("BitwiseNot", "Not"))


def _shift(direction):
    def run(e, ins, outs, a):
        if e.dtype(ins[0]) != "uint8":
            raise NotImplementedError(f"shifts of {e.dtype(ins[0])} (ONNX BitShift takes "
                                      "unsigned integers)")
        e.node("BitShift", ins, outs, direction=direction)
    return run


export_op("LeftShift")(_shift("LEFT"))
export_op("RightShift")(_shift("RIGHT"))


@export_op("CumSum")
def _cumsum(e, ins, outs, a):
    e.node("CumSum", [ins[0], e.const(np.array(int(a["axis"]), np.int64))], outs,
           exclusive=int(bool(a.get("exclusive"))), reverse=int(bool(a.get("reverse"))))


@export_op("TopK")
def _topk(e, ins, outs, a):
    e.node("TopK", [ins[0], e.const(np.array([int(a["k"])], np.int64))], outs,
           axis=int(a["axis"]), largest=int(bool(a["largest"])), sorted=1)


@export_op("Sort")
def _sort(e, ins, outs, a):
    axis = int(a["axis"])
    k = e.shape(ins[0])[axis]
    e.node("TopK", [ins[0], e.const(np.array([k], np.int64))], outs, axis=axis,
           largest=int(bool(a["descending"])), sorted=1)


@export_op("ArgSort")
def _argsort(e, ins, outs, a):
    axis = int(a["axis"])
    k = e.shape(ins[0])[axis]
    e.node("TopK", [ins[0], e.const(np.array([k], np.int64))], [e.fresh("values"), outs[0]],
           axis=axis, largest=int(bool(a["descending"])), sorted=1)


def _recurrent_attrs(a, e, w):
    attrs = dict(direction=a.get("direction", "forward"), layout=int(a.get("layout", 0)),
                 hidden_size=int(e.shape(w)[-1]))
    if a.get("clip") is not None:
        attrs["clip"] = float(a["clip"])
    return attrs


@export_op("Lstm")
def _lstm(e, ins, outs, a):
    # Dragon's inputs are ONNX's, in ONNX's order.
    e.node("LSTM", list(ins), outs,
           input_forget=int(bool(a.get("input_forget"))), **_recurrent_attrs(a, e, ins[2]))


@export_op("Gru")
def _gru(e, ins, outs, a):
    e.node("GRU", list(ins), outs,
           linear_before_reset=int(bool(a.get("linear_before_reset"))),
           **_recurrent_attrs(a, e, ins[2]))


@export_op("Conv3d")
def _conv3d(e, ins, outs, a):
    w = e.shape(ins[1])
    p = _onnx_pads(a["pads"], 3)
    e.node("Conv", [i for i in ins if i], outs, kernel_shape=list(w[2:]),
           strides=list(a["strides"]), pads=p, dilations=list(a["dilations"]),
           group=int(a["groups"]))


@export_op("ConvTranspose3d")
def _conv_transpose3d(e, ins, outs, a):
    w = e.shape(ins[1])
    p = _onnx_pads(a["pads"], 3)
    e.node("ConvTranspose", [i for i in ins if i], outs, kernel_shape=list(w[2:]),
           strides=list(a["strides"]), pads=p, output_padding=list(a["output_padding"]),
           dilations=list(a["dilations"]), group=int(a["groups"]))


@export_op("MaxPool3d")
def _max_pool3d(e, ins, outs, a):
    k = list(a["kernel_size"])
    k = k * 3 if len(k) == 1 else k
    s = list(a["strides"]) or k
    p = _onnx_pads(a["pads"], 3)
    if len(outs) > 1 and e.used(outs[1]):
        raise NotImplementedError("MaxPool3d's indices (per (n, c) volume; ONNX MaxPool's "
                                  "Indices count across the batch and channels)")
    s = s * 3 if len(s) == 1 else s
    d = list(a["dilations"])
    _pool_node(e, "MaxPool", ins, outs[:1], k, s, d * 3 if len(d) == 1 else d, p,
               bool(a["ceil_mode"]))


@export_op("AvgPool3d")
def _avg_pool3d(e, ins, outs, a):
    k = list(a["kernel_size"])
    k = k * 3 if len(k) == 1 else k
    s = list(a["strides"]) or k
    p = _onnx_pads(a["pads"], 3)
    s = s * 3 if len(s) == 1 else s
    _pool_node(e, "AveragePool", ins, outs, k, s, None, p, bool(a["ceil_mode"]),
               count_include_pad=int(bool(a["count_include_pad"])))


@export_op("ScaledDotProductAttention")
def _sdpa(e, ins, outs, a):
    """softmax(q k^T * scale + mask) v with MatMul/Softmax/Where: grouped
    key/value heads are repeated with Gather, is_causal is a constant bias,
    a boolean mask keeps where True, and a query that keeps no key gives 0
    (as Dragon's op)."""
    if float(a.get("dropout_p", 0.0)) != 0.0:
        raise NotImplementedError("dropout_p > 0")
    q, k, v = ins[:3]
    mask = ins[3] if len(ins) > 3 and ins[3] else None
    qs, ks = e.shape(q), e.shape(k)
    rank = len(qs)
    scale = a.get("scale")
    scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
    hq, hk = qs[-3], ks[-3]
    if hq != hk:
        rep = e.const(np.repeat(np.arange(hk), hq // hk).astype(np.int64))
        k = e.node("Gather", [k, rep], axis=rank - 3)
        v = e.node("Gather", [v, rep], axis=rank - 3)
    perm = list(range(rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    kt = e.node("Transpose", [k], perm=perm)
    scores = e.node("Mul", [e.node("MatMul", [q, kt]), e.scalar(scale, q)])
    L, S = qs[-2], ks[-2]
    bias = None
    if a.get("is_causal"):
        allowed = np.tril(np.ones((L, S), bool))
        bias = e.const(np.where(allowed, 0.0, -np.inf).astype(e.np_dtype(e.dtype(q))))
    if mask is not None:
        if e.dtype(mask) == "bool":
            mask = e.node("Where", [mask, e.scalar(0.0, q), e.scalar(-np.inf, q)])
        bias = mask if bias is None else e.node("Add", [bias, mask])
    if bias is not None:
        scores = e.node("Add", [scores, bias])
    p = e.node("Softmax", [scores], axis=-1)
    if bias is not None:
        # (axes an input from opset 18, an attribute before)
        dead = e.node("Equal", [e.reduce("ReduceMax", scores, [-1]), e.scalar(-np.inf, q)])
        p = e.node("Where", [dead, e.scalar(0.0, q), p])
    e.node("MatMul", [p, v], outs)


# ------------------------------------- data-dependent ops (padded forms)
# Dragon's graphs hold NonZero and Unique in padded form (worst-case sizes
# plus a 0-d count); ONNX's ops return the exact sizes, so each is written as
# the ONNX op, then Pad back to the padded size and Shape for the count.

# onnxruntime 1.31's NonZero / Unique kernels lack some dtypes: those go
# through a wider dtype that holds them exactly (float64 NonZero through
# x != 0, which keeps NaN and values too small for float32).
_NONZERO_CAST = {"float16": "float32", "bfloat16": "float32", "int8": "int32",
                 "int16": "int32"}
_UNIQUE_CAST = {"float16": "float32", "bfloat16": "float32", "int32": "int64"}


def _widened(e, x: str, table: dict) -> str:
    to = table.get(e.dtype(x))
    return x if to is None else e.node("Cast", [x], to=e.onnx_dtype(to))


def _pad_end(e, x: str, rank: int, axis: int, target: int, count: str, value) -> str:
    """``x`` padded at the end of ``axis`` with ``value`` (a NumPy scalar of
    ``x``'s dtype) up to ``target`` (``count`` [1] int64: its current size
    there)."""
    zeros = lambda k: e.const(np.zeros(k, np.int64))  # noqa: E731
    parts = [zeros(rank + axis), e.node("Sub", [e.const(np.array([target], np.int64)), count])]
    if rank - axis - 1:
        parts.append(zeros(rank - axis - 1))
    pads = e.node("Concat", parts, axis=0)
    return e.node("Pad", [x, pads, e.const(np.asarray(value))], mode="constant")


@export_op("NonZero")
def _nonzero_padded(e, ins, outs, a):
    """Dragon's padded NonZero ([rank, numel] coordinates then -1, and the
    count) from ONNX NonZero's [rank, count]."""
    x = ins[0]
    shape = e.shape(x)
    numel, rank = int(np.prod(shape, dtype=np.int64)), len(shape)
    src = _widened(e, x, _NONZERO_CAST)
    if e.dtype(x) == "float64":
        src = e.node("Not", [e.node("Equal", [x, e.const(np.zeros((), np.float64))])])
    if rank == 0:
        src = e.node("Reshape", [src, e.const(np.array([1], np.int64))])
    nz = e.node("NonZero", [src])
    count = e.node("Shape", [nz], start=1, end=2)
    if rank == 0:     # [1, c] -> [0, c]
        z = e.const(np.array([0], np.int64))
        nz = e.node("Slice", [nz, z, z, z])
    padded = _pad_end(e, nz, 2, 1, numel, count, np.int64(-1))
    e.node("Identity", [padded], [outs[0]])
    if len(outs) > 1:
        e.node("Reshape", [count, e.const(np.array([], np.int64))], [outs[1]])


@export_op("Unique")
def _unique_padded(e, ins, outs, a):
    """Dragon's padded Unique from ONNX Unique (same orders: sorted, or
    first occurrence): values, indices and counts padded with 0 to the
    worst case, inverse reshaped to x's shape without axis."""
    x = ins[0]
    shape = e.shape(x)
    axis = a.get("axis")
    src = _widened(e, x, _UNIQUE_CAST)
    attrs = {"sorted": int(bool(a.get("sorted", True)))}
    if axis is not None:
        axis = int(axis) % len(shape)
        attrs["axis"] = axis
    names = [e.fresh("unique_y"), e.fresh("unique_idx"), e.fresh("unique_inv"),
             e.fresh("unique_cnt")]
    y, idx, inv, cnt = names
    e.node("Unique", [src], names, **attrs)
    count = e.node("Shape", [idx])
    zero = np.zeros((), e.np_dtype(_UNIQUE_CAST.get(e.dtype(x)) or e.dtype(x)))
    if axis is None:
        size = int(np.prod(shape, dtype=np.int64))
        y = _pad_end(e, y, 1, 0, size, count, zero)
        inv = e.node("Reshape", [inv, e.const(np.array(shape, np.int64))])
    else:
        size = int(shape[axis])
        y = _pad_end(e, y, len(shape), axis, size, count, zero)
    if src != x:
        y = e.node("Cast", [y], to=e.onnx_dtype(e.dtype(x)))
    e.node("Identity", [y], [outs[0]])
    e.node("Identity", [_pad_end(e, idx, 1, 0, size, count, np.int64(0))], [outs[1]])
    e.node("Identity", [inv], [outs[2]])
    e.node("Identity", [_pad_end(e, cnt, 1, 0, size, count, np.int64(0))], [outs[3]])
    e.node("Reshape", [count, e.const(np.array([], np.int64))], [outs[4]])


@export_op("BatchedNms")
def _batched_nms(e, ins, outs, a):
    """vision_ops' per-category padded NMS from ONNX NonMaxSuppression with
    one class per distinct category: a box scores its own score in its
    category's class and -inf elsewhere, which the lowest float32 as
    score_threshold drops (so a box scored -inf is never kept). The
    selection (class-major) is put back in Dragon's order, decreasing score
    and then lower index, by a TopK on the box index and a TopK on the
    score (ONNX TopK keeps equal values in index order)."""
    boxes, scores, idxs = ins[0], ins[1], ins[2]
    n = e.shape(boxes)[0]
    i64 = lambda v: e.const(np.array(v, np.int64))  # noqa: E731
    f32 = e.np_dtype(e.dtype(scores))
    cats = [e.fresh("cats"), e.fresh("cat_idx"), e.fresh("cat_of"), e.fresh("cat_n")]
    e.node("Unique", [idxs], cats, sorted=1)
    num_cats = e.node("Reshape", [e.node("Shape", [cats[0]]), i64([])])
    member = e.node("Equal", [e.node("Unsqueeze", [cats[2], i64([0])]),
                              e.node("Unsqueeze", [e.node("Range", [i64(0), num_cats, i64(1)]),
                                                   i64([1])])])          # [C, N]
    cls_scores = e.node("Where", [member, e.node("Unsqueeze", [scores, i64([0])]),
                                  e.const(np.array(-np.inf, f32))])
    sel = e.node("NonMaxSuppression", [
        e.node("Unsqueeze", [boxes, i64([0])]), e.node("Unsqueeze", [cls_scores, i64([0])]),
        i64([n]), e.const(np.array([a["iou_threshold"]], np.float32)),
        e.const(np.array([np.finfo(np.float32).min], np.float32))])
    picked = e.node("Reshape", [e.node("Slice", [sel, i64([2]), i64([3]), i64([1])]),
                                i64([-1])])
    count = e.node("Shape", [picked])
    by_index = e.node("TopK", [picked, count], [e.fresh("by_index"), e.fresh("unused")],
                      largest=0, sorted=1)
    order = [e.fresh("order_v"), e.fresh("order_i")]
    e.node("TopK", [e.node("Gather", [scores, by_index]), count], order, largest=1, sorted=1)
    keep = e.node("Gather", [by_index, order[1]])
    e.node("Identity", [_pad_end(e, keep, 1, 0, n, count, np.int64(-1))], [outs[0]])
    if len(outs) > 1:
        e.node("Reshape", [count, i64([])], [outs[1]])
# ---------------------------------------------------- the DFT family (fft.cc)
# ONNX DFT: complex as a trailing axis of 2 (as Dragon), forward unscaled,
# inverse by 1/n; other norms are a Mul. Opset 20 moved axis to an input.

def _dft_node(e, x, outs, axis, n, inverse, onesided=0):
    length = e.const(np.array(n, np.int64))
    if e.opset >= 20:
        return e.node("DFT", [x, length, e.const(np.array(axis, np.int64))], outs,
                      inverse=int(inverse), onesided=int(onesided))
    return e.node("DFT", [x, length], outs, axis=int(axis), inverse=int(inverse),
                  onesided=int(onesided))


def _dft_scale(norm, n, inverse):
    """numpy's factor relative to ONNX's (forward 1, inverse 1/n)."""
    if norm == "ortho":
        return math.sqrt(n) if inverse else 1.0 / math.sqrt(n)
    if inverse:
        return float(n) if norm == "forward" else 1.0
    return 1.0 / n if norm == "forward" else 1.0


def _scaled(e, y, outs, factor, like):
    """y times factor (a constant of ``like``'s dtype), into outs."""
    if factor == 1.0:
        return e.node("Identity", [y], outs)
    return e.node("Mul", [y, e.scalar(factor, like)], outs)


def _resize_axis(e, x, axis, size):
    """x cut, or zero-padded at the end, to ``size`` along ``axis``."""
    shape = list(e.shape(x))
    have = shape[axis]
    if have == size:
        return x
    if have > size:
        return e.node("Slice", [x, e.const(np.array([0], np.int64)),
                                e.const(np.array([size], np.int64)),
                                e.const(np.array([axis], np.int64))])
    shape[axis] = size - have
    zeros = e.const(np.zeros(shape, e.np_dtype(e.dtype(x))))
    return e.node("Concat", [x, zeros], axis=axis)


def _c2c(inverse):
    def run(e, ins, outs, a):
        rank = len(e.shape(ins[0])) - 1
        axis = int(a["axis"]) % rank
        n = int(e.shape(outs[0])[axis])
        y = _dft_node(e, ins[0], None, axis, n, inverse)
        _scaled(e, y, outs, _dft_scale(a["norm"], n, inverse), ins[0])
    return run


export_op("Fft")(_c2c(False))
export_op("Ifft")(_c2c(True))


@export_op("Rfft")
def _rfft(e, ins, outs, a):
    shape = list(e.shape(ins[0]))
    axis = int(a["axis"]) % len(shape)
    n = int(a["n"]) if a.get("n") is not None else shape[axis]
    x = e.node("Unsqueeze", [ins[0], e.const(np.array([-1], np.int64))])
    y = _dft_node(e, x, None, axis, n, False, onesided=1)
    _scaled(e, y, outs, _dft_scale(a["norm"], n, False), ins[0])


@export_op("Irfft")
def _irfft(e, ins, outs, a):
    """The Hermitian spectrum written out (Gather of the n // 2 + 1 given
    frequencies, conjugated for the mirrored ones; the imaginary parts of
    frequency 0 and n / 2 zeroed) and a full inverse DFT, real part: the
    inverse one-sided DFT is not read the same by every ONNX runtime."""
    shape = list(e.shape(ins[0]))
    rank = len(shape) - 1
    axis = int(a["axis"]) % rank
    n = int(e.shape(outs[0])[axis])
    count = n // 2 + 1
    x = _resize_axis(e, ins[0], axis, count)
    dtype = e.np_dtype(e.dtype(ins[0]))
    index = np.array([k if k < count else n - k for k in range(n)], np.int64)
    sign = np.ones((n, 2))
    sign[count:, 1] = -1.0                   # conjugate the mirrored half
    sign[0, 1] = 0.0                         # imag of frequency 0 ignored
    if n % 2 == 0:
        sign[n // 2, 1] = 0.0                # and of frequency n / 2
    sign = sign.reshape([n] + [1] * (rank - axis - 1) + [2]).astype(dtype)
    full = e.node("Mul", [e.node("Gather", [x, e.const(index)], axis=axis), e.const(sign)])
    y = _dft_node(e, full, None, axis, n, True)
    re = e.node("Slice", [y, e.const(np.array([0], np.int64)), e.const(np.array([1], np.int64)),
                          e.const(np.array([rank], np.int64))])
    re = e.node("Squeeze", [re, e.const(np.array([rank], np.int64))])
    _scaled(e, re, outs, _dft_scale(a["norm"], n, True), ins[0])
# ------------------------------------- uint16 / uint32 / uint64 (ABI 1.4)
# Integer semantics (truncating Div, Mod with fmod=0) for the wide unsigned
# dtypes too.
_INTS = _INTS + ("uint16", "uint32", "uint64")


# ------------------------------------- MatMul out_dtype (bf16 autocast)
# A float32 product of bfloat16/float16 operands has no single ONNX op: the
# product in the operands' dtype, then a Cast to out_dtype (one rounding to
# 16 bits more than Dragon's kernel; ONNX runtimes accumulate in float32).
def _with_out_dtype(export):
    def fn(e, ins, outs, a):
        out_dtype = a.get("out_dtype")
        if out_dtype is not None and not isinstance(out_dtype, str):
            out_dtype = out_dtype.name
        if out_dtype is None or out_dtype == e.dtype(ins[0]):
            export(e, ins, outs, a)
            return
        low = e.fresh("matmul_low")
        export(e, ins, [low], a)
        e.node("Cast", [low], outs, to=e.onnx_dtype(out_dtype))
    return fn


EXPORT["MatMul"] = _with_out_dtype(EXPORT["MatMul"])
EXPORT["MatMulBiasAct"] = _with_out_dtype(EXPORT["MatMulBiasAct"])
