"""cpu_eigen's AVX512-BF16 MatMul / MatMulBiasAct (issue 21).

The kernel (plugins/cpu_eigen/src/matmul_bf16.cc, src/gemm/bf16_gemm.cc)
serves bfloat16 products at priority 20 on CPUs with AVX512_BF16; these
tests pin it (kernel name MatMulBf16Avx512) so they exercise it even where
the default would be another kernel, and check:

* float64 NumPy references on the bfloat16 operands (exact in float64):
  the float32 accumulation over k in pairs errs by at most
  (k/2 + 1) 2**-24 sum_i |a_i b_i| per output (one rounding per pair and
  per accumulation, bounded here by k max|a| max|b| per term), and a
  bfloat16 output adds one rounding, 2**-8 |ref|;
* a bfloat16 result is exactly the float32 (out_dtype) result rounded to
  nearest even, once;
* edge shapes (k = 0, 1, odd k, k beyond one 2048-element chunk, rows and
  columns that are not multiples of the 6 x 64 tile), batches with
  broadcast, transposed and permuted (no unit stride) operands, 1-D and
  0-d results, NaN / inf propagation, bias and relu;
* the same bits for 1, 2 and 3 threads;
* dispatch: explain() names the kernel and its priority, matrix-vector
  shapes are declined (oneDNN / cpu_eigen's widening kernel serve them), and
  oneDNN's kernel stays reachable with a pin.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import plugins
from ._common import cpu_has_avx512_bf16, onednn_runs_amx

U32 = 2.0 ** -24
U16 = 2.0 ** -8
KERNELS = {k["name"] for k in plugins.kernels("MatMul") if k["device"] == "cpu"}


HAS = "MatMulBf16Avx512" in KERNELS and cpu_has_avx512_bf16()
needs_kernel = pytest.mark.skipif(not HAS, reason="no AVX512_BF16 on this CPU")
# DRAGON_CPU_EIGEN_BF16_GEMM=all: the kernel takes every call it can
# compute, not only the classes it is faster on; test_every_layout_on_the_kernel
# reruns this file so.
ALL = os.environ.get("DRAGON_CPU_EIGEN_BF16_GEMM") == "all"
# Where oneDNN runs AMX tiles the kernel ranks below it (priority 5, not 20:
# tests/ops/test_bf16_gemm_amx_rank.py) and the default route is oneDNN's.
BELOW_AMX = any(k["name"] == "MatMulBf16Avx512" and k["priority"] < 10
                for k in plugins.kernels("MatMul"))


@pytest.fixture
def rng():
    return np.random.default_rng(2117)


@pytest.fixture
def ours():
    """Pin the AVX512-BF16 kernels first (declined calls go to the next)."""
    plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
    plugins.pin("MatMulBiasAct", "cpu", "MatMulBiasActBf16Avx512")
    yield
    plugins.unpin("MatMul", "cpu")
    plugins.unpin("MatMulBiasAct", "cpu")


def _bf16(rng, shape, scale=1.0):
    """(bfloat16 tensor, its exact float64 values)."""
    t = dg.tensor((rng.standard_normal(shape) * scale).astype(np.float32)).astype("bfloat16")
    return t, t.astype("float64").numpy()


def _mat(x, trans):
    return np.swapaxes(x, -1, -2) if trans and x.ndim >= 2 else x


def _bound(an, bn, ta=False, tb=False):
    """Per-output bound of the float32 pair accumulation."""
    a, b = np.abs(_mat(an, ta)), np.abs(_mat(bn, tb))
    k = a.shape[-1]
    return (k / 2 + 2) * U32 * np.matmul(a, b) + 1e-30


def _check(y, an, bn, ta=False, tb=False, bias=None, relu=False):
    ref = np.matmul(_mat(an, ta), _mat(bn, tb))
    bound = _bound(an, bn, ta, tb)
    if bias is not None:
        ref = ref + bias
        bound = bound + U32 * np.abs(ref)
    if relu:
        ref = np.maximum(ref, 0.0)
    got = y.astype("float64").numpy()
    assert got.shape == ref.shape
    if y.dtype == dg.bfloat16:
        bound = bound * (1 + U16) + U16 * np.abs(ref)
    err = np.abs(got - ref)
    assert np.all(err <= bound), (err.max(), bound[err > bound][:4])


def _round_bf16(x32: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, nearest even (NaN kept quiet)."""
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(x32)
    r[nan] = ((u[nan] >> 16) | 0x40).astype(np.uint16)
    return r


