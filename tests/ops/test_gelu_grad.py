"""GeluGrad(x, dy) -> dy * gelu'(x) (issue 21): the cpu_eigen kernel against
a float64 reference built from math.erf / math.exp per element, in every
float dtype, on 0-d / empty / odd-sized shapes, at extreme x (+-10, +-40,
+-inf, NaN), eager and compiled; its own gradient rule (in x and dy) by
finite differences, to second order; its errors; explain()."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase

MODES = ["none", "tanh"]
K1 = 2.0 * math.sqrt(2.0 / math.pi)
K3 = K1 * 0.044715


def _slope(v, mode):
    """gelu'(v) in float64 from the math module (no NumPy special functions)."""
    if math.isnan(v):
        return v
    if mode == "tanh":
        if v > 30.0:
            return 1.0
        if v < -30.0:
            return 0.0
        u = v * (K1 + K3 * v * v)
        s = 1.0 / (1.0 + math.exp(-u)) if u >= 0 else math.exp(u) / (1.0 + math.exp(u))
        r = 1.0 / (1.0 + math.exp(u)) if u <= 0 else math.exp(-u) / (1.0 + math.exp(-u))
        return s + v * s * r * (K1 + 3.0 * K3 * v * v)
    if v > 40.0:
        return 1.0
    if v < -40.0:
        return 0.0
    if v < 0:  # 1 + erf cancels: erfc keeps the relative accuracy
        cdf = 0.5 * math.erfc(-v / math.sqrt(2.0))
    else:
        cdf = 0.5 * (1.0 + math.erf(v / math.sqrt(2.0)))
    return cdf + v * math.exp(-0.5 * v * v) / math.sqrt(2.0 * math.pi)


def _reference(x, dy, mode):
    x = np.asarray(x, np.float64)
    s = np.array([_slope(float(v), mode) for v in x.ravel()]).reshape(x.shape)
    return np.asarray(dy, np.float64) * s


EXTREME = [-np.inf, -1e30, -50.0, -40.0, -39.0, -10.0, -5.0, -1.0001, -1.0, -0.9999,
           -0.5, -1e-8, -0.0, 0.0, 1e-8, 0.5, 1.0, 5.0, 10.0, 39.0, 40.0, 50.0, 1e30, np.inf]


def _points(n, seed=0):
    rng = np.random.default_rng(seed)
    return np.concatenate([EXTREME, rng.standard_normal(n) * 3.0])


def _run(x, dy, mode, dtype, compiled=False):
    xt = dg.ops.cast(dg.tensor(x), dtype)
    dt = dg.ops.cast(dg.tensor(dy), dtype)
    f = (lambda a, b: dg.ops.gelu_grad(a, b, mode))
    out = dg.function(f)(xt, dt) if compiled else f(xt, dt)
    assert out.dtype == dtype and tuple(out.shape) == tuple(np.shape(x))
    return dg.ops.cast(out, "float64").numpy()


# (rtol, eps): |got - want| <= rtol |want| + eps |dy|. The eps |dy| term is
# the rounding of Phi(x) and x phi(x) (each at most ~1.1), which cancel near
# gelu's minimum (x ~ -0.75, gelu' = 0); elsewhere the bound is relative,
# down to the tiny tails (x < -1 is evaluated in double for float32).
TOL = {"float64": (1e-14, 4e-16), "float32": (2e-6, 2.4e-7),
       "float16": (2e-3, 1e-3), "bfloat16": (1.6e-2, 8e-3)}


def _assert_close(got, want, dy, rtol, eps):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), (got, want)
    ok = np.isnan(want) | (got == want) | (
        np.abs(got - want) <= rtol * np.abs(want) + eps * np.abs(dy))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, [(i, got.flat[i], want.flat[i]) for i in bad[:8]]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", list(TOL))
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference(mode, dtype, compiled):
    x = _points(2000)
    dy = np.random.default_rng(1).uniform(-2.0, 2.0, x.shape)
    # Inputs as the dtype holds them, so the reference sees the same values.
    xs = dg.ops.cast(dg.ops.cast(dg.tensor(x), dtype), "float64").numpy()
    ds = dg.ops.cast(dg.ops.cast(dg.tensor(dy), dtype), "float64").numpy()
    got = _run(x, dy, mode, dtype, compiled)
    want = _reference(xs, ds, mode)
    if dtype in ("float16", "bfloat16"):
        # The float result is rounded once to the 16-bit type.
        want = dg.ops.cast(dg.ops.cast(dg.tensor(want), dtype), "float64").numpy()
    _assert_close(got, want, ds, *TOL[dtype])


