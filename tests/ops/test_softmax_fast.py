"""The float32 Softmax / LogSoftmax kernels of cpu_eigen (issue 21:
src/softmax_isa.cc, src/softmax_exp.h): the exponential's ulp bound over the
floats it serves (a host C++ program, with and without FMA); forward results
within stated error bounds of float64 NumPy along every axis, odd lengths
(vector tails), 0-d, empty, length-1 axes and non-contiguous inputs; the
NaN / inf semantics of the max-shifted formula; gradients against finite
differences; the same bits for any thread count and for the v3 / v4 builds;
the dispatch (cpu_eigen's kernel wins float32, mkldnn's stays reachable
through a pin). test_misc.py holds the generic Softmax cases of every dtype.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dragon_core as dg

SRC = Path(__file__).resolve().parents[2] / "plugins" / "cpu_eigen" / "src"
EPS = 2.0 ** -24  # half an ulp of 1 in float32

OPS = {"Softmax": dg.ops.softmax, "LogSoftmax": dg.ops.log_softmax}


def _reference(x, axis, log):
    """The max-shifted formula in float64 (NaN where it gives NaN)."""
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=axis, keepdims=True)
        d = x - m
        s = np.sum(np.exp(d), axis=axis, keepdims=True)
        return (d - np.log(s)) if log else np.exp(d) / s


def _check(x, axis, log):
    """The kernel's result against the float64 formula within the kernel's
    error bound: softmax, relative 6 half-ulps (exp <= 1.3 ulp, the sum,
    the reciprocal and the product) plus the rounding of x - max (relative
    error |x - max| * 2^-24 of exp); log_softmax, absolute 4 half-ulps of
    |x - max| + log(sum) + 1. Non-finite values must match exactly."""
    x = np.asarray(x, np.float32)
    y = OPS["LogSoftmax" if log else "Softmax"](dg.tensor(x), axis).numpy()
    assert y.dtype == np.float32 and y.shape == x.shape
    want = _reference(x, axis, log)
    with np.errstate(over="ignore"):
        fin = np.isfinite(want.astype(np.float32))  # -6e38 is -inf in float32
        np.testing.assert_array_equal(y[~fin], want[~fin].astype(np.float32))
    with np.errstate(invalid="ignore"):
        d = np.abs(x.astype(np.float64) - np.max(x.astype(np.float64), axis=axis,
                                                 keepdims=True))
    d = np.where(np.isfinite(d), d, 0.0)  # -inf entries: exact 0 / -inf
    err = np.abs(y[fin].astype(np.float64) - want[fin])
    if log:
        bound = 4 * EPS * (d[fin] + np.abs(want[fin]) + 1)
    else:
        # Results below 2^-126 may be flushed to 0 (softmax_exp.h).
        bound = (6 + d[fin]) * EPS * want[fin] + 2.0 ** -126
    worst = np.max(err / bound, initial=0)
    assert worst <= 1, f"error {worst:.2f} x the bound (axis={axis}, shape={x.shape})"
    return y


# ------------------------------------------------------------ exponential

_EXP_PROGRAM = r"""
#include <cmath>
#include <cstdio>
#include <cstring>
#include "softmax_exp.h"
using namespace cpu_eigen::softmax_exp;
typedef float VF __attribute__((vector_size(WIDTH * 4)));
int main() {
  // Every STEP-th float in [-88, 0] (bit patterns from -0 down), WIDTH at
  // a time through the vector code the kernels run.
  const float lo = -88.0f;
  uint32_t b1;
  std::memcpy(&b1, &lo, 4);
  double worst = 0, worst_flush = 0;
  long count = 0, exact = 0;
  float xs[WIDTH], ys[WIDTH];
  for (uint64_t b = 0x80000000u; b <= b1;) {
    int k = 0;
    for (; k < WIDTH && b <= b1; ++k, b += STEP) {
      const uint32_t bits = static_cast<uint32_t>(b);
      std::memcpy(&xs[k], &bits, 4);
    }
    for (int j = k; j < WIDTH; ++j) xs[j] = 0.0f;
    VF v;
    std::memcpy(&v, xs, sizeof v);
    v = ExpNonPositive(v);
    std::memcpy(ys, &v, sizeof v);
    for (int j = 0; j < k; ++j) {
      const double ref = std::exp(static_cast<double>(xs[j]));
      ++count;
      exact += ys[j] == static_cast<float>(ref);
      if (ref < 0x1p-126) {  // may flush: |error| below 2^-126
        worst_flush = std::fmax(worst_flush, std::fabs(ys[j] - ref) / 0x1p-126);
        continue;
      }
      int e;
      std::frexp(static_cast<float>(ref), &e);
      worst = std::fmax(worst, std::fabs(ys[j] - ref) / std::ldexp(1.0, e - 24));
    }
  }
  VF special{};
  special[0] = -INFINITY;
  special[1] = 0.0f;
  special[2] = -0.0f;
  special[3] = -1e30f;
  const VF s = ExpNonPositive(special);
  std::printf("count %ld exact %ld worst %.4f flush %.4f special %g %g %g %g\n",
              count, exact, worst, worst_flush, s[0], s[1], s[2], s[3]);
  std::printf("OK\n");
}
"""


def _cpu_runs(march):
    if march == "x86-64":
        return True
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    need = ["avx2", "fma", "bmi2"]
    if march == "x86-64-v4":
        need += ["avx512f", "avx512bw", "avx512dq", "avx512vl"]
    return all(f in flags for f in need)


@pytest.mark.parametrize("march, width, ulps", [("x86-64", 4, 1.25), ("x86-64-v3", 8, 1.0),
                                                ("x86-64-v4", 16, 1.0)])
def test_exp_ulp_bound(tmp_path, march, width, ulps):
    """ExpNonPositive, at each build's width, is within 1 ulp of exp with
    FMA (v3, v4; 0.94 measured over every float of [-88, 0]) and 1.25
    without (baseline; 1.22 measured) for every normal result (every 7th
    float of [-88, 0]), less than 2^-126 away below 2^-126, exactly 0 at
    -inf and 1 at 0."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        pytest.skip("no host C++ compiler (set CXX)")
    if not _cpu_runs(march):
        pytest.skip(f"this CPU does not run {march}")
    src = tmp_path / "exp.cc"
    src.write_text(_EXP_PROGRAM)
    exe = tmp_path / "exp"
    build = subprocess.run(
        [cxx, "-std=c++17", "-O2", f"-march={march}", "-ffp-contract=off", "-DSTEP=7",
         f"-DWIDTH={width}",
         "-Wall", "-Wextra", "-Werror", f"-I{SRC}", str(src), "-o", str(exe)],
        capture_output=True, text=True)
    assert build.returncode == 0, build.stderr
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.strip().endswith("OK"), run.stdout
    words = run.stdout.split()
    stats = dict(zip(words[0:8:2], words[1:8:2]))
    assert int(stats["count"]) > 1.5e8
    assert float(stats["worst"]) <= ulps, run.stdout
    assert float(stats["flush"]) < 1.0, run.stdout
    assert int(stats["exact"]) >= 0.99 * int(stats["count"]), run.stdout
    assert words[9:13] == ["0", "1", "1", "0"], run.stdout


