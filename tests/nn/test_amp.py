"""Mixed precision: dg.autocast (eager and graph) and dg.GradScaler.

References are float64 NumPy on the operands rounded to bfloat16 exactly as
the cast does (nearest, ties to even); tolerances come from bfloat16's
precision (unit roundoff 2**-8 for a stored result) and float32
accumulation (k * 2**-24 per dot product of length k).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import dragon_core as dg

U_BF16 = 2.0 ** -8
U_F32 = 2.0 ** -24


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), as float64."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def matmul_tol(a: np.ndarray, b: np.ndarray, out_bf16: bool) -> float:
    """Bound on |computed - exact| for a @ b of bfloat16 operands."""
    k = a.shape[-1]
    mag = np.abs(a).max(initial=0.0) * np.abs(b).max(initial=0.0) * k
    tol = 2.0 * k * U_F32 * mag
    if out_bf16:
        tol += U_BF16 * mag
    return float(tol) + 1e-12


@pytest.fixture
def rng():
    return np.random.default_rng(21)


def low_product(a, b):
    """a @ b as autocast computes it: bfloat16 operands, float32 product."""
    return dg.ops.matmul(a.astype("bfloat16"), b.astype("bfloat16"), out_dtype="float32")


# ----------------------------------------------------------------- policy
@pytest.mark.parametrize("shape_a,shape_b", [((5, 7), (7, 3)), ((2, 4, 6), (6, 5)),
                                             ((1, 1), (1, 1)), ((3, 0), (0, 2)), ((9,), (9, 4))])
def test_matmul_runs_in_bf16(rng, shape_a, shape_b):
    a = rng.standard_normal(shape_a).astype(np.float32)
    b = rng.standard_normal(shape_b).astype(np.float32)
    with dg.autocast("cpu", dtype=dg.bfloat16):
        y = dg.ops.matmul(dg.tensor(a), dg.tensor(b))
        y_op = dg.tensor(a) @ dg.tensor(b)
        y_16 = dg.ops.matmul(dg.tensor(a), dg.tensor(b), out_dtype="bfloat16")
    # bfloat16 operands, the float32 accumulator written unrounded
    # (FLOAT32_OUTPUT_OPS); an explicit out_dtype is kept.
    assert y.dtype == dg.float32 and y_op.dtype == dg.float32
    assert y_16.dtype == dg.bfloat16
    ref = bf16(a) @ bf16(b)
    out = y.numpy().astype(np.float64)
    assert out.shape == ref.shape
    if ref.size:   # k == 0 gives zeros: atol 1e-12 makes it exact
        tol = matmul_tol(bf16(a), bf16(b), False)
        np.testing.assert_allclose(out, ref, rtol=0, atol=tol)
        np.testing.assert_array_equal(out, y_op.numpy())
        np.testing.assert_allclose(y_16.astype("float32").numpy(), ref, rtol=0,
                                   atol=matmul_tol(bf16(a), bf16(b), True))


def test_bf16_result_differs_from_fp32(rng):
    """autocast really changes the precision (not a no-op)."""
    a = rng.standard_normal((16, 64)).astype(np.float32)
    b = rng.standard_normal((64, 8)).astype(np.float32)
    y32 = dg.ops.matmul(dg.tensor(a), dg.tensor(b)).numpy()
    with dg.autocast("cpu"):
        y16 = dg.ops.matmul(dg.tensor(a), dg.tensor(b)).numpy()
    assert y32.dtype == np.float32
    assert np.abs(y16 - y32).max() > 0


def test_outside_and_disabled_unchanged(rng):
    a = dg.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    assert (a @ a).dtype == dg.float32
    with dg.autocast("cpu"):
        assert dg.amp.is_autocast_enabled()
        assert dg.amp.get_autocast_dtype() == dg.bfloat16
        with dg.autocast("cpu", enabled=False):
            np.testing.assert_array_equal((a @ a).numpy(), a.numpy() @ a.numpy())
            assert not dg.amp.is_autocast_enabled()
        np.testing.assert_array_equal((a @ a).numpy(), low_product(a, a).numpy())
    assert (a @ a).dtype == dg.float32
    np.testing.assert_array_equal((a @ a).numpy(), a.numpy() @ a.numpy())
    assert dg.amp.get_autocast_dtype() is None


def test_float64_untouched(rng):
    a = dg.tensor(rng.standard_normal((3, 3)))
    with dg.autocast("cpu"):
        assert (a @ a).dtype == dg.float64


def test_float32_ops_upcast(rng):
    x = rng.standard_normal((4, 10)).astype(np.float32)
    xb = dg.tensor(x).astype("bfloat16")
    with dg.autocast("cpu"):
        s = dg.ops.softmax(xb)
        m = dg.ops.reduce_mean(xb) if hasattr(dg.ops, "reduce_mean") else None
    assert s.dtype == dg.float32
    xr = bf16(x)
    e = np.exp(xr - xr.max(-1, keepdims=True))
    np.testing.assert_allclose(s.numpy(), e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)
    if m is not None:
        assert m.dtype == dg.float32
        np.testing.assert_allclose(m.numpy(), xr.mean(), rtol=1e-5)


def test_promote_mixed(rng):
    a = dg.tensor(rng.standard_normal((3,)).astype(np.float32))
    b = a.astype("bfloat16")
    with dg.autocast("cpu"):
        c = dg.ops.add(a, b)
    assert c.dtype == dg.float32
    np.testing.assert_allclose(c.numpy(), a.numpy() + bf16(a.numpy()), rtol=1e-6)


def test_thread_local(rng):
    a = dg.tensor(rng.standard_normal((4, 4)).astype(np.float32))
    seen = []
    with dg.autocast("cpu"):
        t = threading.Thread(target=lambda: seen.append((a @ a).numpy()))
        t.start()
        t.join()
        np.testing.assert_array_equal((a @ a).numpy(), low_product(a, a).numpy())
    np.testing.assert_array_equal(seen[0], a.numpy() @ a.numpy())


def test_bad_arguments():
    with pytest.raises(ValueError, match="device_type must be 'cpu'"):
        dg.autocast("cuda")
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        dg.autocast("cpu", dtype=dg.float32)
    with pytest.raises(TypeError, match="enabled"):
        dg.autocast("cpu", enabled=1)
    with pytest.raises(ValueError, match="bfloat16 or float16"):
        dg.function(lambda x: x, autocast="float64")


def test_decorator(rng):
    a = dg.tensor(rng.standard_normal((2, 2)).astype(np.float32))

    @dg.autocast("cpu")
    def f(x):
        return x @ x
    np.testing.assert_array_equal(f(a).numpy(), low_product(a, a).numpy())
    np.testing.assert_array_equal((a @ a).numpy(), a.numpy() @ a.numpy())


# -------------------------------------------------------------- gradients
def test_linear_gradients(rng):
    """Gradients reach float32 parameters in float32 and match the float64
    reference of the bfloat16 computation."""
    x = rng.standard_normal((6, 5)).astype(np.float32)
    w = rng.standard_normal((4, 5)).astype(np.float32)
    bias = rng.standard_normal((4,)).astype(np.float32)
    tx, tw, tb = dg.tensor(x), dg.tensor(w), dg.tensor(bias)
    tw.requires_grad = True
    tb.requires_grad = True
    tx.requires_grad = True
    with dg.autocast("cpu"):
        y = dg.nn.functional.linear(tx, tw, tb)
        loss = (y * y).sum()
    assert y.dtype == dg.float32       # bf16 matmul written as float32 + float32 bias
    assert loss.dtype == dg.float32
    loss.backward()
    assert tw.grad.dtype == dg.float32 and tx.grad.dtype == dg.float32
    xr, wr = bf16(x), bf16(w)
    yb = xr @ wr.T   # the float32 product of the bf16 operands, not rounded
    yref = yb + bias
    dy = 2.0 * yref
    # the backward matmuls run in bf16 on bf16 dy (the cast's gradient)
    dyb = bf16(dy.astype(np.float32))
    gw, gx, gb = dyb.T @ xr, dyb @ wr, dy.sum(0)
    np.testing.assert_allclose(y.numpy(), yref, rtol=0,
                               atol=matmul_tol(xr, wr, False) + 1e-6)
    np.testing.assert_allclose(tb.grad.numpy(), gb, rtol=U_BF16 * 8, atol=1e-4)
    np.testing.assert_allclose(tw.grad.numpy(), gw, rtol=0,
                               atol=matmul_tol(dyb.T, xr, True) * 2)
    np.testing.assert_allclose(tx.grad.numpy(), gx, rtol=0,
                               atol=matmul_tol(dyb, wr, True) * 2)


def test_gradient_matches_fp32_within_bf16(rng):
    """Against the float32 gradient: within bfloat16's precision of it."""
    x = rng.standard_normal((8, 16)).astype(np.float32)
    w = rng.standard_normal((16, 3)).astype(np.float32)

    def grad_of(autocast: bool):
        tw = dg.tensor(w)
        tw.requires_grad = True
        with dg.autocast("cpu", enabled=autocast):
            loss = dg.ops.matmul(dg.tensor(x), tw).sum()
        loss.backward()
        return tw.grad.numpy().astype(np.float64)
    g32, g16 = grad_of(False), grad_of(True)
    scale = np.abs(x).sum(0).max()
    np.testing.assert_allclose(g16, g32, rtol=0, atol=4 * U_BF16 * scale)