SHAPES = [  # (n, k, m): rows, inner, columns of one product
    (4, 1, 16), (6, 2, 64), (7, 3, 65), (13, 17, 100), (64, 64, 64), (100, 255, 130),
    (37, 2048, 70), (13, 2051, 70), (12, 4100, 20), (128, 64, 128), (5, 0, 33),
]


@needs_kernel
@pytest.mark.parametrize("n,k,m", SHAPES)
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_products_against_float64(rng, ours, n, k, m, out):
    a, an = _bf16(rng, (n, k))
    b, bn = _bf16(rng, (k, m))
    y = dg.ops.matmul(a, b, out_dtype=out)
    assert y.dtype == getattr(dg, out) and tuple(y.shape) == (n, m)
    _check(y, an, bn)
    if out == "float32" and k > 0:
        # The bfloat16 product is the float32 one rounded once.
        y16 = dg.ops.matmul(a, b)
        bits = y16.numpy().view(np.uint16) if y16.numpy().dtype.itemsize == 2 else None
        want = _round_bf16(y.numpy())
        got = bits if bits is not None else _round_bf16(y16.astype("float32").numpy())
        np.testing.assert_array_equal(got, want)


@needs_kernel
@pytest.mark.parametrize("ta,tb", [(False, True), (True, False), (True, True)])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_transposed_operands(rng, ours, ta, tb, out):
    n, k, m = 50, 77, 90
    a, an = _bf16(rng, (k, n) if ta else (n, k))
    b, bn = _bf16(rng, (m, k) if tb else (k, m))
    y = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype=out)
    _check(y, an, bn, ta, tb)


@needs_kernel
def test_strided_and_permuted_views(rng, ours):
    # Attention-like: [B, T, H, D] permuted to [B, H, T, D] (no dense copy).
    q, qn = _bf16(rng, (2, 24, 3, 16))
    kk, kn = _bf16(rng, (2, 40, 3, 16))
    qp, kp = q.permute(0, 2, 1, 3), kk.permute(0, 2, 1, 3)
    qpn, kpn = qn.transpose(0, 2, 1, 3), kn.transpose(0, 2, 1, 3)
    s = dg.ops.matmul(qp, kp, transpose_b=True)
    _check(s, qpn, kpn, tb=True)
    # Every other row and column: no unit stride on either axis.
    a, an = _bf16(rng, (40, 60))
    b, bn = _bf16(rng, (60, 80))
    y = dg.ops.matmul(a[::2, ::3], b[::3, 1::2], out_dtype="float32")
    _check(y, an[::2, ::3], bn[::3, 1::2])
    # The transpose of a view.
    y = dg.ops.matmul(a[::2, ::3].T, b[:40:2, ::2].T.T.T, transpose_b=True)
    _check(y, an[::2, ::3].T, bn[:40:2, ::2].T, tb=True)


@needs_kernel
@pytest.mark.parametrize("sa,sb", [
    ((3, 20, 30), (30, 40)),          # batch @ matrix: one stacked product
    ((30, 20), (3, 20, 40)),          # matrix @ batch
    ((2, 1, 10, 30), (3, 30, 17)),    # broadcast on both sides
    ((32, 16, 8), (32, 8, 16)),       # many small items (one per thread)
    ((4, 8, 0), (4, 0, 16)),          # k = 0
    ((0, 8, 4), (4, 16)),             # empty batch
])
def test_batched_broadcast(rng, ours, sa, sb):
    if not HAS:
        pytest.skip("no AVX512_BF16 on this CPU")
    a, an = _bf16(rng, sa)
    b, bn = _bf16(rng, sb)
    for out in ("bfloat16", "float32"):
        _check(dg.ops.matmul(a, b, out_dtype=out), an, bn)


