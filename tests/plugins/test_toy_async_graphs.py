"""Graph capture of compiled functions (ABI 1.5, CUDA Graphs' core logic) on
"toy_async" (fixtures/toy_async), which records the closures issued on a
capturing stream and replays them with the same raw pointers -- exactly
what a CUDA Graph does with addresses. Each stream runs its work late (a
random delay), so a replay that reads a buffer someone else reused, or an
output handed out and overwritten later, gives wrong numbers here.

The GPU counterpart is plugins/cuda/tests/test_cuda_graphs.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_toy_async import _mlp_step, _mlp_step_np

DEV = "toy_async"


def _t(dg, a):
    return dg.tensor(np.asarray(a, dtype=np.float32)).to(DEV)


@pytest.fixture
def ta(dg, toy_async):
    return dg


def _mlp_data(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    t = rng.standard_normal((16, 4)).astype(np.float32)
    w1 = (rng.standard_normal((8, 12)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((12, 4)) * 0.3).astype(np.float32)
    return x, t, w1, w2


def _train(ta, cuda_graph, steps, seed=1):
    x, t, w1, w2 = _mlp_data(seed)
    X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
    L1, L2 = _t(ta, np.full(w1.shape, 0.01)), _t(ta, np.full(w2.shape, 0.01))

    @ta.function(cuda_graph=cuda_graph)
    def step(x, t, w1, w2, l1, l2):
        return _mlp_step(ta, x, t, w1, w2, l1, l2)

    dys = []
    for _ in range(steps):
        W1, W2, dy = step(X, T, W1, W2, L1, L2)
        dys.append(dy)
    status = step.cuda_graph_status(X, T, W1, W2, L1, L2)
    return step, [W1.cpu().numpy(), W2.cpu().numpy()], [d.cpu().numpy() for d in dys], status


def test_training_step_is_recorded_then_replayed_and_matches_numpy(ta):
    steps = 12
    step, (w1_got, w2_got), dys, st = _train(ta, True, steps)
    x, t, w1, w2 = _mlp_data(1)
    for i in range(steps):
        w1, w2, dy = _mlp_step_np(x, t, w1, w2, 0.01)
        # Every step's output is its own: later replays never overwrite it.
        np.testing.assert_allclose(dys[i], dy, rtol=1e-4, atol=1e-4, err_msg=f"step {i}")
    np.testing.assert_allclose(w1_got, w1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(w2_got, w2, rtol=1e-4, atol=1e-5)
    # Calls 1-2 op by op (1 traces first), 3 recorded, 4-12 replayed.
    assert st["enabled"] and st["state"] == "replayed", st
    assert (st["captures"], st["replays"], st["normal_runs"], st["graphs"]) == (1, 9, 2, 1), st
    assert "replayed (1 captures, 9 replays" in step.explain(*_args_like(ta))


def _args_like(ta):
    x, t, w1, w2 = _mlp_data(1)
    return [_t(ta, v) for v in (x, t, w1, w2)] + [_t(ta, np.full(w1.shape, 0.01)),
                                                  _t(ta, np.full(w2.shape, 0.01))]


def test_replays_give_the_same_bits_as_op_by_op_runs(ta):
    _, w_graph, dy_graph, st = _train(ta, True, 8, seed=3)
    _, w_plain, dy_plain, st_plain = _train(ta, False, 8, seed=3)
    assert st["replays"] == 5 and st_plain == {**st_plain, "enabled": False, "state": "off",
                                               "captures": 0, "replays": 0}
    for a, b in zip(w_graph + dy_graph, w_plain + dy_plain):
        np.testing.assert_array_equal(a, b)


def test_replay_reads_the_new_input_values_and_keeps_old_outputs(ta):
    w = _t(ta, [1.0, -2.0, 3.0])

    @ta.function
    def f(x):
        return ta.ops.relu(x * w) + x

    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(3).astype(np.float32) for _ in range(8)]
    outs = [f(_t(ta, x)) for x in xs]
    for x, y in zip(xs, outs):   # read only now: every replay has run
        np.testing.assert_allclose(y.cpu().numpy(), np.maximum(x * [1, -2, 3], 0) + x,
                                   rtol=1e-6)
    st = f.cuda_graph_status(_t(ta, xs[0]))
    assert (st["captures"], st["replays"]) == (1, 5), st


def test_captured_variable_is_read_at_every_replay(ta):
    """A tensor from outside the function (a parameter) is a captured feed:
    assigning it a new value between calls reaches the replays."""
    w = _t(ta, [2.0, 2.0])

    @ta.function
    def f(x):
        return x * w

    x = _t(ta, [1.0, 3.0])
    for _ in range(4):
        f(x)
    assert f.cuda_graph_status(x)["captures"] == 1
    for k in range(3):
        w.assign(_t(ta, [5.0 + k, -1.0]))
        np.testing.assert_array_equal(f(x).cpu().numpy(), [5.0 + k, -3.0])
    assert f.cuda_graph_status(x)["replays"] == 4


def test_new_shape_runs_op_by_op_then_gets_its_own_graph(ta):
    @ta.function
    def f(x, y):
        return x * y - y

    def run(n, v):
        a, b = np.full(n, v, np.float32), np.arange(n, dtype=np.float32)
        out = f(_t(ta, a), _t(ta, b)).cpu().numpy()
        np.testing.assert_array_equal(out, a * b - b)
        return f.cuda_graph_status(_t(ta, a), _t(ta, b))

    want = ["warming up", "warming up", "captured", "replayed", "replayed"]
    assert [run(4, k)["state"] for k in range(5)] == want
    assert [run(7, k)["state"] for k in range(5)] == want
    st = run(4, 9.0)            # back to the first shape: its graph is still there
    assert (st["state"], st["captures"], st["replays"]) == ("replayed", 1, 3)


def test_graph_blocks_are_never_handed_out_while_the_graph_lives(ta):
    """Memory the recorded work uses (intermediates freed during the capture,
    kernel workspace) stays out of the pool: eager work allocated after the
    capture, even after empty_cache(), never shares it with a replay."""
    x, t, w1, w2 = _mlp_data(7)
    X, T = _t(ta, x), _t(ta, t)
    L1, L2 = _t(ta, np.full(w1.shape, 0.01)), _t(ta, np.full(w2.shape, 0.01))

    @ta.function
    def step(x, t, w1, w2, l1, l2):
        return _mlp_step(ta, x, t, w1, w2, l1, l2)

    W1, W2 = _t(ta, w1), _t(ta, w2)
    for _ in range(4):           # recorded at the 3rd call
        W1, W2, _ = step(X, T, W1, W2, L1, L2)
        w1, w2, _ = _mlp_step_np(x, t, w1, w2, 0.01)
    ta.memory.empty_cache(DEV)
    rng = np.random.default_rng(8)
    keep = []
    for _ in range(6):
        # Eager tensors of every size the graph uses, filled with garbage.
        garbage = []
        for shape in ((16, 8), (8, 12), (12, 4), (16, 12), (16, 4), (12, 12)):
            g = _t(ta, rng.standard_normal(shape))
            garbage.append(g + g)   # computed on the device, in fresh blocks
        keep.append(garbage)
        W1, W2, dy = step(X, T, W1, W2, L1, L2)
        w1, w2, dy_ref = _mlp_step_np(x, t, w1, w2, 0.01)
        np.testing.assert_allclose(dy.cpu().numpy(), dy_ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(W1.cpu().numpy(), w1, rtol=1e-4, atol=1e-5)
    assert step.cuda_graph_status(X, T, W1, W2, L1, L2)["replays"] == 7


def test_replays_make_no_waits_and_no_device_allocations(ta):
    x, t, w1, w2 = _mlp_data(9)
    X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
    L1, L2 = _t(ta, np.full(w1.shape, 0.01)), _t(ta, np.full(w2.shape, 0.01))

    @ta.function
    def step(x, t, w1, w2, l1, l2):
        return _mlp_step(ta, x, t, w1, w2, l1, l2)

    for i in range(20):
        if i == 6:
            before = ta.memory.stats(DEV)
        W1, W2, dy = step(X, T, W1, W2, L1, L2)
        w1, w2, _ = _mlp_step_np(x, t, w1, w2, 0.01)
    after = ta.memory.stats(DEV)
    for k in ("device_syncs", "num_allocs", "num_frees", "stream_syncs"):
        assert after[k] == before[k], (k, before[k], after[k])
    np.testing.assert_allclose(W2.cpu().numpy(), w2, rtol=1e-4, atol=1e-5)
    assert step.cuda_graph_status(X, T, W1, W2, L1, L2)["replays"] == 17


def test_replay_on_another_stream_waits_for_the_last_one(ta):
    w = _t(ta, [3.0, -1.0])

    @ta.function
    def f(x):
        return x * w + x

    x = _t(ta, [1.0, 2.0])
    for _ in range(4):
        f(x)
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    outs = []
    for k in range(6):
        with ta.stream(s1 if k % 2 else s2):
            xv = _t(ta, [float(k), 1.0])
            outs.append((k, f(xv)))
    for k, y in outs:
        np.testing.assert_array_equal(y.cpu().numpy(), [4.0 * k, 0.0])
    assert f.cuda_graph_status(x)["replays"] == 7


def test_opt_out_per_function_and_globally(ta, monkeypatch):
    @ta.function(cuda_graph=False)
    def f(x):
        return x + x

    x = _t(ta, [1.0])
    for _ in range(5):
        f(x)
    st = f.cuda_graph_status(x)
    assert not st["enabled"] and st["state"] == "off" and st["captures"] == 0
    assert "graph capture: off" in f.explain(x)

    monkeypatch.setenv("DRAGON_CUDA_GRAPHS", "0")

    @ta.function
    def g(x):
        return x * x

    for _ in range(5):
        np.testing.assert_array_equal(g(x).cpu().numpy(), [1.0])
    assert not g.cuda_graph_status(x)["enabled"]


def test_function_reading_the_host_in_a_run_falls_back_and_says_why(ta):
    """toy_async's Abs waits for its stream on the host (as a kernel reading
    a count would): the capture is refused, the run happens op by op with
    the right result, and the status gives the device's reason."""
    @ta.function
    def f(x):
        return ta.ops.abs(x * x - x)

    vals = []
    for k in range(6):
        a = np.float32([k, -1.0, 0.5])
        vals.append(f(_t(ta, a)).cpu().numpy())
        np.testing.assert_allclose(vals[-1], np.abs(a * a - a), rtol=1e-6)
    st = f.cuda_graph_status(_t(ta, [0.0, 0.0, 0.0]))
    assert st["state"] == "failed" and st["captures"] == 0 and st["replays"] == 0, st
    assert "stream_sync is not allowed while the stream captures" in st["reason"], st
    assert "failed: the capture failed" in f.explain(_t(ta, [0.0, 0.0, 0.0]))


