"""Gradients of vm.torch at the edges the differential hunts of session 14
left wrong, each against real torch 2.13: piecewise-constant ops under an
infinite or NaN incoming gradient, cdist's p=inf ties and p=0, median's
ties and NaNs, atan2 at the origin, and floor_divide's missing derivative.
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import dragon_core.vm.torch as vt

real = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")


def _grads(lib, fn, arrays, dy=None, dtype="float64"):
    """(value, gradients) of ``fn(lib, *leaves)`` backpropagating ``dy``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        xs = [lib.tensor(np.asarray(a, dtype=dtype), requires_grad=True) for a in arrays]
        y = fn(lib, *xs)
        if dy is None:
            y.sum().backward()
        else:
            y.backward(lib.tensor(np.asarray(dy, dtype=dtype)))
        return (np.asarray(y.detach().tolist(), dtype=np.float64),
                [None if x.grad is None else np.asarray(x.grad.tolist(), dtype=np.float64)
                 for x in xs])


def _check(fn, arrays, dy=None, dtype="float64", rtol=1e-6):
    want = _grads(real, fn, arrays, dy, dtype)
    got = _grads(vt, fn, arrays, dy, dtype)
    np.testing.assert_allclose(got[0], want[0], rtol=rtol, equal_nan=True)
    for g, w in zip(got[1], want[1]):
        assert (g is None) == (w is None), (got, want)
        if w is not None:
            np.testing.assert_allclose(g, w, rtol=rtol, atol=1e-12, equal_nan=True)


# ---------------------------------------- piecewise constant, dy = +-inf/NaN
@pytest.mark.parametrize("name", ["round", "floor", "ceil", "trunc", "sign"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_piecewise_constant_zero_grad_under_inf_dy(name, dtype):
    # torch's backward is zeros_like(dy); dy * 0 was NaN for dy = inf / NaN
    _check(lambda T, x: getattr(T, name)(x), [[1.2, -2.5, 0.0, 7.0]],
           dy=[np.inf, -np.inf, np.nan, 1.0], dtype=dtype)


@pytest.mark.parametrize("fn", [lambda T, x: T.round(x, decimals=1),
                                lambda T, x: T.div(x, 2.0, rounding_mode="floor"),
                                lambda T, x: T.div(x, 2.0, rounding_mode="trunc")],
                         ids=["round-decimals", "div-floor", "div-trunc"])
def test_rounding_variants_zero_grad_under_inf_dy(fn):
    _check(fn, [[1.26, -2.5, 3.0]], dy=[np.inf, np.nan, -np.inf])


def test_copy_into_nonleaf_zero_grad_under_inf_dy():
    # the overwritten value keeps a zero gradient (not dy * 0)
    def fn(T, x):
        y = x * 1.0
        y.copy_(T.tensor([4.0, 5.0], dtype=x.dtype))
        return y * x
    _check(fn, [[1.0, 2.0]], dy=[np.inf, 1.0])


def test_inplace_constant_overwrite_zero_grad_under_inf_dy():
    def fn(T, x):
        y = x * 1.0
        y.fill_(3.0)
        return y
    _check(fn, [[1.0, 2.0]], dy=[np.inf, np.nan])


# ------------------------------------------------------------- cdist / dist
_A = [[1.0, 2.0], [3.0, 4.0], [3.0, -1.0]]
_B = [[1.0, 2.0], [0.0, 0.0]]


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, 0.5, 0.0, float("inf")])
def test_cdist_zero_distance_and_ties(p):
    # row 0 of both is equal (distance 0); (3, 4) - (1, 2) ties in p=inf
    _check(lambda T, a, b: T.cdist(a, b, p=p) * T.arange(1.0, 7.0, dtype=a.dtype).reshape(3, 2),
           [_A, _B])


def test_cdist_inf_self_distance_batched():
    rng = np.random.default_rng(3)
    x = np.round(rng.standard_normal((2, 4, 3)) * 2) / 2   # many ties
    _check(lambda T, a: T.cdist(a, a, p=float("inf")), [x], dtype="float32", rtol=1e-5)


@pytest.mark.parametrize("p", [2, 1, 3, 0.5, float("inf")])
def test_dist_zero(p):
    _check(lambda T, a, b: T.dist(a, b, p), [[1.0, -2.0], [1.0, -2.0]])


def test_norm_zero_under_inf_dy():
    _check(lambda T, a: a.norm(dim=1), [[[0.0, 0.0], [3.0, 4.0]]], dy=[np.inf, 1.0])


# ------------------------------------------------------------------ median
@pytest.mark.parametrize("vals", [[1.0, 2.0, 2.0, 3.0], [2.0, 2.0, 2.0, 1.0, 3.0],
                                  [1.0, np.nan, 2.0, np.nan], [-np.inf, -np.inf, -np.inf, 1.0],
                                  [np.inf, np.inf, 1.0], [5.0], [[1.0, 1.0], [1.0, 0.0]]])
def test_median_all_splits_among_ties(vals):
    # torch's median() spreads dy evenly over every element equal to it
    # (every NaN when it is NaN); a NaN anywhere makes it NaN
    _check(lambda T, x: x.median() * 3.0, [vals])


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_median_dim_nan_rows(dim):
    x = [[1.0, np.nan, 2.0, np.nan, 0.0], [1.0, 2.0, 3.0, 4.0, 5.0],
         [np.nan, 1.0, 1.0, 1.0, 1.0]]
    _check(lambda T, a: a.median(dim).values * 2.0, [x])
    for keepdim in (False, True):
        got = vt.tensor(x).median(dim, keepdim=keepdim)
        want = real.tensor(x).median(dim, keepdim=keepdim)
        assert got.indices.tolist() == want.indices.tolist()
        np.testing.assert_array_equal(np.asarray(got.values.tolist()),
                                      np.asarray(want.values.tolist()))


