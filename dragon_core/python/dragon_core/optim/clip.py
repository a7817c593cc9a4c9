"""Gradient clipping by total norm and by value.

``clip_grad_norm_`` and ``clip_grad_value_`` work on the ``.grad`` of
parameters (PyTorch's ``torch.nn.utils``); ``clip_grads_by_norm`` and
``clip_grads_by_value`` take and return explicit gradient lists, written
with ops only, so they also run inside ``@dragon_core.function`` (e.g. on
the gradients of a ``GradientTape``).
"""

from __future__ import annotations

import math
import numbers

from .._autograd import grad_access
from .._tensor import Tensor


def _with_grad(params) -> list:
    """The parameters whose ``.grad`` is set (read as state in a trace)."""
    out = []
    for p in params:
        grad_access(p, reads=True)
        if p.grad is not None:
            out.append(p)
    return out


def _as_list(tensors, where: str) -> list:
    if isinstance(tensors, Tensor):
        return [tensors]
    out = list(tensors)
    for t in out:
        if t is not None and not isinstance(t, Tensor):
            raise TypeError(f"{where}: expected Tensors, got {type(t).__name__}")
    return out


def _check_norm_type(norm_type, where: str) -> float:
    if isinstance(norm_type, str) and norm_type.lower() == "inf":
        return math.inf
    if not isinstance(norm_type, numbers.Real) or isinstance(norm_type, bool):
        raise TypeError(f"{where}: norm_type must be a number or 'inf', got {norm_type!r}")
    norm_type = float(norm_type)
    if not (norm_type > 0):
        raise ValueError(f"{where}: norm_type must be > 0, got {norm_type}")
    return norm_type


def total_norm(grads, norm_type=2.0):
    """The norm of all gradients taken together (as one flat vector).

    Parameters
    ----------
    grads : sequence of Tensor
        Gradients (None entries are skipped).
    norm_type : float or 'inf', default 2
        The p of the p-norm; ``inf`` for the largest absolute value.

    Returns
    -------
    Tensor
        0-d, in the dtype of the first gradient; 0 when there are no
        elements.
    """
    from .. import ops

    norm_type = _check_norm_type(norm_type, "total_norm")
    grads = [g for g in _as_list(grads, "total_norm") if g is not None]
    if not grads:
        raise ValueError("total_norm: no gradients (every entry is None)")
    dtype = grads[0].dtype
    for g in grads:
        if not g.dtype.is_floating_point:
            raise TypeError(f"total_norm: gradients must be floating point, got "
                            f"{g.dtype.name} of shape {list(g.shape)}")
    parts = []
    for g in grads:
        if g.size == 0:
            continue
        a = ops.abs(g)
        if math.isinf(norm_type):
            part = ops.max(a)
        elif norm_type == 1.0:
            part = ops.sum(a)
        elif norm_type == 2.0:
            part = ops.sum(ops.square(g))
        else:
            part = ops.sum(a ** norm_type)
        parts.append(part if part.dtype == dtype else ops.cast(part, dtype))
    if not parts:
        return ops.zeros([], dtype)
    if len(parts) == 1:
        acc = parts[0]
    elif math.isinf(norm_type):
        acc = ops.max(ops.stack(parts))
    else:
        acc = ops.sum(ops.stack(parts))
    if math.isinf(norm_type) or norm_type == 1.0:
        return acc
    if norm_type == 2.0:
        return ops.sqrt(acc)
    return acc ** (1.0 / norm_type)


