"""``torch.nn.utils``: gradient clipping and parameter vectors."""

from __future__ import annotations

import math

import dragon_core as _dg

from .._functions import _EXPORTS as _T
from ..autograd import no_grad


def _params(parameters):
    """The parameters as vm tensors (a dragon tensor is wrapped), each
    announced to a compiled step as about to have its ``.grad`` read."""
    from .._tensor import _w
    params = [parameters] if hasattr(parameters, "_t") or isinstance(parameters, _dg.Tensor) \
        else list(parameters)
    params = [_w(p) if isinstance(p, _dg.Tensor) else p for p in params]
    for p in params:
        _dg._autograd.grad_access(p._t, reads=True)
    return params


def _write_grad(p, value) -> None:
    """``p.grad`` takes ``value``: the gradient tensor object itself is
    rebound to the new values (``assign``), so ``h = p.grad`` held before sees
    them as in torch, while a tensor that merely shares the old gradient's
    storage (another leaf's grad, the ``gradient=`` of a backward call) is left
    alone -- an in-place ``mul_`` would have written through to it. Inside a
    trace, ``.grad`` is rebound (dragon_core.optim.clip.write_grad)."""
    from dragon_core.optim.clip import write_grad
    write_grad(p._t, value._t)


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """``torch.nn.utils.clip_grad_norm_``: scales every ``.grad`` in place
    (a reference ``g = p.grad`` sees the clipped values, as in torch)."""
    norm_type = float(norm_type)     # torch takes 'inf' (a string) too
    params = _params(parameters)
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
            g = p.grad
            if g is not None:
                _write_grad(p, _T["mul"](g, coef).to(g.dtype))
    return total


def clip_grad_value_(parameters, clip_value, foreach=None):
    """``torch.nn.utils.clip_grad_value_``: clamps every ``.grad`` in place."""
    params = _params(parameters)
    with no_grad():
        for p in params:
            g = p.grad
            if g is not None:
                _write_grad(p, _T["clamp"](g, -clip_value, clip_value))


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
