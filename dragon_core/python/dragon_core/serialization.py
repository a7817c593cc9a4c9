"""Checkpoints: ``save(obj, path)`` and ``load(path)``.

A checkpoint holds a tree of plain data — dicts, lists, tuples, ``None``,
bools, ints, floats, strings, bytes — whose leaves may also be tensors,
NumPy arrays and NumPy scalars: module state dicts, optimizer state dicts
with their parameter groups, training counters. The file format is Dragon's
own (described in ``docs/checkpoints.md``): a fixed header, a JSON
description of the tree, then the raw tensor buffers, each aligned to 64
bytes, then a trailer with a CRC32 of the buffers. Loading never runs code
from the file, and every byte of it is covered by a checksum.

Writes are atomic: a failed or killed save leaves the previous file intact.
"""

from __future__ import annotations

import base64
import io
import json
import math
import os
import re
import struct
import sys
import zlib
from collections.abc import Callable, Mapping
from typing import Any, BinaryIO

import numpy as np

from . import _C
from ._device import Device
from ._dtypes import as_dtype
from ._fileio import atomic_write
from .errors import CheckpointError

# ---------------------------------------------------------------- format

MAGIC = b"\x89DGCKPT\n"      # high-bit byte and newline catch text-mode damage
END_MAGIC = b"DGCKEND\n"
FORMAT_VERSION = 1
ALIGN = 64

_PREFIX = struct.Struct("<8sII")     # magic, version, crc32(magic + version)
_HEADER = struct.Struct("<QQQII")    # meta_len, data_offset, data_len, reserved, meta_crc
_TRAILER = struct.Struct("<II8s")    # data_crc, reserved, END_MAGIC
_HEADER_END = _PREFIX.size + _HEADER.size   # 48: where the JSON description starts
_CHUNK = 1 << 24                     # read/write granularity for large buffers

# Element types a buffer may hold: Dragon's tensor dtypes plus the other
# numeric NumPy dtypes (ndarrays only). Stored little-endian.
_TENSOR_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16",
                  "bfloat16", "float32", "float64", "uint16", "uint32", "uint64")
_ARRAY_DTYPES = _TENSOR_DTYPES + ("complex64", "complex128")
_GRAD_DTYPES = ("float16", "bfloat16", "float32", "float64")   # may require gradients
_MAX_NDIM = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
_MAX_BYTES = (1 << 63) - 1          # the most one buffer can span (NumPy's intp)

# Ints in this range are JSON numbers; larger ones are "bigint" nodes holding
# hexadecimal digits, which convert in linear time and are not subject to
# Python's limit on decimal conversions (sys.get_int_max_str_digits).
_INT_MIN, _INT_MAX = -(1 << 63), (1 << 63) - 1
_HEX_INT = re.compile(r"-?[0-9a-f]+")

MapLocation = None | str | Device | Mapping | Callable


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return as_dtype("bfloat16").numpy
    return np.dtype(name)


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _tensor_type():
    from ._tensor import Tensor
    return Tensor


def _dtype_type():
    from ._dtypes import dtype
    return dtype


_CANONICAL_NAN = 0x7FF8000000000000      # float("nan"): stored as "nan" alone
_NAN_BITS = re.compile(r"[0-9a-f]{16}")


# ---------------------------------------------------------------- encoding

class _Blob:
    """One buffer of the data section: a tensor, an array or a NumPy scalar."""

    __slots__ = ("dtype", "extra", "kind", "nbytes", "offset", "shape", "source")

    def __init__(self, source, kind: str, dtype: str, shape: tuple, itemsize: int,
                 extra: dict):
        self.source = source
        self.kind = kind
        self.dtype = dtype
        self.shape = tuple(int(d) for d in shape)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * itemsize
        self.offset = 0
        self.extra = extra

    def array(self) -> np.ndarray:
        """The elements as a C-contiguous little-endian host array."""
        if self.kind == "tensor":
            t = self.source
            if t.device.type != "cpu":
                t = t.cpu()
            arr = t.numpy()
        else:
            arr = np.asarray(self.source)
        if arr.dtype.byteorder == ">" or (arr.dtype.byteorder == "=" and sys.byteorder == "big"):
            arr = arr.astype(arr.dtype.newbyteorder("<"))
        arr = np.ascontiguousarray(arr)
        if arr.nbytes != self.nbytes:  # pragma: no cover - a tensor changed under us
            raise RuntimeError(f"buffer of {self.nbytes} bytes expected, got {arr.nbytes}")
        return arr

    def describe(self) -> dict:
        d = {"kind": self.kind, "dtype": self.dtype, "shape": list(self.shape),
             "offset": self.offset, "nbytes": self.nbytes}
        d.update(self.extra)
        return d


