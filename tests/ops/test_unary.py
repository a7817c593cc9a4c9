"""Element-wise unary ops (docs/ops.md, "Elementwise, unary")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    OpCase,
    op_case,
)

from ._common import ELEMENTWISE_SHAPES, nonzero, sample, small_ints

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _unary(op, reference, dtypes, *, low=-3.0, high=3.0, attrs=None, tol=1.0,
           gen=None, out_dtype=None, select=None):
    """Declares the standard test of a unary op over ELEMENTWISE_SHAPES."""
    if gen is None:
        def gen(rng, dt, shape):
            return [sample(rng, dt, shape, low, high)]

    @op_case(op, inputs=gen, reference=reference, dtypes=dtypes, attrs=attrs,
             shapes=ELEMENTWISE_SHAPES, tol=tol, out_dtype=out_dtype,
             select=select)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy on every dtype, shape and layout."
    return test


# ----------------------------------------------------------- references


def _sigmoid(x):
    return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)),
                    np.exp(x) / (1.0 + np.exp(x)))


def _leaky_relu(x, alpha=0.01):
    return np.where(x > 0, x, alpha * x)


def _elu(x, alpha=1.0):
    return np.where(x > 0, x, alpha * np.expm1(x))


def _gelu(x, approximate="none"):
    if approximate == "tanh":
        inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1.0 + np.tanh(inner))
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x,
                    np.log1p(np.exp(beta * x)) / beta)


def _clip(x, min=None, max=None):  # noqa: A002 - the schema's names
    # Bounds are cast to x's dtype: C++ truncation toward zero for integers.
    cast = (lambda v: math.trunc(v)) if x.dtype.kind in "iu" else float
    if min is not None:
        x = np.maximum(x, cast(min))
    if max is not None:
        x = np.minimum(x, cast(max))
    return x


# ----------------------------------------------------------- one test per op

test_neg = _unary("Neg", np.negative, NUMERIC_DTYPES)
test_abs = _unary("Abs", np.abs, NUMERIC_DTYPES)
test_sign = _unary("Sign", np.sign, NUMERIC_DTYPES)
test_exp = _unary("Exp", np.exp, FLOAT_DTYPES, low=-5, high=5, tol=4)
test_log = _unary("Log", np.log, FLOAT_DTYPES, low=0.01, high=10, tol=4)
test_log1p = _unary("Log1p", np.log1p, FLOAT_DTYPES, low=-0.99, high=5, tol=4)
test_sqrt = _unary("Sqrt", np.sqrt, FLOAT_DTYPES, low=0.0, high=10)
test_rsqrt = _unary("Rsqrt", lambda x: 1.0 / np.sqrt(x), FLOAT_DTYPES,
                    low=0.01, high=10, tol=4)
test_square = _unary("Square", np.square, NUMERIC_DTYPES)
test_reciprocal = _unary(
    "Reciprocal", np.reciprocal, FLOAT_DTYPES,
    gen=lambda rng, dt, shape: [nonzero(rng, dt, shape)])
test_sin = _unary("Sin", np.sin, FLOAT_DTYPES, low=-7, high=7, tol=4)
test_cos = _unary("Cos", np.cos, FLOAT_DTYPES, low=-7, high=7, tol=4)
test_tanh = _unary("Tanh", np.tanh, FLOAT_DTYPES, low=-5, high=5, tol=4)
test_sigmoid = _unary("Sigmoid", _sigmoid, FLOAT_DTYPES, low=-8, high=8,
                      tol=4)
test_relu = _unary("Relu", lambda x: np.maximum(x, 0), NUMERIC_DTYPES)
test_leaky_relu = _unary("LeakyRelu", _leaky_relu, FLOAT_DTYPES,
                         attrs=[{}, {"alpha": 0.2}, {"alpha": -0.5}])
test_elu = _unary("Elu", _elu, FLOAT_DTYPES, attrs=[{}, {"alpha": 0.5}],
                  tol=4)
test_gelu = _unary("Gelu", _gelu, FLOAT_DTYPES,
                   attrs=[{}, {"approximate": "none"},
                          {"approximate": "tanh"}],
                   low=-5, high=5, tol=10)
test_softplus = _unary("Softplus", _softplus, FLOAT_DTYPES,
                       attrs=[{}, {"beta": 2.0}, {"threshold": 1.0},
                              {"beta": 0.5, "threshold": 0.5}],
                       low=-6, high=6, tol=10)
test_clip = _unary(
    "Clip", _clip, NUMERIC_DTYPES,
    attrs=[{"min": -1.0, "max": 2.0}, {"min": 0.5}, {"max": 1.5},
           {"min": -1.7, "max": 2.7}, {}],
    # A negative bound has no uint8 value (the conversion is undefined).
    select=lambda case: not (case.dtype == "uint8"
                             and case.attrs.get("min", 0) < 0))
test_floor = _unary("Floor", np.floor, FLOAT_DTYPES, low=-5, high=5)
test_ceil = _unary("Ceil", np.ceil, FLOAT_DTYPES, low=-5, high=5)
test_round = _unary(
    "Round", np.rint, FLOAT_DTYPES,
    # Quarters: many exact ties (x.5) to exercise half-to-even.
    gen=lambda rng, dt, shape: [
        (rng.integers(-20, 21, shape) / 4.0).astype(dt)])


def _zeros_and_fractions(rng, dt, shape):
    x = small_ints(rng, dt, shape)
    if dt.startswith("float"):
        x = x * np.array(0.25, dt)  # 0 and values in (-1, 1) that are not 0
    return [x]


test_logical_not = _unary("LogicalNot", np.logical_not, ALL_DTYPES,
                          out_dtype="bool", gen=_zeros_and_fractions)


# ------------------------------------------------------------ special values

_SPECIAL = [np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 0.5, -2.0, 1e-30,
            1e30]

# op -> (reference, values); values default to _SPECIAL. Only ops whose
# behaviour on these values the spec (or IEEE 754) fixes are listed.
_SPECIAL_CASES = {
    "Neg": (np.negative, None),
    "Abs": (np.abs, None),
    "Sign": (np.sign, None),
    "Exp": (np.exp, None),
    "Log": (np.log, None),
    "Log1p": (np.log1p, None),
    "Sqrt": (np.sqrt, None),
    "Rsqrt": (lambda x: 1.0 / np.sqrt(x),
              [np.nan, np.inf, 0.0, 1.0, -1.0, 4.0, 1e-30, 1e30]),
    "Square": (np.square, None),
    "Reciprocal": (np.reciprocal, None),
    "Sin": (np.sin, None),
    "Cos": (np.cos, None),
    "Tanh": (np.tanh, None),
    "Sigmoid": (_sigmoid, None),
    "Floor": (np.floor, None),
    "Ceil": (np.ceil, None),
    "Round": (np.rint, None),
    "Softplus": (_softplus, None),
    "Elu": (_elu, [np.inf, -np.inf, 0.0, 1.0, -1.0, -1e30]),
    "LeakyRelu": (_leaky_relu, [np.inf, -np.inf, 0.0, 1.0, -1.0]),
}


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", sorted(_SPECIAL_CASES))
def test_special_values(op, dtype):
    """NaN, ±inf, ±0 and huge/tiny values follow IEEE 754 / NumPy."""
    reference, values = _SPECIAL_CASES[op]
    x = np.array(values if values is not None else _SPECIAL, dtype=dtype)
    OpCase.of(op, [x], reference, tol=4).check_forward()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_round_half_to_even(dtype):
    """Ties go to the even neighbour; the float just below 0.5 rounds to 0."""
    below_half = np.nextafter(np.array(0.5, dtype), np.array(0, dtype))
    x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, below_half, -below_half,
                  1e15 + 0.5 if dtype == "float64" else 4194304.5],
                 dtype=dtype)
    out = OpCase.of("Round", [x], np.rint).check_forward()[0]
    assert out[:7].tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, 4.0]
    assert out[7] == 0.0 and out[8] == 0.0


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_sigmoid_is_stable_for_large_inputs(dtype):
    """No overflow: sigmoid(-1000) = 0 and sigmoid(1000) = 1, never NaN."""
    x = np.array([-1000.0, -100.0, -30.0, 30.0, 100.0, 1000.0], dtype=dtype)
    out = OpCase.of("Sigmoid", [x], _sigmoid).check_forward()[0]
    assert not np.isnan(out).any()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softplus_threshold_returns_x(dtype):
    """Above the threshold softplus is exactly x (no exp overflow)."""
    x = np.array([20.5, 50.0, 1e4, 3e38 if dtype == "float32" else 1e300],
                 dtype=dtype)
    out = OpCase.of("Softplus", [x], _softplus).check_forward()[0]
    np.testing.assert_array_equal(out, x)
    y = np.array([1.5, 2.0], dtype=dtype)
    out = OpCase.of("Softplus", [y], _softplus,
                    attrs={"beta": 1.0, "threshold": 1.0}).check_forward()[0]
    np.testing.assert_array_equal(out, y)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_clip_bounds_cast_to_dtype(dtype):
    """A fractional bound on an integer tensor is truncated toward zero."""
    x = np.arange(0, 8).astype(dtype)
    out = OpCase.of("Clip", [x], _clip,
                    attrs={"min": 2.9, "max": 5.5}).check_forward()[0]
    lo, hi = (2.9, 5.5) if dtype.startswith("float") else (2, 5)
    assert out.min() == lo and out.max() == hi


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64"])
def test_int_limits_wrap(dtype):
    """-INT_MIN and |INT_MIN| wrap to INT_MIN; squares wrap (docs/ops.md)."""
    x = np.array([np.iinfo(dtype).min, -1, 0, np.iinfo(dtype).max], dtype)
    OpCase.of("Neg", [x], np.negative).check_forward()
    OpCase.of("Abs", [x], np.abs).check_forward()
    OpCase.of("Square", [x], np.square).check_forward()


def test_logical_not_of_nan_is_false():
    """NaN != 0, so logical_not(NaN) is False."""
    x = np.array([np.nan, 0.0, -0.0, np.inf], np.float32)
    out = OpCase.of("LogicalNot", [x], np.logical_not,
                    out_dtype="bool").check_forward()[0]
    assert out.tolist() == [False, True, True, False]
