"""The C ABI: a golden binary layout, and an audit of every plugin library.

(a) ``sizeof``/``_Alignof``/``offsetof`` of every public struct and the value
    of every constant in ``dragon/plugin.h`` (as installed by dragon-sdk) must
    equal ``golden/abi_v1.json``. ABI v1 may only grow by appending.
(b) Every plugin library the core loaded and every well-formed fixture must
    export exactly ``dragon_plugin_entry_v1`` and import nothing from the
    core: only versioned symbols of the C/C++ runtime, and no Dragon library
    among its NEEDED entries.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest
from plugin_testlib import WELL_FORMED

HERE = Path(__file__).resolve().parent


def _load_layout_module():
    spec = importlib.util.spec_from_file_location(
        "dragon_abi_layout", HERE / "abi_layout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


abi_layout = _load_layout_module()


# --------------------------------------------------------- golden layout

def _explain(breaking, appended) -> str:
    lines = ["The binary layout of dragon/plugin.h differs from "
             "tests/plugins/golden/abi_v1.json."]
    if breaking:
        lines.append("Changes that BREAK ABI v1 (every installed plugin "
                     "would misread them):")
        lines += [f"  - {b}" for b in breaking]
    if appended:
        lines.append("Appended items:")
        lines += [f"  + {a}" for a in appended]
    lines.append(
        "Within ABI major 1 the only allowed change is appending fields at the "
        "end of a struct (or new constants/structs), with DG_ABI_MINOR bumped; "
        "never insert, remove, reorder or retype a field. If the change is a "
        "deliberate append, extend the golden file on purpose with "
        "`python tests/plugins/abi_layout.py --write` and review its diff.")
    return "\n".join(lines)


def test_header_layout_matches_golden(sdk):
    golden = json.loads(abi_layout.GOLDEN.read_text())
    current = abi_layout.measure(sdk.include)
    breaking, appended = abi_layout.compare(golden, current)
    assert current == golden, _explain(breaking, appended)


def test_header_defines_exactly_the_public_structs(sdk):
    parsed = abi_layout.parse_header(sdk.include / "dragon" / "plugin.h")
    assert sorted(parsed["structs"]) == sorted(abi_layout.PUBLIC_STRUCTS)
    # Every versioned struct starts with struct_size (DgDevice is a plain
    # value pair and never grows).
    for name, fields in parsed["structs"].items():
        if name != "DgDevice":
            assert fields[0] == "struct_size", f"{name} must start with struct_size"


def test_installed_header_is_the_checkout_header(sdk):
    """A stale dragon-sdk would make the golden test check the wrong file."""
    checkout = HERE.parents[1] / "sdk" / "include" / "dragon"
    if not checkout.is_dir():
        pytest.skip("not running from a source checkout")
    for name in ("plugin.h", "plugin.hpp"):
        assert (sdk.include / "dragon" / name).read_bytes() == \
            (checkout / name).read_bytes(), (
                f"the installed dragon-sdk's {name} differs from "
                f"sdk/include/dragon/{name}: reinstall the SDK (make)")


def _mutated_layout(sdk, tmp_path: Path, edit) -> dict:
    inc = tmp_path / "include"
    (inc / "dragon").mkdir(parents=True)
    text = (sdk.include / "dragon" / "plugin.h").read_text()
    (inc / "dragon" / "plugin.h").write_text(edit(text))
    return abi_layout.measure(inc)


def test_golden_check_catches_an_inserted_field(sdk, tmp_path):
    """The comparison itself must be able to fail."""
    golden = json.loads(abi_layout.GOLDEN.read_text())
    inserted = _mutated_layout(sdk, tmp_path, lambda t: t.replace(
        "  int32_t priority;        /* higher wins",
        "  int32_t flavour;\n  int32_t priority;        /* higher wins"))
    breaking, _ = abi_layout.compare(golden, inserted)
    assert any("DgKernelDef" in b for b in breaking), breaking


def test_golden_check_accepts_an_append_with_minor_bump(sdk, tmp_path):
    golden = json.loads(abi_layout.GOLDEN.read_text())

    def append(text):
        text = re.sub(r"#define DG_ABI_MINOR (\d+)",
                      lambda m: f"#define DG_ABI_MINOR {int(m.group(1)) + 1}", text)
        return text.replace(
            "  int32_t (*num_threads)(void);\n} DgHostApi;",
            "  int32_t (*num_threads)(void);\n  void* (*future_slot)(void);\n"
            "} DgHostApi;")

    breaking, appended = abi_layout.compare(
        golden, _mutated_layout(sdk, tmp_path, append))
    assert breaking == []
    assert any("DgHostApi.future_slot" in a for a in appended), appended


# ------------------------------------------------------- export audit

#: Version tags of the libraries a plugin may import from.
ALLOWED_VERSION = re.compile(
    r"^(GLIBC|GLIBCXX|CXXABI|GCC|GOMP|OMP|GOMP_PLUGIN)_[0-9.]+$")
#: Unversioned weak references every toolchain emits.
ALLOWED_UNVERSIONED = {"__gmon_start__", "_ITM_registerTMCloneTable",
                       "_ITM_deregisterTMCloneTable", "__cxa_finalize"}
#: Libraries a plugin may depend on; anything named dragon/_C/python is not.
FORBIDDEN_NEEDED = re.compile(r"dragon|_C\.|python|pybind", re.I)
CORE_PREFIXES = ("dg", "Dg", "DG_", "dragon", "_ZN6dragon", "_ZN2dg",
                 "_ZNK6dragon", "_ZNK2dg", "PyInit", "Py", "_Py")


def _dynsyms(path: Path) -> list[dict]:
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(path)],
                         capture_output=True, text=True, check=True).stdout
    syms = []
    for line in out.splitlines():
        parts = line.split()
        # Num: Value Size Type Bind Vis Ndx Name
        if len(parts) < 8 or not parts[0].rstrip(":").isdigit():
            continue
        name = parts[7]
        base, _, version = name.partition("@")
        syms.append({"name": base, "version": version.lstrip("@"),
                     "bind": parts[4], "ndx": parts[6], "type": parts[3]})
    return syms


def _needed(path: Path) -> list[str]:
    out = subprocess.run(["readelf", "-d", "-W", str(path)],
                         capture_output=True, text=True, check=True).stdout
    return re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", out)


def _symbols_of_needed_libraries(path: Path) -> set[str]:
    """Dynamic symbols defined by the libraries ``path`` declares NEEDED and
    the loader resolves (e.g. oneDNN for mkldnn), never the core's."""
    out = subprocess.run(["ldd", str(path)], capture_output=True, text=True,
                         check=False).stdout
    names = set(_needed(path))
    defined = set()
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if not m or m.group(1) not in names or FORBIDDEN_NEEDED.search(m.group(1)):
            continue
        nm = subprocess.run(["nm", "-D", "--defined-only", m.group(2)],
                            capture_output=True, text=True, check=False).stdout
        defined.update(line.split()[-1].split("@")[0]
                       for line in nm.splitlines() if line.strip())
    return defined


