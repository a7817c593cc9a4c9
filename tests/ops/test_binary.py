"""Element-wise binary ops with broadcasting, and Where (docs/ops.md)."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    SIGNED_INT_DTYPES,
    OpCase,
    op_case,
)

from ._common import nonzero, sample, small_ints

#: (a, b) shape pairs: equal, trailing broadcast, both sides broadcasting,
#: 0-d on either side, empty results, and a pair large enough for the
#: kernels' parallel path.
PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((), ()),
    ((0, 3), (3,)),
    ((5, 1), (1, 0)),
    ((129, 257), (257,)),
]


def _binary(op, reference, dtypes, *, gen=None, out_dtype=None, tol=1.0):
    """Declares the standard test of a binary op over PAIRS."""
    if gen is None:
        def gen(rng, dt, shapes):
            return [sample(rng, dt, shapes[0]), sample(rng, dt, shapes[1])]

    @op_case(op, inputs=gen, reference=reference, dtypes=dtypes, shapes=PAIRS,
             out_dtype=out_dtype, tol=tol)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy, broadcasting, on every dtype."
    return test


def _ties(rng, dt, shapes):
    # Few distinct values, so that equal elements (and zeros) are common.
    return [small_ints(rng, dt, shapes[0]), small_ints(rng, dt, shapes[1])]


def _divisor(rng, dt, shapes):
    return [sample(rng, dt, shapes[0]), nonzero(rng, dt, shapes[1])]


def _power(rng, dt, shapes):
    return [sample(rng, dt, shapes[0], 0.1, 3.0),
            sample(rng, dt, shapes[1], -2.0, 2.0)]


test_add = _binary("Add", np.add, NUMERIC_DTYPES)
test_sub = _binary("Sub", np.subtract, NUMERIC_DTYPES)
test_mul = _binary("Mul", np.multiply, NUMERIC_DTYPES)
test_div = _binary("Div", np.divide, FLOAT_DTYPES, gen=_divisor)
test_pow = _binary("Pow", np.power, FLOAT_DTYPES, gen=_power, tol=10)
test_maximum = _binary("Maximum", np.maximum, NUMERIC_DTYPES, gen=_ties)
test_minimum = _binary("Minimum", np.minimum, NUMERIC_DTYPES, gen=_ties)
test_equal = _binary("Equal", np.equal, ALL_DTYPES, gen=_ties,
                     out_dtype="bool")
test_not_equal = _binary("NotEqual", np.not_equal, ALL_DTYPES, gen=_ties,
                         out_dtype="bool")
test_less = _binary("Less", np.less, ALL_DTYPES, gen=_ties, out_dtype="bool")
test_less_equal = _binary("LessEqual", np.less_equal, ALL_DTYPES, gen=_ties,
                          out_dtype="bool")
test_greater = _binary("Greater", np.greater, ALL_DTYPES, gen=_ties,
                       out_dtype="bool")
test_greater_equal = _binary("GreaterEqual", np.greater_equal, ALL_DTYPES,
                             gen=_ties, out_dtype="bool")
test_logical_and = _binary("LogicalAnd", np.logical_and, ALL_DTYPES,
                           gen=_ties, out_dtype="bool")
test_logical_or = _binary("LogicalOr", np.logical_or, ALL_DTYPES, gen=_ties,
                          out_dtype="bool")


# ------------------------------------------------------------------ Where

TRIPLES = [
    ((3, 4), (3, 4), (3, 4)),
    ((3, 1), (1, 4), ()),
    ((4,), (2, 3, 4), (3, 1)),
    ((), (2, 2), (2, 2)),
    ((0, 2), (2,), (1, 2)),
]


@op_case("Where",
         inputs=lambda rng, dt, s: [rng.random(s[0]) < 0.5,
                                    sample(rng, dt, s[1]),
                                    sample(rng, dt, s[2])],
         reference=np.where, dtypes=ALL_DTYPES, shapes=TRIPLES)
def test_where(case):
    """Where selects x or y, broadcasting all three, for every x/y dtype."""
    case.check_forward()


# ------------------------------------------------------------ special values


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_div_by_zero_is_ieee(dtype):
    """x / 0 is ±inf, 0 / 0 and inf / inf are NaN."""
    a = np.array([1.0, -1.0, 0.0, np.inf, np.nan, 1.0], dtype)
    b = np.array([0.0, 0.0, 0.0, np.inf, 1.0, -0.0], dtype)
    out = OpCase.of("Div", [a, b], np.divide).check_forward()[0]
    assert np.isposinf(out[0]) and np.isneginf(out[1]) and np.isneginf(out[5])
    assert np.isnan(out[2:5]).all()


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_pow_special_cases(dtype):
    """Negative bases, zero and infinite exponents follow C pow / NumPy."""
    a = np.array([-2.0, -2.0, -8.0, 0.0, 0.0, -1.0, 2.0, 0.5, -3.0, np.nan,
                  1.0, 0.0], dtype)
    b = np.array([3.0, 0.5, 1.0 / 3.0, 0.0, -1.0, np.inf, -np.inf, np.inf,
                  2.0, 0.0, np.nan, 2.0], dtype)
    out = OpCase.of("Pow", [a, b], np.power).check_forward()[0]
    assert out[0] == -8.0 and out[8] == 9.0
    assert np.isnan(out[1]) and np.isnan(out[2])
    assert out[3] == 1.0 and out[9] == 1.0 and out[10] == 1.0


@pytest.mark.parametrize("op, ref", [("Maximum", np.maximum),
                                     ("Minimum", np.minimum)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_maximum_minimum_propagate_nan(op, ref, dtype):
    """A NaN in either operand gives NaN, as NumPy (docs/ops.md)."""
    a = np.array([np.nan, 1.0, np.nan, -np.inf, 2.0], dtype)
    b = np.array([1.0, np.nan, np.nan, 0.0, np.inf], dtype)
    out = OpCase.of(op, [a, b], ref).check_forward()[0]
    assert np.isnan(out[:3]).all() and not np.isnan(out[3:]).any()


@pytest.mark.parametrize("op, ref", [
    ("Equal", np.equal), ("NotEqual", np.not_equal), ("Less", np.less),
    ("LessEqual", np.less_equal), ("Greater", np.greater),
    ("GreaterEqual", np.greater_equal), ("LogicalAnd", np.logical_and),
    ("LogicalOr", np.logical_or)])
def test_comparisons_with_nan(op, ref):
    """Every comparison with NaN is false except !=; NaN is 'true'."""
    a = np.array([np.nan, np.nan, 1.0, -0.0, np.inf, 0.0], np.float32)
    b = np.array([np.nan, 1.0, np.nan, 0.0, np.inf, 0.0], np.float32)
    OpCase.of(op, [a, b], ref, out_dtype="bool").check_forward()


@pytest.mark.parametrize("op, ref", [("Add", np.add), ("Sub", np.subtract),
                                     ("Mul", np.multiply)])
@pytest.mark.parametrize("dtype", SIGNED_INT_DTYPES + ("uint8",))
def test_integer_overflow_wraps(op, ref, dtype):
    """Overflow wraps as two's complement on the kernel's type."""
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max, 7], dtype)
    b = np.array([1, info.max if dtype == "uint8" else -1, info.max, 3],
                 dtype)
    OpCase.of(op, [a, b], ref).check_forward()


def test_where_condition_broadcasts_over_bool_values():
    """Where on bool x/y with a 0-d condition returns x or y whole."""
    x = np.array([True, False, True])
    y = np.array([False, False, True])
    for c in (True, False):
        cond = np.array(c)
        out = OpCase.of("Where", [cond, x, y], np.where,
                        dtype="bool").check_forward()[0]
        np.testing.assert_array_equal(out, x if c else y)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("y_shape", [(3000,), ()], ids=["full", "scalar"])
def test_where_is_bitwise_exact_on_random_masks(dtype, y_shape):
    """Where copies the chosen element's bits (NaN payloads, -0, inf,
    subnormals) on a long random mask, the relu-gradient pattern the
    kernel's branch-free select is written for, with y full or a scalar."""
    rng = np.random.default_rng(7)
    n = 3000
    cond = rng.random(n) < 0.5
    if dtype in ("bool",):
        x = rng.random(n) < 0.5
        y = rng.random(y_shape) < 0.5
    elif np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        x = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        y = rng.integers(info.min, info.max, y_shape, dtype=dtype, endpoint=True)
    else:
        specials = np.array([np.nan, -np.nan, -0.0, 0.0, np.inf, -np.inf,
                             np.finfo(np.float32).tiny / 4], dtype)
        x = sample(rng, dtype, (n,))
        x[rng.integers(0, n, 300)] = rng.choice(specials, 300)
        y = (rng.choice(specials, y_shape) if y_shape else
             np.array(-0.0, dtype)).astype(dtype)
    import dragon_core as dg
    x, y = x.astype(dtype), np.asarray(y).astype(dtype)
    out = dg.ops.where(dg.tensor(cond), dg.tensor(x), dg.tensor(y)).numpy()
    want = np.where(cond, x, y)
    assert out.dtype == want.dtype
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
