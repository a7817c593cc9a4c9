"""Every distribution's pyproject.toml has complete metadata (issue 20).

`make wheels` checks the built wheels' METADATA (tools/wheels.py); this
checks the sources, so a missing field fails `make test` already.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[2]
PROJECTS = ["sdk", "dragon_core", "plugins/cpu_eigen", "plugins/mkldnn", "plugins/vision_ops",
            "plugins/cuda", "plugins/nccl_dist"]


def test_every_plugin_is_listed():
    """A new plugin folder gets its metadata checked too."""
    plugins = {f"plugins/{d.name}" for d in (ROOT / "plugins").iterdir()
               if (d / "pyproject.toml").is_file()}
    assert plugins <= set(PROJECTS), sorted(plugins - set(PROJECTS))


@pytest.mark.parametrize("folder", PROJECTS)
def test_metadata_is_complete(folder):
    project = tomllib.loads((ROOT / folder / "pyproject.toml").read_text())["project"]
    for key in ("name", "version", "description", "readme", "requires-python", "license",
                "classifiers", "urls", "authors"):
        assert project.get(key), f"{folder}/pyproject.toml: [project] has no {key}"
    assert (ROOT / folder / project["readme"]).is_file(), f"{folder}: no {project['readme']}"
    assert project["license"] == {"text": "Apache-2.0"}
    classifiers = project["classifiers"]
    assert "License :: OSI Approved :: Apache Software License" in classifiers
    low = project["requires-python"].removeprefix(">=")
    assert f"Programming Language :: Python :: {low}" in classifiers, (folder, low)
    assert {"Homepage", "Source", "Issues"} <= set(project["urls"])


def test_core_extras_name_the_backends():
    core = tomllib.loads((ROOT / "dragon_core" / "pyproject.toml").read_text())["project"]
    extras = core["optional-dependencies"]
    assert any(r.startswith("dragon-mkldnn") for r in extras["mkldnn"])
    assert any(r.startswith("dragon-vision-ops") for r in extras["vision"])
    assert any(r.startswith("dragon-cuda") for r in extras["cuda"])
    assert any(r.startswith("dragon-cpu-eigen") for r in extras["cpu"])
    # [all] is every backend extra (self-referencing extras).
    (all_,) = extras["all"]
    for name in ("cpu", "mkldnn", "vision", "cuda"):
        assert name in all_.split("[", 1)[1], all_


@pytest.mark.parametrize("folder", PROJECTS)
def test_every_package_ships_the_license(folder):
    """Each package is built from its own folder: the LICENSE must be there,
    the repository's own (Apache-2.0, "Dragon developers")."""
    root = (ROOT / "LICENSE").read_bytes()
    assert root.startswith(b"Copyright ") and b"Dragon developers" in root.splitlines()[0]
    assert b"Apache License" in root and b"Version 2.0, January 2004" in root
    mine = ROOT / folder / "LICENSE"
    assert mine.is_file(), f"{folder}: no LICENSE (copy the repository's)"
    assert mine.read_bytes() == root, f"{folder}/LICENSE differs from the repository's"
