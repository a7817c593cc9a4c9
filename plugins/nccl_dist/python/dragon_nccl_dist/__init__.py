"""Dragon plugin ``nccl_dist``: NCCL kernels (``cuda``) for the core's
collective ops, and the ops ``NcclVersion``, ``NcclUniqueId`` and
``NcclCommInit`` that build communicators. Importing it touches neither
CUDA nor NCCL; ``libnccl.so.2`` is opened the first time an op needs it.
See docs/distributed.md.
"""

from pathlib import Path

__version__ = "0.1.0"


def plugin_library() -> str:
    """Return the path of the plugin's kernel library."""
    return str(Path(__file__).resolve().parent / "libdragon_nccl_dist.so")


def nccl_version() -> int:
    """The opened NCCL's version code (e.g. 23007 for 2.30.7).

    Raises
    ------
    dragon_core.errors.DragonError
        If ``libnccl.so.2`` cannot be opened (the message lists the paths
        tried) or is older than 2.14.
    """
    import dragon_core as dg
    return int(dg.ops.nccl_version().numpy())
