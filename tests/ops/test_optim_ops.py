"""Fused optimizer update ops (SgdUpdate, AdamUpdate, RmspropUpdate,
AdagradUpdate) against float64 NumPy references of PyTorch's update rules,
run for several steps on their own outputs."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

DTYPES = ["float32", "float64"]
STEPS = 5


def _tol(dtype):
    # float32 results are compared with float64 references after several
    # steps; values reach ~10, where one float32 rounding is ~1e-6.
    return dict(rtol=2e-5, atol=2e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)


def T(a, dtype=None):  # noqa: N802
    a = np.asarray(a)
    return dg.tensor(a if dtype is None else a.astype(dtype))


def lr_t(lr):
    return dg.tensor(np.float64(lr))


def step_t(step, dtype="int64"):
    return dg.tensor(np.array(step, dtype=dtype))


def _grads(rng, shape, n=STEPS):
    return [rng.uniform(-2.0, 2.0, shape) for _ in range(n)]


# ------------------------------------------------------------ references


def sgd_ref(p, g, buf, lr, momentum=0.0, dampening=0.0, nesterov=False,
            weight_decay=0.0, maximize=False):
    g = -g if maximize else g
    g = g + weight_decay * p
    if momentum:
        buf = momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf
    return p - lr * g, buf


def adam_ref(p, g, m, v, vmax, lr, step, beta1=0.9, beta2=0.999, eps=1e-8,
             weight_decay=0.0, decoupled=False, amsgrad=False, maximize=False):
    g = -g if maximize else g
    if decoupled:
        p = p * (1 - lr * weight_decay)
    else:
        g = g + weight_decay * p
    m = beta1 * m + (1 - beta1) * g
    v = beta2 * v + (1 - beta2) * g * g
    if amsgrad:
        vmax = np.maximum(vmax, v)
        den = np.sqrt(vmax) / np.sqrt(1 - beta2 ** step) + eps
    else:
        den = np.sqrt(v) / np.sqrt(1 - beta2 ** step) + eps
    return p - lr / (1 - beta1 ** step) * m / den, m, v, vmax


def rmsprop_ref(p, g, s, buf, a, lr, alpha=0.99, eps=1e-8, weight_decay=0.0,
                momentum=0.0, centered=False, maximize=False):
    g = -g if maximize else g
    g = g + weight_decay * p
    s = alpha * s + (1 - alpha) * g * g
    if centered:
        a = alpha * a + (1 - alpha) * g
        den = np.sqrt(s - a * a) + eps
    else:
        den = np.sqrt(s) + eps
    if momentum:
        buf = momentum * buf + g / den
        return p - lr * buf, s, buf, a
    return p - lr * g / den, s, buf, a


def adagrad_ref(p, g, acc, lr, step, lr_decay=0.0, weight_decay=0.0, eps=1e-10,
                maximize=False):
    g = -g if maximize else g
    g = g + weight_decay * p
    acc = acc + g * g
    clr = lr / (1 + (step - 1) * lr_decay)
    return p - clr * g / (np.sqrt(acc) + eps), acc


# ------------------------------------------------------------ SGD


SGD_ATTRS = [{}, {"momentum": 0.9}, {"momentum": 0.9, "dampening": 0.3},
             {"momentum": 0.8, "nesterov": True}, {"weight_decay": 0.1},
             {"momentum": 0.5, "weight_decay": 0.01, "nesterov": True, "maximize": True}]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", SGD_ATTRS, ids=lambda a: ",".join(a) or "plain")
@pytest.mark.parametrize("shape", [(), (7,), (3, 5), (0,), (211, 173)])
def test_sgd_update(rng, dtype, attrs, shape):
    lr = 0.05
    p0 = rng.uniform(-1, 1, shape)
    use_buf = attrs.get("momentum", 0) != 0
    p, buf = T(p0, dtype), T(np.zeros(shape if use_buf else (0,)), dtype)
    rp, rbuf = p0.astype(dtype).astype(np.float64), np.zeros(shape)
    for g in _grads(rng, shape):
        g = g.astype(dtype)
        p, buf = dg.ops.sgd_update(p, T(g), buf, lr_t(lr), **attrs)
        rp, rbuf = sgd_ref(rp, g.astype(np.float64), rbuf, lr, **attrs)
        assert p.dtype.name == dtype and tuple(p.shape) == shape
    np.testing.assert_allclose(p.numpy(), rp, **_tol(dtype))
    if use_buf:
        np.testing.assert_allclose(buf.numpy(), rbuf, **_tol(dtype))
    else:
        assert tuple(buf.shape) == (0,)


def test_sgd_first_step_with_dampening_scales_grad():
    # The buffer starts at zero: buf_1 = (1 - dampening) * g (documented).
    g = np.array([1.0, -2.0])
    p, buf = dg.ops.sgd_update(T(np.zeros(2)), T(g), T(np.zeros(2)), lr_t(1.0),
                               momentum=0.9, dampening=0.25)
    np.testing.assert_allclose(buf.numpy(), 0.75 * g)
    np.testing.assert_allclose(p.numpy(), -0.75 * g)


def test_sgd_lr_float32_tensor_and_inputs_untouched():
    p0, g0 = np.array([1.0, 2.0], np.float32), np.array([0.5, -1.0], np.float32)
    p, g = T(p0), T(g0)
    out, _ = dg.ops.sgd_update(p, g, T(np.zeros(0, np.float32)),
                               dg.tensor(np.float32(0.5)))
    np.testing.assert_allclose(out.numpy(), p0 - 0.5 * g0)
    np.testing.assert_array_equal(p.numpy(), p0)
    np.testing.assert_array_equal(g.numpy(), g0)


# ------------------------------------------------------------ Adam


ADAM_ATTRS = [{}, {"weight_decay": 0.1}, {"weight_decay": 0.1, "decoupled": True},
              {"amsgrad": True}, {"beta1": 0.5, "beta2": 0.9, "eps": 1e-3, "maximize": True},
              {"amsgrad": True, "weight_decay": 0.05, "decoupled": True}]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", ADAM_ATTRS, ids=lambda a: ",".join(a) or "plain")
@pytest.mark.parametrize("shape", [(), (9,), (4, 3), (2, 0), (211, 173)])
def test_adam_update(rng, dtype, attrs, shape, step_dtype="int64"):
    lr = 0.01
    amsgrad = attrs.get("amsgrad", False)
    ref_attrs = dict(attrs)
    p0 = rng.uniform(-1, 1, shape)
    zeros = np.zeros(shape)
    p, m, v = T(p0, dtype), T(zeros, dtype), T(zeros, dtype)
    vmax = T(zeros if amsgrad else np.zeros(0), dtype)
    rp, rm, rv, rvmax = p0.astype(dtype).astype(np.float64), zeros, zeros, zeros
    for k, g in enumerate(_grads(rng, shape), start=1):
        g = g.astype(dtype)
        p, m, v, vmax = dg.ops.adam_update(p, T(g), m, v, vmax, lr_t(lr),
                                           step_t(k, step_dtype), **attrs)
        rp, rm, rv, rvmax = adam_ref(rp, g.astype(np.float64), rm, rv, rvmax, lr, k,
                                     **ref_attrs)
    tol = _tol(dtype)
    np.testing.assert_allclose(p.numpy(), rp, **tol)
    np.testing.assert_allclose(m.numpy(), rm, **tol)
    np.testing.assert_allclose(v.numpy(), rv, **tol)
    if amsgrad:
        np.testing.assert_allclose(vmax.numpy(), rvmax, **tol)
    else:
        assert tuple(vmax.shape) == (0,)


@pytest.mark.parametrize("step_dtype", ["int32", "float32", "float64"])
def test_adam_update_step_dtypes(rng, step_dtype):
    test_adam_update(rng, "float64", {"amsgrad": True}, (4, 3), step_dtype)


def test_adam_first_step_moves_by_lr():
    # Bias correction: the first Adam step moves each element by ~lr.
    g = np.array([3.0, -0.01, 1e3])
    p, *_ = dg.ops.adam_update(T(np.zeros(3)), T(g), T(np.zeros(3)), T(np.zeros(3)),
                               T(np.zeros(0)), lr_t(0.1), step_t(1), eps=0.0)
    np.testing.assert_allclose(p.numpy(), -0.1 * np.sign(g), rtol=1e-12)


def test_amsgrad_keeps_the_maximum():
    z = T(np.zeros(2))
    _, _, v, vmax = dg.ops.adam_update(z, T(np.array([2.0, 2.0])), z, z, z, lr_t(0.1),
                                       step_t(1), amsgrad=True)
    _, _, v2, vmax2 = dg.ops.adam_update(z, T(np.array([0.0, 0.0])), z, v, vmax, lr_t(0.1),
                                         step_t(2), amsgrad=True)
    assert (v2.numpy() < v.numpy()).all()
    np.testing.assert_array_equal(vmax2.numpy(), vmax.numpy())


# ------------------------------------------------------------ RMSprop


RMSPROP_ATTRS = [{}, {"momentum": 0.9}, {"centered": True},
                 {"centered": True, "momentum": 0.5, "weight_decay": 0.1},
                 {"alpha": 0.9, "eps": 1e-4, "maximize": True}]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", RMSPROP_ATTRS, ids=lambda a: ",".join(a) or "plain")
@pytest.mark.parametrize("shape", [(), (6,), (3, 4), (0, 2), (211, 173)])
def test_rmsprop_update(rng, dtype, attrs, shape):
    lr = 0.01
    use_m, centered = attrs.get("momentum", 0) != 0, attrs.get("centered", False)
    p0, zeros = rng.uniform(-1, 1, shape), np.zeros(shape)
    p, s = T(p0, dtype), T(zeros, dtype)
    buf = T(zeros if use_m else np.zeros(0), dtype)
    a = T(zeros if centered else np.zeros(0), dtype)
    rp, rs, rbuf, ra = p0.astype(dtype).astype(np.float64), zeros, zeros, zeros
    for g in _grads(rng, shape):
        g = g.astype(dtype)
        p, s, buf, a = dg.ops.rmsprop_update(p, T(g), s, buf, a, lr_t(lr), **attrs)
        rp, rs, rbuf, ra = rmsprop_ref(rp, g.astype(np.float64), rs, rbuf, ra, lr, **attrs)
    tol = _tol(dtype)
    np.testing.assert_allclose(p.numpy(), rp, **tol)
    np.testing.assert_allclose(s.numpy(), rs, **tol)
    if use_m:
        np.testing.assert_allclose(buf.numpy(), rbuf, **tol)
    if centered:
        np.testing.assert_allclose(a.numpy(), ra, **tol)


# ------------------------------------------------------------ Adagrad


ADAGRAD_ATTRS = [{}, {"lr_decay": 0.1}, {"weight_decay": 0.2, "eps": 1e-6},
                 {"lr_decay": 0.05, "maximize": True}]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", ADAGRAD_ATTRS, ids=lambda a: ",".join(a) or "plain")
@pytest.mark.parametrize("shape", [(), (5,), (2, 3), (0,), (211, 173)])
def test_adagrad_update(rng, dtype, attrs, shape):
    lr = 0.1
    p0 = rng.uniform(-1, 1, shape)
    acc0 = np.full(shape, 0.1)
    p, acc = T(p0, dtype), T(acc0, dtype)
    rp, racc = p0.astype(dtype).astype(np.float64), acc0.astype(dtype).astype(np.float64)
    for k, g in enumerate(_grads(rng, shape), start=1):
        g = g.astype(dtype)
        p, acc = dg.ops.adagrad_update(p, T(g), acc, lr_t(lr), step_t(k), **attrs)
        rp, racc = adagrad_ref(rp, g.astype(np.float64), racc, lr, k, **attrs)
    np.testing.assert_allclose(p.numpy(), rp, **_tol(dtype))
    np.testing.assert_allclose(acc.numpy(), racc, **_tol(dtype))


# ------------------------------------------------------------ graph mode


def test_updates_in_graph_mode_match_eager(rng):
    p0, g0 = rng.uniform(-1, 1, (4, 5)), rng.uniform(-1, 1, (4, 5))
    z = np.zeros((4, 5))

    def run(p, g, m, v, lr, step):
        a = dg.ops.adam_update(p, g, m, v, dg.ops.zeros([0], "float64"), lr, step,
                               weight_decay=0.1, decoupled=True)
        b = dg.ops.sgd_update(a[0], g, m, lr, momentum=0.9, nesterov=True)
        c = dg.ops.rmsprop_update(b[0], g, v, m, m, lr, momentum=0.5, centered=True)
        d = dg.ops.adagrad_update(c[0], g, v, lr, step, lr_decay=0.1)
        return list(a) + list(b) + list(c) + list(d)

    args = [T(p0), T(g0), T(z), T(z), lr_t(0.05), step_t(3)]
    eager = run(*args)
    graph = dg.function(run)(*args)
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(e.numpy(), g.numpy())


# ------------------------------------------------------------ errors


def _sgd_args(p_shape=(2, 3), g_shape=(2, 3), p_dtype="float32", g_dtype="float32"):
    return [T(np.ones(p_shape), p_dtype), T(np.ones(g_shape), g_dtype),
            T(np.zeros(p_shape), p_dtype), lr_t(0.1)]


def test_grad_shape_mismatch_names_op_and_shapes():
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.sgd_update(*_sgd_args(g_shape=(3, 2)))
    msg = str(info.value)
    assert "SgdUpdate" in msg and "[3, 2]" in msg and "[2, 3]" in msg and "grad" in msg


def test_grad_dtype_mismatch_names_op_and_dtypes():
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.sgd_update(*_sgd_args(g_dtype="float64"))
    msg = str(info.value)
    assert "SgdUpdate" in msg and "float64" in msg and "float32" in msg


@pytest.mark.parametrize("op, args, attrs, words", [
    ("adam_update", lambda: [T(np.ones(3)), T(np.ones(3)), T(np.ones(2)), T(np.ones(3)),
                             T(np.zeros(0)), lr_t(0.1), step_t(1)], {},
     ["AdamUpdate", "exp_avg", "[2]", "[3]"]),
    ("adam_update", lambda: [T(np.ones(3)), T(np.ones(3)), T(np.ones(3)), T(np.ones(3)),
                             T(np.zeros(0)), lr_t(0.1), step_t(1)], {"amsgrad": True},
     ["AdamUpdate", "max_exp_avg_sq", "amsgrad"]),
    ("adam_update", lambda: [T(np.ones(3)), T(np.ones(3)), T(np.ones(3)), T(np.ones(3)),
                             T(np.zeros(0)), lr_t(0.1), step_t(1)], {"beta1": 1.0},
     ["AdamUpdate", "beta1"]),
    ("rmsprop_update", lambda: [T(np.ones(3)), T(np.ones(3)), T(np.ones(3)), T(np.ones(0)),
                                T(np.ones(0)), lr_t(0.1)], {"centered": True},
     ["RmspropUpdate", "grad_avg", "centered"]),
    ("adagrad_update", lambda: [T(np.ones(3)), T(np.ones(3)), T(np.ones(3)),
                                dg.tensor(np.ones(2)), step_t(1)], {},
     ["AdagradUpdate", "lr", "one value"]),
    ("sgd_update", lambda: _sgd_args(), {"nesterov": True},
     ["SgdUpdate", "nesterov", "momentum"]),
    ("sgd_update", lambda: _sgd_args(), {"momentum": -0.1}, ["SgdUpdate", "momentum"]),
    ("sgd_update", lambda: [T(np.ones(2), "float32"), T(np.ones(2), "float32"),
                            T(np.ones(0), "float64"), lr_t(0.1)], {},
     ["SgdUpdate", "momentum_buf", "float64"]),
])
def test_bad_input_is_rejected_before_running(op, args, attrs, words):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, op)(*args(), **attrs)
    for w in words:
        assert w in str(info.value), (w, str(info.value))


@pytest.mark.parametrize("step", [0, -1])
def test_step_below_one_is_an_error(step):
    z = T(np.zeros(3))
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"AdamUpdate.*step must be >= 1"):
        dg.ops.adam_update(z, z, z, z, T(np.zeros(0)), lr_t(0.1), step_t(step))
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"AdagradUpdate.*step"):
        dg.ops.adagrad_update(z, z, z, lr_t(0.1), step_t(step))


def test_integer_param_is_rejected():
    i = dg.tensor(np.ones(3, np.int64))
    with pytest.raises(dg.errors.InvalidArgumentError, match="SgdUpdate.*int64"):
        dg.ops.sgd_update(i, i, i, lr_t(0.1))


def test_lr_must_be_float():
    z = T(np.zeros(3))
    with pytest.raises(dg.errors.InvalidArgumentError, match="SgdUpdate.*lr"):
        dg.ops.sgd_update(z, z, z, dg.tensor(np.int64(1)))
