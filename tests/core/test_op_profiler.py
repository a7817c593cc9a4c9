"""dragon_core.profiler: the eager op profiler (issue 21)."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dragon_core as dg


def _t(*shape, dtype="float32"):
    return dg.tensor(np.arange(np.prod(shape), dtype=np.float64).reshape(shape).astype(dtype))


def test_records_ops_operators_and_autocast_casts():
    a, b = _t(4, 8), _t(8, 2)
    with dg.profiler.profile() as prof:
        with dg.autocast("cpu"):
            y = a @ b                          # operator, autocast: 2 Casts + MatMul
        z = dg.ops.relu(y) + 1.0               # generated op + operator with a scalar
    ops = [e.op for e in prof.events]
    assert ops == ["Cast", "Cast", "MatMul", "Relu", "Add"]
    cast_a, cast_b, mm = prof.events[:3]
    assert cast_a.in_dtypes == ("float32",) and cast_a.out_dtypes == ("bfloat16",)
    assert cast_a.in_shapes == ((4, 8),) and cast_b.in_shapes == ((8, 2),)
    assert mm.in_dtypes == ("bfloat16", "bfloat16") and mm.out_dtypes == ("float32",)
    assert prof.events[4].in_shapes == ((4, 2), ())
    assert all(e.us > 0 and e.depth == 0 for e in prof.events)
    assert prof.count() == 5 and prof.count("Cast") == 2
    assert prof.total_us() == pytest.approx(sum(e.us for e in prof.events))
    assert z.dtype == dg.float32


def test_backward_and_optimizer_ops_are_recorded():
    w = _t(3, 2)
    w.requires_grad = True
    opt = dg.optim.SGD([w], lr=0.1)
    x = _t(4, 3)
    with dg.profiler.profile() as prof:
        loss = (x @ w).sum()
        loss.backward()
        opt.step()
    types = [e.op for e in prof.events]
    assert types[0] == "MatMul"
    # the MatMul rule's product for dW (x is a constant: no dx product)
    assert types.count("MatMul") == 2, types
    assert len(types) > 3
    by = dict((k, n) for k, n, _ in prof.by_type())
    assert by["MatMul"] == 2
    assert sum(n for _, n, _ in prof.by_type()) == prof.count()


def test_nested_dispatch_has_depth_and_is_not_double_counted():
    x = dg.ops.transpose(_t(3, 4), (1, 0))      # a strided view
    with dg.profiler.profile() as prof:
        dg.ops.reshape(x, [12])                 # the view op makes it dense first
    depths = [(e.op, e.depth) for e in prof.events]
    assert depths == [("Reshape", 0), ("Contiguous", 1)], depths
    outer, inner = prof.events
    assert inner.us <= outer.us
    assert prof.count() == 1 and prof.total_us() == outer.us
    assert [r[0] for r in prof.by_type()] == ["Reshape"]


def test_off_outside_the_block_and_no_nesting():
    a = _t(2, 2)
    with dg.profiler.profile() as prof:
        a + a
        with pytest.raises(RuntimeError, match="already running"):
            with dg.profiler.profile():
                pass
        a * a
    a - a
    assert [e.op for e in prof.events] == ["Add", "Mul"]
    with dg.profiler.profile() as again:
        pass
    assert again.events == []


def test_failed_op_leaves_no_record_and_block_exception_stops_profile():
    a, b = _t(2, 3), _t(4, 5)
    with pytest.raises(ValueError):
        with dg.profiler.profile() as prof:
            a + a
            dg.ops.matmul(a, b)                  # shape error: no record
    assert [e.op for e in prof.events] == ["Add"]
    with dg.profiler.profile() as prof2:        # the failed block's profile ended
        a + a
    assert prof2.count() == 1


def test_thread_local():
    a = _t(2, 2)
    done = threading.Event()

    def other():
        for _ in range(5):
            a * a
        done.set()
    with dg.profiler.profile() as prof:
        t = threading.Thread(target=other)
        t.start()
        t.join()
        a + a
    assert done.is_set()
    assert [e.op for e in prof.events] == ["Add"]


def test_compiled_function_ops_are_recorded():
    a = _t(3, 3)
    f = dg.function(lambda x: dg.ops.exp(x) * 2.0 + x)
    f(a)
    with dg.profiler.profile() as prof:
        f(a)
    assert prof.count() >= 1
    assert all(e.in_shapes and e.in_shapes[0] == (3, 3) for e in prof.events if e.depth == 0)


def test_table_lists_types():
    a = _t(2, 2)
    with dg.profiler.profile() as prof:
        for _ in range(3):
            a + a
        a * a
    text = prof.table()
    assert "| Add | 3 |" in text and "| Mul | 1 |" in text
    assert text.startswith("4 ops")