def test_vectors_and_0d_results(rng, ours):
    # Declined by the kernel's supports() (matrix-vector shapes): served by
    # another kernel with the same semantics.
    a, an = _bf16(rng, (9,))
    b, bn = _bf16(rng, (9, 40))
    _check(dg.ops.matmul(a, b), an, bn)
    c, cn = _bf16(rng, (40, 9))
    _check(dg.ops.matmul(c, a), cn, an)
    _check(dg.ops.matmul(a, a, out_dtype="float32"), an, an)


@needs_kernel
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
def test_nan_and_inf_propagate(rng, ours, out):
    a, an = _bf16(rng, (12, 30))
    b, bn = _bf16(rng, (30, 70))
    an = an.copy()
    bn = bn.copy()
    an[3, 5] = np.nan
    an[7, 2] = np.inf
    bn[4, 9] = -np.inf
    a = dg.tensor(an.astype(np.float32)).astype("bfloat16")
    b = dg.tensor(bn.astype(np.float32)).astype("bfloat16")
    got = dg.ops.matmul(a, b, out_dtype=out).astype("float64").numpy()
    with np.errstate(invalid="ignore"):
        ref = an @ bn
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(ref))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(ref))
    # The other outputs never meet a special value: the usual bound.
    fin = np.isfinite(ref)
    bound = _bound(np.nan_to_num(an, nan=0, posinf=0, neginf=0),
                   np.nan_to_num(bn, nan=0, posinf=0, neginf=0))
    if out == "bfloat16":
        bound = bound * (1 + U16) + U16 * np.abs(np.nan_to_num(ref))
    assert np.all(np.abs(got[fin] - ref[fin]) <= bound[fin])


@needs_kernel
@pytest.mark.parametrize("act", ["none", "relu"])
@pytest.mark.parametrize("out", ["bfloat16", "float32"])
@pytest.mark.parametrize("sa,sb", [((13, 40), (40, 70)), ((2, 7, 33), (33, 100)),
                                   ((9, 0), (0, 20))])
def test_bias_act(rng, ours, act, out, sa, sb):
    a, an = _bf16(rng, sa)
    b, bn = _bf16(rng, sb)
    bias = dg.tensor(rng.standard_normal(sb[-1]).astype(np.float32)).astype(out)
    bn_ = bias.astype("float64").numpy()
    y = dg.ops.matmul_bias_act(a, b, bias, activation=act, out_dtype=out)
    assert y.dtype == getattr(dg, out)
    _check(y, an, bn, bias=bn_, relu=act == "relu")
    # The bias is added before the single rounding: a bfloat16 result is
    # the float32 one rounded.
    y32 = dg.ops.matmul_bias_act(a, b, bias.astype("float32"), activation=act,
                                 out_dtype="float32")
    if out == "bfloat16":
        np.testing.assert_array_equal(y.numpy().view(np.uint16),
                                      _round_bf16(y32.numpy()))
    # A strided bias is read through its stride.
    wide = dg.tensor(np.repeat(bn_.astype(np.float32), 2)).astype(out)
    y2 = dg.ops.matmul_bias_act(a, b, wide[::2], activation=act, out_dtype=out)
    np.testing.assert_array_equal(y2.astype("float32").numpy(), y.astype("float32").numpy())


@needs_kernel
def test_relu_keeps_nan_and_zeroes_negatives(rng, ours):
    a, an = _bf16(rng, (6, 4))
    an = an.copy()
    an[2, 1] = np.nan
    a = dg.tensor(an.astype(np.float32)).astype("bfloat16")
    b, bn = _bf16(rng, (4, 32))
    bias = dg.ops.zeros([32], dtype="bfloat16")
    y = dg.ops.matmul_bias_act(a, b, bias, activation="relu").astype("float32").numpy()
    assert np.all(np.isnan(y[2])) and not np.any(np.isnan(np.delete(y, 2, 0)))
    fin = np.delete(y, 2, 0)
    assert np.all(fin >= 0) and not np.any(np.signbit(fin))


