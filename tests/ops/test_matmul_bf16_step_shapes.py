"""cpu_eigen's AVX512-BF16 GEMM on the bfloat16 encoder step's products
(issue 21, session bgemm): 1024 tokens, hidden 256, ffn 1024, every layout
the compiled step uses (x @ W^T, dy @ W, dy^T @ x), float32 outputs
(autocast's out_dtype) and bfloat16 ones, plus ragged neighbours of the
same products (rows, columns and k off the 6 x 64 tile and the k pairs,
strided operands).

The microkernel prefetches the C tile it is about to write (PREFETCHW,
spread over its first k pairs, src/gemm/bf16_gemm.cc): these products are
the ones it was measured on, with whole tiles, ragged last tiles (fewer
rows, columns or bytes per row than a 64-byte line), and an output whose
rows are not line-aligned. Checked in child processes with the kernel
pinned and 1, 2 and 3 threads: float64 NumPy on the same bfloat16 values
(the float32 pair accumulation errs by at most (k/2 + 2) 2**-24 sum |a b|
per output; a bfloat16 output adds one rounding, and is exactly the
float32 one rounded to nearest even), and the same bits for every thread
count. Which kernel serves these products by default is
test_matmul_bf16_avx512.py's test_measured_classes_route_as_documented.
"""

from __future__ import annotations


import pytest

from ._common import bf16_gemm_hashes_per_thread_count, bf16_gemm_marker

needs_kernel = bf16_gemm_marker()

_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
dg.plugins.pin("MatMul", "cpu", "MatMulBf16Avx512")
U32, U16 = 2.0 ** -24, 2.0 ** -8
rng = np.random.default_rng(21)
h = hashlib.sha256()

def rne(x32):
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)

def bf(shape):
    t = dg.tensor(rng.standard_normal(shape).astype(np.float32)).astype("bfloat16")
    return t, t.astype("float64").numpy()

# (stored A shape, stored B shape, transpose_a, transpose_b)
cases = [
    ((1024, 256), (1024, 256), False, True),     # MLP up: x @ W1^T, k = 256
    ((1024, 1024), (256, 1024), False, True),    # MLP down: h @ W2^T
    ((1024, 256), (256, 1024), False, False),    # dy @ W2, k = 256
    ((1024, 256), (1024, 1024), True, False),    # dW2 = dy^T @ h
    ((1024, 1024), (1024, 256), False, False),   # dh @ W1
    ((1024, 1024), (1024, 256), True, False),    # dW1 = dh^T @ x
    ((1024, 256), (256, 256), False, True),      # projections
    ((1024, 256), (1024, 256), True, False),     # projection weight gradient
    ((1000, 255), (1003, 255), False, True),     # ragged tiles, odd k
    ((301, 997), (301, 1030), True, False),      # ragged, odd k, transposed A
    ((999, 130), (130, 37), False, False),       # C rows of 148 bytes (not whole lines)
]
for sa, sb, ta, tb in cases:
    a, an = bf(sa)
    b, bn = bf(sb)
    la = an.T if ta else an
    lb = bn.T if tb else bn
    ref = la @ lb
    bound = (la.shape[1] / 2 + 2) * U32 * (np.abs(la) @ np.abs(lb)) + 1e-30
    y32 = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype="float32")
    got = y32.astype("float64").numpy()
    assert got.shape == ref.shape, (sa, sb, got.shape)
    err = np.abs(got - ref)
    assert np.all(err <= bound), (sa, sb, "float32", float((err / bound).max()))
    y16 = dg.ops.matmul(a, b, transpose_a=ta, transpose_b=tb)
    bits = np.asarray(y16.numpy()).view(np.uint16)
    assert np.array_equal(bits, rne(y32.numpy())), (sa, sb, "bfloat16 rounding")
    h.update(y32.numpy().tobytes())
    h.update(bits.tobytes())

# Strided operands: every other row of A and a column slice of B, and an
# output row that starts mid-line (m = 200 floats = 800 bytes).
a, an = bf((2048, 300))
b, bn = bf((300, 450))
av, avn = a[::2, 20:276], an[::2, 20:276]
bv, bvn = b[22:278, 50:250], bn[22:278, 50:250]
ref = avn @ bvn
bound = (256 / 2 + 2) * U32 * (np.abs(avn) @ np.abs(bvn)) + 1e-30
y = dg.ops.matmul(av, bv, out_dtype="float32")
err = np.abs(y.astype("float64").numpy() - ref)
assert np.all(err <= bound), ("strided", float((err / bound).max()))
h.update(y.numpy().tobytes())
print(h.hexdigest())
"""


@needs_kernel
def test_step_shapes_against_float64_and_same_bits_for_any_thread_count():
    hashes = bf16_gemm_hashes_per_thread_count(_SCRIPT, 600)
    assert len(set(hashes.values())) == 1, hashes
