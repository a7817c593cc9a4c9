"""RoiAlign and RoiPool (and their gradient ops) against float64 NumPy
references written from the papers' definitions (Mask R-CNN's bilinear
bin averages, Fast R-CNN's quantised bin maxima), hand-computed cases,
finite-difference gradients, edge shapes, bad inputs, eager vs graph, the
generated Python API, and the CUDA kernels (registered; run when a cuda
device exists)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from dragon_sdk.testing import (OpCase, check_bad_inputs, check_eager_vs_graph,
                                op_case)

import dragon_core as dg
import dragon_vision_ops as vo

KNOWN: list = []   # every variant is checked, None inputs included

from vision_testing import requires_cuda  # noqa: E402

# ---------------------------------------------------------------- references


def _pair(v):
    return [v, v] if np.isscalar(v) else list(v)


def _interp_matrix(coords, size):
    """Rows of bilinear weights over `size` cells for each coordinate, with
    Mask R-CNN's border rule: outside [-1, size] the row is 0; below 0 the
    coordinate is taken as 0; at or past size - 1 it is the last cell."""
    m = np.zeros((len(coords), size))
    for r, c in enumerate(coords):
        if c < -1.0 or c > size:
            continue
        c = max(c, 0.0)
        lo = int(np.floor(c))
        if lo >= size - 1:
            m[r, size - 1] = 1.0
            continue
        frac = c - lo
        m[r, lo] += 1.0 - frac
        m[r, lo + 1] += frac
    return m


def roi_align_ref(x, rois, output_size, spatial_scale=1.0, sampling_ratio=-1,
                  aligned=True):
    """Each bin: the mean of a gh x gw grid of bilinear samples placed at the
    centres of equal sub-cells of the bin. Bilinear sampling is separable,
    so a bin grid is Wy @ plane @ Wx^T."""
    oh, ow = _pair(output_size)
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, oh, ow))
    shift = 0.5 if aligned else 0.0
    for k, (b, x1, y1, x2, y2) in enumerate(rois):
        x1, y1, x2, y2 = (v * spatial_scale - shift for v in (x1, y1, x2, y2))
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        gh = sampling_ratio if sampling_ratio > 0 else max(int(np.ceil(rh / oh)), 0)
        gw = sampling_ratio if sampling_ratio > 0 else max(int(np.ceil(rw / ow)), 0)
        if gh * gw == 0:
            continue
        ys = [y1 + (i + (s + 0.5) / gh) * rh / oh for i in range(oh) for s in range(gh)]
        xs = [x1 + (j + (s + 0.5) / gw) * rw / ow for j in range(ow) for s in range(gw)]
        wy, wx = _interp_matrix(ys, h), _interp_matrix(xs, w)
        grid = np.einsum("ph,chw,qw->cpq", wy, x[int(b)], wx)
        out[k] = grid.reshape(c, oh, gh, ow, gw).mean(axis=(2, 4))
    return out


def _round_half_away(v):
    return np.sign(v) * np.floor(np.abs(v) + 0.5)


def roi_pool_ref(x, rois, output_size, spatial_scale=1.0):
    """Each roi rounded to cells spans max(x2 - x1 + 1, 1) of them; bin i of
    o covers [floor(i s / o), ceil((i + 1) s / o)) from its first cell,
    clipped to the map; its maximum, or 0 when it is empty."""
    oh, ow = _pair(output_size)
    n, c, h, w = x.shape
    out = np.zeros((rois.shape[0], c, oh, ow))
    for k, (b, *corners) in enumerate(rois):
        x1, y1, x2, y2 = (_round_half_away(v * spatial_scale) for v in corners)
        rw, rh = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        for i in range(oh):
            h0 = int(np.clip(np.floor(i * rh / oh) + y1, 0, h))
            h1 = int(np.clip(np.ceil((i + 1) * rh / oh) + y1, 0, h))
            for j in range(ow):
                w0 = int(np.clip(np.floor(j * rw / ow) + x1, 0, w))
                w1 = int(np.clip(np.ceil((j + 1) * rw / ow) + x1, 0, w))
                if h1 > h0 and w1 > w0:
                    out[k, :, i, j] = x[int(b), :, h0:h1, w0:w1].max(axis=(1, 2))
    return out


# ------------------------------------------------------------------- inputs

#: rois over a 2 x 3 x 9 x 7 map: inside, partly outside, fully outside,
#: smaller than a bin, reversed (x2 < x1), touching the last row/column, and
#: starting in [-1, 0).
ROIS = np.array([
    [0, 1.0, 1.0, 5.0, 6.0],
    [1, -3.0, 2.5, 4.0, 12.0],
    [1, 20.0, 20.0, 30.0, 25.0],
    [0, 2.2, 3.1, 2.6, 3.3],
    [1, 5.0, 6.0, 2.0, 1.0],
    [0, 3.0, 4.0, 7.0, 9.0],
    [1, -0.8, -0.4, 3.5, 2.5],
])


def _align_inputs(rng, dt):
    x = rng.uniform(-1.0, 1.0, (2, 3, 9, 7))
    return [x.astype(dt), ROIS.astype(dt)]


ALIGN_ATTRS = [
    {"output_size": [2, 2]},
    {"output_size": [3, 2], "aligned": False},
    {"output_size": [2, 3], "sampling_ratio": 2},
    {"output_size": [1, 1], "sampling_ratio": 1, "aligned": False},
    {"output_size": [2, 2], "spatial_scale": 0.5, "sampling_ratio": 3},
    {"output_size": [4, 3], "spatial_scale": 0.7, "aligned": False},
]


@op_case("RoiAlign", inputs=_align_inputs, reference=roi_align_ref,
         attrs=ALIGN_ATTRS, tol=20.0)
def test_roi_align_forward(case):
    case.check_forward()


@op_case("RoiAlign", inputs=_align_inputs, reference=roi_align_ref,
         attrs=ALIGN_ATTRS[:3], dtypes=["float64"], layouts=["contiguous"])
def test_roi_align_grad(case):
    case.check_grad(wrt=[0])
    case.check_grad(wrt=[0], order=2)


def _pool_inputs(rng, dt):
    # Distinct values 0.01 apart: every bin maximum is unique, so a
    # finite-difference step never moves an argmax.
    x = rng.permutation(2 * 3 * 9 * 7).reshape(2, 3, 9, 7) * 0.01 - 1.0
    return [x.astype(dt), ROIS.astype(dt)]


POOL_ATTRS = [
    {"output_size": [2, 2]},
    {"output_size": [3, 2], "spatial_scale": 0.5},
    {"output_size": [5, 4], "spatial_scale": 1.3},
    {"output_size": [1, 1]},
]


@op_case("RoiPool", inputs=_pool_inputs, reference=roi_pool_ref,
         attrs=POOL_ATTRS)
def test_roi_pool_forward(case):
    case.check_forward()


@op_case("RoiPool", inputs=_pool_inputs, reference=roi_pool_ref,
         attrs=POOL_ATTRS[:3], dtypes=["float64"], layouts=["contiguous"])
def test_roi_pool_grad(case):
    case.check_grad(wrt=[0])
    case.check_grad(wrt=[0], order=2)


@pytest.mark.parametrize("op, attrs", [
    ("RoiAlignGrad", {"output_size": [2, 2], "sampling_ratio": 2}),
    ("RoiAlignGrad", {"output_size": [3, 2], "aligned": False}),
    ("RoiPoolGrad", {"output_size": [2, 3], "spatial_scale": 0.5}),
])
def test_gradient_op_rules(op, attrs):
    """The helpers' own rules (RoiAlign / RoiPoolGather of the incoming
    gradient) against finite differences, first and second order, wrt dy."""
    rng = np.random.default_rng(10)
    x = _pool_inputs(rng, "float64")[0]
    oh, ow = attrs["output_size"]
    dy = rng.standard_normal((len(ROIS), 3, oh, ow))
    case = OpCase.of(op, [x, ROIS.copy(), dy], attrs=attrs)
    case.check_grad(wrt=[2])
    case.check_grad(wrt=[2], order=2)


def test_gather_op_rule():
    """RoiPoolGather's rule (RoiPoolGrad) wrt the values it reads."""
    rng = np.random.default_rng(11)
    x = _pool_inputs(rng, "float64")[0]
    v = rng.standard_normal(x.shape)
    case = OpCase.of("RoiPoolGather", [x, ROIS.copy(), v],
                     attrs={"output_size": [2, 2], "spatial_scale": 0.8})
    case.check_grad(wrt=[2])
    case.check_grad(wrt=[2], order=2)


