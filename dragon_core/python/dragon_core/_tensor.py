"""Python-side parts of ``Tensor``: construction, promotion, indexing, printing.

The class itself, its storage and the operator fast paths live in C++
(``dragon_core._C.Tensor``); this module adds what is clearer in Python.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _C
from . import _memory_format as _mf
from ._device import Device
from ._dtypes import _DTYPES, as_dtype, dtype, dtype_arg

Tensor = _C.Tensor

_INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


# ------------------------------------------------------------ construction

def _numpy_of(data, dt):
    """``data`` as a NumPy array with torch-like default dtypes.

    Python ints are checked as NumPy 2 checks them: one that the dtype
    cannot hold raises OverflowError (never wraps).
    """
    if isinstance(data, np.ndarray):
        arr = data
    elif isinstance(data, np.generic):
        arr = np.asarray(data)
    else:
        if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in data):
            data = [x.numpy() if isinstance(x, Tensor) else x for x in data]
        if dt is not None and dt.name != "bfloat16":
            # NumPy 2 converts Python ints straight to the dtype, raising
            # OverflowError for one out of its range.
            return np.asarray(data, dtype=dt.numpy)
        arr = np.asarray(data)
        if dt is None:
            # Python floats become float32, ints int64 (torch's defaults).
            if arr.dtype == np.float64:
                if np.fmax.reduce(np.abs(arr), axis=None, initial=0.0) >= 2.0**63 and any(
                        _is_py_int(v) for v in np.asarray(data, dtype=object).ravel()):
                    # NumPy made floats of ints past int64 ([1, 2**63]):
                    # an int list is never silently rounded to float.
                    raise OverflowError("Python int too large to convert to int64 "
                                        "(give dtype='float32' to make floats of it)")
                arr = arr.astype(np.float32)
            elif arr.dtype.kind == "u" or arr.dtype == object:
                # Ints past int64 (NumPy made uint64 or object of them).
                arr = np.asarray(data, dtype=np.int64)
            elif arr.dtype.kind == "i" and arr.dtype != np.int64:
                arr = arr.astype(np.int64)
    if arr.dtype.kind in "OUSVcmM" and arr.dtype.name != "bfloat16":
        raise TypeError(f"cannot make a tensor from data of NumPy dtype {arr.dtype} "
                        f"(got {type(data).__name__})")
    if dt is not None and arr.dtype != dt.numpy:
        arr = arr.astype(dt.numpy)
    return arr


def _exact_operand(data, dt: dtype):
    """``data`` (a scalar or array given where a ``dt`` tensor is expected:
    an op input next to a tensor) as a NumPy array of ``dt``, refusing a
    conversion that changes a value: an integer out of an integer dtype's
    range raises OverflowError (as NumPy 2 does for Python ints; NumPy
    scalars and arrays too, never wrapping), a value an integer or bool
    input cannot hold exactly (2.5, nan, 2 for bool) raises TypeError.
    Float to float (rounding, as for any weak scalar) is allowed."""
    if dt.is_floating_point:
        return _numpy_of(data, dt)
    src = np.asarray(data)
    if src.dtype.kind not in "biuf":
        return _numpy_of(data, dt)
    if src.dtype.kind in "iu" and dt.name != "bool" and src.size:
        lo, hi = _int_range(dt)
        if int(src.min()) < lo or int(src.max()) > hi:
            raise OverflowError(f"integer(s) {_sample(src)} out of bounds for {dt.name}; cast "
                                "the tensor to a wider dtype first, e.g. x.astype('int64')")
    with np.errstate(invalid="ignore", over="ignore"):
        out = src.astype(dt.numpy)
        exact = np.array_equal(out.astype(src.dtype), src)
    if not exact:
        raise TypeError(f"{src.dtype} value(s) {_sample(src)} cannot be held by a {dt.name} "
                        "input without changing them; cast the tensor first "
                        "(e.g. x.astype('float32'))")
    return out


def _sample(arr: np.ndarray) -> str:
    flat = arr.ravel()
    return np.array2string(flat[:4], separator=", ") + (" ..." if flat.size > 4 else "")


def _convert(data, dt=None, device=None, operand=False) -> Tensor:
    """Convert ``data`` to a new tensor (the core calls this for scalars).

    ``operand`` is set by the core for a non-tensor op input that takes
    another input's dtype (``ops.add(x, 1000)``): the conversion must then
    keep every value (see :func:`_exact_operand`); otherwise ``dt`` is an
    explicit dtype request and casts as NumPy's ``astype`` does; then it is
    the user's (``dg.Tensor(data, dtype)``), so an int is refused: a dtype
    code is not a dtype (the core passes codes only with ``operand``).
    """
    if dt is not None:
        dt = as_dtype(dt) if operand else dtype_arg(dt, "Tensor: dtype")
    if isinstance(data, Tensor):
        out = data
        if dt is not None and out._dtype_code != dt.code:
            out = _C.call(_C.op("Cast"), (out,), (dt,))
    else:
        if hasattr(data, "__dlpack__") and not isinstance(data, np.ndarray):
            out = from_dlpack(data)
            if dt is not None and out._dtype_code != dt.code:
                out = _C.call(_C.op("Cast"), (out,), (dt,))
        else:
            arr = _exact_operand(data, dt) if operand and dt is not None else _numpy_of(data, dt)
            if operand and device is not None and arr.ndim == 0 and dt is not None:
                # A scalar operand of an op on a non-cpu device (ops.mul(x, 0.9)).
                name = device if type(device) is str else str(device)
                if not name.startswith("cpu") and not _C._is_tracing():
                    return _device_scalar(arr, dt, name)
            out = _C._from_numpy_copy(arr)
            if _C._is_tracing():
                from ._graph.function import note_created
                note_created(out)
    if device is not None:
        dev = Device.parse(device)
        if str(dev) != f"{out._device_name}:{out._device_index}":
            out = out._to_device(str(dev))
    return out


def tensor(data, dtype=None, device=None) -> Tensor:
    """Create a tensor from data (always copies).

    Parameters
    ----------
    data : array_like or Tensor
        A NumPy array, a (nested) list, a Python scalar or a tensor. Python
        floats become float32 and Python ints int64 unless ``dtype`` is
        given; NumPy arrays keep their dtype.
    dtype : dtype, str or numpy.dtype, optional
        The element type.
    device : str, optional
        Where to put the tensor (default: the host, ``"cpu"``).

    Returns
    -------
    Tensor

    Raises
    ------
    OverflowError
        If a Python int does not fit the dtype (as NumPy 2 raises).
    TypeError
        If ``dtype`` is not a dtype (an int is not: ``tensor(x, 3)``).
    """
    if dtype is not None:
        dtype = dtype_arg(dtype, "tensor: dtype")
    if isinstance(data, Tensor) or (hasattr(data, "__dlpack__")
                                    and not isinstance(data, np.ndarray)):
        src = data if isinstance(data, Tensor) else from_dlpack(data)
        out = _convert(src, dtype, device)
        return out._clone() if out._same_storage(src) else out
    return Tensor(data, dtype, device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with a host NumPy array (zero-copy, any strides).

    Parameters
    ----------
    array : numpy.ndarray
        The array. A read-only array (``np.frombuffer`` of ``bytes``, a
        ``np.memmap`` opened with ``mode="r"``) gives a read-only tensor:
        ``Tensor.is_read_only`` is True, its ``numpy()`` views are read-only
        and nothing writes its memory (operations make new tensors). An
        array whose strides or address do not fit its item size is copied.

    Returns
    -------
    Tensor

    Raises
    ------
    TypeError
        If ``array`` is not a NumPy array.
    ValueError
        If the array's byte order is not the machine's (``'>f4'`` on a
        little-endian host): a view cannot reorder bytes. Use
        ``dg.tensor(array)`` (copies) or
        ``array.astype(array.dtype.newbyteorder('='))``.
    """
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    return _C.from_numpy(array)