# ------------------------------------------------------------------ graph
def _mlp(rng):
    w1 = dg.tensor((rng.standard_normal((8, 16)) * 0.3).astype(np.float32))
    w2 = dg.tensor((rng.standard_normal((16, 2)) * 0.3).astype(np.float32))
    return w1, w2


def test_graph_option_matches_eager(rng):
    x = dg.tensor(rng.standard_normal((5, 8)).astype(np.float32))
    w1, w2 = _mlp(rng)

    def f(x):
        return dg.ops.softmax(dg.ops.relu(x @ w1) @ w2)

    with dg.autocast("cpu"):
        eager = f(x)
    g = dg.function(f, autocast="bfloat16")
    out = g(x)
    assert out.dtype == eager.dtype == dg.float32
    np.testing.assert_allclose(out.numpy(), eager.numpy(), rtol=1e-6, atol=1e-7)
    ops_in_graph = [n.type for n in g.get_graph(x).op]
    assert "Cast" in ops_in_graph
    plain = dg.function(f)(x)
    assert np.abs(plain.numpy() - out.numpy()).max() > 0


def test_compiled_inside_eager_autocast_retraces(rng):
    x = dg.tensor(rng.standard_normal((3, 8)).astype(np.float32))
    w1, _ = _mlp(rng)
    g = dg.function(lambda x: x @ w1)
    plain = x.numpy() @ w1.numpy()
    np.testing.assert_allclose(g(x).numpy(), plain, rtol=1e-6)
    with dg.autocast("cpu"):
        np.testing.assert_array_equal(g(x).numpy(), low_product(x, w1).numpy())
    np.testing.assert_allclose(g(x).numpy(), plain, rtol=1e-6)
    assert g.trace_count == 2


