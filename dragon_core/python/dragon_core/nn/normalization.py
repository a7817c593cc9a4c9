"""Normalisation layers: BatchNorm1d/2d, LayerNorm, GroupNorm."""

from __future__ import annotations

from .. import ops
from . import functional as F
from . import init
from ._common import add_affine, check_positive
from .module import Module


class _BatchNorm(Module):
    _ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True, device=None,
                 dtype="float32"):
        super().__init__()
        check_positive(type(self).__name__, num_features=num_features)
        if momentum is None:
            raise ValueError(f"{type(self).__name__}: momentum=None (torch's cumulative "
                             "average) is not supported by dragon_core.nn; use "
                             "dragon_core.vm.torch.nn or a momentum in [0, 1]")
        if not 0.0 <= momentum <= 1.0:
            raise ValueError(f"{type(self).__name__}: momentum must be in [0, 1], got {momentum}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        add_affine(self, [num_features], affine, dtype, device)
        if track_running_stats:
            self.register_buffer("running_mean", ops.zeros([num_features], dtype=dtype,
                                                           device=device))
            self.register_buffer("running_var", ops.ones([num_features], dtype=dtype,
                                                         device=device))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
        self.reset_parameters()

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            init.zeros_(self.running_mean)
            init.ones_(self.running_var)

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def forward(self, x):
        name = type(self).__name__
        if x.ndim not in self._ranks:
            raise ValueError(f"{name}: expected input of rank {' or '.join(map(str, self._ranks))}"
                             f", got shape {tuple(x.shape)}")
        if x.shape[1] != self.num_features:
            raise ValueError(f"{name}: input has {x.shape[1]} channels (shape "
                             f"{tuple(x.shape)}), the layer {self.num_features}")
        use_batch = self.training or not self.track_running_stats
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training=use_batch, momentum=self.momentum, eps=self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of ``[N, C]`` or ``[N, C, L]`` input.

    Training uses batch statistics and updates the running ones
    (``momentum``-weighted, unbiased variance); ``eval()`` uses the running
    statistics.
    """

    _ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of ``[N, C, H, W]`` input (see :class:`BatchNorm1d`)."""

    _ranks = (4,)


class LayerNorm(Module):
    """Normalise over the trailing ``normalized_shape`` dimensions."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True,
                 device=None, dtype="float32"):
        super().__init__()
        shape = [normalized_shape] if isinstance(normalized_shape, int) else list(normalized_shape)
        if not shape or any(not isinstance(d, int) or d <= 0 for d in shape):
            raise ValueError(f"LayerNorm: normalized_shape must be positive ints, got "
                             f"{normalized_shape!r}")
        self.normalized_shape, self.eps = tuple(shape), eps
        self.elementwise_affine = elementwise_affine
        add_affine(self, shape, elementwise_affine, dtype, device)

    def forward(self, x):
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class GroupNorm(Module):
    """Normalise ``[N, C, *]`` input over ``num_groups`` groups of channels."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5,
                 affine: bool = True, device=None, dtype="float32"):
        super().__init__()
        check_positive("GroupNorm", num_groups=num_groups, num_channels=num_channels)
        if num_channels % num_groups:
            raise ValueError(f"GroupNorm: num_channels ({num_channels}) must be divisible by "
                             f"num_groups ({num_groups})")
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                    eps, affine)
        add_affine(self, [num_channels], affine, dtype, device)

    def forward(self, x):
        return F.group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}"
