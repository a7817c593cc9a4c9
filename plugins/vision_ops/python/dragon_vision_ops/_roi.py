"""RoIAlign, RoIPool and non-maximum suppression (torchvision-like API), and
the gradient rules of the ops behind them.

The ops are defined by the plugin's library (``src/roi_ops.cc``, ``src/nms.cc``)
and also appear as ``dragon_core.ops.roi_align``, ``roi_pool``,
``nms_padded`` and ``batched_nms_padded``. See ``docs/roi_nms.md`` for the
exact semantics.

Gradients:

* ``RoiAlign`` is linear in ``x``: its gradient is ``RoiAlignGrad`` (the
  adjoint, a scatter of the bilinear weights), and the gradient of
  ``RoiAlignGrad`` with respect to its ``dy`` is ``RoiAlign`` again, so
  every order is exact. The rois get no gradient.
* ``RoiPool`` routes each output to the cell holding its bin's maximum:
  ``RoiPoolGrad`` scatters ``dy`` there and ``RoiPoolGather`` reads values
  there. The two are each other's adjoint in their last input, so every
  order is exact; with respect to ``x`` the selection is piecewise
  constant (no gradient).
* ``Nms`` and ``BatchedNms`` are not differentiable.
"""

from __future__ import annotations

import dragon_core
from dragon_core.plugin_api import gradient, is_tracing, needs_grad

__all__ = ["roi_align", "roi_pool", "nms", "nms_padded", "batched_nms",
           "batched_nms_padded"]

_ALIGN_ATTRS = ("output_size", "spatial_scale", "sampling_ratio", "aligned",
                "mode")
_POOL_ATTRS = ("output_size", "spatial_scale")


def _ops():
    return dragon_core.ops


def _pair(output_size) -> list:
    """``output_size`` (an int or a pair) as ``[oh, ow]``."""
    if isinstance(output_size, int):
        return [output_size, output_size]
    return [int(v) for v in output_size]


def _rois(boxes):
    """A ``[K, 5]`` rois tensor from a tensor or from a list of per-image
    ``[L_i, 4]`` box tensors (the batch index is the list position)."""
    if not isinstance(boxes, (list, tuple)):
        return boxes
    o = _ops()
    if not boxes:
        raise ValueError("roi_align/roi_pool: boxes is an empty list; pass one "
                         "[L, 4] tensor per image (L may be 0)")
    parts = []
    for i, b in enumerate(boxes):
        if b.ndim != 2 or b.shape[1] != 4:
            raise ValueError(f"roi_align/roi_pool: boxes[{i}] must be [L, 4], "
                             f"got shape {tuple(b.shape)}")
        col = o.fill([b.shape[0], 1], float(i), b.dtype, device=str(b.device))
        parts.append(o.concat([col, b], 1))
    return parts[0] if len(parts) == 1 else o.concat(parts, 0)


def roi_align(input, boxes, output_size, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: bool = True, mode: str = "avg"):
    """RoIAlign (Mask R-CNN): average of bilinear samples in each bin.

    Parameters
    ----------
    input : Tensor
        Feature map, ``[N, C, H, W]``, float32 or float64.
    boxes : Tensor or list of Tensor
        ``[K, 5]`` rows ``(batch_index, x1, y1, x2, y2)``, or a list of ``N``
        tensors ``[L_i, 4]`` (``x1, y1, x2, y2``) for image ``i``; in input
        image coordinates, the dtype of ``input``.
    output_size : int or (int, int)
        Bins per roi ``(oh, ow)``.
    spatial_scale : float
        Maps box coordinates to feature-map pixels (e.g. 1/16).
    sampling_ratio : int
        Samples per bin along each axis; ``<= 0`` picks
        ``ceil(roi_size / output_size)`` per axis and roi.
    aligned : bool
        True (default, Detectron2) shifts boxes by -0.5 pixel; False is the
        legacy form, whose roi sizes are clamped to at least 1. torchvision's
        default is False.
    mode : str
        ``"avg"`` (default): the mean of the bin's samples. ``"max"``
        (ONNX RoiAlign): the largest weighted corner term ``w_k * x[k]``
        of the bin's bilinear samples, as onnxruntime computes it (not the
        largest interpolated sample), on the CPU and CUDA; its gradient goes, times
        the weight, to the selected cell, and it has no second derivative.

    Returns
    -------
    Tensor
        ``[K, C, oh, ow]``, the dtype of ``input``.
    """
    return _ops().roi_align(input, _rois(boxes), _pair(output_size),
                            spatial_scale=float(spatial_scale),
                            sampling_ratio=int(sampling_ratio),
                            aligned=bool(aligned), mode=mode)


def roi_pool(input, boxes, output_size, spatial_scale: float = 1.0):
    """RoIPool (Fast R-CNN): maximum over each quantised bin.

    Box corners are scaled and rounded to cells (half away from zero); the
    roi spans ``max(x2 - x1 + 1, 1)`` cells, and bin ``i`` of ``o`` covers
    cells ``[floor(i * size / o), ceil((i + 1) * size / o))`` from the roi's
    first cell, clipped to the map. An empty bin gives 0; ties go to the
    first cell in row-major order; NaN wins over numbers.

    Parameters
    ----------
    input : Tensor
        Feature map, ``[N, C, H, W]``, float32 or float64.
    boxes : Tensor or list of Tensor
        As for :func:`roi_align`.
    output_size : int or (int, int)
        Bins per roi ``(oh, ow)``.
    spatial_scale : float
        Maps box coordinates to feature-map cells.

    Returns
    -------
    Tensor
        ``[K, C, oh, ow]``, the dtype of ``input``.
    """
    return _ops().roi_pool(input, _rois(boxes), _pair(output_size),
                           spatial_scale=float(spatial_scale))


