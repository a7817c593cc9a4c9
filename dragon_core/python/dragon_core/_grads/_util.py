"""Helpers shared by gradient rules."""

from __future__ import annotations


_OPS = []   # the dragon_core.ops module, imported on first use


def ops():
    """``dragon_core.ops`` (imported lazily: it imports this package). The
    rules call this once or more each, so the module is kept after the
    first call instead of running the import statement every time."""
    if not _OPS:
        from .. import ops as module
        _OPS.append(module)
    return _OPS[0]


_KERNELS: dict = {}   # (op, device type, dtype code) -> a kernel is registered


def eager_fused(op: str, t, dtype_code: int | None = None) -> bool:
    """Whether an eager rule may call the fused op ``op`` on tensors like
    ``t`` (its device, and its dtype or ``dtype_code``): not while tracing
    (a trace records the unfused chain, which the graph's pattern fusion
    rewrites together with its neighbours) and only where the device has a
    kernel for ``op`` in that dtype (otherwise the rule runs the chain)."""
    from .. import _C
    if _C._is_tracing():
        return False
    key = (op, t._device_name, t._dtype_code if dtype_code is None else dtype_code)
    ok = _KERNELS.get(key)
    if ok is None:
        ok = _KERNELS[key] = _C.selected_kernel(op, key[1], key[2]) is not None
    return ok


def py_pads(op: str, pads, n=None) -> tuple:
    """A node's ``pads`` attribute (the C++ layout of ``op``) -> the
    ``(before, after)`` pairs that ``dragon_core.ops`` functions take."""
    from .._opgen import pads_from_schema
    return pads_from_schema(op, pads, n)


def py_attrs(node, names, op: str, n=None) -> dict:
    """The attributes ``names`` of ``node`` as keyword arguments of an op
    function (``pads`` converted by :func:`py_pads`)."""
    return {k: py_pads(op, node.attrs[k], n) if k == "pads" else node.attrs[k]
            for k in names}


def unbroadcast(g, shape):
    """Sum ``g`` over the axes that broadcasting added or stretched so that
    it has ``shape`` (the inverse of NumPy broadcasting).

    Parameters
    ----------
    g : Tensor
        A gradient with the broadcast shape.
    shape : tuple of int
        The shape of the operand before broadcasting.

    Returns
    -------
    Tensor
        ``g`` itself when the shapes already agree, else a tensor of ``shape``.
    """
    shape = tuple(shape)
    if tuple(g.shape) == shape:
        return g
    o = ops()
    lead = g.ndim - len(shape)
    axes = list(range(lead))
    for i, d in enumerate(shape):
        if d == 1 and g.shape[lead + i] != 1:
            axes.append(lead + i)
    if axes:
        g = o.sum(g, axes, keepdims=True)
    if tuple(g.shape) != shape:
        g = o.reshape(g, list(shape))
    return g


def reduced_axes(axes, ndim: int) -> list:
    """The sorted, non-negative axes a reduction attribute names.

    Parameters
    ----------
    axes : list of int or None
        The ``axes`` attribute: None reduces every axis, ``[]`` none;
        negative axes count from the end.
    ndim : int
        Rank of the reduced input.

    Returns
    -------
    list of int
    """
    if axes is None:
        return list(range(ndim))
    return sorted(a % ndim for a in axes) if ndim else []


def kept_shape(shape, axes: list) -> list:
    """``shape`` with the ``axes`` (from :func:`reduced_axes`) set to 1: the
    shape a reduction produces with ``keepdims=True``."""
    return [1 if i in axes else d for i, d in enumerate(shape)]


def reduced_count(shape, axes: list) -> int:
    """How many elements each output of a reduction over ``axes`` combines."""
    n = 1
    for a in axes:
        n *= shape[a]
    return n


def keep_dims(y, shape, axes: list, keepdims: bool):
    """Give a reduction's result (or its gradient) ``y`` the keepdims shape,
    so that it broadcasts against the reduced input of ``shape``."""
    if keepdims or not axes:
        return y
    return ops().reshape(y, kept_shape(shape, axes))


def expand(y, shape, axes: list, keepdims: bool):
    """Broadcast a reduction's gradient ``y`` back to the input ``shape``
    (the adjoint of summing over ``axes``)."""
    y = keep_dims(y, shape, axes, keepdims)
    if tuple(y.shape) == tuple(shape):
        return y
    return ops().broadcast_to(y, list(shape))


def scalar_like(t, value: float):
    """A 0-d tensor holding ``value`` with the dtype and device of ``t``
    (a constant operand for ``where`` and friends, explicit about dtype)."""
    return ops().fill([], float(value), t.dtype, device=str(t.device))


def relu_grad(x, dy):
    """Relu's gradient: 0 where ``x <= 0``, else ``dy`` (a NaN ``x`` passes
    ``dy``), as one ``ReluGrad`` op (one pass; a NaN in ``dy`` stays blocked
    where ``x <= 0``, as PyTorch's threshold_backward). ``ReluGrad`` reads x
    only through ``x <= 0``, which agrees with ``relu(x) <= 0`` for every x
    (Relu keeps NaN): the pattern-fusion pass relies on it (docs/graph.md)."""
    return ops().relu_grad(x, dy)

def transpose_conv_adjoint_view(dy, geo: dict, output_padding, nd: int):
    """``(dy, geo)`` for the convolutions in a ConvTranspose{nd}d's rule.

    The rule convolves dy (the transpose's output gradient) with the op's
    geometry, which gives the input's size while ``output_padding < stride``
    on every axis. torch also allows ``stride <= output_padding < dilation``:
    then the convolution would cover ``output_padding // stride`` rows too
    many. The rows output_padding added (past the end padding) are read by
    no tap of the forward op, so each such axis gets ``pad_end -
    output_padding`` as its end padding, the rows beyond 0 cropped from dy
    first: the convolution then has the input's size exactly.
    """
    strides = geo["strides"]
    if all(int(output_padding[i]) < strides[i] for i in range(nd)):
        return dy, geo
    pads = [list(p) for p in geo["pads"]]
    starts, ends, axes = [], [], []
    for i in range(nd):
        op = int(output_padding[i])
        if op < strides[i]:
            continue
        end_pad = pads[i][1] - op
        if end_pad < 0:
            starts.append(0)
            ends.append(int(dy.shape[2 + i]) + end_pad)
            axes.append(2 + i)
            end_pad = 0
        pads[i][1] = end_pad
    if axes:
        dy = ops().slice(dy, starts, ends, axis=axes)
    return dy, dict(geo, pads=[tuple(p) for p in pads])
