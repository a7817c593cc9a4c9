"""Bad input: every error names the op and the offending shapes/dtypes."""

from __future__ import annotations

import re

import numpy as np
import pytest


@pytest.fixture(scope="module")
def dg():
    import dragon_core

    return dragon_core


def T(array):  # noqa: N802 - reads like a constructor in the tables below
    import dragon_core

    return dragon_core.from_numpy(np.asarray(array))


def f32(*shape):
    return T(np.ones(shape, np.float32))


def _shape_re(shape):
    """Matches a shape written as [2, 3], (2, 3) or 2x3."""
    dims = [str(d) for d in shape]
    comma = r",\s*"
    alts = [r"\[" + comma.join(dims) + r"\]",
            r"\(" + comma.join(dims) + ("," if len(dims) == 1 else "")
            + r"\)"]
    if len(dims) > 1:
        alts.append("x".join(dims))
    return "|".join(f"(?:{a})" for a in alts)


def assert_mentions(message, *, op=None, shapes=(), words=()):
    """Assert that an error message names the op, shapes and words."""
    if op is not None:
        assert op in message, f"op {op!r} not named in: {message}"
    for shape in shapes:
        assert re.search(_shape_re(shape), message), (
            f"shape {list(shape)} not named in: {message}")
    for word in words:
        assert word.lower() in message.lower(), (
            f"{word!r} not mentioned in: {message}")


# ------------------------------------------------------------------ dtypes


@pytest.mark.parametrize("op, fn", [("Sqrt", "sqrt"), ("Exp", "exp"),
                                    ("Log", "log"), ("Sigmoid", "sigmoid")])
def test_float_op_rejects_int64(dg, op, fn):
    x = T(np.arange(4, dtype=np.int64))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)(x)
    assert isinstance(info.value, ValueError)
    assert_mentions(str(info.value), op=op, words=["int64"])


def test_add_mixed_dtypes_names_both(dg):
    a, b = f32(2, 3), T(np.ones((2, 3), np.float64))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.add(a, b)
    assert_mentions(str(info.value), op="Add", words=["float32", "float64"])


@pytest.mark.parametrize("fn, op", [("concat", "Concat"), ("stack", "Stack")])
def test_variadic_mixed_dtypes(dg, fn, op):
    xs = [f32(2), T(np.ones(2, np.int32))]
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)(xs)
    assert_mentions(str(info.value), op=op, words=["float32", "int32"])


