"""Gradients of MaxPool3d and AvgPool3d (``src/ops/pool3d.cc``).

* ``MaxPool3d``: each output gradient goes to the cell its maximum came
  from (the ``indices`` output, read as a saved output): a ``ScatterAdd``
  into the flattened input, whose own gradient is a ``Gather``, so higher
  orders come free. No gradient through the selection itself.
* ``AvgPool3d`` is linear: ``AvgPool3dGrad`` applies its adjoint, and the
  adjoint of ``AvgPool3dGrad`` is ``AvgPool3d``.
"""

from __future__ import annotations

from .._autograd import gradient
from ._util import ops, py_attrs

_AVG = ("kernel_size", "strides", "pads", "ceil_mode", "count_include_pad")


@gradient("MaxPool3d", saved_outputs=(1,))
def _max_pool3d(node, dy, dindices):
    o = ops()
    x = node.inputs[0]
    n, c, d, h, w = x.shape
    vol = d * h * w
    base = o.reshape(o.arange(0, n * c * vol, max(vol, 1), dtype="int64",
                              device=str(x.device)), [n, c, 1, 1, 1])
    flat = o.reshape(node.saved[0] + base, [-1])
    zeros = o.fill([n * c * vol], 0.0, dy.dtype, device=str(dy.device))
    dx = o.scatter_add(zeros, flat, o.reshape(dy, [-1]), 0)
    return [o.reshape(dx, list(x.shape))]


@gradient("AvgPool3d")
def _avg_pool3d(node, dy):
    return [ops().avg_pool3d_grad(node.inputs[0], dy, **py_attrs(node, _AVG, "AvgPool3d", 3))]


@gradient("AvgPool3dGrad")
def _avg_pool3d_grad(node, ddx):
    return [None, ops().avg_pool3d(ddx, **py_attrs(node, _AVG, "AvgPool3d", 3))]
