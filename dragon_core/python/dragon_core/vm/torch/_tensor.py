"""``torch.Tensor``: a thin handle over one ``dragon_core.Tensor``.

The handle holds the dragon tensor in ``_t`` and nothing else: storage,
dtype, device and autograd state (``requires_grad``, ``grad``, the recorded
op) live in the dragon tensor, so converting either way never copies
(:func:`from_dragon`, :meth:`Tensor.dragon`). Every method translates
PyTorch's conventions (``dim``/``keepdim``, ``transpose(d0, d1)``, values
and indices from reductions, torch's type promotion) into calls of
``dragon_core.ops``; no kernel lives here.

Views: on the host, outside autograd recording, ``view``/``reshape``/
``permute``/``transpose``/``squeeze``/``unsqueeze``/``expand``/``narrow``
and basic slicing return tensors that share memory with their base (NumPy
strided views handed to ``dragon_core.from_numpy``), so in-place writes
through them reach the base as in PyTorch. While autograd records (the base
requires grad) they are computed by differentiable ops and are copies; an
in-place write to such a view, or to its base while it lives, raises (see
``_check_inplace_target``) rather than silently not reaching the other.
In-place writes to memory bump the storage's version counter, which
autograd checks before a gradient rule reads a saved input.
"""

from __future__ import annotations

import collections
import math
import operator
import numbers
import warnings

import numpy as np

import dragon_core as _dg
from dragon_core import _C, ops as _ops
from dragon_core import _memory_format as _mf

from . import _dtype as D

_DgT = _dg.Tensor
_new = object.__new__
_grad_on = _C._is_grad_enabled
_tracing = _C._is_tracing

values_indices = collections.namedtuple("values_indices", ["values", "indices"])


class Size(tuple):
    """``torch.Size``: a tuple of ints."""

    def numel(self) -> int:
        return int(math.prod(self))

    def __repr__(self):
        return f"torch.Size({list(self)})"

    def __getitem__(self, key):
        out = tuple.__getitem__(self, key)
        return Size(out) if isinstance(key, slice) else out


def _w(t) -> "Tensor":
    """Wrap a dragon tensor (no copy)."""
    o = _new(Tensor)
    o._t = t
    return o


def _wrap_out(out):
    if isinstance(out, _DgT):
        return _w(out)
    if isinstance(out, (tuple, list)):
        return type(out)(_wrap_out(o) for o in out)
    return out


def _u(x):
    """The dragon tensor of ``x`` (a vm tensor), else ``x`` unchanged."""
    try:
        return x._t
    except AttributeError:
        return x


def _records(t) -> bool:
    return t.requires_grad and _grad_on()


#: torch's names of the scalar types, as its error messages spell them
_SCALAR_NAMES = {"float32": "Float", "float64": "Double", "float16": "Half",
                 "bfloat16": "BFloat16", "int64": "Long", "int32": "Int", "int16": "Short",
                 "int8": "Char", "uint8": "Byte", "bool": "Bool"}


def _check_can_cast(src, dst):
    """torch's ``can_cast`` rule for an in-place result of dtype ``src``
    written into a ``dst`` tensor: a float result never goes into an integer
    or bool tensor, and a non-bool result never into a bool one (``bool_x
    &= uint8_y`` raises in torch; a cast would compute something else)."""
    if (src.is_floating_point and not dst.is_floating_point) or (
            dst.name == "bool" and src.name != "bool"):
        raise RuntimeError(f"result type {_SCALAR_NAMES.get(src.name, src.name)} can't be cast "
                           f"to the desired output type {_SCALAR_NAMES.get(dst.name, dst.name)}")


def _zero_grad_zeros(t):
    """Zeros shaped as ``t`` (dragon) whose gradient to ``t`` is exactly 0:
    added to a piecewise-constant result it gives torch's ``zeros_like``
    backward. A Where whose condition is never true (nothing is below
    -inf, NaN included) selects 0 in the gradient too, where the older
    ``t * 0.0`` made ``dy * 0`` NaN for an infinite or NaN ``dy``. The
    zeros are -0.0, so adding them keeps a result's -0.0 (round(-0.3))."""
    return _ops.where(_ops.less(t, -math.inf), t, -0.0)


def _host_view_ok(t) -> bool:
    """Whether a NumPy view of ``t`` may stand for an op result: host,
    not recorded by autograd, not traced."""
    return (t._device_name == "cpu" and not (t.requires_grad and _grad_on())
            and not _tracing())


_BF16 = _dg.as_dtype("bfloat16").code
_BOOL = _dg.as_dtype("bool").code


def _from_np_view(arr: np.ndarray):
    return _C.from_numpy(arr)


# ------------------------------------------- views and aliases vs in-place
#
# While autograd records (or a function is traced), view functions compute
# their result with differentiable ops: the "view" is a copy ("copy"). A
# write through it would not reach its base, and a write to the base would
# not reach it, where PyTorch's views share the write. And an in-place op
# that autograd records gives the handle a new tensor rather than writing
# memory, so tensors sharing the old memory (``detach()``, ``.data``, views
# taken under ``no_grad``: "alias") would not see it. Both kinds are
# registered here (handles, weakly); an in-place op on either side of a
# live pair raises instead of silently diverging from PyTorch: always for a
# copy, while recording for an alias (other writes reach the shared memory).

