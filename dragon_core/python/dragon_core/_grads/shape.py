"""Gradients of the shape ops.

Views (Reshape, Squeeze, Unsqueeze, Flatten) reshape the gradient back;
Transpose applies the inverse permutation; BroadcastTo sums the broadcast
axes away; Concat, Stack and Split exchange split and concat. The selecting
ops (Slice, Gather, Pad) send every output gradient back to the input
element it was read from: Gather and ScatterAdd are each other's adjoints,
and Slice and Pad are written with them (or with each other) through index
maps built with NumPy, so repeated reads accumulate exactly.
"""

from __future__ import annotations

import numpy as np

from .._autograd import gradient
from ._util import ops, scalar_like, unbroadcast


def _zeros(shape, like):
    """Zeros of ``shape`` with the dtype and device of ``like``."""
    return ops().fill(list(shape), 0.0, like.dtype, device=str(like.device))


def _index(values, like):
    """An int64 index tensor on the device of ``like``."""
    from .. import tensor
    return tensor(np.asarray(values, dtype=np.int64).reshape(-1), device=str(like.device))


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


def _reshape_back(node, dy):
    return [ops().reshape(dy, list(node.inputs[0].shape))]


for _name in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
    gradient(_name)(_reshape_back)


@gradient("Contiguous")
def _contiguous(node, dy):
    return [dy]


@gradient("Transpose")
def _transpose(node, dy):
    perm = node.attrs["perm"]
    if perm is None:
        perm = list(range(node.inputs[0].ndim))[::-1]
    rank = len(perm)
    inverse = np.argsort([_axis(p, rank) for p in perm])
    return [ops().transpose(dy, [int(p) for p in inverse])]


@gradient("BroadcastTo")
def _broadcast_to(node, dy):
    return [unbroadcast(dy, node.inputs[0].shape)]


@gradient("Concat")
def _concat(node, dy):
    axis = _axis(node.attrs["axis"], dy.ndim)
    sizes = [x.shape[axis] for x in node.inputs]
    return list(ops().split(dy, sizes, axis))


@gradient("Stack")
def _stack(node, dy):
    axis = _axis(node.attrs["axis"], dy.ndim)
    parts = ops().split(dy, [1] * len(node.inputs), axis)
    return [ops().reshape(p, list(x.shape)) for p, x in zip(parts, node.inputs)]


@gradient("Split")
def _split(node, *dys):
    axis = _axis(node.attrs["axis"], node.inputs[0].ndim)
    return [ops().concat(list(dys), axis)]


@gradient("Gather")
def _gather(node, dy):
    x, indices = node.inputs
    axis = node.attrs["axis"]
    return [ops().scatter_add(_zeros(x.shape, dy), indices, dy, axis), None]


@gradient("ScatterAdd")
def _scatter_add(node, dy):
    indices = node.inputs[1]
    axis = node.attrs["axis"]
    return [dy, None, ops().gather(dy, indices, axis)]


def _place(g, positions, size, axis):
    """Scatter ``g`` along ``axis`` into zeros of length ``size`` there, at
    ``positions`` (one per entry of g along axis; repeats accumulate)."""
    shape = list(g.shape)
    shape[axis] = size
    return ops().scatter_add(_zeros(shape, g), _index(positions, g), g, axis)


@gradient("Slice")
def _slice(node, dy):
    x = node.inputs[0]
    attrs = node.attrs
    k = len(attrs["starts"])
    axes = attrs["axes"] if attrs["axes"] is not None else list(range(k))
    pads = [[0, 0] for _ in range(x.ndim)]  # (before, after) per axis
    g = dy
    for start, stop, step, axis in zip(attrs["starts"], attrs["ends"], attrs["steps"], axes):
        axis = _axis(axis, x.ndim)
        n = x.shape[axis]
        picked = range(*slice(start, stop, step).indices(n))
        if len(picked) == n and step == 1:
            continue
        if step == 1:  # a contiguous run: padded back with zeros below
            before = picked[0] if len(picked) else 0
            pads[axis] = [before, n - before - len(picked)]
        else:
            g = _place(g, list(picked), n, axis)
    if any(b or a for b, a in pads):
        g = ops().pad(g, pads)
    return [g]


@gradient("Pad")
def _pad(node, dy):
    x = node.inputs[0]
    pads = node.attrs["pads"]
    mode = node.attrs["mode"]
    if mode == "constant":
        starts = [pads[2 * d] for d in range(x.ndim)]
        ends = [s + n for s, n in zip(starts, x.shape)]
        return [ops().slice(dy, starts, ends, [1] * x.ndim)]
    # Edge and reflect padding copy input cells along each axis in turn, so
    # y = x[src_0(i0), src_1(i1), ...]: scatter back one axis at a time.
    g = dy
    for d in range(x.ndim):
        before, after = pads[2 * d], pads[2 * d + 1]
        if before == 0 and after == 0:
            continue
        n = x.shape[d]
        source = np.pad(np.arange(n), (before, after), mode=mode)
        g = _place(g, source, n, d)
    return [g]


@gradient("ScatterReduce")
def _scatter_reduce(node, dy):
    """Gradient of ScatterReduce (y = x with updates reduced in at indices).

    * ``add``: ``dx = dy``, ``dupdates = gather(dy)`` (as ScatterAdd).
    * ``max`` / ``min``: the gradient of each output goes to the values that
      hold the extremum (x's element and/or the updates reduced into it);
      when several tie it is split evenly among them, as for Max / Min.
    * ``mul``: ``dx = dy * (product of the updates at x's position)`` and
      ``dupdates[i] = dy * (product of every other factor at its position)``,
      computed without dividing by zero (factors that are 0 are counted
      apart), so inputs holding zeros get their exact gradient.
    """
    o = ops()
    x, indices, upd = node.inputs
    axis = node.attrs["axis"]
    red = node.attrs["reduction"]
    if red == "add":
        return [dy, None, o.gather(dy, indices, axis)]
    zero, one = scalar_like(dy, 0.0), scalar_like(dy, 1.0)
    if red in ("max", "min"):
        y = o.scatter_reduce(x, indices, upd, axis, red)
        hit_x = o.where(x == y, one, zero)
        hit_u = o.where(upd == o.gather(y, indices, axis), one, zero)
        count = o.scatter_add(hit_x, indices, hit_u, axis)
        share = dy / o.where(count > 0, count, one)
        return [share * hit_x, None, o.gather(share, indices, axis) * hit_u]
    # mul
    ones_x = o.fill(list(x.shape), 1.0, x.dtype, device=str(x.device))
    dx = dy * o.scatter_reduce(ones_x, indices, upd, axis, "mul")
    zx, zu = x == 0, upd == 0
    nonzero = o.scatter_reduce(o.where(zx, one, x), indices, o.where(zu, one, upd), axis, "mul")
    zeros = o.scatter_add(o.where(zx, one, zero), indices, o.where(zu, one, zero), axis)
    g = o.gather(nonzero * dy, indices, axis)
    z = o.gather(zeros, indices, axis)
    others_nonzero = o.where(z == 0, g / o.where(zu, one, upd), zero)
    dupd = o.where(zu, o.where(z == 1, g, zero), others_nonzero)
    return [dx, None, dupd]