@pytest.mark.parametrize("compiled", [False, True])
def test_training_under_autocast(rng, compiled):
    """A small classifier trains under autocast (loss falls), eager and compiled."""
    x = rng.standard_normal((64, 8)).astype(np.float32)
    labels = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    model = dg.nn.Sequential(dg.nn.Linear(8, 32), dg.nn.ReLU(), dg.nn.Linear(32, 2))
    opt = dg.optim.Adam(model.parameters(), lr=0.02)
    tx, ty = dg.tensor(x), dg.tensor(labels)

    def step(x, y):
        opt.zero_grad()
        with dg.autocast("cpu"):
            loss = dg.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = dg.function(step) if compiled else step
    losses = [float(fn(tx, ty).numpy()) for _ in range(40)]
    assert all(p.dtype == dg.float32 for p in model.parameters())
    assert losses[-1] < 0.5 * losses[0]


def test_conv2d_bf16(rng):
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    with dg.autocast("cpu"):
        try:
            y = dg.nn.functional.conv2d(dg.tensor(x), dg.tensor(w), padding=1)
        except dg.errors.DragonError as e:  # no bf16 conv kernel: a clear error
            assert "Conv2d" in str(e) and "bfloat16" in str(e)
            pytest.skip(f"no bfloat16 Conv2d kernel installed: {e}")
    assert y.dtype == dg.bfloat16
    xr, wr = bf16(x), bf16(w)
    xp = np.pad(xr, ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((2, 4, 7, 7))
    for i in range(3):
        for j in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, i:i + 7, j:j + 7], wr[:, :, i, j])
    tol = matmul_tol(xr.reshape(2, -1)[:, :27], wr.reshape(4, -1), True)
    np.testing.assert_allclose(y.astype("float32").numpy(), ref, rtol=0, atol=tol)


