"""Tensor creation (``torch.tensor``, ``zeros``, ``arange``, ``randn``, ...)
and the random generator (``torch.manual_seed``)."""

from __future__ import annotations

import functools
import math
import numbers
import warnings

import numpy as np

import dragon_core as _dg
from dragon_core import _C, ops as _ops
from dragon_core import _memory_format as _mf

from . import _dtype as D
from ._tensor import Tensor, _shape_args, _w

_INITIAL_SEED = int(np.random.SeedSequence().entropy % 2**63)
_RNG = [np.random.default_rng(_INITIAL_SEED)]

def _np_c(arr):
    """``arr`` C-contiguous (keeps 0-d arrays 0-d, unlike ascontiguousarray)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")



def _np_rng() -> np.random.Generator:
    return _RNG[0]


def _tracing() -> bool:
    """Inside ``torch.compile`` / ``dg.function``: a number drawn on the host
    would become a constant of the trace (the same at every call), so the
    random creation functions draw with graph ops there."""
    from dragon_core.plugin_api import is_tracing
    return is_tracing()


# torch's default seed of a new Generator (and of the process's default one).
_DEFAULT_SEED = 67280421310721
_SEED_STATE = [_INITIAL_SEED]  # initial_seed() of the global generator


def _check_seed(seed, who: str) -> int:
    """``seed`` as torch keeps it: an integer, negative ones wrapped to 64 bits."""
    if isinstance(seed, bool) or not isinstance(seed, (numbers.Integral, Tensor)):
        raise TypeError(f"{who}: seed must be an int, not {type(seed).__name__}")
    seed = int(seed)
    if not -2**63 <= seed < 2**64:
        raise RuntimeError(f"{who}: Overflow when unpacking long (seed {seed} does not fit "
                           f"in 64 bits)")
    return seed % 2**64


def manual_seed(seed: int):
    """Seed dragon_core's generator (dropout, ``rand``, ``randn``) and the
    host generator behind ``randint``/``randperm``/``multinomial``; returns
    ``torch.default_generator``. A ``torch.Generator`` of the user's own is
    not affected (it keeps its own state)."""
    seed = _check_seed(seed, "manual_seed")
    # Dragon's kernels take a signed 64-bit seed: the same bits.
    _dg.manual_seed(seed - 2**64 if seed >= 2**63 else seed)
    _RNG[0] = np.random.default_rng(seed)
    _SEED_STATE[0] = seed
    return default_generator


def _state_tensor(state: dict) -> Tensor:
    """A generator's state as a 1-d uint8 tensor (``get_state``)."""
    import json
    raw = json.dumps(state, sort_keys=True).encode()
    return _finish(_C._from_numpy_copy(np.frombuffer(raw, np.uint8).copy()))


def _state_from(state, who: str, keys) -> dict:
    """The dict ``_state_tensor`` wrote, checked: a clear error for anything else."""
    import json
    if not isinstance(state, Tensor) or state.dtype is not D.DTYPES["uint8"] or \
            state.dim() != 1:
        what = type(state).__name__ + (f" of dtype {state.dtype} and shape "
                                       f"{tuple(state.shape)}" if isinstance(state, Tensor)
                                       else "")
        raise TypeError(f"{who}: expected the 1-d torch.uint8 tensor get_state() returns, "
                        f"got {what}")
    try:
        st = json.loads(state.numpy().tobytes().decode())
        if not isinstance(st, dict) or set(st) != set(keys):
            raise ValueError(f"fields {sorted(st) if isinstance(st, dict) else st!r}")
        np.random.default_rng().bit_generator.state = st["host"]  # validates
    except Exception as exc:
        raise RuntimeError(f"{who}: not a state this generator's get_state() wrote "
                           f"({type(exc).__name__}: {exc})") from None
    return st


