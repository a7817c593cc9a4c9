"""SoftmaxGrad's own gradient rule (the op the ``softmax_grad`` fusion
pattern puts in compiled attention backward passes; tests/ops/
test_softmax_grad.py checks the op): by finite differences in y and dy, on
every axis, to second order."""

from __future__ import annotations

import numpy as np
from dragon_sdk.testing import op_case


def _reference(y, dy, axis=-1):
    y, dy = np.asarray(y, np.float64), np.asarray(dy, np.float64)
    return y * (dy - np.sum(dy * y, axis=axis, keepdims=True))


def _inputs(rng, dt, shape):
    return [(rng.random(shape) + 0.05).astype(dt), rng.standard_normal(shape).astype(dt)]


@op_case("SoftmaxGrad", inputs=_inputs, reference=_reference, shapes=[(3, 4), (2, 3, 5)],
         attrs=[{}, {"axis": 0}, {"axis": 1}], dtypes=["float64"], layouts=["contiguous"])
def test_softmax_grad_gradient(case):
    case.check_grad(wrt=[0, 1])
    case.check_grad(wrt=[0, 1], order=2)
