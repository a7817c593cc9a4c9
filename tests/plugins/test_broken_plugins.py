"""Broken plugins never break ``import dragon_core``.

Every kind of broken plugin is installed as an entry point of a fake
distribution (a ``*.dist-info`` folder on PYTHONPATH, no pip) next to a
healthy plugin (toy) whose entry-point name sorts after all of them, and the
core is imported in a fresh interpreter. Each broken plugin must be listed as
broken with its root cause, the healthy ones must load, and using an op only
a broken plugin provides must raise ``PluginError`` carrying that cause.
Each broken plugin is announced by one ``PluginWarning`` line
(``DRAGON_QUIET_PLUGINS=1`` silences it). ``DRAGON_STRICT=1`` turns any load
failure into an import error.
"""

from __future__ import annotations

import json
import re

import dragon_sdk
import pytest
from plugin_testlib import (BROKEN_INIT_MESSAGE, DUMP_PLUGINS, describe,
                            find_plugin, import_error, library, missing_file,
                            parse_plugins)

MAJOR, MINOR = dragon_sdk.ABI_VERSION
IMPORT_ERROR_MESSAGE = "aa_import_error: no module named 'frobnicate_runtime'"

#: Entry-point name -> regexes its recorded error must match. Names sort so
#: that every broken entry comes before "toy", the healthy one.
CAUSES = {
    "aa_import_error": [re.escape(IMPORT_ERROR_MESSAGE)],
    "ab_missing_file": [r"libgone\.so"],
    "abi_major": [r"ABI", r"\b2\.0\b", rf"\b{MAJOR}\.{MINOR}\b"],
    "broken_init": [re.escape(BROKEN_INIT_MESSAGE)],
    "missing_dep": [r"libghost_dependency\.so: cannot open shared object"],
    "missing_symbol": [r"dragon_plugin_entry_v1"],
    "newer_minor": [r"ABI", rf"\b{MAJOR}\.{MINOR + 1}\b", r"pip install"],
}


@pytest.fixture
def broken_site(make_site, fixture_plugins, tmp_path):
    libs = fixture_plugins
    return make_site({
        "aa_import_error": import_error(IMPORT_ERROR_MESSAGE),
        "ab_missing_file": missing_file(tmp_path / "gone" / "libgone.so"),
        "abi_major": library(libs["abi_major"]),
        "broken_init": library(libs["broken_init"]),
        "missing_dep": library(libs["missing_dep"]),
        "missing_symbol": library(libs["missing_symbol"]),
        "newer_minor": library(libs["newer_minor"]),
        "toy": library(libs["toy"]),
    })


CHILD = DUMP_PLUGINS + r"""
import json
import numpy as np
report = {}

# An op only the broken plugin would have defined.
try:
    _dg.ops.broken_op(_dg.tensor(np.ones(2, np.float32)))
    report["broken_op"] = ["no error", ""]
except Exception as e:
    report["broken_op"] = [type(e).__name__, str(e),
                           isinstance(e, _dg.errors.PluginError),
                           isinstance(e, ImportError)]

# What broken_init registered before failing must not be visible.
report["relu"] = _dg.ops.relu(_dg.tensor([-1.0, 2.0])).tolist()
report["explain_relu"] = _dg.plugins.explain("Relu", "cpu", "float32")

# Ops of plugins whose init must never have run.
report["leaked_ops"] = [n for n in ("abi_major_op", "newer_minor_op")
                        if n in dir(_dg.ops)]

# The healthy plugin that sorts after all broken ones works.
t = _dg.tensor(np.arange(3, dtype=np.float32)).to("toy")
report["toy_add"] = _dg.ops.add(t, t).to("cpu").tolist()
print("@@REPORT@@" + json.dumps(report))
"""


def _report(stdout: str) -> dict:
    for line in stdout.splitlines():
        if line.startswith("@@REPORT@@"):
            return json.loads(line[len("@@REPORT@@"):])
    raise AssertionError(f"no report in:\n{stdout}")


@pytest.fixture
def broken_run(broken_site, run_python):
    proc = run_python(CHILD, site=broken_site)
    assert proc.returncode == 0, describe(proc)
    return proc


def test_import_survives_and_every_cause_is_recorded(broken_run):
    plugins = parse_plugins(broken_run.stdout)
    for name, patterns in CAUSES.items():
        p = find_plugin(plugins, name)
        assert p["state"] == "broken", (name, p)
        for pattern in patterns:
            assert re.search(pattern, p["error"] or ""), (
                f"{name}: error {p['error']!r} lacks {pattern!r}")


def test_healthy_plugins_after_broken_ones_still_load(broken_run):
    plugins = parse_plugins(broken_run.stdout)
    assert find_plugin(plugins, "toy")["state"] == "loaded"
    assert find_plugin(plugins, "cpu_eigen")["state"] == "loaded"
    assert _report(broken_run.stdout)["toy_add"] == [0.0, 2.0, 4.0]


