"""Pooling layers (NCHW)."""

from __future__ import annotations

from . import functional as F
from .._opgen import pads_to_pairs
from .module import Module


class MaxPool2d(Module):
    """Max over ``kernel_size`` windows (``stride`` defaults to the kernel size)."""

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False):
        super().__init__()
        pads_to_pairs(type(self).__name__, padding, 2)  # a bad layout fails here
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.dilation, self.ceil_mode = dilation, ceil_mode

    def forward(self, x):
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation,
                            self.ceil_mode)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    """Mean over ``kernel_size`` windows (``stride`` defaults to the kernel size)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
                 count_include_pad: bool = True):
        super().__init__()
        pads_to_pairs(type(self).__name__, padding, 2)  # a bad layout fails here
        self.kernel_size, self.stride, self.padding = kernel_size, stride, padding
        self.ceil_mode, self.count_include_pad = ceil_mode, count_include_pad

    def forward(self, x):
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                            self.count_include_pad)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """Mean pooling to a fixed output size (int, ``(h, w)``; ``None`` keeps a side)."""

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x):
        return F.adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"
