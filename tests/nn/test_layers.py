"""nn layers: wiring against NumPy references, eager == graph, state updates."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import nn
from dragon_core.nn import functional as F

RNG = np.random.default_rng(0)


def _x(*shape, dtype=np.float32):
    return dg.tensor(RNG.standard_normal(shape).astype(dtype))


def _graph_equals_eager(module, *inputs, rtol=1e-5, atol=1e-6):
    f = dg.function(lambda *a: module(*a))
    eager = module(*inputs).numpy()
    graph = f(*inputs).numpy()
    np.testing.assert_allclose(graph, eager, rtol=rtol, atol=atol)
    return eager


def _bn_reference(x, gamma, beta, eps=1e-5):
    axes = (0,) + tuple(range(2, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    shape = [1, -1] + [1] * (x.ndim - 2)
    return (x - mean) / np.sqrt(var + eps) * gamma.reshape(shape) + beta.reshape(shape)


def test_batchnorm2d_training_updates_running_stats_like_pytorch():
    bn = nn.BatchNorm2d(3, momentum=0.2)
    init_gamma = RNG.uniform(0.5, 1.5, 3).astype(np.float32)
    bn.weight.assign(dg.tensor(init_gamma))
    x = RNG.standard_normal((4, 3, 5, 5)).astype(np.float32) * 2 + 1
    y = bn(dg.tensor(x)).numpy()
    np.testing.assert_allclose(y, _bn_reference(x.astype(np.float64), init_gamma, np.zeros(3)),
                               rtol=1e-4, atol=1e-4)
    n = 4 * 5 * 5
    mean = x.mean(axis=(0, 2, 3))
    var_unbiased = x.var(axis=(0, 2, 3)) * n / (n - 1)
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * mean, rtol=1e-5)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * var_unbiased, rtol=1e-5)
    # eval: the running statistics normalise.
    bn.eval()
    y = bn(dg.tensor(x)).numpy()
    rm, rv = bn.running_mean.numpy(), bn.running_var.numpy()
    ref = (x - rm[None, :, None, None]) / np.sqrt(rv[None, :, None, None] + 1e-5) \
        * init_gamma[None, :, None, None]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)


def test_batchnorm_graph_mode_updates_running_stats_every_run():
    eager, graph = nn.BatchNorm1d(4), nn.BatchNorm1d(4)
    f = dg.function(lambda x: graph(x))
    for _ in range(3):
        x = _x(8, 4)
        np.testing.assert_allclose(f(x).numpy(), eager(x).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(graph.running_mean.numpy(), eager.running_mean.numpy(),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(graph.running_var.numpy(), eager.running_var.numpy(),
                               rtol=1e-5)
    assert f.trace_count == 1


def test_batchnorm_errors():
    bn = nn.BatchNorm2d(3)
    with pytest.raises(ValueError, match="BatchNorm2d: expected input of rank 4"):
        bn(_x(2, 3))
    with pytest.raises(ValueError, match="BatchNorm2d: input has 5 channels"):
        bn(_x(2, 5, 2, 2))
    with pytest.raises(ValueError, match="more than one value per channel"):
        nn.BatchNorm1d(3)(_x(1, 3))


def test_layernorm_and_groupnorm():
    x = RNG.standard_normal((2, 4, 3, 3))
    ln = nn.LayerNorm([3, 3]).double()
    y = ln(dg.tensor(x)).numpy()
    m = x.mean(axis=(2, 3), keepdims=True)
    v = x.var(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(y, (x - m) / np.sqrt(v + 1e-5), rtol=1e-10)
    gn = nn.GroupNorm(2, 4).double()
    y = gn(dg.tensor(x)).numpy()
    g = x.reshape(2, 2, -1)
    ref = ((g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5))
    np.testing.assert_allclose(y, ref.reshape(x.shape), rtol=1e-10)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(3, 4)
    with pytest.raises(ValueError, match="normalized_shape"):
        ln(dg.tensor(RNG.standard_normal((2, 4, 3, 2))))


def test_pooling_layers():
    x = _x(2, 3, 7, 7)
    a = x.numpy()
    y = nn.MaxPool2d(2)(x).numpy()
    ref = a[:, :, :6, :6].reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))
    np.testing.assert_array_equal(y, ref)
    y = nn.AvgPool2d(3, stride=2)(x).numpy()
    assert y.shape == (2, 3, 3, 3)
    np.testing.assert_allclose(y[:, :, 0, 0], a[:, :, :3, :3].mean(axis=(2, 3)), rtol=1e-5)
    y = nn.AdaptiveAvgPool2d(1)(x).numpy()
    np.testing.assert_allclose(y[..., 0, 0], a.mean(axis=(2, 3)), rtol=1e-5)
    y = nn.AdaptiveAvgPool2d((None, 1))(x)
    assert y.shape == (2, 3, 7, 1)


def test_dropout_train_eval_and_graph():
    drop = nn.Dropout(0.5)
    x = dg.ops.ones([1000])
    y = drop(x).numpy()
    assert set(np.unique(y)) <= {0.0, 2.0} and 0.4 < (y == 0).mean() < 0.6
    drop.eval()
    np.testing.assert_array_equal(drop(x).numpy(), np.ones(1000))
    drop.train()
    f = dg.function(lambda x: drop(x))
    a, b = f(x).numpy(), f(x).numpy()
    assert not np.array_equal(a, b), "graph-mode dropout must draw a new mask per run"
    with pytest.raises(ValueError):
        nn.Dropout(1.5)


def test_embedding_padding_row_gets_no_gradient():
    emb = nn.Embedding(5, 3, padding_idx=-1)
    assert emb.padding_idx == 4
    assert np.all(emb.weight.numpy()[4] == 0)
    idx = dg.tensor(np.array([[0, 4], [4, 2]], dtype=np.int64))
    y = emb(idx)
    assert y.shape == (2, 2, 3)
    np.testing.assert_array_equal(y.numpy()[0, 0], emb.weight.numpy()[0])
    y.sum().backward()
    g = emb.weight.grad.numpy()
    np.testing.assert_array_equal(g[4], 0)
    np.testing.assert_array_equal(g[0], 1)
    np.testing.assert_array_equal(g[1], 0)


def test_losses_match_numpy():
    logits = RNG.standard_normal((6, 4))
    target = np.array([0, 3, 1, 1, -100, 2])
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    keep = target != -100
    ref = -logp[keep, target[keep]].mean()
    got = nn.CrossEntropyLoss()(dg.tensor(logits), dg.tensor(target)).item()
    assert got == pytest.approx(ref, rel=1e-12)
    got = nn.NLLLoss()(dg.tensor(logp), dg.tensor(target)).item()
    assert got == pytest.approx(ref, rel=1e-12)
    a, b = RNG.standard_normal(10), RNG.standard_normal(10)
    assert nn.MSELoss()(dg.tensor(a), dg.tensor(b)).item() == pytest.approx(np.mean((a - b) ** 2))
    assert nn.L1Loss(reduction="sum")(dg.tensor(a), dg.tensor(b)).item() == pytest.approx(
        np.abs(a - b).sum())
    d = np.abs(a - b)
    ref = np.where(d < 0.5, 0.5 * d ** 2 / 0.5, d - 0.25).mean()
    assert nn.SmoothL1Loss(beta=0.5)(dg.tensor(a), dg.tensor(b)).item() == pytest.approx(ref)
    t = (RNG.random(10) > 0.5).astype(np.float64)
    p = 1 / (1 + np.exp(-a))
    ref = -(t * np.log(p) + (1 - t) * np.log(1 - p)).mean()
    assert nn.BCEWithLogitsLoss()(dg.tensor(a), dg.tensor(t)).item() == pytest.approx(ref)
    p_t = p * t + (1 - p) * (1 - t)
    a_t = 0.25 * t + 0.75 * (1 - t)
    ref = (a_t * -np.log(p_t) * (1 - p_t) ** 2).mean()
    assert nn.SigmoidFocalLoss()(dg.tensor(a), dg.tensor(t)).item() == pytest.approx(ref)
    with pytest.raises(ValueError, match="reduction"):
        nn.MSELoss(reduction="avg")


def test_small_cnn_eager_equals_graph_and_gradients_flow():
    dg.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(4, 8, 3, padding="same"), nn.GroupNorm(2, 8), nn.GELU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 3))
    model.eval()
    x = _x(2, 1, 6, 6)
    _graph_equals_eager(model, x)
    model.train()
    loss = F.cross_entropy(model(x), dg.tensor(np.array([0, 2])))
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.shape == p.shape, name
        assert np.isfinite(p.grad.numpy()).all(), name


def test_conv_layers_shapes_and_numpy():
    conv = nn.Conv2d(2, 4, (3, 2), stride=(2, 1), padding=1, bias=True).double()
    assert conv.weight.shape == (4, 2, 3, 2)
    x = RNG.standard_normal((1, 2, 5, 4))
    y = conv(dg.tensor(x)).numpy()
    w, b = conv.weight.numpy(), conv.bias.numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (5 + 2 - 3) // 2 + 1, (4 + 2 - 2) + 1
    ref = np.zeros((1, 4, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[0, :, 2 * i:2 * i + 3, j:j + 2]
            ref[0, :, i, j] = np.tensordot(w, patch, axes=([1, 2, 3], [0, 1, 2])) + b
    np.testing.assert_allclose(y, ref, rtol=1e-10)
    t = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
    assert t.weight.shape == (4, 2, 3, 3)
    assert t(_x(1, 4, 3, 3)).shape == (1, 2, 6, 6)
    with pytest.raises(ValueError, match="divisible by groups"):
        nn.Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="same.*stride 1"):
        F.conv2d(_x(1, 1, 4, 4), conv.weight[:, :1].to(dg.float32), stride=2, padding="same")
