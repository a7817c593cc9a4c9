"""How the installed library was built (CUDA or not)."""

try:
    from . import _build_info
except ImportError:  # an in-tree import without a build
    _build_info = None


def built_with_cuda() -> bool:
    """True when the library was compiled with nvcc and registers kernels for
    the ``cuda`` device (they run once a device plugin provides ``cuda``)."""
    return bool(_build_info and _build_info.CUDA)


def cuda_architectures() -> str:
    """The ``CMAKE_CUDA_ARCHITECTURES`` the CUDA kernels were compiled for
    ("" without CUDA)."""
    return _build_info.CUDA_ARCHITECTURES if _build_info else ""
