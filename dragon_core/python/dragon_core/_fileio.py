"""Crash-safe file writes shared by graph saving and checkpoints.

A write goes to a temporary file in the destination's folder, which is
flushed and fsync'ed, then renamed over the destination (``os.replace`` is
atomic on POSIX and Windows); finally the folder itself is fsync'ed so that
the rename survives a power loss. A reader therefore sees either the old
file or the complete new one, never a mix, and a write that fails or is
killed leaves the old file untouched. A killed process may leave its
temporary file (``.tmp-<name>.<random>``) behind; it is never read.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import BinaryIO


def _umask() -> int:
    """The process umask, read without changing it where the OS allows."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def fsync_dir(folder: str) -> None:
    """Flush a folder's entries (a rename in it) to disk; a no-op where
    folders cannot be opened (Windows) or do not support fsync."""
    flags = getattr(os, "O_DIRECTORY", None)
    if flags is None:
        return
    try:
        fd = os.open(folder, os.O_RDONLY | flags)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on folders; nothing to do
    finally:
        os.close(fd)


def temp_prefix(path: str | os.PathLike) -> str:
    """The name prefix of the temporary files a write to ``path`` creates."""
    return ".tmp-" + os.path.basename(os.fsdecode(path)) + "."


def open_temp(path: str | os.PathLike, prefix: str | None = None,
              suffix: str = "") -> tuple[int, str, str]:
    """Create the temporary file of an atomic write to ``path``.

    Returns ``(fd, temp_path, destination)``: an open descriptor, the
    temporary file (in the destination's folder, named ``prefix`` +
    random + ``suffix``; ``prefix`` defaults to ``.tmp-<name>.``) and the
    path to rename it to. A destination that is a symbolic link is resolved
    (the file it points to is replaced, the link kept, as ``open(path,
    "wb")`` would write through it). The temporary file gets the mode of
    the file it will replace, or the one an ordinary ``open()`` would give
    (``mkstemp`` alone would leave 0600).
    """
    path = os.fsdecode(path)
    if os.path.islink(path):
        path = os.path.realpath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if prefix is None:
        prefix = temp_prefix(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    try:
        mode = os.stat(path).st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    try:
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return fd, tmp, path


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a binary file that replaces ``path`` atomically on success.

    Parameters
    ----------
    path : str, bytes or os.PathLike
        The destination. Its folder must exist. If it is a symbolic link,
        the file it points to is replaced and the link kept.

    Yields
    ------
    BinaryIO
        A file open for writing. When the ``with`` block ends normally, the
        file is flushed, fsync'ed and renamed to ``path``; if the block raises,
        the temporary file is removed and ``path`` is left as it was.
    """
    fd, tmp, path = open_temp(path)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(folder)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path) as f:
        f.write(data)
