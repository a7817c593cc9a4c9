"""Every standard op has a test (in this folder; graph-only ops in tests/graph)."""

from __future__ import annotations

from pathlib import Path


def test_every_core_op_is_tested():
    """Each op the core defines is named (as "OpName") by some op test."""
    import dragon_core as dg

    here = Path(__file__).parent
    files = sorted(here.glob("test_*.py")) + sorted((here.parent / "graph").glob("test_*.py"))
    text = "\n".join(p.read_text() for p in files if p.name != Path(__file__).name)
    core_ops = sorted(d["name"] for d in dg._C.list_ops()
                      if d["plugin"] == "core")
    assert len(core_ops) >= 72
    untested = [op for op in core_ops if f'"{op}"' not in text]
    assert not untested, f"ops without a test in tests/ops: {untested}"
