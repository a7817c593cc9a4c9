"""Workspace: the owner of named tensors (and, later, graphs and state)."""

from __future__ import annotations

import threading

_local = threading.local()


class Workspace:
    """A namespace of named tensors that isolates runs.

    The default workspace is per thread; ``with Workspace(): ...`` makes a
    new one current inside the block.

    Examples
    --------
    >>> import dragon_core as dg
    >>> with dg.Workspace() as ws:
    ...     ws.feed_tensor("x", dg.tensor([1.0, 2.0]))
    ...     ws.has_tensor("x")
    True
    """

    def __init__(self, name: str = ""):
        self.name = name
        self._tensors: dict = {}
        self._previous: list = []

    def feed_tensor(self, name: str, value) -> None:
        """Store ``value`` (converted to a tensor) under ``name``."""
        from ._tensor import Tensor, tensor
        self._tensors[name] = value if isinstance(value, Tensor) else tensor(value)

    def fetch_tensor(self, name: str):
        """The tensor stored under ``name``.

        Raises
        ------
        KeyError
            If no tensor has that name (the message lists the names).
        """
        try:
            return self._tensors[name]
        except KeyError:
            names = ", ".join(sorted(self._tensors)) or "(none)"
            raise KeyError(f"workspace {self.name!r} has no tensor '{name}'; it has: {names}") from None

    def has_tensor(self, name: str) -> bool:
        """Whether a tensor named ``name`` exists."""
        return name in self._tensors

    def tensor_names(self) -> list[str]:
        """The names of the stored tensors, sorted."""
        return sorted(self._tensors)

    def clear(self) -> None:
        """Drop every stored tensor."""
        self._tensors.clear()

    def __enter__(self) -> "Workspace":
        self._previous.append(getattr(_local, "current", None))
        _local.current = self
        return self

    def __exit__(self, *exc) -> None:
        _local.current = self._previous.pop()


def get_workspace() -> Workspace:
    """The current workspace of this thread (created on first use)."""
    ws = getattr(_local, "current", None)
    if ws is None:
        ws = _local.current = Workspace("default")
    return ws
