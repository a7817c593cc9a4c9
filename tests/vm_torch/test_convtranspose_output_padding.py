"""ConvTranspose1d/2d/3d accept output_padding below the stride OR below the
dilation, as torch (output_padding < max(stride, dilation)); forward and
gradients against real torch 2.13."""

import numpy as np
import pytest

import dragon_core.vm.torch as dt

torch = pytest.importorskip("torch")

# (stride, dilation, output_padding, padding): output_padding >= stride but
# below the dilation, which torch allows
CASES = [(1, 2, 1, 0), (2, 3, 2, 1), (1, 3, 2, 1), (2, 2, 1, 0)]


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("stride,dilation,output_padding,padding", CASES)
def test_conv_transpose_output_padding_below_dilation(nd, stride, dilation, output_padding,
                                                      padding):
    rng = np.random.default_rng(nd * 100 + stride * 10 + dilation)
    size = (4,) * nd if nd < 3 else (3,) * nd
    x = rng.standard_normal((2, 3) + size).astype(np.float32)
    tm = getattr(torch.nn, f"ConvTranspose{nd}d")(3, 2, 3, stride=stride, dilation=dilation,
                                                  padding=padding,
                                                  output_padding=output_padding)
    dm = getattr(dt.nn, f"ConvTranspose{nd}d")(3, 2, 3, stride=stride, dilation=dilation,
                                               padding=padding, output_padding=output_padding)
    with torch.no_grad():
        w, b = tm.weight.numpy().copy(), tm.bias.numpy().copy()
    with dt.no_grad():
        dm.weight.copy_(dt.tensor(w))
        dm.bias.copy_(dt.tensor(b))
    tx = torch.tensor(x, requires_grad=True)
    dx = dt.tensor(x, requires_grad=True)
    ty, dy_ = tm(tx), dm(dx)
    assert tuple(dy_.shape) == tuple(ty.shape)
    np.testing.assert_allclose(dy_.detach().numpy(), ty.detach().numpy(), rtol=1e-4, atol=1e-5)
    g = rng.standard_normal(tuple(ty.shape)).astype(np.float32)
    ty.backward(torch.tensor(g))
    dy_.backward(dt.tensor(g))
    np.testing.assert_allclose(dx.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4,
                               atol=1e-4)
    np.testing.assert_allclose(dm.bias.grad.numpy(), tm.bias.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_output_padding_not_below_either_raises(nd):
    m = getattr(dt.nn, f"ConvTranspose{nd}d")(2, 2, 3, stride=2, dilation=1, output_padding=2)
    with pytest.raises(ValueError, match=r"output_padding .* smaller than .*strides .* or "
                                         r".*dilations .* below either"):
        m(dt.ones((1, 2) + (4,) * nd))


def test_conv_transpose_output_padding_below_dilation_second_order():
    # the rule crops dy with a Slice, which is differentiable: dx's gradient
    # with respect to w matches torch's
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((2, 3, 3, 3))
    res = {}
    for T in (torch, dt):
        X = T.tensor(x, requires_grad=True)
        W = T.tensor(w, requires_grad=True)
        y = T.nn.functional.conv_transpose2d(X, W, stride=2, dilation=3, padding=1,
                                             output_padding=2)
        (g,) = T.autograd.grad((y * y).sum(), X, create_graph=True)
        (gw,) = T.autograd.grad((g * g).sum(), W)
        res[T] = (y.detach().numpy(), g.detach().numpy(), gw.numpy())
    for a, b in zip(res[dt], res[torch]):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-9)
