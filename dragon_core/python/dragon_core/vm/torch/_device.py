"""``torch.device`` over dragon_core's device names."""

from __future__ import annotations


class device:  # noqa: N801 (torch's name)
    """``torch.device("cpu")``, ``torch.device("cuda", 0)``,
    ``torch.device("cuda:1")``; any device a dragon plugin registers."""

    __slots__ = ("type", "index")

    def __init__(self, type, index=None):  # noqa: A002
        if isinstance(type, device):
            self.type, self.index = type.type, type.index
            return
        if isinstance(type, int):
            type, index = "cuda", type
        type = str(type)
        if ":" in type:
            type, idx = type.split(":", 1)
            index = int(idx)
        self.type = type
        self.index = None if index is None else int(index)

    def __str__(self):
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self):
        return f"device(type='{self.type}'" + (
            "" if self.index is None else f", index={self.index}") + ")"

    def __eq__(self, other):
        try:
            other = device(other)
        except Exception:
            return NotImplemented
        return self.type == other.type and (self.index or 0) == (other.index or 0)

    def __hash__(self):
        return hash((self.type, self.index or 0))