_HASH_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
rng = np.random.default_rng(5)
h = hashlib.sha256()
for sa, sb in [((300, 500), (500, 260)), ((130, 2100), (2100, 70)), ((16, 64, 40), (16, 40, 64)),
               ((2, 150, 64), (64, 200)), ((200, 301), (301, 150))]:
    a = dg.tensor(rng.standard_normal(sa).astype(np.float32)).astype("bfloat16")
    b = dg.tensor(rng.standard_normal(sb).astype(np.float32)).astype("bfloat16")
    for out in ("bfloat16", "float32"):
        h.update(dg.ops.matmul(a, b, out_dtype=out).astype("float32").numpy().tobytes())
print(h.hexdigest())
"""


@needs_kernel
def test_same_bits_for_any_thread_count():
    hashes = {}
    for t in (1, 2, 3):
        env = dict(os.environ, OMP_NUM_THREADS=str(t), DRAGON_NUM_THREADS=str(t),
                   DRAGON_CPU_EIGEN_BF16_GEMM="all")
        out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                             capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        hashes[t] = out.stdout.strip()
    assert len(set(hashes.values())) == 1, hashes


# ------------------------------------------------------------ dispatch

def test_explain_names_the_kernel_and_priority():
    if BELOW_AMX:
        pytest.skip("oneDNN runs AMX here: tests/ops/test_bf16_gemm_amx_rank.py checks "
                    "this CPU's ranking; test_every_layout_on_the_kernel reruns this "
                    "with DRAGON_CPU_EIGEN_BF16_GEMM=all")
    text = plugins.explain("MatMul", "cpu", "bfloat16")
    assert "MatMulBf16Avx512 [plugin cpu_eigen] priority=20" in text, text
    assert "winner: MatMulBf16Avx512 from cpu_eigen" in text, text
    text = plugins.explain("MatMulBiasAct", "cpu", "bfloat16")
    assert "winner: MatMulBiasActBf16Avx512 from cpu_eigen" in text, text
    # float32 products are not its business.
    assert "MatMulBf16Avx512" not in plugins.explain("MatMul", "cpu", "float32")


@needs_kernel
def test_default_dispatch_is_the_kernel_and_onednn_stays_reachable(rng):
    a, an = _bf16(rng, (70, 130))
    b, bn = _bf16(rng, (130, 90))
    default = dg.ops.matmul(a, b, out_dtype="float32").numpy()
    plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
    try:
        pinned = dg.ops.matmul(a, b, out_dtype="float32").numpy()
    finally:
        plugins.unpin("MatMul", "cpu")
    assert default.tobytes() == pinned.tobytes()
    if "MatMulOneDNN" not in KERNELS:
        pytest.skip("mkldnn is not installed")
    plugins.pin("MatMul", "cpu", "mkldnn")
    try:
        theirs = dg.ops.matmul(a, b, out_dtype="float32").numpy()
    finally:
        plugins.unpin("MatMul", "cpu")
    tol = _bound(an, bn)
    assert np.all(np.abs(theirs.astype(np.float64) - default) <= 2 * tol)


def test_isa_cap_declines_the_kernel():
    """DRAGON_CPU_EIGEN_ISA=v3 (no AVX-512) leaves bfloat16 products to the
    other kernels, with the same results within the bounds."""
    script = r"""
