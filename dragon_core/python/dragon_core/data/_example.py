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
                     e.g. "<f4") | u8 ndim | u64 shape[ndim] | C-order data
"""

from __future__ import annotations

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
        dt = arr.dtype.str.encode("ascii")
        if arr.ndim > 255 or len(dt) > 255:
            raise ValueError(f"field {name!r}: array rank or dtype unsupported")
        return [_U8.pack(_ARRAY), _U8.pack(len(dt)), dt, _U8.pack(arr.ndim),
                struct.pack(f"<{arr.ndim}Q", *arr.shape), arr.tobytes()]
    raise TypeError(f"field {name!r}: cannot encode a {type(value).__name__} "
                    "(use bytes, str, bool, int, float or a numpy array)")


def decode_example(payload: bytes | bytearray | memoryview) -> dict[str, Any]:
    """Decode bytes produced by :func:`encode_example`.

    Arrays come back as fresh, writable, aligned NumPy arrays with their
    original dtype and shape; NumPy scalars come back as 0-d arrays.

    Raises
    ------
    RecordError
        The payload is not a valid encoded example.
    """
    buf = memoryview(payload).cast("B")
    try:
        return _decode(buf)
    except (struct.error, ValueError, TypeError, UnicodeDecodeError) as exc:
        if isinstance(exc, RecordError):
            raise
        raise RecordError(f"malformed example: {exc}") from exc


def _decode(buf: memoryview) -> dict[str, Any]:
    if bytes(buf[:4]) != EXAMPLE_MAGIC:
        raise RecordError("not an encoded example (bad magic; was it written with "
                          "write_example / encode_example?)")
    version = buf[4]
    if version > EXAMPLE_VERSION:
        raise RecordError(f"example encoding version {version} is newer than this reader")
    (count,) = _U32.unpack_from(buf, 5)
    pos = 9
    out: dict[str, Any] = {}
    for _ in range(count):
        (klen,) = _U16.unpack_from(buf, pos)
        pos += 2
        name = bytes(buf[pos:pos + klen]).decode("utf-8")
        pos += klen
        kind = buf[pos]
        pos += 1
        if kind in (_BYTES, _STR):
            (n,) = _U64.unpack_from(buf, pos)
            pos += 8
            if pos + n > len(buf):
                raise ValueError(f"field {name!r} runs past the end")
            data = bytes(buf[pos:pos + n])
            pos += n
            out[name] = data if kind == _BYTES else data.decode("utf-8")
        elif kind == _INT:
            (out[name],) = _I64.unpack_from(buf, pos)
            pos += 8
        elif kind == _FLOAT:
            (out[name],) = _F64.unpack_from(buf, pos)
            pos += 8
        elif kind == _BOOL:
            out[name] = bool(buf[pos])
            pos += 1
        elif kind == _ARRAY:
            dlen = buf[pos]
            dtype = np.dtype(bytes(buf[pos + 1:pos + 1 + dlen]).decode("ascii"))
            pos += 1 + dlen
            ndim = buf[pos]
            shape = struct.unpack_from(f"<{ndim}Q", buf, pos + 1)
            pos += 1 + 8 * ndim
            nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
            if pos + nbytes > len(buf):
                raise ValueError(f"field {name!r} runs past the end")
            out[name] = np.frombuffer(buf[pos:pos + nbytes], dtype=dtype).reshape(shape).copy()
            pos += nbytes
        else:
            raise ValueError(f"field {name!r} has unknown kind {kind}")
    if pos != len(buf):
        raise ValueError(f"{len(buf) - pos} trailing bytes")
    return out
