"""ONNX op -> Dragon ops, one small function per ONNX op.

Each translation receives a ``_load.Node`` (inputs as Tensors through
``n.x(i)``, trace-time values through ``n.static(i)`` / ``n.ints(i)``,
attributes through ``n.a(name, default)``, the model's opset as
``n.opset``) and returns its outputs (a Tensor or a list). Register one with

    @op("Relu")
    def _relu(n):
        return ops.relu(n.x(0))

``check(attrs, opset, node)`` returns a reason string for a variant the
translation cannot express; ``load`` calls it for every node before anything
runs, so one error lists all of them. ``data_free=True`` marks ops whose
output depends on their inputs' shapes only (Shape, Size): a value computed
from them never depends on the caller's data.

Composites are fine where they compute what ONNX specifies (Gemm is a
MatMul and an Add; Erf is a polynomial accurate to float32 rounding).
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from .. import _C
from .. import ops
from .._tensor import Tensor, tensor
from ._load import (ONNX_DTYPES, ONNX_DTYPE_NAMES, Value, as_dragon, np_dtype,
                    tensor_proto_to_numpy)


class OpSpec(NamedTuple):
    fn: Callable
    data_free: bool
    check: Callable | None


TABLE: dict = {}


def op(*names, data_free: bool = False, check=None):
    """Register a translation for the ONNX op types ``names``."""
    def deco(fn):
        for nm in names:
            TABLE[nm] = OpSpec(fn, data_free, check)
        return fn
    return deco


# ------------------------------------------------------------ helpers

def dt(x: Tensor) -> str:
    return x.dtype.name


def const(value, dtype: str) -> Tensor:
    """A constant of ``dtype`` (a trace constant inside the compiled graph)."""
    return tensor(np.asarray(value, dtype=np_dtype(dtype)))


def like(x: Tensor, value) -> Tensor:
    return const(value, dt(x))


def norm_axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def reshape(x: Tensor, shape) -> Tensor:
    shape = [int(s) for s in shape]
    if tuple(shape) == tuple(x.shape):
        return x
    return ops.reshape(x, shape)


def _unary(fn):
    return lambda n: fn(n.x(0))


for _name, _fn in {"Abs": ops.abs, "Neg": ops.neg, "Exp": ops.exp, "Log": ops.log,
                   "Sqrt": ops.sqrt, "Reciprocal": ops.reciprocal, "Sigmoid": ops.sigmoid,
                   "Tanh": ops.tanh, "Relu": ops.relu, "Floor": ops.floor, "Ceil": ops.ceil,
                   "Round": ops.round, "Sign": ops.sign, "Sin": ops.sin, "Cos": ops.cos,
                   "Tan": ops.tan, "Asin": ops.asin, "Acos": ops.acos, "Atan": ops.atan,
                   "Sinh": ops.sinh, "Cosh": ops.cosh, "Asinh": ops.asinh,
                   "Acosh": ops.acosh, "Atanh": ops.atanh, "Erf": ops.erf,
                   "Not": ops.logical_not, "BitwiseNot": ops.bitwise_not}.items():
    op(_name)(_unary(_fn))

for _name, _fn in {"Add": ops.add, "Sub": ops.sub, "Mul": ops.mul,
                   "Equal": ops.equal, "Greater": ops.greater, "Less": ops.less,
                   "GreaterOrEqual": ops.greater_equal, "LessOrEqual": ops.less_equal,
                   "And": ops.logical_and, "Or": ops.logical_or,
                   "Xor": ops.not_equal, "BitwiseAnd": ops.bitwise_and,
                   "BitwiseOr": ops.bitwise_or, "BitwiseXor": ops.bitwise_xor}.items():
    op(_name)(lambda n, _fn=_fn: _fn(n.x(0), n.x(1)))


_INT = ("uint8", "int8", "int16", "int32", "int64")


@op("Div")
def _div(n):
    a, b = n.x(0), n.x(1)
    if dt(a) in _INT:
        return ops.trunc_divide(a, b)         # ONNX integer Div truncates
    return ops.div(a, b)


@op("Identity")
def _identity(n):
    return n.values[0]


@op("Pow")
def _pow(n):
    a, b = n.x(0), n.x(1)
    if dt(a) in _INT and dt(b) in ("float16", "bfloat16", "float32", "float64"):
        # An integer base to a float power: the power in float64, then
        # truncated to the base's dtype (3 ** 1.5 is 5), not the power
        # truncated first (3 ** 1 = 3).
        return ops.cast(ops.pow(ops.cast(a, "float64"), ops.cast(b, "float64")), dt(a))
    if dt(b) != dt(a):
        b = ops.cast(b, dt(a))
    return ops.pow(a, b)


def _variadic(fn):
    def run(n):
        xs = n.xs()
        y = xs[0]
        for x in xs[1:]:
            y = fn(y, x)
        return y
    return run


op("Max")(_variadic(ops.maximum))
op("Min")(_variadic(ops.minimum))
op("Sum")(_variadic(ops.add))


@op("Mean")
def _mean(n):
    y = _variadic(ops.add)(n)
    return ops.div(y, like(y, len(n.xs())))


@op("Mod")
def _mod(n):
    a, b = n.x(0), n.x(1)
    if not n.a("fmod", 0):
        return ops.mod(a, b)                  # sign of the divisor, as Python
    return ops.fmod(a, b)                     # sign of the dividend, as C


# -------------------------------------------------------- activations

@op("LeakyRelu")
def _leaky(n):
    return ops.leaky_relu(n.x(0), n.a("alpha", 0.01))


@op("PRelu")
def _prelu(n):
    x, s = n.x(0), n.x(1)
    return ops.where(ops.less(x, like(x, 0)), ops.mul(x, s), x)


@op("Elu")
def _elu(n):
    return ops.elu(n.x(0), n.a("alpha", 1.0))


@op("Selu")
def _selu(n):
    x = n.x(0)
    return ops.mul(ops.elu(x, n.a("alpha", 1.67326319217681884765625)),
                   like(x, n.a("gamma", 1.05070102214813232421875)))


@op("Celu")
def _celu(n):
    x, alpha = n.x(0), n.a("alpha", 1.0)
    if alpha > 0:
        return ops.mul(ops.elu(ops.div(x, like(x, alpha)), 1.0), like(x, alpha))
    # max(0, x) + min(0, alpha * (exp(x / alpha) - 1)): with alpha < 0 the
    # second term is not elu's (it is 0 for x < 0 and below 0 for x > 0).
    t = ops.mul(ops.expm1(ops.div(x, like(x, alpha))), like(x, alpha))
    return ops.add(ops.relu(x), ops.minimum(t, like(x, 0)))


@op("HardSigmoid")
def _hard_sigmoid(n):
    x = n.x(0)
    y = ops.add(ops.mul(x, like(x, n.a("alpha", 0.2))), like(x, n.a("beta", 0.5)))
    return ops.clip(y, 0.0, 1.0)


@op("HardSwish")
def _hard_swish(n):
    x = n.x(0)
    y = ops.add(ops.mul(x, like(x, 1.0 / 6.0)), like(x, 0.5))
    return ops.mul(x, ops.clip(y, 0.0, 1.0))


@op("ThresholdedRelu")
def _thresholded_relu(n):
    x = n.x(0)
    return ops.where(ops.greater(x, like(x, n.a("alpha", 1.0))), x, like(x, 0))


@op("Softsign")
def _softsign(n):
    x = n.x(0)
    return ops.div(x, ops.add(ops.abs(x), like(x, 1)))


@op("Softplus")
def _softplus(n):
    x = n.x(0)
    # log(1 + exp(x)) = max(x, 0) + log1p(exp(-|x|)), exact for every x.
    return ops.add(ops.relu(x), ops.log1p(ops.exp(ops.neg(ops.abs(x)))))


@op("Mish")
def _mish(n):
    x = n.x(0)
    sp = ops.add(ops.relu(x), ops.log1p(ops.exp(ops.neg(ops.abs(x)))))
    return ops.mul(x, ops.tanh(sp))


@op("Gelu")
def _gelu(n):
    return ops.gelu(n.x(0), n.a("approximate", "none"))


@op("Shrink")
def _shrink(n):
    x, lambd, bias = n.x(0), n.a("lambd", 0.5), n.a("bias", 0.0)
    return ops.where(ops.less(x, like(x, -lambd)), ops.add(x, like(x, bias)),
                     ops.where(ops.greater(x, like(x, lambd)), ops.sub(x, like(x, bias)),
                               like(x, 0)))


@op("Clip")
def _clip(n):
    x = n.x(0)
    if n.opset < 11:
        return ops.clip(x, n.a("min", None), n.a("max", None))
    if n.has(1):
        x = ops.maximum(x, n.x(1))
    if n.has(2):
        x = ops.minimum(x, n.x(2))
    return x


@op("IsNaN")
def _isnan(n):
    return ops.isnan(n.x(0))


@op("IsInf")
def _isinf(n):
    x = n.x(0)
    pos = ops.equal(x, like(x, np.inf)) if n.a("detect_positive", 1) else None
    neg = ops.equal(x, like(x, -np.inf)) if n.a("detect_negative", 1) else None
    if pos is not None and neg is not None:
        return ops.logical_or(pos, neg)
    if pos is None and neg is None:
        return ops.full(list(x.shape), False, "bool")
    return pos if pos is not None else neg


@op("Where")
def _where(n):
    return ops.where(n.x(0), n.x(1), n.x(2))


@op("Dropout")
def _dropout(n):
    x = n.x(0)
    if n.opset >= 12 and n.has(2):
        training = n.static(2)
        if bool(np.asarray(training).reshape(-1)[0]):
            ratio = 0.5 if not n.has(1) else float(np.asarray(n.static(1)).reshape(-1)[0])
            if ratio != 0.0:
                n.fail("training_mode=True with a non-zero ratio draws random numbers; "
                       "Dragon's import runs inference graphs only")
    outs = [x]
    if n.wants(1):
        outs.append(ops.full(list(x.shape), True, "bool"))
    return outs


# ----------------------------------------------------------- casting

def _check_cast(attrs, opset, node):
    to = attrs.get("to")
    if to is not None and ONNX_DTYPES.get(to) is None:
        return f"cast to {ONNX_DTYPE_NAMES.get(to, to)}, which Dragon lacks"
    return None


@op("Cast", check=_check_cast)
def _cast(n):
    to = ONNX_DTYPES[n.a("to")]
    x = n.x(0)
    return x if dt(x) == to else ops.cast(x, to)


@op("BitCast", check=_check_cast)
def _bitcast(n):
    to = ONNX_DTYPES[n.a("to")]
    x = n.x(0)
    return x if dt(x) == to else ops.bitcast(x, to)


@op("CastLike")
def _cast_like(n):
    x, to = n.x(0), dt(n.x(1))
    return x if dt(x) == to else ops.cast(x, to)


# ---------------------------------------------------------- shapes

@op("Shape", data_free=True)
def _shape(n):
    shape = list(n.x(0).shape)
    start, end = n.a("start", 0), n.a("end", None)
    return const(shape[slice(start, end)], "int64")


@op("Size", data_free=True)
def _size(n):
    return const(int(np.prod(n.x(0).shape, dtype=np.int64)), "int64")


@op("Reshape")
def _reshape(n):
    x = n.x(0)
    shape = n.ints(1) if n.opset >= 5 else n.a("shape")
    allowzero = n.a("allowzero", 0)
    out = [x.shape[i] if (s == 0 and not allowzero) else s for i, s in enumerate(shape)]
    return reshape(x, out)


@op("Flatten")
def _flatten(n):
    x = n.x(0)
    axis = norm_axis(n.a("axis", 1), x.ndim)
    lead = int(np.prod(x.shape[:axis], dtype=np.int64))
    return reshape(x, [lead, int(np.prod(x.shape[axis:], dtype=np.int64))])


@op("Transpose")
def _transpose(n):
    x = n.x(0)
    perm = n.a("perm", list(range(x.ndim))[::-1])
    return ops.transpose(x, [int(p) for p in perm])


def _axes(n, i: int, attr: str = "axes", from_opset: int = 13):
    """Axes from the attribute (older opsets) or from input ``i``."""
    if n.opset >= from_opset:
        return n.ints(i) if n.has(i) else None
    return n.a(attr, None)


@op("Squeeze")
def _squeeze(n):
    x = n.x(0)
    axes = _axes(n, 1)
    if axes is None:
        return reshape(x, [d for d in x.shape if d != 1])
    axes = {norm_axis(a, x.ndim) for a in axes}
    for a in axes:
        if x.shape[a] != 1:
            n.fail(f"cannot squeeze axis {a} of size {x.shape[a]} (shape {list(x.shape)})")
    return reshape(x, [d for i, d in enumerate(x.shape) if i not in axes])


@op("Unsqueeze")
def _unsqueeze(n):
    x = n.x(0)
    axes = _axes(n, 1)
    rank = x.ndim + len(axes)
    axes = sorted(norm_axis(a, rank) for a in axes)
    shape, it = [], iter(x.shape)
    for i in range(rank):
        shape.append(1 if i in axes else next(it))
    return reshape(x, shape)


@op("Concat")
def _concat(n):
    xs = n.xs()
    axis = n.a("axis", 0)
    # Empty pieces add nothing; when every piece is empty the result is
    # still their concatenation (its size along axis is their sum).
    xs = [x for x in xs if x.size] or xs
    return xs[0] if len(xs) == 1 else ops.concat(xs, axis)


@op("Split")
def _split(n):
    x = n.x(0)
    axis = norm_axis(n.a("axis", 0), x.ndim)
    sizes = n.ints(1) if (n.opset >= 13 and n.has(1)) else n.a("split", None)
    k = n.num_outputs
    if sizes is None:
        dim = x.shape[axis]
        if n.opset >= 18 and n.a("num_outputs", None) is not None:
            k = n.a("num_outputs")
            chunk = -(-dim // k)
            sizes = [chunk] * (dim // chunk) + ([dim % chunk] if dim % chunk else [])
        else:
            if dim % k:
                n.fail(f"axis {axis} of size {dim} does not split into {k} equal parts")
            sizes = [dim // k] * k
    outs, start = [], 0
    for s in sizes:
        outs.append(ops.slice(x, [start], [start + s], [1], [axis]))
        start += s
    return outs


@op("Slice")
def _slice(n):
    x = n.x(0)
    if n.opset < 10:
        starts, ends = n.a("starts"), n.a("ends")
        axes = n.a("axes", list(range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts, ends = n.ints(1), n.ints(2)
        axes = n.ints(3) if n.has(3) else list(range(len(starts)))
        steps = n.ints(4) if n.has(4) else [1] * len(starts)
    big = 2 ** 62
    ends = [min(max(e, -big), big) for e in ends]
    starts = [min(max(s, -big), big) for s in starts]
    axes = [norm_axis(a, x.ndim) for a in axes]
    # ONNX clamps a start before the first element to 0 for a negative
    # step too (it reads that element); NumPy's rule, Dragon's Slice's,
    # leaves nothing to read there.
    starts = [0 if (st < 0 and s_ < -x.shape[a]) else s_
              for s_, st, a in zip(starts, steps, axes)]
    return ops.slice(x, starts, ends, steps, axes)


@op("Gather")
def _gather(n):
    x, idx = n.x(0), n.x(1)
    axis = norm_axis(n.a("axis", 0), x.ndim)
    if dt(idx) not in ("int32", "int64"):
        idx = ops.cast(idx, "int64")
    return ops.gather(x, idx, axis)


def _linear_index(shape, axis_index: Tensor, axis: int) -> Tensor:
    """Row-major offsets into a tensor of ``shape`` for every position of
    an index tensor of the same rank, with axis ``axis`` replaced by
    ``axis_index`` (GatherElements / ScatterElements)."""
    ishape = tuple(axis_index.shape)
    strides = np.cumprod((list(shape[1:]) + [1])[::-1])[::-1].astype(np.int64)
    grids = np.indices(ishape, dtype=np.int64) if len(ishape) else np.zeros((0,), np.int64)
    base = np.zeros(ishape, np.int64)
    for d in range(len(ishape)):
        if d != axis:
            base += grids[d] * strides[d]
    idx = axis_index if dt(axis_index) == "int64" else ops.cast(axis_index, "int64")
    dim = shape[axis]
    idx = ops.where(ops.less(idx, const(0, "int64")), ops.add(idx, const(dim, "int64")), idx)
    return ops.add(ops.mul(idx, const(strides[axis], "int64")), const(base, "int64"))


@op("GatherElements")
def _gather_elements(n):
    x, idx = n.x(0), n.x(1)
    axis = norm_axis(n.a("axis", 0), x.ndim)
    lin = _linear_index(x.shape, idx, axis)
    return ops.gather(reshape(x, [-1]), lin, 0)


def _check_scatter(attrs, opset, node):
    red = attrs.get("reduction", "none")
    if red not in ("none", "add", "mul", "max", "min"):
        return f"reduction='{red}' (Dragon's scatter reduces with add, mul, max or min)"
    return None


def _scatter_reduced(x: Tensor, idx: Tensor, upd: Tensor, red: str) -> Tensor:
    """ScatterElements / ScatterND's ``reduction`` on flattened operands
    (axis 0): ScatterAdd for 'add', ScatterReduce for the others, the
    replacement for 'none'."""
    if red == "none":
        return _scatter_replace(x, idx, upd, 0)
    if red == "add":
        return ops.scatter_add(x, idx, upd, 0)
    return ops.scatter_reduce(x, idx, upd, 0, reduction=red)


@op("ScatterElements", "Scatter", check=_check_scatter)
def _scatter_elements(n):
    x, idx, upd = n.x(0), n.x(1), n.x(2)
    axis = norm_axis(n.a("axis", 0), x.ndim)
    lin = reshape(_linear_index(x.shape, idx, axis), [-1])
    flat_x, flat_u = reshape(x, [-1]), reshape(upd, [-1])
    return reshape(_scatter_reduced(flat_x, lin, flat_u, n.a("reduction", "none")), x.shape)


def _scatter_replace(x: Tensor, idx: Tensor, upd: Tensor, axis: int) -> Tensor:
    """x with the slices at ``idx`` replaced by ``upd`` (indices unique, as
    ONNX requires for reduction='none')."""
    zeros = ops.zeros(list(x.shape), dt(x)) if dt(x) != "bool" else None
    if dt(x) == "bool":
        xi = ops.cast(x, "uint8")
        return ops.cast(_scatter_replace(xi, idx, ops.cast(upd, "uint8"), axis), "bool")
    hit = ops.scatter_add(ops.zeros(list(x.shape), "int32"), idx,
                          ops.ones(list(upd.shape), "int32"), axis)
    placed = ops.scatter_add(zeros, idx, upd, axis)
    return ops.where(ops.greater(hit, const(0, "int32")), placed, x)


@op("GatherND")
def _gather_nd(n):
    x, idx = n.x(0), n.x(1)
    b = n.a("batch_dims", 0)
    k = idx.shape[-1]
    shape = list(x.shape)
    if b:
        # Fold the batch axes into the index: prepend the batch position.
        bshape = shape[:b]
        nb = int(np.prod(bshape, dtype=np.int64))
        inner = int(np.prod(shape[b:b + k], dtype=np.int64))
        strides = np.cumprod((shape[b + 1:b + k] + [1])[::-1])[::-1].astype(np.int64)
        ii = idx if dt(idx) == "int64" else ops.cast(idx, "int64")
        dims = const(np.array(shape[b:b + k], np.int64), "int64")
        ii = ops.where(ops.less(ii, const(0, "int64")), ops.add(ii, dims), ii)
        lin = ops.sum(ops.mul(ii, const(strides, "int64")), [-1])
        bpos = np.arange(nb, dtype=np.int64).reshape(bshape + [1] * (idx.ndim - 1 - b)) * inner
        lin = ops.add(lin, const(bpos, "int64"))
        flat = reshape(x, [nb * inner] + shape[b + k:])
        return ops.gather(flat, lin, 0)
    strides = np.cumprod((shape[1:k] + [1])[::-1])[::-1].astype(np.int64)
    ii = idx if dt(idx) == "int64" else ops.cast(idx, "int64")
    dims = const(np.array(shape[:k], np.int64), "int64")
    ii = ops.where(ops.less(ii, const(0, "int64")), ops.add(ii, dims), ii)
    lin = ops.sum(ops.mul(ii, const(strides, "int64")), [-1])
    flat = reshape(x, [int(np.prod(shape[:k], dtype=np.int64))] + shape[k:])
    return ops.gather(flat, lin, 0)


@op("ScatterND", check=_check_scatter)
def _scatter_nd(n):
    x, idx, upd = n.x(0), n.x(1), n.x(2)
    k = idx.shape[-1]
    shape = list(x.shape)
    strides = np.cumprod((shape[1:k] + [1])[::-1])[::-1].astype(np.int64)
    ii = idx if dt(idx) == "int64" else ops.cast(idx, "int64")
    dims = const(np.array(shape[:k], np.int64), "int64")
    ii = ops.where(ops.less(ii, const(0, "int64")), ops.add(ii, dims), ii)
    lin = reshape(ops.sum(ops.mul(ii, const(strides, "int64")), [-1]), [-1])
    rows = int(np.prod(shape[:k], dtype=np.int64))
    flat = reshape(x, [rows] + shape[k:])
    u = reshape(upd, [-1] + shape[k:])
    return reshape(_scatter_reduced(flat, lin, u, n.a("reduction", "none")), shape)


@op("Expand")
def _expand(n):
    x = n.x(0)
    shape = np.broadcast_shapes(tuple(x.shape), tuple(n.ints(1)))
    return x if tuple(shape) == tuple(x.shape) else ops.broadcast_to(x, list(shape))


@op("Tile")
def _tile(n):
    x = n.x(0)
    reps = n.ints(1)
    inter, big = [], []
    for r, d in zip(reps, x.shape):
        inter += [1, d]
        big += [r, d]
    y = ops.broadcast_to(reshape(x, inter), big)
    return reshape(y, [r * d for r, d in zip(reps, x.shape)])


@op("ConstantOfShape")
def _constant_of_shape(n):
    shape = n.ints(0)
    value = n.a_tensor("value")
    if value is None:
        value = np.zeros((1,), np.float32)
    v = value.reshape(-1)[0]
    name = str(value.dtype) if str(value.dtype) != "bfloat16" else "bfloat16"
    if name == "bool":
        return const(np.full(shape, bool(v)), "bool")
    return ops.full(list(shape), v.item(), name)


def _check_constant(attrs, opset, node):
    if "value_string" in attrs or "value_strings" in attrs:
        return "string constants (Dragon has no string dtype)"
    if "sparse_value" in attrs:
        return "sparse constants are not supported"
    if "value" in attrs and ONNX_DTYPES.get(attrs["value"].data_type) is None:
        return f"a constant of dtype {ONNX_DTYPE_NAMES.get(attrs['value'].data_type)}"
    return None


@op("Constant", check=_check_constant)
def _constant(n):
    if "value" in n.attrs:
        return tensor(n.a_tensor("value"))
    for key, dtype in (("value_float", "float32"), ("value_floats", "float32"),
                       ("value_int", "int64"), ("value_ints", "int64")):
        if key in n.attrs:
            return const(n.a(key), dtype)
    n.fail("no value attribute")


@op("Range")
def _range(n):
    start, limit, delta = (np.asarray(n.static(i)).reshape(()) for i in range(3))
    return const(np.arange(start, limit, delta).astype(start.dtype), dt(n.x(0)))


@op("EyeLike")
def _eye_like(n):
    x = n.x(0)
    to = ONNX_DTYPES.get(n.a("dtype", None)) if n.a("dtype", None) else dt(x)
    return const(np.eye(x.shape[0], x.shape[1], n.a("k", 0)), to)


@op("Trilu")
def _trilu(n):
    x = n.x(0)
    k = int(np.asarray(n.static(1)).reshape(-1)[0]) if n.has(1) else 0
    r, c = x.shape[-2], x.shape[-1]
    mask = np.triu(np.ones((r, c), bool), k) if n.a("upper", 1) else \
        np.tril(np.ones((r, c), bool), k)
    return ops.where(const(mask, "bool"), x, like(x, 0))


@op("OneHot")
def _one_hot(n):
    idx = n.x(0)
    depth = int(np.asarray(n.static(1)).reshape(-1)[0])
    values = n.x(2)
    off_on = np.asarray(n.static(2)).reshape(-1)
    if dt(idx) not in ("int32", "int64"):
        idx = ops.cast(idx, "int64")
    idx = ops.where(ops.less(idx, like(idx, 0)), ops.add(idx, like(idx, depth)), idx)
    valid = ops.logical_and(ops.greater_equal(idx, like(idx, 0)),
                            ops.less(idx, like(idx, depth)))
    idx = ops.where(valid, idx, like(idx, 0))      # ONNX: out of range -> all off
    axis = n.a("axis", -1)
    y = ops.one_hot(idx, depth, 1.0, 0.0, "float32", axis)
    y = ops.mul(y, ops.cast(ops.unsqueeze(valid, [norm_axis(axis, idx.ndim + 1)]), "float32"))
    on, off = like(values, off_on[1]), like(values, off_on[0])
    return ops.where(ops.greater(y, const(0.5, "float32")), on, off)


@op("DepthToSpace")
def _depth_to_space(n):
    x = n.x(0)
    b = n.a("blocksize")
    N, C, H, W = x.shape
    if n.a("mode", "DCR") == "DCR":
        y = ops.transpose(reshape(x, [N, b, b, C // (b * b), H, W]), [0, 3, 4, 1, 5, 2])
    else:
        y = ops.transpose(reshape(x, [N, C // (b * b), b, b, H, W]), [0, 1, 4, 2, 5, 3])
    return reshape(y, [N, C // (b * b), H * b, W * b])


@op("SpaceToDepth")
def _space_to_depth(n):
    x = n.x(0)
    b = n.a("blocksize")
    N, C, H, W = x.shape
    perm = [0, 1, 3, 5, 2, 4] if n.a("mode", "DCR") == "CRD" else [0, 3, 5, 1, 2, 4]
    y = ops.transpose(reshape(x, [N, C, H // b, b, W // b, b]), perm)
    return reshape(y, [N, C * b * b, H // b, W // b])


# --------------------------------------------------------- reductions

_REDUCE_AXES_INPUT = {"ReduceSum": 13}


def _reduce(kind):
    def run(n):
        x = n.x(0)
        keep = bool(n.a("keepdims", 1))
        if n.opset >= _REDUCE_AXES_INPUT.get(n.op_type, 18):
            axes = n.ints(1) if n.has(1) else None
            if axes is not None and len(axes) == 0:
                axes = None
        else:
            axes = n.a("axes", None)
        if axes is None and n.a("noop_with_empty_axes", 0):
            # A reduction over no axes: each element alone, so the
            # element-wise part still applies (ReduceSumSquare squares,
            # ReduceL1 takes |x|, ReduceLogSum the log).
            return _REDUCE_NOOP.get(n.op_type, lambda v: v)(x)
        if axes is not None:
            axes = sorted({norm_axis(a, x.ndim) for a in axes})
        return kind(x, axes, keep)
    return run


def _r_sumsq(x, a, k):
    return ops.sum(ops.square(x), a, k)


_REDUCTIONS = {
    "ReduceSum": lambda x, a, k: ops.sum(x, a, k),
    "ReduceMean": lambda x, a, k: ops.mean(x, a, k),
    "ReduceMax": lambda x, a, k: ops.max(x, a, k),
    "ReduceMin": lambda x, a, k: ops.min(x, a, k),
    "ReduceProd": lambda x, a, k: ops.prod(x, a, k),
    "ReduceL1": lambda x, a, k: ops.sum(ops.abs(x), a, k),
    "ReduceL2": lambda x, a, k: ops.sqrt(_r_sumsq(x, a, k)),
    "ReduceSumSquare": _r_sumsq,
    "ReduceLogSum": lambda x, a, k: ops.log(ops.sum(x, a, k)),
    "ReduceLogSumExp": lambda x, a, k: ops.logsumexp(x, a, k),
}
_REDUCE_NOOP = {
    "ReduceL1": ops.abs,
    "ReduceL2": lambda x: ops.sqrt(ops.square(x)),
    "ReduceSumSquare": ops.square,
    "ReduceLogSum": ops.log,
}
for _name, _fn in _REDUCTIONS.items():
    op(_name)(_reduce(_fn))


def _arg(fn):
    def run(n):
        x = n.x(0)
        axis = norm_axis(n.a("axis", 0), x.ndim)
        keep = bool(n.a("keepdims", 1))
        if n.a("select_last_index", 0):
            dim = x.shape[axis]
            flipped = ops.slice(x, [-1], [-(2 ** 62)], [-1], [axis])
            i = fn(flipped, axis, keep)
            return ops.sub(const(dim - 1, dt(i)), i)
        return fn(x, axis, keep)
    return run


op("ArgMax")(_arg(ops.argmax))
op("ArgMin")(_arg(ops.argmin))


# -------------------------------------------------------- softmax

def _softmax(fn):
    def run(n):
        x = n.x(0)
        if n.opset >= 13:
            return fn(x, n.a("axis", -1))
        axis = norm_axis(n.a("axis", 1), x.ndim)
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        y = fn(reshape(x, [lead, -1 if x.size else int(np.prod(x.shape[axis:]))]), -1)
        return reshape(y, x.shape)
    return run


op("Softmax")(_softmax(ops.softmax))
op("LogSoftmax")(_softmax(ops.log_softmax))


@op("Hardmax")
def _hardmax(n):
    def hard(x, axis):
        axis = norm_axis(axis, x.ndim)
        i = ops.argmax(x, axis, False)
        return ops.cast(ops.one_hot(i, x.shape[axis], 1.0, 0.0, "float32", axis), dt(x))
    return _softmax(hard)(n)


@op("LpNormalization")
def _lp_norm(n):
    x = n.x(0)
    axis, p = n.a("axis", -1), n.a("p", 2)
    if p == 1:
        norm = ops.sum(ops.abs(x), [axis], True)
    else:
        norm = ops.sqrt(ops.sum(ops.square(x), [axis], True))
    zero = ops.equal(norm, like(norm, 0))
    return ops.where(zero, like(x, 0), ops.div(x, ops.where(zero, like(norm, 1), norm)))


# ----------------------------------------------------------- matmul

@op("MatMul")
def _matmul(n):
    return ops.matmul(n.x(0), n.x(1))


@op("Det")
def _det(n):
    return ops.det(n.x(0))


@op("Gemm")
def _gemm(n):
    a, b = n.x(0), n.x(1)
    y = ops.matmul(a, b, bool(n.a("transA", 0)), bool(n.a("transB", 0)))
    alpha, beta = n.a("alpha", 1.0), n.a("beta", 1.0)
    if alpha != 1.0:
        y = ops.mul(y, like(y, alpha))
    if n.has(2) and beta != 0.0:
        c = n.x(2)
        y = ops.add(y, c if beta == 1.0 else ops.mul(c, like(c, beta)))
    return y


# ------------------------------------------------------- convolution

_OPS_3D = {"Conv": "conv3d", "ConvTranspose": "conv_transpose3d", "MaxPool": "max_pool3d",
           "AveragePool": "avg_pool3d", "LpPool": "avg_pool3d"}


def _spatial_check(attrs, opset, node):
    ks = attrs.get("kernel_shape")
    if ks is not None and len(ks) > 2 and not (len(ks) == 3 and node.op_type in _OPS_3D):
        return f"{len(ks)}-D windows (Dragon's op library has 1-D and 2-D ones)"
    if attrs.get("storage_order", 0):
        return "storage_order=1"
    if node.op_type == "AveragePool" and any(d != 1 for d in attrs.get("dilations", [])):
        return (f"dilations={attrs['dilations']} (Dragon's average pooling has no "
                "dilation)")
    return None


def _auto_pads(n, in_sizes, kernel, strides, dilations):
    """Begin/end pads per spatial axis, ONNX order (all begins, then ends)."""
    rank = len(in_sizes)
    auto = n.a("auto_pad", "NOTSET")
    if auto in ("NOTSET", ""):
        pads = n.a("pads", [0] * (2 * rank))
        return list(pads)
    if auto == "VALID":
        return [0] * (2 * rank)
    begins, ends = [], []
    for i in range(rank):
        out = -(-in_sizes[i] // strides[i])
        total = max(0, (out - 1) * strides[i] + (kernel[i] - 1) * dilations[i] + 1 - in_sizes[i])
        small, large = total // 2, total - total // 2
        if auto == "SAME_UPPER":
            begins.append(small), ends.append(large)
        else:
            begins.append(large), ends.append(small)
    return begins + ends


def _to2d(x: Tensor) -> Tensor:
    return reshape(x, list(x.shape[:2]) + [1] + list(x.shape[2:]))


def _geometry(n, x, kernel):
    rank = x.ndim - 2
    strides = n.a("strides", [1] * rank)
    dilations = n.a("dilations", [1] * rank)
    pads = _auto_pads(n, list(x.shape[2:]), kernel, strides, dilations)
    return strides, dilations, pads


def _spatial_2d(n, x, strides, dilations, pads):
    """Lift 1-D geometry to 2-D (a height of 1)."""
    if x.ndim == 3:
        return (_to2d(x), [1] + list(strides), [1] + list(dilations),
                ((0, 0), (pads[0], pads[1])))
    if x.ndim != 4:
        n.fail(f"{x.ndim - 2}-D input {list(x.shape)}: Dragon's op library has 1-D and 2-D "
               "windows")
    return x, list(strides), list(dilations), _pairs(pads, 2)


def _split_pads(pads, rank):
    """ONNX pads (begins, then ends) -> (begins, ends)."""
    return list(pads[:rank]), list(pads[rank:])


def _pairs(pads, rank):
    """ONNX pads ``[x1_begin, x2_begin, ..., x1_end, x2_end, ...]`` -> the
    ``(before, after)`` pair per axis that Dragon's ops take."""
    return tuple((int(b_), int(e_)) for b_, e_ in zip(pads[:rank], pads[rank:2 * rank]))