def test_where_condition_must_be_bool(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.where(f32(3), f32(3), f32(3))
    assert_mentions(str(info.value), op="Where", words=["bool", "float32"])


def test_gather_float_indices(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.gather(f32(4, 2), f32(2))
    assert_mentions(str(info.value), op="Gather", words=["float32"])


def test_one_hot_float_indices(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.one_hot(f32(3), 4)
    assert_mentions(str(info.value), op="OneHot", words=["float32"])


def test_matmul_int(dg):
    # int32 has a MatMul (tests/ops/test_int_matmul_conv.py); int64 does not.
    a = T(np.ones((2, 2), np.int64))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.matmul(a, a)
    assert_mentions(str(info.value), op="MatMul", words=["int64"])


@pytest.mark.parametrize("fn, op", [("random_uniform", "RandomUniform"),
                                    ("random_normal", "RandomNormal")])
def test_random_int_dtype(dg, fn, op):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)([3], dtype="int32", seed=1)
    assert_mentions(str(info.value), op=op, words=["int32"])


def test_pad_bool(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.pad(T(np.ones(3, bool)), ((1, 1),))
    assert_mentions(str(info.value), op="Pad", words=["bool"])


# ------------------------------------------------------------------ shapes


def test_add_shapes_do_not_broadcast(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.add(f32(2, 3), f32(4))
    assert_mentions(str(info.value), op="Add", shapes=[(2, 3), (4,)])


def test_where_shapes_do_not_broadcast(dg):
    cond = T(np.ones((2, 3), bool))
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.where(cond, f32(2, 3), f32(2))
    assert_mentions(str(info.value), op="Where", shapes=[(2, 3), (2,)])


def test_matmul_inner_mismatch(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.matmul(f32(2, 3), f32(4, 5))
    assert_mentions(str(info.value), op="MatMul", shapes=[(2, 3), (4, 5)])


def test_matmul_batch_mismatch(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.matmul(f32(2, 3, 4), f32(3, 4, 5))
    assert_mentions(str(info.value), op="MatMul",
                    shapes=[(2, 3, 4), (3, 4, 5)])


def test_matmul_0d(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.matmul(f32(), f32(3))
    assert_mentions(str(info.value), op="MatMul")


@pytest.mark.parametrize("shape, target", [((2, 3), [4, 2]),
                                           ((2, 3), [-1, -1]),
                                           ((2, 3), [-1, 4]),
                                           ((2, 3), [2, -3])])
def test_reshape_bad_target(dg, shape, target):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.reshape(f32(*shape), target)
    assert_mentions(str(info.value), op="Reshape", shapes=[target])


@pytest.mark.parametrize("perm", [[0, 0, 1], [0, 1], [0, 1, 3]])
def test_transpose_bad_perm(dg, perm):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.transpose(f32(2, 3, 4), perm)
    assert_mentions(str(info.value), op="Transpose", shapes=[perm])


def test_broadcast_to_incompatible(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.broadcast_to(f32(3, 2), [3, 3])
    assert_mentions(str(info.value), op="BroadcastTo",
                    shapes=[(3, 2), (3, 3)])


def test_concat_mismatched_shapes(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.concat([f32(2, 3), f32(2, 4)], axis=0)
    assert_mentions(str(info.value), op="Concat", shapes=[(2, 3), (2, 4)])


def test_concat_no_inputs(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.concat([])
    assert_mentions(str(info.value), op="Concat")


def test_stack_unequal_shapes(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.stack([f32(2, 3), f32(3, 2)])
    assert_mentions(str(info.value), op="Stack", shapes=[(2, 3), (3, 2)])


def test_split_sizes_do_not_sum(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.split(f32(6, 2), [2, 3])
    assert_mentions(str(info.value), op="Split", shapes=[(6, 2)])


def test_split_into_unequal_parts(dg):
    # The Python wrapper checks this before any op runs: a ValueError
    # (InvalidArgumentError is one too) naming split, the size and n.
    with pytest.raises(ValueError) as info:
        dg.ops.split(f32(7, 2), 3)
    assert_mentions(str(info.value), words=["split", "7", "3"])


def test_squeeze_non_unit_axis(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.squeeze(f32(1, 3), axis=[1])
    assert_mentions(str(info.value), op="Squeeze", shapes=[(1, 3)])


@pytest.mark.parametrize("pads, mode", [(((1, -1),), "constant"),
                                        (((3, 0),), "reflect"),
                                        ([1, 1, 1], "constant"),   # flat: not a layout
                                        ([1, 1], "constant")])     # the old [b0, a0]
def test_pad_bad_pads(dg, pads, mode):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.pad(f32(3), pads, mode=mode)
    flat = [v for p in pads for v in (p if isinstance(p, tuple) else (p,))]
    assert_mentions(str(info.value), op="Pad", shapes=[flat])


def test_pad_unknown_mode(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.pad(f32(3), 1, mode="wrap")
    assert_mentions(str(info.value), op="Pad", words=["wrap"])


def test_slice_zero_step(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.slice(f32(5), [0], [5], [0])
    assert_mentions(str(info.value), op="Slice", words=["step"])


def test_slice_attr_lengths_differ(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.slice(f32(5, 2), [0, 1], [5], [1, 1])
    assert_mentions(str(info.value), op="Slice")


def test_gather_0d_input(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.gather(f32(), T(np.array([0])))
    assert_mentions(str(info.value), op="Gather")


def test_arange_zero_step(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.arange(0, 5, 0)
    assert_mentions(str(info.value), op="Arange", words=["step"])


def test_fill_negative_shape(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.fill([2, -1])
    assert_mentions(str(info.value), op="Fill", shapes=[(2, -1)])


def test_one_hot_negative_depth(dg):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        dg.ops.one_hot(T(np.array([0, 1])), -2)
    assert_mentions(str(info.value), op="OneHot", words=["depth"])


# ------------------------------------------------------------------- axes


@pytest.mark.parametrize("fn, op, kwargs", [
    ("sum", "Sum", {"axis": [2]}), ("mean", "Mean", {"axis": [-3]}),
    ("max", "Max", {"axis": [5]}), ("var", "Var", {"axis": [0, 2]}),
    ("argmax", "ArgMax", {"axis": 2}), ("argmin", "ArgMin", {"axis": -3}),
    ("softmax", "Softmax", {"axis": 2}), ("log_softmax", "LogSoftmax",
                                          {"axis": -3}),
    ("concat", "Concat", {"axis": 2}), ("stack", "Stack", {"axis": 4}),
    ("split", "Split", {"sizes": [1, 2], "axis": 2}),
    ("gather", "Gather", {"axis": 2}), ("squeeze", "Squeeze", {"axis": [2]}),
    ("unsqueeze", "Unsqueeze", {"axis": [4]}),
    ("flatten", "Flatten", {"start_axis": 2}),
    ("slice", "Slice", {"starts": [0], "ends": [1], "steps": [1],
                        "axis": [2]}),
])
def test_axis_out_of_range(dg, fn, op, kwargs):
    """The message names the op, the bad axis and the input shape/rank."""
    x = f32(2, 3)
    if fn in ("concat", "stack"):
        args = [[x, x]]
    elif fn == "gather":
        args = [x, T(np.array([0]))]
    else:
        args = [x]
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)(*args, **kwargs)
    message = str(info.value)
    bad = [v for v in kwargs.values() if isinstance(v, int)]
    bad += [v[-1] for k, v in kwargs.items() if k == "axis" and isinstance(v, list)]
    assert_mentions(message, op=op, words=[str(bad[-1])])
    assert re.search(_shape_re((2, 3)) + r"|rank 2|rank 3", message), message


@pytest.mark.parametrize("fn, op", [("sum", "Sum"), ("max", "Max"),
                                    ("squeeze", "Squeeze"),
                                    ("unsqueeze", "Unsqueeze")])
def test_duplicate_axes(dg, fn, op):
    x = f32(1, 1, 3) if fn != "unsqueeze" else f32(3)
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)(x, axis=[0, 0])
    assert_mentions(str(info.value), op=op)


@pytest.mark.parametrize("fn, op, kwargs", [
    ("max", "Max", {}), ("min", "Min", {"axis": [0]}),
    ("argmax", "ArgMax", {}), ("argmin", "ArgMin", {"axis": 0})])
def test_zero_size_reduction(dg, fn, op, kwargs):
    # Max/Min of an empty float set are -inf / +inf (ONNX, see
    # test_reduce_extra.py); integers have no such value.
    x = T(np.ones((0, 3), np.int32)) if fn in ("max", "min") else f32(0, 3)
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        getattr(dg.ops, fn)(x, **kwargs)
    assert_mentions(str(info.value), op=op, shapes=[(0, 3)])


# ------------------------------------------------------------ attributes


# A bad call signature (unknown or missing attribute, wrong attribute type)
# is a TypeError, as for any Python function; the core's ArgumentTypeError
# is also an InvalidArgumentError.


def test_unknown_attribute(dg):
    with pytest.raises(TypeError) as info:
        dg.ops.softplus(f32(3), gamma=2.0)
    message = str(info.value)
    assert "softplus" in message.lower() and "gamma" in message, message


def test_missing_required_attribute(dg):
    with pytest.raises(TypeError) as info:
        dg.ops.reshape(f32(2, 3))
    message = str(info.value)
    assert "reshape" in message.lower() and "shape" in message, message


@pytest.mark.parametrize("call, op, word", [
    (lambda dg: dg.ops.reshape(f32(2, 3), "six"), "Reshape", "shape"),
    (lambda dg: dg.ops.reshape(f32(2, 3), [2.5, 2]), "Reshape", "2.5"),
    (lambda dg: dg.ops.gelu(f32(2), approximate=3), "Gelu", "approximate"),
    (lambda dg: dg.ops.cast(f32(2), "float99"), "Cast", "float99"),
])
def test_wrong_attribute_type(dg, call, op, word):
    with pytest.raises(TypeError) as info:
        call(dg)
    assert isinstance(info.value, dg.errors.InvalidArgumentError)
    assert_mentions(str(info.value), op=op, words=[word])


@pytest.mark.parametrize("call", [
    lambda dg: dg.ops.gelu(f32(2), approximate="fast"),
    lambda dg: dg.ops.softplus(f32(2), beta=0.0),
    lambda dg: dg.ops.random_uniform([2], low=1.0, high=0.0, seed=1),
    lambda dg: dg.ops.random_normal([2], std=-1.0, seed=1),
])
def test_bad_attribute_values(dg, call):
    with pytest.raises(dg.errors.InvalidArgumentError) as info:
        call(dg)
    message = str(info.value)
    assert any(op in message for op in ("Gelu", "Softplus", "RandomUniform",
                                        "RandomNormal")), message


def test_too_few_inputs(dg):
    with pytest.raises(TypeError) as info:
        dg.ops.add(f32(2))
    assert "add" in str(info.value).lower()


def test_too_many_inputs(dg):
    with pytest.raises(TypeError) as info:
        dg.ops.neg(f32(2), f32(2))
    assert "neg" in str(info.value).lower()


def test_unknown_op(dg):
    with pytest.raises(AttributeError) as info:
        dg.ops.nope  # noqa: B018 - the lookup is the test
    assert "nope" in str(info.value)


def test_error_hierarchy(dg):
    """The error classes derive as docs/python-api.md lists."""
    e = dg.errors
    assert issubclass(e.InvalidArgumentError, (e.DragonError, ValueError))
    assert issubclass(e.InvalidArgumentError, ValueError)
    assert issubclass(e.OutOfRangeError, IndexError)
    assert issubclass(e.NotFoundError, LookupError)
    assert issubclass(e.NoKernelError, NotImplementedError)
    assert issubclass(e.ResourceExhaustedError, MemoryError)
    for name in ("InvalidArgumentError", "OutOfRangeError", "NotFoundError",
                 "NoKernelError", "UnimplementedError", "InternalError",
                 "PluginError", "ResourceExhaustedError"):
        assert issubclass(getattr(e, name), e.DragonError), name
