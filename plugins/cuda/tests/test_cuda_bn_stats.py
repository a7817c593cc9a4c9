"""BatchNormStatsUpdate on cuda (src/bn_stats.cu), GPU-checked against the
cpu kernel and a float64 NumPy reference; and the running-statistics update
of a compiled BatchNorm2d training step on cuda against the same step on
the cpu. Written without a GPU (session of 2026-11-27): the ``gpu`` tests
skip here and run on the GPU machine. The registration itself is checked
here (no device needed).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import nn


def test_kernel_is_registered_for_every_float_dtype():
    kernels = [k for k in dg.plugins.kernels("BatchNormStatsUpdate") if k["plugin"] == "cuda"]
    assert kernels, dg.plugins.kernels("BatchNormStatsUpdate")
    text = str(kernels)
    for dt in ("float32", "float64", "float16", "bfloat16"):
        assert dt in text, text


def _ref(rm, rv, bm, bv, momentum, count):
    return [(1 - momentum) * rm + momentum * bm,
            (1 - momentum) * rv + momentum * bv * count / (count - 1)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("n", [0, 1, 64, 1000])
def test_matches_cpu_and_reference(gpu, dtype, n):
    rng = np.random.default_rng(n)
    arrays = [rng.uniform(-2, 2, n), rng.uniform(0.5, 2, n), rng.uniform(-2, 2, n),
              rng.uniform(0.1, 3, n)]
    cpu = [dg.tensor(a.astype(np.float32)).to(dtype) for a in arrays]
    dev = [t.to("cuda") for t in cpu]
    want_cpu = dg.ops.batch_norm_stats_update(*cpu, momentum=0.3, count=37)
    got = dg.ops.batch_norm_stats_update(*dev, momentum=0.3, count=37)
    ref = _ref(*[t.to("float64").numpy() for t in cpu], 0.3, 37)
    for g, c, r in zip(got, want_cpu, ref):
        assert str(g.device).startswith("cuda") and g.dtype == dtype
        g64 = g.to("cpu").to("float64").numpy()
        # Both compute in double and round once: the same bits.
        np.testing.assert_array_equal(g64, c.to("float64").numpy())
        np.testing.assert_allclose(g64, r, rtol={"bfloat16": 1e-2, "float16": 1e-3}.get(dtype,
                                                                                        1e-6))


@pytest.mark.gpu
def test_compiled_batchnorm_step_updates_running_stats_like_cpu(gpu):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 3, 6, 6)).astype(np.float32)
    out = {}
    for dev in ("cpu", "cuda"):
        bn = nn.BatchNorm2d(3, momentum=0.2)
        bn.train()
        bn.to(dev)
        f = dg.function(lambda v, m=bn: m(v))
        for _ in range(3):
            f(dg.tensor(x).to(dev))
        out[dev] = (bn.running_mean.to("cpu").numpy(), bn.running_var.to("cpu").numpy())
    for a, b in zip(out["cpu"], out["cuda"]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
