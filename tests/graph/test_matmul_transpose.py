"""The matmul_transpose pass (dragon_core/_graph/passes/matmul_transpose.py):
``Transpose(MatMul(a, b))`` over the last two axes becomes ``MatMul(b, a)``
with the transpose flags flipped and swapped. Every case checks whether the
pass fired, the values against float64 NumPy, and (where the product runs
on a kernel that sums over k in order) the bits of the graph without the
pass; the compiled bfloat16 encoder step likewise."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

from .fixtures import encoder_same_bits_without

from ops._common import bf16_gemm_marker  # tests/ is on sys.path (rootdir-relative packages)

ops = dg.ops


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def _both(f):
    return dg.function(f), dg.function(f, disable_passes=("matmul_transpose",))


def _types(fn, *args):
    return [op.type for op in fn.get_graph(*args).op]


def _swap(rank):
    return tuple(range(rank - 2)) + (rank - 1, rank - 2)


def _ref(a, b, ta, tb):
    a = np.asarray(a.astype("float64").numpy())
    b = np.asarray(b.astype("float64").numpy())
    la = np.swapaxes(a, -1, -2) if ta else a
    lb = np.swapaxes(b, -1, -2) if tb else b
    return la @ lb


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
@pytest.mark.parametrize("batch_a,batch_b", [((), ()), ((3,), (3,)), ((2, 3), (3,)),
                                             ((1,), (4,))])
def test_transposed_product_is_the_product_of_the_transposes(dtype, ta, tb, batch_a, batch_b):
    rng = np.random.default_rng(3)
    n, k, m = 7, 11, 5
    sa = batch_a + ((k, n) if ta else (n, k))
    sb = batch_b + ((m, k) if tb else (k, m))
    a = dg.tensor(rng.standard_normal(sa).astype(np.float32)).astype(dtype)
    b = dg.tensor(rng.standard_normal(sb).astype(np.float32)).astype(dtype)
    rank = max(len(sa), len(sb))

    def f(a, b):
        return ops.transpose(ops.matmul(a, b, transpose_a=ta, transpose_b=tb), _swap(rank))

    on, off = _both(f)
    graph = on.get_graph(a, b)
    assert [op.type for op in graph.op] == ["MatMul"]
    (mm,) = graph.op
    assert list(mm.input) == list(reversed(off.get_graph(a, b).op[0].input))
    assert mm.attr["transpose_a"].b == (not tb) and mm.attr["transpose_b"].b == (not ta)
    assert "Transpose" in _types(off, a, b)
    got, want = on(a, b), off(a, b)
    assert got.shape == want.shape and got.dtype == want.dtype
    ref = np.swapaxes(_ref(a, b, ta, tb), -1, -2)
    tol = 1e-5 if dtype == "float32" else 2.0 ** -7
    bound = tol * (np.abs(_ref(a.astype("float32").abs(), b.astype("float32").abs(), ta, tb)))
    err = np.abs(got.astype("float64").numpy() - ref)
    assert np.all(err <= np.swapaxes(bound, -1, -2) + 1e-30), float(err.max())


@bf16_gemm_marker()
@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_same_bits_on_the_avx512_bf16_gemm(ta, tb):
    """cpu_eigen's AVX512-BF16 GEMM (pinned) sums each output's products over
    k in order: the swapped product has the same bits (float32 and bfloat16
    outputs), as the attention backward's batches of products run there."""
    dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
    try:
        _check_same_bits(ta, tb)
    finally:
        dg.plugins.unpin("MatMul", "cpu")


def _check_same_bits(ta, tb):
    rng = np.random.default_rng(5)
    n, k, m = 37, 70, 45
    sa = (4,) + ((k, n) if ta else (n, k))
    sb = (4,) + ((m, k) if tb else (k, m))
    a = dg.tensor(rng.standard_normal(sa).astype(np.float32)).astype("bfloat16")
    b = dg.tensor(rng.standard_normal(sb).astype(np.float32)).astype("bfloat16")
    for out in (None, "float32"):
        def f(a, b):
            return ops.transpose(ops.matmul(a, b, transpose_a=ta, transpose_b=tb,
                                            out_dtype=out), (0, 2, 1))

        on, off = _both(f)
        assert "Transpose" not in _types(on, a, b)
        np.testing.assert_array_equal(_bits(on(a, b).numpy()), _bits(off(a, b).numpy()))


