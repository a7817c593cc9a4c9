"""Bitwise ops and shifts (BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot,
LeftShift, RightShift) against NumPy on every integer dtype and bool, and the
Tensor operators & | ^ ~ << >> (docs/ops.md, "Bitwise")."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import INT_DTYPES, SIGNED_INT_DTYPES, op_case

from ._common import ELEMENTWISE_SHAPES, sample

PAIRS = [
    ((3, 4), (3, 4)),
    ((3, 4), (4,)),
    ((2, 1, 4), (3, 1)),
    ((), (2, 3)),
    ((), ()),
    ((0, 3), (3,)),
    ((129, 257), (257,)),
]

INT_BOOL = INT_DTYPES + ("bool",)


def _full_range(rng, dt, shape):
    if dt == "bool":
        return rng.random(shape) < 0.5
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, shape, endpoint=True, dtype=dt)


def _bitwise(op, reference, dtypes=INT_BOOL):
    @op_case(op, inputs=lambda rng, dt, s: [_full_range(rng, dt, s[0]),
                                            _full_range(rng, dt, s[1])],
             reference=reference, dtypes=dtypes, shapes=PAIRS)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy on every integer dtype and bool."
    return test


test_bitwise_and = _bitwise("BitwiseAnd", np.bitwise_and)
test_bitwise_or = _bitwise("BitwiseOr", np.bitwise_or)
test_bitwise_xor = _bitwise("BitwiseXor", np.bitwise_xor)


@op_case("BitwiseNot", inputs=lambda rng, dt, s: [_full_range(rng, dt, s)],
         reference=np.invert, dtypes=INT_BOOL, shapes=ELEMENTWISE_SHAPES)
def test_bitwise_not(case):
    """BitwiseNot is NumPy's invert (two's complement; logical not on bool)."""
    case.check_forward()


def _shift_ref(fn):
    # The reference runs on int64 copies (upcast): a shift by >= 64 or < 0
    # is 0 there (or -1 for a negative value shifted right), and narrower
    # results wrap back to the dtype, which is exactly NumPy's narrow
    # shift for counts >= the width.
    def ref(a, b):
        bits = 64
        big = (b < 0) | (b >= bits)
        safe = np.where(big, 0, b)
        out = fn(a, safe)
        if fn is np.left_shift:
            return np.where(big, 0, out)
        return np.where(big, np.where(a < 0, -1, 0), out)
    return ref


def _counts(rng, dt, s):
    # Counts from below 0 to beyond the width of the dtype.
    width = np.dtype(dt).itemsize * 8
    lo = -3 if dt in SIGNED_INT_DTYPES else 0
    hi = min(width + 3, np.iinfo(dt).max)
    return [_full_range(rng, dt, s[0]),
            rng.integers(lo, hi, s[1], endpoint=True).astype(dt)]


@op_case("LeftShift", inputs=_counts, reference=_shift_ref(np.left_shift),
         dtypes=INT_DTYPES, shapes=PAIRS)
def test_left_shift(case):
    """LeftShift wraps; a count outside [0, width) gives 0."""
    case.check_forward()


@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_shifts_match_numpy_narrow(dtype):
    """On the narrow dtype itself NumPy agrees (counts in and out of range)."""
    rng = np.random.default_rng(1)
    a, b = _counts(rng, dtype, ((64,), (64,)))
    for op, ref in [("left_shift", np.left_shift), ("right_shift", np.right_shift)]:
        got = getattr(dg.ops, op)(dg.tensor(a), dg.tensor(b)).numpy()
        np.testing.assert_array_equal(got, ref(a, b), err_msg=f"{op} {dtype}")


@op_case("RightShift", inputs=_counts, reference=_shift_ref(np.right_shift),
         dtypes=INT_DTYPES, shapes=PAIRS)
def test_right_shift(case):
    """RightShift is arithmetic for signed dtypes; out-of-range counts give 0 or -1."""
    case.check_forward()


@pytest.mark.parametrize("op", ["bitwise_and", "bitwise_or", "bitwise_xor", "left_shift",
                                "right_shift"])
def test_floats_are_rejected(op):
    """Bitwise ops on floats raise (as NumPy), naming the op and dtype."""
    x = dg.tensor(np.ones(3, np.float32))
    with pytest.raises((TypeError, ValueError), match="float32"):
        getattr(dg.ops, op)(x, x)


# ------------------------------------------------------------- operators


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int8", "int16", "int32", "int64"])
def test_operators(dtype):
    """& | ^ ~ << >> follow NumPy, with tensors and Python ints on either side."""
    rng = np.random.default_rng(3)
    a = _full_range(rng, dtype, (3, 4))
    b = _full_range(rng, dtype, (4,))
    ta, tb = dg.tensor(a), dg.tensor(b)
    np.testing.assert_array_equal((ta & tb).numpy(), a & b)
    np.testing.assert_array_equal((ta | tb).numpy(), a | b)
    np.testing.assert_array_equal((ta ^ tb).numpy(), a ^ b)
    np.testing.assert_array_equal((~ta).numpy(), ~a)
    if dtype == "bool":
        return
    np.testing.assert_array_equal((ta & 5).numpy(), a & a.dtype.type(5))
    np.testing.assert_array_equal((5 | ta).numpy(), a.dtype.type(5) | a)
    np.testing.assert_array_equal((ta ^ 3).numpy(), a ^ a.dtype.type(3))
    np.testing.assert_array_equal((ta << 2).numpy(), a << a.dtype.type(2))
    np.testing.assert_array_equal((ta >> 1).numpy(), a >> a.dtype.type(1))
    np.testing.assert_array_equal((1 << (tb & 3)).numpy(),
                                  a.dtype.type(1) << (b & b.dtype.type(3)))
    t = dg.tensor(a)
    t ^= tb
    np.testing.assert_array_equal(t.numpy(), a ^ b)


def test_invert_on_float_raises():
    """~ on a float tensor is a TypeError (NumPy), pointing at logical_not."""
    with pytest.raises(TypeError, match="logical_not"):
        ~dg.tensor(np.ones(2, np.float32))
