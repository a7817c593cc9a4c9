"""mkldnn's BatchNorm, BatchNormGrad, LayerNorm and LayerNormGrad kernels
against the core's float64 NumPy references, against cpu_eigen in float32,
and what they decline (empty x; BatchNorm with spatial axes, which oneDNN
3.2 does not JIT on plain NCHW) (docs/nn_ops.md).

Tolerances: the kit's float32 tolerance (rtol 1e-5, atol 1e-6) times 4 for
the forward ops (a normalized value goes through a mean, a variance and a
reciprocal square root) and times 10 for the backward ops (each dx sums two
reductions over the group), as in the core's own norm tests.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import check_bad_inputs, check_eager_vs_graph, op_case
from mkldnn_testing import (check_mkldnn_alone, check_served, cpu_eigen_result,
                            explain_winner, fd_vjp, run_without, tape_vjp)
from tests.ops._common import script_hash
from tests.ops.test_norm import (batch_norm_grad_ref, batch_norm_ref, layer_norm_grad_ref,
                                 layer_norm_ref)

OPS = ["BatchNorm", "BatchNormGrad", "LayerNorm", "LayerNormGrad"]

# BatchNorm is served when x is [N, C] in effect (trailing axes of size 1).
BN_SHAPES = [(4, 3), (1, 4), (3, 2, 1, 1), (5, 7, 1), (64, 17), (2, 1), (300, 33)]
BN_ATTRS = [{}, {"training": False}, {"eps": 1e-3}, {"eps": 0.1, "training": False}]
LN_SHAPES = [(4, 5), (2, 3, 4), (1, 6), (7,), (3, 1, 17), (2, 2, 2, 3)]
LN_ATTRS = [{"axis": -1}, {"axis": 1}, {"axis": 0}, {"axis": -2, "eps": 1e-2}]


def _x(rng, shape, offset=2.0):
    """Values around ``offset`` (a wrong mean shows) with spread ~1."""
    return (offset + rng.uniform(-1.5, 1.5, shape)).astype(np.float32)


def _param(rng, shape, low=0.5, high=1.5):
    return rng.uniform(low, high, shape).astype(np.float32)


def bn_inputs(rng, dt, shape):
    c = (shape[1],)
    return [_x(rng, shape), _param(rng, c), _param(rng, c, -1, 1),
            _param(rng, c, 1.0, 3.0), _param(rng, c, 0.5, 2.0)]


def bn_grad_inputs(rng, dt, shape, zero_stat_grads=False):
    c = (shape[1],)
    dstats = [np.zeros(c, np.float32)] * 2 if zero_stat_grads else \
        [rng.standard_normal(c).astype(np.float32) for _ in range(2)]
    return [_x(rng, shape), _param(rng, c), _param(rng, c, 1.0, 3.0), _param(rng, c, 0.5, 2.0),
            rng.standard_normal(shape).astype(np.float32)] + dstats


def _ln_valid(case):
    return -len(case.shape) <= case.attrs["axis"] < len(case.shape)


def ln_inputs(rng, dt, shape, attrs):
    p = shape[attrs["axis"] % len(shape):]
    return [_x(rng, shape), _param(rng, p), _param(rng, p, -1, 1)]


def ln_grad_inputs(rng, dt, shape, attrs):
    p = shape[attrs["axis"] % len(shape):]
    return [_x(rng, shape), _param(rng, p), rng.standard_normal(shape).astype(np.float32)]


# ------------------------------------------------------------ selection


@pytest.mark.parametrize("op", OPS)
def test_explain_names_mkldnn(op):
    line = explain_winner(op)
    assert f"mkldnn::{op}" in line and "from mkldnn" in line, line
    assert "cpu_eigen" in explain_winner(op, "float64")


def _served_cases():
    rng = np.random.default_rng(11)
    for shape in BN_SHAPES:
        for attrs in BN_ATTRS:
            yield "BatchNorm", bn_inputs(rng, "float32", shape), batch_norm_ref, attrs, 4
            for zero in (False, True):
                yield ("BatchNormGrad", bn_grad_inputs(rng, "float32", shape, zero),
                       batch_norm_grad_ref, attrs, 10)
    for shape in LN_SHAPES:
        for attrs in LN_ATTRS:
            if -len(shape) <= attrs["axis"] < len(shape):
                yield "LayerNorm", ln_inputs(rng, "float32", shape, attrs), layer_norm_ref, \
                    attrs, 4
                yield "LayerNormGrad", ln_grad_inputs(rng, "float32", shape, attrs), \
                    layer_norm_grad_ref, attrs, 10


# Declined: empty x, and BatchNorm with spatial axes.
DECLINED = [("BatchNorm", (0, 3, 2)), ("BatchNorm", (2, 0, 3)), ("LayerNorm", (0, 5)),
            ("LayerNormGrad", (3, 0)), ("BatchNorm", (2, 3, 5)), ("BatchNormGrad", (2, 3, 4, 5))]


def _declined_inputs(op, shape):
    rng = np.random.default_rng(0)
    if op == "BatchNorm":
        return bn_inputs(rng, "float32", shape)
    if op == "BatchNormGrad":
        return bn_grad_inputs(rng, "float32", shape)
    if op == "LayerNorm":
        return ln_inputs(rng, "float32", shape, {"axis": -1})
    return ln_grad_inputs(rng, "float32", shape, {"axis": -1})


def _declined_calls():
    return [(f"{op}{shape}", op, _declined_inputs(op, shape), {}) for op, shape in DECLINED]


def test_mkldnn_alone_serves_and_declines():
    """With cpu_eigen disabled every case runs on mkldnn and matches the
    reference; empty x (cpu_eigen defines its NaN statistics) and BatchNorm
    with spatial axes are declined."""
    check_mkldnn_alone("test_mkldnn_norm", len(list(_served_cases())), _declined_calls())


def test_without_mkldnn_cpu_eigen_serves():
    out = run_without("mkldnn", f"""
        import json, dragon_core as dg
        print(json.dumps([dg.plugins.explain(op, "cpu", "float32").splitlines()[-1]
                          for op in {OPS!r}]))
    """)
    assert all("cpu_eigen" in w and "mkldnn" not in w for w in out), out


# ------------------------------------------------------------ numerics


@op_case("BatchNorm", inputs=bn_inputs, reference=batch_norm_ref, attrs=BN_ATTRS,
         shapes=BN_SHAPES, dtypes=("float32",), tol=4)
def test_batch_norm(case):
    case.check_forward()


@op_case("BatchNormGrad", inputs=bn_grad_inputs, reference=batch_norm_grad_ref,
         attrs=BN_ATTRS, shapes=BN_SHAPES, dtypes=("float32",), tol=10)
def test_batch_norm_grad(case):
    case.check_forward()


@op_case("LayerNorm", inputs=ln_inputs, reference=layer_norm_ref, attrs=LN_ATTRS,
         shapes=LN_SHAPES, dtypes=("float32",), select=_ln_valid, tol=4)
def test_layer_norm(case):
    case.check_forward()


@op_case("LayerNormGrad", inputs=ln_grad_inputs, reference=layer_norm_grad_ref,
         attrs=LN_ATTRS, shapes=LN_SHAPES, dtypes=("float32",), select=_ln_valid, tol=10)
def test_layer_norm_grad(case):
    case.check_forward()


@pytest.mark.parametrize("op, make, ref", [
    ("BatchNorm", lambda r: bn_inputs(r, "", (8000, 2)), batch_norm_ref),
    ("LayerNorm", lambda r: ln_inputs(r, "", (16, 4000), {"axis": -1}), layer_norm_ref),
])
def test_statistics_are_accurate_far_from_zero(op, make, ref):
    """|mean| = 1e4 times the spread: the statistics are accumulated in double
    (oneDNN's own float32 sums lose ~4e-3 of the normalized value here; the
    float32 mean itself is only good to half an ulp of 1e4, 4.9e-4)."""
    rng = np.random.default_rng(4)
    inputs = make(rng)
    inputs[0] = (1e4 + rng.standard_normal(inputs[0].shape)).astype(np.float32)
    check_served(op, inputs, ref, {}, rtol=1e-3, atol=1e-3)


# Row lengths around the AVX-512 statistics' 16-value vectors, row counts
# around its groups of four rows, offsets near and far from zero.
_STATS_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(21)
h = hashlib.sha256()
for rows, d in [(1, 16), (3, 17), (4, 31), (5, 32), (9, 33), (1024, 256), (6, 1000)]:
    for offset in (0.0, 1e4):
        x = (offset + rng.standard_normal((rows, d))).astype(np.float32)
        g = rng.uniform(0.5, 1.5, d).astype(np.float32)
        b = rng.standard_normal(d).astype(np.float32)
        dy = rng.standard_normal((rows, d)).astype(np.float32)
        y = dg.ops.layer_norm(dg.tensor(x), dg.tensor(g), dg.tensor(b), axis=1)
        outs = [y] + list(dg.ops.layer_norm_grad(dg.tensor(x), dg.tensor(g),
                                                 dg.tensor(dy), axis=1))
        for t in outs:
            h.update(np.ascontiguousarray(np.asarray(t)).tobytes())
print(h.hexdigest())
"""


