"""Conformance cases of dragon_core.vm.tensorflow.

Each case is written once against the TensorFlow API (``fn(tf, *inputs)``),
so the same code runs on ``dragon_core.vm.tensorflow`` and, when it is
importable, on real TensorFlow; ``ref`` is its float64 NumPy reference,
which also gives the gradient by central finite differences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Case:
    name: str
    fn: Callable                     # fn(tf, *tensors) -> tensor
    inputs: Callable                 # inputs(rng) -> list of np arrays
    ref: Callable                    # ref(*float64 arrays) -> np array
    dtype: str | None = None         # expected output dtype (default: first input's)
    grad: tuple = ()                 # indices of inputs to differentiate
    rtol: float = 1e-5
    atol: float = 1e-6
    with_tf: bool = True             # real TF runs it (False: a TF CPU gap, e.g. NCHW conv)
    tags: tuple = field(default_factory=tuple)


def f32(*shape, low=None, high=None, positive=False):
    def make(rng):
        if low is not None:
            a = rng.uniform(low, high, size=shape)
        else:
            a = rng.standard_normal(shape)
            if positive:
                a = np.abs(a) + 0.5
        return a.astype(np.float32)
    return make


def ints(*shape, low=-5, high=6, dtype=np.int32):
    return lambda rng: rng.integers(low, high, size=shape).astype(dtype)


def inputs(*makers):
    return lambda rng: [m(rng) for m in makers]


# ------------------------------------------------------------- references

def softmax(x, axis=-1):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    m = x.max(axis=axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def erf(x):
    return np.vectorize(math.erf)(x)


def same_pads(n, k, s, d=1):
    out = -(-n // s)
    total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
    return total // 2, total - total // 2


def conv2d_nhwc(x, w, stride=1, padding="VALID", dilation=1):
    """Direct NHWC convolution with HWIO filters (float64)."""
    n, h, wd, c = x.shape
    kh, kw, ci, co = w.shape
    if padding == "SAME":
        (t, b), (l_, r) = same_pads(h, kh, stride, dilation), same_pads(wd, kw, stride, dilation)
    else:
        t = b = l_ = r = 0
    xp = np.pad(x, [(0, 0), (t, b), (l_, r), (0, 0)])
    eh, ew = (kh - 1) * dilation + 1, (kw - 1) * dilation + 1
    oh = (xp.shape[1] - eh) // stride + 1
    ow = (xp.shape[2] - ew) // stride + 1
    out = np.zeros((n, oh, ow, co))
    for i in range(oh):
        for j in range(ow):
            hs, ws = i * stride, j * stride
            patch = xp[:, hs:hs + eh:dilation, ws:ws + ew:dilation, :]
            out[:, i, j, :] = np.einsum("nhwc,hwco->no", patch, w)
    return out


def pool_nhwc(x, k, s, padding, kind):
    n, h, w, c = x.shape
    if padding == "SAME":
        (t, b), (l_, r) = same_pads(h, k, s), same_pads(w, k, s)
    else:
        t = b = l_ = r = 0
    oh = (h + t + b - k) // s + 1
    ow = (w + l_ + r - k) // s + 1
    out = np.zeros((n, oh, ow, c))
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s - t, j * s - l_
            win = x[:, max(h0, 0):min(h0 + k, h), max(w0, 0):min(w0 + k, w), :]
            out[:, i, j, :] = win.max(axis=(1, 2)) if kind == "max" else win.mean(axis=(1, 2))
    return out


def floordiv_ref(a, b):
    return np.floor_divide(a, b)


CASES: list[Case] = []


def case(*args, **kwargs):
    CASES.append(Case(*args, **kwargs))


A34, B34 = f32(3, 4), f32(3, 4)
P34 = f32(3, 4, positive=True)
X234 = f32(2, 3, 4)

# ------------------------------------------------------------ arithmetic
case("add", lambda tf, a, b: tf.add(a, b), inputs(A34, B34), np.add, grad=(0, 1))
case("add_broadcast", lambda tf, a, b: a + b, inputs(A34, f32(4)), np.add, grad=(0, 1))
case("subtract", lambda tf, a, b: tf.subtract(a, b), inputs(A34, B34), np.subtract,
     grad=(0, 1))
case("multiply", lambda tf, a, b: tf.multiply(a, b), inputs(A34, f32(3, 1)), np.multiply,
     grad=(0, 1))
case("divide", lambda tf, a, b: tf.divide(a, b), inputs(A34, P34), np.divide, grad=(0, 1))
case("math.truediv_int", lambda tf, a, b: tf.math.truediv(a, b),
     inputs(ints(3, 4), ints(3, 4, low=1, high=5)), lambda a, b: a / b, dtype="float64")
case("math.floordiv_int", lambda tf, a, b: tf.math.floordiv(a, b),
     inputs(ints(3, 4), ints(3, 4, low=1, high=4)), floordiv_ref, dtype="int32")
case("math.floormod_int", lambda tf, a, b: tf.math.floormod(a, b),
     lambda rng: [ints(3, 4)(rng), np.array([3, -3, 2, -2], np.int32)],
     lambda a, b: np.mod(a, b), dtype="int32")
case("math.floordiv_float", lambda tf, a, b: tf.math.floordiv(a, b), inputs(A34, P34),
     lambda a, b: np.floor(a / b))
case("maximum", lambda tf, a, b: tf.maximum(a, b), inputs(A34, B34), np.maximum, grad=(0, 1))
case("minimum", lambda tf, a, b: tf.minimum(a, b), inputs(A34, B34), np.minimum, grad=(0, 1))
case("pow", lambda tf, a, b: tf.pow(a, b), inputs(P34, f32(3, 4, low=-1.5, high=1.5)),
     np.power, grad=(0, 1))
case("math.squared_difference", lambda tf, a, b: tf.math.squared_difference(a, b),
     inputs(A34, B34), lambda a, b: (a - b) ** 2, grad=(0, 1))
case("negative", lambda tf, a: tf.negative(a), inputs(A34), np.negative, grad=(0,))
case("add_n", lambda tf, a, b: tf.add_n([a, b, a]), inputs(A34, B34),
     lambda a, b: 2 * a + b, grad=(0, 1))
case("operators", lambda tf, a, b: (a * 2.0 - b) / 3.0 + a @ tf.transpose(b),
     inputs(f32(3, 3), f32(3, 3)), lambda a, b: (a * 2 - b) / 3 + a @ b.T, grad=(0, 1))

# --------------------------------------------------------------- unary
for nm, ref, mk, has_grad in [
        ("abs", np.abs, A34, True), ("exp", np.exp, A34, True), ("math.log", np.log, P34, True),
        ("math.log1p", np.log1p, P34, True), ("sqrt", np.sqrt, P34, True),
        ("math.rsqrt", lambda x: 1 / np.sqrt(x), P34, True), ("square", np.square, A34, True),
        ("math.sin", np.sin, A34, True), ("math.cos", np.cos, A34, True),
        ("tanh", np.tanh, A34, True), ("sigmoid", sigmoid, A34, True),
        ("math.reciprocal", lambda x: 1 / x, P34, True),
        ("math.floor", np.floor, A34, False), ("math.ceil", np.ceil, A34, False),
        ("sign", np.sign, A34, False)]:
    parts = nm.split(".")
    def _get(tf, parts=parts):
        return getattr(getattr(tf, parts[0]), parts[1]) if len(parts) == 2 else \
            getattr(tf, parts[0])
    case(nm, (lambda get: lambda tf, a: get(tf)(a))(_get),
         inputs(mk), ref, grad=(0,) if has_grad else ())
case("round_half_to_even", lambda tf, a: tf.round(a),
     lambda rng: [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.4, -0.6], np.float32)],
     np.round)

# ---------------------------------------------------------- comparisons
for nm, ref in [("equal", np.equal), ("not_equal", np.not_equal), ("less", np.less),
                ("less_equal", np.less_equal), ("greater", np.greater),
                ("greater_equal", np.greater_equal)]:
    case(nm, (lambda nm: lambda tf, a, b: getattr(tf, nm)(a, b))(nm),
         inputs(ints(3, 4, low=0, high=3), ints(3, 4, low=0, high=3)), ref, dtype="bool")
case("logical_and_or_not", lambda tf, a, b: tf.logical_or(tf.logical_and(a, b),
                                                           tf.logical_not(b)),
     lambda rng: [rng.random((3, 4)) > 0.5, rng.random((3, 4)) > 0.5],
     lambda a, b: np.logical_or(np.logical_and(a, b), np.logical_not(b)), dtype="bool")
case("clip_by_value", lambda tf, a: tf.clip_by_value(a, -0.5, 0.7), inputs(A34),
     lambda a: np.clip(a, -0.5, 0.7), grad=(0,))

# ----------------------------------------------------------- reductions
case("reduce_sum_all", lambda tf, x: tf.reduce_sum(x), inputs(X234), np.sum, grad=(0,))
case("reduce_sum_axis_keepdims", lambda tf, x: tf.reduce_sum(x, axis=1, keepdims=True),
     inputs(X234), lambda x: x.sum(1, keepdims=True), grad=(0,))
case("reduce_sum_axes_neg", lambda tf, x: tf.reduce_sum(x, axis=[0, -1]), inputs(X234),
     lambda x: x.sum((0, 2)), grad=(0,))
case("reduce_mean", lambda tf, x: tf.reduce_mean(x, axis=-1), inputs(X234),
     lambda x: x.mean(-1), grad=(0,))
case("reduce_mean_int_truncates", lambda tf, x: tf.reduce_mean(x, axis=1),
     lambda rng: [np.array([[-3, 2], [5, 2], [-7, -2]], np.int32)],
     lambda x: np.trunc(x.mean(1)), dtype="int32")
case("reduce_max", lambda tf, x: tf.reduce_max(x, axis=2), inputs(X234),
     lambda x: x.max(2), grad=(0,))
case("reduce_min_keepdims", lambda tf, x: tf.reduce_min(x, axis=0, keepdims=True),
     inputs(X234), lambda x: x.min(0, keepdims=True), grad=(0,))
case("reduce_prod", lambda tf, x: tf.reduce_prod(x, axis=1), inputs(X234),
     lambda x: x.prod(1), grad=(0,))
case("reduce_logsumexp", lambda tf, x: tf.reduce_logsumexp(x, axis=-1), inputs(X234),
     lambda x: np.log(np.exp(x).sum(-1)), grad=(0,))
case("math.reduce_variance", lambda tf, x: tf.math.reduce_variance(x, axis=1), inputs(X234),
     lambda x: x.var(1), grad=(0,))
case("math.reduce_std", lambda tf, x: tf.math.reduce_std(x), inputs(X234),
     lambda x: x.std(), grad=(0,))
case("reduce_any_all", lambda tf, x: tf.logical_and(tf.reduce_any(x, axis=1),
                                                    tf.logical_not(tf.reduce_all(x, axis=1))),
     lambda rng: [rng.random((5, 3)) > 0.5],
     lambda x: np.logical_and(x.any(1), ~x.all(1)), dtype="bool")
case("argmax_default_axis0", lambda tf, x: tf.argmax(x), inputs(A34), lambda x: x.argmax(0),
     dtype="int64")
case("argmin_int32", lambda tf, x: tf.argmin(x, axis=1, output_type=tf.int32), inputs(A34),
     lambda x: x.argmin(1), dtype="int32")
case("math.count_nonzero", lambda tf, x: tf.math.count_nonzero(x, axis=0),
     inputs(ints(4, 3, low=0, high=3)), lambda x: (x != 0).sum(0), dtype="int64")

# --------------------------------------------------------------- linalg
case("matmul", lambda tf, a, b: tf.matmul(a, b), inputs(f32(3, 4), f32(4, 5)), np.matmul,
     grad=(0, 1))
case("matmul_transpose_a", lambda tf, a, b: tf.matmul(a, b, transpose_a=True),
     inputs(f32(4, 3), f32(4, 5)), lambda a, b: a.T @ b, grad=(0, 1))
case("matmul_transpose_b", lambda tf, a, b: tf.matmul(a, b, transpose_b=True),
     inputs(f32(3, 4), f32(5, 4)), lambda a, b: a @ b.T, grad=(0, 1))
case("matmul_batched", lambda tf, a, b: tf.linalg.matmul(a, b),
     inputs(f32(2, 3, 4), f32(2, 4, 2)), np.matmul, grad=(0, 1))
case("tensordot", lambda tf, a, b: tf.tensordot(a, b, axes=1),
     inputs(f32(2, 3), f32(3, 4)), lambda a, b: np.tensordot(a, b, axes=1), grad=(0, 1))

# ---------------------------------------------------------------- shape
case("reshape", lambda tf, x: tf.reshape(x, [4, -1]), inputs(X234),
     lambda x: x.reshape(4, -1), grad=(0,))
case("transpose_default_reverses", lambda tf, x: tf.transpose(x), inputs(X234),
     lambda x: x.transpose(), grad=(0,))
case("transpose_perm", lambda tf, x: tf.transpose(x, perm=[1, 0, 2]), inputs(X234),
     lambda x: x.transpose(1, 0, 2), grad=(0,))
case("expand_dims", lambda tf, x: tf.expand_dims(x, -1), inputs(A34),
     lambda x: x[..., None], grad=(0,))
case("squeeze_axis", lambda tf, x: tf.squeeze(x, axis=1), inputs(f32(3, 1, 4, 1)),
     lambda x: x.squeeze(1), grad=(0,))
case("squeeze_all", lambda tf, x: tf.squeeze(x), inputs(f32(3, 1, 4, 1)),
     lambda x: x.squeeze(), grad=(0,))
case("concat", lambda tf, a, b: tf.concat([a, b], axis=1), inputs(A34, f32(3, 2)),
     lambda a, b: np.concatenate([a, b], 1), grad=(0, 1))
case("stack", lambda tf, a, b: tf.stack([a, b], axis=1), inputs(A34, B34),
     lambda a, b: np.stack([a, b], 1), grad=(0, 1))
case("unstack", lambda tf, x: tf.stack(tf.unstack(x, axis=1)[::-1]), inputs(A34),
     lambda x: np.stack([x[:, i] for i in range(4)][::-1]), grad=(0,))
case("split_sizes", lambda tf, x: tf.split(x, [1, -1], axis=1)[1], inputs(A34),
     lambda x: x[:, 1:], grad=(0,))
case("split_equal", lambda tf, x: tf.split(x, 2, axis=1)[0] * 2.0, inputs(A34),
     lambda x: x[:, :2] * 2, grad=(0,))
case("tile", lambda tf, x: tf.tile(x, [2, 3]), inputs(f32(2, 3)),
     lambda x: np.tile(x, (2, 3)), grad=(0,))
case("broadcast_to", lambda tf, x: tf.broadcast_to(x, [3, 4]), inputs(f32(1, 4)),
     lambda x: np.broadcast_to(x, (3, 4)), grad=(0,))
case("pad_constant", lambda tf, x: tf.pad(x, [[1, 0], [2, 1]], constant_values=0.5),
     inputs(A34), lambda x: np.pad(x, [(1, 0), (2, 1)], constant_values=0.5), grad=(0,))
case("pad_reflect", lambda tf, x: tf.pad(x, [[1, 1], [2, 1]], mode="REFLECT"),
     inputs(A34), lambda x: np.pad(x, [(1, 1), (2, 1)], mode="reflect"), grad=(0,))
case("gather_axis1", lambda tf, x, i: tf.gather(x, i, axis=1),
     lambda rng: [f32(3, 5)(rng), np.array([4, 0, 2, 2], np.int32)],
     lambda x, i: np.take(x, i.astype(np.int64), axis=1), grad=(0,))
case("gather_2d_indices", lambda tf, x, i: tf.gather(x, i),
     lambda rng: [f32(5, 3)(rng), np.array([[0, 4], [1, 1]], np.int64)],
     lambda x, i: x[i.astype(np.int64)], grad=(0,))
case("one_hot", lambda tf, i: tf.one_hot(i, 4), lambda rng: [np.array([0, 3, 1, 5, -1],
                                                                         np.int32)],
     lambda i: np.array([[1.0 * (k == j) for k in range(4)] for j in i]), dtype="float32")
case("one_hot_on_off", lambda tf, i: tf.one_hot(i, 3, on_value=2.0, off_value=-1.0),
     lambda rng: [np.array([[0, 2], [1, 1]], np.int64)],
     lambda i: np.where(np.arange(3) == i[..., None], 2.0, -1.0), dtype="float32")
case("where", lambda tf, c, a, b: tf.where(c, a, b),
     lambda rng: [rng.random((3, 4)) > 0.5, f32(3, 4)(rng), f32(3, 4)(rng)],
     lambda c, a, b: np.where(c, a, b), dtype="float32", grad=(1, 2))
case("math.cumsum", lambda tf, x: tf.math.cumsum(x, axis=1), inputs(A34),
     lambda x: np.cumsum(x, 1), grad=(0,))
case("cumsum_exclusive_reverse", lambda tf, x: tf.cumsum(x, axis=0, exclusive=True,
                                                          reverse=True),
     inputs(A34), lambda x: np.flip(np.cumsum(np.flip(x, 0), 0), 0) - x, grad=(0,))
case("shape", lambda tf, x: tf.shape(x), inputs(X234), lambda x: np.array(x.shape),
     dtype="int32")
case("size_rank", lambda tf, x: tf.size(x) + tf.rank(x), inputs(X234),
     lambda x: np.array(x.size + x.ndim), dtype="int32")
case("zeros_like_ones_like", lambda tf, x: tf.zeros_like(x) + 2.0 * tf.ones_like(x),
     inputs(A34), lambda x: np.full(x.shape, 2.0))
case("fill", lambda tf, x: tf.fill([2, 3], 1.5) + x, inputs(f32(3)),
     lambda x: np.broadcast_to(1.5 + x, (2, 3)), grad=(0,))
case("eye", lambda tf, x: tf.eye(3) @ x, inputs(f32(3, 2)), lambda x: x, grad=(0,))
case("range", lambda tf, x: tf.cast(tf.range(2, 11, 3), tf.float32) * x, inputs(f32(3)),
     lambda x: np.arange(2, 11, 3) * x, grad=(0,))
case("cast_truncates", lambda tf, x: tf.cast(x, tf.int32),
     lambda rng: [np.array([-2.7, -0.5, 0.5, 2.7, 3.0], np.float32)],
     lambda x: np.trunc(x), dtype="int32")
case("constant_int_default", lambda tf, x: tf.constant([1, 2, 3]) * x,
     lambda rng: [np.array([4, 5, 6], np.int32)], lambda x: np.array([1, 2, 3]) * x,
     dtype="int32")
case("stop_gradient", lambda tf, x: tf.stop_gradient(x) * 3.0, inputs(A34),
     lambda x: x * 3.0)

# ------------------------------------------------------------------ nn
case("nn.relu", lambda tf, x: tf.nn.relu(x), inputs(A34), lambda x: np.maximum(x, 0),
     grad=(0,))
case("nn.relu6", lambda tf, x: tf.nn.relu6(x * 4.0), inputs(A34),
     lambda x: np.clip(4 * x, 0, 6), grad=(0,))
case("nn.leaky_relu_default_0.2", lambda tf, x: tf.nn.leaky_relu(x), inputs(A34),
     lambda x: np.where(x > 0, x, 0.2 * x), grad=(0,))
case("nn.elu", lambda tf, x: tf.nn.elu(x), inputs(A34),
     lambda x: np.where(x > 0, x, np.expm1(x)), grad=(0,))
case("nn.selu", lambda tf, x: tf.nn.selu(x), inputs(A34),
     lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
     grad=(0,))
case("nn.gelu", lambda tf, x: tf.nn.gelu(x), inputs(A34),
     lambda x: 0.5 * x * (1 + erf(x / np.sqrt(2))), grad=(0,))
case("nn.gelu_tanh", lambda tf, x: tf.nn.gelu(x, approximate=True), inputs(A34),
     lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3))),
     grad=(0,))
case("nn.silu", lambda tf, x: tf.nn.silu(x), inputs(A34), lambda x: x * sigmoid(x),
     grad=(0,))
case("nn.softplus", lambda tf, x: tf.nn.softplus(x), inputs(A34),
     lambda x: np.log1p(np.exp(x)), grad=(0,))
case("nn.softsign", lambda tf, x: tf.nn.softsign(x), inputs(A34),
     lambda x: x / (1 + np.abs(x)), grad=(0,))
case("nn.softmax", lambda tf, x: tf.nn.softmax(x), inputs(X234), softmax, grad=(0,))
case("nn.softmax_axis0", lambda tf, x: tf.nn.softmax(x, axis=0), inputs(A34),
     lambda x: softmax(x, 0), grad=(0,))
case("nn.log_softmax", lambda tf, x: tf.nn.log_softmax(x), inputs(A34), log_softmax,
     grad=(0,))
case("nn.sparse_softmax_cross_entropy_with_logits",
     lambda tf, z, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z),
     lambda rng: [f32(4, 5)(rng), np.array([0, 4, 2, 2], np.int32)],
     lambda z, y: -log_softmax(z)[np.arange(4), y.astype(np.int64)], grad=(0,))
case("nn.sparse_xent_3d",
     lambda tf, z, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=z),
     lambda rng: [f32(2, 3, 4)(rng), rng.integers(0, 4, (2, 3)).astype(np.int64)],
     lambda z, y: -np.take_along_axis(log_softmax(z), y.astype(np.int64)[..., None],
                                      -1)[..., 0], grad=(0,))
case("nn.softmax_cross_entropy_with_logits",
     lambda tf, z, y: tf.nn.softmax_cross_entropy_with_logits(labels=y, logits=z),
     lambda rng: [f32(4, 5)(rng), softmax(rng.standard_normal((4, 5))).astype(np.float32)],
     lambda z, y: -(y * log_softmax(z)).sum(-1), grad=(0, 1))
case("nn.sigmoid_cross_entropy_with_logits",
     lambda tf, z, y: tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=z),
     lambda rng: [f32(3, 4)(rng), rng.random((3, 4)).astype(np.float32)],
     lambda z, y: np.maximum(z, 0) - z * y + np.log1p(np.exp(-np.abs(z))), grad=(0,))
case("nn.l2_normalize", lambda tf, x: tf.nn.l2_normalize(x, axis=-1), inputs(A34),
     lambda x: x / np.sqrt((x ** 2).sum(-1, keepdims=True)), grad=(0,))
case("nn.l2_loss", lambda tf, x: tf.nn.l2_loss(x), inputs(A34), lambda x: (x ** 2).sum() / 2,
     grad=(0,))
case("nn.moments", lambda tf, x: tf.add(*tf.nn.moments(x, axes=[0, 1])), inputs(X234),
     lambda x: x.mean((0, 1)) + x.var((0, 1)), grad=(0,))
case("nn.bias_add", lambda tf, x, b: tf.nn.bias_add(x, b), inputs(f32(2, 3, 4), f32(4)),
     lambda x, b: x + b, grad=(0, 1))
case("nn.batch_normalization",
     lambda tf, x, m, v, o, s: tf.nn.batch_normalization(x, m, v, o, s, 1e-3),
     inputs(f32(5, 3), f32(3), f32(3, positive=True), f32(3), f32(3)),
     lambda x, m, v, o, s: (x - m) / np.sqrt(v + 1e-3) * s + o, grad=(0, 1, 2, 3, 4))
case("nn.conv2d_valid", lambda tf, x, w: tf.nn.conv2d(x, w, strides=1, padding="VALID"),
     inputs(f32(2, 5, 5, 2), f32(3, 3, 2, 3)), lambda x, w: conv2d_nhwc(x, w), grad=(0, 1),
     rtol=1e-4, atol=1e-5)
case("nn.conv2d_same_stride2", lambda tf, x, w: tf.nn.conv2d(x, w, strides=2, padding="SAME"),
     inputs(f32(1, 6, 5, 2), f32(3, 2, 2, 3)),
     lambda x, w: conv2d_nhwc(x, w, 2, "SAME"), grad=(0, 1), rtol=1e-4, atol=1e-5)
case("nn.conv2d_dilated", lambda tf, x, w: tf.nn.conv2d(x, w, strides=[1, 1, 1, 1],
                                                         padding="SAME", dilations=2),
     inputs(f32(1, 6, 6, 2), f32(2, 2, 2, 2)),
     lambda x, w: conv2d_nhwc(x, w, 1, "SAME", 2), grad=(0, 1), rtol=1e-4, atol=1e-5)
case("nn.conv2d_nchw", lambda tf, x, w: tf.nn.conv2d(x, w, 1, "VALID", data_format="NCHW"),
     inputs(f32(1, 2, 4, 4), f32(3, 3, 2, 2)),
     lambda x, w: conv2d_nhwc(x.transpose(0, 2, 3, 1), w).transpose(0, 3, 1, 2),
     grad=(0, 1), rtol=1e-4, atol=1e-5, with_tf=False)  # TF's CPU conv has no NCHW kernel
case("nn.max_pool2d_valid", lambda tf, x: tf.nn.max_pool2d(x, 2, 2, "VALID"),
     inputs(f32(2, 4, 6, 3)), lambda x: pool_nhwc(x, 2, 2, "VALID", "max"), grad=(0,))
case("nn.max_pool2d_same", lambda tf, x: tf.nn.max_pool2d(x, 3, 2, "SAME"),
     inputs(f32(1, 5, 4, 2)), lambda x: pool_nhwc(x, 3, 2, "SAME", "max"), grad=(0,))
case("nn.avg_pool2d_same", lambda tf, x: tf.nn.avg_pool2d(x, 2, 2, "SAME"),
     inputs(f32(1, 5, 5, 2)), lambda x: pool_nhwc(x, 2, 2, "SAME", "avg"), grad=(0,))
case("nn.avg_pool2d_valid_stride1", lambda tf, x: tf.nn.avg_pool2d(x, [2, 3], 1, "VALID"),
     inputs(f32(1, 4, 5, 2)),
     lambda x: np.stack([np.stack([x[:, i:i + 2, j:j + 3].mean((1, 2)) for j in range(3)], 1)
                         for i in range(3)], 1), grad=(0,))
