"""Turning a list of examples into a batch of tensors."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .._tensor import Tensor, from_numpy

# Python scalars follow dg.tensor's defaults (floats become float32).
_SCALAR_DTYPES = {bool: np.bool_, int: np.int64, float: np.float32}


def default_collate(examples: Sequence[Any]) -> Any:
    """Stack a list of examples into a batch.

    - NumPy arrays, NumPy scalars, host tensors and Python ``bool``/``int``/
      ``float`` are stacked along a new first axis into one
      :class:`dragon_core.Tensor` (Python floats become float32, ints int64);
    - dicts are collated key by key, tuples and lists position by position
      (namedtuples keep their type);
    - anything else (``str``, ``bytes``, ``None``, objects) becomes a list.

    Raises
    ------
    ValueError
        Examples disagree in structure or in the shape of a field.
    """
    if len(examples) == 0:
        raise ValueError("default_collate needs at least one example")
    return _collate(list(examples), "batch")


def _collate(items: list, where: str) -> Any:
    first = items[0]
    if isinstance(first, dict):
        keys = list(first)
        for item in items:
            if not isinstance(item, dict) or list(item) != keys:
                raise ValueError(f"{where}: examples have different keys: {keys} vs "
                                 f"{list(item) if isinstance(item, dict) else type(item)}")
        return {k: _collate([item[k] for item in items], f"{where}[{k!r}]") for k in keys}
    if isinstance(first, (tuple, list)):
        size = len(first)
        for item in items:
            if not isinstance(item, (tuple, list)) or len(item) != size:
                raise ValueError(f"{where}: examples have different lengths or types")
        fields = [_collate([item[i] for item in items], f"{where}[{i}]") for i in range(size)]
        if isinstance(first, tuple) and hasattr(first, "_fields"):
            return type(first)(*fields)
        return type(first)(fields) if isinstance(first, tuple) else fields
    if isinstance(first, Tensor):
        return _stack([item.numpy() for item in items], where)
    if isinstance(first, (np.ndarray, np.generic)):
        return _stack(items, where)
    if type(first) in _SCALAR_DTYPES:
        return _scalars(items, where)
    return items


def _scalars(items: list, where: str) -> Tensor:
    """Python bools/ints/floats as one tensor: bool if all are bools, else
    int64 if none is a float, else float32 (never an int64 tensor that
    truncates 2.5 to 2, nor a bool one that turns 2 into True)."""
    kinds = {type(x) for x in items}
    if not kinds <= set(_SCALAR_DTYPES):
        other = next(type(x).__name__ for x in items if type(x) not in _SCALAR_DTYPES)
        raise ValueError(f"{where}: examples mix {type(items[0]).__name__} with {other}; "
                         f"pass a collate_fn for such fields")
    dtype = np.bool_ if kinds == {bool} else np.float32 if float in kinds else np.int64
    try:
        return from_numpy(np.asarray(items, dtype=dtype))
    except OverflowError:
        raise ValueError(f"{where}: an int does not fit in int64 "
                         f"({min(items)} .. {max(items)})") from None


def _stack(arrays: list, where: str) -> Tensor:
    shape = np.shape(arrays[0])
    for a in arrays:
        if np.shape(a) != shape:
            raise ValueError(f"{where}: cannot stack examples of shapes {shape} and "
                             f"{np.shape(a)}; pass a collate_fn that pads or crops")
    return from_numpy(np.ascontiguousarray(np.stack(arrays)))
