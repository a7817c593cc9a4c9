"""The attention_fusion pass (dragon_core/_graph/passes/attention_fusion.py):
``MatMul -> [Mul(scale)] -> Softmax -> MatMul`` and its backward become
SoftmaxAttention / SoftmaxAttentionGrad, the head-merge Transposes of their
outputs folded in. Every case checks whether the pass fired and the values
against the graph without the pass (bit for bit: the fused kernel runs the
same products and softmax rows) and float64 NumPy; the compiled float32
encoder step likewise. Where the pass must not fire, the graph keeps its
ops."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg

from .fixtures import encoder_same_bits_without, encoder_step

ops = dg.ops

HAS_KERNEL = "float32" in "".join(k["dtypes"] for k in dg._C.kernels("SoftmaxAttention")
                                  if k["device"] == "cpu")
needs_kernel = pytest.mark.skipif(
    not HAS_KERNEL, reason="SoftmaxAttention has a kernel only on x86-64-v4 (AVX-512) CPUs "
                           "(test_not_registered_below_avx512 covers the others)")

FUSED = {"SoftmaxAttention", "SoftmaxAttentionGrad"}
#: Heads per test batch: B = 2 sequences of H heads make at least as many
#: items as the threads, which the pass requires.
HEADS = max(2, dg._C.NUM_THREADS)


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def _types(fn, *args):
    return [op.type for op in fn.get_graph(*args).op]


def _qkv(B=2, H=HEADS, L=24, S=24, E=16, Ev=16, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [dg.tensor(rng.standard_normal(s).astype(dtype))
            for s in [(B, H, L, E), (B, H, S, E), (B, H, S, Ev), (B, H, L, Ev)]]


def _softmax(s):
    e = np.exp(s - s.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _attention(scale=0.25, scale_first=False, merge=True):
    """loss = sum(merge(attention(q, k, v)) * w) and its gradients."""
    def f(q, k, v, w):
        with dg.GradientTape() as tape:
            tape.watch([q, k, v])
            s = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
            if scale is not None:
                c = dg.tensor(np.float32(scale))
                s = ops.mul(c, s) if scale_first else ops.mul(s, c)
            o = ops.matmul(ops.softmax(s, -1), v)
            if merge:
                o = ops.transpose(o, (0, 2, 1, 3))
                w = ops.transpose(w, (0, 2, 1, 3))
            loss = ops.sum(o * w)
        return (o,) + tuple(tape.gradient(loss, [q, k, v]))
    return f


def _ref(q, k, v, w, scale):
    Q, K, V, W = (np.asarray(t.numpy(), np.float64) for t in (q, k, v, w))
    sc = 1.0 if scale is None else scale
    P = _softmax(Q @ np.swapaxes(K, -1, -2) * sc)
    O = P @ V
    dP = W @ np.swapaxes(V, -1, -2)
    dS = P * (dP - (dP * P).sum(-1, keepdims=True)) * sc
    return O, dS @ K, np.swapaxes(dS, -1, -2) @ Q, np.swapaxes(P, -1, -2) @ W


def _check(f, args, fused, scale=0.25, merge=True):
    on, off = dg.function(f), dg.function(f, disable_passes=("attention_fusion",))
    types = _types(on, *args)
    assert (FUSED <= set(types)) == fused, types
    assert not FUSED & set(_types(off, *args))
    got, want = on(*args), off(*args)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g.numpy()), _bits(w.numpy()))
    ref = _ref(*args, scale)
    if merge:
        ref = (np.swapaxes(ref[0], 1, 2),) + ref[1:]
    for g, r in zip(got, ref):
        np.testing.assert_allclose(g.numpy(), r, rtol=2e-4, atol=2e-5)
    return types


@needs_kernel
@pytest.mark.parametrize("scale,scale_first", [(0.25, False), (0.25, True), (None, False),
                                               (1.3, False)])
@pytest.mark.parametrize("merge", [True, False])
def test_forward_and_backward_fuse(scale, scale_first, merge):
    args = _qkv()
    types = _check(_attention(scale, scale_first, merge), args, True, scale, merge)
    for t in ("Softmax", "SoftmaxGrad", "MatMul"):
        assert t not in types, types
    # The head merge of o is folded in: the op writes [B, L, H, Ev].
    graph = dg.function(_attention(scale, scale_first, merge)).get_graph(*args)
    fwd = next(op for op in graph.op if op.type == "SoftmaxAttention")
    assert fwd.attr["o_heads_last"].b == merge


@needs_kernel
def test_graph_attrs():
    f = _attention(0.125)
    graph = dg.function(f).get_graph(*_qkv())
    fwd = next(op for op in graph.op if op.type == "SoftmaxAttention")
    bwd = next(op for op in graph.op if op.type == "SoftmaxAttentionGrad")
    assert fwd.attr["scale"].f == 0.125 and fwd.attr["has_scale"].b
    assert fwd.attr["o_heads_last"].b
    assert list(bwd.input[:3]) == list(fwd.input) and bwd.input[3] == fwd.output[0]
    # dq, dk and dv leave as the gradients of q, k and v: no head merge.
    assert bwd.attr["scale"].f == 0.125 and bwd.attr["has_scale"].b
    assert not any(bwd.attr[k].b for k in ("dq_heads_last", "dk_heads_last", "dv_heads_last"))
    # The scale constant the two Muls read is gone with them.
    assert not [c for c in graph.constant if c.name.startswith("const")], list(graph.constant)


@needs_kernel
def test_odd_sizes_and_item_shapes():
    args = _qkv(B=1, H=2 * HEADS, L=9, S=37, E=8, Ev=24, seed=2)
    _check(_attention(0.5), args, True, 0.5)


@needs_kernel
def test_inference_forward_only():
    q, k, v, _ = _qkv(seed=4)

    def f(q, k, v):
        s = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * 0.25
        return ops.matmul(ops.softmax(s, -1), v)
    on, off = dg.function(f), dg.function(f, disable_passes=("attention_fusion",))
    types = _types(on, q, k, v)
    assert "SoftmaxAttention" in types and "Softmax" not in types, types
    np.testing.assert_array_equal(_bits(on(q, k, v).numpy()), _bits(off(q, k, v).numpy()))


@pytest.mark.parametrize("case", ["sides_out_of_class", "float64", "scores_returned",
                                  "probs_other_axis", "scale_not_constant",
                                  "transposed_product", "fewer_items_than_threads",
                                  "rank_2"])
def test_does_not_fire(case):
    q, k, v, w = _qkv(seed=6)
    kt_perm = (0, 1, 3, 2)

    def f(q, k, v, w):
        s = ops.matmul(q, ops.transpose(k, kt_perm))
        if case == "transposed_product":
            s = ops.matmul(q, k, transpose_b=True)
        if case == "scale_not_constant":
            s = s * ops.mean(w)
        else:
            s = s * 0.25
        p = ops.softmax(s, 2 if case == "probs_other_axis" else -1)
        o = ops.matmul(p, v)
        return (o, s) if case == "scores_returned" else o
    if case == "sides_out_of_class":
        q, k, v, w = _qkv(L=4, S=300, seed=6)
    if case == "float64":
        q, k, v, w = _qkv(seed=6, dtype=np.float64)
    if case == "fewer_items_than_threads":
        q, k, v, w = _qkv(B=1, H=1, seed=6)
    if case == "rank_2":
        kt_perm = (1, 0)
        q, k, v, w = (ops.reshape(t, t.shape[2:]) for t in _qkv(B=1, H=1, seed=6))
    on = dg.function(f)
    types = _types(on, q, k, v, w)
    assert not FUSED & set(types), types
    assert "Softmax" in types


@needs_kernel
def test_probabilities_returned_and_two_blocks_sharing_operands():
    """p as a graph output is still written (under its name); two attention
    blocks reading the same tensors in other roles fuse one by one. (Blocks
    that share one key transpose sum its gradient before transposing it:
    that backward keeps its ops, the pass takes only the dS^T q form.)"""
    q, k, v, w = _qkv(seed=8)

    def f(q, k, v, w):
        with dg.GradientTape() as tape:
            tape.watch([q, k, v])
            p1 = ops.softmax(ops.matmul(q, ops.transpose(k, (0, 1, 3, 2))) * 0.25, -1)
            # The same tensors in other roles: v queries, q keys, k values.
            p2 = ops.softmax(ops.matmul(v, ops.transpose(q, (0, 1, 3, 2))) * 0.5, -1)
            loss = ops.sum(ops.matmul(p1, v) * w) + ops.sum(ops.matmul(p2, k) * w)
        return (p1, loss) + tuple(tape.gradient(loss, [q, k, v]))
    on, off = dg.function(f), dg.function(f, disable_passes=("attention_fusion",))
    types = _types(on, q, k, v, w)
    assert types.count("SoftmaxAttention") == 2 and types.count("SoftmaxAttentionGrad") == 2
    assert "Softmax" not in types
    for g, r in zip(on(q, k, v, w), off(q, k, v, w)):
        np.testing.assert_array_equal(_bits(g.numpy()), _bits(r.numpy()))
    Q, K = (np.asarray(t.numpy(), np.float64) for t in (q, k))
    np.testing.assert_allclose(on(q, k, v, w)[0].numpy(),
                               _softmax(Q @ np.swapaxes(K, -1, -2) * 0.25), rtol=1e-5, atol=1e-7)


@needs_kernel
def test_encoder_float32_same_bits():
    """Three Adam steps of the float32 encoder layer, with and without the
    pass: same losses and parameters, bit for bit; the fused graph has no
    Softmax, SoftmaxGrad or head-merge copy left."""
    on, off, x, t = encoder_same_bits_without("attention_fusion", autocast=False)
    types = _types(on, x, t)
    if dg._C.NUM_THREADS > 8:      # 2 sequences x 4 heads: too few items to fuse
        assert not FUSED & set(types)
        return
    assert types.count("SoftmaxAttention") == 1 and types.count("SoftmaxAttentionGrad") == 1
    assert "Softmax" not in types and "SoftmaxGrad" not in types
    assert types.count("MatMul") == _types(off, x, t).count("MatMul") - 6
    assert types.count("Transpose") == _types(off, x, t).count("Transpose") - 4


def test_not_registered_below_avx512():
    """Capped at x86-64-v3 the kernels are not registered and the pass
    leaves the encoder's attention as MatMul and Softmax ops."""
    code = (
        "import sys\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.dirname(__file__))!r})\n"
        "from graph.fixtures import encoder_step\n"
        "import numpy as np, dragon_core as dg\n"
        "_, step = encoder_step(autocast=False)\n"
        "x = dg.tensor(np.ones((2, 24, 64), np.float32))\n"
        "types = [op.type for op in dg.function(step).get_graph(x, x).op]\n"
        "print('Softmax' in types, 'SoftmaxAttention' in types)\n")
    env = dict(os.environ, DRAGON_CPU_EIGEN_ISA="v3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "False"], out.stdout


@needs_kernel
@pytest.mark.parametrize("seed", range(12))
def test_random_blocks_same_bits(seed):
    """Random sides (in and out of the class), scales, head merges, which
    gradients are asked for, and forward-only calls: the compiled graph
    with the pass gives the bits of the graph without it."""
    rng = np.random.default_rng(100 + seed)
    B = int(rng.integers(1, 3))
    H = HEADS * int(rng.integers(1, 3))
    L, S, E, Ev = (int(rng.choice([4, 8, 9, 16, 23, 40])) for _ in range(4))
    scale = [None, 0.125, float(rng.uniform(0.1, 2.0))][int(rng.integers(0, 3))]
    merge = bool(rng.integers(0, 2))
    wanted = [i for i in range(3) if rng.random() < 0.7]
    train = bool(rng.integers(0, 4))
    q, k, v, w = _qkv(B, H, L, S, E, Ev, seed=seed)

    def f(q, k, v, w):
        def block():
            s = ops.matmul(q, ops.transpose(k, (0, 1, 3, 2)))
            if scale is not None:
                s = s * np.float32(scale)
            o = ops.matmul(ops.softmax(s, -1), v)
            return ops.transpose(o, (0, 2, 1, 3)) if merge else o
        if not train or not wanted:
            return (block(),)
        with dg.GradientTape() as tape:
            tape.watch([q, k, v])
            o = block()
            loss = ops.sum(o * (ops.transpose(w, (0, 2, 1, 3)) if merge else w))
        return (o,) + tuple(tape.gradient(loss, [[q, k, v][i] for i in wanted]))
    on, off = dg.function(f), dg.function(f, disable_passes=("attention_fusion",))
    types = _types(on, q, k, v, w)
    in_class = all(8 <= d <= 256 for d in (L, S, E, Ev))
    assert ("SoftmaxAttention" in types) == in_class, (types, L, S, E, Ev)
    for g, r in zip(on(q, k, v, w), off(q, k, v, w)):
        np.testing.assert_array_equal(_bits(g.numpy()), _bits(r.numpy()))
    O = _ref(q, k, v, w, scale)[0]
    got = on(q, k, v, w)[0].numpy()
    np.testing.assert_allclose(np.swapaxes(got, 1, 2) if merge else got, O, rtol=2e-4,
                               atol=2e-5)


HAS_BF16 = "bfloat16" in "".join(k["dtypes"] for k in dg._C.kernels("SoftmaxAttention")
                                 if k["device"] == "cpu")


@pytest.mark.skipif(not HAS_BF16, reason="the bfloat16 kernels need the AVX512-BF16 GEMM")
def test_encoder_bfloat16_autocast_same_bits():
    """The bfloat16 autocast encoder step (the products in bfloat16, softmax
    in float32, p and ds cast to bfloat16): fused with the Casts, same bits
    over three Adam steps. The fixture's heads (24 x 24 x 16) are below
    the bfloat16 class (64^3 multiply-adds an item), so a wider layer
    checks the fused graph too."""
    on, off, x, t = encoder_same_bits_without("attention_fusion", autocast=True)
    assert not FUSED & set(_types(on, x, t))       # items of 24 x 24 x 16: too small
    rng = np.random.default_rng(3)
    B, T, hidden = 2, 64, 64 * HEADS
    xs = dg.tensor(rng.standard_normal((B, T, hidden)).astype(np.float32))
    ts = dg.tensor(rng.standard_normal((B, T, hidden)).astype(np.float32))
    results = []
    for disable in ((), ("attention_fusion",)):
        model, step = encoder_step(hidden, HEADS, seed=1, autocast=True)
        fn = dg.function(step, disable_passes=disable)
        types = _types(fn, xs, ts)
        losses = [_bits(fn(xs, ts).numpy()) for _ in range(3)]
        results.append((types, losses, [_bits(p.numpy()) for p in model.parameters()]))
    (types, l_on, p_on), (types_off, l_off, p_off) = results
    assert types.count("SoftmaxAttention") == 1 and types.count("SoftmaxAttentionGrad") == 1
    assert "Softmax" not in types and types.count("Cast") == types_off.count("Cast") - 2
    for a, b in zip(l_on + p_on, l_off + p_off):
        np.testing.assert_array_equal(a, b)
