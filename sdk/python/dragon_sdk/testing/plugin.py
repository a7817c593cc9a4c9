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


@pytest.fixture
def dragon_checks(device):
    """The conformance checks of :mod:`dragon_sdk.testing`, on ``device``.

    ``dragon_checks.numerics(op, reference, cases)``,
    ``.schema_kernel_consistency(op, inputs, **attrs)``,
    ``.bad_inputs(op, valid_inputs, **attrs)``,
    ``.eager_vs_graph(fn, *inputs)`` run on the device under test;
    ``.audit_plugin_so(path)`` audits a plugin library.
    """
    import functools
    import types

    from dragon_sdk.testing import (audit_plugin_so, check_bad_inputs,
                                    check_eager_vs_graph, check_numerics,
                                    check_schema_kernel_consistency)

    bind = functools.partial
    return types.SimpleNamespace(
        audit_plugin_so=audit_plugin_so,
        schema_kernel_consistency=bind(check_schema_kernel_consistency,
                                       device=device),
        numerics=bind(check_numerics, device=device),
        bad_inputs=bind(check_bad_inputs, device=device),
        eager_vs_graph=bind(check_eager_vs_graph, device=device))
