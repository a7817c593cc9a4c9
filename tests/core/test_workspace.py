"""The Workspace: owner of named tensors and of compiled graphs with their
plans; isolation (nested, per thread) and release (``clear``)."""

import gc
import threading

import numpy as np
import pytest

import dragon_core as dg

MB = 1 << 20


def _allocated():
    gc.collect()
    return dg.memory.stats("cpu")["allocated"]


# ----------------------------------------------------------- named tensors

def test_feed_fetch_and_names():
    with dg.Workspace("w") as ws:
        ws.feed_tensor("x", [1.0, 2.0])
        t = dg.tensor(np.arange(3, dtype=np.int64))
        ws.feed_tensor("t", t)
        assert ws.fetch_tensor("t") is t            # stored, not copied
        np.testing.assert_array_equal(ws.fetch_tensor("x").numpy(), [1.0, 2.0])
        assert ws.tensor_names() == ["t", "x"]
        ws.release_tensor("t")
        assert not ws.has_tensor("t")
        with pytest.raises(KeyError, match="has no tensor 'nope'; it has: x"):
            ws.fetch_tensor("nope")
        with pytest.raises(KeyError):
            ws.release_tensor("t")
        with pytest.raises(TypeError, match="non-empty str"):
            ws.feed_tensor("", [1.0])


def test_names_are_isolated_and_blocks_nest():
    outer_default = dg.get_workspace()
    with dg.Workspace("a") as a:
        a.feed_tensor("x", [1.0])
        assert dg.get_workspace() is a
        with dg.Workspace("b") as b:
            assert dg.get_workspace() is b
            assert not b.has_tensor("x")
            b.feed_tensor("x", [2.0])
        assert dg.get_workspace() is a
        assert a.fetch_tensor("x").numpy()[0] == 1.0
    assert dg.get_workspace() is outer_default
    assert outer_default is dg.default_workspace()


def test_blocks_must_end_in_order():
    a, b = dg.Workspace("a"), dg.Workspace("b")
    a.__enter__()
    b.__enter__()
    with pytest.raises(RuntimeError, match="in the order they began"):
        a.__exit__(None, None, None)
    b.__exit__(None, None, None)
    a.__exit__(None, None, None)


def test_current_workspace_is_per_thread():
    seen = {}
    ready, done = threading.Event(), threading.Event()

    def other():
        seen["start"] = dg.get_workspace()
        ready.set()
        done.wait(10)
        seen["end"] = dg.get_workspace()

    th = threading.Thread(target=other)
    th.start()
    ready.wait(10)
    with dg.Workspace("mine") as mine:
        assert dg.get_workspace() is mine
        done.set()
        th.join(10)
    # the other thread never saw this thread's block: it stays in the default
    assert seen["start"] is dg.default_workspace()
    assert seen["end"] is seen["start"]
    assert seen["end"] is not mine


# ---------------------------------------------------------- compiled graphs

def test_each_workspace_owns_its_plans():
    @dg.function(name="double")
    def f(x):
        return x * 2.0

    x = dg.tensor([1.0, 2.0])
    f(x)
    assert f.trace_count == 1
    with dg.Workspace("a") as a:
        np.testing.assert_array_equal(f(x).numpy(), [2.0, 4.0])
        assert f.trace_count == 2                    # a plan of its own
        f(x)
        assert f.trace_count == 2
        assert a.graph_names() == ["double"]
        (g,) = a.get_graph("double")
        assert g.name == "double"
        assert a.memory_stats()["plans"] == 1
        with pytest.raises(KeyError, match="no graph 'other'"):
            a.get_graph("other")
    f(x)                                             # the default's plan is still there
    assert f.trace_count == 2
    a.clear()
    assert a.graph_names() == [] and a.memory_stats()["plans"] == 0
    with a:
        f(x)                                         # cleared: traced again
    assert f.trace_count == 3
    f(x)
    assert f.trace_count == 3


