"""Nearest interpolation gradients, max_pool3d padding and cosine_similarity of
infinite norms against torch 2.13 (from the review of the nn.functional hunt).
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


# Two more cases from the review of the functional hunt, side by side with torch.

def test_max_pool3d_padding_above_half_the_kernel_raises():
    for lib in (torch, dt):
        x = lib.randn(1, 1, 7, 7, 7)
        with pytest.raises(RuntimeError, match="half of"):
            lib.nn.functional.max_pool3d(x, 3, 2, padding=2, dilation=2)


def test_cosine_similarity_with_an_infinite_norm():
    grads = []
    for lib in (torch, dt):
        x = lib.tensor([[1e20, 2e20, -1e20]])
        np.testing.assert_array_equal(lib.nn.functional.cosine_similarity(x, x).numpy(), [0.0])
        # the clamp still gives the gradient of the unclamped norm
        y = lib.tensor([[3.0, 4.0], [1e-3, 0.0]], requires_grad=True)
        lib.nn.functional.cosine_similarity(y, lib.tensor([[4.0, 3.0], [2.0, 1.0]]),
                                            eps=0.5).sum().backward()
        grads.append(y.grad.numpy())
    np.testing.assert_allclose(grads[1], grads[0], rtol=1e-5, atol=1e-7)
