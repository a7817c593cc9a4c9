"""``torch.cpu``: the host device's questions, and the deprecated
``torch.cpu.amp`` spellings of ``torch.amp``."""

from __future__ import annotations

from . import amp  # noqa: F401


def is_available() -> bool:  # noqa: D103
    return True


def device_count() -> int:  # noqa: D103
    return 1


def current_device() -> str:  # noqa: D103
    return "cpu"


def synchronize(device=None) -> None:  # noqa: D103
    import dragon_core as dg
    dg.synchronize()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.cpu.{name} is not supported by dragon_core.vm.torch")
