"""Python scalar operands on a stream-ordered device (toy_async).

``x * 0.9`` or ``ops.add(x, 1.0)`` with x on a non-cpu device needs the
scalar as a 0-d device tensor. Each distinct (device, dtype, value) is made
once and reused (``_tensor._device_scalar``), read-only, instead of a new
tensor and a pageable host-to-device copy per call: the device's
``h2d_copies`` counter (``dg.memory.stats``) shows the copies per step, and
the results must be exactly those of fresh scalar tensors (and NumPy's).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

DEV = "toy_async"


@pytest.fixture
def ta(dg, toy_async):
    from dragon_core import _tensor
    _tensor._drop_device_scalars()
    yield dg
    _tensor._drop_device_scalars()


def _t(dg, a):
    return dg.tensor(np.asarray(a, dtype=np.float32)).to(DEV)


def _step(dg, x, rm):
    """Batch-norm style running statistics and an update, written out with
    Python scalars through every path: the C++ operator, the Python
    promotion path (reflected), and the core's conversion of op inputs."""
    m = x * 0.5
    rm = rm * 0.9 + m * 0.1          # running mean update
    y = dg.ops.add(rm, 2.0)          # core's operand conversion
    z = 1.5 - dg.ops.mul(y, 0.25)    # reflected operator, then an op input
    return rm, z


def _step_np(x, rm):
    f = np.float32
    m = x * f(0.5)
    rm = rm * f(0.9) + m * f(0.1)
    y = rm + f(2.0)
    return rm, f(1.5) - y * f(0.25)


def _stats(dg):
    s = dg.memory.stats(DEV)
    return {k: s[k] for k in ("h2d_copies", "num_requests", "num_allocs", "device_syncs")}


def _run_steps(dg, steps):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(64).astype(np.float32)
    x, rm = _t(dg, a), _t(dg, np.zeros(64))
    ref = np.zeros(64, np.float32)
    for _ in range(2):  # warm: the scalars are made, the pool fills
        rm, z = _step(dg, x, rm)
        ref, zr = _step_np(a, ref)
    before = _stats(dg)
    for _ in range(steps):
        rm, z = _step(dg, x, rm)
        ref, zr = _step_np(a, ref)
    after = _stats(dg)
    np.testing.assert_array_equal(rm.cpu().numpy(), ref)
    np.testing.assert_array_equal(z.cpu().numpy(), zr)
    return {k: (after[k] - before[k]) / steps for k in before}


def test_repeated_scalars_make_no_copy_per_step(ta):
    """Six scalar operands per step: six host-to-device copies and six
    extra allocation requests per step without the cache, none with it;
    the same bits either way."""
    old = ta._C._device_scalar_limit(0)  # the old behaviour: a new tensor per scalar
    try:
        fresh = _run_steps(ta, 5)
    finally:
        ta._C._device_scalar_limit(old)
    assert ta._C._device_scalar_count() == 0
    cached = _run_steps(ta, 5)
    assert fresh["h2d_copies"] == 6, fresh
    assert cached["h2d_copies"] == 0, cached
    assert fresh["num_requests"] - cached["num_requests"] == 6, (fresh, cached)
    assert cached["num_allocs"] == 0 and cached["device_syncs"] == 0, cached


def test_the_counter_counts_copies(ta):
    before = ta.memory.stats(DEV)
    x = _t(ta, [1.0, 2.0])
    mid = ta.memory.stats(DEV)
    assert x.cpu().tolist() == [1.0, 2.0]
    after = ta.memory.stats(DEV)
    assert mid["h2d_copies"] - before["h2d_copies"] == 1
    assert after["d2h_copies"] - mid["d2h_copies"] == 1
    assert ta.memory.stats("cpu")["h2d_copies"] == 0


