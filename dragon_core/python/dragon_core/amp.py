"""Mixed precision: ``autocast`` and ``GradScaler`` (see docs/mixed-precision.md).

Inside ``with dragon_core.autocast("cpu", dtype=dragon_core.bfloat16):`` every
op call of this thread goes through an op table modelled on torch's autocast
lists:

* **lower precision** ops (:data:`LOWER_PRECISION_OPS`: matmuls and
  convolutions) get their float32 inputs cast to the autocast dtype, so they
  run on the bf16 kernels (oneDNN's AVX512-BF16 / AMX paths when the mkldnn
  plugin is installed) and return the autocast dtype, except the
  :data:`FLOAT32_OUTPUT_OPS` (``MatMul``, ``MatMulBiasAct``), which write
  their float32-accumulated products as float32 (``out_dtype``): the
  float32 ops that read them need no cast back up;
* **float32** ops (:data:`FLOAT32_OPS`: norms, softmax, losses, exp/log/pow,
  ``Prod``, ``CumSum``) get their float16/bfloat16 inputs cast to float32;
* **promote** ops (:data:`PROMOTE_OPS`: binary element-wise, concat, where)
  that mix float32 with float16/bfloat16 inputs compute in float32;
* every other op runs on its inputs as given.

The casts are ordinary ``Cast`` ops, recorded by autograd and graph traces
(so gradients flow back to float32 parameters in float32), and the choice is
made in the core's dispatcher (``dragon_core._C``), so operators such as
``a @ b`` are covered too. Within a region a live cast is reused by the
next op that needs the same one (the cast cache, ``cache_enabled``).
Backward passes run with autocast off: gradient rules see the dtypes the
forward ops used. ``dragon_core.function(fn,
autocast="bfloat16")`` traces ``fn`` under the same policy.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from . import _C
from ._dtypes import as_dtype

__all__ = ["autocast", "GradScaler", "is_autocast_enabled", "get_autocast_dtype",
           "LOWER_PRECISION_OPS", "FLOAT32_OUTPUT_OPS", "FLOAT32_OPS", "PROMOTE_OPS"]

#: Ops that run in the autocast dtype (float32 inputs cast down).
LOWER_PRECISION_OPS = (
    "MatMul", "MatMulBiasAct",
    "Conv2d", "Conv2dBiasAct", "Conv3d", "ConvTranspose2d", "ConvTranspose3d",
)

#: Lower-precision ops whose product autocast writes as float32 (their
#: ``out_dtype`` attribute, when the caller left it unset): the kernels
#: accumulate in float32 anyway, and most readers of a matmul (bias adds,
#: norms, softmax, residual sums) run in float32, so this saves the Cast
#: back up and one rounding. A graph's fusion folds a float32 product that is
#: only cast down again into a 16-bit one (docs/mixed-precision.md).
FLOAT32_OUTPUT_OPS = ("MatMul", "MatMulBiasAct")

#: Ops that run in float32 (float16/bfloat16 inputs cast up): norms,
#: softmax, losses, the functions whose range or accuracy needs it, and the
#: ops torch's CPU autocast runs in float32 (``Prod``, the 3-D pools). Every
#: name is a registered op (tests/vm_torch/test_differential_amp.py checks):
#: a misspelt one would be skipped without a word. The reductions ``Sum``,
#: ``Mean``, ``Var``, ``Std``, ``LogSumExp`` are not listed: their 16-bit
#: kernels accumulate in float32 and round once, so a float32 run would only
#: change the output dtype (torch's CPU autocast keeps them 16-bit too).
FLOAT32_OPS = (
    # reductions whose range needs it
    "Prod", "CumSum",
    # norms
    "LayerNorm", "BatchNorm", "GroupNorm",
    # softmax
    "Softmax", "LogSoftmax",
    # losses
    "SoftmaxCrossEntropy", "NllLoss", "MseLoss", "L1Loss", "SmoothL1Loss", "BceWithLogits",
    "SigmoidFocalLoss",
    # pools torch's CPU autocast runs in float32
    "AvgPool3d", "MaxPool3d",
    # range / accuracy
    "Exp", "Log", "Log1p", "Expm1", "Pow", "Sqrt", "Rsqrt", "Reciprocal",
)

#: Ops computed in float32 when their inputs mix float32 with a 16-bit float.
PROMOTE_OPS = (
    "Add", "Sub", "Mul", "Div", "Maximum", "Minimum", "Where", "Concat", "Stack",
    "Equal", "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
)

_POLICY = {"lower": 1, "float32": 2, "promote": 3, "lower_float32_out": 4}
_LOW_DTYPES = ("bfloat16", "float16")
_table_lock = threading.Lock()
_table_key = [None]   # size of dragon_core.ops when the table was last set


def _apply_table() -> None:
    """Set the op table in the core (again when plugins have added ops)."""
    from . import ops
    key = len(vars(ops))
    if key == _table_key[0]:
        return
    with _table_lock:
        for names, policy in ((LOWER_PRECISION_OPS, "lower"), (FLOAT32_OPS, "float32"),
                              (PROMOTE_OPS, "promote")):
            for name in names:
                if policy == "lower" and name in FLOAT32_OUTPUT_OPS:
                    policy_code = _POLICY["lower_float32_out"]
                else:
                    policy_code = _POLICY[policy]
                _C._autocast_policy(name, policy_code)
        _table_key[0] = key


def is_autocast_enabled() -> bool:
    """Whether this thread is inside an enabled :class:`autocast`."""
    return _C._autocast_get() >= 0


def get_autocast_dtype():
    """The dtype of this thread's autocast, or None when it is off."""
    code = _C._autocast_get()
    return None if code < 0 else as_dtype(_code_name(code))


