"""``dragon_core.vm.torch``: PyTorch's API over dragon_core.

``import dragon_core.vm.torch as torch`` gives torch's names and
semantics (``dim``/``keepdim``, in-place ``_`` methods, views, autograd with
``requires_grad``/``backward``/``.grad``, torch's type promotion) as a thin
layer over ``dragon_core.ops``, ``dragon_core.nn``, ``dragon_core.optim`` and
``dragon_core.data``; ``python -m dragon_core.vm.torch script.py`` runs an
unmodified PyTorch script with ``torch`` mapped here. A torch name that is
not supported raises NotImplementedError naming what to use instead (see
docs/from-pytorch.md).

A tensor here is a handle over one ``dragon_core.Tensor``:
``torch.from_dragon(t)`` and ``x.dragon()`` convert without copying.
"""

from __future__ import annotations

import math as _math

import numpy as _np

import dragon_core as _dg

from . import _dtype
from ._creation import (BoolTensor, ByteTensor, DoubleTensor, FloatTensor, Generator,
                        HalfTensor, IntTensor, LongTensor, arange, as_tensor, asarray, empty,
                        empty_like, eye, from_dlpack, from_dragon, from_numpy, full, full_like,
                        linspace, logspace, manual_seed, normal, ones, ones_like, rand,
                        rand_like, randint, randint_like, randn, randn_like, randperm, seed,
                        tensor, zeros, zeros_like)
from ._creation import range_ as range  # noqa: A001
from ._creation import default_generator, get_rng_state, initial_seed, set_rng_state
from ._device import device
from ._dtype import dtype, promote_types
from ._functions import _EXPORTS
from ._tensor import Size, Tensor
from .autograd import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled

globals().update(_EXPORTS)
del _EXPORTS

float32 = float = _dtype.DTYPES["float32"]  # noqa: A001
float64 = double = _dtype.DTYPES["float64"]
float16 = half = _dtype.DTYPES["float16"]
bfloat16 = _dtype.DTYPES["bfloat16"]
int64 = long = _dtype.DTYPES["int64"]
int32 = int = _dtype.DTYPES["int32"]  # noqa: A001
int16 = short = _dtype.DTYPES["int16"]
int8 = _dtype.DTYPES["int8"]
uint8 = _dtype.DTYPES["uint8"]
bool = _dtype.DTYPES["bool"]  # noqa: A001

pi = _math.pi
e = _math.e
inf = _math.inf
nan = _math.nan
__version__ = "2.13.0+dragon"
strided = "strided"
# Memory formats are dragon_core's (a channels-last tensor is a logical NCHW
# tensor with NHWC strides; docs/devices.md, "Memory format").
from dragon_core import (channels_last, channels_last_3d, contiguous_format,  # noqa: E402
                         memory_format, preserve_format)

from . import autograd, nn, optim, utils, jit, linalg, cuda, backends, testing  # noqa: E402
from . import special  # noqa: E402
from . import amp, cpu  # noqa: E402
from .amp import STATE_EXPORTS as _AMP_STATE  # noqa: E402
from .amp import autocast  # noqa: E402

globals().update(_AMP_STATE)
del _AMP_STATE
from .serialization import load, save  # noqa: E402
from .jit import compile  # noqa: E402,A004


def is_tensor(obj) -> bool:  # noqa: D103
    return isinstance(obj, Tensor)


def is_floating_point(input) -> bool:  # noqa: D103
    return input.dtype.is_floating_point


def numel(input) -> int:  # noqa: D103
    return input.numel()


def result_type(tensor1, tensor2):  # noqa: D103
    return _dtype.result_type(tensor1, tensor2)


def can_cast(from_, to) -> bool:  # noqa: D103
    return to._cat >= from_._cat


def get_default_dtype():  # noqa: D103
    return _dtype.default_float()


def set_default_dtype(d):  # noqa: D103
    d = _dtype.to_dtype(d)
    if not d.is_floating_point:
        raise TypeError("only floating-point types are supported as the default type")
    _dtype.DEFAULT[0] = d


def get_num_threads() -> int:  # noqa: D103
    import os
    return os.cpu_count() or 1


def set_num_threads(n) -> None:  # noqa: D103
    pass


def get_num_interop_threads() -> int:  # noqa: D103
    return 1


def set_num_interop_threads(n) -> None:  # noqa: D103
    pass


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):  # noqa: D103
    _np.set_printoptions(precision=precision, threshold=threshold, edgeitems=edgeitems,
                         linewidth=linewidth)


def use_deterministic_algorithms(mode, *, warn_only=False) -> None:  # noqa: D103
    pass


def is_grad_enabled_() -> bool:  # noqa: D103
    return is_grad_enabled()


def set_float32_matmul_precision(precision) -> None:  # noqa: D103
    pass


def typename(obj) -> str:  # noqa: D103
    return obj.type() if isinstance(obj, Tensor) else type(obj).__name__


def detach(input):  # noqa: D103
    return input.detach()


def clone(input, *, memory_format=None):  # noqa: D103
    return input.clone(memory_format=memory_format)


def conj(input):  # noqa: D103
    return input


def finfo(type=None):  # noqa: D103,A002
    return _np.finfo((type or get_default_dtype())._dg.numpy)


def iinfo(type):  # noqa: D103,A002
    return _np.iinfo(type._dg.numpy)


_ALTERNATIVES = {
    "fft": "dragon_core.ops.fft/ifft/rfft/irfft (complex as a trailing axis of size 2)",
    "sparse": "dense tensors",
    "distributed": "dragon_core.distributed",
    "onnx": "dragon_core.onnx",
    "complex64": "two float tensors", "complex128": "two float tensors",
    "cfloat": "two float tensors",
    "vmap": "batched ops (add a leading dimension)",
    "func": "torch.autograd.grad",
    "quantization": "float32 models",
    "hub": "loading weights with torch.load from a local file",
    "lgamma": "dragon_core ops (no Lgamma op yet)",
}


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    alt = _ALTERNATIVES.get(name)
    raise NotImplementedError(
        f"torch.{name} is not supported by dragon_core.vm.torch"
        + (f"; use {alt} instead" if alt else
           "; see docs/from-pytorch.md for what is supported, or call dragon_core.ops on "
           "tensor.dragon()"))