def test_cached_scalar_is_read_only_and_never_a_result(ta):
    from dragon_core import _tensor
    f32 = ta.float32
    s = _tensor._scalar_operand(0.9, f32, ta.device(DEV))
    assert s.is_read_only and str(s.device) == f"{DEV}:0" and s.shape == ()
    assert _tensor._scalar_operand(0.9, f32, ta.device(DEV)) is s
    assert s.cpu().numpy() == np.float32(0.9)
    x = _t(ta, [1.0, 2.0, 3.0])
    for y in (x * 0.9, 0.9 * x, ta.ops.mul(x, 0.9), ta.ops.add(x, 0.0)):
        assert not y.is_read_only and not y._same_storage(s)
        assert not y._same_storage(x)
    np.testing.assert_array_equal((x * 0.9).cpu().numpy(),
                                  np.float32([1, 2, 3]) * np.float32(0.9))
    # A tensor the user makes from a scalar is their own, writable one.
    u = ta.tensor(0.9, device=DEV)
    assert not u.is_read_only and not u._same_storage(s)
    # Rebinding a tensor that holds the value (assign) never writes it.
    v = _t(ta, 5.0)
    v.assign(s)
    v.assign(_t(ta, 7.0))
    assert s.cpu().numpy() == np.float32(0.9) and v.cpu().numpy() == np.float32(7.0)
    # Assigning a Python scalar gives the tensor its own writable copy, never
    # the shared cached operand (tf.Variable.assign(0.01) takes this path).
    v.assign(0.9)
    assert not v.is_read_only and not v._same_storage(s)
    assert v.cpu().numpy() == np.float32(0.9)
    v.__dlpack__()  # a read-only tensor refuses an unversioned export


def test_values_dtypes_and_devices_stay_apart(ta):
    """-0.0 and 0.0, NaN, float32 and float64 of one value, the cpu: each
    its own tensor with its own bits; the promotion rules are untouched
    (an int or a bool scalar with a float32 tensor is float32)."""
    from dragon_core import _tensor
    dev = ta.device(DEV)
    pz = _tensor._scalar_operand(0.0, ta.float32, dev)
    nz = _tensor._scalar_operand(-0.0, ta.float32, dev)
    assert pz is not nz
    assert not np.signbit(pz.cpu().numpy()) and np.signbit(nz.cpu().numpy())
    d = _tensor._scalar_operand(0.1, ta.float64, dev)
    f = _tensor._scalar_operand(0.1, ta.float32, dev)
    assert d is not f and str(d.dtype) == "float64" and str(f.dtype) == "float32"
    assert d.cpu().numpy() == np.float64(0.1) and f.cpu().numpy() == np.float32(0.1)
    assert np.isnan(_tensor._scalar_operand(float("nan"), ta.float32, dev).cpu().numpy())
    x = _t(ta, [1.0, -2.0])
    for v in (-0.0, 0.0, 3, True, 1e-45, 2.0**40, float("inf"), float("nan")):
        got = x * v
        assert str(got.dtype) == "float32", v
        want = (ta.tensor(np.float32([1.0, -2.0])) * v).numpy()
        np.testing.assert_array_equal(got.cpu().numpy(), want)
        np.testing.assert_array_equal(np.signbit(got.cpu().numpy()), np.signbit(want))
    # cpu operands are not cached (the C++ fast path or a fresh tensor).
    n = ta._C._device_scalar_count()
    c = ta.tensor(np.float32([1.0, 2.0]))
    assert (ta.ops.add(c, 0.5)).tolist() == [1.5, 2.5] and (c * 0.25).tolist() == [0.25, 0.5]
    assert ta.ops.cast(c, dtype="float16") * 0.5 is not None
    assert ta._C._device_scalar_count() == n


def test_cache_is_bounded_and_empty_cache_drops_it(ta):
    from dragon_core import _tensor
    x = _t(ta, [1.0, 2.0])
    base = ta.memory.stats(DEV)["allocated"]
    n = _tensor._SCALAR_CACHE_SIZE + 40
    for k in range(n):  # a value that changes every step (an lr schedule)
        y = x * (1.0 + k / 1024)
    np.testing.assert_array_equal(y.cpu().numpy(),
                                  np.float32([1, 2]) * np.float32(1.0 + (n - 1) / 1024))
    assert ta._C._device_scalar_count() == _tensor._SCALAR_CACHE_SIZE == \
        ta._C._device_scalar_limit()
    del y
    assert ta.memory.stats(DEV)["allocated"] > base
    ta.memory.empty_cache(DEV)
    assert ta._C._device_scalar_count() == 0
    assert ta.memory.stats(DEV)["allocated"] == base