def test_using_a_broken_plugins_op_raises_plugin_error(broken_run):
    kind, message, *flags = _report(broken_run.stdout)["broken_op"]
    assert kind == "PluginError" and flags == [True, True], (kind, message)
    assert BROKEN_INIT_MESSAGE in message, message
    assert "broken_init" in message, message


def test_failed_init_leaves_nothing_registered(broken_run):
    report = _report(broken_run.stdout)
    assert report["relu"] == [0.0, 2.0], "broken_init's Relu kernel leaked"
    assert "broken_init" not in report["explain_relu"], report["explain_relu"]
    assert "LeakedRelu" not in report["explain_relu"], report["explain_relu"]
    assert report["leaked_ops"] == [], "a refused plugin's init ran"


def test_info_lists_broken_plugins_with_causes(broken_site, run_info):
    proc = run_info(site=broken_site)
    assert proc.returncode == 0, describe(proc)
    out = proc.stdout
    for name, patterns in CAUSES.items():
        rows = [ln for ln in out.splitlines()
                if re.match(rf"\s*{re.escape(name)}\b", ln)]
        assert rows and "broken" in rows[0], f"{name} not shown broken:\n{out}"
        for pattern in patterns:
            assert re.search(pattern, out), f"{pattern!r} missing:\n{out}"
    rows = [ln for ln in out.splitlines() if re.match(r"\s*toy\b", ln)]
    assert rows and "loaded" in rows[0], out


def test_each_plugin_that_failed_gets_one_warning_line(broken_run):
    """Announced at import, one line per plugin, naming it and its cause."""
    lines = broken_run.stderr.strip().splitlines()
    warned = [ln for ln in lines if "PluginWarning" in ln]
    assert lines == warned, f"more than the warning lines:\n{broken_run.stderr}"
    assert len(warned) == len(CAUSES), broken_run.stderr
    for name, patterns in CAUSES.items():
        mine = [ln for ln in warned if f"plugin '{name}'" in ln]
        assert len(mine) == 1, (name, broken_run.stderr)
        assert re.search(patterns[0], mine[0]), (name, mine[0])
        assert "DRAGON_QUIET_PLUGINS=1" in mine[0] and "dragon_core info" in mine[0]
    assert not [ln for ln in warned if "'toy'" in ln]


@pytest.mark.parametrize("how", [{"DRAGON_QUIET_PLUGINS": "1"},
                                 {"PYTHONWARNINGS": "ignore::UserWarning"}])
def test_failure_warnings_can_be_silenced(broken_site, run_python, how):
    proc = run_python(DUMP_PLUGINS, site=broken_site, **how)
    assert proc.returncode == 0, describe(proc)
    assert "PluginWarning" not in proc.stderr, describe(proc)
    # Still recorded, with the cause.
    assert find_plugin(parse_plugins(proc.stdout), "broken_init")["state"] == "broken"


def test_healthy_plugins_load_without_warnings(make_site, fixture_plugins, run_python):
    site = make_site({"toy": library(fixture_plugins["toy"])})
    proc = run_python("import dragon_core", site=site)
    assert proc.returncode == 0 and proc.stderr == "", describe(proc)


def test_plugin_warning_is_a_user_warning(dg):
    assert issubclass(dg.plugins.PluginWarning, UserWarning)


@pytest.mark.parametrize("entry, expected", [
    ("broken_init", BROKEN_INIT_MESSAGE),
    ("missing_symbol", "dragon_plugin_entry_v1"),
    ("aa_import_error", IMPORT_ERROR_MESSAGE),
])
def test_strict_mode_turns_a_broken_plugin_into_an_import_error(
        make_site, fixture_plugins, run_python, entry, expected):
    entries = {
        "aa_import_error": import_error(IMPORT_ERROR_MESSAGE),
        "broken_init": library(fixture_plugins["broken_init"]),
        "missing_symbol": library(fixture_plugins["missing_symbol"]),
    }
    site = make_site({entry: entries[entry], "toy":
                      library(fixture_plugins["toy"])})
    proc = run_python("import dragon_core", site=site, DRAGON_STRICT="1")
    assert proc.returncode != 0, describe(proc)
    assert expected in proc.stderr, describe(proc)
    # Without strict mode the same installation imports fine.
    proc = run_python("import dragon_core", site=site)
    assert proc.returncode == 0, describe(proc)


def test_strict_mode_accepts_healthy_plugins(make_site, fixture_plugins,
                                             run_python):
    site = make_site({"toy": library(fixture_plugins["toy"])})
    proc = run_python(DUMP_PLUGINS, site=site, DRAGON_STRICT="1")
    assert proc.returncode == 0, describe(proc)
    assert find_plugin(parse_plugins(proc.stdout), "toy")["state"] == "loaded"
