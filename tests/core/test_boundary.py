"""Regressions of the tensor/op boundary (issue 13, items 1-3, 15, 18, 19):
byte order, read-only memory, Python scalars out of range, exact int64
fill values, dtype arguments and ``Tensor.data``."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError


# ------------------------------------------------------ 1: byte order

@pytest.mark.parametrize("dt", [">f4", ">i8", ">f8", ">i2"])
def test_from_numpy_refuses_non_native_byte_order(dt):
    arr = np.arange(3, dtype=dt)
    with pytest.raises(ValueError, match=r"from_numpy: the array has big-endian byte order") as e:
        dg.from_numpy(arr)
    text = str(e.value)
    assert "use dg.tensor(arr) (copies)" in text.lower()
    assert "arr.astype(arr.dtype.newbyteorder('='))" in text


@pytest.mark.parametrize("dt", [">f4", ">i8", ">f8", ">i2", "<f4"])
def test_copying_paths_honour_byte_order(dt):
    """dg.tensor, operator operands, assign, op inputs and index arrays all
    copy, so they read the bytes in the array's own order."""
    arr = np.arange(3, dtype=dt)
    want = np.arange(3, dtype=np.dtype(dt).newbyteorder("="))
    assert dg.tensor(arr).tolist() == want.tolist()
    assert dg.tensor(arr).dtype == want.dtype.name
    x = dg.tensor(want)
    np.testing.assert_array_equal((x + arr).numpy(), want + want)
    np.testing.assert_array_equal((arr * x).numpy(), want * want)
    np.testing.assert_array_equal(dg.ops.add(x, arr).numpy(), want + want)
    np.testing.assert_array_equal(x.assign(arr).numpy(), want)
    if want.dtype.kind == "i" and want.dtype.itemsize >= 4:
        np.testing.assert_array_equal(dg.tensor([10, 11, 12, 13])[arr].numpy(), want + 10)
    # A native-order view is still zero-copy.
    native = arr.astype(arr.dtype.newbyteorder("="))
    assert dg.from_numpy(native).data_ptr() == native.ctypes.data


def test_from_dlpack_refuses_non_native_byte_order():
    with pytest.raises(BufferError):
        dg.from_dlpack(np.arange(3, dtype=">f4"))


# ---------------------------------------------------- 2: read-only memory

def test_read_only_bytes_stay_read_only():
    data = bytes(8)
    x = dg.from_numpy(np.frombuffer(data, np.float32))
    assert x.is_read_only
    view = x.numpy()
    assert not view.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        view[0] = 1
    with pytest.raises(ValueError):
        view.flags.writeable = True
    with pytest.raises(ValueError, match="read-only"):
        np.asarray(x)[0] = 1
    assert data == bytes(8)
    # Results and copies are ordinary writable tensors.
    y = x + 1
    assert not y.is_read_only and y.numpy().flags.writeable
    z = dg.tensor(x)
    assert not z.is_read_only and not z._same_storage(x)
    z.numpy()[0] = 5
    assert data == bytes(8)


def test_read_only_memmap_never_segfaults(tmp_path):
    """Writing through a read-only memmap used to segfault; now NumPy
    refuses the write, ops read it and assign rebinds without writing."""
    path = tmp_path / "weights.bin"
    np.arange(4, dtype=np.float32).tofile(path)
    mm = np.memmap(path, np.float32, mode="r", shape=(4,))
    x = dg.from_numpy(mm)
    assert x.is_read_only
    with pytest.raises(ValueError, match="read-only"):
        x.numpy()[0] = 1
    np.testing.assert_array_equal((x * 2).numpy(), [0, 2, 4, 6])
    x.assign(dg.tensor(np.ones(4, np.float32)))   # rebinds: the file is untouched
    assert not x.is_read_only
    assert x.tolist() == [1, 1, 1, 1]
    assert np.fromfile(path, np.float32).tolist() == [0, 1, 2, 3]
    del x, mm


