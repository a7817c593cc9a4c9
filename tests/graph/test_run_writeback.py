"""The Python side of a compiled run (issue 21, session casts): the state
locks a training step takes, and the write-back of its values (variables
rebound, ``.grad`` set) checked in one signature comparison."""

import threading

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph.state import RWLock


def _adam_step(n_params=4, seed=0):
    rng = np.random.default_rng(seed)
    params = [dg.tensor(rng.standard_normal((3, 5)).astype(np.float32)).requires_grad_()
              for _ in range(n_params)]
    opt = dg.optim.Adam(params, lr=1e-2)
    x = dg.tensor(rng.standard_normal((2, 3)).astype(np.float32))

    def step(x):
        opt.zero_grad()
        loss = dg.tensor(np.float32(0.0))
        for p in params:
            loss = loss + ((x @ p) ** 2).sum()
        loss.backward()
        opt.step()
        return loss
    return params, opt, x, step


def test_training_step_takes_one_state_lock():
    """Parameters, moments and step counters assigned by one compiled step
    share one lock: one acquire per run, not one per variable."""
    params, _, x, step = _adam_step()
    f = dg.function(step)
    f(x)
    (entry,) = f._cache.values()
    assert len(entry.state_targets) >= 3 * len(params)
    plan = entry.guard._locks()
    assert len(plan) == 1 and plan[0][2] is True


def test_compiled_step_matches_eager_grads_and_params():
    """The write-back sets the same ``.grad`` values and parameters as the
    eager step, bit for bit, over several steps."""
    p_e, _, x_e, step_e = _adam_step(seed=3)
    p_c, _, x_c, step_c = _adam_step(seed=3)
    f = dg.function(step_c)
    for _ in range(4):
        le = step_e(x_e)
        lc = f(x_c)
        np.testing.assert_array_equal(le.numpy(), lc.numpy())
        for a, b in zip(p_e, p_c):
            np.testing.assert_array_equal(a.numpy(), b.numpy())
            assert b.grad is not None and b.grad.dtype == b.dtype
            assert tuple(b.grad.shape) == tuple(b.shape)
            np.testing.assert_array_equal(a.grad.numpy(), b.grad.numpy())


def test_graph_touching_part_of_a_group_serializes_with_it():
    """``a`` and ``b`` share the lock of the step that first assigned them;
    a second function assigning ``b`` and a new ``c``, and a third reading
    ``a`` and ``c``, run from many threads with no update lost and no
    deadlock, and the reader always sees a consistent state."""
    a = dg.tensor(np.float64(0.0))
    b = dg.tensor(np.float64(0.0))
    c = dg.tensor(np.float64(0.0))

    @dg.function
    def f1():
        a.assign(a + 1.0)
        b.assign(b + 1.0)

    @dg.function
    def f2():
        c.assign(c + 1.0)
        b.assign(b + 1.0)

    seen = []

    @dg.function
    def reader():
        return a + 0.0, b + 0.0, c + 0.0

    f1()
    f2()
    reader()
    (e2,) = f2._cache.values()
    (er,) = reader._cache.values()
    assert [ex for _, _, ex in e2.guard._locks()] == [True, True]
    assert [ex for _, _, ex in er.guard._locks()] == [False, False]
    orders = [o for o, _, _ in e2.guard._locks()]
    assert orders == sorted(orders)

    def read():
        va, vb, vc = (float(t) for t in reader())
        seen.append((va, vb, vc))

    errors = []
    fns = [f1, f2, read, f1, f2, read]
    calls = 60
    start = threading.Barrier(len(fns))

    def work(fn):
        try:
            start.wait()
            for _ in range(calls):
                fn()
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(fn,)) for fn in fns]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert float(a) == 1 + 2 * calls
    assert float(c) == 1 + 2 * calls
    assert float(b) == 2 + 4 * calls
    for va, vb, vc in seen:
        assert vb == va + vc     # every run of f1 / f2 seen whole or not at all


def test_waiting_writer_holds_back_new_readers():
    lock = RWLock()
    lock.acquire(False)                 # a reader holds it
    order = []

    def writer():
        lock.acquire(True)
        order.append("w")
        lock.release(True)

    def reader():
        lock.acquire(False)
        order.append("r")
        lock.release(False)

    tw = threading.Thread(target=writer)
    tw.start()
    while lock._writers_waiting == 0:   # the writer is queued
        tw.join(0.001)
    tr = threading.Thread(target=reader)
    tr.start()
    while lock._waiting < 2:            # the new reader waits behind it
        tr.join(0.001)
    assert order == []
    lock.release(False)
    tw.join()
    tr.join()
    assert order == ["w", "r"]
    assert lock._readers == 0 and not lock._writer and lock._waiting == 0


def test_computed_value_of_wrong_shape_rebinds_nothing():
    """The one-signature check of the written values still finds a value
    whose shape is not its variable's, names both, and rebinds nothing."""
    a = dg.tensor(np.zeros(2, np.float32))
    b = dg.tensor(np.zeros(3, np.float32))

    @dg.function
    def step(d):
        a.assign(a + d)
        b.assign(b + d)
        return d

    one = dg.tensor(np.float32(1))
    step(one)
    (entry,) = step._cache.values()
    real = entry.compiled

    class Wrong:
        graph = real.graph
        plan = real.plan

        def run(self, feeds):
            outs = real.run(feeds)
            outs[-1] = dg.tensor(np.zeros(4, np.float32))   # b's value, wrong shape
            return outs

    entry.compiled = Wrong()
    try:
        with pytest.raises(dg.errors.InvalidArgumentError,
                           match=r"internal error.*shape \(4,\).*shape \(3,\)"):
            step(one)
    finally:
        entry.compiled = real
    # the graph's state_inplace update may have written a's storage; b kept
    # its object and shape, and neither was rebound to the wrong value
    assert tuple(b.shape) == (3,)
    step(one)
    assert tuple(b.shape) == (3,)
