"""Functional forms of the layers (``dragon_core.nn.functional``, ``F``).

Each function maps PyTorch-style argument names (``stride=2``, ``padding=1``)
onto one op of the standard library (``docs/ops.md``), so everything here
runs on any device whose plugin provides the op, differentiates through the
op's gradient rule, and is traced into graphs by ``@dragon_core.function``.
"""

from __future__ import annotations

import math
from typing import Sequence

from .. import _C, ops
from .._autograd import no_grad
from .._grads._util import eager_fused
from .._tensor import Tensor

_BY_NAME: dict = {}


def _op(name: str):
    """``dragon_core.ops`` function of the op called ``name`` (CamelCase)."""
    fn = _BY_NAME.get(name)
    if fn is None:
        try:
            fn = getattr(ops, _C.op(name).py_name)
        except (LookupError, AttributeError):
            from ..errors import NotFoundError
            raise NotFoundError(
                f"op {name} is not registered: it is defined by the core's standard "
                "library, so this dragon_core build is too old") from None
        _BY_NAME[name] = fn
    return fn


def _pair(value, what: str, op: str) -> list:
    if isinstance(value, int):
        return [value, value]
    value = list(value)
    if len(value) == 1:
        return value * 2
    if len(value) != 2 or not all(isinstance(v, int) for v in value):
        raise ValueError(f"{op}: {what} must be an int or a pair of ints, got {value!r}")
    return value


def _reduction(reduction: str, op: str) -> str:
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"{op}: reduction must be 'none', 'mean' or 'sum', got {reduction!r}")
    return reduction