import weakref as _weakref  # noqa: E402

# id(view handle) -> (weakref to the view, weakref to its base, kind);
# id(base handle) -> (weakref to the base, {id(view): (weakref to the view, kind)}).
# Keyed by id (a handle's == is elementwise); entries leave with the handle.
_VIEW_BASE: dict = {}
_BASE_VIEWS: dict = {}


def _forget_view(key):
    entry = _VIEW_BASE.pop(key, None)
    if entry is not None:
        base = entry[1]()
        views = _BASE_VIEWS.get(id(base)) if base is not None else None
        if views is not None:
            views[1].pop(key, None)


def _forget_base(key):
    _BASE_VIEWS.pop(key, None)


def _note_view(base: "Tensor", view: "Tensor", kind: str) -> "Tensor":
    """Record that ``view`` is a view of ``base`` computed as a copy
    (``kind`` "copy") or sharing its memory ("alias")."""
    if view is base:
        return view
    # A view of a view is a view of the root base (the middle one may die).
    while True:
        up = _VIEW_BASE.get(id(base))
        root = up[1]() if up is not None and up[0]() is base else None
        if root is None:
            break
        base = root
    vkey, bkey = id(view), id(base)
    vref = _weakref.ref(view, lambda r, k=vkey: _forget_view(k))
    entry = _BASE_VIEWS.get(bkey)
    if entry is None or entry[0]() is not base:
        entry = _BASE_VIEWS[bkey] = (_weakref.ref(base, lambda r, k=bkey: _forget_base(k)), {})
    entry[1][vkey] = (vref, kind)
    _VIEW_BASE[vkey] = (vref, entry[0], kind)
    return view


def _note_copy_view(base: "Tensor", view: "Tensor") -> "Tensor":
    return _note_view(base, view, "copy")


def _note_alias(base: "Tensor", view: "Tensor") -> "Tensor":
    """Register a memory alias of a tensor that requires grad (the only
    tensors whose in-place ops rebind rather than write)."""
    if base._t.requires_grad:
        _note_view(base, view, "alias")
    return view


def _live_base(self, recording: bool):
    entry = _VIEW_BASE.get(id(self))
    if entry is None or entry[0]() is not self or (entry[2] == "alias" and not recording):
        return None, None
    return entry[1](), entry[2]


def _live_view(self, recording: bool):
    entry = _BASE_VIEWS.get(id(self))
    if entry is None or entry[0]() is not self:
        return None, None
    for ref, kind in entry[1].values():
        v = ref()
        if v is not None and (kind == "copy" or recording):
            return v, kind
    return None, None


def _check_inplace_target(self: "Tensor", what: str, recording: bool) -> None:
    """Raise if an in-place write to ``self`` would not be seen where
    PyTorch's would (see above)."""
    if not _VIEW_BASE:
        return
    base, kind = _live_base(self, recording)
    if base is not None and kind == "copy":
        raise RuntimeError(
            f"{what}: in-place write to a view (slice, view, reshape, transpose, ...) of a "
            f"tensor of shape {list(base.shape)} taken while autograd records or a "
            "function is traced is not supported by dragon_core.vm.torch: such a view is "
            "a copy, so the write would not reach its base as in PyTorch. Write the base "
            "itself (base[idx] = value, torch.where(...)), or compute out of place")
    if base is not None:
        raise RuntimeError(
            f"{what}: in-place operation recorded by autograd on a tensor of shape "
            f"{list(self.shape)} that shares the memory of a tensor that requires grad "
            "(a detach()/.data alias or a view taken under no_grad) is not supported by "
            "dragon_core.vm.torch: the recorded result would not reach that tensor as in "
            "PyTorch. Use x = x.clone() first, or compute out of place")
    v, kind = _live_view(self, recording)
    if v is not None and kind == "copy":
        raise RuntimeError(
            f"{what}: in-place write to a tensor of shape {list(self.shape)} that has live "
            f"views (e.g. one of shape {list(v.shape)}) taken while autograd records or a "
            "function is traced is not supported by dragon_core.vm.torch: those views are "
            "copies and would not see the write as PyTorch's do. Take the views after the "
            "in-place op, or compute out of place")
    if v is not None:
        raise RuntimeError(
            f"{what}: in-place operation recorded by autograd on a tensor of shape "
            f"{list(self.shape)} whose memory other tensors share (a detach()/.data alias "
            f"or a view taken under no_grad, e.g. one of shape {list(v.shape)}) is not "
            "supported by dragon_core.vm.torch: it records the op by giving this tensor a "
            "new value, which those aliases would not see as in PyTorch. Use "
            "x = x.clone() before the in-place op, or compute out of place")


def _made_in_trace(t) -> bool:
    """Whether ``t`` is a value computed inside the function being traced
    (an op output or a constant made there), not captured state: an
    in-place write to it rebinds the handle, as while recording, instead
    of becoming a state update (``assign``) of the graph."""
    from dragon_core._graph.function import _traces
    stack = _traces()
    if not stack:
        return False
    trace = stack[-1]
    uid = t._id
    if uid in trace.created:
        return True
    for rec in reversed(trace.records):
        for o in rec[3]:
            if o._id == uid:
                return True
    return False