# ------------------------------------------------------------ forward

@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape", [(4, 128, 128), (64, 1000), (8, 10), (300, 1024),
                                   (3, 4097), (2, 1), (1, 1)])
def test_last_axis_against_float64(shape, log, rng):
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    _check(x, -1, log)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", list(range(1, 40)) + [63, 64, 65, 255, 256, 257, 4111])
def test_every_row_length(n, log, rng):
    """Lengths around the 16-lane blocks and the 256-element float partial
    sums: every tail goes through the same code."""
    x = (rng.standard_normal((3, n)) * 10).astype(np.float32)
    _check(x, -1, log)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("shape, axis", [((5, 7), 0), ((3, 33, 17), 1), ((2, 9, 2100), 1),
                                         ((6, 4, 5), 0), ((2, 3, 4, 5), -3),
                                         ((40, 1), 0), ((1, 70), 0)])
def test_other_axes_against_float64(shape, axis, log, rng):
    """The column kernel (inner > 1), including tails of the 16 lanes and
    several 1024-wide blocks of the inner axis."""
    x = (rng.standard_normal(shape) * 6).astype(np.float32)
    _check(x, axis, log)


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_zero_d_empty_and_length_one(op):
    """0-d input has no axis (a clear error), empty inputs give empty
    outputs on every axis, a length-1 axis gives 1 (log: 0) or NaN."""
    log = op == "LogSoftmax"
    with pytest.raises(dg.errors.InvalidArgumentError, match=f"{op}: axis .* rank 0"):
        OPS[op](dg.tensor(np.float32(3.5)), -1)
    for shape in [(0, 4), (4, 0), (0,), (2, 0, 3)]:
        for axis in range(-len(shape), len(shape)):
            y = OPS[op](dg.tensor(np.zeros(shape, np.float32)), axis).numpy()
            assert y.shape == shape and y.dtype == np.float32
    x = np.array([[-3.0], [7.5], [-np.inf], [np.inf], [np.nan]], np.float32)
    y = OPS[op](dg.tensor(x), -1).numpy()
    want = np.array([[0.0 if log else 1.0]] * 2 + [[np.nan]] * 3, np.float32)
    np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("log", [False, True])
