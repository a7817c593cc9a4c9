"""RoiAlign mode="max" (ONNX RoiAlign's max mode): forward against a float64
NumPy reference written from the ONNX definition (each bilinear sample
contributes the largest of its four weighted corner terms, the bin the
largest over its samples), hand-computed values, the first-order gradient
against finite differences, the refused second order, errors, and the CUDA
kernels against the CPU's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

from vision_testing import requires_cuda  # noqa: E402

DTYPES = ["float32", "float64"]


def _corners(y, x, h, w):
    """ONNX/Mask R-CNN bilinear taps at (y, x): [(cell, weight)] x 4, all
    weights 0 outside [-1, h] x [-1, w]."""
    if y < -1.0 or y > h or x < -1.0 or x > w:
        return [((0, 0), 0.0)] * 4
    y, x = max(y, 0.0), max(x, 0.0)
    y0, x0 = int(y), int(x)
    if y0 >= h - 1:
        y0 = y1 = h - 1
        y = float(y0)
    else:
        y1 = y0 + 1
    if x0 >= w - 1:
        x0 = x1 = w - 1
        x = float(x0)
    else:
        x1 = x0 + 1
    ly, lx = y - y0, x - x0
    return [((y0, x0), (1 - ly) * (1 - lx)), ((y0, x1), (1 - ly) * lx),
            ((y1, x0), ly * (1 - lx)), ((y1, x1), ly * lx)]


def roi_align_max_ref(x, rois, output_size, spatial_scale=1.0, sampling_ratio=-1,
                      aligned=True, mode="max"):
    assert mode == "max"
    oh, ow = output_size if len(output_size) == 2 else output_size * 2
    n, c, h, w = x.shape
    y = np.zeros((len(rois), c, oh, ow))
    off = 0.5 if aligned else 0.0
    for k, r in enumerate(np.asarray(rois, np.float64)):
        b = int(r[0])
        x1, y1 = r[1] * spatial_scale - off, r[2] * spatial_scale - off
        rw, rh = r[3] * spatial_scale - off - x1, r[4] * spatial_scale - off - y1
        if not aligned:
            rw, rh = max(rw, 1.0), max(rh, 1.0)
        bw, bh = rw / ow, rh / oh
        gh = sampling_ratio if sampling_ratio > 0 else math.ceil(rh / oh)
        gw = sampling_ratio if sampling_ratio > 0 else math.ceil(rw / ow)
        for i in range(oh):
            for j in range(ow):
                best = None
                for iy in range(gh):
                    for ix in range(gw):
                        yy = y1 + i * bh + (iy + 0.5) * bh / gh
                        xx = x1 + j * bw + (ix + 0.5) * bw / gw
                        terms = np.array([wt * x[b, :, cy, cx].astype(np.float64)
                                          for (cy, cx), wt in _corners(yy, xx, h, w)])
                        v = terms.max(axis=0)
                        best = v if best is None else np.maximum(best, v)
                if best is not None:
                    y[k, :, i, j] = best
    return y


ROIS = np.array([
    [0, 1.0, 1.0, 5.0, 6.0],
    [1, -3.0, 2.5, 4.0, 12.0],      # partly outside
    [1, 20.0, 20.0, 30.0, 25.0],    # fully outside: 0
    [0, 2.2, 3.1, 2.6, 3.3],        # smaller than a bin
    [0, 3.0, 4.0, 7.0, 9.0],        # touching the last row / column
    [1, -0.8, -0.4, 3.5, 2.5],      # starting in [-1, 0)
])

ATTRS = [
    {"output_size": [2, 2]},
    {"output_size": [3, 2], "aligned": False},
    {"output_size": [2, 3], "sampling_ratio": 2},
    {"output_size": [1, 1], "sampling_ratio": 1, "aligned": False},
    {"output_size": [2, 2], "spatial_scale": 0.5, "sampling_ratio": 3},
    {"output_size": [4, 3], "spatial_scale": 0.7, "aligned": False},
]


def _case(attrs, dtype, seed=0):
    x = np.random.default_rng(seed).uniform(-1.0, 1.0, (2, 3, 9, 7))
    return OpCase.of("RoiAlign", [x.astype(dtype), ROIS.astype(dtype)],
                     reference=roi_align_max_ref, attrs=dict(attrs, mode="max"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", ATTRS, ids=[str(a) for a in ATTRS])
def test_forward(attrs, dtype):
    _case(attrs, dtype).check_forward()


@pytest.mark.parametrize("attrs", ATTRS[:3] + ATTRS[4:], ids=[str(a) for a in ATTRS[:3] + ATTRS[4:]])
def test_grad_against_finite_differences(attrs):
    # Random values: no ties between the terms a bin compares.
    _case(attrs, "float64", seed=3).check_grad(wrt=[0])


def test_hand_computed():
    """Map [[1, 2], [3, 4]], one roi over it (legacy, no shift), one bin, one
    sample at its centre (1, 1) -> clamped to the last cell: all weight on 4.
    With two samples per axis at (0.5, 0.5), (0.5, 1.5), (1.5, 0.5),
    (1.5, 1.5): the first has terms 0.25 * (1, 2, 3, 4), the others sit
    clamped on the last row/column; the largest term is 4 (weight 1 at
    (1.5, 1.5) -> cell (1, 1)), versus the avg mode's mean."""
    x = dg.tensor(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))
    rois = dg.tensor(np.array([[0, 0.0, 0.0, 2.0, 2.0]]))
    y = dg.ops.roi_align(x, rois, [1, 1], sampling_ratio=1, aligned=False, mode="max")
    np.testing.assert_allclose(y.numpy().reshape(-1), [4.0])
    # Negative map: the maximum term is the one with the smallest weight
    # (the quirk of ONNX's definition: weights multiply before the max).
    xn = dg.tensor(-np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))
    rois = dg.tensor(np.array([[0, 0.0, 0.0, 1.0, 1.0]]))
    y = dg.ops.roi_align(xn, rois, [1, 1], sampling_ratio=1, aligned=True, mode="max")
    # One sample at (0, 0) after the half-pixel shift: weights (1, 0, 0, 0),
    # terms (-1, -0, -0, -0): the maximum is -0 from the second corner.
    assert y.numpy().reshape(-1)[0] == 0.0


