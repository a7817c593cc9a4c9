"""Dragon plugin ``cpu_eigen``: CPU kernels for the standard op library.

The kernels live in ``libdragon_cpu_eigen.so`` beside this file and reach the
core only through the Dragon C ABI; this module only tells the core where the
library is.
"""

from pathlib import Path

__version__ = "0.1.0"


def plugin_library() -> str:
    """Return the path of the plugin's shared library."""
    return str(Path(__file__).resolve().parent / "libdragon_cpu_eigen.so")