# ------------------------------------------------------------ hand-computed

X44 = np.arange(16, dtype=np.float64).reshape(1, 1, 4, 4)  # x[r, c] = 4r + c


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("roi, attrs, want", [
    # One sample at the bin centre (1.5, 1.5): mean of 5, 6, 9, 10.
    ([0, 0.5, 0.5, 2.5, 2.5], {"sampling_ratio": 1, "aligned": False}, 7.5),
    # aligned shifts by -0.5: the sample lands on pixel (1, 1).
    ([0, 0.5, 0.5, 2.5, 2.5], {"sampling_ratio": 1, "aligned": True}, 5.0),
    # 2 x 2 samples at (1, 1), (1, 3), (3, 1), (3, 3): (5 + 7 + 13 + 15) / 4.
    ([0, 0.0, 0.0, 4.0, 4.0], {"sampling_ratio": 2, "aligned": False}, 10.0),
    # Adaptive grid: ceil(4 / 1) = 4 samples per axis at 0.5, 1.5, 2.5, 3.5;
    # 3.5 is past the last pixel, clamped to 3. Rows: 0.5, 1.5, 2.5, 3 ->
    # mean row 1.875; columns likewise 1.875: 4 * 1.875 + 1.875.
    ([0, 0.0, 0.0, 4.0, 4.0], {"aligned": False}, 9.375),
    # The sample at (-0.5, -0.5) is in [-1, 0): clamped to pixel (0, 0).
    ([0, -1.0, -1.0, 0.0, 0.0], {"sampling_ratio": 1, "aligned": False}, 0.0),
    # Sample at (-0.5, 3.5): row clamped to 0, column past the last: x[0, 3].
    ([0, 3.0, -1.0, 4.0, 0.0], {"sampling_ratio": 1, "aligned": False}, 3.0),
])
def test_roi_align_hand_computed(dtype, roi, attrs, want):
    x = dg.tensor(X44.astype(dtype))
    r = dg.tensor(np.array([roi], dtype))
    y = dg.ops.roi_align(x, r, [1, 1], **attrs).numpy()
    np.testing.assert_allclose(y, [[[[want]]]], rtol=1e-6)


