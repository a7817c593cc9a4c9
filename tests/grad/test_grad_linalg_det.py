"""Gradient of "Det" (first order, finite differences in float64) and the
clear error for its second order ("DetGrad" has no derivative)."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import OpCase


@pytest.mark.parametrize("shape", [(1, 1), (2, 2), (4, 4), (3, 3, 3), (2, 0, 0)])
def test_det_first_order(shape):
    x = np.random.default_rng(4).standard_normal(shape)
    OpCase.of("Det", [x]).check_grad()


def test_det_second_order_raises():
    import dragon_core as dg

    x = dg.tensor(np.random.default_rng(5).standard_normal((3, 3)))
    with dg.GradientTape(persistent=True) as outer:
        outer.watch(x)
        with dg.GradientTape() as inner:
            inner.watch(x)
            y = dg.ops.det(x)
        (g,) = inner.gradient(y, [x])
        s = dg.ops.sum(g * g)
    with pytest.raises(NotImplementedError, match="DetGrad"):
        outer.gradient(s, [x])