def _flat_pairs(full):
    """``[b0, a0, b1, a1, ...]`` -> ``((b0, a0), (b1, a1), ...)``."""
    return tuple((int(b_), int(a_)) for b_, a_ in zip(full[0::2], full[1::2]))


def _pad_explicitly(x, begins, ends, value=0.0):
    full = ((0, 0), (0, 0)) + tuple(zip(begins, ends))
    return ops.pad(x, full, "constant", value)


@op("Conv", check=_spatial_check)
def _conv(n):
    x, w, b = n.x(0), n.x(1), n.x(2)
    strides, dilations, pads = _geometry(n, x, list(w.shape[2:]))
    if x.ndim == 5:
        begins, ends = _split_pads(pads, 3)
        if begins != ends:
            x, begins = _pad_explicitly(x, begins, ends), [0, 0, 0]
        return ops.conv3d(x, w, b, list(strides), begins, list(dilations), n.a("group", 1))
    one_d = x.ndim == 3
    x2, s2, d2, p2 = _spatial_2d(n, x, strides, dilations, pads)
    w2 = _to2d(w) if one_d else w
    y = ops.conv2d(x2, w2, b, s2, p2, d2, n.a("group", 1))
    return reshape(y, [y.shape[0], y.shape[1], y.shape[3]]) if one_d else y