def test_clear_of_another_workspace_leaves_the_default_alone():
    @dg.function
    def g(x):
        return x + 1.0

    x = dg.tensor([1.0])
    g(x)
    ws = dg.Workspace("other")
    with ws:
        g(x)
    ws.clear()
    g(x)
    assert g.trace_count == 2


def test_functions_traced_on_other_threads_share_the_default_plans():
    @dg.function
    def h(x):
        return x * 3.0

    x = dg.tensor([1.0])
    h(x)
    th = threading.Thread(target=lambda: h(x))
    th.start()
    th.join(10)
    assert h.trace_count == 1


# ------------------------------------------------------------------ memory

def test_clear_releases_tensors_plans_and_constants():
    n = MB // 4                                      # 1 MiB of float32
    big_const = np.full(n, 0.5, dtype=np.float32)

    @dg.function(name="uses_constant")
    def f(x):
        c = dg.tensor(big_const)                     # made inside: a constant of the graph
        y = dg.ops.exp(x) + c                        # intermediates get planned buffers
        return dg.ops.sum(dg.ops.sqrt(y * y + 1.0))

    x = dg.ops.zeros([n])
    before = _allocated()
    ws = dg.Workspace("mem")
    with ws:
        ws.feed_tensor("big", dg.ops.zeros([n]))
        out = f(x)
        expect = np.sum(np.sqrt((1.0 + big_const.astype(np.float64)) ** 2 + 1.0))
        np.testing.assert_allclose(out.item(), expect, rtol=1e-5)
        del out
    stats = ws.memory_stats()
    assert stats["tensors"] == 1 and stats["tensor_bytes"] == 4 * n
    assert stats["plans"] == 1 and stats["graphs"] == 1
    assert stats["constant_bytes"] >= 4 * n
    held = _allocated() - before
    assert held >= 2 * 4 * n, (held, stats)          # the named tensor and the constant
    ws.clear()
    after = _allocated()
    assert after - before < 4 * n // 4, (before, after, held)
    assert ws.memory_stats() == {"tensors": 0, "tensor_bytes": 0, "graphs": 0, "plans": 0,
                                 "planned_bytes": 0, "constant_bytes": 0}


def test_planned_buffers_are_counted_and_freed():
    @dg.function(name="chain")
    def f(x):
        a = dg.ops.exp(x)
        b = dg.ops.sin(a) * a
        c = dg.ops.cos(b) + b
        return dg.ops.sum(c * c)

    x = dg.ops.ones([1 << 16])
    before = _allocated()
    ws = dg.Workspace("plan")
    with ws:
        f(x)
    stats = ws.memory_stats()
    assert stats["planned_bytes"] > 0
    assert stats["planned_bytes"] == sum(
        e.compiled.plan.planned_bytes for pc in ws._plans.values() for e in pc.cache.values())
    assert _allocated() - before >= stats["planned_bytes"]
    ws.clear()
    assert _allocated() - before < stats["planned_bytes"]


def test_a_dropped_function_takes_its_plans_with_it():
    ws = dg.Workspace("drop")

    def make():
        @dg.function(name="tmp")
        def f(x):
            return x * 5.0
        return f

    f = make()
    with ws:
        f(dg.tensor([1.0]))
    assert ws.graph_names() == ["tmp"]
    del f
    gc.collect()
    assert ws.graph_names() == []


# ------------------------------------------------------------ saved graphs

def test_saved_graphs_keep_their_names(tmp_path):
    @dg.function(name="scaled_relu")
    def f(x):
        return dg.ops.relu(x) * 3.0

    x = dg.tensor([-1.0, 2.0])
    with dg.Workspace("a"):
        dg.save_graph(f, tmp_path / "g.pb", x)
    b = dg.Workspace("b")
    with b:
        loaded = dg.load_graph(tmp_path / "g.pb")
    assert loaded.graph.name == "scaled_relu"
    assert b.graph_names() == ["scaled_relu"]
    (g,) = b.get_graph("scaled_relu")
    assert g is loaded.graph
    np.testing.assert_array_equal(loaded(x).numpy(), [0.0, 6.0])
    assert b.memory_stats()["plans"] == 1
    b.clear()
    assert b.graph_names() == []
