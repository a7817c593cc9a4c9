"""``tf.nn``: activations, losses, convolution and pooling (TensorFlow's names).

Images are NHWC by default, as in TensorFlow. The core's convolution and
pooling ops are NCHW, so an NHWC call transposes in and out around them
(``data_format="NCHW"`` skips both transposes); filters are HWIO
(``[kh, kw, in, out]``), TensorFlow's layout.
"""

from __future__ import annotations

import numpy as np

import dragon_core as dg
from dragon_core import Tensor

from . import _ops
from ._core import convert_to_tensor
from ._unsupported import module_getattr

ops = dg.ops
_t = _ops._t


# ------------------------------------------------------------- activations

def relu(features, name=None):
    return ops.relu(_t(features))


def relu6(features, name=None):
    return ops.clip(_t(features), 0.0, 6.0)


def leaky_relu(features, alpha=0.2, name=None):
    """``max(x, alpha * x)``; TensorFlow's default slope is 0.2."""
    return ops.leaky_relu(_t(features), alpha=float(alpha))


def elu(features, name=None):
    return ops.elu(_t(features), alpha=1.0)


def selu(features, name=None):
    scale, alpha = 1.0507009873554805, 1.6732632423543772
    return ops.elu(_t(features), alpha=alpha) * scale


def gelu(features, approximate=False, name=None):
    """GELU; ``approximate=True`` is the tanh form."""
    return ops.gelu(_t(features), approximate="tanh" if approximate else "none")


def silu(features, beta=1.0, name=None):
    x = _t(features)
    return x * ops.sigmoid(x * beta) if beta != 1.0 else x * ops.sigmoid(x)


swish = silu
sigmoid = _ops.sigmoid
tanh = _ops.tanh


def softplus(features, name=None):
    return ops.softplus(_t(features))


def softsign(features, name=None):
    x = _t(features)
    return x / (ops.abs(x) + 1.0)


def softmax(logits, axis=None, name=None):
    """Softmax over ``axis`` (the last by default)."""
    return ops.softmax(_t(logits), axis=-1 if axis is None else int(axis))


def log_softmax(logits, axis=None, name=None):
    return ops.log_softmax(_t(logits), axis=-1 if axis is None else int(axis))


def bias_add(value, bias, data_format=None, name=None):
    """``value + bias`` along the channel axis (last for NHWC/None, 1 for NCHW)."""
    x, b = _t(value), _t(bias)
    if data_format is not None and data_format.startswith("NC"):
        return x + ops.reshape(b, [1, -1] + [1] * (x.ndim - 2))
    return x + b


def l2_normalize(x, axis=None, epsilon=1e-12, name=None):
    """``x / sqrt(max(sum(x**2, axis), epsilon))``."""
    x = _t(x)
    axes = _ops._axes(axis, x.ndim, "l2_normalize")
    sq = ops.sum(ops.square(x), axis=axes, keepdims=True)
    return x * ops.rsqrt(ops.maximum(sq, convert_to_tensor(epsilon, x.dtype)))


def l2_loss(t, name=None):
    """``sum(t ** 2) / 2``."""
    return ops.sum(ops.square(_t(t))) * 0.5


def moments(x, axes, shift=None, keepdims=False, name=None):
    """``(mean, variance)`` over ``axes`` (population variance)."""
    x = _t(x)
    axes = _ops._axes(axes, x.ndim, "moments")
    return (ops.mean(x, axis=axes, keepdims=bool(keepdims)),
            ops.var(x, axis=axes, keepdims=bool(keepdims)))


def dropout(x, rate, noise_shape=None, seed=None, name=None):
    """Zero elements with probability ``rate``, scale the rest by ``1/(1-rate)``."""
    if noise_shape is not None:
        raise NotImplementedError("dropout(noise_shape=...) is not supported by "
                                  "dragon_core.vm.tensorflow; drop whole channels with "
                                  "tf.keras.layers.SpatialDropout2D's formula written out "
                                  "(a mask of the reduced shape times x)")
    rate = float(rate)
    if not 0.0 <= rate < 1.0:
        raise ValueError(f"dropout: rate must be in [0, 1), got {rate}")
    if rate == 0.0:
        return _t(x)
    return ops.dropout(_t(x), p=rate)[0]


# ------------------------------------------------------------------ losses

