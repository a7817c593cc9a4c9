"""Fixtures of the SDK kit's own tests.

* ``kit_libs``: the libraries of ``fixtures/`` (a crashing plugin and two
  badly linked ones), built once with the installed dragon-sdk and cached
  under ``build/test-fixtures-sdk-kit/<hash>/``;
* ``fixture_plugins``: the plugin-system fixtures of ``tests/plugins``
  (built by that folder's conftest helpers, same cache);
* ``custom_op``: the ``custom_op`` fixture plugin loaded into this process,
  so its op ``ScaledAdd`` is a third-party op the checks can be applied to.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
KIT_SRC = HERE / "fixtures"
KIT_CACHE = REPO / "build" / "test-fixtures-sdk-kit"
KIT_LIBS = ("libcrashy.so", "libleaky.so", "libextra_export.so")


def _plugins_conftest():
    """tests/plugins/conftest.py as a plain module (its build helpers)."""
    name = "dragon_tests_plugins_conftest"
    if name not in sys.modules:
        plugins = str(HERE.parent / "plugins")
        if plugins not in sys.path:
            sys.path.insert(0, plugins)
        spec = importlib.util.spec_from_file_location(
            name, HERE.parent / "plugins" / "conftest.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def fixture_plugins() -> dict[str, Path]:
    """Paths of tests/plugins' fixture libraries, by fixture name."""
    lib = _plugins_conftest()
    sdk = lib._find_sdk()
    cxx = subprocess.run(["c++", "--version"], capture_output=True,
                         text=True).stdout
    out = lib.CACHE_ROOT / lib._fixture_key(sdk, cxx)
    with lib._locked(lib.CACHE_ROOT / ".lock"):
        manifest = out / "manifest.json"
        if not manifest.is_file() or not all(
                (out / f).is_file() for f in lib.FIXTURE_LIBS.values()):
            lib._build_fixtures(sdk, out)
    names = json.loads(manifest.read_text())
    return {name: out / filename for name, filename in names.items()}


def _build_kit(sdk, out: Path) -> None:
    lib = _plugins_conftest()
    cmake, ninja = lib._tool("cmake"), lib._tool("ninja")
    with tempfile.TemporaryDirectory(prefix="dragon-kit-fixtures-") as tmp:
        for cmd in ([cmake, "-S", str(KIT_SRC), "-B", tmp, "-G", "Ninja",
                     f"-DCMAKE_MAKE_PROGRAM={ninja}",
                     "-DCMAKE_BUILD_TYPE=Release",
                     f"-DDragonSDK_DIR={sdk.cmake_dir}"],
                    [cmake, "--build", tmp]):
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                pytest.fail("building tests/sdk_kit/fixtures failed:\n$ "
                            + " ".join(cmd) + "\n" + r.stdout[-4000:]
                            + r.stderr[-4000:], pytrace=False)
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        for filename in KIT_LIBS:
            (built,) = Path(tmp).rglob(filename)
            shutil.copy2(built, staging / filename)
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)


@pytest.fixture(scope="session")
def kit_libs() -> dict[str, Path]:
    """``{"crashy": path, "leaky": path, "extra_export": path}``."""
    lib = _plugins_conftest()
    sdk = lib._find_sdk()
    h = hashlib.sha256()
    for root in (KIT_SRC, sdk.include, sdk.cmake_dir):
        for p in lib._files_under(root):
            h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes())
    h.update(subprocess.run(["c++", "--version"], capture_output=True,
                            text=True).stdout.encode())
    out = KIT_CACHE / h.hexdigest()[:20]
    with lib._locked(KIT_CACHE / ".lock"):
        if not all((out / f).is_file() for f in KIT_LIBS):
            _build_kit(sdk, out)
    return {f[3:-3]: out / f for f in KIT_LIBS}


@pytest.fixture(scope="session")
def dg():
    import dragon_core

    return dragon_core


@pytest.fixture(scope="session")
def custom_op(dg, fixture_plugins):
    """Load the custom_op fixture plugin (op ScaledAdd) into this process."""
    return dg.load_library(str(fixture_plugins["custom_op"]))


@pytest.fixture(scope="session")
def crashy(dg, kit_libs):
    """Load the crashy plugin (op Crashy) into this process."""
    return dg.load_library(str(kit_libs["crashy"]))
