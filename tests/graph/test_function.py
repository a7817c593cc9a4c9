"""@dragon_core.function: tracing, caching, captured variables, autograd in graphs."""

import numpy as np
import pytest

import dragon_core as dg


def _rng():
    return np.random.default_rng(0)


def test_graph_equals_eager_and_caches_per_signature():
    def f(x, w):
        h = dg.ops.tanh(x @ w + 0.5)
        return dg.ops.softmax(h, axis=-1), dg.ops.sum(h * h)

    g = dg.function(f)
    rng = _rng()
    x, w = dg.tensor(rng.standard_normal((4, 3))), dg.tensor(rng.standard_normal((3, 5)))
    for a, b in zip(f(x, w), g(x, w)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    g(x, w)
    assert g.trace_count == 1
    x2 = dg.tensor(rng.standard_normal((7, 3)))          # new shape: retrace
    np.testing.assert_array_equal(g(x2, w)[1].numpy(), f(x2, w)[1].numpy())
    assert g.trace_count == 2
    g(dg.tensor(rng.standard_normal((4, 3)).astype(np.float32)),
      dg.tensor(rng.standard_normal((3, 5)).astype(np.float32)))   # new dtype
    assert g.trace_count == 3


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_every_opt_level_gives_the_same_result(level):
    rng = _rng()
    x = dg.tensor(rng.standard_normal((8, 6)))
    w = dg.tensor(rng.standard_normal((6, 6)))

    def f(x):
        h = x
        for _ in range(3):
            h = dg.ops.relu(h @ w) + h * 0.5 - dg.ops.exp(-h)
        return dg.ops.mean(h, [0]), h

    g = dg.function(f, opt_level=level)
    for a, b in zip(f(x), g(x)):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)
    # Run twice: planned buffers are reused across runs without corrupting
    # results returned earlier.
    first = g(x)[1].numpy().copy()
    g(x + 1.0)
    np.testing.assert_array_equal(g(x)[1].numpy(), first)
    assert g.get_graph(x).metadata["opt_level"] == str(level)


def test_captured_variables_are_read_at_every_run_and_assign_updates_them():
    w = dg.tensor(np.ones(3))

    @dg.function
    def step(g):
        w.assign(w - 0.5 * g)
        return dg.ops.sum(w)

    grad = dg.tensor(np.array([1.0, 2.0, 3.0]))
    out = step(grad)                      # the trace run does not apply twice
    np.testing.assert_allclose(w.numpy(), [0.5, 0.0, -0.5])
    assert out.item() == pytest.approx(0.0)
    step(grad)
    np.testing.assert_allclose(w.numpy(), [0.0, -1.0, -2.0])
    assert step.trace_count == 1


def test_training_step_with_gradient_tape_runs_as_one_graph():
    rng = _rng()
    x = dg.tensor(rng.standard_normal((16, 4)))
    y = dg.tensor(rng.standard_normal((16, 1)))
    w = dg.tensor(rng.standard_normal((4, 1)) * 0.1)
    w_eager = dg.tensor(w.numpy().copy())

    def step(x, y, w):
        with dg.GradientTape() as tape:
            tape.watch(w)
            loss = dg.ops.mean(dg.ops.square(x @ w - y))
        g = tape.gradient(loss, w)
        w.assign(w - 0.1 * g)
        return loss

    graph_step = dg.function(step)
    for _ in range(5):
        le = step(x, y, w_eager)
        lg = graph_step(x, y, w)
        assert le.item() == pytest.approx(lg.item(), rel=1e-12)
    np.testing.assert_allclose(w.numpy(), w_eager.numpy(), rtol=1e-12)
    types = [op.type for op in graph_step.get_graph(x, y, w).op]
    assert "MatMul" in types and types.count("MatMul") >= 2   # forward and backward


def test_random_ops_draw_fresh_seeds_every_run():
    @dg.function
    def noise(x):
        return x + dg.ops.random_uniform([4])

    x = dg.tensor(np.zeros(4, np.float32))
    a, b = noise(x).numpy(), noise(x).numpy()
    assert not np.array_equal(a, b)
    dg.manual_seed(7)
    c = noise(x).numpy()
    dg.manual_seed(7)
    np.testing.assert_array_equal(noise(x).numpy(), c)