def _path_str(where: list) -> str:
    return "obj" + "".join(where)


def _key_repr(key: Any, limit: int | None = 60) -> str:
    """``repr(key)`` for messages and paths: short, and safe for ints too
    large to print in decimal."""
    if isinstance(key, int) and not isinstance(key, bool) and key.bit_length() > 64:
        text = f"<int of {key.bit_length()} bits>"
    elif type(key) is tuple:
        inner = ", ".join(_key_repr(k, limit) for k in key)
        text = f"({inner},)" if len(key) == 1 else f"({inner})"
    else:
        try:
            text = repr(key)
        except Exception:   # a broken __repr__ must not hide the real error
            text = f"<{type(key).__qualname__}>"
    return text if limit is None or len(text) <= limit else text[:limit - 3] + "..."


def _int_node(value: int) -> dict:
    if _INT_MIN <= value <= _INT_MAX:
        return {"t": "int", "v": value}
    return {"t": "bigint", "v": format(value, "x")}


class _Encoder:
    """Turns an object tree into a JSON-able description plus buffers."""

    def __init__(self, path: str):
        self.path = path
        self.Tensor = _tensor_type()
        self.blobs: list[_Blob] = []
        self._by_id: dict[int, int] = {}   # id(tensor or array) -> blob index
        self._stack: set[int] = set()      # containers being encoded (cycle check)

    def _unsupported(self, obj, where: list, what: str = "object") -> TypeError:
        return TypeError(
            f"save: cannot store {what} of type {type(obj).__module__}."
            f"{type(obj).__qualname__} at {_path_str(where)}; a checkpoint holds dicts, "
            f"lists, tuples, None, bool, int, float, str, bytes, tensors, NumPy arrays "
            f"and NumPy scalars{self.untouched()}")

    def untouched(self) -> str:
        """The end of every save error message."""
        return f" (nothing was written: {self.path!r} is left as it was)"

    def scalar(self, obj, where: list) -> dict | None:
        """The node of a plain scalar, or None if ``obj`` is not one."""
        if obj is None:
            return {"t": "none"}
        if isinstance(obj, bool):
            return {"t": "bool", "v": bool(obj)}
        if isinstance(obj, int):
            return _int_node(int(obj))
        if isinstance(obj, float):
            v = float(obj)
            if math.isfinite(v):
                return {"t": "float", "v": v}
            node = {"t": "float", "v": repr(v)}
            bits = struct.unpack("<Q", struct.pack("<d", v))[0]
            if v != v and bits != _CANONICAL_NAN:
                node["x"] = format(bits, "016x")   # sign and payload of this NaN
            return node
        if isinstance(obj, str):
            return {"t": "str", "v": str.__str__(obj)}
        if isinstance(obj, (bytes, bytearray)):
            return {"t": "bytes", "v": base64.b64encode(bytes(obj)).decode("ascii")}
        return None

    def key(self, key, where: list, whole=None) -> dict:
        """The node of a dict key; ``whole`` is the key that holds ``key``."""
        whole = key if whole is None else whole
        if isinstance(key, np.generic) and key.dtype.kind in "biuf":
            key = key.item()    # NumPy scalar keys load as Python scalars
        node = self.scalar(key, where)
        if node is not None and node["t"] != "bytes":
            return node
        if isinstance(key, tuple):
            return {"t": "tuple", "v": [self.key(k, where, whole) for k in key]}
        inside = "" if key is whole else f" inside the key {_key_repr(whole)}"
        if isinstance(key, (self.Tensor, np.ndarray)):
            what = "a tensor" if isinstance(key, self.Tensor) else "a NumPy array"
            raise TypeError(f"save: cannot store a dict key holding {what}{inside} in the "
                            f"dict at {_path_str(where)}: it hashes by identity, so no "
                            f"object would find that entry after loading; key by name or "
                            f"index instead (keys may be None, bool, int, float, str or "
                            f"tuples of these){self.untouched()}")
        raise TypeError(f"save: cannot store a dict key of type {type(key).__qualname__} "
                        f"({_key_repr(key)}){inside} in the dict at {_path_str(where)}; keys "
                        f"may be None, bool, int, float, str or tuples of these"
                        f"{self.untouched()}")

    def blob(self, obj, kind: str, dtype: str, shape, itemsize: int, extra: dict) -> dict:
        idx = self._by_id.get(id(obj))
        if idx is None:
            idx = len(self.blobs)
            self.blobs.append(_Blob(obj, kind, dtype, shape, itemsize, extra))
            self._by_id[id(obj)] = idx
        return {"t": kind, "i": idx}

    def encode(self, obj, where: list) -> dict:
        # NumPy scalars first: np.float64 is also a Python float.
        node = None if isinstance(obj, np.generic) else self.scalar(obj, where)
        if node is not None:
            return node
        if isinstance(obj, _dtype_type()):
            return {"t": "dtype", "v": obj.name}
        if isinstance(obj, self.Tensor):
            dt = obj.dtype
            return self.blob(obj, "tensor", dt.name, obj.shape, dt.itemsize,
                             {"device": str(obj.device),
                              "requires_grad": bool(obj.requires_grad)})
        if isinstance(obj, np.ndarray) and type(obj) not in (np.ndarray, np.memmap):
            # A masked array would lose its mask, a matrix its 2-d semantics.
            raise TypeError(f"save: cannot store a {type(obj).__module__}."
                            f"{type(obj).__qualname__} (a NumPy array subclass) at "
                            f"{_path_str(where)}: only its data would be stored; save plain "
                            f"arrays (for a masked array: .data and .mask)"
                            f"{self.untouched()}")
        if isinstance(obj, (np.ndarray, np.generic)):
            dt = np.asarray(obj).dtype if isinstance(obj, np.generic) else obj.dtype
            name = "bool" if dt.kind == "b" else dt.name
            if name not in _ARRAY_DTYPES:
                raise TypeError(f"save: cannot store a NumPy {'array' if obj.ndim else 'scalar'} "
                                f"of dtype {dt} at {_path_str(where)}; supported dtypes: "
                                f"{', '.join(_ARRAY_DTYPES)}{self.untouched()}")
            if isinstance(obj, np.generic):
                # Scalars are immutable and often interned: never share them.
                b = _Blob(obj, "npscalar", name, (), dt.itemsize, {})
                self.blobs.append(b)
                return {"t": "npscalar", "i": len(self.blobs) - 1}
            return self.blob(obj, "ndarray", name, obj.shape, dt.itemsize, {})
        if isinstance(obj, (dict, list, tuple)):
            if id(obj) in self._stack:
                raise ValueError(f"save: the object contains itself at {_path_str(where)} "
                                 f"(a reference cycle); checkpoints hold trees"
                                 f"{self.untouched()}")
            self._stack.add(id(obj))
            try:
                if isinstance(obj, dict):
                    keys, values = [], []
                    for k, v in obj.items():
                        keys.append(self.key(k, where))
                        values.append(self.encode(v, where + [f"[{_key_repr(k, None)}]"]))
                    return {"t": "dict", "k": keys, "v": values}
                kind = "tuple" if isinstance(obj, tuple) else "list"
                return {"t": kind,
                        "v": [self.encode(v, where + [f"[{i}]"]) for i, v in enumerate(obj)]}
            finally:
                self._stack.discard(id(obj))
        raise self._unsupported(obj, where)


