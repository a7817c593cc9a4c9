"""``torch.autograd``: ``grad``, ``backward``, grad-mode switches, over
dragon_core's autograd engine (gradients are compositions of ops, so
``create_graph=True`` gives differentiable gradients)."""

from __future__ import annotations

import functools
import inspect

import dragon_core as _dg
from dragon_core import _C

from ._tensor import Tensor, _u, _w


class _GradMode:
    """A grad-mode switch usable as a context manager and as a decorator
    (with or without parentheses). A decorated generator function runs each
    step of its body (between yields) in the mode, as torch's does, and the
    caller's mode is back in force while it is suspended."""

    _value = False

    def __init__(self, mode=None):
        if mode is not None:
            self._value = bool(mode)

    def __enter__(self):
        self._old = _C._set_grad_enabled(self._value)
        return self

    def __exit__(self, *exc):
        _C._set_grad_enabled(self._old)
        return False

    def __new__(cls, *args, **kwargs):
        # ``@torch.no_grad`` (no parentheses) decorates directly
        if len(args) == 1 and callable(args[0]) and not kwargs and not isinstance(args[0], bool):
            fn = args[0]
            self = object.__new__(cls)
            self.__init__()
            return self(fn)
        return object.__new__(cls)

    def __call__(self, fn):
        mode = self._value
        if inspect.isgeneratorfunction(fn):
            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                return (yield from _in_mode(mode, fn(*args, **kwargs)))
            return gen_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            old = _C._set_grad_enabled(mode)
            try:
                return fn(*args, **kwargs)
            finally:
                _C._set_grad_enabled(old)
        return wrapper


def _in_mode(mode: bool, gen):
    """Drive generator ``gen`` with grad mode ``mode`` set while its body
    runs (each ``next``/``send``/``throw``/``close``), restoring the
    caller's mode at every yield."""
    def step(call, *arg):
        old = _C._set_grad_enabled(mode)
        try:
            return call(*arg)
        finally:
            _C._set_grad_enabled(old)
    try:
        value = step(next, gen)
        while True:
            try:
                sent = yield value
            except GeneratorExit:
                step(gen.close)
                raise
            except BaseException as e:   # thrown in by the caller: pass it on
                value = step(gen.throw, e)
            else:
                value = step(gen.send, sent)
    except StopIteration as stop:
        return stop.value


class no_grad(_GradMode):  # noqa: N801
    """Ops inside are not recorded (context manager or decorator)."""

    _value = False


class enable_grad(_GradMode):  # noqa: N801
    """Ops inside are recorded (context manager or decorator)."""

    _value = True


class inference_mode(_GradMode):  # noqa: N801
    """As :class:`no_grad` (dragon has no separate inference mode: tensors
    made inside are ordinary tensors, which torch would refuse to use in a
    later autograd graph)."""

    _value = False

    def __init__(self, mode=True):
        self._value = not mode


class set_grad_enabled(_GradMode):  # noqa: N801
    """``torch.set_grad_enabled(mode)``: takes effect at once, and as a
    context manager restores the previous mode on exit. Used as a decorator
    it restores the previous mode at once, and only the decorated function's
    calls run in ``mode`` (as torch's)."""

    def __init__(self, mode):
        self._value = bool(mode)
        self._old = _C._set_grad_enabled(self._value)

    def __enter__(self):
        return self

    def __call__(self, fn):
        _C._set_grad_enabled(self._old)
        return super().__call__(fn)

    def __new__(cls, mode):
        return object.__new__(cls)


def is_grad_enabled() -> bool:
    return _C._is_grad_enabled()


def _seq(x):
    if isinstance(x, (list, tuple)):
        return list(x)
    return [x]


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """Gradients of ``outputs`` w.r.t. ``inputs`` (a tuple, like torch)."""
    if is_grads_batched:
        raise NotImplementedError("grad(is_grads_batched=True) is not supported; loop over "
                                  "the batch of grad_outputs")
    outs = [_u(o) for o in _seq(outputs)]
    ins = [_u(i) for i in _seq(inputs)]
    gos = None if grad_outputs is None else [None if g is None else _u(g)
                                             for g in _seq(grad_outputs)]
    for k, o in enumerate(outs):
        if not o.requires_grad:
            # as torch: never a None or zero gradient for a forgotten
            # requires_grad (allow_unused does not cover it)
            raise RuntimeError(f"element {k} of tensors does not require grad and does not "
                               "have a grad_fn")
    for i in ins:
        if not i.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    for o, g in zip(outs, gos or [None] * len(outs)):
        if g is None and o.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
    res = _dg.grad(outs, ins, gos, create_graph=create_graph,
                   allow_unused=bool(allow_unused) or materialize_grads)
    out = []
    for r, i in zip(res, ins):
        if r is None and materialize_grads:
            from ._creation import zeros_like
            out.append(zeros_like(_w(i)))
        else:
            out.append(None if r is None else _w(r))
    return tuple(out)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate gradients of ``tensors`` into the leaves' ``.grad``."""
    if inputs is not None:
        raise NotImplementedError("backward(inputs=...) is not supported; use "
                                  "torch.autograd.grad")
    ts = [_u(t) for t in _seq(tensors)]
    for k, t in enumerate(ts):
        if not t.requires_grad:
            raise RuntimeError(f"element {k} of tensors does not require grad and does not "
                               "have a grad_fn")
    gs = None if grad_tensors is None else [None if g is None else _u(g)
                                            for g in _seq(grad_tensors)]
    _dg._autograd.backward(ts, gs, create_graph)


Variable = Tensor


class Function:
    """Custom autograd functions are not supported through this class."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)

    @classmethod
    def apply(cls, *args, **kwargs):
        raise NotImplementedError(
            "torch.autograd.Function is not supported by dragon_core.vm.torch; define the op "
            "with dragon_core.custom_op (a forward and a gradient rule written with ops) and "
            "call it on tensor.dragon()")


class _Functional:
    def __getattr__(self, name):
        raise NotImplementedError(f"torch.autograd.functional.{name} is not supported; use "
                                  "torch.autograd.grad(..., create_graph=True)")


functional = _Functional()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.autograd.{name} is not supported by "
                              "dragon_core.vm.torch; supported: grad, backward, no_grad, "
                              "enable_grad, set_grad_enabled")
