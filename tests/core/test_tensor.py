"""The eager Tensor API of docs/python-api.md."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

DTYPE_NAMES = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16",
               "bfloat16", "float32", "float64"]


def _np(name):
    if name == "bfloat16":
        import ml_dtypes

        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


# ----------------------------------------------------------- construction


@pytest.mark.parametrize("data, dtype, shape", [
    (1.5, "float32", ()),
    (3, "int64", ()),
    (True, "bool", ()),
    ([1.0, 2.0], "float32", (2,)),
    ([[1, 2, 3], [4, 5, 6]], "int64", (2, 3)),
    ([True, False], "bool", (2,)),
    ([], "float32", (0,)),
    ([[1, 2.5]], "float32", (1, 2)),
])
def test_construction_default_dtypes(data, dtype, shape):
    """Python floats -> float32, ints -> int64, bools -> bool."""
    for make in (dg.Tensor, dg.tensor):
        t = make(data)
        assert t.dtype.name == dtype
        assert t.shape == shape
        np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=dtype))


@pytest.mark.parametrize("name", DTYPE_NAMES)
def test_construction_from_numpy_keeps_dtype(name):
    a = np.arange(6).reshape(2, 3).astype(_np(name))
    t = dg.tensor(a)
    assert t.dtype.name == name
    assert t.dtype.itemsize == a.dtype.itemsize
    assert t.dtype.numpy == a.dtype
    np.testing.assert_array_equal(t.numpy(), a)


def test_tensor_copies_but_from_numpy_shares():
    a = np.arange(4.0)
    copied, shared = dg.tensor(a), dg.from_numpy(a)
    a[0] = 42.0
    assert copied.numpy()[0] == 0.0
    assert shared.numpy()[0] == 42.0


@pytest.mark.parametrize("spec", [dg.float64, "float64", np.float64,
                                  np.dtype("float64")])
def test_explicit_dtype_spellings(spec):
    t = dg.Tensor([1, 2, 3], dtype=spec)
    assert t.dtype == dg.float64
    assert t.numpy().dtype == np.float64


def test_construction_from_tensor_and_device():
    base = dg.Tensor([1.0, 2.0])
    again = dg.Tensor(base)
    np.testing.assert_array_equal(again.numpy(), base.numpy())
    on_cpu = dg.tensor([1, 2], device="cpu")
    assert str(on_cpu.device) == "cpu:0"


def test_dtype_objects():
    assert dg.float32 == dg.tensor([1.0]).dtype
    assert dg.float32 != dg.float64
    assert dg.float32.name == "float32" and dg.float32.itemsize == 4
    assert dg.bool_.name == "bool"
    assert dg.bfloat16.itemsize == 2
    for name in DTYPE_NAMES:
        attr = "bool_" if name == "bool" else name
        assert getattr(dg, attr).name == name


# ------------------------------------------------------------------ numpy


def test_numpy_is_zero_copy_both_ways():
    t = dg.tensor(np.zeros((2, 3), np.float32))
    view = t.numpy()
    view[1, 2] = 7.0
    assert t.numpy()[1, 2] == 7.0
    assert t.tolist()[1][2] == 7.0
    assert np.shares_memory(view, t.numpy())


def test_numpy_of_op_result_is_writable_view():
    x = dg.tensor(np.arange(6.0, dtype=np.float32))
    y = dg.ops.neg(x)
    arr = y.numpy()
    arr[0] = 5.0
    assert y.tolist()[0] == 5.0


@pytest.mark.parametrize("make", [
    lambda a: a.T,
    lambda a: a[::2],
    lambda a: a[:, ::-1],
    lambda a: a[::-2, 1:],
    lambda a: np.broadcast_to(a[:1], (3, 4)),
    lambda a: a[1],
    lambda a: a[1, 2, ...],
])
def test_from_numpy_non_contiguous(make):
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = make(a)
    t = dg.from_numpy(view)
    assert t.shape == view.shape
    np.testing.assert_array_equal(t.numpy(), view)
    np.testing.assert_array_equal(np.array(t.tolist()), view)
    # Zero-copy: a write through the base shows in the tensor.
    a[...] += 100
    np.testing.assert_array_equal(t.numpy(), view)
    # Ops read strided tensors correctly.
    np.testing.assert_array_equal(dg.ops.neg(t).numpy(), -view)


def test_strides_and_contiguity():
    a = np.arange(12, dtype=np.float64).reshape(3, 4)
    t = dg.from_numpy(a)
    assert tuple(t.strides) == (4, 1) and t.is_contiguous()
    tt = dg.from_numpy(a.T)
    assert tuple(tt.strides) == (1, 4) and not tt.is_contiguous()


def test_dlpack_round_trip_with_numpy():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    t = dg.from_dlpack(a)
    assert t.dtype == dg.int32 and t.shape == (2, 3)
    a[0, 0] = -5
    assert t.numpy()[0, 0] == -5                 # zero-copy into dragon
    back = np.from_dlpack(t)
    assert back.dtype == np.int32
    np.testing.assert_array_equal(back, a)
    t.numpy()[1, 2] = 99
    assert back[1, 2] == 99                      # zero-copy out of dragon
    device = t.__dlpack_device__()
    assert tuple(device)[0] == 1                 # kDLCPU


def test_dlpack_versioned_export_is_writable():
    """Asked for DLPack >= 1.0 (NumPy 2 does), a writable tensor exports a
    versioned capsule, so the consumer may write through it."""
    a = np.zeros(3, np.float32)
    t = dg.from_numpy(a)
    capsule = t.__dlpack__(max_version=(1, 0))
    assert "versioned" in repr(capsule)
    back = np.from_dlpack(t)
    back[0] = 5.0
    assert a[0] == 5.0 and t.numpy()[0] == 5.0


def test_dlpack_of_strided_tensor():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = dg.from_numpy(a[:, ::2])
    back = np.from_dlpack(t)
    np.testing.assert_array_equal(back, a[:, ::2])


# --------------------------------------------------------------- properties


def test_properties():
    t = dg.tensor(np.zeros((2, 3, 4), np.float32))
    assert t.shape == (2, 3, 4)
    assert isinstance(t.shape, tuple)
    assert t.ndim == 3 and t.size == 24 and len(t) == 2
    assert t.dtype == dg.float32
    assert str(t.device) == "cpu:0"
    assert t.device.type == "cpu" and t.device.index == 0
    scalar = dg.tensor(2.0)
    assert scalar.shape == () and scalar.ndim == 0 and scalar.size == 1
    with pytest.raises(TypeError):
        len(scalar)


def test_item_and_tolist():
    assert dg.tensor(2.5).item() == 2.5
    assert isinstance(dg.tensor(3).item(), int)
    assert isinstance(dg.tensor(True).item(), bool)
    assert isinstance(dg.tensor(1.5).item(), float)
    assert dg.tensor([7]).item() == 7
    with pytest.raises((ValueError, RuntimeError)):
        dg.tensor([1, 2]).item()
    assert dg.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert dg.tensor(np.array([0.5, 1.5], np.float64)).tolist() == [0.5, 1.5]
    assert dg.tensor(5).tolist() == 5


def test_to_and_cpu():
    t = dg.tensor([1.5, -2.5])
    d = t.to(dg.float64)
    assert d.dtype == dg.float64
    np.testing.assert_array_equal(d.numpy(), [1.5, -2.5])
    i = t.to("int32")
    assert i.tolist() == [1, -2]
    assert t.to("cpu").tolist() == t.tolist()
    assert t.cpu().device.type == "cpu"


# ------------------------------------------------------------------- repr


def test_repr():
    t = dg.Tensor([[1.0, 2.0], [3.0, 4.0]])
    assert repr(t) == ("tensor([[1., 2.],\n        [3., 4.]], "
                       "dtype=float32)")
    r = repr(dg.tensor(np.array([1, 2], np.int32)))
    assert r.startswith("tensor([1, 2]") and "int32" in r
    assert "5" in repr(dg.tensor(5))
    assert "bool" in repr(dg.tensor([True]))


# -------------------------------------------------------------- operators


@pytest.mark.parametrize("op", ["+", "-", "*", "/", "**"])
def test_operators_with_scalars_on_both_sides(op):
    a = np.array([1.0, 2.0, 4.0], np.float32)
    t = dg.tensor(a)
    for left, right in ((t, 3.0), (3.0, t), (t, 2), (2, t)):
        got = eval(f"left {op} right")  # noqa: S307 - a fixed operator
        nl = a if left is t else left
        nr = a if right is t else right
        want = eval(f"nl {op} nr")  # noqa: S307
        assert got.dtype == dg.float32, (op, left, right)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_tensor_tensor_operators():
    a = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    b = np.array([0.5, -1.0], np.float32)
    ta, tb = dg.tensor(a), dg.tensor(b)
    np.testing.assert_allclose((ta + tb).numpy(), a + b)
    np.testing.assert_allclose((ta - tb).numpy(), a - b)
    np.testing.assert_allclose((ta * tb).numpy(), a * b)
    np.testing.assert_allclose((ta / tb).numpy(), a / b)
    np.testing.assert_allclose((ta @ ta).numpy(), a @ a, rtol=1e-6)
    np.testing.assert_allclose((ta @ tb).numpy(), a @ b, rtol=1e-6)
    np.testing.assert_allclose((-ta).numpy(), -a)
    np.testing.assert_allclose(abs(dg.tensor(b)).numpy(), np.abs(b))


def test_comparison_and_logical_operators():
    a = dg.tensor([1, 2, 3])
    assert (a == 2).tolist() == [False, True, False]
    assert (a != 2).tolist() == [True, False, True]
    assert (a < 2).tolist() == [True, False, False]
    assert (a <= 2).tolist() == [True, True, False]
    assert (a > 2).tolist() == [False, False, True]
    assert (a >= 2).tolist() == [False, True, True]
    assert (2 < a).tolist() == [False, False, True]
    assert (a == 2).dtype == dg.bool_
    p, q = dg.tensor([True, True, False]), dg.tensor([True, False, False])
    assert (p & q).tolist() == [True, False, False]
    assert (p | q).tolist() == [True, True, False]
    assert (~p).tolist() == [False, False, True]


def test_scalar_takes_tensor_dtype():
    i8 = dg.tensor(np.array([100, -100], np.int8))
    out = i8 + 100
    assert out.dtype == dg.int8
    assert out.tolist() == [-56, 0]          # wraps in int8
    f64 = dg.tensor(np.array([1.0], np.float64))
    assert (f64 * 0.1).dtype == dg.float64
    assert (0.1 * f64).numpy()[0] == np.float64(0.1)
    i64 = dg.tensor([1, 2])
    assert (i64 * 3).dtype == dg.int64


def test_integer_true_division_gives_float32():
    a = dg.tensor([1, 2, 3])
    out = a / 2
    assert out.dtype == dg.float32
    np.testing.assert_allclose(out.numpy(), [0.5, 1.0, 1.5])
    out = 3 / a
    assert out.dtype == dg.float32
    np.testing.assert_allclose(out.numpy(), [3.0, 1.5, 1.0])
    out = a / dg.tensor([4, 4, 4])
    assert out.dtype == dg.float32


@pytest.mark.parametrize("left, right", [
    ("float32", "float64"), ("int32", "int64"), ("int8", "uint8"),
    ("int64", "float32"), ("uint8", "int16"), ("bool", "int32"),
    ("int16", "float64"),
])
def test_dtype_promotion_follows_numpy(left, right):
    a = np.array([1, 2, 3]).astype(left)
    b = np.array([3, 2, 1]).astype(right)
    got = dg.tensor(a) + dg.tensor(b)
    want = a + b
    assert got.dtype.name == want.dtype.name, (left, right)
    np.testing.assert_array_equal(got.numpy(), want)


# ---------------------------------------------------------------- indexing


@pytest.fixture
def grid():
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    return a, dg.tensor(a)


@pytest.mark.parametrize("index", [
    0, -1, 2,
    slice(1, 3), slice(None, None, 2), slice(None, None, -1),
    slice(-1, 0, -2), slice(5, 1, -1), slice(10, None), slice(-100, 100),
    (1, 2), (1, -1, 3), (slice(None), 1), (slice(None), slice(None, None, -2)),
    (0, slice(1, 4, 2), slice(None, None, -3)),
    None, (None, 0), (slice(None), None, 1),
    Ellipsis, (Ellipsis, 0), (0, Ellipsis), (Ellipsis, None),
    (1, Ellipsis, slice(None, None, -1)),
])
def test_basic_indexing(grid, index):
    a, t = grid
    got = t[index]
    want = a[index]
    assert got.shape == want.shape, index
    np.testing.assert_array_equal(got.numpy(), want)


def test_index_chain_and_scalar_result(grid):
    a, t = grid
    assert t[1][2][3].item() == a[1, 2, 3]
    assert t[1, 2, 3].shape == ()


@pytest.mark.parametrize("idx", [[2, 0, 0], [-1], [[0, 1], [2, 2]], []])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_tensor_index_gathers_axis_0(grid, idx, dtype):
    a, t = grid
    index = np.array(idx, dtype=dtype)
    got = t[dg.tensor(index)]
    np.testing.assert_array_equal(got.numpy(), a[index])


def test_index_out_of_range(grid):
    _, t = grid
    with pytest.raises(IndexError):
        t[3]
    with pytest.raises(IndexError):
        t[0, -6]


def test_methods_mirror_ops():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = dg.tensor(a)
    np.testing.assert_allclose(t.sum().numpy(), a.sum())
    np.testing.assert_allclose(t.sum(axis=[1], keepdims=True).numpy(),
                               a.sum(axis=1, keepdims=True))
    np.testing.assert_array_equal(t.reshape([3, 2]).numpy(), a.reshape(3, 2))
    np.testing.assert_array_equal(t.transpose().numpy(), a.T)
    np.testing.assert_allclose(t.exp().numpy(), np.exp(a), rtol=1e-6)


def test_shapes_numpy_cannot_represent_are_refused():
    """An empty tensor with a huge axis is still too big to exist (NumPy's
    rule): shape inference says so instead of producing an unusable tensor."""
    x = dg.tensor(np.float16(0))
    with pytest.raises(dg.errors.InvalidArgumentError, match="too large"):
        dg.ops.broadcast_to(x, [2**63 - 1, 0])
    assert dg.ops.broadcast_to(x, [5, 0]).numpy().shape == (5, 0)


def test_tensor_ids_are_never_reused():
    """Autograd and tracing key tensors by ``_id``: a freed tensor's id must
    not come back (addresses do; the allocator reuses them at once)."""
    import dragon_core as dg
    seen = set()
    for _ in range(200):
        t = dg.ops.zeros([3])
        assert t._id not in seen
        seen.add(t._id)
        del t
    v = dg.ops.zeros([2])
    before = v._id
    v.assign(dg.ops.ones([2]))
    assert v._id == before, "assign keeps the variable's identity"


def test_dead_unused_output_does_not_steal_a_gradient():
    """BatchNorm's batch_mean output dies unused; a later tensor of another
    shape must not be taken for it in backward (regression: ids were
    addresses)."""
    import numpy as np
    import dragon_core as dg
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((4, 3, 2, 2)))
    x.requires_grad = True
    g, b = dg.ops.ones([3], dtype="float64"), dg.ops.zeros([3], dtype="float64")
    total = None
    for _ in range(20):                     # plenty of chances for address reuse
        y, mean, var = dg.ops.batch_norm(x, g, b, dg.ops.zeros([3], dtype="float64"),
                                         dg.ops.ones([3], dtype="float64"))
        del mean, var
        z = (y * 2.0).sum()
        total = z if total is None else total + z
    total.backward()
    assert x.grad.shape == x.shape
    assert np.allclose(x.grad.numpy(), 0, atol=1e-9)   # d/dx sum(BN(x)) = 0