def test_read_only_crosses_dlpack_both_ways():
    ro = np.arange(3.0)
    ro.flags.writeable = False
    x = dg.from_dlpack(ro)
    assert x.is_read_only and not x.numpy().flags.writeable
    back = np.from_dlpack(x)            # versioned capsule, read-only flag set
    assert not back.flags.writeable
    with pytest.raises(BufferError, match="read-only"):
        x.__dlpack__()                  # DLPack < 1.0 cannot say read-only
    w = dg.from_dlpack(np.arange(3.0))
    assert not w.is_read_only and np.from_dlpack(w).flags.writeable


def test_from_numpy_writable_stays_zero_copy():
    arr = np.zeros(3, np.float32)
    x = dg.from_numpy(arr)
    assert not x.is_read_only
    x.numpy()[1] = 7
    assert arr[1] == 7


# ------------------------------------------------ 3: Python scalars

@pytest.mark.parametrize("dtype, value, op", [
    ("int8", 1000, lambda x, v: x + v),
    ("uint8", 256, lambda x, v: x * v),
    ("int32", 2 ** 40, lambda x, v: x + v),
    ("uint8", -1, lambda x, v: x - v),
    ("int16", 40000, lambda x, v: v - x),      # reflected
    ("int8", 128, lambda x, v: v * x),
    ("int64", 2 ** 63, lambda x, v: x + v),
    ("bool", 2 ** 70, lambda x, v: x + v),
    ("int8", 1000, lambda x, v: x & v),
])
def test_out_of_range_int_scalar_raises_overflow(dtype, value, op):
    x = dg.tensor(np.ones(2, dtype))
    with pytest.raises(OverflowError, match=rf"Python integer {value} out of bounds"):
        op(x, value)
    with pytest.raises(OverflowError):
        y = x
        y += value      # in-place operators fall back to the same path


def test_out_of_range_int_through_ops_raises_overflow():
    x = dg.tensor(np.int8([1]))
    with pytest.raises(OverflowError, match=r"Add: input 'b' \(position 1\).*1000.*int8"):
        dg.ops.add(x, 1000)
    with pytest.raises(OverflowError):
        dg.tensor([1000], dtype="int8")
    with pytest.raises(OverflowError):
        dg.tensor([2 ** 63])


def test_in_range_int_scalars_still_work():
    x = dg.tensor(np.int8([1, -3]))
    assert (x + 126).tolist() == [127, 123]
    assert (x * -42).tolist() == [-42, 126]
    assert (dg.tensor(np.uint8([7])) - 7).tolist() == [0]
    assert (x / 1000).dtype == "float32"     # division is float: no overflow


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("value", [1000, -1000, 2 ** 40, -(2 ** 40), 2 ** 70, -(2 ** 70)])
def test_comparisons_with_out_of_range_ints_are_exact(dtype, value):
    """As NumPy 2: int8 < 1000 is True everywhere, never a wrapped compare."""
    arr = np.array([0, 1, 100], dtype)
    x = dg.tensor(arr)
    for name, fn in [("lt", lambda a, v: a < v), ("le", lambda a, v: a <= v),
                     ("gt", lambda a, v: a > v), ("ge", lambda a, v: a >= v),
                     ("eq", lambda a, v: a == v), ("ne", lambda a, v: a != v)]:
        if abs(value) < 2 ** 63:
            want = fn(arr, value)
        else:
            want = fn(arr.astype(object), value).astype(bool)
        got = fn(x, value)
        assert got.dtype == "bool"
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{name} {value}")


def test_float_tensor_with_huge_int_is_inf_as_numpy():
    with np.errstate(over="ignore"):
        want = np.float32([1]) + 2 ** 200
    assert (dg.tensor(np.float32([1])) + 2 ** 200).tolist() == want.tolist()
    assert (dg.tensor(np.float32([1])) + 2 ** 1000).tolist() == [np.inf]

    with pytest.raises(OverflowError):      # past float64: NumPy 2 raises too
        dg.tensor(np.float32([1])) + 2 ** 2000


