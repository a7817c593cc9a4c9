"""ScatterAdd (docs/ops.md, "Shape ops") against NumPy's ``np.add.at``."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import NUMERIC_DTYPES, OpCase, strided

from ._common import sample


def _scatter_ref(x, indices, updates, axis=0):
    """y = x; y[..., indices, ...] += updates along axis, repeats accumulate."""
    y = x.copy()
    axis = axis % x.ndim
    np.add.at(y, (slice(None),) * axis + (indices,), updates)
    return y


def _updates_shape(shape, indices, axis):
    axis = axis % len(shape)
    return tuple(shape[:axis]) + np.shape(indices) + tuple(shape[axis + 1:])


SCATTERS = [
    ((5, 3), [1, 0, 4, 4, -1, 4], 0),   # repeats, one of them as -1
    ((5, 3), [[0, 2], [1, -1]], 1),
    ((5, 3), 2, 0),                     # 0-d index: updates lack the axis
    ((4, 3, 2), [1, 0, 1, -2], -1),
    ((4, 3, 2), [[2], [0]], -2),
    ((5,), [], 0),                      # no indices: y == x
    ((0, 3), [0, 1, 2, 2], 1),          # empty x, valid indices on axis 1
    ((2, 3), [-3, -3, 2], 1),
]


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape, indices, axis", SCATTERS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_scatter_add(dtype, shape, indices, axis, index_dtype, rng):
    """np.add.at semantics; integers wrap on overflow; strided inputs."""
    idx = np.array(indices, dtype=index_dtype)
    x = strided(sample(rng, dtype, shape, -50, 50))
    updates = strided(sample(rng, dtype, _updates_shape(shape, idx, axis), -50, 50))
    OpCase.of("ScatterAdd", [x, idx, updates], _scatter_ref,
              attrs={"axis": axis}).check_forward()


@pytest.mark.parametrize("shape, m, axis", [
    ((8, 50, 300), 400, 1),    # several outer rows: the parallel path
    ((3, 9000), 5, 0),         # rows longer than one work block
    ((6000, 4), 20000, 0),     # many repeats into a small x
])
def test_scatter_add_large_matches_serial_float32(shape, m, axis, rng):
    """Each element sums its updates in index order whatever the threads:
    float32 results equal np.add.at's (serial) bit for bit."""
    import dragon_core as dg

    idx = rng.integers(-shape[axis], shape[axis], m)
    x = rng.standard_normal(shape).astype(np.float32)
    updates = rng.standard_normal(_updates_shape(shape, idx, axis)).astype(np.float32)
    want = _scatter_ref(x, idx, updates, axis)
    got = dg.ops.scatter_add(dg.from_numpy(x), dg.from_numpy(idx), dg.from_numpy(updates),
                             axis=axis).numpy()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("bad, index_dtype", [
    (5, "int32"), (-6, "int32"), (-2**31, "int32"), (5, "int64"), (-2**40, "int64")])
def test_scatter_add_out_of_range_raises(bad, index_dtype):
    """An index outside [-dim, dim) is an OutOfRangeError naming the index."""
    import dragon_core as dg

    x = dg.from_numpy(np.zeros((5, 3), np.float32))
    idx = dg.from_numpy(np.array([0, bad, 1], dtype=index_dtype))
    upd = dg.from_numpy(np.ones((3, 3), np.float32))
    with pytest.raises(dg.errors.OutOfRangeError) as info:
        dg.ops.scatter_add(x, idx, upd, axis=0)
    assert isinstance(info.value, IndexError)
    msg = str(info.value)
    assert str(bad) in msg and "ScatterAdd" in msg, msg


def _call(x, idx, upd, axis=0):
    import dragon_core as dg

    return dg.ops.scatter_add(dg.from_numpy(np.asarray(x)), dg.from_numpy(np.asarray(idx)),
                              dg.from_numpy(np.asarray(upd)), axis=axis)


@pytest.mark.parametrize("x, idx, upd, axis, words", [
    (np.zeros((5, 3)), [1, 2], np.zeros((2, 4)), 0, ["[2, 4]", "[2, 3]", "updates"]),
    (np.zeros((5, 3)), [[1, 2]], np.zeros((2, 3)), 0, ["[2, 3]", "[1, 2, 3]"]),
    (np.zeros((5, 3)), [1], np.zeros((1, 3), np.float32), 0, ["float32", "float64"]),
    (np.zeros((5, 3)), np.array([1.0]), np.zeros((1, 3)), 0, ["indices", "float64"]),
    (np.zeros((5, 3)), [1], np.zeros((1, 3)), 2, ["axis 2", "rank 2"]),
    (np.zeros(()), [0], np.zeros((1,)), 0, ["0-d"]),
    (np.zeros((2,), bool), [0], np.zeros((1,), bool), 0, ["bool"]),
])
def test_scatter_add_bad_input(x, idx, upd, axis, words):
    """Shape inference rejects every inconsistent call and says why."""
    import dragon_core as dg

    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        _call(x, idx, upd, axis)
    msg = str(info.value)
    assert "ScatterAdd" in msg, msg
    for w in words:
        assert w in msg, (w, msg)


