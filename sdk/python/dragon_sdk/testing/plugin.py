"""pytest plugin: fixtures shared by Dragon op and plugin test suites.

Enable with ``pytest_plugins = ["dragon_sdk.testing.plugin"]`` in a
``conftest.py``.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from dragon_sdk.testing.opcase import DEVICE_ENV, default_device


def pytest_report_header(config):
    """Show which device the op suite runs on."""
    return f"dragon test device: {default_device()} (${DEVICE_ENV})"


@pytest.fixture
def rng(request) -> np.random.Generator:
    """A NumPy generator seeded from the test's node id (stable across runs)."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture
def device() -> str:
    """The device under test: ``$DRAGON_TEST_DEVICE`` or ``"cpu"``."""
    return default_device()