class Generator:
    """A random number generator with a state of its own, as ``torch.Generator``:
    ``manual_seed`` / ``seed`` / ``initial_seed`` / ``get_state`` / ``set_state``.

    Passed as ``generator=`` to ``rand``, ``randn``, ``randint``, ``randperm``,
    ``normal``, the in-place ``*_`` samplers, ``multinomial``, ``random_split``,
    the samplers and ``DataLoader``, it alone decides their numbers: seeding
    it does not touch the global generator (``torch.manual_seed``) nor the
    other way round. Its draws are made on the host (NumPy's PCG64), so the
    numbers are not torch's bit for bit; the same seed gives the same numbers.
    Inside ``torch.compile`` a call with ``generator=`` raises (a host draw
    would become a constant of the trace).
    """

    def __init__(self, device="cpu"):
        from ._device import device as _device
        d = _device(device)
        if d.type != "cpu":
            raise RuntimeError(f"torch.Generator(device={str(d)!r}): only 'cpu' generators "
                               f"are supported (their draws are made on the host)")
        self.device = d
        self._seed = _DEFAULT_SEED
        self._rng = np.random.default_rng(_DEFAULT_SEED)

    def _host(self) -> np.random.Generator:
        return self._rng

    def manual_seed(self, seed):
        self._seed = _check_seed(seed, "Generator.manual_seed")
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        s = int(np.random.SeedSequence().entropy % 2**63)
        self.manual_seed(s)
        return s

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> Tensor:
        return _state_tensor({"host": self._rng.bit_generator.state, "seed": self._seed})

    def set_state(self, new_state):
        st = _state_from(new_state, "Generator.set_state", ("host", "seed"))
        self._rng.bit_generator.state = st["host"]
        self._seed = int(st["seed"])
        return self

    def __repr__(self):
        return f"<torch.Generator object (dragon_core.vm.torch), device={self.device}>"


class _DefaultGenerator(Generator):
    """``torch.default_generator``: the global state (``torch.manual_seed``)."""

    def __init__(self):
        super().__init__("cpu")

    def _host(self):
        return _RNG[0]

    def manual_seed(self, seed):
        manual_seed(seed)
        return self

    def initial_seed(self) -> int:
        return _SEED_STATE[0]

    # The global state is Dragon's kernel generator (rand, randn, dropout:
    # one 64-bit counter) and the host generator (randint, randperm, ...).
    def get_state(self) -> Tensor:
        return _state_tensor({"host": _RNG[0].bit_generator.state, "device": _C.seed_state(),
                              "seed": _SEED_STATE[0]})

    def set_state(self, new_state):
        st = _state_from(new_state, "set_rng_state", ("host", "device", "seed"))
        _RNG[0].bit_generator.state = st["host"]
        _C.set_seed_state(int(st["device"]))
        _SEED_STATE[0] = int(st["seed"])
        return self


default_generator = _DefaultGenerator()


def _host_rng(generator, who: str):
    """The NumPy generator a ``generator=`` argument names: None for the
    default one (the caller's usual path), else the Generator's own."""
    if generator is None or generator is default_generator:
        return None
    if not isinstance(generator, Generator):
        raise TypeError(f"{who}(): argument 'generator' must be torch.Generator, not "
                        f"{type(generator).__name__}")
    if _tracing():
        raise RuntimeError(f"{who}(generator=...) inside torch.compile / dragon_core.function: "
                           f"a Generator draws on the host, so its numbers would be constants "
                           f"of the trace; draw outside the compiled function, or leave "
                           f"generator= out to draw with graph ops")
    return generator._host()


_MANTISSA = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}


def _host_tensor(values: np.ndarray, dt) -> Tensor:
    """float64 host values as a tensor of ``dt`` (a Dragon Cast rounds them)."""
    t = _C._from_numpy_copy(np.ascontiguousarray(values, np.float64))
    return _ops.cast(t, dt._dg) if dt._dg.name != "float64" else t


