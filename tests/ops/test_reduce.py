"""Reductions (Sum, Prod, Mean, Max, Min, Var, Std, LogSumExp) and
ArgMax/ArgMin (docs/ops.md, "Reductions")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    NUMERIC_DTYPES,
    OpCase,
    op_case,
)

from ._common import norm_axes, sample, small_ints

# Axes on a rank-3 input: all, none, one (incl. negative), several
# (unsorted, negative) and every axis by name.
_AXES = [None, [], [0], [1], [-1], [0, 2], [2, 0], [-3, -1], [0, 1, 2]]
MAIN_ATTRS = ([{"axes": a} if a is not None else {} for a in _AXES]
              + [{"keepdims": True}, {"axes": [1], "keepdims": True},
                 {"axes": [0, 2], "keepdims": True}])

# Edge inputs: 0-d, empty, and a tensor with an empty middle axis.
EDGE_SHAPES = [(), (0,), (2, 0, 3)]
EDGE_ATTRS = [{}, {"keepdims": True}, {"axes": []}, {"axes": [0]},
              {"axes": [1]}, {"axes": [0, 2], "keepdims": True}]


def _axes_exist(case):
    """True when the case's axes exist in its shape."""
    rank = len(case.shape)
    return all(-rank <= a < rank for a in case.attrs.get("axes") or [])


def _zero_size(case):
    """True when a reduced axis is empty (an error for Max/Min)."""
    shape = case.shape
    axes = norm_axes(case.attrs.get("axes"), len(shape))
    return any(shape[a] == 0 for a in axes)


def _reference(fn, **fixed):
    def ref(x, axes=None, keepdims=False, **kw):
        return fn(x, axis=norm_axes(axes, x.ndim), keepdims=keepdims,
                  **fixed, **kw)
    return ref


def _logsumexp(x, axis, keepdims):
    if x.size == 0 or axis == ():
        with np.errstate(divide="ignore"):
            return np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))
    m = np.max(x, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis)


REDUCTIONS = {
    # op: (reference, dtypes, generator low/high, tol, out_dtype)
    "Sum": (_reference(np.sum), ALL_DTYPES, (-3, 3), 10,
            lambda dt: "int64" if dt == "bool" else dt),
    "Prod": (_reference(np.prod), NUMERIC_DTYPES, (-2, 2), 10, None),
    "Mean": (_reference(np.mean), FLOAT_DTYPES, (-3, 3), 10, None),
    "Max": (_reference(np.max), NUMERIC_DTYPES, (-9, 9), 1, None),
    "Min": (_reference(np.min), NUMERIC_DTYPES, (-9, 9), 1, None),
    "Var": (_reference(np.var), FLOAT_DTYPES, (-3, 3), 20, None),
    "Std": (_reference(np.std), FLOAT_DTYPES, (-3, 3), 20, None),
    "LogSumExp": (_reference(_logsumexp), FLOAT_DTYPES, (-5, 5), 10, None),
}


def _values(op, low, high):
    def gen(rng, dt, shape):
        if op == "Prod" and dt.startswith("float"):
            # Magnitudes near 1 so a product of 60 stays well scaled.
            x = rng.uniform(0.5, 1.5, shape) * rng.choice([-1, 1], shape)
            return [x.astype(dt)]
        return [sample(rng, dt, shape, low, high)]
    return gen


def _declare(op):
    reference, dtypes, (low, high), tol, out_dtype = REDUCTIONS[op]
    gen = _values(op, low, high)
    main_attrs = MAIN_ATTRS
    if op in ("Var", "Std"):
        main_attrs = MAIN_ATTRS + [{"ddof": 1}, {"axes": [1], "ddof": 1},
                                   {"axes": [0, 2], "ddof": 2,
                                    "keepdims": True}]

    @op_case(op, inputs=gen, reference=reference, dtypes=dtypes,
             attrs=main_attrs, shapes=[(3, 4, 5)], out_dtype=out_dtype,
             tol=tol)
    def test_main(case):
        case.check_forward()

    def edge_select(case):
        # A zero-size Max/Min is an error, tested in test_errors.py.
        return _axes_exist(case) and not (op in ("Max", "Min")
                                          and _zero_size(case))

    @op_case(op, inputs=gen, reference=reference, dtypes=dtypes,
             attrs=EDGE_ATTRS, shapes=EDGE_SHAPES, out_dtype=out_dtype,
             tol=tol, layouts=["contiguous"], select=edge_select)
    def test_edge(case):
        case.check_forward()

    @op_case(op, inputs=gen, reference=reference,
             dtypes=[d for d in ("float32", "int32") if d in dtypes],
             attrs=[{}, {"axes": [0]}, {"axes": [1]}],
             shapes=[(64, 1031)], out_dtype=out_dtype, tol=tol * 10)
    def test_large(case):
        case.check_forward()

    test_main.__doc__ = f"{op} over axes / keepdims variants of a 3-D tensor."
    test_edge.__doc__ = f"{op} on 0-d and empty tensors."
    test_large.__doc__ = f"{op} on a tensor large enough to run in parallel."
    return test_main, test_edge, test_large


test_sum, test_sum_edge, test_sum_large = _declare("Sum")
test_prod, test_prod_edge, test_prod_large = _declare("Prod")
test_mean, test_mean_edge, test_mean_large = _declare("Mean")
test_max, test_max_edge, test_max_large = _declare("Max")
test_min, test_min_edge, test_min_large = _declare("Min")
test_var, test_var_edge, test_var_large = _declare("Var")
test_std, test_std_edge, test_std_large = _declare("Std")
(test_logsumexp, test_logsumexp_edge,
 test_logsumexp_large) = _declare("LogSumExp")


