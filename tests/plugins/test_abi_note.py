"""The ABI is checked before a plugin's code runs (docs/security.md).

Every plugin built with the SDK's ``DG_PLUGIN`` carries its ABI numbers in an
ELF note (``.note.dragon.abi``). The loader reads that note from the file and
refuses a plugin this core cannot run *before* ``dlopen``, so not even its
static constructors run. The ``ctor_marker_*`` fixtures have an ELF
constructor that appends their name to ``$DRAGON_TEST_CTOR_MARKER``: the
marker file shows whether the library was ever opened. Libraries without the
note (older SDKs, entry points written by hand) still load, checked after
``dlopen`` as before.
"""

from __future__ import annotations

import random
import shutil
import struct

import dragon_sdk
import pytest
from plugin_testlib import (DUMP_PLUGINS, describe, find_plugin, library,
                            parse_plugins)

MAJOR, MINOR = dragon_sdk.ABI_VERSION

#: Fixture -> the note it must carry (None: built without DG_PLUGIN).
NOTES = {
    "toy": (MAJOR, MINOR, 0),
    "custom_op": (MAJOR, MINOR, 0),
    "pin_probe": (MAJOR, MINOR, 0),
    "dup_claim_a": (MAJOR, MINOR, 0),
    "call_site": (MAJOR, MINOR, 0),
    "newer_minor": (MAJOR, MINOR, MINOR + 1),
    "ctor_marker_ok": (MAJOR, MINOR, 0),
    "ctor_marker_new_minor": (MAJOR, MINOR, MINOR + 1),
    "ctor_marker_new_major": (2, 0, 0),
    "abi_1_0": None,          # frozen ABI 1.0 headers: no note, still loads
    "abi_major": None,        # hand-written entry point without DG_ABI_NOTE
    "missing_symbol": None,   # plain C library, not a plugin
}


@pytest.mark.parametrize("fixture", sorted(NOTES))
def test_abi_note_is_read_from_the_file(dg, fixture_plugins, fixture):
    assert dg.plugins.abi_note(fixture_plugins[fixture]) == NOTES[fixture]


def test_note_agrees_with_readelf_view(fixture_plugins):
    """An independent ELF parser (pyelftools) sees the same note."""
    elffile = pytest.importorskip("elftools.elf.elffile")
    with open(fixture_plugins["ctor_marker_new_minor"], "rb") as f:
        elf = elffile.ELFFile(f)
        section = elf.get_section_by_name(".note.dragon.abi")
        assert section is not None and section["sh_type"] == "SHT_NOTE"
        (note,) = list(section.iter_notes())
        assert note["n_name"] == "Dragon"
        desc = note["n_desc"]
        if isinstance(desc, str):  # pyelftools gives unknown notes as text
            desc = desc.encode("latin-1")
        assert struct.unpack("<3I", desc[:12]) == (MAJOR, MINOR, MINOR + 1)


def test_installed_plugins_carry_the_note(dg):
    """The real plugin wheels are built with the SDK that emits the note."""
    libs = {p.name: p.path for p in dg.plugins.list() if p.path and p.state == "loaded"}
    assert "cpu_eigen" in libs, libs
    for name, path in libs.items():
        if name in ("cpu_eigen", "mkldnn", "vision_ops"):
            note = dg.plugins.abi_note(path)
            assert note is not None and note[:2] == (MAJOR, MINOR), (name, path, note)


def test_note_is_found_without_section_headers(dg, fixture_plugins, tmp_path):
    """A library stripped of its section headers keeps its PT_NOTE segment."""
    copy = tmp_path / "libno_sections.so"
    shutil.copy(fixture_plugins["ctor_marker_new_minor"], copy)
    data = bytearray(copy.read_bytes())
    assert data[:4] == b"\x7fELF" and data[4] == 2   # ELFCLASS64
    struct.pack_into("<Q", data, 0x28, 0)              # e_shoff
    struct.pack_into("<H", data, 0x3C, 0)              # e_shnum
    copy.write_bytes(bytes(data))
    assert dg.plugins.abi_note(copy) == (MAJOR, MINOR, MINOR + 1)


