"""SumCastGrad (dragon_core/src/ops/fused_reduce.cc, cpu_eigen
fused_reduce.cc): the float32 sum of a gradient over its leading axes and
its cast to bfloat16 / float16, in one pass.

The sum must be bit for bit the Sum kernel's on a dense copy (same split,
same accumulation order) and close to the float64 NumPy sum; the cast bit
for bit Cast's (and NumPy's rounding: nearest, ties to even). Dense,
transposed (the head merge the pass hands it), element-strided and empty
inputs, widths above and below one vector, the width-1 run and the wide
(two column blocks) and tall (row chunks) splits; the same bytes with 1 and
2 threads; errors name the op and the dtypes/shapes.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg

ops = dg.ops


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bits, nearest even, NaN to the quiet NaN of its sign."""
    u = np.ascontiguousarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    nan = ((u >> 16) & 0x8000) | 0x7FC0
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, nan, rounded).astype(np.uint16)


def _bits(a) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def _check(xt, shape, p, dtype="bfloat16", keepdims=False):
    """Runs SumCastGrad on tensor ``xt`` (maybe a view) read as ``shape``;
    checks it against Sum / Cast of the dense reshaped copy (bits) and
    against float64 NumPy."""
    dense = np.ascontiguousarray(xt.numpy()).reshape(shape)
    kw = {} if tuple(shape) == tuple(xt.shape) else {"shape": list(shape)}
    s, y = ops.sum_cast_grad(xt, dtype=dtype, num_leading=p, keepdims=keepdims, **kw)
    want_shape = tuple([1] * p if keepdims else []) + tuple(shape[p:])
    assert tuple(s.shape) == want_shape and str(s.dtype) == "float32"
    assert tuple(y.shape) == tuple(shape) and str(y.dtype) == dtype
    ref_sum = ops.sum(dg.tensor(dense), axis=tuple(range(p)), keepdims=keepdims)
    np.testing.assert_array_equal(_bits(s.numpy()), _bits(ref_sum.numpy()))
    f64 = dense.astype(np.float64).sum(axis=tuple(range(p)), keepdims=keepdims)
    mag = np.abs(dense.astype(np.float64)).sum(axis=tuple(range(p)), keepdims=keepdims)
    assert np.all(np.abs(s.numpy() - f64) <= 1e-6 * mag + 1e-30)
    if dtype == "bfloat16":
        np.testing.assert_array_equal(_bits(y.numpy()), _bf16_bits(dense))
    else:
        np.testing.assert_array_equal(_bits(y.numpy()), _bits(dense.astype(np.float16)))
    np.testing.assert_array_equal(_bits(y.numpy()),
                                  _bits(ops.cast(dg.tensor(dense), dtype).numpy()))
    return s, y


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("shape,p", [
    ((3, 5, 7), 1), ((3, 5, 7), 2), ((1, 9), 1), ((9, 1), 1), ((1030, 3), 1),
    ((4, 256), 1), ((8, 128, 256), 2), ((2048, 300), 1), ((3, 5000), 1),
    ((40000, 1), 1), ((5, 4, 3), 3), ((1, 1), 2), ((7,), 1),
])
@pytest.mark.parametrize("keepdims", [False, True])
def test_dense_matches_sum_and_cast(shape, p, dtype, keepdims):
    rng = np.random.default_rng(hash((shape, p)) % 2**32)
    x = rng.standard_normal(shape).astype(np.float32) * 3
    _check(dg.tensor(x), shape, p, dtype, keepdims)


def test_special_values_and_signed_zeros():
    x = np.array([[0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 3.0e38, 1.0, 2.0],
                  [-0.0, -0.0, 1.0, 1.0, 1.0, 1e-40, 1e-40, 3.0e38, np.float32(1 + 2**-8),
                   np.float32(1 + 3 * 2**-8)]] * 3, np.float32)
    s, y = ops.sum_cast_grad(dg.tensor(x), dtype="bfloat16", num_leading=1)
    ref = ops.sum(dg.tensor(x), axis=0)
    np.testing.assert_array_equal(_bits(s.numpy()), _bits(ref.numpy()))
    np.testing.assert_array_equal(_bits(y.numpy()), _bf16_bits(x))


