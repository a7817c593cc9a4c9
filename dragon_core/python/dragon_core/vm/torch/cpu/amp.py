"""``torch.cpu.amp`` (deprecated in torch for ``torch.amp``): ``autocast``
with the cpu device and ``GradScaler`` on the cpu, as torch 2.13 spells
them (each warns FutureWarning as torch's)."""

from __future__ import annotations

import warnings

from .. import _dtype
from .. import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):  # noqa: N801 - torch's name
    """``torch.cpu.amp.autocast(enabled=True, dtype=torch.bfloat16,
    cache_enabled=True)``: ``torch.autocast("cpu", ...)``."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        warnings.warn("`torch.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cpu", dtype=_dtype.DTYPES["bfloat16"] if dtype is None else dtype,
                         enabled=enabled, cache_enabled=cache_enabled)

    def __call__(self, fn):  # noqa: D102
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _amp.autocast("cpu", self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


class GradScaler(_amp.GradScaler):
    """``torch.cpu.amp.GradScaler(init_scale=2.**16, growth_factor=2.0,
    backoff_factor=0.5, growth_interval=2000, enabled=True)``:
    ``torch.amp.GradScaler("cpu", ...)``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        warnings.warn("`torch.cpu.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cpu", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
