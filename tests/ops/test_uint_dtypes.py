"""uint16, uint32 and uint64 (ABI 1.4): the dtypes themselves (names, sizes,
NumPy and DLPack conversion, promotion) and the cpu_eigen kernels of the ops
ONNX uses with unsigned types, against NumPy (docs/ops.md, docs/python-api.md).

Integer results are compared exactly with NumPy computing in the same dtype
(whose wrap-around is the reference); values span each dtype's full range,
so uint64 operands go past int64 and float64's 2**53.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import WIDE_UINT_DTYPES

UINTS = WIDE_UINT_DTYPES
ops = dg.ops

SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 4), (4,)), ((2, 1, 4), (3, 1)), ((), (2, 3)),
               ((), ()), ((0, 3), (3,)), ((33, 65), (65,))]


def _full(rng, dt, shape, lo=None, hi=None):
    info = np.iinfo(dt)
    lo = info.min if lo is None else lo
    hi = info.max if hi is None else hi
    x = rng.integers(lo, hi, shape, endpoint=True, dtype=dt)
    # Make sure the extremes appear (wrap-around) when there is room.
    flat = x.reshape(-1)
    if flat.size >= 4:
        flat[0], flat[1] = lo, hi
    return x


def _t(a):
    return dg.tensor(np.asarray(a))


def _same(got, want):
    got = got.numpy() if isinstance(got, dg.Tensor) else np.asarray(got)
    want = np.asarray(want)
    assert got.dtype == want.dtype, (got.dtype, want.dtype)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got, want)


# ------------------------------------------------------------------ dtypes

@pytest.mark.parametrize("name,size,code", [("uint16", 2, 10), ("uint32", 4, 11),
                                            ("uint64", 8, 12)])
def test_dtype_objects(name, size, code):
    d = getattr(dg, name)
    assert d.name == name and d.itemsize == size and d.code == code
    assert not d.is_signed and not d.is_floating_point
    assert d == name and d == np.dtype(name) and d.numpy == np.dtype(name)
    assert dg.as_dtype(np.dtype(name)) is d and dg.as_dtype(name) is d
    assert str(d) == name and repr(d) == f"dragon_core.{name}"
    import pickle
    assert pickle.loads(pickle.dumps(d)) is d


def test_older_dtypes_keep_their_kinds():
    assert [d.is_floating_point for d in (dg.float16, dg.bfloat16, dg.float32, dg.float64)] \
        == [True] * 4
    assert not dg.uint8.is_signed and not dg.bool_.is_signed
    assert all(d.is_signed for d in (dg.int8, dg.int64, dg.float32))


@pytest.mark.parametrize("dt", UINTS)
def test_numpy_round_trip_and_extremes(dt):
    info = np.iinfo(dt)
    a = np.array([0, 1, info.max, info.max - 1, info.max // 2 + 1], dtype=dt)
    t = dg.tensor(a)
    assert t.dtype == getattr(dg, dt)
    _same(t, a)
    _same(dg.from_numpy(a), a)
    assert t[2].item() == int(info.max)
    # Zero-copy both ways through DLPack.
    b = np.from_dlpack(t)
    _same(b, a)
    _same(dg.from_dlpack(a), a)
    # Python ints in range, and out of range (as NumPy 2).
    _same(dg.tensor([int(info.max), 0], dtype=dt), np.array([info.max, 0], dt))
    with pytest.raises(OverflowError):
        dg.tensor([int(info.max) + 1], dtype=dt)
    with pytest.raises(OverflowError):
        dg.tensor([-1], dtype=dt)


@pytest.mark.parametrize("dt", UINTS)
def test_creation(dt):
    info = np.iinfo(dt)
    _same(ops.zeros((2, 3), dtype=dt), np.zeros((2, 3), dt))
    _same(ops.ones((0, 2), dtype=dt), np.ones((0, 2), dt))
    _same(ops.full([3], int(info.max), dt), np.full([3], info.max, dt))
    _same(ops.arange(0, 10, 3, dtype=dt), np.arange(0, 10, 3, dtype=dt))


# --------------------------------------------------------------- promotion

@pytest.mark.parametrize("a,b,want", [
    ("uint16", "int8", "int32"), ("uint16", "int16", "int32"), ("uint16", "int32", "int32"),
    ("uint32", "int8", "int64"), ("uint32", "int64", "int64"), ("uint8", "uint16", "uint16"),
    ("uint16", "uint64", "uint64"), ("uint32", "uint64", "uint64"), ("uint16", "uint32", "uint32"),
    ("uint16", "float32", "float32"), ("uint32", "float32", "float64"),
    ("uint64", "float64", "float64"), ("uint16", "bool", "uint16"), ("uint64", "uint8", "uint64"),
])
def test_promotion_follows_numpy(a, b, want):
    assert np.result_type(a, b) == np.dtype(want)  # the rule we follow
    x = dg.tensor(np.array([1, 2], a))
    y = dg.tensor(np.array([3, 4], b))
    for r in (x + y, y + x, x * y):
        assert r.dtype == dg.as_dtype(want), (a, b, r.dtype)
    _same(x + y, np.array([1, 2], a) + np.array([3, 4], b))


@pytest.mark.parametrize("other", ["int8", "int16", "int32", "int64"])
def test_uint64_with_signed_int_raises(other):
    x = dg.tensor(np.array([2 ** 63, 1], np.uint64))
    y = dg.tensor(np.array([1, 2], other))
    with pytest.raises(TypeError, match="uint64 with " + other):
        x + y
    with pytest.raises(TypeError, match="uint64"):
        y * x
    with pytest.raises(TypeError, match="uint64"):
        x + np.array([1, 2], other)


@pytest.mark.parametrize("dt", UINTS)
def test_python_scalars_are_weak(dt):
    info = np.iinfo(dt)
    a = np.array([0, 5, info.max], dt)
    x = dg.tensor(a)
    _same(x + 1, a + np.array(1, dt))            # wraps at max
    _same(x * 3, a * np.array(3, dt))
    _same(2 - x, np.array(2, dt) - a)
    _same(x < int(info.max), a < info.max)
    _same(x == int(info.max), a == info.max)
    with pytest.raises(OverflowError):
        x + (int(info.max) + 1)
    with pytest.raises(OverflowError):
        x + (-1)
    # Comparisons with out-of-range ints give the exact answer.
    _same(x < int(info.max) + 1, np.ones(3, bool))
    _same(x > -1, np.ones(3, bool))
    assert (x / 2).dtype == dg.float32


# ------------------------------------------------------ element-wise ops

ARITH = [("add", np.add), ("sub", np.subtract), ("mul", np.multiply),
         ("maximum", np.maximum), ("minimum", np.minimum),
         ("bitwise_and", np.bitwise_and), ("bitwise_or", np.bitwise_or),
         ("bitwise_xor", np.bitwise_xor)]


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("name,ref", ARITH)
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_binary_wraps_like_numpy(dt, name, ref, sa, sb):
    rng = np.random.default_rng(hash((dt, name, sa, sb)) % 2 ** 32)
    a, b = _full(rng, dt, sa), _full(rng, dt, sb)
    _same(getattr(ops, name)(_t(a), _t(b)), ref(a, b))


DIVISIONS = [("floor_divide", np.floor_divide), ("trunc_divide", np.floor_divide),
             ("mod", np.remainder), ("fmod", np.fmod)]


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("name,ref", DIVISIONS)
@pytest.mark.parametrize("sa,sb", SHAPE_PAIRS)
def test_division_and_zero_divisor(dt, name, ref, sa, sb):
    rng = np.random.default_rng(7)
    a = _full(rng, dt, sa)
    b = _full(rng, dt, sb)
    b.reshape(-1)[::3] = 0                           # division by zero gives 0
    b.reshape(-1)[1::5] = 1
    with np.errstate(divide="ignore", invalid="ignore"):
        want = ref(a, b)
    _same(getattr(ops, name)(_t(a), _t(b)), want)


@pytest.mark.parametrize("dt", UINTS)
def test_operators_floor_div_mod(dt):
    a = np.array([7, 0, np.iinfo(dt).max, 9], dt)
    b = np.array([2, 3, 7, 0], dt)
    with np.errstate(divide="ignore"):
        _same(_t(a) // _t(b), a // b)
        _same(_t(a) % _t(b), a % b)


@pytest.mark.parametrize("dt", UINTS)
def test_integer_pow_wraps(dt):
    rng = np.random.default_rng(3)
    a = rng.integers(0, 1000, (4, 5), dtype=dt)
    b = rng.integers(0, 70, (4, 5), dtype=dt)
    b[0, :3] = [0, 1, 64]
    _same(ops.pow(_t(a), _t(b)), np.power(a, b))


@pytest.mark.parametrize("dt", UINTS)
def test_shifts(dt):
    bits = np.iinfo(dt).bits
    rng = np.random.default_rng(5)
    a = _full(rng, dt, (6, 7))
    b = rng.integers(0, bits + 3, (6, 7), dtype=dt)   # past the width: 0
    b[0, :3] = [0, bits - 1, bits]
    want_l = np.where(b < bits, np.left_shift(a, np.minimum(b, bits - 1)), 0).astype(dt)
    want_r = np.where(b < bits, np.right_shift(a, np.minimum(b, bits - 1)), 0).astype(dt)
    _same(ops.left_shift(_t(a), _t(b)), want_l)
    _same(ops.right_shift(_t(a), _t(b)), want_r)
    _same(_t(a) << _t(b), want_l)


@pytest.mark.parametrize("dt", UINTS)
def test_unary(dt):
    rng = np.random.default_rng(11)
    a = _full(rng, dt, (5, 6))
    _same(ops.bitwise_not(_t(a)), np.invert(a))
    _same(ops.abs(_t(a)), a)
    _same(ops.neg(_t(a)), np.negative(a))           # wraps, as NumPy
    _same(-_t(a), np.negative(a))
    _same(ops.sign(_t(a)), np.sign(a))
    _same(ops.square(_t(a)), np.square(a))


@pytest.mark.parametrize("dt", UINTS)
def test_clip(dt):
    info = np.iinfo(dt)
    rng = np.random.default_rng(2)
    a = _full(rng, dt, (4, 9))
    # Clip's bounds are float attributes: exact up to 2**53 (and at powers
    # of two past it).
    lo, hi = 1000, (int(info.max) // 3 if dt != "uint64" else 2 ** 62 + 2 ** 40)
    _same(ops.clip(_t(a), lo, hi), np.clip(a, lo, hi).astype(dt))


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("name,ref", [("equal", np.equal), ("not_equal", np.not_equal),
                                      ("less", np.less), ("less_equal", np.less_equal),
                                      ("greater", np.greater),
                                      ("greater_equal", np.greater_equal)])
def test_compare_past_int64(dt, name, ref):
    rng = np.random.default_rng(13)
    a = _full(rng, dt, (7, 5))
    b = a.copy()
    b[::2] = _full(rng, dt, b[::2].shape)
    # Values that differ only past 2**53 (uint64): float64 would call them equal.
    if dt == "uint64":
        a[0, 0], b[0, 0] = 2 ** 63 + 1, 2 ** 63
    _same(getattr(ops, name)(_t(a), _t(b)), ref(a, b))


@pytest.mark.parametrize("dt", UINTS)
def test_where(dt):
    rng = np.random.default_rng(17)
    c = rng.random((3, 4)) < 0.5
    x, y = _full(rng, dt, (3, 4)), _full(rng, dt, (4,))
    _same(ops.where(_t(c), _t(x), _t(y)), np.where(c, x, y))


# -------------------------------------------------------------------- cast

OTHER = ["bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32", "float64",
         "uint16", "uint32", "uint64"]


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("to", OTHER)
def test_cast_from_uint(dt, to):
    rng = np.random.default_rng(19)
    a = _full(rng, dt, (50,))
    with np.errstate(over="ignore"):  # uint -> float16 past 65504 is inf
        want = a.astype(to)       # int -> int wraps; -> float rounds to nearest
    _same(ops.cast(_t(a), to), want)


@pytest.mark.parametrize("frm", ["bool", "uint8", "int8", "int16", "int32", "int64",
                                 "uint16", "uint32", "uint64"])
@pytest.mark.parametrize("dt", UINTS)
def test_cast_int_to_uint_wraps(frm, dt):
    rng = np.random.default_rng(23)
    a = (rng.random(40) < 0.5) if frm == "bool" else _full(rng, frm, (40,))
    _same(ops.cast(_t(a), dt), a.astype(dt))


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("frm", ["float16", "float32", "float64"])
def test_cast_float_to_uint_truncates_and_saturates(dt, frm):
    info = np.iinfo(dt)
    a = np.array([0.0, 0.9, 1.5, 255.99, 1000.25, -0.5, -7.0, np.nan, np.inf, -np.inf], frm)
    got = ops.cast(_t(a), dt).numpy()
    finite = np.isfinite(a)
    want = np.zeros(a.shape, dt)
    with np.errstate(invalid="ignore"):
        inside = finite & (a > -1) & (a.astype(np.float64) < float(info.max) + 1)
        want[inside] = np.trunc(a[inside].astype(np.float64)).astype(dt)
    want[np.isposinf(a)] = info.max                   # saturate
    # below zero and NaN: 0
    np.testing.assert_array_equal(got, want)


def _round_int(v: int, bits: int) -> int:
    """The nearest number with ``bits`` significant bits to the integer v
    (ties to even): a correctly rounded int -> float conversion, exactly."""
    e = v.bit_length() - bits
    if e <= 0:
        return v
    q, r = divmod(v, 1 << e)
    half = 1 << (e - 1)
    if r > half or (r == half and q & 1):
        q += 1
    return q << e


def test_cast_uint64_to_float_rounds_once():
    import ml_dtypes
    # Past 2**53 a conversion through float64 rounds twice: 2**60 + 2**52 + 1
    # is a float64 tie (to 2**60), and rounding that to bfloat16 loses the
    # +1 that decides the correctly rounded result.
    v = [2 ** 60 + 2 ** 52 + 1, 2 ** 63 + 2 ** 55 + 1, 2 ** 64 - 1, 2 ** 53 + 1,
         (2 ** 24 + 1) << 39, 12345678901234567890]
    x = _t(np.array(v, np.uint64))
    for dt, bits in (("float32", 24), ("bfloat16", 8), ("float64", 53)):
        got = ops.cast(x, dt).numpy().astype(np.float64)
        want = [float(_round_int(i, bits)) for i in v]
        np.testing.assert_array_equal(got, want, err_msg=dt)
    assert ops.cast(x, "bfloat16").numpy().dtype == np.dtype(ml_dtypes.bfloat16)
    assert np.isinf(ops.cast(x, "float16").numpy()).all()


def test_bitcast_same_size():
    a = np.array([1, 2 ** 31, 2 ** 32 - 1], np.uint32)
    _same(ops.bitcast(_t(a), "int32"), a.view(np.int32))
    _same(ops.bitcast(_t(a.view(np.int32)), "uint32"), a)
    b = np.array([1.5, -2.0], np.float64)
    _same(ops.bitcast(_t(b), "uint64"), b.view(np.uint64))


# --------------------------------------------------------------- reductions

@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("name,ref", [("sum", np.sum), ("prod", np.prod),
                                      ("max", np.max), ("min", np.min)])
@pytest.mark.parametrize("axis,keepdims", [(None, False), (0, False), (1, True),
                                           ((0, 2), False)])
def test_reductions(dt, name, ref, axis, keepdims):
    rng = np.random.default_rng(29)
    a = _full(rng, dt, (4, 5, 3))
    want = ref(a, axis=axis, keepdims=keepdims, dtype=dt) if name in ("sum", "prod") \
        else ref(a, axis=axis, keepdims=keepdims)
    got = getattr(ops, name)(_t(a), axis=axis, keepdims=keepdims)
    _same(got, np.asarray(want, dt))


@pytest.mark.parametrize("dt", UINTS)
def test_empty_reductions(dt):
    a = np.zeros((0, 3), dt)
    _same(ops.sum(_t(a), axis=0), np.zeros(3, dt))
    _same(ops.prod(_t(a), axis=0), np.ones(3, dt))
    with pytest.raises(ValueError, match="no identity"):
        ops.max(_t(a), axis=0)


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("name,ref", [("argmax", np.argmax), ("argmin", np.argmin)])
def test_argreduce(dt, name, ref):
    rng = np.random.default_rng(31)
    a = _full(rng, dt, (6, 7))
    a[2, 3] = a[2, 5] = np.iinfo(dt).max                # ties: first index
    for axis in (0, 1):
        _same(getattr(ops, name)(_t(a), axis=axis), ref(a, axis=axis).astype(np.int64))


# ---------------------------------------------------- copies and indexing

@pytest.mark.parametrize("dt", UINTS)
def test_copy_ops_are_dtype_agnostic(dt):
    rng = np.random.default_rng(37)
    a = _full(rng, dt, (2, 3, 4))
    t = _t(a)
    _same(ops.reshape(t, [4, 6]), a.reshape(4, 6))
    _same(ops.transpose(t, [2, 0, 1]), a.transpose(2, 0, 1))
    _same(ops.concat([t, t], 1), np.concatenate([a, a], 1))
    _same(ops.stack([t, t], 0), np.stack([a, a], 0))
    _same(t[:, 1:3, ::2], a[:, 1:3, ::2])
    _same(ops.gather(t, _t(np.array([3, 0, 3])), 2), a[:, :, [3, 0, 3]])
    _same(ops.broadcast_to(_t(a[:, :1]), [2, 5, 4]), np.broadcast_to(a[:, :1], (2, 5, 4)))
    _same(ops.pad(t, ((0, 0), (1, 0), (0, 2))), np.pad(a, [(0, 0), (1, 0), (0, 2)]))
    _same(ops.pad(t, ((0, 0), (1, 1), (0, 0)), "constant", 7.0),
          np.pad(a, [(0, 0), (1, 1), (0, 0)], constant_values=7))
    _same(ops.flatten(t), a.reshape(-1))
    parts = ops.split(t, [1, 2], 1)
    for p, w in zip(parts, np.split(a, [1], 1)):
        _same(p, w)
    _same(ops.transpose(t, [1, 0, 2]).contiguous(), a.transpose(1, 0, 2))


@pytest.mark.parametrize("dt", UINTS)
def test_scatter_add(dt):
    rng = np.random.default_rng(41)
    x = _full(rng, dt, (5, 3))
    upd = _full(rng, dt, (4, 3))
    idx = np.array([0, 3, 0, 4])
    want = x.copy()
    np.add.at(want, idx, upd)                          # wraps
    _same(ops.scatter_add(_t(x), _t(idx), _t(upd), 0), want)


@pytest.mark.parametrize("dt", UINTS)
@pytest.mark.parametrize("reduction,ufunc", [("max", np.maximum), ("min", np.minimum),
                                             ("mul", np.multiply)])
def test_scatter_reduce(dt, reduction, ufunc):
    rng = np.random.default_rng(47)
    x = _full(rng, dt, (5, 3))
    upd = _full(rng, dt, (6, 3))
    idx = np.array([0, 3, 0, 4, 4, 4])
    want = x.copy()
    ufunc.at(want, idx, upd)
    _same(ops.scatter_reduce(_t(x), _t(idx), _t(upd), 0, reduction), want)


@pytest.mark.parametrize("dt", ["uint32", "uint64"])
def test_unique_past_int64(dt):
    top = np.iinfo(dt).max
    a = np.array([top, 3, 2 ** (np.iinfo(dt).bits - 1), 3, top, 0], dt)
    vals, idx, inv, cnt = ops.unique(_t(a), return_index=True, return_inverse=True,
                                     return_counts=True)
    w_vals, w_idx, w_inv, w_cnt = np.unique(a, return_index=True, return_inverse=True,
                                            return_counts=True)
    _same(vals, w_vals)
    np.testing.assert_array_equal(idx.numpy(), w_idx)
    np.testing.assert_array_equal(inv.numpy().reshape(-1), w_inv.reshape(-1))
    np.testing.assert_array_equal(cnt.numpy(), w_cnt)


@pytest.mark.parametrize("dt", ["uint32", "uint64"])
def test_sort_topk_past_int64(dt):
    rng = np.random.default_rng(43)
    a = _full(rng, dt, (3, 17))
    a[0, :2] = [np.iinfo(dt).max, 2 ** (np.iinfo(dt).bits - 1)]   # sign bit set
    vals, idx = ops.sort(_t(a), -1)
    _same(vals, np.sort(a, -1))
    _same(idx, np.argsort(a, -1, kind="stable").astype(np.int64))
    _same(ops.argsort(_t(a), -1), np.argsort(a, -1, kind="stable").astype(np.int64))
    vals, idx = ops.topk(_t(a), 4, -1)
    _same(vals, np.sort(a, -1)[:, ::-1][:, :4])
    np.testing.assert_array_equal(np.take_along_axis(a, idx.numpy(), -1), vals.numpy())
    _same(ops.cumsum(_t(a), 1), np.cumsum(a, 1, dtype=dt))


@pytest.mark.parametrize("dt", UINTS)
def test_nonzero(dt):
    a = np.array([[0, 1, 0], [2 ** (np.iinfo(dt).bits - 1), 0, 3]], dt)
    _same(ops.nonzero(_t(a)), np.array(np.nonzero(a), np.int64))


@pytest.mark.parametrize("dt", UINTS)
def test_unsupported_ops_raise_clearly(dt):
    a = _t(np.ones((2, 2), dt))
    with pytest.raises(Exception, match=dt):
        ops.matmul(a, a)
    with pytest.raises(Exception, match=dt):
        ops.exp(a)


# ------------------------------------------------- graphs and checkpoints

@pytest.mark.parametrize("dt", UINTS)
def test_compiled_function_and_checkpoint(dt, tmp_path):
    rng = np.random.default_rng(53)
    a, b = _full(rng, dt, (4, 3)), _full(rng, dt, (3,))
    f = dg.function(lambda x, y: ops.maximum(x + y, x * y) // (y | dg.tensor(np.array(1, dt))))
    with np.errstate(divide="ignore"):
        want = np.maximum(a + b, a * b) // (b | np.array(1, dt))
    _same(f(_t(a), _t(b)), want)
    _same(f(_t(a), _t(b)), want)                 # the cached graph
    path = str(tmp_path / "u.dg")
    dg.save({"a": _t(a)}, path)
    back = dg.load(path)["a"]
    assert back.dtype == getattr(dg, dt)
    _same(back, a)