# ------------------------------------------------------------- GradScaler
def _param(values):
    p = dg.tensor(np.asarray(values, np.float32))
    p.requires_grad = True
    return p


def test_grad_scaler_step_and_unscale():
    p = _param([1.0, -2.0])
    opt = dg.optim.SGD([p], lr=0.5)
    scaler = dg.GradScaler(init_scale=256.0)
    loss = (p * p).sum()
    scaled = scaler.scale(loss)
    np.testing.assert_allclose(scaled.numpy(), 256.0 * 5.0)
    scaled.backward()
    np.testing.assert_allclose(p.grad.numpy(), 256.0 * np.array([2.0, -4.0]))
    assert scaler.step(opt) is True
    np.testing.assert_allclose(p.numpy(), [1.0 - 0.5 * 2.0, -2.0 + 0.5 * 4.0])
    scaler.update()
    assert scaler.get_scale() == 256.0


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_grad_scaler_skips_nonfinite(bad):
    p = _param([1.0, 2.0])
    opt = dg.optim.SGD([p], lr=0.1)
    scaler = dg.GradScaler(init_scale=1024.0, backoff_factor=0.25)
    loss = (p * dg.tensor(np.array([1.0, bad], np.float32))).sum()
    scaler.scale(loss).backward()
    assert scaler.step(opt) is False
    np.testing.assert_array_equal(p.numpy(), [1.0, 2.0])
    scaler.update()
    assert scaler.get_scale() == 256.0


def test_grad_scaler_growth():
    p = _param([1.0])
    opt = dg.optim.SGD([p], lr=0.0)
    scaler = dg.GradScaler(init_scale=2.0, growth_interval=3, growth_factor=4.0)
    scales = []
    for _ in range(7):
        opt.zero_grad()
        scaler.scale((p * p).sum()).backward()
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [2.0, 2.0, 8.0, 8.0, 8.0, 32.0, 32.0]
    state = scaler.state_dict()
    other = dg.GradScaler()
    other.load_state_dict(state)
    assert other.get_scale() == 32.0


def test_grad_scaler_fp16_underflow_recovered():
    """A float16 gradient that underflows unscaled survives with the scaler."""
    def grad_w(scaler):
        w = dg.tensor(np.array([1.0], np.float32))   # float32 master weight
        w.requires_grad = True
        x = dg.tensor(np.array([1e-4], np.float16))
        # float16 compute: dloss/dw16 = x * x ~ 1e-8 is below float16's range
        loss = (w.astype("float16") * x * x).sum()
        (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            opt = dg.optim.SGD([w], lr=1.0)
            scaler.unscale_(opt)
            with pytest.raises(RuntimeError, match="already called"):
                scaler.unscale_(opt)
        return float(w.grad.astype("float32").numpy()[0])
    x16 = float(np.float16(1e-4))
    assert grad_w(None) == 0.0
    # The gradient reaching the float16 loss is the scale itself: 2**12 keeps
    # it (and scale * x) inside float16's range; 2**16 would be inf there.
    assert grad_w(dg.GradScaler(init_scale=2.0 ** 12)) == pytest.approx(x16 * x16, rel=2e-3)


def test_grad_scaler_arguments():
    with pytest.raises(ValueError, match="init_scale"):
        dg.GradScaler(init_scale=0.0)
    with pytest.raises(ValueError, match="growth_factor"):
        dg.GradScaler(growth_factor=1.0)
    with pytest.raises(ValueError, match="backoff_factor"):
        dg.GradScaler(backoff_factor=1.5)
    with pytest.raises(ValueError, match="growth_interval"):
        dg.GradScaler(growth_interval=0)
    s = dg.GradScaler(enabled=False)
    t = dg.tensor(np.float32(3.0))
    assert s.scale(t) is t and s.get_scale() == 1.0
