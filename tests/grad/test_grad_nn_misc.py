"""Gradient rules of Dropout and Embedding (``_grads/nn_misc.py``) against
central finite differences in float64, first and second order."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

SHAPES = [(), (5,), (3, 4)]


@pytest.mark.parametrize("p", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_dropout(p, shape):
    """A fixed seed gives the same mask at every evaluation, so finite
    differences see the function the rule differentiates."""
    x = np.random.default_rng(1).uniform(-2, 2, shape)
    case = OpCase.of("Dropout", [x], attrs={"p": p, "seed": 1234})
    case.check_grad()
    case.check_grad(order=2)


def test_dropout_gradient_is_dy_times_mask():
    x = dg.tensor(np.random.default_rng(0).uniform(-1, 1, (6, 7)))
    dy = dg.tensor(np.random.default_rng(1).uniform(-1, 1, (6, 7)))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y, mask = dg.ops.dropout(x, p=0.4)      # seed drawn at run time
    g = tape.gradient(y, x, output_gradients=dy)
    np.testing.assert_array_equal(g.numpy(), dy.numpy() * mask.numpy())
    assert 0 < np.count_nonzero(mask.numpy()) < 42


def _table(rows=6, dim=3):
    return np.random.default_rng(2).uniform(-1, 1, (rows, dim))


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("indices", [[], [4], [0, 5, 5, 2], [[1, 1], [3, 0]]],
                         ids=["empty", "one", "repeats", "2d"])
@pytest.mark.parametrize("padding_idx", [-1, 5])
def test_embedding(index_dtype, indices, padding_idx):
    idx = np.asarray(indices, index_dtype)
    case = OpCase.of("Embedding", [_table(), idx], attrs={"padding_idx": padding_idx})
    if padding_idx < 0:
        # Without padding the rule is exact: finite differences agree.
        case.check_grad()
        case.check_grad(order=2)
        return
    # With padding, the padding row gets zero by definition (not the true
    # derivative): compare with the scatter-add computed in NumPy.
    w = dg.tensor(_table())
    dy = np.random.default_rng(3).uniform(-1, 1, idx.shape + (3,))
    with dg.GradientTape() as tape:
        tape.watch(w)
        y = dg.ops.embedding(w, dg.tensor(idx), padding_idx=padding_idx)
    g = tape.gradient(y, w, output_gradients=dg.tensor(dy)).numpy()
    want = np.zeros((6, 3))
    np.add.at(want, idx.reshape(-1), dy.reshape(-1, 3))
    want[padding_idx] = 0.0
    np.testing.assert_allclose(g, want, rtol=1e-12, atol=1e-14)


def test_embedding_padding_row_gets_no_update():
    w = dg.tensor(_table()).requires_grad_()
    idx = dg.tensor(np.array([0, 2, 0, 2, 1], np.int64))
    dg.ops.sum(dg.ops.embedding(w, idx, padding_idx=2)).backward()
    g = w.grad.numpy()
    np.testing.assert_array_equal(g[:, 0], [2.0, 1.0, 0.0, 0.0, 0.0, 0.0])