def test_non_contiguous_input(log, rng):
    base = (rng.standard_normal((20, 48)) * 3).astype(np.float32)
    t = dg.tensor(base)
    for view, ref in [(t.T, base.T), (t[::2, 1::3], base[::2, 1::3]),
                      (dg.ops.transpose(dg.ops.reshape(t, [4, 5, 48]), [2, 0, 1]),
                       base.reshape(4, 5, 48).transpose(2, 0, 1))]:
        for axis in range(-ref.ndim, ref.ndim):
            y = OPS["LogSoftmax" if log else "Softmax"](view, axis).numpy()
            want = OPS["LogSoftmax" if log else "Softmax"](
                dg.tensor(np.ascontiguousarray(ref)), axis).numpy()
            assert y.tobytes() == want.tobytes()
            _check(np.ascontiguousarray(ref), axis, log)


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("axis", [-1, 0])
def test_nan_and_inf_semantics(axis, log):
    """A slice with a NaN, a +inf, or only -inf is all NaN; -inf beside
    finite values gives exactly 0 (softmax) or -inf (log_softmax); huge
    spreads (exp underflow) give exact zeros, never NaN."""
    rows = [
        [1.0, 2.0, np.nan, 3.0] + [0.0] * 16,
        [1.0, np.inf, 0.0, -np.inf] + [5.0] * 16,
        [-np.inf] * 20,
        [-np.inf, 0.5, -np.inf, 2.0] + [-np.inf] * 16,
        [3e38, -3e38, 0.0, 1.0] + [-1e30] * 16,
        [-100.0, 0.0, -87.5, -88.5] + [-103.0] * 16,
        [np.inf] * 20,
    ]
    x = np.array(rows, np.float32)
    if axis == 0:
        x = np.ascontiguousarray(x.T)
    y = _check(x, axis, log)
    take = (lambda r: y[r]) if axis == -1 else (lambda r: y[:, r])
    assert np.isnan(take(0)).all() and np.isnan(take(1)).all()
    assert np.isnan(take(2)).all() and np.isnan(take(6)).all()
    masked = take(3)
    if log:
        assert np.isneginf(masked[[0, 2]]).all() and np.isneginf(masked[4:]).all()
    else:
        assert (masked[[0, 2]] == 0).all() and (masked[4:] == 0).all()
        assert abs(masked[1] + masked[3] - 1) < 1e-6
    spread = take(4)
    if log:  # 3e38 - (-3e38) overflows float32: -inf, as the float formula
        assert spread[0] == 0 and np.isneginf(spread[1]) and np.isfinite(spread[2:]).all()
    else:
        assert spread[0] == 1 and (spread[1:] == 0).all()


# ------------------------------------------------------------ gradients

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((3, 37), -1), ((5, 4, 3), 1), ((6,), 0)])
def test_gradient_against_finite_differences(op, shape, axis, rng):
    """The float32 gradient (rule built on this kernel) against central
    finite differences of the float64 formula."""
    log = op == "LogSoftmax"
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal(shape)
    xt = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(xt)
        loss = dg.ops.sum(OPS[op](xt, axis) * dg.tensor(w.astype(np.float32)))
    got = tape.gradient(loss, xt).numpy().astype(np.float64)
    x64 = x.astype(np.float64)
    want = np.zeros(shape)
    h = 1e-6
    for i in np.ndindex(*shape):
        xp, xm = x64.copy(), x64.copy()
        xp[i] += h
        xm[i] -= h
        want[i] = (np.sum(_reference(xp, axis, log) * w) -
                   np.sum(_reference(xm, axis, log) * w)) / (2 * h)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5)


# ------------------------------------------------------------ reproducibility

_HASH_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(7)
h = hashlib.sha256()
for shape, axis in [((32, 128, 128), -1), ((64, 1000), -1), ((2000, 333), -1),
                    ((16, 77, 300), 1), ((3, 50, 2500), 1)]:
    x = dg.tensor((rng.standard_normal(shape) * 5).astype(np.float32))
    for op in (dg.ops.softmax, dg.ops.log_softmax):
        h.update(op(x, axis).numpy().tobytes())
print(h.hexdigest())
"""

# SoftmaxGrad's float32 rows (softmax_isa.cc's grad_rows): every build,
# base included, gives the bits of the unfused Mul/Sum/Sub/Mul chain.
_GRAD_HASH_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(8)
h = hashlib.sha256()
for shape in [(32, 128, 128), (3, 40000), (1, 70000), (17, 300), (5, 33)]:
    y = dg.tensor(rng.random(shape).astype(np.float32))
    dy = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    got = dg.ops.softmax_grad(y, dy).numpy()
    want = (y * (dy - dg.ops.sum(dy * y, [-1], keepdims=True))).numpy()
    assert got.tobytes() == want.tobytes(), shape
    h.update(got.tobytes())
print(h.hexdigest())
"""


