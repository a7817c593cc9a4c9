"""The ONNX backend node suite through ``dragon_core.onnx.load``.

Every node case of the installed onnx package runs (in child processes, so
a crash cannot end the test run; see ``node_suite.py``). The cases that
passed when the baseline was recorded must all still pass, and no case may
crash; new passes are reported so the baseline can be raised with
``python tests/onnx/node_suite.py --update-baseline``.
"""

from __future__ import annotations

import json
import os
import sys

import pytest

pytest.importorskip("onnx")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import node_suite  # noqa: E402


def test_node_suite_pass_count_never_drops():
    with open(node_suite.BASELINE) as f:
        baseline = json.load(f)
    results = node_suite.run_isolated("dragon")
    crashed = sorted(k for k, r in results.items() if r["status"] == "crash")
    assert not crashed, f"node cases crashed the process: {crashed}"
    passing = {k for k, r in results.items() if r["status"] == "pass"}
    lost = sorted(set(baseline["passing"]) - passing)
    details = "\n".join(f"  {k}: {results.get(k, {}).get('status', 'missing')} "
                        f"{results.get(k, {}).get('msg', '')}" for k in lost[:40])
    assert not lost, (f"{len(lost)} node cases recorded as passing now fail "
                      f"({len(passing)} pass, baseline {baseline['pass_count']}):\n{details}")
    assert len(passing) >= baseline["pass_count"]
    gained = len(passing) - baseline["pass_count"]
    if gained:
        print(f"\n{gained} more node cases pass than recorded: run "
              "python tests/onnx/node_suite.py --update-baseline")
