"""The gradient of legacy ``nearest`` interpolation against torch 2.13.

torch's nearest backward kernels keep the "same size: copy" and "double
size: dst // 2" shortcuts for every rank and compute the source index in
float32 for every dtype, while its 3-D / 5-D forward kernels do not: its
gradient there is not the adjoint of its forward. Ours follows torch's
values for both (vision_ops resample.h, ForNearestGradient)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import dragon_core.vm.torch as dt


def _grad(lib, shape, scale, dtype):
    x = lib.arange(float(np.prod(shape)), dtype=getattr(lib, dtype)).reshape(shape)
    x.requires_grad_(True)
    y = lib.nn.functional.interpolate(x, scale_factor=scale, mode="nearest")
    w = lib.tensor(np.arange(1.0, 1.0 + np.prod(tuple(y.shape))).reshape(tuple(y.shape)),
                   dtype=getattr(lib, dtype))
    (y * w).sum().backward()
    return y.detach().numpy(), x.grad.numpy()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,scale", [
    ((1, 1, 3), 2.1), ((1, 1, 3), 1.2), ((1, 2, 7), 2.2), ((2, 1, 5), 0.7), ((1, 1, 17), 3.7),
    ((1, 1, 1, 2, 3), (1.0, 2.1, 1.2)), ((1, 1, 2, 3, 3), (1.5, 2.0, 2.1)),
    ((1, 1, 3, 5), (2.1, 1.2)), ((1, 2, 4, 4), (2.0, 0.6))])
def test_nearest_values_and_gradient_match_torch(shape, scale, dtype):
    yt, gt = _grad(torch, shape, scale, dtype)
    yd, gd = _grad(dt, shape, scale, dtype)
    np.testing.assert_array_equal(yd, yt)
    np.testing.assert_array_equal(gd, gt)
