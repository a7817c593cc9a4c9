"""ABI audit of a plugin shared library, without loading the core into it.

A Dragon plugin exports exactly one dynamic symbol, the entry point
``dragon_plugin_entry_v1`` (``DG_PLUGIN_ENTRY_SYMBOL`` in ``plugin.h``), and
imports nothing from the core: its undefined symbols come from the C/C++
runtime (libc, libm, libstdc++, libgcc_s, libgomp, the dynamic loader) or
from libraries it declares itself. :func:`audit_plugin_so` checks both from
the ELF dynamic symbol table (read with the pure-Python ``pyelftools``, so no
binutils are needed), then calls the entry point in a child interpreter
(``ctypes``, no ``dragon_core``; the plugin's ``init`` is never called) and
checks the ABI numbers it declares.

>>> from dragon_sdk.testing import audit_plugin_so
>>> report = audit_plugin_so("build/libmy_plugin.so")   # doctest: +SKIP
>>> report.name, report.abi
('my_plugin', (1, 1))
"""

from __future__ import annotations

import dataclasses
import fnmatch
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterable, Sequence

#: The only symbol a plugin exports (``DG_PLUGIN_ENTRY_SYMBOL``).
ENTRY_SYMBOL = "dragon_plugin_entry_v1"

#: Sonames of the C/C++ runtime a plugin may always import from.
SYSTEM_LIBS = ("libc.so.*", "libm.so.*", "libmvec.so.*", "libstdc++.so.*",
               "libgcc_s.so.*", "libgomp.so.*", "libomp.so*", "libiomp5.so",
               "libpthread.so.*", "libdl.so.*", "librt.so.*",
               "ld-linux*.so.*", "ld-linux.so.*", "libatomic.so.*")

#: Unversioned weak references every toolchain emits.
TOOLCHAIN_SYMBOLS = ("__gmon_start__", "_ITM_registerTMCloneTable",
                     "_ITM_deregisterTMCloneTable", "__cxa_finalize",
                     "_Jv_RegisterClasses")

#: Name prefixes only the core (or the Python interpreter hosting it) defines.
CORE_PREFIXES = ("dg_", "Dg", "DG_", "dragon_", "_ZN6dragon", "_ZNK6dragon",
                 "_ZN2dg", "_ZNK2dg", "PyInit", "Py", "_Py")

#: NEEDED entries that mean "links the core or Python".
_FORBIDDEN_NEEDED = re.compile(r"dragon|^_C\.|python|pybind", re.I)


@dataclasses.dataclass(frozen=True)
class Import:
    """One undefined dynamic symbol of a library.

    ``version`` is the symbol version (``"GLIBC_2.2.5"``), ``library`` the
    file the version belongs to (``"libc.so.6"``); both are ``""`` for an
    unversioned symbol, which the dynamic loader takes from whatever loaded
    library defines it first.
    """

    name: str
    version: str = ""
    library: str = ""
    weak: bool = False

    def __str__(self) -> str:
        if self.version:
            return f"{self.name}@{self.version} ({self.library})"
        return self.name