def save(obj: Any, path: str | os.PathLike) -> None:
    """Save a tree of tensors, arrays and plain data to a checkpoint file.

    Parameters
    ----------
    obj : object
        Dicts (keys: None, bool, int, float, str or tuples of these, nested;
        never tensors or arrays), lists, tuples, None, bool, int (any size),
        float, str, bytes, :class:`Tensor`,
        ``numpy.ndarray`` and NumPy scalars, nested freely. Dict subclasses
        (``OrderedDict``, ``defaultdict``) load as ``dict`` and tuple
        subclasses as ``tuple``. A tensor or array that appears several
        times is stored once and loads as one object. Tensors keep dtype,
        shape, device and ``requires_grad`` (not gradients); non-contiguous
        tensors are stored as contiguous copies.
    path : str or os.PathLike
        Destination. Written atomically: a temporary file in the same
        folder is written, flushed, fsync'ed and renamed over ``path``, so a
        failed or killed save leaves any previous file intact.

    Raises
    ------
    TypeError
        If the tree holds an unsupported object or a dict key that is not
        allowed (one holding a tensor, even inside a tuple); the message
        names where it is (e.g. ``obj['optimizer']['state'][0]['step']``)
        and the file, which is left as it was.
    ValueError
        If the tree contains itself.
    """
    is_path = isinstance(path, (str, bytes, os.PathLike))
    if not is_path and not callable(getattr(path, "write", None)):
        raise TypeError(f"save: the destination must be a path (str, bytes or "
                        f"os.PathLike) or a binary file object with write(), got "
                        f"{type(path).__name__}")
    name = os.fspath(path) if is_path else str(getattr(path, "name", "<file object>"))
    enc = _Encoder(name)
    root = enc.encode(obj, [])
    offset = 0
    for b in enc.blobs:
        b.offset = offset
        offset = _align(offset + b.nbytes)
    data_len = offset   # already aligned
    meta = json.dumps({"producer": f"dragon-core {_C.__version__}", "root": root,
                       "buffers": [b.describe() for b in enc.blobs]},
                      allow_nan=False, separators=(",", ":")).encode("ascii")
    data_offset = _align(_HEADER_END + len(meta))
    prefix = struct.pack("<8sI", MAGIC, FORMAT_VERSION)
    prefix += struct.pack("<I", zlib.crc32(prefix))
    header_fields = (len(meta), data_offset, data_len, 0)
    head_wo_crc = struct.pack("<QQQI", *header_fields)
    meta_crc = zlib.crc32(meta, zlib.crc32(head_wo_crc))
    header = head_wo_crc + struct.pack("<I", meta_crc)

    def write(f: BinaryIO) -> None:
        f.write(prefix)
        f.write(header)
        f.write(meta)
        f.write(bytes(data_offset - _HEADER_END - len(meta)))
        crc = _write_data(f, enc.blobs, data_len)
        f.write(_TRAILER.pack(crc, 0, END_MAGIC))
    if not is_path:
        write(path)          # the caller's stream: it decides what a failure leaves
        return
    with atomic_write(path) as f:
        write(f)


