"""Dtypes: ``dragon_core.float32`` and friends."""

from __future__ import annotations

import numpy as np

# Index = the dtype code of the C ABI (sdk/include/dragon/plugin.h); codes
# 10-12 (uint16, uint32, uint64) arrived with ABI 1.4.
_NAMES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16",
          "bfloat16", "float32", "float64", "uint16", "uint32", "uint64")
_SIZES = (1, 1, 1, 2, 4, 8, 2, 2, 4, 8, 2, 4, 8)
_FLOAT_CODES = frozenset((6, 7, 8, 9))
_UNSIGNED_CODES = frozenset((0, 1, 10, 11, 12))  # bool counts as unsigned
_ALIASES = {"bool_": "bool", "float": "float32", "double": "float64",
            "half": "float16", "long": "int64", "int": "int32"}


class dtype:  # noqa: N801 - mirrors numpy.dtype / torch.dtype naming
    """A tensor element type.

    Compares equal to another ``dtype``, to its name (``"float32"``) and to
    the matching NumPy dtype.
    """

    __slots__ = ("name", "code", "itemsize")

    def __init__(self, code: int):
        self.code = code
        self.name = _NAMES[code]
        self.itemsize = _SIZES[code]

    @property
    def is_floating_point(self) -> bool:
        """True for float16, bfloat16, float32 and float64."""
        return self.code in _FLOAT_CODES

    @property
    def is_signed(self) -> bool:
        """True for signed integers and floats (False for bool and the
        unsigned integers uint8, uint16, uint32, uint64)."""
        return self.code not in _UNSIGNED_CODES

    @property
    def numpy(self) -> np.dtype:
        """The NumPy dtype (bfloat16 comes from the ``ml_dtypes`` package)."""
        if self.name == "bfloat16":
            try:
                import ml_dtypes
            except ImportError as e:  # pragma: no cover - depends on env
                raise ImportError("bfloat16 NumPy interop needs ml_dtypes: "
                                  "pip install ml_dtypes") from e
            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.name)

    def __eq__(self, other) -> bool:
        if isinstance(other, dtype):
            return other.code == self.code
        if _is_code(other):
            return False  # an int is not a dtype (int16 != 3)
        try:
            return as_dtype(other).code == self.code
        except (TypeError, ValueError):
            return NotImplemented

    def __hash__(self) -> int:
        return hash(("dragon_core.dtype", self.code))

    def __repr__(self) -> str:
        return f"dragon_core.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __reduce__(self):
        return (_by_code, (self.code,))


_DTYPES = tuple(dtype(i) for i in range(len(_NAMES)))
_BY_NAME = {d.name: d for d in _DTYPES}


def _by_code(code: int) -> dtype:
    return _DTYPES[code]


def _is_code(obj) -> bool:
    return isinstance(obj, (int, np.integer)) and not isinstance(obj, (bool, np.bool_))


def from_code(code: int) -> dtype:
    """The ``dtype`` of a runtime dtype code (for the core's own use: the
    codes of ``Tensor._dtype_code``, protobuf messages and the C ABI).

    Raises
    ------
    TypeError
        If ``code`` is not a valid dtype code.
    """
    if _is_code(code) and 0 <= int(code) < len(_DTYPES):
        return _DTYPES[int(code)]
    raise TypeError(f"invalid dtype code {code!r}")


def dtype_arg(obj, where: str = "dtype") -> dtype:
    """A user's dtype argument as a ``dtype``: a ``dtype``, its name, a NumPy
    dtype or scalar type, or ``bool``/``int``/``float`` -- never an int.

    Parameters
    ----------
    obj : dtype, str, numpy.dtype or type
        The argument.
    where : str, default "dtype"
        How the error names the argument (e.g. ``"zeros: dtype"``).

    Raises
    ------
    TypeError
        If ``obj`` is an int (a dtype code is not a dtype: ``zeros(2, 3)``
        must not mean int16) or names no Dragon dtype.
    """
    if isinstance(obj, (bool, np.bool_)) or _is_code(obj):
        raise TypeError(f"{where} must be a dtype (a dragon_core dtype, its name such as "
                        f"'int64', or a NumPy dtype), got {type(obj).__name__} {obj!r}")
    return as_dtype(obj)


def as_dtype(obj) -> dtype:
    """Convert a dtype, its name or a NumPy dtype to a ``dtype``.

    An int is read as a runtime dtype code (:func:`from_code`), for the
    core's internal callers; every user-facing ``dtype`` argument refuses
    ints (see :func:`dtype_arg`).

    Raises
    ------
    TypeError
        If ``obj`` names no Dragon dtype.
    """
    if isinstance(obj, dtype):
        return obj
    if _is_code(obj):
        return from_code(obj)
    if isinstance(obj, str):
        name = _ALIASES.get(obj, obj)
        if name in _BY_NAME:
            return _BY_NAME[name]
        raise TypeError(f"unknown dtype '{obj}'; expected one of {', '.join(_NAMES)}")
    if obj is bool:
        return _BY_NAME["bool"]
    if obj is int:
        return _BY_NAME["int64"]
    if obj is float:
        return _BY_NAME["float32"]
    try:
        nd = np.dtype(obj)
    except TypeError:
        raise TypeError(f"cannot interpret {obj!r} as a dtype") from None
    name = "bool" if nd.kind == "b" else nd.name
    if name in _BY_NAME:
        return _BY_NAME[name]
    raise TypeError(f"NumPy dtype '{nd}' has no Dragon equivalent; "
                    f"supported: {', '.join(_NAMES)}")


def dtype_code(obj) -> int:
    """The dtype code of a user's dtype argument (used by the C++ core)."""
    return dtype_arg(obj).code


(bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64,
 uint16, uint32, uint64) = _DTYPES