def _shared_memory_check(t, what: str) -> None:
    """Raise if the memory of ``t`` (which does not require grad) is shared
    with another live tensor (a view, a ``detach()`` alias of a tensor in a
    graph, a NumPy array) when an in-place op recorded by autograd must
    rebind ``t`` instead of writing it: the others would not see the write,
    where PyTorch's do. (Tensors that require grad register their aliases
    instead: graph nodes hold aliases of them, which must not count.)"""
    if not t.requires_grad and t._storage_refs > 1:
        raise RuntimeError(
            f"{what}: in-place operation recorded by autograd on a {t.dtype.name} tensor of "
            f"shape {list(t.shape)} whose memory other tensors share (a view, a detach() "
            "alias, a numpy() array): dragon_core.vm.torch "
            "records in-place ops by giving this tensor a new value, which those aliases "
            "would not see as in PyTorch. Use x = x.clone() before the in-place op, or "
            "compute out of place")


def _dim(d: int, n: int, what: str = "dim") -> int:
    nn = max(n, 1)
    if not -nn <= d < nn:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-nn}, {nn - 1}], "
                         f"but got {d})")
    return d % nn


def _dims(dim, n: int):
    if dim is None:
        return None
    if isinstance(dim, (list, tuple)):
        return [_dim(int(d), n) for d in dim]
    return [_dim(int(dim), n)]


def _size_int(s) -> int:
    """One size of a shape argument, as torch's parser reads it: an int or
    a 0-d integer tensor; a float, a bool or anything else raises (``int()``
    would truncate ``4.5`` to 4 and compute with the wrong shape)."""
    if isinstance(s, (bool, np.bool_)):
        raise TypeError(f"size must be a sequence of ints, got a bool ({s!r})")
    if isinstance(s, (numbers.Integral, np.integer)):
        return int(s)
    if isinstance(s, Tensor) and s.ndim == 0 and not s.dtype.is_floating_point \
            and s.dtype.name != "bool":
        return int(s)
    raise TypeError(f"size must be a sequence of ints, got {type(s).__name__} ({s!r})")


def _shape_args(shape) -> tuple:
    if len(shape) == 1 and not isinstance(shape[0], (numbers.Integral, np.integer)):
        if isinstance(shape[0], Tensor):
            return (_size_int(shape[0]),)
        if not isinstance(shape[0], (list, tuple)):
            raise TypeError(f"size must be a sequence of ints, got {type(shape[0]).__name__}")
        return tuple(_size_int(s) for s in shape[0])
    return tuple(_size_int(s) for s in shape)


def _cast(t, dt: "D.dtype"):
    return t if t._dtype_code == dt._dg.code else _ops.cast(t, dt._dg)


def _as_dg(x, dt: "D.dtype", device=None):
    """A tensor or scalar as a dragon tensor of ``dt``."""
    if isinstance(x, Tensor):
        return _cast(x._t, dt)
    if isinstance(x, _DgT):
        return x if x._dtype_code == dt._dg.code else _ops.cast(x, dt._dg)
    with np.errstate(over="ignore", invalid="ignore"):
        arr = np.asarray(x, dtype=dt._dg.numpy)
    out = _C._from_numpy_copy(arr)
    if device is not None and device != "cpu:0" and str(device) != "cpu":
        out = out._to_device(str(device))
    return out


_FAST = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
         "div": operator.truediv}


def _binary(name: str, a, b, dt=None, out_dt=None):
    """``ops.<name>(a, b)`` after torch's promotion (``dt`` forces the
    computation dtype). Same-dtype tensors and weak Python scalars (which
    promote alike in both frameworks) take dragon's C++ operator path."""
    ta, tb = type(a), type(b)
    fn = _FAST.get(name) or getattr(_ops, name)
    if ta is Tensor or isinstance(a, Tensor):
        if tb is Tensor or isinstance(b, Tensor):
            if dt is None and a._t._dtype_code == b._t._dtype_code != _BOOL:
                return _w(fn(a._t, b._t))
        elif (tb is float or tb is int) and (dt is None or dt._dg.code == a._t._dtype_code) \
                and (_DTF[a._t._dtype_code] or (tb is int and a._t._dtype_code != _BOOL)):
            # a Python scalar is weak in both frameworks: same result dtype
            return _w(fn(a._t, b))
    elif (ta is float or ta is int) and (dt is None or dt._dg.code == b._t._dtype_code) \
            and (_DTF[b._t._dtype_code] or (ta is int and b._t._dtype_code != _BOOL)):
        return _w(fn(a, b._t))
    if dt is None:
        dt = D.result_type(a, b)
    ref = a if isinstance(a, Tensor) else b
    dev = ref._t.device
    if dt._dg.code == _BOOL and name in ("add", "mul"):
        # torch: bool + bool is a logical or, bool * bool a logical and
        name = "logical_or" if name == "add" else "logical_and"
    return _w(getattr(_ops, name)(_as_dg(a, dt, dev), _as_dg(b, dt, dev)))


def _float_dt(*xs) -> "D.dtype":
    dt = D.result_type(*xs)
    return dt if dt.is_floating_point else D.default_float()


