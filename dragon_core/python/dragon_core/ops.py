"""Every op of the schema registry as a Python function.

``dragon_core.ops.<name>`` is generated at import from the schemas defined by
the core and by plugins (see ``docs/ops.md``); a plugin loaded later with
:func:`dragon_core.load_library` adds its ops here. A few conveniences
(``fill``, ``zeros``, ``ones``, ``full``, ``arange``, ``split`` with an int,
``index_select``, ``take``) are written by hand below.
"""

from __future__ import annotations

import difflib as _difflib
import numbers as _numbers

import numpy as _np

from . import _C
from . import _opgen


def _override(fn):
    fn._dragon_override = True
    return fn


def _refresh():
    """Regenerate functions for ops defined since the last call."""
    return _opgen.generate(globals())


def _creation_dtype(fn: str, shape, dtype, default="float32"):
    """The dtype argument of a creation function, checked: an int is a
    misplaced dimension (``zeros(2, 3)``), never a dtype code."""
    from ._dtypes import dtype_arg
    if dtype is None:
        dtype = default
    if isinstance(dtype, _numbers.Integral) and not isinstance(dtype, bool):
        msg = (f"{fn}: dtype must be a dtype (e.g. 'float32' or dragon_core.int64), got the "
               f"int {dtype}")
        if isinstance(shape, _numbers.Integral):
            msg += (f"; the shape is one argument, a sequence: {fn}(({shape}, {dtype})), "
                    f"not {fn}({shape}, {dtype})")
        raise TypeError(msg)
    return dtype_arg(dtype, f"{fn}: dtype")


@_override
def fill(shape, value=0.0, dtype="float32", int_value=None, *, device=None):
    """A tensor of the given shape with every element equal to ``value``.

    Parameters
    ----------
    shape : int or sequence of int
        Output shape.
    value : int, float or bool, default 0.0
        The value; it must be a value of ``dtype`` (an integer in range for
        integer dtypes, 0 or 1 for bool, no overflow for float dtypes). An
        int for an integer dtype is exact over the whole int64 range.
    dtype : dtype, default "float32"
        Output dtype.
    int_value : int, optional
        The exact value for an integer or bool dtype (``value`` is then
        ignored); ``value`` given as an int sets it.
    device : str, optional
        Where to create the result (default: the host, 'cpu').

    Returns
    -------
    Tensor

    Raises
    ------
    InvalidArgumentError
        If ``value`` is not a value of ``dtype``.
    """
    dt = _creation_dtype("fill", shape, dtype)
    if isinstance(value, _np.generic):
        value = value.item()
    if isinstance(value, _numbers.Integral) and int_value is None:
        if dt.is_floating_point:
            value = float(value)  # rounds to the float dtype, as a cast does
        else:
            # Exact: a float64 would round int64 values past 2**53.
            int_value = int(value)
            value = float(int_value)
    return _fill_op(shape, value, dt, int_value, device=device)


@_override
def zeros(shape, dtype="float32", *, device=None):
    """A tensor of zeros.

    Parameters
    ----------
    shape : int or sequence of int
        ``zeros((2, 3))``; ``zeros(2, 3)`` is an error (3 is not a dtype).
    dtype : dtype, default "float32"
    device : str, optional

    Returns
    -------
    Tensor
    """
    return fill(shape, 0, _creation_dtype("zeros", shape, dtype), device=device)


@_override
def ones(shape, dtype="float32", *, device=None):
    """A tensor of ones (see :func:`zeros`)."""
    return fill(shape, 1, _creation_dtype("ones", shape, dtype), device=device)


@_override
def full(shape, value, dtype=None, *, device=None):
    """A tensor filled with ``value``; the dtype defaults to int64 for an int
    value, bool for a bool and float32 otherwise. An int value is exact for
    integer dtypes (see :func:`fill`)."""
    if dtype is None:
        dtype = ("bool" if isinstance(value, bool) else
                 "int64" if isinstance(value, _numbers.Integral) else "float32")
    return fill(shape, value, _creation_dtype("full", shape, dtype), device=device)


