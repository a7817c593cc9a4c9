"""Where plugins may come from (docs/security.md).

* One plugin name, one distribution: a second distribution declaring the
  entry point ``cpu_eigen`` is an error naming both, and neither loads (an
  impostor never silently replaces the real plugin); fatal under
  ``DRAGON_STRICT=1``.
* Plugins load from installed distributions only: a ``*.dist-info`` (or a
  plugin's module) that is importable only because the current directory is
  on ``sys.path`` (``python -c``, ``python -m``, the REPL) is not imported
  unless ``DRAGON_PLUGINS`` names it.

Each fake plugin module appends its name to a marker file when imported, so
"not loaded" means its code never ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from plugin_testlib import (DUMP_PLUGINS, clean_env, describe, find_plugin,
                            library, parse_plugins, python_module,
                            touch_on_import, write_dist)

ADD = DUMP_PLUGINS + r"""
import numpy as np
try:
    _dg.ops.add(_dg.tensor(np.ones(2, np.float32)), _dg.tensor(np.ones(2, np.float32)))
    print("@@ADD@@ok")
except Exception as e:
    print("@@ADD@@" + type(e).__name__ + ": " + str(e))
"""


def _line(stdout: str, tag: str) -> str:
    hits = [ln[len(tag):] for ln in stdout.splitlines() if ln.startswith(tag)]
    assert hits, stdout
    return hits[0]


def _warnings(proc) -> list[str]:
    return [ln for ln in proc.stderr.splitlines() if "PluginWarning" in ln]


# ------------------------------------------- one name, one distribution

@pytest.fixture
def impostor_site(make_site, tmp_path):
    """A distribution declaring ``cpu_eigen = aaa_impostor``: its module
    sorts before ``dragon_cpu_eigen``, as in the reported hijack."""
    marker = tmp_path / "imported.txt"
    site = make_site({"cpu_eigen": python_module(
        touch_on_import(marker), module="aaa_impostor", dist="dragon-test-impostor")})
    return site, marker


def test_second_claimant_of_a_name_is_an_error_naming_both(impostor_site, run_python):
    site, marker = impostor_site
    proc = run_python(ADD, site=site)
    assert proc.returncode == 0, describe(proc)
    assert not marker.exists(), "the impostor's module was imported"
    rec = find_plugin(parse_plugins(proc.stdout), "cpu_eigen")
    assert rec["state"] == "broken", rec
    for text in ("dragon-cpu-eigen", "dragon-test-impostor", "aaa_impostor",
                 "dragon_cpu_eigen", "pip uninstall"):
        assert text in rec["error"], rec["error"]
    # Ops then fail loudly, pointing at the cause -- never the impostor's.
    add = _line(proc.stdout, "@@ADD@@")
    assert add.startswith("NoKernelError") and "cpu_eigen" in add, add
    (warned,) = _warnings(proc)
    assert "dragon-cpu-eigen" in warned and "dragon-test-impostor" in warned, warned


def test_second_claimant_is_fatal_under_strict(impostor_site, run_python):
    site, marker = impostor_site
    proc = run_python("import dragon_core", site=site, DRAGON_STRICT="1")
    assert proc.returncode != 0, describe(proc)
    assert "PluginError" in proc.stderr, describe(proc)
    assert "dragon-cpu-eigen" in proc.stderr and "dragon-test-impostor" in proc.stderr
    assert not marker.exists()


def test_disabled_name_is_not_a_conflict(impostor_site, run_python):
    site, marker = impostor_site
    proc = run_python(DUMP_PLUGINS, site=site, DRAGON_DISABLE_PLUGINS="cpu_eigen,mkldnn")
    assert proc.returncode == 0 and not _warnings(proc), describe(proc)
    assert find_plugin(parse_plugins(proc.stdout), "cpu_eigen")["state"] == "disabled"
    assert not marker.exists()


def test_two_fake_distributions_claiming_one_name(make_site, fixture_plugins, run_python,
                                                  tmp_path):
    site = make_site({"toy": library(fixture_plugins["toy"])})
    write_dist(site, "toy", python_module("", module="zz_other_toy", dist="dragon-test-toy2"))
    proc = run_python(DUMP_PLUGINS, site=site)
    assert proc.returncode == 0, describe(proc)
    rec = find_plugin(parse_plugins(proc.stdout), "toy")
    assert rec["state"] == "broken", rec
    assert "dragon-test-toy" in rec["error"] and "dragon-test-toy2" in rec["error"], rec


# ------------------------------------------------ not from the current dir

@pytest.fixture
def cwd_plugin(tmp_path):
    """A folder holding a plugin distribution (dist-info + module), not
    installed anywhere: the user merely ``cd``'ed into it."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    marker = tmp_path / "imported.txt"
    write_dist(folder, "cwd_probe", python_module(touch_on_import(marker)))
    return folder, marker