def test_control_flow_is_ineligible(ta):
    @ta.function
    def pick(x, p):
        return ta.cond(p, lambda: x + x, lambda: x * x)

    x = _t(ta, [3.0])
    for _ in range(4):
        np.testing.assert_array_equal(pick(x, _t(ta, [1.0])).cpu().numpy(), [6.0])
    st = pick.cuda_graph_status(x, _t(ta, [1.0]))
    assert st["state"] == "ineligible" and "reads its predicate on the host" in st["reason"]


def test_fresh_random_numbers_make_a_function_ineligible(dg):
    """Dropout draws a new seed at every run; a replay would repeat its
    mask, so the function runs op by op (the reason says so) and every
    call gets a new mask."""
    @dg.function
    def f(x):
        return dg.nn.functional.dropout(x, 0.5)

    x = dg.tensor(np.ones(256, np.float32))
    masks = [f(x).numpy() != 0 for _ in range(5)]
    assert not all(np.array_equal(masks[0], m) for m in masks[1:])
    st = f.cuda_graph_status(x)
    assert st["state"] == "ineligible" and "fresh random seed" in st["reason"], st


def test_parallel_functions_are_ineligible(ta):
    @ta.function(parallel=2)
    def f(x):
        return x + x, x * x

    x = _t(ta, [2.0])
    for _ in range(4):
        f(x)
    st = f.cuda_graph_status(x)
    assert st["state"] == "ineligible" and "parallel executor" in st["reason"]


