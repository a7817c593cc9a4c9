"""Every differentiable op has a gradient rule and a gradient test."""

import json
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

from dragon_core import _autograd


@lru_cache(maxsize=1)
def _differentiable_ops():
    """The differentiable ops a fresh ``import dragon_core`` registers (the
    shipped core and the installed plugins), not the ops other tests of this
    process defined with custom_op."""
    code = ("import json, dragon_core as dg; print(json.dumps([d['name'] for d in "
            "dg._C.list_ops() if not d['no_grad'] and not d['control']]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return sorted(json.loads(out.strip().splitlines()[-1]))


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
