"""2-D pooling (MaxPool2d, AvgPool2d, AdaptiveAvgPool2d) and the helper ops
of their gradients (MaxPool2dIndices, MaxPool2dGrad, AvgPool2dGrad,
AdaptiveAvgPool2dGrad) against float64 NumPy references that follow
PyTorch's semantics (docs/ops.md, "Pooling")."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dragon_sdk.testing import FLOAT_DTYPES, OpCase, op_case

from .test_errors import assert_mentions

# ------------------------------------------------------------ references


def _pair(v, fallback=None):
    v = list(v) if v is not None else []
    if not v:
        v = list(fallback)
    return (v[0], v[-1])


def _geometry(shape, kernel_size, strides=(), pads=(0, 0), dilations=(1, 1),
              ceil_mode=False):
    """Per-axis (k, s, p, d, out) of a windowed pooling, or None when the
    window does not fit the padded input."""
    k = _pair(kernel_size)
    s = _pair(strides, k)
    p = _pair(pads)
    d = _pair(dilations)
    axes = []
    for a in range(2):
        length = shape[2 + a]
        span = d[a] * (k[a] - 1) + 1
        steps = length + 2 * p[a] - span
        if steps < 0 or 2 * p[a] > k[a]:
            return None
        n = (-(-steps // s[a]) if ceil_mode else steps // s[a]) + 1
        if ceil_mode and (n - 1) * s[a] >= length + p[a]:
            n -= 1
        axes.append((k[a], s[a], p[a], d[a], n))
    return axes


def _cells(o, k, s, p, d, length):
    start = o * s - p
    return [start + j * d for j in range(k) if 0 <= start + j * d < length]


def _windows(shape, **attrs):
    """Yield (i, j, rows, cols) for every output cell."""
    (kh, sh, ph, dh, oh), (kw, sw, pw, dw, ow) = _geometry(shape, **attrs)
    for i in range(oh):
        for j in range(ow):
            yield (i, j, _cells(i, kh, sh, ph, dh, shape[2]),
                   _cells(j, kw, sw, pw, dw, shape[3]))


def _pooled_shape(shape, **attrs):
    g = _geometry(shape, **attrs)
    return (shape[0], shape[1], g[0][4], g[1][4])


def max_pool2d_indices_ref(x, **attrs):
    out = np.zeros(_pooled_shape(x.shape, **attrs), np.int64)
    w = x.shape[3]
    for i, j, rows, cols in _windows(x.shape, **attrs):
        flat = [r * w + c for r in rows for c in cols]       # row-major order
        vals = x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3])[:, :, flat]
        # The first maximum in window order; a NaN beats every number.
        nan = np.isnan(vals)
        first_max = np.argmax(np.where(nan, -np.inf, vals), axis=2)
        best = np.where(nan.any(axis=2), np.argmax(nan, axis=2), first_max)
        out[:, :, i, j] = np.asarray(flat)[best]
    return out


def max_pool2d_ref(x, **attrs):
    idx = max_pool2d_indices_ref(x, **attrs)
    flat = x.reshape(x.shape[0], x.shape[1], x.shape[2] * x.shape[3])
    where = idx.reshape(idx.shape[0], idx.shape[1], idx.shape[2] * idx.shape[3])
    return np.take_along_axis(flat, where, axis=2).reshape(idx.shape)


def max_pool2d_grad_ref(x, dy, **attrs):
    idx = max_pool2d_indices_ref(x, **attrs)
    n, c, h, w = x.shape
    dx = np.zeros((n * c, h * w))
    rows = np.repeat(np.arange(n * c), idx.shape[2] * idx.shape[3])
    np.add.at(dx, (rows, idx.reshape(-1)), dy.reshape(-1))
    return dx.reshape(x.shape)


def _avg_weights(shape, count_include_pad=True, **attrs):
    """(i, j, rows, cols, divisor) for every output cell."""
    g = _geometry(shape, **attrs)
    (kh, sh, ph, _, _), (kw, sw, pw, _, _) = g
    for i, j, rows, cols in _windows(shape, **attrs):
        if count_include_pad:
            h0, w0 = i * sh - ph, j * sw - pw
            div = ((min(h0 + kh, shape[2] + ph) - h0)
                   * (min(w0 + kw, shape[3] + pw) - w0))
        else:
            div = len(rows) * len(cols)
        yield i, j, rows, cols, div


def avg_pool2d_ref(x, count_include_pad=True, **attrs):
    y = np.zeros(_pooled_shape(x.shape, **attrs))
    for i, j, rows, cols, div in _avg_weights(x.shape, count_include_pad, **attrs):
        y[:, :, i, j] = x[:, :, rows][:, :, :, cols].sum(axis=(2, 3)) / div
    return y


def avg_pool2d_grad_ref(x, dy, count_include_pad=True, **attrs):
    dx = np.zeros(x.shape)
    for i, j, rows, cols, div in _avg_weights(x.shape, count_include_pad, **attrs):
        dx[:, :, rows[0]:rows[-1] + 1, cols[0]:cols[-1] + 1] += (
            dy[:, :, i, j][:, :, None, None] / div)
    return dx


def _bins(length, out):
    return [(i * length // out, -(-(i + 1) * length // out)) for i in range(out)]


def adaptive_avg_pool2d_ref(x, output_size):
    oh, ow = _pair(output_size)
    y = np.zeros(x.shape[:2] + (oh, ow))
    for i, (h0, h1) in enumerate(_bins(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_bins(x.shape[3], ow)):
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
    return y


def adaptive_avg_pool2d_grad_ref(x, dy, output_size):
    oh, ow = _pair(output_size)
    dx = np.zeros(x.shape)
    for i, (h0, h1) in enumerate(_bins(x.shape[2], oh)):
        for j, (w0, w1) in enumerate(_bins(x.shape[3], ow)):
            dx[:, :, h0:h1, w0:w1] += (dy[:, :, i, j][:, :, None, None]
                                       / ((h1 - h0) * (w1 - w0)))
    return dx


# ------------------------------------------------------------------ cases

SHAPES = [(2, 3, 7, 6), (1, 2, 5, 8), (0, 2, 6, 5), (1, 1, 5, 5)]

MAX_ATTRS = [
    {"kernel_size": [2, 2]},                                   # strides = kernel
    {"kernel_size": [2]},                                      # one value: both axes
    {"kernel_size": [3, 3], "strides": [1, 1], "pads": [1, 1]},
    {"kernel_size": [3, 2], "strides": [2, 1], "pads": [1, 0]},
    {"kernel_size": [3, 3], "strides": [2, 2], "ceil_mode": True},
    {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1], "ceil_mode": True},
    {"kernel_size": [2, 3], "strides": [1, 2], "dilations": [2, 1]},
    {"kernel_size": [3, 2], "strides": [2, 3], "pads": [1, 1], "dilations": [2, 2],
     "ceil_mode": True},
]

AVG_ATTRS = [
    {"kernel_size": [2, 2]},
    {"kernel_size": [3]},
    {"kernel_size": [3, 3], "strides": [1, 1], "pads": [1, 1]},
    {"kernel_size": [3, 3], "strides": [1, 1], "pads": [1, 1], "count_include_pad": False},
    {"kernel_size": [3, 2], "strides": [2, 1], "pads": [1, 0]},
    {"kernel_size": [3, 3], "strides": [2, 2], "ceil_mode": True},
    {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1], "ceil_mode": True},
    {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1], "ceil_mode": True,
     "count_include_pad": False},
    {"kernel_size": [4, 2], "strides": [3, 3], "pads": [2, 1], "ceil_mode": True},
]

ADAPTIVE_ATTRS = [{"output_size": [1, 1]}, {"output_size": [2, 3]},
                  {"output_size": [3]}, {"output_size": [5, 5]},
                  {"output_size": [9, 4]}]


def _fits(case):
    attrs = {k: v for k, v in case.attrs.items() if k != "count_include_pad"}
    return _geometry(case.shape, **attrs) is not None


def _values(rng, dt, shape):
    """Distinct values, so the maxima (and their gradients) are unique."""
    n = math.prod(shape)
    return (rng.permutation(n).reshape(shape) * 0.25
            - n / 8.0).astype(dt) if n else np.zeros(shape, dt)


@op_case("MaxPool2d", inputs=lambda rng, dt, shape: [_values(rng, dt, shape)],
         reference=max_pool2d_ref, attrs=MAX_ATTRS, shapes=SHAPES, select=_fits)
def test_max_pool2d(case):
    case.check_forward()


def _int_values(rng, dt, shape):
    """Integers over the dtype's whole range (its extremes included), with
    ties."""
    info = np.iinfo(dt)
    x = rng.integers(int(info.min), int(info.max), shape, endpoint=True, dtype=np.int64)
    if x.size >= 2:
        x.reshape(-1)[:2] = [info.min, info.max]
    return x.astype(dt)


@op_case("MaxPool2d", inputs=lambda rng, dt, shape: [_int_values(rng, dt, shape)],
         reference=max_pool2d_ref, attrs=MAX_ATTRS, shapes=SHAPES, select=_fits,
         dtypes=["uint8", "int8", "int16", "int32", "int64"])
def test_max_pool2d_integer(case):
    """Integer max pooling (ONNX MaxPool on uint8/int8): exact, padded
    cells never win even against the dtype's minimum (0 for uint8)."""
    case.check_forward()