def _host_uniform(rng: np.random.Generator, size, dt) -> Tensor:
    """Uniform [0, 1) values on a grid exact in ``dt``: a float64 draw
    rounded to float32/16 could round up to 1.0, which ``rand`` never gives."""
    bits = _MANTISSA.get(dt._dg.name)
    if bits is None:
        raise RuntimeError(f"rand: expected a floating dtype, got {dt}")
    return _host_tensor(np.floor(rng.random(size) * 2.0**bits) / 2.0**bits, dt)


def seed() -> int:
    s = int(np.random.SeedSequence().entropy % (2**63))
    manual_seed(s)
    return s


def initial_seed() -> int:
    """The seed of the global generator (``torch.manual_seed``'s last one)."""
    return _SEED_STATE[0]


def get_rng_state() -> Tensor:
    """The global generator's state, a uint8 tensor for :func:`set_rng_state`."""
    return default_generator.get_state()


def set_rng_state(new_state) -> None:
    """Restore the global generator's state from :func:`get_rng_state`."""
    default_generator.set_state(new_state)


def _dev(device, t):
    if device is None:
        return t
    from ._device import device as _device
    d = _device(device)
    if d.type == "cpu":
        return t
    return t._to_device(str(d))


def _finish(t, dtype=None, device=None, requires_grad=False) -> Tensor:
    t = _dev(device, t)
    out = _w(t)
    if requires_grad:
        out.requires_grad = True
    return out


def _from_numpy_owned(arr: np.ndarray) -> Tensor:
    """A tensor over a NumPy array this module made (no copy)."""
    arr = _np_c(arr)
    if arr.dtype == np.float64 and False:
        pass
    return _w(_C.from_numpy(arr))


def _infer_np(data, dtype):
    if isinstance(data, Tensor):
        arr = data._t.cpu().numpy()
        return arr if dtype is None else arr.astype(D.to_dtype(dtype)._dg.numpy)
    if isinstance(data, (list, tuple)) and any(isinstance(x, Tensor) for x in _flat(data)):
        data = _nested_numpy(data)
    if dtype is not None:
        dt = D.to_dtype(dtype)
        return np.array(data, dtype=dt._dg.numpy)
    arr = np.array(data)
    if arr.dtype == np.float64 and not isinstance(data, np.ndarray) and not (
            isinstance(data, np.generic)):
        arr = arr.astype(D.default_float()._dg.numpy)
    elif arr.dtype.kind in "iu" and not isinstance(data, (np.ndarray, np.generic)):
        arr = arr.astype(np.int64)
    elif arr.dtype.kind in "US" or arr.dtype == object:
        raise TypeError(f"new(): invalid data type '{type(data).__name__}'")
    if arr.dtype == np.uint16 or arr.dtype == np.uint32 or arr.dtype == np.uint64:
        arr = arr.astype(np.int64)
    return arr


def _flat(x):
    for v in x:
        if isinstance(v, (list, tuple)):
            yield from _flat(v)
        else:
            yield v


def _nested_numpy(x):
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    if isinstance(x, (list, tuple)):
        return [_nested_numpy(v) for v in x]
    return x