def _unary_float(fn):
    def method(self):
        t = self._t
        if not _DTF[t._dtype_code]:
            t = _ops.cast(t, D.default_float()._dg)
        return _w(fn(t))
    return method


_DTF = {c: d.is_floating_point for c, d in D.BY_CODE.items()}


class Tensor:
    """A PyTorch-style tensor (see the module docstring)."""

    # _grad_ref: a weak reference to the wrapper .grad last returned (see
    # the grad property); unset until then
    __slots__ = ("_t", "_grad_ref", "__weakref__")

    # ---------------------------------------------------------- construction
    def __new__(cls, *args, **kwargs):
        from ._creation import _legacy_new
        return _legacy_new(cls, *args, **kwargs)

    def __init__(self, *args, **kwargs):
        pass

    def __getattr__(self, name):
        # reached only for names the class does not define
        if name.startswith("_"):
            raise AttributeError(name)
        raise NotImplementedError(
            f"Tensor.{name} is not supported by dragon_core.vm.torch; see "
            "docs/from-pytorch.md, or use dragon_core's ops on tensor.dragon()")

    def dragon(self):
        """The ``dragon_core.Tensor`` under this one (shared, never copied)."""
        return self._t

    # ------------------------------------------------------------ properties
    @property
    def dtype(self):
        return D.BY_CODE[self._t._dtype_code]

    @property
    def shape(self) -> Size:
        return Size(self._t.shape)

    def size(self, dim=None):
        s = self._t.shape
        if dim is None:
            return Size(s)
        return s[_dim(dim, len(s))]

    @property
    def ndim(self) -> int:
        return self._t.ndim

    def dim(self) -> int:
        return self._t.ndim

    ndimension = dim

    def numel(self) -> int:
        return int(self._t.size)

    nelement = numel

    def element_size(self) -> int:
        return self.dtype.itemsize

    @property
    def device(self):
        from ._device import device
        return device(self._t._device_name, self._t._device_index)

    @property
    def is_cuda(self) -> bool:
        return self._t._device_name == "cuda"

    @property
    def is_floating_point_(self):
        return self.dtype.is_floating_point

    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    def is_complex(self) -> bool:
        return False

    @property
    def requires_grad(self) -> bool:
        return self._t.requires_grad

    @requires_grad.setter
    def requires_grad(self, value: bool):
        if value and not self.dtype.is_floating_point:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        if not value and self._t._grad_fn is not None:
            # as torch: turning it off here would silently cut the graph
            raise RuntimeError("you can only change requires_grad flags of leaf variables. If "
                               "you want to use a computed variable in a subgraph that "
                               "doesn't require differentiation use var_no_grad = "
                               "var.detach().")
        self._t.requires_grad = bool(value)

    def requires_grad_(self, requires_grad: bool = True):
        self.requires_grad = requires_grad
        return self

    @property
    def grad(self):
        g = self._t.grad
        if g is None:
            if self._t._grad_fn is not None and not _dg._autograd.retains_grad(self._t):
                warnings.warn(
                    "The .grad attribute of a Tensor that is not a leaf Tensor is being "
                    "accessed. Its .grad attribute won't be populated during "
                    "autograd.backward(). To get the gradient of a non-leaf tensor, use "
                    "torch.autograd.grad(loss, [tensor]).", UserWarning, stacklevel=2)
            return None
        # the same Python object while the gradient tensor is the same (torch
        # users compare p.grad by identity); held weakly, so a dropped
        # gradient is not kept alive by the cache
        ref = getattr(self, "_grad_ref", None)
        w = ref() if ref is not None else None
        if w is not None and w._t is g:
            return w
        w = _w(g)
        self._grad_ref = _weakref.ref(w)
        return w

    @grad.setter
    def grad(self, value):
        if value is None:
            self._t.grad = None
            return
        g = _u(value)
        if not isinstance(g, _DgT):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of "
                            f"type {type(value).__name__}")
        t = self._t
        if tuple(g.shape) != tuple(t.shape):
            raise RuntimeError(f"attempting to assign a gradient of size '{list(g.shape)}' to "
                               f"a tensor of size '{list(t.shape)}'. Please ensure that the "
                               "gradient and the tensor are the same size")
        if g._dtype_code != t._dtype_code:
            raise RuntimeError(f"attempting to assign a gradient with dtype "
                               f"'{D.BY_CODE[g._dtype_code].name}' to a tensor with dtype "
                               f"'{D.BY_CODE[t._dtype_code].name}'. Please ensure that the "
                               "gradient and the tensor have the same dtype")
        if (g._device_name, g._device_index) != (t._device_name, t._device_index):
            raise RuntimeError(f"attempting to assign a gradient on {g.device} to a tensor "
                               f"on {t.device}. Please ensure that the gradient and the "
                               "tensor are on the same device")
        t.grad = g
        if isinstance(value, Tensor):
            self._grad_ref = _weakref.ref(value)   # p.grad is value, as torch's

    @property
    def is_leaf(self) -> bool:
        return self._t._grad_fn is None

    @property
    def grad_fn(self):
        return self._t._grad_fn

    @property
    def data(self):
        return _note_alias(self, _w(self._t._alias()))

    @data.setter
    def data(self, value):
        self._t.data = _u(value)

    def backward(self, gradient=None, retain_graph=None, create_graph: bool = False,
                 inputs=None):
        if inputs is not None:
            raise NotImplementedError("backward(inputs=...) is not supported; use "
                                      "torch.autograd.grad(outputs, inputs)")
        if not self._t.requires_grad:
            raise RuntimeError("element 0 of tensors does not require grad and does not have "
                               "a grad_fn")
        if gradient is None and self._t.size != 1:
            raise RuntimeError("grad can be implicitly created only for scalar outputs")
        self._t.backward(None if gradient is None else _u(gradient), create_graph=create_graph)

    def detach(self):
        return _note_alias(self, _w(self._t.detach()))

    def detach_(self):
        # A leaf from now on, as torch's, over the same memory; the graph
        # already recorded keeps the old tensor, so ops that used it before
        # still pass gradients through it (torch's recorded edges do).
        if self._t._grad_fn is None:
            self._t.requires_grad = False
        else:
            self._t = self._t.detach()
        return self

    def retain_grad(self):
        if not self._t.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        _dg._autograd.retain_grad(self._t)

    @property
    def retains_grad(self) -> bool:
        return _dg._autograd.retains_grad(self._t)

    def register_hook(self, hook):
        """``hook(grad)`` runs on this tensor's gradient in each backward pass
        and may return a replacement; returns a handle with ``remove()``."""
        if not self._t.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")

        def native(g):
            r = hook(_w(g))
            return None if r is None else _u(r)
        native.__name__ = getattr(hook, "__name__", "hook")
        return _dg._autograd.register_hook(self._t, native)

    def register_post_accumulate_grad_hook(self, hook):
        """``hook(tensor)`` runs after ``backward()`` accumulated this leaf's
        gradient into ``.grad``; returns a handle with ``remove()``."""
        if self._t._grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if not self._t.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        return _dg._autograd.register_post_accumulate_grad_hook(
            self._t, lambda t: hook(_w(t)))

    # ------------------------------------------------------------ conversion
    def numpy(self, force: bool = False):
        if _records(self._t) and not force:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        return self._t.numpy()

    def item(self):
        t = self._t
        if t.size != 1:
            raise RuntimeError(f"a Tensor with {t.size} elements cannot be converted to Scalar")
        return t.cpu().numpy().reshape(()).item()

    def tolist(self):
        return self._t.cpu().numpy().tolist()

    def __array__(self, dtype=None, copy=None):
        arr = self._t.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def __dlpack__(self, *args, **kwargs):
        return self._t.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._t.__dlpack_device__()

    def __float__(self):
        return float(self.item())

    def __int__(self):
        return int(self.item())

    def __bool__(self):
        if self._t.size != 1:
            raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
        return bool(self.item())

    def __index__(self):
        if self.dtype.is_floating_point or self._t.size != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        return int(self.item())

    def __len__(self):
        if self._t.ndim == 0:
            raise TypeError("len() of a 0-d tensor")
        return self._t.shape[0]

    def __iter__(self):
        if self._t.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        return iter(self.unbind(0))

    def __hash__(self):
        return id(self)

    def __repr__(self):
        arr = self._t.cpu().numpy()
        if arr.dtype.name == "bfloat16":
            arr = arr.astype(np.float32)
        body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000)
        extra = ""
        if self.dtype.name not in ("float32", "int64", "bool"):
            extra += f", dtype={self.dtype!r}"
        if self._t._device_name != "cpu":
            extra += f", device='{self.device}'"
        if self._t._grad_fn is not None and _grad_on():
            extra += ", grad_fn=<op>"
        elif self._t.requires_grad:
            extra += ", requires_grad=True"
        return f"tensor({body}{extra})"

    __str__ = __repr__

    def __format__(self, spec):
        if self._t.ndim == 0:
            return format(self.item(), spec)
        return repr(self)

    def __reduce_ex__(self, proto):
        raise TypeError("vm.torch tensors are not picklable; torch.save writes dragon_core's "
                        "safe format (no pickle)")

    def __deepcopy__(self, memo):
        # torch's contract: only graph leaves deep-copy (a copy of an
        # intermediate would silently drop its place in the graph), and the
        # copy keeps requires_grad and a copy of .grad.
        if id(self) in memo:
            return memo[id(self)]
        if self._t._grad_fn is not None:
            raise RuntimeError(
                "Only Tensors created explicitly by the user (graph leaves) support the "
                "deepcopy protocol at the moment: this tensor was computed by "
                f"{self._t._grad_fn.op} (detach() it first)")
        out = _w(self._t.detach()._clone())
        out._t.requires_grad = self._t.requires_grad
        if self._t.grad is not None:
            out._t.grad = self._t.grad.detach()._clone()
        memo[id(self)] = out
        return out

    # ------------------------------------------------------ dtype and device
    def to(self, *args, **kwargs):
        dt = kwargs.pop("dtype", None)
        dev = kwargs.pop("device", None)
        copy = kwargs.pop("copy", False)
        kwargs.pop("non_blocking", None)
        fmt = kwargs.pop("memory_format", None)
        for a in args:
            if isinstance(a, Tensor):
                dt, dev = a.dtype, a.device
            elif isinstance(a, D.dtype):
                dt = a
            elif a is not None:
                try:
                    dt = D.to_dtype(a) if not isinstance(a, str) or a.startswith("torch.") \
                        else None
                except TypeError:
                    dt = None
                if dt is None:
                    dev = a
        t = self._t
        if dt is not None:
            t = _cast(t, D.to_dtype(dt))
        if dev is not None:
            from ._device import device as _device
            d = _device(dev)
            if (d.type, d.index or 0) != (t._device_name, t._device_index):
                t = t._to_device(str(d))
        if copy and t is self._t:
            t = t._clone()
        if fmt is not None:
            t = t.to(memory_format=fmt)
        return self if t is self._t else _w(t)

    def type(self, dtype=None):
        if dtype is None:
            return {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor",
                    "int64": "torch.LongTensor", "int32": "torch.IntTensor",
                    "bool": "torch.BoolTensor", "float16": "torch.HalfTensor",
                    "uint8": "torch.ByteTensor", "int8": "torch.CharTensor",
                    "int16": "torch.ShortTensor", "bfloat16": "torch.BFloat16Tensor"
                    }[self.dtype.name]
        return self.to(D.to_dtype(dtype))

    def type_as(self, other):
        return self.to(other.dtype)

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{int(device)}")

    def float(self):
        return self.to(D.DTYPES["float32"])

    def double(self):
        return self.to(D.DTYPES["float64"])

    def half(self):
        return self.to(D.DTYPES["float16"])

    def bfloat16(self):
        return self.to(D.DTYPES["bfloat16"])

    def long(self):
        return self.to(D.DTYPES["int64"])

    def int(self):
        return self.to(D.DTYPES["int32"])

    def short(self):
        return self.to(D.DTYPES["int16"])

    def bool(self):
        return self.to(D.DTYPES["bool"])

    def byte(self):
        return self.to(D.DTYPES["uint8"])

    def char(self):
        return self.to(D.DTYPES["int8"])

    def contiguous(self, memory_format=_mf.contiguous_format):
        t = self._t.contiguous(memory_format)
        return self if t is self._t else _w(t)

    def is_contiguous(self, memory_format=_mf.contiguous_format) -> bool:
        return bool(self._t.is_contiguous(memory_format))

    def data_ptr(self) -> int:
        return self._t.data_ptr()

    def stride(self, dim=None):
        s = tuple(self._t.strides)  # in elements
        return s if dim is None else s[_dim(dim, len(s))]

    def clone(self, memory_format=_mf.preserve_format):
        # Mul by one and _clone keep a channels-last layout (preserve_format).
        if _records(self._t):
            out = _ops.mul(self._t, _as_dg(1, self.dtype))
        else:
            out = self._t._clone()
        if memory_format is not None and memory_format is not _mf.preserve_format:
            out = out.contiguous(memory_format)
        return _w(out)

    def pin_memory(self):
        return _w(self._t.pin_memory())

    def share_memory_(self):
        return self

    # ------------------------------------------------------------ operators
    def __add__(self, o):
        if type(o) is Tensor and o._t._dtype_code == self._t._dtype_code:
            out = _new(Tensor)
            out._t = self._t + o._t if self._t._dtype_code != _BOOL else \
                _ops.logical_or(self._t, o._t)   # torch: bool + bool is or
            return out
        return _binary("add", self, o)

    def __radd__(self, o):
        return _binary("add", o, self)

    def __sub__(self, o):
        _no_bool_sub(self, o)
        return _binary("sub", self, o)

    def __rsub__(self, o):
        _no_bool_sub(self, o)
        return _binary("sub", o, self)

    def __mul__(self, o):
        if type(o) is Tensor and o._t._dtype_code == self._t._dtype_code != _BOOL:
            out = _new(Tensor)
            out._t = self._t * o._t
            return out
        return _binary("mul", self, o)

    def __rmul__(self, o):
        return _binary("mul", o, self)

    def __truediv__(self, o):
        return _binary("div", self, o, _float_dt(self, o))

    def __rtruediv__(self, o):
        return _binary("div", o, self, _float_dt(self, o))

    def __floordiv__(self, o):
        return _F.floor_divide(self, o)

    def __rfloordiv__(self, o):
        return _F.floor_divide(o, self)

    def __mod__(self, o):
        return _F.remainder(self, o)

    def __rmod__(self, o):
        return _F.remainder(o, self)

    def __pow__(self, o):
        return _F.pow(self, o)

    def __rpow__(self, o):
        return _F.pow(o, self)

    def __matmul__(self, o):
        return _F.matmul(self, o)

    def __rmatmul__(self, o):
        return _F.matmul(o, self)

    def __neg__(self):
        if self.dtype.name == "bool":
            raise RuntimeError("Negation, the `-` operator, on a bool tensor is not supported. "
                               "If you are trying to invert a mask, use the `~` or "
                               "`logical_not()` operator instead.")
        return _w(_ops.neg(self._t))

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __invert__(self):
        return _F.bitwise_not(self)

    def __and__(self, o):
        return _F.bitwise_and(self, o)

    def __rand__(self, o):
        return _F.bitwise_and(o, self)

    def __or__(self, o):
        return _F.bitwise_or(self, o)

    def __ror__(self, o):
        return _F.bitwise_or(o, self)

    def __xor__(self, o):
        return _F.bitwise_xor(self, o)

    def __rxor__(self, o):
        return _F.bitwise_xor(o, self)

    def __lshift__(self, o):
        return _F.bitwise_left_shift(self, o)

    def __rlshift__(self, o):
        return _F.bitwise_left_shift(o, self)

    def __rshift__(self, o):
        return _F.bitwise_right_shift(self, o)

    def __rrshift__(self, o):
        return _F.bitwise_right_shift(o, self)

    def __eq__(self, o):
        return _compare("equal", self, o)

    def __ne__(self, o):
        return _compare("not_equal", self, o)

    def __lt__(self, o):
        return _compare("less", self, o)

    def __le__(self, o):
        return _compare("less_equal", self, o)

    def __gt__(self, o):
        return _compare("greater", self, o)

    def __ge__(self, o):
        return _compare("greater_equal", self, o)

    # in-place operators keep torch's identity rules (see _inplace)
    def __iadd__(self, o):
        return self.add_(o)

    def __isub__(self, o):
        return self.sub_(o)

    def __imul__(self, o):
        return self.mul_(o)

    def __itruediv__(self, o):
        return self.div_(o)

    def __ifloordiv__(self, o):
        return _inplace(self, _F.floor_divide(self, o), srcs=(o,))

    def __imod__(self, o):
        return _inplace(self, _F.remainder(self, o), srcs=(o,))

    def __ipow__(self, o):
        return self.pow_(o)

    def __iand__(self, o):
        return _inplace(self, _F.bitwise_and(self, o), srcs=(o,))

    def __ior__(self, o):
        return _inplace(self, _F.bitwise_or(self, o), srcs=(o,))

    def __ixor__(self, o):
        return _inplace(self, _F.bitwise_xor(self, o), srcs=(o,))

    def __ilshift__(self, o):
        return _inplace(self, _F.bitwise_left_shift(self, o), srcs=(o,))

    def __irshift__(self, o):
        return _inplace(self, _F.bitwise_right_shift(self, o), srcs=(o,))

    # -------------------------------------------------------------- indexing
    def __getitem__(self, key):
        from ._indexing import getitem
        return getitem(self, key)

    def __setitem__(self, key, value):
        from ._indexing import setitem
        setitem(self, key, value)


