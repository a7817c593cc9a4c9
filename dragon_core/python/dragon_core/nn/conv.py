"""Convolution layers (NCHW)."""

from __future__ import annotations

from .._opgen import pads_to_pairs
from . import functional as F
from ._common import add_weight_and_bias, check_positive, reset_weight_and_bias
from .module import Module


class _ConvNd(Module):
    def __init__(self, name, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, transposed, output_padding, device, dtype):
        super().__init__()
        check_positive(name, in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{name}: in_channels ({in_channels}) and out_channels "
                             f"({out_channels}) must be divisible by groups ({groups})")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = tuple(F._pair(kernel_size, "kernel_size", name))
        self.stride = tuple(F._pair(stride, "stride", name))
        self.dilation = tuple(F._pair(dilation, "dilation", name))
        # ((top, bottom), (left, right)), checked now (docs/python-api.md)
        self.padding = padding if isinstance(padding, str) else pads_to_pairs(name, padding, 2)
        self.groups = groups
        self.output_padding = tuple(F._pair(output_padding, "output_padding", name))
        kh, kw = self.kernel_size
        if transposed:
            shape = [in_channels, out_channels // groups, kh, kw]
        else:
            shape = [out_channels, in_channels // groups, kh, kw]
        add_weight_and_bias(self, shape, out_channels, bias, dtype, device)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        reset_weight_and_bias(self.weight, self.bias)

    def extra_repr(self) -> str:
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding not in (((0, 0), (0, 0)), "valid"):
            s += f", padding={self.padding}"
        if self.dilation != (1, 1):
            s += f", dilation={self.dilation}"
        if self.output_padding != (0, 0):
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvNd):
    """2-D convolution over ``[N, C, H, W]``.

    ``padding`` is an int, ``(h, w)`` (both sides), ``((top, bottom), (left,
    right))``, ``"valid"`` or ``"same"``; kept as ``((top, bottom), (left,
    right))``. Weights ``[out, in/groups, kh, kw]``,
    initialised as in PyTorch.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 dilation=1, groups: int = 1, bias: bool = True, device=None,
                 dtype="float32"):
        super().__init__("Conv2d", in_channels, out_channels, kernel_size, stride, padding,
                         dilation, groups, bias, False, 0, device, dtype)

    def forward(self, x):
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)


class ConvTranspose2d(_ConvNd):
    """Transposed 2-D convolution (the gradient of Conv2d wrt its input).

    Weights ``[in, out/groups, kh, kw]``; output size ``(H - 1) * stride -
    pad_begin - pad_end + dilation * (k - 1) + output_padding + 1``.
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0,
                 output_padding=0, groups: int = 1, bias: bool = True, dilation=1,
                 device=None, dtype="float32"):
        if isinstance(padding, str):
            raise ValueError("ConvTranspose2d: padding must be ints, not a string")
        super().__init__("ConvTranspose2d", in_channels, out_channels, kernel_size, stride,
                         padding, dilation, groups, bias, True, output_padding, device, dtype)

    def forward(self, x):
        return F.conv_transpose2d(x, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)
