"""Activation layers and Dropout."""

from __future__ import annotations

from . import functional as F
from .module import Module


class _Simple(Module):
    _fn = None

    def forward(self, x):
        return type(self)._fn(x)


class ReLU(_Simple):
    """``max(x, 0)``."""
    _fn = staticmethod(F.relu)


class ReLU6(_Simple):
    """``min(max(x, 0), 6)``."""
    _fn = staticmethod(F.relu6)


class Sigmoid(_Simple):
    """``1 / (1 + exp(-x))``."""
    _fn = staticmethod(F.sigmoid)


class Tanh(_Simple):
    """``tanh(x)``."""
    _fn = staticmethod(F.tanh)


class SiLU(_Simple):
    """``x * sigmoid(x)`` (swish)."""
    _fn = staticmethod(F.silu)


class LeakyReLU(Module):
    """``x`` if ``x >= 0`` else ``negative_slope * x``."""

    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x):
        return F.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    """``x`` if ``x > 0`` else ``alpha * (exp(x) - 1)``."""

    def __init__(self, alpha: float = 1.0):
        super().__init__()
        self.alpha = alpha

    def forward(self, x):
        return F.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class GELU(Module):
    """Gaussian error linear unit (``approximate='tanh'`` for the tanh form)."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x):
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    """``log(1 + exp(beta * x)) / beta`` (linear above ``threshold``)."""

    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x):
        return F.softplus(x, self.beta, self.threshold)


class Softmax(Module):
    """Softmax along ``dim``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Module):
    """Log-softmax along ``dim``."""

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        return F.log_softmax(x, self.dim)

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class Dropout(Module):
    """Zero each element with probability ``p`` in training (scaling the rest
    by ``1/(1-p)``); the identity after ``eval()``."""

    def __init__(self, p: float = 0.5):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be in [0, 1], got {p}")
        self.p = p

    def forward(self, x):
        return F.dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
