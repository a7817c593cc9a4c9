"""BiasGelu and BiasGeluGrad (dragon_core/src/ops/fused_act.cc, the ops of
the gelu_fusion graph pass): against a float64 reference built from the
math module, bit for bit against the unfused ops they replace (Add -> Gelu
-> Cast; GeluGrad -> Sum & Cast), in float32 / bfloat16 / float16 outputs,
on odd sizes, tails, several Sum chunks, wide rows, empty tensors, extreme
values, non-contiguous inputs, 1 and 2 threads; errors; explain()."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

from ._common import hashes_per_thread_count

from .test_gelu_grad import EXTREME, _slope

MODES = ["none", "tanh"]
OUT_DTYPES = ["float32", "bfloat16", "float16"]
K0 = math.sqrt(2.0 / math.pi)

# (rows..., cols): odd sizes and packet tails; (64, 1031) and (300, 257)
# make the bias sum use 4 chunks (75 rows each: row groups with tails);
# (40, 5000) a row wider than one Sum block; (1024, 1024) the encoder's.
SHAPES = [(1, 1), (3, 5), (7, 33), (2, 3, 17), (64, 1031), (300, 257),
          (40, 5000), (8, 128, 1024)]


def _gelu(v, mode):
    if math.isnan(v):
        return v
    if mode == "tanh":
        return 0.5 * v * (1.0 + math.tanh(K0 * (v + 0.044715 * v ** 3))) if abs(v) < 30 \
            else (v if v > 0 else -0.0)
    if math.isinf(v):
        return v if v > 0 else -0.0
    return 0.5 * v * math.erfc(-v / math.sqrt(2.0))


def _data(shape, seed):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 2.0).astype(np.float32)
    b = (rng.standard_normal(shape[-1]) * 0.5).astype(np.float32)
    dy = rng.standard_normal(shape).astype(np.float32)
    return x, b, dy


def _f64(t):
    return dg.ops.cast(t, "float64").numpy()


def _unfused(x, b, dy, mode, dtype, keepdims=False):
    """The ops the pass replaces, eager: y, dx, dbias."""
    X, B, D = dg.tensor(x), dg.tensor(b), dg.tensor(dy)
    a = dg.ops.add(X, B)
    y = dg.ops.cast(dg.ops.gelu(a, mode), dtype)
    g = dg.ops.gelu_grad(a, D, mode)
    db = dg.ops.sum(g, axis=list(range(x.ndim - 1)), keepdims=keepdims)
    return _f64(y), _f64(dg.ops.cast(g, dtype)), _f64(db)


def _fused(x, b, dy, mode, dtype, keepdims=False):
    X, B, D = dg.tensor(x), dg.tensor(b), dg.tensor(dy)
    y, pre = dg.ops.bias_gelu(X, B, approximate=mode, dtype=dtype)
    # pre is the Add's float32 sum, bit for bit (NaN payloads aside).
    np.testing.assert_array_equal(pre.numpy(), dg.ops.add(X, B).numpy())
    dx, db = dg.ops.bias_gelu_grad(pre, D, approximate=mode, dtype=dtype,
                                   keepdims=keepdims)
    assert y.dtype.name == dtype and dx.dtype.name == dtype
    assert pre.dtype.name == "float32" and db.dtype.name == "float32"
    return _f64(y), _f64(dx), _f64(db)


def _round(v, dtype):
    return _f64(dg.ops.cast(dg.tensor(np.asarray(v, np.float64)), dtype))


@pytest.mark.parametrize("dtype", OUT_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES[:6])
def test_against_float64(shape, mode, dtype):
    x, b, dy = _data(shape, seed=sum(shape))
    y, dx, db = _fused(x, b, dy, mode, dtype)
    pre = np.float32(x + b).astype(np.float64)   # the float32 add, as Add
    want_y = np.vectorize(lambda v: _gelu(v, mode))(pre)
    g = dy.astype(np.float64) * np.vectorize(lambda v: _slope(v, mode))(pre)
    want_db = g.reshape(-1, shape[-1]).sum(axis=0)
    if dtype == "float32":
        np.testing.assert_allclose(y, want_y, rtol=2e-6, atol=2e-7)
        np.testing.assert_allclose(dx, g, rtol=4e-6, atol=2e-7)
    else:
        # One rounding of a float32 value within a few float32 ulp of the
        # float64 one: the 16-bit result is the float64 one rounded, or
        # (at a rounding boundary) a neighbour within one 16-bit ulp.
        ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
        for got, want in ((y, want_y), (dx, g)):
            np.testing.assert_allclose(got, _round(want, dtype),
                                       rtol=ulp, atol=1e-6)
    scale = np.abs(g).reshape(-1, shape[-1]).sum(axis=0)
    assert np.all(np.abs(db - want_db) <= 4e-6 * scale + 1e-7)


@pytest.mark.parametrize("dtype", OUT_DTYPES)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES)
def test_bits_equal_the_unfused_ops(shape, mode, dtype):
    """Same float32 add, gelu and gelu' code, one rounding, Sum's order."""
    x, b, dy = _data(shape, seed=len(shape) + shape[-1])
    for got, want in zip(_fused(x, b, dy, mode, dtype), _unfused(x, b, dy, mode, dtype)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", MODES)
def test_extreme_values(mode):
    pts = np.array(EXTREME + [np.nan, -np.nan, 3e38, -3e38, 1e-40, -1e-40],
                   np.float32)
    x = np.tile(pts, (5, 1))
    b = np.zeros(pts.size, np.float32)
    b[::3] = 0.25
    dy = np.ones_like(x)
    dy[1] = -2.0
    dy[2, ::2] = np.inf
    for dtype in OUT_DTYPES:
        for got, want in zip(_fused(x, b, dy, mode, dtype), _unfused(x, b, dy, mode, dtype)):
            np.testing.assert_array_equal(got, want)   # NaN where NaN


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape", [(0, 5), (2, 0, 5), (3, 0), (0, 0)])
def test_empty(shape, keepdims):
    x, b, dy = (np.zeros(shape, np.float32), np.zeros(shape[-1], np.float32),
                np.zeros(shape, np.float32))
    for dtype in OUT_DTYPES:
        y, dx, db = _fused(x, b, dy, "none", dtype, keepdims)
        assert y.shape == shape and dx.shape == shape
        want = (1,) * (len(shape) - 1) + (shape[-1],) if keepdims else (shape[-1],)
        assert db.shape == want
        np.testing.assert_array_equal(db, np.zeros(want))
        for got, ref in zip((y, dx, db), _unfused(x, b, dy, "none", dtype, keepdims)):
            np.testing.assert_array_equal(got, ref)


def test_keepdims_shape():
    x, b, dy = _data((2, 3, 4), 1)
    _, _, db = _fused(x, b, dy, "none", "float32", keepdims=True)
    _, _, ref = _unfused(x, b, dy, "none", "float32", keepdims=True)
    assert db.shape == (1, 1, 4)
    np.testing.assert_array_equal(db, ref)


def test_non_contiguous_inputs():
    """Transposed / sliced views arrive densely copied: same results."""
    x, b, dy = _data((33, 20), 4)
    xt = dg.ops.transpose(dg.tensor(np.ascontiguousarray(x.T)), [1, 0])
    dyt = dg.ops.transpose(dg.tensor(np.ascontiguousarray(dy.T)), [1, 0])
    bt = dg.tensor(np.repeat(b, 3))[::3]
    y, pre = dg.ops.bias_gelu(xt, bt, dtype="bfloat16")
    y = _f64(y)
    pret = dg.ops.transpose(dg.tensor(np.ascontiguousarray(pre.numpy().T)), [1, 0])
    assert not pret.is_contiguous()
    dx, db = dg.ops.bias_gelu_grad(pret, dyt, dtype="bfloat16")
    assert not xt.is_contiguous() and not dyt.is_contiguous()
    ry, rdx, rdb = _unfused(x, b, dy, "none", "bfloat16")
    np.testing.assert_array_equal(y, ry)
    np.testing.assert_array_equal(_f64(dx), rdx)
    np.testing.assert_array_equal(_f64(db), rdb)


_THREADS_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(7)
x = (rng.standard_normal((8, 128, 1024)) * 2).astype(np.float32)
b = rng.standard_normal(1024).astype(np.float32)
dy = rng.standard_normal((8, 128, 1024)).astype(np.float32)
X, B, D = dg.tensor(x), dg.tensor(b), dg.tensor(dy)
h = hashlib.sha256()
for dt in ("float32", "bfloat16"):
    y, pre = dg.ops.bias_gelu(X, B, dtype=dt)
    h.update(dg.ops.cast(y, "float32").numpy().tobytes())
    dx, db = dg.ops.bias_gelu_grad(pre, D, dtype=dt)
    h.update(dg.ops.cast(dx, "float32").numpy().tobytes())
    h.update(db.numpy().tobytes())
print(h.hexdigest())
"""