def tensor(data, *, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of ``data`` (torch's default dtypes:
    Python floats -> the default float, ints -> int64, bools -> bool)."""
    arr = _infer_np(data, dtype)
    return _finish(_C._from_numpy_copy(_np_c(arr)), None, device, requires_grad)


def as_tensor(data, dtype=None, device=None):
    """Share memory with a tensor or NumPy array when dtype and device
    allow; copy otherwise."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device) if dtype or device else data
    if isinstance(data, np.ndarray) and (dtype is None or
                                         D.to_dtype(dtype)._dg.numpy == data.dtype):
        return _finish(_C.from_numpy(data), None, device)
    return tensor(data, dtype=dtype, device=device)


asarray = as_tensor


def from_numpy(ndarray: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``ndarray`` (zero-copy)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    return _w(_C.from_numpy(ndarray))


def from_dragon(t) -> Tensor:
    """A vm.torch tensor over a ``dragon_core.Tensor`` (shared: no copy;
    autograd state, storage and identity of the dragon tensor are kept)."""
    if isinstance(t, Tensor):
        return t
    if not isinstance(t, _dg.Tensor):
        raise TypeError(f"from_dragon expects a dragon_core.Tensor, got {type(t).__name__}")
    return _w(t)


def from_dlpack(ext) -> Tensor:
    return _w(_dg.from_dlpack(ext))


def _size(size):
    return list(_shape_args(size)) if size else []


def _dt(dtype, default=None):
    if dtype is None:
        return default or D.default_float()
    return D.to_dtype(dtype)


def zeros(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False):
    dt = _dt(dtype)
    return _finish(_ops.zeros(_size(size), dt._dg), None, device, requires_grad)


def ones(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False):
    dt = _dt(dtype)
    return _finish(_ops.ones(_size(size), dt._dg), None, device, requires_grad)


def empty(*size, out=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False, memory_format=None):
    if memory_format is None or memory_format is _mf.preserve_format:
        return zeros(*size, dtype=dtype, device=device, requires_grad=requires_grad)
    out = zeros(*size, dtype=dtype, device=device).contiguous(memory_format)
    return out.requires_grad_(requires_grad) if requires_grad else out


def full(size, fill_value, *, out=None, dtype=None, layout=None, device=None,
         requires_grad=False):
    if isinstance(fill_value, complex) or (isinstance(fill_value, np.generic)
                                           and np.iscomplexobj(fill_value)):
        raise NotImplementedError(f"full(): complex fill_value {fill_value!r} is not supported "
                                  "(vm.torch has no complex dtypes; NumPy would drop the "
                                  "imaginary part)")
    if dtype is None:
        dtype = (D.DTYPES["bool"] if isinstance(fill_value, bool) else
                 D.DTYPES["int64"] if isinstance(fill_value, numbers.Integral) else
                 D.default_float())
    dt = D.to_dtype(dtype)
    arr = np.full(tuple(_shape_args((size,)) if not isinstance(size, numbers.Integral)
                        else (int(size),)), fill_value, dtype=dt._dg.numpy)
    return _finish(_C._from_numpy_copy(arr), None, device, requires_grad)


def _like(fn):
    def like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
             memory_format=None):
        # preserve_format (the default): a channels-last input gives a
        # channels-last result, as in PyTorch.
        fmt = (_mf.suggest_memory_format(input._t)
               if memory_format is None or memory_format is _mf.preserve_format
               else memory_format)
        out = fn(*input.shape, dtype=dtype or input.dtype,
                 device=device or (None if input._t._device_name == "cpu" else input.device),
                 requires_grad=requires_grad and fmt is _mf.contiguous_format)
        if fmt is _mf.contiguous_format:
            return out
        out = out.contiguous(fmt)
        return out.requires_grad_(requires_grad) if requires_grad else out
    like.__name__ = fn.__name__ + "_like"
    return like


zeros_like = _like(zeros)
ones_like = _like(ones)
empty_like = _like(empty)


def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              memory_format=None):
    return full(tuple(input.shape), fill_value, dtype=dtype or input.dtype, device=device,
                requires_grad=requires_grad)


def rand(*size, generator=None, out=None, dtype=None, layout=None, device=None,
         requires_grad=False, pin_memory=False):
    dt = _dt(dtype)
    rng = _host_rng(generator, "rand")
    if rng is not None:
        return _finish(_host_uniform(rng, _size(size), dt), None, device, requires_grad)
    return _finish(_ops.random_uniform(_size(size), 0.0, 1.0, dt._dg), None, device,
                   requires_grad)


def randn(*size, generator=None, out=None, dtype=None, layout=None, device=None,
          requires_grad=False, pin_memory=False):
    dt = _dt(dtype)
    rng = _host_rng(generator, "randn")
    if rng is not None:
        if dt._dg.name not in _MANTISSA:
            raise RuntimeError(f"randn: expected a floating dtype, got {dt}")
        return _finish(_host_tensor(rng.standard_normal(_size(size)), dt), None, device,
                       requires_grad)
    return _finish(_ops.random_normal(_size(size), 0.0, 1.0, dt._dg), None, device,
                   requires_grad)