def _code_name(code: int) -> str:
    for name in _LOW_DTYPES:
        if as_dtype(name).code == code:
            return name
    raise AssertionError(f"autocast dtype code {code}")


class autocast:  # noqa: N801 - the name users know from torch
    """Run matmuls and convolutions in a 16-bit float, the rest in float32.

    Parameters
    ----------
    device_type : str
        ``"cpu"``: the device whose ops the policy applies to. Autocast is
        a property of the calling thread and applies to every op it calls;
        only ``"cpu"`` is accepted today.
    dtype : dtype, default bfloat16
        ``bfloat16`` or ``float16``: what :data:`LOWER_PRECISION_OPS` compute in.
    enabled : bool, default True
        False runs the block with autocast off (also inside an enabled one).
    cache_enabled : bool, default True
        Reuse, within the region, the cast of a tensor that an earlier op
        already cast to the same dtype while that cast is alive and neither
        tensor was written in place since (torch's autocast cache, which
        keeps only float32 leaves that require grad; here any tensor, held
        weakly: the cache keeps no memory alive). Not used while a
        ``GradientTape`` records or a graph is traced. False casts at every
        use. docs/mixed-precision.md.

    Examples
    --------
    >>> import dragon_core as dg
    >>> a = dg.ops.ones((4, 8)); b = dg.ops.ones((8, 2))
    >>> with dg.autocast("cpu", dtype=dg.bfloat16):
    ...     y = a @ b                     # bfloat16 operands, float32 product
    ...     z = dg.ops.relu(dg.ops.cast(y, dg.bfloat16))
    >>> y.dtype.name, z.dtype.name
    ('float32', 'bfloat16')
    >>> with dg.autocast("cpu"):
    ...     s = dg.ops.softmax(z)
    >>> s.dtype.name
    'float32'
    """

    def __init__(self, device_type: str = "cpu", dtype=None, enabled: bool = True,
                 cache_enabled: bool = True):
        if not isinstance(device_type, str) or device_type.split(":")[0] != "cpu":
            raise ValueError(f"autocast: device_type must be 'cpu', got {device_type!r} "
                             "(autocast policies exist for the cpu device only)")
        if dtype is None:
            dtype = "bfloat16"
        dt = as_dtype(dtype)
        if dt.name not in _LOW_DTYPES:
            raise ValueError(f"autocast: dtype must be bfloat16 or float16, got {dt.name}")
        if not isinstance(enabled, bool):
            raise TypeError(f"autocast: enabled must be a bool, got {enabled!r}")
        if not isinstance(cache_enabled, bool):
            raise TypeError(f"autocast: cache_enabled must be a bool, got {cache_enabled!r}")
        self.device_type = "cpu"
        self.dtype = dt
        self.enabled = enabled
        self.cache_enabled = cache_enabled
        self._prev: list = []

    def __enter__(self):
        _apply_table()
        # The cache flag first: setting the dtype clears the cache.
        prev_cache = _C._autocast_cache(self.cache_enabled)
        self._prev.append((_C._autocast_set(self.dtype.code if self.enabled else -1),
                           prev_cache))
        return self

    def __exit__(self, *exc):
        dtype, cache = self._prev.pop()
        _C._autocast_set(dtype)
        _C._autocast_cache(cache)
        return False

    def __call__(self, fn):
        """Use as a decorator: ``fn`` runs inside this autocast."""
        import functools

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with autocast(self.device_type, self.dtype, self.enabled, self.cache_enabled):
                return fn(*args, **kwargs)
        return wrapper


