"""Exceptions raised by :mod:`dragon_core.data`."""

from __future__ import annotations

from ..errors import DragonError


class DataError(DragonError):
    """Base class of the errors raised by the data pipeline."""


class RecordError(DataError, ValueError):
    """A record file is malformed, corrupt or truncated.

    Attributes
    ----------
    path : str
        The file involved.
    index : int or None
        The record involved, when the error concerns one record.
    """

    def __init__(self, message: str, *, path: str = "", index: int | None = None):
        where = f"{path}" if path else "<record file>"
        if index is not None:
            where += f", record {index}"
        super().__init__(f"{where}: {message}")
        self.path = path
        self.index = index

    def __reduce__(self):
        # Keep the exception picklable despite the keyword-only constructor.
        return (_rebuild_record_error, (str(self), self.path, self.index))


def _rebuild_record_error(text: str, path: str, index: int | None) -> RecordError:
    err = RecordError.__new__(RecordError)
    DataError.__init__(err, text)
    err.path = path
    err.index = index
    return err


class WorkerError(DataError, RuntimeError):
    """A worker process of a pipeline failed.

    Either the user code (dataset, reader, transformer) raised inside a
    worker, in which case the message holds the worker's formatted
    traceback, or the worker process died (killed, crashed).

    Attributes
    ----------
    stage : str
        ``"reader"`` or ``"transformer"``.
    worker_id : int
        The worker's number inside its stage.
    index : int or None
        The record (dataset index) being processed, when known.
    worker_traceback : str
        The traceback formatted inside the worker ("" when it died).
    exitcode : int or None
        The process exit code when the worker died (negative: the signal).
    """

    def __init__(self, message: str, *, stage: str = "", worker_id: int = -1,
                 index: int | None = None, worker_traceback: str = "",
                 exitcode: int | None = None):
        super().__init__(message)
        self.stage = stage
        self.worker_id = worker_id
        self.index = index
        self.worker_traceback = worker_traceback
        self.exitcode = exitcode


class DataTimeoutError(DataError, TimeoutError):
    """No example arrived within the pipeline's ``timeout`` although its
    workers are alive (a transformer or dataset that hangs)."""