@dataclasses.dataclass
class PluginAudit:
    """What :func:`audit_plugin_so` found in a plugin library.

    Attributes
    ----------
    path : str
        The audited file.
    exports : list of str
        Defined dynamic symbols (must be exactly ``[ENTRY_SYMBOL]``).
    imports : list of Import
        Undefined dynamic symbols.
    needed : list of str
        ``DT_NEEDED`` entries (the libraries it links).
    name, version : str
        What the entry point declares ("" if it could not be called).
    abi : tuple of int
        ``(abi_major, abi_minor)`` declared by the entry point.
    min_host_minor : int
        The oldest host ABI minor the plugin can run with.
    problems : list of str
        Everything wrong; empty for a well-formed plugin.
    """

    path: str
    exports: list = dataclasses.field(default_factory=list)
    imports: list = dataclasses.field(default_factory=list)
    needed: list = dataclasses.field(default_factory=list)
    name: str = ""
    version: str = ""
    abi: tuple = ()
    min_host_minor: int = -1
    problems: list = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the audit found no problem."""
        return not self.problems

    def message(self) -> str:
        """A readable account of the problems (for assertion messages)."""
        head = f"plugin library {self.path} fails the Dragon ABI audit:"
        return "\n  - ".join([head, *self.problems])


# ------------------------------------------------------------- ELF reading


def _elf_tables(path: str) -> tuple[list, list, list[str], list[str]]:
    """Return ``(exports, imports, needed, runpath)`` of an ELF library."""
    try:
        from elftools.elf.dynamic import DynamicSection
        from elftools.elf.elffile import ELFFile
        from elftools.elf.gnuversions import (GNUVerNeedSection,
                                              GNUVerSymSection)
    except ImportError as e:  # pragma: no cover - a declared dependency
        raise ImportError("dragon_sdk.testing.audit_plugin_so needs "
                          "pyelftools: pip install pyelftools") from e
    with open(path, "rb") as f:
        elf = ELFFile(f)
        dynsym = elf.get_section_by_name(".dynsym")
        versym = verneed = None
        needed, runpath = [], []
        for sec in elf.iter_sections():
            if isinstance(sec, GNUVerSymSection):
                versym = sec
            elif isinstance(sec, GNUVerNeedSection):
                verneed = sec
            elif isinstance(sec, DynamicSection):
                for tag in sec.iter_tags():
                    if tag.entry.d_tag == "DT_NEEDED":
                        needed.append(tag.needed)
                    elif tag.entry.d_tag in ("DT_RUNPATH", "DT_RPATH"):
                        value = getattr(tag, "runpath", None) or getattr(
                            tag, "rpath", "")
                        runpath.extend(p for p in value.split(":") if p)
        # version index -> (version name, file)
        versions = {}
        if verneed is not None:
            for need, auxes in verneed.iter_versions():
                for aux in auxes:
                    versions[aux.entry.vna_other] = (aux.name, need.name)
        exports, imports = [], []
        if dynsym is None:
            return exports, imports, needed, runpath
        for i, sym in enumerate(dynsym.iter_symbols()):
            if not sym.name or sym.entry.st_info.type in ("STT_SECTION",
                                                          "STT_FILE"):
                continue
            bind = sym.entry.st_info.bind
            if sym.entry.st_shndx == "SHN_UNDEF":
                version = library = ""
                if versym is not None:
                    ndx = versym.get_symbol(i).entry.ndx
                    if isinstance(ndx, int):
                        version, library = versions.get(ndx & 0x7FFF,
                                                        ("", ""))
                imports.append(Import(sym.name, version, library,
                                      bind == "STB_WEAK"))
            elif bind in ("STB_GLOBAL", "STB_WEAK", "STB_GNU_UNIQUE"):
                exports.append(sym.name)
    return sorted(set(exports)), imports, needed, runpath


def defined_symbols(path: str | os.PathLike) -> set[str]:
    """The dynamic symbols an ELF library defines (exports)."""
    return set(_elf_tables(os.fspath(path))[0])


def core_libraries() -> list[Path]:
    """The shared libraries of the installed ``dragon_core`` (not imported)."""
    spec = importlib.util.find_spec("dragon_core")
    if spec is None or not spec.submodule_search_locations:
        return []
    out = []
    for root in spec.submodule_search_locations:
        out += sorted(p for p in Path(root).rglob("*.so*") if p.is_file())
    return out


def _core_symbols() -> set[str]:
    names: set[str] = set()
    for lib in core_libraries():
        try:
            names |= defined_symbols(lib)
        except Exception:  # noqa: BLE001 - not an ELF file: nothing to add
            continue
    return names


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _resolve_needed(lib: str, plugin: Path, runpath: Sequence[str]):
    """Find a declared dependency next to the plugin or on its RUNPATH."""
    dirs = [p.replace("$ORIGIN", str(plugin.parent)).replace(
        "${ORIGIN}", str(plugin.parent)) for p in runpath]
    for d in [*dirs, str(plugin.parent)]:
        candidate = Path(d) / lib
        if candidate.is_file():
            return candidate
    return None


# ---------------------------------------------------------- the entry point

_ENTRY_PROBE = r"""
import ctypes, json, sys

class Info(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("name", ctypes.c_char_p),
                ("version", ctypes.c_char_p), ("abi_major", ctypes.c_uint32),
                ("abi_minor", ctypes.c_uint32),
                ("min_host_minor", ctypes.c_uint32), ("init", ctypes.c_void_p)]

try:
    lib = ctypes.CDLL(sys.argv[1], mode=ctypes.RTLD_LOCAL)
except OSError as e:
    print(json.dumps({"error": "dlopen failed: " + str(e)}))
    raise SystemExit(0)
try:
    entry = getattr(lib, sys.argv[2])
except AttributeError:
    print(json.dumps({"error": "no symbol " + sys.argv[2]}))
    raise SystemExit(0)