def test_scatter_add_is_inverse_of_gather_adjoint(rng):
    """<gather(x, i), u> == <x, scatter_add(0, i, u)> (the two are adjoint)."""
    import dragon_core as dg

    x = rng.standard_normal((4, 6, 3))
    idx = np.array([[5, -1], [0, 2], [5, 5]])
    u = rng.standard_normal((4, 3, 2, 3))
    g = dg.ops.gather(dg.from_numpy(x), dg.from_numpy(idx), axis=1).numpy()
    s = _call(np.zeros_like(x), idx, u, axis=1).numpy()
    np.testing.assert_allclose(np.sum(g * u), np.sum(x * s), rtol=1e-12)


# ScatterReduce (docs/ops.md, "Shape ops") against NumPy's ufunc.at.
_UFUNCS = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _scatter_reduce_ref(reduction):
    def ref(x, indices, updates, axis=0, **_):
        y = x.copy()
        axis = axis % x.ndim
        _UFUNCS[reduction].at(y, (slice(None),) * axis + (indices,), updates)
        return y
    return ref


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape, indices, axis", SCATTERS)
@pytest.mark.parametrize("dtype", NUMERIC_DTYPES)
def test_scatter_reduce(dtype, shape, indices, axis, index_dtype, reduction, rng):
    """np.<ufunc>.at semantics in index order; integer add/mul wrap on
    overflow (int8 products of up to five factors in [-50, 50]); strided
    inputs; positions no index names keep x."""
    idx = np.array(indices, dtype=index_dtype)
    x = strided(sample(rng, dtype, shape, -50, 50))
    updates = strided(sample(rng, dtype, _updates_shape(shape, idx, axis), -50, 50))
    OpCase.of("ScatterReduce", [x, idx, updates], _scatter_reduce_ref(reduction),
              attrs={"axis": axis, "reduction": reduction}).check_forward()


@pytest.mark.parametrize("reduction, nan_at", [("max", "x"), ("max", "updates"),
                                               ("min", "x"), ("min", "updates")])
def test_scatter_reduce_max_min_propagate_nan(reduction, nan_at):
    """A NaN reduced into a position makes it NaN whichever side holds it
    (np.maximum / np.minimum), and the other positions are untouched."""
    import dragon_core as dg

    x = np.array([1.0, 2.0, 3.0, 4.0])
    upd = np.array([5.0, -5.0, 0.5])
    idx = np.array([1, 1, 3])
    if nan_at == "x":
        x[1] = np.nan
    else:
        upd[1] = np.nan
    got = dg.ops.scatter_reduce(dg.from_numpy(x), dg.from_numpy(idx), dg.from_numpy(upd),
                                axis=0, reduction=reduction).numpy()
    want = _scatter_reduce_ref(reduction)(x, idx, upd)
    np.testing.assert_array_equal(got, want)
    assert np.isnan(got[1]) and not np.isnan(got[[0, 2, 3]]).any()


def test_scatter_reduce_large_matches_serial(rng):
    """The parallel path (several outer rows, long rows) reduces in index
    order: float32 products equal np.multiply.at's bit for bit."""
    import dragon_core as dg

    shape, m, axis = (8, 50, 300), 400, 1
    idx = rng.integers(-shape[axis], shape[axis], m)
    x = rng.uniform(0.9, 1.1, shape).astype(np.float32)
    upd = rng.uniform(0.9, 1.1, _updates_shape(shape, idx, axis)).astype(np.float32)
    for reduction in ("mul", "max", "min"):
        got = dg.ops.scatter_reduce(dg.from_numpy(x), dg.from_numpy(idx), dg.from_numpy(upd),
                                    axis=axis, reduction=reduction).numpy()
        np.testing.assert_array_equal(got, _scatter_reduce_ref(reduction)(x, idx, upd, axis))


def test_scatter_reduce_bad_reduction_raises():
    import dragon_core as dg

    x = dg.from_numpy(np.zeros((5, 3), np.float32))
    idx = dg.from_numpy(np.array([0, 1]))
    upd = dg.from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.scatter_reduce(x, idx, upd, axis=0, reduction="mean")
    msg = str(info.value)
    assert "ScatterReduce" in msg and "mean" in msg and "mul" in msg, msg


@pytest.mark.parametrize("bad", [5, -6])
def test_scatter_reduce_out_of_range_raises(bad):
    import dragon_core as dg

    x = dg.from_numpy(np.zeros((5, 3), np.float32))
    idx = dg.from_numpy(np.array([0, bad]))
    upd = dg.from_numpy(np.ones((2, 3), np.float32))
    with pytest.raises(dg.errors.OutOfRangeError) as info:
        dg.ops.scatter_reduce(x, idx, upd, axis=0, reduction="max")
    msg = str(info.value)
    assert str(bad) in msg and "ScatterReduce" in msg, msg


def test_scatter_reduce_shape_mismatch_raises():
    import dragon_core as dg

    x = dg.from_numpy(np.zeros((5, 3), np.float32))
    idx = dg.from_numpy(np.array([0, 1]))
    upd = dg.from_numpy(np.ones((2, 4), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.scatter_reduce(x, idx, upd, axis=0, reduction="mul")
    msg = str(info.value)
    assert "ScatterReduce" in msg and "[2, 4]" in msg and "[2, 3]" in msg, msg
