"""Dragon plugin ``mkldnn``: oneDNN CPU kernels.

Its kernels register for the core's standard ops (MatMul, Conv2d, pooling,
the norms, softmax, activations, the fused ops) on ``cpu`` at priority
:data:`PRIORITY`, above cpu_eigen's 0, so installing the wheel is all it
takes to use them; ``DRAGON_DISABLE_PLUGINS=mkldnn`` returns every op to
cpu_eigen. ``dragon_core.plugins.explain(op)`` shows the choice.

oneDNN itself (``libdnnl.so.3``) comes from the ``onednn-cpu-gomp`` wheel;
this module loads it before the core opens the plugin library.
"""

import ctypes
import os
from pathlib import Path

from ._fusion import dragon_fusion_patterns  # noqa: F401  (a pluggy hook)
from ._layout import dragon_graph_passes  # noqa: F401  (a pluggy hook)

__version__ = "0.1.0"

# Layout-internal ops (the ``mkldnn_layout`` pass emits them): no Tensor methods.
from dragon_core import plugin_api as _plugin_api  # noqa: E402

for _op in ("Nchw16cFromNchw", "NchwFromNchw16c", "Conv2dNchw16c", "MaxPool2dNchw16c"):
    _plugin_api.set_tensor_method(_op, False)
del _op

#: The priority of every kernel of this plugin (cpu_eigen's are 0).
PRIORITY = 10


def _preload_onednn() -> None:
    """Load libdnnl.so.3 from the onednn-cpu-gomp wheel (RTLD_GLOBAL), so the
    plugin library finds it wherever pip put the wheel."""
    try:
        from importlib.metadata import PackageNotFoundError, files
        try:
            entries = files("onednn-cpu-gomp") or []
        except PackageNotFoundError:
            return
        for f in entries:
            if f.name == "libdnnl.so.3":
                path = Path(f.locate()).resolve()
                if path.exists():
                    ctypes.CDLL(os.fspath(path), mode=ctypes.RTLD_GLOBAL)
                return
    except OSError:
        # The plugin's own RPATH is tried next; if that fails too, the core
        # marks the plugin broken with the loader's message.
        return


_preload_onednn()


def plugin_library() -> str:
    """Return the path of the plugin's kernel library."""
    return str(Path(__file__).resolve().parent / "libdragon_mkldnn.so")
