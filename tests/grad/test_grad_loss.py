"""Gradient rules of the losses (``_grads/loss.py``) against central finite
differences in float64: every reduction, ignore_index, label smoothing, the
[N, C, d...] layout, pos_weight; second order where it is not trivially 0.

Inputs stay away from the kinks (input == target for L1, |d| == beta for
SmoothL1)."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

REDUCTIONS = ["mean", "sum", "none"]


def _pair(shape, seed=0, gap=0.1, probs=False):
    rng = np.random.default_rng(seed)
    if probs:
        x = rng.uniform(-3.0, 3.0, shape)
        t = np.where(rng.random(shape) < 0.5, rng.integers(0, 2, shape), rng.random(shape))
        return x, t.astype(np.float64)
    x = rng.uniform(-2.0, 2.0, shape)
    d = rng.uniform(gap, 1.5, shape) * np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return x, x - d


PAIR_SHAPES = [(), (5,), (3, 4), (0, 2)]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", PAIR_SHAPES, ids=str)
@pytest.mark.parametrize("op,attrs", [
    ("MseLoss", {}),
    ("L1Loss", {}),
    ("SmoothL1Loss", {}),
    ("SmoothL1Loss", {"beta": 0.0}),
], ids=["mse", "l1", "smooth_l1", "smooth_l1-beta0"])
def test_regression_losses(op, attrs, shape, reduction):
    x, t = _pair(shape)
    if op == "SmoothL1Loss" and attrs.get("beta", 1.0) > 0:
        # |d| in [0.1, 1.5] may sit at beta = 1: move the points off it.
        d = x - t
        d = np.where(np.abs(np.abs(d) - 1.0) < 0.05, d * 0.8, d)
        t = x - d
    case = OpCase.of(op, [x, t], attrs={**attrs, "reduction": reduction})
    case.check_grad()
    if shape and 0 not in shape:
        case.check_grad(order=2)


def test_smooth_l1_small_beta_both_branches():
    x = np.array([0.0, 0.5, -1.0, 2.0, 0.1, -0.3])
    t = np.array([0.1, 0.2, -1.05, 0.0, 0.6, -0.32])
    case = OpCase.of("SmoothL1Loss", [x, t], attrs={"beta": 0.25, "reduction": "none"})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", PAIR_SHAPES, ids=str)
def test_bce_with_logits(shape, reduction):
    x, t = _pair(shape, probs=True)
    case = OpCase.of("BceWithLogits", [x, t], attrs={"reduction": reduction})
    case.check_grad()
    if shape and 0 not in shape:
        case.check_grad(order=2)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape,w_len", [((4,), 4), ((3, 4), 4), ((2, 2, 3), 3),
                                         ((3, 4), 1)], ids=str)
def test_bce_with_logits_pos_weight(shape, w_len, reduction):
    x, t = _pair(shape, seed=1, probs=True)
    w = np.random.default_rng(2).uniform(0.3, 3.0, (w_len,))
    case = OpCase.of("BceWithLogits", [x, t, w], attrs={"reduction": reduction})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("attrs", [
    {}, {"reduction": "sum"}, {"reduction": "none"},
    {"alpha": -1.0, "gamma": 0.0, "reduction": "none"},
    {"alpha": 0.6, "gamma": 0.5, "reduction": "sum"},
    {"alpha": 0.25, "gamma": 1.0},
    {"alpha": 0.9, "gamma": 3.0, "reduction": "none"},
], ids=str)
@pytest.mark.parametrize("shape", [(), (6,), (2, 3)], ids=str)
def test_sigmoid_focal_loss(shape, attrs):
    x, t = _pair(shape, seed=3, probs=True)
    case = OpCase.of("SigmoidFocalLoss", [x, t], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)


def test_sigmoid_focal_loss_saturated_gradient_is_finite():
    """1 - p_t == 0 (a saturated sigmoid on a hard target) with gamma < 1."""
    x = dg.tensor(np.array([200.0, -200.0, 0.3], np.float32))
    t = dg.tensor(np.array([1.0, 0.0, 1.0], np.float32))
    with dg.GradientTape() as tape:
        tape.watch(x)
        loss = dg.ops.sigmoid_focal_loss(x, t, gamma=0.5, reduction="sum")
    g = tape.gradient(loss, x).numpy()
    assert np.all(np.isfinite(g)) and g[0] == 0.0 and g[1] == 0.0 and g[2] != 0.0


# ------------------------------------------------------ classification losses


def _class(shape, seed=0, ignore=-100, frac_ignored=0.3, log_probs=False):
    rng = np.random.default_rng(seed)
    x = rng.normal(0.0, 1.5, shape)
    axis = 1 if len(shape) > 1 else 0
    if log_probs:
        m = x.max(axis=axis, keepdims=True)
        x = x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))
    t_shape = shape[:axis] + shape[axis + 1:]
    t = rng.integers(0, shape[axis], t_shape)
    t = np.where(rng.random(t_shape) < frac_ignored, ignore, t)
    return x, np.asarray(t, np.int64)


CLASS_SHAPES = [(4, 5), (3, 4, 2), (5,), (0, 3), (2, 3, 2, 2)]
CE_ATTRS = [
    {}, {"reduction": "sum"}, {"reduction": "none"},
    {"ignore_index": 1, "reduction": "mean"},
    {"label_smoothing": 0.2}, {"label_smoothing": 0.3, "reduction": "none"},
    {"label_smoothing": 0.1, "reduction": "sum", "ignore_index": 0},
]


@pytest.mark.parametrize("attrs", CE_ATTRS, ids=str)
@pytest.mark.parametrize("shape", CLASS_SHAPES, ids=str)
def test_softmax_cross_entropy(shape, attrs):
    x, t = _class(shape, ignore=attrs.get("ignore_index", -100))
    case = OpCase.of("SoftmaxCrossEntropy", [x, t], attrs=attrs)
    case.check_grad()
    if 0 not in shape and len(shape) <= 3:
        case.check_grad(order=2)


def test_softmax_cross_entropy_int32_targets_and_large_logits():
    x, t = _class((3, 4), seed=5)
    x = x * 30.0
    case = OpCase.of("SoftmaxCrossEntropy", [x, t.astype(np.int32)],
                     attrs={"label_smoothing": 0.1})
    case.check_grad()


@pytest.mark.parametrize("attrs", [{}, {"reduction": "sum"}, {"reduction": "none"},
                                   {"ignore_index": 2}], ids=str)
@pytest.mark.parametrize("shape", CLASS_SHAPES, ids=str)
def test_nll_loss(shape, attrs):
    x, t = _class(shape, seed=1, ignore=attrs.get("ignore_index", -100), log_probs=True)
    case = OpCase.of("NllLoss", [x, t], attrs=attrs, py_name="nll_loss")
    case.check_grad()
    if 0 not in shape:
        case.check_grad(order=2)


@pytest.mark.parametrize("op", ["softmax_cross_entropy", "nll_loss"])
def test_all_ignored_mean_gradient_is_zero(op):
    x = dg.tensor(np.random.default_rng(0).normal(size=(3, 4)))
    t = dg.tensor(np.full(3, -100, np.int64))
    with dg.GradientTape() as tape:
        tape.watch(x)
        loss = getattr(dg.ops, op)(x, t)
    assert np.isnan(loss.item())
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), np.zeros((3, 4)))


def test_cross_entropy_composes_with_log_softmax_and_nll():
    """softmax_cross_entropy == nll_loss(log_softmax) in value and gradient."""
    x0, t0 = _class((5, 4, 3), seed=7)
    x, t = dg.tensor(x0), dg.tensor(t0)
    with dg.GradientTape(persistent=True) as tape:
        tape.watch(x)
        a = dg.ops.softmax_cross_entropy(x, t)
        b = dg.ops.nll_loss(dg.ops.log_softmax(x, 1), t)
    np.testing.assert_allclose(a.item(), b.item(), rtol=1e-12)
    np.testing.assert_allclose(tape.gradient(a, x).numpy(), tape.gradient(b, x).numpy(),
                               rtol=1e-10, atol=1e-14)


def test_requires_grad_backward_through_mean_loss():
    w = dg.tensor(np.random.default_rng(0).normal(size=(3, 2))).requires_grad_()
    x = dg.tensor(np.random.default_rng(1).normal(size=(4, 3)))
    y = dg.tensor(np.random.default_rng(2).normal(size=(4, 2)))
    dg.ops.mse_loss(x @ w, y).backward()
    want = x.numpy().T @ (2.0 * (x.numpy() @ w.numpy() - y.numpy()) / 8.0)
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-12)
