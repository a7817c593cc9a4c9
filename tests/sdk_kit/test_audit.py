"""audit_plugin_so: the ELF/ABI audit of a plugin library, and its failures."""

from __future__ import annotations

import dragon_sdk
import pytest

from dragon_sdk.testing import ENTRY_SYMBOL, audit_plugin_so, inspect_plugin_so


def test_cpu_eigen_passes(dg):
    import dragon_cpu_eigen

    report = audit_plugin_so(dragon_cpu_eigen.plugin_library())
    assert report.ok and report.exports == [ENTRY_SYMBOL]
    assert report.name == "cpu_eigen"
    assert report.abi[0] == dragon_sdk.ABI_VERSION[0]
    assert report.min_host_minor <= dragon_sdk.ABI_VERSION[1]
    # Imports were read with their versions and the library providing them.
    libs = {i.library for i in report.imports if i.version}
    assert "libc.so.6" in libs and any("stdc++" in x for x in libs), libs
    assert "libgomp.so.1" in report.needed


#: Third-party libraries an installed plugin is built to need.
THIRD_PARTY = {"mkldnn": ["libdnnl.so.3", "libgomp.so.1"]}


def test_every_loaded_plugin_passes(dg):
    loaded = [p for p in dg.plugins.list() if p.state == "loaded" and p.path]
    assert loaded
    for p in loaded:
        audit_plugin_so(p.path, allowed_libs=THIRD_PARTY.get(p.name, ()))


@pytest.mark.parametrize("name", ["toy", "custom_op", "pin_probe",
                                  "broken_init"])
def test_well_formed_fixtures_pass(fixture_plugins, name):
    report = audit_plugin_so(fixture_plugins[name])
    assert report.name == name


def test_missing_entry_point_fails(fixture_plugins):
    with pytest.raises(AssertionError,
                       match=r"does not export dragon_plugin_entry_v1.*"
                             r"dragon_plugin_entry_v0"):
        audit_plugin_so(fixture_plugins["missing_symbol"])


def test_wrong_abi_major_fails(fixture_plugins):
    path = fixture_plugins["abi_major"]
    with pytest.raises(AssertionError, match="declares ABI major 2, expected 1"):
        audit_plugin_so(path)
    assert audit_plugin_so(path, abi_major=2).abi[0] == 2


def test_newer_minor_fails(fixture_plugins):
    minor = dragon_sdk.ABI_VERSION[1]
    with pytest.raises(AssertionError,
                       match=f"needs host ABI minor {minor + 1}"):
        audit_plugin_so(fixture_plugins["newer_minor"])


def test_undeclared_dependency_fails(fixture_plugins):
    report = inspect_plugin_so(fixture_plugins["missing_dep"])
    text = report.message()
    assert "links libghost_dependency.so" in text
    assert "ghost_dependency_answer" in text          # unversioned import
    assert "dlopen failed" in text                    # and it cannot load
    declared = inspect_plugin_so(fixture_plugins["missing_dep"],
                                 allowed_libs=["libghost_dependency.so"])
    assert not any("links libghost" in p for p in declared.problems)


def test_extra_export_fails(kit_libs):
    with pytest.raises(AssertionError) as err:
        audit_plugin_so(kit_libs["extra_export"])
    message = str(err.value)
    assert "exports 1 symbol(s) besides dragon_plugin_entry_v1: " \
        "dg_leaky_helper" in message
    assert "imports" not in message                   # nothing else wrong
    report = inspect_plugin_so(kit_libs["extra_export"])
    assert report.name == "leaky" and report.abi == dragon_sdk.ABI_VERSION


def test_core_imports_fail(kit_libs):
    report = inspect_plugin_so(kit_libs["leaky"])
    core = [p for p in report.problems if "the core (or the Python" in p]
    assert len(core) == 1, report.problems
    assert "PyInit__C" in core[0] and "dg_core_tensor_numel" in core[0]
    with pytest.raises(AssertionError, match="PyInit__C"):
        audit_plugin_so(kit_libs["leaky"])


def test_not_an_elf_file_fails(tmp_path):
    bogus = tmp_path / "libnot_elf.so"
    bogus.write_text("hello")
    with pytest.raises(AssertionError, match="not a readable ELF"):
        audit_plugin_so(bogus)
    with pytest.raises(AssertionError, match="no such file"):
        audit_plugin_so(tmp_path / "missing.so")
