"""Dragon plugin ``cuda``: the stream-ordered ``cuda`` device and its kernels.

The device and every kernel live in ``libdragon_cuda.so``, which the core
loads through the plugin ABI. Importing this package touches neither CUDA nor
the driver: the device count is probed the first time something asks for it,
and a machine without a driver or GPU sees ``count == 0`` with a one-line
reason (:func:`unavailable_reason`).

cuBLAS (matmul) and cuDNN (convolutions) are opened at run time, when an op first needs it, from
``DRAGON_CUDA_LIBRARY_PATH``, the ``nvidia-*`` wheels installed beside this
package, or the system loader path; a missing library is an error of that
op naming the library, never of the import. See docs/cuda.md.
"""

from pathlib import Path

__version__ = "0.1.0"


def plugin_library() -> str:
    """Return the path of the plugin's kernel library."""
    return str(Path(__file__).resolve().parent / "libdragon_cuda.so")


def device_count() -> int:
    """Number of CUDA devices (0 without a driver or GPU); the same as
    ``dragon_core.cuda.device_count()``.

    The first call initialises the CUDA runtime (which loads the driver).
    """
    import dragon_core

    return dragon_core.cuda.device_count()


def is_available() -> bool:
    """True when at least one CUDA device can be used."""
    return device_count() > 0


def unavailable_reason() -> str:
    """Why no CUDA device can be used, in one line ("" when one can)."""
    import dragon_core

    return dragon_core.cuda.unavailable_reason()


def get_device_name(index: int = 0) -> str:
    """The description of ``cuda:index``: name, compute capability, memory,
    driver and runtime versions."""
    import dragon_core

    return dragon_core.cuda.get_device_name(index)


def build_info() -> dict:
    """How the library was built: CUDA toolkit version and architectures."""
    try:
        from . import _build_info as b
    except ImportError:  # an in-tree import without a build
        return {"cuda_version": "", "cuda_architectures": ""}
    return {"cuda_version": b.CUDA_VERSION, "cuda_architectures": b.CUDA_ARCHITECTURES}