@op_case("MaxPool2dIndices", inputs=lambda rng, dt, shape: [_int_values(rng, dt, shape)],
         reference=max_pool2d_indices_ref, attrs=MAX_ATTRS, shapes=SHAPES, select=_fits,
         dtypes=["uint8", "int64"], out_dtype="int64")
def test_max_pool2d_indices_integer(case):
    case.check_forward()


@op_case("MaxPool2dIndices",
         inputs=lambda rng, dt, shape: [rng.integers(-2, 3, shape).astype(dt)],
         reference=max_pool2d_indices_ref, attrs=MAX_ATTRS, shapes=SHAPES,
         select=_fits, out_dtype="int64")
def test_max_pool2d_indices_first_of_ties(case):
    case.check_forward()


def _with_dy(pooled):
    def make(rng, dt, shape, attrs):
        x = rng.integers(-2, 3, shape).astype(dt)          # many ties
        pool_attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
        if pooled == "adaptive":
            out = shape[:2] + _pair(attrs["output_size"])
        else:
            out = _pooled_shape(shape, **pool_attrs)
        return [x, rng.standard_normal(out).astype(dt)]
    return make


@op_case("MaxPool2dGrad", inputs=_with_dy("max"), reference=max_pool2d_grad_ref,
         attrs=MAX_ATTRS, shapes=SHAPES, select=_fits)
