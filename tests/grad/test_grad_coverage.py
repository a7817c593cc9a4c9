"""Every differentiable op has a gradient rule and a gradient test."""

from pathlib import Path

import dragon_core as dg
from dragon_core import _autograd


def _differentiable_ops():
    return sorted(d["name"] for d in dg._C.list_ops()
                  if not d["no_grad"] and not d["control"])


def test_every_differentiable_op_has_a_rule():
    missing = [op for op in _differentiable_ops() if not _autograd.has_gradient(op)]
    assert not missing, f"differentiable ops without a gradient rule: {missing}"


def test_every_rule_is_checked_by_a_test():
    here = Path(__file__).parent
    text = "\n".join(p.read_text() for p in here.glob("test_*.py")
                     if p.name != Path(__file__).name)
    text += (here.parent / "graph" / "test_control_flow.py").read_text()
    # Ops a plugin defines are tested by the tests it ships.
    text += "\n".join(p.read_text() for p in
                      (here.parents[1] / "plugins").glob("*/tests/test_*.py"))
    untested = [op for op in _differentiable_ops() if f'"{op}"' not in text]
    assert not untested, f"gradient rules without a test in tests/grad: {untested}"
