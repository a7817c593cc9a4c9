"""Gradients of Conv3d, ConvTranspose3d and Conv3dBackpropFilter: the same
closed set as the 2-D ops (see ``conv.py``), with three spatial axes.

=====================  ===========================  =============================
op                      d/d input 0                  d/d input 1
=====================  ===========================  =============================
Conv3d(x, w)            ConvTranspose3d(dy, w)       Conv3dBackpropFilter(x, dy)
ConvTranspose3d(x, w)   Conv3d(dy, w)                Conv3dBackpropFilter(dy, x)
Conv3dBackpropFilter    ConvTranspose3d(dy, G)       Conv3d(x, G)
=====================  ===========================  =============================
"""

from .._autograd import gradient, needs_grad
from ._util import ops, py_pads, transpose_conv_adjoint_view


def _geometry(node) -> dict:
    a = node.attrs
    return {"strides": list(a["strides"]), "pads": py_pads("Conv3d", a["pads"], 3),
            "dilations": list(a["dilations"]), "groups": int(a["groups"])}


def _input_grad(dy, w, x_shape, geo):
    """ConvTranspose3d of dy back to the spatial size of x_shape."""
    pads = geo["pads"]
    out_pad = []
    for i in range(3):
        covered = ((dy.shape[2 + i] - 1) * geo["strides"][i] - pads[i][0] - pads[i][1]
                   + geo["dilations"][i] * (w.shape[2 + i] - 1) + 1)
        out_pad.append(int(x_shape[2 + i] - covered))
    return ops().conv_transpose3d(dy, w, output_padding=out_pad, **geo)


def _bias_grad(node, dy):
    if len(node.inputs) < 3:
        return []
    return [ops().sum(dy, [0, 2, 3, 4]) if needs_grad(node, 2) else None]


@gradient("Conv3d")
def _conv3d(node, dy):
    x, w = node.inputs[0], node.inputs[1]
    geo = _geometry(node)
    dx = _input_grad(dy, w, x.shape, geo) if needs_grad(node, 0) else None
    dw = ops().conv3d_backprop_filter(x, dy, list(w.shape), **geo) \
        if needs_grad(node, 1) else None
    return [dx, dw] + _bias_grad(node, dy)


@gradient("ConvTranspose3d")
def _conv_transpose3d(node, dy):
    x, w = node.inputs[0], node.inputs[1]
    db = _bias_grad(node, dy)
    dy, geo = transpose_conv_adjoint_view(dy, _geometry(node),
                                          node.attrs["output_padding"], 3)
    dx = ops().conv3d(dy, w, **geo) if needs_grad(node, 0) else None
    dw = ops().conv3d_backprop_filter(dy, x, list(w.shape), **geo) \
        if needs_grad(node, 1) else None
    return [dx, dw] + db


@gradient("Conv3dBackpropFilter")
def _conv3d_backprop_filter(node, g):
    x, dy = node.inputs
    geo = _geometry(node)
    return [_input_grad(dy, g, x.shape, geo), ops().conv3d(x, g, **geo)]