@pytest.mark.parametrize("dtype, scalar", [
    ("int8", np.int64(100)), ("int8", np.uint8(200)), ("int16", np.int32(70000)),
    ("uint8", np.int8(-1)), ("int32", np.float32(1.5)), ("int8", np.bool_(True)),
    ("float32", np.float64(0.1)), ("bool", np.int16(3)),
])
def test_numpy_scalars_promote_as_numpy_2(dtype, scalar):
    """NumPy scalars are strong (NEP 50): int8 * np.int64(100) is int64 200,
    never a wrapped int8 -56."""
    arr = np.array([2, 0], dtype)
    x = dg.tensor(arr)
    for op in (lambda a, b: a * b, lambda a, b: b + a, lambda a, b: a - b):
        want = op(arr, scalar)
        got = op(x, scalar)
        assert got.dtype == want.dtype.name
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("value", [np.int64(1000), np.array(1000), np.array([1000, 1]),
                                   [1000]])
def test_numpy_ints_out_of_range_through_ops_raise(value):
    """An op input that takes the other input's dtype never wraps a NumPy
    int (it gave int8 -22 for 1000)."""
    with pytest.raises(OverflowError, match=r"Add: input 'b'.*1000.*out of bounds for int8"):
        dg.ops.add(dg.tensor(np.int8([2, 3])), value)


@pytest.mark.parametrize("value", [2.7, np.float64(2.7), [1.5, 1.0], float("nan")])
def test_floats_into_int_op_inputs_are_not_truncated(value):
    with pytest.raises(TypeError, match=r"Add: input 'b'.*cannot be held by a int8 input"):
        dg.ops.add(dg.tensor(np.int8([2, 3])), value)
    with pytest.raises(TypeError, match=r"cannot be held by a bool input"):
        dg.ops.logical_and(dg.tensor(np.array([True, False])), 2)
    # Exact values still convert.
    assert dg.ops.add(dg.tensor(np.int8([2, 3])), 2.0).tolist() == [4, 5]
    assert dg.ops.add(dg.tensor(np.int8([2, 3])), np.int64(3)).tolist() == [5, 6]


def test_int_lists_past_int64_are_not_made_floats():
    """[1, 2**63] became float32 [1, 9.223372e18]; ints are never silently
    floats (floats beside them still are)."""
    with pytest.raises(OverflowError, match="too large"):
        dg.tensor([1, 2 ** 63])
    with pytest.raises(OverflowError):
        dg.tensor([[1], [-(2 ** 63) - 1]])
    assert dg.tensor([1.0, 1e20]).dtype == "float32"


def test_float_lists_with_nan_convert_without_warnings():
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # the range scan once warned on all-NaN data
        assert np.isnan(dg.tensor([float("nan")] * 2).numpy()).all()
        assert dg.tensor([[1.5, float("inf")]]).tolist() == [[1.5, float("inf")]]


# ------------------------------------------------ 15: exact int64 fill

@pytest.mark.parametrize("value", [2 ** 62 + 1, -(2 ** 63), 2 ** 63 - 1, 2 ** 53 + 1])
def test_int64_fill_is_exact(value):
    assert dg.ops.fill([2], value, "int64").tolist() == [value, value]
    assert dg.ops.full([1], value).tolist() == [value]
    assert dg.ops.fill([1], int_value=value, dtype="int64").tolist() == [value]
    # and in a compiled graph
    assert dg.function(lambda: dg.ops.full([1], value))().tolist() == [value]


def test_fill_value_must_be_a_value_of_the_dtype():
    with pytest.raises(InvalidArgumentError, match=r"Fill: value 2.5 is not a value of int32"):
        dg.ops.fill([1], 2.5, "int32")
    with pytest.raises(InvalidArgumentError, match=r"Fill: value 3e\+09 is not a value of int32"):
        dg.ops.fill([1], 3e9, "int32")
    with pytest.raises(InvalidArgumentError, match=r"not a value of int64"):
        dg.ops.fill([1], float(2 ** 63), "int64")
    with pytest.raises(InvalidArgumentError, match=r"not a value of uint8"):
        dg.ops.fill([1], float("nan"), "uint8")
    with pytest.raises(InvalidArgumentError, match=r"Fill: value 1e\+300 overflows float32"):
        dg.ops.fill([1], 1e300, "float32")
    with pytest.raises(InvalidArgumentError, match=r"int_value 300 is out of the range of uint8"):
        dg.ops.full([1], 300, "uint8")
    with pytest.raises(TypeError, match=r"'int_value' expects an int64.*out of the int64 range"):
        dg.ops.full([1], 2 ** 63)
    # exactly representable floats are fine; a float value rounds as a cast
    assert dg.ops.fill([1], float(2 ** 62), "int64").tolist() == [2 ** 62]
    assert dg.ops.fill([1], float("inf"), "float32").tolist() == [np.inf]


