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
import re
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
        start = i + 1
        j = start
        while j < len(lines) and not re.match(rf"^[ ]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}\s*$",
                                              lines[j]):
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


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.name)
def test_guide_examples_run(path, tmp_path, monkeypatch):
    import dragon_core as dg

    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    dg.manual_seed(0)
    globs = {"dg": dg, "np": np, "__name__": "__doc__"}
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    failures = []
    for lineno, source in doctest_blocks(path.read_text("utf-8")):
        test = parser.get_doctest(source, globs, f"{path.name}:{lineno}", str(path), lineno - 1)
        out: list[str] = []
        result = runner.run(test, out=out.append, clear_globs=False)
        if result.failed:
            failures.append("".join(out))
        globs = test.globs
    assert not failures, "\n".join(failures)
    assert runner.tries > 0
