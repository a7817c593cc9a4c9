"""Dragon plugin ``vision_ops``: detection and segmentation operators.

The ops are defined by this plugin, not by the core: their schemas, shape
rules and kernels live in ``libdragon_vision_ops.so`` and their gradient rules
in this package. They appear both here (``dragon_vision_ops.roi_align``) and
as ``dragon_core.ops.roi_align``.

CPU kernels are always built; CUDA kernels are built when ``nvcc`` was found
at build time (:func:`built_with_cuda`) and run on a ``cuda`` device that a
device plugin registers.
"""

from pathlib import Path

__version__ = "0.1.0"


def plugin_library() -> str:
    """Return the path of the plugin's kernel library."""
    return str(Path(__file__).resolve().parent / "libdragon_vision_ops.so")


# After plugin_library(): these imports start `import dragon_core`, whose
# plugin discovery then reads plugin_library() from this module.
from ._roi import *  # noqa: E402,F401,F403
from ._deform import *  # noqa: E402,F401,F403
from ._resample import *  # noqa: E402,F401,F403
from ._cuda import built_with_cuda, cuda_architectures  # noqa: E402,F401
