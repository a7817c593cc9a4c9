"""Small helpers shared by the layer modules."""

from __future__ import annotations

import math

from .. import ops
from . import init
from .functional import _fan
from .parameter import Parameter


def empty_param(shape, dtype="float32", device=None) -> Parameter:
    """A zero-filled parameter (initialisers overwrite it)."""
    return Parameter(ops.zeros(list(shape), dtype=dtype, device=device))


def check_positive(owner: str, **values) -> None:
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{owner}: {name} must be a positive int, got {v!r}")


def add_weight_and_bias(module, weight_shape, out_features: int, bias: bool,
                        dtype, device) -> None:
    """Registers ``module.weight`` of ``weight_shape`` and ``module.bias`` of
    ``[out_features]`` (None when not ``bias``), zero-filled."""
    module.weight = empty_param(weight_shape, dtype, device)
    if bias:
        module.bias = empty_param([out_features], dtype, device)
    else:
        module.register_parameter("bias", None)


def add_affine(module, shape, affine: bool, dtype, device) -> None:
    """Registers the affine pair of a normalisation layer: ``module.weight``
    (ones) and ``module.bias`` (zeros) of ``shape``, or two None
    placeholders when not ``affine``."""
    if affine:
        module.weight = empty_param(shape, dtype, device)
        module.bias = empty_param(shape, dtype, device)
        init.ones_(module.weight)
    else:
        module.register_parameter("weight", None)
        module.register_parameter("bias", None)


def reset_weight_and_bias(weight, bias) -> None:
    """PyTorch's default initialisation of Linear and Conv: ``weight`` by
    ``kaiming_uniform_(a=sqrt(5))``, ``bias`` (if not None) from
    ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        fan_in, _ = _fan(weight.shape)
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        init.uniform_(bias, -bound, bound)
