"""``torch.nn.utils``: gradient clipping and parameter vectors."""

from __future__ import annotations

import math

from .._functions import _EXPORTS as _T
from ..autograd import no_grad


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    norm_type = float(norm_type)     # torch takes 'inf' (a string) too
    params = [parameters] if hasattr(parameters, "_t") else list(parameters)
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        from .._creation import tensor
        return tensor(0.0)
    with no_grad():
        if norm_type == math.inf:
            total = _T["stack"]([_T["amax"](_T["abs"](g)) for g in grads]).max()
        else:
            total = _T["norm"](_T["stack"]([_T["norm"](g, norm_type) for g in grads]), norm_type)
        if error_if_nonfinite and not math.isfinite(float(total)):
            raise RuntimeError(f"The total norm of order {norm_type} for gradients is "
                               "non-finite, so it cannot be clipped.")
        coef = _T["clamp"](max_norm / (total + 1e-6), max=1.0)
        for p in params:
            if p._t.grad is not None:
                p._t.grad = _T["mul"](p.grad, coef)._t
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    params = [parameters] if hasattr(parameters, "_t") else list(parameters)
    with no_grad():
        for p in params:
            if p._t.grad is not None:
                p._t.grad = _T["clamp"](p.grad, -clip_value, clip_value)._t


def parameters_to_vector(parameters):
    return _T["cat"]([p.reshape(-1) for p in parameters])


def vector_to_parameters(vec, parameters):
    start = 0
    with no_grad():
        for p in parameters:
            n = p.numel()
            p.copy_(vec[start:start + n].view_as(p))
            start += n


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.nn.utils.{name} is not supported; supported: "
                              "clip_grad_norm_, clip_grad_value_, parameters_to_vector")
