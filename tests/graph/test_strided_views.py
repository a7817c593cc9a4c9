"""Transpose as a zero-copy strided view (the schema's ``strided_view`` flag).

Eager: ``Transpose`` returns a tensor sharing its input's storage with the
axes (shape and strides) permuted, for any input strides; writes through
either reach the other. Kernels that read strides (MatMul in cpu_eigen and
mkldnn, Contiguous, reductions) read the view in place; every other kernel
gets a dense copy from the dispatcher; a Reshape of such a view is one
copy. The attention pattern (head split/merge permutes feeding batched
MatMuls) is checked against float64 NumPy, forward and gradient (finite
differences), eager and compiled at O0/O2/O3.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "bool"]


def _make(a: np.ndarray, dtype: str):
    """A Dragon tensor of ``a`` in ``dtype`` (bfloat16 through float32)."""
    if dtype == "bfloat16":
        return dg.tensor(a.astype(np.float32)).to(None, dtype="bfloat16")
    return dg.tensor(a.astype(dtype))


def _f64(t) -> np.ndarray:
    """``t``'s values as float64 NumPy (bool as 0/1)."""
    if t.dtype == dg.bfloat16:
        return t.to(None, dtype="float64").numpy()
    return np.asarray(t.numpy()).astype(np.float64)


def test_transpose_is_a_strided_view_in_the_schema():
    d = dg._C.op("Transpose").describe()
    assert d["view"] is True and d["strided_view"] is True
    for name in ("Reshape", "Squeeze", "Unsqueeze", "Flatten"):
        assert dg._C.op(name).describe()["strided_view"] is False, name


PERM_CASES = [
    ((2, 3, 4, 5), [0, 2, 1, 3]),
    ((2, 3, 4, 5), [0, 1, 3, 2]),
    ((2, 3, 4, 5), [3, 1, 0, 2]),
    ((2, 3, 4, 5), None),
    ((3, 4), [1, 0]),
    ((5,), [0]),
    ((), []),
    ((), None),
    ((2, 0, 3), [2, 0, 1]),
    ((1, 4, 1, 3), [2, 3, 0, 1]),
    ((2, 3), [-1, -2]),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", range(len(PERM_CASES)))
def test_eager_transpose_values_and_shared_storage(case, dtype):
    shape, perm = PERM_CASES[case]
    a = np.random.default_rng(case).standard_normal(shape) * 4
    x = _make(a, dtype)
    y = ops.transpose(x, axes=perm)
    want = np.transpose(_f64(x), perm)
    assert tuple(y.shape) == want.shape and y.dtype == x.dtype
    np.testing.assert_array_equal(_f64(y), want)
    if x.size > 1 and dtype != "bfloat16":
        xn, yn = x.numpy(), y.numpy()
        assert np.shares_memory(xn, yn)              # zero copy
        yn[(0,) * yn.ndim] = 1 if dtype != "bool" else True
        assert xn[np.unravel_index(0, xn.shape)] == yn[(0,) * yn.ndim]


def test_writes_through_a_transposed_view_reach_the_source():
    x = dg.tensor(np.arange(24, dtype=np.float64).reshape(2, 3, 4))
    y = ops.transpose(x, axes=[2, 0, 1])             # shape (4, 2, 3)
    assert not y.is_contiguous()
    y.numpy()[3, 1, 2] = -7.0
    assert x.numpy()[1, 2, 3] == -7.0
    x.numpy()[0, 1, 2] = 42.0
    assert y.numpy()[2, 0, 1] == 42.0
    del x                                            # the view keeps the storage
    assert y.numpy()[3, 1, 2] == -7.0


def test_views_of_views_and_of_strided_inputs():
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    x = dg.from_numpy(base[:, ::2, 1:])              # a strided input: (3, 2, 4)
    y = ops.transpose(ops.transpose(x, axes=[1, 2, 0]), axes=[2, 0, 1])
    np.testing.assert_array_equal(y.numpy(), base[:, ::2, 1:])
    z = ops.transpose(x, axes=[2, 0, 1])
    np.testing.assert_array_equal(z.numpy(), np.transpose(base[:, ::2, 1:], (2, 0, 1)))
    assert np.shares_memory(z.numpy(), base)


def test_reshape_of_a_transposed_view_is_a_copy():
    x = dg.tensor(np.arange(24, dtype=np.float32).reshape(2, 3, 4))
    t = ops.transpose(x, axes=[0, 2, 1])
    r = ops.reshape(t, shape=[2, 12])
    np.testing.assert_array_equal(r.numpy(), np.arange(24).reshape(2, 3, 4)
                                  .transpose(0, 2, 1).reshape(2, 12))
    assert r.is_contiguous()
    r.numpy()[0, 0] = 100.0
    assert x.numpy()[0, 0, 0] == 0.0
    # A consumer with a dense-only kernel reads the right values.
    np.testing.assert_allclose(ops.exp(t).numpy(), np.exp(np.arange(24).reshape(2, 3, 4)
                                                         .transpose(0, 2, 1)), rtol=1e-6)


def test_transpose_errors_name_the_op():
    x = dg.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="Transpose"):
        ops.transpose(x, axes=[0, 0])
    with pytest.raises(ValueError, match="Transpose"):
        ops.transpose(x, axes=[0, 1, 2])
    with pytest.raises(ValueError, match="Transpose"):
        ops.transpose(x, axes=[0, 2])


