"""Asynchronous devices (ABI 1.3) on "toy_async" (fixtures/toy_async).

toy_async runs every kernel and copy on a worker thread per stream after a
random delay, so work outlives the call that issued it. These tests fail if
the core waits too little (results differ from NumPy, or are racy) or too
much (the device-wide synchronization counter moves, or steady state makes
device allocations).
"""

from __future__ import annotations

import numpy as np
import pytest

DEV = "toy_async"


def _t(dg, a):
    return dg.tensor(np.asarray(a, dtype=np.float32)).to(DEV)


def _stats(dg):
    return dg.memory.stats(DEV)


@pytest.fixture
def ta(dg, toy_async):
    return dg


def test_device_declares_stream_order(ta):
    assert ta._C._stream_ordered(DEV)
    assert not ta._C._stream_ordered("cpu")
    s = ta.current_stream(DEV)
    assert s == ta.default_stream(DEV)
    assert ta.current_stream("cpu")._handle == 0  # synchronous: no stream


def test_round_trip_waits_only_for_its_stream(ta):
    rng = np.random.default_rng(0)
    before = _stats(ta)
    for _ in range(20):
        x = rng.standard_normal((37, 5)).astype(np.float32)
        assert np.array_equal(_t(ta, x).cpu().numpy(), x)
    after = _stats(ta)
    assert after["device_syncs"] == before["device_syncs"]
    assert after["stream_syncs"] - before["stream_syncs"] == 20


def test_eager_chain_matches_numpy(ta):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((64, 32)).astype(np.float32)
    b = rng.standard_normal((64, 32)).astype(np.float32)
    x, y = _t(ta, a), _t(ta, b)
    before = _stats(ta)
    z = x
    ref = a
    for i in range(30):  # every op issued before any finishes
        z = ta.ops.relu(z * y + x - y) if i % 3 == 0 else z + y * x
        ref = np.maximum(ref * b + a - b, 0) if i % 3 == 0 else ref + b * a
    got = z.cpu().numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    after = _stats(ta)
    assert after["device_syncs"] == before["device_syncs"]
    assert after["stream_syncs"] - before["stream_syncs"] == 1  # the read only


def test_host_visible_points_wait(ta):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    x = _t(ta, a)
    one = _t(ta, [4.0])
    assert (one * one + one).item() == pytest.approx(20.0)
    assert (x + x).tolist() == (a + a).tolist()
    assert "toy_async" in repr(x * x) and "25." in repr(x * x)
    assert float(one * one) == 16.0
    assert bool(one - one) is False


def test_matmul_with_transposed_operands(ta):
    rng = np.random.default_rng(6)
    a = rng.standard_normal((4, 6)).astype(np.float32)
    b = rng.standard_normal((5, 6)).astype(np.float32)
    x, y = _t(ta, a), _t(ta, b)
    np.testing.assert_allclose(ta.ops.matmul(x, x, transpose_a=True).cpu().numpy(),
                               a.T @ a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ta.ops.matmul(x, y, transpose_b=True).cpu().numpy(),
                               a @ b.T, rtol=1e-5, atol=1e-5)


def test_freed_temporaries_are_not_overwritten_early(ta):
    """Temporaries die on the host long before the device reads them; the
    allocator hands their blocks out again at once on the same stream."""
    rng = np.random.default_rng(2)
    a = rng.standard_normal((128,)).astype(np.float32)
    x = _t(ta, a)
    acc = x
    ref = a
    for _ in range(50):
        acc = acc * _t(ta, np.full(128, 0.5, np.float32)) + x
        ref = ref * 0.5 + a
    np.testing.assert_allclose(acc.cpu().numpy(), ref, rtol=1e-6)


def test_two_streams_joined_by_events(ta):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((50, 50)).astype(np.float32)
    b = rng.standard_normal((50, 50)).astype(np.float32)
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    assert s1 != s2
    before = _stats(ta)
    with ta.stream(s1):
        assert ta.current_stream(DEV) == s1
        x = _t(ta, a)
        for _ in range(5):
            x = x * _t(ta, b) + _t(ta, a)
        done = s1.record_event()
    assert ta.current_stream(DEV) == ta.default_stream(DEV)
    with ta.stream(s2):
        s2.wait_event(done)
        y = ta.ops.matmul(x, x)
    ref = a
    for _ in range(5):
        ref = ref * b + a
    with ta.stream(s2):
        got = y.cpu().numpy()
    np.testing.assert_allclose(got, ref @ ref, rtol=1e-4, atol=1e-3)
    s1.synchronize()
    s2.synchronize()
    assert done.query()
    assert _stats(ta)["device_syncs"] == before["device_syncs"]