def _conv_transpose_cropped(n, x, w, b, strides, dilations, out_pad, pads):
    """ConvTranspose whose pads Dragon's ops cannot take (negative: the
    output reaches past the full result, e.g. a larger output_shape; or
    asymmetric in 3-D): the full result (no pads) is cropped where a pad is
    positive and extended with zeros where it is negative, then the bias
    is added (the extension holds the bias alone)."""
    rank = x.ndim - 2
    zeros = [0] * rank
    if rank == 3:
        y = ops.conv_transpose3d(x, w, None, list(strides), zeros, list(out_pad),
                                 list(dilations), n.a("group", 1))
    elif rank == 2:
        y = ops.conv_transpose2d(x, w, None, list(strides), zeros, list(out_pad),
                                 list(dilations), n.a("group", 1))
    else:
        n.fail(f"negative padding {pads} of a {rank}-D transposed convolution")
    begins, ends = pads[:rank], pads[rank:]
    if any(p > 0 for p in pads):
        starts = [max(p, 0) for p in begins]
        stops = [y.shape[2 + i] - max(ends[i], 0) for i in range(rank)]
        y = ops.slice(y, starts, stops, [1] * rank, list(range(2, 2 + rank)))
    if any(p < 0 for p in pads):
        full = ((0, 0), (0, 0)) + tuple((max(-begins[i], 0), max(-ends[i], 0))
                                        for i in range(rank))
        y = ops.pad(y, full, "constant", 0.0)
    if b is not None:
        y = ops.add(y, reshape(b, [1, -1] + [1] * rank))
    return y