# ------------------------------------------------------------ attention pattern

def _heads(t, b, s, h, d):
    return ops.transpose(ops.reshape(t, shape=[b, s, h, d]), axes=[0, 2, 1, 3])


def attention(x, wq, wk, wv, h):
    """The bench model's head split / scores / context / head merge."""
    b, s, hid = (int(v) for v in x.shape)
    d = hid // h
    q = _heads(ops.matmul(x, wq), b, s, h, d)
    k = _heads(ops.matmul(x, wk), b, s, h, d)
    v = _heads(ops.matmul(x, wv), b, s, h, d)
    scores = ops.matmul(q, ops.transpose(k, axes=[0, 1, 3, 2]))
    ctx = ops.matmul(ops.softmax(scores, axis=-1), v)
    return ops.reshape(ops.transpose(ctx, axes=[0, 2, 1, 3]), shape=[b, s, hid])


def attention_np(x, wq, wk, wv, h):
    b, s, hid = x.shape
    d = hid // h

    def heads(t):
        return t.reshape(b, s, h, d).transpose(0, 2, 1, 3)

    q, k, v = heads(x @ wq), heads(x @ wk), heads(x @ wv)
    sc = q @ k.transpose(0, 1, 3, 2)
    p = np.exp(sc - sc.max(-1, keepdims=True, initial=-np.inf))
    p /= p.sum(-1, keepdims=True)
    return (p @ v).transpose(0, 2, 1, 3).reshape(b, s, hid)


def _attn_inputs(b=2, s=5, hid=8, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((b, s, hid)) * 0.5] + \
        [rng.standard_normal((hid, hid)) * 0.4 for _ in range(3)]


@pytest.mark.parametrize("dtype,rtol", [("float32", 2e-5), ("float64", 1e-12)])
@pytest.mark.parametrize("shape", [(2, 5, 8), (1, 1, 4), (3, 4, 8), (0, 5, 8), (2, 0, 8)])
def test_attention_forward_matches_numpy(shape, dtype, rtol):
    b, s, hid = shape
    arrs = _attn_inputs(b, s, hid)
    got = attention(*[dg.tensor(a.astype(dtype)) for a in arrs], h=2).numpy()
    want = attention_np(*arrs, h=2)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)


@pytest.mark.parametrize("dtype,rtol", [("float32", 1e-5), ("float64", 1e-12),
                                        ("float16", 2e-3), ("bfloat16", 1.6e-2),
                                        ("int32", 0)])
@pytest.mark.parametrize("perm_a,perm_b", [([0, 2, 1, 3], [0, 2, 3, 1]),
                                           ([0, 2, 1, 3], [0, 2, 1, 3]),
                                           ([2, 0, 1, 3], [2, 0, 3, 1]),
                                           ([0, 1, 2, 3], [0, 1, 3, 2])])