def test_nested_functions_are_inlined_into_the_outer_graph():
    inner = dg.function(lambda x: x * 2.0)

    @dg.function
    def outer(x):
        return inner(x) + 1.0

    x = dg.tensor(np.arange(3.0))
    np.testing.assert_array_equal(outer(x).numpy(), np.arange(3.0) * 2 + 1)
    assert [op.type for op in outer.get_graph(x).op] == ["Mul", "Add"] or \
        "FusedElementwise" in [op.type for op in outer.get_graph(x).op]


def test_outputs_with_structure_and_constants():
    @dg.function
    def f(x):
        return {"double": x * 2.0, "pair": (x, dg.ops.neg(x)), "note": "hi"}

    x = dg.tensor(np.arange(3.0))
    out = f(x)
    assert out["note"] == "hi"
    np.testing.assert_array_equal(out["pair"][1].numpy(), -np.arange(3.0))
    np.testing.assert_array_equal(out["double"].numpy(), np.arange(3.0) * 2)


def test_input_signature_is_enforced():
    f = dg.function(lambda x: x + 1.0, input_signature=[((None, 3), "float64")])
    f(dg.tensor(np.zeros((5, 3))))
    with pytest.raises(TypeError, match="shape"):
        f(dg.tensor(np.zeros((5, 4))))
    with pytest.raises(TypeError, match="dtype"):
        f(dg.tensor(np.zeros((5, 3), np.float32)))


def test_a_failing_op_in_a_graph_names_the_opdef():
    @dg.function
    def f(x, idx):
        return dg.ops.gather(x, idx)

    x = dg.tensor(np.arange(4.0))
    f(x, dg.tensor(np.array([0, 1])))
    with pytest.raises(dg.errors.OutOfRangeError) as info:
        f(x, dg.tensor(np.array([0, 9])))
    msg = str(info.value)
    assert "graph 'f'" in msg and "Gather_0" in msg and "float64[4]" in msg


@pytest.mark.parametrize("threads", [1, 2, 4])
def test_parallel_executor_matches_sequential(threads):
    rng = _rng()
    ws = [dg.tensor(rng.standard_normal((8, 8))) for _ in range(6)]

    def f(x):
        # Six independent branches joined at the end: room for concurrency.
        branches = [dg.ops.tanh(x @ w) * 0.5 + dg.ops.sigmoid(x) for w in ws]
        return dg.ops.sum(dg.ops.stack(branches)), branches[3]

    x = dg.tensor(rng.standard_normal((8, 8)))
    par = dg.function(f, parallel=threads)
    for _ in range(3):
        for a, b in zip(f(x), par(x)):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12)


def test_parallel_executor_reports_the_failing_op():
    @dg.function(parallel=2)
    def f(x, idx):
        return dg.ops.gather(x, idx) + dg.ops.exp(x)[0]

    x = dg.tensor(np.arange(4.0))
    f(x, dg.tensor(np.array([1])))                 # traced with a valid index
    with pytest.raises(dg.errors.OutOfRangeError, match="Gather_0"):
        f(x, dg.tensor(np.array([9])))


@pytest.mark.parametrize("parallel", [0, 2])
def test_profile_times_every_op_of_the_optimised_graph(parallel):
    """Function.profile runs the plan as a call does (state updates too) and
    reports one row per op of the optimised graph, each called once a run."""
    rng = _rng()
    w = dg.tensor(rng.standard_normal((3, 5)))
    x = dg.tensor(rng.standard_normal((4, 3)))

    @dg.function(parallel=parallel)
    def step(x):
        y = dg.ops.matmul(x, w)
        w.assign(w * 0.5)
        return dg.ops.sum(dg.ops.tanh(y))

    w0 = w.numpy().copy()
    prof = step.profile(x, runs=7, warmup=2)
    np.testing.assert_allclose(w.numpy(), w0 * 0.5 ** 9)   # 9 real runs
    graph = step.get_graph(x)
    assert [r["name"] for r in prof.rows] == [op.name for op in graph.op]
    assert [r["type"] for r in prof.rows] == [op.type for op in graph.op]
    assert all(r["calls"] == 7 for r in prof.rows)
    assert all(r["total_us"] > 0 for r in prof.rows)
    assert abs(sum(r["share"] for r in prof.rows) - 1.0) < 1e-9
    assert 0 < prof.ops_us <= prof.wall_us
    text = str(prof)
    assert "MatMul" in text and "by type:" in text
    # Profiling is off again afterwards: a new profile starts from zero.
    again = step.profile(x, runs=1, warmup=0)
    assert all(r["calls"] == 1 for r in again.rows)


