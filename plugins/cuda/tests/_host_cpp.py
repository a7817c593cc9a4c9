"""Build and run a plain C++ test program over the cuda plugin's host-side
headers (``plugins/cuda/src``): the index, chunk-table, axis-merging and
cuDNN-plan logic the kernels share is checked where there is no GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
#: The SDK's C headers (dragon/elementwise.h, the op table) in this checkout.
SDK_INCLUDE = Path(__file__).resolve().parents[3] / "sdk" / "include"


def run_program(tmp_path: Path, name: str, program: str, flags=("-O1",),
                timeout: float = 120, includes=(), units=None) -> str:
    """Compile ``program`` (warnings are errors) with the host compiler
    (``$CXX``, else ``c++``/``g++``; the test skips without one), run it, and
    check that it exits 0 with a last line ``OK``; returns its stdout.
    ``includes``: more include directories (after ``src``). ``units``: more
    translation units linked in, {file stem: source text} (what one object
    file of the plugin shares with another, e.g. a template's statics)."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no host C++ compiler (set CXX) to build the host-side test")
    src = tmp_path / f"{name}.cc"
    src.write_text(program)
    sources = [src]
    for stem, text in (units or {}).items():
        unit = tmp_path / f"{stem}.cc"
        unit.write_text(text)
        sources.append(unit)
    exe = tmp_path / name
    build = subprocess.run([cxx, "-std=c++17", *flags, "-Wall", "-Wextra", "-Werror", f"-I{SRC}",
                            *(f"-I{d}" for d in includes), *map(str, sources), "-o", str(exe)],
                           capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout[-2000:]
    return run.stdout
