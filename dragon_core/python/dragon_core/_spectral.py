"""Spectral ops built on the DFT family (``Fft``, ``Ifft``, ``Rfft``,
``Irfft``; ``src/ops/fft.cc``): ONNX's ``DFT`` and ``STFT`` semantics, the
window generators and the mel filter bank.

Complex data is a trailing axis of size 2 (real, imaginary), as in ONNX.
They are re-exported by :mod:`dragon_core.ops`.
"""

from __future__ import annotations

import numpy as np


def _ops():
    from . import ops
    return ops


def _fail(op: str, msg: str):
    from .errors import InvalidArgumentError
    raise InvalidArgumentError(f"{op}: {msg}", op=op)


def _as_tensor(x):
    from ._tensor import Tensor, tensor
    return x if isinstance(x, Tensor) else tensor(x)


def _as_complex(x):
    """A signal with a trailing axis of size 1 (real) as complex (size 2)."""
    o = _ops()
    return o.concat([x, o.fill(list(x.shape), 0.0, x.dtype, device=str(x.device))], -1)


def dft(x, dft_length=None, axis: int = -2, inverse: bool = False, onesided: bool = False):
    """Discrete Fourier transform with ONNX ``DFT`` semantics.

    Parameters
    ----------
    x : Tensor
        Signal of shape ``[..., 1]`` (real) or ``[..., 2]`` (complex: real,
        imaginary), float dtype.
    dft_length : int, optional
        Transform length: the signal is cut or zero-padded to it along
        ``axis``. Default: the signal's length, or ``2 * (m - 1)`` for an
        inverse one-sided transform of ``m`` frequencies.
    axis : int
        Signal axis, counted over all axes of ``x`` (ONNX's convention); it
        may not be the last one. Default -2.
    inverse : bool
        Inverse transform (scaled by ``1 / dft_length``).
    onesided : bool
        Forward: return only the ``dft_length // 2 + 1`` non-negative
        frequencies. Inverse: the input holds those frequencies of a
        Hermitian spectrum and the output is real (``[..., 1]``), as
        ``numpy.fft.irfft``.

    Returns
    -------
    Tensor
        ``[..., 2]`` complex (or ``[..., 1]`` real for an inverse one-sided
        transform), ``x``'s dtype.
    """
    o = _ops()
    x = _as_tensor(x)
    rank = x.ndim
    if rank < 2 or x.shape[-1] not in (1, 2):
        _fail("DFT", f"the input must have rank >= 2 and a last axis of size 1 (real) or 2 "
                     f"(complex); got shape {list(x.shape)} ({x.dtype}, {x.device})")
    if not -rank <= axis < rank or axis % rank == rank - 1:
        _fail("DFT", f"axis {axis} must name a signal axis of shape {list(x.shape)}, in "
                     f"[{-rank}, {rank - 2}] or [-{rank}, -2] (not the last axis)")
    axis %= rank
    n = None if dft_length is None else int(dft_length)
    if n is not None and n < 1:
        _fail("DFT", f"dft_length must be at least 1, got {n}")
    if inverse:
        c = x if x.shape[-1] == 2 else _as_complex(x)
        if onesided:
            y = o.irfft(c, n, axis)
            return o.reshape(y, list(y.shape) + [1])
        return o.ifft(c, n, axis)
    if x.shape[-1] == 1:
        real = o.reshape(x, list(x.shape[:-1]))
        if onesided:
            return o.rfft(real, n, axis)
        return o.fft(_as_complex(x), n, axis)
    y = o.fft(x, n, axis)
    if onesided:
        ends = list(y.shape)
        ends[axis] = y.shape[axis] // 2 + 1
        y = o.slice(y, [0] * rank, ends, [1] * rank)
    return y


