"""CumSum, Sort, ArgSort, TopK and the padded NonZero / Unique against
float64 / int64 NumPy references (docs/ops.md, "Scans, sorting and
selection"), and the Python functions nonzero, unique and einsum."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import ALL_DTYPES, HALF_DTYPES, OpCase, op_case

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

from ._common import sample, small_ints

SORT_DTYPES = ("float32", "float64", "int32", "int64")
# 0-d, empty (both ways), odd sizes, 3-D and one large enough for the
# parallel path (ties everywhere: few distinct values).
SHAPES = [(), (0,), (3, 0), (7,), (2, 3, 4), (5, 1, 3), (67, 129)]


def _axis_ok(case):
    shape, axis = case.shape, case.attrs.get("axis", -1)
    if not shape:
        return axis in (0, -1)
    return -len(shape) <= axis < len(shape)


def _line_axis(x, axis):
    """x as at least 1-D and the axis (a 0-d tensor is one element)."""
    return (x.reshape(1), 0) if x.ndim == 0 else (x, axis % x.ndim)


def _stable_order(x, axis, descending):
    """Stable argsort; descending keeps equal values in index order; NaN is
    the largest value."""
    a, ax = _line_axis(x, axis)
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        # Rank keys: NaN above every number.
        key = np.where(nan, np.inf, a)
        big = np.where(nan, 1, 0)
        if descending:
            key, big = -key, -big
        order = np.lexsort((key, big), axis=ax)  # stable; last key is primary
        return order.astype(np.int64)
    key = -a.astype(np.int64) if descending else a
    return np.argsort(key, axis=ax, kind="stable").astype(np.int64)


def _cumsum(x, axis, exclusive=False, reverse=False):
    a, ax = _line_axis(x, axis)
    if reverse:
        a = np.flip(a, ax)
    c = np.cumsum(a, axis=ax)
    if exclusive:
        c = c - a
    if reverse:
        c = np.flip(c, ax)
    return c.reshape(x.shape)


def _sort(x, axis=-1, descending=False, stable=True):
    order = _stable_order(x, axis, descending)
    a, ax = _line_axis(x, axis)
    return [np.take_along_axis(a, order, ax).reshape(x.shape), order.reshape(x.shape)]


def _argsort(x, axis=-1, descending=False, stable=True):
    return _sort(x, axis, descending)[1]


def _topk(x, k, axis=-1, largest=True, sorted=True):
    a, ax = _line_axis(x, axis)
    order = np.take(_stable_order(x, axis, largest), np.arange(k), axis=ax)
    vals = np.take_along_axis(a, order, ax)
    if x.ndim == 0:
        return [vals.reshape(()), order.reshape(())]
    return [vals, order]


def _ties(rng, dt, shape):
    return [small_ints(rng, dt, shape, -3, 3)]


@op_case("CumSum", inputs=lambda rng, dt, shape: [sample(rng, dt, shape, -3, 3)],
         reference=_cumsum, dtypes=SORT_DTYPES, shapes=SHAPES, tol=10,
         attrs=[{"axis": -1}, {"axis": 0}, {"axis": 1}, {"axis": -1, "exclusive": True},
                {"axis": 0, "reverse": True},
                {"axis": -1, "exclusive": True, "reverse": True}],
         select=_axis_ok)
def test_cumsum(case):
    case.check_forward()


@op_case("Sort", inputs=_ties, reference=_sort, dtypes=SORT_DTYPES, shapes=SHAPES,
         attrs=[{}, {"axis": 0}, {"descending": True},
                {"axis": 1, "descending": True, "stable": False}],
         out_dtype=[None, "int64"], select=_axis_ok)
def test_sort(case):
    """Many ties: the indices check that the sort is stable both ways."""
    case.check_forward()


@op_case("ArgSort", inputs=_ties, reference=_argsort, dtypes=SORT_DTYPES, shapes=SHAPES,
         attrs=[{}, {"axis": 0}, {"descending": True}, {"axis": -2, "descending": True}],
         out_dtype="int64", select=_axis_ok)
def test_argsort(case):
    case.check_forward()


def _topk_ok(case):
    if not _axis_ok(case):
        return False
    shape, axis = case.shape, case.attrs.get("axis", -1)
    dim = shape[axis] if shape else 1
    return case.attrs["k"] <= dim and (shape or case.attrs["k"] == 1)


@op_case("TopK", inputs=_ties, reference=_topk, dtypes=SORT_DTYPES, shapes=SHAPES,
         attrs=[{"k": 0}, {"k": 1}, {"k": 3}, {"k": 2, "largest": False},
                {"k": 2, "axis": 0, "sorted": False}, {"k": 1, "axis": -2, "largest": False}],
         out_dtype=[None, "int64"], select=_topk_ok)
def test_topk(case):
    """Ties go to the lower index (ONNX TopK)."""
    case.check_forward()


def test_topk_full_axis_equals_sort():
    x = np.random.default_rng(0).standard_normal((4, 9))
    v, i = dg.ops.topk(dg.tensor(x), 9)
    sv, si = dg.ops.sort(dg.tensor(x), descending=True)
    np.testing.assert_array_equal(v.numpy(), sv.numpy())
    np.testing.assert_array_equal(i.numpy(), si.numpy())


@pytest.mark.parametrize("descending", [False, True])
def test_sort_nan_is_largest(descending):
    x = np.array([1.0, np.nan, -2.0, np.nan, 0.5, -np.inf, np.inf])
    case = OpCase.of("Sort", [x], _sort, attrs={"descending": descending},
                     out_dtype=[None, "int64"])
    v, i = case.check_forward()
    assert np.isnan(v[-2:]).all() if not descending else np.isnan(v[:2]).all()
    assert list(i[-2:] if not descending else i[:2]) == [1, 3]


def test_topk_nan_and_ties():
    x = np.array([[2.0, np.nan, 2.0, 5.0, 5.0]])
    v, i = dg.ops.topk(dg.tensor(x), 3)
    np.testing.assert_array_equal(i.numpy(), [[1, 3, 4]])
    v, i = dg.ops.topk(dg.tensor(x), 2, largest=False)
    np.testing.assert_array_equal(i.numpy(), [[0, 2]])


def test_cumsum_int_wraps():
    x = np.array([2**62, 2**62, 2**62], np.int64)
    y = dg.ops.cumsum(dg.tensor(x), 0).numpy()
    assert y.tolist() == [2**62, -(2**63), -(2**62)]


# ------------------------------------------------------------------ padded


def _nonzero_padded(x):
    n = x.size
    out = np.full((x.ndim, n), -1, np.int64)
    idx = np.array(np.nonzero(x)) if x.ndim else np.zeros((0, int(x != 0)), np.int64)
    out[:, :idx.shape[1]] = idx
    return [out, np.int64(int(np.count_nonzero(x)))]


def _sparse(rng, dt, shape):
    x = small_ints(rng, dt, shape, -1, 1)  # about a third zeros
    return [x]


@op_case("NonZero", inputs=_sparse, reference=_nonzero_padded,
         dtypes=ALL_DTYPES + HALF_DTYPES, shapes=SHAPES, out_dtype="int64")
def test_nonzero_padded(case):
    case.check_forward()


def _unique_padded(x, sorted=True):
    flat = x.reshape(-1)
    n = flat.size
    vals, first, inv, counts = np.unique(flat, return_index=True, return_inverse=True,
                                         return_counts=True)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals, first, counts, inv = vals[order], first[order], counts[order], rank[inv]
    m = vals.size
    pad = lambda a, dt: np.concatenate([a, np.zeros(n - m, dt)])  # noqa: E731
    return [pad(vals, vals.dtype), pad(first, np.int64), inv.reshape(x.shape).astype(np.int64),
            pad(counts, np.int64), np.int64(m)]


@op_case("Unique", inputs=_ties, reference=_unique_padded, dtypes=SORT_DTYPES,
         shapes=SHAPES, attrs=[{}, {"sorted": False}],
         out_dtype=[None, "int64", "int64", "int64", "int64"])
def test_unique_padded(case):
    case.check_forward()


def test_unique_nans_collapse():
    x = np.array([np.nan, 1.0, np.nan, -1.0, 1.0])
    v, inv, c = dg.ops.unique(dg.tensor(x), return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(v.numpy(), [-1.0, 1.0, np.nan])
    np.testing.assert_array_equal(inv.numpy(), [2, 1, 2, 0, 1])
    np.testing.assert_array_equal(c.numpy(), [1, 2, 2])


def _unique_axis_ref(x, axis, sorted=True):
    """numpy.unique along ``axis`` (float64/int64 reference) with the order
    of first occurrence for sorted=False: values, index, inverse, counts."""
    vals, first, inv, counts = np.unique(x, axis=axis, return_index=True,
                                         return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        vals, first, counts, inv = np.take(vals, order, axis), first[order], counts[order], \
            rank[inv]
    return vals, first.astype(np.int64), inv.astype(np.int64), counts.astype(np.int64)


def _unique_axis_padded(x, axis, sorted=True):
    vals, first, inv, counts = _unique_axis_ref(x, axis, sorted)
    dim, m = x.shape[axis], first.size
    pad = [(0, 0)] * x.ndim
    pad[axis % x.ndim] = (0, dim - m)
    return [np.pad(vals, pad), np.pad(first, (0, dim - m)), inv,
            np.pad(counts, (0, dim - m)), np.int64(m)]


def _rows_with_ties(rng, dt, shape):
    """Few distinct slices along every axis: values in {-1, 0, 1}."""
    return [small_ints(rng, dt, shape, -1, 1)]


def _unique_axis_ok(case):
    return bool(case.shape) and -len(case.shape) <= case.attrs["axis"] < len(case.shape)


@op_case("Unique", inputs=_rows_with_ties, reference=_unique_axis_padded, dtypes=SORT_DTYPES,
         shapes=[(0,), (3, 0), (0, 3), (7,), (6, 2), (2, 3, 4), (5, 1, 3), (40, 2)],
         attrs=[{"axis": 0}, {"axis": -1}, {"axis": 1, "sorted": False},
                {"axis": -2, "sorted": False}, {"axis": 2}],
         out_dtype=[None, "int64", "int64", "int64", "int64"], select=_unique_axis_ok)
def test_unique_axis_padded(case):
    """Padded Unique along an axis against numpy.unique(axis=...)."""
    case.check_forward()


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("shape, axis", [((0,), 0), ((3, 0), 1), ((0, 3), 1), ((0, 3), 0),
                                         ((4, 0), 0), ((9,), 0), ((9,), -1), ((8, 3), 0),
                                         ((3, 8), 1), ((3, 8), -1), ((4, 5, 2), 1),
                                         ((4, 5, 2), -3), ((2, 3, 6), 2), ((1, 1), 0)],
                         ids=str)
@pytest.mark.parametrize("dtype", SORT_DTYPES)
def test_unique_axis(shape, axis, sorted_, dtype):
    """unique(axis=...) returns what numpy.unique does (ONNX Unique with axis);
    computed on float64 / int64 copies of the same values."""
    x = small_ints(np.random.default_rng(7), dtype, shape, -1, 1)
    wide = x.astype(np.float64 if x.dtype.kind == "f" else np.int64)
    got = dg.ops.unique(dg.tensor(x), True, True, True, sorted=sorted_, axis=axis)
    want = _unique_axis_ref(wide, axis, sorted_)
    assert got[0].dtype == getattr(dg, dtype)
    for g, w in zip(got, want):
        assert tuple(g.shape) == w.shape
        np.testing.assert_array_equal(g.numpy(), w)
    # The inverse rebuilds x from the values.
    np.testing.assert_array_equal(np.take(got[0].numpy(), got[2].numpy(), axis), x)
    assert isinstance(dg.ops.unique(dg.tensor(x), axis=axis), dg.Tensor)


def test_unique_axis_known_values():
    x = np.array([[1, 2], [3, 4], [1, 2], [0, 9], [3, 4]], np.int64)
    v, i, inv, c = dg.ops.unique(dg.tensor(x), True, True, True, axis=0)
    np.testing.assert_array_equal(v.numpy(), [[0, 9], [1, 2], [3, 4]])
    np.testing.assert_array_equal(i.numpy(), [3, 0, 1])
    np.testing.assert_array_equal(inv.numpy(), [1, 2, 1, 0, 2])
    np.testing.assert_array_equal(c.numpy(), [1, 2, 2])
    v, i, inv, c = dg.ops.unique(dg.tensor(x), True, True, True, sorted=False, axis=0)
    np.testing.assert_array_equal(v.numpy(), [[1, 2], [3, 4], [0, 9]])
    np.testing.assert_array_equal(i.numpy(), [0, 1, 3])
    np.testing.assert_array_equal(inv.numpy(), [0, 1, 0, 2, 1])
    np.testing.assert_array_equal(c.numpy(), [2, 2, 1])
    # Columns: lexicographic over the rows (the slice order is row-major).
    v = dg.ops.unique(dg.tensor(x.T.copy()), axis=1)
    np.testing.assert_array_equal(v.numpy(), [[0, 1, 3], [9, 2, 4]])


def test_unique_axis_nan_slices_collapse():
    """NaNs compare equal, so slices holding NaN at the same places collapse
    (and sort after every number at that position)."""
    x = np.array([[np.nan, 1.0], [0.0, 2.0], [np.nan, 1.0], [0.0, np.nan]])
    v, inv, c = dg.ops.unique(dg.tensor(x), return_inverse=True, return_counts=True, axis=0)
    np.testing.assert_array_equal(v.numpy(), [[0.0, 2.0], [0.0, np.nan], [np.nan, 1.0]])
    np.testing.assert_array_equal(inv.numpy(), [2, 0, 2, 1])
    np.testing.assert_array_equal(c.numpy(), [1, 1, 2])


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.unique(dg.tensor(np.float32(1.0)), axis=0), r"Unique.*0-d"),
    (lambda: dg.ops.unique(dg.tensor(np.zeros((2, 3))), axis=2), r"Unique.*axis 2"),
    (lambda: dg.ops.unique(dg.tensor(np.zeros((2, 3))), axis=-3), r"Unique.*axis -3"),
    (lambda: dg.ops.unique(dg.tensor(np.zeros((2, 3))), axis=1.0), r"Unique.*axis must be an int"),
    (lambda: dg.ops.unique(dg.tensor(np.zeros((2, 3), bool)), axis=0), r"Unique.*bool"),
])
def test_unique_axis_bad_input(call, match):
    with pytest.raises((InvalidArgumentError, TypeError), match=match):
        call()


def test_unique_axis_in_graph_mode():
    """unique_padded(axis=...) traces (fixed shapes); unique() refuses to."""
    x = np.array([[2, 1], [0, 0], [2, 1]], np.int32)

    @dg.function
    def f(t):
        return dg.ops.unique_padded(t, axis=0)

    vals, first, inv, counts, n = f(dg.tensor(x))
    assert int(n.numpy()) == 2
    np.testing.assert_array_equal(vals.numpy(), [[0, 0], [2, 1], [0, 0]])
    np.testing.assert_array_equal(inv.numpy(), [1, 0, 1])

    @dg.function
    def g(t):
        return dg.ops.unique(t, axis=0)

    with pytest.raises(InvalidArgumentError, match=r"Unique.*unique_padded"):
        g(dg.tensor(x))


# -------------------------------------------------------------- functions


@pytest.mark.parametrize("shape", SHAPES[1:] + [(2, 0, 3)], ids=str)
@pytest.mark.parametrize("dtype", ["bool", "float32", "int64", "uint8"])
def test_nonzero(shape, dtype):
    x = small_ints(np.random.default_rng(3), dtype, shape, -1, 1)
    got = dg.ops.nonzero(dg.tensor(x))
    assert got.dtype == dg.int64
    np.testing.assert_array_equal(got.numpy(), np.array(np.nonzero(x)).reshape(x.ndim, -1))


def test_nonzero_0d():
    assert dg.ops.nonzero(dg.tensor(3.0)).shape == (0, 1)
    assert dg.ops.nonzero(dg.tensor(0.0)).shape == (0, 0)


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("shape", [(0,), (1,), (9,), (3, 4, 5)], ids=str)
def test_unique(shape, sorted_):
    x = small_ints(np.random.default_rng(4), "int32", shape, -3, 3)
    got = dg.ops.unique(dg.tensor(x), True, True, True, sorted=sorted_)
    want = _unique_padded(x.astype(np.int64), sorted=sorted_)
    m = int(want[4])
    for g, w in zip(got, [want[0][:m], want[1][:m], want[2], want[3][:m]]):
        np.testing.assert_array_equal(g.numpy(), w)
    values, inverse = got[0].numpy(), got[2].numpy()
    np.testing.assert_array_equal(values[inverse], x)
    assert got[0].dtype == dg.int32
    assert isinstance(dg.ops.unique(dg.tensor(x)), dg.Tensor)


EINSUMS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ij->j", [(3, 4)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (5, 4, 2)]),
    ("...i->...", [(2, 3, 4)]),
    ("abc,cd,de->abe", [(2, 3, 4), (4, 5), (5, 2)]),
    ("ab,ab->ab", [(3, 4), (1, 4)]),
    ("ij,kl->", [(2, 3), (4, 5)]),
    (",ij->ij", [(), (2, 3)]),
    ("ij,jk->ik", [(0, 4), (4, 5)]),
    ("ij,jk->ik", [(3, 0), (0, 5)]),
    ("ABc,c->BA", [(2, 3, 4), (4,)]),
    ("ii->i", [(4, 4)]),
    ("ii", [(4, 4)]),
    ("...ii->...i", [(2, 3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("ij,jj->i", [(2, 3), (3, 3)]),
    ("iij,jk->ik", [(2, 2, 3), (3, 4)]),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("eq, shapes", EINSUMS, ids=[e for e, _ in EINSUMS])
def test_einsum(eq, shapes, dtype):
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    got = dg.ops.einsum(eq, *[dg.tensor(x) for x in xs])
    want = np.einsum(eq, *[x.astype(np.float64) for x in xs])
    assert got.dtype == getattr(dg, dtype)
    assert tuple(got.shape) == want.shape
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got.numpy(), want, rtol=tol, atol=tol)


# ------------------------------------------------------------------ errors


@pytest.mark.parametrize("call, match", [
    (lambda x: dg.ops.sort(x, axis=2), r"Sort.*axis 2 is out of range"),
    (lambda x: dg.ops.topk(x, 5), r"TopK.*k 5 is out of range.*\[2, 3\]"),
    (lambda x: dg.ops.topk(x, -1), r"TopK.*k -1"),
    (lambda x: dg.ops.topk(dg.ops.sum(x), 0), r"TopK.*0-d input .* takes k = 1, got k 0"),
    (lambda x: dg.ops.cumsum(x, -3), r"CumSum.*axis -3"),
    (lambda x: dg.ops.argsort(dg.ops.cast(x, "bool")), r"ArgSort.*bool"),
    (lambda x: dg.ops.unique(dg.ops.cast(x, "float16")), r"Unique.*float16"),
    (lambda x: dg.ops.einsum("ij,jk->ik", x, x), r"einsum\('ij,jk->ik'\).*'j' has sizes 3 and 2"),
    (lambda x: dg.ops.einsum("ii->i", x), r"label 'i' repeated in one term has sizes 2 and 3"),
    (lambda x: dg.ops.einsum("ijk->i", x), r"3 labels but its operand has shape \[2, 3\]"),
    (lambda x: dg.ops.einsum("ij->k", x), r"output label 'k' is in no operand"),
    (lambda x: dg.ops.einsum("ij,jk", x), r"names 2 operands, 1 were given"),
])
def test_bad_input(call, match):
    x = dg.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises((InvalidArgumentError, ValueError, TypeError), match=match):
        call(x)


def test_graph_mode():
    """The fixed-shape ops trace; the data-dependent functions say what to use."""
    x = np.random.default_rng(6).standard_normal((3, 5))

    @dg.function
    def f(t):
        v, i = dg.ops.topk(t, 2)
        s, _ = dg.ops.sort(t, axis=0)
        return dg.ops.cumsum(v, 1, reverse=True), i, s, dg.ops.einsum("ij,kj->ik", t, t)

    v, i, s, e = f(dg.tensor(x))
    order = np.argsort(-x, axis=1, kind="stable")[:, :2]
    np.testing.assert_allclose(v.numpy(), np.flip(np.cumsum(np.flip(
        np.take_along_axis(x, order, 1), 1), 1), 1))
    np.testing.assert_array_equal(i.numpy(), order)
    np.testing.assert_allclose(s.numpy(), np.sort(x, 0))
    np.testing.assert_allclose(e.numpy(), x @ x.T, rtol=1e-12)

    @dg.function
    def g(t):
        return dg.ops.nonzero(t)

    with pytest.raises(InvalidArgumentError, match=r"NonZero.*nonzero_padded"):
        g(dg.tensor(x))

    @dg.function
    def h(t):
        return dg.ops.nonzero_padded(t)

    idx, n = h(dg.tensor(x))
    assert int(n.numpy()) == x.size and idx.shape == (2, 15)