def test_roi_align_samples_outside_count_as_zero():
    """A roi (-3, -3, -1, -1) with aligned=False and 2 x 2 samples: they sit at
    -2.5 and -1.5, all outside [-1, H], so the bin is 0 although every
    pixel is 1; with half of the samples inside, the bin is the inside share."""
    x = dg.tensor(np.ones((1, 1, 4, 4)))
    r = dg.tensor(np.array([[0, -3.0, -3.0, -1.0, -1.0],
                            [0, -2.0, 0.0, 0.0, 2.0]]))
    y = dg.ops.roi_align(x, r, [1, 1], sampling_ratio=2, aligned=False).numpy()
    # Second roi: x samples at -1.5 (outside) and -0.5 (clamped, weight 1).
    np.testing.assert_allclose(y.reshape(-1), [0.0, 0.5])


def test_roi_pool_hand_computed():
    """roi (0, 1, 1, 2, 3) on X44 covers rows 1..3, columns 1..2; with 2 x 1
    bins of 1.5 rows: rows [1, 3) and [2, 4): maxima 10 and 14."""
    y = dg.ops.roi_pool(dg.tensor(X44), dg.tensor(np.array([[0, 1, 1, 2, 3.0]])),
                        [2, 1]).numpy()
    np.testing.assert_array_equal(y.reshape(-1), [10.0, 14.0])


def test_roi_pool_empty_bin_is_zero_and_gets_no_gradient():
    """A roi entirely right of the map: every bin is clipped empty."""
    x = dg.tensor(X44 + 100.0)
    r = dg.tensor(np.array([[0, 10, 10, 12, 12.0]]))
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = dg.ops.roi_pool(x, r, [2, 2])
        loss = dg.ops.sum(y)
    np.testing.assert_array_equal(y.numpy(), np.zeros((1, 1, 2, 2)))
    np.testing.assert_array_equal(tape.gradient(loss, x).numpy(), np.zeros_like(X44))


def test_roi_pool_ties_go_to_the_first_cell_and_nan_wins():
    x = np.zeros((1, 1, 2, 2))
    dx = _grad_of_sum(lambda t, r: dg.ops.roi_pool(t, r, [1, 1]), x,
                      np.array([[0, 0, 0, 1, 1.0]]))
    np.testing.assert_array_equal(dx, [[[[1.0, 0.0], [0.0, 0.0]]]])
    x[0, 0, 1, 0] = np.nan
    y = dg.ops.roi_pool(dg.tensor(x), dg.tensor(np.array([[0, 0, 0, 1, 1.0]])), [1, 1])
    assert np.isnan(y.numpy()).all()


def _grad_of_sum(fn, x, rois):
    xt = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch(xt)
        loss = dg.ops.sum(fn(xt, dg.tensor(rois)))
    return tape.gradient(loss, xt).numpy()


def test_roi_align_grad_sums_overlapping_rois():
    """Two identical rois give twice the gradient of one (the scatter adds
    across rois, race-free): d sum / dx of one 1 x 1 bin at pixel (1, 1)."""
    roi = [0, 0.5, 0.5, 2.5, 2.5]
    fn = lambda t, r: dg.ops.roi_align(t, r, [1, 1], sampling_ratio=1)  # noqa: E731
    one = _grad_of_sum(fn, X44, np.array([roi]))
    two = _grad_of_sum(fn, X44, np.array([roi, roi]))
    want = np.zeros_like(X44)
    want[0, 0, 1, 1] = 1.0
    np.testing.assert_array_equal(one, want)
    np.testing.assert_array_equal(two, 2 * want)


