"""Gradient rules of CumSum, Sort and TopK (``_grads/sort.py``) and of the
einsum lowering, against central finite differences in float64, first and
second order."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg


def _distinct(shape, seed=0):
    """Values far apart (no ties within finite-difference steps)."""
    n = int(np.prod(shape, dtype=np.int64))
    rng = np.random.default_rng(seed)
    return (rng.permutation(n) * 0.37 - n * 0.15 + rng.uniform(-0.05, 0.05, n)).reshape(shape)


@pytest.mark.parametrize("shape, axis", [((), 0), ((0,), 0), ((7,), 0), ((3, 4), 0),
                                         ((3, 4), -1), ((2, 3, 4), 1)], ids=str)
@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(shape, axis, exclusive, reverse):
    case = OpCase.of("CumSum", [_distinct(shape)],
                     attrs={"axis": axis, "exclusive": exclusive, "reverse": reverse})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shape, axis", [((), -1), ((0,), 0), ((6,), 0), ((3, 5), -1),
                                         ((3, 5), 0), ((2, 3, 4), 1), ((4, 0), 0)], ids=str)
@pytest.mark.parametrize("descending", [False, True])
def test_sort(shape, axis, descending):
    case = OpCase.of("Sort", [_distinct(shape, 1)],
                     attrs={"axis": axis, "descending": descending})
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shape, k, axis", [((), 1, 0), ((6,), 0, 0), ((6,), 3, 0),
                                            ((3, 5), 2, -1), ((3, 5), 3, 0),
                                            ((2, 3, 4), 2, 1), ((2, 3, 4), 4, 2)], ids=str)
@pytest.mark.parametrize("largest", [True, False])
def test_topk(shape, k, axis, largest):
    case = OpCase.of("TopK", [_distinct(shape, 2)],
                     attrs={"k": k, "axis": axis, "largest": largest})
    case.check_grad()
    case.check_grad(order=2)


def test_topk_gradient_lands_on_selected_positions():
    x = dg.tensor(np.array([[1.0, 5.0, 3.0, 5.0]]))
    with dg.GradientTape() as tape:
        tape.watch(x)
        v, _ = dg.ops.topk(x, 2)
    g = tape.gradient(v, x, output_gradients=dg.tensor(np.array([[10.0, 20.0]])))
    np.testing.assert_array_equal(g.numpy(), [[0.0, 10.0, 0.0, 20.0]])


def _fd_grad(fn, xs, i, eps=1e-6):
    g = np.zeros_like(xs[i])
    flat = g.reshape(-1)
    for j in range(flat.size):
        plus = [x.copy() for x in xs]
        minus = [x.copy() for x in xs]
        plus[i].reshape(-1)[j] += eps
        minus[i].reshape(-1)[j] -= eps
        flat[j] = (fn(plus) - fn(minus)) / (2 * eps)
    return g


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(3, 4), (4, 2)]),
    ("bhqd,bhkd->bhqk", [(1, 2, 3, 2), (1, 2, 4, 2)]),
    ("...ij,...jk->...ik", [(2, 1, 2, 3), (3, 3, 2)]),
    ("abc,cd,de->abe", [(2, 2, 3), (3, 2), (2, 2)]),
    ("ab,ab->ab", [(2, 3), (1, 3)]),
    ("ij->", [(2, 3)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("ij,jj->i", [(2, 3), (3, 3)]),
])
def test_einsum(eq, shapes):
    """Einsum differentiates through its lowering (transpose/reshape/matmul)."""
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s) for s in shapes]
    c = rng.standard_normal(np.einsum(eq, *xs).shape)
    ts = [dg.tensor(x) for x in xs]
    with dg.GradientTape() as tape:
        for t in ts:
            tape.watch(t)
        loss = dg.ops.sum(dg.ops.einsum(eq, *ts) * dg.tensor(c))
    grads = tape.gradient(loss, ts)
    for i, g in enumerate(grads):
        want = _fd_grad(lambda a: float(np.sum(np.einsum(eq, *a) * c)), xs, i)
        np.testing.assert_allclose(g.numpy(), want, rtol=1e-6, atol=1e-8)