def from_dlpack(obj) -> Tensor:
    """A zero-copy tensor over any object implementing ``__dlpack__``.

    A producer that speaks DLPack 1.0 is asked for a versioned capsule, so a
    read-only producer (a read-only NumPy array) gives a read-only tensor.
    """
    if isinstance(obj, Tensor):
        return obj
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"from_dlpack expects an object with __dlpack__, got {type(obj).__name__}")
    stream = _C._dlpack_consumer_stream(*obj.__dlpack_device__()) \
        if hasattr(obj, "__dlpack_device__") else None
    # On a stream-ordered device the producer orders our current stream.
    kwargs = {} if stream is None else {"stream": stream}
    try:
        capsule = obj.__dlpack__(max_version=(1, 0), **kwargs)
    except TypeError:  # a producer older than DLPack 1.0 takes no max_version
        capsule = obj.__dlpack__(**kwargs)
    return _C._from_dlpack_capsule(capsule)


# ---------------------------------------------------------------- promotion

_SIGNED_INTS = ("int8", "int16", "int32", "int64")


def _promote(a: dtype, b: dtype) -> dtype:
    """The dtype two tensors of dtypes ``a`` and ``b`` compute in: NumPy's
    promotion (which equals the array API standard's table where the
    standard defines one), except that uint64 with a signed integer raises
    (NumPy gives float64, which loses every integer past 2**53; the array
    API leaves the pair unspecified). See docs/python-api.md, "Dtypes"."""
    if a == b:
        return a
    if {a.name, b.name} & {"uint64"} and {a.name, b.name} & set(_SIGNED_INTS):
        raise TypeError(
            f"cannot promote uint64 with {b.name if a.name == 'uint64' else a.name}: no "
            f"integer dtype holds both (NumPy would compute in float64 and lose "
            f"integers past 2**53); cast one operand first, e.g. x.astype('int64') "
            f"or x.astype('float64')")
    if "bfloat16" in (a.name, b.name):
        other = b if a.name == "bfloat16" else a
        if other.name in ("float32", "float64"):
            return other
        return as_dtype("float32") if other.name == "float16" else as_dtype("bfloat16")
    return as_dtype(np.result_type(a.numpy, b.numpy))


