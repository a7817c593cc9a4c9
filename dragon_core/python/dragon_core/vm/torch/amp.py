"""``torch.amp``: torch's mixed-precision API over ``dragon_core.amp``.

``torch.autocast("cpu", dtype=torch.bfloat16)`` (also ``torch.amp.autocast``
and the deprecated ``torch.cpu.amp.autocast``) enters dragon_core's native
autocast, so ops called through the torch front end follow dragon_core's op
table (docs/mixed-precision.md); ``torch.amp.GradScaler("cpu")`` is
``dragon_core.GradScaler`` with torch's constructor and return values. The
state functions (``torch.is_autocast_enabled("cpu")``,
``torch.get_autocast_dtype("cpu")``, ``torch.set_autocast_enabled`` ...)
read and write the same per-thread state as the native ``autocast``.

What differs from torch's CPU autocast, deliberately, is listed in
docs/from-pytorch.md ("Mixed precision"): matrix products are written in
float32, and softmax, normalisations and exp/log of 16-bit inputs run in
float32 (torch's CUDA lists) where torch's CPU autocast keeps bfloat16.
"""

from __future__ import annotations

import functools
import threading
import warnings

from dragon_core import _C
from dragon_core import amp as _amp

from . import _dtype

__all__ = ["autocast", "GradScaler", "custom_fwd", "custom_bwd", "is_autocast_available"]

_LOW = ("bfloat16", "float16")
_DEVICE_TYPES = ("cpu", "cuda")


class _Local(threading.local):
    def __init__(self):
        # torch.get_autocast_dtype's per-thread settings (torch's defaults).
        self.dtype = {"cpu": _dtype.DTYPES["bfloat16"], "cuda": _dtype.DTYPES["float16"]}


_local = _Local()


def _device_type(device_type, fn: str) -> str:
    if not isinstance(device_type, str):
        raise TypeError(f"{fn}: device_type must be a str such as 'cpu', got "
                        f"{type(device_type).__name__}")
    name = device_type.split(":")[0]
    if name not in _DEVICE_TYPES:
        raise RuntimeError(f"{fn}: device_type {device_type!r} is not supported by "
                           "dragon_core.vm.torch (autocast has a 'cpu' policy; 'cuda' is "
                           "recognised)")
    return name


def _cuda_available() -> bool:
    from . import cuda
    return cuda.is_available()


def is_autocast_available(device_type: str) -> bool:
    """Whether ``torch.autocast(device_type)`` can be enabled: True for
    ``"cpu"``; False for ``"cuda"`` (dragon_core has no cuda autocast
    policy) and other device types."""
    return isinstance(device_type, str) and device_type.split(":")[0] == "cpu"


