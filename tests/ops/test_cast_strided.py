"""Cast of strided views, read in one pass (cpu_eigen's Cast declares
DG_KERNEL_STRIDED_INPUTS; issue 21).

Every dtype pair through every kind of view (transposed with dense inner
runs, element-strided transposes, sliced with steps, negative strides,
broadcast stride 0, 0-d, empty) against NumPy, and bit for bit against the
Cast of the same values made contiguous first (the path the core took
before: densify, then cast). Large views take the threaded paths.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import ALL_DTYPES, HALF_DTYPES, is_float, numpy_dtype

CAST_DTYPES = ALL_DTYPES + HALF_DTYPES + ("uint16", "uint32", "uint64")


def _values(rng, src, dst, shape):
    """Values of `src` whose conversion to `dst` NumPy defines (in range,
    no NaN): quarters for floats (exact in every float type up to 100)."""
    if src == "bool":
        return rng.random(shape) < 0.5
    unsigned = src.startswith("uint") or dst.startswith("uint") or dst == "bool"
    lo, hi = (0 if unsigned else -100), 100
    if is_float(src):
        x = rng.integers(4 * lo, 4 * hi, shape, endpoint=True) / 4.0
        return x.astype(numpy_dtype(src))
    return rng.integers(lo, hi, shape, endpoint=True).astype(src)


def _views(rng, src, dst):
    """(name, NumPy view) pairs, every one non-contiguous except 0-d/empty."""
    base = _values(rng, src, dst, (3, 4, 10, 9))
    big = _values(rng, src, dst, (2, 40, 37))
    return [
        # head merge: inner runs of 9 stay dense (the rows path)
        ("transpose_0213", base.transpose(0, 2, 1, 3)),
        # element-strided: dense along a dim that is not last (tiles path)
        ("transpose_last", big.transpose(0, 2, 1)),
        ("transpose_all", base.transpose(3, 1, 2, 0)),
        ("sliced_steps", base[:, 1::2, ::3, 1:8:2]),
        ("negative", base[::-1, :, ::-2, ::-1]),
        ("negative_transposed", big[:, ::-1, :].transpose(0, 2, 1)),
        ("broadcast", np.broadcast_to(base[:, :1, :, :1], (3, 4, 10, 9))),
        ("broadcast_row", np.broadcast_to(big[0, 0], (5, 37))),
        ("zero_d", np.asarray(base[1, 2, 3, 4])),
        ("empty", base[:, :0].transpose(0, 2, 1, 3)),
        ("empty_sliced", base[:, :, 5:5:-1]),
    ]


def _bits(a):
    a = np.ascontiguousarray(a)
    if a.dtype == np.bool_:
        return a.view(np.uint8)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.itemsize in (1, 2, 4, 8) else a


def _check(view, dst, name=""):
    out = dg.ops.cast(dg.from_numpy(view), dst)
    got = out.numpy()
    want = np.ascontiguousarray(view).astype(numpy_dtype(dst))
    assert got.shape == view.shape, name
    assert got.dtype == want.dtype, name
    np.testing.assert_array_equal(got, want, err_msg=f"{name}: against NumPy")
    # Bit for bit the same as densifying first, then casting.
    dense = dg.ops.cast(dg.from_numpy(np.ascontiguousarray(view)), dst).numpy()
    np.testing.assert_array_equal(_bits(got), _bits(dense), err_msg=f"{name}: bits")


@pytest.mark.parametrize("dst", CAST_DTYPES)
@pytest.mark.parametrize("src", CAST_DTYPES)
def test_cast_views(src, dst, rng):
    for name, view in _views(rng, src, dst):
        if name not in ("zero_d", "empty", "empty_sliced"):
            assert not view.flags.c_contiguous, name
        _check(view, dst, name)


def test_cast_reads_views_in_place():
    """The kernel claims strided inputs, so the core makes no dense copy."""
    for k in dg._C.kernels("Cast"):
        if k["device"] == "cpu":
            assert k["strided_inputs"], k


@pytest.mark.parametrize("dst", ["bfloat16", "float16", "float64", "float32", "int32"])
@pytest.mark.parametrize("src", ["float32", "bfloat16", "float64"])
def test_cast_views_keep_special_values(src, dst):
    """NaN (payloads and signs), infinities, -0, ties and subnormals through a
    transposed and an element-strided view: the same bits as the dense path
    (float to int only: NaN/inf are saturated by the documented rules)."""
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40,
                         1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, 65504.0, 3.4e38, 1e-8, -2.5],
                        np.float64)
    rng = np.random.default_rng(3)
    x = rng.choice(specials, size=(4, 6, 33, 16)).astype(numpy_dtype(src))
    for view in (x.transpose(0, 2, 1, 3), x.transpose(0, 3, 2, 1), x[:, ::-1, ::2]):
        out = dg.ops.cast(dg.from_numpy(view), dst).numpy()
        dense = dg.ops.cast(dg.from_numpy(np.ascontiguousarray(view)), dst).numpy()
        np.testing.assert_array_equal(_bits(out), _bits(dense))
        if is_float(dst):
            with np.errstate(over="ignore"):  # 3.4e38 -> float16 is inf
                ref = np.ascontiguousarray(view).astype(np.float64).astype(numpy_dtype(dst))
            if src == "float64" and dst in ("bfloat16", "float16"):
                continue  # NumPy's float64 -> 16-bit rounds twice; Cast once
            # (through float64: NumPy spots a 16-bit NaN only there)
            np.testing.assert_array_equal(out.astype(np.float64), ref.astype(np.float64))


@pytest.mark.parametrize("src,dst", [("float32", "bfloat16"), ("bfloat16", "float32"),
                                     ("float32", "float64"), ("int64", "float16"),
                                     ("float16", "int8"), ("uint8", "float32")])
@pytest.mark.parametrize("kind", ["heads", "tiles", "long_rows", "one_d"])
def test_cast_large_views(src, dst, kind, rng):
    """Sizes that take the threaded paths and span several staging blocks."""
    if kind == "heads":  # the attention head merge, [8, 4, 128, 64] -> perm (0, 2, 1, 3)
        view = _values(rng, src, dst, (8, 4, 128, 64)).transpose(0, 2, 1, 3)
    elif kind == "tiles":  # element-strided, ragged tile edges
        view = _values(rng, src, dst, (3, 5, 301, 133)).transpose(0, 1, 3, 2)
    elif kind == "long_rows":  # rows longer than a staging block
        view = _values(rng, src, dst, (12, 2, 5000))[::2, 1, ::-1]
    else:  # few long rows: threads split one row
        view = _values(rng, src, dst, (600000,))[::3]
    _check(view, dst, kind)


def test_cast_of_transpose_ops_matches_numpy(rng):
    """A view made by Dragon ops (Transpose, then Cast), eager and compiled."""
    x = rng.standard_normal((2, 4, 16, 8)).astype(np.float32)

    def f(t):
        return dg.ops.cast(dg.ops.transpose(t, (0, 2, 1, 3)), "bfloat16")

    want = x.transpose(0, 2, 1, 3).astype(numpy_dtype("bfloat16"))
    for fn in (f, dg.function(f)):
        got = fn(dg.tensor(x)).numpy()
        np.testing.assert_array_equal(_bits(got), _bits(want))