def test_roi_align_grad_large_parallel_matches_adjoint():
    """A map large enough for the threads: <RoiAlign(x), g> = <x, dx(g)>."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 64, 20, 24))
    rois = np.concatenate([rng.integers(0, 2, (50, 1)),
                           rng.uniform(-4, 26, (50, 4))], axis=1)
    g = rng.standard_normal((50, 64, 3, 3))
    attrs = {"output_size": [3, 3], "spatial_scale": 0.8}
    y = dg.ops.roi_align(dg.tensor(x), dg.tensor(rois), **attrs).numpy()
    dx = dg.ops.roi_align_grad(dg.tensor(x), dg.tensor(rois), dg.tensor(g),
                               **attrs).numpy()
    np.testing.assert_allclose(np.sum(y * g), np.sum(x * dx), rtol=1e-10)
    np.testing.assert_allclose(y, roi_align_ref(x, rois, [3, 3], 0.8), rtol=1e-10,
                               atol=1e-12)


def test_roi_pool_gather_and_grad_are_adjoint():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 5, 9, 7))
    v = rng.standard_normal(x.shape)
    g = rng.standard_normal((len(ROIS), 5, 3, 3))
    t = [dg.tensor(a) for a in (x, ROIS, v, g)]
    gathered = dg.ops.roi_pool_gather(t[0], t[1], t[2], [3, 3]).numpy()
    scattered = dg.ops.roi_pool_grad(t[0], t[1], t[3], [3, 3]).numpy()
    np.testing.assert_allclose(np.sum(gathered * g), np.sum(v * scattered), rtol=1e-12)
    # Gathering x itself is RoiPool.
    same = dg.ops.roi_pool_gather(t[0], t[1], t[0], [3, 3]).numpy()
    np.testing.assert_array_equal(same, dg.ops.roi_pool(t[0], t[1], [3, 3]).numpy())


# ---------------------------------------------------------------- edge cases


@pytest.mark.parametrize("op", ["roi_align", "roi_pool"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_rois_and_empty_batch(op, dtype):
    fn = getattr(dg.ops, op)
    x = dg.tensor(np.ones((2, 3, 5, 5), dtype))
    y = fn(x, dg.tensor(np.zeros((0, 5), dtype)), [2, 2])
    assert tuple(y.shape) == (0, 3, 2, 2) and y.dtype == x.dtype
    empty = fn(dg.tensor(np.ones((0, 3, 5, 5), dtype)),
               dg.tensor(np.zeros((0, 5), dtype)), [2, 2])
    assert tuple(empty.shape) == (0, 3, 2, 2)
    no_channels = fn(dg.tensor(np.ones((1, 0, 5, 5), dtype)),
                     dg.tensor(np.array([[0, 1, 1, 3, 3]], dtype)), [2, 2])
    assert tuple(no_channels.shape) == (1, 0, 2, 2)


@pytest.mark.parametrize("shape", [(1, 1, 1, 1), (1, 2, 1, 5), (1, 1, 6, 1)])
def test_roi_align_size_one_maps(shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    rois = np.array([[0, -0.5, -0.5, 1.5, 1.0], [0, 0, 0, 6, 6]])
    for aligned in (True, False):
        y = dg.ops.roi_align(dg.tensor(x), dg.tensor(rois), [2, 3],
                             aligned=aligned).numpy()
        np.testing.assert_allclose(y, roi_align_ref(x, rois, [2, 3], aligned=aligned),
                                   rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(
            dg.ops.roi_pool(dg.tensor(x), dg.tensor(rois), [2, 3]).numpy(),
            roi_pool_ref(x, rois, [2, 3]))


# ---------------------------------------------------------------- bad inputs


@pytest.mark.parametrize("op", ["roi_align", "roi_pool"])
@pytest.mark.parametrize("roi, words", [
    ([2, 0, 0, 1, 1], ["roi 1", "batch index 2", "2 image"]),
    ([-1, 0, 0, 1, 1], ["roi 1", "batch index -1"]),
    ([0.5, 0, 0, 1, 1], ["roi 1", "batch index 0.5", "integer"]),
    ([np.nan, 0, 0, 1, 1], ["roi 1", "batch index nan"]),
    ([0, 0, np.inf, 1, 1], ["roi 1", "non-finite coordinate"]),
])
def test_bad_roi_is_a_clear_error(op, roi, words):
    x = dg.tensor(np.ones((2, 1, 4, 4)))
    rois = dg.tensor(np.array([[1, 0, 0, 2, 2], roi], dtype=np.float64))
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        getattr(dg.ops, op)(x, rois, [2, 2])
    msg = str(err.value)
    assert ("RoiAlign" if op == "roi_align" else "RoiPool") in msg
    for w in words:
        assert w in msg, msg


def test_bad_roi_in_gradient_ops_is_a_clear_error():
    x = dg.tensor(np.ones((1, 1, 4, 4)))
    rois = dg.tensor(np.array([[3, 0, 0, 2, 2.0]]))
    dy = dg.tensor(np.ones((1, 1, 2, 2)))
    for fn in (dg.ops.roi_align_grad, dg.ops.roi_pool_grad):
        with pytest.raises(dg.errors.InvalidArgumentError, match="roi 0 has batch index 3"):
            fn(x, rois, dy, [2, 2])


def test_huge_adaptive_grid_is_refused_not_hung():
    x = dg.tensor(np.ones((1, 1, 4, 4)))
    rois = dg.tensor(np.array([[0, 0, 0, 1e9, 1e9]]))
    with pytest.raises(dg.errors.InvalidArgumentError, match="roi 0 .* samples"):
        dg.ops.roi_align(x, rois, [7, 7])
    # A fixed grid samples outside the map and gives 0.
    y = dg.ops.roi_align(x, rois, [7, 7], sampling_ratio=2).numpy()
    assert y.shape == (1, 1, 7, 7) and np.all(np.isfinite(y))


@pytest.mark.parametrize("aligned", [True, False])
def test_roi_overflowing_float32_after_scaling_gives_zero(aligned):
    # In double the roi is 0 wide and passes the sample bound; in float32
    # 3e38 * 2 is inf and the width inf - inf is NaN. The adaptive grid of a
    # NaN width must be 0 samples (output 0), not a NaN cast to int64.
    x = dg.tensor(np.ones((1, 2, 4, 4), np.float32))
    rois = dg.tensor(np.array([[0, 3e38, 0, 3e38, 1]], np.float32))
    y = dg.ops.roi_align(x, rois, [1, 1], spatial_scale=2.0,
                         aligned=aligned).numpy()
    np.testing.assert_array_equal(y, np.zeros((1, 2, 1, 1), np.float32))


@pytest.mark.parametrize("x_shape, rois_shape, attrs, words", [
    ((1, 4, 4), (1, 5), {}, ["x must be 4-D", "[1, 4, 4]"]),
    ((1, 1, 4, 4), (1, 4), {}, ["rois must be [K, 5]", "[1, 4]"]),
    ((1, 1, 4, 4), (5,), {}, ["rois must be [K, 5]"]),
    ((1, 1, 0, 4), (1, 5), {}, ["empty spatial axis"]),
    ((1, 1, 4, 4), (1, 5), {"output_size": [0, 2]}, ["output_size [0, 2]"]),
    ((1, 1, 4, 4), (1, 5), {"output_size": [1, 2, 3]}, ["1 or 2 values"]),
    ((1, 1, 4, 4), (1, 5), {"spatial_scale": -1.0}, ["spatial_scale"]),
    ((1, 1, 4, 4), (1, 5), {"sampling_ratio": 5000}, ["sampling_ratio 5000"]),
])
def test_shape_rule_errors(x_shape, rois_shape, attrs, words):
    attrs = {"output_size": [2, 2], **attrs}
    x = dg.tensor(np.ones(x_shape))
    rois = dg.tensor(np.zeros(rois_shape))
    with pytest.raises(dg.errors.InvalidArgumentError) as err:
        dg.ops.roi_align(x, rois, **attrs)
    for w in ["RoiAlign"] + words:
        assert w in str(err.value), str(err.value)


def test_dtype_mismatch_is_refused():
    with pytest.raises(dg.errors.InvalidArgumentError, match="rois must have x's dtype"):
        dg.ops.roi_pool(dg.tensor(np.ones((1, 1, 4, 4), np.float32)),
                        dg.tensor(np.zeros((1, 5))), [2, 2])
    with pytest.raises(dg.errors.InvalidArgumentError, match="dy has shape"):
        dg.ops.roi_align_grad(dg.tensor(np.ones((1, 1, 4, 4))),
                              dg.tensor(np.zeros((1, 5))),
                              dg.tensor(np.ones((1, 1, 3, 3))), [2, 2])


@pytest.mark.parametrize("op, attrs", [
    ("RoiAlign", {"output_size": [2, 2]}),
    ("RoiPool", {"output_size": [2, 2]}),
])
def test_check_bad_inputs(op, attrs):
    x = np.ones((2, 3, 5, 5), np.float32)
    rois = np.array([[0, 0, 0, 3, 3], [1, 1, 1, 4, 4]], np.float32)
    assert check_bad_inputs(op, [x, rois], skip=KNOWN, **attrs)["valid"] == "ok"


def test_check_bad_inputs_gradient_ops():
    x = np.ones((1, 2, 5, 5), np.float32)
    rois = np.array([[0, 0, 0, 3, 3]], np.float32)
    dy = np.ones((1, 2, 2, 2), np.float32)
    for op, third in (("RoiAlignGrad", dy), ("RoiPoolGrad", dy),
                      ("RoiPoolGather", x)):
        report = check_bad_inputs(op, [x, rois, third], skip=KNOWN,
                                  output_size=[2, 2])
        assert report["valid"] == "ok"


# -------------------------------------------------------------- eager/graph


def test_eager_vs_graph_with_gradients():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 9, 7))
    rois = ROIS.copy()

    def fn(x, rois):
        a = dg.ops.roi_align(x, rois, [2, 2], spatial_scale=0.9, sampling_ratio=2)
        p = dg.ops.roi_pool(x, rois, [2, 3], spatial_scale=0.9)
        return [a * 2.0, p]

    other = [rng.standard_normal(x.shape), rois[::-1].copy()]
    check_eager_vs_graph(fn, x, rois, grads=True, wrt=[0], extra_inputs=[other])


# --------------------------------------------------------------- Python API


def test_generated_signatures_and_docs():
    sig = inspect.signature(dg.ops.roi_align)
    assert list(sig.parameters) == ["x", "rois", "output_size", "spatial_scale",
                                    "sampling_ratio", "aligned", "mode"]
    assert sig.parameters["mode"].default == "avg"
    assert sig.parameters["sampling_ratio"].default == -1
    assert sig.parameters["aligned"].default is True
    assert "RoIAlign" in dg.ops.roi_align.__doc__
    assert "bilinear" in dg.ops.roi_align.__doc__
    sig = inspect.signature(dg.ops.roi_pool)
    assert list(sig.parameters) == ["x", "rois", "output_size", "spatial_scale"]
    assert "RoIPool" in dg.ops.roi_pool.__doc__


def test_python_api_takes_list_of_boxes_and_int_size():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 2, 6, 6))
    b0 = np.array([[0.0, 0.0, 3.0, 3.0]])
    b1 = np.array([[1.0, 1.0, 5.0, 4.0], [2.0, 0.0, 4.0, 6.0]])
    rois = np.concatenate([np.c_[np.zeros(1), b0], np.c_[np.ones(2), b1]])
    y = vo.roi_align(dg.tensor(x), [dg.tensor(b0), dg.tensor(b1)], 2,
                     spatial_scale=1.0, sampling_ratio=2, aligned=False)
    np.testing.assert_allclose(y.numpy(), roi_align_ref(x, rois, 2, 1.0, 2, False),
                               rtol=1e-12)
    p = vo.roi_pool(dg.tensor(x), [dg.tensor(b0), dg.tensor(b1)], (2, 3))
    np.testing.assert_allclose(p.numpy(), roi_pool_ref(x, rois, [2, 3]))
    from dragon_vision_ops import _roi
    assert {"roi_align", "roi_pool"} <= set(_roi.__all__)


# -------------------------------------------------------------------- CUDA


@pytest.mark.parametrize("op", ["RoiAlign", "RoiAlignGrad", "RoiPool",
                                "RoiPoolGrad", "RoiPoolGather"])
def test_cuda_kernels_registered(op):
    cuda = [k for k in dg.plugins.kernels(op) if k["device"] == "cuda"]
    cpu = [k for k in dg.plugins.kernels(op) if k["device"] == "cpu"]
    assert len(cpu) == 2
    assert bool(cuda) == vo.built_with_cuda()


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cuda_matches_cpu(dtype):
    rng = np.random.default_rng(5)
    x, rois = _pool_inputs(rng, dtype)
    g = rng.standard_normal((len(rois), 3, 2, 3)).astype(dtype)
    for attrs in ({"aligned": True}, {"aligned": False, "sampling_ratio": 2}):
        cpu = dg.ops.roi_align(dg.tensor(x), dg.tensor(rois), [2, 3], **attrs).cpu().numpy()
        gpu = dg.ops.roi_align(dg.tensor(x, device="cuda"),
                               dg.tensor(rois, device="cuda"), [2, 3], **attrs).cpu().numpy()
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
        cpu = dg.ops.roi_align_grad(dg.tensor(x), dg.tensor(rois), dg.tensor(g),
                                    [2, 3], **attrs).cpu().numpy()
        gpu = dg.ops.roi_align_grad(*(dg.tensor(a, device="cuda") for a in (x, rois, g)),
                                    [2, 3], **attrs).cpu().numpy()
        np.testing.assert_allclose(gpu, cpu, rtol=1e-5, atol=1e-6)
    for name in ("roi_pool_grad", "roi_pool_gather"):
        third = g if name == "roi_pool_grad" else x
        cpu = getattr(dg.ops, name)(*(dg.tensor(a) for a in (x, rois, third)), [2, 3])
        gpu = getattr(dg.ops, name)(*(dg.tensor(a, device="cuda") for a in (x, rois, third)),
                                    [2, 3])
        np.testing.assert_allclose(gpu.cpu().numpy(), cpu.cpu().numpy(), rtol=1e-6)
    cpu = dg.ops.roi_pool(dg.tensor(x), dg.tensor(rois), [2, 3]).cpu().numpy()
    gpu = dg.ops.roi_pool(dg.tensor(x, device="cuda"), dg.tensor(rois, device="cuda"),
                          [2, 3]).cpu().numpy()
    np.testing.assert_array_equal(gpu, cpu)


@requires_cuda
def test_cuda_bad_batch_index_is_a_clear_error():
    x = dg.tensor(np.ones((1, 1, 4, 4)), device="cuda")
    rois = dg.tensor(np.array([[4, 0, 0, 2, 2.0]]), device="cuda")
    for fn in (dg.ops.roi_align, dg.ops.roi_pool):
        with pytest.raises(dg.errors.InvalidArgumentError, match="roi 0 has batch index 4"):
            fn(x, rois, [2, 2])


def _bench_like(rng, dtype, c=256, k=512):
    """The benchmark's roi_align inputs: a [2, c, 64, 64] map, k rois of
    8-56 pixels (scale 0.25), one of them reversed."""
    x = rng.standard_normal((2, c, 64, 64)).astype(dtype)
    xy = rng.uniform(-10, 250, (k, 2))
    wh = rng.uniform(8, 56, (k, 2))
    rois = np.concatenate([rng.integers(0, 2, (k, 1)), xy, xy + wh], 1).astype(dtype)
    rois[0, 3:] = rois[0, 1:3] - 4.0
    return x, rois


def _cuda_vs_cpu(x, rois, size, tol, **attrs):
    """RoiAlign (bit for bit: the kernels follow the CPU's formulas
    operation by operation) and RoiAlignGrad (atomic adds: `tol`) on cuda
    against the CPU kernels."""
    g = np.random.default_rng(1).standard_normal((len(rois), x.shape[1]) + tuple(size))
    g = g.astype(x.dtype)
    cpu = dg.ops.roi_align(dg.tensor(x), dg.tensor(rois), list(size), **attrs).numpy()
    gpu = dg.ops.roi_align(dg.tensor(x, device="cuda"), dg.tensor(rois, device="cuda"),
                           list(size), **attrs).cpu().numpy()
    np.testing.assert_array_equal(gpu, cpu)
    cpu = dg.ops.roi_align_grad(dg.tensor(x), dg.tensor(rois), dg.tensor(g), list(size),
                                **attrs).numpy()
    gpu = dg.ops.roi_align_grad(*(dg.tensor(a, device="cuda") for a in (x, rois, g)),
                                list(size), **attrs).cpu().numpy()
    np.testing.assert_allclose(gpu, cpu, **tol)


@requires_cuda
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_cuda_roi_align_benchmark_shape(mode):
    """The benchmark's shape (512 rois, 7x7, sampling 2, float32): several
    channel blocks per roi, rois inside, across and outside the map."""
    x, rois = _bench_like(np.random.default_rng(2), "float32")
    _cuda_vs_cpu(x, rois, (7, 7), dict(rtol=1e-4, atol=1e-5), spatial_scale=0.25,
                 sampling_ratio=2, aligned=True, mode=mode)


@requires_cuda
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_cuda_roi_align_adaptive_large_rois(dtype, mode):
    """Adaptive sampling on rois up to 500 pixels: grids past the kernels'
    shared axis tables (more than 256 samples along an axis), which then
    compute their taps inline."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 40, 50)).astype(dtype)
    xy = rng.uniform(-20, 30, (12, 2))
    wh = rng.uniform(1, 500, (12, 2))
    rois = np.concatenate([rng.integers(0, 2, (12, 1)), xy, xy + wh], 1).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-12)
    for aligned in (True, False):
        _cuda_vs_cpu(x, rois, (7, 6), tol, spatial_scale=1.0, sampling_ratio=-1,
                     aligned=aligned, mode=mode)


