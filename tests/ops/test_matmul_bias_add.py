"""MatMulBiasAdd (dragon_core/src/ops/matmul_bias_add.cc, the op of the
linear_epilogue graph pass; kernel in plugins/cpu_eigen/src/matmul_bf16.cc
on the AVX512-BF16 GEMM): against float64 NumPy, and bit for bit against
the ops it replaces (MatMul(out_dtype=float32) -> [Reshape] -> Add(bias) ->
[Add(residual)] -> [Cast]) on odd sizes and tile tails, transposed and
strided operands, a strided residual, an empty inner axis, empty outputs,
and the rounding cases where vcvtneps2bf16 and the Cast kernel differ
(denormals, NaN payloads); errors.

cpu_eigen's kernel is registered only where the bfloat16 GEMM runs
(AVX512-BF16), ranked below mkldnn's (plugins/mkldnn/src/matmul.cc: the
product on oneDNN into float32 scratch, then one bias / residual / Cast
pass) where oneDNN runs AMX tiles; each test runs on the default kernel and
again pinned to oneDNN's. Without either kernel these tests skip, and
tests/graph/test_linear_epilogue.py shows the pass leaves graphs alone
there."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

ops = dg.ops

pytestmark = pytest.mark.skipif(
    not any(k["device"] == "cpu" and "bfloat16" in k["dtypes"]
            for k in dg._C.kernels("MatMulBiasAdd")),
    reason="MatMulBiasAdd has no bfloat16 kernel (cpu_eigen's AVX512-BF16 GEMM, mkldnn)")


_KERNELS = {k["name"] for k in dg._C.kernels("MatMulBiasAdd") if k["device"] == "cpu"}


@pytest.fixture(autouse=True, params=["default"] + (
    ["MatMulBiasAddOneDNN"] if "MatMulBiasAddOneDNN" in _KERNELS else []))
def kernel(request):
    """Every test on the default kernel, and again on mkldnn's oneDNN kernel
    with MatMul pinned to oneDNN too (so the unfused chain runs the same
    product): cpu_eigen's is the default without AMX, oneDNN's with it."""
    if request.param == "default":
        yield request.param
        return
    dg.plugins.pin("MatMulBiasAdd", "cpu", request.param)
    dg.plugins.pin("MatMul", "cpu", "mkldnn")
    try:
        yield request.param
    finally:
        dg.plugins.unpin("MatMulBiasAdd", "cpu")
        dg.plugins.unpin("MatMul", "cpu")


def _bf16(x):
    return ops.cast(dg.tensor(np.asarray(x, np.float32)), dg.bfloat16)


def _f32(t):
    return np.asarray(ops.cast(t, dg.float32) if t.dtype != dg.float32 else t)


def _bits(t):
    """The bit patterns (a bfloat16 widens to float32 exactly, NaN payloads
    included)."""
    if t.dtype == dg.bfloat16:
        return _f32(t).view(np.uint32) >> 16
    return np.asarray(t).view(np.uint32)


def _unfused(a, b, bias, residual=None, dtype=dg.bfloat16, shape=None, ta=False, tb=False):
    m = ops.matmul(a, b, transpose_a=ta, transpose_b=tb, out_dtype=dg.float32)
    if shape is not None:
        m = ops.reshape(m, shape)
    s = ops.add(m, bias)
    if residual is not None:
        s = ops.add(s, residual)
    return ops.cast(s, dtype) if dtype != dg.float32 else s


def _operands(n, k, m, seed=0, ta=False, tb=False):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((k, n) if ta else (n, k))
    b = rng.standard_normal((m, k) if tb else (k, m))
    bias = rng.standard_normal(m).astype(np.float32)
    return a, b, bias


def _ref(a, b, bias, residual=None, ta=False, tb=False):
    """float64 of the bfloat16-rounded operands, then the sum."""
    a64 = _f32(_bf16(a)).astype(np.float64)
    b64 = _f32(_bf16(b)).astype(np.float64)
    y = (a64.T if ta else a64) @ (b64.T if tb else b64) + bias.astype(np.float64)
    if residual is not None:
        y = y + residual.reshape(y.shape).astype(np.float64)
    return y


# Sizes around the 6 x 64 register tile and the 16-column stores, k odd
# and even, one row, one column.
SIZES = [(1, 1, 1), (5, 7, 3), (6, 64, 64), (7, 33, 65), (13, 2, 130), (64, 129, 17),
         (200, 64, 96), (1024, 256, 256)]


@pytest.mark.parametrize("n,k,m", SIZES)
@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False), (True, True)])
def test_bf16_output_matches_matmul_add_cast(n, k, m, ta, tb):
    a, b, bias = _operands(n, k, m, ta=ta, tb=tb)
    A, B, Bias = _bf16(a), _bf16(b), dg.tensor(bias)
    y = ops.matmul_bias_add(A, B, Bias, transpose_a=ta, transpose_b=tb, dtype=dg.bfloat16)
    assert y.dtype == dg.bfloat16 and y.shape == (n, m)
    np.testing.assert_array_equal(_bits(y), _bits(_unfused(A, B, Bias, ta=ta, tb=tb)))
    # float64 reference: one float32 sum (k + 1 roundings of 2^-24) and
    # one bfloat16 rounding (2^-9 relative)
    ref = _ref(a, b, bias, ta=ta, tb=tb)
    scale = np.abs(_f32(_bf16(a))).max() * np.abs(_f32(_bf16(b))).max() * k + np.abs(bias).max()
    np.testing.assert_allclose(_f32(y), ref, rtol=2 ** -8, atol=scale * (k + 2) * 2 ** -23)


@pytest.mark.parametrize("n,k,m", SIZES)
def test_float32_output_with_residual_matches_adds(n, k, m):
    a, b, bias = _operands(n, k, m, seed=1, tb=True)
    rng = np.random.default_rng(2)
    res = rng.standard_normal((n, m)).astype(np.float32)
    A, B, Bias, R = _bf16(a), _bf16(b), dg.tensor(bias), dg.tensor(res)
    y = ops.matmul_bias_add(A, B, Bias, R, transpose_b=True, dtype=dg.float32)
    assert y.dtype == dg.float32 and y.shape == (n, m)
    np.testing.assert_array_equal(_bits(y), _bits(_unfused(A, B, Bias, R, dg.float32, tb=True)))
    ref = _ref(a, b, bias, res, tb=True)
    np.testing.assert_allclose(np.asarray(y), ref, rtol=1e-5, atol=1e-4 * np.sqrt(k + 1))


def test_shape_attribute_reads_the_product_row_major():
    a, b, bias = _operands(48, 32, 40, seed=3, tb=True)
    res = np.random.default_rng(4).standard_normal((4, 12, 40)).astype(np.float32)
    A, B, Bias, R = _bf16(a), _bf16(b), dg.tensor(bias), dg.tensor(res)
    y = ops.matmul_bias_add(A, B, Bias, R, transpose_b=True, dtype=dg.float32, shape=[4, 12, 40])
    assert y.shape == (4, 12, 40)
    want = _unfused(A, B, Bias, R, dg.float32, shape=(4, 12, 40), tb=True)
    np.testing.assert_array_equal(_bits(y), _bits(want))
    y16 = ops.matmul_bias_add(A, B, Bias, transpose_b=True, dtype=dg.bfloat16, shape=[4, 12, 40])
    np.testing.assert_array_equal(
        _bits(y16), _bits(_unfused(A, B, Bias, shape=(4, 12, 40), tb=True)))


def test_strided_operands_and_residual():
    """Column slices of wider matrices, a transposed residual view."""
    rng = np.random.default_rng(5)
    wide_a = _bf16(rng.standard_normal((70, 90)))
    wide_b = _bf16(rng.standard_normal((50, 90)))
    A = wide_a[:, 3:67]
    B = wide_b[:, 10:74]
    Bias = dg.tensor(rng.standard_normal(50).astype(np.float32))
    R = ops.transpose(dg.tensor(rng.standard_normal((50, 70)).astype(np.float32)), [1, 0])
    assert not R.is_contiguous()
    y = ops.matmul_bias_add(A, B, Bias, R, transpose_b=True, dtype=dg.float32)
    np.testing.assert_array_equal(_bits(y), _bits(_unfused(A, B, Bias, R, dg.float32, tb=True)))


def test_empty_inner_axis_is_bias_plus_residual():
    A = _bf16(np.zeros((5, 0)))
    B = _bf16(np.zeros((0, 7)))
    bias = np.arange(7, dtype=np.float32)
    res = np.ones((5, 7), np.float32)
    y = ops.matmul_bias_add(A, B, dg.tensor(bias), dg.tensor(res), dtype=dg.float32)
    np.testing.assert_array_equal(np.asarray(y), np.broadcast_to(bias + 1, (5, 7)))


@pytest.mark.parametrize("n,m", [(0, 7), (5, 0), (0, 0)])
def test_empty_outputs(n, m):
    A, B = _bf16(np.zeros((n, 3))), _bf16(np.zeros((3, m)))
    y = ops.matmul_bias_add(A, B, dg.tensor(np.zeros(m, np.float32)), dtype=dg.bfloat16)
    assert y.shape == (n, m) and y.dtype == dg.bfloat16


def test_rounding_is_the_cast_kernels():
    """Where vcvtneps2bf16 and the Cast kernel differ: a denormal float32
    sum (kept by Cast, flushed by the instruction), NaN payloads (Cast
    writes the quiet NaN of the sign), ties to even, infinities."""
    tiny = np.float32(3e-39)                      # float32 denormal
    nan_payload = np.array([0x7FA00001], np.uint32).view(np.float32)[0]
    neg_nan = np.array([0xFFB00000], np.uint32).view(np.float32)[0]
    tie = np.array([0x3F808000], np.uint32).view(np.float32)[0]    # 1 + 2^-8: tie, to even
    tie_up = np.array([0x3F818000], np.uint32).view(np.float32)[0]  # tie, rounds up
    bias = np.array([tiny, -tiny, nan_payload, neg_nan, tie, tie_up, np.inf, -np.inf,
                     1.5, 0.0, -0.0, 3.4e38, 1e-38, 2 ** -126, 7, 8], np.float32)
    A = _bf16(np.zeros((3, 2)))
    B = _bf16(np.zeros((2, 16)))
    y = ops.matmul_bias_add(A, B, dg.tensor(bias), dtype=dg.bfloat16)
    want = _unfused(A, B, dg.tensor(bias))
    np.testing.assert_array_equal(_bits(y), _bits(want))
    got = _bits(y)[0].astype(np.uint16)
    assert got[0] != 0 and got[1] != 0x8000      # denormals kept, not flushed
    assert got[2] == 0x7FC0 and got[3] == 0xFFC0  # quiet NaNs of the sign


def test_bias_and_residual_order():
    """(product + bias) + residual, in that order: a case where the other
    association rounds differently."""
    A = _bf16(np.ones((1, 1)))
    B = _bf16(np.ones((1, 16)))
    bias = np.full(16, 2.0 ** 24, np.float32)
    res = np.full((1, 16), -(2.0 ** 24), np.float32)
    y = ops.matmul_bias_add(A, B, dg.tensor(bias), dg.tensor(res), dtype=dg.float32)
    # (1 + 2^24) rounds to 2^24 (ties to even), minus 2^24 = 0; the other
    # association would give 1
    np.testing.assert_array_equal(np.asarray(y), np.zeros((1, 16), np.float32))


def test_threads_do_not_change_bits():
    a, b, bias = _operands(300, 96, 200, seed=9, tb=True)
    A, B, Bias = _bf16(a), _bf16(b), dg.tensor(bias)
    y = ops.matmul_bias_add(A, B, Bias, transpose_b=True, dtype=dg.bfloat16)
    np.testing.assert_array_equal(_bits(y), _bits(_unfused(A, B, Bias, tb=True)))


ERRORS = {
    "inner": (lambda: (_bf16(np.ones((4, 3))), _bf16(np.ones((5, 3))), np.ones(5)), {},
              "inner dimensions differ"),
    "bias_shape": (lambda: (_bf16(np.ones((4, 3))), _bf16(np.ones((3, 5))), np.ones(4)), {},
                   "bias must have shape [5]"),
    "rank": (lambda: (_bf16(np.ones((2, 4, 3))), _bf16(np.ones((3, 5))), np.ones(5)), {},
             "2-D matrices"),
    "dtype": (lambda: (_bf16(np.ones((4, 3))), _bf16(np.ones((3, 5))), np.ones(5)),
              {"dtype": dg.float16}, "dtype must be float32 or a's dtype"),
    "shape": (lambda: (_bf16(np.ones((4, 3))), _bf16(np.ones((3, 5))), np.ones(5)),
              {"shape": [3, 7]}, "has 21 elements but the product [4, 5]"),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_name_the_op_and_shapes(case):
    make, kwargs, message = ERRORS[case]
    a, b, bias = make()
    with pytest.raises(InvalidArgumentError, match="MatMulBiasAdd") as err:
        ops.matmul_bias_add(a, b, dg.tensor(np.asarray(bias, np.float32)), **kwargs)
    assert message in str(err.value)


def test_residual_shape_error():
    a, b = _bf16(np.ones((4, 3))), _bf16(np.ones((3, 5)))
    with pytest.raises(InvalidArgumentError, match="residual must have y's shape"):
        ops.matmul_bias_add(a, b, dg.tensor(np.ones(5, np.float32)),
                            dg.tensor(np.ones((5, 4), np.float32)))


def test_mixed_operand_dtypes_raise():
    a = _bf16(np.ones((4, 3)))
    b = ops.cast(_bf16(np.ones((3, 5))), dg.float16)
    with pytest.raises(InvalidArgumentError, match="MatMulBiasAdd"):
        ops.matmul_bias_add(a, b, dg.tensor(np.ones(5, np.float32)))


def test_graph_only_op_explained():
    """A pass writes it on the differentiated graph: no gradient rule
    (the schema says so, as BiasGelu's and SumCastGrad's)."""
    from dragon_core import plugins
    assert dg._C.op("MatMulBiasAdd").describe()["no_grad"]
    text = str(plugins.explain("MatMulBiasAdd", dtype=dg.bfloat16))
    for name in _KERNELS:
        assert name in text, text


_SUBPROCESS_CHECK = """
import numpy as np, dragon_core as dg
from dragon_core import plugins
names = sorted(k["name"] for k in plugins.kernels("MatMulBiasAdd") if k["device"] == "cpu")
print(",".join(names) or "-")
lin = dg.nn.Linear(16, 16)
def f(x):
    with dg.autocast('cpu'):
        return lin(x) + x