def _scalar_dtype(t: dtype, value) -> dtype:
    """The dtype of ``tensor op scalar`` (a Python scalar is 'weak')."""
    if isinstance(value, (bool, np.bool_)):
        return t
    if isinstance(value, numbers.Integral):
        return as_dtype("int64") if t.name == "bool" else t
    if isinstance(value, numbers.Real):
        return t if t.is_floating_point else as_dtype("float32")
    raise TypeError(f"unsupported operand type {type(value).__name__}")


_FLOAT_ONLY = {"div"}
_COMPARISONS = {"equal", "not_equal", "less", "less_equal", "greater", "greater_equal"}
_REFLECTED = {"less": "greater", "less_equal": "greater_equal", "greater": "less",
              "greater_equal": "less_equal", "equal": "equal", "not_equal": "not_equal"}
_OPERATOR = {"add": "+", "sub": "-", "mul": "*", "div": "/", "pow": "**", "matmul": "@",
             "logical_and": "&", "logical_or": "|", "bitwise_and": "&", "bitwise_or": "|",
             "bitwise_xor": "^", "left_shift": "<<", "right_shift": ">>",
             "floor_divide": "//", "mod": "%"}


def _int_range(t: dtype) -> tuple[int, int]:
    if t.name == "bool":
        return 0, 1
    info = np.iinfo(t.numpy)
    return int(info.min), int(info.max)


def _is_py_int(value) -> bool:
    return (isinstance(value, (numbers.Integral, np.integer))
            and not isinstance(value, (bool, np.bool_)))


def _scalar_operand(value, target: dtype, device: Device) -> Tensor:
    """A Python scalar as a 0-d tensor of ``target`` (range already checked
    for integer targets; an int past a float dtype's range is +-inf, one
    past float64's range raises OverflowError, as NumPy 2 gives). On a
    non-cpu device it is the cached immutable tensor of that value
    (:func:`_device_scalar`)."""
    if target.is_floating_point and _is_py_int(value):
        value = float(value)  # OverflowError past float64, as NumPy 2 raises
    with np.errstate(over="ignore"):
        arr = np.asarray(value, dtype=target.numpy)
    if device.type != "cpu" and not _C._is_tracing():
        return _device_scalar(arr, target, str(device))
    return _convert(arr, target, device)