@requires_cuda
def test_cuda_bad_rois_raise_and_the_next_call_works():
    """A NaN coordinate, an inf coordinate, a fractional or out-of-range
    batch index raise the CPU's errors on cuda too, forward and gradient,
    and a valid call right after each gets the right result (the rois'
    pinned host buffer is reused)."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 8, 8))
    good = np.array([[1, 0.5, 1.0, 6.0, 7.0]])
    want = dg.ops.roi_align(dg.tensor(x), dg.tensor(good), [2, 2]).numpy()
    xc = dg.tensor(x, device="cuda")
    g = dg.tensor(np.ones((2, 3, 2, 2)), device="cuda")
    bad = [([0, np.nan, 0, 2, 2], "non-finite"), ([0, 0, 0, np.inf, 2], "non-finite"),
           ([0.5, 0, 0, 2, 2], "batch index 0.5"), ([2, 0, 0, 2, 2], "batch index 2")]
    for row, msg in bad:
        rois = dg.tensor(np.array([good[0], row]), device="cuda")
        with pytest.raises(dg.errors.InvalidArgumentError, match=msg):
            dg.ops.roi_align(xc, rois, [2, 2])
        with pytest.raises(dg.errors.InvalidArgumentError, match=msg):
            dg.ops.roi_align_grad(xc, rois, g, [2, 2])
        with pytest.raises(dg.errors.InvalidArgumentError, match=msg):
            dg.ops.roi_pool(xc, rois, [2, 2])
        got = dg.ops.roi_align(xc, dg.tensor(good, device="cuda"), [2, 2]).cpu().numpy()
        np.testing.assert_array_equal(got, want)


@requires_cuda
def test_cuda_roi_align_too_many_samples_raises():
    """A roi whose adaptive grid exceeds the sample limit raises (the
    kernel skips it rather than running for hours)."""
    x = dg.tensor(np.ones((1, 1, 4, 4), np.float32), device="cuda")
    rois = dg.tensor(np.array([[0, 0, 0, 1e7, 1e7]], np.float32), device="cuda")
    with pytest.raises(dg.errors.InvalidArgumentError, match="samples"):
        dg.ops.roi_align(x, rois, [2, 2])


def _benchmark_inputs():
    """bench/bench_gpu.py's roi_align inputs, drawn the same way."""
    rng = np.random.default_rng(6)
    rng.uniform(0, 1000, (5000, 2)), rng.uniform(10, 120, (5000, 2)), rng.uniform(0, 1, 5000)
    feat = rng.standard_normal((2, 256, 64, 64)).astype(np.float32)
    xy = rng.uniform(0, 200, (512, 2))
    wh = rng.uniform(8, 56, (512, 2))
    rois = np.concatenate([rng.integers(0, 2, (512, 1)), xy, xy + wh], 1).astype(np.float32)
    return feat, rois