g = dg.function(f)
x = dg.tensor(np.ones((4, 16), np.float32))
y = g(x)
print(sum(op.type == 'MatMulBiasAdd' for op in g.get_graph(x).op))
"""


@pytest.mark.parametrize("env", [{"DRAGON_CPU_EIGEN_ISA": "v3"},
                                 {"DRAGON_CPU_EIGEN_BF16_GEMM": "off"}])
def test_not_registered_where_the_gemm_does_not_run(env):
    """With the ISA capped below x86-64-v4 or the AVX512-BF16 GEMM switched
    off, cpu_eigen's kernel is not registered: with mkldnn disabled too no
    kernel is, and the linear_epilogue pass (which asks for one) leaves a
    mixed-precision Linear + residual as it is; with mkldnn its oneDNN
    kernel takes the op and the same function fuses, as it does with the
    GEMM on."""
    import os
    import subprocess
    import sys
    base = {k: v for k, v in os.environ.items()
            if not k.startswith("DRAGON_CPU_EIGEN") and k != "DRAGON_DISABLE_PLUGINS"}
    names = {k["name"] for k in dg.plugins.kernels("MatMulBiasAdd")}
    onednn = "MatMulBiasAddOneDNN" in names
    cases = [(dict(env, DRAGON_DISABLE_PLUGINS="mkldnn"), "-", "0"),
             ({}, ",".join(sorted(names)), "1")]
    if onednn:
        cases.append((env, "MatMulBiasAddOneDNN", "1"))
    for extra, kernels, fused in cases:
        out = subprocess.run([sys.executable, "-c", _SUBPROCESS_CHECK], env=dict(base, **extra),
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [kernels, fused], (extra, out.stdout)