def _write_data(f: BinaryIO, blobs: list[_Blob], data_len: int) -> int:
    """Write the data section; return its CRC32."""
    crc = 0
    pos = 0
    for b in blobs:
        pad = bytes(b.offset - pos)
        f.write(pad)
        crc = zlib.crc32(pad, crc)
        view = memoryview(b.array().reshape(-1).view(np.uint8))
        for start in range(0, len(view), _CHUNK):
            chunk = view[start:start + _CHUNK]
            f.write(chunk)
            crc = zlib.crc32(chunk, crc)
        pos = b.offset + b.nbytes
    pad = bytes(data_len - pos)
    f.write(pad)
    return zlib.crc32(pad, crc)


# ---------------------------------------------------------------- decoding

def _foreign_hint(head: bytes) -> str:
    """What a file that is not a checkpoint seems to be, and what to do."""
    if head.startswith(b"PK\x03\x04") or (len(head) >= 2 and head[0] == 0x80
                                           and 2 <= head[1] <= 5):
        return ("; it is a zip archive or a pickle, as PyTorch's torch.save (or NumPy's "
                ".npz) writes. Dragon never unpickles: unpickling runs code from the file. "
                "Convert a PyTorch file where torch is installed: torch.load(path, "
                "weights_only=True), tensors to NumPy arrays (t.numpy()), then "
                "dragon_core.save; read a .npz with numpy.load")
    if head.startswith(b"\x93NUMPY"):
        return "; it is a NumPy .npy file: read it with numpy.load"
    return ""