entry.restype = ctypes.POINTER(Info)
entry.argtypes = []
p = entry()
if not p:
    print(json.dumps({"error": sys.argv[2] + "() returned NULL"}))
    raise SystemExit(0)
i = p.contents
print(json.dumps({"struct_size": i.struct_size,
                  "name": (i.name or b"").decode("utf-8", "replace"),
                  "version": (i.version or b"").decode("utf-8", "replace"),
                  "abi_major": i.abi_major, "abi_minor": i.abi_minor,
                  "min_host_minor": i.min_host_minor,
                  "has_init": bool(i.init)}))
"""


def read_plugin_info(path: str | os.PathLike, timeout: float = 60) -> dict:
    """Call a plugin's entry point in a child interpreter; return its info.

    The child loads only the plugin (``ctypes``, ``RTLD_LOCAL``), never
    ``dragon_core``, and never calls the plugin's ``init``. Returns a dict
    with ``struct_size``, ``name``, ``version``, ``abi_major``,
    ``abi_minor``, ``min_host_minor`` and ``has_init``, or with ``error``
    when the library cannot be loaded, lacks the entry point, or crashes.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAGON_")}
    proc = subprocess.run(
        [sys.executable, "-c", _ENTRY_PROBE, os.fspath(path), ENTRY_SYMBOL],
        capture_output=True, text=True, timeout=timeout, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        return {"error": f"calling {ENTRY_SYMBOL}() in a child process "
                         f"failed (exit code {proc.returncode}): "
                         f"{proc.stderr.strip()[-2000:]}"}
    return json.loads(lines[-1])


# ------------------------------------------------------------------- audit


def inspect_plugin_so(path: str | os.PathLike, *, abi_major: int | None = None,
                      host_minor: int | None = None,
                      allowed_libs: Sequence[str] = (),
                      allowed_symbols: Sequence[str] = ()) -> PluginAudit:
    """Audit a plugin library; return the report without raising.

    Same parameters as :func:`audit_plugin_so`.
    """
    from dragon_sdk import ABI_VERSION

    path = Path(path)
    expect_major = ABI_VERSION[0] if abi_major is None else int(abi_major)
    expect_minor = ABI_VERSION[1] if host_minor is None else int(host_minor)
    report = PluginAudit(str(path))
    problems = report.problems
    if not path.is_file():
        problems.append("no such file")
        return report
    try:
        exports, imports, needed, runpath = _elf_tables(str(path))
    except Exception as e:  # noqa: BLE001 - ELFError and friends
        problems.append(f"not a readable ELF shared library: {e}")
        return report
    report.exports, report.imports, report.needed = exports, imports, needed

    # 1. Exactly one export.
    if exports != [ENTRY_SYMBOL]:
        extra = [s for s in exports if s != ENTRY_SYMBOL]
        missing = ENTRY_SYMBOL not in exports
        what = []
        if missing:
            what.append(f"does not export {ENTRY_SYMBOL}")
        if extra:
            shown = ", ".join(extra[:20]) + (" ..." if len(extra) > 20 else "")
            what.append(f"exports {len(extra)} symbol(s) besides "
                        f"{ENTRY_SYMBOL}: {shown}")
        problems.append("; ".join(what) + " (build with the SDK's "
                        "dragon_add_plugin: hidden visibility and a version "
                        "script exporting only the entry point)")

    # 2. Linked libraries.
    declared = [lib for lib in needed if _matches(lib, allowed_libs)]
    for lib in needed:
        if _FORBIDDEN_NEEDED.search(lib) and lib not in declared:
            problems.append(f"links {lib} (DT_NEEDED): a plugin must not "
                            "link the core or Python")
        elif not _matches(lib, SYSTEM_LIBS) and lib not in declared:
            problems.append(f"links {lib} (DT_NEEDED), which is neither the "
                            "C/C++ runtime nor in allowed_libs")

    # 3. Imports: only from the runtime or declared libraries, none from
    #    the core.
    core = _core_symbols()
    provided: set[str] = set()
    for lib in declared:
        found = _resolve_needed(lib, path, runpath)
        if found is not None:
            try:
                provided |= defined_symbols(found)
            except Exception:  # noqa: BLE001
                pass
    bad_core, bad_lib, bad_unversioned = [], [], []
    for imp in imports:
        if _matches(imp.name, allowed_symbols):
            continue
        if imp.version and (_matches(imp.library, SYSTEM_LIBS)
                            or imp.library in declared):
            continue  # bound to that library's version: cannot be the core
        if imp.name in core or imp.name.startswith(CORE_PREFIXES):
            bad_core.append(str(imp))
        elif imp.version:
            bad_lib.append(str(imp))
        elif not ((imp.weak and imp.name in TOOLCHAIN_SYMBOLS)
                  or imp.name in provided):
            bad_unversioned.append(imp.name)
    if bad_core:
        problems.append(f"imports {len(bad_core)} symbol(s) the core (or the "
                        f"Python hosting it) defines: {', '.join(bad_core)}; "
                        "everything the core offers arrives through the "
                        "DgHostApi table (link with -Wl,--no-undefined)")
    if bad_lib:
        problems.append(f"imports {len(bad_lib)} symbol(s) from libraries "
                        f"outside the C/C++ runtime and allowed_libs: "
                        f"{', '.join(bad_lib)}")
    if bad_unversioned:
        problems.append(f"imports {len(bad_unversioned)} unversioned "
                        "symbol(s) no declared library provides (the loader "
                        "would take them from whatever is loaded, maybe the "
                        f"core): {', '.join(sorted(bad_unversioned))}")

    # 4. The ABI it declares (only when the entry point exists).
    if ENTRY_SYMBOL in exports:
        info = read_plugin_info(path)
        if "error" in info:
            problems.append(info["error"])
        else:
            report.name, report.version = info["name"], info["version"]
            report.abi = (info["abi_major"], info["abi_minor"])
            report.min_host_minor = info["min_host_minor"]
            if info["abi_major"] != expect_major:
                problems.append(f"declares ABI major {info['abi_major']}, "
                                f"expected {expect_major}")
            if info["min_host_minor"] > expect_minor:
                problems.append(f"needs host ABI minor "
                                f"{info['min_host_minor']} "
                                f"(min_host_minor), newer than "
                                f"{expect_major}.{expect_minor}")
            if info["min_host_minor"] > info["abi_minor"]:
                problems.append(f"min_host_minor {info['min_host_minor']} is "
                                f"newer than the ABI minor it was built "
                                f"against ({info['abi_minor']})")
            if not info["name"]:
                problems.append("declares an empty plugin name")
            if not info["has_init"]:
                problems.append("declares no init function")
            if info["struct_size"] == 0:
                problems.append("DgPluginInfo.struct_size is 0")
    return report


def audit_plugin_so(path: str | os.PathLike, *, abi_major: int | None = None,
                    host_minor: int | None = None,
                    allowed_libs: Sequence[str] = (),
                    allowed_symbols: Sequence[str] = ()) -> PluginAudit:
    """Assert that a plugin library obeys the C ABI's linking rules.

    Checks, without loading ``dragon_core``:

    * the library exports exactly one dynamic symbol, ``ENTRY_SYMBOL``;
    * it links (``DT_NEEDED``) only the C/C++ runtime (:data:`SYSTEM_LIBS`)
      and ``allowed_libs``, never the core or Python;
    * it imports no symbol the core defines (the installed ``dragon_core``
      libraries' exports, and the core/Python name prefixes), and every
      other import is versioned by a runtime or allowed library, or defined
      by an allowed library found next to the plugin or on its RUNPATH;
    * its entry point (called in a child interpreter) declares ABI major
      ``abi_major``, a ``min_host_minor`` no newer than ``host_minor``, a
      name and an ``init`` function.

    Parameters
    ----------
    path : str or os.PathLike
        The plugin's ``.so``.
    abi_major : int, optional
        The expected ABI major; default the SDK's ``DG_ABI_MAJOR``.
    host_minor : int, optional
        The host ABI minor the plugin must run with; default the SDK's
        ``DG_ABI_MINOR``.
    allowed_libs : list of str
        Sonames (globs, e.g. ``"libdnnl.so.*"``) the plugin may link besides
        the C/C++ runtime.
    allowed_symbols : list of str
        Undefined symbol names (globs) to accept regardless.

    Returns
    -------
    PluginAudit
        The report (exports, imports, needed, declared name/version/ABI).

    Raises
    ------
    AssertionError
        Listing every problem and the offending symbols.
    """
    report = inspect_plugin_so(path, abi_major=abi_major,
                               host_minor=host_minor,
                               allowed_libs=allowed_libs,
                               allowed_symbols=allowed_symbols)
    if report.problems:
        raise AssertionError(report.message())
    return report
