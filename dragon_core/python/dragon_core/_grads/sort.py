"""Gradients of CumSum, Sort and TopK (``src/ops/sort.cc``).

* ``CumSum``: the adjoint of a cumulative sum is the cumulative sum in the
  other direction: ``dx = cumsum(dy, axis, exclusive, reverse=not reverse)``.
* ``Sort`` and ``TopK``: each output value is one input element, so ``dx``
  is ``dvalues`` scattered back to the positions the ``indices`` output
  names (zeros where TopK took nothing). The positions become flat offsets
  into ``x`` and the scatter is a ``ScatterAdd`` on the flattened gradient,
  whose own gradient is a ``Gather``: higher orders come free. The indices
  are an output of the op (int64, no gradient), read as a saved output.

ArgSort, NonZero and Unique are not differentiable (integer outputs, or
values that are a selection whose size depends on the data).
"""

from __future__ import annotations

import numpy as np

from .._autograd import gradient
from ._util import ops


@gradient("CumSum")
def _cumsum(node, dy):
    a = node.attrs
    return [ops().cumsum(dy, a["axis"], exclusive=a["exclusive"], reverse=not a["reverse"])]


def _scatter_along_axis(dvalues, indices, x_shape, axis):
    """dx of x_shape with dx[..., indices[i], ...] += dvalues[i] along axis."""
    o = ops()
    x_shape = list(x_shape)
    numel = int(np.prod(x_shape, dtype=np.int64))
    zeros = o.fill([numel], 0.0, dvalues.dtype, device=str(dvalues.device))
    if not x_shape:  # 0-d: the single element maps to itself
        return o.reshape(o.reshape(dvalues, [1]) + zeros, [])
    axis %= len(x_shape)
    inner = int(np.prod(x_shape[axis + 1:], dtype=np.int64))
    dim = x_shape[axis]
    sel = list(indices.shape)
    # Offset of every selected position without its axis coordinate.
    outer_ix = np.arange(int(np.prod(sel[:axis], dtype=np.int64)), dtype=np.int64)
    inner_ix = np.arange(inner, dtype=np.int64)
    base = (outer_ix[:, None, None] * (dim * inner)
            + inner_ix[None, None, :]) * np.ones((1, sel[axis], 1), np.int64)
    base = o.reshape(_index(base, dvalues), sel)
    flat = indices * inner + base
    dx = o.scatter_add(zeros, o.reshape(flat, [-1]), o.reshape(dvalues, [-1]), 0)
    return o.reshape(dx, x_shape)


def _index(values, like):
    """An int64 tensor (flattened) on the device of ``like``."""
    from .. import tensor
    return tensor(np.asarray(values, dtype=np.int64).reshape(-1), device=str(like.device))


@gradient("Sort", saved_outputs=(1,))
def _sort(node, dvalues, dindices):
    x = node.inputs[0]
    return [_scatter_along_axis(dvalues, node.saved[0], x.shape, node.attrs["axis"])]


@gradient("TopK", saved_outputs=(1,))
def _topk(node, dvalues, dindices):
    x = node.inputs[0]
    return [_scatter_along_axis(dvalues, node.saved[0], x.shape, node.attrs["axis"])]
