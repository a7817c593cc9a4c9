"""vm.torch's index range check of device indices (index_select, index_add)
runs on the device: one count is read back, never the indices (M3 of the
fuzz-branch review). Written without a GPU (2026-11-27), never run on one;
``DRAGON_CUDA_RUNTIME_DEVICE=toy_async`` with
``DRAGON_CUDA_RUNTIME_LIBRARY=<libtoy_async.so>`` runs it on the toy device.
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
    if DEV == "cuda":
        if dragon_cuda.device_count() == 0:
            pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")
    else:
        lib = os.environ.get("DRAGON_CUDA_RUNTIME_LIBRARY")
        if not lib:
            pytest.skip("DRAGON_CUDA_RUNTIME_DEVICE is set without DRAGON_CUDA_RUNTIME_LIBRARY")
        if DEV not in [d["name"] for d in dg.plugins.devices()]:
            dg.load_library(lib)
    yield


def _d2h():
    return dg.memory.stats(DEV0)["d2h_copies"]


def test_index_select_and_index_add_match_cpu():
    import dragon_core.vm.torch as vt
    x = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    idx = np.array([3, 0, 0, 2])
    xc, ic = vt.tensor(x), vt.tensor(idx)
    xd, idd = xc.to(DEV0), ic.to(DEV0)
    np.testing.assert_array_equal(vt.index_select(xd, 0, idd).cpu().numpy(), x[idx])
    ref = vt.index_add(xc, 0, ic, vt.ones(4, 3)).numpy()
    np.testing.assert_array_equal(vt.index_add(xd, 0, idd, vt.ones(4, 3).to(DEV0)).cpu().numpy(),
                                  ref)


def test_out_of_range_device_index_raises():
    import dragon_core.vm.torch as vt
    xd = vt.ones(4, 3).to(DEV0)
    for bad in ([4], [-1], [0, 9]):
        with pytest.raises(IndexError, match="index_select"):
            vt.index_select(xd, 0, vt.tensor(bad).to(DEV0))
        with pytest.raises(RuntimeError, match="index_add"):
            vt.index_add(xd, 0, vt.tensor(bad).to(DEV0), vt.ones(len(bad), 3).to(DEV0))


def test_range_check_reads_one_value():
    import dragon_core.vm.torch as vt
    xd = vt.ones(1000, 3).to(DEV0)
    idd = vt.tensor(np.arange(1000)[::-1].copy()).to(DEV0)
    vt.index_select(xd, 0, idd)   # warm
    before = _d2h()
    vt.index_select(xd, 0, idd)
    assert _d2h() - before <= 1


def test_max_dim_under_autograd_reads_nothing_back():
    """max(dim)/min(dim) under autograd pick their values on the device (a
    one-hot mask of the argmax): no device-to-host copy, values and
    gradients as on the host."""
    import dragon_core.vm.torch as vt
    x = np.array([[1.0, 5.0, 2.0], [7.0, 0.0, 7.0], [-1.0, float("nan"), 3.0]], np.float32)
    outs = []
    for dev in ("cpu", DEV0):
        t = vt.tensor(x).to(dev).requires_grad_(True) if dev != "cpu" else \
            vt.tensor(x, requires_grad=True)
        before = _d2h() if dev != "cpu" else 0
        v, i = t.max(1)
        m, j = t.min(0, keepdim=True)
        if dev != "cpu":
            assert _d2h() == before
        (v.sum() + m.sum()).backward()
        outs.append((v.detach().cpu().numpy(), i.cpu().numpy(), m.detach().cpu().numpy(),
                     j.cpu().numpy(), t.grad.cpu().numpy()))
    for a, b in zip(*outs):
        np.testing.assert_array_equal(a, b)
