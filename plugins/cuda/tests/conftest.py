"""Shared fixtures of the cuda plugin's tests.

Every test here needs the dragon-cuda wheel (built when nvcc was on PATH,
``make install-cuda``); GPU tests also need a CUDA device and skip, with the
device's own reason, where there is none.
"""

from __future__ import annotations

import pytest

dragon_cuda = pytest.importorskip(
    "dragon_cuda", reason="dragon-cuda is not installed (it is built only when nvcc is on PATH)")


def cuda_skip_reason() -> str:
    """"" when a cuda device exists, else why the GPU tests skip."""
    if dragon_cuda.device_count() > 0:
        return ""
    return f"no cuda device: {dragon_cuda.unavailable_reason()}"


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device (skips with the reason elsewhere)")


@pytest.fixture
def gpu():
    """Skips the test (with the device's reason) where no cuda device exists."""
    reason = cuda_skip_reason()
    if reason:
        pytest.skip(reason)
    import dragon_core as dg
    return dg


@pytest.fixture
def gpu_device(gpu):
    """The ``gpu`` fixture under another name, for test files that define
    their own ``gpu`` (a device-override harness)."""
    return gpu