def test_gradient_goes_to_the_selected_cell_with_its_weight():
    x = np.zeros((1, 1, 4, 4))
    x[0, 0, 2, 1] = 5.0
    rois = np.array([[0, 0.0, 0.0, 4.0, 4.0]])
    xt = dg.tensor(x)
    with dg.GradientTape() as tape:
        tape.watch([xt])
        y = dg.ops.roi_align(xt, dg.tensor(rois), [1, 1], sampling_ratio=3,
                             aligned=False, mode="max")
        s = dg.ops.sum(y)
    (dx,) = tape.gradient(s, [xt])
    # Samples at 2/3, 2 and 10/3 along both axes: the largest term is
    # 5 * 2/3, from the sample (2, 2/3) whose weight on cell (2, 1) is 2/3.
    want = roi_align_max_ref(x, rois, [1, 1], sampling_ratio=3, aligned=False)
    np.testing.assert_allclose(want.reshape(-1), [10.0 / 3.0])
    np.testing.assert_allclose(y.numpy(), want)
    g = dx.numpy()
    assert np.count_nonzero(g) == 1 and g[0, 0, 2, 1] > 0
    np.testing.assert_allclose(g[0, 0, 2, 1] * 5.0, want.reshape(-1)[0])


def test_second_order_is_refused_clearly():
    x = dg.tensor(np.random.default_rng(4).uniform(-1, 1, (1, 2, 5, 5)))
    rois = dg.tensor(np.array([[0, 0.5, 0.5, 4.0, 3.0]]))
    with dg.GradientTape() as outer:
        outer.watch([x])
        with dg.GradientTape() as inner:
            inner.watch([x])
            y = dg.ops.sum(dg.ops.square(dg.ops.roi_align(x, rois, [2, 2], mode="max")))
        (dx,) = inner.gradient(y, [x])
        s = dg.ops.sum(dx)
    with pytest.raises(NotImplementedError, match="mode='max'"):
        outer.gradient(s, [x])


