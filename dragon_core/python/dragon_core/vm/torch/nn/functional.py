"""``torch.nn.functional`` over ``dragon_core.nn.functional`` and ops."""

from __future__ import annotations

import math

import numpy as np

from dragon_core import ops as _ops
from dragon_core.nn import functional as _F

from .. import _dtype as D
from .._functions import _EXPORTS as _T
from .._functions import _float_t
from .._functions import _index_select_in_range
from .._tensor import Tensor, _as_dg, _cast, _inplace, _u, _w  # noqa: F401


def _o(x):
    return None if x is None else x._t


def linear(input, weight, bias=None):
    return _w(_F.linear(input._t, weight._t, _o(bias)))


def bilinear(input1, input2, weight, bias=None):
    out = _T["einsum"]("bi,oij,bj->bo", input1, weight, input2)
    return out if bias is None else out + bias


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            k = weight.shape[2:]
            d = (dilation, dilation) if isinstance(dilation, int) else dilation
            tot = [dd * (kk - 1) for dd, kk in zip(d, k)]
            if any(t % 2 for t in tot):
                x = pad(input, [tot[1] // 2, tot[1] - tot[1] // 2, tot[0] // 2,
                                tot[0] - tot[0] // 2])
                return conv2d(x, weight, bias, stride, 0, dilation, groups)
            padding = [t // 2 for t in tot]
    return _w(_F.conv2d(input._t, weight._t, _o(bias), stride, padding, dilation, groups))


def _triple(v, name):
    v = list(v) if isinstance(v, (tuple, list)) else [v] * 3
    if len(v) == 1:
        v = v * 3
    if len(v) != 3:
        raise RuntimeError(f"{name} must be an int or 3 ints, got {v}")
    return [int(x) for x in v]


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv3d``: the native Conv3d (NCDHW)."""
    if input.ndim != 5 or weight.ndim != 5:
        raise RuntimeError(f"conv3d: expected a 5-D input and weight (N, C, D, H, W), got "
                           f"input {tuple(input.shape)} and weight {tuple(weight.shape)}")
    d = _triple(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            tot = [dd * (kk - 1) for dd, kk in zip(d, weight.shape[2:])]
            if any(t % 2 for t in tot):
                x = pad(input, [tot[2] // 2, tot[2] - tot[2] // 2, tot[1] // 2,
                                tot[1] - tot[1] // 2, tot[0] // 2, tot[0] - tot[0] // 2])
                return conv3d(x, weight, bias, stride, 0, dilation, groups)
            padding = [t // 2 for t in tot]
        else:
            raise ValueError(f"Invalid padding string {padding!r}")
    args = (input._t, weight._t) + ((bias._t,) if bias is not None else ())
    return _w(_ops.conv3d(*args, strides=_triple(stride, "stride"),
                          pads=_triple(padding, "padding"), dilations=d, groups=int(groups)))


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """``torch.nn.functional.conv_transpose3d``: the native ConvTranspose3d."""
    args = (input._t, weight._t) + ((bias._t,) if bias is not None else ())
    return _w(_ops.conv_transpose3d(*args, strides=_triple(stride, "stride"),
                                    pads=_triple(padding, "padding"),
                                    dilations=_triple(dilation, "dilation"), groups=int(groups),
                                    output_padding=_triple(output_padding, "output_padding")))


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``torch.nn.functional.max_pool3d``: the native MaxPool3d (its indices
    are torch's ``return_indices``, flat inside each (n, c) volume)."""
    k = _triple(kernel_size, "kernel_size")
    s = k if stride is None or stride == [] or stride == () else _triple(stride, "stride")
    y, idx = _ops.max_pool3d(input._t, kernel_size=k, strides=s,
                             pads=_triple(padding, "padding"),
                             dilations=_triple(dilation, "dilation"), ceil_mode=bool(ceil_mode))
    return (_w(y), _w(idx)) if return_indices else _w(y)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """``torch.nn.functional.avg_pool3d``: the native AvgPool3d."""
    if divisor_override is not None:
        raise NotImplementedError("avg_pool3d(divisor_override=...) is not supported")
    k = _triple(kernel_size, "kernel_size")
    s = k if stride is None or stride == [] or stride == () else _triple(stride, "stride")
    return _w(_ops.avg_pool3d(input._t, kernel_size=k, strides=s,
                              pads=_triple(padding, "padding"), ceil_mode=bool(ceil_mode),
                              count_include_pad=bool(count_include_pad)))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if isinstance(padding, str):
        padding = 0 if padding == "valid" else (weight.shape[-1] - 1) * dilation // 2
    s = stride[0] if isinstance(stride, (tuple, list)) else stride
    p = padding[0] if isinstance(padding, (tuple, list)) else padding
    dl = dilation[0] if isinstance(dilation, (tuple, list)) else dilation
    out = conv2d(input.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), (1, dl), groups)
    return out.squeeze(2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    return _w(_F.conv_transpose2d(input._t, weight._t, _o(bias), stride, padding,
                                  output_padding, groups, dilation))


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    if return_indices:
        raise NotImplementedError("max_pool2d(return_indices=True) is not supported; use "
                                  "dragon_core.ops.max_pool2d_indices on x.dragon()")
    if stride is None or stride == []:
        stride = kernel_size
    return _w(_F.max_pool2d(input._t, kernel_size, stride, padding, dilation, ceil_mode))


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    stride = kernel_size if stride is None else stride
    return max_pool2d(input.unsqueeze(2), (1, kernel_size), (1, stride), (0, padding),
                      (1, dilation), ceil_mode).squeeze(2)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    if divisor_override is not None:
        raise NotImplementedError("avg_pool2d(divisor_override=...) is not supported")
    if stride is None or stride == []:
        stride = kernel_size
    return _w(_F.avg_pool2d(input._t, kernel_size, stride, padding, ceil_mode,
                            count_include_pad))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    stride = kernel_size if stride is None else stride
    return avg_pool2d(input.unsqueeze(2), (1, kernel_size), (1, stride), (0, padding),
                      ceil_mode, count_include_pad).squeeze(2)


def adaptive_avg_pool2d(input, output_size):
    return _w(_F.adaptive_avg_pool2d(input._t, output_size))


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool2d(input.unsqueeze(2), (1, output_size)).squeeze(2)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    h, w = input.shape[-2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    if h % oh or w % ow:
        raise NotImplementedError("adaptive_max_pool2d with an input size that is not a "
                                  "multiple of the output size is not supported")
    return max_pool2d(input, (h // oh, w // ow))


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    return _w(_F.batch_norm(input._t, _o(running_mean), _o(running_var), _o(weight), _o(bias),
                            training, momentum, eps))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _w(_F.layer_norm(input._t, normalized_shape, _o(weight), _o(bias), eps))


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _w(_F.group_norm(input._t, num_groups, _o(weight), _o(bias), eps))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    return group_norm(input, input.shape[1], weight, bias, eps)


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    n = _T["norm"](input, p, dim, True)
    return input / _T["clamp"](n, min=eps)


def dropout(input, p=0.5, training=True, inplace=False):
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return input
    return _w(_F.dropout(input._t, p, training))


def dropout2d(input, p=0.5, training=True, inplace=False):
    if not training or p == 0:
        return input
    from .._creation import rand
    keep = (rand(*input.shape[:2], 1, 1) >= p).to(input.dtype)
    return input * keep / (1 - p)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise NotImplementedError("embedding(max_norm=...) is not supported")
    return _w(_F.embedding(_cast(input._t, D.DTYPES["int64"]), weight._t, padding_idx))


def one_hot(tensor, num_classes=-1):
    n = int(tensor.max()) + 1 if num_classes == -1 else num_classes
    return _w(_ops.one_hot(tensor._t, n, 1.0, 0.0, "int64"))


def pad(input, pad, mode="constant", value=None):
    """torch's pad order (last dim first, (left, right) pairs) turned into
    dragon's (one (before, after) pair per axis, outermost first, as np.pad)."""
    n = input.ndim
    if len(pad) % 2 or len(pad) // 2 > n:
        raise RuntimeError("Padding length must be divisible by 2 and at most twice the "
                           "number of dimensions")
    begins, ends = [0] * n, [0] * n
    for i in range(len(pad) // 2):
        begins[n - 1 - i] = pad[2 * i]
        ends[n - 1 - i] = pad[2 * i + 1]
    if any(b < 0 or e < 0 for b, e in zip(begins, ends)):
        key = tuple(slice(max(-b, 0), s - max(-e, 0)) for b, e, s in zip(begins, ends,
                                                                        input.shape))
        input = input[key]
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if mode == "circular":
        raise NotImplementedError("pad(mode='circular') is not supported; use torch.cat of "
                                  "slices")
    mode = {"replicate": "edge"}.get(mode, mode)
    pads = tuple(zip(begins, ends))
    return _w(_ops.pad(input._t, pads, mode, 0.0 if value is None else float(value)))


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported")
    if recompute_scale_factor:
        raise NotImplementedError("interpolate(recompute_scale_factor=True) is not "
                                  "supported; pass size= instead")
    if isinstance(size, int):
        size = [size]
    if isinstance(scale_factor, (int, float)):
        scale_factor = [float(scale_factor)]
    return _w(_ops.interpolate(input._t, None if size is None else list(size),
                               None if scale_factor is None else list(scale_factor), mode,
                               align_corners))


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


# ------------------------------------------------------------- activations
def relu(input, inplace=False):
    out = _w(_ops.relu(input._t))
    return _inplace(input, out) if inplace else out


def relu_(input):
    return relu(input, True)


def relu6(input, inplace=False):
    return _w(_F.relu6(input._t))


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _w(_F.leaky_relu(input._t, negative_slope))


def elu(input, alpha=1.0, inplace=False):
    return _w(_F.elu(input._t, alpha))


def selu(input, inplace=False):
    a, s = 1.6732632423543772, 1.0507009873554805
    return elu(input, a) * s


def celu(input, alpha=1.0, inplace=False):
    return _w(_ops.maximum(input._t, 0.0)) + _T["clamp"](
        alpha * _T["expm1"](input / alpha), max=0.0)


def gelu(input, approximate="none"):
    return _w(_F.gelu(input._t, approximate))


def silu(input, inplace=False):
    return _w(_F.silu(input._t))


def mish(input, inplace=False):
    return input * _T["tanh"](softplus(input))


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    return _T["clamp"](input, min_val, max_val)


def hardsigmoid(input, inplace=False):
    return _T["clamp"](input / 6 + 0.5, 0.0, 1.0)


def hardswish(input, inplace=False):
    return input * hardsigmoid(input)


def sigmoid(input):
    return _T["sigmoid"](input)


def tanh(input):
    return _T["tanh"](input)


def softplus(input, beta=1.0, threshold=20.0):
    return _w(_F.softplus(input._t, beta, threshold))


def softsign(input):
    return input / (1 + _T["abs"](input))


def logsigmoid(input):
    return -softplus(-input)


def tanhshrink(input):
    return input - _T["tanh"](input)


def _softmax_dim(input, dim):
    if dim is None:
        dim = 0 if input.ndim in (0, 1, 3) else 1
    return dim


def _over_dim(op, x, dim):
    """``op(x, dim)``; a 0-d ``x`` (dim 0 or -1, as torch allows) as one
    element along a dimension of its own."""
    t = _float_t(x._t)
    dim = _softmax_dim(x, dim)
    if t.ndim == 0:
        if dim not in (0, -1):
            raise IndexError(f"Dimension out of range (expected to be in range of [-1, 0], "
                             f"but got {dim})")
        return _w(_ops.reshape(op(_ops.reshape(t, [1]), 0), []))
    return _w(op(t, dim))


def softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return _over_dim(_ops.softmax, x, dim)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = input if dtype is None else input.to(dtype)
    return _over_dim(_ops.log_softmax, x, dim)


def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(-input, dim, dtype=dtype)


def glu(input, dim=-1):
    a, b = _T["chunk"](input, 2, dim)
    return a * _T["sigmoid"](b)


# ------------------------------------------------------------------ losses
def _reduce(x, reduction):
    if reduction == "mean":
        return _T["mean"](x)
    if reduction == "sum":
        return _T["sum"](x)
    if reduction == "none":
        return x
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _legacy(size_average, reduce, reduction):
    if size_average is None and reduce is None:
        return reduction
    if reduce is False:
        return "none"
    return "sum" if size_average is False else "mean"


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    reduction = _legacy(size_average, reduce, reduction)
    if weight is not None or target.dtype.is_floating_point or input.ndim > 2:
        logp = log_softmax(input, 1)
        if target.dtype.is_floating_point:
            loss = -_T["sum"](logp * target if weight is None else
                              logp * target * weight.reshape(-1, *[1] * (input.ndim - 2)), 1)
            if label_smoothing:
                raise NotImplementedError("label_smoothing with probability targets")
            return _reduce(loss, reduction)
        return nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction) \
            if not label_smoothing else _smoothed(logp, target, weight, ignore_index, reduction,
                                                  label_smoothing)
    return _w(_F.cross_entropy(input._t, _cast(target._t, D.DTYPES["int64"]), ignore_index,
                               reduction, label_smoothing))


def _smoothed(logp, target, weight, ignore_index, reduction, eps):
    """torch's label smoothing: (1 - eps) * nll + eps / C * sum_c w_c *
    (-log p_c), the class weights inside the smoothing term too, and the
    mean over the weights of the kept targets (as nll_loss's)."""
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    c = logp.shape[1]
    wl = logp if weight is None else logp * weight.to(logp.dtype).reshape(
        -1, *[1] * (logp.ndim - 2))
    smooth = -_T["sum"](wl, 1) / c
    valid_b = target != ignore_index
    valid = valid_b.to(logp.dtype)
    smooth = smooth * valid
    if reduction == "mean":
        if weight is None:
            denom = _T["sum"](valid)
        else:
            safe = _T["where"](valid_b, target.long(), 0)
            # (safe is in [0, C): nll_loss above checked the targets and weight)
            denom = _T["sum"](_index_select_in_range(weight.to(logp.dtype), 0, safe.reshape(-1))
                              * valid.reshape(-1))
        smooth = _T["sum"](smooth) / denom
    elif reduction == "sum":
        smooth = _T["sum"](smooth)
    return nll * (1 - eps) + smooth * eps


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if weight is None and input.ndim <= 2:
        return _w(_F.nll_loss(input._t, _cast(target._t, D.DTYPES["int64"]), ignore_index,
                              reduction))
    x = input
    if x.ndim > 2:  # (N, C, d1, ...) -> (N * d1 * ..., C)
        x = _T["movedim"](x, 1, -1).reshape(-1, x.shape[1])
        target = target.reshape(-1)
    if weight is not None and tuple(weight.shape) != (x.shape[1],):
        raise RuntimeError(f"weight tensor should be defined either for all {x.shape[1]} "
                           f"classes or no classes but got weight tensor of shape: "
                           f"{list(weight.shape)}")
    t = target.long()
    valid = (t != ignore_index)
    safe = _T["where"](valid, t, 0)
    picked = -_T["gather"](x, 1, safe.unsqueeze(1)).squeeze(1)
    w = valid.to(x.dtype)
    if weight is not None:
        # gather checked safe against the C classes, the weight's length
        w = w * _index_select_in_range(weight, 0, safe)
    loss = picked * w
    if reduction == "none":
        return loss.reshape(input.shape[:1] + input.shape[2:]) if input.ndim > 2 else loss
    if reduction == "sum":
        return _T["sum"](loss)
    return _T["sum"](loss) / _T["sum"](w)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        input, target = _T["broadcast_tensors"](input, target)
    return _w(_F.mse_loss(input._t, target._t, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    return _w(_F.l1_loss(input._t, target._t, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _legacy(size_average, reduce, reduction)
    return _w(_F.smooth_l1_loss(input._t, target._t, reduction, beta))


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    return smooth_l1_loss(input, target, reduction=reduction, beta=delta) * delta


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    reduction = _legacy(size_average, reduce, reduction)
    if weight is not None:
        loss = _w(_F.binary_cross_entropy_with_logits(input._t, target._t, "none",
                                                      _o(pos_weight)))
        return _reduce(loss * weight, reduction)
    return _w(_F.binary_cross_entropy_with_logits(input._t, target._t, reduction,
                                                  _o(pos_weight)))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    logx = _T["clamp"](_T["log"](input), min=-100.0)
    log1mx = _T["clamp"](_T["log"](1 - input), min=-100.0)
    loss = -(target * logx + (1 - target) * log1mx)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def kl_div(input, target, size_average=None, reduce=None, reduction="mean", log_target=False):
    reduction = _legacy(size_average, reduce, reduction)
    if log_target:
        loss = _T["exp"](target) * (target - input)
    else:
        loss = _T["where"](target > 0, target * (_T["log"](_T["clamp"](target, min=1e-38)) - input),
                           0.0)
    if reduction == "batchmean":
        return _T["sum"](loss) / input.shape[0]
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    loss = _T["exp"](input) - target * input if log_input else input - target * _T["log"](
        input + eps)
    return _reduce(loss, _legacy(size_average, reduce, reduction))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    num = _T["sum"](x1 * x2, dim)
    den = _T["clamp"](_T["norm"](x1, 2, dim) * _T["norm"](x2, 2, dim), min=eps)
    return num / den


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return _T["norm"](x1 - x2 + eps, p, -1, keepdim)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction="mean"):
    cos = cosine_similarity(input1, input2, 1)
    loss = _T["where"](target > 0, 1 - cos, _T["clamp"](cos - margin, min=0.0))
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction="mean"):
    return _reduce(_T["clamp"](-target * (input1 - input2) + margin, min=0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        reduction="mean"):
    dp = pairwise_distance(anchor, positive, p, eps)
    dn = pairwise_distance(anchor, negative, p, eps)
    return _reduce(_T["clamp"](dp - dn + margin, min=0.0), reduction)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(q k^T * scale + mask) v: the native ScaledDotProductAttention
    (float32/float64, differentiable); with ``dropout_p > 0`` composed of
    ops (the native op has no dropout)."""
    if is_causal and attn_mask is not None:
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    dts = {query.dtype, key.dtype, value.dtype}
    if not dropout_p and len(dts) == 1 and query.dtype.name in ("float32", "float64") \
            and (attn_mask is None or attn_mask.dtype.name in ("bool", query.dtype.name)):
        m = attn_mask._t if attn_mask is not None else None
        return _w(_ops.scaled_dot_product_attention(
            query._t, key._t, value._t, m, is_causal=bool(is_causal),
            scale=None if scale is None else float(scale), enable_gqa=bool(enable_gqa)))
    if enable_gqa:
        raise NotImplementedError("scaled_dot_product_attention(enable_gqa=True) needs "
                                  "float32/float64 inputs of one dtype and dropout_p=0")
    s = (1.0 / math.sqrt(query.shape[-1])) if scale is None else scale
    scores = _T["matmul"](query, key.transpose(-2, -1)) * s
    L, S = query.shape[-2], key.shape[-2]
    if is_causal:
        from .._creation import _from_numpy_owned
        causal = _from_numpy_owned(np.tril(np.ones((L, S), bool)))
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype.name == "bool":
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    attn = softmax(scores, -1)
    if dropout_p:
        attn = dropout(attn, dropout_p, True)
    return _T["matmul"](attn, value)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.nn.functional.{name} is not supported by "
                              "dragon_core.vm.torch; compose it from torch functions or call "
                              "dragon_core.nn.functional on tensor.dragon()")