class _autocast_off:  # noqa: N801
    """Autocast off for the block (backward passes)."""

    def __enter__(self):
        self._prev = _C._autocast_set(-1)

    def __exit__(self, *exc):
        _C._autocast_set(self._prev)
        return False


class GradScaler:
    """Dynamic loss scaling for float16 training.

    float16 gradients underflow below about 6e-8; scaling the loss by
    ``scale`` before ``backward()`` keeps them representable. ``step``
    unscales the gradients, skips the optimizer step when any is inf or
    NaN, and ``update`` shrinks the scale by ``backoff_factor`` after such
    a step or grows it by ``growth_factor`` after ``growth_interval``
    finite steps in a row.

    Parameters
    ----------
    init_scale : float, default 65536.0
    growth_factor : float, default 2.0
    backoff_factor : float, default 0.5
    growth_interval : int, default 2000
    enabled : bool, default True
        False makes every method a pass-through (``scale`` returns the loss).

    Examples
    --------
    >>> import dragon_core as dg
    >>> w = dg.ops.ones((3,)); w.requires_grad = True
    >>> opt = dg.optim.SGD([w], lr=0.1)
    >>> scaler = dg.GradScaler(init_scale=1024.0)
    >>> loss = (w * w).sum()
    >>> scaler.scale(loss).backward()
    >>> scaler.step(opt)
    True
    >>> scaler.update()
    >>> [round(float(v), 3) for v in w.numpy()]
    [0.8, 0.8, 0.8]
    """

    def __init__(self, init_scale: float = 65536.0, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000,
                 enabled: bool = True):
        if not (init_scale > 0 and math.isfinite(init_scale)):
            raise ValueError(f"GradScaler: init_scale must be a positive finite float, "
                             f"got {init_scale!r}")
        if not growth_factor > 1.0:
            raise ValueError(f"GradScaler: growth_factor must be > 1, got {growth_factor!r}")
        if not 0.0 < backoff_factor < 1.0:
            raise ValueError(f"GradScaler: backoff_factor must be in (0, 1), "
                             f"got {backoff_factor!r}")
        if not (isinstance(growth_interval, int) and growth_interval > 0):
            raise ValueError(f"GradScaler: growth_interval must be a positive int, "
                             f"got {growth_interval!r}")
        # The scale is a float32 number, as torch's (a float32 tensor): every
        # change rounds to float32, so the scales match torch's bit for bit.
        self._scale = _f32(init_scale)
        self.growth_factor = float(growth_factor)
        self.backoff_factor = float(backoff_factor)
        self.growth_interval = growth_interval
        self.enabled = bool(enabled)
        self._good_steps = 0
        self._unscaled: dict = {}   # id(optimizer) -> found_inf
        self._found_inf = None

    def get_scale(self) -> float:
        """The current scale (1.0 when disabled)."""
        return self._scale if self.enabled else 1.0

    def scale(self, loss):
        """``loss * scale`` (call ``backward()`` on the result), computed in
        float32 for a float16/bfloat16 loss."""
        if not self.enabled:
            return loss
        if loss.dtype.name in _LOW_DTYPES:
            # The scale (2**16 by default) overflows float16: scale in float32.
            loss = loss.astype("float32")
        return loss * self._scale

    @staticmethod
    def _params(optimizer):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    yield p

    def unscale_(self, optimizer) -> None:
        """Divide the gradients of ``optimizer``'s parameters by the scale,
        in place (the gradient tensors themselves, as torch's), once per step
        (e.g. before gradient clipping)."""
        from . import _autograd
        if not self.enabled:
            return
        if id(optimizer) in self._unscaled:
            raise RuntimeError("GradScaler.unscale_: already called for this optimizer "
                               "since the last update()")
        inv = _f32(1.0 / self._scale)
        found = False
        with _autograd.no_grad():
            for p in self._params(optimizer):
                g = p.grad
                g32 = g if g.dtype.name in ("float32", "float64") else g.astype("float32")
                if not found and not bool(np.isfinite(g32.numpy()).all()):
                    found = True
                # In place, as torch's: a reference to the gradient taken
                # before unscale_ (a hook, a list kept for logging or
                # clipping) sees the unscaled values too.
                g.assign((g32 * inv).astype(g.dtype))
        self._unscaled[id(optimizer)] = found
        # update() backs off when any optimizer unscaled since the last
        # update saw an inf/NaN, stepped or not (torch's rule).
        self._found_inf = found or bool(self._found_inf)

    def step(self, optimizer, *args, **kwargs) -> bool:
        """Unscale (unless done) and run ``optimizer.step()`` unless a
        gradient is inf/NaN; returns whether the step ran."""
        if not self.enabled:
            optimizer.step(*args, **kwargs)
            return True
        if id(optimizer) not in self._unscaled:
            self.unscale_(optimizer)
        found = self._unscaled[id(optimizer)]
        if found:
            return False
        optimizer.step(*args, **kwargs)
        return True

    def update(self, new_scale: float | None = None) -> None:
        """Adjust the scale after a step (or set it to ``new_scale``).

        Raises RuntimeError when no gradients were unscaled (``step`` or
        ``unscale_``) since the last update (torch asserts the same)."""
        if not self.enabled:
            return
        if new_scale is not None:
            if not (new_scale > 0 and math.isfinite(new_scale)):
                raise ValueError(f"GradScaler.update: new_scale must be a positive finite "
                                 f"float, got {new_scale!r}")
            self._scale = _f32(new_scale)
        elif self._found_inf is None:
            raise RuntimeError("GradScaler.update: no inf/NaN checks were recorded since the "
                               "last update(); call scaler.step(optimizer) (or unscale_) first")
        elif self._found_inf:
            self._scale = _f32(self._scale * self.backoff_factor)
            self._good_steps = 0
        else:
            self._good_steps += 1
            if self._good_steps == self.growth_interval:
                grown = _f32(self._scale * self.growth_factor)
                if math.isfinite(grown):   # a scale that would overflow stays
                    self._scale = grown
                self._good_steps = 0
        self._found_inf = None
        self._unscaled.clear()

    def state_dict(self) -> dict:
        """The scaler's state (for checkpoints), with torch's keys; empty
        when disabled, as torch's."""
        if not self.enabled:
            return {}
        return {"scale": self._scale, "growth_factor": self.growth_factor,
                "backoff_factor": self.backoff_factor, "growth_interval": self.growth_interval,
                "_growth_tracker": self._good_steps}

    def load_state_dict(self, state: dict) -> None:
        """Restore a :meth:`state_dict` (ours or torch's ``GradScaler``)."""
        if not self.enabled:
            return
        if not state:
            raise RuntimeError("GradScaler.load_state_dict: the state dict is empty (saved "
                               "from a disabled GradScaler?)")
        self._scale = _f32(state["scale"])
        self.growth_factor = float(state["growth_factor"])
        self.backoff_factor = float(state["backoff_factor"])
        self.growth_interval = int(state["growth_interval"])
        self._good_steps = int(state["_growth_tracker"] if "_growth_tracker" in state
                               else state["good_steps"])


def _f32(x) -> float:
    """``x`` rounded to float32 (as a Python float)."""
    return float(np.float32(x))
