"""cpu_eigen's AVX512-BF16 GEMM, split-k products (issue 21, session 21):
a single product over at least 512 k pairs whose operands both run along k
down their stored rows (A stored transposed, B row-major: the weight
gradients dy^T x) is summed in two halves of the pairs, each in order,
C = epilogue(lo + hi) (SplitK in src/gemm/bf16_gemm.cc): on two threads
each thread packs and multiplies one half, the rows it wrote in the ops
before.

Checked in child processes with the kernel taking every call and 1, 2 and
3 threads (the halves are fixed by the shape, so the bits must not move):
float64 NumPy on the same bfloat16 values within the pair accumulation's
bound, odd k (an odd pair count: unequal halves, a zero high half in the
last pair), n off the 6-row tile, m off the 64-column tile, just below and
at the 512-pair threshold, every B layout (row-major: split; stored
transposed and strided: summed in order), the halves in each thread's own
scratch and, for a product over its 4 MiB cap, in the shared workspace, a
bias with relu and a bfloat16 output (the epilogue after the halves' sum),
MatMulBiasAdd with a residual against MatMul + Add + Add on the same
halves, and the transposed product B^T A bit for bit.
"""

from __future__ import annotations

import pytest

from ._common import bf16_gemm_hashes_per_thread_count, bf16_gemm_marker

needs_kernel = bf16_gemm_marker()

_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
ops = dg.ops
dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
U32, U16 = 2.0 ** -24, 2.0 ** -8
rng = np.random.default_rng(21)
h = hashlib.sha256()

def bf(*shape):
    return dg.tensor(rng.standard_normal(shape).astype(np.float32)).astype("bfloat16")

def check(y, ref, bound, out):
    got = y.astype("float64").numpy()
    tol = bound if out == "float32" else bound * (1 + U16) + U16 * np.abs(ref)
    err = np.abs(got - ref)
    assert got.shape == ref.shape and np.all(err <= tol), (ref.shape, out, float((err / tol).max()))
    h.update(np.ascontiguousarray(y.astype("float32").numpy()).tobytes())

# (k, n, m): A stored [k, n] (read transposed), B [k, m].
# (2048, 1024, 1024): a half's partial alone is 4 MiB, over the per-thread
# scratch's cap, so the halves use the shared workspace.
for k, n, m in [(1023, 40, 70), (1024, 256, 256), (1025, 37, 130), (2051, 96, 64),
                (4099, 33, 17), (1021, 64, 64), (2048, 1024, 1024)]:
    a, b = bf(k, n), bf(k, m)
    an, bn = a.astype("float64").numpy().T, b.astype("float64").numpy()
    ref = an @ bn
    bound = (k / 2 + 3) * U32 * (np.abs(an) @ np.abs(bn)) + 1e-30
    for layout in ("rows", "transposed", "strided"):
        if layout == "rows":
            bb = b
            y = {o: ops.matmul(a, bb, transpose_a=True, out_dtype=o) for o in ("float32", "bfloat16")}
        elif layout == "transposed":
            bt = bf(m, k)
            bn2 = bt.astype("float64").numpy().T
            ref2 = an @ bn2
            bound2 = (k / 2 + 3) * U32 * (np.abs(an) @ np.abs(bn2)) + 1e-30
            for o in ("float32", "bfloat16"):
                check(ops.matmul(a, bt, transpose_a=True, transpose_b=True, out_dtype=o), ref2, bound2, o)
            continue
        else:
            wide = bf(k, 2 * m)
            bs = wide[:, ::2]
            bn3 = wide.astype("float64").numpy()[:, ::2]
            ref3 = an @ bn3
            bound3 = (k / 2 + 3) * U32 * (np.abs(an) @ np.abs(bn3)) + 1e-30
            for o in ("float32", "bfloat16"):
                check(ops.matmul(a, bs, transpose_a=True, out_dtype=o), ref3, bound3, o)
            continue
        for o, t in y.items():
            check(t, ref, bound, o)
    # The rule is symmetric: (A^T B)^T = B^T A, the same halves of the same
    # products, bit for bit (what the matmul_transpose pass relies on).
    yt = ops.matmul(b, a, transpose_a=True, out_dtype="float32").numpy()
    y0 = ops.matmul(a, b, transpose_a=True, out_dtype="float32").numpy()
    assert np.array_equal(yt.T.view(np.uint32), y0.view(np.uint32)), (k, n, m)
    # The epilogue runs on the halves' sum: a bias with relu, both outputs.
    bias = dg.tensor(rng.standard_normal(m).astype(np.float32))
    y32 = ops.matmul_bias_act(a, b, bias, activation="relu", transpose_a=True, out_dtype="float32")
    y16 = ops.matmul_bias_act(a, b, bias.astype("bfloat16"), activation="relu",
                              transpose_a=True, out_dtype="bfloat16")
    plain = ops.matmul(a, b, transpose_a=True, out_dtype="float32").numpy()
    want = np.maximum(plain + bias.numpy(), 0)
    assert np.array_equal(y32.numpy(), want), "bias + relu after the halves' sum"
    h.update(y16.astype("float32").numpy().tobytes())
    # MatMulBiasAdd with a residual: bit for bit MatMul + Add + Add.
    res = dg.tensor(rng.standard_normal((n, m)).astype(np.float32))
    fused = ops.matmul_bias_add(a, b, bias, res, transpose_a=True, dtype=dg.float32)
    unfused = ops.add(ops.add(ops.matmul(a, b, transpose_a=True, out_dtype="float32"), bias), res)
    assert np.array_equal(fused.numpy().view(np.uint32), unfused.numpy().view(np.uint32))
    h.update(fused.numpy().tobytes())
print(h.hexdigest())
"""


@needs_kernel
def test_split_k_against_float64_and_same_bits_for_any_thread_count():
    hashes = bf16_gemm_hashes_per_thread_count(_SCRIPT, 600)
    assert len(set(hashes.values())) == 1, hashes