def stft(signal, frame_step: int, window=None, frame_length=None, onesided: bool = True):
    """Short-time Fourier transform with ONNX ``STFT`` semantics.

    Frames of ``frame_length`` samples start every ``frame_step`` samples
    (only whole frames: ``1 + (length - frame_length) // frame_step`` of
    them); each is multiplied by ``window`` and transformed.

    Parameters
    ----------
    signal : Tensor
        ``[batch, length, 1]`` (real) or ``[batch, length, 2]`` (complex).
    frame_step : int
        Samples between the starts of two frames, >= 1.
    window : Tensor, optional
        ``[frame_length]`` weights (e.g. :func:`hann_window`); default ones.
    frame_length : int, optional
        Samples per frame (the DFT length); default the window's length, or
        the signal's length when there is no window.
    onesided : bool
        Keep only the ``frame_length // 2 + 1`` non-negative frequencies.

    Returns
    -------
    Tensor
        ``[batch, frames, bins, 2]``, ``signal``'s dtype.
    """
    o = _ops()
    signal = _as_tensor(signal)
    where = f"(signal {list(signal.shape)} {signal.dtype} on {signal.device})"
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2):
        _fail("STFT", f"the signal must be [batch, length, 1 or 2] {where}")
    step = int(frame_step)
    if step < 1:
        _fail("STFT", f"frame_step must be at least 1, got {step} {where}")
    if window is not None:
        window = _as_tensor(window)
        if window.ndim != 1:
            _fail("STFT", f"the window must be 1-D, got shape {list(window.shape)} {where}")
    if frame_length is None:
        frame_length = window.shape[0] if window is not None else signal.shape[1]
    frame_length = int(frame_length)
    if window is not None and window.shape[0] != frame_length:
        _fail("STFT", f"the window has {window.shape[0]} samples, frame_length is "
                      f"{frame_length} {where}")
    length = signal.shape[1]
    if not 1 <= frame_length <= length:
        _fail("STFT", f"frame_length {frame_length} must be in [1, {length}] {where}")
    frames = 1 + (length - frame_length) // step
    index = (np.arange(frames)[:, None] * step + np.arange(frame_length)[None, :])
    from ._tensor import tensor
    x = o.gather(signal, tensor(index.astype(np.int64), device=str(signal.device)), 1)
    if window is not None:
        if window.dtype != signal.dtype:
            window = o.cast(window, signal.dtype)
        x = x * o.reshape(window, [1, 1, frame_length, 1])
    return dft(x, frame_length, 2, onesided=bool(onesided))


def _cosine_window(size: int, periodic: bool, coefs, dtype: str, device, op: str):
    size = int(size)
    if size < 0:
        _fail(op, f"size must be >= 0, got {size}")
    N = size if periodic else size - 1
    k = np.arange(size, dtype=np.float64)
    w = np.zeros(size)
    if N > 0:
        for i, c in enumerate(coefs):
            w += ((-1) ** i) * c * np.cos(i * 2 * np.pi * k / N)
    else:  # a symmetric window of one sample (N = 0): 1, as numpy.hanning(1)
        w[:] = 1.0
    from ._tensor import tensor
    out = tensor(w, device=device)
    return out if dtype == "float64" else _ops().cast(out, dtype)


def hann_window(size: int, periodic: bool = True, dtype: str = "float32", device=None):
    """Hann window (ONNX ``HannWindow``): ``0.5 - 0.5 cos(2 pi k / N)``,
    ``N = size`` when ``periodic`` (for spectral analysis), ``size - 1``
    otherwise (symmetric). Computed in float64, rounded once to ``dtype``.

    Parameters
    ----------
    size : int
        Number of samples, >= 0.
    periodic : bool
        Periodic (default) or symmetric window.
    dtype : str
        Output dtype.
    device : str, optional
        Output device.

    Returns
    -------
    Tensor
        ``[size]``.
    """
    return _cosine_window(size, periodic, (0.5, 0.5), dtype, device, "HannWindow")


def hamming_window(size: int, periodic: bool = True, dtype: str = "float32", device=None):
    """Hamming window (ONNX ``HammingWindow``): ``25/46 - 21/46 cos(2 pi k /
    N)``; ``N`` as in :func:`hann_window`.

    Parameters
    ----------
    size : int
        Number of samples, >= 0.
    periodic : bool
        Periodic (default) or symmetric window.
    dtype : str
        Output dtype.
    device : str, optional
        Output device.

    Returns
    -------
    Tensor
        ``[size]``.
    """
    return _cosine_window(size, periodic, (25.0 / 46.0, 21.0 / 46.0), dtype, device,
                          "HammingWindow")


