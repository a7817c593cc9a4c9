"""cpu_eigen's row kernels (plugins/cpu_eigen/src/rows.h, rows_isa.cc):
layer norm forward/backward and column sums (Sum over leading axes keeping
the contiguous last one, a Linear layer's bias gradient), built per
instruction set and chosen at run time (issue 21).

float32 LayerNorm/LayerNormGrad are served by mkldnn by default, so the
cpu_eigen kernels are pinned here. Every case is checked against float64
NumPy, on float32/float64 and the 16-bit dtypes (computed in float), on
edge shapes (one row, one column, empty, widths that are not a multiple of
any vector width); the results must not depend on the thread count and
every instruction-set build must agree with NumPy.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg


def layer_norm_ref(x, gamma, beta, axis=-1, eps=1e-5):
    """float64 layer norm over x.shape[axis:]."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps) * gamma + beta


def layer_norm_grad_ref(x, gamma, dy, axis=-1, eps=1e-5):
    """float64 [dx, dgamma, dbeta], the textbook backward."""
    axes = tuple(range(axis % x.ndim, x.ndim))
    lead = tuple(range(axis % x.ndim))
    n = int(np.prod([x.shape[a] for a in axes]))
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv
    g = dy * gamma
    dx = inv / n * (n * g - g.sum(axis=axes, keepdims=True)
                    - xhat * (g * xhat).sum(axis=axes, keepdims=True))
    return [dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)]


# (dtype, rtol/atol scale): bfloat16 has an 8-bit significand, float16 11.
DTYPES = [("float32", 2e-5), ("float64", 1e-12), ("float16", 4e-3), ("bfloat16", 3e-2)]
# Widths: 1, below / at / above the 16 double lanes and AVX-512's 16 floats,
# odd, and the encoder's 256 and 1024.
LN_SHAPES = [(1, 1), (3, 1), (1, 17), (5, 15), (4, 16), (7, 33), (2, 3, 255), (9, 256),
             (33, 1000), (0, 8)]
SUM_SHAPES = [(1, 1), (1, 5), (5, 1), (3, 17), (4, 16), (7, 33), (13, 255), (1024, 256),
              (129, 1024), (0, 7), (6, 0)]


@pytest.fixture
def cpu_eigen_norm():
    """LayerNorm / LayerNormGrad pinned to cpu_eigen for the test."""
    for op in ("LayerNorm", "LayerNormGrad"):
        dg.plugins.pin(op, "cpu", "cpu_eigen")
    yield
    for op in ("LayerNorm", "LayerNormGrad"):
        dg.plugins.unpin(op, "cpu")


def _t(a, dtype):
    """A dragon tensor of dtype from a float64 array."""
    return dg.ops.cast(dg.tensor(np.asarray(a, np.float32 if dtype in ("float16", "bfloat16")
                                            else dtype)), dtype)


def _np(t):
    return dg.ops.cast(t, "float64").numpy()


def _rounded(a, dtype):
    """a rounded to dtype, back in float64 (the values the kernel sees)."""
    return _np(_t(a, dtype))


def _close(got, want, tol, n, what):
    """Within tol, scaled by the number of terms summed (n) and the values'
    magnitude."""
    scale = max(1.0, float(np.abs(want).max())) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=tol * max(1, n) ** 0.5,
                               atol=tol * scale * max(1, n) ** 0.5, err_msg=what)


# ------------------------------------------------------------ layer norm

def _ln_inputs(shape, seed=0):
    rng = np.random.default_rng(seed)
    cols = shape[-1:]
    x = 2.0 + rng.uniform(-1.5, 1.5, shape)
    return (x, rng.uniform(0.5, 1.5, cols), rng.uniform(-1, 1, cols),
            rng.standard_normal(shape))