@pytest.mark.parametrize("case", ["kthvalue", "max", "min", "amax", "amin", "maxdim"])
def test_tie_rules_of_selections(case):
    x = [[3.0, 1.0, 3.0], [3.0, 1.0, 1.0]]
    fn = {"kthvalue": lambda T, a: a.kthvalue(2, 1).values,
          "max": lambda T, a: a.max(), "min": lambda T, a: a.min(),
          "amax": lambda T, a: a.amax(1), "amin": lambda T, a: a.amin(),
          "maxdim": lambda T, a: a.max(0).values}[case]
    _check(fn, [x])


# ------------------------------------------------------------------- atan2
def test_atan2_gradient_at_origin_and_underflow():
    sp = [0.0, -0.0, 1.0, -2.0, 1e-30, np.nan]
    pairs = list(itertools.product(sp, sp))
    y = [p[0] for p in pairs]
    x = [p[1] for p in pairs]
    for dtype in ("float32", "float64"):
        _check(lambda T, a, b: T.atan2(a, b), [y, x], dtype=dtype)


# ----------------------------------------------------------- floor_divide
@pytest.mark.parametrize("case", ["fn", "op", "rop", "int-by-float", "rmod", "inplace"])
def test_floor_divide_backward_raises_as_torch(case):
    fn = {"fn": lambda T, a: T.floor_divide(a, 2), "op": lambda T, a: a // T.tensor(2.0),
          "rop": lambda T, a: 7 // a, "int-by-float": lambda T, a: T.tensor([1, 2]) // a,
          "rmod": lambda T, a: 7 % a, "inplace": lambda T, a: (a * 1).floor_divide_(2)}[case]
    for lib in (real, vt):
        a = lib.tensor([3.0, 5.0], requires_grad=True)
        y = fn(lib, a)
        assert y.requires_grad
        with pytest.raises(RuntimeError, match="derivative for aten::"):
            (y * a).sum().backward()


def test_floor_divide_unreached_is_fine():
    _check(lambda T, a: a * 2 + (a // 2).detach(), [[3.0, 5.0]])
    with vt.no_grad():
        assert not (vt.tensor([3.0], requires_grad=True) // 2).requires_grad


# ------------------------------------- found by the edges generator (gen_edges)
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_sign_of_nan_is_zero_and_abs_gradient_there(dtype):
    # torch: sign(NaN) = 0, so |x|'s gradient at NaN is 0 (ours was NaN both)
    vals = [[np.nan, -1.5, 0.0, -0.0, 2.0]]
    _check(lambda T, x: T.sign(x) + x.sign(), vals, dtype=dtype)
    _check(lambda T, x: x.abs(), vals, dtype=dtype)
    _check(lambda T, x: x.norm(1) + x.norm(float("inf")), vals, dtype=dtype)


def test_clamp_zero_grad_outside_under_inf_dy():
    # torch selects (where), it does not multiply a 0/1 mask into dy
    _check(lambda T, x: T.clamp(x, -0.5, 0.5), [[-1.0, 0.2, 0.5, 3.0]],
           dy=[np.inf, -np.inf, np.nan, np.inf])
    _check(lambda T, x: x.clamp(min=0.0), [[-1.0, 2.0]], dy=[np.nan, 1.0])


def test_rounding_keeps_negative_zero_under_autograd():
    for name in ("round", "ceil", "trunc"):
        for lib in (real, vt):
            x = lib.tensor([-0.3, -0.0, 0.2], requires_grad=True)
            y = getattr(lib, name)(x)
            assert np.signbit(np.asarray(y.detach().tolist())).tolist() == \
                np.signbit(np.asarray(getattr(real, name)(real.tensor([-0.3, -0.0, 0.2]))
                                      .tolist())).tolist(), name


@pytest.mark.parametrize("fn", [lambda T, x: x.amax(1), lambda T, x: x.amin(),
                                lambda T, x: x.amax((0, 1), keepdim=True),
                                lambda T, x: x.amin(0, keepdim=True)],
                         ids=["amax1", "amin-all", "amax-keep", "amin0"])
def test_amax_amin_gradient_of_a_nan_group(fn):
    # torch: dy / count(x == m) * (x == m) counts nothing equal to a NaN
    # extremum, so every element of that group gets NaN
    nan = np.nan
    _check(fn, [[[nan, -1.0, 0.0], [1.0, 3.0, 3.0], [np.inf, 0.0, 1.0]]])


@pytest.mark.parametrize("name", ["maximum", "minimum"])
def test_maximum_minimum_nan_operand_and_inf_dy(name):
    # torch: the unselected input gets exactly 0 (a select, not dy * 0),
    # a tie dy / 2 each, and a NaN operand (neither selected) dy to both
    a = [np.nan, 1.0, 2.0, 3.0, -1.0]
    b = [1.0, np.nan, 2.0, 0.0, 4.0]
    _check(lambda T, x, y: getattr(T, name)(x, y), [a, b], dy=[1.0, 1.0, 1.0, np.inf, np.nan])
    _check(lambda T, x, y: getattr(T, name)(x, y[:1]), [a, b])   # broadcast
