"""Normalization (BatchNorm, LayerNorm, GroupNorm) and their backward ops
(BatchNormGrad, LayerNormGrad, GroupNormGrad) against float64 NumPy
references (docs/ops.md, "Normalization")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import FLOAT_DTYPES, OpCase, op_case

from .test_errors import assert_mentions

# ------------------------------------------------------------ references


def _channel_axes(x):
    return (0,) + tuple(range(2, x.ndim))


def _per_channel(v, x):
    return v.reshape((1, -1) + (1,) * (x.ndim - 2))


def batch_norm_ref(x, gamma, beta, running_mean, running_var, eps=1e-5,
                   training=True):
    axes = _channel_axes(x)
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = running_mean, running_var
    xhat = (x - _per_channel(mean, x)) / np.sqrt(_per_channel(var, x) + eps)
    return [xhat * _per_channel(gamma, x) + _per_channel(beta, x), mean, var]


def batch_norm_grad_ref(x, gamma, running_mean, running_var, dy, dmean, dvar,
                        eps=1e-5, training=True):
    """The textbook backward, written independently of the kernel's
    coefficient form: d/dx of y, batch_mean and batch_var."""
    axes = _channel_axes(x)
    m = x.size // max(1, x.shape[1])
    if training:
        mean, var = x.mean(axis=axes), x.var(axis=axes)
    else:
        mean, var = running_mean, running_var
    xc = x - _per_channel(mean, x)
    inv = 1.0 / np.sqrt(_per_channel(var, x) + eps)
    xhat = xc * inv
    dbeta = dy.sum(axis=axes)
    dgamma = (dy * xhat).sum(axis=axes)
    dxhat = dy * _per_channel(gamma, x)
    if not training:
        return [dxhat * inv, dgamma, dbeta]
    dvar_total = (dxhat * xc).sum(axis=axes, keepdims=True) * -0.5 * inv ** 3
    dvar_total = dvar_total + _per_channel(dvar, x)
    dmean_total = -(dxhat * inv).sum(axis=axes, keepdims=True) + _per_channel(dmean, x)
    dx = dxhat * inv + dvar_total * 2.0 * xc / m + dmean_total / m
    return [dx, dgamma, dbeta]


def layer_norm_ref(x, gamma, beta, axis=-1, eps=1e-5):
    axes = tuple(range(axis % x.ndim, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def _ln_grad(x, gamma, dy, axes, eps):
    """Backward of normalization over ``axes`` with gamma broadcast to x."""
    n = np.prod([x.shape[a] for a in axes]) if axes else 1
    mean = x.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    xhat = (x - mean) * inv
    g = dy * gamma
    dx = inv / n * (n * g - g.sum(axis=axes, keepdims=True)
                    - xhat * (g * xhat).sum(axis=axes, keepdims=True))
    return dx, xhat


def layer_norm_grad_ref(x, gamma, dy, axis=-1, eps=1e-5):
    axis %= x.ndim
    dx, xhat = _ln_grad(x, gamma, dy, tuple(range(axis, x.ndim)), eps)
    lead = tuple(range(axis))
    return [dx, (dy * xhat).sum(axis=lead), dy.sum(axis=lead)]


def group_norm_ref(x, gamma, beta, groups, eps=1e-5):
    n, c = x.shape[:2]
    g = x.reshape(n, groups, -1) if x.size else x.reshape(n, groups, 0)
    mean = g.mean(axis=2, keepdims=True)
    var = g.var(axis=2, keepdims=True)
    xhat = ((g - mean) / np.sqrt(var + eps)).reshape(x.shape)
    return xhat * _per_channel(gamma, x) + _per_channel(beta, x)


def group_norm_grad_ref(x, gamma, dy, groups, eps=1e-5):
    n, c = x.shape[:2]
    grouped = (n, groups, (c // groups) * int(np.prod(x.shape[2:])))
    gam = np.broadcast_to(_per_channel(gamma, x), x.shape).reshape(grouped)
    dx, xhat = _ln_grad(x.reshape(grouped), gam, dy.reshape(grouped), (2,), eps)
    axes = _channel_axes(x)
    return [dx.reshape(x.shape), (dy * xhat.reshape(x.shape)).sum(axis=axes),
            dy.sum(axis=axes)]


# ------------------------------------------------------------------ inputs

NC_SHAPES = [(4, 3), (2, 3, 5), (2, 3, 4, 5), (1, 2, 3, 3), (1, 4), (0, 3, 2, 2)]


def _x(rng, dt, shape, offset=2.0):
    """Values around ``offset`` (so a wrong mean shows) with spread ~1."""
    return (offset + rng.uniform(-1.5, 1.5, shape)).astype(dt)


def _param(rng, dt, shape, low=0.5, high=1.5):
    return rng.uniform(low, high, shape).astype(dt)


def _bn_inputs(rng, dt, shape):
    c = (shape[1],)
    return [_x(rng, dt, shape), _param(rng, dt, c), _param(rng, dt, c, -1, 1),
            _param(rng, dt, c, 1.0, 3.0), _param(rng, dt, c, 0.5, 2.0)]


def _bn_grad_inputs(rng, dt, shape):
    c = (shape[1],)
    return [_x(rng, dt, shape), _param(rng, dt, c), _param(rng, dt, c, 1.0, 3.0),
            _param(rng, dt, c, 0.5, 2.0), rng.standard_normal(shape).astype(dt),
            rng.standard_normal(c).astype(dt), rng.standard_normal(c).astype(dt)]


BN_ATTRS = [{}, {"training": False}, {"eps": 1e-3}, {"eps": 0.1, "training": False}]


@op_case("BatchNorm", inputs=_bn_inputs, reference=batch_norm_ref,
         attrs=BN_ATTRS, shapes=NC_SHAPES, tol=4)
def test_batch_norm(case):
    case.check_forward()


@op_case("BatchNormGrad", inputs=_bn_grad_inputs, reference=batch_norm_grad_ref,
         attrs=BN_ATTRS, shapes=NC_SHAPES, tol=10)
def test_batch_norm_grad(case):
    case.check_forward()


LN_SHAPES = [(4, 5), (2, 3, 4), (1, 6), (0, 5), (3, 0), (7,)]
LN_ATTRS = [{"axis": -1}, {"axis": 1}, {"axis": 0}, {"axis": -2, "eps": 1e-2}]


def _ln_valid(case):
    return -len(case.shape) <= case.attrs["axis"] < len(case.shape)


def _ln_inputs(rng, dt, shape, attrs):
    p = shape[attrs["axis"] % len(shape):]
    return [_x(rng, dt, shape), _param(rng, dt, p), _param(rng, dt, p, -1, 1)]


def _ln_grad_inputs(rng, dt, shape, attrs):
    p = shape[attrs["axis"] % len(shape):]
    return [_x(rng, dt, shape), _param(rng, dt, p),
            rng.standard_normal(shape).astype(dt)]


@op_case("LayerNorm", inputs=_ln_inputs, reference=layer_norm_ref,
         attrs=LN_ATTRS, shapes=LN_SHAPES, select=_ln_valid, tol=4)
def test_layer_norm(case):
    case.check_forward()


@op_case("LayerNormGrad", inputs=_ln_grad_inputs, reference=layer_norm_grad_ref,
         attrs=LN_ATTRS, shapes=LN_SHAPES, select=_ln_valid, tol=10)
def test_layer_norm_grad(case):
    case.check_forward()


GN_SHAPES = [(2, 6), (2, 6, 5), (1, 4, 3, 3), (0, 4, 2, 2), (3, 4, 0)]
GN_ATTRS = [{"groups": 1}, {"groups": 2}, {"groups": 4, "eps": 1e-3}, {"groups": 6}]


def _gn_valid(case):
    return case.shape[1] % case.attrs["groups"] == 0


def _gn_inputs(rng, dt, shape):
    c = (shape[1],)
    return [_x(rng, dt, shape), _param(rng, dt, c), _param(rng, dt, c, -1, 1)]


def _gn_grad_inputs(rng, dt, shape):
    return [_x(rng, dt, shape), _param(rng, dt, (shape[1],)),
            rng.standard_normal(shape).astype(dt)]


@op_case("GroupNorm", inputs=_gn_inputs, reference=group_norm_ref,
         attrs=GN_ATTRS, shapes=GN_SHAPES, select=_gn_valid, tol=4)
def test_group_norm(case):
    case.check_forward()


@op_case("GroupNormGrad", inputs=_gn_grad_inputs, reference=group_norm_grad_ref,
         attrs=GN_ATTRS, shapes=GN_SHAPES, select=_gn_valid, tol=10)
def test_group_norm_grad(case):
    case.check_forward()


# Shapes large enough for the parallel paths (and column-blocked sums).
@pytest.mark.parametrize("op, ref, make, attrs", [
    ("BatchNorm", batch_norm_ref, _bn_inputs, {}),
    ("BatchNormGrad", batch_norm_grad_ref, _bn_grad_inputs, {}),
    ("GroupNorm", group_norm_ref, _gn_inputs, {"groups": 4}),
    ("GroupNormGrad", group_norm_grad_ref, _gn_grad_inputs, {"groups": 4}),
])
def test_norm_parallel_path(op, ref, make, attrs):
    rng = np.random.default_rng(1)
    OpCase.of(op, make(rng, "float32", (8, 16, 20, 20)), ref, attrs=attrs,
              tol=20).check_forward()


@pytest.mark.parametrize("op, ref, make", [
    ("LayerNorm", layer_norm_ref, _ln_inputs),
    ("LayerNormGrad", layer_norm_grad_ref, _ln_grad_inputs),
])
def test_layer_norm_parallel_path(op, ref, make):
    rng = np.random.default_rng(2)
    attrs = {"axis": 1}
    OpCase.of(op, make(rng, "float32", (256, 8, 24), attrs), ref, attrs=attrs,
              tol=20).check_forward()


# ------------------------------------------------------------ semantics


def test_batch_norm_is_stable_far_from_zero():
    """Two-pass statistics: a large offset does not swamp a small spread."""
    import dragon_core as dg

    rng = np.random.default_rng(4)
    x = (1e4 + rng.standard_normal((64, 2, 8))).astype(np.float32)
    c = np.ones(2, np.float32)
    y, mean, var = dg.ops.batch_norm(*(dg.tensor(a) for a in (x, c, 0 * c, c, c)))
    want = batch_norm_ref(x.astype(np.float64), *(a.astype(np.float64) for a in (c, 0 * c, c, c)))
    np.testing.assert_allclose(var.numpy(), want[2], rtol=2e-3)
    np.testing.assert_allclose(y.numpy(), want[0], atol=2e-3)


def test_batch_norm_empty_batch_gives_nan_statistics():
    import dragon_core as dg

    x = dg.tensor(np.zeros((0, 3, 2), np.float32))
    p = dg.tensor(np.ones(3, np.float32))
    y, mean, var = dg.ops.batch_norm(x, p, p, p, p)
    assert y.shape == (0, 3, 2)
    assert np.isnan(mean.numpy()).all() and np.isnan(var.numpy()).all()
    y, mean, var = dg.ops.batch_norm(x, p, p, p, p, training=False)
    np.testing.assert_array_equal(mean.numpy(), np.ones(3))


def test_batch_norm_does_not_touch_running_stats():
    import dragon_core as dg

    rng = np.random.default_rng(5)
    rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    args = [_x(rng, "float32", (4, 3)), np.ones(3, np.float32), np.zeros(3, np.float32), rm, rv]
    dg.ops.batch_norm(*(dg.from_numpy(a) for a in args))
    np.testing.assert_array_equal(rm, 0.0)
    np.testing.assert_array_equal(rv, 1.0)


def test_norm_python_names():
    import dragon_core as dg

    for name in ("batch_norm", "layer_norm", "group_norm", "batch_norm_grad",
                 "layer_norm_grad", "group_norm_grad"):
        assert callable(getattr(dg.ops, name))


# ------------------------------------------------------------ bad input


def _f32(*shape):
    import dragon_core as dg

    return dg.tensor(np.ones(shape, np.float32))


@pytest.mark.parametrize("op, args, attrs, shapes, words", [
    ("BatchNorm", [(4,), (4,), (4,), (4,), (4,)], {}, [(4,)], ["rank >= 2"]),
    ("BatchNorm", [(2, 3), (4,), (3,), (3,), (3,)], {}, [(4,), (3,)], ["gamma"]),
    ("BatchNorm", [(2, 3), (3,), (3,), (3, 1), (3,)], {}, [(3, 1)], ["running_mean"]),
    ("BatchNorm", [(2, 3), (3,), (3,), (3,), (3,)], {"eps": -1.0}, [], ["eps"]),
    ("LayerNorm", [(2, 3), (2, 3), (3,)], {}, [(2, 3), (3,)], ["gamma"]),
    ("LayerNorm", [(2, 3), (2, 3), (2, 3)], {"axis": 2}, [(2, 3)], ["axis"]),
    ("LayerNorm", [(2, 3), (3,), (2,)], {}, [(2,)], ["beta"]),
    ("GroupNorm", [(2, 6, 3), (6,), (6,)], {"groups": 4}, [(2, 6, 3)],
     ["groups", "divide"]),
    ("GroupNorm", [(2, 6, 3), (6,), (6,)], {"groups": 0}, [], ["groups", "positive"]),
    ("GroupNorm", [(2, 6, 3), (3,), (6,)], {"groups": 3}, [(3,), (6,)], ["gamma"]),
    ("GroupNorm", [(6,), (6,), (6,)], {"groups": 3}, [(6,)], ["rank >= 2"]),
    ("BatchNormGrad", [(2, 3), (3,), (3,), (3,), (2, 4), (3,), (3,)], {},
     [(2, 4), (2, 3)], ["dy"]),
    ("LayerNormGrad", [(2, 3), (3,), (3, 2)], {}, [(3, 2)], ["dy"]),
    ("GroupNormGrad", [(2, 4), (4,), (2, 4)], {"groups": 3}, [], ["divide"]),
])
def test_bad_input_is_rejected_before_running(op, args, attrs, shapes, words):
    import dragon_core as dg
    from dragon_sdk.testing import op_function

    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        op_function(op)(*(_f32(*s) for s in args), **attrs)
    assert_mentions(str(err.value), op=op, shapes=shapes, words=words)


def test_mixed_and_integer_dtypes_are_rejected():
    import dragon_core as dg

    x = dg.tensor(np.ones((2, 3), np.float32))
    p64 = dg.tensor(np.ones(3, np.float64))
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.batch_norm(x, p64, p64, p64, p64)
    assert_mentions(str(err.value), op="BatchNorm", words=["float32", "float64"])
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.layer_norm(dg.tensor(np.ones((2, 3), np.int64)), _f32(3), _f32(3))
    assert_mentions(str(err.value), op="LayerNorm", words=["int64"])


@pytest.mark.parametrize("training", [True, False])
def test_eager_matches_graph_mode(training):
    """A conv-free CNN block (norms + pooling) and its gradients, eagerly
    and as one @dg.function graph."""
    import dragon_core as dg

    rng = np.random.default_rng(6)
    x = dg.tensor(_x(rng, "float64", (2, 4, 6, 6)))
    gamma = dg.tensor(_param(rng, "float64", (4,)))
    beta = dg.tensor(_param(rng, "float64", (4,), -1, 1))
    rm = dg.tensor(_param(rng, "float64", (4,), 1, 3))
    rv = dg.tensor(_param(rng, "float64", (4,), 0.5, 2))
    lg = dg.tensor(_param(rng, "float64", (3, 3)))
    lb = dg.tensor(_param(rng, "float64", (3, 3)))

    def block(x, gamma, beta, rm, rv, lg, lb):
        with dg.GradientTape() as tape:
            tape.watch([x, gamma, beta, lg, lb])
            h, mean, var = dg.ops.batch_norm(x, gamma, beta, rm, rv, training=training)
            h = dg.ops.group_norm(h, gamma, beta, 2)
            h = dg.ops.max_pool2d(h, [2, 2])
            h = dg.ops.layer_norm(h, lg, lb, axis=2)
            loss = dg.ops.sum(h * h) + dg.ops.sum(var * mean)
        return [loss] + tape.gradient(loss, [x, gamma, beta, lg, lb])

    args = (x, gamma, beta, rm, rv, lg, lb)
    eager = [t.numpy() for t in block(*args)]
    graph = [t.numpy() for t in dg.function(block)(*args)]
    for e, g in zip(eager, graph):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_backward_is_repeatable(dt):
    """Parameter gradients are summed in a fixed order, run after run."""
    import dragon_core as dg

    rng = np.random.default_rng(7)
    args = [dg.tensor(a) for a in _bn_grad_inputs(rng, dt, (16, 8, 32, 32))]
    first = [t.numpy().copy() for t in dg.ops.batch_norm_grad(*args)]
    for _ in range(2):
        again = [t.numpy() for t in dg.ops.batch_norm_grad(*args)]
        for a, b in zip(first, again):
            np.testing.assert_array_equal(a, b)
