"""Helpers shared by gradient rules."""

from __future__ import annotations


def ops():
    from .. import ops as _ops
    return _ops


def unbroadcast(g, shape):
    """Sum ``g`` over the axes that broadcasting added or stretched so that
    it has ``shape`` (the inverse of NumPy broadcasting)."""
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    o = ops()
    lead = g.ndim - len(shape)
    axes = list(range(lead))
    for i, d in enumerate(shape):
        if d == 1 and g.shape[lead + i] != 1:
            axes.append(lead + i)
    if axes:
        g = o.sum(g, axes, keepdims=True)
    if lead:
        g = o.reshape(g, list(shape))
    elif tuple(g.shape) != shape:
        g = o.reshape(g, list(shape))
    return g
