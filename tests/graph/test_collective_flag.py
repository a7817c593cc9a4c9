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


def test_eager_collective_runs_without_the_gil_and_a_python_kernel_gets_it_back(
        collective_op):
    """The eager call releases the GIL around a collective; a Python kernel
    (which re-acquires it) still runs, and another thread makes progress
    while the kernel waits."""
    import threading

    import dragon_core as dg
    from dragon_core.custom_op import _register_kernel

    started, release = threading.Event(), threading.Event()

    def kernel(x):
        started.set()
        release.wait(5)
        return x * 2

    _register_kernel(collective_op, kernel, ("float32",), 0, "test", "fake_ar", ["y"])
    out = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "y", _C.call(_C.op(collective_op), (dg.tensor([1.0, 2.0]),), (), None)))
    t.start()
    assert started.wait(5)
    release.set()
    t.join(5)
    y = out["y"]
    y = y[0] if isinstance(y, (tuple, list)) else y
    assert y.tolist() == [2.0, 4.0]


def test_parallel_executor_keeps_collectives_in_graph_order(collective_op):
    import dragon_core as dg
    from dragon_core.custom_op import _register_kernel

    order = []

    def kernel(x):
        order.append(float(x.reshape(-1)[0]))
        return x + 0

    _register_kernel(collective_op, kernel, ("float64",), 1, "test", "fake_ar_order", ["y"])

    def call(x):
        y = _C.call(_C.op(collective_op), (x,), (), None)
        return y[0] if isinstance(y, (tuple, list)) else y

    @dg.function(parallel=2)
    def f(a, b):
        slow = dg.ops.exp(dg.ops.tanh(dg.ops.exp(a)))   # a's collective waits for this
        return call(slow * 0 + 1.0), call(b)

    a = dg.tensor(np.zeros(20000))
    b = dg.tensor(np.full(3, 2.0))
    f(a, b)  # traces (the trace runs the ops eagerly)
    for _ in range(10):
        order.clear()
        f(a, b)
        assert order == [1.0, 2.0], order


CORE_COLLECTIVES = ["CollectiveAllReduce", "CollectiveBroadcast", "CollectiveAllGather",
                    "CollectiveReduceScatter", "CollectiveAllToAll"]


@pytest.mark.parametrize("name", CORE_COLLECTIVES)
def test_core_collectives_are_flagged_and_never_pruned_or_merged(name):
    """The core's collective schemas (dragon_core/src/ops/collective.cc; the
    kernels are tested across ranks in tests/distributed)."""
    d = _C.op(name).describe()
    assert d["collective"] and d["stateful"] and d["plugin"] == "core"
    g = graph(inputs=[("x", "float32", (4,))],
              ops=[(name, ["x"], ["a"], {}), (name, ["x"], ["b"], {}),   # twins, unused
                   ("Exp", ["x"], ["y"], {})],
              outputs=["y"])
    out = prune(cse(g))
    assert [op.type for op in out.op].count(name) == 2