def test_left_alone_where_the_identity_or_the_layout_does_not_hold():
    rng = np.random.default_rng(9)
    a = dg.tensor(rng.standard_normal((3, 6, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((3, 4, 5)).astype(np.float32))
    v = dg.tensor(rng.standard_normal((4,)).astype(np.float32))

    cases = {
        # The product has another reader: it is needed as it is.
        "two_readers": lambda a, b: (ops.transpose(ops.matmul(a, b), (0, 2, 1)),
                                     ops.matmul(a, b) * 2.0),
        # The product is a graph output.
        "pinned": lambda a, b: (ops.matmul(a, b), ops.transpose(ops.matmul(a, b), (0, 2, 1))),
        # A perm that moves a leading axis.
        "leading": lambda a, b: ops.transpose(ops.matmul(a, b), (1, 0, 2)),
        "rotate": lambda a, b: ops.transpose(ops.matmul(a, b), (2, 0, 1)),
        # A 1-D operand: its promoted axis leaves the output.
        "vector": lambda a, b: ops.transpose(ops.matmul(a, v), (1, 0)),
        # Swapped and swapped back: a dense view of the product as it is.
        "swap_back": lambda a, b: ops.transpose(ops.transpose(ops.matmul(a, b), (0, 2, 1)),
                                                (0, 2, 1)) * 1.0,
    }
    for name, f in cases.items():
        on, off = _both(f)
        assert "Transpose" in _types(on, a, b), name
        assert _types(on, a, b) == _types(off, a, b), name
        got, want = on(a, b), off(a, b)
        got = got if isinstance(got, tuple) else (got,)
        want = want if isinstance(want, tuple) else (want,)
        for x, y in zip(got, want):
            np.testing.assert_array_equal(_bits(x.numpy()), _bits(y.numpy()), err_msg=name)


def test_a_transpose_without_perm_is_the_swap_for_rank_2():
    rng = np.random.default_rng(4)
    a = dg.tensor(rng.standard_normal((6, 4)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((4, 5)).astype(np.float32))

    def f(a, b):
        return ops.transpose(ops.matmul(a, b))

    on, off = _both(f)
    assert _types(on, a, b) == ["MatMul"] and "Transpose" in _types(off, a, b)
    np.testing.assert_allclose(on(a, b).numpy(), (a.numpy() @ b.numpy()).T, rtol=1e-5,
                               atol=1e-6)


def test_pure_pass_on_a_graphdef():
    """The pass leaves its argument as it was and returns it unchanged when
    there is nothing to do."""
    from dragon_core import proto as P
    from dragon_core._graph.passes.matmul_transpose import matmul_transpose

    rng = np.random.default_rng(1)
    a = dg.tensor(rng.standard_normal((5, 3)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((3, 4)).astype(np.float32))

    def f(a, b):
        return ops.transpose(ops.matmul(a, b), (1, 0))

    base = P.GraphDef()
    base.CopyFrom(dg.function(f, disable_passes=("matmul_transpose",)).get_graph(a, b))
    before = base.SerializeToString()
    out = matmul_transpose(base)
    assert base.SerializeToString() == before
    assert [op.type for op in out.op] == ["MatMul"]
    assert out.op[0].output[0] == base.op[-1].output[0]
    assert matmul_transpose(out) is out


@bf16_gemm_marker()
def test_bf16_encoder_step_key_gradient():
    """The bfloat16-autocast encoder step (bench/models/bert.py): the key
    gradient (q^T dS)^T becomes dS^T q, its double transpose and head-merge
    copy go (sum_cast reads the view), and three steps give bit for bit the
    losses and parameters of the graph without the pass (the step's bf16
    products pinned to the AVX512-BF16 GEMM, which sums over k in order;
    its small attention items would otherwise run on oneDNN)."""
    dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
    try:
        _check_key_gradient()
    finally:
        dg.plugins.unpin("MatMul", "cpu")


def _check_key_gradient():
    on, off, x, t = encoder_same_bits_without("matmul_transpose")
    t_on, t_off = _types(on, x, t), _types(off, x, t)
    assert t_on.count("Transpose") == t_off.count("Transpose") - 1
    assert t_on.count("Reshape") == t_off.count("Reshape") - 1
