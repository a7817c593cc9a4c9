"""``torch.dtype`` objects over dragon_core's dtypes, and torch's promotion."""

from __future__ import annotations

import numbers

import numpy as np

import dragon_core as _dg


class dtype:  # noqa: N801 (torch's name)
    """A PyTorch-style element type (``torch.float32``); wraps a
    ``dragon_core.dtype``."""

    __slots__ = ("name", "_dg", "is_floating_point", "is_signed", "itemsize", "_cat")

    def __init__(self, name: str):
        self.name = name
        self._dg = _dg.as_dtype("bool" if name == "bool" else name)
        self.is_floating_point = self._dg.is_floating_point
        self.is_signed = name not in ("bool", "uint8")
        self.itemsize = self._dg.itemsize
        self._cat = 2 if self.is_floating_point else (0 if name == "bool" else 1)

    @property
    def is_complex(self) -> bool:
        return False

    def __repr__(self):
        return f"torch.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


_NAMES = ("float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "bool")
DTYPES = {n: dtype(n) for n in _NAMES}
BY_CODE = {d._dg.code: d for d in DTYPES.values()}
ALIASES = {"float": "float32", "double": "float64", "half": "float16", "long": "int64",
           "int": "int32", "short": "int16", "uint8": "uint8", "bool": "bool",
           "float32": "float32", "float64": "float64", "float16": "float16",
           "bfloat16": "bfloat16", "int8": "int8", "int16": "int16", "int32": "int32",
           "int64": "int64", "cfloat": None, "complex64": None, "complex128": None}


def _by_name(name: str) -> dtype:
    return DTYPES[name]


def to_dtype(obj) -> dtype:
    """``obj`` (a torch dtype, a dragon dtype, a NumPy dtype, a name, a
    Python type) as a vm.torch dtype."""
    if isinstance(obj, dtype):
        return obj
    if obj is float:
        return DTYPES["float32"] if DEFAULT[0] is None else DEFAULT[0]
    if obj is int:
        return DTYPES["int64"]
    if obj is bool:
        return DTYPES["bool"]
    if isinstance(obj, str):
        name = ALIASES.get(obj.replace("torch.", ""), obj)
        if name is None:
            raise NotImplementedError(f"dtype {obj!r}: complex dtypes are not supported by "
                                      "dragon_core.vm.torch; keep real and imaginary parts in "
                                      "two float tensors")
        if name in DTYPES:
            return DTYPES[name]
    try:
        return BY_CODE[_dg.as_dtype(obj).code]
    except Exception:
        raise TypeError(f"not a dtype: {obj!r}") from None


DEFAULT = [None]  # torch.set_default_dtype


def default_float() -> dtype:
    return DTYPES["float32"] if DEFAULT[0] is None else DEFAULT[0]


def promote_types(a: dtype, b: dtype) -> dtype:
    """torch.promote_types: the smallest dtype both cast to safely."""
    if a is b:
        return a
    if a._cat != b._cat:
        return a if a._cat > b._cat else b
    names = {a.name, b.name}
    if names == {"bfloat16", "float16"}:
        return DTYPES["float32"]
    if "bfloat16" in names:
        other = b if a.name == "bfloat16" else a
        return other if other.itemsize > 2 else DTYPES["bfloat16"]
    return BY_CODE[_dg.as_dtype(np.promote_types(a._dg.numpy, b._dg.numpy)).code]


def scalar_cat(value) -> int:
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, (numbers.Integral, np.integer)):
        return 1
    return 2


def result_type(*operands) -> dtype:
    """torch.result_type over tensors (dimensioned, 0-d) and Python scalars:
    the highest category wins; within it dimensioned tensors beat 0-d ones,
    which beat scalars (whose default is int64 / the default float)."""
    from ._tensor import Tensor
    dims, zeros, scalars = [], [], []
    for op in operands:
        if isinstance(op, Tensor):
            (dims if op._t.ndim else zeros).append(op.dtype)
        else:
            scalars.append(scalar_cat(op))
    top = max([d._cat for d in dims + zeros] + scalars)
    for group in (dims, zeros):
        picked = [d for d in group if d._cat == top]
        if picked:
            out = picked[0]
            for d in picked[1:]:
                out = promote_types(out, d)
            return out
    return {0: DTYPES["bool"], 1: DTYPES["int64"], 2: default_float()}[top]
