"""Array and math ops with TensorFlow's names and semantics.

Every function maps TensorFlow's arguments (``axis``, ``keepdims``,
``perm``, ``transpose_a``) onto ops of ``dragon_core.ops``, so gradients,
graph mode and every device come from the core unchanged. Where
TensorFlow's default differs from NumPy's it is TensorFlow's that holds
(``tf.argmax`` reduces axis 0; ``tf.transpose`` without ``perm`` reverses
the axes; ``int / int`` is float64; integer ``reduce_mean`` truncates).
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import Tensor

from ._core import as_dtype, cast, convert_to_tensor, float32, float64, int32, int64

ops = dg.ops


def _t(x, dtype=None):
    return convert_to_tensor(x, dtype)


def _pair_args(x, y):
    """Two operands, Python values taking the tensor operand's dtype."""
    if isinstance(x, Tensor) and not isinstance(y, Tensor):
        y = convert_to_tensor(y, x.dtype)
    elif isinstance(y, Tensor) and not isinstance(x, Tensor):
        x = convert_to_tensor(x, y.dtype)
    else:
        x, y = _t(x), _t(y)
    if x.dtype != y.dtype:
        raise TypeError(f"cannot compute an op on {x.dtype.name} and {y.dtype.name} tensors: "
                        "TensorFlow does not promote types; use tf.cast on one of them first")
    return x, y


def _axes(axis, ndim, op):
    """``axis`` (None, an int or a sequence) as a sorted list of positive axes."""
    if axis is None:
        return list(range(ndim))
    if isinstance(axis, Tensor):
        axis = axis.tolist()
    seq = [axis] if isinstance(axis, (int, np.integer)) else list(axis)
    out = []
    for a in seq:
        a = int(a)
        if not -ndim <= a < max(ndim, 1):
            raise ValueError(f"{op}: axis {a} is out of range for a tensor of rank {ndim}")
        out.append(a % ndim if ndim else 0)
    return sorted(set(out))


# ------------------------------------------------------------- arithmetic

