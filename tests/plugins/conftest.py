"""Shared fixtures of the plugin-system tests.

* ``fixture_plugins``: the test-only plugins under ``fixtures/``, built once
  per session with the installed dragon-sdk (CMake + Ninja, one configure for
  all of them) and cached under ``build/test-fixtures/<hash>/`` keyed by a
  hash of their sources, the SDK and the compiler, so a second run does not
  rebuild anything.
* ``make_site``: a fake installation (``*.dist-info`` with an
  ``entry_points.txt`` in the ``dragon_core.plugins`` group, plus the module
  the entry point names) in a temporary folder, put on ``PYTHONPATH`` of a
  child interpreter -- no pip involved.
* ``run_python``: runs code in a fresh interpreter with a clean ``DRAGON_*``
  environment.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from plugin_testlib import (FIXTURE_LIBS, Entry, clean_env,  # noqa: E402
                            write_dist)

FIXTURE_SRC = HERE / "fixtures"
CACHE_ROOT = REPO / "build" / "test-fixtures"


# ----------------------------------------------------------------- the SDK

@dataclass(frozen=True)
class Sdk:
    """Where the installed dragon-sdk keeps its headers and CMake package."""

    include: Path
    cmake_dir: Path


def _find_sdk() -> Sdk:
    try:
        import dragon_sdk
    except ImportError as e:
        pytest.fail("the plugin tests build their fixture plugins with the "
                    f"installed dragon-sdk, which is missing ({e}); install "
                    "it (make, or pip install ./sdk)", pytrace=False)
    sdk = Sdk(Path(dragon_sdk.get_include()), Path(dragon_sdk.get_cmake_dir()))
    for needed in (sdk.include / "dragon" / "plugin.h",
                   sdk.cmake_dir / "DragonSDKConfig.cmake"):
        if not needed.is_file():
            pytest.fail(f"the dragon_sdk module at {dragon_sdk.__file__} "
                        f"points to {needed}, which does not exist: install "
                        "the dragon-sdk wheel (make install-sdk)",
                        pytrace=False)
    return sdk


@pytest.fixture(scope="session")
def sdk() -> Sdk:
    """The installed dragon-sdk."""
    return _find_sdk()


# ------------------------------------------------------ building fixtures

def _tool(name: str) -> str:
    """Prefer the tool installed next to this interpreter (the venv's)."""
    local = Path(sys.executable).parent / name
    if local.exists():
        return str(local)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is needed to build the fixture plugins",
                    pytrace=False)
    return found


def _files_under(root: Path):
    for p in sorted(root.rglob("*")):
        if p.is_file() and "__pycache__" not in p.parts:
            yield p


def _fixture_key(sdk: Sdk, cxx_version: str) -> str:
    h = hashlib.sha256()
    for root in (FIXTURE_SRC, sdk.include, sdk.cmake_dir):
        for p in _files_under(root):
            h.update(str(p.relative_to(root)).encode() + b"\0")
            h.update(p.read_bytes() + b"\0")
    h.update(cxx_version.encode())
    return h.hexdigest()[:20]


