"""Loading a custom-op plugin into a running core (fixtures/custom_op).

``dragon_core.load_library(path)`` must bring a third-party op into
``dragon_core.ops`` -- signature and docstring generated from the plugin's
schema -- without rebuilding or touching any installed library of the core or
of the other plugins.

Loading the same path twice is harmless: the second call returns the
already-loaded plugin's info and registers nothing again.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
from pathlib import Path

import numpy as np
import pytest


def _installed_libraries(dg) -> list[Path]:
    """Every shared library of the core and of the loaded plugins."""
    found: set[Path] = set()
    pkg = Path(dg.__file__).resolve().parent
    found.update(p.resolve() for p in pkg.rglob("*.so*"))
    for name, module in list(sys.modules.items()):
        f = getattr(module, "__file__", None) or ""
        if name.startswith("dragon_core") and ".so" in Path(f).name:
            found.add(Path(f).resolve())
    for p in dg.plugins.list():
        if p.state == "loaded" and p.path and Path(p.path).is_file():
            found.add(Path(p.path).resolve())
    return sorted(found)


def _fingerprint(paths: list[Path]) -> dict[str, tuple[int, str]]:
    return {str(p): (p.stat().st_mtime_ns,
                     hashlib.sha256(p.read_bytes()).hexdigest())
            for p in paths}


@pytest.fixture(scope="module")
def loaded(dg, fixture_plugins):
    """custom_op loaded once; fingerprints of the core taken before."""
    libs = _installed_libraries(dg)
    before = _fingerprint(libs)
    info = dg.load_library(str(fixture_plugins["custom_op"]))
    return {"info": info, "libs": libs, "before": before}


def test_load_library_returns_plugin_info(loaded, fixture_plugins):
    info = loaded["info"]
    assert info.name == "custom_op"
    assert info.version == "0.3.1"
    assert info.state == "loaded", info.error
    assert not info.error
    assert Path(info.path).resolve() == fixture_plugins["custom_op"].resolve()
    assert "1." in str(info.abi), info.abi


def test_core_has_a_library_to_protect(dg, loaded):
    pkg = Path(dg.__file__).resolve().parent
    libs = loaded["libs"]
    assert any(pkg in p.parents for p in libs), libs  # the core's extension
    assert any("cpu_eigen" in str(p) for p in libs), libs


def test_scaled_add_appears_with_signature_and_doc(dg, loaded):
    f = dg.ops.scaled_add
    params = list(inspect.signature(f).parameters.values())
    assert [p.name for p in params] == ["a", "b", "alpha"], params
    assert params[2].default == pytest.approx(1.0)
    assert params[0].default is inspect.Parameter.empty
    doc = inspect.getdoc(f) or ""
    assert "a + alpha * b" in doc, doc
    assert "alpha" in doc and "the factor applied to b" in doc, doc


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_scaled_add_computes(dg, loaded, dtype):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((3, 4)).astype(dtype)
    b = rng.standard_normal((3, 4)).astype(dtype)
    y = dg.ops.scaled_add(dg.tensor(a), dg.tensor(b))
    np.testing.assert_allclose(y.numpy(), a + b, rtol=1e-6)
    y = dg.ops.scaled_add(dg.tensor(a), dg.tensor(b), alpha=-2.5)
    assert y.dtype.name == dtype
    np.testing.assert_allclose(y.numpy(), a - 2.5 * b, rtol=1e-6)
    y = dg.ops.scaled_add(dg.tensor(a), dg.tensor(b), 0.5)  # positional attr
    np.testing.assert_allclose(y.numpy(), a + 0.5 * b, rtol=1e-6)


def test_scaled_add_shape_errors_come_from_its_schema(dg, loaded):
    a = dg.tensor(np.zeros((2, 3), np.float32))
    b = dg.tensor(np.zeros((3,), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.scaled_add(a, b)
    msg = str(info.value)
    assert "ScaledAdd" in msg and "(2, 3)" in msg and "(3,)" in msg, msg
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.scaled_add(a, dg.tensor(np.zeros((2, 3), np.float64)))
    assert "float32" in str(info.value) and "float64" in str(info.value)
    with pytest.raises((dg.errors.DragonError, TypeError)):
        dg.ops.scaled_add(a, a, alpha="large")


def test_explain_names_the_custom_plugin(dg, loaded):
    report = dg.plugins.explain("ScaledAdd", "cpu", "float32")
    assert "custom_op" in report, report


def test_loading_twice_is_harmless(dg, loaded, fixture_plugins):
    again = dg.load_library(str(fixture_plugins["custom_op"]))
    assert again.name == "custom_op" and again.state == "loaded"
    assert Path(again.path).resolve() == Path(loaded["info"].path).resolve()
    records = [p for p in dg.plugins.list() if p.name == "custom_op"]
    assert len(records) == 1, records
    assert all(p.state == "loaded" for p in records), records
    a = dg.tensor(np.ones(3, np.float32))
    np.testing.assert_allclose(dg.ops.scaled_add(a, a, 2.0).numpy(), [3, 3, 3])


def test_loading_a_non_plugin_fails_clearly(dg, fixture_plugins):
    path = str(fixture_plugins["missing_symbol"])
    with pytest.raises(dg.errors.PluginError) as info:
        dg.load_library(path)
    assert "dragon_plugin_entry_v1" in str(info.value)
    assert isinstance(info.value, ImportError)
    # If the failure is recorded, the record must say which library it was.
    for p in dg.plugins.list():
        assert p.name, f"a plugin record without a name: {p}"


def test_loading_a_missing_file_fails_clearly(dg, tmp_path):
    """A path that does not exist: FileNotFoundError (or PluginError)."""
    path = str(tmp_path / "libnot_there.so")
    with pytest.raises((dg.errors.PluginError, FileNotFoundError)) as info:
        dg.load_library(path)
    assert "libnot_there.so" in str(info.value)


def test_nothing_was_rebuilt_or_touched(dg, loaded):
    # Use the op once more so that everything lazy has happened.
    a = dg.tensor(np.ones(2, np.float32))
    dg.ops.scaled_add(a, a)
    after = _fingerprint(loaded["libs"])
    assert after == loaded["before"], (
        "loading a custom-op plugin modified installed libraries")
