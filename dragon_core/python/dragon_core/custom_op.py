"""Ops written in Python: the prototyping path (see ``docs/python-ops.md``).

:func:`custom_op` defines an op whose CPU kernel is a Python function on
NumPy arrays. The op goes into the same schema registry and its kernel into
the same kernel table as any plugin's, so it is dispatched by the same rules:
shape inference first, the same selection order (pins, priority, dtype
specificity, plugin name), ``dragon_core.plugins.explain``, eager calls,
``@dragon_core.function`` graphs (the C++ executor calls the kernel through
the same dispatcher, on worker threads in parallel mode) and autograd
(gradient rules registered with :func:`custom_op.gradient`).

The C++ side (``src/python/bind_pyops.cc``) calls the wrappers built here
through trampolines that take the GIL. The wrappers never raise: they return
``(status, payload)``, and a failure becomes the op's error.
"""

from __future__ import annotations

import traceback
from typing import NamedTuple

import numpy as np

from . import _C
from . import _autograd
from ._dtypes import as_dtype, dtype as _dtype_cls

# DgAttrType codes (dragon/plugin.h).
_INT, _FLOAT, _BOOL, _STRING, _INTS, _FLOATS, _DTYPE = 1, 2, 3, 4, 5, 6, 7
_REQUIRED = {int: _INT, float: _FLOAT, bool: _BOOL, str: _STRING, _dtype_cls: _DTYPE}
_ALL_DTYPES = (1 << 13) - 1           # DG_MASK_ANY (every dtype, ABI 1.4)
_OP_NO_GRAD = 1 << 2                  # DG_OP_NO_GRAD
_OP_COLLECTIVE = 1 << 4               # DG_OP_COLLECTIVE
# DgStatus codes.
_OK, _INVALID, _UNIMPLEMENTED, _EXHAUSTED, _INTERNAL, _RANGE = 0, 1, 3, 4, 5, 6


class TensorSpec(NamedTuple):
    """What a shape rule sees of an input: its shape and dtype."""

    shape: tuple
    dtype: _dtype_cls


def _status_of(e: BaseException) -> int:
    from .errors import DragonError
    if isinstance(e, DragonError) and e.code:
        return e.code
    for cls, code in ((ValueError, _INVALID), (TypeError, _INVALID), (IndexError, _RANGE),
                      (NotImplementedError, _UNIMPLEMENTED), (MemoryError, _EXHAUSTED)):
        if isinstance(e, cls):
            return code
    return _INTERNAL


def _raised(what: str, e: BaseException, with_traceback: bool = True) -> tuple:
    text = f"{what} raised {type(e).__name__}: {e}"
    if with_traceback:
        text += "\nPython traceback:\n" + "".join(traceback.format_exception(e)).rstrip()
    return _status_of(e), text


def _attr_schema(name: str, value) -> tuple:
    """(name, DgAttrType, default or None) from a default value or a type."""
    if isinstance(value, type):
        if value not in _REQUIRED:
            raise TypeError(f"attribute '{name}': a required attribute is declared with "
                            f"int, float, bool, str or dragon_core.dtype, got {value!r}")
        return name, _REQUIRED[value], None
    if isinstance(value, bool):
        return name, _BOOL, int(value)
    if isinstance(value, (int, np.integer)):
        return name, _INT, int(value)
    if isinstance(value, (float, np.floating)):
        return name, _FLOAT, float(value)
    if isinstance(value, str):
        return name, _STRING, value
    if isinstance(value, _dtype_cls):
        return name, _DTYPE, value.code
    if isinstance(value, (list, tuple)):
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in value):
            return name, _INTS, [int(v) for v in value]
        if all(isinstance(v, (int, float, np.integer, np.floating)) for v in value):
            return name, _FLOATS, [float(v) for v in value]
    raise TypeError(f"attribute '{name}': cannot derive a type from the default {value!r}; "
                    f"use an int, float, bool, str, dtype, or a list of ints or floats")


def _mask(dtypes) -> int:
    mask = 0
    for d in dtypes:
        mask |= 1 << as_dtype(d).code
    return mask


def _same_as_first(*inputs, **attrs):
    return [(inputs[0].shape, inputs[0].dtype)]


