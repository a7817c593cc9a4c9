"""The documentation site builds with no warning (``make docs``, strictly).

Runs ``sphinx-build -W --keep-going`` over docs/ in a child process, against
the installed packages, into a temporary folder: a docstring that is not
valid reStructuredText, a broken link between guides, a guide missing from
the site or an op whose schema the op reference cannot render fails here
with Sphinx's own message.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_site_builds_without_warnings(tmp_path):
    out = tmp_path / "html"
    proc = subprocess.run(
        [sys.executable, "-m", "sphinx", "-b", "html", "-W", "--keep-going", "-q",
         "-d", str(tmp_path / "doctrees"), str(DOCS), str(out)],
        capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # Every guide is on the site, and the generated references are complete.
    for md in DOCS.glob("*.md"):
        assert (out / f"{md.stem}.html").is_file(), md.name
    ops_page = (out / "reference" / "ops.html").read_text("utf-8")
    # The ops a fresh interpreter registers, as sphinx's child process sees
    # them (ops other tests of this process defined are not on the site).
    names = subprocess.run(
        [sys.executable, "-c", "import json, dragon_core as dg; "
         "print(json.dumps([r['name'] for r in dg._C.list_ops()]))"],
        capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    for name in json.loads(names):
        assert f'id="op-{name.lower()}"' in ops_page, name
    assert "cpu_eigen" in ops_page
    api_page = (out / "reference" / "api" / "dragon_core.nn.html").read_text("utf-8")
    assert 'id="dragon_core.nn.Linear"' in api_page
