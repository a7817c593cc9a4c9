"""Compiled functions with state updates, called from many threads
(issue 13, item 8): no update is lost, and pure graphs take no lock."""

import threading

import numpy as np
import pytest

import dragon_core as dg

THREADS = 8
CALLS = 250


def _hammer(fns, calls=CALLS, threads=THREADS, barrier=True):
    """Call ``fns[i % len(fns)]()`` ``calls`` times on each of ``threads``
    threads, all released at once; re-raises the first failure."""
    errors = []
    start = threading.Barrier(threads) if barrier else None

    def work(i):
        try:
            if start is not None:
                start.wait()
            fn = fns[i % len(fns)]
            for _ in range(calls):
                fn()
        except BaseException as e:   # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]


def test_eight_threads_one_counter_function_lose_no_update():
    ctr = dg.tensor(np.float32(0.0))
    d = dg.tensor(np.float32(1.0))

    @dg.function
    def inc(d):
        ctr.assign(ctr + d)
        return ctr

    # Not warmed up: the first calls trace concurrently, too.
    _hammer([lambda: inc(d)])
    assert float(ctr) == THREADS * CALLS
    assert inc.trace_count == 1


def test_two_functions_updating_one_variable_serialize():
    ctr = dg.tensor(np.int64(0))

    @dg.function
    def add_one():
        ctr.assign(ctr + 1)

    @dg.function
    def add_ten():
        ctr.assign(ctr + 10)

    add_one()
    add_ten()
    _hammer([add_one, add_ten])
    assert int(ctr) == 11 + (THREADS // 2) * CALLS * 11


def test_readers_see_all_of_a_run_or_none_of_it():
    a = dg.tensor(np.float64(0.0))
    b = dg.tensor(np.float64(0.0))
    seen = []

    @dg.function
    def step():
        a.assign(a + 1.0)
        b.assign(b + 1.0)

    @dg.function
    def diff():
        return a - b

    step()
    diff()

    def read():
        seen.append(float(diff()))

    _hammer([step, read])
    assert float(a) == float(b) == 1 + (THREADS // 2) * CALLS
    assert len(seen) == (THREADS // 2) * CALLS
    assert set(seen) == {0.0}


def test_optimizer_step_from_threads_matches_sequential_steps():
    """A compiled SGD step (state: the weights) from 8 threads equals the
    same number of steps run one after another (a constant gradient makes
    the order irrelevant)."""
    w = dg.tensor(np.zeros(3, np.float32)).requires_grad_()
    opt = dg.optim.SGD([w], lr=0.01)
    g = dg.tensor(np.array([1.0, -2.0, 0.5], np.float32))

    @dg.function
    def step(g):
        opt.step([g])

    _hammer([lambda: step(g)], calls=50)
    np.testing.assert_allclose(w.numpy(), -0.01 * THREADS * 50 * g.numpy(), rtol=1e-4)


def test_pure_graphs_take_no_state_lock():
    x = dg.tensor(np.arange(6, dtype=np.float32))
    w = dg.tensor(np.float32(2.0))
    v = dg.tensor(np.float32(0.0))

    @dg.function
    def pure(x):
        return x * w

    @dg.function
    def writes():
        v.assign(v + 1.0)

    pure(x)
    writes()
    (entry_pure,) = pure._cache.values()
    (entry_writes,) = writes._cache.values()
    assert entry_pure.guard._locks() == ()
    assert [exclusive for _, _, exclusive in entry_writes.guard._locks()] == [True]
    out = []
    _hammer([lambda: out.append(pure(x).numpy())], calls=50)
    for o in out:
        np.testing.assert_array_equal(o, np.arange(6, dtype=np.float32) * 2)


def test_failed_write_back_updates_no_variable():
    """A run whose write-back cannot happen updates none of the variables
    (all or nothing), with an error that says why."""
    a = dg.tensor(np.zeros(2, np.float32))
    b = dg.tensor(np.zeros(3, np.float32))

    @dg.function
    def step(d, v):
        a.assign(a + d)
        b.assign(v)
        return d

    one, v = dg.tensor(np.float32(1)), dg.tensor(np.full(3, 7, np.float32))
    step(one, v)
    assert a.tolist() == [1.0, 1.0] and b.tolist() == [7.0] * 3
    b.data = dg.tensor(np.zeros(5, np.float32))      # b changes shape behind the graph
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"shape changed after tracing"):
        step(one, v)
    assert a.tolist() == [1.0, 1.0]                   # a kept its value
    assert b.tolist() == [0.0] * 5