def _shape_wrapper(op_name: str, rule, num_outputs: int):
    def infer(inputs, attrs):
        specs = [TensorSpec(tuple(shape), as_dtype(code)) for shape, code in inputs]
        try:
            result = rule(*specs, **attrs)
        except Exception as e:  # noqa: BLE001 - every failure becomes the op's error
            from .errors import DragonError
            # A deliberate check (ValueError) reads best without a traceback.
            plain = isinstance(e, (ValueError, DragonError))
            return _raised("the shape rule", e, with_traceback=not plain)
        try:
            if isinstance(result, TensorSpec) or (
                    isinstance(result, (tuple, list)) and len(result) == 2
                    and isinstance(result[0], (tuple, list))
                    and all(isinstance(d, (int, np.integer)) for d in result[0])):
                result = [result]     # one (shape, dtype) pair for a one-output op
            result = list(result)
            if len(result) != num_outputs:
                raise ValueError(f"it returned {len(result)} (shape, dtype) pair(s) for "
                                 f"{num_outputs} output(s)")
            out = []
            for i, pair in enumerate(result):
                shape, dt = pair
                shape = tuple(int(d) for d in shape)
                if any(d < 0 for d in shape):
                    raise ValueError(f"output {i} has a negative dimension: {shape}")
                out.append((shape, as_dtype(dt).code))
        except Exception as e:  # noqa: BLE001
            return _INVALID, (f"the shape rule of {op_name} must return a list of "
                              f"(shape, dtype) pairs, one per output; got {result!r}: {e}")
        return _OK, out
    return infer


def _kernel_wrapper(kernel_name: str, fn, output_names: list):
    n = len(output_names)

    def run(inputs, outputs, attrs):
        try:
            result = fn(*inputs, **attrs)
        except BaseException as e:  # noqa: BLE001 - must not cross into C++
            return _raised(f"the Python kernel '{kernel_name}'", e)
        if n == 1:
            if isinstance(result, (tuple, list)) and len(result) == 1:
                result = result[0]
            result = [result]
        elif not isinstance(result, (tuple, list)) or len(result) != n:
            got = f"{len(result)} values" if isinstance(result, (tuple, list)) else \
                type(result).__name__
            return _INTERNAL, (f"the Python kernel '{kernel_name}' returned {got}; the op has "
                               f"{n} outputs ({', '.join(output_names)})")
        for name, out, value in zip(output_names, outputs, result):
            if value is None:
                return _INTERNAL, (f"the Python kernel '{kernel_name}' returned None for "
                                   f"output '{name}'")
            value = np.asarray(value)
            if value.shape != out.shape or value.dtype != out.dtype:
                return _INTERNAL, (
                    f"the Python kernel '{kernel_name}' returned {value.dtype}"
                    f"{list(value.shape)} for output '{name}', but shape inference gave "
                    f"{out.dtype}{list(out.shape)}; fix the kernel or the shape rule")
            np.copyto(out, value)
        return _OK, None
    return run


def _refresh_ops():
    from . import ops
    ops._refresh()
    return ops


