"""Memory statistics of the per-device caching allocators."""

from __future__ import annotations

from . import _C


def stats(device: str = "cpu") -> dict:
    """Allocator statistics of one device.

    Returns
    -------
    dict
        ``allocated`` (bytes held by live tensors, in allocator size classes),
        ``reserved`` (allocated + cached free blocks), ``peak`` (max of
        allocated since start or :func:`reset_peak`), ``num_allocs`` (device
        allocations, i.e. cache misses) and ``num_requests``; and the
        counters that show whether the core waits or allocates more than it
        must: ``num_frees`` (device frees), ``cross_stream_reuses`` (cached
        blocks handed to another stream after an event), ``device_syncs``
        (device-wide synchronizations), ``stream_syncs`` (waits for one
        stream: host reads), ``event_syncs`` and ``stream_waits`` (device-side
        waits for events).
    """
    out = _C.memory_stats(str(device))
    out.update(_C._device_counters(str(device)))
    return out


def reset_peak(device: str = "cpu") -> None:
    """Set the peak to the currently allocated bytes."""
    _C.reset_peak(str(device))


def empty_cache(device: str = "cpu") -> None:
    """Return every cached free block of ``device`` to the device."""
    _C.empty_cache(str(device))