def test_same_bits_with_one_two_and_three_threads():
    hashes = hashes_per_thread_count(_THREADS_SCRIPT, timeout=300)
    assert len(set(hashes.values())) == 1 and len(hashes[1]) == 64, hashes


@pytest.mark.parametrize("call, words", [
    (lambda X, B, D: dg.ops.bias_gelu(X, dg.tensor(np.zeros(4, np.float32))),
     ["bias", "[5]", "[4]"]),
    (lambda X, B, D: dg.ops.bias_gelu(X, dg.tensor(np.zeros((1, 5), np.float32))),
     ["bias", "[5]", "[1, 5]"]),
    (lambda X, B, D: dg.ops.bias_gelu(X, B, approximate="fast"),
     ["approximate", "fast"]),
    (lambda X, B, D: dg.ops.bias_gelu(X, B, dtype="int32"),
     ["dtype", "int32"]),
    (lambda X, B, D: dg.ops.bias_gelu(dg.tensor(np.float32(1.0)), B),
     ["0-d"]),
    (lambda X, B, D: dg.ops.bias_gelu_grad(X, dg.tensor(np.zeros((5, 3), np.float32))),
     ["dy", "[3, 5]", "[5, 3]"]),
    (lambda X, B, D: dg.ops.bias_gelu_grad(X, D, dtype="float64"),
     ["dtype", "float64"]),
    (lambda X, B, D: dg.ops.bias_gelu_grad(X, D, approximate="fast"),
     ["approximate", "fast"]),
    (lambda X, B, D: dg.ops.bias_gelu_grad(dg.tensor(np.float32(1.0)),
                                           dg.tensor(np.float32(1.0))),
     ["0-d"]),
])
def test_errors_name_the_problem(call, words):
    X = dg.tensor(np.zeros((3, 5), np.float32))
    B = dg.tensor(np.zeros(5, np.float32))
    D = dg.tensor(np.zeros((3, 5), np.float32))
    with pytest.raises(InvalidArgumentError) as info:
        call(X, B, D)
    msg = str(info.value)
    for w in words:
        assert w in msg, msg


def test_float64_inputs_are_rejected():
    x = dg.tensor(np.zeros((2, 3)))
    b = dg.tensor(np.zeros(3))
    with pytest.raises((InvalidArgumentError, TypeError)) as info:
        dg.ops.bias_gelu(x, b)
    assert "float64" in str(info.value)


def test_explain_names_the_cpu_eigen_kernels():
    for op in ("BiasGelu", "BiasGeluGrad"):
        text = dg.plugins.explain(op, "cpu", "float32")
        assert f"{op}<float32> [plugin cpu_eigen]" in text, text
