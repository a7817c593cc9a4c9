"""Cast, OneHot, Softmax and LogSoftmax (docs/ops.md)."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    HALF_DTYPES,
    OpCase,
    is_float,
    numpy_dtype,
    op_case,
    strided,
)

#: Cast has kernels for every dtype, the 16-bit floats included.
CAST_DTYPES = ALL_DTYPES + HALF_DTYPES

# -------------------------------------------------------------------- Cast


def _cast_source(rng, src, dst, shape=(4, 5)):
    """Values of `src` that convert to `dst` without undefined behaviour."""
    if src == "bool":
        return rng.random(shape) < 0.5
    unsigned_dst = dst in ("uint8", "bool")
    lo = 0 if (src == "uint8" or unsigned_dst) else -100
    hi = 100
    if is_float(src):
        # Quarters are exact in every float type, also bfloat16 up to 100.
        x = rng.integers(4 * lo, 4 * hi, shape, endpoint=True) / 4.0
        x[0, :3] = [0.0, -0.0 if lo < 0 else 0.0, 0.5]  # zeros, fraction
        return x.astype(numpy_dtype(src))
    return rng.integers(lo, hi, shape, endpoint=True).astype(src)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("dst", CAST_DTYPES)
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast(src, dst, layout, rng):
    """C++ conversion: truncation toward zero, x != 0 for bool, rounding."""
    x = _cast_source(rng, src, dst)
    if layout == "strided":
        x = strided(x)
    OpCase.of("Cast", [x], lambda x, dtype: x, attrs={"dtype": dst},
              out_dtype=dst).check_forward()


@pytest.mark.parametrize("dst", ["int8", "int16", "int32", "int64"])
@pytest.mark.parametrize("src", FLOAT_DTYPES)
def test_cast_float_to_int_truncates_toward_zero(src, dst):
    """-1.7 -> -1, 1.7 -> 1, -0.5 -> 0."""
    x = np.array([-1.7, 1.7, -0.5, 0.5, -2.0, 99.99], src)
    out = OpCase.of("Cast", [x], lambda x, dtype: x, attrs={"dtype": dst},
                    out_dtype=dst).check_forward()[0]
    assert out.tolist() == [-1, 1, 0, 0, -2, 99]


@pytest.mark.parametrize("src", FLOAT_DTYPES)
def test_cast_float_to_bool_is_nonzero(src):
    """NaN, inf and tiny values are true; +-0 is false."""
    x = np.array([0.0, -0.0, np.nan, np.inf, 1e-30, -3.0], src)
    out = OpCase.of("Cast", [x], lambda x, dtype: x, attrs={"dtype": "bool"},
                    out_dtype="bool").check_forward()[0]
    assert out.tolist() == [False, False, True, True, True, True]


def test_cast_int_narrowing_wraps():
    """int64 -> int8 keeps the low byte (two's complement)."""
    x = np.array([300, -129, 127, 128, 255, -1], np.int64)
    out = OpCase.of("Cast", [x], lambda x, dtype: x, attrs={"dtype": "int8"},
                    out_dtype="int8").check_forward()[0]
    assert out.tolist() == [44, 127, 127, -128, -1, -1]


def test_cast_float64_to_float32_keeps_specials():
    """Rounding to nearest, overflow to inf, NaN stays NaN."""
    x = np.array([1.0 + 2.0**-30, 1e300, -1e300, np.nan, -np.inf, 1e-50])
    out = OpCase.of("Cast", [x], lambda x, dtype: x,
                    attrs={"dtype": "float32"},
                    out_dtype="float32").check_forward()[0]
    assert out[0] == 1.0 and np.isposinf(out[1]) and np.isneginf(out[2])
    assert np.isnan(out[3]) and out[5] == 0.0


@pytest.mark.parametrize("shape", [(), (0,), (257, 131)])
def test_cast_edge_shapes(shape, rng):
    """0-d, empty and parallel-sized tensors."""
    x = rng.uniform(-50, 50, shape).astype(np.float32)
    OpCase.of("Cast", [x], lambda x, dtype: x, attrs={"dtype": "int32"},
              out_dtype="int32").check_forward()


# ------------------------------------------------------------------ OneHot

def _one_hot(indices, depth, on_value=1.0, off_value=0.0, dtype="float32",
             axis=-1):
    hot = indices[..., None] == np.arange(depth)
    out = np.where(hot, on_value, off_value)
    return np.moveaxis(out, -1, axis)


@op_case("OneHot",
         inputs=lambda rng, dt, s, attrs: [
             rng.integers(0, attrs["depth"], s).astype(dt)],
         reference=_one_hot, dtypes=["int32", "int64"],
         attrs=[{"depth": 4}, {"depth": 3, "axis": 0},
                {"depth": 5, "axis": 1, "on_value": 2.5, "off_value": -1.0},
                {"depth": 4, "dtype": "int32", "on_value": 7.0},
                {"depth": 2, "dtype": "bool"},
                {"depth": 3, "dtype": "float64", "axis": -2}],
         shapes=[(6,), (2, 3), ()],
         out_dtype=lambda dt, attrs: attrs.get("dtype", "float32"),
         select=lambda case: (case.shape != ()
                              or case.attrs.get("axis", -1) in (-1, 0)))
def test_one_hot(case):
    """A new axis of size depth at `axis`, on/off values cast to dtype."""
    case.check_forward()


def test_one_hot_depth_zero_and_empty():
    """Empty indices give an empty result, also with depth 0."""
    idx = np.zeros((0, 2), np.int64)
    OpCase.of("OneHot", [idx], _one_hot, attrs={"depth": 3},
              out_dtype="float32").check_forward()
    OpCase.of("OneHot", [np.zeros((0,), np.int64)], _one_hot,
              attrs={"depth": 0}, out_dtype="float32").check_forward()


@pytest.mark.parametrize("bad", [4, -1, 1000])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_one_hot_out_of_range_raises(bad, index_dtype):
    """An index outside [0, depth) is an OutOfRangeError naming it."""
    import dragon_core as dg

    idx = dg.from_numpy(np.array([0, bad, 2], dtype=index_dtype))
    with pytest.raises(dg.errors.OutOfRangeError) as info:
        dg.ops.one_hot(idx, 4)
    msg = str(info.value)
    assert str(bad) in msg and "OneHot" in msg, msg


# ----------------------------------------------------------------- Softmax

def _softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def _log_softmax(x, axis=-1):
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


SOFTMAX_SHAPES = [(3, 5), (2, 3, 4), (7,), (1, 1), (40, 1031)]


def _axis_exists(case):
    axis = case.attrs.get("axis", -1)
    return -len(case.shape) <= axis < len(case.shape)


@op_case("Softmax",
         inputs=lambda rng, dt, s: [rng.uniform(-10, 10, s).astype(dt)],
         reference=_softmax, dtypes=FLOAT_DTYPES,
         attrs=[{}, {"axis": 0}, {"axis": 1}, {"axis": -2}],
         shapes=SOFTMAX_SHAPES, tol=10, select=_axis_exists)
def test_softmax(case):
    """exp(x - max) / sum along the axis."""
    out = case.check_forward()[0]
    axis = case.attrs.get("axis", -1)
    np.testing.assert_allclose(out.sum(axis=axis), 1.0, rtol=1e-5)


@op_case("LogSoftmax",
         inputs=lambda rng, dt, s: [rng.uniform(-10, 10, s).astype(dt)],
         reference=_log_softmax, dtypes=FLOAT_DTYPES,
         attrs=[{}, {"axis": 0}, {"axis": 1}, {"axis": -2}],
         shapes=SOFTMAX_SHAPES, tol=10, select=_axis_exists)
def test_log_softmax(case):
    """x - max - log(sum(exp(x - max))) along the axis."""
    case.check_forward()


@pytest.mark.parametrize("op, ref", [("Softmax", _softmax),
                                     ("LogSoftmax", _log_softmax)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_softmax_is_stable(op, ref, dtype):
    """Huge logits neither overflow nor underflow to NaN/-inf."""
    x = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -2000.0],
                  [0.0, 0.0, 0.0]], dtype)
    out = OpCase.of(op, [x], ref, tol=10).check_forward()[0]
    assert np.isfinite(out).all()


@pytest.mark.parametrize("op, ref", [("Softmax", _softmax),
                                     ("LogSoftmax", _log_softmax)])
def test_softmax_empty(op, ref):
    """An empty batch gives an empty result."""
    x = np.zeros((0, 4), np.float32)
    OpCase.of(op, [x], ref).check_forward()