import numpy as np, dragon_core as dg
rng = np.random.default_rng(1)
a = dg.tensor(rng.standard_normal((30, 50)).astype(np.float32)).astype("bfloat16")
b = dg.tensor(rng.standard_normal((50, 40)).astype(np.float32)).astype("bfloat16")
dg.plugins.pin("MatMul", "cpu", "cpu_eigen")
y = dg.ops.matmul(a, b, out_dtype="float32").numpy()
ref = a.astype("float64").numpy() @ b.astype("float64").numpy()
assert np.abs(y - ref).max() < 1e-3, np.abs(y - ref).max()
print("OK")
"""
    env = dict(os.environ, DRAGON_CPU_EIGEN_ISA="v3")
    out = subprocess.run([sys.executable, "-c", script], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "OK", out.stderr


@needs_kernel
def test_every_layout_on_the_kernel():
    """This file again with DRAGON_CPU_EIGEN_BF16_GEMM=all, so the plain
    row-major products (left to oneDNN by default) run on the kernel too."""
    if ALL:
        pytest.skip("already running with DRAGON_CPU_EIGEN_BF16_GEMM=all")
    env = dict(os.environ, DRAGON_CPU_EIGEN_BF16_GEMM="all")
    out = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p",
                          "no:cacheprovider", "-x", "-k",
                          "not every_layout and not thread_count and not isa_cap"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout, out.stdout[-2000:]


_ROUTE_SCRIPT = r"""
import sys, numpy as np, dragon_core as dg
rng = np.random.default_rng(0)
def bf(*s):
    return dg.tensor(rng.standard_normal(s).astype(np.float32)).astype("bfloat16")
cases = {
    "plain": lambda: dg.ops.matmul(bf(64, 96), bf(96, 80)),
    "trans_b": lambda: dg.ops.matmul(bf(64, 96), bf(80, 96), transpose_b=True),
    "linear": lambda: dg.ops.matmul_bias_act(bf(64, 96), bf(80, 96), bf(80), activation="relu",
                                             transpose_b=True),
    "batched_trans_a": lambda: dg.ops.matmul(bf(4, 96, 64), bf(4, 96, 80), transpose_a=True),
    "trans_a_f32_bias": lambda: dg.ops.matmul_bias_act(
        bf(4, 96, 64), bf(4, 96, 80), dg.tensor(np.ones(80, np.float32)), activation="relu",
        transpose_a=True, out_dtype="float32"),
    "single_trans_a": lambda: dg.ops.matmul(bf(96, 64), bf(96, 80), transpose_a=True),
    "large": lambda: dg.ops.matmul(bf(512, 16384), bf(16384, 1024)),
    "vector": lambda: dg.ops.matmul(bf(96), bf(96, 80)),
    "thin": lambda: dg.ops.matmul(bf(64, 96), bf(96, 8)),
    # The encoder step's single products (session bgemm).
    "linear_step": lambda: dg.ops.matmul(bf(1024, 256), bf(256, 256), transpose_b=True,
                                         out_dtype="float32"),
    "linear_bias_step": lambda: dg.ops.matmul_bias_act(
        bf(1024, 256), bf(1024, 256), dg.tensor(np.ones(1024, np.float32)),
        activation="none", transpose_b=True, out_dtype="float32"),
    "dx_step": lambda: dg.ops.matmul(bf(1024, 256), bf(256, 1024), out_dtype="float32"),
    "dx_bf16_step": lambda: dg.ops.matmul(bf(1024, 256), bf(256, 256)),
    # A larger bfloat16 output (square 1024): a tie at best, left to oneDNN.
    "square_bf16": lambda: dg.ops.matmul(bf(1024, 1024), bf(1024, 1024)),
    "dw_step": lambda: dg.ops.matmul(bf(1024, 256), bf(1024, 1024), transpose_a=True,
                                     out_dtype="float32"),
    "dw_bf16_step": lambda: dg.ops.matmul(bf(1024, 256), bf(1024, 1024), transpose_a=True),
    "dw_short_k": lambda: dg.ops.matmul(bf(512, 256), bf(512, 1024), transpose_a=True,
                                        out_dtype="float32"),
    "dw_narrow": lambda: dg.ops.matmul(bf(1024, 128), bf(1024, 1024), transpose_a=True,
                                       out_dtype="float32"),
    "narrow": lambda: dg.ops.matmul(bf(4096, 256), bf(256, 128), out_dtype="float32"),
    "short_k": lambda: dg.ops.matmul(bf(2048, 128), bf(128, 512), out_dtype="float32"),
    "few_rows": lambda: dg.ops.matmul(bf(512, 512), bf(512, 512), out_dtype="float32"),
    "batched_plain": lambda: dg.ops.matmul(bf(4, 1024, 256), bf(4, 256, 256),
                                           out_dtype="float32"),
    # Attention's q @ K^T: 32 heads' 128 x 64 by 64 x 128, bfloat16 out.
    "batched_trans_b": lambda: dg.ops.matmul(bf(32, 128, 64), bf(32, 128, 64),
                                             transpose_b=True),
    # Items below 64^3 multiply-adds, plain and transposed-A.
    "batched_small": lambda: dg.ops.matmul(bf(256, 32, 32), bf(256, 32, 32)),
    "batched_small_trans_a": lambda: dg.ops.matmul(bf(128, 48, 48), bf(128, 48, 48),
                                                   transpose_a=True, out_dtype="float32"),
}
for name, fn in cases.items():
    print("CASE", name, flush=True)
    fn()
    print("END", flush=True)