@pytest.mark.parametrize("op, expected", [
    ("Sum", 0.0), ("Prod", 1.0), ("Mean", np.nan), ("Var", np.nan),
    ("Std", np.nan), ("LogSumExp", -np.inf)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_empty_reduction_values(op, expected, dtype):
    """The value of a reduction over nothing is the one docs/ops.md lists."""
    x = np.zeros((0, 3), dtype)
    ref = REDUCTIONS[op][0]
    out = OpCase.of(op, [x], ref, attrs={"axes": [0]}).check_forward()[0]
    np.testing.assert_array_equal(out, np.full(3, expected, dtype))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_logsumexp_is_stable(dtype):
    """Huge and tiny inputs do not overflow/underflow: max-shifted."""
    x = np.array([[1000.0, 1000.0, 1000.0], [-1000.0, -1000.0, -999.0],
                  [88.0, 0.0, -88.0]], dtype)
    ref = REDUCTIONS["LogSumExp"][0]
    out = OpCase.of("LogSumExp", [x], ref, attrs={"axes": [1]},
                    tol=10).check_forward()[0]
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[0], 1000.0 + np.log(3.0), rtol=1e-6)


@pytest.mark.parametrize("ddof", [0, 1, 2])
@pytest.mark.parametrize("op", ["Var", "Std"])
def test_var_std_ddof(op, ddof):
    """ddof divides by N - ddof, as NumPy."""
    x = np.array([1.0, 2.0, 4.0, 7.0, 11.0])
    ref = REDUCTIONS[op][0]
    out = OpCase.of(op, [x], ref, attrs={"ddof": ddof}).check_forward()[0]
    var = np.sum((x - x.mean()) ** 2) / (len(x) - ddof)
    np.testing.assert_allclose(out, var if op == "Var" else np.sqrt(var))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_var_of_large_offset_is_accurate(dtype):
    """A large common offset does not destroy the variance (two-pass)."""
    x = (np.array([0.0, 1.0, 2.0, 3.0] * 8) + 1e4).astype(dtype)
    out = OpCase.of("Var", [x], REDUCTIONS["Var"][0],
                    tol=100).check_forward()[0]
    np.testing.assert_allclose(out, 1.25, rtol=1e-3)


@pytest.mark.parametrize("op, ref", [("Max", np.max), ("Min", np.min)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_max_min_propagate_nan(op, ref, dtype):
    """A NaN in a reduced group makes the result NaN, as NumPy."""
    x = np.array([[1.0, np.nan, 3.0], [1.0, 2.0, 3.0], [np.inf, -np.inf, 0.0]],
                 dtype)
    out = OpCase.of(op, [x], _reference(ref),
                    attrs={"axes": [1]}).check_forward()[0]
    assert np.isnan(out[0]) and not np.isnan(out[1:]).any()


def test_sum_of_bool_counts():
    """Sum counts true values (bool sums to int64)."""
    x = np.array([[True, False, True], [True, True, True]])
    out = OpCase.of("Sum", [x], REDUCTIONS["Sum"][0], attrs={"axes": [1]},
                    out_dtype="int64").check_forward()[0]
    assert out.tolist() == [2, 3]


# ------------------------------------------------------------- ArgMax/ArgMin

ARG_ATTRS = [{}, {"axis": 0}, {"axis": 1}, {"axis": -1}, {"keepdims": True},
             {"axis": 1, "keepdims": True}]


def _arg_reference(fn):
    def ref(x, axis=None, keepdims=False):
        return fn(x, axis=axis, keepdims=keepdims)
    return ref


def _axis_exists(case):
    axis = case.attrs.get("axis")
    return axis is None or -len(case.shape) <= axis < len(case.shape)


def _declare_arg(op, fn):
    @op_case(op, inputs=lambda rng, dt, s: [small_ints(rng, dt, s)],
             reference=_arg_reference(fn), dtypes=NUMERIC_DTYPES,
             attrs=ARG_ATTRS, shapes=[(3, 4, 5), (7, 6), (1,), ()],
             out_dtype="int64", select=_axis_exists)
    def test(case):
        case.check_forward()

    test.__doc__ = (f"{op}: index of the extremum, the first one on ties "
                    "(the inputs have many ties).")
    return test


test_argmax = _declare_arg("ArgMax", np.argmax)
test_argmin = _declare_arg("ArgMin", np.argmin)


@pytest.mark.parametrize("op, fn", [("ArgMax", np.argmax),
                                    ("ArgMin", np.argmin)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_argmax_argmin_nan_and_ties(op, fn, dtype):
    """Ties give the first index; NaN counts as the extremum (NumPy)."""
    x = np.array([[1.0, 3.0, 3.0, 1.0],
                  [np.nan, 0.0, np.nan, 5.0],
                  [2.0, np.nan, -np.inf, np.inf],
                  [-0.0, 0.0, 0.0, -0.0]], dtype)
    out = OpCase.of(op, [x], _arg_reference(fn), attrs={"axis": 1},
                    out_dtype="int64").check_forward()[0]
    assert out[0] == (1 if op == "ArgMax" else 0)
    assert out[1] == 0 and out[2] == 1 and out[3] == 0
