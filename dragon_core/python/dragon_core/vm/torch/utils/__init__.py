"""``torch.utils``: ``data``, ``checkpoint``."""

from . import checkpoint, data  # noqa: F401


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.utils.{name} is not supported; supported: "
                              "torch.utils.data, torch.utils.checkpoint")