"""


def _onednn_ran(policy):
    """{case: whether oneDNN executed a matmul for it} in a child process."""
    env = dict(os.environ, ONEDNN_VERBOSE="1")
    env.pop("DRAGON_CPU_EIGEN_BF16_GEMM", None)
    if policy:
        env["DRAGON_CPU_EIGEN_BF16_GEMM"] = policy
    out = subprocess.run([sys.executable, "-c", _ROUTE_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    ran, case = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("CASE "):
            case = line.split()[1]
            ran[case] = False
        elif line.startswith("onednn_verbose,") and ",exec," in line and ",matmul," in line:
            ran[case] = True
    return ran


@needs_kernel
def test_measured_classes_route_as_documented():
    """Which calls the kernel takes (a oneDNN matmul execution shows in
    ONEDNN_VERBOSE otherwise): batches of products of at least 64^3
    multiply-adds an item (smaller items stay on oneDNN), products of at
    least 2048^3, single products whose A is not stored transposed with n
    >= 1024 and m, k >= 256 (the encoder step's Linear layers and input
    gradients; a bfloat16 output only with m, k <= 256), and single float32-output
    transposed-A products with k >= 1024 and n, m >= 256 (its weight
    gradients) here; smaller plain and transposed-B products, transposed-A
    ones over a short k or with a bfloat16 output, and matrix-vector
    shapes on oneDNN; =all takes every matrix product, =off none."""
    if "MatMulOneDNN" not in KERNELS:
        pytest.skip("mkldnn is not installed")
    auto = _onednn_ran(None)
    if onednn_runs_amx():
        # Below oneDNN's AMX kernels: every product goes to oneDNN.
        assert all(auto.values()), auto
    else:
        _check_auto_routes(auto)
    every = _onednn_ran("all")
    assert every == {"plain": False, "trans_b": False, "linear": False,
                     "batched_trans_a": False, "trans_a_f32_bias": False,
                     "single_trans_a": False, "large": False,
                     "vector": True, "thin": True,
                     "linear_step": False, "linear_bias_step": False,
                     "dx_step": False, "dx_bf16_step": False, "dw_step": False,
                     "square_bf16": False, "dw_bf16_step": False, "dw_short_k": False, "dw_narrow": False,
                     "narrow": False, "short_k": False, "few_rows": False,
                     "batched_plain": False, "batched_trans_b": False,
                     "batched_small": False, "batched_small_trans_a": False}, every
    assert all(_onednn_ran("off").values())


def _check_auto_routes(auto):
    """The documented default classes (CPUs without AMX)."""
    assert auto == {"plain": True, "trans_b": True, "linear": True,
                    "batched_trans_a": False, "trans_a_f32_bias": False,
                    "single_trans_a": True, "large": False,
                    "vector": True, "thin": True,
                    "linear_step": False, "linear_bias_step": False,
                    "dx_step": False, "dx_bf16_step": False, "dw_step": False,
                    "square_bf16": True, "dw_bf16_step": True, "dw_short_k": True, "dw_narrow": True,
                    "narrow": True, "short_k": True, "few_rows": True,
                    "batched_plain": False, "batched_trans_b": False,
                    "batched_small": True, "batched_small_trans_a": True}, auto