def sparse_softmax_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Per-example ``-log softmax(logits)[label]``; labels are class ids of
    shape ``logits.shape[:-1]``."""
    if labels is None or logits is None:
        raise ValueError("sparse_softmax_cross_entropy_with_logits: pass labels= and logits= "
                         "by name")
    logits, labels = _t(logits), _t(labels)
    if labels.dtype.is_floating_point:
        raise TypeError(f"sparse_softmax_cross_entropy_with_logits: labels must be integer "
                        f"class ids, got {labels.dtype.name}")
    if tuple(labels.shape) != tuple(logits.shape[:-1]):
        raise ValueError(f"sparse_softmax_cross_entropy_with_logits: labels of shape "
                         f"{tuple(labels.shape)} do not match logits of shape "
                         f"{tuple(logits.shape)} (expected {tuple(logits.shape[:-1])})")
    if labels.dtype.name != "int64":
        labels = ops.cast(labels, "int64")
    if logits.ndim == 2:
        return ops.softmax_cross_entropy(logits, labels, reduction="none")
    c = logits.shape[-1]
    out = ops.softmax_cross_entropy(ops.reshape(logits, [-1, c]), ops.reshape(labels, [-1]),
                                    reduction="none")
    return ops.reshape(out, list(labels.shape))


def softmax_cross_entropy_with_logits(labels=None, logits=None, axis=-1, name=None):
    """Per-example ``-sum(labels * log_softmax(logits), axis)``."""
    if labels is None or logits is None:
        raise ValueError("softmax_cross_entropy_with_logits: pass labels= and logits= by name")
    logits = _t(logits)
    labels = convert_to_tensor(labels, logits.dtype) if not isinstance(labels, Tensor) \
        else labels
    return ops.neg(ops.sum(labels * ops.log_softmax(logits, axis=int(axis)),
                           axis=[int(axis) % logits.ndim]))


def sigmoid_cross_entropy_with_logits(labels=None, logits=None, name=None):
    """Element-wise ``max(x, 0) - x * z + log(1 + exp(-|x|))``."""
    if labels is None or logits is None:
        raise ValueError("sigmoid_cross_entropy_with_logits: pass labels= and logits= by name")
    logits = _t(logits)
    labels = convert_to_tensor(labels, logits.dtype) if not isinstance(labels, Tensor) \
        else labels
    return ops.bce_with_logits(logits, labels, reduction="none")


# ---------------------------------------------------------- conv, pooling

def _hw(value, name, op):
    """A stride/size argument as (h, w): an int, [h, w] or [1, h, w, 1]."""
    if isinstance(value, int):
        return [value, value]
    v = [int(x) for x in value]
    if len(v) == 1:
        return v * 2
    if len(v) == 2:
        return v
    if len(v) == 4:
        return v[1:3]
    raise ValueError(f"{op}: {name} must be an int, 2 or 4 ints, got {value!r}")


def _hw_nchw(value, name, op):
    if isinstance(value, int) or len(value) != 4:
        return _hw(value, name, op)
    return [int(value[2]), int(value[3])]


def same_pads(in_hw, k_hw, s_hw, d_hw=(1, 1)):
    """TensorFlow's 'SAME' padding as ``((top, bottom), (left, right))``: the
    output has ``ceil(in / stride)`` positions, extra padding at the end."""
    pads = []
    for n, k, s, d in zip(in_hw, k_hw, s_hw, d_hw):
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        pads.append((total // 2, total - total // 2))
    return tuple(pads)


def _padding(padding, in_hw, k_hw, s_hw, d_hw, op):
    if isinstance(padding, str):
        p = padding.upper()
        if p == "VALID":
            return ((0, 0), (0, 0))
        if p == "SAME":
            return same_pads(in_hw, k_hw, s_hw, d_hw)
        raise ValueError(f"{op}: padding must be 'SAME' or 'VALID', got {padding!r}")
    # Explicit [[0, 0], [t, b], [l, r], [0, 0]] (NHWC)
    p = [[int(a) for a in pair] for pair in padding]
    if len(p) != 4:
        raise ValueError(f"{op}: explicit padding must have 4 [before, after] pairs")
    return ((p[1][0], p[1][1]), (p[2][0], p[2][1]))


def _to_nchw(x, data_format, op):
    if data_format in (None, "NHWC"):
        if x.ndim != 4:
            raise ValueError(f"{op}: expected NHWC input of rank 4, got shape {tuple(x.shape)}")
        return ops.transpose(x, [0, 3, 1, 2]), True
    if data_format == "NCHW":
        return x, False
    raise ValueError(f"{op}: data_format must be 'NHWC' or 'NCHW', got {data_format!r}")


def conv2d(input, filters, strides=1, padding="VALID", data_format="NHWC",  # noqa: A002
           dilations=None, name=None):
    """2-D convolution; ``filters`` is ``[kh, kw, in / groups, out]`` (HWIO)."""
    x, w = _t(input), _t(filters)
    if w.ndim != 4:
        raise ValueError(f"conv2d: filters must be 4-D [kh, kw, in, out], got shape "
                         f"{tuple(w.shape)}")
    xc, nhwc = _to_nchw(x, data_format, "conv2d")
    pick = _hw if nhwc else _hw_nchw
    s = pick(strides, "strides", "conv2d")
    d = [1, 1] if dilations is None else pick(dilations, "dilations", "conv2d")
    kh, kw, cin, cout = w.shape
    c = xc.shape[1]
    if c % cin:
        raise ValueError(f"conv2d: input has {c} channels, not a multiple of the filter's "
                         f"{cin} input channels (filters shape {tuple(w.shape)})")
    pads = _padding(padding, xc.shape[2:], (kh, kw), s, d, "conv2d")
    y = ops.conv2d(xc, ops.transpose(w, [3, 2, 0, 1]), strides=s, pads=pads, dilations=d,
                   groups=c // cin)
    return ops.transpose(y, [0, 2, 3, 1]) if nhwc else y


def _pool(kind, x, ksize, strides, padding, data_format, op):
    x = _t(x)
    xc, nhwc = _to_nchw(x, data_format, op)
    pick = _hw if nhwc else _hw_nchw
    k = pick(ksize, "ksize", op)
    s = pick(strides, "strides", op)
    pads = _padding(padding, xc.shape[2:], k, s, (1, 1), op)
    # Pooling pads each side by at most half the kernel ('SAME' always does):
    # padded cells never win a maximum and TensorFlow averages over the real
    # cells only (count_include_pad=False), as the ops do.
    fits = all(2 * v <= kk for pair, kk in zip(pads, k) for v in pair)
    full = ((0, 0), (0, 0)) + tuple(pads)
    if kind == "max":
        if fits:
            y = ops.max_pool2d(xc, kernel_size=k, strides=s, pads=pads)
        else:   # explicit padding wider than half the window: pad with -inf first
            lowest = float(np.finfo(xc.dtype.name if xc.dtype.name != "bfloat16"
                                    else "float32").min)
            xp = ops.pad(xc, full, value=lowest)
            y = ops.max_pool2d(xp, kernel_size=k, strides=s)
    elif fits:
        y = ops.avg_pool2d(xc, kernel_size=k, strides=s, pads=pads, count_include_pad=False)
    else:
        # window sums over zero padding, divided by the count of real elements
        xp = ops.pad(xc, full)
        ones = ops.pad(ops.ones([1, 1] + list(xc.shape[2:]), dtype=xc.dtype), full)
        y = ops.div(ops.avg_pool2d(xp, kernel_size=k, strides=s),
                    ops.avg_pool2d(ones, kernel_size=k, strides=s))
    return ops.transpose(y, [0, 2, 3, 1]) if nhwc else y


def max_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002
    """Max pooling (NHWC by default)."""
    return _pool("max", input, ksize, strides, padding, data_format, "max_pool2d")


def avg_pool2d(input, ksize, strides, padding, data_format="NHWC", name=None):  # noqa: A002
    """Average pooling over the valid elements of each window."""
    return _pool("avg", input, ksize, strides, padding, data_format, "avg_pool2d")


max_pool = max_pool2d
avg_pool = avg_pool2d


def embedding_lookup(params, ids, max_norm=None, name=None):
    """Rows of ``params`` picked by ``ids``."""
    if max_norm is not None:
        raise NotImplementedError("embedding_lookup(max_norm=...) is not supported by "
                                  "dragon_core.vm.tensorflow; renormalise the rows with "
                                  "tf.clip_by_norm first")
    return _ops.gather(params, ids)


def batch_normalization(x, mean, variance, offset, scale, variance_epsilon, name=None):
    """``(x - mean) / sqrt(variance + eps) * scale + offset``."""
    x = _t(x)
    inv = ops.rsqrt(_t(variance) + float(variance_epsilon))
    if scale is not None:
        inv = inv * scale
    y = (x - mean) * inv
    return y + offset if offset is not None else y


__getattr__ = module_getattr("tf.nn", {
    "ctc_loss": "write the loss with tf.math ops",
    "conv2d_transpose": "dragon_core.nn.functional.conv_transpose2d (NCHW)",
    "depthwise_conv2d": "tf.nn.conv2d with filters [kh, kw, 1, C] (grouped)",
    "separable_conv2d": "tf.nn.conv2d twice (depthwise, then 1x1)",
    "conv1d": "tf.nn.conv2d on an input with a height of 1",
    "conv3d": "no 3-D convolution exists in dragon_core yet",
    "lrn": "tf.keras.layers.BatchNormalization or LayerNormalization",
    "local_response_normalization": "tf.keras.layers.BatchNormalization",
    "nce_loss": "tf.nn.sparse_softmax_cross_entropy_with_logits",
    "sampled_softmax_loss": "tf.nn.sparse_softmax_cross_entropy_with_logits",
    "top_k": "tf.math.top_k's NumPy equivalent on x.numpy() (eager only)",
    "weighted_cross_entropy_with_logits": "tf.nn.sigmoid_cross_entropy_with_logits times "
                                          "the weights",
})
