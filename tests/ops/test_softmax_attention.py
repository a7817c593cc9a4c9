"""SoftmaxAttention and SoftmaxAttentionGrad (dragon_core/src/ops/
softmax_attention.cc, the ops of the attention_fusion graph pass; kernel in
plugins/cpu_eigen/src/attention_fused.cc): against float64 NumPy (whose
gradient formulas are checked by finite differences), bit for bit against
the MatMul / Mul / Softmax / SoftmaxGrad ops they replace, on odd sizes and
packet tails, strided inputs (the head-split views of an attention layer),
the head-merge output layout, empty tensors; errors; explain().

The kernel is registered on x86-64-v4 CPUs only (the pass asks for it
before it fuses); on others these tests skip, and the pass's own tests show
the graph is left unfused there."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

ops = dg.ops

pytestmark = pytest.mark.skipif(
    "float32" not in "".join(k["dtypes"] for k in dg._C.kernels("SoftmaxAttention")
                             if k["device"] == "cpu"),
    reason="SoftmaxAttention has a kernel only on x86-64-v4 (AVX-512) CPUs "
           "(tests/graph/test_attention_fusion.py checks the pass leaves graphs alone there)")
#: Items per head group so that a batch has as many items as the threads
#: (the unfused products then run on the same batched kernel).
NT = max(2, dg._C.NUM_THREADS)


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def _softmax(s):
    m = s.max(-1, keepdims=True) if s.shape[-1] else 0.0
    e = np.exp(s - m)
    return e / e.sum(-1, keepdims=True)


def _ref_forward(q, kt, v, scale):
    s = (q @ kt) * scale
    p = _softmax(s)
    return p, p @ v


def _ref_backward(q, kt, v, p, do, scale):
    dp = do @ np.swapaxes(v, -1, -2)
    ds = p * (dp - (dp * p).sum(-1, keepdims=True)) * scale
    dq = ds @ np.swapaxes(kt, -1, -2)
    dk = np.swapaxes(ds, -1, -2) @ q
    dv = np.swapaxes(p, -1, -2) @ do
    return dq, dk, dv


def _inputs(batch, L, E, S, Ev, seed=0, strided=False):
    """float32 q [..., L, E], kt [..., E, S], v [..., S, Ev], do [..., L, Ev];
    strided: the layout of an attention layer (heads split out of
    [B, T, H * D] rows by a permute; kt a transposed view)."""
    rng = np.random.default_rng(seed)

    def make(shape, scale=1.0):
        return (rng.standard_normal(shape) * scale).astype(np.float32)
    if not strided:
        return (dg.tensor(make(batch + (L, E))), dg.tensor(make(batch + (E, S))),
                dg.tensor(make(batch + (S, Ev))), dg.tensor(make(batch + (L, Ev))))
    B, H = batch

    def heads(rows, cols):        # [B, rows, H * cols] -> [B, H, rows, cols]
        t = dg.tensor(make((B, rows, H * cols)))
        return ops.transpose(ops.reshape(t, (B, rows, H, cols)), (0, 2, 1, 3))
    q, k, v, do = heads(L, E), heads(S, E), heads(S, Ev), heads(L, Ev)
    return q, ops.transpose(k, (0, 1, 3, 2)), v, do


def _f64(*ts):
    return [np.asarray(t.astype("float64").numpy()) for t in ts]


EPS = 2.0 ** -24


def _close(got, want, bound, what):
    err = np.abs(np.asarray(got, np.float64) - want)
    assert got.shape == want.shape, (what, got.shape, want.shape)
    assert np.all(err <= bound + 1e-30), (what, float(err.max()))


# (batch, L, E, S, Ev): odd sizes and 16-float tails on every side, one
# item, rank 2 / 3 / 4, the encoder's shape, sides beyond the pass's class.
SHAPES = [((2, 3), 9, 8, 17, 24), ((), 5, 3, 7, 2), ((4,), 1, 1, 1, 1),
          ((3,), 33, 19, 31, 17), ((1, 2), 128, 64, 128, 64), ((2, 1), 16, 16, 300, 40)]


@pytest.mark.parametrize("batch,L,E,S,Ev", SHAPES)
@pytest.mark.parametrize("scale", [None, 0.125, 1.7])
def test_matches_float64(batch, L, E, S, Ev, scale):
    q, kt, v, do = _inputs(batch, L, E, S, Ev, seed=L + S)
    p, o = ops.softmax_attention(q, kt, v, scale=scale or 1.0, has_scale=scale is not None)
    Q, KT, V, DO = _f64(q, kt, v, do)
    sc = 1.0 if scale is None else scale
    P, O = _ref_forward(Q, KT, V, sc)
    # Error bounds from float32 rounding: each sum of n terms is off by at
    # most ~n ulps of the sum of its terms' magnitudes; a score's error moves
    # its row's softmax by that much relatively (and the row sum by its max).
    ds = (E + 2) * EPS * (np.abs(Q) @ np.abs(KT)) * abs(sc)
    dsm = ds.max(-1, keepdims=True) if S else ds
    bp = P * (ds + dsm + (S + 8) * EPS)
    _close(p.numpy(), P, bp, "p")
    _close(o.numpy(), O, bp @ np.abs(V) + (S + 2) * EPS * (P @ np.abs(V)), "o")
    dq, dk, dv = ops.softmax_attention_grad(q, kt, v, p, do, scale=sc,
                                            has_scale=scale is not None)
    pp = np.asarray(p.numpy(), np.float64)
    DQ, DK, DV = _ref_backward(Q, KT, V, pp, DO, sc)
    # Bounds from the magnitudes each sum adds up (p as the kernel had it).
    adp = np.abs(DO) @ np.abs(np.swapaxes(V, -1, -2))
    ads = pp * (adp + (adp * pp).sum(-1, keepdims=True)) * abs(sc)
    n = max(L, S, E, Ev) + 8
    _close(dq.numpy(), DQ, 2 * n * EPS * (ads @ np.abs(np.swapaxes(KT, -1, -2))), "dq")
    _close(dk.numpy(), DK, 2 * n * EPS * (np.swapaxes(ads, -1, -2) @ np.abs(Q)), "dk")
    _close(dv.numpy(), DV, n * EPS * (np.swapaxes(pp, -1, -2) @ np.abs(DO)), "dv")


def test_reference_gradient_matches_finite_differences():
    """The float64 formulas above are the gradient of sum(o * do)."""
    rng = np.random.default_rng(5)
    Q, KT, V, DO = (rng.standard_normal(s) for s in [(2, 4, 3), (2, 3, 5), (2, 5, 6),
                                                    (2, 4, 6)])
    sc = 0.7

    def loss(q, kt, v):
        return float((_ref_forward(q, kt, v, sc)[1] * DO).sum())
    P, _ = _ref_forward(Q, KT, V, sc)
    grads = _ref_backward(Q, KT, V, P, DO, sc)
    dkt = np.swapaxes(grads[1], -1, -2)
    for x, g in ((Q, grads[0]), (KT, dkt), (V, grads[2])):
        fd = np.zeros_like(x)
        for idx in np.ndindex(x.shape):
            old = x[idx]
            x[idx] = old + 1e-6
            up = loss(Q, KT, V)
            x[idx] = old - 1e-6
            down = loss(Q, KT, V)
            x[idx] = old
            fd[idx] = (up - down) / 2e-6
        np.testing.assert_allclose(g, fd, rtol=1e-6, atol=1e-7)


def _unfused(q, kt, v, do, scale):
    """The ops the pass replaces, eager."""
    s = ops.matmul(q, kt)
    if scale is not None:
        s = ops.mul(s, dg.tensor(np.float32(scale)))
    p = ops.softmax(s, -1)
    o = ops.matmul(p, v)
    dp = ops.matmul(do, v, transpose_b=True)
    g = ops.softmax_grad(p, dp, axis=-1)
    ds = g if scale is None else ops.mul(g, dg.tensor(np.float32(scale)))
    dq = ops.matmul(ds, kt, transpose_b=True)
    dk = ops.matmul(ds, q, transpose_a=True)
    dv = ops.matmul(p, do, transpose_a=True)
    return p, o, dq, dk, dv


# The pass's class (every side in [8, 256], batch >= max(2, threads)): the
# unfused products run on the same batched kernel.
@pytest.mark.parametrize("batch,L,E,S,Ev,strided", [
    ((2, NT), 24, 16, 40, 32, False), ((2, NT), 128, 64, 128, 64, True),
    ((3, NT), 9, 13, 17, 8, True), ((NT + 1,), 8, 8, 8, 8, False)])
@pytest.mark.parametrize("scale", [None, 0.125])
def test_same_bits_as_the_unfused_ops(batch, L, E, S, Ev, strided, scale):
    q, kt, v, do = _inputs(batch, L, E, S, Ev, seed=3, strided=strided)
    want = _unfused(q, kt, v, do, scale)
    p, o = ops.softmax_attention(q, kt, v, scale=scale or 1.0, has_scale=scale is not None)
    got = (p, o) + tuple(ops.softmax_attention_grad(q, kt, v, p, do, scale=scale or 1.0,
                                                    has_scale=scale is not None))
    for name, g, w in zip(["p", "o", "dq", "dk", "dv"], got, want):
        np.testing.assert_array_equal(_bits(g.numpy()), _bits(w.numpy()), err_msg=name)


def test_heads_last_outputs_are_the_merged_layout():
    q, kt, v, do = _inputs((2, 3), 12, 8, 20, 16, seed=9, strided=True)
    p, o = ops.softmax_attention(q, kt, v, scale=0.25, has_scale=True)
    p2, o2 = ops.softmax_attention(q, kt, v, scale=0.25, has_scale=True, o_heads_last=True)
    assert o2.shape == (2, 12, 3, 16)
    np.testing.assert_array_equal(_bits(p2.numpy()), _bits(p.numpy()))
    np.testing.assert_array_equal(_bits(o2.numpy()), _bits(np.swapaxes(o.numpy(), 1, 2)))
    plain = ops.softmax_attention_grad(q, kt, v, p, do, scale=0.25, has_scale=True)
    for flags in [(True, False, False), (False, True, False), (False, False, True),
                  (True, True, True)]:
        merged = ops.softmax_attention_grad(
            q, kt, v, p, do, scale=0.25, has_scale=True, dq_heads_last=flags[0],
            dk_heads_last=flags[1], dv_heads_last=flags[2])
        for flag, a, b in zip(flags, merged, plain):
            want = np.swapaxes(b.numpy(), 1, 2) if flag else b.numpy()
            np.testing.assert_array_equal(_bits(a.numpy()), _bits(want))


def test_strided_p_is_read_through_its_strides():
    q, kt, v, do = _inputs((2, 2), 10, 8, 12, 8, seed=4)
    p, _ = ops.softmax_attention(q, kt, v)
    pt = ops.transpose(ops.contiguous(ops.transpose(p, (0, 1, 3, 2))), (0, 1, 3, 2))
    a = ops.softmax_attention_grad(q, kt, v, p, do)
    b = ops.softmax_attention_grad(q, kt, v, pt, do)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(_bits(x.numpy()), _bits(y.numpy()))


@pytest.mark.parametrize("batch,L,E,S,Ev", [((0, 2), 4, 3, 5, 2), ((2,), 0, 3, 5, 2),
                                            ((2,), 4, 0, 5, 2), ((2,), 4, 3, 0, 2),
                                            ((2,), 4, 3, 5, 0)])
def test_empty_sides(batch, L, E, S, Ev):
    q, kt, v, do = _inputs(batch, L, E, S, Ev)
    p, o = ops.softmax_attention(q, kt, v, scale=0.5, has_scale=True)
    Q, KT, V, DO = _f64(q, kt, v, do)
    P, O = _ref_forward(Q, KT, V, 0.5)
    assert p.shape == P.shape and o.shape == O.shape
    np.testing.assert_allclose(o.numpy(), O, atol=1e-6)
    grads = ops.softmax_attention_grad(q, kt, v, p, do, scale=0.5, has_scale=True)
    for g, w in zip(grads, _ref_backward(Q, KT, V, np.asarray(p.numpy(), np.float64), DO, 0.5)):
        assert g.shape == w.shape
        np.testing.assert_allclose(g.numpy(), w, atol=1e-6)


def test_bad_shapes_name_the_op_and_shapes():
    q, kt, v, do = _inputs((2,), 4, 3, 5, 2)
    with pytest.raises(InvalidArgumentError, match=r"kt must have shape \[2\] \+ \[3, \*\]"):
        ops.softmax_attention(q, ops.transpose(kt, (0, 2, 1)), v)
    with pytest.raises(InvalidArgumentError, match="v must have shape"):
        ops.softmax_attention(q, kt, do)
    with pytest.raises(InvalidArgumentError, match="o_heads_last needs inputs of rank 4"):
        ops.softmax_attention(q, kt, v, o_heads_last=True)
    p, _ = ops.softmax_attention(q, kt, v)
    with pytest.raises(InvalidArgumentError, match="do must have shape"):
        ops.softmax_attention_grad(q, kt, v, p, q)


def test_float64_inputs_are_rejected():
    q = dg.tensor(np.zeros((2, 3)))
    with pytest.raises((InvalidArgumentError, TypeError)) as info:
        ops.softmax_attention(q, dg.tensor(np.zeros((3, 4))), dg.tensor(np.zeros((4, 2))))
    assert "float64" in str(info.value)


def test_explain_names_the_cpu_eigen_kernels():
    for op in ("SoftmaxAttention", "SoftmaxAttentionGrad"):
        text = dg.plugins.explain(op, "cpu", "float32")
        assert f"winner: {op}Avx512 from cpu_eigen" in text, text


@pytest.mark.parametrize("env,absent", [
    ({"DRAGON_CPU_EIGEN_ISA": "v3"}, {"float32", "bfloat16"}),
    ({"DRAGON_CPU_EIGEN_BATCHED_GEMM": "off"}, {"float32"}),
    ({"DRAGON_CPU_EIGEN_BF16_GEMM": "off"}, {"bfloat16"})])
def test_not_registered_below_avx512(env, absent):
    """With the ISA capped at x86-64-v3 the kernels are not registered; with
    the batched float32 GEMM switched off, not for float32; with the
    AVX512-BF16 GEMM off, not for bfloat16: the pass (which asks for them)
    leaves those graphs as they are."""
    code = ("import dragon_core as dg\n"
            "from dragon_core._graph.passes import kernel_dtypes\n"
            "print(' '.join(sorted(kernel_dtypes('SoftmaxAttention', 'cpu'))))\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, **env),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert not set(out.stdout.split()) & absent, out.stdout


# ------------------------------------------------------------- bfloat16

HAS_BF16 = "bfloat16" in "".join(k["dtypes"] for k in dg._C.kernels("SoftmaxAttention")
                                 if k["device"] == "cpu")
needs_bf16 = pytest.mark.skipif(not HAS_BF16, reason="the bfloat16 kernels need the "
                                "AVX512-BF16 GEMM (a GCC build on a CPU with AVX512_BF16)")


def _avx512_bf16_gemm_registered() -> bool:
    from ._common import cpu_has_avx512_bf16
    return cpu_has_avx512_bf16() and any(
        k["name"] == "MatMulBf16Avx512" for k in dg._C.kernels("MatMul"))


@pytest.mark.skipif(HAS_BF16 or not _avx512_bf16_gemm_registered(),
                    reason="the bfloat16 tests run in this process (or the CPU has no AVX512_BF16)")
def test_bf16_kernels_with_the_gemm_first():
    """Where oneDNN runs AMX tiles the bfloat16 kernels are not registered
    by default (the GEMM they share with the unfused products ranks below
    oneDNN's): the bfloat16 tests of this file again with
    DRAGON_CPU_EIGEN_BF16_GEMM=all, which registers them and puts the GEMM
    first for the unfused products they are compared with."""
    env = dict(os.environ, DRAGON_CPU_EIGEN_BF16_GEMM="all")
    out = subprocess.run([sys.executable, "-m", "pytest", __file__, "-q", "-p",
                          "no:cacheprovider", "-x", "-k", "test_bf16_same_bits or test_bf16_matches"],
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and "skipped" not in out.stdout, out.stdout[-2000:]


def _unfused_bf16(q, kt, v, do, scale):
    """The mixed-precision graph's ops, eager: bfloat16 products with
    float32 scores and gradients, p and ds cast to bfloat16."""
    s = ops.matmul(q, kt, out_dtype="float32")
    if scale is not None:
        s = ops.mul(s, dg.tensor(np.float32(scale)))
    p = ops.softmax(s, -1)
    p16 = p.astype("bfloat16")
    o = ops.matmul(p16, v)
    dp = ops.matmul(do, v, transpose_b=True, out_dtype="float32")
    g = ops.softmax_grad(p, dp, axis=-1)
    ds = g if scale is None else ops.mul(g, dg.tensor(np.float32(scale)))
    ds16 = ds.astype("bfloat16")
    dq = ops.matmul(ds16, kt, transpose_b=True, out_dtype="float32")
    dk = ops.matmul(ds16, q, transpose_a=True, out_dtype="float32")
    dv = ops.matmul(p16, do, transpose_a=True, out_dtype="float32")
    return p, o, dq, dk, dv


def _bf16(ts):
    return [t.astype("bfloat16") for t in ts]


@needs_bf16
@pytest.mark.parametrize("batch,L,E,S,Ev,strided", [
    ((2, NT), 128, 64, 128, 64, True), ((2, NT), 64, 64, 72, 80, False),
    ((NT + 1,), 96, 32, 100, 48, False)])
@pytest.mark.parametrize("scale", [None, 0.125])
def test_bf16_same_bits_as_the_unfused_ops(batch, L, E, S, Ev, strided, scale):
    q, kt, v, do = _bf16(_inputs(batch, L, E, S, Ev, seed=7, strided=strided))
    want = _unfused_bf16(q, kt, v, do, scale)
    p, o = ops.softmax_attention(q, kt, v, scale=scale or 1.0, has_scale=scale is not None)
    assert p.dtype == "float32" and o.dtype == "bfloat16"
    got = (p, o) + tuple(ops.softmax_attention_grad(q, kt, v, p, do, scale=scale or 1.0,
                                                    has_scale=scale is not None))
    for name, g, w in zip(["p", "o", "dq", "dk", "dv"], got, want):
        assert g.dtype == w.dtype, name
        np.testing.assert_array_equal(_bits(g.numpy() if g.dtype != "bfloat16" else
                                            g.astype("float32").numpy()),
                                      _bits(w.numpy() if w.dtype != "bfloat16" else
                                            w.astype("float32").numpy()), err_msg=name)


@needs_bf16
@pytest.mark.parametrize("heads_last", [False, True])
def test_bf16_matches_float64(heads_last):
    """Against float64 on the bfloat16 values: p to float32 rounding, o and
    the gradients to bfloat16's (p and ds are rounded to 8 bits before the
    products that read them, as the graph's Casts do)."""
    q, kt, v, do = _bf16(_inputs((2, NT), 64, 32, 48, 32, seed=12, strided=True))
    Q, KT, V, DO = _f64(q, kt, v, do)
    p, o = ops.softmax_attention(q, kt, v, scale=0.5, has_scale=True, o_heads_last=heads_last)
    P, O = _ref_forward(Q, KT, V, 0.5)
    np.testing.assert_allclose(p.numpy(), P, rtol=1e-5, atol=1e-7)
    got_o = o.astype("float32").numpy()
    if heads_last:
        got_o = np.swapaxes(got_o, 1, 2)
    u = 2.0 ** -8
    bound = 2 * u * (P @ np.abs(V)) + 1e-30
    assert np.all(np.abs(got_o - O) <= bound), float(np.abs(got_o - O).max())
    dq, dk, dv = ops.softmax_attention_grad(q, kt, v, p, do, scale=0.5, has_scale=True)
    DQ, DK, DV = _ref_backward(Q, KT, V, P, DO, 0.5)
    adp = np.abs(DO) @ np.abs(np.swapaxes(V, -1, -2))
    ads = P * (adp + (adp * P).sum(-1, keepdims=True)) * 0.5
    for g, w, mag in [(dq, DQ, ads @ np.abs(np.swapaxes(KT, -1, -2))),
                      (dk, DK, np.swapaxes(ads, -1, -2) @ np.abs(Q)),
                      (dv, DV, np.swapaxes(P, -1, -2) @ np.abs(DO))]:
        err = np.abs(g.numpy() - w)
        assert np.all(err <= 2 * u * mag + 1e-30), float(err.max())


def test_mixed_dtypes_are_refused():
    q, kt, v, do = _inputs((2,), 8, 8, 8, 8)
    with pytest.raises(InvalidArgumentError, match="q, kt and v must have one dtype"):
        ops.softmax_attention(q.astype("bfloat16"), kt, v)
    if HAS_BF16:
        q16, kt16, v16, do16 = _bf16((q, kt, v, do))
        p, _ = ops.softmax_attention(q16, kt16, v16)
        with pytest.raises(InvalidArgumentError, match="do must have q's dtype"):
            ops.softmax_attention_grad(q16, kt16, v16, p, do)


_THREADS_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
ops = dg.ops
rng = np.random.default_rng(9)
h = hashlib.sha256()
bf16 = any("bfloat16" in k["dtypes"] for k in dg._C.kernels("SoftmaxAttention"))
for dt in ("float32", "bfloat16") if bf16 else ("float32",):
    for b, hh, l, s, e in [(2, 3, 37, 29, 16), (1, 5, 64, 64, 32), (3, 2, 9, 130, 8)]:
        def t(*shape):
            x = dg.tensor(rng.standard_normal(shape).astype(np.float32))
            return x if dt == "float32" else x.astype("bfloat16")
        q, kt, v, do = t(b, hh, l, e), t(b, hh, e, s), t(b, hh, s, e), t(b, hh, l, e)
        p, o = ops.softmax_attention(q, kt, v, scale=0.3, has_scale=True)
        grads = ops.softmax_attention_grad(q, kt, v, p, do, scale=0.3, has_scale=True)
        for x in (p, o, *grads):
            h.update(np.ascontiguousarray(x.astype("float32").numpy()).tobytes())
print(h.hexdigest())
"""


def test_same_bits_for_any_thread_count():
    """Each thread takes a contiguous share of the items (the rows it wrote
    before; attention_fused.cc): the bits do not depend on the count, with
    items per thread uneven (3 threads over 6, 5 and 6 items). bfloat16
    where its kernels are registered, with the AVX512-BF16 GEMM first
    (DRAGON_CPU_EIGEN_BF16_GEMM=all: also where oneDNN runs AMX)."""
    from ._common import hashes_per_thread_count
    hashes = hashes_per_thread_count(_THREADS_SCRIPT, 300, {"DRAGON_CPU_EIGEN_BF16_GEMM": "all"})
    assert len(set(hashes.values())) == 1, hashes