@pytest.mark.parametrize("heads,seq,dim", [(4, 37, 16), (3, 64, 64), (2, 5, 4), (4, 128, 64)])
def test_head_merge_view_is_read_in_place(heads, seq, dim):
    """[B, H, S, D] transposed to [B, S, H, D] and read as [B, S, H*D] (the
    attention head merge): runs of D >= 8 are read where they are, shorter
    ones through a dense copy; same bits as Sum and Cast of the copy."""
    rng = np.random.default_rng(heads * seq)
    base = dg.tensor(rng.standard_normal((2, heads, seq, dim)).astype(np.float32))
    view = ops.transpose(base, (0, 2, 1, 3))
    _check(view, (2, seq, heads * dim), 2)
    _check(view, (2 * seq, heads * dim), 1, "float16")


def test_double_transpose_and_element_strided_views():
    rng = np.random.default_rng(3)
    a = dg.tensor(rng.standard_normal((2, 4, 24, 40)).astype(np.float32))
    v = ops.transpose(ops.transpose(a, (0, 1, 3, 2)), (0, 2, 1, 3))  # [2, 40, 4, 24]
    _check(v, (2, 40, 96), 2)
    t = ops.transpose(dg.tensor(rng.standard_normal((33, 70)).astype(np.float32)), (1, 0))
    _check(t, (70, 33), 1)
    # a split that straddles a dim of the view: read through a dense copy
    w = ops.transpose(dg.tensor(rng.standard_normal((6, 4, 16)).astype(np.float32)), (1, 0, 2))
    _check(w, (8, 48), 1)


@pytest.mark.parametrize("shape,p", [((0, 5), 1), ((5, 0), 1), ((0, 3, 4), 2), ((2, 0, 3), 1)])
def test_empty(shape, p):
    s, y = _check(dg.tensor(np.zeros(shape, np.float32)), shape, p)
    assert y.numpy().size == 0


def test_same_bytes_with_one_and_two_threads():
    code = (
        "import numpy as np, hashlib, dragon_core as dg\n"
        "rng = np.random.default_rng(0)\n"
        "out = []\n"
        "for shape, p in [((4096, 256), 1), ((70000, 1), 1), ((3, 9000), 1)]:\n"
        "    x = dg.tensor(rng.standard_normal(shape).astype(np.float32))\n"
        "    s, y = dg.ops.sum_cast_grad(x, dtype='bfloat16', num_leading=p)\n"
        "    out.append(s.numpy().tobytes() + np.asarray(y.numpy()).tobytes())\n"
        "b = dg.ops.transpose(dg.tensor(rng.standard_normal((8, 4, 128, 64))"
        ".astype(np.float32)), (0, 2, 1, 3))\n"
        "s, y = dg.ops.sum_cast_grad(b, dtype='bfloat16', num_leading=2, shape=[8, 128, 256])\n"
        "out.append(s.numpy().tobytes() + np.asarray(y.numpy()).tobytes())\n"
        "print(hashlib.sha256(b''.join(out)).hexdigest())\n")
    digests = set()
    for t in (1, 2):
        env = dict(os.environ, OMP_NUM_THREADS=str(t), DRAGON_NUM_THREADS=str(t))
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        digests.add(r.stdout.strip())
    assert len(digests) == 1


def test_bad_inputs_name_the_op():
    x = dg.tensor(np.ones((4, 6), np.float32))
    with pytest.raises(ValueError, match=r"SumCastGrad.*float64"):
        ops.sum_cast_grad(dg.tensor(np.ones((4, 6))), dtype="bfloat16", num_leading=1)
    with pytest.raises(ValueError, match=r"SumCastGrad.*dtype float32 is not supported"):
        ops.sum_cast_grad(x, dtype="float32", num_leading=1)
    with pytest.raises(ValueError, match=r"SumCastGrad.*num_leading 3 is out of range"):
        ops.sum_cast_grad(x, dtype="bfloat16", num_leading=3)
    with pytest.raises(ValueError, match=r"SumCastGrad.*shape \[5, 5\] has 25 elements"):
        ops.sum_cast_grad(x, dtype="bfloat16", num_leading=1, shape=[5, 5])


def test_kernel_is_explained():
    text = dg.plugins.explain("SumCastGrad", "cpu", "float32")
    assert "cpu_eigen" in text and "SumCastGradKernel" in text
