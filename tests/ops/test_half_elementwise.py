"""float16 / bfloat16 kernels of the standard element-wise ops (unary,
arithmetic, comparisons, logical ops, Where): each element computed in float
and rounded once, checked against the float64 NumPy reference rounded to the
16-bit dtype, over ELEMENTWISE_SHAPES / broadcasting pairs."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import HALF_DTYPES, numpy_dtype, op_case

from ._common import ELEMENTWISE_SHAPES, nonzero, sample, small_ints
from .test_binary import PAIRS, TRIPLES
from .test_unary import _clip, _elu, _gelu, _leaky_relu, _sigmoid, _softplus


def _unary(op, reference, *, low=-3.0, high=3.0, attrs=None, gen=None, out_dtype=None):
    if gen is None:
        def gen(rng, dt, shape):
            return [sample(rng, dt, shape, low, high)]

    @op_case(op, inputs=gen, reference=reference, dtypes=HALF_DTYPES, attrs=attrs,
             shapes=ELEMENTWISE_SHAPES, out_dtype=out_dtype)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} on float16/bfloat16 matches the rounded float64 reference."
    return test


test_neg = _unary("Neg", np.negative)
test_abs = _unary("Abs", np.abs)
test_sign = _unary("Sign", np.sign)
test_square = _unary("Square", np.square)
test_relu = _unary("Relu", lambda x: np.maximum(x, 0))
test_reciprocal = _unary("Reciprocal", np.reciprocal,
                         gen=lambda rng, dt, s: [nonzero(rng, dt, s)])
test_sqrt = _unary("Sqrt", np.sqrt, low=0.0, high=10.0)
test_rsqrt = _unary("Rsqrt", lambda x: 1.0 / np.sqrt(x), low=0.01, high=10.0)
test_exp = _unary("Exp", np.exp, low=-5.0, high=5.0)
test_log = _unary("Log", np.log, low=0.01, high=10.0)
test_log1p = _unary("Log1p", np.log1p, low=-0.9, high=5.0)
test_sin = _unary("Sin", np.sin, low=-7.0, high=7.0)
test_cos = _unary("Cos", np.cos, low=-7.0, high=7.0)
test_tanh = _unary("Tanh", np.tanh, low=-5.0, high=5.0)
test_sigmoid = _unary("Sigmoid", _sigmoid, low=-8.0, high=8.0)
test_floor = _unary("Floor", np.floor, low=-5.0, high=5.0)
test_ceil = _unary("Ceil", np.ceil, low=-5.0, high=5.0)
test_round = _unary("Round", np.rint,
                    gen=lambda rng, dt, s: [(rng.integers(-20, 21, s) / 4.0).astype(
                        numpy_dtype(dt))])
test_leaky_relu = _unary("LeakyRelu", _leaky_relu, attrs=[{}, {"alpha": 0.2}])
test_elu = _unary("Elu", _elu, attrs=[{}, {"alpha": 0.5}])
test_gelu = _unary("Gelu", _gelu, attrs=[{}, {"approximate": "tanh"}], low=-5.0, high=5.0)
test_softplus = _unary("Softplus", _softplus, attrs=[{}, {"beta": 2.0, "threshold": 1.0}],
                       low=-6.0, high=6.0)
test_clip = _unary("Clip", _clip, attrs=[{"min": -1.0, "max": 2.0}, {"min": 0.5}, {}])
test_logical_not = _unary("LogicalNot", np.logical_not, out_dtype="bool",
                          gen=lambda rng, dt, s: [small_ints(rng, dt, s)])


def _binary(op, reference, gen=None, out_dtype=None):
    if gen is None:
        def gen(rng, dt, shapes):
            return [sample(rng, dt, shapes[0]), sample(rng, dt, shapes[1])]

    @op_case(op, inputs=gen, reference=reference, dtypes=HALF_DTYPES, shapes=PAIRS,
             out_dtype=out_dtype)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} on float16/bfloat16, broadcasting, matches NumPy."
    return test


def _ties(rng, dt, shapes):
    return [small_ints(rng, dt, shapes[0]), small_ints(rng, dt, shapes[1])]


test_add = _binary("Add", np.add)
test_sub = _binary("Sub", np.subtract)
test_mul = _binary("Mul", np.multiply)
test_div = _binary("Div", np.divide,
                   gen=lambda rng, dt, s: [sample(rng, dt, s[0]), nonzero(rng, dt, s[1])])
test_maximum = _binary("Maximum", np.maximum, gen=_ties)
test_minimum = _binary("Minimum", np.minimum, gen=_ties)
test_equal = _binary("Equal", np.equal, gen=_ties, out_dtype="bool")
test_not_equal = _binary("NotEqual", np.not_equal, gen=_ties, out_dtype="bool")
test_less = _binary("Less", np.less, gen=_ties, out_dtype="bool")
test_less_equal = _binary("LessEqual", np.less_equal, gen=_ties, out_dtype="bool")
test_greater = _binary("Greater", np.greater, gen=_ties, out_dtype="bool")
test_greater_equal = _binary("GreaterEqual", np.greater_equal, gen=_ties, out_dtype="bool")
test_logical_and = _binary("LogicalAnd", np.logical_and, gen=_ties, out_dtype="bool")
test_logical_or = _binary("LogicalOr", np.logical_or, gen=_ties, out_dtype="bool")


@op_case("Where",
         inputs=lambda rng, dt, s: [rng.random(s[0]) < 0.5, sample(rng, dt, s[1]),
                                    sample(rng, dt, s[2])],
         reference=np.where, dtypes=HALF_DTYPES, shapes=TRIPLES)
def test_where(case):
    """Where on 16-bit floats selects exactly (a bit copy)."""
    case.check_forward()


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_rounded_once(dtype):
    """The float16 sum of two values is the float32 sum rounded once (not an
    accumulation of 16-bit steps), and special values pass through."""
    dt = numpy_dtype(dtype)
    a = np.array([1.0, np.inf, np.nan, -0.0, 65504.0 if dtype == "float16" else 3e38], dt)
    b = np.array([2.0 ** -11, -np.inf, 1.0, -0.0, 65504.0 if dtype == "float16" else 3e38], dt)
    out = dg.ops.add(dg.tensor(a), dg.tensor(b)).numpy().astype(np.float32)
    with np.errstate(all="ignore"):
        want = (a.astype(np.float32) + b.astype(np.float32)).astype(dt).astype(np.float32)
    np.testing.assert_array_equal(out, want)
    assert np.isnan(out[1]) and np.isnan(out[2]) and np.signbit(out[3]) and np.isinf(out[4])


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_operators(dtype):
    """Tensor operators and Python scalars work on 16-bit floats."""
    dt = numpy_dtype(dtype)
    a = np.array([1.5, -2.0, 3.25], dt)
    t = dg.tensor(a)
    np.testing.assert_array_equal((t + t).numpy(), (a.astype(np.float32) * 2).astype(dt))
    assert (t < t).numpy().tolist() == [False, False, False]
    np.testing.assert_array_equal(dg.ops.where(t > 0.0, t, -t).numpy(), np.abs(a))