def test_vector_statistics_give_the_scalar_bits():
    """LayerNorm's row statistics take an AVX-512 path where the CPU has it
    (four rows at a time, one float lane per running sum of the scalar
    loop): LayerNorm and LayerNormGrad give the same bits with it switched
    off (DRAGON_MKLDNN_STATS_AVX512=0), at each thread count (oneDNN's
    backward sums dgamma / dbeta per thread), on rows with and without a
    vector tail and row counts around its groups."""
    for threads in ("1", "2", "3"):
        env = {"OMP_NUM_THREADS": threads}
        scalar = script_hash(_STATS_SCRIPT, dict(env, DRAGON_MKLDNN_STATS_AVX512="0"))
        assert script_hash(_STATS_SCRIPT, env) == scalar, threads


@pytest.mark.parametrize("shape", [(5, 17), (9, 33), (1024, 256), (6, 1000)])
@pytest.mark.parametrize("offset", [0.0, 1e3])
def test_vector_statistics_against_float64(shape, offset):
    """The rows the AVX-512 statistics serve, forward and backward, against
    the float64 references."""
    rng = np.random.default_rng(22)
    x = (offset + rng.standard_normal(shape)).astype(np.float32)
    g = _param(rng, shape[-1:])
    b = _param(rng, shape[-1:], -1, 1)
    dy = rng.standard_normal(shape).astype(np.float32)
    tol = dict(rtol=4e-5, atol=4e-5) if offset == 0 else dict(rtol=1e-3, atol=1e-3)
    y = dg.ops.layer_norm(dg.tensor(x), dg.tensor(g), dg.tensor(b), axis=-1)
    ref = layer_norm_ref(x.astype(np.float64), g.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(np.asarray(y), ref, **tol)
    got = dg.ops.layer_norm_grad(dg.tensor(x), dg.tensor(g), dg.tensor(dy), axis=-1)
    refs = layer_norm_grad_ref(x.astype(np.float64), g.astype(np.float64),
                               dy.astype(np.float64))
    for a, r in zip(got, refs):
        scale = max(1.0, float(np.abs(r).max()))
        np.testing.assert_allclose(np.asarray(a), r, rtol=1e-4, atol=1e-4 * scale)
    assert "mkldnn::LayerNorm" in explain_winner("LayerNorm")


_BIG_BN = (4096, 64)
_BIG_LN = (64, 8, 96)


@pytest.mark.parametrize("op, make, attrs", [
    ("BatchNorm", lambda r: bn_inputs(r, "", _BIG_BN), {}),
    ("BatchNorm", lambda r: bn_inputs(r, "", _BIG_BN), {"training": False}),
    ("BatchNormGrad", lambda r: bn_grad_inputs(r, "", _BIG_BN), {}),
    ("BatchNormGrad", lambda r: bn_grad_inputs(r, "", _BIG_BN), {"training": False}),
    ("LayerNorm", lambda r: ln_inputs(r, "", _BIG_LN, {"axis": 1}), {"axis": 1}),
    ("LayerNormGrad", lambda r: ln_grad_inputs(r, "", _BIG_LN, {"axis": 1}), {"axis": 1}),
])
def test_matches_cpu_eigen_float32(op, make, attrs):
    """A larger call (threaded paths) equals cpu_eigen's float32 result."""
    from dragon_sdk.testing import run_op
    inputs = [dg.tensor(a) for a in make(np.random.default_rng(12))]
    ours = run_op(op, *inputs, **attrs)
    theirs = cpu_eigen_result(op, lambda: run_op(op, *inputs, **attrs))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-4)