def _python(args, cwd: Path, stdin: str | None = None, **env):
    return subprocess.run([sys.executable, *args], cwd=cwd, input=stdin,
                          env=clean_env(**env), capture_output=True, text=True,
                          timeout=120)


LAUNCHES = {
    "python -c": lambda folder, **env: _python(["-c", DUMP_PLUGINS], folder, **env),
    "python -m": lambda folder, **env: _python(["-m", "dragon_core", "info"], folder, **env),
    "REPL": lambda folder, **env: _python(["-i", "-q"], folder, stdin=DUMP_PLUGINS, **env),
}


@pytest.mark.parametrize("launch", sorted(LAUNCHES))
def test_distribution_in_current_directory_is_not_imported(cwd_plugin, launch):
    folder, marker = cwd_plugin
    proc = LAUNCHES[launch](folder)
    assert proc.returncode == 0, describe(proc)
    assert not marker.exists(), f"{launch} imported a plugin from the current directory"
    text = proc.stdout
    if launch == "python -m":      # the info table
        rows = {ln.split()[0]: ln for ln in text.splitlines() if ln.startswith("  ")
                and ln.split() and ln.split()[0] in ("cwd_probe", "cpu_eigen")}
        assert "disabled" in rows["cwd_probe"] and "loaded" in rows["cpu_eigen"], text
        assert "current directory" in text and "DRAGON_PLUGINS" in text, text
        return
    plugins = parse_plugins(text)
    rec = find_plugin(plugins, "cwd_probe")
    assert rec["state"] == "disabled", rec
    assert "current directory" in rec["error"] and "DRAGON_PLUGINS" in rec["error"], rec
    assert find_plugin(plugins, "cpu_eigen")["state"] == "loaded"


def test_named_in_dragon_plugins_it_loads_from_current_directory(cwd_plugin):
    folder, marker = cwd_plugin
    proc = LAUNCHES["python -c"](folder, DRAGON_PLUGINS="cwd_probe,cpu_eigen")
    assert proc.returncode == 0, describe(proc)
    assert marker.read_text().split() == ["dragon_test_ep_cwd_probe"]
    assert find_plugin(parse_plugins(proc.stdout), "cwd_probe")["state"] == "loaded"


def test_same_folder_put_on_sys_path_on_purpose_is_trusted(cwd_plugin):
    """PYTHONPATH (or a .pth file) naming the folder is an explicit choice."""
    folder, marker = cwd_plugin
    proc = _python(["-c", DUMP_PLUGINS], folder, PYTHONPATH=str(folder))
    assert proc.returncode == 0, describe(proc)
    assert find_plugin(parse_plugins(proc.stdout), "cwd_probe")["state"] == "loaded"


def test_module_shadowed_from_current_directory_is_not_imported(make_site, tmp_path):
    """An installed distribution whose module a file in the current
    directory would shadow: the file is not run."""
    site = make_site({"shadowed": python_module("")})
    folder = tmp_path / "work"
    folder.mkdir()
    marker = tmp_path / "imported.txt"
    (folder / "dragon_test_ep_shadowed.py").write_text(touch_on_import(marker))
    proc = _python(["-c", DUMP_PLUGINS], folder, PYTHONPATH=str(site))
    assert proc.returncode == 0, describe(proc)
    assert not marker.exists(), "a module in the current directory was imported"
    rec = find_plugin(parse_plugins(proc.stdout), "shadowed")
    assert rec["state"] == "disabled" and "current directory" in rec["error"], rec
    # With the current directory off sys.path (-P) the installed module loads.
    proc = _python(["-P", "-c", DUMP_PLUGINS], folder, PYTHONPATH=str(site))
    assert proc.returncode == 0, describe(proc)
    assert find_plugin(parse_plugins(proc.stdout), "shadowed")["state"] == "loaded"
    assert not marker.exists()


# ------------------------------------------ the library carries the name

def test_entry_point_must_load_a_library_of_its_own_name(make_site, fixture_plugins,
                                                         run_python):
    """An entry point ``aaa_squatter`` loading a library that calls itself
    ``pin_probe`` would take that name first (entry points load in name
    order) and get the real ``pin_probe`` refused as already loaded."""
    site = make_site({"aaa_squatter": library(fixture_plugins["pin_probe"]),
                      "toy": library(fixture_plugins["toy"])})
    proc = run_python(DUMP_PLUGINS, site=site)
    assert proc.returncode == 0, describe(proc)
    plugins = parse_plugins(proc.stdout)
    rec = find_plugin(plugins, "aaa_squatter")
    assert rec["state"] == "broken", rec
    for text in ("'aaa_squatter'", "dragon-test-aaa-squatter", "calls itself 'pin_probe'"):
        assert text in rec["error"], rec["error"]
    assert not [p for p in plugins if p["name"] == "pin_probe"], plugins
    assert find_plugin(plugins, "toy")["state"] == "loaded"