def test_cross_stream_use_is_ordered_without_events(ta):
    """A tensor written on one stream and read on another: the core joins
    the streams itself (never silently wrong), on the device."""
    a = np.arange(4096, dtype=np.float32)
    s1 = ta.Stream(DEV)
    with ta.stream(s1):
        x = _t(ta, a)
        for _ in range(10):
            x = x + x
    before = _stats(ta)
    y = x * x  # default stream
    np.testing.assert_array_equal(y.cpu().numpy(), (a * 1024) ** 2)
    after = _stats(ta)
    assert after["stream_waits"] > before["stream_waits"]
    assert after["device_syncs"] == before["device_syncs"]


def test_block_freed_on_one_stream_is_reused_on_another_after_an_event(ta):
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    n = 3001  # a size class no other test uses
    a = np.ones(n, np.float32)
    with ta.stream(s1):
        x = _t(ta, a)
        y = x + x
        del x  # its block goes back to s1's pool; the add may not have run
    before = _stats(ta)
    with ta.stream(s2):
        z = _t(ta, np.full(n, 7, np.float32))  # takes the block of x
        after = _stats(ta)
        w = z * z  # (its output may need a new block of this size class)
    assert after["cross_stream_reuses"] > before["cross_stream_reuses"]
    assert after["num_allocs"] == before["num_allocs"]
    np.testing.assert_array_equal(y.cpu().numpy(), 2 * a)
    np.testing.assert_array_equal(w.cpu().numpy(), np.full(n, 49, np.float32))


def test_events_time_and_synchronize(ta):
    s = ta.current_stream(DEV)
    start, end = ta.Event(enable_timing=True), ta.Event(enable_timing=True)
    start.record(s)
    x = _t(ta, np.ones((40, 40)))
    for _ in range(5):
        x = ta.ops.matmul(x, x) * _t(ta, np.full((40, 40), 1 / 40))
    end.record(s)
    end.synchronize()
    assert end.query()
    assert start.elapsed_time(end) >= 0.0
    np.testing.assert_allclose(x.cpu().numpy(), np.ones((40, 40)), rtol=1e-5)


def test_cpu_streams_and_events_are_no_ops(ta):
    s = ta.Stream("cpu")
    with ta.stream(s):
        y = ta.tensor([1.0, 2.0]) * 2
    s.synchronize()
    e = s.record_event()
    assert e.query()
    e.synchronize()
    assert y.tolist() == [2.0, 4.0]


def test_async_kernel_error_surfaces_at_the_next_host_read(ta):
    x = _t(ta, [4.0, -1.0, 9.0])
    y = ta.ops.sqrt(x)  # issued: the device checks later
    z = y + y
    with pytest.raises(ta.errors.OutOfRangeError) as info:
        z.cpu().numpy()
    msg = str(info.value)
    assert "toy_async" in msg and "element 1 is negative" in msg
    # Reported once: the device goes on working.
    np.testing.assert_array_equal(ta.ops.sqrt(_t(ta, [4.0, 9.0])).cpu().numpy(), [2.0, 3.0])


def test_async_error_surfaces_at_stream_synchronize(ta):
    s = ta.Stream(DEV)
    with ta.stream(s):
        ta.ops.sqrt(_t(ta, [-2.0]))
    with pytest.raises(ta.errors.DragonError, match="negative"):
        s.synchronize()


def _mlp_step(dg, x, t, w1, w2, lr1, lr2):
    """One SGD step of y = relu(x @ w1) @ w2 on 0.5 * |y - t|^2, backward
    written out (toy_async has few kernels). Returns (w1, w2, dy)."""
    h = dg.ops.relu(dg.ops.matmul(x, w1))
    y = dg.ops.matmul(h, w2)
    dy = y - t
    dw2 = dg.ops.matmul(h, dy, transpose_a=True)
    dh = dg.ops.matmul(dy, w2, transpose_b=True) * dg.ops.sign(h)
    dw1 = dg.ops.matmul(x, dh, transpose_a=True)
    return w1 - dw1 * lr1, w2 - dw2 * lr2, dy


