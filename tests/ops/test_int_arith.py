"""Division and remainder (FloorDivide, TruncDivide, Mod, Fmod) and integer
Pow: NumPy references in float64 / int64 on every numeric dtype (16-bit
floats included), broadcasting, 0-d and empty shapes, and the integer edge
cases: division by zero gives 0, MIN // -1 wraps (docs/ops.md, "Division and
remainder")."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import (
    FLOAT_DTYPES,
    HALF_DTYPES,
    INT_DTYPES,
    NUMERIC_DTYPES,
    SIGNED_INT_DTYPES,
    OpCase,
    op_case,
)

from ._common import sample

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

DTYPES = NUMERIC_DTYPES + HALF_DTYPES


def _ignore(fn):
    """A NumPy reference with its integer divide-by-zero warnings silenced."""
    def ref(*args):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fn(*args)
    return ref


def _trunc_divide(a, b):
    if a.dtype.kind == "f":
        return np.trunc(a / b)
    # Exact in int64 (upcast inputs): C truncation, x / 0 == 0.
    safe = np.where(b == 0, 1, b)
    q = np.abs(a) // np.abs(safe) * np.sign(a) * np.sign(safe)
    return np.where(b == 0, 0, q)


def _operands(rng, dt, shapes):
    # Divisors with both signs and zeros for integers (zero gives 0); no zero
    # divisor for floats, where the special values are tested below.
    a = sample(rng, dt, shapes[0], -20.0, 20.0)
    if dt in INT_DTYPES:
        b = sample(rng, dt, shapes[1], -5.0, 5.0)
    else:
        mag = rng.uniform(0.3, 5.0, shapes[1])
        b = (mag * np.where(rng.random(shapes[1]) < 0.5, -1.0, 1.0)).astype(a.dtype)
    return [a, b]


def _binary(op, reference, dtypes=DTYPES, tol=1.0):
    @op_case(op, inputs=_operands, reference=_ignore(reference), dtypes=dtypes,
             shapes=PAIRS, tol=tol)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} matches NumPy, broadcasting, on every numeric dtype."
    return test


test_floor_divide = _binary("FloorDivide", np.floor_divide)
test_trunc_divide = _binary("TruncDivide", _trunc_divide)
test_mod = _binary("Mod", np.remainder, tol=10)
test_fmod = _binary("Fmod", np.fmod, tol=10)


@op_case("Pow",
         inputs=lambda rng, dt, s: [sample(rng, dt, s[0], -6.0, 6.0),
                                    sample(rng, dt, s[1], 0.0, 9.0)],
         reference=np.power, dtypes=INT_DTYPES, shapes=PAIRS)
def test_int_pow(case):
    """Integer Pow is exact, wrapping on overflow as NumPy's."""
    case.check_forward()


@op_case("Pow",
         inputs=lambda rng, dt, s: [sample(rng, dt, s[0], 0.1, 3.0),
                                    sample(rng, dt, s[1], -2.0, 2.0)],
         reference=np.power, dtypes=HALF_DTYPES, shapes=PAIRS)
def test_half_pow(case):
    """16-bit Pow computes in float and rounds once."""
    case.check_forward()


# ------------------------------------------------------------ integer edges


def _run(op, a, b):
    return getattr(dg.ops, op)(dg.tensor(a), dg.tensor(b)).numpy()


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("op", ["floor_divide", "trunc_divide", "mod", "fmod"])
def test_integer_division_by_zero_is_zero(op, dtype):
    """x // 0, x % 0 ... are 0 (NumPy's value), never a SIGFPE."""
    a = np.array([0, 1, 7, 100], dtype)
    out = _run(op, a, np.zeros(4, dtype))
    assert out.dtype == np.dtype(dtype)
    assert out.tolist() == [0, 0, 0, 0]


@pytest.mark.parametrize("dtype", SIGNED_INT_DTYPES)
def test_min_divided_by_minus_one_wraps(dtype):
    """MIN // -1 overflows: it wraps to MIN (NumPy's value); remainders are 0."""
    lo = np.iinfo(dtype).min
    a = np.array([lo, lo, 5], dtype)
    b = np.array([-1, 1, -1], dtype)
    assert _run("floor_divide", a, b).tolist() == [lo, lo, -5]
    assert _run("trunc_divide", a, b).tolist() == [lo, lo, -5]
    assert _run("mod", a, b).tolist() == [0, 0, 0]
    assert _run("fmod", a, b).tolist() == [0, 0, 0]


