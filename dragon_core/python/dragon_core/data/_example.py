"""Encoding of a dict of arrays / numbers / strings / bytes into one record.

The encoding is self-describing and never uses pickle, so reading a record
file cannot execute code. Layout (little-endian; see ``docs/data.md``)::

    b"DGEX" | u8 version (1) | u32 field count
    per field:  u16 name length | name (UTF-8) | u8 kind | value
      kind 0 bytes   u64 length | data
      kind 1 str     u64 length | UTF-8 data
      kind 2 int     i64
      kind 3 float   f64
      kind 4 bool    u8
      kind 5 array   u8 dtype-string length | dtype string (numpy ``dtype.str``,
                     e.g. "<f4", or the name "bfloat16") | u8 ndim |
                     u64 shape[ndim] | C-order data
"""

from __future__ import annotations

import math
import re
import struct
from typing import Any

import numpy as np

from ._errors import RecordError

EXAMPLE_MAGIC = b"DGEX"
EXAMPLE_VERSION = 1
_BYTES, _STR, _INT, _FLOAT, _BOOL, _ARRAY = range(6)
_U8, _U16, _U32, _U64 = struct.Struct("<B"), struct.Struct("<H"), struct.Struct("<I"), \
    struct.Struct("<Q")
_I64, _F64 = struct.Struct("<q"), struct.Struct("<d")
_MAX_NDIM = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
_MAX_DIM = (1 << 63) - 1


def encode_example(example: dict[str, Any]) -> bytes:
    """Encode a dict into the bytes of one record.

    Parameters
    ----------
    example : dict of str to value
        Values may be ``bytes``, ``str``, ``bool``, ``int`` (64-bit),
        ``float``, NumPy scalars or arrays of a non-object dtype (any shape),
        or :class:`dragon_core.Tensor` on the host.

    Returns
    -------
    bytes
        Decodable with :func:`decode_example`.
    """
    if not isinstance(example, dict):
        raise TypeError(f"encode_example expects a dict, got {type(example).__name__}")
    parts = [EXAMPLE_MAGIC, _U8.pack(EXAMPLE_VERSION), _U32.pack(len(example))]
    for name, value in example.items():
        if not isinstance(name, str):
            raise TypeError(f"example keys must be str, got {name!r}")
        key = name.encode("utf-8")
        if len(key) > 0xFFFF:
            raise ValueError(f"example key too long ({len(key)} bytes)")
        parts += [_U16.pack(len(key)), key]
        parts += _encode_value(name, value)
    return b"".join(parts)


def _encode_value(name: str, value: Any) -> list[bytes]:
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        return [_U8.pack(_BYTES), _U64.pack(len(data)), data]
    if isinstance(value, str):
        data = value.encode("utf-8")
        return [_U8.pack(_STR), _U64.pack(len(data)), data]
    if isinstance(value, bool):
        return [_U8.pack(_BOOL), _U8.pack(int(value))]
    if isinstance(value, int):
        if not -(1 << 63) <= value < (1 << 63):
            raise OverflowError(f"field {name!r}: int {value} does not fit 64 bits")
        return [_U8.pack(_INT), _I64.pack(value)]
    if isinstance(value, float):
        return [_U8.pack(_FLOAT), _F64.pack(value)]
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()           # a dragon_core.Tensor on the host
    if isinstance(value, (np.ndarray, np.generic)):
        arr = np.asarray(value)          # tobytes() below writes C order
        if arr.dtype.hasobject:
            raise TypeError(f"field {name!r}: object arrays cannot be encoded")
        if arr.dtype.kind == "V" and arr.dtype.type is not np.void:
            # An extension dtype (ml_dtypes) whose ``str`` is a bare "<V2":
            # stored by name, or it would come back as raw void items.
            if arr.dtype.name not in _NAMED_DTYPES:
                raise TypeError(f"field {name!r}: arrays of dtype {arr.dtype} cannot be encoded")
            dt = arr.dtype.name.encode("ascii")
        else:
            dt = arr.dtype.str.encode("ascii")
        if arr.dtype.itemsize == 0 or not (_DTYPE_STR.fullmatch(dt.decode("ascii"))
                                           or dt.decode("ascii") in _NAMED_DTYPES):
            raise TypeError(f"field {name!r}: arrays of dtype {arr.dtype} cannot be encoded")
        return [_U8.pack(_ARRAY), _U8.pack(len(dt)), dt, _U8.pack(arr.ndim),
                struct.pack(f"<{arr.ndim}Q", *arr.shape), arr.tobytes()]
    raise TypeError(f"field {name!r}: cannot encode a {type(value).__name__} "
                    "(use bytes, str, bool, int, float or a numpy array)")