def _hash(env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_same_bits_for_any_thread_count():
    hashes = {t: _hash({"OMP_NUM_THREADS": str(t), "DRAGON_NUM_THREADS": str(t)})
              for t in (1, 2, 3)}
    assert len(set(hashes.values())) == 1, hashes


@pytest.mark.parametrize("log", [False, True])
@pytest.mark.parametrize("n", [1, 7, 16, 37, 128, 1024, 1025])
def test_grouped_rows_give_each_row_its_own_bits(n, log, rng):
    """Rows of up to 1024 values run four at a time, in lock step
    (softmax_isa.cc RowGroup): every row must come out bit for bit as it
    does alone, including a non-finite row inside a group (the group then
    falls back to one row at a time) and the rows past the last group."""
    x = rng.standard_normal((11, n)).astype(np.float32) * 8
    x[2, n // 2] = np.nan      # an all-NaN row in the first group
    x[5, 0] = np.inf           # a +inf row in the second group
    x[6, :] = -np.inf          # a row of only -inf beside it
    op = OPS["LogSoftmax" if log else "Softmax"]
    whole = np.asarray(op(dg.tensor(x), -1))
    for r in range(x.shape[0]):
        alone = np.asarray(op(dg.tensor(x[r:r + 1]), -1))
        np.testing.assert_array_equal(whole[r:r + 1].view(np.uint32),
                                      alone.view(np.uint32), err_msg=f"row {r}")
    finite = [r for r in range(x.shape[0]) if r not in (2, 5, 6)]
    ref = _reference(x[finite], -1, log)
    np.testing.assert_allclose(whole[finite], ref, rtol=1e-5, atol=1e-6)
    assert np.isnan(whole[[2, 5, 6]]).all()


@pytest.mark.parametrize("isa", ["base", "v3", None])
def test_softmax_grad_rows_equal_the_chain_in_every_build(isa):
    """SoftmaxGrad along the last axis is bit for bit the unfused chain in
    the baseline, v3 and best builds, and they agree with each other."""
    env = {"DRAGON_CPU_EIGEN_ISA": isa} if isa else {}
    out = subprocess.run([sys.executable, "-c", _GRAD_HASH_SCRIPT],
                         env=dict(os.environ, **env), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    if isa is not None:
        best = subprocess.run([sys.executable, "-c", _GRAD_HASH_SCRIPT],
                              capture_output=True, text=True, timeout=300)
        assert best.returncode == 0 and best.stdout == out.stdout


def test_fma_builds_agree():
    """The x86-64-v3 and -v4 builds (both with FMA) give the same bits."""
    if not _cpu_runs("x86-64-v3"):
        pytest.skip("this CPU does not run x86-64-v3")
    assert _hash({"DRAGON_CPU_EIGEN_ISA": "v3"}) == _hash({})


def test_baseline_build_within_bounds(rng):
    """The baseline build (no FMA) passes the same bounds."""
    script = r"""
import numpy as np, sys
sys.path.insert(0, %r)
import test_softmax_fast as t
rng = np.random.default_rng(3)
for shape, axis in [((50, 300), -1), ((7, 40, 19), 1), ((3, 5), 0)]:
    x = (rng.standard_normal(shape) * 8).astype(np.float32)
    for log in (False, True):
        t._check(x, axis, log)
print("OK")
""" % str(Path(__file__).resolve().parent)
    env = dict(os.environ, DRAGON_CPU_EIGEN_ISA="base")
    out = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip().endswith("OK"), out.stderr


# ------------------------------------------------------------ dispatch

@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_dispatch_picks_cpu_eigen_and_mkldnn_stays_reachable(op, rng):
    text = dg.plugins.explain(op, "cpu", "float32")
    assert f"winner: {op}F32 from cpu_eigen" in text, text
    x = dg.tensor((rng.standard_normal((16, 200)) * 3).astype(np.float32))
    ours = OPS[op](x, -1).numpy()
    if not any(k.get("plugin") == "mkldnn" for k in dg.plugins.kernels(op)):
        pytest.skip("mkldnn is not installed")
    dg.plugins.pin(op, "cpu", f"mkldnn::{op}")
    try:
        theirs = OPS[op](x, -1).numpy()
    finally:
        dg.plugins.unpin(op, "cpu")
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    assert OPS[op](x, -1).numpy().tobytes() == ours.tobytes()