@pytest.mark.parametrize("dtype,tol", DTYPES, ids=[d for d, _ in DTYPES])
@pytest.mark.parametrize("shape", LN_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_layer_norm_matches_numpy(cpu_eigen_norm, shape, dtype, tol):
    x, gamma, beta, dy = (_rounded(a, dtype) for a in _ln_inputs(shape))
    eps = 1e-5
    y = dg.ops.layer_norm(_t(x, dtype), _t(gamma, dtype), _t(beta, dtype), axis=-1, eps=eps)
    assert y.dtype == dtype
    # The output is rounded to dtype once: one unit of its precision.
    _close(_np(y), layer_norm_ref(x, gamma, beta, -1, eps), tol, 1, f"LayerNorm {dtype}")
    dx, dgamma, dbeta = dg.ops.layer_norm_grad(_t(x, dtype), _t(gamma, dtype), _t(dy, dtype),
                                               axis=-1, eps=eps)
    want = layer_norm_grad_ref(x, gamma, dy, -1, eps)
    rows = int(np.prod(shape[:-1]))
    _close(_np(dx), want[0], 4 * tol, 1, f"LayerNormGrad dx {dtype}")
    _close(_np(dgamma), want[1], 4 * tol, rows, f"LayerNormGrad dgamma {dtype}")
    _close(_np(dbeta), want[2], 4 * tol, rows, f"LayerNormGrad dbeta {dtype}")


def test_layer_norm_grad_over_several_axes(cpu_eigen_norm):
    """axis=1 of a rank-3 input: rows are the leading axis, the normalised
    group is the flattened [8, 24]; parameter gradients over many rows
    (several row blocks, summed in block order)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((300, 8, 24)) * 3 + 1
    gamma, dy = rng.uniform(0.5, 1.5, (8, 24)), rng.standard_normal((300, 8, 24))
    got = dg.ops.layer_norm_grad(dg.tensor(x), dg.tensor(gamma), dg.tensor(dy), axis=1, eps=1e-5)
    for g, w in zip(got, layer_norm_grad_ref(x, gamma, dy, 1, 1e-5)):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-11, atol=1e-11)


def test_layer_norm_is_stable_far_from_zero(cpu_eigen_norm):
    """Two-pass statistics: a mean 1e4 times the spread costs no accuracy."""
    rng = np.random.default_rng(4)
    x = (1e4 + rng.uniform(-1, 1, (6, 77))).astype(np.float32).astype(np.float64)
    gamma, beta = np.ones(77), np.zeros(77)
    y = dg.ops.layer_norm(dg.tensor(x.astype(np.float32)), dg.tensor(gamma.astype(np.float32)),
                          dg.tensor(beta.astype(np.float32)), axis=-1, eps=1e-5)
    np.testing.assert_allclose(y.numpy(), layer_norm_ref(x, gamma, beta, -1, 1e-5),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 9), (4, 33), (3, 2, 7)], ids=str)
def test_layer_norm_gradient_matches_finite_differences(cpu_eigen_norm, shape):
    """The LayerNorm rule through the cpu_eigen LayerNormGrad kernel
    (float64) against central differences, first and second order."""
    x, gamma, beta, _ = _ln_inputs(shape, seed=5)
    case = OpCase.of("LayerNorm", [x, gamma, beta], attrs={"axis": -1, "eps": 1e-5})
    case.check_grad()


def test_layer_norm_eager_matches_compiled(cpu_eigen_norm):
    """The same kernels in a compiled function: bit for bit the eager result."""
    x, gamma, beta, dy = (dg.tensor(a.astype(np.float32)) for a in _ln_inputs((64, 96), 6))

    def block(x, gamma, beta, dy):
        y = dg.ops.layer_norm(x, gamma, beta, axis=-1, eps=1e-5)
        return [y] + list(dg.ops.layer_norm_grad(x, gamma, dy, axis=-1, eps=1e-5))

    eager = [t.numpy() for t in block(x, gamma, beta, dy)]
    graph = [t.numpy() for t in dg.function(block)(x, gamma, beta, dy)]
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(g, e)


# ------------------------------------------------------------ column sums

@pytest.mark.parametrize("dtype,tol", DTYPES, ids=[d for d, _ in DTYPES])
@pytest.mark.parametrize("shape", SUM_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_column_sum_matches_numpy(shape, dtype, tol):
    rng = np.random.default_rng(7)
    x = _rounded(rng.standard_normal(shape) + 0.5, dtype)
    got = dg.ops.sum(_t(x, dtype), axis=0)
    assert list(got.shape) == [shape[1]]
    # Accumulated in double, rounded once to dtype (float32: within a few
    # float roundings of the blocks of four).
    _close(_np(got), x.sum(axis=0), tol, 4 if dtype == "float32" else 1, f"Sum {dtype}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_column_sum_over_leading_axes(dtype):
    """[8, 128, 256] over (0, 1), keepdims (the bias gradient of a Linear
    on [batch, seq, hidden]); and a strided input (a row slice), which the
    kernel reads in place."""
    rng = np.random.default_rng(8)
    x = rng.standard_normal((8, 128, 256)).astype(dtype)
    got = dg.ops.sum(dg.tensor(x), axis=(0, 1), keepdims=True)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), x.astype(np.float64).sum(axis=(0, 1), keepdims=True),
                               rtol=tol, atol=tol * 32)
    m = rng.standard_normal((300, 70)).astype(dtype)
    view = dg.tensor(m)[::3]
    np.testing.assert_allclose(dg.ops.sum(view, axis=0).numpy(),
                               m[::3].astype(np.float64).sum(axis=0), rtol=tol, atol=tol * 8)


def test_column_sum_gradient_matches_finite_differences():
    x = np.random.default_rng(9).standard_normal((5, 3, 17))
    OpCase.of("Sum", [x], attrs={"axes": [0, 1], "keepdims": False}).check_grad()


def test_column_sum_eager_matches_compiled():
    x = dg.tensor(np.random.default_rng(10).standard_normal((1024, 256)).astype(np.float32))
    f = dg.function(lambda x: dg.ops.sum(x * 1.0, axis=0))
    np.testing.assert_array_equal(f(x).numpy(), dg.ops.sum(x * 1.0, axis=0).numpy())


# ------------------------------------------------- threads and ISA builds

SCRIPT = r"""
import json
import numpy as np
import dragon_core as dg
for op in ("LayerNorm", "LayerNormGrad"):
    dg.plugins.pin(op, "cpu", "cpu_eigen")
rng = np.random.default_rng(11)
out = {}
for dt in ("float32", "float64"):
    x = (1 + rng.standard_normal((1031, 257))).astype(dt)
    g = rng.uniform(0.5, 1.5, 257).astype(dt)
    b = rng.standard_normal(257).astype(dt)
    dy = rng.standard_normal((1031, 257)).astype(dt)
    y = dg.ops.layer_norm(dg.tensor(x), dg.tensor(g), dg.tensor(b), axis=-1, eps=1e-5)
    grads = dg.ops.layer_norm_grad(dg.tensor(x), dg.tensor(g), dg.tensor(dy), axis=-1, eps=1e-5)
    out[dt] = {"y": y.numpy().tolist(), "dx": grads[0].numpy().tolist(),
               "dgamma": grads[1].numpy().tolist(), "dbeta": grads[2].numpy().tolist(),
               "sum": dg.ops.sum(dg.tensor(dy), axis=0).numpy().tolist()}
print(json.dumps(out))
"""


def _run(**env):
    e = dict(os.environ, DRAGON_LOG_LEVEL="0")
    e.pop("DRAGON_CPU_EIGEN_ISA", None)
    e.update(env)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=e, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_results_do_not_depend_on_the_thread_count():
    one, two = _run(OMP_NUM_THREADS="1"), _run(OMP_NUM_THREADS="2")
    for dt in one:
        for name in one[dt]:
            np.testing.assert_array_equal(np.array(one[dt][name]), np.array(two[dt][name]),
                                          err_msg=f"{name} {dt}")


@pytest.mark.parametrize("cap", ["base", "v3", None], ids=["base", "v3", "auto"])
def test_every_isa_build_matches_numpy(cap):
    got = _run(**({"DRAGON_CPU_EIGEN_ISA": cap} if cap else {}))
    rng = np.random.default_rng(11)
    for dt, tol in (("float32", 2e-5), ("float64", 1e-12)):
        x = (1 + rng.standard_normal((1031, 257))).astype(dt).astype(np.float64)
        g = rng.uniform(0.5, 1.5, 257).astype(dt).astype(np.float64)
        b = rng.standard_normal(257).astype(dt).astype(np.float64)
        dy = rng.standard_normal((1031, 257)).astype(dt).astype(np.float64)
        want = {"y": layer_norm_ref(x, g, b, -1, 1e-5), "sum": dy.sum(axis=0)}
        want.update(zip(("dx", "dgamma", "dbeta"), layer_norm_grad_ref(x, g, dy, -1, 1e-5)))
        for name, w in want.items():
            n = 1031 if name in ("dgamma", "dbeta", "sum") else 1
            _close(np.array(got[dt][name]), w, 4 * tol, n, f"{name} {dt} ISA cap {cap}")