def _torchvision_f32(x, rois, size, scale, sampling):
    """torchvision's CUDA roi_align (aligned=True, sampling_ratio > 0) in
    float32 as its compiler rounds it: roi * scale - 0.5 and
    bin * i + start fused into single-rounding multiply-adds."""
    def fma(a, b, c):
        return np.float32(np.float64(a) * np.float64(b) + np.float64(c))

    f32, (oh, ow), (h, w) = np.float32, size, x.shape[2:]
    out = np.zeros((len(rois), x.shape[1], oh, ow), np.float64)
    for k, r in enumerate(rois):
        xb = x[int(r[0])].astype(np.float64)
        sx, sy = fma(r[1], f32(scale), f32(-0.5)), fma(r[2], f32(scale), f32(-0.5))
        bw = f32(f32(fma(r[3], f32(scale), f32(-0.5)) - sx) / f32(ow))
        bh = f32(f32(fma(r[4], f32(scale), f32(-0.5)) - sy) / f32(oh))
        for i in range(oh):
            for j in range(ow):
                acc = 0.0
                for iy in range(sampling):
                    y = f32(fma(f32(i), bh, sy) + f32(f32(f32(iy + 0.5) * bh) / f32(sampling)))
                    for ix in range(sampling):
                        x_ = f32(fma(f32(j), bw, sx) + f32(f32(f32(ix + 0.5) * bw) / f32(sampling)))
                        if y < -1 or y > h or x_ < -1 or x_ > w:
                            continue
                        yy, xx = max(y, f32(0)), max(x_, f32(0))
                        y0, x0 = min(int(yy), h - 1), min(int(xx), w - 1)
                        y1, x1 = min(y0 + 1, h - 1), min(x0 + 1, w - 1)
                        ly = f32(yy - y0) if y0 < h - 1 else f32(0)
                        lx = f32(xx - x0) if x0 < w - 1 else f32(0)
                        hy, hx = 1 - ly, 1 - lx
                        acc = acc + (hy * hx * xb[:, y0, x0] + hy * lx * xb[:, y0, x1]
                                     + ly * hx * xb[:, y1, x0] + ly * lx * xb[:, y1, x1])
                out[k, :, i, j] = acc / (sampling * sampling)
    return out


