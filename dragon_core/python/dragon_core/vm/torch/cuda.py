"""``torch.cuda``: availability questions answered from dragon_core's
device registry (a ``cuda`` device exists when its plugin is installed and a
GPU is present)."""

from __future__ import annotations

import dragon_core as _dg


def is_available() -> bool:
    try:
        return any(d.get("name") == "cuda" and d.get("count", 0) > 0
                   for d in _dg._C.devices())
    except Exception:
        return False


def device_count() -> int:
    return 1 if is_available() else 0


def manual_seed(seed) -> None:
    from ._creation import manual_seed as ms
    ms(seed)


manual_seed_all = manual_seed


def synchronize(device=None) -> None:
    _dg.synchronize()


def empty_cache() -> None:
    _dg.memory.empty_cache() if hasattr(_dg.memory, "empty_cache") else None


from . import _cuda_amp as amp  # noqa: E402  (torch.cuda.amp: docs/mixed-precision.md)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.cuda.{name} is not supported by dragon_core.vm.torch; "
                              "use dragon_core's device API (dragon_core.memory, "
                              "dragon_core.stream)")
