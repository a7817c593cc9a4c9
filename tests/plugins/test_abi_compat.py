"""A plugin built against an older ABI minor keeps loading on a newer core.

``fixtures/abi_1_0`` is compiled against the ABI 1.0 headers as they were
released (frozen in ``fixtures/abi_1_0/include_1_0``), while the core speaks
a newer minor (1.1 added ``DG_OP_CONTROL``). Minors only ever append, so the
core must load it, register its op and run its kernel -- the promise a
kernel author relies on when the core is upgraded under an installed wheel.
"""

from __future__ import annotations

import numpy as np
import pytest


def test_frozen_headers_are_abi_1_0():
    from pathlib import Path
    header = Path(__file__).parent / "fixtures" / "abi_1_0" / "include_1_0" / "dragon" / "plugin.h"
    text = header.read_text()
    assert "#define DG_ABI_MAJOR 1" in text and "#define DG_ABI_MINOR 0" in text
    assert "DG_OP_CONTROL" not in text


def test_abi_1_0_plugin_works(dg, fixture_plugins):
    info = dg.load_library(str(fixture_plugins["abi_1_0"]))
    assert info.state == "loaded", info
    assert dg.ABI_VERSION[0] == 1 and dg.ABI_VERSION[1] >= 1     # the core is newer
    assert info.abi in ("1.0", (1, 0)), info.abi                  # the plugin declares 1.0
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    for dtype in (np.float32, np.float64):
        y = dg.ops.abi10_affine(dg.tensor(x.astype(dtype)), scale=3.0)
        assert y.dtype == dg.as_dtype(dtype)
        np.testing.assert_allclose(y.numpy(), x * 3.0 + 1.0, rtol=1e-6)
    # The op also runs inside a compiled graph, where its kernel checks that
    # it gets no call-site state (ABI 1.2 hands it to plugins built for 1.2).
    f = dg.function(lambda t: dg.ops.abi10_affine(t) * 2.0)
    np.testing.assert_allclose(f(dg.tensor(x)).numpy(), (x * 2.0 + 1.0) * 2.0)


def test_abi_1_0_plugin_never_sees_newer_dtypes(dg, fixture_plugins):
    """A mask with every bit set, from a plugin built before ABI 1.4, means
    the ten dtypes it knows: uint16/uint32/uint64 (codes its headers lack)
    are refused by its schema with a clear error, never handed to it."""
    info = dg.load_library(str(fixture_plugins["abi_1_0"]))
    assert info.state == "loaded", info
    for dtype in ("float32", "int64", "uint8", "bool", "bfloat16"):
        x = dg.ops.cast(dg.tensor(np.array([1.0, 0.0, 3.0])), dtype)
        np.testing.assert_array_equal(dg.ops.abi10_copy(x).numpy(), x.numpy())
    for dtype in ("uint16", "uint32", "uint64"):
        x = dg.tensor(np.array([1, 2, 3], dtype))
        with pytest.raises(ValueError, match=rf"Abi10Copy: input 'x' has dtype {dtype}"):
            dg.ops.abi10_copy(x)