def test_host_device_says_it_cannot_capture(dg):
    @dg.function
    def f(x):
        return x + x

    x = dg.tensor(np.ones(3, np.float32))
    for _ in range(4):
        f(x)
    st = f.cuda_graph_status(x)
    assert st["state"] == "ineligible" and "offers no graph capture" in st["reason"], st


def test_device_without_the_capture_entries_runs_op_by_op(run_python, fixture_plugins):
    """The entries are optional (ABI 1.5): toy_async built without them
    (TOY_ASYNC_NO_CAPTURE) runs compiled functions op by op, correctly, and
    the status names the device."""
    r = run_python(f"""
        import numpy as np, dragon_core as dg
        dg.load_library({str(fixture_plugins["toy_async"])!r})
        w = dg.tensor(np.float32([2.0, -1.0])).to("toy_async")

        @dg.function
        def f(x):
            return x * w + x

        for k in range(5):
            y = f(dg.tensor(np.float32([k, 1.0])).to("toy_async"))
            assert y.cpu().numpy().tolist() == [3.0 * k, 0.0], y
        st = f.cuda_graph_status(dg.tensor(np.float32([0, 0])).to("toy_async"))
        print(st["state"], "|", st["reason"], "|", st["captures"], st["normal_runs"])
        """, TOY_ASYNC_NO_CAPTURE="1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == ("ineligible | device 'toy_async:0' offers no graph capture "
                                "(ABI 1.5 stream_begin_capture) | 0 5"), r.stdout


def test_core_refuses_a_device_with_only_some_capture_entries(run_python, fixture_plugins):
    """All four capture entries or none: a table with only
    stream_begin_capture (TOY_ASYNC_PARTIAL_CAPTURE) is refused at load,
    with the rule in the error."""
    r = run_python(f"""
        import dragon_core as dg
        try:
            dg.load_library({str(fixture_plugins["toy_async"])!r})
        except Exception as e:
            print(type(e).__name__, "|", e)
        else:
            print("loaded")
        """, TOY_ASYNC_PARTIAL_CAPTURE="1")
    assert r.returncode == 0, r.stderr
    assert "must be set all together" in r.stdout, r.stdout
    assert "toy_async" in r.stdout, r.stdout