class _Reader:
    """Reads and checks one checkpoint file."""

    def __init__(self, f: BinaryIO, path: str, size: int | None = None):
        self.f = f
        self.path = path
        self.size = os.fstat(f.fileno()).st_size if size is None else size

    def error(self, what: str) -> CheckpointError:
        return CheckpointError(f"{self.path}: {what}", path=self.path)

    def read_exact(self, n: int, what: str) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise self.error(f"truncated: the file ends inside the {what} "
                             f"({self.size} bytes in the file)")
        return data

    def header(self) -> tuple[dict, int, int]:
        """Check prefix, version, size and description; return
        (description, data_offset, data_len)."""
        head = self.f.read(_PREFIX.size)
        if len(head) < len(MAGIC) or head[:len(MAGIC)] != MAGIC:
            if MAGIC.startswith(head) and len(head) < len(MAGIC):
                raise self.error(f"truncated: only {self.size} bytes, not even a header")
            raise self.error("not a Dragon checkpoint (the file does not start with the "
                             "checkpoint magic bytes)" + _foreign_hint(head))
        if len(head) < _PREFIX.size:
            raise self.error(f"truncated: only {self.size} bytes, the header is incomplete")
        _, version, crc = _PREFIX.unpack(head)
        if zlib.crc32(head[:12]) != crc:
            raise self.error("corrupt header: the format version field fails its checksum")
        if version > FORMAT_VERSION:
            raise self.error(f"written in checkpoint format version {version}, newer than "
                             f"the versions this dragon-core reads (1 to {FORMAT_VERSION}); "
                             f"upgrade with: pip install -U dragon-core")
        if version < 1:
            raise self.error(f"invalid checkpoint format version {version}")
        raw = self.read_exact(_HEADER.size, "header")
        meta_len, data_offset, data_len, _, meta_crc = _HEADER.unpack(raw)
        if _HEADER_END + meta_len > self.size:
            raise self.error(f"truncated (or a corrupt header): the file has {self.size} "
                             f"bytes, the header announces a {meta_len}-byte description")
        # The CRC first, so that a damaged size field is reported as damage.
        meta = self.read_exact(meta_len, "description")
        if zlib.crc32(meta, zlib.crc32(raw[:-4])) != meta_crc:
            raise self.error("corrupt: the header or the structure description fails its "
                             "CRC32 check")
        expected = data_offset + data_len + _TRAILER.size
        if data_offset < _HEADER_END + meta_len or data_offset % ALIGN or data_len % ALIGN:
            raise self.error("corrupt header: inconsistent section sizes")
        if self.size < expected:
            raise self.error(f"truncated: the file has {self.size} bytes but its header "
                             f"says {expected}")
        if self.size > expected:
            raise self.error(f"corrupt: {self.size - expected} unexpected bytes after the "
                             f"end of the checkpoint ({expected} bytes)")
        try:
            desc = json.loads(meta.decode("utf-8"))
        except (ValueError, RecursionError) as e:
            raise self.error(f"malformed structure description: {e}") from None
        if not isinstance(desc, dict) or "root" not in desc or \
                not isinstance(desc.get("buffers"), list):
            raise self.error("malformed structure description: missing 'root' or 'buffers'")
        if any(self.read_exact(data_offset - _HEADER_END - meta_len, "header padding")):
            raise self.error("corrupt: the padding after the structure description is "
                             "not zero")
        return desc, data_offset, data_len

    def buffers(self, specs: list, data_len: int) -> list[np.ndarray]:
        """Read the data section into one array per buffer, checking its CRC."""
        arrays: list = [None] * len(specs)
        order = sorted(range(len(specs)), key=lambda i: specs[i]["offset"])
        crc = 0
        pos = 0
        for i in order:
            s = specs[i]
            gap = s["offset"] - pos
            if gap < 0:
                raise self.error(f"malformed structure description: buffer {i} overlaps "
                                 f"the previous one")
            crc = zlib.crc32(self.read_exact(gap, "tensor data"), crc)
            buf = np.empty(s["nbytes"], dtype=np.uint8)
            view = memoryview(buf)
            for start in range(0, len(view), _CHUNK):
                chunk = view[start:start + _CHUNK]
                if self.f.readinto(chunk) != len(chunk):
                    raise self.error("truncated: the file ends inside the tensor data")
                crc = zlib.crc32(chunk, crc)
            arrays[i] = buf
            pos = s["offset"] + s["nbytes"]
        crc = zlib.crc32(self.read_exact(data_len - pos, "tensor data"), crc)
        stored, reserved, end = _TRAILER.unpack(self.read_exact(_TRAILER.size, "trailer"))
        if end != END_MAGIC or reserved != 0:
            raise self.error("corrupt: the trailer is damaged")
        if stored != crc:
            raise self.error(f"corrupt: the tensor data fails its CRC32 check "
                             f"(stored {stored:#010x}, computed {crc:#010x})")
        return arrays


