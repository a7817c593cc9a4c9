"""Reductions added for ONNX: float16 / bfloat16 Sum, Prod, Mean, Max, Min,
Var, Std, LogSumExp (accumulated in double, rounded once), bool Max / Min
(any / all), and empty Max / Min (-inf / +inf for floats as ONNX, false /
true for bool, an error naming the dtype for integers)."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import FLOAT_DTYPES, HALF_DTYPES, INT_DTYPES, OpCase, op_case

from ._common import norm_axes
from .test_reduce import EDGE_ATTRS, EDGE_SHAPES, MAIN_ATTRS, REDUCTIONS, _axes_exist, _values


def _extreme_ref(fn, empty):
    """NumPy's max/min, with ONNX's value for an empty group."""
    def ref(x, axes=None, keepdims=False):
        axis = norm_axes(axes, x.ndim)
        if x.size == 0 or any(x.shape[a] == 0 for a in axis):
            shape = np.sum(np.zeros(x.shape), axis=axis, keepdims=keepdims).shape
            return np.full(shape, empty, x.dtype)
        return fn(x, axis=axis, keepdims=keepdims)
    return ref


def _declare_half(op):
    reference, _, (low, high), tol, _ = REDUCTIONS[op]
    if op == "Max":
        reference = _extreme_ref(np.max, -np.inf)
    elif op == "Min":
        reference = _extreme_ref(np.min, np.inf)
    gen = _values(op, low, high)

    @op_case(op, inputs=gen, reference=reference, dtypes=HALF_DTYPES,
             attrs=MAIN_ATTRS, shapes=[(3, 4, 5)], tol=tol)
    def test_main(case):
        case.check_forward()

    @op_case(op, inputs=gen, reference=reference, dtypes=HALF_DTYPES, attrs=EDGE_ATTRS,
             shapes=EDGE_SHAPES, tol=tol, layouts=["contiguous"], select=_axes_exist)
    def test_edge(case):
        case.check_forward()

    test_main.__doc__ = f"{op} on float16/bfloat16 over axes / keepdims variants."
    test_edge.__doc__ = f"{op} on float16/bfloat16 0-d and empty tensors."
    return test_main, test_edge


test_half_sum, test_half_sum_edge = _declare_half("Sum")
test_half_prod, test_half_prod_edge = _declare_half("Prod")
test_half_mean, test_half_mean_edge = _declare_half("Mean")
test_half_max, test_half_max_edge = _declare_half("Max")
test_half_min, test_half_min_edge = _declare_half("Min")
test_half_var, test_half_var_edge = _declare_half("Var")
test_half_std, test_half_std_edge = _declare_half("Std")
test_half_logsumexp, test_half_logsumexp_edge = _declare_half("LogSumExp")


def _bool_gen(rng, dt, shape):
    return [rng.random(shape) < 0.3]


@op_case("Max", inputs=_bool_gen, reference=_extreme_ref(np.max, False), dtypes=["bool"],
         attrs=MAIN_ATTRS + EDGE_ATTRS, shapes=[(3, 4, 5), (), (0,), (2, 0, 3)],
         out_dtype="bool", select=_axes_exist)
def test_bool_max(case):
    """Max on bool is any(); empty gives false."""
    case.check_forward()


@op_case("Min", inputs=_bool_gen, reference=_extreme_ref(np.min, True), dtypes=["bool"],
         attrs=MAIN_ATTRS + EDGE_ATTRS, shapes=[(3, 4, 5), (), (0,), (2, 0, 3)],
         out_dtype="bool", select=_axes_exist)
def test_bool_min(case):
    """Min on bool is all(); empty gives true."""
    case.check_forward()


@pytest.mark.parametrize("op, value", [("Max", -np.inf), ("Min", np.inf)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + HALF_DTYPES)
@pytest.mark.parametrize("shape, axes", [((0, 3), [0]), ((0,), None), ((2, 0), [1])])
def test_empty_float_extremes_are_infinite(op, value, dtype, shape, axes):
    """An empty Max is -inf and Min +inf for floats (ONNX ReduceMax/ReduceMin)."""
    x = dg.ops.zeros(shape, dtype)
    kwargs = {} if axes is None else {"axis": axes}
    out = getattr(dg.ops, op.lower())(x, **kwargs).numpy().astype(np.float64)
    want = np.sum(np.zeros(shape), axis=None if axes is None else tuple(axes))
    assert out.shape == np.shape(want)
    assert (out == value).all()


@pytest.mark.parametrize("fn", ["max", "min"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_empty_integer_extremes_raise(fn, dtype):
    """Integers have no infinity: the error names the op, shape and dtype."""
    x = dg.tensor(np.zeros((0, 3), dtype))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=rf"{fn.capitalize()}: zero-size reduction.*\[0, 3\].*{dtype}"):
        getattr(dg.ops, fn)(x, axis=[0])


@pytest.mark.parametrize("op, ref", [("Max", np.max), ("Min", np.min)])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_extremes_propagate_nan(op, ref, dtype):
    """A NaN in a reduced group gives NaN on 16-bit floats too."""
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0], [np.inf, -np.inf, 0.0]], np.float32)
    t = dg.tensor(x).astype(dtype)
    out = getattr(dg.ops, op.lower())(t, axis=[1]).numpy().astype(np.float32)
    assert np.isnan(out[0]) and not np.isnan(out[1:]).any()
    np.testing.assert_array_equal(out[1:], ref(x[1:], axis=1))


def test_bool_maximum_minimum():
    """Element-wise Maximum / Minimum on bool are or / and (NumPy), broadcasting."""
    a = np.array([[True], [False]])
    b = np.array([True, False, True])
    OpCase.of("Maximum", [a, b], np.maximum).check_forward()
    OpCase.of("Minimum", [a, b], np.minimum).check_forward()


# ------------------------------------------------------------- ArgMax/ArgMin

from .test_reduce import ARG_ATTRS, _arg_reference, _axis_exists  # noqa: E402
from ._common import small_ints  # noqa: E402


def _declare_half_arg(op, fn):
    @op_case(op, inputs=lambda rng, dt, s: [small_ints(rng, dt, s)],
             reference=_arg_reference(fn), dtypes=HALF_DTYPES, attrs=ARG_ATTRS,
             shapes=[(3, 4, 5), (7, 6), (1,), ()], out_dtype="int64", select=_axis_exists)
    def test(case):
        case.check_forward()

    test.__doc__ = f"{op} on float16/bfloat16: first index on ties (many ties)."
    return test


test_half_argmax = _declare_half_arg("ArgMax", np.argmax)
test_half_argmin = _declare_half_arg("ArgMin", np.argmin)


@pytest.mark.parametrize("op, fn", [("argmax", np.argmax), ("argmin", np.argmin)])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_half_arg_nan_wins(op, fn, dtype):
    """The first NaN wins, as NumPy's argmax / argmin."""
    x = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, -1.0, 2.0, -1.0]], np.float32)
    t = dg.tensor(x).astype(dtype)
    assert getattr(dg.ops, op)(t, 1).numpy().tolist() == fn(x, axis=1).tolist()