def test_matmul_on_permuted_operands_every_dtype(perm_a, perm_b, dtype, rtol):
    rng = np.random.default_rng(3)
    # b's stored shape, so that its permutation is (..., 4, n) like a's (..., m, 4).
    b_shape = {(0, 2, 3, 1): (2, 6, 3, 4), (2, 0, 3, 1): (2, 6, 3, 4),
               (0, 2, 1, 3): (2, 4, 3, 7), (0, 1, 3, 2): (2, 5, 6, 4)}[tuple(perm_b)]
    a = rng.integers(-3, 4, (2, 5, 3, 4)).astype(np.float64)
    b = rng.integers(-3, 4, b_shape).astype(np.float64)
    if dtype != "int32":
        a = a + rng.standard_normal(a.shape) * 0.25
        b = b + rng.standard_normal(b.shape) * 0.25
    ta, tb = _make(a, dtype), _make(b, dtype)
    va, vb = ops.transpose(ta, axes=perm_a), ops.transpose(tb, axes=perm_b)
    got = _f64(ops.matmul(va, vb))
    want = _f64(va) @ _f64(vb)                       # the operands as Dragon holds them
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * np.abs(want).max())
    # transpose_a / transpose_b on top of a strided view.
    got_t = _f64(ops.matmul(va, ops.transpose(vb, axes=[0, 1, 3, 2]), transpose_b=True))
    np.testing.assert_allclose(got_t, want, rtol=rtol, atol=rtol * np.abs(want).max())


def _fd_grad(f, arrs, i, eps=1e-6):
    g = np.zeros_like(arrs[i])
    for idx in np.ndindex(arrs[i].shape):
        hi = [a.copy() for a in arrs]
        lo = [a.copy() for a in arrs]
        hi[i][idx] += eps
        lo[i][idx] -= eps
        g[idx] = (f(*hi) - f(*lo)) / (2 * eps)
    return g


def _loss_np(target):
    return lambda *a: float(np.sum(attention_np(*a, h=2) * target))