# Scalar operands on non-cpu devices (``x * 0.9``, ``ops.add(x, 1.0)`` with
# x on cuda): made once per (device, dtype, value) and reused, instead of a
# new tensor and a pageable host-to-device copy at every call (about a
# hundred per eager ResNet step, for the batch-norm running statistics and
# the optimizer's constants). The cache lives in the core (bind_ops.cc,
# DeviceScalar), shared with the C++ operator fast path. The value is the
# dtype's exact bits (so -0.0 and 0.0, and NaN payloads, stay apart), the
# conversion and therefore every result are those of a fresh tensor, and
# dtype promotion happens before (the key's dtype is the operand's final
# dtype). Each cached tensor is read-only, and the cache never hands one to
# user code as a result: it only feeds ops as an input. Ops never write
# their inputs in eager mode, the dispatcher never writes an output over
# read-only memory, in-place front-end writes on devices rebind rather than
# write, and graph traces bypass the cache (their constants are their own).
# First in, first out past _SCALAR_CACHE_SIZE entries: a value that changes
# every step (a learning-rate schedule) costs what it cost before and
# evicts nothing hot for long. memory.empty_cache(device) drops a device's
# entries.
_SCALAR_CACHE_SIZE = 256  # kMaxDeviceScalars in dragon_core/src/python/bind_ops.cc


def _device_scalar(arr: np.ndarray, dt: dtype, device: str) -> Tensor:
    """The cached read-only 0-d ``dt`` tensor on ``device`` (not the cpu)
    holding ``arr`` (a 0-d array of ``dt``)."""
    return _C._device_scalar(arr.tobytes(), dt.code, device)


def _drop_device_scalars(device=None) -> None:
    """Forget the cached scalar operands of ``device`` (all when None)."""
    _C._drop_device_scalars(None if device is None else str(Device.parse(device)))


def _compare_out_of_range(py_name: str, a: Tensor, value: int, reflected: bool):
    """``a <op> value`` for an int ``value`` that a's dtype cannot hold: the
    exact answer, as NumPy 2 gives (``int8 < 1000`` is all True)."""
    ops = _ops_module()
    name = _REFLECTED[py_name] if reflected else py_name
    if _INT64_MIN <= value <= _INT64_MAX and a.dtype.name != "uint64":
        # Every other integer dtype fits int64, so the comparison is exact there.
        wide = a.to(as_dtype("int64"))
        return getattr(ops, name)(wide, _scalar_operand(value, wide.dtype, a.device))
    # Beyond the dtype's range (int64's, or uint64's): every element is below
    # a positive value, above a negative one.
    below = value > 0
    truth = {"less": below, "less_equal": below, "greater": not below,
             "greater_equal": not below, "equal": False, "not_equal": True}[name]
    return ops.equal(a, a) if truth else ops.not_equal(a, a)


