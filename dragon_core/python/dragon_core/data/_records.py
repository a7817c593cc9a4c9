"""The Dragon record file: a checksummed, indexed container of byte strings.

Layout (all integers little-endian; see ``docs/data.md``)::

    header   magic b"DGRECORD" | u32 version | u32 flags | u32 masked_crc(previous 16 bytes)
    record   u64 length | u32 masked_crc(length bytes) | payload | u32 masked_crc(payload)
    ...
    index    b"DGRINDEX" | u64 count | u64 offset[count] | u32 masked_crc(count + offsets)
    footer   u64 index_offset | u64 count | u32 masked_crc(previous 16 bytes) | b"DGRE"

Checksums are CRC-32 (the IEEE/zlib polynomial, ``zlib.crc32``), masked as
in TFRecord so that a checksum computed over data holding checksums stays
well distributed.
"""

from __future__ import annotations

import os
import struct
import zlib
from typing import Any, Iterator

import numpy as np

from .._fileio import fsync_dir, open_temp
from ._errors import RecordError
from ._example import encode_example

MAGIC = b"DGRECORD"
INDEX_MAGIC = b"DGRINDEX"
END_MAGIC = b"DGRE"
VERSION = 1

_HEADER = struct.Struct("<8sIII")       # magic, version, flags, crc
_RECORD_HEAD = struct.Struct("<QI")     # length, crc of the length
_CRC = struct.Struct("<I")
_INDEX_HEAD = struct.Struct("<8sQ")     # magic, count
_FOOTER = struct.Struct("<QQI4s")       # index offset, count, crc, end magic

HEADER_SIZE = _HEADER.size              # 20
FOOTER_SIZE = _FOOTER.size              # 24
_MASK_DELTA = 0xA282EAD8


def masked_crc(data: bytes | bytearray | memoryview) -> int:
    """CRC-32 of ``data``, rotated right by 15 bits plus a constant."""
    crc = zlib.crc32(data) & 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


class RecordWriter:
    """Write a record file atomically.

    Records go to a temporary file next to ``path``; :meth:`close` writes the
    index and footer, flushes, ``fsync``\\ s and renames it onto ``path``. A
    writer left by an exception (``with`` block) or :meth:`abort`\\ ed leaves
    no file behind, so a reader never sees a half-written file.

    Parameters
    ----------
    path : str or os.PathLike
        The destination file.

    Examples
    --------
    >>> with RecordWriter("train.dgr") as w:
    ...     w.write(b"raw bytes")
    ...     w.write_example({"image": np.zeros((2, 2), np.uint8), "label": 3})
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        # In the destination's folder, with the mode the file will have; a
        # symbolic link is written through (its target replaced).
        fd, self._tmp_path, self._dest = open_temp(
            self.path, prefix=os.path.basename(os.fsdecode(self.path)) + ".", suffix=".tmp")
        self._file = os.fdopen(fd, "wb")
        self._offsets: list[int] = []
        self._pos = 0
        self._closed = False
        header = struct.pack("<8sII", MAGIC, VERSION, 0)
        self._emit(header + _CRC.pack(masked_crc(header)))

    def _emit(self, data: bytes | memoryview) -> None:
        self._file.write(data)
        self._pos += len(data)

    def __len__(self) -> int:
        """The number of records written so far."""
        return len(self._offsets)

    def write(self, payload: bytes | bytearray | memoryview) -> int:
        """Append one record.

        Parameters
        ----------
        payload : bytes-like
            The record's content.

        Returns
        -------
        int
            The record's index in the file.
        """
        if self._closed:
            raise ValueError(f"{self.path}: write() on a closed RecordWriter")
        if isinstance(payload, str) or not isinstance(payload, (bytes, bytearray, memoryview)):
            raise TypeError(f"RecordWriter.write expects a bytes-like payload, got "
                            f"{type(payload).__name__} (use write_example for dicts)")
        data = memoryview(payload).cast("B")
        length = struct.pack("<Q", data.nbytes)
        self._offsets.append(self._pos)
        self._emit(length + _CRC.pack(masked_crc(length)))
        self._emit(data)
        self._emit(_CRC.pack(masked_crc(data)))
        return len(self._offsets) - 1

    def write_example(self, example: dict[str, Any]) -> int:
        """Append a dict of arrays / numbers / strings / bytes, encoded by
        :func:`encode_example`; returns the record's index."""
        return self.write(encode_example(example))

    def close(self) -> None:
        """Write the index and footer, ``fsync`` and move the file into place."""
        if self._closed:
            return
        try:
            index_offset = self._pos
            body = _INDEX_HEAD.pack(INDEX_MAGIC, len(self._offsets))
            body += np.asarray(self._offsets, dtype="<u8").tobytes()
            self._emit(body + _CRC.pack(masked_crc(body[len(INDEX_MAGIC):])))
            footer = struct.pack("<QQ", index_offset, len(self._offsets))
            self._emit(footer + _CRC.pack(masked_crc(footer)) + END_MAGIC)
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            os.replace(self._tmp_path, self._dest)
            fsync_dir(os.path.dirname(os.path.abspath(self._dest)))
        except BaseException:
            self.abort()
            raise
        self._closed = True

    def abort(self) -> None:
        """Discard everything written; ``path`` is left untouched."""
        self._closed = True
        try:
            self._file.close()
        finally:
            try:
                os.unlink(self._tmp_path)
            except FileNotFoundError:
                pass

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __del__(self):
        # A writer dropped without close() is unfinished: do not publish it.
        if not getattr(self, "_closed", True):
            try:
                self.abort()
            except Exception:
                pass


