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


def _inplace_if(input, out, inplace):
    """torch's ``inplace=True``: ``input`` takes the result (views of it see
    it) and is returned; otherwise the new tensor."""
    return _inplace(input, out) if inplace else out


def _batched(fn, input, nd, *args, **kwargs):
    """``fn`` (written for ``[N, C, *spatial]`` with ``nd`` spatial axes) on
    an unbatched ``[C, *spatial]`` input too, as torch's layers allow."""
    if input.ndim == nd + 1:
        out = fn(input.unsqueeze(0), *args, **kwargs)
        if isinstance(out, tuple):
            return tuple(o.squeeze(0) for o in out)
        return out.squeeze(0)
    return fn(input, *args, **kwargs)


def _ntuple(v, n, name, op):
    """An int or a sequence of ``n`` ints (one int: every axis) as a list."""
    v = list(v) if isinstance(v, (tuple, list)) else [v] * n
    if len(v) == 1:
        v = v * n
    if len(v) != n or not all(isinstance(x, (int, np.integer)) for x in v):
        raise ValueError(f"{op}: {name} must be an int or {n} ints, got {v}")
    return [int(x) for x in v]


def _no_strided_same(stride, nd, op):
    if any(s != 1 for s in _ntuple(stride, nd, "stride", op)):
        raise ValueError(f"{op}: padding='same' is not supported for strided convolutions "
                         f"(stride {stride})")


def linear(input, weight, bias=None):
    return _w(_F.linear(input._t, weight._t, _o(bias)))


def bilinear(input1, input2, weight, bias=None):
    out = _T["einsum"]("bi,oij,bj->bo", input1, weight, input2)
    return out if bias is None else out + bias


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    if input.ndim == 3:
        return _batched(conv2d, input, 2, weight, bias, stride, padding, dilation, groups)
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            _no_strided_same(stride, 2, "conv2d")
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
    if input.ndim == 4:
        return _batched(conv3d, input, 3, weight, bias, stride, padding, dilation, groups)
    if input.ndim != 5 or weight.ndim != 5:
        raise RuntimeError(f"conv3d: expected a 5-D input and weight (N, C, D, H, W), got "
                           f"input {tuple(input.shape)} and weight {tuple(weight.shape)}")
    d = _triple(dilation, "dilation")
    if isinstance(padding, str):
        if padding == "valid":
            padding = 0
        elif padding == "same":
            _no_strided_same(stride, 3, "conv3d")
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
    if input.ndim == 4:
        return _batched(conv_transpose3d, input, 3, weight, bias, stride, padding,
                        output_padding, groups, dilation)
    args = (input._t, weight._t) + ((bias._t,) if bias is not None else ())
    return _w(_ops.conv_transpose3d(*args, strides=_triple(stride, "stride"),
                                    pads=_triple(padding, "padding"),
                                    dilations=_triple(dilation, "dilation"), groups=int(groups),
                                    output_padding=_triple(output_padding, "output_padding")))


def _stride(stride, kernel_size):
    return kernel_size if stride is None or stride == [] or stride == () else stride


def _window_counts(input, out, k, s, p):
    """How many input (not padding) cells each pooling window of ``out``
    covers: a constant of ``out``'s shape (the spatial axes are the last
    ``len(k)``)."""
    from .._creation import _from_numpy_owned
    nd = len(k)
    counts = np.ones((), np.float64)
    for L, n, kk, ss, pp in zip(input.shape[-nd:], out.shape[-nd:], k, s, p):
        start = np.arange(n) * ss - pp
        c = np.minimum(start + kk, L) - np.maximum(start, 0)
        counts = np.multiply.outer(counts, c)
    return _from_numpy_owned(counts.astype(input.dtype.name if input.dtype.name in (
        "float32", "float64") else "float32")).to(input.device).to(input.dtype)