def custom_op(name: str, *, inputs=("x",), outputs=("y",), attrs=None, shape=None,
              dtypes=("float32", "float64"), priority: int = 0, plugin: str = "python",
              kernel_name: str | None = None, py_name: str | None = None,
              doc: str | None = None, differentiable: bool = True,
              collective: bool = False):
    """Define an op whose CPU kernel is the decorated NumPy function.

    Parameters
    ----------
    name : str
        The op name, CamelCase (``"MySwish"``); must not be defined yet.
    inputs, outputs : sequence of str
        Input and output names, in order.
    attrs : dict of str to object, optional
        Attributes in order. A value is the default and gives the type
        (int, float, bool, str, ``dragon_core.dtype``, list of int, list of
        float); a type (``int``, ``float``, ``bool``, ``str``,
        ``dragon_core.dtype``) declares a required attribute.
    shape : callable, optional
        The shape rule: ``shape(*inputs, **attrs)`` where each input is a
        :class:`TensorSpec` ``(shape, dtype)``; returns one ``(shape, dtype)``
        pair per output (a bare pair for a one-output op). Raise
        ``ValueError`` to reject the call. Default: every output has the
        first input's shape and dtype.
    dtypes : sequence of dtype
        The dtypes the kernel accepts (of the first input). Other dtypes
        raise ``NoKernelError`` unless another kernel covers them.
    priority : int
        Kernel priority (higher wins; the CPU reference plugins use 0).
    plugin : str
        The plugin name shown by ``explain`` and usable as a pin target.
    kernel_name : str, optional
        The kernel name (default: the function's name).
    py_name : str, optional
        The name in ``dragon_core.ops`` (default: snake_case of ``name``).
    doc : str, optional
        The op's doc (default: the function's docstring).
    differentiable : bool
        False marks the op ``DG_OP_NO_GRAD`` (never recorded by autograd).
        Otherwise register a rule with :func:`custom_op.gradient` before
        differentiating through it.
    collective : bool
        Mark the op ``DG_OP_COLLECTIVE``: it talks to other
        processes, so graph passes never prune, merge or fold it and the
        executor keeps it in traced order against the other collectives.

    Returns
    -------
    callable
        A decorator. It registers the op and its kernel, and returns the
        generated ``dragon_core.ops.<py_name>`` function (the NumPy function
        stays available as its ``numpy_kernel`` attribute).

    Notes
    -----
    The kernel is called as ``fn(*arrays, **attrs)`` with read-only NumPy
    views of the inputs (valid during the call only: copy what you keep) and
    returns one array per output (a tuple for several) whose shape and dtype
    match what the shape rule declared.
    """
    attr_list = [_attr_schema(k, v) for k, v in (attrs or {}).items()]
    inputs, outputs = list(inputs), list(outputs)
    if not outputs:
        raise ValueError(f"{name}: an op needs at least one output")
    if shape is None:
        if not inputs:
            raise ValueError(f"{name}: an op without inputs needs a shape= rule")
        shape = _same_as_first

    def register(fn):
        _C._define_py_op(name, py_name or "", doc if doc is not None else (fn.__doc__ or ""), plugin,
                         [(i, _ALL_DTYPES, 0) for i in inputs],
                         [(o, _ALL_DTYPES, 0) for o in outputs],
                         attr_list, (0 if differentiable else _OP_NO_GRAD)
                         | (_OP_COLLECTIVE if collective else 0),
                         _shape_wrapper(name, shape, len(outputs)))
        try:
            _register_kernel(name, fn, dtypes, priority, plugin, kernel_name, outputs)
        except Exception:
            _C._retire_py_op(name)
            raise
        op = getattr(_refresh_ops(), _C.op(name).py_name)
        op.numpy_kernel = fn
        return op
    return register


def _register_kernel(op: str, fn, dtypes, priority, plugin, kernel_name, outputs):
    kname = kernel_name or fn.__name__
    _C._register_py_kernel(op, kname, plugin, "cpu", _mask(dtypes), int(priority),
                           _kernel_wrapper(kname, fn, outputs))


def kernel(op: str, *, dtypes=("float32", "float64"), priority: int = 0,
           plugin: str = "python", name: str | None = None):
    """Register another Python kernel for an existing op (any op, including
    the standard ones), e.g. a second implementation at another priority.

    Returns a decorator that returns the function unchanged.
    """
    def register(fn):
        desc = _C.op(op).describe()
        _register_kernel(desc["name"], fn, dtypes, priority, plugin, name,
                         [o["name"] for o in desc["outputs"]])
        return fn
    return register


def remove(op: str) -> None:
    """Remove an op defined with :func:`custom_op`, its kernels, its gradient
    rule and its ``dragon_core.ops`` function, so it can be defined again
    (a notebook cell run twice). Compiled graphs that use it keep working.
    """
    handle = _C.op(op)
    name, pname = handle.name, handle.py_name
    _C._retire_py_op(name)
    _autograd._RULES.pop(name, None)
    _autograd._SAVED.pop(name, None)
    ops = _refresh_ops()
    if getattr(ops.__dict__.get(pname), "_dragon_op", None) == name:
        delattr(ops, pname)


custom_op.TensorSpec = TensorSpec
custom_op.gradient = _autograd.gradient
custom_op.kernel = kernel
custom_op.remove = remove