def _mlp_step_np(x, t, w1, w2, lr):
    h = np.maximum(x @ w1, 0)
    dy = h @ w2 - t
    dw2 = h.T @ dy
    dh = (dy @ w2.T) * np.sign(h)
    return w1 - lr * (x.T @ dh), w2 - lr * dw2, dy


def test_mlp_training_steady_state_makes_no_sync_and_no_alloc(ta):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    t = rng.standard_normal((16, 4)).astype(np.float32)
    w1 = (rng.standard_normal((8, 12)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((12, 4)) * 0.3).astype(np.float32)
    lr = 0.01
    X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
    L1, L2 = _t(ta, np.full(w1.shape, lr)), _t(ta, np.full(w2.shape, lr))
    steps, warmup = 30, 3
    for i in range(steps):
        if i == warmup:
            before = _stats(ta)
        W1, W2, dy = _mlp_step(ta, X, T, W1, W2, L1, L2)
        w1, w2, dy_ref = _mlp_step_np(x, t, w1, w2, lr)
    after = _stats(ta)
    per_step = {k: (after[k] - before[k]) / (steps - warmup)
                for k in ("device_syncs", "num_allocs", "num_frees", "stream_syncs")}
    # Nothing read on the host in the loop: no wait at all, no device memory.
    assert per_step == {"device_syncs": 0, "num_allocs": 0, "num_frees": 0,
                        "stream_syncs": 0}, per_step
    np.testing.assert_allclose(W1.cpu().numpy(), w1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(W2.cpu().numpy(), w2, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dy.cpu().numpy(), dy_ref, rtol=1e-4, atol=1e-4)


def test_mlp_loss_read_every_step_waits_once_per_step(ta):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((8, 4)).astype(np.float32)
    t = rng.standard_normal((8, 2)).astype(np.float32)
    w1 = (rng.standard_normal((4, 6)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((6, 2)) * 0.3).astype(np.float32)
    X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
    L1, L2 = _t(ta, np.full(w1.shape, 0.05)), _t(ta, np.full(w2.shape, 0.05))
    for i in range(12):
        if i == 2:
            before = _stats(ta)
        W1, W2, dy = _mlp_step(ta, X, T, W1, W2, L1, L2)
        w1, w2, dy_ref = _mlp_step_np(x, t, w1, w2, 0.05)
        np.testing.assert_allclose(dy.cpu().numpy(), dy_ref, rtol=1e-4, atol=1e-4)
    after = _stats(ta)
    assert after["stream_syncs"] - before["stream_syncs"] == 10
    assert after["device_syncs"] == before["device_syncs"]
    assert after["num_allocs"] == before["num_allocs"]


def test_empty_cache_waits_for_streams_not_the_device(ta):
    x = _t(ta, np.ones(999))
    y = x * x
    del x, y
    before = _stats(ta)
    ta.memory.empty_cache(DEV)
    after = _stats(ta)
    assert after["device_syncs"] == before["device_syncs"]
    assert after["num_frees"] > before["num_frees"]
    assert after["reserved"] == after["allocated"]


def test_device_synchronize_is_counted(ta):
    before = _stats(ta)["device_syncs"]
    ta.synchronize(DEV)
    assert _stats(ta)["device_syncs"] == before + 1


def test_synchronous_toy_device_keeps_its_contract(dg, toy, toy_async):
    """A device without DG_DEVICE_STREAM_ORDERED (toy, ABI 1.2 semantics)
    gets NULL streams and a synchronize after each copy, as before."""
    assert not dg._C._stream_ordered("toy")
    before = dg.memory.stats("toy")["device_syncs"]
    x = dg.tensor(np.ones(3, np.float32)).to("toy")
    assert (x + x).cpu().numpy().tolist() == [2.0, 2.0, 2.0]
    assert dg.memory.stats("toy")["device_syncs"] == before + 2


def test_workspace_outlives_the_kernel_call_on_two_streams(ta):
    """toy_async's MatMul accumulates in workspace that the core frees when
    the call returns; the allocator hands such blocks to the next kernel of
    the same stream (ordered) and to another stream only after an event."""
    rng = np.random.default_rng(7)
    mats = [rng.standard_normal((24, 24)).astype(np.float32) for _ in range(4)]
    streams = [ta.Stream(DEV), ta.Stream(DEV)]
    outs = []
    for rep in range(6):
        for i, s in enumerate(streams):
            with ta.stream(s):
                a, b = _t(ta, mats[(rep + i) % 4]), _t(ta, mats[(rep + i + 1) % 4])
                outs.append((ta.ops.matmul(ta.ops.matmul(a, b), a),
                             mats[(rep + i) % 4], mats[(rep + i + 1) % 4]))
    for y, a, b in outs:
        np.testing.assert_allclose(y.cpu().numpy(), (a @ b) @ a, rtol=1e-4, atol=1e-3)


def test_compiled_step_runs_on_the_current_stream_without_waits(ta):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    t = rng.standard_normal((16, 4)).astype(np.float32)
    w1 = (rng.standard_normal((8, 12)) * 0.3).astype(np.float32)
    w2 = (rng.standard_normal((12, 4)) * 0.3).astype(np.float32)
    X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
    L1, L2 = _t(ta, np.full(w1.shape, 0.01)), _t(ta, np.full(w2.shape, 0.01))

    # Op by op: recording a graph (cuda_graph=True) allocates the graph's own
    # buffers once; its replays are tested in test_toy_async_graphs.py.
    @ta.function(cuda_graph=False)
    def step(x, t, w1, w2, l1, l2):
        return _mlp_step(ta, x, t, w1, w2, l1, l2)

    s = ta.Stream(DEV)
    with ta.stream(s):
        for i in range(20):
            if i == 3:
                before = _stats(ta)
            W1, W2, dy = step(X, T, W1, W2, L1, L2)
            w1, w2, dy_ref = _mlp_step_np(x, t, w1, w2, 0.01)
        after = _stats(ta)
        got = W1.cpu().numpy(), W2.cpu().numpy()
    for k in ("device_syncs", "num_allocs", "num_frees", "stream_syncs"):
        assert after[k] == before[k], (k, before[k], after[k])
    np.testing.assert_allclose(got[0], w1, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[1], w2, rtol=1e-4, atol=1e-5)


def test_non_blocking_copy_from_pinned_memory(ta):
    rng = np.random.default_rng(9)
    a = rng.standard_normal((64, 64)).astype(np.float32)
    host = ta.tensor(a)
    assert not host.is_pinned()
    pinned = host.pin_memory(DEV)
    assert pinned.is_pinned() and pinned.device == "cpu"
    np.testing.assert_array_equal(pinned.numpy(), a)
    before = _stats(ta)
    outs = [pinned.to(DEV, non_blocking=True) for _ in range(10)]
    after = _stats(ta)
    assert after["stream_syncs"] == before["stream_syncs"]
    assert after["device_syncs"] == before["device_syncs"]
    del pinned  # freeing waits for the copies still reading it
    for y in outs:
        np.testing.assert_array_equal((y + y).cpu().numpy(), 2 * a)


def test_non_blocking_falls_back_to_an_ordinary_copy(ta):
    a = np.arange(5, dtype=np.float32)
    y = ta.tensor(a).to(DEV, non_blocking=True)  # pageable: consumed at once
    np.testing.assert_array_equal(y.cpu().numpy(), a)
    np.testing.assert_array_equal(y.to("cpu", non_blocking=True).numpy(), a)


def test_dlpack_exchange_orders_the_consumer_stream(ta):
    a = np.arange(2048, dtype=np.float32)
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    with ta.stream(s1):
        x = _t(ta, a)
        for _ in range(8):
            x = x + x
    with ta.stream(s2):
        before = _stats(ta)
        y = ta.from_dlpack(_Wrapped(x))  # asks for __dlpack__(stream=s2)
        z = y * y
        after = _stats(ta)
        assert after["stream_syncs"] == before["stream_syncs"]  # no host wait
        assert after["stream_waits"] > before["stream_waits"]
        np.testing.assert_array_equal(z.cpu().numpy(), (a * 256) ** 2)


def test_dlpack_export_without_a_stream_waits_for_the_writer(ta):
    x = _t(ta, np.ones(1000, np.float32))
    y = x + x
    before = _stats(ta)
    cap = y.__dlpack__()  # no consumer stream: the data must be ready now
    assert _stats(ta)["stream_syncs"] == before["stream_syncs"] + 1
    z = ta._C._from_dlpack_capsule(cap)
    np.testing.assert_array_equal(z.cpu().numpy(), np.full(1000, 2, np.float32))


class _Wrapped:
    """A foreign producer: only the DLPack protocol (records the stream)."""

    def __init__(self, t):
        self.t = t

    def __dlpack_device__(self):
        return self.t.__dlpack_device__()

    def __dlpack__(self, stream=None, **kw):
        assert stream is not None and stream != 0
        return self.t.__dlpack__(stream=stream, **kw)


def test_data_loader_pins_batches_for_non_blocking_copies(ta):
    rng = np.random.default_rng(10)
    xs = rng.standard_normal((10, 3)).astype(np.float32)
    ys = rng.standard_normal((10, 1)).astype(np.float32)
    loader = ta.data.DataLoader(ta.data.TensorDataset(xs, ys), batch_size=4,
                                pin_memory=DEV)
    seen = []
    for bx, by in loader:
        assert bx.is_pinned() and by.is_pinned()
        dx = bx.to(DEV, non_blocking=True)
        seen.append((dx + dx).cpu().numpy())
    np.testing.assert_array_equal(np.concatenate(seen), 2 * xs)
    plain = next(iter(ta.data.DataLoader(ta.data.TensorDataset(xs), batch_size=4)))
    assert not (plain[0] if isinstance(plain, (tuple, list)) else plain).is_pinned()


@pytest.mark.parametrize("parallel", [0, 2])
def test_compiled_function_issues_on_the_callers_stream(ta, parallel):
    rng = np.random.default_rng(11)
    a = rng.standard_normal((20, 20)).astype(np.float32)

    @ta.function(parallel=parallel)
    def f(x):
        return ta.ops.matmul(x, x) + ta.ops.matmul(x, x, transpose_a=True) * x

    x = _t(ta, a)
    s = ta.Stream(DEV)
    before = _stats(ta)
    with ta.stream(s):
        y = f(x)
        y2 = f(x)
    mid = _stats(ta)
    # Ran on s: reading y on the default stream must join s (a device wait).
    got = y.cpu().numpy()
    assert _stats(ta)["stream_waits"] > mid["stream_waits"]
    assert mid["device_syncs"] == before["device_syncs"]
    np.testing.assert_allclose(got, a @ a + (a.T @ a) * a, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(y2.cpu().numpy(), got, rtol=1e-6)


def test_profile_times_ops_with_events(ta):
    @ta.function
    def g(x):
        return ta.ops.relu(ta.ops.matmul(x, x)) + x

    x = _t(ta, np.ones((16, 16)))
    before = _stats(ta)
    prof = g.profile(x, runs=5, warmup=1)
    after = _stats(ta)
    assert after["event_syncs"] > before["event_syncs"]  # read by events
    assert after["device_syncs"] == before["device_syncs"]
    rows = {r["type"]: r for r in prof.rows}
    assert rows["MatMul"]["calls"] == 5
    # Each toy_async op waits 0-200 µs on its worker: device time shows.
    assert sum(r["total_us"] for r in prof.rows) > 0


def test_memory_info_and_attributes(ta):
    free, total = ta.memory.mem_get_info(DEV)
    assert total == 1 << 30 and 0 <= free <= total
    attrs = ta.memory.device_attributes(DEV)
    assert attrs == {"compute_units": 1, "total_memory": 1 << 30, "max_streams": 0,
                     "memory_alignment": 16}
    assert ta.memory.mem_get_info("cpu") is None and ta.memory.device_attributes("cpu") == {}


def test_large_blocks_are_split_and_merged_without_device_calls(ta):
    """Sizes above 1 MiB come from a best-fit pool over device segments: a
    freed 6 MiB block serves two 3 MiB tensors, and varying large sizes in a
    loop make no device alloc/free once warm."""
    mb = (1 << 20) // 4  # float32 elements per MiB
    rng = np.random.default_rng(12)
    sizes = [2 * mb + 7, 3 * mb, 5 * mb + 123, (3 * mb) // 2]
    data = {n: rng.standard_normal(n).astype(np.float32) for n in sizes}
    for i in range(12):
        if i == 4:
            before = _stats(ta)
        outs = []
        for n in sizes[i % 2:] + sizes[:i % 2]:  # vary the order
            x = _t(ta, data[n])
            outs.append((x * x + x, n))
        for y, n in outs:
            np.testing.assert_allclose(y.cpu().numpy(), data[n] ** 2 + data[n], rtol=1e-6)
        del outs, x, y
    after = _stats(ta)
    assert after["num_allocs"] == before["num_allocs"]
    assert after["num_frees"] == before["num_frees"]


def test_large_block_taken_by_another_stream_waits_for_its_owner(ta):
    n = (5 << 20) // 4
    a = np.arange(n, dtype=np.float32) % 97
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    with ta.stream(s1):
        x = _t(ta, a)
        y = x
        for _ in range(4):
            y = y + x
        del x
    with ta.stream(s2):
        z = _t(ta, np.full(n, 3, np.float32))
        w = z * z
    np.testing.assert_array_equal(y.cpu().numpy(), 5 * a)
    np.testing.assert_array_equal(w.cpu().numpy(), np.full(n, 9, np.float32))


def test_empty_cache_returns_segments_split_across_streams(ta):
    """A large block taken by another stream leaves the rest of its segment
    on the first stream: once every piece is free, empty_cache must give
    the whole segment back (it kept such segments forever)."""
    n = (5 << 20) // 4
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    with ta.stream(s1):
        x = _t(ta, np.ones(n, np.float32))
        y = x + x
        del x
    with ta.stream(s2):
        z = _t(ta, np.full(n, 3, np.float32))  # takes (part of) x's segment
        w = z * z
    np.testing.assert_array_equal(w.cpu().numpy(), np.full(n, 9, np.float32))
    np.testing.assert_array_equal(y.cpu().numpy(), np.full(n, 2, np.float32))
    del y, z, w
    before = _stats(ta)
    ta.memory.empty_cache(DEV)
    after = _stats(ta)
    assert after["reserved"] == after["allocated"], (before, after)
    assert after["num_frees"] > before["num_frees"]
    assert after["device_syncs"] == before["device_syncs"]


def test_graph_predicates_wait_for_their_stream_only(ta):
    """cond and while_loop read their predicate on the host: the read must
    wait for the kernels that computed it (a delayed chain on a user
    stream), and for nothing else (no device-wide synchronization)."""
    a = np.float32([3.0, -1.0])
    x = _t(ta, a)

    @ta.function
    def pick(x, p):
        q = p * p - p          # on the device, issued before p's value exists
        return ta.cond(q, lambda: x + x, lambda: x * x)

    @ta.function
    def count(x, p):
        # The body runs while k is non-zero, once at most (it zeroes k).
        return ta.while_loop(lambda v, k: k, lambda v, k: (v + v, k - k), [x, p])

    s = ta.Stream(DEV)
    with ta.stream(s):
        for val, taken in ((2.0, True), (1.0, False), (0.0, False), (3.0, True)):
            before = _stats(ta)
            p = _t(ta, [val])
            got = pick(x, p).cpu().numpy()
            after = _stats(ta)
            np.testing.assert_array_equal(got, a + a if taken else a * a)
            assert after["device_syncs"] == before["device_syncs"]
        for val, doubled in ((0.0, False), (5.0, True)):
            v, k = count(x, _t(ta, [val]))
            np.testing.assert_array_equal(v.cpu().numpy(), a + a if doubled else a)
            assert k.cpu().numpy().tolist() == [0.0]


def test_profiling_a_failing_op_gives_back_its_timing_event(ta):
    """An op that raises while profiled must return the event it took for
    its start time to the pool (it leaked one handle per failure)."""
    @ta.function
    def g(x, p):
        return ta.cond(p, lambda: x + x, lambda: ta.ops.reshape(x, [5]))

    x = _t(ta, [1.0, 2.0])
    g.profile(x, _t(ta, [1.0]), runs=2, warmup=1)   # the pool holds the events it needs
    before = _stats(ta)["events_created"]
    for _ in range(20):
        with pytest.raises(ta.errors.InvalidArgumentError, match="[Rr]eshape"):
            g.profile(x, _t(ta, [0.0]), runs=1, warmup=0)
    assert _stats(ta)["events_created"] - before <= 2


def test_sgd_reads_its_learning_rate_on_the_parameters_device(ta):
    """An optimizer on a non-CPU device hands the update kernel a learning
    rate (and momentum buffers) in that device's memory: toy_async's
    SgdUpdate reads lr on its stream and rejects host memory, as a GPU kernel
    would fault on it. Changing group["lr"] between steps reaches the device
    copy."""
    rng = np.random.default_rng(11)
    w = rng.standard_normal((3, 5)).astype(np.float32)
    grads = [rng.standard_normal((3, 5)).astype(np.float32) for _ in range(4)]
    W = _t(ta, w)
    opt = ta.optim.SGD([W], lr=0.1, momentum=0.9, dampening=0.25, weight_decay=0.01)
    ref, buf = w.astype(np.float64), np.zeros((3, 5))
    for i, g in enumerate(grads):
        lr = 0.1 if i < 2 else 0.05
        if i == 2:
            opt.param_groups[0]["lr"] = lr
        W.grad = _t(ta, g)
        opt.step()
        d = g + 0.01 * ref
        buf = d if i == 0 else 0.9 * buf + 0.75 * d
        ref = ref - lr * buf
    group = opt.param_groups[0]
    assert str(group.lr_tensor_for(W.device).device) == str(W.device)
    assert str(opt.state[W]["momentum_buffer"].device) == str(W.device)
    assert float(group.lr_tensor_for(W.device).cpu().numpy()) == 0.05
    assert float(group.lr_tensor.numpy()) == 0.05
    np.testing.assert_allclose(W.cpu().numpy(), ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(opt.state[W]["momentum_buffer"].cpu().numpy(), buf,
                               rtol=1e-5, atol=1e-6)


def test_device_namespace_of_a_plugin_device(ta):
    """dg.<type> works for any device type a plugin registers."""
    ns = ta.toy_async
    entry = [d for d in ta.plugins.devices() if d["name"] == DEV][0]
    assert ns.is_available() and ns.device_count() == entry["count"]
    assert ns.get_device_name() == entry["descriptions"][0]
    before = ns.memory_stats()["device_syncs"]
    ns.synchronize()
    assert ns.memory_stats()["device_syncs"] == before + 1
    assert ns.current_stream() == ta.current_stream(DEV)
    base = ns.memory_allocated()
    x = _t(ta, np.zeros(1 << 16))
    assert ns.memory_allocated() >= base + (1 << 18)
    del x


@pytest.mark.parametrize("train_on_user_stream", (False, True))
def test_steady_state_after_other_streams_filled_the_pool(ta, train_on_user_stream):
    """The sequence of cuda's memcheck runtime run (test_cuda_runtime.py: two
    user streams' work, a block freed on one stream and taken by another,
    then the written-out training loop): blocks of the loop's own size
    classes lie in the pool, freed on other streams while their work may
    still be pending. Once warm the loop still makes no device allocation
    (they are taken after a device-side wait) and no host wait, on the
    default stream or on a user stream."""
    rng = np.random.default_rng(15)
    s1, s2 = ta.Stream(DEV), ta.Stream(DEV)
    for s in (s1, s2):  # 64x48 and 32x48 floats: the step's 12288 / 6144 B classes
        with ta.stream(s):
            junk = [_t(ta, rng.standard_normal(n)) for n in (3072, 3072, 1536, 1536, 512, 384)]
            junk = [j * j for j in junk]
        del junk
    x = rng.standard_normal((64, 32)).astype(np.float32)
    t = rng.standard_normal((64, 8)).astype(np.float32)
    w1 = (rng.standard_normal((32, 48)) * 0.2).astype(np.float32)
    w2 = (rng.standard_normal((48, 8)) * 0.2).astype(np.float32)
    lr = 0.002
    train = ta.Stream(DEV) if train_on_user_stream else ta.default_stream(DEV)
    with ta.stream(train):
        X, T, W1, W2 = (_t(ta, v) for v in (x, t, w1, w2))
        L1, L2 = _t(ta, np.full(w1.shape, lr)), _t(ta, np.full(w2.shape, lr))
        for i in range(11):
            if i == 3:
                before = ta.memory.stats(DEV)
            W1, W2, dy = _mlp_step(ta, X, T, W1, W2, L1, L2)
            w1, w2, dy_ref = _mlp_step_np(x, t, w1, w2, lr)
        after = ta.memory.stats(DEV)
        d = {k: after[k] - before[k] for k in ("device_syncs", "num_allocs", "num_frees",
                                                "stream_syncs", "h2d_copies")}
        assert d == {"device_syncs": 0, "num_allocs": 0, "num_frees": 0, "stream_syncs": 0,
                     "h2d_copies": 0}, d
        assert after["allocated"] == before["allocated"], (before, after)
        np.testing.assert_allclose(W1.cpu().numpy(), w1, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(W2.cpu().numpy(), w2, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(dy.cpu().numpy(), dy_ref, rtol=1e-3, atol=1e-3)
