"""Shape ops (docs/ops.md, "Shape ops"): every dtype, strided inputs."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    HALF_DTYPES,
    NUMERIC_DTYPES,
    OpCase,
    op_case,
    run_op,
    strided,
)

from ._common import INT64_MAX, INT64_MIN, sample

# Ops that only move data have kernels for the 16-bit floats too.
DTYPES = ALL_DTYPES + HALF_DTYPES
PAD_DTYPES = NUMERIC_DTYPES + HALF_DTYPES


def _values(rng, dt, shape):
    return [sample(rng, dt, shape, -50, 50)]


# ----------------------------------------------------------------- Reshape

RESHAPES = [
    ((2, 3, 4), [6, 4]), ((2, 3, 4), [-1]), ((2, 3, 4), [4, -1]),
    ((2, 3, 4), [2, -1, 3]), ((2, 3, 4), [1, 24, 1]), ((), [1]), ((1,), []),
    ((), [1, 1, -1]), ((0, 3), [3, 0]), ((0, 3), [-1, 3]),
    ((6,), [2, 3]),
]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("shape, target", RESHAPES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_reshape(dtype, shape, target, layout, rng):
    """Row-major reshape with one inferred -1, on dense and strided inputs."""
    x = _values(rng, dtype, shape)[0]
    if layout == "strided":
        x = strided(x)
    OpCase.of("Reshape", [x], lambda x, shape: np.reshape(x, shape),
              attrs={"shape": target}).check_forward()


# --------------------------------------------------------------- Transpose

@op_case("Transpose", inputs=_values, dtypes=DTYPES,
         reference=lambda x, perm=None: np.transpose(x, perm),
         attrs=[{}, {"perm": [1, 0, 2]}, {"perm": [2, 0, 1]},
                {"perm": [0, 1, 2]}],
         shapes=[(2, 3, 4), (3, 0, 2)])
def test_transpose(case):
    """Axes are permuted (unset perm reverses them)."""
    case.check_forward()


@pytest.mark.parametrize("shape", [(), (5,), (3, 4)])
def test_transpose_low_rank(shape, rng):
    """0-d, 1-D and 2-D transposes with the default perm."""
    x = rng.standard_normal(shape).astype(np.float32)
    OpCase.of("Transpose", [x], lambda x: np.transpose(x)).check_forward()


# ------------------------------------------------------------- BroadcastTo

BROADCASTS = [((3, 1), [2, 3, 4]), ((), [2, 2]), ((1,), [0]), ((3,), [3]),
              ((1, 4), [3, 4]), ((2, 1, 1), [2, 0, 5])]


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("shape, target", BROADCASTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_broadcast_to(dtype, shape, target, layout, rng):
    """NumPy broadcast_to, on dense and strided inputs."""
    x = _values(rng, dtype, shape)[0]
    if layout == "strided":
        x = strided(x)
    OpCase.of("BroadcastTo", [x], lambda x, shape: np.broadcast_to(x, shape),
              attrs={"shape": target}).check_forward()


# ----------------------------------------------------------- Concat/Stack

def _three_with_empty(rng, dt, shape):
    empty = shape[:1] + (0,) + shape[2:]
    return [[sample(rng, dt, s, -50, 50) for s in (shape, empty, shape)]]


@op_case("Concat", inputs=_three_with_empty,
         reference=lambda xs, axis=0: np.concatenate(xs, axis=axis),
         dtypes=DTYPES, attrs=[{"axis": 1}], shapes=[(2, 3, 4), (2, 3)])
def test_concat_middle_axis_with_empty_input(case):
    """Three inputs (one empty on the axis) joined along axis 1."""
    case.check_forward()


@pytest.mark.parametrize("axis", [0, 1, -1, -2])
@pytest.mark.parametrize("count", [1, 2, 5])
@pytest.mark.parametrize("dtype", DTYPES)
def test_concat(dtype, count, axis, rng):
    """Inputs of different lengths along the axis, one strided."""
    base = [2, 3]
    xs = []
    for i in range(count):
        shape = list(base)
        shape[axis] = i + 1
        x = _values(rng, dtype, tuple(shape))[0]
        xs.append(strided(x) if i == 1 else x)
    OpCase.of("Concat", [xs],
              lambda xs, axis: np.concatenate(xs, axis=axis),
              attrs={"axis": axis}).check_forward()


@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_stack(dtype, count, axis, rng):
    """Equal shapes stacked on a new axis in [-(ndim+1), ndim]."""
    xs = [_values(rng, dtype, (2, 3))[0] for _ in range(count)]
    xs[-1] = strided(xs[-1])
    OpCase.of("Stack", [xs], lambda xs, axis: np.stack(xs, axis=axis),
              attrs={"axis": axis}).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "int64", "bool"])
def test_stack_0d_and_empty(dtype, rng):
    """Stacking 0-d tensors gives a vector; empty tensors stay empty."""
    xs = [_values(rng, dtype, ())[0] for _ in range(4)]
    OpCase.of("Stack", [xs], lambda xs, axis=0: np.stack(xs)).check_forward()
    ys = [_values(rng, dtype, (0, 2))[0] for _ in range(2)]
    OpCase.of("Stack", [ys], lambda xs, axis: np.stack(xs, axis=axis),
              attrs={"axis": 1}).check_forward()


# ------------------------------------------------------------------- Split

def _split(x, sizes, axis=0):
    bounds = np.cumsum(sizes)[:-1]
    return np.split(x, bounds, axis=axis)


@op_case("Split", inputs=_values, reference=_split, dtypes=DTYPES,
         attrs=[{"sizes": [1, 2, 3]}, {"sizes": [6]}, {"sizes": [0, 6, 0]},
                {"sizes": [2, 2], "axis": 1}, {"sizes": [1, 3], "axis": -1}],
         shapes=[(6, 4)])
def test_split_by_sizes(case):
    """Consecutive pieces of the given sizes (zero-size pieces allowed)."""
    case.check_forward()


@pytest.mark.parametrize("n, axis", [(3, 0), (2, 1), (1, 0), (6, 0)])
@pytest.mark.parametrize("dtype", ["float32", "int32", "bool"])
def test_split_into_equal_parts(dtype, n, axis, rng):
    """The Python wrapper accepts an int: n equal parts."""
    x = _values(rng, dtype, (6, 4))[0]
    parts = run_op("split", x, n, axis=axis)
    want = np.split(x, n, axis=axis)
    assert len(parts) == n
    for got, expected in zip(parts, want):
        np.testing.assert_array_equal(got, expected)
        assert got.dtype == expected.dtype


# ------------------------------------------------------------------- Slice

def _slice_ref(x, starts, ends, steps, axes=None):
    if axes is None:
        axes = list(range(len(starts)))
    index = [slice(None)] * x.ndim
    for a, s, e, st in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st)
    return x[tuple(index)]


SLICES = [
    {"starts": [1], "ends": [4], "steps": [1]},
    {"starts": [0, 1], "ends": [5, 6], "steps": [2, 2]},
    {"starts": [-1], "ends": [-6], "steps": [-1]},
    {"starts": [4], "ends": [INT64_MIN], "steps": [-2]},
    {"starts": [INT64_MAX], "ends": [INT64_MIN], "steps": [-1]},
    {"starts": [0], "ends": [INT64_MAX], "steps": [3]},
    {"starts": [-100], "ends": [100], "steps": [1]},
    {"starts": [10], "ends": [0], "steps": [-1]},
    {"starts": [2], "ends": [2], "steps": [1]},
    {"starts": [3], "ends": [1], "steps": [1]},
    {"starts": [1], "ends": [3], "steps": [-1]},
    {"starts": [-2], "ends": [INT64_MAX], "steps": [1], "axes": [2]},
    {"starts": [1, 4], "ends": [3, 0], "steps": [1, -2], "axes": [-1, 0]},
    {"starts": [0, -1, 3], "ends": [5, -7, -1], "steps": [4, -3, 2]},
]


@op_case("Slice", inputs=_values, reference=_slice_ref, dtypes=DTYPES,
         attrs=SLICES, shapes=[(5, 6, 4)])
def test_slice(case):
    """Exactly Python's slice(start, end, step) per axis, steps of any sign."""
    case.check_forward()


