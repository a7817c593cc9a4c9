"""DG_OP_COLLECTIVE (ABI 1.3): a collective is never pruned, merged by CSE or
constant-folded, even when its result is unused or a twin computes the same."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_core import _C
from dragon_core._graph.passes.constant_fold import constant_fold
from dragon_core._graph.passes.cse import cse
from dragon_core._graph.passes.prune import prune
from dragon_core.custom_op import _same_as_first, _shape_wrapper

from .fixtures import graph, op_summary

DG_OP_COLLECTIVE = 1 << 4
NAME = "TestCollectiveAllReduce"


@pytest.fixture(scope="module")
def collective_op():
    mask = (1 << 10) - 1
    _C._define_py_op(NAME, "test_collective_all_reduce", "A fake all_reduce.", "test",
                     [("x", mask, 0)], [("y", mask, 0)], [], DG_OP_COLLECTIVE,
                     _shape_wrapper(NAME, _same_as_first, 1))
    yield NAME
    _C._retire_py_op(NAME)


def test_schema_reports_collective_and_stateful(collective_op):
    d = _C.op(collective_op).describe()
    assert d["collective"] and d["stateful"]
    assert not _C.op("Add").describe()["collective"]


def test_prune_keeps_an_unused_collective(collective_op):
    g = graph(inputs=[("x", "float32", (3,))],
              ops=[(collective_op, ["x"], ["r"], {}),     # result unused
                   ("Neg", ["x"], ["dead"], {}),          # dead
                   ("Exp", ["x"], ["y"], {})],
              outputs=["y"])
    assert op_summary(prune(g)) == [(collective_op, ["x"], ["r"]), ("Exp", ["x"], ["y"])]


def test_cse_and_fold_leave_twin_collectives_alone(collective_op):
    g = graph(constants=[("c", np.ones(3, np.float32))],
              ops=[(collective_op, ["c"], ["a"], {}),
                   (collective_op, ["c"], ["b"], {}),
                   ("Add", ["a", "b"], ["y"], {})],
              outputs=["y"])
    out = constant_fold(cse(g))
    assert [op.type for op in out.op].count(collective_op) == 2
