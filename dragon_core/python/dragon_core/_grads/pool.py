"""Gradients of the 2-D pooling ops (MaxPool2d, AvgPool2d,
AdaptiveAvgPool2d) and of the helper ops their gradients use.

* ``MaxPool2d``: ``MaxPool2dGrad(x, dy)`` adds each output gradient to the
  cell its window's maximum came from, the first such cell in row-major
  window order on ties, so the result is deterministic. ``MaxPool2dGrad`` is
  linear in ``dy``; its adjoint reads the second-order gradient back at
  those cells (``MaxPool2dIndices`` + ``gather``). With respect to ``x`` the
  selection is piecewise constant: no gradient.
* ``AvgPool2d`` and ``AdaptiveAvgPool2d`` are linear maps: their gradient
  ops apply the adjoint, and the adjoint of each gradient op is the pooling
  op itself, so every order is exact.
"""

from __future__ import annotations

from .._autograd import gradient
from ._util import ops, py_attrs

_MAX_ATTRS = ("kernel_size", "strides", "pads", "dilations", "ceil_mode")
_AVG_ATTRS = ("kernel_size", "strides", "pads", "ceil_mode", "count_include_pad")


def _attrs(node, names):
    return py_attrs(node, names, "MaxPool2d", 2)


@gradient("MaxPool2d")
def _max_pool2d(node, dy):
    x = node.inputs[0]
    return [ops().max_pool2d_grad(x, dy, **_attrs(node, _MAX_ATTRS))]


@gradient("MaxPool2dGrad")
def _max_pool2d_grad(node, ddx):
    o = ops()
    x = node.inputs[0]
    n, c, h, w = x.shape
    idx = o.max_pool2d_indices(x, **_attrs(node, _MAX_ATTRS))
    # In-plane indices made global over the flattened tensor.
    base = o.reshape(o.arange(0, n * c * h * w, h * w, dtype="int64",
                              device=str(x.device)), [n, c, 1, 1])
    flat = o.reshape(idx + base, [-1])
    picked = o.gather(o.reshape(ddx, [-1]), flat, 0)
    return [None, o.reshape(picked, list(idx.shape))]


@gradient("AvgPool2d")
def _avg_pool2d(node, dy):
    x = node.inputs[0]
    return [ops().avg_pool2d_grad(x, dy, **_attrs(node, _AVG_ATTRS))]


@gradient("AvgPool2dGrad")
def _avg_pool2d_grad(node, ddx):
    return [None, ops().avg_pool2d(ddx, **_attrs(node, _AVG_ATTRS))]


@gradient("AdaptiveAvgPool2d")
def _adaptive_avg_pool2d(node, dy):
    x = node.inputs[0]
    return [ops().adaptive_avg_pool2d_grad(x, dy, node.attrs["output_size"])]


@gradient("AdaptiveAvgPool2dGrad")
def _adaptive_avg_pool2d_grad(node, ddx):
    return [None, ops().adaptive_avg_pool2d(ddx, node.attrs["output_size"])]