def test_empty_batch_is_served_by_cpu_eigen():
    x = dg.tensor(np.zeros((0, 3, 2), np.float32))
    p = dg.tensor(np.ones(3, np.float32))
    y, mean, var = dg.ops.batch_norm(x, p, p, p, p)
    assert y.shape == (0, 3, 2) and np.isnan(mean.numpy()).all()


def test_strided_input():
    """Non-contiguous views (the core packs them) normalize like their copies."""
    base = _x(np.random.default_rng(2), (12, 9, 10))
    g = np.linspace(0.5, 1.5, 5).astype(np.float32)
    view = dg.tensor(base)[::2, 3, 1:6]
    y = dg.ops.batch_norm(view, *(dg.tensor(v) for v in (g, g, g, g)))[0].numpy()
    want = batch_norm_ref(base[::2, 3, 1:6].astype(np.float64), g, g, g, g)[0]
    np.testing.assert_allclose(y, want, rtol=4e-5, atol=4e-6)
    y = dg.ops.layer_norm(view, dg.tensor(g), dg.tensor(g)).numpy()
    want = layer_norm_ref(base[::2, 3, 1:6].astype(np.float64), g, g)
    np.testing.assert_allclose(y, want, rtol=4e-5, atol=4e-6)


def test_spatial_batch_norm_is_served_by_cpu_eigen():
    inputs = bn_inputs(np.random.default_rng(3), "", (2, 3, 4, 5))
    check_served("BatchNorm", inputs, batch_norm_ref, {}, rtol=4e-5, atol=4e-6)