def test_signs_follow_numpy_and_c():
    """// and % take the divisor's sign (NumPy); trunc_divide / fmod the
    dividend's (C, ONNX Div and Mod with fmod=1)."""
    a = np.array([7, -7, 7, -7], np.int32)
    b = np.array([2, 2, -2, -2], np.int32)
    assert _run("floor_divide", a, b).tolist() == [3, -4, -4, 3]
    assert _run("mod", a, b).tolist() == [1, 1, -1, -1]
    assert _run("trunc_divide", a, b).tolist() == [3, -3, -3, 3]
    assert _run("fmod", a, b).tolist() == [1, -1, 1, -1]


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_float_special_values(dtype):
    """Floats: x // 0 is +-inf or NaN, x % 0 NaN, signed zeros as NumPy."""
    a = np.array([1.0, -1.0, 0.0, 5.0, -5.0, np.inf, 3.0, -0.0], dtype)
    b = np.array([0.0, 0.0, 0.0, np.inf, np.inf, 2.0, -3.0, 2.0], dtype)
    with np.errstate(divide="ignore", invalid="ignore"):
        for op, ref in [("FloorDivide", np.floor_divide), ("Mod", np.remainder),
                        ("Fmod", np.fmod)]:
            out = OpCase.of(op, [a, b], ref).check_forward()[0]
            np.testing.assert_array_equal(np.signbit(out), np.signbit(ref(a, b)))


@pytest.mark.parametrize("dtype", SIGNED_INT_DTYPES)
def test_int_pow_negative_exponent_raises(dtype):
    """NumPy raises for integers to negative integer powers; so do we."""
    a = dg.tensor(np.array([2, 3], dtype))
    b = dg.tensor(np.array([1, -1], dtype))
    with pytest.raises(ValueError, match=r"Pow: integers to negative integer powers"):
        dg.ops.pow(a, b)
    with pytest.raises(ValueError, match=r"negative integer powers"):
        a ** -2


def test_int_pow_edges():
    """0 ** 0 == 1, (-1) ** odd, uint8 wrapping, int64 exactness."""
    assert _run("pow", np.int64([0, -1, -1, 3]), np.int64([0, 3, 4, 39])).tolist() == \
        [1, -1, 1, 3 ** 39]
    assert _run("pow", np.uint8([2, 3]), np.uint8([8, 5])).tolist() == [0, 243]


# ------------------------------------------------------------- operators


@pytest.mark.parametrize("dtype", ["int8", "int32", "int64", "uint8", "float32", "float64"])
def test_operators_follow_numpy(dtype):
    """Tensor //, %, ** (and their reflected and in-place forms) as NumPy."""
    rng = np.random.default_rng(0)
    a = sample(rng, dtype, (4, 5), -20.0, 20.0)
    b = sample(rng, dtype, (5,), 1.0, 6.0)
    ta, tb = dg.tensor(a), dg.tensor(b)
    np.testing.assert_array_equal((ta // tb).numpy(), a // b)
    np.testing.assert_array_equal((ta % tb).numpy(), a % b)
    np.testing.assert_array_equal((ta // 3).numpy(), a // a.dtype.type(3))
    np.testing.assert_array_equal((ta % 3).numpy(), a % a.dtype.type(3))
    np.testing.assert_array_equal((50 // tb).numpy(), b.dtype.type(50) // b)
    np.testing.assert_array_equal((50 % tb).numpy(), b.dtype.type(50) % b)
    e = np.abs(a) % 4 if dtype != "uint8" else a % 4
    te = dg.tensor(e.astype(dtype))
    with np.errstate(over="ignore"):
        np.testing.assert_allclose((te ** tb).numpy(), e.astype(dtype) ** b, rtol=1e-6)
    t = dg.tensor(a)
    t //= tb
    np.testing.assert_array_equal(t.numpy(), a // b)
    t = dg.tensor(a)
    t %= 3
    np.testing.assert_array_equal(t.numpy(), a % a.dtype.type(3))
    t = te
    t **= 2
    np.testing.assert_allclose(t.numpy(), e.astype(dtype) ** 2, rtol=1e-6)


def test_int_operators_keep_the_int_dtype():
    """int // int, int % int and int ** int stay integer (NumPy); / gives a float."""
    a = dg.tensor(np.int32([7, -7]))
    assert (a // 2).dtype == dg.int32 and (a // 2).tolist() == [3, -4]
    assert (a % 2).dtype == dg.int32 and (a % 2).tolist() == [1, 1]
    assert (a ** 2).dtype == dg.int32 and (a ** 2).tolist() == [49, 49]
    assert (a / 2).dtype.is_floating_point


def test_mixed_int_dtypes_promote():
    """int8 // int32 computes in int32, as NumPy promotes."""
    a = dg.tensor(np.int8([100, -100]))
    b = dg.tensor(np.int32([3, 3]))
    out = a // b
    assert out.dtype == dg.int32 and out.tolist() == [33, -34]