def _divisor_override(pool, input, nd, k, s, p, ceil_mode, divisor):
    """avg pooling with torch's ``divisor_override``: the window sums (the
    mean over the input cells times their count) divided by ``divisor``."""
    if int(divisor) == 0:
        raise RuntimeError("divisor must be not zero")
    avg = pool(input, k, s, p, ceil_mode, False)
    return avg * _window_counts(input, avg, k, s, p) / float(divisor)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``torch.nn.functional.max_pool3d``: the native MaxPool3d (its indices
    are torch's ``return_indices``, flat inside each (n, c) volume)."""
    if input.ndim == 4:
        return _batched(max_pool3d, input, 3, kernel_size, stride, padding, dilation,
                        ceil_mode, return_indices)
    k = _triple(kernel_size, "kernel_size")
    s = _triple(_stride(stride, kernel_size), "stride")
    p, d = _triple(padding, "padding"), _triple(dilation, "dilation")
    if input.ndim == 5:
        _check_windows("max_pool3d", input, k, s, p, d, ceil_mode)
    y, idx = _ops.max_pool3d(input._t, kernel_size=k, strides=s, pads=p, dilations=d,
                             ceil_mode=bool(ceil_mode))
    return (_w(y), _w(idx)) if return_indices else _w(y)


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    """``torch.nn.functional.avg_pool3d``: the native AvgPool3d."""
    if input.ndim == 4:
        return _batched(avg_pool3d, input, 3, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override)
    k = _triple(kernel_size, "kernel_size")
    s = _triple(_stride(stride, kernel_size), "stride")
    p = _triple(padding, "padding")
    if input.ndim == 5 and any(L < kk for L, kk in zip(input.shape[2:], k)):
        raise RuntimeError(f"avg_pool3d: input image (T: {input.shape[2]} H: {input.shape[3]} "
                           f"W: {input.shape[4]}) smaller than kernel size (kT: {k[0]} kH: "
                           f"{k[1]} kW: {k[2]})")
    if input.ndim == 5:
        _check_windows("avg_pool3d", input, k, s, p, [1, 1, 1], ceil_mode)
    if divisor_override is not None:
        return _divisor_override(avg_pool3d, input, 3, k, s, p, ceil_mode, divisor_override)
    return _w(_ops.avg_pool3d(input._t, kernel_size=k, strides=s, pads=p,
                              ceil_mode=bool(ceil_mode),
                              count_include_pad=bool(count_include_pad)))


def _single(v, name, op):
    return _ntuple(v, 1, name, op)[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """``torch.nn.functional.conv1d``: conv2d over a height of 1."""
    s, dl = _single(stride, "stride", "conv1d"), _single(dilation, "dilation", "conv1d")
    p = padding if isinstance(padding, str) else (0, _single(padding, "padding", "conv1d"))
    out = conv2d(input.unsqueeze(-2), weight.unsqueeze(2), bias, (1, s), p, (1, dl), groups)
    return out.squeeze(-2)


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    if input.ndim == 3:
        return _batched(conv_transpose2d, input, 2, weight, bias, stride, padding,
                        output_padding, groups, dilation)
    if isinstance(padding, str):
        raise ValueError("conv_transpose2d: padding must be ints, not a string")
    return _w(_F.conv_transpose2d(input._t, weight._t, _o(bias), stride, padding,
                                  output_padding, groups, dilation))


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1):
    """``torch.nn.functional.conv_transpose1d``: conv_transpose2d over a
    height of 1."""
    op = "conv_transpose1d"
    out = conv_transpose2d(input.unsqueeze(-2), weight.unsqueeze(2), bias,
                           (1, _single(stride, "stride", op)),
                           (0, _single(padding, "padding", op)),
                           (0, _single(output_padding, "output_padding", op)), groups,
                           (1, _single(dilation, "dilation", op)))
    return out.squeeze(-2)


def _check_windows(op, input, k, s, p, d, ceil_mode):
    """Refuses the pooling geometries torch computes but our kernels do not:
    a ``ceil_mode`` window longer than the padded input (torch clips it)
    and a window that covers only padding (torch gives -inf there). Checked
    before the kernels, which would refuse the first with an internal
    message and compute 0 for the second (3-D)."""
    nd = len(k)
    for ax, (L, kk, ss, pp, dd) in enumerate(zip(input.shape[-nd:], k, s, p, d)):
        span = dd * (kk - 1) + 1
        room = L + 2 * pp
        if pp > span // 2:
            raise RuntimeError(f"{op}: pad should be at most half of effective kernel size, "
                               f"but got pad={pp}, kernel_size={kk} and dilation={dd} "
                               f"(input {tuple(input.shape)} {input.dtype.name})")
        if pp > kk // 2:   # torch checks the dilated span first, then the kernel
            raise RuntimeError(f"{op}: pad should be at most half of kernel size, "
                               f"but got pad={pp} and kernel_size={kk} "
                               f"(input {tuple(input.shape)} {input.dtype.name})")
        if span > room:
            if not ceil_mode:
                return   # torch raises too: the kernel's error stands
            raise NotImplementedError(
                f"{op}: with ceil_mode=True a window of {span} cells (kernel_size {list(k)}, "
                f"dilation {list(d)}) is longer than the padded input along spatial axis "
                f"{ax} ({L} + 2 * {pp}) of input {tuple(input.shape)} {input.dtype.name}; "
                "torch clips that window, vm.torch does not support it")
        steps = room - span
        n = (-(-steps // ss) if ceil_mode else steps // ss) + 1
        if ceil_mode and (n - 1) * ss >= L + pp:
            n -= 1
        if dd == 1:
            continue   # a window of adjacent cells starting at >= -k/2 touches the input
        for o in range(n):
            start = o * ss - pp
            if not any(0 <= start + j * dd < L for j in range(kk)):
                raise NotImplementedError(
                    f"{op}: window {o} along spatial axis {ax} covers only padding (input "
                    f"{tuple(input.shape)} {input.dtype.name}, kernel_size {list(k)}, stride "
                    f"{list(s)}, padding {list(p)}, dilation {list(d)}); torch gives -inf "
                    "there, vm.torch does not support it")


def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    """``torch.nn.functional.max_pool2d``; ``return_indices`` gives torch's
    indices (``h * W + w`` inside each (n, c) plane)."""
    if input.ndim == 3:
        return _batched(max_pool2d, input, 2, kernel_size, stride, padding, dilation,
                        ceil_mode, return_indices)
    op = "max_pool2d"
    k = _ntuple(kernel_size, 2, "kernel_size", op)
    s = _ntuple(_stride(stride, kernel_size), 2, "stride", op)
    p = _ntuple(padding, 2, "padding", op)
    d = _ntuple(dilation, 2, "dilation", op)
    if input.ndim == 4:
        _check_windows(op, input, k, s, p, d, ceil_mode)
    y = _w(_F.max_pool2d(input._t, k, s, p, d, ceil_mode))
    if not return_indices:
        return y
    idx = _ops.max_pool2d_indices(input._t, kernel_size=k, strides=s, pads=p, dilations=d,
                                  ceil_mode=bool(ceil_mode))
    return y, _w(idx)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    op = "max_pool1d"
    k = _single(kernel_size, "kernel_size", op)
    s = _single(_stride(stride, kernel_size), "stride", op)
    out = max_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _single(padding, "padding", op)),
                     (1, _single(dilation, "dilation", op)), ceil_mode, return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    if input.ndim == 3:
        return _batched(avg_pool2d, input, 2, kernel_size, stride, padding, ceil_mode,
                        count_include_pad, divisor_override)
    op = "avg_pool2d"
    k = _ntuple(kernel_size, 2, "kernel_size", op)
    s = _ntuple(_stride(stride, kernel_size), 2, "stride", op)
    p = _ntuple(padding, 2, "padding", op)
    if input.ndim == 4:
        _check_windows(op, input, k, s, p, [1, 1], ceil_mode)
    if divisor_override is not None:
        return _divisor_override(avg_pool2d, input, 2, k, s, p, ceil_mode, divisor_override)
    return _w(_F.avg_pool2d(input._t, k, s, p, ceil_mode, count_include_pad))


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    op = "avg_pool1d"
    k = _single(kernel_size, "kernel_size", op)
    s = _single(_stride(stride, kernel_size), "stride", op)
    return avg_pool2d(input.unsqueeze(-2), (1, k), (1, s), (0, _single(padding, "padding", op)),
                      ceil_mode, count_include_pad).squeeze(-2)


def adaptive_avg_pool2d(input, output_size):
    if input.ndim == 3:
        return _batched(adaptive_avg_pool2d, input, 2, output_size)
    return _w(_F.adaptive_avg_pool2d(input._t, output_size))


def adaptive_avg_pool1d(input, output_size):
    return adaptive_avg_pool2d(input.unsqueeze(-2),
                               (1, _single(output_size, "output_size", "adaptive_avg_pool1d"))
                               ).squeeze(-2)


def adaptive_max_pool2d(input, output_size, return_indices=False):
    """Adaptive max pooling where the input size is a multiple of the output
    size (then one max_pool2d); other sizes raise."""
    h, w = input.shape[-2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    if not h % oh and not w % ow:
        return max_pool2d(input, (h // oh, w // ow), return_indices=return_indices)
    # windows of unequal sizes (torch's: [floor(i H / oh), ceil((i + 1) H / oh))):
    # one max_pool2d per window, so ties and gradients pick as max_pool2d does
    # (the first maximum in row-major order, as torch's kernel)
    def bounds(n, o):
        return [((i * n) // o, -((-(i + 1) * n) // o)) for i in range(o)]
    rows, irows = [], []
    for h0, h1 in bounds(h, oh):
        cols, icols = [], []
        for w0, w1 in bounds(w, ow):
            win = input[..., h0:h1, w0:w1]
            if return_indices:
                v, i = max_pool2d(win, (h1 - h0, w1 - w0), return_indices=True)
                i = (i // (w1 - w0) + h0) * w + i % (w1 - w0) + w0
                icols.append(i.reshape(i.shape[:-2]))
            else:
                v = max_pool2d(win, (h1 - h0, w1 - w0))
            cols.append(v.reshape(v.shape[:-2]))
        rows.append(_T["stack"](cols, -1))
        if return_indices:
            irows.append(_T["stack"](icols, -1))
    out = _T["stack"](rows, -2)
    return (out, _T["stack"](irows, -2)) if return_indices else out


def adaptive_max_pool1d(input, output_size, return_indices=False):
    out = adaptive_max_pool2d(input.unsqueeze(-2), (1, _single(
        output_size, "output_size", "adaptive_max_pool1d")), return_indices)
    if return_indices:
        return out[0].squeeze(-2), out[1].squeeze(-2)
    return out.squeeze(-2)


def _check_batch_values(input, op):
    """torch's check: batch statistics need more than one value per channel."""
    if input.ndim >= 2 and math.prod(input.shape) // max(input.shape[1], 1) == 1:
        raise ValueError(f"{op}: Expected more than 1 value per channel when training, got "
                         f"input size {list(input.shape)}")


def _lp_pool(nd, input, norm_type, kernel_size, stride, ceil_mode):
    """torch's lp_pool: ``(k * mean(x^p))^(1/p)`` over each window (the
    mean of avg_pool, so a partial ceil_mode window counts as torch's
    does); ``p = inf`` is the max of ``|x|``."""
    maxp, avgp = {1: (max_pool1d, avg_pool1d), 2: (max_pool2d, avg_pool2d),
                  3: (max_pool3d, avg_pool3d)}[nd]
    norm_type = float(norm_type)
    if norm_type == math.inf:
        return maxp(_T["abs"](input), kernel_size, stride, 0, 1, ceil_mode)
    if norm_type == -math.inf:
        return -maxp(-_T["abs"](input), kernel_size, stride, 0, 1, ceil_mode)
    k = math.prod(_ntuple(kernel_size, nd, "kernel_size", f"lp_pool{nd}d"))
    out = avgp(input ** norm_type, kernel_size, stride, 0, ceil_mode)
    return (_T["sign"](out) * relu(_T["abs"](out)) * k) ** (1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(2, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(3, input, norm_type, kernel_size, stride, ceil_mode)


def pixel_shuffle(input, upscale_factor):
    """``[*, C r^2, H, W]`` -> ``[*, C, H r, W r]``."""
    r = int(upscale_factor)
    *lead, c, h, w = input.shape
    if input.ndim < 3 or c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)="
                           f"{c if input.ndim >= 3 else None} is not divisible by {r * r}")
    n = len(lead)
    x = input.reshape(*lead, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*lead, c // (r * r), h * r, w * r)


def pixel_unshuffle(input, downscale_factor):
    """``[*, C, H r, W r]`` -> ``[*, C r^2, H, W]``."""
    r = int(downscale_factor)
    *lead, c, h, w = input.shape
    if input.ndim < 3 or h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width divisible by "
                           f"downscale_factor {r}, got input of shape {tuple(input.shape)}")
    n = len(lead)
    x = input.reshape(*lead, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*lead, c * r * r, h // r, w // r)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    if training:
        _check_batch_values(input, "batch_norm")
    return _w(_F.batch_norm(input._t, _o(running_mean), _o(running_var), _o(weight), _o(bias),
                            training, momentum, eps))


def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    return _w(_F.layer_norm(input._t, normalized_shape, _o(weight), _o(bias), eps))


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    return _w(_F.group_norm(input._t, num_groups, _o(weight), _o(bias), eps))


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """torch's instance_norm: each (n, c) slice normalised by its own
    statistics (``use_input_stats``), which also move the running statistics
    when given (their mean over the batch, the variance unbiased), or by the
    running statistics (``use_input_stats=False``)."""
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("instance_norm: use_input_stats=False needs running_mean and "
                             "running_var")
        return batch_norm(input, running_mean, running_var, weight, bias, False, 0.0, eps)
    if input.ndim < 3:
        raise ValueError(f"instance_norm: expected input [N, C, *] with spatial axes, got "
                         f"shape {tuple(input.shape)}")
    n_sp = math.prod(input.shape[2:])
    if n_sp <= 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input size "
                         f"{list(input.shape)}")
    out = group_norm(input, input.shape[1], weight, bias, eps)
    if running_mean is not None and running_var is not None and input.shape[0] > 0:
        from ..autograd import no_grad
        with no_grad():
            axes = tuple(range(2, input.ndim))
            x = input.detach().to(running_mean.dtype)
            m = _T["mean"](x, axes, True)
            v = _T["sum"]((x - m) ** 2, axes) / (n_sp - 1)
            m = m.reshape(m.shape[:2])
            mom = float(momentum)
            running_mean._t.assign(((1 - mom) * running_mean + mom * _T["mean"](m, 0))._t)
            running_var._t.assign(((1 - mom) * running_var + mom * _T["mean"](v, 0))._t)
    return out


def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    if out is not None:
        raise NotImplementedError("normalize(out=...) is not supported")
    if abs(float(p)) == math.inf and input.ndim and input.shape[dim] == 0:
        raise RuntimeError(f"normalize: the inf norm of dimension {dim} of input "
                           f"{tuple(input.shape)} ({input.dtype.name}) is undefined: the "
                           "dimension is empty (torch's linalg.vector_norm raises too)")
    n = _T["norm"](input, p, dim, True)
    return input / _T["clamp"](n, min=eps)


def _check_p(p):
    if p < 0 or p > 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def dropout(input, p=0.5, training=True, inplace=False):
    _check_p(p)
    if not training or p == 0:
        return input
    return _inplace_if(input, _w(_F.dropout(input._t, p, training)), inplace)


def _channel_dropout(input, p, training, inplace, lead):
    """Whole channels zeroed with probability ``p`` (the rest scaled by
    ``1 / (1 - p)``): one draw per index of the ``lead`` leading axes."""
    _check_p(p)
    if not training or p == 0:
        return input
    from .._creation import rand
    shape = tuple(input.shape[:lead]) + (1,) * (input.ndim - lead)
    keep = (rand(*shape) >= p).to(input.dtype)
    out = input * keep / (1 - p) if p < 1 else input * keep
    return _inplace_if(input, out, inplace)


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Channel dropout of ``[N, C, L]`` or unbatched ``[C, L]`` input."""
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a "
                           f"{input.ndim}D input")
    return _channel_dropout(input, p, training, inplace, input.ndim - 1)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Channel dropout over the two leading axes (torch reads a 3-D input
    as ``[N, C, L]``, not as an unbatched ``[C, H, W]``)."""
    return _channel_dropout(input, p, training, inplace, min(2, input.ndim))


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Channel dropout of ``[N, C, D, H, W]`` or unbatched ``[C, D, H, W]``."""
    return _channel_dropout(input, p, training, inplace, 1 if input.ndim == 4 else
                            min(2, input.ndim))


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    _check_p(p)
    if not training or p == 0:
        return input
    raise NotImplementedError("alpha_dropout in training mode is not supported (it would "
                              "need SELU's affine correction); use eval() or dropout")


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """Rows of ``weight``; ``scale_grad_by_freq`` divides each looked-up
    row's gradient by how often its index occurs in ``input`` (the forward
    values are unchanged); ``max_norm`` first scales, in place and without
    recording, each looked-up row of ``weight`` whose ``norm_type`` norm is
    above ``max_norm`` down to it (torch's embedding_renorm_)."""
    if sparse:
        raise NotImplementedError("embedding(sparse=True) is not supported (sparse gradients)")
    if input.dtype.is_floating_point or input.dtype.name == "bool":
        raise RuntimeError(f"embedding: the indices must be an integer tensor (int64 or "
                           f"int32), got {input.dtype.name}")
    if max_norm is not None:
        _renorm_rows(input, weight, float(max_norm), float(norm_type))
    out = _w(_F.embedding(_cast(input._t, D.DTYPES["int64"]), weight._t, padding_idx))
    if scale_grad_by_freq and out.requires_grad:
        from .._creation import _from_numpy_owned
        idx = np.asarray(input.detach().cpu().numpy(), np.int64)
        _, inv, counts = np.unique(idx.reshape(-1), return_inverse=True, return_counts=True)
        scale = (1.0 / counts[inv]).reshape(idx.shape + (1,))
        s = _from_numpy_owned(scale.astype(np.float64)).to(out.device).to(out.dtype)
        fixed = out.detach()
        out = fixed + (out - fixed) * s   # the values of out; the gradient scaled by s
    return out


def _renorm_rows(input, weight, max_norm, norm_type):
    from ..autograd import no_grad
    from .._creation import _from_numpy_owned
    rows = np.unique(np.asarray(input.detach().cpu().numpy(), np.int64).reshape(-1))
    rows = rows[(rows >= 0) & (rows < weight.shape[0])]  # (the lookup checks the others)
    if rows.size == 0:
        return
    idx = _from_numpy_owned(rows).to(weight.device)
    with no_grad():
        sel = _T["index_select"](weight, 0, idx)
        norms = _T["norm"](sel, norm_type, 1, True)
        scale = _T["where"](norms > max_norm, max_norm / (norms + 1e-7), 1.0)
        weight[idx] = sel * scale.to(sel.dtype)


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
    if mode == "replicate" or (mode == "reflect" and len(pad) <= 4):
        # on torch's CPU autocast float32 list (reflection_pad1d/2d,
        # replication_pad1d/2d/3d)
        (input,) = _autocast_float32(input)
    begins, ends = [0] * n, [0] * n
    for i in range(len(pad) // 2):
        begins[n - 1 - i] = pad[2 * i]
        ends[n - 1 - i] = pad[2 * i + 1]
    full = tuple(input.shape)
    for ax, (b, e, size) in enumerate(zip(begins, ends, full)):
        if size + min(b, 0) + min(e, 0) < 0:
            raise RuntimeError(f"pad: padding {tuple(pad)} crops dimension {ax} of input "
                               f"{full} ({input.dtype.name}) below size 0 ({size} {b:+d} "
                               f"{e:+d})")
    if mode in ("reflect", "replicate"):
        lead = n - len(pad) // 2   # 1: unbatched, 2: batched ([N, C, *spatial])
        if lead not in (1, 2) or any(v == 0 for v in full[1 if lead == 2 else 0:]):
            raise RuntimeError(f"pad(mode={mode!r}): expected a {len(pad) // 2 + 1}-D or "
                               f"{len(pad) // 2 + 2}-D (batch mode) input with possibly 0 "
                               f"batch size and other non-zero dimensions, got {full} "
                               f"({input.dtype.name}) for padding {tuple(pad)}")
    if mode in ("reflect", "replicate") and any(b < 0 or e < 0 for b, e in zip(begins, ends)):
        # torch pads the whole input, then crops: a reflection reads the
        # cells a negative pad on the other side removes
        out = _w(_ops.pad(input._t, tuple((max(b, 0), max(e, 0)) for b, e in zip(begins, ends)),
                          {"replicate": "edge"}.get(mode, mode), 0.0))
        key = tuple(slice(max(-b, 0), s + max(b, 0) + max(e, 0) - max(-e, 0))
                    for b, e, s in zip(begins, ends, input.shape))
        return out[key]
    if any(b < 0 or e < 0 for b, e in zip(begins, ends)):
        key = tuple(slice(max(-b, 0), s - max(-e, 0)) for b, e, s in zip(begins, ends,
                                                                        input.shape))
        input = input[key]
        begins, ends = [max(b, 0) for b in begins], [max(e, 0) for e in ends]
    if mode == "circular":
        for ax, (b, e) in enumerate(zip(begins, ends)):
            if b == 0 and e == 0:
                continue
            size = input.shape[ax]
            if (b > size or e > size) and size < full[ax]:
                raise NotImplementedError(
                    f"pad(mode='circular'): padding ({b}, {e}) of dimension {ax} wraps more "
                    f"than once around what its negative padding leaves ({size} of "
                    f"{full[ax]}); this is not supported")
            if b > size or e > size:
                raise ValueError(f"Padding value causes wrapping around more than once: pad "
                                 f"({b}, {e}) on dimension {ax} of size {size}")
            parts = ([_T["narrow"](input, ax, size - b, b)] if b else []) + [input] + (
                [_T["narrow"](input, ax, 0, e)] if e else [])
            input = _T["cat"](parts, ax)
        return input
    if mode not in ("constant", "reflect", "replicate"):
        raise NotImplementedError(f"pad(mode={mode!r}) is not supported")
    mode = {"replicate": "edge"}.get(mode, mode)
    pads = tuple(zip(begins, ends))
    return _w(_ops.pad(input._t, pads, mode, 0.0 if value is None else float(value)))


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """torch's interpolate; ``recompute_scale_factor=True`` turns the scale
    factors into the output size (``floor(in * scale)``) and interpolates to
    that size, as torch does; ``mode="area"`` is adaptive average pooling
    to the output size."""
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported")
    nd = input.ndim - 2
    if nd < 1:
        raise ValueError(f"interpolate: expected input [N, C, *spatial], got shape "
                         f"{tuple(input.shape)}")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None and recompute_scale_factor:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if isinstance(size, int):
        size = [size] * nd
    if isinstance(scale_factor, (int, float)):
        scale_factor = [float(scale_factor)] * nd
    if mode in ("nearest", "area", "nearest-exact") and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    if scale_factor is not None and (recompute_scale_factor or mode == "area"):
        size = [int(math.floor(float(n) * float(f)))
                for n, f in zip(input.shape[2:], scale_factor)]
        scale_factor = None
    if mode == "area":
        if nd == 1:
            return adaptive_avg_pool1d(input, size[0])
        if nd == 2:
            return adaptive_avg_pool2d(input, size)
        raise NotImplementedError("interpolate(mode='area') of a 3-D input is not supported")
    if input.dtype.name in ("float16", "bfloat16"):
        # computed in float32 (torch's CPU kernels accumulate in float32 too)
        return interpolate(input.float(), size, scale_factor, mode, align_corners).to(
            input.dtype)
    return _w(_ops.interpolate(input._t, None if size is None else list(size),
                               None if scale_factor is None else list(scale_factor), mode,
                               align_corners))


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """``torch.nn.functional.grid_sample`` over the GridSample op
    (dragon-vision-ops): 4-D and 5-D inputs, modes bilinear/nearest/bicubic,
    padding zeros/border/reflection; ``align_corners=None`` is False, as
    torch's default."""
    if input.ndim not in (4, 5) or grid.ndim != input.ndim or input.shape[0] != grid.shape[0]:
        raise RuntimeError(f"grid_sample: expected a 4-D or 5-D input and a grid of the same "
                           f"rank and batch, got input {tuple(input.shape)} "
                           f"{input.dtype.name} and grid {tuple(grid.shape)} {grid.dtype.name}")
    if input.dtype != grid.dtype:
        raise RuntimeError(f"grid_sample: expected grid to have the input's dtype "
                           f"{input.dtype.name}, got {grid.dtype.name}")
    return _w(_ops.grid_sample(input._t, grid._t, mode=mode, padding_mode=padding_mode,
                               align_corners=bool(align_corners)))


def affine_grid(theta, size, align_corners=None):
    """``torch.nn.functional.affine_grid``: the normalised base grid
    (``-1 .. 1`` over the cell centres, scaled by ``(n - 1) / n`` without
    ``align_corners``) times ``theta^T``; differentiable in ``theta``."""
    from .._creation import _from_numpy_owned
    size = [int(v) for v in size]
    nd = len(size) - 2
    if nd not in (2, 3) or tuple(theta.shape) != (size[0], nd, nd + 1) or \
            not theta.dtype.is_floating_point:
        raise ValueError(f"affine_grid: expected a floating theta of shape (N, {nd}, {nd + 1}) "
                         f"for size {size} (4-D or 5-D), got {tuple(theta.shape)} "
                         f"{theta.dtype.name}")
    if min(size[2:]) <= 0:
        raise ValueError(f"affine_grid: expected non-zero, positive output size, got {size}")

    def axis(n):
        v = np.linspace(-1.0, 1.0, n) if n > 1 else np.zeros(1)
        return v if align_corners else v * (n - 1) / n

    coords = list(np.meshgrid(*[axis(n) for n in size[2:]], indexing="ij"))   # (D,) H, W
    base = np.stack(coords[::-1] + [np.ones_like(coords[0])], -1)      # x, y(, z), 1
    flat = _from_numpy_owned(base.reshape(-1, nd + 1).astype(theta.dtype.name)).to(
        theta.device)
    out = _T["matmul"](flat, theta.transpose(1, 2))                      # N, cells, nd
    return out.reshape(size[0], *size[2:], nd)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    return interpolate(input, size, scale_factor, mode, align_corners)


# ------------------------------------------------------------- activations
# ``inplace=True`` writes the result into ``input`` (torch's in-place
# variants: a view of a larger tensor updates that tensor) and returns it.
def relu(input, inplace=False):
    return _inplace_if(input, _w(_ops.relu(input._t)), inplace)


def relu_(input):
    return relu(input, True)


def relu6(input, inplace=False):
    # torch's relu6 is hardtanh(x, 0, 6): the gradient is 0 at 0 and 6 and
    # passes at a NaN x (a Clip's gradient blocks NaN, as torch.clamp's)
    return hardtanh(input, 0.0, 6.0, inplace)


def leaky_relu(input, negative_slope=0.01, inplace=False):
    return _inplace_if(input, _w(_F.leaky_relu(input._t, negative_slope)), inplace)


def leaky_relu_(input, negative_slope=0.01):
    return leaky_relu(input, negative_slope, True)


def elu(input, alpha=1.0, inplace=False):
    return _inplace_if(input, _w(_F.elu(input._t, alpha)), inplace)


def elu_(input, alpha=1.0):
    return elu(input, alpha, True)


def selu(input, inplace=False):
    a, s = 1.6732632423543772, 1.0507009873554805
    return _inplace_if(input, elu(input, a) * s, inplace)


def celu(input, alpha=1.0, inplace=False):
    # (where, not max + clamp: at 0 the gradient is 1, as torch's, not 1.5)
    # x where x > 0 or NaN (gradient 1 there, as torch's celu); the negative
    # branch is Elu, whose gradient is finite at +inf and NaN, so the
    # masked-out branch adds 0 (expm1's e^x would add 0 * inf = NaN)
    out = _T["where"](input <= 0, _w(_ops.elu((input / alpha)._t, alpha=1.0)) * alpha,
                      input)
    return _inplace_if(input, out, inplace)


def gelu(input, approximate="none"):
    return _w(_F.gelu(input._t, approximate))


def silu(input, inplace=False):
    return _inplace_if(input, _w(_F.silu(input._t)), inplace)


def mish(input, inplace=False):
    return _inplace_if(input, input * _T["tanh"](softplus(input)), inplace)


def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    # (where, not clamp: at the bounds the gradient is 0, as torch's)
    out = _T["where"](input <= min_val, min_val, _T["where"](input >= max_val, max_val, input))
    return _inplace_if(input, out, inplace)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return hardtanh(input, min_val, max_val, True)


def hardsigmoid(input, inplace=False):
    # the gradient is 0 at -3 and 3 (torch's), 1/6 strictly between
    # a NaN x gives NaN with gradient 0, as torch's hardsigmoid_backward
    inside = (input > -3) & (input < 3)
    out = _T["where"](inside, input / 6 + 0.5, _T["where"](
        input <= -3, 0.0, _T["where"](input >= 3, 1.0, input.detach())))
    return _inplace_if(input, out, inplace)


def hardswish(input, inplace=False):
    # the gradient is 0 at -3 and 1 at 3 (torch's), (2x + 3) / 6 between
    # the middle branch reads 0 outside (-3, 3), so it stays finite at
    # +-inf and NaN and its masked-out gradient is 0; a NaN x takes the
    # x branch (gradient 1, as torch's hardswish_backward)
    inside = (input > -3) & (input < 3)
    xm = _T["where"](inside, input, 0.0)
    out = _T["where"](inside, xm * (xm + 3) / 6, _T["where"](input <= -3, 0.0, input))
    return _inplace_if(input, out, inplace)


def threshold(input, threshold, value, inplace=False):
    """``value`` where ``input <= threshold``, else ``input``."""
    # a NaN input stays NaN and passes its gradient, as torch's
    return _inplace_if(input, _T["where"](input <= threshold, value, input), inplace)


def threshold_(input, threshold, value):
    return globals()["threshold"](input, threshold, value, True)


def hardshrink(input, lambd=0.5):
    # a NaN input stays NaN and passes its gradient, as torch's
    return _T["where"](_T["abs"](input) <= lambd, 0.0, input)


def softshrink(input, lambd=0.5):
    # a NaN input stays NaN and passes its gradient, as torch's
    return _T["where"](_T["abs"](input) <= lambd, 0.0,
                       _T["where"](input > lambd, input - lambd, input + lambd))


def sigmoid(input):
    return _T["sigmoid"](input)


def tanh(input):
    return _T["tanh"](input)


def softplus(input, beta=1.0, threshold=20.0):
    return _w(_F.softplus(input._t, beta, threshold))


def softsign(input):
    return input / (1 + _T["abs"](input))


def logsigmoid(input):
    # 0 - softplus(-x): +0.0 at x = +inf, as torch's (a negation gives -0.0)
    return 0.0 - softplus(-input)


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


def local_response_norm(input, size, alpha=1e-4, beta=0.75, k=1.0):
    """torch's: ``x / (k + alpha / size * sum of x^2 over the ``size``
    channels around each one)^beta``, the window zero-padded (``size // 2``
    before, ``(size - 1) // 2`` after)."""
    if input.ndim < 3:
        raise ValueError(f"local_response_norm: expected 3D or higher dimensionality input "
                         f"(got {input.ndim} dimensions)")
    if input.numel() == 0:
        return input * 1
    sq = (input * input).unsqueeze(1)                    # N, 1, C, *spatial
    flat = sq.reshape(sq.shape[0], 1, sq.shape[2], -1)   # N, 1, C, S
    flat = pad(flat, (0, 0, size // 2, (size - 1) // 2))
    div = avg_pool2d(flat, (size, 1), stride=1).reshape(tuple(input.shape))
    return input / (div * alpha + k) ** beta


def glu(input, dim=-1):
    if input.ndim == 0 or input.shape[dim] % 2:
        raise RuntimeError(f"glu: halving dimension must be even, but dimension {dim} is size "
                           f"{input.shape[dim] if input.ndim else 0}")
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


def _kept_mean(loss, w):
    """``sum(loss) / sum(w)``, NaN when no weight is left (every target
    ignored), as torch's; the gradient is then 0 as torch's (the
    denominator is made safe, the NaN added as a constant)."""
    total = _T["sum"](w)
    empty = total == 0
    safe = _T["where"](empty, total + 1, total)
    nan = _T["where"](empty, total / total, total * 0).detach()
    return _T["sum"](loss) / safe + nan


def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    reduction = _legacy(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    if input.ndim == 1:   # unbatched: [C] with a 0-d class index or a [C] distribution
        if target.ndim != (1 if target.dtype.is_floating_point else 0):
            raise RuntimeError(f"cross_entropy: an unbatched input {tuple(input.shape)} takes a "
                               f"0-d class index or a {tuple(input.shape)} probability target, "
                               f"got {tuple(target.shape)} {target.dtype.name}")
        out = cross_entropy(input.unsqueeze(0), target.unsqueeze(0), weight,
                            ignore_index=ignore_index, reduction=reduction,
                            label_smoothing=label_smoothing)
        return out.squeeze(0) if reduction == "none" else out
    if weight is not None or target.dtype.is_floating_point or input.ndim > 2:
        logp = log_softmax(input, 1)
        if target.dtype.is_floating_point:
            if ignore_index >= 0:   # (torch accepts any negative ignore_index)
                raise RuntimeError("cross_entropy: ignore_index is not supported for floating "
                                   "point target")
            if tuple(target.shape) != tuple(input.shape):
                raise RuntimeError(f"cross_entropy: probability targets must have the input's "
                                   f"shape {tuple(input.shape)}, got {tuple(target.shape)}")
            if label_smoothing:
                target = target * (1 - label_smoothing) + label_smoothing / input.shape[1]
            loss = -_T["sum"](logp * target if weight is None else
                              logp * target * weight.reshape(-1, *[1] * (input.ndim - 2)), 1)
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
            kept = valid
        else:
            safe = _T["where"](valid_b, target.long(), 0)
            # (safe is in [0, C): nll_loss above checked the targets and weight)
            kept = _index_select_in_range(weight.to(logp.dtype), 0, safe.reshape(-1)) * \
                valid.reshape(-1)
        smooth = _kept_mean(smooth, kept)
    elif reduction == "sum":
        smooth = _T["sum"](smooth)
    return nll * (1 - eps) + smooth * eps


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if input.ndim == 1:   # unbatched: [C] log-probabilities, a 0-d class index
        if target.ndim != 0:
            raise RuntimeError(f"nll_loss: an unbatched input {tuple(input.shape)} takes a 0-d "
                               f"target, got {tuple(target.shape)}")
        out = nll_loss(input.unsqueeze(0), target.unsqueeze(0), weight,
                       ignore_index=ignore_index, reduction=reduction)
        return out.squeeze(0) if reduction == "none" else out
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
    return _kept_mean(loss, w)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):
        input, target = _T["broadcast_tensors"](input, target)
    return _w(_F.mse_loss(input._t, target._t, reduction))


def l1_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):   # torch warns and broadcasts
        input, target = _T["broadcast_tensors"](input, target)
    return _w(_F.l1_loss(input._t, target._t, reduction))


def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(input.shape) != tuple(target.shape):   # torch warns and broadcasts
        input, target = _T["broadcast_tensors"](input, target)
    return _w(_F.smooth_l1_loss(input._t, target._t, reduction, beta))


def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    return smooth_l1_loss(input, target, reduction=reduction, beta=delta) * delta


def binary_cross_entropy_with_logits(input, target, weight=None, size_average=None, reduce=None,
                                     reduction="mean", pos_weight=None):
    reduction = _legacy(size_average, reduce, reduction)
    if pos_weight is not None and (input.ndim == 0 or pos_weight.ndim != 1 or
                                   pos_weight.shape[0] not in (1, input.shape[-1])):
        # a pos_weight that broadcasts otherwise than along the last axis:
        # torch's formula, composed (the native op weighs the last axis only)
        lw = (pos_weight - 1) * target + 1
        loss = (1 - target) * input + lw * (_T["log1p"](_T["exp"](-_T["abs"](input))) +
                                            relu(-input))
        return _reduce(loss if weight is None else loss * weight, reduction)
    if weight is not None:
        loss = _w(_F.binary_cross_entropy_with_logits(input._t, target._t, "none",
                                                      _o(pos_weight)))
        return _reduce(loss * weight, reduction)
    return _w(_F.binary_cross_entropy_with_logits(input._t, target._t, reduction,
                                                  _o(pos_weight)))


def binary_cross_entropy(input, target, weight=None, size_average=None, reduce=None,
                         reduction="mean"):
    reduction = _legacy(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(f"binary_cross_entropy: using a target size ({tuple(target.shape)}) "
                         f"that is different to the input size ({tuple(input.shape)}) is not "
                         "supported")
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
    if reduction == "batchmean":   # (a 0-d input: the sum, as torch)
        return _T["sum"](loss) / (input.shape[0] if input.ndim else 1)
    return _reduce(loss, reduction)


def poisson_nll_loss(input, target, log_input=True, full=False, size_average=None, eps=1e-8,
                     reduce=None, reduction="mean"):
    """torch's Poisson NLL; ``full`` adds Stirling's approximation of
    ``log(target!)`` where ``target > 1``."""
    loss = _T["exp"](input) - target * input if log_input else input - target * _T["log"](
        input + eps)
    if full:
        big = target > 1
        t = _T["where"](big, target, 2.0)
        stirling = t * _T["log"](t) - t + 0.5 * _T["log"](2 * math.pi * t)
        loss = loss + _T["where"](big, stirling, 0.0)
    return _reduce(loss, _legacy(size_average, reduce, reduction))


def gaussian_nll_loss(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """torch's Gaussian NLL: ``0.5 * (log(var) + (input - target)^2 / var)``
    (+ ``0.5 * log(2 pi)`` when ``full``), ``var`` clamped to ``eps`` for the
    value only (the gradient passes as if unclamped, as torch's)."""
    if tuple(var.shape) != tuple(input.shape):
        if tuple(input.shape[:-1]) == tuple(var.shape):
            var = var.unsqueeze(-1)
        elif not (tuple(input.shape[:-1]) == tuple(var.shape[:-1]) and var.shape[-1] == 1):
            raise ValueError("var is of incorrect size")
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(reduction + " is not valid")
    if bool(_T["any"](var < 0)):
        raise ValueError("var has negative entry/entries")
    var = var + (_T["clamp"](var, min=eps) - var).detach()
    loss = 0.5 * (_T["log"](var) + (input - target) ** 2 / var)
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


def soft_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    loss = _T["log1p"](_T["exp"](-target * input))
    return _reduce(loss, _legacy(size_average, reduce, reduction))


def _autocast_float32(*tensors):
    """Inside an enabled autocast, 16-bit float tensors as float32 (recorded
    casts), others as given: the losses below (and reflect/replicate
    ``pad``) are on torch's CPU autocast float32 list, but we compose them of
    ops that the dispatcher's op table does not cast, or cannot tell apart
    (``Pad``'s mode is an attribute; docs/mixed-precision.md)."""
    from dragon_core import amp as _amp
    if not _amp.is_autocast_enabled():
        return tensors
    return tuple(t.float() if isinstance(t, Tensor) and t.dtype.name in ("float16", "bfloat16")
                 else t for t in tensors)


def hinge_embedding_loss(input, target, margin=1.0, size_average=None, reduce=None,
                         reduction="mean"):
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where
    ``target == -1`` (torch adds both terms for other targets)."""
    input, target = _autocast_float32(input, target)
    margin_part = _T["where"](target != 1, _T["clamp"](margin - input, min=0.0), 0.0)
    self_part = _T["where"](target != -1, input, 0.0)
    return _reduce(margin_part + self_part, _legacy(size_average, reduce, reduction))


def multilabel_soft_margin_loss(input, target, weight=None, size_average=None, reduce=None,
                                reduction="mean"):
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    loss = _T["sum"](loss, input.ndim - 1) / input.shape[-1]
    return _reduce(loss, _legacy(size_average, reduce, reduction))


def multi_margin_loss(input, target, p=1, margin=1.0, weight=None, size_average=None,
                      reduce=None, reduction="mean"):
    """``sum_{j != y} max(0, margin - x[y] + x[j])^p (* weight[y]) / C`` per
    sample (torch's multi-class hinge loss)."""
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    input, weight = _autocast_float32(input, weight)
    x = input if input.ndim == 2 else input.reshape(1, -1)
    t = target.reshape(-1).long()
    c = x.shape[1]
    xy = _T["gather"](x, 1, t.unsqueeze(1))
    h = _T["clamp"](margin - xy + x, min=0.0)
    if p == 2:
        h = h * h
    if weight is not None:
        h = h * _index_select_in_range(weight.to(x.dtype), 0, t).unsqueeze(1)
    other = 1 - one_hot(t, c).to(x.dtype)
    loss = _T["sum"](h * other, 1) / c
    if input.ndim != 2:
        loss = loss.reshape(())
    return _reduce(loss, _legacy(size_average, reduce, reduction))


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    """torch's: the inputs broadcast first, then each is divided by its own
    norm clamped to ``eps`` (``x1 . x2 / (max(|x1|, eps) max(|x2|, eps))``),
    not the product of the norms clamped once."""
    if tuple(x1.shape) != tuple(x2.shape):
        x1, x2 = _T["broadcast_tensors"](x1, x2)
    # torch clamps the norms in place under no_grad: the clamped value,
    # the gradient of the unclamped norm
    n1 = _T["norm"](x1, 2, dim, True)
    n2 = _T["norm"](x2, 2, dim, True)
    # (the difference is taken only where the norm is below eps: an inf
    # norm stays inf, where inf - inf would give NaN)
    n1 = n1 + _T["where"](n1 < eps, eps - n1, 0.0).detach()
    n2 = n2 + _T["where"](n2 < eps, eps - n2, 0.0).detach()
    return _T["sum"]((x1 / n1) * (x2 / n2), dim)


def pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return _T["norm"](x1 - x2 + eps, p, -1, keepdim)


def cosine_embedding_loss(input1, input2, target, margin=0.0, reduction="mean"):
    """torch's: ``cos = x1 . x2 / sqrt((|x1|^2 + 1e-12) (|x2|^2 + 1e-12))``,
    ``1 - cos`` where ``target == 1``, ``max(0, cos - margin)`` where
    ``target == -1``, 0 for any other target; a 1-D target with 2-D
    inputs, a 0-d target with 1-D inputs."""
    input1, input2, target = _autocast_float32(input1, input2, target)
    td = target.ndim
    if td not in (0, 1) or input1.ndim != td + 1 or input2.ndim != td + 1:
        raise RuntimeError(f"cosine_embedding_loss: a {td}-D target needs {td + 1}-D inputs "
                           f"(0-D or 1-D targets only), got inputs {tuple(input1.shape)}, "
                           f"{tuple(input2.shape)} and target {tuple(target.shape)}")
    prod = _T["sum"](input1 * input2, td)
    m1 = _T["sum"](input1 * input1, td) + 1e-12
    m2 = _T["sum"](input2 * input2, td) + 1e-12
    cos = prod / _T["sqrt"](m1 * m2)
    zero = cos * 0
    loss = _T["where"](target == 1, 1 - cos, zero) + _T["where"](
        target == -1, _T["clamp"](cos - margin, min=0.0), zero)
    return _reduce(loss, reduction)


def margin_ranking_loss(input1, input2, target, margin=0.0, reduction="mean"):
    input1, input2, target = _autocast_float32(input1, input2, target)
    return _reduce(_T["clamp"](-target * (input1 - input2) + margin, min=0.0), reduction)


def triplet_margin_loss(anchor, positive, negative, margin=1.0, p=2, eps=1e-6, swap=False,
                        reduction="mean"):
    if margin <= 0:
        raise ValueError(f"margin must be greater than 0, got {margin}")
    anchor, positive, negative = _autocast_float32(anchor, positive, negative)
    dp = pairwise_distance(anchor, positive, p, eps)
    dn = pairwise_distance(anchor, negative, p, eps)
    if swap:   # the harder negative distance: anchor's or positive's
        dn = _T["minimum"](dn, pairwise_distance(positive, negative, p, eps))
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