@op("ConvTranspose", check=_spatial_check)
def _conv_transpose(n):
    x, w, b = n.x(0), n.x(1), n.x(2)
    rank = x.ndim - 2
    kernel = list(w.shape[2:])
    strides = n.a("strides", [1] * rank)
    dilations = n.a("dilations", [1] * rank)
    out_pad = n.a("output_padding", [0] * rank)
    auto = n.a("auto_pad", "NOTSET")
    out_shape = n.a("output_shape", None)
    if out_shape is not None or auto in ("SAME_UPPER", "SAME_LOWER"):
        ins = list(x.shape[2:])
        target = list(out_shape[-rank:]) if out_shape is not None else \
            [ins[i] * strides[i] for i in range(rank)]
        begins, ends = [], []
        # ONNX: SAME_UPPER puts an odd pad's extra cell at the end; every
        # other case (SAME_LOWER, and an output_shape without auto_pad) at
        # the start.
        for i in range(rank):
            total = strides[i] * (ins[i] - 1) + out_pad[i] + ((kernel[i] - 1) * dilations[i]
                                                              + 1) - target[i]
            if total < 0:
                # An output_shape past the full result: the extra cells go
                # at the end, as output_padding would (onnxruntime's rule).
                begins.append(0), ends.append(total)
            elif auto == "SAME_UPPER":
                begins.append(total // 2), ends.append(total - total // 2)
            else:
                begins.append(total - total // 2), ends.append(total // 2)
        pads = begins + ends
    elif auto == "VALID":
        pads = [0] * (2 * rank)
    else:
        pads = n.a("pads", [0] * (2 * rank))
    if any(p < 0 for p in pads) or (rank == 3 and pads[:3] != pads[3:]):
        return _conv_transpose_cropped(n, x, w, b, strides, dilations, out_pad, pads)
    if rank == 3:
        begins, ends = _split_pads(pads, 3)
        return ops.conv_transpose3d(x, w, b, list(strides), begins, list(out_pad),
                                    list(dilations), n.a("group", 1))
    one_d = rank == 1
    x2, s2, d2, p2 = _spatial_2d(n, x, strides, dilations, pads)
    op2 = [0] + list(out_pad) if one_d else list(out_pad)
    w2 = _to2d(w) if one_d else w
    y = ops.conv_transpose2d(x2, w2, b, s2, p2, op2, d2, n.a("group", 1))
    return reshape(y, [y.shape[0], y.shape[1], y.shape[3]]) if one_d else y


def _pool(kind):
    def run(n):
        x = n.x(0)
        kernel = list(n.a("kernel_shape"))
        strides, dilations, pads = _geometry(n, x, kernel)
        rank = len(kernel)
        ceil = bool(n.a("ceil_mode", 0))
        if rank == 3:
            return _pool3d(n, kind, x, kernel, strides, dilations, pads, ceil)
        x2, s2, d2, p2 = _spatial_2d(n, x, strides, dilations, pads)
        if kind == "avg" and any(d != 1 for d in d2):
            n.fail(f"dilations {dilations} in average pooling")
        k2 = [1] + kernel if rank == 1 else kernel
        begin, end = [p[0] for p in p2], [p[1] for p in p2]
        half_ok = all(2 * p <= k for p, k in zip(begin + end, k2 + k2))
        # The 2-D pooling ops pad each side by up to half the kernel, the
        # two sides alike or not; wider padding is applied explicitly. (An
        # averaging window in ceil mode that runs past the end padding
        # divides as PyTorch does, which ONNX does not pin down: explicit.)
        explicit = not half_ok or (begin != end and ceil and kind == "avg")
        if not explicit:
            begin = tuple(zip(begin, end))
        if explicit:
            if ceil:
                n.fail(f"asymmetric padding {pads} with ceil_mode=1")
            fill = -np.inf if kind == "max" else 0.0
            if kind == "max" and dt(x2) not in ("float16", "bfloat16", "float32", "float64"):
                fill = float(np.iinfo(np_dtype(dt(x2))).min)
            full = ((0, 0), (0, 0), (begin[0], end[0]), (begin[1], end[1]))
            if kind == "avg" and not n.a("count_include_pad", 0):
                # Mean over the real cells: window sums of x over window
                # sums of a mask of the real cells.
                ones = ops.pad(ops.full(list(x2.shape), 1.0, dt(x2)), full)
                xs = ops.pad(x2, full)
                num = ops.avg_pool2d(xs, k2, s2, [0, 0], False, True)
                den = ops.avg_pool2d(ones, k2, s2, [0, 0], False, True)
                y = ops.div(num, den)
                return reshape(y, [y.shape[0], y.shape[1], y.shape[3]]) if rank == 1 else y
            x2 = ops.pad(x2, full, "constant", fill)
            begin = [0, 0]
        if kind == "max":
            y = ops.max_pool2d(x2, k2, s2, begin, d2, ceil)
            if n.wants(1):
                if explicit:
                    n.fail("the Indices output with asymmetric padding")
                # Dragon counts inside each (n, c) plane; ONNX (storage_order
                # 0) across the whole tensor: add (n * C + c) * H * W.
                idx = ops.max_pool2d_indices(x2, k2, s2, begin, d2, ceil)
                N, C, H, W = x2.shape
                base = (np.arange(N * C, dtype=np.int64) * H * W).reshape(N, C, 1, 1)
                idx = ops.add(idx, const(base, "int64"))
                if rank == 1:
                    y = reshape(y, [y.shape[0], y.shape[1], y.shape[3]])
                    idx = reshape(idx, list(y.shape))
                return [y, idx]
        else:
            y = ops.avg_pool2d(x2, k2, s2, begin, ceil, bool(n.a("count_include_pad", 0)))
        return reshape(y, [y.shape[0], y.shape[1], y.shape[3]]) if rank == 1 else y
    return run


def _pool3d(n, kind, x, kernel, strides, dilations, pads, ceil):
    if kind == "avg" and any(d != 1 for d in dilations):
        n.fail(f"dilations {dilations} in average pooling")
    begins, ends = _split_pads(pads, 3)
    half_ok = all(2 * p <= k for p, k in zip(begins, kernel))
    include = bool(n.a("count_include_pad", 0))
    if begins != ends or not half_ok:
        if ceil:
            n.fail(f"asymmetric padding {pads} with ceil_mode=1")
        if kind == "avg" and not include:
            ones = _pad_explicitly(ops.full(list(x.shape), 1.0, dt(x)), begins, ends)
            num = ops.avg_pool3d(_pad_explicitly(x, begins, ends), kernel, list(strides),
                                 [0, 0, 0], False, True)
            return ops.div(num, ops.avg_pool3d(ones, kernel, list(strides), [0, 0, 0], False,
                                               True))
        x = _pad_explicitly(x, begins, ends, -np.inf if kind == "max" else 0.0)
        begins = [0, 0, 0]
    if kind == "max":
        y, idx = ops.max_pool3d(x, kernel, list(strides), begins, list(dilations), ceil)
        if n.wants(1):
            n.fail("the Indices output is not supported")
        return y
    return ops.avg_pool3d(x, kernel, list(strides), begins, ceil, include)


op("MaxPool", check=_spatial_check)(_pool("max"))
op("AveragePool", check=_spatial_check)(_pool("avg"))


@op("GlobalAveragePool")
def _global_avg(n):
    x = n.x(0)
    return ops.mean(x, list(range(2, x.ndim)), True)


@op("GlobalMaxPool")
def _global_max(n):
    x = n.x(0)
    return ops.max(x, list(range(2, x.ndim)), True)


# ------------------------------------------------------ normalisation

def _check_bn(attrs, opset, node):
    if attrs.get("training_mode", 0):
        return "training_mode=1 (the import builds inference graphs)"
    return None


@op("BatchNormalization", check=_check_bn)
def _batch_norm(n):
    x = n.x(0)
    eps = n.a("epsilon", 1e-5)
    y = ops.batch_norm(x, n.x(1), n.x(2), n.x(3), n.x(4), eps, False)
    y = y[0] if isinstance(y, (tuple, list)) else y
    outs = [y]
    for j, i in ((1, 3), (2, 4)):
        if n.wants(j):
            outs.append(n.x(i))
    return outs


def _bcast_param(p: Tensor, x: Tensor, axis: int) -> Tensor:
    """A per-channel parameter [C] shaped to broadcast against x along axis."""
    shape = [1] * x.ndim
    shape[axis] = p.shape[0]
    return reshape(p, shape)


@op("InstanceNormalization")
def _instance_norm(n):
    x, scale, bias = n.x(0), n.x(1), n.x(2)
    axes = list(range(2, x.ndim))
    m = ops.mean(x, axes, True)
    v = ops.var(x, axes, True)
    y = ops.mul(ops.sub(x, m), ops.rsqrt(ops.add(v, like(x, n.a("epsilon", 1e-5)))))
    return ops.add(ops.mul(y, _bcast_param(scale, x, 1)), _bcast_param(bias, x, 1))


@op("LayerNormalization")
def _layer_norm(n):
    x, scale = n.x(0), n.x(1)
    axis = norm_axis(n.a("axis", -1), x.ndim)
    eps = n.a("epsilon", 1e-5)
    tail = list(x.shape[axis:])
    s = scale if list(scale.shape) == tail else ops.broadcast_to(scale, tail)
    b = n.x(2) if n.has(2) else ops.zeros(tail, dt(x))
    if list(b.shape) != tail:
        b = ops.broadcast_to(b, tail)
    outs = [ops.layer_norm(x, s, b, axis, eps)]
    if n.wants(1) or n.wants(2):
        axes = list(range(axis, x.ndim))
        mean = ops.mean(x, axes, True)
        outs.append(mean)
        outs.append(ops.rsqrt(ops.add(ops.var(x, axes, True), like(x, eps))))
    return outs


@op("GroupNormalization")
def _group_norm(n):
    x, scale, bias = n.x(0), n.x(1), n.x(2)
    g = n.a("num_groups")
    eps = n.a("epsilon", 1e-5)
    N, C = x.shape[:2]
    xg = reshape(x, [N, g, -1])
    m = ops.mean(xg, [2], True)
    v = ops.var(xg, [2], True)
    y = reshape(ops.mul(ops.sub(xg, m), ops.rsqrt(ops.add(v, like(x, eps)))), x.shape)
    if n.opset < 21:   # scale/bias per group
        scale = reshape(ops.broadcast_to(reshape(scale, [g, 1]), [g, C // g]), [C])
        bias = reshape(ops.broadcast_to(reshape(bias, [g, 1]), [g, C // g]), [C])
    return ops.add(ops.mul(y, _bcast_param(scale, x, 1)), _bcast_param(bias, x, 1))


@op("MeanVarianceNormalization")
def _mvn(n):
    x = n.x(0)
    axes = [norm_axis(a, x.ndim) for a in n.a("axes", [0, 2, 3])]
    m = ops.mean(x, axes, True)
    v = ops.sub(ops.mean(ops.square(x), axes, True), ops.square(m))
    return ops.div(ops.sub(x, m), ops.add(ops.sqrt(v), like(x, 1e-9)))


@op("LRN")
def _lrn(n):
    x = n.x(0)
    size = n.a("size")
    alpha, beta, bias = n.a("alpha", 1e-4), n.a("beta", 0.75), n.a("bias", 1.0)
    C = x.shape[1]
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = ops.square(x)
    pads = ((0, 0), (before, after)) + ((0, 0),) * (x.ndim - 2)
    sqp = ops.pad(sq, pads)
    acc = None
    for i in range(size):
        part = ops.slice(sqp, [i], [i + C], [1], [1])
        acc = part if acc is None else ops.add(acc, part)
    denom = ops.pow(ops.add(ops.mul(acc, like(x, alpha / size)), like(x, bias)), like(x, beta))
    return ops.div(x, denom)


# --------------------------------------------------------------- pad

def _check_pad(attrs, opset, node):
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        return f"mode='{mode}' (Dragon pads with constant, reflect or edge)"
    return None


@op("Pad", check=_check_pad)
def _pad(n):
    x = n.x(0)
    mode = n.a("mode", "constant")
    if n.opset < 11:
        pads, value = n.a("pads"), n.a("value", 0.0)
        axes = list(range(x.ndim))
    else:
        pads = n.ints(1)
        value = np.asarray(n.static(2)).reshape(-1)[0].item() if n.has(2) else 0
        axes = [norm_axis(a, x.ndim) for a in n.ints(3)] if n.has(3) else list(range(x.ndim))
    k = len(axes)
    full = [0] * (2 * x.ndim)
    for j, a in enumerate(axes):
        full[2 * a], full[2 * a + 1] = pads[j], pads[k + j]
    # Negative pads crop.
    if any(p < 0 for p in full):
        starts = [max(0, -full[2 * a]) for a in range(x.ndim)]
        ends = [x.shape[a] - max(0, -full[2 * a + 1]) for a in range(x.ndim)]
        x = ops.slice(x, starts, ends, [1] * x.ndim, list(range(x.ndim)))
        full = [max(0, p) for p in full]
    if not any(full):
        return x
    full = _flat_pairs(full)
    if dt(x) == "bool":
        return ops.cast(ops.pad(ops.cast(x, "uint8"), full, mode, float(value)), "bool")
    return ops.pad(x, full, mode, float(value))


# ------------------------------------------------------------ resize
#
# Resize is separable: along each resized axis, output cell i reads a few
# input cells at indices and with weights that depend only on the sizes,
# scales and attributes, all known at trace time. They are computed here in
# NumPy by the ONNX formulas and applied with Gather (+ Mul/Add), which
# covers every coordinate transformation, nearest rounding and cubic
# variant exactly.

_RESIZE_CTM = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
               "asymmetric", "tf_crop_and_resize")


def _check_resize(attrs, opset, node):
    mode = attrs.get("mode", "nearest")
    if attrs.get("antialias", 0) and mode not in ("linear", "bilinear", "cubic", "bicubic"):
        return f"antialias=1 with mode='{mode}' (ONNX defines it for linear and cubic)"
    if mode not in ("nearest", "linear", "bilinear", "cubic", "bicubic"):
        return f"mode='{mode}'"
    ctm = attrs.get("coordinate_transformation_mode", "half_pixel")
    if ctm not in _RESIZE_CTM:
        return f"coordinate_transformation_mode='{ctm}'"
    return None


def _source_coords(ctm, out: int, length: int, scale: float, roi=None) -> np.ndarray:
    x = np.arange(out, dtype=np.float64)
    if ctm == "half_pixel":
        return (x + 0.5) / scale - 0.5
    if ctm == "half_pixel_symmetric":
        adj = out / (scale * length)
        offset = length / 2.0 * (1 - adj)
        return offset + (x + 0.5) / scale - 0.5
    if ctm == "pytorch_half_pixel":
        return (x + 0.5) / scale - 0.5 if out > 1 else np.zeros_like(x)
    if ctm == "align_corners":
        resized = scale * length          # ONNX divides by the real-valued size
        return x * (length - 1) / (resized - 1) if resized != 1 else np.zeros_like(x)
    if ctm == "asymmetric":
        return x / scale
    start, end = roi
    if out > 1:
        return start * (length - 1) + x * (end - start) * (length - 1) / (out - 1)
    return np.full_like(x, 0.5 * (start + end) * (length - 1))


def _nearest_index(xo, mode):
    if mode == "round_prefer_ceil":
        return np.floor(xo + 0.5)
    if mode == "floor":
        return np.floor(xo)
    if mode == "ceil":
        return np.ceil(xo)
    return np.ceil(xo - 0.5)          # round_prefer_floor (default)


def _cubic_weights(r, a):
    """Keys' cubic convolution weights for taps -1, 0, 1, 2 at fraction r."""
    def k(d):
        d = np.abs(d)
        return np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                        np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    return np.stack([k(r + 1), k(r), k(1 - r), k(2 - r)], axis=-1)


def _antialias_taps(xo, length, scale, mode, a, exclude_outside):
    """Resize-18 antialias (linear and cubic): the interpolation kernel is
    stretched by 1 / scale when downsampling (scale < 1), so each output
    averages every input cell under its footprint, as PIL / torchvision's
    antialias; weights are normalised to sum to 1. The cells are the n
    nearest to the source coordinate, the left one preferred (an integer
    coordinate counts as ratio 1 from the cell before it), clamped to the
    edge. Returns (cells [out, n], weights [out, n])."""
    s = min(scale, 1.0)
    integer = xo == np.floor(xo)
    base = np.where(integer, xo - 1, np.floor(xo)).astype(np.int64)
    ratio = np.where(integer, 1.0, xo - np.floor(xo))
    if mode == "linear":
        start = int(np.floor(-1 / s) + 1)
    else:
        start = int(np.floor(-2 / s) + 1)
    offs = np.arange(start, 2 - start)
    d = (offs[None, :] - ratio[:, None]) * s
    if mode == "linear":
        w = np.clip(1 - np.abs(d), 0, 1)
    else:
        d = np.abs(d)
        w = np.where(d <= 1, ((a + 2) * d - (a + 3)) * d * d + 1,
                     np.where(d < 2, ((a * d - 5 * a) * d + 8 * a) * d - 4 * a, 0.0))
    w = w / w.sum(axis=1, keepdims=True)
    raw = base[:, None] + offs[None, :]
    if exclude_outside:
        w = np.where((raw < 0) | (raw > length - 1), 0.0, w)
        total = w.sum(axis=1, keepdims=True)
        w = w / np.where(total == 0, 1.0, total)
    return np.clip(raw, 0, length - 1), w


def _resize_axis(n, x, axis, out, scale, roi, mode):
    length = x.shape[axis]
    ctm = n.a("coordinate_transformation_mode", "half_pixel")
    if n.op_type == "Upsample" or n.opset < 11:
        ctm = "asymmetric"
    xo = _source_coords(ctm, out, length, scale, roi)
    outside = None
    if ctm == "tf_crop_and_resize":
        outside = (xo < 0) | (xo > length - 1)
    if mode != "nearest" and n.opset >= 18 and n.a("antialias", 0):
        # All taps in one Gather, then weights and a sum over the tap axis.
        taps, weights = _antialias_taps(xo, length, scale, mode, n.a("cubic_coeff_a", -0.75),
                                        n.a("exclude_outside", 0))
        k = taps.shape[1]
        g = ops.gather(x, const(taps.reshape(-1), "int64"), axis)
        shape = list(x.shape)
        shape[axis:axis + 1] = [out, k]
        g = reshape(g, shape)
        wshape = [1] * len(shape)
        wshape[axis], wshape[axis + 1] = out, k
        y = ops.sum(ops.mul(g, const(weights.reshape(wshape), dt(x))), [axis + 1])
        if outside is not None and outside.any():
            mshape = [1] * x.ndim
            mshape[axis] = out
            y = ops.where(const(outside.reshape(mshape), "bool"),
                          like(y, n.a("extrapolation_value", 0.0)), y)
        return y
    if mode == "nearest":
        nm = n.a("nearest_mode", "round_prefer_floor") if n.opset >= 11 else "floor"
        if n.op_type == "Upsample" or n.opset < 11:
            nm = "floor"
        idx = np.clip(_nearest_index(xo, nm), 0, length - 1).astype(np.int64)
        taps, weights = idx[:, None], None
    else:
        base = np.floor(xo)
        r = xo - base
        if mode in ("linear", "bilinear"):
            offs = np.array([0, 1])
            w = np.stack([1 - r, r], axis=-1)
        else:
            offs = np.array([-1, 0, 1, 2])
            w = _cubic_weights(r, n.a("cubic_coeff_a", -0.75))
        raw = base[:, None].astype(np.int64) + offs[None, :]
        if n.a("exclude_outside", 0):
            w = np.where((raw < 0) | (raw > length - 1), 0.0, w)
            w = w / w.sum(axis=1, keepdims=True)
        taps, weights = np.clip(raw, 0, length - 1), w
    y = None
    for j in range(taps.shape[1]):
        g = ops.gather(x, const(taps[:, j], "int64"), axis)
        if weights is not None:
            shape = [1] * x.ndim
            shape[axis] = out
            g = ops.mul(g, const(weights[:, j].reshape(shape), dt(x)))
        y = g if y is None else ops.add(y, g)
    if outside is not None and outside.any():
        shape = [1] * x.ndim
        shape[axis] = out
        y = ops.where(const(outside.reshape(shape), "bool"),
                      like(y, n.a("extrapolation_value", 0.0)), y)
    return y


@op("Resize", "Upsample", check=_check_resize)
def _resize(n):
    x = n.x(0)
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(n.a("mode", "nearest"),
                                                           n.a("mode", "nearest"))
    rank = x.ndim
    roi = scales = sizes = None
    if n.op_type == "Upsample" or n.opset < 10:
        scales = n.a("scales", None) if n.opset < 9 else \
            [float(v) for v in np.asarray(n.static(1)).reshape(-1)]
    elif n.opset == 10:
        scales = [float(v) for v in np.asarray(n.static(1)).reshape(-1)]
    else:
        if n.has(1) and n.x(1).size:
            roi = [float(v) for v in np.asarray(n.static(1)).reshape(-1)]
        if n.has(3) and n.x(3).size:
            sizes = n.ints(3)
        elif n.has(2) and n.x(2).size:
            scales = [float(v) for v in np.asarray(n.static(2)).reshape(-1)]
    axes = [norm_axis(a, rank) for a in n.a("axes", list(range(rank)))]
    shape = list(x.shape)
    if sizes is not None:
        policy = n.a("keep_aspect_ratio_policy", "stretch")
        scales = [sizes[j] / shape[a] for j, a in enumerate(axes)]
        if policy != "stretch":
            s = min(scales) if policy == "not_larger" else max(scales)
            scales = [s] * len(axes)
            # ONNX's round_int rounds halves up (np.round would to even)
            sizes = [int(math.floor(s * shape[a] + 0.5)) for a in axes]
    else:
        sizes = [int(math.floor(shape[a] * scales[j])) for j, a in enumerate(axes)]
    y = x
    for j, a in enumerate(axes):
        if sizes[j] == shape[a] and scales[j] == 1.0 and roi is None:
            continue
        r = None
        if roi is not None:
            k = len(axes)
            r = (roi[j], roi[k + j])
        y = _resize_axis(n, y, a, sizes[j], scales[j], r, mode)
    return y


# ------------------------------------------------------- control flow

def _run_sub(n, graph, env: dict, args: list) -> list:
    """Run sub-graph ``graph`` with its formal inputs bound to ``args``
    (Values) over a copy of the enclosing scope ``env``."""
    scope = dict(env)
    for init in graph.initializer:
        arr = tensor_proto_to_numpy(init, n.run.base_dir, n.run.keep)
        scope[init.name] = Value(as_dragon(arr))
    for formal, v in zip(graph.input, args):
        scope[formal.name] = v
    n.run.run_graph(graph, scope)
    return [scope[o.name] for o in graph.output]


@op("If")
def _if(n):
    env = n.run.scope
    then_g, else_g = n.a("then_branch"), n.a("else_branch")
    pred = n.values[0]
    if not pred.deps:
        taken = then_g if bool(pred.t.numpy().reshape(-1)[0]) else else_g
        return _run_sub(n, taken, env, [])
    from .._graph.control import cond

    def branch(g):
        return lambda: [v.t for v in _run_sub(n, g, env, [])]
    outs = cond(pred.t, branch(then_g), branch(else_g))
    deps = pred.deps.union(*[v.deps for v in env.values()])
    return [Value(t, deps) for t in outs]


@op("Loop")
def _loop(n):
    """Loops whose trip count and condition are known at trace time are
    unrolled (exact: a trace is keyed on the shapes they depend on); a loop
    whose condition or trip count depends on the input data becomes a
    ``dragon_core.while_loop`` (then it may have no scan outputs, whose
    length would be data-dependent)."""
    env = n.run.scope
    body = n.a("body")
    m_v = n.values[0] if n.has(0) else None
    cond_v = n.values[1] if n.has(1) else None
    carried = list(n.values[2:])
    n_carried = len(carried)
    n_scans = len(body.output) - 1 - n_carried
    if n_scans == 0 and ((m_v is not None and m_v.deps) or (cond_v is not None and cond_v.deps)):
        return _while(n, body, env, m_v, cond_v, carried, n_scans)
    # With scan outputs the trip count must be known at trace time: the
    # traces are then keyed on the inputs it depends on (as a Reshape target).
    trips = None if m_v is None else int(np.asarray(n.static(0)).reshape(-1)[0])
    if cond_v is not None and cond_v.deps:
        n.fail("a loop condition that depends on the input data, with scan outputs")
    scans: list = [[] for _ in range(n_scans)]
    keep_going = True if cond_v is None else bool(cond_v.t.numpy().reshape(-1)[0])
    i = 0
    while keep_going and (trips is None or i < trips):
        if i > 100000:
            n.fail("more than 100000 iterations at trace time")
        it = Value(const(i, "int64"))
        c = Value(const(True, "bool"))
        outs = _run_sub(n, body, env, [it, c] + carried)
        cv = outs[0]
        if cv.deps:
            if n_scans == 0:      # known only now: the body makes it data-dependent
                return _while(n, body, env, m_v, cond_v, list(n.values[2:]), n_scans)
            n.fail("a loop condition that depends on the input data, with scan outputs")
        keep_going = bool(cv.t.numpy().reshape(-1)[0])
        carried = outs[1:1 + n_carried]
        for k, v in enumerate(outs[1 + n_carried:]):
            scans[k].append(v)
        i += 1
    results = list(carried)
    for k, vals in enumerate(scans):
        if not vals:
            n.fail("a scan output of a loop that runs zero times has no known shape")
        results.append(Value(ops.stack([v.t for v in vals], 0),
                             frozenset().union(*[v.deps for v in vals])))
    return results


def _while(n, body, env, m_v, cond_v, carried, n_scans):
    """A data-dependent Loop as ``dragon_core.while_loop`` over (iteration,
    condition, loop-carried values)."""
    from .._graph.control import while_loop
    if n_scans:
        n.fail("a loop with a data-dependent condition or trip count and scan outputs")
    deps = frozenset().union(*[v.deps for v in [m_v, cond_v] + carried if v is not None],
                             *[v.deps for v in env.values()])
    limit = None if m_v is None else reshape(ops.cast(m_v.t, "int64"), [])
    c0 = const(True, "bool") if cond_v is None else reshape(ops.cast(cond_v.t, "bool"), [])

    def cond_fn(i, c, *vs):
        return c if limit is None else ops.logical_and(c, ops.less(i, limit))

    def body_fn(i, c, *vs):
        outs = _run_sub(n, body, env, [Value(i, deps), Value(c, deps)] +
                        [Value(v, deps) for v in vs])
        c_next = reshape(ops.cast(outs[0].t, "bool"), [])
        return [ops.add(i, const(1, "int64")), c_next] + [o.t for o in outs[1:]]

    res = while_loop(cond_fn, body_fn, [const(0, "int64"), c0] + [v.t for v in carried])
    return [Value(t, deps) for t in res[2:]]


@op("Scan")
def _scan(n):
    """Scan unrolled over the (trace-time known) sequence length."""
    env = n.run.scope
    body = n.a("body")
    n_scan_in = n.a("num_scan_inputs")
    values = n.values if n.opset >= 9 else n.values[1:]
    if n.opset < 9:
        n.fail("Scan-8 (with a sequence_lens input) is not supported")
    n_state = len(values) - n_scan_in
    state, seqs = list(values[:n_state]), list(values[n_state:])
    in_axes = n.a("scan_input_axes", [0] * n_scan_in)
    in_dirs = n.a("scan_input_directions", [0] * n_scan_in)
    n_scan_out = len(body.output) - n_state
    out_axes = n.a("scan_output_axes", [0] * n_scan_out)
    out_dirs = n.a("scan_output_directions", [0] * n_scan_out)
    length = seqs[0].t.shape[norm_axis(in_axes[0], seqs[0].t.ndim)]
    scans: list = [[] for _ in range(n_scan_out)]
    for i in range(length):
        args = []
        for s, ax, d in zip(seqs, in_axes, in_dirs):
            ax = norm_axis(ax, s.t.ndim)
            j = length - 1 - i if d else i
            piece = ops.slice(s.t, [j], [j + 1], [1], [ax])
            shape = [dd for k, dd in enumerate(piece.shape) if k != ax]
            args.append(Value(reshape(piece, shape), s.deps))
        outs = _run_sub(n, body, env, state + args)
        state = outs[:n_state]
        for k, v in enumerate(outs[n_state:]):
            scans[k].append(v)
    results = list(state)
    for k, vals in enumerate(scans):
        if out_dirs[k]:
            vals = vals[::-1]
        ts = [v.t for v in vals]
        ax = norm_axis(out_axes[k], ts[0].ndim + 1)
        results.append(Value(ops.stack(ts, ax), frozenset().union(*[v.deps for v in vals])))
    return results


# --------------------------------------------------- Dragon's own ops

def run_dragon_op(n):
    """A node of an ``ai.dragon*`` domain: the exporter's encoding of a
    plugin op with no standard ONNX equivalent; attributes by name."""
    fn = getattr(ops, _C.op(n.op_type).describe()["py_name"], None)
    if fn is None:
        n.fail("no Dragon op of this name is installed")
    kwargs = {}
    for name, a in n.attrs.items():
        v = n.a(name)
        if hasattr(v, "dims"):
            v = n.a_tensor(name)
        kwargs[name] = v
    outs = fn(*n.xs(), **kwargs)
    return list(outs) if isinstance(outs, (list, tuple)) else [outs]


# ------------------------------------------------------------- losses

def _nll(n, logp: Tensor, target: Tensor, weight: Tensor | None) -> Tensor:
    """ONNX NegativeLogLikelihoodLoss on log-probabilities [N, C, d...]."""
    C = logp.shape[1]
    ignore = n.a("ignore_index", None)
    t = target if dt(target) == "int64" else ops.cast(target, "int64")
    if ignore is not None:
        mask = ops.not_equal(t, like(t, ignore))
        t = ops.where(mask, t, like(t, 0))
    picked = ops.sum(ops.mul(logp, ops.cast(ops.one_hot(t, C, 1.0, 0.0, "float32", 1),
                                            dt(logp))), [1], False)
    w = ops.gather(weight, t, 0) if weight is not None else ops.full(list(t.shape), 1.0,
                                                                      dt(logp))
    if ignore is not None:
        w = ops.mul(w, ops.cast(mask, dt(logp)))
    loss = ops.neg(ops.mul(picked, w))
    red = n.a("reduction", "mean")
    if red == "none":
        return loss
    if red == "sum":
        return ops.sum(loss)
    return ops.div(ops.sum(loss), ops.sum(w))


@op("NegativeLogLikelihoodLoss")
def _nll_loss(n):
    return _nll(n, n.x(0), n.x(1), n.x(2))


@op("SoftmaxCrossEntropyLoss")
def _sce_loss(n):
    scores = n.x(0)
    logp = ops.log_softmax(scores, 1)
    outs = [_nll(n, logp, n.x(1), n.x(2))]
    if n.wants(1):
        outs.append(logp)
    return outs


@op("RMSNormalization")
def _rms_norm(n):
    x, scale = n.x(0), n.x(1)
    axis = norm_axis(n.a("axis", -1), x.ndim)
    eps = n.a("epsilon", 1e-5)
    axes = list(range(axis, x.ndim))
    ms = ops.mean(ops.square(x), axes, True)
    return ops.mul(ops.mul(x, ops.rsqrt(ops.add(ms, like(x, eps)))), scale)


@op("Swish")
def _swish(n):
    x = n.x(0)
    return ops.mul(x, ops.sigmoid(ops.mul(x, like(x, n.a("alpha", 1.0)))))


def _check_grid_sample(attrs, opset, node):
    mode = attrs.get("mode", "linear" if opset >= 20 else "bilinear")
    if mode not in ("linear", "bilinear", "nearest", "cubic", "bicubic"):
        return f"mode='{mode}'"
    if attrs.get("padding_mode", "zeros") not in ("zeros", "border", "reflection"):
        return f"padding_mode='{attrs['padding_mode']}'"
    return None


def _onnx_cubic_grid(grid, sizes, pad: str, align: bool):
    """ONNX GridSample pads the point itself before cubic sampling (border:
    clamped to the image, reflection: mirrored, when it lies beyond the
    corner cells' edges or centres), where Dragon (as PyTorch) pads each
    of the 16 cells only. Rewriting the grid with ONNX's padded point and
    then sampling with per-cell padding gives ONNX's result; the rewrite is
    element-wise, so the grid gradient flows through it."""
    dims = len(sizes)
    comps = []
    for k in range(dims):
        size = sizes[dims - 1 - k]
        g = ops.slice(grid, [k], [k + 1], [1], [grid.ndim - 1])
        if align:
            lo, hi = 0.0, float(size - 1)
            c = ops.mul(ops.add(g, like(g, 1.0)), like(g, (size - 1) / 2.0))
        else:
            lo, hi = -0.5, size - 0.5
            c = ops.div(ops.sub(ops.mul(ops.add(g, like(g, 1.0)), like(g, float(size))),
                                like(g, 1.0)), like(g, 2.0))
        outside = ops.logical_or(ops.less(c, like(c, lo)), ops.greater(c, like(c, hi)))
        span = hi - lo
        if pad == "border" or span <= 0:
            padded = ops.clip(c, 0.0, float(size - 1))
        else:
            d = ops.abs(ops.sub(c, like(c, lo)))
            flips = ops.floor(ops.div(d, like(d, span)))
            extra = ops.sub(d, ops.mul(flips, like(d, span)))
            odd = ops.greater(ops.sub(flips, ops.mul(ops.floor(ops.div(flips, like(d, 2.0))),
                                                     like(d, 2.0))), like(d, 0.5))
            padded = ops.where(odd, ops.add(ops.sub(like(d, span), extra), like(d, lo)),
                               ops.add(extra, like(d, lo)))
        c = ops.where(outside, padded, c)
        if align:
            g = ops.sub(ops.mul(c, like(c, 2.0 / (size - 1))), like(c, 1.0)) if size > 1 else g
        else:
            g = ops.sub(ops.div(ops.add(ops.mul(c, like(c, 2.0)), like(c, 1.0)),
                                like(c, float(size))), like(c, 1.0))
        comps.append(g)
    return ops.concat(comps, grid.ndim - 1)


@op("GridSample", check=_check_grid_sample)
def _grid_sample(n):
    """GridSample-16 (4-D: bilinear, nearest, bicubic) and -20 (N-D:
    linear, nearest, cubic) onto grid_sample (4-D and 5-D; cubic 4-D)."""
    x, grid = n.x(0), n.x(1)
    mode = n.a("mode", "linear" if n.opset >= 20 else "bilinear")
    mode = {"linear": "bilinear", "cubic": "bicubic"}.get(mode, mode)
    if x.ndim not in (4, 5):
        n.fail(f"{x.ndim - 2}-D sampling (Dragon's grid_sample is 2-D or 3-D)")
    if mode == "bicubic" and x.ndim != 4:
        n.fail("cubic sampling of a 5-D input (Dragon's bicubic grid_sample is 2-D)")
    pad = n.a("padding_mode", "zeros")
    align = bool(n.a("align_corners", 0))
    if mode == "bicubic" and pad != "zeros":
        grid = _onnx_cubic_grid(grid, list(x.shape[2:]), pad, align)
    return ops.grid_sample(x, grid, mode, pad, align)


def _check_roi_align(attrs, opset, node):
    if attrs.get("mode", "avg") not in ("avg", "max"):
        return f"mode='{attrs['mode']}'"
    return None


@op("RoiAlign", check=_check_roi_align)
def _roi_align(n):
    x, rois, idx = n.x(0), n.x(1), n.x(2)
    aligned = n.a("coordinate_transformation_mode", "half_pixel") == "half_pixel" \
        if n.opset >= 16 else False
    r5 = ops.concat([ops.cast(reshape(idx, [-1, 1]), dt(rois)), rois], 1)
    # Opsets 10-15 have no coordinate_transformation_mode: their rois are
    # not shifted (output_half_pixel); 16+ default to half_pixel. Mode max
    # is ONNX's maximum of weighted corner terms (roi_align mode="max").
    return ops.roi_align(x, r5, [n.a("output_height", 1), n.a("output_width", 1)],
                         n.a("spatial_scale", 1.0), n.a("sampling_ratio", 0), aligned,
                         n.a("mode", "avg"))


@op("LpPool", check=_spatial_check)
def _lp_pool(n):
    x = n.x(0)
    p = n.a("p", 2)
    kernel = list(n.a("kernel_shape"))
    strides, dilations, pads = _geometry(n, x, kernel)
    if any(d != 1 for d in dilations):
        n.fail(f"dilations {dilations}")
    x2, s2, d2, p2 = _spatial_2d(n, x, strides, dilations, pads)
    k2 = [1] + kernel if len(kernel) == 1 else kernel
    ceil = bool(n.a("ceil_mode", 0))
    # Output sizes by ONNX's rule (ceil mode drops a last window that
    # starts in the end padding); the input is zero-padded far enough that
    # every such window is whole, so the sums are exact.
    outs, pads2 = [], []
    for d, k, st, (b, e) in zip(x2.shape[2:], k2, s2, p2):
        span = d + b + e - k
        o = (-(-span // st) if ceil else span // st) + 1
        if ceil and (o - 1) * st >= d + b:
            o -= 1
        pads2.append((b, e + max(0, (o - 1) * st + k - (d + b + e))))
        outs.append(o)
    xp = ops.pow(ops.abs(x2), like(x2, p))
    xp = ops.pad(xp, ((0, 0), (0, 0)) + tuple(pads2)) if any(any(q) for q in pads2) else xp
    y = ops.mul(ops.avg_pool2d(xp, k2, s2, [0, 0], False, True),
                like(x2, float(np.prod(k2))))
    if list(y.shape[2:]) != outs:
        y = ops.slice(y, [0, 0], outs, [1, 1], [2, 3])
    y = ops.pow(y, like(y, 1.0 / p))
    return reshape(y, [y.shape[0], y.shape[1], y.shape[3]]) if len(kernel) == 1 else y


@op("Compress")
def _compress(n):
    """The condition is read on the host: at trace time when it is an
    initializer or a Constant; a condition computed at run time makes load
    run this node eagerly between compiled segments (_segments.py)."""
    x = n.x(0)
    keep = np.nonzero(np.asarray(n.static(1)).reshape(-1).astype(bool))[0]
    axis = n.a("axis", None)
    if axis is None:
        x, axis = reshape(x, [-1]), 0
    axis = norm_axis(axis, x.ndim)
    keep = keep[keep < x.shape[axis]]
    return ops.gather(x, const(keep, "int64"), axis)


# ---------------------------------------------------------- attention

def _to_heads(x: Tensor, heads: int) -> Tensor:
    """[B, S, heads * d] -> [B, heads, S, d]."""
    b, s, hidden = x.shape
    return ops.transpose(reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def _causal_bias(q_len: int, kv_len: int, offset, left: int, right: int, causal: bool,
                 dtype: str):
    """Additive bias (0 / -inf) of the causal and sliding-window limits for
    queries i and keys j: causal keeps j <= i + offset, the window keeps
    -right <= i + offset - j <= left (-1: unbounded). ``offset`` is an int
    (a constant bias [q, kv]) or a [B] tensor (a bias [B, 1, q, kv])."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if isinstance(offset, int):
        diff = i + offset - j
        allowed = np.ones((q_len, kv_len), bool)
        if causal:
            allowed &= diff >= 0
        if left >= 0:
            allowed &= diff <= left
        if right >= 0:
            allowed &= -diff <= right
        return const(np.where(allowed, 0.0, -np.inf), dtype)
    off = reshape(ops.cast(offset, "int64"), [-1, 1, 1, 1])
    diff = ops.sub(ops.add(const(i.reshape(1, 1, q_len, 1), "int64"), off),
                   const(j.reshape(1, 1, 1, kv_len), "int64"))
    allowed = None

    def both(a, b):
        return b if a is None else ops.logical_and(a, b)
    if causal:
        allowed = both(allowed, ops.greater_equal(diff, const(0, "int64")))
    if left >= 0:
        allowed = both(allowed, ops.less_equal(diff, const(left, "int64")))
    if right >= 0:
        allowed = both(allowed, ops.greater_equal(diff, const(-right, "int64")))
    return ops.where(allowed, const(0.0, dtype), const(-np.inf, dtype))


@op("Attention")
def _attention(n):
    """ONNX Attention (opset 23+): scaled dot-product attention with 3-D or
    4-D inputs, grouped-query heads, past/present key-value caches,
    boolean or additive masks, causal and sliding-window limits, softcap."""
    q, k, v = n.x(0), n.x(1), n.x(2)
    mask, past_k, past_v, nonpad = n.x(3), n.x(4), n.x(5), n.x(6)
    three_d = q.ndim == 3
    if three_d:
        q = _to_heads(q, n.a("q_num_heads"))
        k = _to_heads(k, n.a("kv_num_heads"))
        v = _to_heads(v, n.a("kv_num_heads"))
    dtype = dt(q)
    scale = n.a("scale", None)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    s = like(q, np.sqrt(np.float64(scale)).astype(np_dtype(dtype)))
    if past_k is not None:
        k = ops.concat([past_k, k], 2)
    if past_v is not None:
        v = ops.concat([past_v, v], 2)
    present_k, present_v = k, v
    q_len, kv_len = q.shape[2], k.shape[2]
    bias = None
    if mask is not None:
        if dt(mask) == "bool":
            mask = ops.where(mask, like(q, 0.0), like(q, -np.inf))
        elif dt(mask) != dtype:
            mask = ops.cast(mask, dtype)
        pad = kv_len - mask.shape[-1]
        if pad > 0:
            mask = ops.pad(mask, ((0, 0),) * (mask.ndim - 1) + ((0, pad),), "constant", -np.inf)
        bias = mask
    causal = bool(n.a("is_causal", 0))
    left, right = n.a("left_window_size", -1), n.a("right_window_size", -1)
    if causal or left >= 0 or right >= 0:
        if past_k is None and nonpad is not None:
            offset = ops.sub(nonpad, like(nonpad, q_len))
        else:
            offset = past_k.shape[2] if past_k is not None else 0
        limits = _causal_bias(q_len, kv_len, offset, left, right, causal, dtype)
        bias = limits if bias is None else ops.add(bias, limits)
    if nonpad is not None:
        keep = ops.less(const(np.arange(kv_len).reshape(1, 1, 1, kv_len), "int64"),
                        reshape(ops.cast(nonpad, "int64"), [-1, 1, 1, 1]))
        padding = ops.where(keep, like(q, 0.0), like(q, -np.inf))
        bias = padding if bias is None else ops.add(bias, padding)
    hq, hk = q.shape[1], k.shape[1]
    if hq != hk and hq % hk == 0:
        rep = const(np.repeat(np.arange(hk), hq // hk), "int64")
        k, v = ops.gather(k, rep, 1), ops.gather(v, rep, 1)
    qk = ops.matmul(ops.mul(q, s), ops.mul(k, s), False, True)
    softcap = n.a("softcap", 0.0)
    if softcap and softcap > 0:
        qk = ops.mul(ops.tanh(ops.div(qk, like(qk, softcap))), like(qk, softcap))
    mode = n.a("qk_matmul_output_mode", 0)
    with_bias = qk if bias is None else ops.add(qk, bias)
    precision = n.a("softmax_precision", None)
    logits = with_bias
    if precision is not None and ONNX_DTYPES.get(precision) not in (None, dtype):
        logits = ops.cast(logits, ONNX_DTYPES[precision])
    p = ops.softmax(logits, -1)
    if bias is not None:
        dead = ops.equal(ops.max(bias, [-1], True), like(bias, -np.inf))
        p = ops.where(dead, like(p, 0.0), p)
    if dt(p) != dtype:
        p = ops.cast(p, dtype)
    y = ops.matmul(p, v)
    if three_d:
        y = ops.transpose(y, [0, 2, 1, 3])
        y = reshape(y, [y.shape[0], y.shape[1], -1])
    qk_out = {0: qk, 1: qk, 2: with_bias, 3: p}.get(mode, qk)
    return [y, present_k, present_v, qk_out]


# ---------------------------------------------------- more composites

def _window(kind):
    def run(n):
        size = int(np.asarray(n.static(0)).reshape(-1)[0])
        periodic = bool(n.a("periodic", 1))
        N = size if periodic else size - 1
        k = np.arange(size, dtype=np.float64)
        t = 2 * np.pi * k / N if N else np.zeros(size)
        if kind == "hann":
            w = 0.5 - 0.5 * np.cos(t)
        elif kind == "hamming":
            w = 25.0 / 46.0 - (1 - 25.0 / 46.0) * np.cos(t)
        else:
            w = 0.42 - 0.5 * np.cos(t) + 0.08 * np.cos(2 * t)
        to = ONNX_DTYPES.get(n.a("output_datatype", 1))
        if to is None:
            n.fail("output dtype Dragon lacks")
        return const(w.astype(np.float32) if to != "float64" else w, to)
    return run


op("HannWindow")(_window("hann"))
op("HammingWindow")(_window("hamming"))
op("BlackmanWindow")(_window("blackman"))


@op("CenterCropPad")
def _center_crop_pad(n):
    x = n.x(0)
    target = n.ints(1)
    axes = [norm_axis(a, x.ndim) for a in n.a("axes", list(range(x.ndim)))]
    for a, size in zip(axes, target):
        dim = x.shape[a]
        if size < dim:
            start = (dim - size) // 2
            x = ops.slice(x, [start], [start + size], [1], [a])
        elif size > dim:
            before = (size - dim) // 2
            pads = [(0, 0)] * x.ndim
            pads[a] = (before, size - dim - before)
            x = ops.pad(x, pads) if dt(x) != "bool" else \
                ops.cast(ops.pad(ops.cast(x, "uint8"), pads), "bool")
    return x


_QRANGE = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767),
           "int32": (-2 ** 31, 2 ** 31 - 1)}


def _quant_param(p: Tensor, x: Tensor, axis: int, block: int) -> Tensor:
    """A scale / zero point shaped to broadcast against x: a scalar, one
    value per index of ``axis``, or (block quantization) one per block."""
    if p.ndim == 0 or p.size == 1 and p.ndim <= 1:
        return reshape(p, []) if p.ndim else p
    axis = norm_axis(axis, x.ndim)
    if block:
        rep = const(np.arange(x.shape[axis]) // block, "int64")
        return ops.gather(p, rep, axis)
    shape = [1] * x.ndim
    shape[axis] = p.shape[0]
    return reshape(p, shape)


@op("DequantizeLinear")
def _dequantize(n):
    x, scale, zp = n.x(0), n.x(1), n.x(2)
    axis, block = n.a("axis", 1), n.a("block_size", 0)
    out = ONNX_DTYPES.get(n.a("output_dtype", 0)) or dt(scale)
    s = _quant_param(scale, x, axis, block)
    xf = ops.cast(x, dt(s))
    if zp is not None:
        xf = ops.sub(xf, ops.cast(_quant_param(zp, x, axis, block), dt(s)))
    y = ops.mul(xf, s)
    return y if dt(y) == out else ops.cast(y, out)


@op("QuantizeLinear")
def _quantize(n):
    x, scale, zp = n.x(0), n.x(1), n.x(2)
    axis, block = n.a("axis", 1), n.a("block_size", 0)
    out = dt(zp) if zp is not None else (ONNX_DTYPES.get(n.a("output_dtype", 0)) or "uint8")
    if out not in _QRANGE:
        n.fail(f"quantizing to {out}")
    s = _quant_param(scale, x, axis, block)
    xs = x if dt(x) == dt(s) else ops.cast(x, dt(s))
    y = ops.round(ops.div(xs, s))
    if zp is not None:
        y = ops.add(y, ops.cast(_quant_param(zp, x, axis, block), dt(y)))
    lo, hi = _QRANGE[out]
    return ops.cast(ops.clip(y, float(lo), float(hi)), out)


@op("DynamicQuantizeLinear")
def _dynamic_quantize(n):
    x = n.x(0)
    zero = like(x, 0.0)
    hi = ops.maximum(ops.max(x), zero)
    lo = ops.minimum(ops.min(x), zero)
    scale = ops.div(ops.sub(hi, lo), like(x, 255.0))
    zp = ops.clip(ops.round(ops.sub(zero, ops.div(lo, scale))), 0.0, 255.0)
    y = ops.clip(ops.add(ops.round(ops.div(x, scale)), zp), 0.0, 255.0)
    return [ops.cast(y, "uint8"), scale, ops.cast(zp, "uint8")]


# ---------------------------------------------------------- recurrent

_RNN_ACT = {"Tanh": ops.tanh, "Relu": ops.relu, "Sigmoid": ops.sigmoid}


def _check_rnn(attrs, opset, node):
    acts = attrs.get("activations")
    if acts and any(a not in _RNN_ACT for a in acts):
        return f"activations {acts} (Dragon's RNN import has Tanh, Relu, Sigmoid)"
    return None


@op("RNN", check=_check_rnn)
def _rnn(n):
    """The Elman RNN unrolled over the (trace-time known) sequence length:
    H_t = f(X_t W^T + H_(t-1) R^T + Wb + Rb), per direction."""
    x, w, r, b = n.x(0), n.x(1), n.x(2), n.x(3)
    if n.has(4):
        lens = np.asarray(n.static(4)).reshape(-1)
        seq = x.shape[1] if n.a("layout", 0) else x.shape[0]
        if np.any(lens != seq):
            n.fail("sequence_lens shorter than the sequence")
    h0 = n.x(5)
    layout = n.a("layout", 0)
    if layout:
        x = ops.transpose(x, [1, 0, 2])
        h0 = ops.transpose(h0, [1, 0, 2]) if h0 is not None else None
    steps, batch = x.shape[0], x.shape[1]
    hidden = r.shape[-1]
    direction = n.a("direction", "forward")
    dirs = ["forward", "reverse"] if direction == "bidirectional" else [direction]
    acts = n.a("activations", ["Tanh"] * len(dirs))
    clip = n.a("clip", None)
    ys, hs = [], []
    for d, which in enumerate(dirs):
        wd = reshape(ops.slice(w, [d], [d + 1], [1], [0]), list(w.shape[1:]))
        rd = reshape(ops.slice(r, [d], [d + 1], [1], [0]), list(r.shape[1:]))
        bias = None
        if b is not None:
            bd = reshape(ops.slice(b, [d], [d + 1], [1], [0]), [2 * hidden])
            bias = ops.add(ops.slice(bd, [0], [hidden], [1], [0]),
                           ops.slice(bd, [hidden], [2 * hidden], [1], [0]))
        h = reshape(ops.slice(h0, [d], [d + 1], [1], [0]), [batch, hidden]) \
            if h0 is not None else ops.zeros([batch, hidden], dt(x))
        act = _RNN_ACT[acts[d]]
        outs = [None] * steps
        order = range(steps) if which == "forward" else range(steps - 1, -1, -1)
        for t in order:
            xt = reshape(ops.slice(x, [t], [t + 1], [1], [0]), [batch, x.shape[2]])
            z = ops.add(ops.matmul(xt, wd, False, True), ops.matmul(h, rd, False, True))
            if bias is not None:
                z = ops.add(z, bias)
            if clip is not None:
                z = ops.clip(z, -clip, clip)
            h = act(z)
            outs[t] = h
        ys.append(ops.stack(outs, 0))            # [S, B, H]
        hs.append(h)
    y = ops.stack(ys, 1)                         # [S, D, B, H]
    y_h = ops.stack(hs, 0)                       # [D, B, H]
    if layout:
        y = ops.transpose(y, [2, 0, 1, 3])
        y_h = ops.transpose(y_h, [1, 0, 2])
    return [y, y_h]


@op("DeformConv")
def _deform_conv(n):
    """vision_ops' deform_conv2d (torchvision's layout of offsets and masks,
    which is ONNX's)."""
    if not hasattr(ops, "deform_conv2d"):
        n.fail("needs dragon-vision-ops (pip install dragon-vision-ops)")
    x, w, off, b, mask = n.x(0), n.x(1), n.x(2), n.x(3), n.x(4)
    if x.ndim != 4:
        n.fail(f"{x.ndim - 2}-D input (Dragon's deform_conv2d is 2-D)")
    strides, dilations, pads = _geometry(n, x, list(w.shape[2:]))
    if mask is None and b is not None:     # a bias with no mask: mask of ones
        shape = list(off.shape)
        shape[1] //= 2
        mask = ops.full(shape, 1.0, dt(x))
    return ops.deform_conv2d(x, w, off, mask, b, list(strides), _pairs(pads, 2), list(dilations),
                             n.a("group", 1), n.a("offset_group", 1))


@op("AffineGrid")
def _affine_grid(n):
    theta = n.x(0)
    size = n.ints(1)
    align = bool(n.a("align_corners", 0))

    def axis(m):
        if align:
            return np.linspace(-1.0, 1.0, m) if m > 1 else np.zeros(1)
        return (2.0 * np.arange(m) + 1.0) / m - 1.0
    if len(size) == 4:
        N, _, H, W = size
        ys, xs = np.meshgrid(axis(H), axis(W), indexing="ij")
        base = np.stack([xs, ys, np.ones_like(xs)], -1).reshape(1, H * W, 3)
        out = [N, H, W, 2]
    else:
        N, _, D, H, W = size
        zs, ys, xs = np.meshgrid(axis(D), axis(H), axis(W), indexing="ij")
        base = np.stack([xs, ys, zs, np.ones_like(xs)], -1).reshape(1, D * H * W, 4)
        out = [N, D, H, W, 3]
    grid = ops.matmul(ops.broadcast_to(const(base, dt(theta)), [N] + list(base.shape[1:])),
                      theta, False, True)
    return reshape(grid, out)


@op("ReverseSequence")
def _reverse_sequence(n):
    """Indices along the time axis computed at trace time from the lengths
    (the traces are keyed on their value when they are a graph input)."""
    x = n.x(0)
    lens = np.asarray(n.static(1)).reshape(-1)
    t_axis, b_axis = n.a("time_axis", 0), n.a("batch_axis", 1)
    T = x.shape[t_axis]
    idx = np.empty(x.shape, np.int64)
    t = np.arange(T)
    for bi, length in enumerate(lens):
        src = np.where(t < length, length - 1 - t, t)
        shape = [1] * x.ndim
        shape[t_axis] = T
        sel = [slice(None)] * x.ndim
        sel[b_axis] = slice(bi, bi + 1)
        idx[tuple(sel)] = np.broadcast_to(src.reshape(shape), idx[tuple(sel)].shape)
    lin = _linear_index(x.shape, const(idx, "int64"), t_axis)
    return ops.gather(reshape(x, [-1]), lin, 0)


# ------------------------------------- ops of the growing op library
#
# Translations onto ops that not every Dragon build has yet; ``_needs``
# makes ``load`` list the node as unsupported (naming the missing op) when
# the installed op library lacks it.

def _needs(*names):
    def check(attrs, opset, node):
        missing = [nm for nm in names if not hasattr(ops, nm)]
        return f"needs dragon_core.ops.{', '.join(missing)}" if missing else None
    return check


@op("BitShift", check=_needs("left_shift", "right_shift"))
def _bit_shift(n):
    fn = ops.left_shift if n.a("direction") == "LEFT" else ops.right_shift
    return fn(n.x(0), n.x(1))


@op("CumSum", check=_needs("cumsum"))
def _cumsum(n):
    axis = int(np.asarray(n.static(1)).reshape(-1)[0])
    return ops.cumsum(n.x(0), axis, bool(n.a("exclusive", 0)), bool(n.a("reverse", 0)))


@op("TopK", check=_needs("topk"))
def _topk(n):
    x = n.x(0)
    k = int(np.asarray(n.static(1)).reshape(-1)[0]) if n.opset >= 10 else n.a("k")
    vals, idx = ops.topk(x, k, n.a("axis", -1), bool(n.a("largest", 1)),
                         bool(n.a("sorted", 1)))
    return [vals, idx]


@op("Einsum", check=_needs("einsum"))
def _einsum(n):
    return ops.einsum(n.a("equation"), *n.xs())


def _check_recurrent(names):
    needs = _needs(*names)

    def check(attrs, opset, node):
        if attrs.get("activations"):
            return f"activations {attrs['activations']} (Dragon's LSTM/GRU use the defaults)"
        return needs(attrs, opset, node)
    return check


def _recurrent_inputs(n, gates: int, count: int) -> list:
    """Inputs X, W, R, B, sequence_lens, initial_h[, initial_c, P] with the
    defaults ONNX gives absent ones filled in where a later one is present
    (Dragon's optional inputs may only be omitted at the end)."""
    xs = [n.x(i) for i in range(count)]
    last = max(i for i, v in enumerate(xs) if v is not None)
    x, r = xs[0], xs[2]
    dirs, hidden = r.shape[0], r.shape[2]
    layout = n.a("layout", 0)
    batch = x.shape[0] if layout else x.shape[1]
    steps = x.shape[1] if layout else x.shape[0]
    state = [batch, dirs, hidden] if layout else [dirs, batch, hidden]
    defaults = {3: lambda: ops.zeros([dirs, 2 * gates * hidden], dt(x)),
                4: lambda: const(np.full(batch, steps), "int32"),
                5: lambda: ops.zeros(state, dt(x)), 6: lambda: ops.zeros(state, dt(x))}
    for i in range(3, last):
        if xs[i] is None:
            xs[i] = defaults[i]()
    return xs


@op("LSTM", check=_check_recurrent(["lstm"]))
def _lstm(n):
    outs = ops.lstm(*_recurrent_inputs(n, 4, 8),
                    hidden_size=n.a("hidden_size", None), direction=n.a("direction", "forward"),
                    layout=n.a("layout", 0), clip=n.a("clip", None),
                    input_forget=bool(n.a("input_forget", 0)))
    return list(outs)


@op("GRU", check=_check_recurrent(["gru"]))
def _gru(n):
    outs = ops.gru(*_recurrent_inputs(n, 3, 6),
                   hidden_size=n.a("hidden_size", None), direction=n.a("direction", "forward"),
                   layout=n.a("layout", 0), clip=n.a("clip", None),
                   linear_before_reset=bool(n.a("linear_before_reset", 0)))
    return list(outs)


@op("RotaryEmbedding")
def _rotary(n):
    """Rotary position embedding (opset 23) on [B, H, S, D] or [B, S, H*D]:
    pairs (x1, x2) of the first rotary_embedding_dim features (halves, or
    even/odd when interleaved) become (cos x1 - sin x2, sin x1 + cos x2)."""
    x, cos, sin, pos = n.x(0), n.x(1), n.x(2), n.x(3)
    shape = list(x.shape)
    if x.ndim == 4:
        x = ops.transpose(x, [0, 2, 1, 3])                    # [B, S, H, D]
    else:
        heads = n.a("num_heads")
        x = reshape(x, [shape[0], shape[1], heads, shape[2] // heads])
    d = x.shape[3]
    rot = n.a("rotary_embedding_dim", 0) or d
    half = rot // 2
    if pos is not None:
        cos, sin = ops.gather(cos, pos, 0), ops.gather(sin, pos, 0)
    cos, sin = ops.unsqueeze(cos, [2]), ops.unsqueeze(sin, [2])  # [B, S, 1, half]
    xr = ops.slice(x, [0], [rot], [1], [3])
    if n.a("interleaved", 0):
        x1 = ops.slice(xr, [0], [rot], [2], [3])
        x2 = ops.slice(xr, [1], [rot], [2], [3])
    else:
        x1 = ops.slice(xr, [0], [half], [1], [3])
        x2 = ops.slice(xr, [half], [rot], [1], [3])
    real = ops.sub(ops.mul(cos, x1), ops.mul(sin, x2))
    imag = ops.add(ops.mul(sin, x1), ops.mul(cos, x2))
    if n.a("interleaved", 0):
        xr = reshape(ops.stack([real, imag], 4), list(xr.shape))
    else:
        xr = ops.concat([real, imag], 3)
    y = ops.concat([xr, ops.slice(x, [rot], [d], [1], [3])], 3) if rot < d else xr
    if len(shape) == 3:
        return reshape(y, shape)
    return ops.transpose(y, [0, 2, 1, 3])


@op("SwiGLU")
def _swiglu(n):
    a, b = n.x(0), n.x(1)
    gate = ops.mul(a, ops.sigmoid(ops.mul(a, like(a, n.a("alpha", 1.0)))))
    return ops.mul(gate, b)


def _check_causal_conv(attrs, opset, node):
    act = attrs.get("activation", "none")
    if act not in ("none", "silu", "swish"):
        return f"activation='{act}'"
    return None


@op("CausalConvWithState", check=_check_causal_conv)
def _causal_conv(n):
    """Depthwise causal 1-D convolution over [past_state, input]; returns
    the output and the last k - 1 steps as the new state."""
    x, w, b, past = n.x(0), n.x(1), n.x(2), n.x(3)
    batch, channels, _ = x.shape
    k = w.shape[2]
    if past is None:
        past = ops.zeros([batch, channels, k - 1], dt(x))
    padded = ops.concat([past, x], 2) if k > 1 else x
    y = ops.conv2d(_to2d(padded), _to2d(w), b, [1, 1], [0, 0], [1, 1], channels)
    y = reshape(y, [y.shape[0], y.shape[1], y.shape[3]])
    if n.a("activation", "none") in ("silu", "swish"):
        y = ops.mul(y, ops.sigmoid(y))
    length = padded.shape[2]
    state = ops.slice(padded, [length - (k - 1)], [length], [1], [2])
    return [y, state]


def _check_linear_attention(attrs, opset, node):
    rule = attrs.get("update_rule", "gated_delta")
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        return f"update_rule='{rule}'"
    return None


@op("LinearAttention", check=_check_linear_attention)
def _linear_attention(n):
    """Recurrent linear attention, unrolled over the (trace-time known)
    sequence: per step the state S [B, Hkv, dk, dv] decays (gated rules),
    is corrected toward v (delta rules: v <- beta (v - k S)), gains k v^T,
    and is read by the query: y = scale q S. Computed in float32."""
    q, k, v, past, decay, beta = (n.x(i) for i in range(6))
    rule = n.a("update_rule", "gated_delta")
    hq, hk = n.a("q_num_heads"), n.a("kv_num_heads")
    out_dtype = dt(q)

    def f32(t):
        return t if t is None or dt(t) == "float32" else ops.cast(t, "float32")
    q4, k4, v4 = (f32(_to_heads(t, h)) for t, h in ((q, hq), (k, hk), (v, hk)))
    b, _, steps, dk = k4.shape
    dv = v4.shape[3]
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating:
        g = f32(decay)
        g4 = ops.transpose(reshape(g, [b, steps, hk, 1]), [0, 2, 1, 3]) \
            if g.shape[-1] == hk else _to_heads(g, hk)
    if delta:
        be = f32(beta)
        b4 = ops.transpose(reshape(be, [b, steps, be.shape[-1], 1]), [0, 2, 1, 3])
    state = f32(past) if past is not None else ops.zeros([b, hk, dk, dv], "float32")
    scale = n.a("scale", 0.0) or 1.0 / math.sqrt(q4.shape[3])
    rep = const(np.repeat(np.arange(hk), hq // hk), "int64") if hq != hk else None

    def step(t4, i):
        return ops.slice(t4, [i], [i + 1], [1], [2])           # [B, H, 1, d]
    outs = []
    for i in range(steps):
        q_t, k_t, v_t = step(q4, i), step(k4, i), step(v4, i)
        if gating:
            g_t = ops.exp(step(g4, i))                         # [B, H, 1, 1 or dk]
            state = ops.mul(state, ops.transpose(g_t, [0, 1, 3, 2]))
        if delta:
            retrieved = ops.matmul(k_t, state)                 # [B, H, 1, dv]
            v_t = ops.mul(step(b4, i), ops.sub(v_t, retrieved))
        state = ops.add(state, ops.matmul(k_t, v_t, True, False))
        read = state if rep is None else ops.gather(state, rep, 1)
        outs.append(ops.mul(ops.matmul(q_t, read), const(scale, "float32")))
    y = ops.concat(outs, 2)                                    # [B, Hq, T, dv]
    y = reshape(ops.transpose(y, [0, 2, 1, 3]), [b, steps, hq * dv])
    state_dtype = dt(past) if past is not None else out_dtype
    return [y if out_dtype == "float32" else ops.cast(y, out_dtype),
            state if state_dtype == "float32" else ops.cast(state, state_dtype)]


@op("TensorScatter")
def _tensor_scatter(n):
    """Write ``update`` into the cache along ``axis`` starting at each
    batch row's write index (wrapping around in circular mode)."""
    cache, upd, where_ = n.x(0), n.x(1), n.x(2)
    axis = norm_axis(n.a("axis", -2), cache.ndim)
    length, steps = cache.shape[axis], upd.shape[axis]
    batch = cache.shape[0]
    start = ops.zeros([batch], "int64") if where_ is None else ops.cast(where_, "int64")
    shape = [1] * cache.ndim
    shape[0] = batch
    pos_shape = [1] * cache.ndim
    pos_shape[axis] = steps
    idx = ops.add(reshape(start, shape), const(np.arange(steps).reshape(pos_shape), "int64"))
    if n.a("mode", "linear") == "circular":
        idx = ops.mod(idx, const(length, "int64"))
    idx = ops.broadcast_to(idx, list(upd.shape))
    lin = reshape(_linear_index(cache.shape, idx, axis), [-1])
    flat = _scatter_replace(reshape(cache, [-1]), lin, reshape(upd, [-1]), 0)
    return reshape(flat, cache.shape)


# ------------------------------------------------- integer matmul / conv
#
# Integer products are summed in float64, which holds every int8/uint8
# product sum exactly (|sum| < 2^53), then converted: the results equal
# ONNX's int32 arithmetic.

def _centered(x: Tensor, zp: Tensor | None, row_axis: int | None = None) -> Tensor:
    xf = ops.cast(x, "float64")
    if zp is None:
        return xf
    z = ops.cast(zp, "float64")
    if row_axis is not None and z.ndim == 1 and z.size > 1:
        shape = [1] * x.ndim
        shape[row_axis] = z.shape[0]
        z = reshape(z, shape)
    return ops.sub(xf, z)


def _requantize(acc: Tensor, scale: Tensor, zp: Tensor | None, like_dtype: str) -> Tensor:
    out = dt(zp) if zp is not None else like_dtype
    y = ops.mul(acc, ops.cast(scale, "float64"))
    if zp is not None:
        y = ops.add(y, ops.cast(zp, "float64"))
    lo, hi = _QRANGE[out]
    return ops.cast(ops.clip(ops.round(y), float(lo), float(hi)), out)


@op("MatMulInteger")
def _matmul_integer(n):
    a, b = n.x(0), n.x(1)
    y = ops.matmul(_centered(a, n.x(2), a.ndim - 2), _centered(b, n.x(3)))
    return ops.cast(y, "int32")


@op("QLinearMatMul")
def _qlinear_matmul(n):
    a, a_s, a_zp, b, b_s, b_zp, y_s, y_zp = (n.x(i) for i in range(8))
    acc = ops.matmul(_centered(a, a_zp, a.ndim - 2), _centered(b, b_zp))
    if a_s.ndim == 1 and a_s.size > 1:
        a_s = reshape(a_s, [-1, 1])
    scale = ops.div(ops.mul(a_s, b_s), y_s)        # in the scales' dtype, as ONNX
    return _requantize(acc, scale, y_zp, dt(a))


def _conv_int(n, x, w, bias=None):
    if x.ndim not in (4, 5):
        n.fail(f"{x.ndim - 2}-D integer convolution (2-D and 3-D only)")
    strides, dilations, pads = _geometry(n, x, list(w.shape[2:]))
    if x.ndim == 5:
        # 3-D (ConvInteger / QLinearConv over volumes), as Conv's 5-D path.
        return ops.conv3d(x, w, bias, list(strides), _pairs(pads, 3), list(dilations),
                          n.a("group", 1))
    return ops.conv2d(x, w, bias, list(strides), _pairs(pads, 2), list(dilations),
                      n.a("group", 1))


@op("ConvInteger")
def _conv_integer(n):
    x, w = n.x(0), n.x(1)
    y = _conv_int(n, _centered(x, n.x(2)), _centered(w, n.x(3), 0))
    return ops.cast(y, "int32")


@op("QLinearConv")
def _qlinear_conv(n):
    x, x_s, x_zp, w, w_s, w_zp, y_s, y_zp, b = (n.x(i) for i in range(9))
    bias = ops.cast(b, "float64") if b is not None else None
    acc = _conv_int(n, _centered(x, x_zp), _centered(w, w_zp, 0), bias)
    if w_s.ndim == 1 and w_s.size > 1:
        w_s = reshape(w_s, [1, -1, 1, 1])
    scale = ops.div(ops.mul(x_s, w_s), y_s)
    return _requantize(acc, scale, y_zp, dt(x))


@op("MaxUnpool")
def _max_unpool(n):
    """Scatter x to the (whole-tensor, flattened) positions of MaxPool's
    indices into zeros of the output shape."""
    x, idx = n.x(0), n.x(1)
    kernel = n.a("kernel_shape")
    strides = n.a("strides", [1] * len(kernel))
    pads = n.a("pads", [0] * (2 * len(kernel)))
    r = len(kernel)
    shape = list(x.shape[:2]) + [
        (x.shape[2 + i] - 1) * strides[i] - pads[i] - pads[r + i] + kernel[i] for i in range(r)]
    total = int(np.prod(shape, dtype=np.int64))
    flat = ops.scatter_add(ops.zeros([total], dt(x)), reshape(idx, [-1]), reshape(x, [-1]), 0)
    y = reshape(flat, shape)
    if n.has(2):
        # Indices address the default shape; a larger output_shape pads
        # zeros after each spatial axis.
        target = n.ints(2)
        extra = [t - d for t, d in zip(target, shape)]
        if any(e_ < 0 for e_ in extra) or extra[:2] != [0, 0]:
            n.fail(f"output_shape {target} smaller than the unpooled shape {shape}")
        if any(extra):
            y = ops.pad(y, tuple((0, e_) for e_ in extra))
    return y


@op("Col2Im")
def _col2im(n):
    """Sum each column entry into its image pixel: the target of every entry
    depends only on the shapes and attributes, so it is computed at trace
    time and applied with one ScatterAdd."""
    x = n.x(0)
    if len(n.ints(1)) != 2:
        n.fail(f"{len(n.ints(1))}-D images (2-D only)")
    H, W = n.ints(1)
    kh, kw = n.ints(2)
    d = n.a("dilations", [1, 1])
    p = n.a("pads", [0, 0, 0, 0])
    s = n.a("strides", [1, 1])
    N, CK, L = x.shape
    C = CK // (kh * kw)
    oh = (H + p[0] + p[2] - (d[0] * (kh - 1) + 1)) // s[0] + 1
    ow = (W + p[1] + p[3] - (d[1] * (kw - 1) + 1)) // s[1] + 1
    if oh * ow != L:
        n.fail(f"{L} blocks for an image {H}x{W} that holds {oh}x{ow}")
    c, i, j, bh, bw = np.meshgrid(np.arange(C), np.arange(kh), np.arange(kw), np.arange(oh),
                                  np.arange(ow), indexing="ij")
    h = bh * s[0] - p[0] + i * d[0]
    w = bw * s[1] - p[1] + j * d[1]
    valid = ((h >= 0) & (h < H) & (w >= 0) & (w < W)).reshape(-1)
    target = (c * H * W + h * W + w).reshape(-1)
    src = np.nonzero(valid)[0]
    vals = ops.gather(reshape(x, [N, CK * L]), const(src, "int64"), 1)
    out = ops.scatter_add(ops.zeros([N, C * H * W], dt(x)), const(target[src], "int64"),
                          vals, 1)
    return reshape(out, [N, C, H, W])


@op("DFT")
def _dft(n):
    """ONNX DFT onto the native DFT family (``dragon_core.ops.dft``: Fft,
    Ifft, Rfft, Irfft with an O(n log n) kernel): real ([..., 1]) or
    complex ([..., 2]) input, dft_length cuts or pads, onesided, inverse
    (inverse + onesided is irfft). Opset 20 moved axis to an input."""
    x = n.x(0)
    rank = x.ndim
    if n.opset >= 20:
        axis = int(np.asarray(n.static(2)).reshape(-1)[0]) if n.has(2) else -2
    else:
        axis = n.a("axis", 1)
    if norm_axis(axis, rank) == rank - 1:
        n.fail("the signal axis may not be the last (real/imaginary) axis")
    length = int(np.asarray(n.static(1)).reshape(-1)[0]) if n.has(1) else None
    return ops.dft(x, length, axis, bool(n.a("inverse", 0)), bool(n.a("onesided", 0)))


@op("CumProd")
def _cumprod(n):
    """Running products along the axis, one Mul per position (exact for
    zeros and negative numbers, which exp(cumsum(log x)) is not)."""
    x = n.x(0)
    axis = norm_axis(int(np.asarray(n.static(1)).reshape(-1)[0]), x.ndim)
    length = x.shape[axis]
    exclusive, rev = bool(n.a("exclusive", 0)), bool(n.a("reverse", 0))
    order = list(range(length))[::-1] if rev else list(range(length))
    acc, outs = None, {}
    for i in order:
        xi = ops.slice(x, [i], [i + 1], [1], [axis])
        if exclusive:
            outs[i] = acc if acc is not None else ops.full(list(xi.shape), 1, dt(x))
            acc = xi if acc is None else ops.mul(acc, xi)
        else:
            acc = xi if acc is None else ops.mul(acc, xi)
            outs[i] = acc
    if length == 0:
        return x
    parts = [outs[i] for i in range(length)]
    return parts[0] if length == 1 else ops.concat(parts, axis)


# --------------------------------------- data-dependent output shapes
# NonZero, Unique and NonMaxSuppression produce tensors whose shape depends
# on the values: load() runs these nodes eagerly between compiled segments
# (_segments.py), so their inputs here are concrete tensors and the count is
# read on the host.

_UNIQUE_WIDE = {"float16": "float32", "bfloat16": "float32", "int8": "int32",
                "int16": "int32", "uint8": "int32", "bool": "int32"}


@op("NonZero")
def _nonzero(n):
    return ops.nonzero(n.x(0))


@op("Unique")
def _unique(n):
    """numpy.unique through Dragon's Unique (float32/64, int32/64); the
    other dtypes go through a wider one that holds them exactly."""
    x = n.x(0)
    wide = _UNIQUE_WIDE.get(dt(x))
    xw = ops.cast(x, wide) if wide else x
    axis = n.a("axis", None)
    y, first, inverse, counts = ops.unique(xw, True, True, True, sorted=bool(n.a("sorted", 1)),
                                           axis=axis)
    if wide:
        y = ops.cast(y, dt(x))
    return [y, first, reshape(inverse, [-1]), counts]


def _check_nms(attrs, opset, node):
    if "Nms" not in {d["name"] for d in _C.list_ops()}:
        return "needs vision_ops' Nms op (install the dragon-vision-ops plugin)"
    if attrs.get("center_point_box", 0) not in (0, 1):
        return f"center_point_box={attrs['center_point_box']} (ONNX allows 0 and 1)"
    return None


@op("NonMaxSuppression", check=_check_nms)
def _non_max_suppression(n):
    """Per batch and class: the boxes scoring above score_threshold, by
    decreasing score (ties: lower index), through vision_ops' greedy Nms,
    at most max_output_boxes_per_class of them (Nms runs on a prefix of the
    score order that keeps enough, grown as needed: exact, and it does not
    visit thousands of boxes for 100 outputs). Corners are reordered
    (ONNX boxes may be flipped) and center boxes converted first; a
    negative iou_threshold suppresses what 0 does (overlapping boxes: ONNX
    never suppresses disjoint ones)."""
    boxes, scores = n.x(0), n.x(1)
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 \
            or scores.shape[0] != boxes.shape[0] or scores.shape[2] != boxes.shape[1]:
        n.fail(f"boxes must be [B, N, 4] and scores [B, C, N], got {list(boxes.shape)} and "
               f"{list(scores.shape)}")
    if dt(boxes) not in ("float32", "float64") or dt(scores) != dt(boxes):
        n.fail(f"boxes and scores must both be float32 or float64, got {dt(boxes)} and "
               f"{dt(scores)}")

    def scalar(i, default, kind):
        v = n.static(i)
        if v is None or np.asarray(v).size == 0:
            return default
        return kind(np.asarray(v).reshape(-1)[0])

    max_out = max(scalar(2, 0, int), 0)
    iou = max(scalar(3, 0.0, float), 0.0)
    score_thr = scalar(4, None, float)
    if n.a("center_point_box", 0) == 1:      # [xc, yc, w, h] -> corners
        c, half = ops.slice(boxes, [0], [2], [1], [2]), ops.mul(
            ops.slice(boxes, [2], [4], [1], [2]), like(boxes, 0.5))
        lo, hi = ops.sub(c, half), ops.add(c, half)
    else:                                     # [y1, x1, y2, x2], either diagonal
        a, b = ops.slice(boxes, [0], [2], [1], [2]), ops.slice(boxes, [2], [4], [1], [2])
        lo, hi = ops.minimum(a, b), ops.maximum(a, b)
    corners = ops.concat([lo, hi], 2)
    score_host = scores.numpy()
    rows = []
    for bi in range(boxes.shape[0]):
        box_b = ops.slice(corners, [bi], [bi + 1], [1], [0])
        box_b = reshape(box_b, [boxes.shape[1], 4])
        for ci in range(scores.shape[1]):
            if max_out == 0:
                continue
            s = score_host[bi, ci]
            # Candidates in the order Nms visits them: decreasing score, ties
            # by lower index (NaN scores are never kept and suppress nothing).
            cand = np.nonzero(~np.isnan(s) if score_thr is None else s > score_thr)[0]
            cand = cand[np.argsort(-s[cand], kind="stable")]
            s_t = tensor(np.ascontiguousarray(s))
            # Greedy NMS decides a box from the boxes before it only, so the
            # first max_out kept boxes of a prefix are those of the whole
            # list once the prefix keeps max_out: grow the prefix until then.
            k = min(cand.size, max(4 * max_out, 64))
            while cand.size:
                idx = const(cand[:k], "int64")
                keep, count = ops.nms_padded(ops.gather(box_b, idx, 0), ops.gather(s_t, idx, 0),
                                             iou_threshold=iou)
                kept = cand[:k][keep.numpy()[:int(count.item())]]
                if kept.size >= max_out or k == cand.size:
                    break
                k = min(cand.size, 4 * k)
            else:
                continue
            kept = kept[:max_out]
            rows.append(np.stack([np.full(kept.size, bi), np.full(kept.size, ci), kept], 1))
    sel = np.concatenate(rows, 0) if rows else np.zeros((0, 3), np.int64)
    return [tensor(sel.astype(np.int64))]
# ------------------------------------------------ STFT and MelWeightMatrix

@op("STFT")
def _stft(n):
    """ONNX STFT onto ``dragon_core.ops.stft`` (frames by Gather, window,
    native DFT); frame_step and frame_length must be known at load time."""
    step = int(np.asarray(n.static(1)).reshape(-1)[0])
    frame_length = int(np.asarray(n.static(3)).reshape(-1)[0]) if n.has(3) else None
    return ops.stft(n.x(0), step, n.x(2) if n.has(2) else None, frame_length,
                    bool(n.a("onesided", 1)))


@op("MelWeightMatrix")
def _mel_weight_matrix(n):
    """ONNX MelWeightMatrix: a constant from the (load-time) inputs, with
    ONNX's formula and the inputs' own dtypes in its arithmetic."""
    from .._spectral import mel_weight_matrix_values
    args = [np.asarray(n.static(i)).reshape(-1)[0] for i in range(5)]
    to = ONNX_DTYPES.get(n.a("output_datatype", 1))
    if to is None:
        n.fail("output dtype Dragon lacks")
    return const(mel_weight_matrix_values(*args), to)
# ------------------------------------- uint16 / uint32 / uint64 (ABI 1.4)
# The wide unsigned dtypes are integers for Div (truncating, which equals
# flooring for them) and quantize to uint16 with ONNX's saturation range.
# float8, int4/uint4, int2/uint2 and float4 tensors are refused at load as
# dtypes Dragon has no equivalent for (the zero point or input names it).

_INT = _INT + ("uint16", "uint32", "uint64")
_QRANGE["uint16"] = (0, 2 ** 16 - 1)
