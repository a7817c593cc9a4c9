"""Deformable convolution v1 / v2: the torchvision-like API and the gradient
rule of ``DeformConv2d``.

The op ``DeformConv2d(x, weight, offset, mask=None, bias=None)`` is defined by
the plugin's library (``src/deform_conv.cc``); its backward op
``DeformConv2dGrad`` returns the gradients of x, weight, offset and mask in one
pass (they share the column gradient ``W^T dy``) and computes only those the
backward pass asks for. Deformable convolution is differentiable once here:
the rule of ``DeformConv2dGrad`` refuses a second order with a clear error
(the bilinear sampling has kinks at integer coordinates anyway, and
torchvision's op is not twice differentiable either).
"""

from __future__ import annotations

import dragon_core
from dragon_core.plugin_api import gradient, needs_grad, pads_from_schema

__all__ = ["deform_conv2d"]


def _pair(value, name: str) -> list:
    """``value`` as a [height, width] list of ints."""
    if isinstance(value, int):
        return [value, value]
    pair = [int(v) for v in value]
    if len(pair) != 2:
        raise ValueError(f"deform_conv2d: {name} must be an int or a pair, got {value!r}")
    return pair


def deform_conv2d(input, offset, weight, bias=None, stride=(1, 1),
                  padding=(0, 0), dilation=(1, 1), mask=None):
    """Deformable 2-D convolution (v1, or v2 when ``mask`` is given).

    Same argument order and layouts as ``torchvision.ops.deform_conv2d``.
    Each kernel tap samples ``input`` bilinearly (zeros outside the image) at
    its regular grid position moved by a learned offset, the sample is scaled
    by the mask (v2), and the samples are convolved with ``weight`` as in a
    grouped convolution.

    Parameters
    ----------
    input : Tensor
        Input ``[N, C, H, W]``, float32 or float64.
    offset : Tensor
        Offsets ``[N, 2 * offset_groups * kh * kw, Ho, Wo]``: for offset group
        ``g`` and tap ``k = p * kw + q``, channel ``2 * (g * kh * kw + k)``
        holds the row offset ``dy`` and the next channel the column offset
        ``dx``. ``offset_groups`` is inferred from the channel count and
        must divide ``C``.
    weight : Tensor
        Filter ``[O, C / groups, kh, kw]``; ``groups = C // weight.shape[1]``.
    bias : Tensor, optional
        Bias ``[O]``.
    stride, padding, dilation : int or tuple of int
        Geometry (height, width), as for a convolution; ``padding`` pads both
        sides with zeros.
    mask : Tensor, optional
        Modulation ``[N, offset_groups * kh * kw, Ho, Wo]`` (v2); channel
        ``g * kh * kw + k`` scales tap ``k`` of offset group ``g``.

    Returns
    -------
    Tensor
        ``[N, O, Ho, Wo]`` with ``Ho = (H + 2 * pad_h - dil_h * (kh - 1) - 1)
        // stride_h + 1`` (likewise ``Wo``), the dtype of ``input``.

    Raises
    ------
    ValueError
        When shapes disagree (the error names the op, the expected shape and
        the inputs' shapes).
    """
    ops = dragon_core.ops
    if len(weight.shape) != 4 or len(input.shape) != 4 or len(offset.shape) != 4:
        raise ValueError(
            "deform_conv2d: input, offset and weight must have rank 4, got "
            f"{list(input.shape)}, {list(offset.shape)}, {list(weight.shape)}")
    taps = int(weight.shape[2]) * int(weight.shape[3])
    channels, per_group = int(input.shape[1]), int(weight.shape[1])
    groups = channels // per_group if per_group > 0 and channels % per_group == 0 else 1
    offset_groups = max(int(offset.shape[1]) // (2 * taps), 1) if taps > 0 else 1
    geo = {"strides": _pair(stride, "stride"), "pads": _pair(padding, "padding"),
           "dilations": _pair(dilation, "dilation"), "groups": groups,
           "offset_groups": offset_groups}
    if mask is not None or bias is None:
        return ops.deform_conv2d(input, weight, offset, mask, bias, **geo)
    # The op's optional inputs are trailing (mask, then bias): a v1 call with
    # a bias adds it after the convolution.
    y = ops.deform_conv2d(input, weight, offset, **geo)
    return y + ops.reshape(bias, [1, -1, 1, 1])


def _geometry(node) -> dict:
    a = node.attrs
    return {"strides": list(a["strides"]),
            "pads": pads_from_schema("DeformConv2d", a["pads"]),  # (before, after) pairs
            "dilations": list(a["dilations"]), "groups": int(a["groups"]),
            "offset_groups": int(a["offset_groups"])}


@gradient("DeformConv2d")
def _deform_conv2d_grad(node, dy):
    """Gradients of x, weight, offset, mask from DeformConv2dGrad (only the
    ones needed); the bias gradient is dy summed over N, Ho and Wo."""
    inputs = list(node.inputs)
    x, weight, offset = inputs[:3]
    mask = inputs[3] if len(inputs) > 3 else None
    wanted = [needs_grad(node, i) if i < len(inputs) else False for i in range(4)]
    grads = [None] * len(inputs)
    if any(wanted):
        flags = [int(w) for w in wanted]
        outs = dragon_core.ops.deform_conv2d_grad(
            x, weight, offset, dy, mask, grads=flags, **_geometry(node))
        for i in range(min(4, len(inputs))):
            if wanted[i]:
                grads[i] = outs[i]
    if len(inputs) > 4 and needs_grad(node, 4):
        grads[4] = dragon_core.ops.sum(dy, [0, 2, 3])
    return grads


@gradient("DeformConv2dGrad")
def _deform_conv2d_second_order(node, *dys):
    """Second-order gradients are not provided: say so instead of a wrong
    (zero) result."""
    raise NotImplementedError(
        "DeformConv2dGrad: second-order gradients of DeformConv2d are not "
        "implemented (deform_conv2d is differentiable once); compute the "
        "gradient outside a recording tape or use a first-order method")
