"""Creation and random ops: Fill, Arange, RandomUniform, RandomNormal."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from dragon_sdk.testing import (
    ALL_DTYPES,
    FLOAT_DTYPES,
    HALF_DTYPES,
    OpCase,
    dtype_name,
    numpy_dtype,
)


def _fill(shape, value=0.0, dtype="float32"):
    return np.full(shape, value, np.float64)


# -------------------------------------------------------------------- Fill

@pytest.mark.parametrize("shape", [[], [0], [2, 3], [300, 200]],
                         ids=["0d", "empty", "2x3", "300x200"])
@pytest.mark.parametrize("value", [0.0, 1.0, 2.7, -2.7])
@pytest.mark.parametrize("dtype", ALL_DTYPES + HALF_DTYPES)
def test_fill(dtype, value, shape):
    """Every element is value, which must be a value of dtype: a fraction
    for an integer or bool dtype is an error, not a truncation."""
    if dtype == "uint8" and value < 0:
        value = -value  # a negative value has no uint8 conversion
    if dtype not in FLOAT_DTYPES + HALF_DTYPES and value != int(value):
        import dragon_core as dg
        with pytest.raises(dg.errors.InvalidArgumentError,
                           match=rf"Fill: value {value} is not a value of {dtype}"):
            dg.ops.fill(shape, value, dtype)
        return
    OpCase.of("Fill", [], _fill,
              attrs={"shape": shape, "value": value, "dtype": dtype},
              dtype=dtype).check_forward()


@pytest.mark.parametrize("dtype", ALL_DTYPES + HALF_DTYPES)
def test_zeros_ones_full(dtype):
    """dg.ops.zeros/ones/full are Fill with the given dtype."""
    import dragon_core as dg

    five = 1 if dtype == "bool" else 5  # bool holds 0 and 1 only
    cases = [(dg.ops.zeros((2, 3), dtype), 0),
             (dg.ops.ones([4], dtype=dtype), 1),
             (dg.ops.full((3, 1), float(five), dtype), five)]
    for tensor, value in cases:
        assert dtype_name(tensor.dtype) == dtype
        want = np.full(tuple(tensor.shape), value).astype(numpy_dtype(dtype))
        np.testing.assert_array_equal(tensor.numpy(), want)
    assert tuple(cases[0][0].shape) == (2, 3)


def test_zeros_default_dtype_is_float32():
    """Without a dtype, creation ops make float32 (Fill's default)."""
    import dragon_core as dg

    assert dg.ops.zeros([2]).dtype == dg.float32
    assert dg.ops.ones([2]).dtype == dg.float32


# ------------------------------------------------------------------ Arange

ARANGES = [
    ((5,), "int64"), ((2, 10, 3), "int64"), ((5, 0, -1), "int64"),
    ((3, 3), "int64"), ((5, 0), "int64"), ((-3, 4, 2), "int64"),
    ((0.5, 3), "float32"), ((0, 1, 0.1), "float32"), ((1.0, -1.0, -0.25),
                                                      "float32"),
    ((0, 5.0), "float32"),
]


@pytest.mark.parametrize("args, dtype", ARANGES)
def test_arange_default_dtype(args, dtype):
    """arange(start, stop=None, step=1): int64 for ints, else float32."""
    import dragon_core as dg

    out = dg.ops.arange(*args)
    assert dtype_name(out.dtype) == dtype
    want = np.arange(*args, dtype=np.float64)
    assert tuple(out.shape) == want.shape
    np.testing.assert_allclose(out.numpy().astype(np.float64), want,
                               rtol=1e-6, atol=1e-6)


_INT_RANGES = [(0, 10, 1), (2, 11, 3), (10, 0, -2), (0, 0, 1)]
_FLOAT_RANGES = _INT_RANGES + [(0.5, 4.5, 0.5), (-1.0, 1.0, 0.3)]


@pytest.mark.parametrize("dtype, start, stop, step", [
    (dt, *r) for dt in ("int8", "int32", "uint8", "int64") for r in _INT_RANGES
] + [(dt, *r) for dt in FLOAT_DTYPES + HALF_DTYPES for r in _FLOAT_RANGES])
def test_arange_op(start, stop, step, dtype):
    """The Arange op: NumPy length, element i = start + i * step."""
    OpCase.of("Arange", [],
              lambda start, stop, step, dtype: np.arange(start, stop, step,
                                                         np.float64),
              attrs={"start": start, "stop": stop, "step": step,
                     "dtype": dtype}, dtype=dtype).check_forward()


def test_arange_long_float_range_is_not_accumulated():
    """Values are start + i*step, not a running sum (no drift)."""
    import dragon_core as dg

    out = dg.ops.arange(0.0, 1000.0, 0.1, dtype="float64").numpy()
    assert out.shape == (10000,)
    np.testing.assert_allclose(out, np.arange(10000) * 0.1, rtol=1e-13)


# ------------------------------------------------------------------ random

RANDOM = ["random_uniform", "random_normal"]


def _draw(op, shape, **attrs):
    import dragon_core as dg

    return getattr(dg.ops, op)(shape, **attrs).numpy()


@pytest.mark.parametrize("op", RANDOM)
def test_random_manual_seed_reproduces(op):
    """The same global seed gives the same samples; the stream advances."""
    import dragon_core as dg

    dg.manual_seed(1234)
    a = _draw(op, [1000])
    b = _draw(op, [1000])
    dg.manual_seed(1234)
    c = _draw(op, [1000])
    np.testing.assert_array_equal(a, c)
    assert not np.array_equal(a, b), "two draws without reseeding are equal"
    dg.manual_seed(1235)
    assert not np.array_equal(a, _draw(op, [1000]))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("op", RANDOM)
def test_random_explicit_seed(op, dtype):
    """An explicit seed ignores the global generator; seeds differ."""
    import dragon_core as dg

    dg.manual_seed(1)
    a = _draw(op, [4096], seed=7, dtype=dtype)
    dg.manual_seed(2)
    b = _draw(op, [4096], seed=7, dtype=dtype)
    c = _draw(op, [4096], seed=8, dtype=dtype)
    assert a.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(a, b)
    assert np.mean(a == c) < 0.01, "seeds 7 and 8 give the same samples"
    assert len(np.unique(a)) > 4000, "samples repeat"


@pytest.mark.parametrize("op", RANDOM)
def test_random_element_depends_only_on_seed_and_index(op):
    """Counter-based: a shorter draw is a prefix of a longer one."""
    long = _draw(op, [1001], seed=99, dtype="float64")
    short = _draw(op, [37], seed=99, dtype="float64")
    shaped = _draw(op, [7, 11], seed=99, dtype="float64")
    np.testing.assert_array_equal(short, long[:37])
    np.testing.assert_array_equal(shaped.ravel(), long[:77])


@pytest.mark.parametrize("op", RANDOM)
def test_random_0d_and_empty(op):
    """0-d and empty shapes are allowed."""
    assert _draw(op, [], seed=3).shape == ()
    assert _draw(op, [0, 4], seed=3).shape == (0, 4)


N = 100_000


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_random_uniform_statistics(dtype):
    """U[low, high): range, mean, std and a flat histogram over 100k."""
    low, high = -2.0, 3.0
    x = _draw("random_uniform", [N], low=low, high=high, dtype=dtype,
              seed=2024).astype(np.float64)
    assert x.min() >= low and x.max() < high
    sigma = (high - low) / np.sqrt(12.0)
    assert abs(x.mean() - (low + high) / 2) < 5 * sigma / np.sqrt(N)
    assert abs(x.std() / sigma - 1.0) < 0.02
    counts, _ = np.histogram(x, bins=10, range=(low, high))
    expected = N / 10
    assert np.all(np.abs(counts - expected) < 5 * np.sqrt(expected)), counts


@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_random_normal_statistics(dtype):
    """N(mean, std^2): mean, std, the 1-sigma mass and tails over 100k."""
    mean, std = 1.5, 2.0
    x = _draw("random_normal", [N], mean=mean, std=std, dtype=dtype,
              seed=2025).astype(np.float64)
    assert np.isfinite(x).all()
    assert abs(x.mean() - mean) < 5 * std / np.sqrt(N)
    assert abs(x.std() / std - 1.0) < 0.02
    z = (x - mean) / std
    assert abs(np.mean(np.abs(z) < 1.0) - 0.682689) < 0.01
    assert abs(np.mean(np.abs(z) < 2.0) - 0.954500) < 0.005
    assert abs(np.mean(z > 0) - 0.5) < 0.01


def test_random_normal_zero_std_is_the_mean():
    """std = 0 gives exactly the mean."""
    x = _draw("random_normal", [100], mean=3.0, std=0.0, seed=1)
    np.testing.assert_array_equal(x, np.full(100, 3.0, np.float32))


_HASH_SCRIPT = textwrap.dedent("""
    import hashlib
    import dragon_core as dg
    h = hashlib.sha256()
    for dtype in ("float32", "float64"):
        h.update(dg.ops.random_uniform([300007], seed=42, dtype=dtype)
                 .numpy().tobytes())
        h.update(dg.ops.random_normal([300007], seed=42, dtype=dtype)
                 .numpy().tobytes())
    print(h.hexdigest())
""")


def _hash_in_subprocess(threads):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               DRAGON_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_random_independent_of_thread_count():
    """1 thread, 3 threads and this process produce identical bytes."""
    import dragon_core as dg

    h = hashlib.sha256()
    for dtype in ("float32", "float64"):
        h.update(dg.ops.random_uniform([300007], seed=42, dtype=dtype)
                 .numpy().tobytes())
        h.update(dg.ops.random_normal([300007], seed=42, dtype=dtype)
                 .numpy().tobytes())
    here = h.hexdigest()
    assert _hash_in_subprocess(1) == here
    assert _hash_in_subprocess(3) == here
