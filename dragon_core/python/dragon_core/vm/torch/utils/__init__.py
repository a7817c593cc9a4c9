"""``torch.utils``: ``data``."""

from . import data  # noqa: F401


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.utils.{name} is not supported; supported: torch.utils.data")
