"""cpu_eigen's float32 exact GELU below x = -1 (issue 21).

There Eigen's float erf cancels, so those values are evaluated in double:
erfc(z) = e^(-z²)·t·P(t), t = 1/(1 + z/2), vectorised (GeluErfNegativeTail in
plugins/cpu_eigen/src/elementwise_ops.h) instead of a scalar erfc per value.
Checked against float64 math.erfc in ulps, on the special values, for
position independence, in a fused kernel, and in every instruction-set
build (float32 Gelu is served by mkldnn by default, so cpu_eigen is pinned).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg

SCRIPT = r"""
import json, sys
import numpy as np
import dragon_core as dg
dg.plugins.pin("Gelu", "cpu", "cpu_eigen")
xs = np.array(json.loads(sys.stdin.read()), dtype=np.float32)
print(json.dumps([float(v) for v in dg.ops.gelu(dg.tensor(xs), "none").numpy()]))
"""


def _ref(x):
    """float64 x * erfc(-x / sqrt 2) / 2."""
    return np.array([0.5 * v * math.erfc(-v / math.sqrt(2.0)) for v in x.astype(np.float64)])


def _ulps(got, want):
    """|got - want| in units of float32 spacing at want (normal values)."""
    keep = np.abs(want) > 1.2e-38
    spacing = np.spacing(np.abs(want[keep]).astype(np.float32)).astype(np.float64)
    return np.abs(got[keep].astype(np.float64) - want[keep]) / spacing


def _inputs():
    rng = np.random.default_rng(0)
    grid = np.linspace(-14.0, -1.0, 20011)
    return np.concatenate([grid, rng.standard_normal(4093) * 3,
                           [-1.0, np.nextafter(np.float32(-1), np.float32(-2)), -9.5, -13.9]]
                          ).astype(np.float32)


@pytest.fixture
def pinned():
    dg.plugins.pin("Gelu", "cpu", "cpu_eigen")
    yield
    dg.plugins.unpin("Gelu", "cpu")


def test_negative_tail_is_within_an_ulp(pinned):
    x = _inputs()
    y = dg.ops.gelu(dg.tensor(x), "none").numpy()
    tail = x < -1
    assert _ulps(y[tail], _ref(x[tail])).max() <= 1.0
    # Elsewhere Eigen's erf: a few ulp (unchanged).
    assert _ulps(y[~tail], _ref(x[~tail])).max() <= 8.0


def test_special_values(pinned):
    x = np.array([-np.inf, -1e30, -40.0, -39.9, -20.0, np.nan, np.inf, -0.0, 0.0], np.float32)
    y = dg.ops.gelu(dg.tensor(x), "none").numpy()
    assert np.all(y[:5] == 0) and np.all(np.signbit(y[:5])), y
    assert np.isnan(y[5]) and y[6] == np.inf and y[7] == 0 and y[8] == 0


def test_result_does_not_depend_on_position(pinned):
    """Blocks of 512 and packets: the same value gives the same result at
    every offset, alone, among values above -1, or in place."""
    x = _inputs()
    whole = dg.ops.gelu(dg.tensor(x), "none").numpy()
    for shift in (1, 5, 17, 511):
        np.testing.assert_array_equal(dg.ops.gelu(dg.tensor(x[shift:]), "none").numpy(),
                                      whole[shift:])
    single = np.array([dg.ops.gelu(dg.tensor(x[i:i + 1]), "none").numpy()[0]
                       for i in range(0, x.size, 997)])
    np.testing.assert_array_equal(single, whole[::997])


def test_fused_kernel_matches_unfused(pinned):
    x = dg.tensor(_inputs())
    f = dg.function(lambda x: dg.ops.gelu(x, "none") * 2.0)
    assert [op.type for op in f.get_graph(x).op] == ["FusedElementwise"]
    np.testing.assert_array_equal(f(x).numpy(), dg.ops.gelu(x, "none").numpy() * 2.0)


@pytest.mark.parametrize("cap", ["base", "v3", None], ids=["base", "v3", "auto"])
def test_every_isa_build(cap):
    env = dict(os.environ, DRAGON_LOG_LEVEL="0")
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    if cap:
        env["DRAGON_CPU_EIGEN_ISA"] = cap
    x = _inputs()
    proc = subprocess.run([sys.executable, "-c", SCRIPT], input=json.dumps(x.tolist()),
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    y = np.array(json.loads(proc.stdout))
    tail = x < -1
    assert _ulps(y[tail], _ref(x[tail])).max() <= 1.0