@pytest.mark.parametrize("value, dtype", [
    (3.4028235e38, "float32"),      # FLT_MAX as printed: rounds to FLT_MAX
    (-3.4028235e38, "float32"),
    (65519.0, "float16"), (-65519.0, "float16"),
    (3.3961e38, "bfloat16"),
])
def test_fill_takes_floats_that_round_to_the_largest_finite_value(value, dtype):
    """A value past the largest finite one but below the rounding midpoint
    is a value of the dtype (NumPy's cast gives the largest finite value);
    only what a cast makes infinite overflows."""
    want = np.array([value], dtype="float32" if dtype == "bfloat16" else dtype)
    if dtype == "bfloat16":
        want = np.array([np.sign(value) * 3.3895313892515355e38])
    got = dg.ops.fill([1], value, dtype)
    assert np.isfinite(got.numpy().astype(np.float64)).all()
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want.astype(np.float64))
    with pytest.raises(InvalidArgumentError, match="overflows"):
        dg.ops.fill([1], {"float32": 3.4028236e38, "float16": 65520.0,
                          "bfloat16": 3.3962e38}[dtype], dtype)

def test_int_attributes_take_no_floats():
    """An int attribute never passes through float: 1.0 and True are refused."""
    x = dg.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(TypeError, match=r"Softmax: attribute 'axis' expects an int, got float 1.0"):
        dg.ops.softmax(x, 1.0)
    with pytest.raises(TypeError, match=r"expects an int, got bool True"):
        dg.ops.softmax(x, True)
    with pytest.raises(TypeError, match=r"Sum: attribute 'axes' expects a sequence of ints.*"
                                        r"item 1 str 'x'"):
        dg.ops.sum(x, [0, "x"])
    with pytest.raises(TypeError, match=r"Fill: attribute 'value' expects a float, got int "
                                        r"4611686018427387905, which a float64 cannot hold"):
        dg.ops._fill_op([1], 2 ** 62 + 1, "float64")
    assert dg.ops.softmax(x, np.int64(1)).shape == (2, 3)


# ------------------------------------------------- 18: dtype arguments

def test_zeros_with_two_ints_explains_the_shape():
    for fn in (dg.ops.zeros, dg.ops.ones):
        with pytest.raises(TypeError, match=rf"{fn.__name__}: dtype must be a dtype .* got the "
                                            rf"int 3; the shape is one argument, a sequence: "
                                            rf"{fn.__name__}\(\(2, 3\)\)"):
            fn(2, 3)
    with pytest.raises(TypeError, match=r"full: dtype must be a dtype"):
        dg.ops.full((2,), 1, 3)
    assert dg.ops.zeros((2, 3)).shape == (2, 3)


@pytest.mark.parametrize("call", [
    lambda: dg.tensor([1.0], dtype=3),
    lambda: dg.tensor([1.0]).to(3),
    lambda: dg.tensor([1.0]).astype(3),
    lambda: dg.ops.cast(dg.tensor([1.0]), 3),
    lambda: dg.ops.random_uniform([2], dtype=np.int64(8)),
    lambda: dg.tensor([1.0]).astype(True),
    lambda: dg.ops.fill([2], 0.0, 3),
    lambda: dg.nn.Linear(2, 2).to(dtype=3),
    lambda: dg.Tensor([1, 2], 3),                 # the constructor made int16 of it
    lambda: dg.Tensor([1.0], dtype=np.int64(9)),
])
def test_dtype_arguments_refuse_ints(call):
    with pytest.raises(TypeError, match=r"dtype"):
        call()


