"""Gelu's float32 kernel (issue 21): cpu_eigen's exact form, one branch-free
packet formula shared with GeluGrad (plugins/cpu_eigen/src/elementwise_ops.h,
gelu::ErfPackets), picked by dispatch over mkldnn's gelu_erf.

Checked against a float64 reference (math.erfc per element) in ulps per range
of x on every instruction-set build, at the special values (+-inf, NaN, -0,
huge |x|, subnormals, the underflow edge), on 0-d / empty / odd / strided
inputs, for position independence, against the fused kernel, and in the
kernel choice (explain, pin). The gradient (GeluGrad) is in test_gelu_grad.py.
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
from dragon_sdk.testing import OpCase

#: Max error of float32 gelu(x), in ulp of the float64 reference, per range
#: [lo, hi) of x: measured over EVERY float with 2^-12 <= |x| < 19 on the
#: base, v2 (no FMA), v3 and v4 (AVX-512) builds: max 6.7 ulp (x ~ -1.31,
#: base / v2), v3 6.1, v4 5.3; per range below, plus a margin. The error is
#: that of q = Phi(-|x|) = e^(-x^2/2) t P(t) (P's fit 0.4 ulp, the exp 1-2
#: ulp, the Horner steps); for x > 1 it shrinks with q. Results below 2^-126
#: (-19 < x < -13.15, |x| < 2^-125) are counted in subnormal spacings (2^-149).
ULP_BOUND = [(-19.0, -13.0, 5.0), (-13.0, -5.0, 6.0), (-5.0, -1.0, 7.0),
             (-1.0, 0.0, 7.0), (0.0, 0.5, 6.5), (0.5, 1.0, 3.0), (1.0, 5.0, 2.0),
             (5.0, 1e38, 0.5)]
SUBNORMAL = 2.0 ** -149
ISAS = ["base", "v2", "v3", None]


def _ref(x):
    """float64 x Phi(x) = x erfc(-x / sqrt 2) / 2 (-inf -> -0, inf -> inf)."""
    out = []
    for v in np.asarray(x, np.float64).ravel():
        if math.isinf(v):
            out.append(-0.0 if v < 0 else v)
        else:
            out.append(0.5 * v * math.erfc(-v / math.sqrt(2.0)))
    return np.array(out).reshape(np.shape(x))


def _ulp_errors(x, y):
    """|y - ref| in float32 ulps of ref (subnormal refs: in units of 2^-149)."""
    want = _ref(x)
    spacing = np.maximum(np.spacing(np.abs(want).astype(np.float32)).astype(np.float64),
                         SUBNORMAL)
    return np.abs(y.astype(np.float64) - want) / spacing


def _inputs(seed=0):
    """A 1e-4 grid over [-19, 19], random bit patterns over [2^-12, 19) and
    [1e-37, 2^-12) (both signs), and the worst cases of the exhaustive
    search (every build)."""
    rng = np.random.default_rng(seed)
    grid = np.arange(-190000, 190001) * 1e-4
    bits = rng.integers(np.float32(2.0**-12).view(np.int32), np.float32(19).view(np.int32),
                        200000).astype(np.int32).view(np.float32)
    bits = bits * np.where(rng.random(bits.size) < 0.5, -1, 1).astype(np.float32)
    tiny = rng.integers(np.float32(1e-37).view(np.int32), np.float32(2.0**-12).view(np.int32),
                        20000).astype(np.int32).view(np.float32)
    tiny = tiny * np.where(rng.random(tiny.size) < 0.5, -1, 1).astype(np.float32)
    worst = [-1.31143725, -0.335559636, 0.00388699351, -13.0945072, -1.3188225,
             -1.84183884, -0.320548654, 0.00380764529, -13.0996466, -11.9350004]
    return np.concatenate([grid.astype(np.float32), bits, tiny, np.float32(worst)])


def _check_ulp_bounds(x, y):
    err = _ulp_errors(x, y)
    for lo, hi, bound in ULP_BOUND:
        m = (x >= lo) & (x < hi)
        assert m.any()
        i = np.argmax(err[m])
        assert err[m][i] <= bound, (lo, hi, err[m][i], x[m][i], y[m][i])


SCRIPT = r"""
import sys
import numpy as np
import dragon_core as dg
x = np.frombuffer(sys.stdin.buffer.read(), np.float32)
sys.stdout.buffer.write(dg.ops.gelu(dg.tensor(x), "none").numpy().tobytes())
"""


@pytest.mark.parametrize("isa", ISAS, ids=["base", "v2", "v3", "auto"])
def test_ulp_error_per_range_every_isa_build(isa):
    """The per-range bounds above on every build (the ISA cap is read once
    per process, so each build runs in a subprocess)."""
    env = dict(os.environ, DRAGON_LOG_LEVEL="0")
    env.pop("DRAGON_CPU_EIGEN_ISA", None)
    if isa:
        env["DRAGON_CPU_EIGEN_ISA"] = isa
    x = _inputs()
    proc = subprocess.run([sys.executable, "-c", SCRIPT], input=x.tobytes(), env=env,
                          capture_output=True, timeout=300)
    assert proc.returncode == 0, proc.stderr.decode()
    _check_ulp_bounds(x, np.frombuffer(proc.stdout, np.float32))


def test_served_by_cpu_eigen_and_bounded():
    """In this process (no cap): dispatch's kernel meets the bounds."""
    assert "winner: Gelu<float32> from cpu_eigen" in dg.plugins.explain("Gelu", "cpu", "float32")
    x = _inputs(1)
    _check_ulp_bounds(x, dg.ops.gelu(dg.tensor(x), "none").numpy())


