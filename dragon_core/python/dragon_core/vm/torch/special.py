"""``torch.special``: the functions of torch's namespace that vm.torch has
under another name (``xlogy``, ``expm1``, ``exp2``, ``log1p``, ``erf``,
``expit``, ``logsumexp``, ``softmax``, ``log_softmax``, ``round``), each the
same function as its ``torch.*`` counterpart, and ``logit`` / ``sinc``
composed of differentiable ops with torch's values and gradients at the
edges; other names raise NotImplementedError (``erfc``, ``ndtr``, ``entr``
and ``xlog1py`` among them: composed of the ops we have they would lose the
precision, or the boundary gradients, that the torch functions exist for)."""

from __future__ import annotations

import math

from ._functions import _EXPORTS

xlogy = _EXPORTS["xlogy"]


def _alias(name):
    fn = _EXPORTS.get(name)
    if fn is None:
        import dragon_core.vm.torch as _torch
        fn = getattr(_torch, name)
    return fn


expm1 = _alias("expm1")
exp2 = _alias("exp2")
log1p = _alias("log1p")
erf = _alias("erf")
expit = _alias("sigmoid")
logsumexp = _alias("logsumexp")
round = _alias("round")  # noqa: A001


def softmax(input, dim, *, dtype=None):
    return _EXPORTS["softmax"](input, dim, dtype=dtype)


def log_softmax(input, dim, *, dtype=None):
    return _EXPORTS["log_softmax"](input, dim, dtype=dtype)


def _float_input(name, input):
    if not hasattr(input, "_t"):
        raise TypeError(f"torch.special.{name}: expected a Tensor, got {type(input).__name__}")
    if input.dtype.is_floating_point:
        return input
    if str(input.dtype).replace("torch.", "") == "bool" or "int" in str(input.dtype):
        import dragon_core.vm.torch as _torch
        return input.to(_torch.get_default_dtype())
    raise TypeError(f"torch.special.{name}: unsupported dtype {input.dtype}")


def logit(input, eps=None, *, out=None):
    """log(x / (1 - x)) as log(x) - log1p(-x), with torch's edges: -inf / inf
    at 0 / 1 (gradient inf), NaN outside [0, 1] (where the gradient is that
    of the formula, finite; torch's is NaN: docs/from-pytorch.md). With
    ``eps`` x is first set to lo = eps where x < lo, else to hi = 1 - eps
    where x > hi (torch's order, which matters for eps > 0.5), and the
    gradient is 0 there."""
    if out is not None:
        raise NotImplementedError("torch.special.logit(out=...) is not supported")
    x = _float_input("logit", input)
    if eps is None:
        return x.log() - (-x).log1p()
    lo, hi = float(eps), 1.0 - float(eps)
    below = x < lo
    x = x.masked_fill(below, lo).masked_fill((x > hi) & ~below, hi)
    return x.log() - (-x).log1p()


def sinc(input, *, out=None):
    """sin(pi x) / (pi x), 1 at x = 0. Near 0 (|pi x| below 0.01 in float64,
    0.5 in the narrower dtypes) the Taylor series: the quotient's gradient
    cancels there (torch's float32 gradient of sinc at 1e-4 is -9.3e-4, the
    true one -3.3e-4; ours is within float32 rounding of it). Each branch
    reads a masked copy of x, so neither's inf or 0/0 reaches the gradient."""
    if out is not None:
        raise NotImplementedError("torch.special.sinc(out=...) is not supported")
    x = _float_input("sinc", input)
    wide = str(x.dtype).replace("torch.", "") == "float64"
    u = x * math.pi
    small = u.abs() < (0.01 if wide else 0.5)
    us = u.masked_fill(~small, 0.0)
    u2 = us * us
    # 1 - u^2/3! + u^4/5! - u^6/7! + u^8/9! (the error is below u^10/11!)
    series = 1.0 + u2 * (-1.0 / 6 + u2 * (1.0 / 120 + u2 * (-1.0 / 5040 + u2 / 362880)))
    safe = u.masked_fill(small, 1.0)
    return _EXPORTS["where"](small, series, safe.sin() / safe)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.special.{name} is not supported by dragon_core.vm.torch; "
                              "see docs/from-pytorch.md")
