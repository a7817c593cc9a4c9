"""Devices: ``Device("cpu", 0)``; the device types come from plugins."""

from __future__ import annotations


class Device:
    """A device: a registered device type name and an ordinal.

    Compares equal to another ``Device`` and to its string form
    (``"cpu:0"``; ``"cpu"`` means index 0).
    """

    __slots__ = ("type", "index")

    def __init__(self, type: str, index: int = 0):  # noqa: A002 - torch's name
        self.type = type
        self.index = index

    @classmethod
    def parse(cls, spec) -> "Device":
        """Parse ``"name"`` or ``"name:index"`` (or return a Device as is)."""
        if isinstance(spec, Device):
            return spec
        if not isinstance(spec, str):
            raise TypeError(f"expected a device string like 'cpu' or 'cpu:0', got {spec!r}")
        name, _, idx = spec.partition(":")
        if idx and not idx.isdigit():
            raise ValueError(f"bad device '{spec}': expected 'name' or 'name:index'")
        return cls(name, int(idx) if idx else 0)

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device('{self}')"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = Device.parse(other)
            except (TypeError, ValueError):
                return False
        if isinstance(other, Device):
            return (self.type, self.index) == (other.type, other.index)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.type, self.index))