def test_max_pool2d_grad(case):
    case.check_forward()


@op_case("AvgPool2d", inputs=lambda rng, dt, shape: [rng.uniform(-3, 3, shape).astype(dt)],
         reference=avg_pool2d_ref, attrs=AVG_ATTRS, shapes=SHAPES, select=_fits)
def test_avg_pool2d(case):
    case.check_forward()


@op_case("AvgPool2dGrad", inputs=_with_dy("avg"), reference=avg_pool2d_grad_ref,
         attrs=AVG_ATTRS, shapes=SHAPES, select=_fits)
def test_avg_pool2d_grad(case):
    case.check_forward()


@op_case("AdaptiveAvgPool2d",
         inputs=lambda rng, dt, shape: [rng.uniform(-3, 3, shape).astype(dt)],
         reference=adaptive_avg_pool2d_ref, attrs=ADAPTIVE_ATTRS, shapes=SHAPES)
def test_adaptive_avg_pool2d(case):
    case.check_forward()


@op_case("AdaptiveAvgPool2dGrad", inputs=_with_dy("adaptive"),
         reference=adaptive_avg_pool2d_grad_ref, attrs=ADAPTIVE_ATTRS, shapes=SHAPES)
def test_adaptive_avg_pool2d_grad(case):
    case.check_forward()


