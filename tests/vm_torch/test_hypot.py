"""torch.hypot without overflow or underflow, as torch (std::hypot): the
plain sqrt(a*a + b*b) gave inf for float32 values from ~1.8e19, 0 below
~1e-23, and NaN for an infinite side beside NaN; integer inputs raise."""
import numpy as np
import pytest

from dragon_core.vm import torch

real = pytest.importorskip("torch")

INF, NAN = float("inf"), float("nan")
PAIRS = [(1e30, 1e30), (-3e38, 1e38), (1e-30, 1e-30), (1e-40, 3e-41), (3.0, 4.0),
         (0.0, 0.0), (-0.0, 5.0), (INF, NAN), (NAN, -INF), (1.0, NAN), (INF, 1.0),
         (6e4, 6e4), (1e200, 1e200)]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_values_match_torch(dtype):
    a = np.array([p[0] for p in PAIRS], np.float64)
    b = np.array([p[1] for p in PAIRS], np.float64)
    ours = torch.hypot(torch.tensor(a).to(getattr(torch, dtype)),
                       torch.tensor(b).to(getattr(torch, dtype)))
    ref = real.hypot(real.tensor(a).to(getattr(real, dtype)),
                     real.tensor(b).to(getattr(real, dtype)))
    assert str(ours.dtype) == str(ref.dtype)
    got, want = ours.to(torch.float64).numpy(), ref.double().numpy()
    np.testing.assert_allclose(got, want, rtol={"float64": 1e-15, "float32": 3e-7}.get(
        dtype, 1e-2), equal_nan=True)


def test_gradient_matches_torch():
    a, b = [0.0, 3.0, -1e30, 1e-30, 2.0], [0.0, 4.0, 1e30, -1e-30, -2.0]
    x, y = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    xr, yr = real.tensor(a, requires_grad=True), real.tensor(b, requires_grad=True)
    torch.hypot(x, y).sum().backward()
    real.hypot(xr, yr).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), xr.grad.numpy(), rtol=1e-6, equal_nan=True)
    np.testing.assert_allclose(y.grad.numpy(), yr.grad.numpy(), rtol=1e-6, equal_nan=True)


def test_integer_inputs_raise_as_torch():
    with pytest.raises(NotImplementedError, match="hypot"):
        torch.hypot(torch.tensor([3]), torch.tensor([4]))
    np.testing.assert_array_equal(torch.hypot(torch.tensor([3]), torch.tensor([4.0])).numpy(),
                                  [5.0])
