"""Streams and events (ABI 1.3): the order of work on asynchronous devices.

On a stream-ordered device (one whose plugin sets
``DG_DEVICE_STREAM_ORDERED``) every kernel and copy is issued on the calling
thread's *current stream* of that device and may still be running when the
call returns. The core waits only where the host reads device memory
(``numpy()``, ``item()``, ``tolist()``, printing, ``.to("cpu")``), and then
only for the stream doing the read, which first joins the stream that wrote
the tensor. On synchronous devices (``cpu``, devices of ABI < 1.3) streams
and events are accepted and do nothing: the code runs unchanged.
"""

from __future__ import annotations

import contextlib
import threading
import time

from . import _C
from ._device import Device


def _spec(device) -> str:
    return str(Device.parse(device))


class Stream:
    """A stream of ``device``: work issued on it runs in issue order.

    ``Stream(device)`` hands out one of the device's pooled streams (round
    robin, as PyTorch's stream pool does); streams are never destroyed.

    Parameters
    ----------
    device : str or Device
        E.g. ``"toy_async"`` or ``"cuda:1"``.
    """

    __slots__ = ("device", "_handle")

    def __init__(self, device="cpu", *, _handle: int | None = None):
        self.device = Device.parse(device)
        self._handle = _C._pool_stream(str(self.device)) if _handle is None else _handle

    @classmethod
    def _wrap(cls, device, handle: int) -> "Stream":
        return cls(device, _handle=handle)

    def synchronize(self) -> None:
        """Block until every piece of work issued on this stream has finished.

        Raises the device's error (a :class:`dragon_core.errors.DragonError`)
        if any of it failed."""
        _C._stream_synchronize(str(self.device), self._handle)

    def wait_event(self, event: "Event") -> None:
        """Make work issued on this stream from now on wait for ``event``
        (on the device; the host does not wait)."""
        if event._device is None:
            return  # never recorded: nothing to wait for
        if event._device != self.device:
            raise ValueError(f"event of {event._device} cannot order a stream of {self.device}")
        _C._stream_wait_event(str(self.device), self._handle, event._handle)

    def wait_stream(self, other: "Stream") -> None:
        """Make work issued on this stream from now on wait for what was
        issued on ``other`` so far."""
        e = Event()
        e.record(other)
        self.wait_event(e)

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (a new one when None) on this stream and return it."""
        event = Event() if event is None else event
        event.record(self)
        return event

    def query(self) -> bool:
        """True when every piece of work issued so far has finished."""
        return self.record_event().query()

    def __eq__(self, other) -> bool:
        return (isinstance(other, Stream) and self.device == other.device
                and self._handle == other._handle)

    def __hash__(self) -> int:
        return hash((str(self.device), self._handle))

    def __repr__(self) -> str:
        return f"Stream(device='{self.device}', handle={self._handle:#x})"


def current_stream(device="cpu") -> Stream:
    """The calling thread's current stream of ``device``."""
    spec = _spec(device)
    return Stream._wrap(spec, _C._current_stream(spec))


def default_stream(device="cpu") -> Stream:
    """The device's default stream (current until a ``with stream(s)``)."""
    spec = _spec(device)
    return Stream._wrap(spec, _C._default_stream(spec))


@contextlib.contextmanager
def stream(s: Stream | None):
    """Make ``s`` the current stream of its device in this thread.

    ``with dg.stream(s): y = x * 2`` issues the multiplication on ``s``.
    ``None`` changes nothing."""
    if s is None:
        yield None
        return
    spec = str(s.device)
    prev = _C._set_current_stream(spec, s._handle)
    try:
        yield s
    finally:
        _C._set_current_stream(spec, prev)


def synchronize(device="cpu") -> None:
    """Block until all work on ``device`` has finished (every stream).

    A device-wide wait: counted in ``memory.stats(device)['device_syncs']``;
    prefer ``Stream.synchronize`` or events."""
    _C._device_synchronize(_spec(device))


class Event:
    """A marker in a stream: record it, then query, wait for or order on it.

    On synchronous devices an event is complete as soon as it is recorded
    and times with the host clock.

    Parameters
    ----------
    enable_timing : bool
        Accepted for PyTorch compatibility; every event can be timed.
    """

    def __init__(self, enable_timing: bool = False):
        self.enable_timing = enable_timing
        self._device: Device | None = None
        self._handle = 0
        self._host_time: float | None = None
        self._lock = threading.Lock()

    def record(self, stream: Stream | None = None) -> None:
        """Capture the work issued so far on ``stream`` (default: the current
        stream of the cpu device, which is complete at once)."""
        s = stream if stream is not None else current_stream("cpu")
        with self._lock:
            if self._device is not None and self._device != s.device:
                raise ValueError(f"an event of {self._device} cannot be recorded on {s.device}")
            if self._device is None:
                self._device = s.device
                self._handle = _C._event_create(str(s.device))
            self._host_time = time.perf_counter()
            _C._event_record(str(s.device), self._handle, s._handle)

    def query(self) -> bool:
        """True when the captured work has finished (True if never recorded)."""
        if self._device is None:
            return True
        return _C._event_query(str(self._device), self._handle)

    def synchronize(self) -> None:
        """Block until the captured work has finished; raises its error."""
        if self._device is not None:
            _C._event_synchronize(str(self._device), self._handle)

    def wait(self, stream: Stream | None = None) -> None:
        """Make ``stream`` (default: current of the event's device) wait."""
        if self._device is None:
            return
        (stream or current_stream(self._device)).wait_event(self)

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds from this event to ``end`` (both recorded, finished)."""
        if self._device is None or end._device is None:
            raise ValueError("elapsed_time needs two recorded events")
        if self._handle == 0 or end._handle == 0:
            return (end._host_time - self._host_time) * 1e3
        self.synchronize()
        end.synchronize()
        return _C._event_elapsed_ms(str(self._device), self._handle, end._handle)

    def __del__(self):
        if self._device is not None and self._handle:
            try:
                _C._event_release(str(self._device), self._handle)
            except Exception:  # noqa: BLE001 - interpreter shutdown
                pass