def add(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.add(x, y)


def subtract(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.sub(x, y)


def multiply(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.mul(x, y)


def truediv(x, y, name=None):
    """``x / y``; integer operands are divided in float64 (TensorFlow's rule)."""
    x, y = _pair_args(x, y)
    if not x.dtype.is_floating_point:
        wide = float32 if x.dtype.name in ("int8", "uint8", "int16") else float64
        x, y = ops.cast(x, wide), ops.cast(y, wide)
    return ops.div(x, y)


divide = truediv


def floordiv(x, y, name=None):
    """``floor(x / y)`` (floats), or integer floor division."""
    x, y = _pair_args(x, y)
    if x.dtype.is_floating_point:
        return ops.floor(ops.div(x, y))
    q = ops.floor(ops.div(ops.cast(x, float64), ops.cast(y, float64)))
    return ops.cast(q, x.dtype)


def floormod(x, y, name=None):
    """``x - floor(x / y) * y``: the result has the divisor's sign."""
    x, y = _pair_args(x, y)
    return ops.sub(x, ops.mul(floordiv(x, y), y))


mod = floormod


def negative(x, name=None):
    return ops.neg(_t(x))


def pow(x, y, name=None):  # noqa: A001 - TensorFlow's name
    x, y = _pair_args(x, y)
    return ops.pow(x, y)


def maximum(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.maximum(x, y)


def minimum(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.minimum(x, y)


def squared_difference(x, y, name=None):
    x, y = _pair_args(x, y)
    return ops.square(ops.sub(x, y))


def add_n(inputs, name=None):
    inputs = [_t(i) for i in inputs]
    if not inputs:
        raise ValueError("add_n: needs at least one input")
    out = inputs[0]
    for i in inputs[1:]:
        out = ops.add(out, i)
    return out


def _unary(name, op):
    def fn(x, name=None):
        return op(_t(x))
    fn.__name__ = name
    fn.__doc__ = f"Element-wise ``{name}`` (``tf.math.{name}``)."
    return fn


abs = _unary("abs", ops.abs)  # noqa: A001
exp = _unary("exp", ops.exp)
log = _unary("log", ops.log)
log1p = _unary("log1p", ops.log1p)
sqrt = _unary("sqrt", ops.sqrt)
rsqrt = _unary("rsqrt", ops.rsqrt)
square = _unary("square", ops.square)
sin = _unary("sin", ops.sin)
cos = _unary("cos", ops.cos)
tanh = _unary("tanh", ops.tanh)
sigmoid = _unary("sigmoid", ops.sigmoid)
sign = _unary("sign", ops.sign)
floor = _unary("floor", ops.floor)
ceil = _unary("ceil", ops.ceil)
reciprocal = _unary("reciprocal", ops.reciprocal)
logical_not = _unary("logical_not", ops.logical_not)


def round(x, name=None):  # noqa: A001
    """Round half to even (banker's rounding), as TensorFlow does."""
    return ops.round(_t(x))


def _compare(name, op):
    def fn(x, y, name=None):
        x, y = _pair_args(x, y)
        return op(x, y)
    fn.__name__ = name
    fn.__doc__ = f"Element-wise ``{name}`` with broadcasting, as bool."
    return fn


equal = _compare("equal", ops.equal)
not_equal = _compare("not_equal", ops.not_equal)
less = _compare("less", ops.less)
less_equal = _compare("less_equal", ops.less_equal)
greater = _compare("greater", ops.greater)
greater_equal = _compare("greater_equal", ops.greater_equal)
logical_and = _compare("logical_and", ops.logical_and)
logical_or = _compare("logical_or", ops.logical_or)


def clip_by_value(t, clip_value_min, clip_value_max, name=None):
    """Clamp ``t`` to ``[clip_value_min, clip_value_max]``."""
    t = _t(t)
    lo, hi = clip_value_min, clip_value_max
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        return minimum(maximum(t, lo), hi)
    return ops.clip(t, float(lo), float(hi))


# ------------------------------------------------------------- reductions

def _reduce(op, name):
    def fn(input_tensor, axis=None, keepdims=False, name=None):
        x = _t(input_tensor)
        axes = _axes(axis, x.ndim, f"reduce_{name}")
        return op(x, axis=axes, keepdims=bool(keepdims))
    fn.__name__ = f"reduce_{name}"
    fn.__doc__ = (f"``{name}`` over ``axis`` (all axes when None); ``keepdims`` keeps "
                  "reduced axes with size 1 (``tf.reduce_" + name + "``).")
    return fn


reduce_sum = _reduce(ops.sum, "sum")
reduce_prod = _reduce(ops.prod, "prod")
reduce_max = _reduce(ops.max, "max")
reduce_min = _reduce(ops.min, "min")
reduce_logsumexp = _reduce(ops.logsumexp, "logsumexp")
reduce_variance = _reduce(ops.var, "variance")
reduce_std = _reduce(ops.std, "std")


def reduce_mean(input_tensor, axis=None, keepdims=False, name=None):
    """Mean over ``axis``; integer input gives the integer quotient
    truncated toward zero, as in TensorFlow."""
    x = _t(input_tensor)
    axes = _axes(axis, x.ndim, "reduce_mean")
    if x.dtype.is_floating_point:
        return ops.mean(x, axis=axes, keepdims=bool(keepdims))
    if x.dtype.name == "bool":
        raise TypeError("reduce_mean: bool input is not supported (as in TensorFlow); "
                        "cast it first")
    m = ops.mean(ops.cast(x, float64), axis=axes, keepdims=bool(keepdims))
    return ops.cast(m, x.dtype)   # cast truncates toward zero


def reduce_any(input_tensor, axis=None, keepdims=False, name=None):
    x = _t(input_tensor)
    axes = _axes(axis, x.ndim, "reduce_any")
    s = ops.max(ops.cast(ops.not_equal(x, convert_to_tensor(0, x.dtype)) if x.dtype.name !=
                         "bool" else x, int32), axis=axes, keepdims=bool(keepdims))
    return ops.cast(s, "bool")


def reduce_all(input_tensor, axis=None, keepdims=False, name=None):
    x = _t(input_tensor)
    axes = _axes(axis, x.ndim, "reduce_all")
    s = ops.min(ops.cast(x, int32), axis=axes, keepdims=bool(keepdims))
    return ops.cast(s, "bool")


def argmax(input, axis=None, output_type=int64, name=None):  # noqa: A002
    """Index of the largest value along ``axis`` (default 0, TensorFlow's)."""
    x = _t(input)
    axis = 0 if axis is None else int(axis)
    out = ops.argmax(x, axis=axis)
    return out if as_dtype(output_type) == int64 else ops.cast(out, output_type)


def argmin(input, axis=None, output_type=int64, name=None):  # noqa: A002
    """Index of the smallest value along ``axis`` (default 0)."""
    x = _t(input)
    axis = 0 if axis is None else int(axis)
    out = ops.argmin(x, axis=axis)
    return out if as_dtype(output_type) == int64 else ops.cast(out, output_type)


def count_nonzero(input, axis=None, keepdims=False, dtype=int64, name=None):  # noqa: A002
    x = _t(input)
    nz = ops.cast(ops.not_equal(x, convert_to_tensor(0, x.dtype)), int64)
    out = ops.sum(nz, axis=_axes(axis, x.ndim, "count_nonzero"), keepdims=bool(keepdims))
    return out if as_dtype(dtype) == int64 else ops.cast(out, dtype)


# ------------------------------------------------------------------ linalg

def matmul(a, b, transpose_a=False, transpose_b=False, adjoint_a=False, adjoint_b=False,
           a_is_sparse=False, b_is_sparse=False, output_type=None, name=None):
    """Matrix product of the last two axes (batched over the leading ones)."""
    if a_is_sparse or b_is_sparse:
        raise NotImplementedError("matmul(a_is_sparse/b_is_sparse) is not supported by "
                                  "dragon_core.vm.tensorflow; pass dense tensors")
    a, b = _pair_args(a, b)
    return ops.matmul(a, b, transpose_a=bool(transpose_a or adjoint_a),
                      transpose_b=bool(transpose_b or adjoint_b))


def tensordot(a, b, axes, name=None):
    a, b = _pair_args(a, b)
    if isinstance(axes, int):
        ax_a, ax_b = list(range(a.ndim - axes, a.ndim)), list(range(axes))
    else:
        ax_a, ax_b = [list(x) if not isinstance(x, int) else [x] for x in axes]
    ax_a = [x % a.ndim for x in ax_a]
    ax_b = [x % b.ndim for x in ax_b]
    free_a = [i for i in range(a.ndim) if i not in ax_a]
    free_b = [i for i in range(b.ndim) if i not in ax_b]
    k = int(np.prod([a.shape[i] for i in ax_a]))
    am = ops.reshape(ops.transpose(a, free_a + ax_a), [-1, k])
    bm = ops.reshape(ops.transpose(b, ax_b + free_b), [k, -1])
    return ops.reshape(ops.matmul(am, bm), [a.shape[i] for i in free_a] +
                       [b.shape[i] for i in free_b])


# ------------------------------------------------------------ array shape

def reshape(tensor, shape, name=None):
    shape = shape.tolist() if isinstance(shape, Tensor) else [int(s) for s in shape]
    return ops.reshape(_t(tensor), shape)


def transpose(a, perm=None, conjugate=False, name=None):
    """Permute the axes (reverse them when ``perm`` is None)."""
    a = _t(a)
    perm = list(range(a.ndim))[::-1] if perm is None else [int(p) for p in perm]
    return ops.transpose(a, perm)


def expand_dims(input, axis, name=None):  # noqa: A002
    x = _t(input)
    axis = int(axis)
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise ValueError(f"expand_dims: axis {axis} is out of range for rank {x.ndim}")
    return ops.unsqueeze(x, [axis % (x.ndim + 1)])


def squeeze(input, axis=None, name=None):  # noqa: A002
    x = _t(input)
    if axis is None:
        return ops.squeeze(x)
    axes = _axes(axis, x.ndim, "squeeze")
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: cannot squeeze axis {a} of size {x.shape[a]} "
                             f"(shape {tuple(x.shape)})")
    return ops.squeeze(x, axes)


def concat(values, axis, name=None):
    values = [_t(v) for v in values]
    return ops.concat(values, axis=int(axis))


def stack(values, axis=0, name=None):
    return ops.stack([_t(v) for v in values], axis=int(axis))


def unstack(value, num=None, axis=0, name=None):
    x = _t(value)
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    if num is not None and num != n:
        raise ValueError(f"unstack: num={num} but axis {axis} has size {n}")
    return [ops.squeeze(p, [axis]) for p in ops.split(x, [1] * n, axis=axis)] if n else []


def split(value, num_or_size_splits, axis=0, num=None, name=None):
    """Split into ``num_or_size_splits`` equal parts, or parts of the
    given sizes (one size may be -1)."""
    x = _t(value)
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    if isinstance(num_or_size_splits, (int, np.integer)):
        k = int(num_or_size_splits)
        if k <= 0 or n % k:
            raise ValueError(f"split: axis {axis} of size {n} does not split into {k} "
                             "equal parts")
        sizes = [n // k] * k
    else:
        sizes = [int(s) for s in num_or_size_splits]
        if sizes.count(-1) == 1:
            sizes[sizes.index(-1)] = n - (sum(sizes) + 1)
        if sum(sizes) != n:
            raise ValueError(f"split: sizes {sizes} do not add up to {n} (axis {axis})")
    return list(ops.split(x, sizes, axis=axis))


def tile(input, multiples, name=None):  # noqa: A002
    """Repeat the tensor ``multiples[i]`` times along axis ``i``."""
    x = _t(input)
    m = [int(v) for v in (multiples.tolist() if isinstance(multiples, Tensor) else multiples)]
    if len(m) != x.ndim:
        raise ValueError(f"tile: multiples has {len(m)} entries for a tensor of rank {x.ndim}")
    # [d0, d1] -> [1, d0, 1, d1] -> broadcast [m0, d0, m1, d1] -> [m0*d0, m1*d1]
    inter = [v for d in x.shape for v in (1, d)]
    big = [v for k, d in zip(m, x.shape) for v in (k, d)]
    y = ops.broadcast_to(ops.reshape(x, inter), big)
    return ops.reshape(y, [k * d for k, d in zip(m, x.shape)])


def broadcast_to(input, shape, name=None):  # noqa: A002
    return ops.broadcast_to(_t(input), [int(s) for s in shape])


def pad(tensor, paddings, mode="CONSTANT", constant_values=0, name=None):
    """Pad with ``paddings[i] = [before, after]`` per axis."""
    x = _t(tensor)
    p = np.asarray(paddings.numpy() if isinstance(paddings, Tensor) else paddings, dtype=np.int64)
    if p.shape != (x.ndim, 2):
        raise ValueError(f"pad: paddings must have shape [{x.ndim}, 2], got {p.shape}")
    mode = mode.upper()
    if mode not in ("CONSTANT", "REFLECT", "SYMMETRIC"):
        raise ValueError(f"pad: mode must be CONSTANT, REFLECT or SYMMETRIC, got {mode!r}")
    if mode == "SYMMETRIC":
        raise NotImplementedError("pad(mode='SYMMETRIC') is not supported by "
                                  "dragon_core.vm.tensorflow; use mode='REFLECT' or "
                                  "'CONSTANT'")
    pads = tuple((int(b), int(a)) for b, a in p)
    return ops.pad(x, pads, mode=mode.lower(), value=float(constant_values))


def gather(params, indices, validate_indices=None, axis=None, batch_dims=0, name=None):
    """Slices of ``params`` along ``axis`` (default 0) picked by ``indices``."""
    if batch_dims:
        raise NotImplementedError("gather(batch_dims != 0) is not supported by "
                                  "dragon_core.vm.tensorflow; reshape to merge the batch "
                                  "axes or use tf.gather per batch")
    x = _t(params)
    idx = _t(indices)
    if idx.dtype.is_floating_point:
        raise TypeError(f"gather: indices must be integers, got {idx.dtype.name}")
    if idx.dtype != int64:
        idx = ops.cast(idx, int64)
    return ops.gather(x, idx, axis=0 if axis is None else int(axis))


def one_hot(indices, depth, on_value=None, off_value=None, axis=None, dtype=None, name=None):
    """One-hot vectors along a new axis (float32 unless told; indices out of
    ``[0, depth)``, negative ones included, give all-off rows, as in
    TensorFlow)."""
    idx = _t(indices)
    if dtype is None:
        dtype = on_value.dtype if isinstance(on_value, Tensor) else float32
    dtype = as_dtype(dtype)
    on = 1.0 if on_value is None else float(on_value)
    off = 0.0 if off_value is None else float(off_value)
    if idx.dtype != int64:
        idx = ops.cast(idx, int64)
    depth = int(depth)
    axis = -1 if axis is None else int(axis)
    zero = convert_to_tensor(0, int64)
    valid = ops.logical_and(ops.greater_equal(idx, zero),
                            ops.less(idx, convert_to_tensor(depth, int64)))
    safe = ops.where(valid, idx, zero)
    hot = ops.one_hot(safe, depth, on_value=1.0, off_value=0.0, dtype=float64, axis=-1)
    hot = hot * ops.unsqueeze(ops.cast(valid, float64), [idx.ndim])
    out = ops.cast(hot * (on - off) + off, dtype)
    if axis != -1 and axis != idx.ndim:
        perm = list(range(idx.ndim))
        perm.insert(axis % (idx.ndim + 1), idx.ndim)
        out = ops.transpose(out, perm)
    return out


def where(condition, x=None, y=None, name=None):
    """``x`` where ``condition`` holds, else ``y`` (broadcasting)."""
    if x is None and y is None:
        c = np.argwhere(_t(condition).numpy())
        return convert_to_tensor(c.astype(np.int64))
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    x, y = _pair_args(x, y)
    cond = _t(condition)
    if cond.dtype.name != "bool":
        raise TypeError(f"where: condition must be bool, got {cond.dtype.name}")
    return ops.where(cond, x, y)


def boolean_mask(tensor, mask, axis=None, name=None):
    """Elements (or slices) of ``tensor`` where ``mask`` is True (eager only:
    the result's shape depends on the values)."""
    x, m = _t(tensor), _t(mask)
    idx = np.flatnonzero(m.numpy().reshape(-1))
    lead = m.ndim
    flat = ops.reshape(x, [-1] + list(x.shape[lead:]))
    return ops.gather(flat, convert_to_tensor(idx.astype(np.int64)), axis=0)


def shape(input, out_type=int32, name=None):  # noqa: A002
    """The shape as a 1-D integer tensor (int32 unless told)."""
    return convert_to_tensor(np.asarray(_t(input).shape, dtype=as_dtype(out_type).name))


def size(input, out_type=int32, name=None):  # noqa: A002
    return convert_to_tensor(np.asarray(_t(input).size, dtype=as_dtype(out_type).name))


def rank(input, name=None):  # noqa: A002
    return convert_to_tensor(np.asarray(_t(input).ndim, dtype=np.int32))


def identity(input, name=None):  # noqa: A002
    return _t(input)._clone()


def stop_gradient(input, name=None):  # noqa: A002
    return _t(input).detach()


def cumsum(x, axis=0, exclusive=False, reverse=False, name=None):
    """Cumulative sum along ``axis``, as a product with a triangular matrix
    of ones (differentiable through MatMul)."""
    x = _t(x)
    axis = int(axis) % x.ndim
    n = x.shape[axis]
    tri = np.triu(np.ones((n, n)), 1 if exclusive else 0)   # tri[j, i]: j contributes to i
    if reverse:
        tri = tri.T
    tri = convert_to_tensor(tri.astype(x.dtype.name))
    perm = [i for i in range(x.ndim) if i != axis] + [axis]
    moved = ops.transpose(x, perm)
    y = ops.matmul(ops.reshape(moved, [-1, n]), tri)
    y = ops.reshape(y, [moved.shape[i] for i in range(x.ndim)])
    inv = list(np.argsort(perm))
    return ops.transpose(y, [int(i) for i in inv])


# ---------------------------------------------------------------- creation

def zeros(shape, dtype=float32, name=None):
    return ops.zeros([int(s) for s in shape] if not isinstance(shape, int) else [shape],
                     dtype=as_dtype(dtype))


def ones(shape, dtype=float32, name=None):
    return ops.ones([int(s) for s in shape] if not isinstance(shape, int) else [shape],
                    dtype=as_dtype(dtype))


def fill(dims, value, name=None):
    v = convert_to_tensor(value)
    return ops.fill([int(s) for s in dims], v.item(), dtype=v.dtype)


def zeros_like(input, dtype=None, name=None):  # noqa: A002
    x = _t(input)
    return ops.zeros(list(x.shape), dtype=as_dtype(dtype) if dtype else x.dtype)


def ones_like(input, dtype=None, name=None):  # noqa: A002
    x = _t(input)
    return ops.ones(list(x.shape), dtype=as_dtype(dtype) if dtype else x.dtype)


def eye(num_rows, num_columns=None, batch_shape=None, dtype=float32, name=None):
    m = np.eye(num_rows, num_columns, dtype=np.float64)
    if batch_shape:
        m = np.broadcast_to(m, tuple(batch_shape) + m.shape).copy()
    return cast(convert_to_tensor(m), dtype)


def range_(start, limit=None, delta=1, dtype=None, name="range"):
    """``[start, limit)`` by ``delta`` (int32 for int arguments, float32 for floats)."""
    if limit is None:
        start, limit = 0, start
    if dtype is None:
        is_float = any(isinstance(v, float) for v in (start, limit, delta))
        dtype = float32 if is_float else int32
    return cast(convert_to_tensor(np.arange(start, limit, delta)), dtype)


def linspace(start, stop, num, name=None, axis=0):
    return convert_to_tensor(np.linspace(float(start), float(stop), int(num)).astype(np.float32))

