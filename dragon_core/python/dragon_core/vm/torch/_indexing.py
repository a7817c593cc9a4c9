"""``Tensor.__getitem__`` / ``__setitem__`` with PyTorch's rules.

Basic indices (ints, slices with positive steps, ``None``, ``...``) give
views on the host outside autograd (NumPy views over the same memory), and
``dragon_core`` slice ops (copies, differentiable) otherwise. Advanced
indices (bool masks, integer tensors/lists, several of them broadcast
together) are turned into flat element positions on the host (the index
itself is never differentiable) and gathered, so the result is
differentiable w.r.t. the indexed tensor. Assignment writes the host memory
in place outside autograd, and while recording builds the new value as
``where(mask, scatter(value), x)`` so gradients flow to both sides.
"""

from __future__ import annotations

import numbers
import warnings

import numpy as np

from dragon_core import _C, ops as _ops

from . import _dtype as D
from ._tensor import (Tensor, _as_dg, _cast, _check_inplace_target, _grad_on, _host_view_ok,
                      _made_in_trace, _note_alias, _note_copy_view, _shared_memory_check,
                      _tracing, _w)

_INT64 = D.DTYPES["int64"]

def _np_c(arr):
    """``arr`` C-contiguous (keeps 0-d arrays 0-d, unlike ascontiguousarray)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")



def _is_advanced(k) -> bool:
    return isinstance(k, (Tensor, np.ndarray, list, tuple, range)) or (
        isinstance(k, bool))


def _np_key(key):
    """The key with tensors turned into NumPy arrays (for position maps)."""
    out = []
    for k in key:
        if isinstance(k, Tensor):
            a = k._t.cpu().numpy() if k._t._device_name != "cpu" else k._t.numpy()
            if a.dtype.kind == "f":
                raise IndexError(f"tensors used as indices must be long, int, byte or bool "
                                 f"tensors (got a {k.dtype} index of shape {list(k.shape)})")
            out.append(a if a.dtype != np.uint8 else a.astype(bool))
        elif isinstance(k, (list, tuple, range)):   # (a tuple inside the key: an index list)
            a = np.asarray(list(k))
            if a.size == 0 and a.dtype.kind == "f":   # x[[]]: no rows (NumPy's [] is float)
                a = a.astype(np.int64)
            out.append(a)
        elif isinstance(k, slice):
            if k.step is not None and int(k.step) <= 0:
                raise ValueError(f"step must be greater than zero (slice {k}; use "
                                 f"torch.flip for a reversed order)")
            out.append(slice(*(None if v is None else int(v) for v in (k.start, k.stop, k.step))))
        elif isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, bool):
            out.append(int(k))
        else:
            out.append(k)
    return tuple(out)


def _torch_order(nk):
    """Splits a NumPy key with advanced indices into (ints, rest) so that
    ``arr[ints][rest]`` follows torch's rule: integer indices are selects
    applied first (they never count as advanced indices, so they do not
    decide where the advanced result axes go, as NumPy's do:
    ``x[0, :, [0, 1]]`` has shape (n, 2) in torch and (2, n) in NumPy).
    Returns None when the key needs no split."""
    def is_int(k):
        return isinstance(k, int) and not isinstance(k, bool)
    if not any(is_int(k) for k in nk) or not any(
            isinstance(k, np.ndarray) or isinstance(k, bool) for k in nk):
        return None
    first, rest = [], []
    for k in nk:
        if is_int(k):
            first.append(k)
        elif k is None or isinstance(k, bool):
            rest.append(k)
        elif k is Ellipsis:
            first.append(k)
            rest.append(k)
        elif isinstance(k, np.ndarray) and k.dtype == bool:
            first.extend([slice(None)] * k.ndim)
            rest.append(k)
        else:
            first.append(slice(None))
            rest.append(k)
    return tuple(first), tuple(rest)


def _expand_ellipsis(nk, ndim):
    """``...`` replaced by the full slices it stands for: torch expands it
    before it places advanced-index axes, so an ``...`` that covers no axis
    does not separate two advanced indices (NumPy's does)."""
    if not any(k is Ellipsis for k in nk):
        return nk
    used = sum(k.ndim if isinstance(k, np.ndarray) and k.dtype == bool else
               0 if (k is None or k is Ellipsis or isinstance(k, bool)) else 1 for k in nk)
    out = []
    for k in nk:
        if k is Ellipsis:
            out.extend([slice(None)] * max(ndim - used, 0))
        else:
            out.append(k)
    return tuple(out)


def _split(nk, ndim):
    """(ints, rest) of :func:`_torch_order` with ``...`` expanded, or None."""
    if not any(isinstance(k, (np.ndarray, bool)) for k in nk):
        return None
    nk = _expand_ellipsis(nk, ndim)
    return _torch_order(nk) or ((), nk)


def _index(arr, nk):
    """``arr[nk]`` with torch's order of integer and advanced indices."""
    split = _split(nk, arr.ndim)
    return arr[nk] if split is None else arr[split[0]][split[1]]


def _normalize(key):
    """The key as a tuple. A list (not a tuple, tensor or array) shorter
    than 32 that holds a sequence, slice, tensor, None or ``...`` is a tuple
    of indices, torch's legacy rule (with its deprecation warning):
    ``x[[[0, 1], [1, 0]]]`` is ``x[[0, 1], [1, 0]]`` (shape [2, 4] of a
    [2, 3, 4] x), not an index array of shape [2, 2]."""
    if isinstance(key, tuple):
        return key
    if isinstance(key, list) and len(key) < 32 and any(
            k is None or k is Ellipsis or isinstance(k, (list, tuple, range, slice, Tensor,
                                                          np.ndarray)) for k in key):
        warnings.warn("Using a non-tuple sequence for multidimensional indexing is deprecated "
                      "(torch still reads it as a tuple of indices, and so does vm.torch); use "
                      "x[tuple(seq)] instead of x[seq]", UserWarning, stacklevel=3)
        return tuple(key)
    return (key,)


def _check_bounds(x, key):
    dim = 0
    for k in key:
        if k is None:
            continue
        if k is Ellipsis:
            dim = x.ndim - sum(1 for j in key if j is not None and j is not Ellipsis
                               and not (isinstance(j, np.ndarray) and j.dtype == bool)) + dim
            continue
        if isinstance(k, int) and dim < x.ndim:
            n = x.shape[dim]
            if not -n <= k < n:
                raise IndexError(f"index {k} is out of bounds for dimension {dim} with size {n}")
        if isinstance(k, np.ndarray) and k.dtype == bool:
            dim += k.ndim
        else:
            dim += 1


def getitem(x: Tensor, key):
    t = x._t
    key = _normalize(key)
    if any(isinstance(k, Tensor) and k.ndim == 0 and not k.dtype.is_floating_point
           and k.dtype.name != "bool" for k in key):
        key = tuple(int(k) if isinstance(k, Tensor) and k.ndim == 0 and k.dtype.name != "bool"
                    else k for k in key)
    advanced = any(_is_advanced(k) for k in key)
    nk = _np_key(key)
    if not advanced:
        _check_bounds(t, nk)
        if _host_view_ok(t):
            # a trailing Ellipsis keeps a 0-d result a view (not a scalar copy)
            view_key = nk if any(k is Ellipsis for k in nk) else nk + (Ellipsis,)
            return _note_alias(x, _w(_C.from_numpy(t.numpy()[view_key])))
        if not nk:
            return _w(t)
        out = _w(t[nk])
        if (t.requires_grad and _grad_on()) or _tracing():
            _note_copy_view(x, out)
        return out
    # advanced: flat positions of the selected elements, then one gather
    if _host_view_ok(t):
        return _w(_C._from_numpy_copy(_np_c(_index(t.numpy(), nk))))
    pos = _index(np.arange(int(t.size), dtype=np.int64).reshape(t.shape), nk)
    idx = _C._from_numpy_copy(_np_c(pos.reshape(-1)))
    if t._device_name != "cpu":
        idx = idx._to_device(str(t.device))
    out = _ops.gather(_ops.reshape(t, [-1]), idx, 0)
    return _w(_ops.reshape(out, list(pos.shape)))


def setitem(x: Tensor, key, value) -> None:
    t = x._t
    key = _normalize(key)
    # a 0-d integer tensor indexes as the int it holds (as in getitem)
    key = tuple(int(k) if isinstance(k, Tensor) and k.ndim == 0 and not k.dtype.is_floating_point
                and k.dtype.name != "bool" else k for k in key)
    nk = _np_key(key)
    _check_bounds(t, nk)
    dt = D.BY_CODE[t._dtype_code]
    int_arrays = any(_is_advanced(k) and not isinstance(k, bool) and not (
        isinstance(k, Tensor) and k.dtype.name in ("bool", "uint8")) and not (
        isinstance(k, np.ndarray) and k.dtype == bool) and not (
        isinstance(k, list) and k and all(isinstance(e, (bool, np.bool_)) for e in k))
        for k in key)
    n_adv = sum(1 for k in key if _is_advanced(k) and not isinstance(k, bool))
    if isinstance(value, Tensor) and value._t._dtype_code != t._dtype_code and (
            int_arrays or n_adv > 1 or n_adv == 1 and value.numel() != 1):
        # torch's index_put_ never casts the value (basic indices do, and one
        # bool mask with a one-element value, torch's masked_fill_ path)
        raise RuntimeError(f"Index put requires the source and destination dtypes match, "
                           f"got {D.BY_CODE[t._dtype_code].name.title()} for the destination "
                           f"and {value.dtype.name.title()} for the source.")
    recording = _grad_on() and (t.requires_grad or (isinstance(value, Tensor)
                                                    and value._t.requires_grad))
    if recording and t.requires_grad and t._grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    _check_inplace_target(x, "item assignment", recording)
    if not recording and not _tracing() and t._device_name == "cpu" and not t.is_read_only:
        arr = t.numpy()
        if isinstance(value, Tensor):
            v = value._t.cpu().numpy() if value._t._device_name != "cpu" else value._t.numpy()
        else:
            v = value
        if not dt.is_floating_point and isinstance(v, float) or (
                isinstance(v, np.ndarray) and v.dtype.kind == "f" and not dt.is_floating_point
                and dt.name != "bool"):
            v = np.trunc(v)
        split = _split(nk, arr.ndim)
        target = arr if split is not None else arr[nk]
        if isinstance(target, np.ndarray) and any(
                st == 0 and n > 1 for st, n in zip(target.strides, target.shape)):
            raise RuntimeError("unsupported operation: more than one element of the written-to "
                               "tensor refers to a single memory location. Please clone() the "
                               "tensor before performing the operation.")
        if split is None:
            if isinstance(value, Tensor) and isinstance(target, np.ndarray) and \
                    isinstance(v, np.ndarray) and v.shape == target.shape:
                # torch's copy_ overlap check (a broadcast value is never dense:
                # torch computes, as NumPy does here)
                from ._tensor import _check_pair_overlap
                _check_pair_overlap(target, v)
            arr[nk] = v
        else:
            arr[split[0]][split[1]] = v   # arr[ints] is a view: writes arr
        t._bump_version()   # autograd's check of the tensors it saved
        return
    if recording:
        _shared_memory_check(t, "item assignment")
    # functional: out = where(mask, scattered value, x)
    pos = _index(np.arange(int(t.size), dtype=np.int64).reshape(t.shape), nk)
    flat_pos = pos.reshape(-1)
    if isinstance(value, Tensor):
        v = _cast(value._t, dt)
    else:
        v = _as_dg(value, dt, t.device)
    v = _ops.reshape(_ops.broadcast_to(v, list(pos.shape)), [-1])
    # last write wins for repeated positions, as torch's CPU index_put_
    uniq, last = np.unique(flat_pos[::-1], return_index=True)
    keep = (len(flat_pos) - 1 - last).astype(np.int64)
    if len(keep) != len(flat_pos):
        v = _ops.gather(v, _as_dg(keep, _INT64, t.device), 0)
        flat_pos = uniq
    mask = np.zeros(int(t.size), dtype=bool)
    mask[flat_pos] = True
    flat = _ops.reshape(t, [-1])
    zeros = _ops.mul(flat, _as_dg(0, dt))
    scattered = _ops.scatter_add(zeros, _as_dg(flat_pos, _INT64, t.device), v, 0)
    out = _ops.where(_as_dg(mask, D.DTYPES["bool"], t.device), scattered, flat)
    out = _ops.reshape(out, list(t.shape))
    if _tracing() and not _made_in_trace(t):
        t.assign(out)   # captured state: the graph updates it
    else:
        x._t = out