@_override
def arange(start, stop=None, step=1, dtype=None, *, device=None):
    """Evenly spaced values in ``[start, stop)`` (NumPy's ``arange``).

    ``arange(5)`` counts from 0. The dtype defaults to int64 when every
    argument is an int, float32 otherwise.
    """
    if stop is None:
        start, stop = 0, start
    if dtype is None:
        ints = all(isinstance(v, _numbers.Integral) for v in (start, stop, step))
        dtype = "int64" if ints else "float32"
    return _arange_op(float(start), float(stop), float(step), dtype, device=device)


@_override
def split(x, sizes, axis=0):
    """Split ``x`` along ``axis`` into parts of the given sizes, or into
    ``sizes`` equal parts when it is an int.

    Returns
    -------
    list of Tensor
    """
    if isinstance(sizes, _numbers.Integral) and not isinstance(sizes, bool):
        from ._tensor import Tensor, tensor
        if not isinstance(x, Tensor):
            x = tensor(x)
        n = int(sizes)
        from .errors import InvalidArgumentError
        if not 0 < n < 2**31:
            raise InvalidArgumentError(f"Split: the number of parts must be in [1, 2^31), "
                                       f"got {n}", op="Split")
        if x.ndim == 0:
            raise InvalidArgumentError("Split: cannot split a 0-d tensor", op="Split")
        if not -x.ndim <= axis < x.ndim:
            raise InvalidArgumentError(f"Split: axis {axis} is out of range for a tensor of "
                                       f"rank {x.ndim}", op="Split")
        dim = x.shape[axis]
        if dim % n:
            raise InvalidArgumentError(f"Split: axis {axis} of size {dim} does not divide into "
                                       f"{n} equal parts (shape {list(x.shape)})", op="Split")
        sizes = [dim // n] * n
    return _split_op(x, sizes, axis)


def _check_index_order(fn: str, indices, axis):
    """The old ``index_select(x, axis, index)`` order raises, never runs."""
    if isinstance(indices, _numbers.Integral) and not isinstance(axis, (_numbers.Integral,
                                                                          type(None))):
        raise TypeError(f"{fn}: the arguments are (x, indices, axis), as gather's and NumPy's "
                        f"take's; got an int ({indices}) for indices and a "
                        f"{type(axis).__name__} for axis (the old order (x, axis, index)?)")


def index_select(x, indices, axis=0):
    """Select entries of ``x`` along ``axis`` with a 1-D integer ``indices``.

    The argument order is gather's (and NumPy ``take``'s): ``(x, indices, axis)``.

    Parameters
    ----------
    x : Tensor
    indices : Tensor
        1-D int32 or int64.
    axis : int, default 0

    Returns
    -------
    Tensor
        ``x`` with ``x.shape[axis]`` replaced by ``len(indices)``.
    """
    _check_index_order("index_select", indices, axis)
    if getattr(indices, "ndim", 1) != 1:
        raise ValueError(f"index_select: indices must be 1-D, got shape {indices.shape}")
    return gather(x, indices, axis)


def take(x, indices, axis=None):
    """Take entries of ``x`` at ``indices`` along ``axis`` (NumPy's ``take``);
    with ``axis=None`` from the flattened ``x``.

    Parameters
    ----------
    x : Tensor
    indices : Tensor
        int32 or int64, any shape.
    axis : int, optional

    Returns
    -------
    Tensor
        ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``.
    """
    _check_index_order("take", indices, axis)
    if axis is None:
        x = reshape(x, [-1])
        axis = 0
    return gather(x, indices, axis)


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        _C.op(name)  # raises PluginError when a broken plugin would provide it
    except LookupError:
        pass
    else:
        _refresh()
        if name in globals():
            return globals()[name]
    known = [n for n in globals() if not n.startswith("_")]
    close = _difflib.get_close_matches(name, known, n=3)
    hint = f" Did you mean: {', '.join(close)}?" if close else ""
    raise AttributeError(f"dragon_core.ops has no op '{name}'.{hint} Ops come from the core and "
                         f"from plugins; `python -m dragon_core info` lists what is loaded.")


from ._selection import einsum, nonzero, unique  # noqa: E402,F401  (not schema ops)
from ._spectral import (blackman_window, dft, hamming_window, hann_window,  # noqa: E402,F401
                        mel_weight_matrix, stft)
