"""The autocast cast cache (issue 21): a tensor cast once per region while
the cast is alive; dropped on exit; invalidated by in-place writes (version
counters), requires_grad and grad-mode changes; off under tapes and traces.

Casts are counted with dragon_core.profiler; every cached result is checked
bit for bit against the same computation with cache_enabled=False.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import _C


@pytest.fixture
def rng():
    return np.random.default_rng(303)


def _f32(rng, *shape):
    return dg.tensor(rng.standard_normal(shape).astype(np.float32))


def _casts(fn, *args):
    with dg.profiler.profile() as prof:
        out = fn(*args)
    return out, prof.count("Cast")


def _qkv(x, ws, cache=True):
    with dg.autocast("cpu", cache_enabled=cache):
        outs = [dg.ops.matmul(x, w) for w in ws]
        total = outs[0] + outs[1] + outs[2]
    return total


def test_shared_input_cast_once_per_region(rng):
    """x read by three matmuls: one Cast of x (and one per weight); the
    values and the gradients equal the uncached computation bit for bit."""
    x0 = rng.standard_normal((6, 8)).astype(np.float32)
    w0 = [rng.standard_normal((8, 5)).astype(np.float32) for _ in range(3)]
    results = {}
    for cache in (True, False):
        x = dg.tensor(x0)
        x.requires_grad = True
        ws = [dg.tensor(w) for w in w0]
        for w in ws:
            w.requires_grad = True
        y, n = _casts(lambda: _qkv(x, ws, cache))
        y.sum().backward()
        results[cache] = (n, y.numpy(), x.grad.numpy(), [w.grad.numpy() for w in ws])
    assert results[True][0] == 4 and results[False][0] == 6
    for a, b in zip(results[True][1:3], results[False][1:3]):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(results[True][3], results[False][3]):
        np.testing.assert_array_equal(a, b)
    xr = x0.astype(np.float64)
    ref = sum((xr @ w.astype(np.float64)) for w in w0)
    np.testing.assert_allclose(results[True][1], ref, rtol=0, atol=0.05 * np.abs(ref).max())


def test_weight_read_twice_cast_once(rng):
    w = _f32(rng, 4, 4)
    w.requires_grad = True
    x = _f32(rng, 3, 4)

    def f():
        with dg.autocast("cpu"):
            return dg.ops.matmul(dg.ops.matmul(x, w), w)
    y, n = _casts(f)
    assert n == 3     # x, w once, the float32 product
    y.sum().backward()
    g_cached = w.grad.numpy()
    w.grad = None
    with dg.autocast("cpu", cache_enabled=False):
        y2 = dg.ops.matmul(dg.ops.matmul(x, w), w)
    y2.sum().backward()
    np.testing.assert_array_equal(y.numpy(), y2.numpy())
    np.testing.assert_array_equal(g_cached, w.grad.numpy())


def test_dropped_on_exit(rng):
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        y = dg.ops.matmul(x, w)
        assert _C._autocast_cache_size() == 2
    assert _C._autocast_cache_size() == 0
    with dg.autocast("cpu"):
        _, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 2
    assert y.dtype == dg.float32


def test_in_place_write_to_source_invalidates(rng):
    """The casts stay alive through the recorded MatMul; writing x in place
    (its version changes) makes the next use cast x again."""
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        y1 = dg.ops.matmul(x, w)
        x.assign(x * 2.0)
        y2, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 1                        # x again; w's cast reused
    with dg.autocast("cpu", cache_enabled=False):
        ref = dg.ops.matmul(x, w)
    np.testing.assert_array_equal(y2.numpy(), ref.numpy())
    np.testing.assert_allclose(y2.numpy(), 2.0 * y1.numpy(), rtol=1e-6)


def test_in_place_write_to_weight_between_uses(rng):
    """A weight updated in place inside the region (its version changes)
    is cast again: the second product sees the new value."""
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        a = dg.ops.matmul(x, w)          # recorded: the cast of w stays alive
        with dg.no_grad():
            w.assign(w + 1.0)
        b, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 1                        # w again; x's cast is reused
    with dg.autocast("cpu", cache_enabled=False):
        ref = dg.ops.matmul(x, w)
    np.testing.assert_array_equal(b.numpy(), ref.numpy())
    assert not np.array_equal(a.numpy(), b.numpy())


def test_in_place_write_to_cached_cast_invalidates(rng):
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        a = dg.ops.matmul(x, w)
        node = a._grad_fn
        w16 = node.inputs[1]              # the cached cast of w
        with dg.no_grad():
            w16.assign(dg.ops.zeros(list(w16.shape), dtype="bfloat16"))
        b, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 1
    with dg.autocast("cpu", cache_enabled=False):
        ref = dg.ops.matmul(x, w)
    np.testing.assert_array_equal(b.numpy(), ref.numpy())


def test_requires_grad_change_recasts_and_gradient_flows(rng):
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        a = dg.ops.matmul(x, w)          # x's cast: recorded without grad
        x.requires_grad = True
        b, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 1                        # x again (now recorded); w's reused
    (a.sum() + b.sum()).backward()
    assert x.grad is not None
    with dg.autocast("cpu", cache_enabled=False):
        ref = dg.ops.matmul(x, w)
    np.testing.assert_array_equal(b.numpy(), ref.numpy())


def test_grad_mode_keys_the_cache(rng):
    """A cast recorded for autograd is not reused under no_grad (and the
    product there records nothing)."""
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True
    with dg.autocast("cpu"):
        a = dg.ops.matmul(x, w)           # recorded: its casts stay alive
        with dg.no_grad():
            b, n = _casts(lambda: dg.ops.matmul(x, w))
    assert n == 2
    assert b._grad_fn is None and a._grad_fn is not None
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_cache_keeps_nothing_alive(rng):
    """Without autograd nothing holds the first cast: the second use casts
    again (no memory is kept by the cache)."""
    x, w1, w2 = _f32(rng, 3, 4), _f32(rng, 4, 2), _f32(rng, 4, 2)
    with dg.autocast("cpu"):
        _, n = _casts(lambda: (dg.ops.matmul(x, w1), dg.ops.matmul(x, w2)))
        assert _C._autocast_cache_size() == 0
    assert n == 4


def test_not_used_under_a_tape(rng):
    """While a tape records, every use is cast (and recorded on the tape),
    so the tape's gradient is complete."""
    x0 = rng.standard_normal((3, 4)).astype(np.float32)
    w = _f32(rng, 4, 2)
    x = dg.tensor(x0)
    with dg.autocast("cpu"):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y, n = _casts(lambda: dg.ops.matmul(x, w) + dg.ops.matmul(x, w))
            loss = y.sum()
    assert n == 4
    gx = tape.gradient(loss, x)
    wr = w.numpy().astype(np.float64)
    u = np.asarray(wr, np.float32).view(np.uint32).astype(np.uint64)
    wb = ((u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    ref = 2.0 * np.ones((3, 2)) @ wb.astype(np.float64).T
    np.testing.assert_allclose(gx.numpy(), ref, rtol=2.0 ** -7, atol=1e-6)


def test_not_used_while_tracing(rng):
    x, w = _f32(rng, 3, 4), _f32(rng, 4, 2)
    w.requires_grad = True

    def f(x):
        with dg.autocast("cpu"):
            return dg.ops.matmul(x, w) + dg.ops.matmul(x, w)
    types = [op.type for op in dg.function(f, opt_level=0).get_graph(x).op]
    assert types.count("Cast") == 4, types
    with dg.autocast("cpu"):
        dg.ops.matmul(x, w)               # an eager cast of w in an outer region
        g = dg.function(f)
        np.testing.assert_array_equal(g(x).numpy(), f(x).numpy())


def test_cache_enabled_argument():
    with pytest.raises(TypeError, match="cache_enabled"):
        dg.autocast("cpu", cache_enabled=1)
    assert _C._autocast_cache() is True
    with dg.autocast("cpu", cache_enabled=False):
        assert _C._autocast_cache() is False
        with dg.autocast("cpu"):
            assert _C._autocast_cache() is True
        assert _C._autocast_cache() is False
    assert _C._autocast_cache() is True


def test_views_of_one_input_share_the_cast(rng):
    """linear reshapes its 3-D input for the product: the three projections
    of one layer input (no grad) still cast it once; values unchanged."""
    x = _f32(rng, 2, 5, 8)
    layers = [dg.nn.Linear(8, 4) for _ in range(3)]

    def f(cache):
        with dg.autocast("cpu", cache_enabled=cache):
            return [layer(x) for layer in layers]
    (outs, n) = _casts(lambda: f(True))
    (ref, n_ref) = _casts(lambda: f(False))
    assert n == 4 and n_ref == 6, (n, n_ref)
    for a, b in zip(outs, ref):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_views_that_require_grad_are_not_shared(rng):
    """A view (or alias) of the same bytes that requires grad gets its own
    cast, so its gradient goes to it and not to the other tensor."""
    x = _f32(rng, 3, 4)
    x.requires_grad = True
    y = x.detach()
    y.requires_grad = True
    w = _f32(rng, 4, 2)
    with dg.autocast("cpu"):
        a = dg.ops.matmul(x, w)
        b, n = _casts(lambda: dg.ops.matmul(y, w))
    assert n == 1                         # y's own cast; w's reused
    (a.sum() + 2.0 * b.sum()).backward()
    np.testing.assert_allclose(y.grad.numpy(), 2.0 * x.grad.numpy(), rtol=1e-6)


def _product_after_outside_write(make_x, write):
    """Two products of x inside one region, x's bytes rewritten between them
    through a view the front end cannot see: the second product must see
    the new values, as with the cache off."""
    w = dg.tensor(np.eye(4, dtype=np.float32))
    w.requires_grad = True
    out = {}
    for cache in (True, False):
        x, buf = make_x()
        with dg.autocast("cpu", cache_enabled=cache):
            y1 = x @ w
            write(x, buf)
            y2 = x @ w
        out[cache] = (y1.numpy().copy(), y2.numpy().copy())
    np.testing.assert_array_equal(out[True][1], out[False][1])
    np.testing.assert_array_equal(out[True][1], np.full((4, 4), 3.0, np.float32))
    assert not np.array_equal(out[True][0], out[True][1])


def test_from_numpy_buffer_refilled_is_cast_again():
    """A loader refilling a from_numpy buffer inside one autocast region
    (review finding: the cached cast of the old batch was reused)."""
    def make():
        buf = np.ones((4, 4), np.float32)
        return dg.from_numpy(buf), buf

    def write(x, buf):
        buf[:] = 3.0
    _product_after_outside_write(make, write)


def test_write_through_numpy_view_is_cast_again():
    def make():
        return dg.tensor(np.ones((4, 4), np.float32)), None

    def write(x, buf):
        x.numpy()[:] = 3.0
    _product_after_outside_write(make, write)


def test_write_through_dlpack_view_is_cast_again():
    def make():
        x = dg.tensor(np.ones((4, 4), np.float32))
        return x, np.from_dlpack(x)

    def write(x, view):
        view[:] = 3.0
    _product_after_outside_write(make, write)


def test_tensors_never_exported_still_use_the_cache(rng):
    """The skip is only for exported memory: an ordinary weight is still
    cast once for two reads."""
    w = _f32(rng, 4, 4)
    w.requires_grad = True
    x = _f32(rng, 3, 4)
    with dg.autocast("cpu"):
        _, n = _casts(lambda: dg.ops.matmul(dg.ops.matmul(x, w), w))
    assert n == 3