@pytest.mark.parametrize("mode", MODES)
def test_extremes(mode):
    """+inf -> dy, -inf -> 0 (not inf * 0), NaN x -> NaN; in float32 and 64."""
    x = np.array([np.inf, -np.inf, np.nan, 10.0, -10.0, 40.0, -40.0])
    dy = np.array([3.0, 3.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    for dtype in ("float32", "float64"):
        got = _run(x, dy, mode, dtype)
        assert got[0] == 3.0 and got[1] == 0.0 and np.isnan(got[2]), (dtype, got)
        assert got[3] == pytest.approx(1.0, abs=1e-6) and got[5] == 1.0
        assert 0.0 >= got[4] > -1e-20 and 0.0 >= got[6] > -1e-300


@pytest.mark.parametrize("shape", [(), (0,), (0, 3), (1,), (7,), (513,), (3, 5, 67)])
@pytest.mark.parametrize("mode", MODES)
def test_shapes(mode, shape):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape) * 3.0
    dy = rng.standard_normal(shape)
    for dtype in ("float32", "float64"):
        got = _run(x, dy, mode, dtype)
        xs, ds = x.astype(dtype), dy.astype(dtype)
        _assert_close(got, _reference(xs, ds, mode), ds, *TOL[dtype])


def test_result_does_not_depend_on_position():
    """Each element takes the same (packet) path wherever it sits."""
    x = _points(3000).astype(np.float32)
    dy = np.ones_like(x)
    whole = dg.ops.gelu_grad(dg.tensor(x), dg.tensor(dy)).numpy()
    for start in (1, 3, 17, 511):
        part = dg.ops.gelu_grad(dg.tensor(x[start:]), dg.tensor(dy[start:])).numpy()
        np.testing.assert_array_equal(part, whole[start:])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_gradient_finite_differences(mode, shape):
    """GeluGrad's own rule (d/dx = dy gelu''(x), d/d(dy) = GeluGrad), first
    and second order, float64 central differences."""
    rng = np.random.default_rng(7)
    x = rng.uniform(-3.0, 3.0, shape)
    dy = rng.uniform(-2.0, 2.0, shape)
    case = OpCase.of("GeluGrad", [x, dy], attrs={"approximate": mode})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("mode", MODES)
def test_third_order_through_gelu(mode):
    """Gelu -> GeluGrad -> its rule: the third derivative by finite
    differences of the second (float64)."""
    x = np.array([-2.5, -0.7, 0.0, 0.3, 1.9])

    def second(v):
        t = dg.tensor(v)
        with dg.GradientTape() as outer:
            outer.watch(t)
            with dg.GradientTape() as inner:
                inner.watch(t)
                y = dg.ops.gelu(t, mode)
            d1 = inner.gradient(y, t, output_gradients=dg.ops.ones([x.size], "float64"))
        return outer.gradient(d1, t, output_gradients=dg.ops.ones([x.size], "float64"))

    t = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(t)
        with dg.GradientTape() as outer:
            outer.watch(t)
            with dg.GradientTape() as inner:
                inner.watch(t)
                y = dg.ops.gelu(t, mode)
            d1 = inner.gradient(y, t, output_gradients=dg.ops.ones([x.size], "float64"))
        d2 = outer.gradient(d1, t, output_gradients=dg.ops.ones([x.size], "float64"))
    d3 = tape.gradient(d2, t, output_gradients=dg.ops.ones([x.size], "float64")).numpy()
    h = 1e-5
    fd = (second(x + h).numpy() - second(x - h).numpy()) / (2 * h)
    np.testing.assert_allclose(d3, fd, rtol=1e-6, atol=1e-7)


def test_gelu_rule_uses_the_op():
    """Gelu's gradient is one GeluGrad (eager tape and compiled graph)."""
    def grad(x, dy):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = dg.ops.gelu(x, "tanh")
        return tape.gradient(y, x, output_gradients=dy)

    x = dg.tensor(np.linspace(-3, 3, 11, dtype=np.float32))
    g = dg.function(grad).get_graph(x, dg.ops.ones([11], "float32"))
    ops = [op for op in g.op]
    assert [op.type for op in ops] == ["GeluGrad"]


def test_errors():
    x = dg.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(Exception, match=r"GeluGrad.*\[2, 3\].*\[3\]|GeluGrad.*shape"):
        dg.ops.gelu_grad(x, dg.tensor(np.zeros(3, np.float32)))
    with pytest.raises(Exception, match=r"GeluGrad"):
        dg.ops.gelu_grad(x, dg.tensor(np.zeros((2, 3), np.float64)))
    with pytest.raises(Exception, match=r"approximate"):
        dg.ops.gelu_grad(x, x, "cubic")
    with pytest.raises(Exception, match=r"GeluGrad"):
        dg.ops.gelu_grad(dg.tensor(np.zeros(3, np.int32)), dg.tensor(np.zeros(3, np.int32)))


def test_explain_shows_the_kernel():
    text = dg.plugins.explain("GeluGrad", "cpu", "float32")
    assert "GeluGrad" in text and "cpu" in text, text


#: Max error of the float32 exact form, in ulp of the float64 reference, per
#: range of x: measured over EVERY float with 2^-12 <= |x| < 19 on the v2
#: (no FMA), v3 and v4 builds (v4 / v3 / v2: x < -1 8.9 / 9.4 / 10.8 ulp,
#: [0, 1) 3.8 / 4.2 / 4.5, above 1.0 / 1.0 / 1.1), with a margin. One float
#: formula for all x, shared with Gelu's forward (elementwise_ops.h,
#: gelu::ErfPackets: a degree-8 erfc fit and an exp that takes x^2 split
#: exactly; the first float version: 9 / 4 / 1 ulp on a grid, 1.5x slower).
#: On [-1, 0) gelu' falls through 0 (x ~ -0.7518), where Phi(x) and x phi(x)
#: (~0.23 each) cancel: there either MID_ULP ulp or MID_ABS absolute
#: (exhaustively: 15.4 ulp, or at most 1.3e-7 beyond 12 ulp, on v2).
ULP_BOUND = [(-10.0, -1.0, 11.0), (0.0, 1.0, 5.0), (1.0, 10.0, 1.5)]
MID_ULP, MID_ABS = 16.0, 1.3e-7


def _ulp_errors(x):
    got = _run(x, np.ones_like(x), "none", "float32").astype(np.float64)
    want = _reference(x.astype(np.float64), np.ones_like(x, np.float64), "none")
    ulp = np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)
    return got, want, np.abs(got - want) / ulp