def _no_bool_sub(a, b):
    if a._t._dtype_code == _BOOL or isinstance(b, bool) or (
            isinstance(b, Tensor) and b._t._dtype_code == _BOOL):
        raise RuntimeError("Subtraction, the `-` operator, with a bool tensor is not "
                           "supported. If you are trying to invert a mask, use the `~` or "
                           "`logical_not()` operator instead.")


def _compare(name, a, b):
    if isinstance(b, Tensor) and a._t._dtype_code == b._t._dtype_code:
        return _w(getattr(_ops, name)(a._t, b._t))
    if not isinstance(b, (Tensor, numbers.Number, np.generic)):
        if name == "equal":
            return False
        if name == "not_equal":
            return True
        return NotImplemented
    if isinstance(b, numbers.Integral) and not isinstance(b, bool) and not a.dtype.is_floating_point:
        return _w(getattr(_ops, name)(_cast(a._t, D.DTYPES["int64"]),
                                      _as_dg(b, D.DTYPES["int64"], a._t.device)))
    return _binary(name, a, b)


def _dense(a) -> bool:
    """Whether NumPy array ``a``'s elements fill one gap-free block of
    memory, each once (torch's ``is_non_overlapping_and_dense``)."""
    if a.flags.c_contiguous or a.flags.f_contiguous:
        return True
    dims = sorted((abs(st), n) for st, n in zip(a.strides, a.shape) if n != 1)
    expect = a.itemsize
    for st, n in dims:
        if st != expect:
            return False
        expect *= n
    return True