def test_special_values():
    x = np.array([-np.inf, -1e30, -50.0, -40.0, -39.9, -20.0, -19.0, np.nan, np.inf, 1e30,
                  50.0, 40.0, -0.0, 0.0, 3.4e38, -3.4e38], np.float32)
    y = dg.ops.gelu(dg.tensor(x), "none").numpy()
    assert np.all(y[:7] == 0) and np.all(np.signbit(y[:7])), y  # -0 below -19
    assert np.isnan(y[7])
    np.testing.assert_array_equal(y[8:12], x[8:12])  # x >= 40: x exactly
    assert y[12] == 0 and np.signbit(y[12]), "gelu(-0) = -0"
    assert y[13] == 0 and not np.signbit(y[13])
    assert y[14] == np.float32(3.4e38) and y[15] == 0 and np.signbit(y[15])


def test_subnormals_and_the_underflow_edge():
    """Subnormal x gives x / 2 within one subnormal spacing (2^-149) and
    keeps its sign; results that underflow (-19 < x < -13.15) are within
    the (-19, -13) range's bound counted in subnormal spacings, and -0
    below."""
    tiny = np.array([1e-45, -1e-45, 1e-40, -1e-40, 1e-39, -3e-39, 1.1e-38, -1.1e-38,
                     2.4e-38, -2.4e-38], np.float32)
    y = dg.ops.gelu(dg.tensor(tiny), "none").numpy()
    assert (np.abs(y.astype(np.float64) - _ref(tiny)) <= SUBNORMAL).all(), (tiny, y)
    assert (np.signbit(y) == np.signbit(tiny)).all()
    edge = np.linspace(-19.0, -13.0, 6001).astype(np.float32)
    y = dg.ops.gelu(dg.tensor(edge), "none").numpy().astype(np.float64)
    want = _ref(edge)
    small = np.abs(want) < 2.0 ** -126
    assert small.sum() > 5000 and (y[small] <= 0).all() and np.signbit(y[small]).all()
    assert (np.abs(y - want)[small] <= ULP_BOUND[0][2] * SUBNORMAL).all()
    assert (y[edge < -14.5] == 0).all()  # |gelu| < 2^-150 there


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1,), (15,), (17,), (33,), (3, 5, 67),
                                   (257, 131)])
def test_shapes(shape):
    """0-d, empty, shorter than a packet, a packet plus a tail, 3-D, and
    large enough to be split between threads."""
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 4).astype(np.float32)
    y = dg.ops.gelu(dg.tensor(x), "none").numpy()
    assert y.shape == x.shape and y.dtype == np.float32
    if x.size:
        _check_ulp_bounds(np.append(x.ravel(), ULP_BOUNDS_COVER), np.append(
            y.ravel(), dg.ops.gelu(dg.tensor(ULP_BOUNDS_COVER), "none").numpy()))


#: One value per range of ULP_BOUND (so _check_ulp_bounds sees every range).
ULP_BOUNDS_COVER = np.array([-15.0, -7.0, -2.0, -0.5, 0.25, 0.75, 2.0, 7.0], np.float32)


def test_strided_inputs():
    """Transposed and sliced views give the values of their contiguous copies."""
    x = (np.random.default_rng(5).standard_normal((67, 45)) * 4).astype(np.float32)
    t = dg.tensor(x)
    for view, ref in ((t.T, x.T), (t[:, ::3], x[:, ::3]), (t[1::2, 5:40:7], x[1::2, 5:40:7])):
        got = dg.ops.gelu(view, "none").numpy()
        np.testing.assert_array_equal(got, dg.ops.gelu(dg.tensor(np.ascontiguousarray(ref)),
                                                        "none").numpy())


def test_result_does_not_depend_on_position():
    """Every element takes the same packet path (whole packets in place, a
    tail padded): the same value gives the same bits at every offset."""
    x = _inputs()[::7].copy()
    whole = dg.ops.gelu(dg.tensor(x), "none").numpy()
    for shift in (1, 5, 17, 511):
        np.testing.assert_array_equal(dg.ops.gelu(dg.tensor(x[shift:]), "none").numpy(),
                                      whole[shift:])
    single = np.array([dg.ops.gelu(dg.tensor(x[i:i + 1]), "none").numpy()[0]
                       for i in range(0, x.size, 9973)])
    np.testing.assert_array_equal(single, whole[::9973])