def test_profile_rejects_bad_counts():
    f = dg.function(lambda x: x + 1.0)
    with pytest.raises(ValueError, match="runs must be >= 1"):
        f.profile(dg.tensor(np.ones(2)), runs=0)


def test_profile_divides_by_every_timed_run_when_threads_share_the_plan():
    """Runs of a plan never overlap; runs another thread makes while one
    profiles are timed too, and the per-run means divide by all of them."""
    import threading
    f = dg.function(lambda x: dg.ops.tanh(x) * 2.0)
    x = dg.tensor(np.ones(1000))
    f(x)
    stop = threading.Event()
    other = [0]

    def loop():
        while not stop.is_set():
            f(x)
            other[0] += 1
    t = threading.Thread(target=loop)
    t.start()
    try:
        prof = f.profile(x, runs=200, warmup=0)
    finally:
        stop.set()
        t.join()
    assert prof.runs >= 200
    assert all(r["calls"] == prof.runs for r in prof.rows)
    for r in prof.rows:
        assert r["mean_us"] == pytest.approx(r["total_us"] / prof.runs)


def test_a_returned_constant_is_a_copy():
    """A tensor created inside the traced function is a constant of the
    graph; returning it hands the caller a copy, so changing the result
    (assign, an in-place write) never changes the next call."""
    w_np = np.arange(4.0)

    @dg.function
    def f(x):
        w = dg.tensor(w_np)
        return x * w, w

    x = dg.tensor(np.ones(4))
    y0, w_out = f(x)
    w_out.assign(dg.tensor(np.zeros(4)))
    y1, w_again = f(x)
    np.testing.assert_array_equal(y1.numpy(), y0.numpy())
    w_again.numpy()[:] = -1.0
    np.testing.assert_array_equal(f(x)[0].numpy(), w_np)


def test_frozen_parameters_are_copied_at_trace_time():
    w = dg.tensor(np.ones(3))
    f = dg.function(lambda t: t * w, freeze=True)
    x = dg.tensor(np.full(3, 2.0))
    np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0, 2.0])
    w.numpy()[:] = 5.0                       # an in-place write
    np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0, 2.0])
    w.assign(dg.tensor(np.zeros(3)))         # a rebind
    np.testing.assert_array_equal(f(x).numpy(), [2.0, 2.0, 2.0])


def test_unknown_pass_names_in_the_environment_only_warn(monkeypatch):
    """DRAGON_DISABLE_PASSES is machine-wide and may name an absent
    plugin's pass: a warning; disable_passes= in code stays an error."""
    from dragon_core._graph import passes
    monkeypatch.setenv("DRAGON_DISABLE_PASSES", "cse,no_such_pass_xyz")
    passes._warned_env.discard("no_such_pass_xyz")
    with pytest.warns(UserWarning, match="no_such_pass_xyz"):
        g = dg.function(lambda x: x + 1.0)
        np.testing.assert_array_equal(g(dg.tensor(np.ones(2))).numpy(), [2.0, 2.0])
    assert "cse" not in g.get_graph(dg.tensor(np.ones(2))).metadata["passes"].split(",")
    with pytest.raises(ValueError, match="no_such_pass_xyz"):
        dg.function(lambda x: x + 1.0, disable_passes="no_such_pass_xyz")(
            dg.tensor(np.ones(2)))