def _byte_range(a):
    """[first, last) byte addresses that non-empty array ``a`` touches."""
    lo = hi = a.__array_interface__["data"][0]
    for st, n in zip(a.strides, a.shape):
        if st < 0:
            lo += (n - 1) * st
        else:
            hi += (n - 1) * st
    return lo, hi + a.itemsize


def _check_overlap(t, srcs, internal=True) -> None:
    """PyTorch's memory-overlap checks of an in-place write into host
    tensor ``t`` reading ``srcs``.

    The written-to tensor raises when several of its elements share memory
    (an expanded view; ``internal=False`` skips this, as torch's fill_,
    zero_, masked_fill_ and index_fill_ do). An input raises, as in torch,
    when both it and ``t`` are non-overlapping and dense and their memory
    ranges partly overlap (``x.add_(x.T)``, ``x[1:].copy_(x[:-1])``); an
    input that is exactly the written-to tensor (``x.mul_(x)``) is fine.
    Other layouts compute when their elements are disjoint
    (``x[::2].mul_(x[1::2])``). Where they do share elements
    (``x.sub_(x[:, :1])``) torch computes a result that depends on the
    order of its element loop (later elements read values written by
    earlier ones); vm.torch computes every input before it writes, so it
    refuses these instead of giving a different answer (see
    docs/from-pytorch.md). When NumPy cannot tell (``TooHardError``) it
    computes, as torch does."""
    if t._device_name != "cpu":
        return
    strides = t.strides
    if internal and 0 in strides and any(st == 0 and n > 1 for st, n in zip(strides, t.shape)):
        raise RuntimeError("unsupported operation: more than one element of the written-to "
                           "tensor refers to a single memory location. Please clone() the "
                           "tensor before performing the operation.")
    a = a_dense = None
    for src in srcs:
        if type(src) is not Tensor and not isinstance(src, Tensor):
            continue
        s = src._t
        if s is t or s._device_name != "cpu":
            continue
        if a is None:
            a = t.numpy()
            if not a.size:
                return
            a_dense = _dense(a)
        _check_pair_overlap(a, s.numpy(), a_dense)


