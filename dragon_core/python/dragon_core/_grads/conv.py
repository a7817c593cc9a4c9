"""Gradients of Conv2d, ConvTranspose2d and Conv2dBackpropFilter.

The three ops share one geometry (strides, pads, dilations, groups) and
are bilinear: with ``A(w)`` the convolution by filter ``w``,

* ``Conv2d(x, w)            = A(w) x``
* ``ConvTranspose2d(x, w)   = A(w)^T x`` (the adjoint)
* ``Conv2dBackpropFilter(x, dy)`` is the ``w`` with ``<w, G> = <dy, A(G) x>``
  for every filter ``G``.

So the gradient of each one is made of the others, and the set is closed
under differentiation (second and higher orders need no new op):

=====================  ===========================  =============================
op                      d/d input 0                  d/d input 1
=====================  ===========================  =============================
Conv2d(x, w)            ConvTranspose2d(dy, w)       Conv2dBackpropFilter(x, dy)
ConvTranspose2d(x, w)   Conv2d(dy, w)                Conv2dBackpropFilter(dy, x)
Conv2dBackpropFilter    ConvTranspose2d(dy, G)       Conv2d(x, G)
=====================  ===========================  =============================

(``G`` is the gradient arriving at the filter output.) A ConvTranspose2d
that maps back onto a Conv2d input gets the ``output_padding`` that
recovers the exact input size: the rows the forward convolution's stride
left uncovered. A bias gradient is the output gradient summed over the
batch and spatial axes.
"""

from .._autograd import gradient, needs_grad
from ._util import ops, py_pads, relu_grad, transpose_conv_adjoint_view


def _geometry(node) -> dict:
    """The geometry attributes shared by the three ops (``pads`` as the
    ``(before, after)`` pairs the op functions take)."""
    a = node.attrs
    return {"strides": list(a["strides"]), "pads": py_pads("Conv2d", a["pads"], 2),
            "dilations": list(a["dilations"]), "groups": int(a["groups"])}


def _output_padding(image_shape, window_shape, kernel, geo) -> list:
    """``output_padding`` for a ConvTranspose2d from ``window_shape`` back to
    the spatial size of ``image_shape`` (both NCHW)."""
    pads = geo["pads"]
    out = []
    for i in range(2):
        covered = ((window_shape[2 + i] - 1) * geo["strides"][i] - pads[i][0]
                   - pads[i][1] + geo["dilations"][i] * (kernel[i] - 1) + 1)
        out.append(int(image_shape[2 + i] - covered))
    return out


def _input_grad(dy, w, x_shape, geo):
    """Gradient of Conv2d(x, w) with respect to x: its adjoint applied to
    dy, sized back to ``x_shape``."""
    pad = _output_padding(x_shape, dy.shape, w.shape[2:], geo)
    return ops().conv_transpose2d(dy, w, output_padding=pad, **geo)


def _bias_grad(node, dy):
    """The bias gradient when the op was given a bias, else nothing."""
    if len(node.inputs) < 3:
        return []
    return [ops().sum(dy, [0, 2, 3]) if needs_grad(node, 2) else None]


@gradient("Conv2d")
def _conv2d(node, dy):
    return _conv2d_grads(node, dy, _geometry(node))


def _conv2d_grads(node, dy, geo):
    """[dx, dw(, db)] of conv2d(x, w(, b)) (the node's inputs) for dy."""
    x, w = node.inputs[0], node.inputs[1]
    # The network's input rarely needs a gradient: skip that convolution.
    dx = _input_grad(dy, w, x.shape, geo) if needs_grad(node, 0) else None
    dw = ops().conv2d_backprop_filter(x, dy, list(w.shape), **geo) \
        if needs_grad(node, 1) else None
    return [dx, dw] + _bias_grad(node, dy)


@gradient("ConvTranspose2d")
def _conv_transpose2d(node, dy):
    x, w = node.inputs[0], node.inputs[1]
    db = _bias_grad(node, dy)
    dy, geo = transpose_conv_adjoint_view(dy, _geometry(node),
                                          node.attrs["output_padding"], 2)
    dx = ops().conv2d(dy, w, **geo) if needs_grad(node, 0) else None
    dw = ops().conv2d_backprop_filter(dy, x, list(w.shape), **geo) \
        if needs_grad(node, 1) else None
    return [dx, dw] + db


@gradient("Conv2dBackpropFilter")
def _conv2d_backprop_filter(node, g):
    x, dy = node.inputs
    geo = _geometry(node)
    return [_input_grad(dy, g, x.shape, geo), ops().conv2d(x, g, **geo)]


@gradient("Conv2dBiasAct")
def _conv2d_bias_act(node, dy):
    # The node keeps no outputs, so the activation's mask is recomputed from
    # the pre-activation conv2d(x, w) + b. The fusion pass writes this op
    # into graphs whose backward is already built, so the cost is paid only
    # when the fused op is differentiated directly.
    geo = _geometry(node)
    if node.attrs["activation"] == "relu":
        dy = relu_grad(ops().conv2d(*node.inputs, **geo), dy)
    return _conv2d_grads(node, dy, geo)
