"""``torch.jit.trace`` / ``torch.compile`` onto ``dragon_core.function``: the
Python function (or module) is traced into a graph on its first call per
input signature and the compiled plan runs afterwards."""

from __future__ import annotations

import functools

import dragon_core as _dg

from ._tensor import Tensor, _u, _w


def _wrap_tree(x):
    if isinstance(x, _dg.Tensor):
        return _w(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_wrap_tree(v) for v in x)
    if isinstance(x, dict):
        return {k: _wrap_tree(v) for k, v in x.items()}
    return x


def _unwrap_tree(x):
    if isinstance(x, Tensor):
        return x._t
    if isinstance(x, (list, tuple)):
        return type(x)(_unwrap_tree(v) for v in x)
    if isinstance(x, dict):
        return {k: _unwrap_tree(v) for k, v in x.items()}
    return x


class _Compiled:
    def __init__(self, fn, **options):
        self._fn = fn

        def inner(*args, **kwargs):
            return _unwrap_tree(fn(*_wrap_tree(args), **_wrap_tree(kwargs)))
        inner.__name__ = getattr(fn, "__name__", type(fn).__name__)
        self._graph = _dg.function(inner)
        functools.update_wrapper(self, fn, updated=()) if callable(fn) and hasattr(
            fn, "__name__") else None

    def __call__(self, *args, **kwargs):
        return _wrap_tree(self._graph(*_unwrap_tree(args), **_unwrap_tree(kwargs)))

    def __getattr__(self, name):
        return getattr(self._fn, name)


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, disable=False):
    """``torch.compile``: a callable that runs ``model`` as a compiled
    dragon graph (``dragon_core.function``)."""
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                                 mode=mode, options=options, disable=disable)
    if disable:
        return model
    return _Compiled(model)


def trace(func, example_inputs=None, *args, **kwargs):
    """``torch.jit.trace``: compile ``func`` (run once on the example)."""
    out = _Compiled(func)
    if example_inputs is not None:
        ex = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
        out(*ex)
    return out


def script(obj, *args, **kwargs):
    raise NotImplementedError("torch.jit.script is not supported; use torch.jit.trace or "
                              "torch.compile (both compile through dragon_core.function)")


def ignore(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)


unused = ignore
export = ignore


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.jit.{name} is not supported; use torch.jit.trace or "
                              "torch.compile")