def decode_example(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode bytes produced by :func:`encode_example`.

    Arrays come back as fresh, writable, aligned NumPy arrays with their
    original dtype and shape; NumPy scalars come back as 0-d arrays.

    Parameters
    ----------
    payload : bytes, bytearray or memoryview
        One encoded example (a record's payload).

    Returns
    -------
    dict of str to value
        The fields, in the order they were encoded.

    Raises
    ------
    RecordError
        The payload is not a valid encoded example: truncated, corrupt, or
        not an example at all. Whatever the bytes, no other exception is
        raised for them.
    TypeError
        ``payload`` is not a bytes-like object.
    """
    buf = memoryview(payload).cast("B")
    try:
        return _decode(_Cursor(buf))
    except RecordError:
        raise
    except (struct.error, ValueError, TypeError, OverflowError, IndexError) as exc:
        # Every check is explicit in _decode; this only keeps the documented
        # contract should NumPy refuse something those checks let through.
        raise RecordError(f"malformed example: {exc}") from exc


# What ``dtype.str`` gives for the dtypes an array can be encoded with: byte
# order, kind, item size, and a unit for datetimes and timedeltas.
_DTYPE_STR = re.compile(r"[<>|=](?:[biufcSUV][0-9]{1,9}|[Mm]8(?:\[[0-9]{0,9}[a-zA-Z]{1,3}\])?)")


# Extension dtypes (from ml_dtypes) recorded by name; NumPy's ``dtype.str``
# of these is a plain void ("<V2") that would lose what the bytes mean.
_NAMED_DTYPES = ("bfloat16",)


def _named_dtype(text: str, name: str) -> np.dtype:
    try:
        import ml_dtypes
    except ImportError:
        raise RecordError(f"field {name!r} holds a {text} array: reading it needs ml_dtypes "
                          "(pip install ml_dtypes)") from None
    return np.dtype(getattr(ml_dtypes, text))


class _Cursor:
    """Reads little-endian fields from a payload, refusing to run past its end."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: memoryview):
        self.buf = buf
        self.pos = 0

    def take(self, n: int, what: str) -> memoryview:
        if n > len(self.buf) - self.pos:
            raise RecordError(f"malformed example: truncated ({what} needs {n} bytes at "
                              f"offset {self.pos}, {len(self.buf) - self.pos} left)")
        view = self.buf[self.pos:self.pos + n]
        self.pos += n
        return view

    def unpack(self, fmt: struct.Struct, what: str) -> Any:
        return fmt.unpack(self.take(fmt.size, what))[0]


def _decode(cur: _Cursor) -> dict[str, Any]:
    if bytes(cur.buf[:4]) != EXAMPLE_MAGIC:
        raise RecordError("not an encoded example (bad magic; was it written with "
                          "write_example / encode_example?)")
    cur.pos = 4
    version = cur.unpack(_U8, "the version")
    if version > EXAMPLE_VERSION:
        raise RecordError(f"example encoding version {version} is newer than this reader")
    if version < 1:
        raise RecordError(f"malformed example: invalid encoding version {version}")
    count = cur.unpack(_U32, "the field count")
    out: dict[str, Any] = {}
    for i in range(count):
        klen = cur.unpack(_U16, f"the name length of field {i}")
        try:
            name = bytes(cur.take(klen, f"the name of field {i}")).decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(f"malformed example: the name of field {i} is not "
                              "UTF-8") from None
        if name in out:
            raise RecordError(f"malformed example: field {name!r} appears twice")
        out[name] = _decode_value(cur, name)
    if cur.pos != len(cur.buf):
        raise RecordError(f"malformed example: {len(cur.buf) - cur.pos} trailing bytes")
    return out


def _decode_value(cur: _Cursor, name: str) -> Any:
    kind = cur.unpack(_U8, f"the kind of field {name!r}")
    if kind in (_BYTES, _STR):
        n = cur.unpack(_U64, f"the length of field {name!r}")
        data = bytes(cur.take(n, f"field {name!r}"))
        if kind == _BYTES:
            return data
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise RecordError(f"malformed example: field {name!r} is not UTF-8") from None
    if kind == _INT:
        return cur.unpack(_I64, f"field {name!r}")
    if kind == _FLOAT:
        return cur.unpack(_F64, f"field {name!r}")
    if kind == _BOOL:
        value = cur.unpack(_U8, f"field {name!r}")
        if value > 1:
            raise RecordError(f"malformed example: bool field {name!r} holds {value}")
        return bool(value)
    if kind == _ARRAY:
        return _decode_array(cur, name)
    raise RecordError(f"malformed example: field {name!r} has unknown kind {kind}")


def _decode_array(cur: _Cursor, name: str) -> np.ndarray:
    dlen = cur.unpack(_U8, f"the dtype length of field {name!r}")
    text = bytes(cur.take(dlen, f"the dtype of field {name!r}"))
    if text.decode("latin-1") in _NAMED_DTYPES:
        dtype = _named_dtype(text.decode("ascii"), name)
    elif not _DTYPE_STR.fullmatch(text.decode("latin-1")):
        raise RecordError(f"malformed example: field {name!r} has an invalid dtype {text!r}")
    else:
        dtype = None
    try:
        dtype = dtype if dtype is not None else np.dtype(text.decode("ascii"))
    except TypeError:      # e.g. a datetime unit NumPy does not know
        raise RecordError(f"malformed example: field {name!r} has an invalid dtype "
                          f"{text!r}") from None
    if dtype.itemsize == 0 or dtype.hasobject:
        raise RecordError(f"malformed example: field {name!r} has an invalid dtype {text!r}")
    ndim = cur.unpack(_U8, f"the rank of field {name!r}")
    if ndim > _MAX_NDIM:
        raise RecordError(f"malformed example: field {name!r} has {ndim} dimensions "
                          f"(NumPy supports {_MAX_NDIM})")
    shape = struct.unpack(f"<{ndim}Q", cur.take(8 * ndim, f"the shape of field {name!r}"))
    count = math.prod(shape)
    if max(shape, default=0) > _MAX_DIM or count * dtype.itemsize > len(cur.buf):
        raise RecordError(f"malformed example: field {name!r} of shape {shape} and dtype "
                          f"{dtype} does not fit in the {len(cur.buf)}-byte payload")
    data = cur.take(count * dtype.itemsize, f"the data of field {name!r}")
    try:
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
    except ValueError as exc:       # e.g. "array is too big" for (2**62, 2**62, 0)
        raise RecordError(f"malformed example: field {name!r} of shape {shape} cannot be "
                          f"built ({exc})") from None