def test_unknown_mode_is_refused():
    with pytest.raises(dg.errors.InvalidArgumentError, match="RoiAlign") as err:
        dg.ops.roi_align(dg.tensor(np.ones((1, 1, 3, 3))),
                         dg.tensor(np.array([[0, 0, 0, 1, 1.0]])), [1, 1], mode="mean")
    assert "unknown mode 'mean'" in str(err.value)


def test_empty_rois_and_channels():
    for xs, rois in (((1, 2, 4, 4), np.zeros((0, 5))), ((1, 0, 4, 4), ROIS[:1])):
        y = dg.ops.roi_align(dg.tensor(np.ones(xs)), dg.tensor(rois), [2, 2], mode="max")
        assert tuple(y.shape) == (len(rois), xs[1], 2, 2)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("attrs", ATTRS, ids=[str(a) for a in ATTRS])
def test_cuda_matches_cpu(attrs, dtype):
    """The CUDA max-mode kernels against the CPU's: the forward values and
    RoiAlignGrad (the selected cells and weights), over rois inside, across
    and outside the map; random values, so no two compared terms tie."""
    rng = np.random.default_rng(11)
    x = rng.uniform(-1.0, 1.0, (2, 3, 9, 7)).astype(dtype)
    rois = ROIS.astype(dtype)
    size = attrs["output_size"]
    kw = {k: v for k, v in attrs.items() if k != "output_size"}
    g = rng.standard_normal((len(rois), 3) + tuple(size)).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    cpu = dg.ops.roi_align(dg.tensor(x), dg.tensor(rois), size, mode="max", **kw).cpu().numpy()
    gpu = dg.ops.roi_align(dg.tensor(x, device="cuda"), dg.tensor(rois, device="cuda"), size,
                           mode="max", **kw).cpu().numpy()
    np.testing.assert_allclose(gpu, cpu, **tol)
    np.testing.assert_allclose(cpu, roi_align_max_ref(x, rois, size, **kw), rtol=1e-5,
                               atol=1e-6)
    cpu = dg.ops.roi_align_grad(dg.tensor(x), dg.tensor(rois), dg.tensor(g), size, mode="max",
                                **kw).cpu().numpy()
    gpu = dg.ops.roi_align_grad(*(dg.tensor(a, device="cuda") for a in (x, rois, g)), size,
                                mode="max", **kw).cpu().numpy()
    np.testing.assert_allclose(gpu, cpu, **tol)


@requires_cuda
def test_cuda_hand_computed_and_autograd():
    """The hand-computed cases above, and the gradient through autograd, on
    the cuda device."""
    x = dg.tensor(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]), device="cuda")
    rois = dg.tensor(np.array([[0, 0.0, 0.0, 2.0, 2.0]]), device="cuda")
    y = dg.ops.roi_align(x, rois, [1, 1], sampling_ratio=1, aligned=False, mode="max")
    np.testing.assert_allclose(y.cpu().numpy().reshape(-1), [4.0])
    xz = np.zeros((1, 1, 4, 4))
    xz[0, 0, 2, 1] = 5.0
    xt = dg.tensor(xz, device="cuda")
    with dg.GradientTape() as tape:
        tape.watch([xt])
        s = dg.ops.sum(dg.ops.roi_align(xt, dg.tensor(np.array([[0, 0.0, 0.0, 4.0, 4.0]]),
                                                      device="cuda"),
                                        [1, 1], sampling_ratio=3, aligned=False, mode="max"))
    (dx,) = tape.gradient(s, [xt])
    g = dx.cpu().numpy()
    assert np.count_nonzero(g) == 1
    np.testing.assert_allclose(g[0, 0, 2, 1] * 5.0, 10.0 / 3.0)
