"""The Python examples of the guides run: every ``>>>`` session in docs/*.md.

A fenced code block of a guide is a doctest when its info string is
``python``, ``pycon`` or ``doctest`` and its first non-blank line starts with
``>>>``; any other block (``python`` without prompts, ``text``, ``sh``, C++)
is prose and never executed, so a block that shows an error message as text
stays text. The sessions of one file share their names, in file order, as a
reader typing them into one interpreter would; each file starts afresh with
``dg`` (``dragon_core``) and ``np`` (NumPy) imported and the random seed 0.
Output compares with ELLIPSIS and NORMALIZE_WHITESPACE.
"""

from __future__ import annotations

import doctest
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
FENCE = re.compile(r"^(?P<indent>[ ]{0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
DOCTEST_LANGS = {"python", "py", "pycon", "doctest"}
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def doctest_blocks(text: str) -> list[tuple[int, str]]:
    """``(line number, source)`` of each ``>>>`` block of a Markdown text."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, indent = m.group("fence"), len(m.group("indent"))
        lang = m.group("info").strip().split(" ")[0].strip("{}").lower()
        closing = re.compile(rf"^[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$")
        start = i + 1
        j = start
        while j < len(lines) and not closing.match(lines[j]):
            j += 1
        body = [ln[indent:] if ln[:indent].strip() == "" else ln for ln in lines[start:j]]
        first = next((ln for ln in body if ln.strip()), "")
        if lang in DOCTEST_LANGS and first.lstrip().startswith(">>>"):
            blocks.append((start + 1, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def doc_files() -> list[Path]:
    return sorted(p for p in DOCS.glob("*.md") if doctest_blocks(p.read_text("utf-8")))


def test_the_collector_finds_the_guides_sessions():
    """The guides named in the issue carry their key examples as sessions."""
    names = {p.name for p in doc_files()}
    assert {"getting-started.md", "python-api.md", "ops.md", "nn.md",
            "graph.md"} <= names, names


def test_prose_blocks_are_not_executed():
    text = ("```text\n>>> raise SystemExit\n```\n"
            "```python\nraise SystemExit\n```\n"
            "````python\n>>> 1 + 1\n2\n````\n"
            "  ```pycon\n  >>> 2 * 3\n  6\n  ```\n")
    blocks = doctest_blocks(text)
    assert [src for _, src in blocks] == [">>> 1 + 1\n2\n", ">>> 2 * 3\n6\n"]


def run_file(path: Path) -> tuple[int, int, list[str]]:
    """Run the sessions of one guide: ``(examples, failures, reports)``."""
    import dragon_core as dg

    dg.manual_seed(0)
    globs = {"dg": dg, "np": np, "__name__": "__doc__"}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    reports = []
    for lineno, source in doctest_blocks(path.read_text("utf-8")):
        test = parser.get_doctest(source, globs, f"{path.name}:{lineno}", str(path), lineno - 1)
        out: list[str] = []
        runner.run(test, out=out.append, clear_globs=False)
        reports += out
        globs = test.globs
    return runner.tries, runner.failures, reports


_CHILD = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("doc_runner", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(mod)
tries, failures, reports = mod.run_file(Path(sys.argv[2]))
print("".join(reports))
print(f"@@RESULT@@ {tries} {failures}")
"""


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_guide_examples_run(path, tmp_path):
    """Each guide runs in a fresh interpreter (what other tests loaded or
    pinned in this process is not what a reader has), in an empty folder."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DRAGON_")}
    proc = subprocess.run([sys.executable, "-c", _CHILD, __file__, str(path)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=600)
    assert "@@RESULT@@" in proc.stdout, proc.stdout + proc.stderr
    report, result = proc.stdout.rsplit("@@RESULT@@", 1)
    tries, failures = map(int, result.split())
    assert failures == 0, report + proc.stderr
    assert tries > 0