# ------------------------------------------------------------------ linear
def _fused_bias(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """Whether ``linear`` adds the bias inside the product (one
    ``MatMulBiasAct``) instead of a ``MatMul`` and an ``Add``.

    Only where the two give the same values: a product written in float32
    or float64 (float32 operands, autocast's 16-bit operands with their
    float32 product, float64), to which the kernel adds the bias as the
    ``Add`` would; a 16-bit product keeps the separate ``Add`` (the fused
    kernel would round once instead of twice). Eager calls only, and only
    where the device has a ``MatMulBiasAct`` kernel for the operands' dtype
    (``_grads._util.eager_fused``): a traced call records ``MatMul`` and
    ``Add``, which the graph's pattern fusion rewrites together with what
    follows (a ``Relu`` joins ``MatMulBiasAct`` there).
    """
    if bias is None or bias.ndim != 1:
        return False
    dt = x._dtype_code
    if weight._dtype_code != dt or bias._dtype_code != dt:
        return False
    name = x.dtype.name
    if name not in ("float32", "float64"):
        return False
    run = dt
    if name == "float32":
        low = _C._autocast_get()
        if low >= 0:
            run = low             # autocast: 16-bit operands, float32 product
    return eager_fused("MatMulBiasAct", x, run)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``y = x @ weight.T + bias``; ``weight`` is ``[out_features, in_features]``.

    Eagerly, with a bias and a float32 or float64 product (autocast's
    included), the bias is added by the product's kernel (``MatMulBiasAct``,
    where the device has one): the values of ``MatMul`` followed by ``Add``
    (up to the order of one float32 rounding), one pass over the output
    fewer. Traced calls record ``MatMul`` and ``Add`` for the graph's fusion.
    """
    if weight.ndim != 2:
        raise ValueError(f"linear: weight must be 2-D [out, in], got shape {tuple(weight.shape)}")
    if x.ndim < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"linear: input of shape {tuple(x.shape)} does not match weight "
                         f"{tuple(weight.shape)} (expected last dim {weight.shape[1]})")
    fused = _fused_bias(x, weight, bias)
    x2 = ops.reshape(x, [-1, x.shape[-1]]) if x.ndim > 2 else x
    if fused:
        y = ops.matmul_bias_act(x2, weight, bias, transpose_b=True, activation="none")
    else:
        y = ops.matmul(x2, weight, transpose_b=True)
        if bias is not None and _bias_before_reshape(x, bias):
            y, bias = y + bias, None
    if x.ndim > 2:
        y = ops.reshape(y, list(x.shape[:-1]) + [weight.shape[0]])
    return y if bias is None or fused else y + bias


def _bias_before_reshape(x: Tensor, bias: Tensor) -> bool:
    """Whether a traced ``linear`` of an input of rank > 2 adds the bias to
    the 2-D product, before the reshape back: then the graph reads
    ``MatMul -> Add`` and pattern fusion can make them one ``MatMulBiasAct``
    (with the ``Reshape`` between them, no pattern matched). Only for a
    float32 input and bias outside autocast: under autocast the ``Add``
    stays next to what follows it (``gelu_fusion`` takes ``Add -> Gelu ->
    Cast``), and the fused kernel only serves operands of one dtype anyway.
    Eager calls keep the order (they add the bias in the product where a
    kernel allows). Same values either way (an element-wise add, before or
    after a view)."""
    return (x.ndim > 2 and bias.ndim == 1 and x.dtype.name == "float32"
            and bias.dtype.name == "float32" and _C._autocast_get() < 0
            and _C._is_tracing())


# ------------------------------------------------------------------- conv
def same_padding(kernel_size, dilation=1) -> tuple:
    """``((top, bottom), (left, right))`` padding keeping the size at stride 1
    (the odd cell, if any, at the bottom / right)."""
    kh, kw = _pair(kernel_size, "kernel_size", "same_padding")
    dh, dw = _pair(dilation, "dilation", "same_padding")
    th, tw = dh * (kh - 1), dw * (kw - 1)
    return ((th // 2, th - th // 2), (tw // 2, tw - tw // 2))


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0,
           dilation=1, groups: int = 1) -> Tensor:
    """2-D convolution over NCHW input; ``weight`` is ``[O, C/groups, kh, kw]``.

    ``padding`` is an int, ``(h, w)`` (both sides), ``((top, bottom),
    (left, right))``, ``"valid"`` or ``"same"`` (stride 1 only): the padding
    layout of every op (docs/python-api.md).
    """
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            if _pair(stride, "stride", "conv2d") != [1, 1]:
                raise ValueError("conv2d: padding='same' needs stride 1")
            padding = same_padding(tuple(weight.shape[2:]), dilation)
        else:
            raise ValueError(f"conv2d: padding must be 'valid', 'same' or ints, got {padding!r}")
    return _op("Conv2d")(x, weight, bias, strides=_pair(stride, "stride", "conv2d"),
                         pads=padding,
                         dilations=_pair(dilation, "dilation", "conv2d"), groups=groups)


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1,
                     padding=0, output_padding=0, groups: int = 1, dilation=1) -> Tensor:
    """Transposed 2-D convolution; ``weight`` is ``[C_in, O/groups, kh, kw]``;
    ``padding`` (removed from the output) as :func:`conv2d`'s."""
    op = "conv_transpose2d"
    return _op("ConvTranspose2d")(x, weight, bias, strides=_pair(stride, "stride", op),
                                  pads=padding,
                                  output_padding=_pair(output_padding, "output_padding", op),
                                  dilations=_pair(dilation, "dilation", op), groups=groups)


# ---------------------------------------------------------------- pooling
def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1,
               ceil_mode: bool = False) -> Tensor:
    """Max pooling over NCHW input (``stride`` defaults to ``kernel_size``);
    ``padding`` is an int, ``(h, w)`` or ``((top, bottom), (left, right))``,
    each side at most half the kernel."""
    op = "max_pool2d"
    k = _pair(kernel_size, "kernel_size", op)
    s = k if stride is None else _pair(stride, "stride", op)
    return _op("MaxPool2d")(x, kernel_size=k, strides=s, pads=padding,
                            dilations=_pair(dilation, "dilation", op), ceil_mode=ceil_mode)


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    """Average pooling over NCHW input (``stride`` defaults to ``kernel_size``);
    ``padding`` as :func:`max_pool2d`'s."""
    op = "avg_pool2d"
    k = _pair(kernel_size, "kernel_size", op)
    s = k if stride is None else _pair(stride, "stride", op)
    return _op("AvgPool2d")(x, kernel_size=k, strides=s, pads=padding,
                            ceil_mode=ceil_mode, count_include_pad=count_include_pad)


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    """Average pooling to a fixed ``output_size`` (int or ``(h, w)``)."""
    if x.ndim != 4:
        raise ValueError(f"adaptive_avg_pool2d: expected NCHW input, got shape {tuple(x.shape)}")
    size = [output_size, output_size] if output_size is None or isinstance(output_size, int) \
        else list(output_size)
    if len(size) != 2 or not all(v is None or isinstance(v, int) for v in size):
        raise ValueError(f"adaptive_avg_pool2d: output_size must be an int or (h, w) "
                         f"(None keeps a side), got {output_size!r}")
    size = [x.shape[2 + i] if v is None else v for i, v in enumerate(size)]
    return _op("AdaptiveAvgPool2d")(x, output_size=size)