class RecordReader:
    """Random access to the records of a file written by :class:`RecordWriter`.

    The header, footer and index are validated at open; every read checks
    the record's length checksum, its position against the index and its
    payload checksum, and raises :class:`RecordError` naming the file and
    the record index on any mismatch.

    Parameters
    ----------
    path : str or os.PathLike
        The record file.

    Notes
    -----
    Reads use ``os.pread``, so one reader may be shared by threads. A reader
    pickles as its path and reopens the file on the other side (worker
    processes each get their own descriptor).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._fd = -1
        self._fd = os.open(self.path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:
            self._load_index()
        except BaseException:
            self.close()
            raise

    def _error(self, message: str, index: int | None = None) -> RecordError:
        return RecordError(message, path=self.path, index=index)

    def _pread(self, size: int, offset: int) -> bytes:
        data = os.pread(self._fd, size, offset)
        return data

    def _load_index(self) -> None:
        size = os.fstat(self._fd).st_size
        if size < HEADER_SIZE + FOOTER_SIZE:
            raise self._error(f"file too short ({size} bytes) to be a record file "
                              "(truncated, or not written by RecordWriter)")
        magic, version, _flags, crc = _HEADER.unpack(self._pread(HEADER_SIZE, 0))
        if magic != MAGIC:
            raise self._error(f"not a record file: bad magic {magic!r} (expected {MAGIC!r})")
        if crc != masked_crc(self._pread(HEADER_SIZE - 4, 0)):
            raise self._error("corrupt file header (checksum mismatch)")
        if version > VERSION:
            raise self._error(f"record format version {version} is newer than this reader "
                              f"(supports up to {VERSION}); upgrade dragon-core")
        footer = self._pread(FOOTER_SIZE, size - FOOTER_SIZE)
        index_offset, count, crc, end = _FOOTER.unpack(footer)
        if end != END_MAGIC or crc != masked_crc(footer[:16]):
            raise self._error("truncated or unfinished file: the footer is missing or corrupt "
                              "(was the writer closed?)")
        index_size = _INDEX_HEAD.size + 8 * count + 4
        if index_offset < HEADER_SIZE or index_offset + index_size != size - FOOTER_SIZE:
            raise self._error(f"corrupt footer: index at {index_offset} with {count} entries "
                              f"does not fit a file of {size} bytes")
        raw = self._pread(index_size, index_offset)
        imagic, icount = _INDEX_HEAD.unpack_from(raw)
        (icrc,) = _CRC.unpack_from(raw, index_size - 4)
        if imagic != INDEX_MAGIC or icount != count or \
                icrc != masked_crc(raw[len(INDEX_MAGIC):index_size - 4]):
            raise self._error("corrupt record index (checksum mismatch)")
        offsets = np.frombuffer(raw, dtype="<u8", count=count, offset=_INDEX_HEAD.size)
        # offsets[i + 1] is where record i must end; the index ends the last one.
        self._bounds = np.append(offsets, np.uint64(index_offset)).astype(np.int64)
        if count and (self._bounds[0] != HEADER_SIZE or np.any(np.diff(self._bounds) < 16)):
            raise self._error("corrupt record index (offsets out of order)")
        self._count = int(count)

    def __len__(self) -> int:
        """The number of records."""
        return self._count

    def read(self, index: int) -> bytes:
        """The payload of record ``index`` (negative indices count from the end)."""
        if self._fd < 0:
            raise ValueError(f"{self.path}: read from a closed RecordReader")
        i = int(index)
        if i < 0:
            i += self._count
        if not 0 <= i < self._count:
            raise IndexError(f"{self.path}: record index {index} out of range "
                             f"for {self._count} records")
        start, end = int(self._bounds[i]), int(self._bounds[i + 1])
        raw = self._pread(end - start, start)
        if len(raw) != end - start:
            raise self._error("truncated record", i)
        length, crc = _RECORD_HEAD.unpack_from(raw)
        if crc != masked_crc(raw[:8]):
            raise self._error("corrupt record header (length checksum mismatch)", i)
        if length + 16 != end - start:
            raise self._error(f"record length {length} disagrees with the index "
                              f"({end - start - 16} bytes)", i)
        payload = raw[12:12 + length]
        (crc,) = _CRC.unpack_from(raw, 12 + length)
        if crc != masked_crc(payload):
            raise self._error("corrupt record payload (checksum mismatch)", i)
        return payload

    def __getitem__(self, index: int) -> bytes:
        return self.read(index)

    def __iter__(self) -> Iterator[bytes]:
        for i in range(self._count):
            yield self.read(i)

    def verify(self) -> None:
        """Read every record, raising :class:`RecordError` on the first bad one."""
        for i in range(self._count):
            self.read(i)

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "RecordReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __getstate__(self) -> dict:
        return {"path": self.path}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"])

    def __repr__(self) -> str:
        return f"RecordReader({self.path!r}, records={self._count})"