def test_attention_gradient_eager_finite_differences():
    arrs = _attn_inputs(2, 3, 4)
    target = np.random.default_rng(9).standard_normal((2, 3, 4))
    ts = [dg.tensor(a) for a in arrs]
    with dg.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        loss = ops.sum(ops.mul(attention(*ts, h=2), dg.tensor(target)))
    grads = tape.gradient(loss, ts)
    for i, g in enumerate(grads):
        np.testing.assert_allclose(g.numpy(), _fd_grad(_loss_np(target), arrs, i),
                                   rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("level", [0, 2, 3])
def test_attention_compiled_forward_and_gradient(level):
    arrs = _attn_inputs(2, 3, 4, seed=4)
    target = np.random.default_rng(5).standard_normal((2, 3, 4))

    @dg.function(opt_level=level)
    def step(x, wq, wk, wv, tgt):
        with dg.GradientTape() as tape:
            for t in (x, wq, wk, wv):
                tape.watch(t)
            out = attention(x, wq, wk, wv, h=2)
            loss = ops.sum(ops.mul(out, tgt))
        return [out] + list(tape.gradient(loss, [x, wq, wk, wv]))

    for _ in range(2):                                # planned buffers reused
        got = step(*[dg.tensor(a) for a in arrs], dg.tensor(target))
        np.testing.assert_allclose(got[0].numpy(), attention_np(*arrs, h=2), rtol=1e-12)
        for i in range(4):
            np.testing.assert_allclose(got[1 + i].numpy(),
                                       _fd_grad(_loss_np(target), arrs, i),
                                       rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("level", [0, 2, 3])
def test_compiled_inplace_never_overwrites_a_strided_view(level):
    """An in-place candidate whose dead input is a transposed view: the
    executor writes a fresh dense output instead (a kernel reading the
    view's strides while writing the same bytes would read what it wrote)."""
    a = np.random.default_rng(6).standard_normal((3, 4, 5)).astype(np.float32)

    @dg.function(opt_level=level)
    def f(x):
        h = ops.exp(x)
        t = ops.transpose(h, axes=[2, 0, 1])         # h dies here
        s = ops.sum(ops.neg(t), axis=2, keepdims=True)
        return ops.relu(ops.add(t, s)), ops.matmul(t, ops.transpose(t, axes=[0, 2, 1]))

    for _ in range(3):
        y, m = f(dg.tensor(a))
        t = np.exp(a.astype(np.float64)).transpose(2, 0, 1)
        np.testing.assert_allclose(y.numpy(), np.maximum(t - t.sum(2, keepdims=True), 0),
                                   rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(m.numpy(), t @ t.transpose(0, 2, 1), rtol=1e-5)


@pytest.mark.parametrize("level", [0, 2, 3])
def test_compiled_transpose_is_a_view_of_its_input(level):
    """In a compiled graph the executor aliases too: a returned Transpose
    shares the bytes of the returned tensor it permutes."""
    a = np.random.default_rng(8).standard_normal((2, 3, 4)).astype(np.float32)

    @dg.function(opt_level=level)
    def f(x):
        h = ops.exp(x)
        return h, ops.transpose(h, axes=[0, 2, 1])

    h, t = f(dg.tensor(a))
    np.testing.assert_allclose(t.numpy(), np.exp(a).transpose(0, 2, 1), rtol=1e-6)
    assert not t.is_contiguous()
    assert np.shares_memory(h.numpy(), t.numpy())


def test_compiled_attention_census():
    """The compiled attention forward keeps its five Transposes as ops (views
    now) and matches NumPy at the bench's head layout; with attention_fusion
    (where it has a kernel and the 2 x 4 heads are enough items for the
    threads) the two products and the softmax become one SoftmaxAttention
    that writes the merged heads, so one Transpose goes too."""
    arrs = _attn_inputs(2, 16, 32, seed=7)

    def f(x, wq, wk, wv):
        return attention(x, wq, wk, wv, h=4)

    args = [dg.tensor(a.astype(np.float32)) for a in arrs]
    unfused = dg.function(f, opt_level=3, disable_passes=("attention_fusion",))
    prof = unfused.profile(*args, runs=2, warmup=1)
    types = {t: n for t, n, _ in prof.by_type()}
    assert types.get("Transpose") == 5 and types.get("MatMul") == 5
    fused = dg.function(f, opt_level=3)
    types = {t: n for t, n, _ in fused.profile(*args, runs=2, warmup=1).by_type()}
    fires = (bool(dg._C.kernels("SoftmaxAttention")) and
             any(k["device"] == "cpu" for k in dg._C.kernels("SoftmaxAttention"))
             and dg._C.NUM_THREADS <= 8)
    if fires:
        assert types.get("Transpose") == 4 and types.get("MatMul") == 3
        assert types.get("SoftmaxAttention") == 1 and "Softmax" not in types
    for fn in (unfused, fused):
        np.testing.assert_allclose(fn(*args).numpy(), attention_np(*arrs, h=4), rtol=2e-5,
                                   atol=2e-5)


def test_torch_inplace_on_a_transposed_view_reaches_the_base():
    torch = pytest.importorskip("dragon_core.vm.torch")
    a = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    b = a.t()
    b.add_(10)
    np.testing.assert_array_equal(a.numpy(), np.arange(6).reshape(2, 3) + 10)
    np.testing.assert_array_equal(b.numpy(), (np.arange(6).reshape(2, 3) + 10).T)


# ---------------------------------------------------------------- graph passes

def test_inplace_pass_never_writes_over_a_strided_view():
    """A dead Transpose output is no in-place candidate (a strided kernel,
    e.g. cuda's element-wise ones, would read what it overwrote); a Reshape
    of the same tensor still is."""
    from dragon_core._graph.passes.inplace import inplace

    from .fixtures import graph
    from .test_passes import annotations

    x = [("x", "float32", (2, 3))]
    g = graph(inputs=x,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Transpose", ["a"], ["t"], {"perm": [1, 0]}),
                   ("Relu", ["t"], ["b"], {}),
                   ("Neg", ["b"], ["c"], {})],
              outputs=["c"])
    assert annotations(inplace(g)) == {"Neg_3": 0}
    g2 = graph(inputs=x,
               ops=[("Exp", ["x"], ["a"], {}),
                    ("Reshape", ["a"], ["r"], {"shape": [3, 2]}),
                    ("Relu", ["r"], ["b"], {}),
                    ("Neg", ["b"], ["c"], {})],
               outputs=["c"])
    assert annotations(inplace(g2)) == {"Relu_2": 0, "Neg_3": 0}


@pytest.mark.parametrize("level", [2, 3])
def test_compiled_elementwise_over_a_dead_transposed_view(level):
    """Relu of a dead transposed view, compiled with the in-place and memory
    passes: the values are the transposed ones (no write over the source
    while it is read)."""
    a = np.random.default_rng(10).standard_normal((4, 6)).astype(np.float32)

    @dg.function(opt_level=level)
    def f(x):
        return ops.neg(ops.relu(ops.transpose(ops.exp(x), axes=[1, 0])))

    for _ in range(3):
        np.testing.assert_allclose(f(dg.tensor(a)).numpy(), -np.exp(a).T, rtol=1e-6)
