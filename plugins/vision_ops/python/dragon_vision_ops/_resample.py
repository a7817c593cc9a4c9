"""Resampling: :func:`interpolate` and :func:`grid_sample`, with the
gradient rules of the ops behind them.

The ops (``Interpolate``, ``InterpolateGrad``, ``GridSample``,
``GridSampleGrad``) are defined by the plugin library; ``dragon_core.ops``
exposes them as ``interpolate``, ``interpolate_grad``, ``grid_sample`` and
``grid_sample_grad``. The functions here add PyTorch-style argument handling
(a single int or float for every axis).

Gradients:

* ``Interpolate`` is linear in ``x``: its gradient is ``InterpolateGrad``
  (the adjoint, a scatter of ``dy`` with the same weights), and the
  gradient of ``InterpolateGrad`` with respect to ``dy`` is ``Interpolate``
  again, so derivatives of every order are exact.
* ``GridSample``'s gradient is ``GridSampleGrad``, which returns ``dx`` and
  ``dgrid`` together. ``GridSampleGrad`` has no gradient rule: a second
  derivative through ``grid_sample`` raises ``NotImplementedError`` naming
  it.
"""

from __future__ import annotations

from dragon_core.plugin_api import gradient, needs_grad

import dragon_core

__all__ = ["grid_sample", "interpolate"]

_INTERP_ATTRS = ("size", "scale_factor", "mode", "align_corners")
_GRID_ATTRS = ("mode", "padding_mode", "align_corners")


def _as_list(value, kind):
    """None, one number, or a sequence (or 1-D array) of numbers -> None or
    a list of ``kind``."""
    if value is None:
        return None
    if isinstance(value, str):
        return value  # refused by the op with a message naming it
    try:
        items = list(value)
    except TypeError:
        items = [value]
    return [kind(v) for v in items]


def interpolate(input, size=None, scale_factor=None, mode="nearest",
                align_corners=None):
    """Resize the spatial axes of ``input``, as
    ``torch.nn.functional.interpolate``.

    Parameters
    ----------
    input : Tensor
        ``[N, C, W]``, ``[N, C, H, W]`` or ``[N, C, D, H, W]``, float32 or
        float64, every spatial axis non-empty (``N`` and ``C`` may be 0).
    size : int or sequence of int, optional
        Output spatial size: one value for every axis or one per axis.
    scale_factor : float or sequence of float, optional
        Multiplier of each spatial size: the output size is
        ``floor(in * scale_factor)``, and (without ``align_corners``) source
        coordinates use ``1 / scale_factor``, not ``in / out`` (PyTorch's
        ``recompute_scale_factor=None``). Give exactly one of ``size`` and
        ``scale_factor``.
    mode : str
        ``"nearest"`` (PyTorch's legacy rule, source cell
        ``floor(dst * scale)``), ``"nearest-exact"``
        (``floor((dst + 0.5) * scale)``), ``"linear"`` (3-D input),
        ``"bilinear"`` or ``"bicubic"`` (4-D input; cubic convolution with
        ``A = -0.75``, border cells repeated), ``"trilinear"`` (5-D input).
    align_corners : bool, optional
        Interpolating modes only (leave None for the nearest modes): True
        maps the corner cells' centres onto each other,
        ``src = dst * (in - 1) / (out - 1)``; False or None uses half-pixel
        centres, ``src = (dst + 0.5) * scale - 0.5``.

    Returns
    -------
    Tensor
        ``[N, C, *output size]``, the dtype and device of ``input``.

    Raises
    ------
    dragon_core.errors.InvalidArgumentError
        For both or neither of ``size`` and ``scale_factor``, an unknown
        mode or one that does not fit the input rank, ``align_corners``
        with a nearest mode, non-positive sizes or factors.
    """
    return dragon_core.ops.interpolate(
        input, size=_as_list(size, int),
        scale_factor=_as_list(scale_factor, float), mode=mode,
        align_corners=align_corners)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros",
                align_corners=False):
    """Sample ``input`` at the points of ``grid``, as
    ``torch.nn.functional.grid_sample`` (4-D and 5-D inputs).

    Parameters
    ----------
    input : Tensor
        ``[N, C, H, W]`` or ``[N, C, D, H, W]``, float32 or float64, every
        spatial size ``>= 1``.
    grid : Tensor
        ``[N, Ho, Wo, 2]`` holding ``(x, y)`` or ``[N, Do, Ho, Wo, 3]``
        holding ``(x, y, z)``, the dtype of ``input``, normalised so that -1
        and 1 are the two ends of each axis (``x`` runs along ``W``, ``y``
        along ``H``, ``z`` along ``D``).
    mode : str
        ``"bilinear"`` (trilinear on 5-D inputs), ``"nearest"`` (halves
        round to even) or ``"bicubic"`` (4-D only; Keys' cubic convolution,
        ``A = -0.75``, over the 4 x 4 cells around the point).
    padding_mode : str
        ``"zeros"`` (cells outside the image read 0), ``"border"`` (points
        are clipped into the image) or ``"reflection"`` (points are mirrored
        about the ends of each axis, then clipped). In bicubic mode the
        padding applies to each of the 16 cells instead of the point.
    align_corners : bool
        True: -1 and 1 are the centres of the corner cells,
        ``ix = (gx + 1) / 2 * (W - 1)``; False: their outer edges,
        ``ix = ((gx + 1) * W - 1) / 2``. Also the mirrors of reflection.

    Returns
    -------
    Tensor
        ``[N, C, Ho, Wo]`` or ``[N, C, Do, Ho, Wo]``. Points with a NaN or
        infinite coordinate sample 0.

    Notes
    -----
    Differentiable once with respect to ``input`` and ``grid`` (the grid
    gradient is 0 in nearest mode and where clipping is active, and
    changes sign across a reflection). There is no second derivative.
    """
    return dragon_core.ops.grid_sample(input, grid, mode=mode,
                                       padding_mode=padding_mode,
                                       align_corners=bool(align_corners))


def _attrs(node, names):
    return {k: node.attrs[k] for k in names}


@gradient("Interpolate")
def _interpolate_grad(node, dy):
    x = node.inputs[0]
    return [dragon_core.ops.interpolate_grad(x, dy,
                                             **_attrs(node, _INTERP_ATTRS))]


@gradient("InterpolateGrad")
def _interpolate_grad_grad(node, ddx):
    # InterpolateGrad is the adjoint of Interpolate, linear in dy.
    if not needs_grad(node, 1):
        return [None, None]
    return [None, dragon_core.ops.interpolate(ddx,
                                              **_attrs(node, _INTERP_ATTRS))]


@gradient("GridSample")
def _grid_sample_grad(node, dy):
    x, grid = node.inputs
    dx, dgrid = dragon_core.ops.grid_sample_grad(x, grid, dy,
                                                 **_attrs(node, _GRID_ATTRS))
    return [dx if needs_grad(node, 0) else None,
            dgrid if needs_grad(node, 1) else None]


@gradient("GridSampleGrad")
def _grid_sample_second_order(node, *dys):
    """Second-order gradients of GridSample are not provided: say so rather
    than return a wrong (zero) result."""
    raise NotImplementedError(
        "GridSampleGrad: second-order gradients of GridSample are not "
        "implemented (grid_sample is differentiable once)")
