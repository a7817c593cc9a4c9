"""The op-case helper itself: it must catch every kind of wrong result."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (
    OpCase,
    assert_close,
    op_case,
    strided,
    tolerances,
    upcast,
)


def test_wrong_values_fail():
    x = np.linspace(-1, 1, 7).astype(np.float32)
    OpCase.of("Exp", [x], np.exp).check_forward()
    with pytest.raises(AssertionError, match="Exp"):
        OpCase.of("Exp", [x], np.exp2).check_forward()


def test_one_ulp_passes_but_tolerance_is_tight():
    x = np.float32([1.0, 2.0, 3.0])
    off = np.nextafter(x, np.float32(10))
    assert_close(off, x.astype(np.float64), "float32")
    with pytest.raises(AssertionError):
        assert_close(x * np.float32(1.0001), x.astype(np.float64), "float32")


def test_wrong_dtype_fails():
    x = np.ones(3, np.float32)
    with pytest.raises(AssertionError, match="dtype float32, expected "
                                             "float64"):
        OpCase.of("Neg", [x], np.negative, out_dtype="float64").check_forward()


def test_wrong_shape_fails():
    x = np.ones((2, 3), np.float32)
    with pytest.raises(AssertionError, match="shape"):
        OpCase.of("Neg", [x], lambda x: -x.T).check_forward()


def test_integers_are_exact():
    with pytest.raises(AssertionError):
        assert_close(np.int32([1, 2]), np.int64([1, 3]), "int32")
    assert_close(np.int8([-56]), np.int64([200]), "int8")  # wraps
    assert tolerances("int64") == (0.0, 0.0)


def test_nan_positions_must_match():
    with pytest.raises(AssertionError):
        assert_close(np.float32([np.nan, 1.0]), np.array([0.0, 1.0]),
                     "float32")
    assert_close(np.float32([np.nan, np.inf]), np.array([np.nan, 1e300]),
                 "float32")


def test_strided_inputs_reach_the_op_as_strided_tensors():
    import dragon_core as dg

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = strided(x)
    np.testing.assert_array_equal(view, x)
    assert not view.flags.c_contiguous
    assert not dg.from_numpy(view).is_contiguous()


def test_upcast_policy():
    assert upcast(np.float32([1])).dtype == np.float64
    assert upcast(np.int8([1])).dtype == np.int64
    assert upcast(np.uint8([1])).dtype == np.int64
    assert upcast(np.array([True])).dtype == np.bool_


@op_case("Softplus",
         inputs=lambda rng, dt: [rng.standard_normal((3, 4)).astype(dt)],
         attrs=[{}, {"beta": 2.0}],
         reference=lambda x, beta=1.0, threshold=20.0:
             np.log1p(np.exp(beta * x)) / beta,
         dtypes=["float32", "float64"], tol=4)
def test_decorator_parametrizes(case):
    """The example of the module docstring, as written there."""
    assert case.dtype in ("float32", "float64")
    assert case.layout in ("contiguous", "strided")
    case.check_forward()


def test_case_inputs_are_reproducible():
    def gen(rng, dt):
        return [rng.standard_normal(4).astype(dt)]

    a = OpCase(op="Neg", dtype="float32", attrs={}, shape=None,
               layout="contiguous", device="cpu", make_inputs=gen,
               reference=np.negative, id="x")
    b = OpCase(op="Neg", dtype="float32", attrs={}, shape=None,
               layout="contiguous", device="cpu", make_inputs=gen,
               reference=np.negative, id="x")
    np.testing.assert_array_equal(a.arrays()[0], b.arrays()[0])


def test_shape_inference_disagreement_fails(monkeypatch):
    import dragon_sdk.testing.opcase as opcase

    x = np.ones((2, 3), np.float32)
    monkeypatch.setattr(opcase, "infer_shape",
                        lambda op, inputs, attrs: [((3, 2), "float32")])
    with pytest.raises(AssertionError, match="shape inference said"):
        OpCase.of("Neg", [x], np.negative).check_forward()


def test_modified_input_fails(monkeypatch):
    import dragon_sdk.testing.opcase as opcase

    x = np.ones(3, np.float32)

    def clobbering_neg(t):
        t.numpy()[0] = 9.0      # an op writing into its input
        import dragon_core as dg
        return dg.ops.neg(dg.tensor(np.ones(3, np.float32)))

    monkeypatch.setattr(opcase, "op_function", lambda op: clobbering_neg)
    with pytest.raises(AssertionError, match="modified input 0"):
        OpCase.of("Neg", [x], lambda x: -np.ones(3)).check_forward()