def test_fused_kernel_matches_eager():
    """A compiled gelu(x) * 2 is one FusedElementwise running the same
    formula: bit for bit the eager kernel's values times 2."""
    x = dg.tensor(_inputs()[::5].copy())
    f = dg.function(lambda x: dg.ops.gelu(x, "none") * 2.0)
    assert [op.type for op in f.get_graph(x).op] == ["FusedElementwise"]
    np.testing.assert_array_equal(f(x).numpy(), dg.ops.gelu(x, "none").numpy() * 2.0)


def test_in_place_and_gradient():
    """Gelu's output may overwrite its input (same values); its gradient
    rule (one GeluGrad) matches finite differences in float64."""
    x = (np.random.default_rng(9).standard_normal(1000) * 3).astype(np.float32)
    f = dg.function(lambda a: dg.ops.gelu(a * 1.0, "none"))
    np.testing.assert_array_equal(f(dg.tensor(x)).numpy(),
                                  dg.ops.gelu(dg.tensor(x), "none").numpy())
    for mode in ("none", "tanh"):
        case = OpCase.of("Gelu", [np.random.default_rng(2).uniform(-4, 4, (3, 5))],
                         attrs={"approximate": mode})
        case.check_grad()


def test_dispatch_and_pin():
    """float32: cpu_eigen (priority 0) over mkldnn's gelu_erf (registered
    at -10 for float32, docs/benchmarks.md); bfloat16 unchanged (mkldnn, 10).
    Pinning mkldnn reaches its kernel (inf repaired, a few ulp where x > -3)."""
    text = dg.plugins.explain("Gelu", "cpu", "float32")
    assert "winner: Gelu<float32> from cpu_eigen because its priority 0 beats -10" in text, text
    assert "winner: mkldnn::Gelu" in dg.plugins.explain("Gelu", "cpu", "bfloat16")
    if not any(k["plugin"] == "mkldnn" for k in dg.plugins.kernels("Gelu")):
        pytest.fail("mkldnn is not installed")
    x = np.linspace(-3.0, 6.0, 9000).astype(np.float32)
    x[:3] = [np.inf, -np.inf, np.nan]
    ours = dg.ops.gelu(dg.tensor(x), "none").numpy()
    dg.plugins.pin("Gelu", "cpu", "mkldnn")
    try:
        assert "mkldnn::Gelu" in dg.plugins.explain("Gelu", "cpu", "float32").splitlines()[-1]
        theirs = dg.ops.gelu(dg.tensor(x), "none").numpy()
    finally:
        dg.plugins.unpin("Gelu", "cpu")
    assert theirs[0] == np.inf and theirs[1] == 0 and np.isnan(theirs[2])
    np.testing.assert_allclose(theirs[3:], ours[3:], rtol=1e-5, atol=1e-6)
    assert not np.array_equal(theirs[3:], ours[3:]), "the pin changed nothing"


def test_tanh_form_unchanged():
    """The tanh form keeps its kernel (GeluTanhOp) and its accuracy."""
    x = np.linspace(-12, 12, 5001).astype(np.float32)
    y = dg.ops.gelu(dg.tensor(x), "tanh").numpy().astype(np.float64)
    v = x.astype(np.float64)
    u = math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)
    with np.errstate(over="ignore"):
        want = v / (1.0 + np.exp(-2.0 * u))  # x (1 + tanh u) / 2 without cancelling
    # GeluTanhOp: e^(-2u) in Eigen's float exp, amplified ~|2u| times in
    # the tail (5e-6 relative at x ~ -7.5), subnormal results flushed.
    np.testing.assert_allclose(y, want, rtol=1e-5, atol=2.0 ** -126)


def test_bfloat16_through_float_is_exact():
    """cpu_eigen's bfloat16 exact form runs the float32 kernel on widened
    values and rounds once: for every finite bfloat16 it equals the float64
    reference rounded to float32 then to bfloat16 (what the scalar double
    form it replaces gave). float16 keeps the scalar form."""
    bits = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    x = bits[np.isfinite(bits)]
    want = dg.ops.cast(dg.tensor(_ref(x).astype(np.float32)), "bfloat16")
    dg.plugins.pin("Gelu", "cpu", "cpu_eigen")
    try:
        got = dg.ops.gelu(dg.ops.cast(dg.tensor(x), "bfloat16"), "none")
    finally:
        dg.plugins.unpin("Gelu", "cpu")
    got = dg.ops.cast(got, "float32").numpy()
    want = dg.ops.cast(want, "float32").numpy()
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))
    np.testing.assert_array_equal(got, want)