def _binary_slow(py_name: str, a: Tensor, b, reflected: bool):
    """Operators on mixed dtypes or with non-tensor operands.

    Python scalars are 'weak' (they take the tensor's dtype, see
    :func:`_scalar_dtype`); as in NumPy 2, an int that the tensor's integer
    dtype cannot hold raises OverflowError, except in comparisons, which
    give the exact answer.
    """
    ta = a.dtype
    if isinstance(b, Tensor):
        target = _promote(ta, b.dtype)
    elif isinstance(b, np.generic) and b.dtype.kind in "biuf":
        # NumPy scalars are strong in NumPy 2 (NEP 50): np.int64(100) with
        # an int8 tensor computes in int64, as a 0-d array of its dtype would.
        b = _convert(np.asarray(b), None, a.device)
        target = _promote(ta, b.dtype)
    elif isinstance(b, (numbers.Number, np.generic)) and not isinstance(b, complex):
        target = _scalar_dtype(ta, b)
        if py_name in _FLOAT_ONLY and not target.is_floating_point:
            target = as_dtype("float32")
        if _is_py_int(b) and not target.is_floating_point:
            lo, hi = _int_range(target)
            if not lo <= int(b) <= hi:
                if py_name in _COMPARISONS:
                    return _compare_out_of_range(py_name, a, int(b), reflected)
                sym = _OPERATOR.get(py_name, py_name)
                expr = f"{int(b)} {sym} x" if reflected else f"x {sym} {int(b)}"
                raise OverflowError(
                    f"{py_name}: Python integer {int(b)} out of bounds for {target.name} "
                    f"({expr}, x: {ta.name} tensor of shape {list(a.shape)} on "
                    f"{a.device}); cast the tensor to a wider dtype first, e.g. "
                    f"x.astype('int64')")
        b = _scalar_operand(b, target, a.device)
    elif isinstance(b, (list, tuple, np.ndarray)):
        b = _convert(b, None, a.device)
        target = _promote(ta, b.dtype)
    else:
        return NotImplemented
    if py_name in _FLOAT_ONLY and not target.is_floating_point:
        target = as_dtype("float32")
    if a._dtype_code != target.code:
        a = a.to(target)
    if b._dtype_code != target.code:
        b = b.to(target)
    fn = getattr(_ops_module(), py_name)
    return fn(b, a) if reflected else fn(a, b)


def _ops_module():
    from . import ops
    return ops


# ---------------------------------------------------------------- indexing

def _is_index_tensor(k) -> bool:
    if isinstance(k, Tensor):
        return True
    if isinstance(k, np.ndarray):
        return True
    return isinstance(k, list)


def _getitem(x: Tensor, key):
    ops = _ops_module()
    if not isinstance(key, tuple):
        key = (key,)
    if any(_is_index_tensor(k) for k in key):
        if len(key) != 1:
            raise NotImplementedError("indexing with a tensor combined with other indices is "
                                      "not supported yet; use ops.gather")
        idx = key[0] if isinstance(key[0], Tensor) else tensor(np.asarray(key[0]))
        if idx.dtype.name == "bool":
            raise NotImplementedError("boolean mask indexing is not supported yet")
        if idx.dtype.name not in ("int32", "int64"):
            raise IndexError(f"tensor index must be int32 or int64, got {idx.dtype}")
        return ops.gather(x, idx, 0)
    n_ellipsis = sum(1 for k in key if k is Ellipsis)
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if n_real > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if n_ellipsis:
        i = next(i for i, k in enumerate(key) if k is Ellipsis)
        key = key[:i] + (slice(None),) * (x.ndim - n_real) + key[i + 1:]
    starts, ends, steps, axes = [], [], [], []
    squeeze, new_axes = [], []
    in_axis = out_pos = 0
    shape = x.shape
    for k in key:
        if k is None:
            new_axes.append(out_pos)
            out_pos += 1
        elif isinstance(k, slice):
            step = 1 if k.step is None else int(k.step)
            if step == 0:
                raise ValueError("slice step cannot be zero")
            start = (0 if step > 0 else _INT64_MAX) if k.start is None else int(k.start)
            end = (_INT64_MAX if step > 0 else _INT64_MIN) if k.stop is None else int(k.stop)
            if not (start == 0 and end == _INT64_MAX and step == 1):
                starts.append(start)
                ends.append(end)
                steps.append(step)
                axes.append(in_axis)
            in_axis += 1
            out_pos += 1
        elif isinstance(k, (numbers.Integral, np.integer)) and not isinstance(k, bool):
            i = int(k)
            size = shape[in_axis]
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for axis {in_axis} with size {size}")
            i = i + size if i < 0 else i
            starts.append(i)
            ends.append(i + 1)
            steps.append(1)
            axes.append(in_axis)
            squeeze.append(in_axis)
            in_axis += 1
        else:
            raise IndexError(f"unsupported index {k!r}: use ints, slices, None, "
                             "Ellipsis or an integer tensor")
    y = x
    if axes:
        y = ops.slice(y, starts, ends, steps, axes)
    if squeeze:
        y = ops.squeeze(y, squeeze)
    if new_axes:
        y = ops.unsqueeze(y, new_axes)
    return y