def test_traced_functions_keep_their_own_constants(ta):
    """A trace records its scalars as graph constants, not cached tensors."""
    from dragon_core import _tensor
    x = _t(ta, [1.0, 2.0, 4.0])

    @ta.function
    def f(x):
        return x * 0.75 + 0.5

    n = ta._C._device_scalar_count()
    got = f(x).cpu().numpy()
    assert ta._C._device_scalar_count() == n
    want = np.float32([1, 2, 4]) * np.float32(0.75) + np.float32(0.5)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(f(x).cpu().numpy(), want)
    np.testing.assert_array_equal((x * 0.75 + 0.5).cpu().numpy(), want)  # eager, cached


def test_python_threads_hammering_the_cache(ta):
    """Six Python threads (grad-mode on in half of them) multiply by scalars
    from a pool larger than the cache while a seventh shrinks, grows and
    drops it (``empty_cache``): every product is exact and the cache never
    holds more than its limit."""
    import threading
    x_np = np.float32([1.0, -2.0, 0.5, 3.0])
    x = _t(ta, x_np)
    limit = 48
    old = ta._C._device_scalar_limit(limit)
    errors, sizes = [], []
    stop = threading.Event()

    def worker(k):
        try:
            rng = np.random.default_rng(k)
            with ta.GradientTape() if k % 2 else contextlib.nullcontext():
                for _ in range(300):
                    v = float(rng.integers(0, 3 * limit)) / 8.0 - 2.0
                    got = (x * v).cpu().numpy() if k % 3 else ta.ops.add(x, v).cpu().numpy()
                    want = x_np * np.float32(v) if k % 3 else x_np + np.float32(v)
                    if not np.array_equal(got, want):
                        errors.append((k, v, got, want))
                    sizes.append(ta._C._device_scalar_count())
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append((k, repr(e)))

    def churn():
        try:
            while not stop.is_set():
                ta._C._device_scalar_limit(limit // 2)
                sizes.append(ta._C._device_scalar_count())
                ta._C._device_scalar_limit(limit)
                ta.memory.empty_cache(DEV)
        except Exception as e:  # noqa: BLE001
            errors.append(("churn", repr(e)))

    try:
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        c = threading.Thread(target=churn)
        c.start()
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        stop.set()
        c.join(timeout=60)
        assert not any(t.is_alive() for t in threads + [c]), "a thread hung"
    finally:
        ta._C._device_scalar_limit(old)
    assert not errors, errors[:5]
    assert len(sizes) >= 6 * 300 and max(sizes) <= limit


_STRESS = r"""
import sys
import dragon_core as dg
dg.load_library(sys.argv[1])
C = dg._C
# many distinct values, a small cache: it evicts all the time; few
# read-backs keep the threads in the cache (every read-back waits)
C._device_scalar_limit(16)
for _ in range(4):
    r = C._device_scalar_stress("toy_async", threads=8, iterations=2000, distinct=40,
                                check_every=64)
    assert r["calls"] == 16000 and r["wrong"] == 0, r
    assert 0 < r["max_size"] <= 16 and C._device_scalar_count() <= 16, r
# every fetched value read back
r = C._device_scalar_stress("toy_async", threads=4, iterations=200, distinct=40)
assert r["calls"] == 800 and r["wrong"] == 0 and r["max_size"] <= 16, r
# limit 0: nothing cached, every call makes its own tensor
C._device_scalar_limit(0)
r = C._device_scalar_stress("toy_async", threads=4, iterations=100, distinct=10)
assert r["wrong"] == 0 and r["max_size"] == 0 and C._device_scalar_count() == 0, r
# room for all: each value cached once
C._device_scalar_limit(256)
r = C._device_scalar_stress("toy_async", threads=8, iterations=500, distinct=10,
                            check_every=8)
assert r["wrong"] == 0 and C._device_scalar_count() == 10, r
print("STRESS OK")
"""


def test_native_threads_without_the_gil(ta, fixture_plugins):
    """The cache's own mutex, checked where the GIL cannot serialise the
    callers: native threads with the GIL released fetch scalars (more
    distinct values than the cache holds, so it evicts all the time) and
    read them back. In a fresh process: without the mutex this crashes
    (measured: a segmentation fault, and the cache past its bound, within
    a few runs)."""
    import subprocess
    import sys
    p = subprocess.run([sys.executable, "-c", _STRESS, str(fixture_plugins["toy_async"])],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "STRESS OK" in p.stdout, \
        f"exit code {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    with pytest.raises(ValueError, match="_device_scalar_stress: needs a non-host device"):
        ta._C._device_scalar_stress("cpu", threads=1, iterations=1, distinct=1)