def _check_spec(i: int, s, data_len: int, bad) -> None:
    if not isinstance(s, dict):
        raise bad(f"buffer {i} is not an object")
    kind, dtype, shape = s.get("kind"), s.get("dtype"), s.get("shape")
    allowed = _TENSOR_DTYPES if kind == "tensor" else _ARRAY_DTYPES
    if kind not in ("tensor", "ndarray", "npscalar"):
        raise bad(f"buffer {i} has unknown kind {kind!r}")
    if dtype not in allowed:
        raise bad(f"buffer {i} has unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise bad(f"buffer {i} has an invalid shape {_key_repr(shape)}")
    if len(shape) > _MAX_NDIM:
        raise bad(f"buffer {i} has {len(shape)} dimensions; at most {_MAX_NDIM} are "
                  f"supported")
    itemsize = _np_dtype(dtype).itemsize
    if math.prod(d for d in shape if d) * itemsize > _MAX_BYTES:
        raise bad(f"buffer {i} has an impossible shape {_key_repr(shape)}")
    if kind == "npscalar" and shape:
        raise bad(f"buffer {i} is a scalar with shape {shape}")
    for field in ("offset", "nbytes"):
        if type(s.get(field)) is not int or s[field] < 0:
            raise bad(f"buffer {i} has an invalid {field}")
    if s["nbytes"] != math.prod(shape) * itemsize:
        raise bad(f"buffer {i}: {s['nbytes']} bytes do not hold {dtype}{shape}")
    if kind == "tensor":
        device = s.get("device", "cpu:0")
        try:
            Device.parse(device if isinstance(device, str) else None)
        except (TypeError, ValueError):
            raise bad(f"buffer {i} has an invalid device {_key_repr(device)}") from None
        grad = s.get("requires_grad", False)
        if not isinstance(grad, bool):
            raise bad(f"buffer {i} has an invalid requires_grad {_key_repr(grad)}")
        if grad and dtype not in _GRAD_DTYPES:
            raise bad(f"buffer {i} is a {dtype} tensor marked requires_grad; only "
                      f"floating-point tensors ({', '.join(_GRAD_DTYPES)}) can require "
                      f"gradients")
    if s["offset"] % ALIGN or s["offset"] + s["nbytes"] > data_len:
        raise bad(f"buffer {i} (offset {s['offset']}, {s['nbytes']} bytes) is misaligned or "
                  f"lies beyond the {data_len}-byte data section")


def _placer(map_location: MapLocation, error: Callable[[str], CheckpointError]):
    """A function (tensor on the host, saved device, where) -> placed tensor."""
    if callable(map_location) and not isinstance(map_location, (str, Device)):
        return lambda t, saved, where: map_location(t, saved)
    if map_location is None:
        def target_of(saved):
            return saved
    elif isinstance(map_location, Mapping):
        table = {str(Device.parse(k)): str(Device.parse(v)) for k, v in map_location.items()}

        def target_of(saved):
            return table.get(saved, saved)
    else:
        fixed = str(Device.parse(map_location))

        def target_of(saved):
            return fixed

    def place(t, saved, where):
        target = target_of(saved)
        if target == "cpu:0":
            return t
        try:
            # A Device, not a string: Tensor.to reads "int" or "float32" as a dtype.
            return t.to(Device.parse(target))
        except Exception as e:
            raise error(f"the tensor at {where} was saved on '{saved}' and cannot be "
                        f"placed on '{target}' ({type(e).__name__}: {e}); pass "
                        f"map_location='cpu' (or a dict/callable) to load it elsewhere") from e
    return place


def load(path: str | os.PathLike, map_location: MapLocation = None) -> Any:
    """Load a checkpoint written by :func:`save`.

    Parameters
    ----------
    path : str or os.PathLike
        The checkpoint file.
    map_location : str, Device, dict, callable or None, optional
        Where tensors go. ``None`` (default): the device each was saved on.
        A device (``"cpu"``, ``"toy:0"``): all tensors there. A dict maps
        saved devices to devices (``{"cuda:0": "cpu"}``); unmapped ones stay.
        A callable ``f(tensor, saved_device: str) -> Tensor`` receives each
        tensor on the host and returns it placed.

    Returns
    -------
    object
        The saved tree: dicts, lists, tuples, scalars, tensors (with their
        ``requires_grad``), NumPy arrays and NumPy scalars.

    Raises
    ------
    CheckpointError
        If the file is not a checkpoint, is truncated or corrupt (checksum
        mismatch), is malformed, or comes from a newer format version; the
        message names the file and what is wrong. Also a ``ValueError``.
        Whatever the bytes of the file, no other exception is raised for
        them (a ``map_location`` callable may raise its own).
    FileNotFoundError
        If ``path`` does not exist.
    """
    if isinstance(path, (str, bytes, os.PathLike)):
        path = os.fspath(path)
        with open(path, "rb") as f:
            return _load(_Reader(f, path), map_location)
    if not callable(getattr(path, "read", None)):
        raise TypeError(f"load: the source must be a path (str, bytes or os.PathLike) or a "
                        f"binary file object with read(), got {type(path).__name__}")
    name = str(getattr(path, "name", "<file object>"))
    data = path.read()
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"load: {name}: read() returned {type(data).__name__}, not bytes; "
                        f"open the file in binary mode ('rb')")
    data = bytes(data)
    return _load(_Reader(io.BytesIO(data), name, len(data)), map_location)