def _check_pair_overlap(a, b, a_dense=None) -> None:
    """The input-overlap half of :func:`_check_overlap` for host arrays:
    ``a`` written, ``b`` read (``a_dense``: ``_dense(a)`` if known)."""
    if not a.size or not b.size or not np.may_share_memory(a, b):   # bounds only: cheap
        return
    a_lo, a_hi = _byte_range(a)
    b_lo, b_hi = _byte_range(b)
    if a_lo == b_lo and a_hi == b_hi and a.strides == b.strides and a.shape == b.shape:
        return   # the same elements (x.mul_(x))
    if (_dense(a) if a_dense is None else a_dense) and _dense(b):
        # torch's rule: two dense blocks that overlap at all overlap partly
        raise RuntimeError("unsupported operation: some elements of the input tensor and "
                           "the written-to tensor refer to a single memory location. "
                           "Please clone() the tensor before performing the operation.")
    try:
        shared = np.shares_memory(a, b, max_work=10**6)
    except np.exceptions.TooHardError:
        shared = False   # cannot tell: compute, as torch does
    if shared:
        raise RuntimeError(
            f"in-place operation on a {list(a.shape)} tensor whose input of shape "
            f"{list(b.shape)} shares some of its memory: torch computes a result that "
            f"depends on the order in which it writes the elements here, which "
            f"vm.torch does not reproduce (docs/from-pytorch.md). Please clone() the "
            f"input before performing the operation.")