def test_roi_align_rounds_like_torchvision():
    """The benchmark's case (float32 map 64x64, scale 0.25, sampling 2): in
    float32 a coordinate near 64 is good to ~4e-6 pixel, so two kernels
    that round their coordinates differently differ by up to ~2e-5 after
    interpolation, more than the benchmark's check allows (rtol 1e-4,
    atol 1e-5). The kernels round the coordinates as torchvision's CUDA
    kernel does (fused multiply-adds), so they agree with it to the
    summation's rounding; the cuda kernels give the CPU's bits (below)."""
    feat, rois = _benchmark_inputs()
    feat, rois = feat[:, :32], rois[:64]
    got = vo.roi_align(dg.tensor(feat), dg.tensor(rois), (7, 7), spatial_scale=0.25,
                       sampling_ratio=2, aligned=True).numpy()
    want = _torchvision_f32(feat, rois, (7, 7), 0.25, 2)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@requires_cuda
def test_cuda_roi_align_benchmark_inputs():
    """bench/bench_gpu.py's exact roi_align inputs: cuda gives the CPU's
    bits, forward, and the CPU's gradient within the atomic adds' order."""
    feat, rois = _benchmark_inputs()
    _cuda_vs_cpu(feat, rois, (7, 7), dict(rtol=1e-4, atol=1e-5), spatial_scale=0.25,
                 sampling_ratio=2, aligned=True)
