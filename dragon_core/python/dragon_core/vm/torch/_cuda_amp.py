"""``torch.cuda.amp`` (deprecated in torch for ``torch.amp``): ``autocast``
and ``GradScaler`` with the cuda device, as torch 2.13 spells them. Scripts
write ``torch.cuda.amp.autocast(enabled=use_amp)``; as torch on a machine
without a GPU, both warn and disable themselves (the block runs in float32,
the scaler passes through). With a GPU, an enabled ``autocast`` raises
NotImplementedError: dragon_core's autocast policy is for the cpu device."""

from __future__ import annotations

import sys
import warnings

from . import _dtype
from . import amp as _amp

__all__ = ["autocast", "GradScaler"]


class autocast(_amp.autocast):  # noqa: N801 - torch's name
    """``torch.cuda.amp.autocast(enabled=True, dtype=torch.float16,
    cache_enabled=True)``: ``torch.autocast("cuda", ...)``."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        warnings.warn("`torch.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`torch.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype=_dtype.DTYPES["float16"] if dtype is None else dtype,
                         enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_amp.GradScaler):
    """``torch.cuda.amp.GradScaler(init_scale=2.**16, ...)``:
    ``torch.amp.GradScaler("cuda", ...)``."""

    def __init__(self, init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        warnings.warn("`torch.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`torch.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


# ``torch.cuda`` is a module, not a package: registered under its dotted
# name so that ``from torch.cuda.amp import autocast`` imports it.
sys.modules.setdefault(__name__.rsplit(".", 1)[0] + ".cuda.amp", sys.modules[__name__])