def nms_padded(boxes, scores, iou_threshold: float):
    """Non-maximum suppression with a fixed-size result (graph mode).

    Parameters
    ----------
    boxes : Tensor
        ``[N, 4]`` boxes ``(x1, y1, x2, y2)``, float32 or float64.
    scores : Tensor
        ``[N]`` scores, the dtype of ``boxes``.
    iou_threshold : float
        Boxes whose IoU with a kept box is strictly greater are dropped.

    Returns
    -------
    keep : Tensor
        ``[N]`` int64: the kept indices by decreasing score (ties: lower
        index first), then ``-1``.
    num_kept : Tensor
        ``[]`` int64: how many entries of ``keep`` are indices.
    """
    return _ops().nms_padded(boxes, scores, iou_threshold=float(iou_threshold))


def batched_nms_padded(boxes, scores, idxs, iou_threshold: float):
    """Per-category non-maximum suppression with a fixed-size result.

    As :func:`nms_padded`, but a box only suppresses boxes with the same
    ``idxs`` value (``[N]`` int64). ``keep`` is ordered by decreasing score
    across all categories.
    """
    return _ops().batched_nms_padded(boxes, scores, idxs,
                                     iou_threshold=float(iou_threshold))


def _slice_kept(keep, num_kept, name: str):
    if is_tracing():
        raise RuntimeError(
            f"{name}() returns a data-dependent number of boxes, which a "
            f"@dragon_core.function graph cannot hold; call {name}_padded() "
            "there and use keep[:num_kept] after the graph runs")
    return keep[:int(num_kept.item())]


def nms(boxes, scores, iou_threshold: float):
    """Non-maximum suppression (torchvision semantics), eager mode.

    Boxes are visited by decreasing score (ties: lower index first); a box
    is kept unless a kept box overlaps it with IoU > ``iou_threshold``.
    Areas use sides clamped at 0 (a reversed box has area 0, so IoU 0 with
    every box); a NaN score is never kept.

    Parameters
    ----------
    boxes, scores, iou_threshold
        As for :func:`nms_padded`.

    Returns
    -------
    Tensor
        int64 indices of the kept boxes, by decreasing score (ties: lower
        index first). Inside a graph use :func:`nms_padded`.
    """
    keep, num_kept = nms_padded(boxes, scores, iou_threshold)
    return _slice_kept(keep, num_kept, "nms")


def batched_nms(boxes, scores, idxs, iou_threshold: float):
    """Per-category non-maximum suppression (torchvision semantics), eager.

    Parameters
    ----------
    boxes, scores : Tensor
        ``[N, 4]`` boxes and ``[N]`` scores, as for :func:`nms_padded`.
    idxs : Tensor
        ``[N]`` int64 category of each box; boxes of different categories
        never suppress each other.
    iou_threshold : float
        As for :func:`nms`.

    Returns
    -------
    Tensor
        int64 indices of the kept boxes, by decreasing score across all
        categories. Inside a graph use :func:`batched_nms_padded`.
    """
    keep, num_kept = batched_nms_padded(boxes, scores, idxs, iou_threshold)
    return _slice_kept(keep, num_kept, "batched_nms")


# ------------------------------------------------------------ gradient rules


def _attrs(node, names):
    return {k: node.attrs[k] for k in names}


@gradient("RoiAlign")
def _roi_align_grad(node, dy):
    x, rois = node.inputs
    if not needs_grad(node, 0):
        return [None, None]
    return [_ops().roi_align_grad(x, rois, dy, **_attrs(node, _ALIGN_ATTRS)),
            None]


@gradient("RoiAlignGrad")
def _roi_align_grad_grad(node, ddx):
    _, rois, _ = node.inputs
    if node.attrs.get("mode", "avg") == "max":
        # RoiAlign(ddx) would select its own maxima, not x's.
        raise NotImplementedError(
            "RoiAlignGrad: second-order gradients of RoiAlign with mode='max' "
            "are not implemented (it is differentiable once)")
    return [None, None,
            _ops().roi_align(ddx, rois, **_attrs(node, _ALIGN_ATTRS))]


@gradient("RoiPool")
def _roi_pool_grad(node, dy):
    x, rois = node.inputs
    if not needs_grad(node, 0):
        return [None, None]
    return [_ops().roi_pool_grad(x, rois, dy, **_attrs(node, _POOL_ATTRS)),
            None]


@gradient("RoiPoolGrad")
def _roi_pool_grad_grad(node, ddx):
    x, rois, _ = node.inputs
    return [None, None,
            _ops().roi_pool_gather(x, rois, ddx, **_attrs(node, _POOL_ATTRS))]


@gradient("RoiPoolGather")
def _roi_pool_gather_grad(node, dy):
    x, rois, _ = node.inputs
    return [None, None,
            _ops().roi_pool_grad(x, rois, dy, **_attrs(node, _POOL_ATTRS))]