def blackman_window(size: int, periodic: bool = True, dtype: str = "float32", device=None):
    """Blackman window (ONNX ``BlackmanWindow``): ``0.42 - 0.5 cos(2 pi k /
    N) + 0.08 cos(4 pi k / N)``; ``N`` as in :func:`hann_window`.

    Parameters
    ----------
    size : int
        Number of samples, >= 0.
    periodic : bool
        Periodic (default) or symmetric window.
    dtype : str
        Output dtype.
    device : str, optional
        Output device.

    Returns
    -------
    Tensor
        ``[size]``.
    """
    return _cosine_window(size, periodic, (0.42, 0.5, 0.08), dtype, device, "BlackmanWindow")


def mel_weight_matrix_values(num_mel_bins, dft_length, sample_rate, lower_edge_hertz,
                             upper_edge_hertz) -> np.ndarray:
    """The ONNX ``MelWeightMatrix`` as a float64 NumPy array
    ``[dft_length // 2 + 1, num_mel_bins]``; the arguments may be NumPy
    scalars (their dtypes take part in the arithmetic exactly as in ONNX's
    reference)."""
    num_mel_bins, dft_length = int(num_mel_bins), int(dft_length)
    if num_mel_bins < 1 or dft_length < 1 or sample_rate <= 0:
        _fail("MelWeightMatrix", f"num_mel_bins ({num_mel_bins}), dft_length ({dft_length}) "
                                 f"and sample_rate ({sample_rate}) must be positive")
    if not 0 <= lower_edge_hertz < upper_edge_hertz:
        _fail("MelWeightMatrix", f"need 0 <= lower_edge_hertz ({lower_edge_hertz}) < "
                                 f"upper_edge_hertz ({upper_edge_hertz})")
    bins = np.arange(0, num_mel_bins + 2)
    low = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    step = (high - low) / bins.shape[0]
    hz = 700 * np.expm1((bins * step + low) / 2595 * np.log(10))
    edges = (((dft_length + 1) * hz) // sample_rate).astype(np.int64)
    spectrogram_bins = dft_length // 2 + 1
    if edges.max() >= spectrogram_bins:
        _fail("MelWeightMatrix", f"upper_edge_hertz {upper_edge_hertz} lies above the "
                                 f"Nyquist frequency of sample_rate {sample_rate}")
    out = np.zeros((spectrogram_bins, num_mel_bins))
    for i in range(num_mel_bins):
        lo, mid, hi = edges[i], edges[i + 1], edges[i + 2]
        if mid == lo:
            out[mid, i] = 1.0
        else:
            j = np.arange(lo, mid + 1)
            out[j, i] = (j - lo) / float(mid - lo)
        if hi > mid:
            j = np.arange(mid, hi)
            out[j, i] = (hi - j) / float(hi - mid)
    return out


def mel_weight_matrix(num_mel_bins: int, dft_length: int, sample_rate: int,
                      lower_edge_hertz: float, upper_edge_hertz: float,
                      dtype: str = "float32", device=None):
    """Triangular mel filter bank (ONNX ``MelWeightMatrix``): a matrix that
    maps the ``dft_length // 2 + 1`` magnitudes of a one-sided spectrum to
    ``num_mel_bins`` mel bands between the two edge frequencies.

    Parameters
    ----------
    num_mel_bins : int
        Number of mel bands.
    dft_length : int
        DFT length of the spectrum the matrix applies to.
    sample_rate : int
        Samples per second of the signal.
    lower_edge_hertz, upper_edge_hertz : float
        Frequency range of the bands.
    dtype : str
        Output dtype.
    device : str, optional
        Output device.

    Returns
    -------
    Tensor
        ``[dft_length // 2 + 1, num_mel_bins]``.
    """
    from ._tensor import tensor
    w = mel_weight_matrix_values(num_mel_bins, dft_length, sample_rate,
                                 float(lower_edge_hertz), float(upper_edge_hertz))
    out = tensor(w, device=device)
    return out if dtype == "float64" else _ops().cast(out, dtype)
