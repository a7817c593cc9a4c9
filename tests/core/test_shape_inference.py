"""Shape and dtype inference of the standard op schemas.

Every case goes through ``dragon_core.infer_shape(op, inputs, **attrs)``,
where ``inputs`` is a list of ``(shape, dtype_name)`` and the result is a list
of ``(shape, dtype_name)``, one per output. No kernel runs. Where NumPy has
the op, the expected shape is NumPy's own result on an empty array of the
same shape; bad inputs must raise ``InvalidArgumentError`` with a message
that names the offending values.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

dc = pytest.importorskip("dragon_core")
InvalidArgumentError = dc.errors.InvalidArgumentError

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


# ------------------------------------------------------------------ helpers


def infer(op, inputs, **attrs):
    """All outputs of ``op`` as a list of ``(shape, dtype)``."""
    return [(tuple(s), d) for s, d in dc.infer_shape(op, inputs, **attrs)]


def infer1(op, inputs, **attrs):
    """The single output of ``op``."""
    outs = infer(op, inputs, **attrs)
    assert len(outs) == 1, outs
    return outs[0]


def raises(op, inputs, *fragments, **attrs):
    """Asserts that inference fails and the message holds every fragment."""
    with pytest.raises(InvalidArgumentError) as info:
        dc.infer_shape(op, inputs, **attrs)
    message = str(info.value)
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def placeholder(shape):
    """A zero array of ``shape``: only its shape matters."""
    return np.zeros(shape, dtype=np.float32)


# ------------------------------------------------------------ unary ops

FLOAT_UNARY = [
    "Exp", "Log", "Log1p", "Sqrt", "Rsqrt", "Reciprocal", "Sin", "Cos",
    "Tanh", "Sigmoid", "LeakyRelu", "Elu", "Gelu", "Softplus", "Floor",
    "Ceil", "Round",
]
NUMERIC_UNARY = ["Neg", "Abs", "Sign", "Square", "Relu", "Clip"]
SHAPES = [(), (0,), (1,), (2, 3), (4, 0, 2), (1, 1, 1, 5)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", FLOAT_UNARY)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_float_unary_keeps_shape_and_dtype(op, shape, dtype):
    assert infer1(op, [(shape, dtype)]) == (shape, dtype)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("op", NUMERIC_UNARY)
@pytest.mark.parametrize("dtype", ["int32", "int64", "float32", "uint8"])
def test_numeric_unary_keeps_shape_and_dtype(op, shape, dtype):
    assert infer1(op, [(shape, dtype)]) == (shape, dtype)


@pytest.mark.parametrize("dtype", ["int32", "float64", "bool"])
def test_logical_not_gives_bool(dtype):
    assert infer1("LogicalNot", [((2, 0, 3), dtype)]) == ((2, 0, 3), "bool")


@pytest.mark.parametrize("op", ["Exp", "Sigmoid", "Gelu"])
def test_float_unary_rejects_integers(op):
    raises(op, [((2,), "int32")], "int32")


def test_unary_attribute_checks():
    assert infer1("Gelu", [((3,), "float32")], approximate="tanh")[0] == (3,)
    raises("Gelu", [((3,), "float32")], "approximate", "erf",
           approximate="erf")
    raises("Softplus", [((3,), "float32")], "beta", beta=0.0)
    assert infer1("Clip", [((3,), "int32")], min=1.0) == ((3,), "int32")
    assert infer1("Clip", [((3,), "float32")], min=None, max=2.0)[0] == (3,)


# ----------------------------------------------------------- binary ops

ARITHMETIC = ["Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"]
COMPARISON = ["Equal", "NotEqual", "Less", "LessEqual", "Greater",
              "GreaterEqual", "LogicalAnd", "LogicalOr"]
BROADCAST_PAIRS = [
    ((), ()),
    ((), (2, 3)),
    ((2, 3), ()),
    ((2, 3), (3,)),
    ((2, 1), (1, 3)),
    ((5, 1, 4), (3, 1)),
    ((0,), (1,)),
    ((0, 3), (1, 3)),
    ((2, 0, 1), (4,)),
    ((1,), (0,)),
    ((3, 1, 1, 2), (1, 4, 2)),
]
BAD_PAIRS = [((2, 3), (4,)), ((2, 0), (3,)), ((5, 4), (5, 1, 3))]


@pytest.mark.parametrize("a, b", BROADCAST_PAIRS)
@pytest.mark.parametrize("op", ARITHMETIC)
def test_arithmetic_broadcasts_like_numpy(op, a, b):
    expected = np.broadcast_shapes(a, b)
    assert infer1(op, [(a, "float64"), (b, "float64")]) == (expected,
                                                             "float64")


@pytest.mark.parametrize("a, b", BROADCAST_PAIRS)
@pytest.mark.parametrize("op", COMPARISON)
def test_comparison_broadcasts_to_bool(op, a, b):
    expected = np.broadcast_shapes(a, b)
    assert infer1(op, [(a, "int32"), (b, "int32")]) == (expected, "bool")


@pytest.mark.parametrize("op", ["Add", "Equal", "LogicalOr"])
@pytest.mark.parametrize("a, b", BAD_PAIRS)
def test_binary_rejects_incompatible_shapes(op, a, b):
    with pytest.raises(ValueError):
        np.broadcast_shapes(a, b)
    dtype = "float32"
    raises(op, [(a, dtype), (b, dtype)], str(list(a)), str(list(b)),
           "cannot be broadcast")


def test_binary_names_the_disagreeing_sizes():
    raises("Mul", [((2, 3), "float32"), ((4,), "float32")], "3", "4")


def test_binary_rejects_mixed_dtypes():
    raises("Add", [((2,), "float32"), ((2,), "float64")])
    raises("Less", [((2,), "int32"), ((2,), "int64")])


def test_integer_div_is_rejected_and_integer_pow_accepted():
    # Div is true division (floats only): integers use FloorDivide or
    # TruncDivide. Pow takes integers (exact, as NumPy's).
    raises("Div", [((2,), "int32"), ((2,), "int32")], "int32")
    assert infer1("Pow", [((2,), "int64"), ((3, 1), "int64")]) == ((3, 2), "int64")


@pytest.mark.parametrize("c, x, y", [
    ((), (), ()),
    ((2, 1), (3,), ()),
    ((4, 1, 1), (1, 5, 1), (6,)),
    ((0, 1), (1, 3), (3,)),
    ((1,), (2, 0), (1, 1)),
])
def test_where_broadcasts_three_ways(c, x, y):
    expected = np.broadcast_shapes(c, x, y)
    out = infer1("Where", [(c, "bool"), (x, "int16"), (y, "int16")])
    assert out == (expected, "int16")


def test_where_errors():
    raises("Where", [((2,), "bool"), ((3,), "float32"), ((2,), "float32")],
           "[2]", "[3]", "cannot be broadcast")
    raises("Where", [((2,), "bool"), ((2,), "float32"), ((2,), "float64")],
           "float32", "float64")
    raises("Where", [((2,), "int32"), ((2,), "float32"), ((2,), "float32")])


# ------------------------------------------------------------ reductions

REDUCE_CASES = [
    ((2, 3, 4), None),
    ((2, 3, 4), [0]),
    ((2, 3, 4), [-1]),
    ((2, 3, 4), [0, 2]),
    ((2, 3, 4), [2, 0, 1]),
    ((2, 3, 4), []),
    ((), None),
    ((), []),
    ((0,), None),
    ((0, 3), [0]),
    ((0, 3), [1]),
    ((5, 0, 2), [1, -1]),
]


def numpy_axis(axes):
    return None if axes is None else tuple(axes)


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape, axes", REDUCE_CASES)
@pytest.mark.parametrize("op", ["Sum", "Prod", "Mean", "Var", "Std",
                                "LogSumExp"])
def test_reduction_shapes_match_numpy(op, shape, axes, keepdims):
    expected = placeholder(shape).sum(axis=numpy_axis(axes), keepdims=keepdims)
    out = infer1(op, [(shape, "float32")], axes=axes, keepdims=keepdims)
    assert out == (np.shape(expected), "float32")


def test_reduction_defaults_reduce_everything():
    assert infer1("Sum", [((2, 3), "float64")]) == ((), "float64")
    assert infer1("Var", [((2, 3), "float64")], ddof=1) == ((), "float64")


def test_sum_dtypes():
    assert infer1("Sum", [((2, 3), "bool")], axes=[0]) == ((3,), "int64")
    assert infer1("Sum", [((2, 3), "int32")]) == ((), "int32")
    assert infer1("Sum", [((2, 3), "uint8")]) == ((), "uint8")


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape, axes", REDUCE_CASES)
@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_min_follow_numpy_including_empty_errors(op, shape, axes,
                                                     keepdims):
    reduce = np.max if op == "Max" else np.min
    try:
        expected = reduce(placeholder(shape), axis=numpy_axis(axes),
                          keepdims=keepdims)
    except ValueError:
        # NumPy raises; Dragon follows ONNX for floats (-inf / +inf, shaped
        # as Sum's result) and raises for integers, which have no such value.
        raises(op, [(shape, "int32")], "zero-size", "int32", axes=axes,
               keepdims=keepdims)
        expected = placeholder(shape).sum(axis=numpy_axis(axes), keepdims=keepdims)
        out = infer1(op, [(shape, "float32")], axes=axes, keepdims=keepdims)
        assert out == (np.shape(expected), "float32")
        return
    out = infer1(op, [(shape, "int32")], axes=axes, keepdims=keepdims)
    assert out == (np.shape(expected), "int32")


@pytest.mark.parametrize("op", ["Sum", "Max", "Mean"])
def test_reduction_axis_errors(op):
    raises(op, [((2, 3), "float32")], "3", "rank 2", axes=[3])
    raises(op, [((2, 3), "float32")], "-3", "rank 2", axes=[-3])
    raises(op, [((2, 3), "float32")], "[1, -1]", "more than once",
           axes=[1, -1])
    raises(op, [((), "float32")], "rank 0", axes=[0])


ARG_CASES = [
    ((2, 3, 4), None),
    ((2, 3, 4), 0),
    ((2, 3, 4), -1),
    ((7,), 0),
    ((), None),
    ((0, 3), 1),
    ((0, 3), 0),
    ((0,), None),
    ((3, 0), 1),
]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("shape, axis", ARG_CASES)
@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
def test_argmax_argmin_follow_numpy(op, shape, axis, keepdims):
    reduce = np.argmax if op == "ArgMax" else np.argmin
    try:
        expected = reduce(placeholder(shape), axis=axis, keepdims=keepdims)
    except ValueError:
        raises(op, [(shape, "float32")], str(list(shape)), axis=axis,
               keepdims=keepdims)
        return
    out = infer1(op, [(shape, "int32")], axis=axis, keepdims=keepdims)
    assert out == (np.shape(expected), "int64")


def test_argmax_axis_out_of_range():
    raises("ArgMax", [((2, 3), "float32")], "axis 2", "rank 2", axis=2)


# ---------------------------------------------------------------- matmul

MATMUL_CASES = [
    ((2, 3), (3, 4)),
    ((3,), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3,)),
    ((5, 2, 3), (3, 4)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3,)),
    ((1, 2, 3), (6, 3, 4)),
    ((7, 1, 2, 3), (6, 3, 4)),
    ((0, 3), (3, 4)),
    ((2, 0), (0, 4)),
    ((0, 2, 3), (3, 4)),
    ((2, 3), (3, 0)),
]


@pytest.mark.parametrize("a, b", MATMUL_CASES)
def test_matmul_matches_numpy(a, b):
    expected = np.matmul(placeholder(a), placeholder(b)).shape
    assert infer1("MatMul", [(a, "float32"), (b, "float32")]) == (expected,
                                                                 "float32")


@pytest.mark.parametrize("a, b", MATMUL_CASES)
@pytest.mark.parametrize("ta, tb", [(True, False), (False, True),
                                    (True, True)])
def test_matmul_transpose_flags(a, b, ta, tb):
    def flip(shape, flag):
        return shape[:-2] + shape[:-3:-1] if flag and len(shape) >= 2 \
            else shape
    stored_a, stored_b = flip(a, ta), flip(b, tb)
    expected = np.matmul(placeholder(a), placeholder(b)).shape
    out = infer1("MatMul", [(stored_a, "float64"), (stored_b, "float64")],
                 transpose_a=ta, transpose_b=tb)
    assert out == (expected, "float64")


def test_matmul_errors():
    raises("MatMul", [((2, 3), "float32"), ((4, 5), "float32")],
           "inner dimensions differ", "[2, 3]", "[4, 5]")
    raises("MatMul", [((3,), "float32"), ((4,), "float32")], "[3]", "[4]")
    raises("MatMul", [((2, 3), "float32"), ((3, 4), "float32")],
           "transpose_a", "[2, 3]", "[3, 4]", transpose_a=True)
    raises("MatMul", [((2, 2, 3), "float32"), ((3, 3, 4), "float32")],
           "[2]", "[3]", "cannot be broadcast")
    raises("MatMul", [((), "float32"), ((3,), "float32")], "[]")
    raises("MatMul", [((2, 3), "int64"), ((3, 4), "int64")], "int64")
    raises("MatMul", [((2, 3), "int32"), ((3, 4), "float32")], "int32", "float32")


# ------------------------------------------------------- reshape & friends


@pytest.mark.parametrize("shape, target", [
    ((2, 3), (6,)),
    ((2, 3), (3, -1)),
    ((2, 3), (-1,)),
    ((2, 3), (1, 2, 1, 3)),
    ((), (1, 1)),
    ((1,), ()),
    ((0, 3), (3, 0)),
    ((0, 3), (0, 5)),
    ((4, 0), (2, 0, 7)),
])
def test_reshape_matches_numpy(shape, target):
    expected = placeholder(shape).reshape(target).shape
    assert infer1("Reshape", [(shape, "int8")], shape=list(target)) == (
        expected, "int8")


def test_reshape_errors():
    raises("Reshape", [((2, 3), "float32")], "6", "[4, 2]", shape=[4, 2])
    raises("Reshape", [((2, 3), "float32")], "6", "[4, -1]", shape=[4, -1])
    raises("Reshape", [((2, 3), "float32")], "more than one -1",
           shape=[-1, -1])
    raises("Reshape", [((2, 3), "float32")], "-2", shape=[-2, -3])
    raises("Reshape", [((0, 3), "float32")], "[0, -1]", shape=[0, -1])


@pytest.mark.parametrize("shape, perm", [
    ((2, 3, 4), None),
    ((2, 3, 4), [1, 0, 2]),
    ((2, 3, 4), [-1, 0, 1]),
    ((), None),
    ((), []),
    ((0, 5), [1, 0]),
])
def test_transpose_matches_numpy(shape, perm):
    expected = np.transpose(placeholder(shape), perm).shape
    assert infer1("Transpose", [(shape, "bool")], perm=perm) == (expected,
                                                                 "bool")


def test_transpose_rejects_non_permutations():
    raises("Transpose", [((2, 3), "float32")], "[0, 0]", "more than once",
           perm=[0, 0])
    raises("Transpose", [((2, 3), "float32")], "[0]", "2", perm=[0])
    raises("Transpose", [((2, 3), "float32")], "2", "rank 2", perm=[0, 2])


@pytest.mark.parametrize("shape, target", [
    ((), (2, 3)),
    ((3,), (2, 3)),
    ((2, 1), (2, 4)),
    ((1,), (0,)),
    ((0, 1), (5, 0, 3)),
    ((2, 3), (2, 3)),
])
def test_broadcast_to_matches_numpy(shape, target):
    expected = np.broadcast_to(placeholder(shape), target).shape
    out = infer1("BroadcastTo", [(shape, "float32")], shape=list(target))
    assert out == (expected, "float32")


def test_broadcast_to_errors():
    raises("BroadcastTo", [((3,), "float32")], "[3]", "[4]", shape=[4])
    raises("BroadcastTo", [((2, 3), "float32")], "[3]", "rank 2", shape=[3])
    raises("BroadcastTo", [((2,), "float32")], "-1", shape=[-1, 2])


@pytest.mark.parametrize("shape, axes", [
    ((1, 2, 1), None),
    ((1, 2, 1), [0]),
    ((1, 2, 1), [-1, 0]),
    ((1, 0, 1), None),
    ((), None),
    ((3,), []),
])
def test_squeeze_matches_numpy(shape, axes):
    expected = np.squeeze(placeholder(shape), numpy_axis(axes)).shape
    assert infer1("Squeeze", [(shape, "int64")], axes=axes) == (expected,
                                                                "int64")


def test_squeeze_errors():
    raises("Squeeze", [((1, 3), "float32")], "axis 1", "3", axes=[1])
    raises("Squeeze", [((1, 3), "float32")], "2", "rank 2", axes=[2])
    raises("Squeeze", [((1, 1), "float32")], "more than once", axes=[0, -2])


@pytest.mark.parametrize("shape, axes", [
    ((2, 3), [0]),
    ((2, 3), [-1]),
    ((2, 3), [0, 3]),
    ((2, 3), [1, -1]),
    ((), [0]),
    ((), [0, -1]),
    ((0,), [1]),
    ((4,), []),
])
def test_unsqueeze_matches_numpy(shape, axes):
    expected = np.expand_dims(placeholder(shape), tuple(axes)).shape
    assert infer1("Unsqueeze", [(shape, "float32")], axes=axes) == (
        expected, "float32")


def test_unsqueeze_errors():
    raises("Unsqueeze", [((2, 3), "float32")], "3", "rank 3", axes=[3])
    raises("Unsqueeze", [((2, 3), "float32")], "-4", axes=[-4])
    raises("Unsqueeze", [((2, 3), "float32")], "more than once",
           axes=[0, -4])


@pytest.mark.parametrize("shape, start, end, expected", [
    ((2, 3, 4), 0, -1, (24,)),
    ((2, 3, 4), 1, -1, (2, 12)),
    ((2, 3, 4), 0, 1, (6, 4)),
    ((2, 3, 4), 1, 1, (2, 3, 4)),
    ((2, 0, 4), 0, -1, (0,)),
    ((), 0, -1, (1,)),
    ((5,), 0, 0, (5,)),
])
def test_flatten(shape, start, end, expected):
    out = infer1("Flatten", [(shape, "float32")], start_axis=start,
                 end_axis=end)
    assert out == (expected, "float32")


def test_flatten_defaults_and_errors():
    assert infer1("Flatten", [((2, 3, 4), "int32")]) == ((24,), "int32")
    raises("Flatten", [((2, 3, 4), "float32")], "start_axis 2", "end_axis 1",
           start_axis=2, end_axis=1)
    raises("Flatten", [((2, 3), "float32")], "start_axis 5", "rank 2",
           start_axis=5)


@pytest.mark.parametrize("shape", SHAPES)
def test_contiguous_keeps_shape(shape):
    assert infer1("Contiguous", [(shape, "bfloat16")]) == (shape, "bfloat16")


# -------------------------------------------------------- concat / stack


@pytest.mark.parametrize("shapes, axis", [
    ([(2, 3)], 0),
    ([(2, 3), (4, 3)], 0),
    ([(2, 3), (2, 1), (2, 0)], 1),
    ([(2, 3), (2, 5)], -1),
    ([(0, 3), (0, 3)], 0),
])
def test_concat_matches_numpy(shapes, axis):
    arrays = [placeholder(s) for s in shapes]
    expected = np.concatenate(arrays, axis=axis).shape
    inputs = [(s, "float32") for s in shapes]
    assert infer1("Concat", inputs, axis=axis) == (expected, "float32")


def test_concat_errors():
    raises("Concat", [((2, 3), "float32"), ((2, 4), "float32")], "[2, 3]",
           "[2, 4]", "axis 1")
    raises("Concat", [((2, 3), "float32"), ((3,), "float32")], "[3]",
           "rank 1")
    raises("Concat", [((2, 3), "float32")], "2", "rank 2", axis=2)
    raises("Concat", [((), "float32"), ((), "float32")], "0-d")
    raises("Concat", [], "at least one")
    raises("Concat", [((2,), "float32"), ((2,), "int32")])


@pytest.mark.parametrize("shape, n, axis", [
    ((2, 3), 1, 0),
    ((2, 3), 4, 0),
    ((2, 3), 4, 2),
    ((2, 3), 4, -1),
    ((2, 3), 4, -3),
    ((), 3, 0),
    ((0,), 2, 1),
])
def test_stack_matches_numpy(shape, n, axis):
    expected = np.stack([placeholder(shape)] * n, axis=axis).shape
    out = infer1("Stack", [(shape, "int16")] * n, axis=axis)
    assert out == (expected, "int16")


def test_stack_errors():
    raises("Stack", [((2, 3), "float32"), ((3, 2), "float32")], "[2, 3]",
           "[3, 2]")
    raises("Stack", [((2, 3), "float32")] * 2, "axis 3", "[-3, 2]", axis=3)
    raises("Stack", [((2, 3), "float32")] * 2, "-4", axis=-4)
    raises("Stack", [], "at least one")


# ----------------------------------------------------------------- split


@pytest.mark.parametrize("shape, sizes, axis", [
    ((6, 2), [1, 2, 3], 0),
    ((2, 5), [5], -1),
    ((2, 5), [0, 5, 0], 1),
    ((0, 4), [0, 0], 0),
])
def test_split_matches_numpy(shape, sizes, axis):
    outs = infer("Split", [(shape, "float32")], sizes=sizes, axis=axis)
    pieces = np.split(placeholder(shape), np.cumsum(sizes)[:-1], axis=axis)
    assert outs == [(p.shape, "float32") for p in pieces]


def test_split_with_no_sizes_on_an_empty_axis():
    assert infer("Split", [((0, 3), "float32")], sizes=[]) == []


def test_split_errors():
    raises("Split", [((6, 2), "float32")], "sum to 5", "size 6",
           sizes=[2, 3])
    raises("Split", [((6, 2), "float32")], "-1", sizes=[7, -1])
    raises("Split", [((6, 2), "float32")], "axis 2", "rank 2", sizes=[6],
           axis=2)
    raises("Split", [((), "float32")], "rank 0", sizes=[])


# ----------------------------------------------------------------- slice


def numpy_slice_shape(shape, starts, ends, steps, axes):
    index = [slice(None)] * len(shape)
    for i, axis in enumerate(axes):
        index[axis] = slice(starts[i], ends[i], steps[i])
    return placeholder(shape)[tuple(index)].shape


@pytest.mark.parametrize("shape, starts, ends, steps, axes", [
    ((10,), [2], [8], [1], None),
    ((10,), [2], [8], [3], None),
    ((10,), [-3], [INT64_MAX], [1], None),
    ((10,), [INT64_MAX], [INT64_MIN], [-1], None),
    ((10,), [8], [2], [-2], None),
    ((10,), [-1], [-11], [-1], None),
    ((10,), [5], [100], [1], None),
    ((10,), [100], [5], [1], None),
    ((10,), [0], [10], [INT64_MAX], None),
    ((10,), [9], [INT64_MIN], [INT64_MIN], None),
    ((4, 5, 6), [1, 0], [3, 5], [1, 2], [0, 2]),
    ((4, 5, 6), [0], [2], [1], [-2]),
    ((4, 5, 6), [], [], [], None),
    ((0, 3), [0, 1], [5, 3], [1, 1], None),
    ((3, 0), [-1], [0], [-1], [1]),
])
def test_slice_matches_python(shape, starts, ends, steps, axes):
    np_axes = list(range(len(starts))) if axes is None else axes
    expected = numpy_slice_shape(shape, starts, ends, steps, np_axes)
    out = infer1("Slice", [(shape, "float32")], starts=starts, ends=ends,
                 steps=steps, axes=axes)
    assert out == (expected, "float32")


BOUNDS = st.one_of(st.integers(-12, 12), st.sampled_from([INT64_MAX,
                                                          INT64_MIN]))
STEPS = st.one_of(st.integers(-5, 5).filter(bool),
                  st.sampled_from([INT64_MAX, INT64_MIN]))


@settings(max_examples=300, deadline=None)
@given(length=st.integers(0, 9), start=BOUNDS, stop=BOUNDS, step=STEPS)
def test_slice_length_matches_python_slices(length, start, stop, step):
    expected = len(range(length)[slice(start, stop, step)])
    out = infer1("Slice", [((2, length), "float32")], starts=[start],
                 ends=[stop], steps=[step], axes=[1])
    assert out == ((2, expected), "float32")


def test_slice_errors():
    raises("Slice", [((4, 5), "float32")], "steps[1] is 0", starts=[0, 0],
           ends=[4, 5], steps=[1, 0])
    raises("Slice", [((4, 5), "float32")], "2", "1", starts=[0, 0], ends=[4],
           steps=[1, 1])
    raises("Slice", [((4, 5), "float32")], "3", "2 axes", starts=[0, 0, 0],
           ends=[1, 1, 1], steps=[1, 1, 1])
    raises("Slice", [((4, 5), "float32")], "more than once", starts=[0, 0],
           ends=[1, 1], steps=[1, 1], axes=[1, -1])
    raises("Slice", [((4, 5), "float32")], "axis 2", "rank 2", starts=[0],
           ends=[1], steps=[1], axes=[2])


# ---------------------------------------------------------------- gather


@pytest.mark.parametrize("shape, index_shape, axis", [
    ((5, 3), (4,), 0),
    ((5, 3), (2, 2), 1),
    ((5, 3), (), 0),
    ((5, 3, 2), (0,), -2),
    ((0, 3), (0,), 0),
    ((4,), (3, 1), 0),
])
@pytest.mark.parametrize("index_dtype", ["int32", "int64"])
def test_gather_matches_numpy_take(shape, index_shape, axis, index_dtype):
    indices = np.zeros(index_shape, dtype=np.int64)
    expected = np.take(placeholder(shape), indices, axis=axis).shape
    out = infer1("Gather", [(shape, "float64"), (index_shape, index_dtype)],
                 axis=axis)
    assert out == (expected, "float64")


def test_gather_errors():
    raises("Gather", [((5, 3), "float32"), ((2,), "int64")], "axis 2",
           "rank 2", axis=2)
    raises("Gather", [((), "float32"), ((2,), "int64")], "0-d")
    raises("Gather", [((5,), "float32"), ((2,), "float32")])


# ------------------------------------------------------------------- pad


@pytest.mark.parametrize("shape, pads", [
    ((3,), [1, 2]),
    ((3, 4), [0, 0, 2, 1]),
    ((3, 4), [2, 2, 3, 3]),
    ((), []),
    ((0, 2), [0, 0, 1, 1]),
])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_matches_numpy(shape, pads, mode):
    pairs = [(pads[2 * d], pads[2 * d + 1]) for d in range(len(shape))]
    # NumPy's pad refuses an empty pad list, even for a 0-d array.
    expected = np.pad(placeholder(shape), pairs, mode=mode).shape if shape \
        else ()
    out = infer1("Pad", [(shape, "int32")], pads=pads, mode=mode)
    assert out == (expected, "int32")


def test_pad_constant_on_empty_axis():
    out = infer1("Pad", [((0, 2), "float32")], pads=[1, 2, 0, 0])
    assert out == ((3, 2), "float32")


def test_pad_errors():
    raises("Pad", [((3, 4), "float32")], "-1", "axis 1", pads=[0, 0, -1, 0])
    raises("Pad", [((3, 4), "float32")], "reflect", "size 3", "3",
           pads=[3, 0, 0, 0], mode="reflect")
    raises("Pad", [((3, 4), "float32")], "2 entries", "needs 4", pads=[1, 1])
    raises("Pad", [((3, 4), "float32")], "wrap", pads=[0] * 4, mode="wrap")
    raises("Pad", [((0, 4), "float32")], "edge", "axis 0",
           pads=[1, 0, 0, 0], mode="edge")
    raises("Pad", [((3,), "bool")], "bool", pads=[1, 1])


# --------------------------------------------------------------- softmax


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
@pytest.mark.parametrize("shape, axis", [((2, 3), -1), ((2, 3), 0),
                                         ((0, 4), 1), ((5,), 0)])
def test_softmax_keeps_shape(op, shape, axis):
    assert infer1(op, [(shape, "float32")], axis=axis) == (shape, "float32")


@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_errors(op):
    raises(op, [((2, 3), "float32")], "axis 2", "rank 2", axis=2)
    raises(op, [((), "float32")], "rank 0")
    raises(op, [((2, 3), "int32")], "int32")


# -------------------------------------------------------------- creation


@pytest.mark.parametrize("shape", [(), (0,), (2, 3), (4, 0, 1)])
@pytest.mark.parametrize("dtype", ["float32", "int64", "bool", "float16"])
def test_fill(shape, dtype):
    assert infer1("Fill", [], shape=list(shape), value=1.0,
                  dtype=dtype) == (shape, dtype)


def test_fill_default_dtype_and_errors():
    assert infer1("Fill", [], shape=[2]) == ((2,), "float32")
    raises("Fill", [], "-2", shape=[3, -2])
    raises("Fill", [], "int64", shape=[2 ** 40, 2 ** 40])


@pytest.mark.parametrize("start, stop, step", [
    (0, 10, 1), (0, 10, 3), (10, 0, -1), (10, 0, -3), (0, 0, 1), (5, 0, 1),
    (0.5, 3.2, 0.7), (-1.5, 1.5, 0.5), (1, 2, 10), (3, 3.0001, 1e-5),
])
def test_arange_length_matches_numpy(start, stop, step):
    expected = np.arange(start, stop, step).shape
    assert infer1("Arange", [], start=float(start), stop=float(stop),
                  step=float(step)) == (expected, "int64")
    out = infer1("Arange", [], start=float(start), stop=float(stop),
                 step=float(step), dtype="float64")
    assert out == (expected, "float64")


def test_arange_errors():
    raises("Arange", [], "step", start=0.0, stop=1.0, step=0.0)
    raises("Arange", [], "stop", start=0.0, stop=float("inf"))
    raises("Arange", [], "bool", start=0.0, stop=3.0, dtype="bool")
    raises("Arange", [], "int64", start=0.0, stop=1e30, step=1.0)


@pytest.mark.parametrize("op", ["RandomUniform", "RandomNormal"])
def test_random_ops(op):
    assert infer1(op, [], shape=[2, 3]) == ((2, 3), "float32")
    assert infer1(op, [], shape=[0], dtype="float64", seed=7) == ((0,),
                                                                  "float64")
    assert infer1(op, [], shape=[]) == ((), "float32")
    # 16-bit floats are accepted by the schema (the device's kernel says
    # whether it has them: cuda does, cpu_eigen float32/float64 only).
    assert infer1(op, [], shape=[2], dtype="float16") == ((2,), "float16")
    assert infer1(op, [], shape=[2], dtype="bfloat16") == ((2,), "bfloat16")
    raises(op, [], "int32", "float32", "float64", shape=[2], dtype="int32")
    raises(op, [], "-1", shape=[-1])


def test_random_attribute_checks():
    raises("RandomUniform", [], "low 2", "high 1", shape=[2], low=2.0,
           high=1.0)
    raises("RandomNormal", [], "std", "-1", shape=[2], std=-1.0)


# ------------------------------------------------------- cast & one-hot


@pytest.mark.parametrize("src", ["float32", "bool", "int8", "bfloat16"])
@pytest.mark.parametrize("dst", ["float64", "bool", "uint8", "int64"])
def test_cast(src, dst):
    assert infer1("Cast", [((2, 0, 3), src)], dtype=dst) == ((2, 0, 3), dst)


@pytest.mark.parametrize("shape, depth, axis", [
    ((4,), 3, -1),
    ((4,), 3, 0),
    ((2, 5), 7, 1),
    ((2, 5), 7, -3),
    ((), 4, -1),
    ((0,), 3, -1),
    ((3,), 0, -1),
])
def test_one_hot(shape, depth, axis):
    # The one-hot axis is appended last, then moved to `axis`.
    expected = np.moveaxis(placeholder(shape + (depth,)), -1, axis).shape
    out = infer1("OneHot", [(shape, "int64")], depth=depth, axis=axis)
    assert out == (expected, "float32")


def test_one_hot_dtype_and_errors():
    out = infer1("OneHot", [((3,), "int32")], depth=2, dtype="int64")
    assert out == ((3, 2), "int64")
    raises("OneHot", [((3,), "int32")], "depth", "-1", depth=-1)
    raises("OneHot", [((3,), "int32")], "axis 2", "rank 2", depth=2, axis=2)
    raises("OneHot", [((3,), "float32")], depth=2)


# ------------------------------------------- schemas against docs/ops.md

# The registry's description of each standard op must match docs/ops.md:
# Python name, input names, attributes in order with type and default
# (REQ = required, None = optional/unset) and the flags the spec implies.
REQ = "required"
INT, FLOAT, BOOL, STRING, INTS, DTYPE = 1, 2, 3, 4, 5, 7
REDUCE_ATTRS = [("axes", INTS, None), ("keepdims", BOOL, False)]
ARG_ATTRS = [("axis", INT, None), ("keepdims", BOOL, False)]
RANDOM_TAIL = [("dtype", DTYPE, "float32"), ("seed", INT, -1)]

SPEC = {
    **{op: (py, ["x"], []) for op, py in [
        ("Neg", "neg"), ("Abs", "abs"), ("Sign", "sign"), ("Exp", "exp"),
        ("Log", "log"), ("Log1p", "log1p"), ("Sqrt", "sqrt"),
        ("Rsqrt", "rsqrt"), ("Square", "square"),
        ("Reciprocal", "reciprocal"), ("Sin", "sin"), ("Cos", "cos"),
        ("Tanh", "tanh"), ("Sigmoid", "sigmoid"), ("Relu", "relu"),
        ("Floor", "floor"), ("Ceil", "ceil"), ("Round", "round"),
        ("LogicalNot", "logical_not"), ("Contiguous", "contiguous")]},
    "LeakyRelu": ("leaky_relu", ["x"], [("alpha", FLOAT, 0.01)]),
    "Elu": ("elu", ["x"], [("alpha", FLOAT, 1.0)]),
    "Gelu": ("gelu", ["x"], [("approximate", STRING, "none")]),
    "Softplus": ("softplus", ["x"], [("beta", FLOAT, 1.0),
                                     ("threshold", FLOAT, 20.0)]),
    "Clip": ("clip", ["x"], [("min", FLOAT, None), ("max", FLOAT, None)]),
    **{op: (py, ["a", "b"], []) for op, py in [
        ("Add", "add"), ("Sub", "sub"), ("Mul", "mul"), ("Div", "div"),
        ("Pow", "pow"), ("Maximum", "maximum"), ("Minimum", "minimum"),
        ("Equal", "equal"), ("NotEqual", "not_equal"), ("Less", "less"),
        ("LessEqual", "less_equal"), ("Greater", "greater"),
        ("GreaterEqual", "greater_equal"), ("LogicalAnd", "logical_and"),
        ("LogicalOr", "logical_or")]},
    "Where": ("where", ["condition", "x", "y"], []),
    **{op: (py, ["x"], REDUCE_ATTRS) for op, py in [
        ("Sum", "sum"), ("Prod", "prod"), ("Mean", "mean"), ("Max", "max"),
        ("Min", "min"), ("LogSumExp", "logsumexp")]},
    "Var": ("var", ["x"], REDUCE_ATTRS + [("ddof", INT, 0)]),
    "Std": ("std", ["x"], REDUCE_ATTRS + [("ddof", INT, 0)]),
    "ArgMax": ("argmax", ["x"], ARG_ATTRS),
    "ArgMin": ("argmin", ["x"], ARG_ATTRS),
    "MatMul": ("matmul", ["a", "b"], [("transpose_a", BOOL, False),
                                      ("transpose_b", BOOL, False),
                                      ("out_dtype", DTYPE, None)]),
    "Reshape": ("reshape", ["x"], [("shape", INTS, REQ)]),
    "Transpose": ("transpose", ["x"], [("perm", INTS, None)]),
    "BroadcastTo": ("broadcast_to", ["x"], [("shape", INTS, REQ)]),
    "Concat": ("concat", ["inputs"], [("axis", INT, 0)]),
    "Stack": ("stack", ["inputs"], [("axis", INT, 0)]),
    "Split": ("split", ["x"], [("sizes", INTS, REQ), ("axis", INT, 0)]),
    "Slice": ("slice", ["x"], [("starts", INTS, REQ), ("ends", INTS, REQ),
                               ("steps", INTS, REQ), ("axes", INTS, None)]),
    "Gather": ("gather", ["x", "indices"], [("axis", INT, 0)]),
    "Squeeze": ("squeeze", ["x"], [("axes", INTS, None)]),
    "Unsqueeze": ("unsqueeze", ["x"], [("axes", INTS, REQ)]),
    "Flatten": ("flatten", ["x"], [("start_axis", INT, 0),
                                   ("end_axis", INT, -1)]),
    "Pad": ("pad", ["x"], [("pads", INTS, REQ),
                           ("mode", STRING, "constant"),
                           ("value", FLOAT, 0.0)]),
    "Softmax": ("softmax", ["x"], [("axis", INT, -1)]),
    "LogSoftmax": ("log_softmax", ["x"], [("axis", INT, -1)]),
    "Fill": ("fill", [], [("shape", INTS, REQ), ("value", FLOAT, 0.0),
                          ("dtype", DTYPE, "float32"), ("int_value", INT, None)]),
    "Arange": ("arange", [], [("start", FLOAT, REQ), ("stop", FLOAT, REQ),
                              ("step", FLOAT, 1.0),
                              ("dtype", DTYPE, "int64")]),
    "RandomUniform": ("random_uniform", [], [
        ("shape", INTS, REQ), ("low", FLOAT, 0.0), ("high", FLOAT, 1.0),
        *RANDOM_TAIL]),
    "RandomNormal": ("random_normal", [], [
        ("shape", INTS, REQ), ("mean", FLOAT, 0.0), ("std", FLOAT, 1.0),
        *RANDOM_TAIL]),
    "Cast": ("cast", ["x"], [("dtype", DTYPE, REQ)]),
    "OneHot": ("one_hot", ["indices"], [
        ("depth", INT, REQ), ("on_value", FLOAT, 1.0),
        ("off_value", FLOAT, 0.0), ("dtype", DTYPE, "float32"),
        ("axis", INT, -1)]),
}

NO_GRAD_OPS = {
    "Sign", "Floor", "Ceil", "Round", "LogicalNot", "Equal", "NotEqual",
    "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd",
    "LogicalOr", "ArgMax", "ArgMin", "Fill", "Arange", "RandomUniform",
    "RandomNormal", "OneHot",
}
SAME_DTYPE_OPS = {
    "Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum", "Equal",
    "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual",
    "LogicalAnd", "LogicalOr", "MatMul", "Concat", "Stack",
}


def describe(op):
    return dc._C.op(op).describe()


def test_every_standard_op_is_defined_by_the_core():
    defined = {d["name"] for d in dc._C.list_ops() if d["plugin"] == "core"}
    assert set(SPEC) <= defined, sorted(set(SPEC) - defined)


@pytest.mark.parametrize("op", sorted(SPEC))
def test_schema_matches_the_spec(op):
    py_name, inputs, attrs = SPEC[op]
    desc = describe(op)
    assert desc["py_name"] == py_name
    assert [i["name"] for i in desc["inputs"]] == inputs
    got = []
    for a in desc["attrs"]:
        default = REQ if a["required"] else a["default"]
        assert not (a["optional"] and default is not None), a
        got.append((a["name"], a["type"], default))
    assert got == attrs
    assert desc["no_grad"] == (op in NO_GRAD_OPS)
    assert desc["same_dtype"] == (op in SAME_DTYPE_OPS)
    assert desc["stateful"] == op.startswith("Random")
    assert desc["doc"], "every op needs a doc string"
    assert all(a["doc"] for a in desc["attrs"] + desc["inputs"])


def test_schema_details():
    assert describe("Where")["dispatch_input"] == 1
    assert describe("Concat")["inputs"][0]["variadic"]
    assert describe("Stack")["inputs"][0]["variadic"]
    assert describe("Split")["outputs"][0]["variadic"]
    assert describe("Gather")["inputs"][1]["no_grad"]
    assert describe("OneHot")["inputs"][0]["no_grad"]
    assert describe("Where")["inputs"][0]["no_grad"]
    assert describe("Exp")["inplace_inputs"] == 1
    assert describe("Add")["inplace_inputs"] == 3
