"""Small helpers shared by the layer modules."""

from __future__ import annotations

from .. import ops
from .parameter import Parameter


def empty_param(shape, dtype="float32", device=None) -> Parameter:
    """A zero-filled parameter (initialisers overwrite it)."""
    return Parameter(ops.zeros(list(shape), dtype=dtype, device=device))


def check_positive(owner: str, **values) -> None:
    for name, v in values.items():
        if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
            raise ValueError(f"{owner}: {name} must be a positive int, got {v!r}")