class autocast:  # noqa: N801 - torch's name
    """``torch.autocast(device_type, dtype=None, enabled=True, cache_enabled=None)``.

    ``device_type="cpu"`` with ``dtype`` bfloat16 (the default, as torch's
    ``torch.get_autocast_dtype("cpu")``) or float16 runs the block under
    ``dragon_core.autocast``. As torch, another dtype warns and runs the
    block with autocast off, and ``"cuda"`` without an available GPU warns
    and disables; with a GPU, ``"cuda"`` raises NotImplementedError (no
    cuda policy). ``cache_enabled=None`` takes
    ``torch.is_autocast_cache_enabled()``. Usable as a context manager and
    as a decorator; it nests (``enabled=False`` inside turns autocast off
    for the inner block).
    """

    def __init__(self, device_type: str, dtype=None, enabled: bool = True,
                 cache_enabled: bool | None = None):
        self.device = _device_type(device_type, "torch.autocast")
        self.fast_dtype = (_local.dtype[self.device] if dtype is None
                           else _dtype.to_dtype(dtype))
        if not isinstance(enabled, bool):
            raise TypeError(f"torch.autocast: enabled must be a bool, got {enabled!r}")
        if cache_enabled is None:
            cache_enabled = is_autocast_cache_enabled()
        if not isinstance(cache_enabled, bool):
            raise TypeError(f"torch.autocast: cache_enabled must be a bool, got "
                            f"{cache_enabled!r}")
        self._cache_enabled = cache_enabled
        if enabled and self.device == "cuda":
            if _cuda_available():
                raise NotImplementedError(
                    "torch.autocast('cuda') is not supported by dragon_core.vm.torch: "
                    "dragon_core's autocast has a cpu policy only (docs/mixed-precision.md)")
            warnings.warn("User provided device_type of 'cuda', but CUDA is not available. "
                          "Disabling", UserWarning, stacklevel=2)
            enabled = False
        if enabled and self.fast_dtype.name not in _LOW:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtypes of torch.bfloat16, "
                          "torch.float16 currently.", UserWarning, stacklevel=2)
            enabled = False
        self._enabled = enabled
        self._prev: list = []

    def __enter__(self):
        prev_dtype = _local.dtype[self.device]
        _local.dtype[self.device] = self.fast_dtype
        native = None
        if self.device == "cpu":
            native = _amp.autocast("cpu", dtype=(self.fast_dtype._dg if self._enabled
                                                 else None),
                                   enabled=self._enabled, cache_enabled=self._cache_enabled)
            native.__enter__()
        self._prev.append((prev_dtype, native))
        return self

    def __exit__(self, *exc):
        prev_dtype, native = self._prev.pop()
        if native is not None:
            native.__exit__(*exc)
        _local.dtype[self.device] = prev_dtype
        return False

    def __call__(self, fn):
        """Use as a decorator: ``fn`` runs inside this autocast."""
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device, self.fast_dtype, self._enabled, self._cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


