"""Gradients of the fused ops (Conv2dBiasAct, MatMulBiasAct) against finite
differences, first and second order."""

import numpy as np
import pytest
from dragon_sdk.testing import OpCase


def _arrays(shapes, seed):
    rng = np.random.default_rng(seed)
    # Away from 0 so no pre-activation sits on relu's kink.
    return [rng.uniform(0.2, 1.0, s) * rng.choice([-1.0, 1.0], s)
            for s in shapes]


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_bias_act_grad(activation, bias):
    shapes = [(2, 2, 5, 4), (3, 2, 3, 2)] + ([(3,)] if bias else [])
    case = OpCase.of("Conv2dBiasAct", _arrays(shapes, 1),
                     attrs={"activation": activation, "pads": [1, 0],
                            "strides": [2, 1]})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("shapes, attrs", [
    ([(4, 3), (3, 5), (5,)], {}),
    ([(2, 4, 3), (5, 3), (5,)], {"transpose_b": True}),
    ([(3,), (3, 4)], {}),
])
def test_matmul_bias_act_grad(activation, shapes, attrs):
    case = OpCase.of("MatMulBiasAct", _arrays(shapes, 2),
                     attrs={"activation": activation, **attrs})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shapes, attrs, wants", [
    ([(4, 3), (3,), (4,)], {}, [True, True, True]),            # 1-D b
    ([(3,), (3, 4), (4,)], {}, [True, False, True]),           # 1-D a
    ([(3,), (5, 3), (5,)], {"transpose_a": True, "transpose_b": True},
     [False, True, False]),
    ([(2, 4, 3), (3, 5), (5,)], {}, [False, False, True]),     # bias only
    ([(4, 3), (5, 3)], {"transpose_b": True}, [True, False]),
])
@pytest.mark.parametrize("activation", ["relu", "none"])
def test_matmul_bias_act_grad_matches_unfused_ops(shapes, attrs, wants, activation):
    """Only the inputs that need a gradient get one, equal to what MatMul,
    Add and Relu give (1-D operands included)."""
    import dragon_core as dg

    arrays = _arrays(shapes, 3)

    def grads(fused):
        ts = [dg.tensor(a) for a in arrays]
        for t, want in zip(ts, wants):
            t.requires_grad = want
        if fused:
            y = dg.ops.matmul_bias_act(*ts, activation=activation, **attrs)
        else:
            y = dg.ops.matmul(ts[0], ts[1], **attrs)
            if len(ts) > 2:
                y = y + ts[2]
            if activation == "relu":
                y = dg.ops.relu(y)
        (y * dg.tensor(np.linspace(-1.0, 2.0, y.size).reshape(y.shape))).sum().backward()
        return [None if t.grad is None else np.asarray(t.grad) for t in ts]

    for got, want, needed in zip(grads(True), grads(False), wants):
        assert (got is not None) == needed
        if needed:
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("wants", [[False, True, True], [True, False, False],
                                   [False, False, True]])
def test_conv2d_bias_act_grad_only_where_needed(wants):
    import dragon_core as dg

    ts = [dg.tensor(a) for a in _arrays([(2, 2, 5, 5), (3, 2, 3, 3), (3,)], 4)]
    for t, want in zip(ts, wants):
        t.requires_grad = want
    dg.ops.conv2d_bias_act(*ts).sum().backward()
    assert [t.grad is not None for t in ts] == wants
