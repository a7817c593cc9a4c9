"""torch.inner / trace / cross / exp2 / full / index_add against torch 2.13
(the hunt16 findings in vm.torch's _functions.py and _creation.py): each case
computed something else before, or accepted what torch refuses."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import dragon_core.vm.torch as vt  # noqa: E402


def both(a):
    a = np.asarray(a)
    return vt.tensor(a), torch.tensor(a)


@pytest.mark.parametrize("sa,sb", [((2, 3), (2, 3)), ((3,), (4, 3)), ((2, 1, 3), (5, 3)),
                                   ((3,), (3,)), ((), (2, 3)), ((2, 3), ())])
def test_inner_shapes_and_values(sa, sb):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(sa), rng.standard_normal(sb)
    got = vt.inner(vt.tensor(a), vt.tensor(b)).numpy()
    want = torch.inner(torch.tensor(a), torch.tensor(b)).numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_inner_gradient_matches_torch():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((4, 3))
    va, vb = vt.tensor(a, requires_grad=True), vt.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    (vt.inner(va, vb) ** 2).sum().backward()
    (torch.inner(ta, tb) ** 2).sum().backward()
    np.testing.assert_allclose(va.grad.numpy(), ta.grad.numpy(), rtol=1e-12)
    np.testing.assert_allclose(vb.grad.numpy(), tb.grad.numpy(), rtol=1e-12)


def test_inner_mismatched_last_dims_raise():
    with pytest.raises(RuntimeError, match=r"inner\(\).*\[2, 3\].*\[2, 4\]"):
        vt.inner(vt.ones(2, 3), vt.ones(2, 4))


def test_trace_needs_a_matrix():
    with pytest.raises(RuntimeError, match="expected a matrix.*dim 3"):
        vt.trace(vt.ones(2, 3, 3))
    assert float(vt.trace(vt.ones(2, 3))) == float(torch.trace(torch.ones(2, 3)))


@pytest.mark.parametrize("shape", [(2, 3, 3), (3, 2), (4, 3), (3, 3, 5)])
def test_cross_default_dim_is_the_first_of_size_3(shape):
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal(shape), rng.standard_normal(shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = torch.cross(torch.tensor(a), torch.tensor(b)).numpy()
    with pytest.warns(UserWarning, match="without specifying the dim"):
        got = vt.cross(vt.tensor(a), vt.tensor(b)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cross_explicit_dim_and_errors():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((3, 3)), rng.standard_normal((3, 3))
    for d in (0, 1, -1):
        np.testing.assert_allclose(vt.cross(vt.tensor(a), vt.tensor(b), dim=d).numpy(),
                                   torch.cross(torch.tensor(a), torch.tensor(b), dim=d).numpy(),
                                   rtol=1e-12, atol=1e-12)
    with pytest.raises(RuntimeError, match="no dimension of size 3"):
        vt.cross(vt.ones(2, 2), vt.ones(2, 2))
    with pytest.raises(RuntimeError, match="must have length 3"):
        vt.cross(vt.ones(2, 3), vt.ones(2, 3), dim=0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16", "float16"])
def test_exp2_is_exact_at_integers(dtype):
    x = np.arange(-20, 31, dtype=np.float64)
    got = vt.exp2(vt.tensor(x).to(getattr(vt, dtype))).float().numpy()
    want = torch.exp2(torch.tensor(x).to(getattr(torch, dtype))).float().numpy()
    np.testing.assert_array_equal(got, want)


def test_exp2_float64_is_exact_and_overflows_as_torch():
    x = np.array([30.0, 52.0, 1023.0, 1024.0, -1074.0, -1080.0, 0.5])
    got = vt.exp2(vt.tensor(x)).numpy()
    want = torch.exp2(torch.tensor(x)).numpy()
    np.testing.assert_array_equal(got, want)


def test_exp2_gradient():
    x = np.array([-3.5, 0.0, 1.25, 10.0])
    v = vt.tensor(x.astype(np.float32), requires_grad=True)
    vt.exp2(v).sum().backward()
    np.testing.assert_allclose(v.grad.numpy(), np.log(2) * 2 ** x, rtol=2e-6)


def test_full_with_a_complex_value_raises():
    with pytest.raises(NotImplementedError, match="complex fill_value"):
        vt.full((2,), 1j)
    with pytest.raises(NotImplementedError, match="complex fill_value"):
        vt.full_like(vt.ones(2), 1 + 2j)


def test_index_add_source_dtype_must_match():
    with pytest.raises(RuntimeError) as torch_err:
        torch.zeros(3).index_add_(0, torch.tensor([0]), torch.ones(1, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"index_add_\(\).*same scalar type"):
        vt.zeros(3).index_add_(0, vt.tensor([0]), vt.ones(1, dtype=vt.float64))
    assert "same scalar type" in str(torch_err.value)