def test_damaged_files_never_crash_the_reader(dg, fixture_plugins, tmp_path):
    good = fixture_plugins["toy"].read_bytes()
    rng = random.Random(13)
    path = tmp_path / "libdamaged.so"
    cuts = sorted({0, 1, 4, 16, 52, 63, 64, 65, *rng.sample(range(len(good)), 40)})
    for cut in cuts:
        path.write_bytes(good[:cut])
        assert dg.plugins.abi_note(path) in (None, (MAJOR, MINOR, 0))
    for _ in range(150):
        data = bytearray(good)
        for _ in range(rng.randint(1, 8)):
            at = rng.randrange(0, min(len(data), 4096))
            data[at] = rng.randrange(256)
        path.write_bytes(bytes(data))
        note = dg.plugins.abi_note(path)
        assert note is None or (isinstance(note, tuple) and len(note) == 3)
    for junk in (b"", b"\x7fELF", b"\x7fELF" + b"\xff" * 60, b"not an elf file at all"):
        path.write_bytes(junk)
        assert dg.plugins.abi_note(path) is None
    assert dg.plugins.abi_note(tmp_path / "absent.so") is None
    assert dg.plugins.abi_note(tmp_path) is None                      # a folder


# ------------------------------------------ refused before any code runs

LOAD_LIBRARY = r"""
import sys
import dragon_core as dg
try:
    info = dg.load_library(sys.argv[1])
    print("@@RESULT@@loaded", info.state)
except dg.errors.PluginError as e:
    print("@@RESULT@@refused", e)
"""

REFUSALS = {
    "ctor_marker_new_minor": [f"needs Dragon ABI {MAJOR}.{MINOR + 1} or newer",
                              "pip install --upgrade dragon-core"],
    "ctor_marker_new_major": ["built for Dragon ABI 2.0", f"ABI {MAJOR}.{MINOR}"],
}


def _result(proc) -> str:
    assert proc.returncode == 0, describe(proc)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("@@RESULT@@")]
    assert lines, describe(proc)
    return lines[0][len("@@RESULT@@"):]


@pytest.mark.parametrize("fixture", sorted(REFUSALS))
def test_refused_plugin_never_runs_its_constructors(fixture_plugins, run_python,
                                                    tmp_path, fixture):
    marker = tmp_path / "constructors.txt"
    proc = run_python(LOAD_LIBRARY, args=[str(fixture_plugins[fixture])],
                      DRAGON_TEST_CTOR_MARKER=str(marker))
    result = _result(proc)
    assert not marker.exists(), (
        f"{fixture}'s ELF constructor ran although the core refused it: "
        f"{marker.read_text()!r}")
    assert result.startswith("refused"), result
    for text in REFUSALS[fixture] + [".note.dragon.abi", "none of its code was run"]:
        assert text in result, result


def test_refused_entry_point_never_runs_its_constructors(make_site, fixture_plugins,
                                                         run_python, tmp_path):
    marker = tmp_path / "constructors.txt"
    site = make_site({name: library(fixture_plugins[name]) for name in REFUSALS})
    proc = run_python(DUMP_PLUGINS, site=site, DRAGON_TEST_CTOR_MARKER=str(marker))
    assert proc.returncode == 0, describe(proc)
    plugins = parse_plugins(proc.stdout)
    for name, texts in REFUSALS.items():
        p = find_plugin(plugins, name)
        assert p["state"] == "broken", p
        assert all(t in p["error"] for t in texts), p
    assert not marker.exists(), marker.read_text()


def test_constructor_marker_works_for_a_loadable_plugin(fixture_plugins, run_python,
                                                        tmp_path):
    """The control: the same source built for this ABI loads, and its
    constructor leaves the marker -- so the absence above means something."""
    marker = tmp_path / "constructors.txt"
    proc = run_python(LOAD_LIBRARY, args=[str(fixture_plugins["ctor_marker_ok"])],
                      DRAGON_TEST_CTOR_MARKER=str(marker))
    assert _result(proc) == "loaded loaded"
    assert marker.read_text().split() == ["ctor_marker_ok"]


def test_plugin_without_note_still_loads_and_is_checked(fixture_plugins, run_python,
                                                        tmp_path):
    """No note (ABI 1.0 headers; a hand-written entry): today's checks after
    dlopen still apply."""
    assert _result(run_python(LOAD_LIBRARY, args=[str(fixture_plugins["abi_1_0"])])) \
        == "loaded loaded"
    refused = _result(run_python(LOAD_LIBRARY, args=[str(fixture_plugins["abi_major"])]))
    assert refused.startswith("refused") and "ABI 2.0" in refused, refused
    assert ".note.dragon.abi" not in refused, refused