def _inplace(self: Tensor, result: Tensor, srcs=(), internal_overlap=True) -> Tensor:
    """Make ``self`` hold ``result`` (PyTorch's in-place ``_`` methods).

    Outside autograd recording the result is written into ``self``'s memory
    (host tensors: a true in-place write that views and aliases see, and
    that bumps the memory's version, so a backward pass that saved it
    raises; other devices: the dragon tensor is rebound, which bumps its
    version too, so earlier views do not see it). While recording,
    ``self`` (this handle) takes the recorded result, as PyTorch's version
    of ``self`` in the graph would; a leaf that requires grad raises as in
    PyTorch, and so does a tensor whose memory other tensors share (they
    would not see the new value). A view computed as a copy (taken while
    recording or tracing) and the base of one refuse in-place writes in
    every mode (see :func:`_check_inplace_target`).
    """
    t = self._t
    r = result._t if isinstance(result, Tensor) else result
    recording = _grad_on() and (t.requires_grad or r.requires_grad)
    if recording and t.requires_grad and t._grad_fn is None:
        raise RuntimeError("a leaf Variable that requires grad is being used in an "
                           "in-place operation.")
    _check_inplace_target(self, "in-place operation", recording)
    if not _tracing():
        _check_overlap(t, srcs, internal_overlap)
    if r._dtype_code != t._dtype_code:
        _check_can_cast(D.BY_CODE[r._dtype_code], D.BY_CODE[t._dtype_code])
        r = _ops.cast(r, D.BY_CODE[t._dtype_code]._dg)
    if tuple(r.shape) != tuple(t.shape):
        r = _ops.broadcast_to(r, t.shape) if r.ndim <= t.ndim else None
        if r is None or tuple(r.shape) != tuple(t.shape):
            raise RuntimeError(f"output with shape {list(t.shape)} doesn't match the "
                               f"broadcast shape {list(result.shape)}")
    if recording:
        if _tracing() and not _made_in_trace(t):
            t.assign(r)   # captured state: the graph updates it
            return self
        _shared_memory_check(t, "in-place operation")
        if not r.requires_grad:
            # overwritten by a constant: torch's graph still reaches the old
            # value (with zero gradient)
            r = _ops.add(r, _zero_grad_zeros(t))
        self._t = r
        return self
    if _tracing():
        if _made_in_trace(t):
            self._t = r
        else:
            t.assign(r)
        return self
    if t._device_name == "cpu" and not t.is_read_only:
        # (bfloat16 too: NumPy holds it through ml_dtypes, so a view of a
        # bfloat16 tensor sees the write as for every other dtype)
        np.copyto(t.numpy(), r.numpy())
        t._bump_version()   # autograd's check of the tensors it saved
    else:
        t._rebind(r)
    return self


from . import _functions as _F  # noqa: E402  (the methods call the functions)
