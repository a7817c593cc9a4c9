"""Helpers shared by the plugin-system tests (imported by conftest and tests).

Kept in a module with a distinctive name, put on ``sys.path`` by
``conftest.py``, so that it imports the same way under every pytest import
mode.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: Fixture name -> library file built by fixtures/CMakeLists.txt.
FIXTURE_LIBS = {
    "toy": "libtoy.so",
    "custom_op": "libcustom_op.so",
    "pin_probe": "libpin_probe.so",
    "dup_claim_a": "libdup_claim_a.so",
    "dup_claim_b": "libdup_claim_b.so",
    "broken_init": "libbroken_init.so",
    "abi_major": "libabi_major.so",
    "newer_minor": "libnewer_minor.so",
    "missing_symbol": "libmissing_symbol.so",
    "missing_dep": "libmissing_dep.so",
    "abi_1_0": "libabi_1_0.so",
    "call_site": "libcall_site.so",
    "ctor_marker_ok": "libctor_marker_ok.so",
    "ctor_marker_new_minor": "libctor_marker_new_minor.so",
    "ctor_marker_new_major": "libctor_marker_new_major.so",
    "toy_async": "libtoy_async.so",
    "layout_probe": "liblayout_probe.so",
}

#: Fixtures built with dragon_add_plugin that must pass the export/import
#: audit (missing_symbol is not a plugin; missing_dep needs a foreign .so).
WELL_FORMED = ("toy", "custom_op", "pin_probe", "dup_claim_a", "dup_claim_b",
               "broken_init", "abi_major", "newer_minor", "abi_1_0", "call_site",
               "ctor_marker_ok", "ctor_marker_new_minor", "ctor_marker_new_major",
               "toy_async", "layout_probe")

#: The init failure message of fixtures/broken_init.
BROKEN_INIT_MESSAGE = ("broken_init: the frobnicator board did not answer "
                       "(simulated init failure)")


# ------------------------------------------------- fake installations

@dataclass(frozen=True)
class Entry:
    """One entry point of a fake installed distribution.

    ``kind`` is ``"library"`` (``plugin_library()`` returns ``path``),
    ``"import_error"`` (importing the module raises ImportError with
    ``message``), ``"missing_file"`` (``plugin_library()`` returns
    ``path``, which does not exist) or ``"python"`` (the module's source is
    ``body``). ``module`` and ``dist`` override the module and distribution
    names :func:`write_dist` derives from the entry-point name.
    """

    kind: str
    path: Path | None = None
    message: str = ""
    body: str = ""
    module: str = ""
    dist: str = ""


def library(path: Path) -> Entry:
    """An entry point whose module points at a plugin library."""
    return Entry("library", Path(path))


def missing_file(path: Path) -> Entry:
    """An entry point whose ``plugin_library()`` names a file that is gone."""
    return Entry("missing_file", Path(path))


def import_error(message: str) -> Entry:
    """An entry point whose module raises ImportError when imported."""
    return Entry("import_error", message=message)


def python_module(body: str, *, module: str = "", dist: str = "") -> Entry:
    """An entry point whose module's source is ``body``."""
    return Entry("python", body=body, module=module, dist=dist)


def touch_on_import(marker: Path, then: str = "") -> str:
    """Module source that appends its ``__name__`` to ``marker`` when
    imported (so a test sees whether it ran), followed by ``then``."""
    return (f"with open({str(marker)!r}, 'a') as _f:\n"
            f"    _f.write(__name__ + '\\n')\n" + then)


def write_dist(site: Path, ep_name: str, entry: Entry) -> None:
    """Install one fake distribution with entry point ``ep_name`` in ``site``.

    Writes ``dragon_test_<ep>-0.1.dist-info/{METADATA,entry_points.txt}`` and
    the module ``dragon_test_ep_<ep>`` its entry point names.
    """
    module = entry.module or f"dragon_test_ep_{ep_name}"
    dist = entry.dist or f"dragon-test-{ep_name.replace('_', '-')}"
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n"
        f"Summary: test fixture entry point {ep_name}\n")
    (info / "entry_points.txt").write_text(
        f"[dragon_core.plugins]\n{ep_name} = {module}\n")
    if entry.kind == "import_error":
        body = f"raise ImportError({entry.message!r})\n"
    elif entry.kind in ("library", "missing_file"):
        body = (f"def plugin_library():\n"
                f"    return {str(entry.path)!r}\n")
    elif entry.kind == "python":
        body = entry.body
    else:
        raise ValueError(f"unknown entry kind {entry.kind!r}")
    (site / f"{module}.py").write_text(
        f'"""Fake plugin module for entry point {ep_name}."""\n' + body)


# --------------------------------------------------- child interpreters

def clean_env(site: Path | None = None, **extra: str) -> dict[str, str]:
    """The current environment without DRAGON_* settings, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAGON_")}
    if site is not None:
        env["PYTHONPATH"] = os.pathsep.join(
            [str(site)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


def describe(proc: subprocess.CompletedProcess) -> str:
    """A child process's exit code and output, for assertion messages."""
    return (f"exit code {proc.returncode}\n--- stdout ---\n{proc.stdout}"
            f"\n--- stderr ---\n{proc.stderr}")


#: Child-process code printing ``dg.plugins.list()`` as one JSON line.
DUMP_PLUGINS = """
import json as _json
import dragon_core as _dg
print("@@PLUGINS@@" + _json.dumps([
    {k: (None if getattr(p, k, None) is None else str(getattr(p, k)))
     for k in ("name", "version", "abi", "state", "error", "path", "dist")}
    for p in _dg.plugins.list()]))
"""


def parse_plugins(stdout: str) -> list[dict]:
    """The plugin list a child printed with :data:`DUMP_PLUGINS`."""
    for line in stdout.splitlines():
        if line.startswith("@@PLUGINS@@"):
            return json.loads(line[len("@@PLUGINS@@"):])
    raise AssertionError(f"the child printed no plugin list:\n{stdout}")


def find_plugin(plugins, name: str):
    """The entry of ``plugins`` (dicts or PluginInfo) called ``name``."""
    def get(p, k):
        return p.get(k) if isinstance(p, dict) else getattr(p, k, None)
    hits = [p for p in plugins if get(p, "name") == name]
    assert len(hits) == 1, (f"expected one plugin named {name!r}, got "
                            f"{len(hits)} in {plugins}")
    return hits[0]
