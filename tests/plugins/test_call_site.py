"""Per-call-site kernel state (ABI 1.2, docs/abi.md): what the core hands a
kernel in graph mode, which inputs it marks constant, and when it destroys
the state. The fixture kernel (fixtures/call_site) reports what it got."""

from __future__ import annotations

import gc

import numpy as np
import pytest


@pytest.fixture(scope="module")
def probe(dg, fixture_plugins):
    dg.load_library(str(fixture_plugins["call_site"]))
    return dg.ops.call_site_probe


def _info(out):
    return [int(v) for v in out[1].numpy()]


def test_eager_calls_get_no_state(dg, probe):
    x = dg.tensor(np.ones(3))
    out = probe(x, x)
    np.testing.assert_array_equal(out[0].numpy(), 2 * np.ones(3))
    assert _info(out)[:3] == [0, 0, 0]


def test_graph_call_site_keeps_state_and_marks_constants(dg, probe):
    c = dg.tensor(np.arange(3.0))
    x = dg.tensor(np.ones(3))

    @dg.function(freeze=True)
    def frozen(x):
        # c is frozen (a constant); the second probe reads only graph values.
        y, info = probe(x, c)
        y2, info2 = probe(y, y)
        return y2, info, info2

    for run in range(1, 4):
        y2, info, info2 = frozen(x)
        np.testing.assert_array_equal(y2.numpy(), 2 * (1 + np.arange(3.0)))
        mask, calls, has_state, _ = [int(v) for v in info.numpy()]
        assert (mask, calls, has_state) == (0b10, run, 1)    # c is input 1
        mask2, calls2, _, _ = [int(v) for v in info2.numpy()]
        assert (mask2, calls2) == (0, run)                    # its own state


def test_live_parameters_and_created_tensors(dg, probe):
    """A captured (live) tensor is not constant; one created inside the
    traced function is."""
    w = dg.tensor(np.ones(2))

    @dg.function
    def live(x):
        a = probe(x, w)[1]
        b = probe(x, dg.tensor(np.full(2, 3.0)))[1]
        return a, b

    a, b = live(dg.tensor(np.zeros(2)))
    assert [int(v) for v in a.numpy()][:3] == [0, 1, 1]
    assert [int(v) for v in b.numpy()][:3] == [0b10, 1, 1]


def test_state_is_destroyed_with_the_graph(dg, probe):
    x = dg.tensor(np.ones(2))
    f = dg.function(lambda t: probe(t, t)[1])
    before = int(f(x).numpy()[3])
    del f
    gc.collect()
    after = _info(probe(x, x))[3]
    assert after == before + 1


def test_frozen_constants_ignore_a_later_assign(dg, probe):
    """freeze=True bakes the values at trace time (docs: later changes are
    not seen): assign() rebinds the parameter, not the graph's alias."""
    c = dg.tensor(np.ones(2))
    f = dg.function(lambda t: probe(t, c)[0], freeze=True)
    x = dg.tensor(np.zeros(2))
    np.testing.assert_array_equal(f(x).numpy(), [1.0, 1.0])
    c.assign(dg.tensor(np.full(2, 5.0)))
    np.testing.assert_array_equal(f(x).numpy(), [1.0, 1.0])
    g = dg.function(lambda t: probe(t, c)[0])          # live: sees the new value
    np.testing.assert_array_equal(g(x).numpy(), [5.0, 5.0])


def test_state_is_reset_when_the_kernel_changes(dg, probe):
    """The state belongs to one kernel: pinning another one for the call
    site destroys it and the new kernel starts from nothing."""
    x = dg.tensor(np.ones(2))
    f = dg.function(lambda t: probe(t, t)[1])
    calls = lambda: [int(v) for v in f(x).numpy()][1]  # noqa: E731
    assert [calls(), calls()] == [1, 2]            # Probe<float64>, its state
    destroyed = int(f(x).numpy()[3])
    dg.plugins.pin("CallSiteProbe", "cpu", "ProbeB<float64>")
    try:
        info = [int(v) for v in f(x).numpy()]
        assert info[1] == 1 and info[3] == destroyed + 1   # a fresh state
        assert calls() == 2
    finally:
        dg.plugins.unpin("CallSiteProbe", "cpu")
    info = [int(v) for v in f(x).numpy()]
    assert info[1] == 1 and info[3] == destroyed + 2
