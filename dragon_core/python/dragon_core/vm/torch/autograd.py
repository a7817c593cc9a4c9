"""``torch.autograd``: ``grad``, ``backward``, grad-mode switches, over
dragon_core's autograd engine (gradients are compositions of ops, so
``create_graph=True`` gives differentiable gradients)."""

from __future__ import annotations

import functools
import inspect
import types

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


# ------------------------------------------------------ autograd.Function
#
# ``Function.apply`` runs ``forward`` under no_grad, then records one node of
# the pseudo-op ``TorchFunction`` whose inputs are the tensor arguments and
# whose outputs are the tensor results; its gradient rule calls the class's
# ``backward`` with vm tensors. ``backward`` is written with vm.torch ops, so
# under ``create_graph=True`` it is recorded too (higher order), unless it is
# ``@once_differentiable``. Tapes see the node as any other.

_FN_OP = "TorchFunction"


class FunctionCtx:
    """The ``ctx`` of a custom :class:`Function`."""

    def __init__(self):
        self.needs_input_grad = ()
        self._saved = ()
        self._saved_versions = ()
        self._non_diff = set()
        self._materialize = True

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{len(self._saved)} is of type {type(t).__name__}")
        self._saved = tuple(tensors)
        self._saved_versions = tuple(None if t is None else t._t._version for t in tensors)

    @property
    def saved_tensors(self):
        for k, (t, v) in enumerate(zip(self._saved, self._saved_versions)):
            if t is not None and t._t._version != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: saved tensor {k} (a {t.dtype} tensor of shape "
                    f"{list(t.shape)}) is at version {t._t._version}; expected version {v} "
                    "instead")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        self._non_diff.update(id(t._t) for t in tensors)

    def set_materialize_grads(self, value: bool):
        self._materialize = bool(value)

    def mark_dirty(self, *tensors):
        raise NotImplementedError(
            "torch.autograd.Function: mark_dirty (an in-place forward) is not supported by "
            "dragon_core.vm.torch; return a new tensor (x.clone() then the in-place op) "
            "instead")

    def mark_shared_storage(self, *pairs):
        raise NotImplementedError("mark_shared_storage is not supported")


def once_differentiable(fn):
    """``backward`` runs without recording: its result is not differentiable
    (a second-order gradient through it raises)."""
    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            return fn(ctx, *args)
    return wrapper


class Function:
    """``torch.autograd.Function``: subclass with static ``forward(ctx, *args)``
    (or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``) and
    ``backward(ctx, *grads)``; call ``YourFunction.apply(*args)``."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(*args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function (subclass it; or define the op with "
                                  "dragon_core.custom_op)")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward "
                                  "mode AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("forward-mode AD (jvp) is not supported by "
                                  "dragon_core.vm.torch")

    @classmethod
    def apply(cls, *args, **kwargs):
        if _C._is_tracing():
            raise NotImplementedError(
                f"{cls.__name__}.apply: torch.autograd.Function inside a traced/compiled "
                "function is not supported; define the op with dragon_core.custom_op")
        ctx = FunctionCtx()
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._t.requires_grad
                                     for a in args)
        separate = cls.setup_context is not Function.setup_context
        with no_grad():
            if separate:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        single = not isinstance(out, tuple)
        outs = [out] if single else list(out)
        in_ids = {id(a._t) for a in args if isinstance(a, Tensor)}
        for k, o in enumerate(outs):
            if isinstance(o, Tensor) and id(o._t) in in_ids:
                # an input returned as is: a new tensor over the same memory,
                # as torch's (the node's output cannot be its own input)
                nd = id(o._t) in ctx._non_diff
                outs[k] = _w(o._t._alias())
                if nd:
                    ctx._non_diff.add(id(outs[k]._t))
        if _C._is_grad_enabled() and (any(ctx.needs_input_grad) or _dg._autograd._tapes()):
            pos = [k for k, a in enumerate(args) if isinstance(a, Tensor)]
            out_pos = [k for k, o in enumerate(outs) if isinstance(o, Tensor)]
            attrs = {"function": cls, "ctx": ctx, "n_args": len(args), "arg_pos": pos,
                     "n_outs": len(outs), "out_pos": out_pos,
                     "non_diff": [id(outs[k]._t) in ctx._non_diff for k in out_pos]}
            inputs = [args[k]._t for k in pos]
            outputs = [outs[k]._t for k in out_pos]
            _dg._autograd._record(_FN_OP, inputs, attrs, outputs)
            for t, nd in zip(outputs, attrs["non_diff"]):
                if nd or not t.dtype.is_floating_point:
                    t.requires_grad = False
                    t._grad_fn = None
            attrs["non_diff"] = tuple(attrs["non_diff"])
        return outs[0] if single else tuple(outs)


def _function_grad(node, *dys):
    a = node.attrs
    cls, ctx = a["function"], a["ctx"]
    grads_out = [None] * a["n_outs"]
    for k, d, nd, meta in zip(a["out_pos"], dys, a["non_diff"], node.out_meta):
        if d is None and (ctx._materialize or nd):
            d = _dg._autograd._zeros_like_meta(meta)
        grads_out[k] = None if d is None else _w(d)
    res = cls.backward(ctx, *grads_out)
    if not isinstance(res, tuple):
        res = (res,)
    n = a["n_args"]
    if len(res) < n or any(r is not None for r in res[n:]):
        raise RuntimeError(f"function {cls.__name__}Backward returned an incorrect number of "
                           f"gradients (expected {n}, got {len(res)})")
    out = []
    for k, inp in zip(a["arg_pos"], node.inputs):
        r = res[k]
        if r is None:
            out.append(None)
            continue
        if not isinstance(r, Tensor):
            raise TypeError(f"function {cls.__name__}Backward returned a {type(r).__name__} "
                            f"as the gradient of input {k}; expected a Tensor or None")
        g = r._t
        if tuple(g.shape) != tuple(inp.shape):
            raise RuntimeError(f"Function {cls.__name__}Backward returned an invalid gradient "
                               f"at index {k} - got {list(g.shape)} but expected shape "
                               f"{list(inp.shape)}")
        if g.dtype != inp.dtype:
            g = _dg.ops.cast(g, inp.dtype)
        out.append(g)
    return out


if not _dg._autograd.has_gradient(_FN_OP):
    _dg._autograd.gradient(_FN_OP, unread_inputs=lambda attrs: tuple(range(len(attrs["arg_pos"]))))(
        _function_grad)
_dg._autograd._NONE_DYS.add(_FN_OP)

function = types.SimpleNamespace(Function=Function, FunctionCtx=FunctionCtx,
                                 once_differentiable=once_differentiable)


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
