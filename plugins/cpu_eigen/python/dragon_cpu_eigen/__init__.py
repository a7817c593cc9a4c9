"""Dragon plugin ``cpu_eigen``: CPU kernels for the standard op library.

The kernels live in ``libdragon_cpu_eigen.so`` beside this file and reach the
core only through the Dragon C ABI; this module tells the core where the
library is and declares the fusion patterns its fused kernels
(``Conv2dBiasAct``, ``MatMulBiasAct``, ``SoftmaxGrad``) serve, so graphs
fuse the same way with or without an accelerating plugin (docs/graph.md,
"Pattern fusion").
"""

from pathlib import Path

import pluggy

# pluggy's marker for the dragon_core project, made here: importing this
# package must not import dragon_core (which loads this plugin).
_hookimpl = pluggy.HookimplMarker("dragon_core")

__version__ = "0.1.0"


def plugin_library() -> str:
    """Return the path of the plugin's shared library."""
    return str(Path(__file__).resolve().parent / "libdragon_cpu_eigen.so")


@_hookimpl
def dragon_fusion_patterns(core):
    """The standard patterns of ``dragon_core.fusion`` (conv/matmul + bias + relu,
    Softmax's backward -> ``SoftmaxGrad``)."""
    return core.fusion.STANDARD_PATTERNS