def _load(reader: "_Reader", map_location: MapLocation) -> Any:
    with reader.f:
        desc, _, data_len = reader.header()
        specs = desc["buffers"]

        def bad(what: str) -> CheckpointError:
            return reader.error(f"malformed structure description: {what}")
        for i, s in enumerate(specs):
            _check_spec(i, s, data_len, bad)
        raw = reader.buffers(specs, data_len)
    decoder = _Decoder(specs, raw, _placer(map_location, reader.error), bad)
    try:
        return decoder.decode(desc["root"], [])
    except RecursionError:
        raise bad("the tree is nested too deeply") from None


_SCALAR_KEY_NODES = ("none", "bool", "int", "bigint", "float", "str")


class _Decoder:
    """Rebuilds the object tree from its description and the buffers."""

    def __init__(self, specs: list, raw: list, place, bad):
        self.specs = specs
        self.raw = raw
        self.place = place
        self.bad = bad
        self.objects: dict[int, Any] = {}

    def buffer(self, node: dict, where: list):
        i = node.get("i")
        if type(i) is not int or not 0 <= i < len(self.specs):
            raise self.bad(f"buffer index {i!r} at {_path_str(where)} is out of range")
        s = self.specs[i]
        if s["kind"] != node["t"]:
            raise self.bad(f"node of type {node['t']!r} at {_path_str(where)} refers to a "
                           f"{s['kind']} buffer")
        if i in self.objects:
            return self.objects[i]
        try:
            dt = _np_dtype(s["dtype"])
            if sys.byteorder == "big" and dt.byteorder != "|":
                arr = self.raw[i].view(dt.newbyteorder("<")).astype(dt)
            else:
                arr = self.raw[i].view(dt)
            arr = arr.reshape(s["shape"])
            if s["kind"] == "npscalar":
                obj = arr[()]
            elif s["kind"] == "ndarray":
                obj = arr
            else:
                from ._tensor import from_numpy
                obj = from_numpy(arr)
        except Exception as e:   # _check_spec's checks should make this unreachable
            raise self.bad(f"buffer {i} at {_path_str(where)} cannot be built "
                           f"({type(e).__name__}: {e})") from e
        if s["kind"] == "tensor":
            obj = self.place(obj, s.get("device", "cpu:0"), _path_str(where))
            if s.get("requires_grad"):
                obj.requires_grad = True
        self.objects[i] = obj
        return obj

    def key(self, node, where: list):
        """A dict key: a scalar or a tuple of keys, never a tensor."""
        if isinstance(node, dict) and node.get("t") == "tuple" and isinstance(node.get("v"),
                                                                              list):
            return tuple(self.key(k, where) for k in node["v"])
        if not isinstance(node, dict) or node.get("t") not in _SCALAR_KEY_NODES:
            raise self.bad(f"invalid dict key at {_path_str(where)} (keys are None, bool, "
                           f"int, float, str or tuples of these)")
        return self.decode(node, where)

    def decode(self, node, where: list):
        if not isinstance(node, dict) or not isinstance(node.get("t"), str):
            raise self.bad(f"invalid node at {_path_str(where)}")
        t = node["t"]
        v = node.get("v")
        if t == "none":
            return None
        if t == "bool" and isinstance(v, bool):
            return v
        if t == "int" and type(v) is int:
            return v
        if t == "bigint" and isinstance(v, str) and _HEX_INT.fullmatch(v):
            return int(v, 16)
        if t == "float":
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
            if v in ("inf", "-inf"):
                return float(v)
            if v == "nan":
                x = node.get("x")
                if x is None:
                    return float(v)
                if isinstance(x, str) and _NAN_BITS.fullmatch(x):
                    f = struct.unpack("<d", struct.pack("<Q", int(x, 16)))[0]
                    if f != f:
                        return f
                raise self.bad(f"invalid NaN bits {_key_repr(x)} at {_path_str(where)}")
        elif t == "dtype" and isinstance(v, str) and v in _TENSOR_DTYPES:
            return as_dtype(v)
        elif t == "str" and isinstance(v, str):
            return v
        elif t == "bytes" and isinstance(v, str):
            try:
                return base64.b64decode(v.encode("ascii"), validate=True)
            except ValueError:
                raise self.bad(f"invalid bytes at {_path_str(where)}") from None
        elif t in ("list", "tuple") and isinstance(v, list):
            items = [self.decode(x, where + [f"[{i}]"]) for i, x in enumerate(v)]
            return items if t == "list" else tuple(items)
        elif t == "dict" and isinstance(v, list) and isinstance(node.get("k"), list):
            keys = node["k"]
            if len(keys) != len(v):
                raise self.bad(f"dict at {_path_str(where)} has {len(keys)} keys and "
                               f"{len(v)} values")
            out = {}
            for kn, vn in zip(keys, v):
                k = self.key(kn, where)
                out[k] = self.decode(vn, where + [f"[{_key_repr(k, None)}]"])
            return out
        elif t in ("tensor", "ndarray", "npscalar"):
            return self.buffer(node, where)
        raise self.bad(f"invalid node of type {t!r} at {_path_str(where)}")