def test_dtype_arguments_take_dtypes():
    x = dg.tensor([1.0])
    for dt in (dg.int16, "int16", np.int16, np.dtype("int16")):
        assert x.astype(dt).dtype == "int16"
        assert dg.ops.cast(x, dt).dtype == "int16"
        assert dg.ops.zeros((1,), dt).dtype == "int16"
    assert dg.int16 != 3 and dg.int16 == "int16"


# ------------------------------------------------------- 19: .data

def test_data_read_is_detached_and_shares_storage():
    w = dg.nn.Parameter(dg.tensor([1.0, 2.0]))
    d = w.data
    assert d._same_storage(w) and not d.requires_grad and w.requires_grad
    assert d is not w and type(d) is dg.Tensor
    plain = dg.tensor([3.0])
    assert plain.data.tolist() == [3.0] and plain.data._same_storage(plain)


def test_data_assignment_replaces_the_value_in_place():
    w = dg.nn.Parameter(dg.tensor([1.0, 2.0]))
    ident = w._id
    w.data = dg.tensor([5.0, 6.0])
    assert w.tolist() == [5.0, 6.0] and w._id == ident and w.requires_grad
    w.data = dg.tensor([1.0, 2.0, 3.0])      # another shape, as in PyTorch
    assert w.shape == (3,)
    with pytest.raises(InvalidArgumentError, match=r"Tensor.data: the new value is float64"):
        w.data = dg.tensor(np.zeros(3))
    with pytest.raises(TypeError, match=r"expected a Tensor"):
        w.data = [1.0]


def test_optimizer_sees_data_assignment():
    """nn.Linear + SGD: after weight.data = t the step starts from t."""
    lin = dg.nn.Linear(2, 1)
    opt = dg.optim.SGD(lin.parameters(), lr=0.5)
    new_w = dg.tensor(np.array([[3.0, -1.0]], np.float32))
    lin.weight.data = new_w
    lin.bias.data = dg.tensor(np.zeros(1, np.float32))
    x = dg.tensor(np.array([[1.0, 2.0]], np.float32))
    assert lin(x).tolist() == [[1.0]]
    loss = dg.ops.sum(lin(x))
    opt.zero_grad()
    loss.backward()
    opt.step()
    # dloss/dw = x, so w = new_w - 0.5 * x
    np.testing.assert_allclose(lin.weight.numpy(), [[2.5, -2.0]])
    np.testing.assert_allclose(lin.bias.numpy(), [-0.5])


def test_data_assignment_inside_a_traced_function():
    """Inside @function .data = records an assign: same shape works (the
    compiled step updates the tensor each run), another shape is refused
    naming .data, not an assign the user never wrote."""
    v = dg.tensor(np.zeros(3, np.float32))

    @dg.function
    def step(x):
        v.data = v + x
        return v * 1.0

    for k in range(1, 4):
        assert step(dg.tensor(np.ones(3, np.float32))).tolist() == [float(k)] * 3
    assert v.tolist() == [3.0] * 3

    @dg.function
    def reshape(x):
        v.data = dg.ops.reshape(x, [2, 2])
        return v

    with pytest.raises(ValueError, match=r"Tensor.data = inside a traced function.*"
                                         r"float32\[3\], the value float32\[2, 2\]"):
        reshape(dg.tensor(np.ones(4, np.float32)))
    assert v.shape == (3,)


@pytest.mark.parametrize("dtype, value, error", [
    ("uint8", np.array([300, 1]), OverflowError),   # was [44, 1]
    ("int8", np.int64(1000), OverflowError),        # was -24
    ("int32", 2.7, TypeError),                      # was 2
    ("int32", [1.5, 2.0], TypeError),
    ("bool", np.array([2, 0]), TypeError),          # was [True, False]
])
def test_assign_never_wraps_or_truncates(dtype, value, error):
    v = dg.tensor(np.zeros(2 if np.ndim(value) else (), dtype))
    with pytest.raises(error):
        v.assign(value)
    assert not v.numpy().any()                      # unchanged
    v.assign(np.ones(np.shape(value), np.int64))     # exact values still convert
    assert v.numpy().all()
