"""Values to TensorBoard summary protos: scalars, histograms, PNG images.

Kept free of any dependency but NumPy and zlib: images are PNG-encoded
here (8-bit grey, grey+alpha, RGB or RGBA, no filtering), so summaries need
no imaging library.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

Bins = int | str | Sequence[float]

_IMAGE_FORMATS = ("CHW", "HWC", "HW")


def to_numpy(value: Any) -> np.ndarray:
    """A host NumPy array from a tensor, array, scalar or nested list."""
    from .._tensor import Tensor
    if isinstance(value, Tensor):
        if value.device.type != "cpu":
            value = value.cpu()
        arr = value.numpy()
        if arr.dtype.name == "bfloat16":
            arr = arr.astype(np.float32)
        return arr
    return np.asarray(value)


def scalar_value(tag: str, value: Any) -> float:
    """``value`` (a number, NumPy scalar, or one-element tensor/array) as a float."""
    if isinstance(value, (int, float, np.number, np.bool_)):
        return float(value)
    arr = to_numpy(value)
    if arr.size != 1 or arr.dtype.kind not in "biuf":
        raise ValueError(f"add_scalar('{tag}'): expected a number or a one-element tensor, "
                         f"got {type(value).__name__} of shape {tuple(arr.shape)} "
                         f"and dtype {arr.dtype}")
    return float(arr.reshape(()))


def histogram(tag: str, values: Any, bins: Bins, summary_pb2):
    """A ``HistogramProto`` of ``values`` (flattened, as float64)."""
    arr = to_numpy(values)
    if arr.dtype.kind not in "biuf":
        raise TypeError(f"add_histogram('{tag}'): values must be numeric, got dtype {arr.dtype}")
    arr = arr.astype(np.float64).reshape(-1)
    if arr.size == 0:
        raise ValueError(f"add_histogram('{tag}'): values are empty")
    finite = np.isfinite(arr)
    if not finite.all():
        raise ValueError(f"add_histogram('{tag}'): {int((~finite).sum())} of {arr.size} "
                         f"values are NaN or infinite")
    if isinstance(bins, (int, np.integer)) and bins < 1:
        raise ValueError(f"add_histogram('{tag}'): bins must be >= 1, got {bins}")
    counts, edges = np.histogram(arr, bins=bins)
    return summary_pb2.HistogramProto(
        min=float(arr.min()), max=float(arr.max()), num=float(arr.size),
        sum=float(arr.sum()), sum_squares=float(np.dot(arr, arr)),
        bucket_limit=[float(e) for e in edges[1:]],   # right edge of each bucket
        bucket=[float(c) for c in counts])


def image_hwc(tag: str, img: Any, dataformats: str) -> np.ndarray:
    """An image as a uint8 ``(height, width, channels)`` array.

    Floating-point images are taken to lie in [0, 1]; integer ones in
    [0, 255]. Values outside are clipped.
    """
    fmt = dataformats.upper()
    if fmt not in _IMAGE_FORMATS:
        raise ValueError(f"add_image('{tag}'): dataformats must be one of "
                         f"{', '.join(_IMAGE_FORMATS)}, got '{dataformats}'")
    arr = to_numpy(img)
    if arr.ndim != len(fmt):
        raise ValueError(f"add_image('{tag}'): dataformats '{fmt}' needs a {len(fmt)}-d "
                         f"image, got shape {tuple(arr.shape)}")
    if fmt == "HW":
        arr = arr[:, :, None]
    elif fmt == "CHW":
        arr = np.transpose(arr, (1, 2, 0))
    h, w, c = arr.shape
    if c not in (1, 2, 3, 4):
        raise ValueError(f"add_image('{tag}'): an image has 1 (grey), 2 (grey+alpha), "
                         f"3 (RGB) or 4 (RGBA) channels, got {c} (shape {tuple(arr.shape)} "
                         f"in '{fmt}' order)")
    if h == 0 or w == 0:
        raise ValueError(f"add_image('{tag}'): the image is empty ({h}x{w})")
    if arr.dtype.kind == "b":
        arr = arr.astype(np.uint8) * 255
    elif arr.dtype.kind == "f":
        arr = np.rint(np.clip(np.nan_to_num(arr.astype(np.float64)), 0.0, 1.0) * 255.0)
    elif arr.dtype.kind not in "iu":
        raise TypeError(f"add_image('{tag}'): pixels must be numeric, got dtype {arr.dtype}")
    return np.ascontiguousarray(np.clip(arr, 0, 255).astype(np.uint8))


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return (struct.pack(">I", len(data)) + kind + data
            + struct.pack(">I", zlib.crc32(kind + data)))


def encode_png(hwc: np.ndarray) -> bytes:
    """PNG bytes of a uint8 ``(height, width, channels)`` image, 1 to 4 channels."""
    h, w, c = hwc.shape
    color_type = {1: 0, 2: 4, 3: 2, 4: 6}[c]
    rows = np.zeros((h, 1 + w * c), dtype=np.uint8)   # filter byte 0 (None) per row
    rows[:, 1:] = hwc.reshape(h, w * c)
    ihdr = struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(rows.tobytes(), 6))
            + _png_chunk(b"IEND", b""))