# ------------------------------------------------------------ thread state
def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether autocast is on for ``device_type`` in this thread (no
    argument: ``"cuda"``, as torch's)."""
    dev = _device_type("cuda" if device_type is None else device_type,
                       "torch.is_autocast_enabled")
    return dev == "cpu" and _amp.is_autocast_enabled()


def get_autocast_dtype(device_type: str):
    """The dtype autocast uses for ``device_type``: the active one inside a
    region, else the thread's setting (cpu: bfloat16, cuda: float16)."""
    dev = _device_type(device_type, "torch.get_autocast_dtype")
    if dev == "cpu":
        active = _amp.get_autocast_dtype()
        if active is not None:
            return _dtype.to_dtype(active.name)
    return _local.dtype[dev]


def set_autocast_enabled(device_type, enabled=None) -> None:
    """``set_autocast_enabled(device_type, enabled)`` (or torch's legacy
    one-argument form, meaning ``"cuda"``): switch autocast on or off for
    this thread without a ``with`` block."""
    if enabled is None:
        device_type, enabled = "cuda", device_type
    dev = _device_type(device_type, "torch.set_autocast_enabled")
    if not isinstance(enabled, bool):
        raise TypeError(f"torch.set_autocast_enabled: enabled must be a bool, got {enabled!r}")
    if dev == "cuda":
        if enabled:
            raise NotImplementedError("torch.set_autocast_enabled('cuda', True): dragon_core "
                                      "has no cuda autocast policy")
        return
    if enabled:
        dt = _local.dtype["cpu"]
        if dt.name not in _LOW:
            raise RuntimeError(f"torch.set_autocast_enabled('cpu', True): the cpu autocast "
                               f"dtype is {dt}, but cpu autocast supports torch.bfloat16 and "
                               "torch.float16 only")
        _amp._apply_table()
        _C._autocast_set(dt._dg.code)
    else:
        _C._autocast_set(-1)


def set_autocast_dtype(device_type: str, dtype) -> None:
    """Set the dtype of ``device_type``'s autocast for this thread (the
    default of the next ``torch.autocast``; applies at once when on)."""
    dev = _device_type(device_type, "torch.set_autocast_dtype")
    dt = _dtype.to_dtype(dtype)
    if dev == "cpu" and dt.name not in _LOW:
        raise RuntimeError(f"torch.set_autocast_dtype('cpu', {dt}): cpu autocast supports "
                           "torch.bfloat16 and torch.float16 only")
    _local.dtype[dev] = dt
    if dev == "cpu" and _amp.is_autocast_enabled():
        _C._autocast_set(dt._dg.code)


def is_autocast_cache_enabled() -> bool:
    """Whether autocast reuses a cast within a region (this thread)."""
    return bool(_C._autocast_cache(None))


def set_autocast_cache_enabled(enabled: bool) -> None:
    """Turn the autocast cast cache on or off for this thread."""
    if not isinstance(enabled, bool):
        raise TypeError(f"torch.set_autocast_cache_enabled: expected a bool, got {enabled!r}")
    _C._autocast_cache(enabled)


def clear_autocast_cache() -> None:
    """Drop this thread's cached autocast casts."""
    _C._autocast_cache(_C._autocast_cache(False))


# torch's deprecated per-device spellings.
def is_autocast_cpu_enabled() -> bool:  # noqa: D103
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():  # noqa: D103
    return get_autocast_dtype("cpu")


def set_autocast_cpu_enabled(enabled: bool) -> None:  # noqa: D103
    set_autocast_enabled("cpu", enabled)


def set_autocast_cpu_dtype(dtype) -> None:  # noqa: D103
    set_autocast_dtype("cpu", dtype)


def get_autocast_gpu_dtype():  # noqa: D103
    return get_autocast_dtype("cuda")


STATE_EXPORTS = {f.__name__: f for f in (
    is_autocast_enabled, get_autocast_dtype, set_autocast_enabled, set_autocast_dtype,
    is_autocast_cache_enabled, set_autocast_cache_enabled, clear_autocast_cache,
    is_autocast_cpu_enabled, get_autocast_cpu_dtype, set_autocast_cpu_enabled,
    set_autocast_cpu_dtype, get_autocast_gpu_dtype)}


# ------------------------------------------------------- custom autograd
def custom_fwd(fwd=None, *, device_type: str, cast_inputs=None):
    """Decorator for a custom ``autograd.Function.forward``: with
    ``cast_inputs``, inside an enabled autocast the floating-point tensor
    arguments are cast to ``cast_inputs`` and ``forward`` runs with
    autocast off; without, ``forward`` runs in the caller's autocast state.
    ``backward`` decorated with :func:`custom_bwd` runs in that state."""
    if fwd is None:
        return functools.partial(custom_fwd, device_type=device_type, cast_inputs=cast_inputs)
    dev = _device_type(device_type, "torch.amp.custom_fwd")
    cast_to = None if cast_inputs is None else _dtype.to_dtype(cast_inputs)

    @functools.wraps(fwd)
    def forward(*args, **kwargs):
        ctx = args[0] if args else None
        on = is_autocast_enabled(dev)
        state = (on, get_autocast_dtype(dev))
        if ctx is not None:
            ctx._fwd_autocast_state = state
        if cast_to is None or not on:
            return fwd(*args, **kwargs)
        from ._tensor import Tensor

        def cast(v):
            if isinstance(v, Tensor) and v.dtype.is_floating_point:
                return v.to(cast_to)
            return v
        with autocast(dev, enabled=False):
            if ctx is not None:
                ctx._fwd_autocast_state = (False, state[1])
            return fwd(*[cast(a) for a in args],
                       **{k: cast(v) for k, v in kwargs.items()})
    return forward


def custom_bwd(bwd=None, *, device_type: str):
    """Decorator for a custom ``autograd.Function.backward`` whose forward
    is decorated with :func:`custom_fwd`: runs in the forward's autocast
    state."""
    if bwd is None:
        return functools.partial(custom_bwd, device_type=device_type)
    dev = _device_type(device_type, "torch.amp.custom_bwd")

    @functools.wraps(bwd)
    def backward(ctx, *grads):
        on, dt = getattr(ctx, "_fwd_autocast_state", (False, None))
        with autocast(dev, dtype=dt, enabled=on):
            return bwd(ctx, *grads)
    return backward


# ------------------------------------------------------------- GradScaler
class GradScaler(_amp.GradScaler):
    """``torch.amp.GradScaler(device="cuda", init_scale=2.**16,
    growth_factor=2.0, backoff_factor=0.5, growth_interval=2000,
    enabled=True)``: ``dragon_core.GradScaler`` for torch tensors and
    optimizers.

    As torch's: ``device`` defaults to ``"cuda"``, which without an
    available GPU warns and disables the scaler (every method a
    pass-through; pass ``"cpu"``); ``step`` returns what
    ``optimizer.step()`` returned, or None when it skipped the step (inf or
    NaN gradients); a second ``step`` or ``unscale_`` of one optimizer
    before ``update()`` raises; closures are not supported; float16
    gradients (float16 parameters) raise ValueError. A float16 loss
    is scaled in float32 (torch keeps float16, where the default scale
    2**16 overflows a loss above 1).
    """

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16,
                 growth_factor: float = 2.0, backoff_factor: float = 0.5,
                 growth_interval: int = 2000, enabled: bool = True):
        dev = _device_type(device, "torch.amp.GradScaler")
        if enabled and dev == "cuda" and not _cuda_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  "
                          "Disabling.", UserWarning, stacklevel=2)
            enabled = False
        super().__init__(init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)
        self._device = dev
        self._stepped: set = set()

    def scale(self, outputs):
        """``outputs * scale`` for a tensor or a (nested) list/tuple of
        tensors; float16/bfloat16 tensors are scaled in float32."""
        from ._tensor import Tensor
        if not self.enabled:
            return outputs
        if isinstance(outputs, Tensor):
            if outputs.dtype.name in _LOW:
                outputs = outputs.float()
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("torch.amp.GradScaler.scale: outputs must be a Tensor or an "
                         f"iterable of Tensors, got {type(outputs).__name__}")

    def unscale_(self, optimizer) -> None:  # noqa: D102
        if self.enabled and id(optimizer) in self._unscaled:
            raise RuntimeError("unscale_() has already been called on this optimizer since "
                               "the last update().")
        if self.enabled and id(optimizer) in self._stepped:
            raise RuntimeError("unscale_() is being called after step().")
        self._unscale(optimizer)

    @staticmethod
    def _params(optimizer):
        # The optimizer's groups hold the user's vm.torch Parameters: the
        # native scaler works on the dragon tensors behind them (the same
        # storage, so in-place unscaling shows through p.grad).
        for p in _amp.GradScaler._params(optimizer):
            yield getattr(p, "_t", p)

    def _unscale(self, optimizer) -> None:
        # torch refuses float16 gradients (float16 parameters): their scaled
        # values overflow; keep the parameters float32 under autocast.
        if self.enabled:
            for p in self._params(optimizer):
                if p.grad.dtype.name == "float16":
                    raise ValueError("Attempting to unscale FP16 gradients.")
        _amp.GradScaler.unscale_(self, optimizer)

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless done), then ``optimizer.step()`` unless a
        gradient is inf/NaN; returns the step's return value (None when
        skipped)."""
        if not self.enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is "
                               "enabled.")
        if id(optimizer) in self._stepped:
            raise RuntimeError("step() has already been called since the last update().")
        if id(optimizer) not in self._unscaled:
            self._unscale(optimizer)
        self._stepped.add(id(optimizer))
        if self._unscaled[id(optimizer)]:
            return None
        return optimizer.step(*args, **kwargs)

    def update(self, new_scale=None) -> None:  # noqa: D102
        from ._tensor import Tensor
        if isinstance(new_scale, Tensor):
            new_scale = float(new_scale.item())
        super().update(new_scale)
        self._stepped.clear()

    def is_enabled(self) -> bool:  # noqa: D102
        return self.enabled

    def get_growth_factor(self) -> float:  # noqa: D102
        return self.growth_factor

    def set_growth_factor(self, new_factor: float) -> None:  # noqa: D102
        self.growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:  # noqa: D102
        return self.backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:  # noqa: D102
        self.backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:  # noqa: D102
        return self.growth_interval

    def set_growth_interval(self, new_interval: int) -> None:  # noqa: D102
        self.growth_interval = int(new_interval)

    def _get_growth_tracker(self) -> int:
        return self._good_steps if self.enabled else 0


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.amp.{name} is not supported by dragon_core.vm.torch; "
                              "see docs/mixed-precision.md")