# ----------------------------------------------------------- normalization
def _ones_like_channels(x: Tensor, n: int) -> Tensor:
    return ops.ones([n], dtype=x.dtype, device=str(x.device))


def _zeros_like_channels(x: Tensor, n: int) -> Tensor:
    return ops.zeros([n], dtype=x.dtype, device=str(x.device))


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over axis 1 of ``[N, C, *]`` input.

    In training mode the batch statistics normalise ``x`` and, when running
    statistics are given, update them in place (``running = (1 - momentum)
    * running + momentum * batch``, the variance unbiased) with one
    ``BatchNormStatsUpdate`` op (momentum and the count are attributes, not
    scalar operands), which inside ``@dragon_core.function`` becomes a state
    update of the graph.
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected input of rank >= 2 [N, C, ...], got shape "
                         f"{tuple(x.shape)}")
    c = x.shape[1]
    if not training and (running_mean is None or running_var is None):
        raise ValueError("batch_norm: inference mode needs running_mean and running_var")
    gamma = _ones_like_channels(x, c) if weight is None else weight
    beta = _zeros_like_channels(x, c) if bias is None else bias
    rm = _zeros_like_channels(x, c) if running_mean is None else running_mean
    rv = _ones_like_channels(x, c) if running_var is None else running_var
    n = x.size // c if c else 0
    if training and (n == 1 or (n == 0 and running_mean is not None)):
        # (one value: the batch variance is 0 and the output 0, as torch refuses)
        raise ValueError(f"batch_norm: training needs more than one value per channel, "
                         f"got input of shape {tuple(x.shape)}")
    y, mean, var = _op("BatchNorm")(x, gamma, beta, rm, rv, eps=float(eps),
                                    training=bool(training))
    if training and running_mean is not None and running_var is not None:
        with no_grad():
            new_mean, new_var = _op("BatchNormStatsUpdate")(
                running_mean, running_var, mean.detach(), var.detach(),
                momentum=float(momentum), count=int(n))
            running_mean.assign(new_mean)
            running_var.assign(new_var)
    return y


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Normalise over the trailing ``normalized_shape`` dimensions."""
    shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
    k = len(shape)
    if k == 0 or k > x.ndim or list(x.shape[x.ndim - k:]) != shape:
        raise ValueError(f"layer_norm: normalized_shape {shape} does not match the trailing "
                         f"dimensions of input shape {tuple(x.shape)}")
    gamma = ops.ones(shape, dtype=x.dtype, device=str(x.device)) if weight is None else weight
    beta = ops.zeros(shape, dtype=x.dtype, device=str(x.device)) if bias is None else bias
    return _op("LayerNorm")(x, gamma, beta, axis=x.ndim - k, eps=float(eps))


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Group normalisation of ``[N, C, *]`` input over ``num_groups`` channel groups."""
    if x.ndim < 2:
        raise ValueError(f"group_norm: expected input [N, C, ...], got shape {tuple(x.shape)}")
    c = x.shape[1]
    if num_groups > 0 and c % num_groups == 0 and \
            x.shape[0] * (c // num_groups) * math.prod(x.shape[2:]) == 1:
        # torch's check (one value per (sample, group) and a batch of one)
        raise ValueError(f"group_norm: expected more than 1 value per group when training, "
                         f"got input of shape {tuple(x.shape)} and {num_groups} groups")
    gamma = _ones_like_channels(x, c) if weight is None else weight
    beta = _zeros_like_channels(x, c) if bias is None else bias
    return _op("GroupNorm")(x, gamma, beta, groups=int(num_groups), eps=float(eps))


# ------------------------------------------------------------ regularisers
def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero elements with probability ``p`` and scale the rest by ``1/(1-p)``.

    The identity when not ``training`` or ``p == 0``. The mask comes from the
    global generator (``dragon_core.manual_seed``), drawn anew at every run,
    also in graph mode.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    return _op("Dropout")(x, p=float(p))[0]


def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` ([num_embeddings, dim]) picked by integer ``indices``."""
    if padding_idx is None:
        padding_idx = -1
    elif padding_idx < 0:
        padding_idx += weight.shape[0]
    return _op("Embedding")(weight, indices, padding_idx=int(padding_idx))


# ------------------------------------------------------------ activations
def relu(x: Tensor) -> Tensor:
    return ops.relu(x)


def relu6(x: Tensor) -> Tensor:
    return ops.clip(x, 0.0, 6.0)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return ops.leaky_relu(x, alpha=negative_slope)


def elu(x: Tensor, alpha: float = 1.0) -> Tensor:
    return ops.elu(x, alpha=alpha)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return ops.gelu(x, approximate=approximate)


def silu(x: Tensor) -> Tensor:
    return x * ops.sigmoid(x)


def sigmoid(x: Tensor) -> Tensor:
    return ops.sigmoid(x)


def tanh(x: Tensor) -> Tensor:
    return ops.tanh(x)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return ops.softplus(x, beta=beta, threshold=threshold)


def softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.softmax(x, axis=dim)


def log_softmax(x: Tensor, dim: int = -1) -> Tensor:
    return ops.log_softmax(x, axis=dim)


# ----------------------------------------------------------------- losses
def cross_entropy(input: Tensor, target: Tensor, ignore_index: int = -100,
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """Softmax cross-entropy of logits ``[N, C, *]`` against class indices ``[N, *]``."""
    return _op("SoftmaxCrossEntropy")(input, target, ignore_index=int(ignore_index),
                                      label_smoothing=float(label_smoothing),
                                      reduction=_reduction(reduction, "cross_entropy"))


def nll_loss(input: Tensor, target: Tensor, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """Negative log-likelihood of log-probabilities ``[N, C, *]``."""
    return _op("NllLoss")(input, target, ignore_index=int(ignore_index),
                          reduction=_reduction(reduction, "nll_loss"))


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _op("MseLoss")(input, target, reduction=_reduction(reduction, "mse_loss"))


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:
    return _op("L1Loss")(input, target, reduction=_reduction(reduction, "l1_loss"))


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean",
                   beta: float = 1.0) -> Tensor:
    return _op("SmoothL1Loss")(input, target, beta=float(beta),
                               reduction=_reduction(reduction, "smooth_l1_loss"))


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, reduction: str = "mean",
                                     pos_weight: Tensor | None = None) -> Tensor:
    """Sigmoid + binary cross-entropy in one numerically stable op."""
    red = _reduction(reduction, "binary_cross_entropy_with_logits")
    if pos_weight is None:
        return _op("BceWithLogits")(input, target, reduction=red)
    return _op("BceWithLogits")(input, target, pos_weight, reduction=red)


def sigmoid_focal_loss(input: Tensor, target: Tensor, alpha: float = 0.25, gamma: float = 2.0,
                       reduction: str = "none") -> Tensor:
    """RetinaNet's focal loss on logits (``alpha < 0`` disables class weighting)."""
    return _op("SigmoidFocalLoss")(input, target, alpha=float(alpha), gamma=float(gamma),
                                   reduction=_reduction(reduction, "sigmoid_focal_loss"))


def _fan(shape: Sequence[int]) -> tuple[int, int]:
    if len(shape) < 2:
        raise ValueError(f"fan in/out need a tensor of rank >= 2, got shape {tuple(shape)}")
    receptive = math.prod(shape[2:]) if len(shape) > 2 else 1
    return shape[1] * receptive, shape[0] * receptive
