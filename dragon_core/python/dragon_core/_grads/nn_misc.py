"""Gradients of Dropout and Embedding.

* ``Dropout``: ``dx = dy * mask``. The mask is random, so it cannot be
  recomputed from the input; the rule reads the op's ``mask`` output
  (``saved_outputs``). It is linear in ``dy`` and does not depend on ``x``,
  so higher orders are exact (and zero with respect to ``x``).
* ``Embedding``: the gradient of the table is the scatter-add of the rows of
  ``dy`` at the looked-up indices (repeated indices accumulate); the row
  ``padding_idx`` (when >= 0) gets zero. The indices get no gradient.
"""

from __future__ import annotations

from .._autograd import gradient
from ._util import ops, scalar_like


@gradient("Dropout", saved_outputs=(1,))
def _dropout(node, dy, dmask):
    return [dy * node.saved[0]]


@gradient("Embedding")
def _embedding(node, dy):
    o = ops()
    weight, indices = node.inputs
    rows, dim = weight.shape
    flat_idx = o.reshape(indices, [-1])
    flat_dy = o.reshape(dy, [-1, dim])
    zeros = o.fill([rows, dim], 0.0, dy.dtype, device=str(dy.device))
    dw = o.scatter_add(zeros, flat_idx, flat_dy, 0)
    pad = node.attrs["padding_idx"]
    if pad is not None and pad >= 0:
        row = o.reshape(o.arange(0, rows, device=str(dy.device)), [rows, 1])
        dw = o.where(row == pad, scalar_like(dw, 0.0), dw)
    return [dw, None]
