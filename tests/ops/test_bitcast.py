"""BitCast (docs/ops.md, "Other"): x's bytes read as another dtype of
the same size, against NumPy's ``x.view(dtype)``."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dragon_sdk.testing import ALL_DTYPES, OpCase, numpy_dtype, strided

from ._common import sample


def _size(dtype):
    return np.dtype(numpy_dtype(dtype)).itemsize


PAIRS = [(a, b) for a, b in itertools.product(ALL_DTYPES, ALL_DTYPES)
         if _size(a) == _size(b) and b != "bool"]


def _bitcast_ref(to):
    def ref(x, **_):
        return np.ascontiguousarray(x).view(numpy_dtype(to))
    return ref


@pytest.mark.parametrize("shape", [(), (0,), (3, 0), (7,), (2, 3, 4)])
@pytest.mark.parametrize("src, to", PAIRS, ids=[f"{a}-{b}" for a, b in PAIRS])
def test_bitcast(src, to, shape, rng):
    """Bit for bit as NumPy's view (NaN, negative zero, infinities and
    integer bit patterns included), for every pair of same-size dtypes;
    strided (non-contiguous) input; 0-d and empty. Compared as raw bytes,
    since a NaN payload compares unequal to itself."""
    import dragon_core as dg

    x = sample(rng, src, shape, -1e4, 1e4)
    if src in ("float32", "float64") and x.size >= 3:
        flat = x.reshape(-1)
        flat[:3] = [np.nan, -0.0, np.inf]
    y = dg.ops.bitcast(dg.from_numpy(strided(x)), to)
    assert str(y.dtype) == to
    got = np.ascontiguousarray(y.numpy())
    want = _bitcast_ref(to)(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.reshape(-1).view(np.uint8), want.reshape(-1).view(np.uint8))


def test_bitcast_graph_matches_eager(rng):
    """The op's schema and kernel agree in graph mode too (OpCase on a
    same-dtype view, where the float64 reference applies)."""
    x = rng.standard_normal((3, 4)).astype(np.float32)
    OpCase.of("BitCast", [x], lambda v, **_: v, attrs={"dtype": "float32"}).check_forward()


def test_bitcast_to_bool_is_nonzero_byte():
    """uint8/int8 bytes read as bool: 0 is false, any other byte true (and
    the result behaves as a proper bool in later ops)."""
    import dragon_core as dg

    x = np.array([0, 1, 2, 255, 0, 128], np.uint8)
    for src in (x, x.view(np.int8)):
        y = dg.ops.bitcast(dg.from_numpy(src), "bool")
        assert str(y.dtype) == "bool"
        np.testing.assert_array_equal(y.numpy(), src != 0)
        np.testing.assert_array_equal(dg.ops.cast(y, "int32").numpy(), (src != 0).astype(np.int32))


@pytest.mark.parametrize("src, to", [("float32", "int64"), ("int8", "int16"),
                                     ("float64", "float32"), ("bool", "int32")])
def test_bitcast_size_mismatch_raises(src, to):
    import dragon_core as dg

    x = dg.from_numpy(np.zeros((2, 3), numpy_dtype(src)))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.bitcast(x, to)
    msg = str(info.value)
    for w in ("BitCast", src, to, "size"):
        assert w in msg, (w, msg)


def test_bitcast_is_not_differentiable():
    """No gradient flows through a reinterpretation: x gets none."""
    import dragon_core as dg

    x = dg.tensor(np.array([1.5, -2.0], np.float32))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.cast(dg.ops.bitcast(x, "int32"), "float32")
        loss = dg.ops.sum(y)
    (g,) = tape.gradient(loss, [x])
    assert g is None or not np.any(g.numpy())