def audit(path: Path) -> list[str]:
    """Everything wrong with a plugin library's dynamic symbol tables.

    An unversioned import must be defined by a library the plugin declares
    (NEEDED, e.g. libdnnl.so.3): then it cannot silently bind to the core."""
    problems = []
    third_party = None
    nm_def = subprocess.run(["nm", "-D", "--defined-only", str(path)],
                            capture_output=True, text=True, check=True).stdout
    exported = sorted(line.split()[-1] for line in nm_def.splitlines()
                      if line.strip())
    if exported != ["dragon_plugin_entry_v1"]:
        problems.append(f"exports {exported}, expected exactly "
                        "['dragon_plugin_entry_v1'] (link with the SDK's "
                        "version script: dragon_add_plugin)")
    nm_undef = subprocess.run(["nm", "-D", "--undefined-only", str(path)],
                              capture_output=True, text=True,
                              check=True).stdout
    undefined_nm = {line.split()[-1].split("@")[0]
                    for line in nm_undef.splitlines() if line.strip()}
    undefined = [s for s in _dynsyms(path) if s["ndx"] == "UND" and s["name"]]
    if {s["name"] for s in undefined} != undefined_nm:
        problems.append("nm and readelf disagree on the undefined symbols")
    for s in undefined:
        if s["name"].startswith(CORE_PREFIXES):
            problems.append(f"imports {s['name']}, which only the core or "
                            "Python could provide")
        elif s["version"]:
            if not ALLOWED_VERSION.match(s["version"]):
                problems.append(f"imports {s['name']}@{s['version']} from a "
                                "library outside the C/C++ runtime")
        elif s["name"] not in ALLOWED_UNVERSIONED:
            if third_party is None:
                third_party = _symbols_of_needed_libraries(path)
            if s["name"] in third_party:
                continue
            problems.append(f"imports unversioned {s['name']} (resolved from "
                            "whatever is loaded: maybe the core)")
    for lib in _needed(path):
        if FORBIDDEN_NEEDED.search(lib):
            problems.append(f"NEEDED {lib}: a plugin must not link the core")
    return problems


@pytest.mark.parametrize("name", WELL_FORMED)
def test_fixture_plugin_exports_only_the_entry(fixture_plugins, name):
    problems = audit(fixture_plugins[name])
    assert not problems, f"{fixture_plugins[name]}:\n  " + "\n  ".join(problems)


def test_every_loaded_plugin_passes_the_audit(dg):
    paths = [Path(p.path) for p in dg.plugins.list()
             if p.state == "loaded" and p.path]
    assert paths, ("the core loaded no plugin library; is dragon-cpu-eigen "
                   f"installed? plugins: {dg.plugins.list()}")
    failures = {str(p): audit(p) for p in paths}
    failures = {p: v for p, v in failures.items() if v}
    assert not failures, "\n".join(
        f"{p}:\n  " + "\n  ".join(v) for p, v in failures.items())


def test_audit_catches_a_bad_library(fixture_plugins):
    """The audit itself must be able to fail."""
    problems = audit(fixture_plugins["missing_symbol"])
    assert any("exports" in p for p in problems), problems
    problems = audit(fixture_plugins["missing_dep"])
    assert any("ghost_dependency" in p for p in problems), problems