rand_like = _like(rand)
randn_like = _like(randn)


def randint(low=0, high=None, size=None, *, generator=None, out=None, dtype=None, layout=None,
            device=None, requires_grad=False):
    if size is None:
        low, high, size = 0, low, high
    if high is None:
        low, high = 0, low
    dt = _dt(dtype, D.DTYPES["int64"])
    rng = _host_rng(generator, "randint")
    if rng is None and _tracing():
        # Drawn by the graph at every call: floor(low + u * (high - low)),
        # u uniform in [0, 1) in float64, clipped for a u that rounds up.
        low, high = int(low), int(high)
        if high <= low:
            raise RuntimeError(f"randint: expected low < high, got low={low}, high={high}")
        u = _ops.random_uniform(tuple(int(n) for n in size), 0.0, float(high - low),
                                _dg.float64)
        v = _ops.clip(_ops.floor(u), 0.0, float(high - low - 1))
        t = _ops.cast(_ops.add(v, float(low)), dt._dg)
        return _finish(t, None, device, requires_grad)
    arr = (rng or _np_rng()).integers(low, high, size=tuple(size)).astype(dt._dg.numpy)
    return _finish(_C._from_numpy_copy(arr), None, device, requires_grad)


def randint_like(input, low=0, high=None, *, dtype=None, device=None):
    return randint(low, high, tuple(input.shape), dtype=dtype or input.dtype, device=device)


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False, pin_memory=False):
    dt = _dt(dtype, D.DTYPES["int64"])
    rng = _host_rng(generator, "randperm")
    if rng is None and _tracing():
        # Drawn by the graph at every call: the order of n float64 uniforms.
        u = _ops.random_uniform((int(n),), 0.0, 1.0, _dg.float64)
        return _finish(_ops.cast(_ops.argsort(u, stable=True), dt._dg), None, device)
    return _finish(_C._from_numpy_copy((rng or _np_rng()).permutation(int(n)).astype(
        dt._dg.numpy)),
                   None, device)


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None):
    if size is not None:
        return randn(*size, generator=generator) * std + mean
    ref = mean if isinstance(mean, Tensor) else std
    return randn(*ref.shape, dtype=ref.dtype, generator=generator) * std + mean


def arange(start=0, end=None, step=1, *, out=None, dtype=None, layout=None, device=None,
           requires_grad=False):
    if end is None:
        start, end = 0, start
    vals = [v.item() if isinstance(v, Tensor) else v for v in (start, end, step)]
    if dtype is None:
        is_int = all(isinstance(v, numbers.Integral) for v in vals)
        dt = D.DTYPES["int64"] if is_int else D.default_float()
    else:
        dt = D.to_dtype(dtype)
    s, e, st = vals
    n = max(int(math.ceil((e - s) / st)), 0)
    arr = (np.arange(n, dtype=np.float64) * st + s) if not all(
        isinstance(v, numbers.Integral) for v in vals) else np.arange(s, e, st, dtype=np.int64)
    return _finish(_C._from_numpy_copy(arr.astype(dt._dg.numpy)), None, device, requires_grad)


def range_(start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False):
    return arange(start, end + step if end is not None else start + 1, step,
                  dtype=dtype or D.default_float(), device=device, requires_grad=requires_grad)


def linspace(start, end, steps, *, out=None, dtype=None, layout=None, device=None,
             requires_grad=False):
    dt = _dt(dtype)
    arr = np.linspace(float(start), float(end), int(steps)).astype(dt._dg.numpy)
    return _finish(_C._from_numpy_copy(arr), None, device, requires_grad)


