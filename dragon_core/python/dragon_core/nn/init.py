"""Parameter initialisers (``dragon_core.nn.init``), PyTorch's names and rules.

Each ``*_`` function overwrites its tensor in place (through ``assign``)
and returns it. Random values come from the random ops and so follow
``dragon_core.manual_seed``.
"""

from __future__ import annotations

import math

from .. import ops
from .._autograd import no_grad
from .._tensor import Tensor
from .functional import _fan

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_",
           "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_",
           "eye_"]


def calculate_gain(nonlinearity: str, param: float | None = None) -> float:
    """The recommended gain for a nonlinearity (see PyTorch's table)."""
    linear = ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
              "conv_transpose2d", "conv_transpose3d", "sigmoid")
    if nonlinearity in linear:
        return 1.0
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else float(param)
        return math.sqrt(2.0 / (1 + slope ** 2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"calculate_gain: unsupported nonlinearity {nonlinearity!r}")


def _check(t: Tensor, name: str) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a Tensor, got {type(t).__name__}")
    if not t.dtype.is_floating_point:
        raise TypeError(f"{name}: needs a floating-point tensor, got {t.dtype}")


def _fill_with(t: Tensor, value: Tensor) -> Tensor:
    with no_grad():
        t.assign(value)
    return t


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0) -> Tensor:
    """Fill with values drawn uniformly from ``[a, b)``."""
    _check(t, "uniform_")
    if not b >= a:
        raise ValueError(f"uniform_: needs a <= b, got a={a}, b={b}")
    return _fill_with(t, ops.random_uniform(list(t.shape), low=float(a), high=float(b),
                                            dtype=t.dtype, device=str(t.device)))


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0) -> Tensor:
    """Fill with values drawn from ``N(mean, std**2)``."""
    _check(t, "normal_")
    if std < 0:
        raise ValueError(f"normal_: std must be >= 0, got {std}")
    return _fill_with(t, ops.random_normal(list(t.shape), mean=float(mean), std=float(std),
                                           dtype=t.dtype, device=str(t.device)))


def constant_(t: Tensor, value: float) -> Tensor:
    """Fill with ``value``."""
    _check(t, "constant_")
    return _fill_with(t, ops.full(list(t.shape), float(value), dtype=t.dtype,
                                  device=str(t.device)))


def zeros_(t: Tensor) -> Tensor:
    return constant_(t, 0.0)


def ones_(t: Tensor) -> Tensor:
    return constant_(t, 1.0)


def eye_(t: Tensor) -> Tensor:
    """Fill a 2-D tensor with the identity (ones on the main diagonal)."""
    import numpy as np
    _check(t, "eye_")
    if t.ndim != 2:
        raise ValueError(f"eye_: needs a 2-D tensor, got shape {tuple(t.shape)}")
    from .._tensor import tensor
    value = tensor(np.eye(*t.shape, dtype=t.dtype.numpy)).to(str(t.device))
    return _fill_with(t, value)


def xavier_uniform_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot uniform: ``U(-a, a)`` with ``a = gain * sqrt(6 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fan(t.shape)
    a = gain * math.sqrt(6.0 / max(fan_in + fan_out, 1))
    return uniform_(t, -a, a)


def xavier_normal_(t: Tensor, gain: float = 1.0) -> Tensor:
    """Glorot normal: ``N(0, std**2)`` with ``std = gain * sqrt(2 / (fan_in + fan_out))``."""
    fan_in, fan_out = _fan(t.shape)
    return normal_(t, 0.0, gain * math.sqrt(2.0 / max(fan_in + fan_out, 1)))


def _kaiming_std(t: Tensor, a: float, mode: str, nonlinearity: str) -> float:
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"kaiming init: mode must be 'fan_in' or 'fan_out', got {mode!r}")
    fan_in, fan_out = _fan(t.shape)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(max(fan, 1))


def kaiming_uniform_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                     nonlinearity: str = "leaky_relu") -> Tensor:
    """He uniform: ``U(-b, b)`` with ``b = sqrt(3) * gain / sqrt(fan)``."""
    bound = math.sqrt(3.0) * _kaiming_std(t, a, mode, nonlinearity)
    return uniform_(t, -bound, bound)


def kaiming_normal_(t: Tensor, a: float = 0.0, mode: str = "fan_in",
                    nonlinearity: str = "leaky_relu") -> Tensor:
    """He normal: ``N(0, std**2)`` with ``std = gain / sqrt(fan)``."""
    return normal_(t, 0.0, _kaiming_std(t, a, mode, nonlinearity))