# ---------------------------------------------------------------- printing

def _repr(x: Tensor) -> str:
    host = x if x._device_name == "cpu" else x._to_device("cpu")
    arr = host.numpy()
    if arr.dtype.name == "bfloat16":
        arr = arr.astype(np.float32)
    body = np.array2string(arr, separator=", ", prefix="tensor(", threshold=1000)
    extra = f", dtype={x.dtype.name}"
    if x._device_name != "cpu" or x._device_index != 0:
        extra += f", device='{x.device}'"
    return f"tensor({body}{extra})"


# ---------------------------------------------------------------- methods

def _install():
    T = Tensor
    T.dtype = property(lambda self: _DTYPES[self._dtype_code],
                       doc="The element type (a dragon_core.dtype).")
    T.device = property(lambda self: Device(self._device_name, self._device_index),
                        doc="The device holding the tensor.")
    T.__repr__ = _repr
    T.__str__ = _repr
    T.__getitem__ = _getitem

    def __setitem__(self, key, value):
        raise TypeError("Tensor does not support item assignment; build a new tensor with "
                        "ops (e.g. ops.where) instead")
    T.__setitem__ = __setitem__

    if not hasattr(T, "_is_contiguous_strides"):
        T._is_contiguous_strides = T.is_contiguous

    def is_contiguous(self, memory_format=_mf.contiguous_format):
        """Whether the strides are those of the dense layout ``memory_format``
        (:data:`dragon_core.contiguous_format`, the default: row-major;
        :data:`dragon_core.channels_last`: a rank-4 ``[N, C, H, W]`` tensor laid
        out as ``[N, H, W, C]``; :data:`dragon_core.channels_last_3d`: rank 5).
        Size-1 axes are ignored, so a tensor may be both."""
        return _mf.is_contiguous(self, memory_format)
    T.is_contiguous = is_contiguous

    def contiguous(self, memory_format=_mf.contiguous_format):
        """``self`` if already dense in ``memory_format``, else a dense copy in
        that layout (same shape and values; differentiable).

        ``x.contiguous(dragon_core.channels_last)`` gives a channels-last
        tensor: still ``[N, C, H, W]``, with the strides of ``[N, H, W, C]``.
        ``preserve_format`` keeps a channels-last tensor channels-last.

        Raises
        ------
        ValueError
            ``channels_last`` for a tensor that is not rank 4
            (``channels_last_3d``: rank 5).
        """
        return _mf.contiguous(self, memory_format)
    T.contiguous = contiguous

    def to(self, target=None, dtype=None, non_blocking=False, memory_format=None):
        """Return the tensor on another device and/or with another dtype.

        ``x.to("toy")``, ``x.to(dragon_core.float64)``, ``x.to("cpu", "float32")``,
        ``x.to(memory_format=dragon_core.channels_last)`` (then as
        :meth:`contiguous`, after the device and dtype conversions).
        A no-op returns ``self``. ``non_blocking=True`` with a pinned host
        tensor (``pin_memory()``) and a stream-ordered device returns before
        the copy ran (it is ordered on the current stream); otherwise it is
        the ordinary copy.
        """
        if memory_format is not None:
            fmt = _mf.as_memory_format(memory_format, "to")
            if fmt is _mf.preserve_format:
                fmt = _mf.suggest_memory_format(self)
            _mf._check_rank(self, fmt, "to")
            return _mf.contiguous(to(self, target, dtype, non_blocking), fmt)
        out = self
        dev = None
        if isinstance(target, (str, Device)):
            try:
                dt_target = as_dtype(target) if isinstance(target, str) else None
            except TypeError:
                dt_target = None
            if dt_target is not None:
                dtype = dt_target
            else:
                dev = Device.parse(target)
        elif target is not None:
            dtype = target
        if dtype is not None:
            dt = dtype_arg(dtype, "to: dtype")
            if dt.code != out._dtype_code:
                out = _ops_module().cast(out, dt)
        if dev is not None and (dev.type, dev.index) != (out._device_name, out._device_index):
            out = (_C._to_device_non_blocking(out, str(dev)) if non_blocking
                   else out._to_device(str(dev)))
        return out
    T.to = to

    def pin_memory(self, device=None):
        """A copy of this host tensor in pinned (page-locked) memory of
        ``device``'s type (default: the first device plugin that offers it),
        for ``to(device, non_blocking=True)``."""
        return _C._pin_memory(self, "" if device is None else str(device))
    T.pin_memory = pin_memory
    T.is_pinned = lambda self: _C._is_pinned(self)
    T.is_pinned.__doc__ = "Whether this host tensor lives in pinned memory."
    T.cpu = lambda self: self.to("cpu")
    T.cpu.__doc__ = "Return a copy on the host (or ``self`` if already there)."
    T.astype = lambda self, dt: self.to(None, dtype_arg(dt, "astype: dtype"))

    def _data_get(self):
        out = self._alias()
        if _C._is_tracing():
            # as detach(): the trace must know the alias reads this tensor,
            # or it would capture the trace-time storage as a constant
            from ._graph.function import note_alias
            note_alias(self, out)
        return out

    def _data_set(self, value):
        if not isinstance(value, Tensor):
            raise TypeError(f"Tensor.data: expected a Tensor, got {type(value).__name__}")
        if _C._is_tracing():
            # A traced function records state changes through assign, which
            # keeps the shape: the compiled step's state has a fixed one.
            if tuple(value.shape) != tuple(self.shape) or value.dtype != self.dtype:
                raise ValueError(
                    f"Tensor.data = inside a traced function (@dragon_core.function) takes "
                    f"a value of the tensor's shape and dtype: the tensor is "
                    f"{self.dtype.name}{list(self.shape)}, the value "
                    f"{value.dtype.name}{list(value.shape)}; change the shape outside "
                    f"the function (eager .data = takes any shape)")
            self.assign(value)
        else:
            self._set_data(value)
    T.data = property(_data_get, _data_set, doc=(
        "The tensor's value without autograd history (PyTorch's ``.data``). "
        "Reading gives a tensor sharing storage, detached (``requires_grad`` False). "
        "Assigning a tensor of the same dtype and device (any shape) makes this "
        "tensor view it, in place: the object, its identity and its autograd state "
        "stay, so optimizers holding it see the new value."))

    # ``.grad`` takes None or a tensor of the tensor's shape, dtype and
    # device, as in PyTorch: a gradient of another shape would broadcast in
    # an optimizer's update, one of another dtype would widen it.
    raw_grad = T.__dict__.get("_raw_grad") or T.__dict__["grad"]
    T._raw_grad = raw_grad

    def _grad_set(self, g):
        if g is not None:
            if not isinstance(g, Tensor):
                raise TypeError(f"Tensor.grad: expected a Tensor or None, got "
                                f"{type(g).__name__}")
            if (tuple(g.shape) != tuple(self.shape) or g._dtype_code != self._dtype_code
                    or (g._device_name, g._device_index)
                    != (self._device_name, self._device_index)):
                raise ValueError(
                    f"Tensor.grad: assigned a gradient {g.dtype.name} of shape "
                    f"{tuple(g.shape)} on {g.device} to a tensor {self.dtype.name} of shape "
                    f"{tuple(self.shape)} on {self.device}; a gradient has the tensor's "
                    "shape, dtype and device (reshape or cast it first)")
        if _C._is_tracing():
            # an overwrite the compiled step must replay (``leaf.grad = None``
            # inside a trace): announce it, so the trace is not retaken on
            # every call
            from . import _autograd
            _autograd.grad_access(self, reads=False)
        raw_grad.fset(self, g)
    T.grad = property(raw_grad.fget, _grad_set, doc=raw_grad.__doc__)

    def assign(self, value):
        """Make this tensor hold ``value`` (same shape and dtype), in place.

        Inside a ``@function`` the assignment becomes a state update of the
        graph: the variable takes the new value after each run. A value that
        is not a tensor takes the tensor's dtype only if no element changes:
        an int out of range raises OverflowError, 2.5 for an integer tensor
        TypeError (never a wrapped or truncated value).
        """
        if not isinstance(value, Tensor):
            value = _convert(value, self.dtype, self.device, operand=True)
            if value.is_read_only:
                # A scalar on a non-cpu device comes from the core's shared
                # cache of read-only operands: this tensor gets its own copy.
                value = value._clone()
        if _C._is_tracing():
            from ._graph.function import note_assign
            note_assign(self, value)
        self._rebind(value)
        return self
    T.assign = assign

    def item(self):
        """The value of a one-element tensor as a Python scalar."""
        if self.size != 1:
            raise ValueError(f"item() needs a tensor with one element, got shape {self.shape}")
        return self.cpu().numpy().reshape(()).item()
    T.item = item
    T.tolist = lambda self: self.cpu().numpy().tolist()
    T.__bool__ = lambda self: bool(item(self))
    T.__float__ = lambda self: float(item(self))
    T.__int__ = lambda self: int(item(self))

    def __index__(self):
        if self.dtype.is_floating_point or self.size != 1:
            raise TypeError("only integer tensors of one element can be used as an index")
        return int(item(self))
    T.__index__ = __index__
    T.__neg__ = lambda self: _ops_module().neg(self)
    T.__abs__ = lambda self: _ops_module().abs(self)

    def __invert__(self):
        # NumPy's ~: bitwise not on integers, logical not on bool, a TypeError on floats.
        if self.dtype.is_floating_point:
            raise TypeError(f"~ (bitwise not) is not defined for {self.dtype.name} tensors, "
                            f"as in NumPy; use dragon_core.ops.logical_not(x) for x == 0")
        return _ops_module().bitwise_not(self)
    T.__invert__ = __invert__
    T.__pos__ = lambda self: self

    def __iter__(self):
        if self.ndim == 0:
            raise TypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]
    T.__iter__ = __iter__
    T.__array_priority__ = 1000  # numpy defers to our reflected operators