# ------------------------------------------------------------ gradients


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_float32_gradient_matches_finite_differences(training):
    """The tape's gradients of x, gamma and beta (BatchNormGrad on mkldnn,
    float32) against central differences of the float64 reference, through
    all three outputs."""
    rng = np.random.default_rng(13)
    inputs = bn_inputs(rng, "", (7, 3))
    outs = batch_norm_ref(*[a.astype(np.float64) for a in inputs], training=training)
    cots = [rng.standard_normal(o.shape) for o in outs]

    def ref(*arrays):
        return np.concatenate([(o * c).ravel() for o, c in
                               zip(batch_norm_ref(*arrays, training=training), cots)])

    def fn(*t):
        y, m, v = dg.ops.batch_norm(*t, training=training)
        parts = [dg.ops.reshape(o * dg.tensor(c.astype(np.float32)), [-1])
                 for o, c in zip((y, m, v), cots)]
        return dg.ops.concat(parts, 0)

    ones = np.ones(sum(c.size for c in cots))
    for i in range(3):
        got = tape_vjp(fn, inputs, i, ones)
        want = fd_vjp(ref, inputs, i, ones, eps=1e-5)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=f"input {i}")


@pytest.mark.parametrize("axis", [-1, 1])
def test_layer_norm_float32_gradient_matches_finite_differences(axis):
    rng = np.random.default_rng(14)
    inputs = ln_inputs(rng, "", (3, 4, 5), {"axis": axis})
    c = rng.standard_normal(inputs[0].shape)
    for i in range(3):
        got = tape_vjp(lambda *t: dg.ops.layer_norm(*t, axis=axis), inputs, i, c)
        want = fd_vjp(lambda *a: layer_norm_ref(*a, axis=axis), inputs, i, c, eps=1e-5)
        np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3, err_msg=f"input {i}")


def test_layer_norm_second_order():
    """d<LayerNormGrad(x, gamma, dy)[0], v>/dx: the first-order op on mkldnn
    inside a rule differentiated again, against finite differences of the
    float64 backward reference."""
    rng = np.random.default_rng(15)
    x, gamma, dy = ln_grad_inputs(rng, "", (3, 6), {"axis": -1})
    v = rng.standard_normal(x.shape)
    got = tape_vjp(lambda *t: dg.ops.layer_norm_grad(*t)[0], [x, gamma, dy], 0, v)
    want = fd_vjp(lambda *a: layer_norm_grad_ref(*a)[0], [x, gamma, dy], 0, v, eps=1e-5)
    np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_second_order(training):
    """d<BatchNormGrad(...)[0], v>/dx and /d dy with BatchNormGrad on mkldnn
    ([N, C] input) inside a rule differentiated again, against finite
    differences of the float64 backward reference."""
    rng = np.random.default_rng(17)
    inputs = bn_grad_inputs(rng, "", (6, 3))
    v = rng.standard_normal(inputs[0].shape)
    for wrt in (0, 4):
        got = tape_vjp(lambda *t: dg.ops.batch_norm_grad(*t, 1e-5, training)[0], inputs, wrt, v)
        want = fd_vjp(lambda *a: batch_norm_grad_ref(*a, training=training)[0], inputs, wrt, v,
                      eps=1e-5)
        np.testing.assert_allclose(got, want, rtol=5e-3, atol=5e-3, err_msg=f"input {wrt}")


# ------------------------------------------------------------ modes and bad input


def test_eager_matches_graph_with_gradients():
    rng = np.random.default_rng(16)
    x = _x(rng, (16, 3))
    g, b = _param(rng, (3,)), _param(rng, (3,))
    lg, lb = _param(rng, (3,)), _param(rng, (3,))

    def net(x, g, b, lg, lb):
        y = dg.ops.batch_norm(x, g, b, g, g)[0]
        return dg.ops.layer_norm(y, lg, lb)

    check_eager_vs_graph(net, x, g, b, lg, lb, grads=True, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op, make", [
    ("BatchNorm", lambda r: bn_inputs(r, "", (6, 3))),
    ("LayerNorm", lambda r: ln_inputs(r, "", (2, 3, 4), {"axis": -1})),
])
def test_bad_inputs_never_crash(op, make):
    # The core's argument conversion rejects None with a TypeError that does
    # not name the op (known, tests/sdk_kit/test_bad_inputs.py).
    check_bad_inputs(op, make(np.random.default_rng(0)))
