"""Per-device-type namespaces: ``dragon_core.cuda``, ``dragon_core.cpu``, ...

``dg.cuda.is_available()`` and friends, as PyTorch users expect them, for
any device type a plugin registers — the core names no device: the
namespace is built from the device registry on first attribute access
(``dragon_core.__getattr__``). A device type that a known wheel provides but
that is not installed (``dg.cuda`` without ``dragon-cuda``) still gets a
namespace whose ``is_available()`` is False and whose
``unavailable_reason()`` says which wheel to install, so feature checks
never need a try/except.
"""

from __future__ import annotations

from . import _C
from . import memory as _memory
from . import plugins as _plugins


class DeviceModule:
    """Queries and synchronisation for one device type (``dg.cuda`` ...).

    Parameters
    ----------
    type : str
        The device type name, e.g. ``"cuda"``.
    """

    def __init__(self, type: str):  # noqa: A002 - torch's name
        self.type = type

    def __repr__(self) -> str:
        return f"<dragon_core device namespace '{self.type}'>"

    # ------------------------------------------------------------ registry

    def _entry(self) -> dict | None:
        for d in _plugins.devices():
            if d["name"] == self.type:
                return d
        return None

    def device_count(self) -> int:
        """Number of usable devices of this type (0 when the plugin is
        missing or finds no hardware: see :meth:`unavailable_reason`)."""
        d = self._entry()
        return int(d["count"]) if d else 0

    def is_available(self) -> bool:
        """True when at least one device of this type can be used."""
        return self.device_count() > 0

    def unavailable_reason(self) -> str:
        """Why no device of this type can be used, in one line ("" when one
        can): the plugin's own reason (e.g. no NVIDIA driver), or which
        wheel to install when no plugin registers the type."""
        d = self._entry()
        if d is None:
            wheel = _plugins.KNOWN_PROVIDERS.get(self.type)
            hint = f": pip install {wheel}" if wheel else ""
            return f"no installed plugin registers the device type '{self.type}'{hint}"
        if d["count"]:
            return ""
        return str(d.get("reason") or f"no '{self.type}' device found")

    def _index(self, device, where: str) -> int:
        if device is None:
            index = 0
        elif isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            from ._device import Device

            parsed = Device.parse(device)
            if parsed.type != self.type:
                raise ValueError(f"{self.type}.{where}: {device!r} is not a "
                                 f"'{self.type}' device")
            index = parsed.index
        count = self.device_count()
        if not 0 <= index < count:
            reason = self.unavailable_reason()
            msg = (f"{self.type}.{where}: {self.type}:{index} does not exist ({count} "
                   f"{self.type} device(s){': ' + reason if reason else ''})")
            if count == 0:   # nothing to use at all: the error x.to(...) gives too
                from .errors import UnavailableError

                raise UnavailableError(msg)
            raise ValueError(msg)
        return index

    def get_device_name(self, device=None) -> str:
        """The device's own description (for a GPU: name, compute
        capability, memory, driver and runtime versions).

        Parameters
        ----------
        device : int or str or Device, optional
            An index or ``"cuda:1"``; defaults to device 0.
        """
        index = self._index(device, "get_device_name")
        return str(self._entry()["descriptions"][index])

    def get_device_capability(self, device=None) -> tuple[int, int]:
        """The device's compute capability as ``(major, minor)``, e.g.
        ``(9, 0)`` for an H100 (torch's ``get_device_capability``).

        Parameters
        ----------
        device : int or str or Device, optional
            An index or ``"cuda:1"``; defaults to device 0.

        Raises
        ------
        ValueError
            When the device type reports no compute capability
            (``DgDeviceDef.get_attribute`` code 3, ``major * 10 + minor``).
        """
        spec = self._spec(device, "get_device_capability")
        value = _memory.device_attributes(spec).get("compute_capability")
        if value is None:
            raise ValueError(f"{self.type}.get_device_capability: {spec} reports no "
                             f"compute capability")
        return int(value) // 10, int(value) % 10

    def _spec(self, device, where: str) -> str:
        """``"type:index"`` for ``device`` (checked to exist)."""
        return f"{self.type}:{self._index(device, where)}"

    # ------------------------------------------------------------ work

    def synchronize(self, device=None) -> None:
        """Block until all work on the device has finished (every stream)."""
        from ._stream import synchronize

        synchronize(self._spec(device, "synchronize"))

    def current_stream(self, device=None):
        """The stream ops on the device are issued to now."""
        from ._stream import current_stream

        return current_stream(self._spec(device, "current_stream"))

    def default_stream(self, device=None):
        """The device's default stream."""
        from ._stream import default_stream

        return default_stream(self._spec(device, "default_stream"))

    # ------------------------------------------------------------ memory

    def memory_stats(self, device=None) -> dict:
        """The caching allocator's statistics (:func:`dragon_core.memory.stats`)."""
        return _memory.stats(self._spec(device, "memory_stats"))

    def memory_allocated(self, device=None) -> int:
        """Bytes held by live tensors on the device."""
        return int(_memory.stats(self._spec(device, "memory_allocated"))["allocated"])

    def memory_reserved(self, device=None) -> int:
        """Bytes the allocator holds on the device (live + cached)."""
        return int(_memory.stats(self._spec(device, "memory_reserved"))["reserved"])

    def max_memory_allocated(self, device=None) -> int:
        """Peak of :meth:`memory_allocated` since start or the last
        :meth:`reset_peak_memory_stats`."""
        return int(_memory.stats(self._spec(device, "max_memory_allocated"))["peak"])

    def reset_peak_memory_stats(self, device=None) -> None:
        """Set the peak to the bytes allocated now."""
        _memory.reset_peak(self._spec(device, "reset_peak_memory_stats"))

    def empty_cache(self, device=None) -> None:
        """Return the allocator's cached free blocks to the device."""
        _memory.empty_cache(self._spec(device, "empty_cache"))

    def mem_get_info(self, device=None):
        """``(free, total)`` bytes as the device reports them, or None."""
        return _memory.mem_get_info(self._spec(device, "mem_get_info"))


_cache: dict[str, DeviceModule] = {}


def lookup(name: str) -> DeviceModule | None:
    """The namespace for device type ``name``, or None when no plugin
    registers it and no known wheel provides it."""
    m = _cache.get(name)
    if m is not None:
        return m
    known = name in _plugins.KNOWN_PROVIDERS or any(
        d["name"] == name for d in _C.devices())
    if not known:
        return None
    m = _cache[name] = DeviceModule(name)
    return m