_RESERVED: set[str] = set()
#: methods written by hand in _install_methods (their op's function differs)
_HAND_METHODS = frozenset({"transpose", "reshape", "contiguous", "is_contiguous"})


def _install_methods():
    """Every op its schema marks as a method becomes a Tensor method.

    ``dragon_core._opgen.is_tensor_method`` decides (gradients, optimizer
    updates and layout-internal ops are not methods); a method installed
    earlier for an op that is no longer one is removed.
    """
    from ._opgen import is_tensor_method
    ops = _ops_module()
    if not _RESERVED:
        _RESERVED.update(dir(Tensor))
    for desc in _C.list_ops():
        name = desc["py_name"]
        if name in _RESERVED or name in _HAND_METHODS:
            continue
        fn = getattr(ops, name, None)
        if fn is not None and is_tensor_method(desc):
            setattr(Tensor, name, fn)
        elif getattr(Tensor.__dict__.get(name), "_dragon_op", None) == desc["name"]:
            delattr(Tensor, name)

    def reshape(self, *shape):
        """Reshape: ``x.reshape(2, 3)`` or ``x.reshape((2, 3))``."""
        if len(shape) == 1 and not isinstance(shape[0], numbers.Integral):
            shape = tuple(shape[0])
        return ops.reshape(self, shape)
    Tensor.reshape = reshape

    def permute(self, *perm):
        """Permute axes: ``x.permute(1, 0)`` or ``x.permute((1, 0))``."""
        if len(perm) == 1 and not isinstance(perm[0], numbers.Integral):
            perm = tuple(perm[0])
        return ops.transpose(self, perm)
    Tensor.permute = permute

    def transpose(self, *axes):
        """Permute axes as NumPy does: ``x.transpose()`` reverses them,
        ``x.transpose(1, 0)`` and ``x.transpose((1, 0))`` permute them."""
        if len(axes) == 1 and (axes[0] is None or not isinstance(axes[0], numbers.Integral)):
            axes = axes[0]
        return ops.transpose(self, tuple(axes) if axes else None)
    Tensor.transpose = transpose
    Tensor.T = property(lambda self: ops.transpose(self), doc="Axes reversed (``x.transpose()``).")
