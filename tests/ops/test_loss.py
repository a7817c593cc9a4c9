"""Losses against float64 NumPy references: every reduction, ignore_index,
label smoothing, the [N, C, d...] layout, empty batches (a mean over
nothing is NaN, as in PyTorch), numerical stability, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase, op_case

REDUCTIONS = ["mean", "sum", "none"]


def _reduce(loss, reduction, count=None):
    """PyTorch's reductions; ``count`` is the mean's divisor."""
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.sum(loss)
    count = loss.size if count is None else count
    return np.float64(np.sum(loss)) / np.float64(count)


def _softplus_neg(x):
    """log(1 + exp(-x)), stably."""
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(-x, 0.0)


def _sigmoid(x):
    return np.exp(-np.logaddexp(0.0, -x))


# ------------------------------------------------------- element-wise losses

PAIR_SHAPES = [(), (0,), (7,), (3, 0), (4, 5), (2, 3, 4), (180, 190)]


def _mse(x, t, reduction="mean"):
    return _reduce((x - t) ** 2, reduction)


def _l1(x, t, reduction="mean"):
    return _reduce(np.abs(x - t), reduction)


def _smooth_l1(x, t, beta=1.0, reduction="mean"):
    d = np.abs(x - t)
    if beta == 0.0:
        return _reduce(d, reduction)
    return _reduce(np.where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta),
                   reduction)


def _bce(x, t, pos_weight=None, reduction="mean"):
    w = 1.0 if pos_weight is None else pos_weight
    loss = (1.0 - t) * x + (1.0 + (w - 1.0) * t) * _softplus_neg(x)
    return _reduce(loss, reduction)


def _focal(x, t, alpha=0.25, gamma=2.0, reduction="mean"):
    p = _sigmoid(x)
    ce = (1.0 - t) * x + _softplus_neg(x)
    p_t = p * t + (1.0 - p) * (1.0 - t)
    loss = ce * (1.0 - p_t) ** gamma
    if alpha >= 0:
        loss = loss * (alpha * t + (1.0 - alpha) * (1.0 - t))
    return _reduce(loss, reduction)


def _pair_inputs(rng, dt, shape):
    x = rng.uniform(-3.0, 3.0, shape).astype(dt)
    t = rng.uniform(-3.0, 3.0, shape).astype(dt)
    return [x, t]


def _prob_inputs(rng, dt, shape):
    """Logits and target probabilities: hard 0/1 labels and soft ones."""
    x = rng.uniform(-6.0, 6.0, shape).astype(dt)
    t = rng.integers(0, 2, shape).astype(np.float64)
    soft = rng.random(shape) < 0.3
    t = np.where(soft, rng.random(shape), t).astype(dt)
    return [x, t]


_RED_ATTRS = [{"reduction": r} for r in REDUCTIONS]


@op_case("MseLoss", inputs=_pair_inputs, reference=_mse, attrs=[{}] + _RED_ATTRS,
         shapes=PAIR_SHAPES)
def test_mse_loss(case):
    case.check_forward()


@op_case("L1Loss", inputs=_pair_inputs, reference=_l1, attrs=_RED_ATTRS,
         shapes=PAIR_SHAPES)
def test_l1_loss(case):
    case.check_forward()


@op_case("SmoothL1Loss", inputs=_pair_inputs, reference=_smooth_l1,
         attrs=_RED_ATTRS + [{"beta": 0.5, "reduction": "none"},
                             {"beta": 0.0, "reduction": "sum"},
                             {"beta": 2.5}],
         shapes=PAIR_SHAPES)
def test_smooth_l1_loss(case):
    case.check_forward()


@op_case("BceWithLogits", inputs=_prob_inputs, reference=_bce,
         attrs=_RED_ATTRS, shapes=PAIR_SHAPES, tol=4.0)
def test_bce_with_logits(case):
    case.check_forward()


def _pos_weight_inputs(rng, dt, shape):
    x, t = _prob_inputs(rng, dt, shape)
    return [x, t, rng.uniform(0.2, 3.0, (shape[-1],)).astype(dt)]


@op_case("BceWithLogits", inputs=_pos_weight_inputs, reference=_bce,
         attrs=_RED_ATTRS, shapes=[(5,), (0, 3), (4, 3), (2, 3, 6)], tol=4.0)
def test_bce_with_logits_pos_weight(case):
    case.check_forward()


def test_bce_with_logits_pos_weight_of_length_one():
    x, t = _prob_inputs(np.random.default_rng(2), "float64", (3, 4))
    w = np.array([2.5])
    OpCase.of("BceWithLogits", [x, t, w], _bce,
              attrs={"reduction": "none"}).check_forward()


@op_case("SigmoidFocalLoss", inputs=_prob_inputs, reference=_focal,
         attrs=_RED_ATTRS + [{"alpha": -1.0, "gamma": 0.0, "reduction": "none"},
                             {"alpha": 0.75, "gamma": 0.5, "reduction": "none"},
                             {"alpha": 0.5, "gamma": 3.0, "reduction": "sum"}],
         shapes=PAIR_SHAPES, tol=10.0)
def test_sigmoid_focal_loss(case):
    case.check_forward()


def test_sigmoid_focal_gamma0_no_alpha_is_bce():
    x, t = _prob_inputs(np.random.default_rng(3), "float64", (6, 5))
    OpCase.of("SigmoidFocalLoss", [x, t], lambda x, t, **a: _bce(x, t, reduction="none"),
              attrs={"alpha": -1.0, "gamma": 0.0, "reduction": "none"}).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bce_and_focal_are_stable_for_large_logits(dtype):
    x = np.array([-500.0, -80.0, -30.0, 30.0, 80.0, 500.0], dtype)
    t = np.array([1.0, 1.0, 0.0, 1.0, 0.0, 0.0], dtype)
    OpCase.of("BceWithLogits", [x, t], _bce, attrs={"reduction": "none"},
              tol=4.0).check_forward()
    OpCase.of("SigmoidFocalLoss", [x, t], _focal, attrs={"reduction": "none"},
              tol=10.0).check_forward()


# ---------------------------------------------------- classification losses

#: Logit shapes: [N, C], empty batches, one class, [N, C, d...], [C], and a
#: batch large enough for the kernels' parallel path.
CLASS_SHAPES = [(4, 5), (0, 5), (3, 1), (1, 1), (3, 4, 2), (2, 3, 2, 2),
                (5,), (2, 0, 3), (300, 130)]


def _logsumexp(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    return m + np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True))


def _class_axis(x):
    return 1 if x.ndim > 1 else 0


def _picked(v, t, axis):
    return np.take_along_axis(v, np.expand_dims(t, axis), axis).squeeze(axis)


def _ce(x, t, ignore_index=-100, label_smoothing=0.0, reduction="mean"):
    axis = _class_axis(x)
    if x.shape[axis] == 0:  # no classes: every target must be ignored
        return _reduce(np.zeros(t.shape), reduction, 0)
    logp = x - _logsumexp(x, axis)
    valid = t != ignore_index
    safe = np.where(valid, t, 0)
    loss = -(1.0 - label_smoothing) * _picked(logp, safe, axis)
    if label_smoothing:
        loss = loss - label_smoothing * np.mean(logp, axis=axis)
    loss = np.where(valid, loss, 0.0)
    return _reduce(loss, reduction, np.count_nonzero(valid))


def _nll(x, t, ignore_index=-100, reduction="mean"):
    axis = _class_axis(x)
    if x.shape[axis] == 0:
        return _reduce(np.zeros(t.shape), reduction, 0)
    valid = t != ignore_index
    loss = np.where(valid, -_picked(x, np.where(valid, t, 0), axis), 0.0)
    return _reduce(loss, reduction, np.count_nonzero(valid))


def _class_inputs(index_dtype, log_probs=False):
    def make(rng, dt, shape, attrs):
        x = rng.normal(0.0, 2.0, shape)
        if log_probs and x.size:
            x = x - _logsumexp(x, _class_axis(x))
        axis = _class_axis(x)
        classes = shape[axis]
        t_shape = shape[:axis] + shape[axis + 1:]
        t = rng.integers(0, max(classes, 1), t_shape)
        ignore = attrs.get("ignore_index", -100)
        t = np.where(rng.random(t_shape) < 0.25, ignore, t)
        if classes == 0:
            t = np.full(t_shape, ignore)
        return [x.astype(dt), np.asarray(t).astype(index_dtype)]
    return make


_CE_ATTRS = [
    {},
    {"reduction": "sum"},
    {"reduction": "none"},
    {"ignore_index": 1},
    {"label_smoothing": 0.1},
    {"label_smoothing": 0.3, "reduction": "none", "ignore_index": 0},
    {"label_smoothing": 1.0, "reduction": "sum"},
]


@op_case("SoftmaxCrossEntropy", inputs=_class_inputs("int64"), reference=_ce,
         attrs=_CE_ATTRS, shapes=CLASS_SHAPES, tol=10.0)
def test_softmax_cross_entropy(case):
    case.check_forward()


@op_case("SoftmaxCrossEntropy", inputs=_class_inputs("int32"), reference=_ce,
         attrs=[{}, {"reduction": "none", "label_smoothing": 0.2}],
         shapes=[(4, 5), (3, 4, 2), (0, 3)], tol=10.0)
def test_softmax_cross_entropy_int32_targets(case):
    case.check_forward()


@op_case("NllLoss", inputs=_class_inputs("int64", log_probs=True),
         reference=_nll,
         attrs=[{}, {"reduction": "sum"}, {"reduction": "none"},
                {"ignore_index": 2, "reduction": "mean"}],
         shapes=CLASS_SHAPES, py_name="nll_loss")
def test_nll_loss(case):
    case.check_forward()


@op_case("NllLoss", inputs=_class_inputs("int32", log_probs=True),
         reference=_nll, attrs=[{}, {"reduction": "none"}],
         shapes=[(4, 5), (3, 4, 2)], py_name="nll_loss")
def test_nll_loss_int32_targets(case):
    case.check_forward()


@pytest.mark.parametrize("op", ["SoftmaxCrossEntropy", "NllLoss"])
def test_mean_of_all_ignored_targets_is_nan(op):
    """PyTorch: 0 / 0 when every target is ignore_index (and for N = 0)."""
    x = np.random.default_rng(0).normal(size=(3, 4))
    t = np.full(3, -100, np.int64)
    ref = _ce if op == "SoftmaxCrossEntropy" else _nll
    out = OpCase.of(op, [x, t], ref).check_forward()[0]
    assert np.isnan(out)
    out = OpCase.of(op, [x, t], ref, attrs={"reduction": "sum"}).check_forward()[0]
    assert out == 0.0


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_softmax_cross_entropy_is_stable(dtype):
    """Huge logits neither overflow nor lose the log-sum-exp."""
    x = np.array([[1000.0, 0.0, -1000.0], [-1e4, -1e4 + 1.0, -1e4 + 2.0],
                  [88.0, 89.0, 90.0]], dtype)
    t = np.array([2, 0, 1], np.int64)
    out = OpCase.of("SoftmaxCrossEntropy", [x, t], _ce,
                    attrs={"reduction": "none", "label_smoothing": 0.1},
                    tol=10.0).check_forward()[0]
    assert np.all(np.isfinite(out))
    # The [N, C, d] path (strided over classes) too.
    x3 = np.ascontiguousarray(np.stack([x, x[::-1]], axis=-1))
    t3 = np.stack([t, t[::-1]], axis=-1)
    OpCase.of("SoftmaxCrossEntropy", [x3, t3], _ce,
              attrs={"reduction": "none"}, tol=10.0).check_forward()


def test_softmax_cross_entropy_nan_logit_gives_nan():
    x = np.array([[0.0, np.nan, 1.0], [0.0, 1.0, 2.0]])
    t = np.array([0, 1], np.int64)
    out = OpCase.of("SoftmaxCrossEntropy", [x, t], _ce,
                    attrs={"reduction": "none"}).check_forward()[0]
    assert np.isnan(out[0]) and np.isfinite(out[1])


# ----------------------------------------------------------------- errors


def _t(a):
    import dragon_core as dg

    return dg.from_numpy(np.asarray(a))


PAIR_OPS = ["mse_loss", "l1_loss", "smooth_l1_loss", "bce_with_logits",
            "sigmoid_focal_loss"]
OP_NAMES = {"mse_loss": "MseLoss", "l1_loss": "L1Loss",
            "smooth_l1_loss": "SmoothL1Loss", "bce_with_logits": "BceWithLogits",
            "sigmoid_focal_loss": "SigmoidFocalLoss"}


@pytest.mark.parametrize("py", PAIR_OPS)
def test_pair_losses_bad_input(py):
    import dragon_core as dg

    fn = getattr(dg.ops, py)
    name = OP_NAMES[py]
    a = _t(np.zeros((2, 3), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf'{name}.*reduction must be .*"avg"'):
        fn(a, a, reduction="avg")
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf"{name}.*same shape|{name}.*one shape.*\[2, 3\].*\[3, 2\]"):
        fn(a, _t(np.zeros((3, 2), np.float32)))
    with pytest.raises(dg.errors.InvalidArgumentError, match=rf"{name}.*float64"):
        fn(a, _t(np.zeros((2, 3), np.float64)))
    with pytest.raises(dg.errors.InvalidArgumentError, match=rf"{name}.*int64"):
        fn(_t(np.zeros((2, 3), np.int64)), _t(np.zeros((2, 3), np.int64)))


def test_pair_loss_attribute_errors():
    import dragon_core as dg

    a = _t(np.zeros(3, np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"SmoothL1Loss.*beta"):
        dg.ops.smooth_l1_loss(a, a, beta=-1.0)
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"SigmoidFocalLoss.*gamma"):
        dg.ops.sigmoid_focal_loss(a, a, gamma=-0.5)
    with pytest.raises(dg.errors.InvalidArgumentError, match=r"SigmoidFocalLoss.*alpha"):
        dg.ops.sigmoid_focal_loss(a, a, alpha=1.5)
    b = _t(np.zeros((2, 3), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"BceWithLogits.*pos_weight.*length 3.*\[2\]"):
        dg.ops.bce_with_logits(b, b, _t(np.ones(2, np.float32)))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"BceWithLogits.*pos_weight.*0-d"):
        dg.ops.bce_with_logits(_t(np.float32(0)), _t(np.float32(0)),
                               _t(np.ones(1, np.float32)))


@pytest.mark.parametrize("op,name", [("softmax_cross_entropy", "SoftmaxCrossEntropy"),
                                     ("nll_loss", "NllLoss")])
def test_class_losses_bad_input(op, name):
    import dragon_core as dg

    fn = getattr(dg.ops, op)
    x = _t(np.zeros((4, 3), np.float32))
    t = _t(np.array([0, 1, 2, 0], np.int64))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf'{name}.*reduction must be.*"total"'):
        fn(x, t, reduction="total")
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf"{name}.*target must have shape \[4\].*\[4, 3\].*got \[3\]"):
        fn(x, _t(np.array([0, 1, 2], np.int64)))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf"{name}.*target must have shape \[4, 2\]"):
        fn(_t(np.zeros((4, 3, 2), np.float32)), t)
    with pytest.raises(dg.errors.InvalidArgumentError, match=rf"{name}.*float32"):
        fn(x, _t(np.zeros(4, np.float32)))
    with pytest.raises(dg.errors.InvalidArgumentError, match=rf"{name}.*0-d"):
        fn(_t(np.float32(1.0)), _t(np.int64(0)))
    for dtype in ("int32", "int64"):
        for bad in (3, -1, -100 + 1):
            with pytest.raises(dg.errors.OutOfRangeError,
                               match=rf"{name}.*target {bad} .*\[0, 3\)"):
                fn(x, _t(np.array([0, bad, 1, 2], dtype)))
    # ignore_index itself may lie anywhere, also inside [0, C).
    fn(x, _t(np.array([0, -7, 1, 2], np.int64)), ignore_index=-7)


def test_label_smoothing_range():
    import dragon_core as dg

    x = _t(np.zeros((2, 3), np.float32))
    t = _t(np.array([0, 1], np.int64))
    for s in (-0.1, 1.5):
        with pytest.raises(dg.errors.InvalidArgumentError,
                           match=r"SoftmaxCrossEntropy.*label_smoothing"):
            dg.ops.softmax_cross_entropy(x, t, label_smoothing=s)


# ------------------------------------------------------------- graph mode


def test_losses_and_gradients_in_graph_mode():
    """Traced losses (an absent optional pos_weight included) and their
    gradients equal the eager results."""
    import dragon_core as dg

    rng = np.random.default_rng(0)
    x = dg.tensor(rng.normal(size=(4, 3, 2)))
    t = dg.tensor(rng.integers(0, 3, (4, 2)))
    p = dg.tensor(rng.random((4, 3, 2)))
    w = dg.tensor(rng.uniform(0.5, 2.0, (2,)))

    def step(x, t, p, w):
        with dg.GradientTape() as tape:
            tape.watch(x)
            losses = [dg.ops.softmax_cross_entropy(x, t, label_smoothing=0.1),
                      dg.ops.nll_loss(dg.ops.log_softmax(x, 1), t, reduction="sum"),
                      dg.ops.bce_with_logits(x, p),
                      dg.ops.bce_with_logits(x, p, w, reduction="sum"),
                      dg.ops.sigmoid_focal_loss(x, p),
                      dg.ops.smooth_l1_loss(x, p, beta=0.5),
                      dg.ops.l1_loss(x, p), dg.ops.mse_loss(x, p)]
            total = losses[0]
            for loss in losses[1:]:
                total = total + loss
        return losses + [tape.gradient(total, x)]

    eager = step(x, t, p, w)
    traced = dg.function(step)
    for _ in range(2):
        for a, b in zip(traced(x, t, p, w), eager):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-12, atol=1e-14)
