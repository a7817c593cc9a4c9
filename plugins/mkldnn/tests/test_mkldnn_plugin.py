"""The mkldnn plugin loads through the ABI only and wins over cpu_eigen."""

import dragon_core as dg


def test_plugin_is_loaded():
    info = [p for p in dg.plugins.list_plugins() if p.name == "mkldnn"]
    assert info and info[0].state == "loaded", dg.plugins.list_plugins()


def test_library_passes_the_abi_audit():
    """One exported symbol, no core symbol imported; oneDNN and the GNU
    OpenMP runtime are the only libraries beyond the C/C++ runtime."""
    import dragon_mkldnn
    from dragon_sdk.testing import audit_plugin_so
    audit = audit_plugin_so(dragon_mkldnn.plugin_library(), abi_major=1,
                            allowed_libs=["libdnnl.so.3", "libgomp.so.1"])
    assert "libdnnl.so.3" in audit.needed


def test_threads_share_a_cache_that_evicts_primitives_in_use():
    """With room for two primitives, four threads (and a graph run on two
    worker threads) calling conv, pooling, softmax and layer norm evict the
    primitives the others are running; every result equals the serial one.
    (Run in a child: the cache capacity is read once per process.)"""
    from mkldnn_testing import run_without

    report = run_without("", """
        import json
        import threading
        import numpy as np
        import dragon_core as dg

        rng = np.random.default_rng(0)
        x = rng.standard_normal((2, 16, 9, 9)).astype(np.float32)
        w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
        s = rng.standard_normal((8, 33)).astype(np.float32)
        g, b = np.ones(33, np.float32), np.zeros(33, np.float32)

        def calls(i):
            t = dg.tensor(x[:, :, : 9 - i % 3])
            return [dg.ops.conv2d(t, dg.tensor(w), pads=[i % 2, 1]),
                    dg.ops.max_pool2d(t, kernel_size=[2, 2]),
                    dg.ops.avg_pool2d(t, kernel_size=[3, 3], strides=[1 + i % 2, 1]),
                    dg.ops.softmax(dg.tensor(s[: 8 - i % 4]), axis=-1),
                    dg.ops.layer_norm(dg.tensor(s[: 8 - i % 4]), dg.tensor(g), dg.tensor(b),
                                      axis=-1)]

        want = {i: [y.numpy() for y in calls(i)] for i in range(6)}
        errors = []
        barrier = threading.Barrier(4)

        def worker(tid):
            barrier.wait()
            try:
                for it in range(24):
                    i = (tid + it) % 6
                    for got, ref in zip(calls(i), want[i]):
                        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)
            except Exception as e:
                errors.append(f"thread {tid}: {e!r}"[:300])

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

        def two(a, v):
            return (dg.ops.sum(dg.ops.conv2d(a, v, pads=[0, 1]))
                    + dg.ops.sum(dg.ops.max_pool2d(a, kernel_size=[2, 2])))

        f = dg.function(two, parallel=2)
        ref = dg.ops.sum(calls(0)[0]).numpy() + dg.ops.sum(calls(0)[1]).numpy()
        for _ in range(10):
            try:
                np.testing.assert_allclose(f(dg.tensor(x), dg.tensor(w)).numpy(), ref,
                                           rtol=1e-5, atol=1e-3)
            except Exception as e:
                errors.append(f"graph: {e!r}"[:300])
        print(json.dumps(errors))
    """, DRAGON_MKLDNN_CACHE_CAPACITY="2")
    assert report == [], report
