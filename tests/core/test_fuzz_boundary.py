"""Property-based fuzz test of the tensor boundary, against NumPy.

Random dtypes, byte orders, shapes, strides (non-contiguous and negative
views), read-only flags and Python scalars go through ``from_numpy``,
``tensor``, ``numpy()``, indexing and the operators; each result must equal
NumPy's (values and dtype), or raise the same exception class where NumPy
raises. Where Dragon's documented rules differ from NumPy's (a Python float
with an integer tensor gives float32; a comparison with an int past int64 is
answered exactly), the reference follows the rule. Deterministic
(``derandomize``) and bounded, so it runs in seconds in ``make test``.
"""

from __future__ import annotations

import operator
import sys

import numpy as np
import pytest

import dragon_core as dg

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

FUZZ = settings(max_examples=150, derandomize=True, deadline=None,
                suppress_health_check=[HealthCheck.too_slow])

DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
          "float64"]
INT_DTYPES = ["uint8", "int8", "int16", "int32", "int64"]
NATIVE = "<" if sys.byteorder == "little" else ">"


@st.composite
def arrays(draw, dtypes=DTYPES, lo=-100, hi=100):
    """A NumPy array of a random dtype and byte order, viewed with random
    steps (negative ones included), possibly read-only."""
    name = draw(st.sampled_from(dtypes))
    order = draw(st.sampled_from("<>"))
    shape = tuple(draw(st.lists(st.integers(0, 4), max_size=3)))
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    if name == "bool":
        base = rng.integers(0, 2, size=shape).astype(bool)
    elif name.startswith("float"):
        base = (rng.standard_normal(shape) * 10).astype(name)
    else:
        info = np.iinfo(name)
        base = rng.integers(max(lo, info.min), min(hi, info.max) + 1, size=shape).astype(name)
    base = np.asarray(base)
    arr = base.astype(base.dtype.newbyteorder(order))
    steps = [draw(st.sampled_from([1, 2, -1, -2])) for _ in shape]
    if shape:
        arr = arr[tuple(slice(None, None, s) for s in steps)]
    if draw(st.booleans()):
        arr.flags.writeable = False
    return arr


def _native(arr):
    return arr.astype(arr.dtype.newbyteorder("="))


@FUZZ
@given(arrays())
def test_from_numpy_tensor_numpy_roundtrip(arr):
    want = _native(arr)
    t = dg.tensor(arr)
    assert t.dtype == want.dtype.name and t.shape == want.shape
    np.testing.assert_array_equal(t.numpy(), want)
    assert not t.is_read_only and t.numpy().flags.writeable
    if arr.dtype.byteorder not in ("=", "|", NATIVE):
        with pytest.raises(ValueError, match="byte order"):
            dg.from_numpy(arr)
        return
    v = dg.from_numpy(arr)
    np.testing.assert_array_equal(v.numpy(), want)
    assert v.numpy().dtype == want.dtype
    assert v.is_read_only == (not arr.flags.writeable)
    assert v.numpy().flags.writeable == arr.flags.writeable
    np.testing.assert_array_equal(v.cpu().numpy(), want)


@FUZZ
@given(arrays(), st.data())
def test_indexing_matches_numpy(arr, data):
    want = _native(arr)
    t = dg.from_numpy(want) if data.draw(st.booleans()) else dg.tensor(arr)
    key = []
    for n in want.shape[:data.draw(st.integers(0, want.ndim))]:
        if n and data.draw(st.booleans()):
            key.append(data.draw(st.integers(-n, n - 1)))
        else:
            start = data.draw(st.one_of(st.none(), st.integers(-6, 6)))
            stop = data.draw(st.one_of(st.none(), st.integers(-6, 6)))
            key.append(slice(start, stop, data.draw(st.sampled_from([None, 1, 2, -1, -3]))))
    key = tuple(key)
    got = t[key]
    np.testing.assert_array_equal(got.numpy(), want[key])
    assert got.dtype == want.dtype.name


_ARITH = {"+": operator.add, "-": operator.sub, "*": operator.mul}
_COMPARE = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
            "==": operator.eq, "!=": operator.ne}
_PY_INTS = st.one_of(st.integers(-300, 300), st.integers(-(2 ** 70), 2 ** 70),
                     st.sampled_from([127, 128, 255, 256, -129, 32768, 2 ** 31, 2 ** 63 - 1,
                                      2 ** 63, -(2 ** 63), -(2 ** 63) - 1]))


def _outcome(fn):
    try:
        return fn(), None
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return None, type(e)


