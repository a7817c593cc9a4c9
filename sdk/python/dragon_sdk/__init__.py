"""Dragon plugin SDK: the C ABI headers and the CMake package for plugins.

Use it from CMake with ``find_package(DragonSDK 1.0 REQUIRED)`` (the wheel
registers itself on ``CMAKE_PREFIX_PATH`` for scikit-build-core builds) or
point ``-DDragonSDK_DIR`` at :func:`get_cmake_dir`.
"""

from pathlib import Path

__version__ = "0.1.0"

#: The C ABI version these headers describe (DG_ABI_MAJOR, DG_ABI_MINOR).
ABI_VERSION = (1, 6)

_ROOT = Path(__file__).resolve().parent


def get_include() -> str:
    """Return the folder holding ``dragon/plugin.h``, ``dragon/plugin.hpp`` and
    ``dragon/elementwise.h``."""
    return str(_ROOT / "include")


def get_cmake_dir() -> str:
    """Return the folder holding ``DragonSDKConfig.cmake``."""
    return str(_ROOT / "share" / "cmake" / "DragonSDK")