def logspace(start, end, steps, base=10.0, *, dtype=None, device=None, requires_grad=False):
    dt = _dt(dtype)
    arr = np.logspace(float(start), float(end), int(steps), base=base).astype(dt._dg.numpy)
    return _finish(_C._from_numpy_copy(arr), None, device, requires_grad)


def eye(n, m=None, *, out=None, dtype=None, layout=None, device=None, requires_grad=False):
    dt = _dt(dtype)
    arr = np.eye(int(n), None if m is None else int(m), dtype=dt._dg.numpy)
    return _finish(_C._from_numpy_copy(arr), None, device, requires_grad)


# ------------------------------------------------------------------ out=
#
# ``out=`` writes the result into the given tensor, as PyTorch's factory
# functions do (never a silently ignored argument): in place when the shape
# matches (a write that bumps its version, so a backward pass that saved it
# raises), else the tensor is resized to the result (new memory, as torch's
# resize). Like torch, ``out`` takes the result's dtype from the tensor and
# refuses to be recorded by autograd.

def _write_out(name, fn, args, kwargs, out):
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    if _C._is_grad_enabled() and (out.requires_grad or kwargs.get("requires_grad")):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad.")
    dtype = kwargs.get("dtype")
    if dtype is not None and D.to_dtype(dtype) != out.dtype:
        raise RuntimeError(f"{name}(): dtype {D.to_dtype(dtype)} does not match dtype of out "
                           f"parameter ({out.dtype})")
    kwargs["dtype"] = out.dtype
    if kwargs.get("device") is None and out._t._device_name != "cpu":
        kwargs["device"] = out.device
    res = fn(*args, **kwargs)
    if tuple(res.shape) == tuple(out.shape):
        out.copy_(res)
        return out
    if out.numel() != 0:
        warnings.warn(f"{name}(): an output with one or more elements was resized since it "
                      f"had shape {list(out.shape)}, which does not match the required output "
                      f"shape {list(res.shape)}. This behavior is deprecated in PyTorch; "
                      "views of the old tensor do not see the new value.", UserWarning,
                      stacklevel=3)
    out._t._set_data(res._t)
    return out


def _support_out(fn):
    name = fn.__name__.rstrip("_")

    def with_out(*args, out=None, **kwargs):
        if out is None:
            return fn(*args, **kwargs)
        return _write_out(name, fn, args, kwargs, out)
    functools.update_wrapper(with_out, fn)
    return with_out


zeros = _support_out(zeros)
ones = _support_out(ones)
empty = _support_out(empty)
full = _support_out(full)
rand = _support_out(rand)
randn = _support_out(randn)
randint = _support_out(randint)
randperm = _support_out(randperm)
arange = _support_out(arange)
linspace = _support_out(linspace)
eye = _support_out(eye)


def _legacy_new(cls, *args, **kwargs):
    """``torch.Tensor(2, 3)`` (uninitialised float tensor) or
    ``torch.Tensor([1, 2])`` (float copy), as PyTorch's legacy constructor."""
    if cls is not Tensor and not args and not kwargs:
        return object.__new__(cls)
    if len(args) == 1 and isinstance(args[0], (list, tuple, np.ndarray)) or (
            len(args) == 1 and isinstance(args[0], Tensor)):
        return tensor(args[0], dtype=D.default_float())
    if all(isinstance(a, numbers.Integral) for a in args):
        return zeros(*args)
    raise TypeError(f"torch.Tensor(): unsupported arguments {args!r}")


# typed legacy constructors
def _typed(name):
    def ctor(*args):
        if len(args) == 1 and isinstance(args[0], (list, tuple, np.ndarray)):
            return tensor(args[0], dtype=name)
        return zeros(*args, dtype=name)
    return ctor


FloatTensor = _typed("float32")
DoubleTensor = _typed("float64")
LongTensor = _typed("int64")
IntTensor = _typed("int32")
BoolTensor = _typed("bool")
ByteTensor = _typed("uint8")
HalfTensor = _typed("float16")