@pytest.mark.parametrize("attrs", [
    {"starts": [0], "ends": [1], "steps": [1]},
    {"starts": [INT64_MAX], "ends": [INT64_MIN], "steps": [-1]},
    {"starts": [0], "ends": [0], "steps": [-1]}])
def test_slice_of_empty_axis(attrs):
    """Slicing an empty axis gives an empty result whatever the bounds."""
    x = np.zeros((0, 3), np.float32)
    OpCase.of("Slice", [x], _slice_ref, attrs=attrs).check_forward()


# ------------------------------------------------------------------ Gather

GATHERS = [
    ((5, 3), [1, 0, 4, 4], 0),
    ((5, 3), [-1, -5, 2], 0),
    ((5, 3), [[0, 2], [1, -1]], 1),
    ((5, 3), 2, 0),                     # 0-d index removes the axis
    ((4, 3, 2), [1, 0], -1),
    ((4, 3, 2), [[2], [0]], 1),
    ((5,), [], 0),                       # no indices: empty result
    ((0, 3), [0, 1, 2], 1),              # empty x, valid indices on axis 1
]


@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
@pytest.mark.parametrize("shape, indices, axis", GATHERS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_gather(dtype, shape, indices, axis, index_dtype, rng):
    """np.take semantics; negative indices wrap once."""
    x = strided(_values(rng, dtype, shape)[0])
    idx = np.array(indices, dtype=index_dtype)
    OpCase.of("Gather", [x, idx],
              lambda x, i, axis: np.take(x, i, axis=axis),
              attrs={"axis": axis}).check_forward()


@pytest.mark.parametrize("bad, index_dtype", [
    (5, "int32"), (-6, "int32"), (100, "int32"), (-2**31, "int32"),
    (5, "int64"), (-6, "int64"), (100, "int64"), (-2**40, "int64")])
def test_gather_out_of_range_raises(bad, index_dtype):
    """An index outside [-dim, dim) is an OutOfRangeError naming the index."""
    import dragon_core as dg

    x = dg.from_numpy(np.arange(15, dtype=np.float32).reshape(5, 3))
    idx = dg.from_numpy(np.array([0, bad, 1], dtype=index_dtype))
    with pytest.raises(dg.errors.OutOfRangeError) as info:
        dg.ops.gather(x, idx, axis=0)
    assert isinstance(info.value, IndexError)
    msg = str(info.value)
    assert str(bad) in msg and "Gather" in msg, msg


def test_index_select(rng):
    """index_select(x, indices, axis) is gather with a 1-D index."""
    import dragon_core as dg

    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([4, 0, -1], np.int64)
    out = dg.ops.index_select(dg.from_numpy(x), dg.from_numpy(idx), 1)
    np.testing.assert_array_equal(out.numpy(), np.take(x, idx, axis=1))


# ---------------------------------------------------------------- Squeeze

SQUEEZES = [((1, 3, 1, 2), None), ((1, 3, 1, 2), [0]), ((1, 3, 1, 2), [-2]),
            ((1, 3, 1, 2), [0, 2]), ((1, 3, 1, 2), []), ((), None),
            ((1,), None), ((1, 1), [1]), ((0, 1), None)]


@pytest.mark.parametrize("shape, axes", SQUEEZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_squeeze(dtype, shape, axes, rng):
    """Removes the named (or every) size-1 axis."""
    x = _values(rng, dtype, shape)[0]
    attrs = {} if axes is None else {"axes": axes}
    OpCase.of("Squeeze", [x],
              lambda x, axes=None: np.squeeze(
                  x, axis=None if axes is None else tuple(axes)),
              attrs=attrs).check_forward()


UNSQUEEZES = [((3, 4), [0]), ((3, 4), [-1]), ((3, 4), [0, 3]), ((3, 4), [1]),
              ((), [0]), ((), [0, 1]), ((3, 4), [-4, 1]), ((0,), [1])]


@pytest.mark.parametrize("shape, axes", UNSQUEEZES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_unsqueeze(dtype, shape, axes, rng):
    """Inserts size-1 axes at positions of the output."""
    x = strided(_values(rng, dtype, shape)[0])
    OpCase.of("Unsqueeze", [x],
              lambda x, axes: np.expand_dims(x, tuple(axes)),
              attrs={"axes": axes}).check_forward()


# ---------------------------------------------------------------- Flatten

def _flatten(x, start_axis=0, end_axis=-1):
    if x.ndim == 0:
        return x.reshape(1)
    s, e = start_axis % x.ndim, end_axis % x.ndim
    merged = int(np.prod(x.shape[s:e + 1], dtype=np.int64))
    return x.reshape(x.shape[:s] + (merged,) + x.shape[e + 1:])


@op_case("Flatten", inputs=_values, reference=_flatten, dtypes=DTYPES,
         attrs=[{}, {"start_axis": 1}, {"end_axis": 1}, {"start_axis": -2},
                {"start_axis": 1, "end_axis": 1}, {"start_axis": 2}],
         shapes=[(2, 3, 4), (2, 0, 3)])
def test_flatten(case):
    """torch.flatten semantics on axes start_axis..end_axis."""
    case.check_forward()


def test_flatten_0d():
    """A 0-d tensor flattens to shape (1,)."""
    x = np.array(3.5, np.float32)
    OpCase.of("Flatten", [x], _flatten).check_forward()


# -------------------------------------------------------------------- Pad

def _pad(x, pads, mode="constant", value=0.0):
    if x.ndim == 0:
        return x
    width = [(pads[2 * i], pads[2 * i + 1]) for i in range(x.ndim)]
    if mode == "constant":
        return np.pad(x, width, mode="constant",
                      constant_values=x.dtype.type(value)
                      if x.dtype.kind in "iu" else value)
    return np.pad(x, width, mode="reflect" if mode == "reflect" else "edge")


PADS = [
    {"pads": [1, 2, 0, 1]},
    {"pads": [0, 0, 3, 0], "value": 2.5},
    {"pads": [2, 1, 1, 3], "mode": "reflect"},
    {"pads": [2, 2, 3, 3], "mode": "reflect"},
    {"pads": [0, 0, 0, 0], "mode": "reflect"},
    {"pads": [3, 1, 0, 5], "mode": "edge"},
    {"pads": [1, 1, 1, 1], "mode": "constant", "value": 7.0},
]


@op_case("Pad", inputs=lambda rng, dt, s: [sample(rng, dt, s, 0, 50)],
         reference=_pad, dtypes=PAD_DTYPES, attrs=PADS, shapes=[(3, 4)])
def test_pad(case):
    """NumPy pad in constant (value cast to dtype), reflect and edge modes."""
    case.check_forward()


def test_pad_0d_and_empty():
    """No pads on a 0-d tensor; constant padding of an empty axis."""
    OpCase.of("Pad", [np.array(2.0, np.float32)], _pad,
              attrs={"pads": []}).check_forward()
    OpCase.of("Pad", [np.zeros((0, 2), np.float32)], _pad,
              attrs={"pads": [1, 1, 0, 1], "value": 3.0}).check_forward()


# ------------------------------------------------------------- Contiguous

@op_case("Contiguous", inputs=_values, reference=lambda x: x,
         dtypes=DTYPES, shapes=[(3, 4), (2, 3, 5), (0, 2), ()])
def test_contiguous(case):
    """A dense row-major copy with the same values."""
    case.check_forward()


def test_contiguous_of_transposed_view_is_dense():
    """The copy of a transposed view is C-contiguous and owns its memory."""
    import dragon_core as dg

    base = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = dg.from_numpy(base.T)
    assert not view.is_contiguous()
    out = dg.ops.contiguous(view)
    assert out.is_contiguous()
    assert tuple(out.strides) == (3, 1)
    np.testing.assert_array_equal(out.numpy(), base.T)
    base[0, 0] = 100.0
    assert out.numpy()[0, 0] == 0.0


# The transposing copy (strided.h CopyTiles): the source is dense along one
# axis, the destination along the last; 4-byte elements move in 4 x 4
# register blocks, the rest (edges, other sizes) one by one.
TRANSPOSED_COPIES = [
    ((4, 4), (1, 0)), ((5, 7), (1, 0)), ((33, 35), (1, 0)), ((64, 3000), (1, 0)),
    ((3000, 9), (1, 0)), ((2, 4, 64, 128), (0, 2, 1, 3)),
    ((8, 4, 64, 128), (0, 1, 3, 2)), ((3, 5, 9, 13), (3, 1, 2, 0)),
]


@pytest.mark.parametrize("dtype", ["float32", "int32", "uint32", "float64", "int16", "uint8"])
@pytest.mark.parametrize("shape, perm", TRANSPOSED_COPIES)
def test_contiguous_of_permuted_view_bitwise(shape, perm, dtype, rng):
    """Every element of a permuted view lands where NumPy puts it, bit for bit."""
    import dragon_core as dg

    n = int(np.prod(shape))
    base = rng.integers(0, 255, n * np.dtype(dtype).itemsize, dtype=np.uint8)
    base = base.view(dtype).reshape(shape)
    want = np.ascontiguousarray(base.transpose(perm))
    out = dg.ops.contiguous(dg.ops.transpose(dg.from_numpy(base), list(perm)))
    assert out.is_contiguous()
    assert out.numpy().tobytes() == want.tobytes()


def test_contiguous_of_reversed_transposed_view():
    """Negative source strides through the block path; NaN payloads kept."""
    import dragon_core as dg

    base = np.arange(37 * 41, dtype=np.uint32).reshape(37, 41)
    base[3, 5] = 0x7FA00001  # a signalling NaN as float32: moved, never computed
    for view in (base.view(np.float32)[::-1].T, base.view(np.float32)[::-1, ::-1].T):
        out = dg.ops.contiguous(dg.from_numpy(view))
        assert out.numpy().view(np.uint32).tobytes() == np.ascontiguousarray(
            view).view(np.uint32).tobytes()
