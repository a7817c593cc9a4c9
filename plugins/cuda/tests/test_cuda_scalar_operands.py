"""Python scalar operands on the cuda device: the core's scalar-operand cache
(bind_ops.cc ``DeviceScalar``, ``_tensor._scalar_operand``) on real CUDA.

``x * 0.9`` with x on cuda reads the scalar from a cached read-only 0-d
device tensor, made once per (device, dtype, value) by a host-to-device copy
from a pageable buffer that is freed as soon as the copy call returns. These
tests check, on a GPU, what tests/plugins/test_scalar_operands.py checks on
the toy stream-ordered device: the results are NumPy's bit for bit
(float32 element-wise kernels, one rounding per op), a warm step makes no
host-to-device copy, a scalar cached on one stream is read correctly on
another, and a cached scalar is never handed out as a result or written.
Written without a GPU (2026-11-27); ``DRAGON_CUDA_RUNTIME_DEVICE=toy_async``
with ``DRAGON_CUDA_RUNTIME_LIBRARY=<libtoy_async.so>`` runs them on the toy
device instead, to check the tests themselves.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dragon_core as dg
import dragon_cuda

DEV = os.environ.get("DRAGON_CUDA_RUNTIME_DEVICE", "cuda")
DEV0 = f"{DEV}:0"

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _device():
    """Skips with the device's reason where there is no cuda device; starts
    and ends each test with an empty scalar cache."""
    if DEV == "cuda":
        if dragon_cuda.device_count() == 0:
            pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")
    else:
        lib = os.environ.get("DRAGON_CUDA_RUNTIME_LIBRARY")
        if not lib:
            pytest.skip("DRAGON_CUDA_RUNTIME_DEVICE is set without DRAGON_CUDA_RUNTIME_LIBRARY")
        if DEV not in [d["name"] for d in dg.plugins.devices()]:
            dg.load_library(lib)
    dg.memory.empty_cache(DEV)  # drops the device's cached scalar operands first
    yield
    dg.memory.empty_cache(DEV)


def _t(a):
    return dg.tensor(np.asarray(a, dtype=np.float32)).to(DEV)


def _step(x, rm):
    """Running statistics written out with Python scalars through every
    path: the C++ operator, an op's input conversion, a reflected operator."""
    m = x * 0.5
    rm = rm * 0.9 + m * 0.1
    y = dg.ops.add(rm, 2.0)
    z = 1.5 - dg.ops.mul(y, 0.25)
    return rm, z


def _step_np(x, rm):
    f = np.float32
    m = x * f(0.5)
    rm = rm * f(0.9) + m * f(0.1)
    y = rm + f(2.0)
    return rm, f(1.5) - y * f(0.25)


def _h2d():
    return dg.memory.stats(DEV0)["h2d_copies"]


def test_warm_steps_make_no_copy_and_give_numpys_bits():
    rng = np.random.default_rng(0)
    a = rng.standard_normal(4099).astype(np.float32)
    x, rm = _t(a), _t(np.zeros_like(a))
    ref = np.zeros_like(a)
    for _ in range(2):  # warm: the six scalars are made
        rm, z = _step(x, rm)
        ref, zr = _step_np(a, ref)
    before = _h2d()
    for _ in range(5):
        rm, z = _step(x, rm)
        ref, zr = _step_np(a, ref)
    after = _h2d()
    np.testing.assert_array_equal(rm.cpu().numpy(), ref)
    np.testing.assert_array_equal(z.cpu().numpy(), zr)
    assert after == before, f"{after - before} host-to-device copies in 5 warm steps"


def test_scalar_cached_on_one_stream_is_read_on_another():
    """The cached tensor is written by a copy on the stream current when it
    was made; a later op on another stream must see the value (the core
    orders the reader after the writer)."""
    a = np.arange(1, 1 << 16, dtype=np.float32)
    x = _t(a)
    s1, s2 = dg.Stream(DEV), dg.Stream(DEV)
    with dg.stream(s1):
        y1 = x * 0.7  # makes the cached 0.7 on s1
    with dg.stream(s2):
        y2 = x * 0.7  # reads it on s2
        got2 = y2.cpu().numpy()
    got1 = y1.cpu().numpy()
    want = a * np.float32(0.7)
    np.testing.assert_array_equal(got1, want)
    np.testing.assert_array_equal(got2, want)


def test_cached_scalar_is_read_only_and_never_a_result():
    # The cache entry itself (read-only, one per value) is private to the
    # core; tests/plugins/test_scalar_operands.py checks it. Here, through
    # the public surface: on cuda every result is a writable tensor of its
    # own, also when the same scalar is used twice.
    x = _t([1.0, 2.0, 3.0])
    ys = (x * 0.9, 0.9 * x, dg.ops.mul(x, 0.9), dg.ops.add(x, 0.0))
    for i, y in enumerate(ys):
        assert not y.is_read_only
        assert not y._same_storage(x)
        assert not any(y._same_storage(z) for z in ys[i + 1:])
    np.testing.assert_array_equal((x * 0.9).cpu().numpy(),
                                  np.float32([1, 2, 3]) * np.float32(0.9))
    v = _t(5.0)
    v.assign(0.9)  # a Python scalar: the tensor's own writable copy
    assert not v.is_read_only and not any(v._same_storage(y) for y in ys)
    assert v.cpu().numpy() == np.float32(0.9)
    np.testing.assert_array_equal((x * 0.9).cpu().numpy(),
                                  np.float32([1, 2, 3]) * np.float32(0.9))


@pytest.mark.parametrize("dtype", ["float64", "int32", "int64"])
def test_other_dtypes_match_numpy(dtype):
    if DEV != "cuda":
        pytest.skip("the toy device has float32 kernels only")
    a = np.arange(-7, 9).astype(dtype)
    x = dg.tensor(a).to(DEV)
    want = [a * a.dtype.type(3), a + a.dtype.type(2), a.dtype.type(5) - a]
    for _ in range(2):  # the second round reads the cached scalars
        got = [x * 3, x + 2, 5 - x]
        for g, w in zip(got, want):
            assert str(g.dtype) == dtype
            np.testing.assert_array_equal(g.cpu().numpy(), w)
