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
        waits for events), ``events_created`` (event handles made; the core
        pools them, so it stays flat in steady state), ``h2d_copies`` and
        ``d2h_copies`` (host-to-device and device-to-host copies the core
        issued; these two and the wait counters are 0 on synchronous
        devices).
    """
    out = _C.memory_stats(str(device))
    out.update(_C._device_counters(str(device)))
    return out


def reset_peak(device: str = "cpu") -> None:
    """Set the peak to the currently allocated bytes."""
    _C.reset_peak(str(device))


def empty_cache(device: str = "cpu") -> None:
    """Return every cached free block of ``device`` to the device.

    The cached scalar operands of ``device`` (the 0-d tensors that Python
    scalars in ``x * 0.9`` become on a non-cpu device, made once per value)
    are dropped first, so their memory is returned too once no op uses it.
    """
    from ._tensor import _drop_device_scalars
    _drop_device_scalars(str(device))
    _C.empty_cache(str(device))


#: DgDeviceDef.get_attribute codes (ABI 1.3), by name.
_ATTRIBUTES = {"compute_units": 1, "total_memory": 2, "compute_capability": 3,
               "max_streams": 4, "memory_alignment": 5, "unified_addressing": 6}


def mem_get_info(device: str) -> tuple[int, int] | None:
    """``(free, total)`` bytes of ``device`` as the device reports them
    (``DgDeviceDef.memory_info``); ``None`` when the device does not say."""
    return _C._memory_info(str(device))


def device_attributes(device: str) -> dict:
    """The numeric attributes ``device`` reports (``DgDeviceDef.get_attribute``):
    ``compute_units``, ``total_memory``, ``compute_capability``,
    ``max_streams``, ``memory_alignment``, ``unified_addressing``; the ones it
    does not know are left out."""
    out = {}
    for name, code in _ATTRIBUTES.items():
        v = _C._device_attribute(str(device), code)
        if v is not None:
            out[name] = v
    return out