@contextlib.contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # pytest-xdist workers build once
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _build_fixtures(sdk: Sdk, out: Path) -> None:
    cmake, ninja = _tool("cmake"), _tool("ninja")
    with tempfile.TemporaryDirectory(prefix="dragon-fixtures-") as tmp:
        steps = [
            [cmake, "-S", str(FIXTURE_SRC), "-B", tmp, "-G", "Ninja",
             f"-DCMAKE_MAKE_PROGRAM={ninja}", "-DCMAKE_BUILD_TYPE=Release",
             f"-DDragonSDK_DIR={sdk.cmake_dir}"],
            [cmake, "--build", tmp, "--parallel", str(os.cpu_count() or 2)],
        ]
        for cmd in steps:
            r = subprocess.run(cmd, capture_output=True, text=True,
                               timeout=600)
            if r.returncode != 0:
                pytest.fail("building the fixture plugins failed:\n$ "
                            + " ".join(cmd) + "\n" + r.stdout[-4000:]
                            + r.stderr[-4000:], pytrace=False)
        staging = out.with_name(out.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        manifest = {}
        for name, filename in FIXTURE_LIBS.items():
            built = [p for p in Path(tmp).rglob(filename)]
            if len(built) != 1:
                pytest.fail(f"fixture {name}: expected one {filename} in the "
                            f"build tree, found {built}", pytrace=False)
            shutil.copy2(built[0], staging / filename)
            manifest[name] = filename
        (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
        shutil.rmtree(out, ignore_errors=True)
        staging.rename(out)
    # Builds for older sources are cheap to redo: keep only this one.
    for old in out.parent.iterdir():
        if old.is_dir() and old != out:
            shutil.rmtree(old, ignore_errors=True)


@pytest.fixture(scope="session")
def fixture_plugins(sdk: Sdk) -> dict[str, Path]:
    """Paths of the built fixture plugin libraries, by fixture name."""
    cxx = subprocess.run(["c++", "--version"], capture_output=True,
                         text=True).stdout
    out = CACHE_ROOT / _fixture_key(sdk, cxx)
    with _locked(CACHE_ROOT / ".lock"):
        manifest = out / "manifest.json"
        if not manifest.is_file() or not all(
                (out / f).is_file() for f in FIXTURE_LIBS.values()):
            _build_fixtures(sdk, out)
    names = json.loads(manifest.read_text())
    return {name: out / filename for name, filename in names.items()}


# ------------------------------------------------- fake installations

@pytest.fixture
def make_site(tmp_path: Path):
    """Return ``make(entries) -> Path``: a folder of fake installations.

    ``entries`` maps an entry-point name to an :class:`Entry`; the folder is
    meant for the ``site`` argument of ``run_python``.
    """
    counter = iter(range(1000))

    def make(entries: dict[str, Entry]) -> Path:
        site = tmp_path / f"site{next(counter)}"
        site.mkdir()
        for ep_name, entry in entries.items():
            write_dist(site, ep_name, entry)
        return site

    return make


# --------------------------------------------------- child interpreters

@pytest.fixture(scope="session")
def run_python():
    """Return ``run(code, site=None, args=(), cwd=None, **env) -> CompletedProcess``.

    Runs ``code`` (dedented) with ``python -c`` in a fresh interpreter whose
    environment has no DRAGON_* variables except those given, in folder
    ``cwd`` (this process's current folder when None).
    """

    def run(code: str, site: Path | None = None, args=(), cwd: Path | None = None,
            **env: str):
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code), *args],
            env=clean_env(site, **env), capture_output=True, text=True,
            timeout=120, cwd=cwd)

    return run


@pytest.fixture(scope="session")
def run_info():
    """Return ``info(site=None, cwd=None, **env) -> CompletedProcess`` of
    ``python -m dragon_core info``."""

    def run(site: Path | None = None, cwd: Path | None = None, **env: str):
        return subprocess.run(
            [sys.executable, "-m", "dragon_core", "info"],
            env=clean_env(site, **env), capture_output=True, text=True,
            timeout=120, cwd=cwd)

    return run


# ------------------------------------------------------------ the core

@pytest.fixture(scope="session")
def dg():
    """The ``dragon_core`` module of this interpreter."""
    import dragon_core

    return dragon_core


@pytest.fixture(scope="session")
def toy(dg, fixture_plugins):
    """Load the toy device plugin into this interpreter (once)."""
    return dg.load_library(str(fixture_plugins["toy"]))


@pytest.fixture(scope="session")
def toy_async(dg, fixture_plugins):
    """Load the stream-ordered toy_async device plugin (once)."""
    return dg.load_library(str(fixture_plugins["toy_async"]))