@FUZZ
@given(arrays(INT_DTYPES + ["bool"], lo=-3, hi=3), _PY_INTS,
       st.sampled_from(sorted(_ARITH) + sorted(_COMPARE)), st.booleans())
def test_int_tensor_with_python_int_matches_numpy(arr, value, sym, reflected):
    """NumPy 2: an int the dtype cannot hold raises OverflowError in
    arithmetic; comparisons give the exact answer."""
    want_arr = _native(arr)
    fn = {**_ARITH, **_COMPARE}[sym]
    call = (lambda a: fn(value, a)) if reflected else (lambda a: fn(a, value))
    got, got_err = _outcome(lambda: call(dg.tensor(arr)))
    if sym in _COMPARE:
        assert got_err is None, got_err
        exact = np.asarray(call(want_arr.astype(object)), dtype=object).astype(bool)
        np.testing.assert_array_equal(got.numpy(), exact)
        assert got.dtype == "bool"
        return
    with np.errstate(over="ignore"):
        want, want_err = _outcome(lambda: np.asarray(call(want_arr)))
    if want_err is not None:
        assert got_err is want_err, (got_err, want_err)
        return
    assert got_err is None, got_err
    assert got.dtype == want.dtype.name
    exact = np.asarray(call(want_arr.astype(object)), dtype=object)
    info = np.iinfo(want.dtype)
    if all(info.min <= int(v) <= info.max for v in np.ravel(exact)):
        np.testing.assert_array_equal(got.numpy(), want)   # no wrap-around in the kernel


@FUZZ
@given(arrays(["float32", "float64"] + INT_DTYPES),
       st.one_of(st.floats(allow_nan=False, width=32), st.integers(-(2 ** 40), 2 ** 40)),
       st.sampled_from(sorted(_ARITH) + sorted(_COMPARE)), st.booleans())
def test_python_float_scalars_follow_the_promotion_rules(arr, value, sym, reflected):
    """A float tensor keeps its dtype (NumPy 2 too); an integer tensor with a
    Python float becomes float32 (Dragon's rule)."""
    want_arr = _native(arr)
    if want_arr.dtype.kind in "iu":
        if isinstance(value, int):
            return  # covered by the int test
        want_arr = want_arr.astype(np.float32)
    fn = {**_ARITH, **_COMPARE}[sym]
    call = (lambda a: fn(value, a)) if reflected else (lambda a: fn(a, value))
    got = call(dg.tensor(arr))
    with np.errstate(all="ignore"):
        want = np.asarray(call(want_arr))
    assert got.dtype == want.dtype.name
    tol = {"float32": 1e-5}.get(want.dtype.name, 1e-12)
    if want.dtype == bool:
        # A float32 rounding of the scalar may flip ties; compare off ties.
        with np.errstate(all="ignore"):
            near = np.isclose(want_arr.astype(np.float64), value, rtol=tol, atol=0)
        np.testing.assert_array_equal(got.numpy()[~near], want[~near])
    else:
        np.testing.assert_allclose(got.numpy().astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol)


_NP_SCALAR_DTYPES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float32", "float64"]


@FUZZ
@given(arrays(INT_DTYPES + ["bool", "float32", "float64"], lo=-5, hi=5),
       st.sampled_from(_NP_SCALAR_DTYPES), st.integers(-300, 300),
       st.sampled_from(["+", "-", "*", "<", "=="]), st.booleans())
def test_numpy_scalars_match_numpy_2(arr, scalar_dtype, raw, sym, reflected):
    """NumPy scalars are strong (NEP 50): the result dtype and values are
    NumPy 2's (int8 * np.int64(100) is int64), or an error where NumPy
    gives a dtype Dragon lacks; never a wrapped value of the tensor's dtype."""
    scalar = np.asarray(raw).astype(scalar_dtype)[()]
    fn = {**_ARITH, **_COMPARE}[sym]
    call = (lambda a: fn(scalar, a)) if reflected else (lambda a: fn(a, scalar))
    with np.errstate(all="ignore"):
        want, want_err = _outcome(lambda: np.asarray(call(_native(arr))))
    got, got_err = _outcome(lambda: call(dg.tensor(arr)))
    if want_err is not None or want.dtype.name not in DTYPES:
        assert got_err is not None
        return
    if sym in _ARITH and want.dtype.name == "bool":
        # Arithmetic on bool is refused with a clear error (no bool kernels).
        assert got_err is None or issubclass(got_err, dg.errors.InvalidArgumentError)
        return
    assert got_err is None, got_err
    assert got.dtype == want.dtype.name
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
