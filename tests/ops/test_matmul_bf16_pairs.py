"""cpu_eigen's AVX512-BF16 GEMM with a transposed-stored A (issue 21, session
attn): such an A (attention's p^T dO and dS^T q, weight gradients dy^T x)
is packed as k-pair rows of all n rows (PackPairs in src/gemm/bf16_gemm.cc)
instead of 6-row panels. Checked in child processes with
DRAGON_CPU_EIGEN_BF16_GEMM=all (single products too) and 1, 2 and 3
threads, against float64 NumPy on the same bfloat16 values (the float32 pair
accumulation errs by at most (k/2 + 2) 2**-24 sum |a b| per output, a
bfloat16 output adds one rounding), with the same bits for every thread
count: n not a multiple of the 6-row tile (the last panel reads past n
inside the buffer), odd k, k beyond one 2048-element chunk, batched and
single products, a product split over threads (its pairs packed in
parallel), bfloat16 and float32 outputs.
"""

from __future__ import annotations


import pytest

from ._common import bf16_gemm_hashes_per_thread_count, bf16_gemm_marker

needs_kernel = bf16_gemm_marker()

_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
U32, U16 = 2.0 ** -24, 2.0 ** -8
rng = np.random.default_rng(11)
h = hashlib.sha256()
cases = [((32, 64, 128), (32, 64, 128)),    # batched p^T dO-like: A [k, n] stored
         ((4, 128, 131), (4, 128, 40)),     # ragged last panel (131 = 21 * 6 + 5)
         ((3, 63, 37), (3, 63, 70)),        # odd k, n = 37
         ((2, 3, 32), (2, 3, 65)),          # short k, n at the 32 edge
         ((2, 4100, 50), (2, 4100, 30)),    # k over two 2048-element chunks
         ((256, 256), (256, 300)),          # single product, split over threads
         ((1025, 96), (1025, 64))]          # single, odd k over 1024
for sa, sb in cases:
    a = dg.tensor(rng.standard_normal(sa).astype(np.float32)).astype("bfloat16")
    b = dg.tensor(rng.standard_normal(sb).astype(np.float32)).astype("bfloat16")
    an, bn = a.astype("float64").numpy(), b.astype("float64").numpy()
    la = np.swapaxes(an, -1, -2)
    ref = np.matmul(la, bn)
    k = la.shape[-1]
    bound = (k / 2 + 2) * U32 * np.matmul(np.abs(la), np.abs(bn)) + 1e-30
    for out in ("float32", "bfloat16"):
        y = dg.ops.matmul(a, b, transpose_a=True, out_dtype=out)
        got = y.astype("float64").numpy()
        tol = bound if out == "float32" else bound * (1 + U16) + U16 * np.abs(ref)
        assert got.shape == ref.shape, (got.shape, ref.shape)
        err = np.abs(got - ref)
        assert np.all(err <= tol), (sa, sb, out, float((err / tol).max()))
        h.update(y.astype("float32").numpy().tobytes())
print(h.hexdigest())
"""


@needs_kernel
def test_transposed_a_pairs_all_threads():
    hashes = bf16_gemm_hashes_per_thread_count(_SCRIPT, 300)
    assert len(set(hashes.values())) == 1, hashes
