"""Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf and the
IsNan / IsInf / IsFinite predicates against float64 NumPy references, on
float32/float64 and the 16-bit floats, over ELEMENTWISE_SHAPES (0-d, empty,
large), with the special values of each domain."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dragon_sdk.testing import FLOAT_DTYPES, HALF_DTYPES, NUMERIC_DTYPES, OpCase, op_case

from ._common import ELEMENTWISE_SHAPES, sample

_erf = np.vectorize(math.erf, otypes=[np.float64])

DTYPES = FLOAT_DTYPES + HALF_DTYPES


def _unary(op, reference, low, high, tol=1.0):
    @op_case(op, inputs=lambda rng, dt, s: [sample(rng, dt, s, low, high)],
             reference=reference, dtypes=DTYPES, shapes=ELEMENTWISE_SHAPES, tol=tol)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy on [{low}, {high}] for every float dtype."
    return test


test_tan = _unary("Tan", np.tan, -1.4, 1.4, tol=4)
test_asin = _unary("Asin", np.arcsin, -1.0, 1.0)
test_acos = _unary("Acos", np.arccos, -1.0, 1.0)
test_atan = _unary("Atan", np.arctan, -10.0, 10.0)
test_sinh = _unary("Sinh", np.sinh, -5.0, 5.0)
test_cosh = _unary("Cosh", np.cosh, -5.0, 5.0)
test_asinh = _unary("Asinh", np.arcsinh, -20.0, 20.0)
test_acosh = _unary("Acosh", np.arccosh, 1.0, 20.0)
test_atanh = _unary("Atanh", np.arctanh, -0.99, 0.99, tol=4)
test_erf = _unary("Erf", _erf, -4.0, 4.0)


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op, ref", [
    ("Asin", np.arcsin), ("Acos", np.arccos), ("Atan", np.arctan), ("Acosh", np.arccosh),
    ("Atanh", np.arctanh), ("Erf", _erf), ("Tan", np.tan), ("Sinh", np.sinh),
    ("Cosh", np.cosh), ("Asinh", np.arcsinh)])
def test_special_values(op, ref, dtype):
    """Out of domain gives NaN, poles +-inf, infinities their limits (C / NumPy)."""
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5], dtype)
    with np.errstate(all="ignore"):
        out = OpCase.of(op, [x], ref).check_forward()[0]
        want = ref(x.astype(np.float64))
    np.testing.assert_array_equal(np.signbit(out[3:5]), np.signbit(want[3:5]))


def _classify(op, ref):
    def gen(rng, dt, shape):
        x = sample(rng, dt, shape)
        if x.dtype.kind == "f" and x.size:
            flat = x.reshape(-1)
            flat[::3] = np.nan
            flat[1::5] = np.inf
            flat[2::7] = -np.inf
        return [x]

    @op_case(op, inputs=gen, reference=ref, dtypes=NUMERIC_DTYPES + HALF_DTYPES,
             shapes=ELEMENTWISE_SHAPES, out_dtype="bool")
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy on every numeric dtype (bool output)."
    return test


test_isnan = _classify("IsNan", np.isnan)
test_isinf = _classify("IsInf", np.isinf)
test_isfinite = _classify("IsFinite", np.isfinite)