def clip_grads_by_norm(grads, max_norm, norm_type=2.0, eps: float = 1e-6):
    """Scale gradients so that their total norm is at most ``max_norm``.

    Every gradient is multiplied by ``min(1, max_norm / (norm + eps))``
    (PyTorch's rule; no data-dependent branch, so it traces into a graph).

    Parameters
    ----------
    grads : sequence of Tensor
        Gradients; None entries stay None.
    max_norm : float
        The largest allowed total norm (> 0).
    norm_type : float or 'inf', default 2
        The p of the p-norm.
    eps : float, default 1e-6
        Added to the norm before dividing.

    Returns
    -------
    (list of Tensor, Tensor)
        The clipped gradients and the total norm before clipping.
    """
    from .. import ops

    grads = _as_list(grads, "clip_grads_by_norm")
    max_norm = float(max_norm)
    if not max_norm > 0:
        raise ValueError(f"clip_grads_by_norm: max_norm must be > 0, got {max_norm}")
    norm = total_norm(grads, norm_type)
    coef = ops.minimum(max_norm / (norm + eps), 1.0)
    out = []
    for g in grads:
        if g is None:
            out.append(None)
        else:
            c = coef if coef.dtype == g.dtype else ops.cast(coef, g.dtype)
            out.append(g * c)
    return out, norm


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite: bool = False):
    """Clip the ``.grad`` of parameters in place by their total norm.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped (those without one are
        skipped).
    max_norm : float
        The largest allowed total norm.
    norm_type : float or 'inf', default 2
        The p of the p-norm.
    error_if_nonfinite : bool, default False
        Raise when the total norm is NaN or infinite (eager mode only).

    Returns
    -------
    Tensor
        The total norm of the gradients before clipping (0-d).
    """
    from .. import _C, ops

    params = _with_grad(_as_list(parameters, "clip_grad_norm_"))
    if not params:
        return ops.zeros([], "float32")
    grads = [p.grad for p in params]
    clipped, norm = clip_grads_by_norm(grads, max_norm, norm_type)
    if error_if_nonfinite:
        if _C._is_tracing():
            raise ValueError("clip_grad_norm_: error_if_nonfinite cannot be checked inside "
                             "@function (the norm is only known when the graph runs)")
        if not math.isfinite(norm.item()):
            raise RuntimeError(f"clip_grad_norm_: the total norm of order {norm_type} of the "
                               f"gradients is {norm.item()}; set error_if_nonfinite=False "
                               f"to clip anyway")
    for p, g in zip(params, clipped):
        write_grad(p, g)
    return norm


def write_grad(p, g) -> None:
    """Make ``p.grad`` hold ``g``: in place where the gradient tensor can take
    it (so a reference ``h = p.grad`` taken before sees the new values, as in
    torch), else by rebinding ``.grad`` (inside a ``@function`` trace, or a
    gradient that records a graph, of another shape or dtype)."""
    from .. import _C
    cur = p.grad
    if (cur is None or _C._is_tracing() or cur.requires_grad
            or tuple(cur.shape) != tuple(g.shape) or cur.dtype != g.dtype):
        p.grad = g
    else:
        cur.assign(g)


def clip_grads_by_value(grads, clip_value):
    """Clamp every gradient element into ``[-clip_value, clip_value]``.

    Parameters
    ----------
    grads : sequence of Tensor
        Gradients; None entries stay None.
    clip_value : float
        The bound (>= 0).

    Returns
    -------
    list of Tensor
    """
    from .. import ops

    grads = _as_list(grads, "clip_grads_by_value")
    clip_value = float(clip_value)
    if not clip_value >= 0:
        raise ValueError(f"clip_grads_by_value: clip_value must be >= 0, got {clip_value}")
    return [None if g is None else ops.clip(g, -clip_value, clip_value) for g in grads]


def clip_grad_value_(parameters, clip_value) -> None:
    """Clamp the ``.grad`` of parameters into ``[-clip_value, clip_value]``.

    Parameters
    ----------
    parameters : Tensor or iterable of Tensor
        Parameters whose ``.grad`` is clipped (those without one are
        skipped).
    clip_value : float
        The bound (>= 0).
    """
    params = _with_grad(_as_list(parameters, "clip_grad_value_"))
    for p, g in zip(params, clip_grads_by_value([p.grad for p in params], clip_value)):
        write_grad(p, g)