# A shape large enough for the kernels' parallel path (planes in parallel).
@pytest.mark.parametrize("op, ref, attrs", [
    ("MaxPool2d", max_pool2d_ref, {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("AvgPool2d", avg_pool2d_ref, {"kernel_size": [3, 3], "strides": [2, 2], "pads": [1, 1]}),
    ("AdaptiveAvgPool2d", adaptive_avg_pool2d_ref, {"output_size": [3, 5]}),
])
def test_pool_parallel_path(op, ref, attrs):
    rng = np.random.default_rng(0)
    x = _values(rng, "float32", (4, 16, 24, 24))
    OpCase.of(op, [x], ref, attrs=attrs).check_forward()


# ------------------------------------------------------------ semantics


def test_max_pool2d_known_values_and_padding_never_wins():
    import dragon_core as dg

    x = -np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4) - 1.0   # all < 0
    y = dg.ops.max_pool2d(dg.tensor(x), [3, 3], [2, 2], [1, 1]).numpy()
    # Padded cells (implicitly -inf, never 0) do not win over negative values.
    np.testing.assert_array_equal(y[0, 0], [[-1.0, -2.0], [-5.0, -6.0]])


def test_max_pool2d_nan_wins():
    import dragon_core as dg

    x = np.array([[[[1.0, np.nan], [3.0, 2.0]]]])
    y = dg.ops.max_pool2d(dg.tensor(x), [2, 2]).numpy()
    assert np.isnan(y).all()
    idx = dg.ops.max_pool2d_indices(dg.tensor(x), [2, 2]).numpy()
    assert idx.item() == 1


def test_ceil_mode_drops_a_window_starting_in_the_right_padding():
    import dragon_core as dg

    x = dg.tensor(np.arange(25.0).reshape(1, 1, 5, 5))
    # floor: (5 + 2 - 2) // 2 + 1 = 3; ceil would give 4, whose last window
    # would start at 6 - 1 = 5 >= 5 (in the right padding): dropped.
    y = dg.ops.max_pool2d(x, [2, 2], [2, 2], [1, 1], ceil_mode=True)
    assert y.shape == (1, 1, 3, 3)
    y = dg.ops.avg_pool2d(x, [2, 2], [2, 2], ceil_mode=True)
    assert y.shape == (1, 1, 3, 3)
    # The last, overhanging window averages its single real column/row.
    assert y.numpy()[0, 0, 2, 2] == 24.0


def test_max_pool2d_grad_ties_go_to_the_first_cell():
    import dragon_core as dg

    x = np.ones((1, 1, 4, 4))
    dy = np.arange(1.0, 5.0).reshape(1, 1, 2, 2)
    dx = dg.ops.max_pool2d_grad(dg.tensor(x), dg.tensor(dy), [2, 2]).numpy()
    want = np.zeros((4, 4))
    want[0, 0], want[0, 2], want[2, 0], want[2, 2] = 1, 2, 3, 4
    np.testing.assert_array_equal(dx[0, 0], want)
    # Overlapping windows (stride 1) accumulate at their shared maximum.
    dx = dg.ops.max_pool2d_grad(dg.tensor(x[:, :, :3, :3]), dg.tensor(dy), [2, 2],
                                [1, 1]).numpy()
    np.testing.assert_array_equal(dx[0, 0], [[1, 2, 0], [3, 4, 0], [0, 0, 0]])


def test_pool_python_names():
    import dragon_core as dg

    for name in ("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d",
                 "max_pool2d_grad", "max_pool2d_indices", "avg_pool2d_grad",
                 "adaptive_avg_pool2d_grad"):
        assert callable(getattr(dg.ops, name))


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("op, shape, attrs, words", [
    ("MaxPool2d", (2, 3, 4), {"kernel_size": [2, 2]}, ["4-D"]),
    ("MaxPool2d", (2, 3, 4, 4, 1), {"kernel_size": [2, 2]}, ["4-D"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [4, 4]}, ["padded input", "kernel_size"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [2, 2], "dilations": [3, 3]},
     ["padded input", "dilations"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [2, 2], "pads": [2, 2]}, ["pads"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [0, 2]}, ["kernel_size", "positive"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [2, 2], "strides": [0, 1]},
     ["strides", "positive"]),
    ("MaxPool2d", (1, 1, 3, 3), {"kernel_size": [2, 2, 2]}, ["kernel_size", "1 or 2"]),
    ("MaxPool2d", (1, 1, 1, 1), {"kernel_size": [2, 2], "pads": [1, 1],
                                 "dilations": [2, 2]}, ["only padding"]),
    ("MaxPool2d", (1, 1, 0, 3), {"kernel_size": [1, 1]}, ["empty spatial"]),
    ("AvgPool2d", (1, 1, 3, 3), {"kernel_size": [5, 4], "pads": [0, 2]},
     ["padded input"]),
    ("AvgPool2d", (3, 3), {"kernel_size": [2, 2]}, ["4-D"]),
    ("AdaptiveAvgPool2d", (1, 1, 3, 3), {"output_size": [0, 2]}, ["output_size"]),
    ("AdaptiveAvgPool2d", (1, 3, 3), {"output_size": [2, 2]}, ["4-D"]),
])
def test_bad_input_is_rejected_before_running(op, shape, attrs, words):
    import dragon_core as dg
    from dragon_sdk.testing import op_function

    x = dg.tensor(np.zeros(shape, np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        op_function(op)(x, **attrs)
    assert_mentions(str(err.value), op=op, shapes=[shape], words=words)


def test_bad_dy_and_dtypes_are_rejected():
    import dragon_core as dg

    x = dg.tensor(np.zeros((1, 2, 4, 4), np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.max_pool2d_grad(x, dg.tensor(np.zeros((1, 2, 3, 3), np.float32)), [2, 2])
    assert_mentions(str(err.value), op="MaxPool2dGrad", shapes=[(1, 2, 3, 3), (1, 2, 2, 2)])
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.avg_pool2d_grad(x, dg.tensor(np.zeros((1, 2, 2, 2), np.float64)), [2, 2])
    assert_mentions(str(err.value), op="AvgPool2dGrad", words=["float64", "float32"])
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.adaptive_avg_pool2d(dg.tensor(np.zeros((1, 1, 2, 2), np.int32)), [1, 1])
    assert_mentions(str(err.value), op="AdaptiveAvgPool2d", words=["int32"])


@pytest.mark.parametrize("dt", FLOAT_DTYPES)
def test_eager_matches_graph_mode(dt):
    import dragon_core as dg

    rng = np.random.default_rng(3)
    x = dg.tensor(_values(rng, dt, (2, 3, 8, 8)))

    def net(x):
        with dg.GradientTape() as tape:
            tape.watch(x)
            h = dg.ops.max_pool2d(x, [3, 3], [2, 2], [1, 1])
            h = dg.ops.avg_pool2d(h, [2, 2], [1, 1], ceil_mode=True)
            h = dg.ops.adaptive_avg_pool2d(h, [2, 2])
            loss = dg.ops.sum(h * h)
        return loss, tape.gradient(loss, x)

    eager = [t.numpy() for t in net(x)]
    graph = [t.numpy() for t in dg.function(net)(x)]
    for e, g in zip(eager, graph):
        np.testing.assert_array_equal(e, g)
