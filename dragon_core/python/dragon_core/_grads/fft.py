"""Gradients of the DFT family (``src/ops/fft.cc``).

Every transform is linear. The adjoint of a length-``n`` DFT scaled by ``s``
is the DFT of the other direction scaled by the same ``s``, which is that
transform with ``norm`` "backward" and "forward" swapped ("ortho" stays).
Cutting or zero-padding the input to ``n`` has as adjoint padding or cutting
the gradient back to the input's length. So:

* ``Fft`` / ``Ifft``: ``dx = resize(ifft / fft(dy, n, axis, swapped norm))``.
* ``Rfft``: the one-sided ``dy`` extended with zeros to ``n`` frequencies,
  transformed back (``ifft``, swapped norm), its real part, resized.
* ``Irfft``: ``dx[k] = w[k] * rfft(dy, n, axis, swapped norm)[k]``, where
  ``w`` is 2 for the frequencies that stand for a conjugate pair and 1 for
  the zero and (even ``n``) the n/2 frequency, whose imaginary parts the op
  ignores (gradient 0); then resized to the input's frequency count.

The rules are compositions of the same ops plus Slice/Concat/Mul, so higher
orders come free.
"""

from __future__ import annotations

import numpy as np

from .._autograd import gradient
from ._util import ops

_SWAP = {"backward": "forward", "forward": "backward", "ortho": "ortho"}


def _resize(g, axis: int, size: int):
    """``g`` cut, or padded with zeros, to ``size`` along ``axis``."""
    o = ops()
    have = g.shape[axis]
    if have == size:
        return g
    if have > size:
        starts = [0] * g.ndim
        ends = list(g.shape)
        ends[axis] = size
        return o.slice(g, starts, ends, [1] * g.ndim)
    shape = list(g.shape)
    shape[axis] = size - have
    zeros = o.fill(shape, 0.0, g.dtype, device=str(g.device))
    return o.concat([g, zeros], axis)


def _complex_axis(node) -> int:
    return node.attrs["axis"] % (node.inputs[0].ndim - 1)


@gradient("Fft")
def _fft(node, dy):
    a, axis = node.attrs, _complex_axis(node)
    g = ops().ifft(dy, dy.shape[axis], axis, _SWAP[a["norm"]])
    return [_resize(g, axis, node.inputs[0].shape[axis])]


@gradient("Ifft")
def _ifft(node, dy):
    a, axis = node.attrs, _complex_axis(node)
    g = ops().fft(dy, dy.shape[axis], axis, _SWAP[a["norm"]])
    return [_resize(g, axis, node.inputs[0].shape[axis])]


@gradient("Rfft")
def _rfft(node, dy):
    o, a, x = ops(), node.attrs, node.inputs[0]
    axis = a["axis"] % x.ndim
    n = a["n"] if a["n"] is not None else x.shape[axis]
    full = _resize(dy, axis, n)                      # zeros for k > n // 2
    g = o.ifft(full, n, axis, _SWAP[a["norm"]])
    re = o.slice(g, [0], [1], [1], [g.ndim - 1])
    re = o.reshape(re, list(g.shape[:-1]))
    return [_resize(re, axis, x.shape[axis])]


@gradient("Irfft")
def _irfft(node, dy):
    o, a, x = ops(), node.attrs, node.inputs[0]
    axis = _complex_axis(node)
    n = dy.shape[axis]
    r = o.rfft(dy, n, axis, _SWAP[a["norm"]])        # [..., n // 2 + 1, ..., 2]
    count = n // 2 + 1
    w = np.full((count, 2), 2.0, dtype=np.float32)
    w[0] = [1.0, 0.0]
    if n % 2 == 0:
        w[-1] = [1.0, 0.0]
    w = w.reshape([count] + [1] * (r.ndim - axis - 2) + [2])
    from .. import tensor
    wt = o.cast(tensor(w, device=str(dy.device)), r.dtype)
    return [_resize(r * wt, axis, x.shape[axis])]