@pytest.mark.parametrize("isa", [None, "base", "v2", "v3"])
def test_float32_exact_form_ulp_error(isa, monkeypatch):
    """Dense float32 grid over [-10, 10] (every 1e-4) plus the extremes against
    the float64 math.erfc reference: the per-range ulp bounds above, the
    absolute bound near the zero of gelu'. The ISA cap is read once per
    process, so the capped cases run in a subprocess."""
    if isa is not None:
        import subprocess
        import sys
        monkeypatch.setenv("DRAGON_CPU_EIGEN_ISA", isa)
        code = ("import sys; sys.path.insert(0, %r); import test_gelu_grad as t; "
                "t.test_float32_exact_form_ulp_error(None, None)" % __file__.rsplit("/", 1)[0])
        subprocess.run([sys.executable, "-c", code], check=True)
        return
    x = np.concatenate([np.arange(-100000, 100001) * 1e-4, EXTREME[2:-2]]).astype(np.float32)
    x = x[np.isfinite(x) & (np.abs(x) <= 40)]
    got, want, err = _ulp_errors(x)
    for lo, hi, bound in ULP_BOUND:
        m = (x >= lo) & (x < hi)
        assert m.any() and err[m].max() <= bound, (lo, hi, err[m].max(), x[m][np.argmax(err[m])])
    mid = (x >= -1.0) & (x < 0.0)
    bad = mid & (err > MID_ULP) & (np.abs(got - want) > MID_ABS)
    assert not bad.any(), (x[bad][:5], got[bad][:5], want[bad][:5])
    # beyond the grid: the tails keep their relative accuracy down to 1e-30
    far = np.array([-13.0, -14.5, -12.25, -11.0], np.float32)
    got, want, err = _ulp_errors(far)
    assert (np.abs(got - want) <= 11.0 * np.spacing(np.abs(want).astype(np.float32))
            + np.finfo(np.float32).tiny).all(), (got, want)


def test_bfloat16_rounds_the_float_result_once():
    """bfloat16 GeluGrad widens x and dy to float on the bits, runs the float
    kernel and rounds once (ties to even, NaN kept): for every bfloat16 x
    (inf and NaN included) and dy of every kind, bit for bit the float32
    result cast to bfloat16."""
    x = (np.arange(65536, dtype=np.uint32) << 16).view(np.float32)
    rng = np.random.default_rng(0)
    dy = rng.standard_normal(x.size).astype(np.float32)
    dy[::7], dy[::11], dy[::13] = np.float32(3e38), np.nan, -np.inf
    xb = dg.ops.cast(dg.tensor(x), "bfloat16")
    db = dg.ops.cast(dg.tensor(dy), "bfloat16")
    for mode in MODES:
        got = dg.ops.gelu_grad(xb, db, mode).numpy().view(np.uint16)
        want = dg.ops.cast(dg.ops.gelu_grad(dg.ops.cast(xb, "float32"), dg.ops.cast(db, "float32"),
                                            mode), "bfloat16").numpy().view(np.uint16)
        np.testing.assert_array_equal(got, want)
