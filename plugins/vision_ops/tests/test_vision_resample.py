"""Interpolate and GridSample (vision_ops plugin): forward against float64
NumPy references written from the definitions (PyTorch's coordinate maps),
hand-computed cases, gradients against finite differences (order 1 and 2
for Interpolate, order 1 for GridSample with respect to x and grid), edge
shapes, bad inputs, eager vs graph, and the CUDA kernels (registration
always; values against the CPU when a cuda device exists).
"""

from __future__ import annotations

import inspect
import math

import dragon_vision_ops as vo
import numpy as np
import pytest
from dragon_core.errors import InvalidArgumentError
from dragon_sdk.testing import (
    OpCase,
    check_bad_inputs,
    check_eager_vs_graph,
    check_schema_kernel_consistency,
)

import dragon_core as dg

from vision_testing import requires_cuda  # noqa: E402
DTYPES = ["float32", "float64"]

# ------------------------------------------------------------ references

_A = -0.75  # the bicubic kernel's parameter (PyTorch's)


def _keys(d):
    """Keys' cubic convolution kernel at distance d."""
    d = abs(d)
    if d <= 1:
        return (_A + 2) * d ** 3 - (_A + 3) * d ** 2 + 1
    if d < 2:
        return _A * d ** 3 - 5 * _A * d ** 2 + 8 * _A * d - 4 * _A
    return 0.0


def _nearest_source(o, n_in, n_out, scale, exact):
    """floor(dst * s) or floor((dst + 0.5) * s), s = 1/scale or in/out."""
    shift = 0.5 if exact else 0.0
    if scale:
        return min(math.floor((o + shift) / scale), n_in - 1)
    # in/out applied exactly: floor((o + shift) * in / out).
    return min(int((2 * o + 2 * shift) * n_in // (2 * n_out)), n_in - 1)


def _real_source(o, n_in, n_out, scale, align):
    """The continuous source coordinate of output cell o."""
    if align:
        return o * (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
    ratio = 1.0 / scale if scale else n_in / n_out
    return (o + 0.5) * ratio - 0.5


def axis_matrix(n_in, n_out, mode, align, scale):
    """The [n_out, n_in] matrix of one axis: y = M @ x along that axis."""
    m = np.zeros((n_out, n_in))
    if n_in == n_out and mode not in ("bicubic", "nearest-exact"):
        return np.eye(n_in)  # PyTorch's CPU copy rule
    for o in range(n_out):
        if mode == "nearest" and n_out == 2 * n_in:
            m[o, o // 2] = 1.0  # PyTorch's CPU doubling rule
        elif mode in ("nearest", "nearest-exact"):
            m[o, _nearest_source(o, n_in, n_out, scale,
                                 mode == "nearest-exact")] = 1.0
        elif mode == "bicubic":
            src = _real_source(o, n_in, n_out, scale, align)
            i0 = math.floor(src)
            for k in range(-1, 3):
                m[o, min(max(i0 + k, 0), n_in - 1)] += _keys(src - (i0 + k))
        else:  # linear along this axis
            src = max(_real_source(o, n_in, n_out, scale, align), 0.0)
            i0 = min(math.floor(src), n_in - 1)
            t = src - i0
            m[o, i0] += 1.0 - t
            m[o, min(i0 + 1, n_in - 1)] += t
    return m


def interp_ref(x, size=None, scale_factor=None, mode="nearest",
               align_corners=None):
    axes = x.ndim - 2
    out = x.astype(np.float64)
    for a in range(axes):
        n_in = x.shape[2 + a]
        if size is not None:
            n_out, scale = (size * axes if len(size) == 1 else size)[a], None
        else:
            scale = (scale_factor * axes if len(scale_factor) == 1
                     else scale_factor)[a]
            n_out = math.floor(n_in * scale)
        if align_corners:
            scale = None
        m = axis_matrix(n_in, n_out, mode, bool(align_corners), scale)
        out = np.moveaxis(np.tensordot(m, out, axes=([1], [2 + a])), 0, 2 + a)
    return out


def grid_sample_ref(x, grid, mode="bilinear", padding_mode="zeros",
                    align_corners=False):
    n, c, h, w = x.shape
    _, ho, wo, _ = grid.shape
    y = np.zeros((n, c, ho, wo))

    def pixel(g, size):
        with np.errstate(over="ignore"):  # 1e308 unnormalises to inf
            if align_corners:
                p = (np.float64(g) + 1) / 2 * (size - 1)
            else:
                p = ((np.float64(g) + 1) * size - 1) / 2
        return min(max(p, 0), size - 1) if padding_mode == "border" else p

    def cell(b, yy, xx):
        if 0 <= yy < h and 0 <= xx < w:
            return x[b, :, yy, xx]
        return np.zeros(c)

    for b, i, j in np.ndindex(n, ho, wo):
        gx, gy = grid[b, i, j]
        if not (np.isfinite(gx) and np.isfinite(gy)):
            continue  # non-finite points sample 0
        px, py = pixel(gx, w), pixel(gy, h)
        if not (np.isfinite(px) and np.isfinite(py)):
            continue  # infinitely far outside: padding
        if mode == "nearest":
            y[b, :, i, j] = cell(b, int(np.rint(py)), int(np.rint(px)))
            continue
        x0, y0 = math.floor(px), math.floor(py)
        fx, fy = px - x0, py - y0
        y[b, :, i, j] = ((1 - fx) * (1 - fy) * cell(b, y0, x0)
                         + fx * (1 - fy) * cell(b, y0, x0 + 1)
                         + (1 - fx) * fy * cell(b, y0 + 1, x0)
                         + fx * fy * cell(b, y0 + 1, x0 + 1))
    return y


# --------------------------------------------------------------- helpers


def _uniform(shape, seed, lo=-1.0, hi=1.0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _interp_case(shape, attrs, dtype="float64", seed=0, **options):
    x = _uniform(shape, seed).astype(dtype)
    return OpCase.of("Interpolate", [x], reference=interp_ref, attrs=attrs,
                     **options)


def _normalise(pix, size, align):
    """Pixel coordinates -> grid values (the inverse of the unnormalisation)."""
    if align:
        return pix / (size - 1) * 2 - 1 if size > 1 else np.zeros_like(pix)
    return (2 * pix + 1) / size - 1


def _grid(n, ho, wo, h, w, align, seed, nearest=False):
    """A grid whose pixel coordinates sit away from where the sample is not
    differentiable (integer cells for bilinear, half cells for nearest)."""
    rng = np.random.default_rng(seed)
    base = rng.integers(-1, [w + 1, h + 1], size=(n, ho, wo, 2))
    frac = (rng.uniform(-0.3, 0.3, (n, ho, wo, 2)) if nearest
            else rng.uniform(0.15, 0.85, (n, ho, wo, 2)))
    pix = base + frac
    return np.stack([_normalise(pix[..., 0], w, align),
                     _normalise(pix[..., 1], h, align)], axis=-1)


# ------------------------------------------------- Interpolate: forward

#: (input shape, attributes) covering every mode, rank and target kind.
INTERP = [
    ((2, 3, 4, 5), {"size": [7, 3], "mode": "nearest"}),
    ((1, 2, 5, 4), {"scale_factor": [2.0], "mode": "nearest"}),
    ((1, 2, 7, 6), {"scale_factor": [0.5, 0.7], "mode": "nearest"}),
    ((1, 2, 5, 4), {"size": [8, 3], "mode": "nearest-exact"}),
    ((1, 2, 5, 4), {"scale_factor": [1.7], "mode": "nearest-exact"}),
    ((2, 2, 4, 5), {"size": [7, 9], "mode": "bilinear"}),
    ((2, 2, 4, 5), {"size": [7, 9], "mode": "bilinear", "align_corners": True}),
    ((1, 3, 5, 5), {"scale_factor": [1.7, 2.3], "mode": "bilinear"}),
    ((1, 3, 9, 8), {"size": [4, 3], "mode": "bilinear"}),  # downsampling
    ((1, 3, 9, 8), {"scale_factor": [0.4], "mode": "bilinear",
                    "align_corners": True}),
    ((2, 2, 4, 5), {"size": [7, 9], "mode": "bicubic"}),
    ((2, 2, 4, 5), {"size": [6, 8], "mode": "bicubic", "align_corners": True}),
    ((1, 2, 6, 7), {"scale_factor": [0.6, 1.5], "mode": "bicubic"}),
    ((1, 2, 3, 3), {"size": [1, 1], "mode": "bicubic"}),
    ((2, 3, 5), {"size": [9], "mode": "linear"}),
    ((2, 3, 5), {"scale_factor": [0.5], "mode": "linear", "align_corners": True}),
    ((2, 3, 5), {"size": [8], "mode": "nearest"}),
    ((1, 2, 3, 4, 5), {"size": [5, 3, 7], "mode": "trilinear"}),
    ((1, 2, 3, 4, 5), {"scale_factor": [1.5], "mode": "trilinear",
                       "align_corners": True}),
    ((1, 2, 3, 4, 5), {"scale_factor": [2.0, 0.5, 1.0], "mode": "nearest"}),
    ((1, 1, 1, 1), {"size": [3, 4], "mode": "bilinear"}),   # size-1 input
    ((1, 1, 1, 1), {"size": [3, 4], "mode": "bicubic", "align_corners": True}),
    ((1, 2, 5, 6), {"size": [1, 1], "mode": "bilinear"}),   # size-1 output
    ((1, 2, 5, 6), {"size": [1, 1], "mode": "bilinear", "align_corners": True}),
    ((1, 2, 3, 5), {"scale_factor": [1.2], "mode": "bilinear"}),  # H kept
    ((0, 2, 3, 4), {"size": [5, 2], "mode": "bilinear"}),   # empty batch
    ((2, 0, 3, 4), {"size": [5, 2], "mode": "bicubic"}),    # no channels
    ((1, 2, 3, 4), {"scale_factor": [1.2, 1.1], "mode": "bilinear"}),  # copy
    ((2, 3, 4, 6), {"size": [4, 3], "mode": "bicubic"}),    # H size kept
]


def _interp_id(case):
    shape, attrs = case
    return "x".join(map(str, shape)) + "".join(f"-{k}={v}" for k, v in attrs.items())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, attrs", INTERP, ids=[_interp_id(c) for c in INTERP])
def test_interpolate_forward(shape, attrs, dtype):
    _interp_case(shape, attrs, dtype).check_forward()


@pytest.mark.parametrize("dtype", DTYPES)
def test_interpolate_strided_input(dtype):
    """A non-contiguous view is read through its strides."""
    x = _uniform((2, 3, 6, 10), 1).astype(dtype)[:, ::2, :, ::2]
    OpCase.of("Interpolate", [x], reference=interp_ref,
              attrs={"size": [4, 7], "mode": "bicubic"}).check_forward()


def test_bilinear_align_corners_2x2_to_3x3_by_hand():
    """The centre is the mean of the four inputs, edges the pairwise means."""
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    y = dg.ops.interpolate(dg.tensor(x), size=[3, 3], mode="bilinear",
                           align_corners=True).numpy()
    np.testing.assert_allclose(y[0, 0], [[1.0, 1.5, 2.0], [2.0, 2.5, 3.0],
                                         [3.0, 3.5, 4.0]], rtol=0, atol=1e-15)


def test_linear_half_pixel_by_hand():
    """[0, 10] to 4 cells: sources -0.25 (clamped to 0), 0.25, 0.75, 1.25
    (its right neighbour clamped to the last cell)."""
    y = dg.ops.interpolate(dg.tensor(np.array([[[0.0, 10.0]]])), size=[4],
                           mode="linear").numpy()
    np.testing.assert_allclose(y[0, 0], [0.0, 2.5, 7.5, 10.0], atol=1e-15)


def test_bicubic_corner_by_hand():
    """2x2 -> 4x4: output (0, 0) reads source -0.25 on both axes, i.e. cells
    (-2, -1, 0, 1) -> (0, 0, 0, 1) with Keys weights at 1.75, 0.75, 0.25,
    1.25: 1.10546875 on the first cell and -0.10546875 on the second, per
    axis."""
    x = np.array([[[[1.0, 2.0], [3.0, 4.0]]]])
    y = dg.ops.interpolate(dg.tensor(x), scale_factor=[2.0],
                           mode="bicubic").numpy()
    a, b = 1.10546875, -0.10546875
    row0, row1 = a * 1 + b * 2, a * 3 + b * 4
    assert y[0, 0, 0, 0] == pytest.approx(a * row0 + b * row1, abs=1e-15)
    assert y[0, 0, 0, 0] == pytest.approx(0.68359375, abs=1e-15)


def test_nearest_modes_by_hand():
    """5 -> 3: legacy floor(dst * 5/3) = 0, 1, 3; exact floor((dst + 0.5)
    * 5/3) = 0, 2, 4."""
    x = dg.tensor(np.arange(5.0).reshape(1, 1, 5))
    near = dg.ops.interpolate(x, size=[3], mode="nearest").numpy()
    exact = dg.ops.interpolate(x, size=[3], mode="nearest-exact").numpy()
    np.testing.assert_array_equal(near[0, 0], [0.0, 1.0, 3.0])
    np.testing.assert_array_equal(exact[0, 0], [0.0, 2.0, 4.0])


def test_scale_factor_and_size_agree_on_integer_factors():
    x = dg.tensor(_uniform((2, 3, 4, 5), 2))
    for mode in ("nearest", "nearest-exact", "bilinear", "bicubic"):
        by_scale = dg.ops.interpolate(x, scale_factor=[2.0, 3.0], mode=mode)
        by_size = dg.ops.interpolate(x, size=[8, 15], mode=mode)
        np.testing.assert_allclose(by_scale.numpy(), by_size.numpy(),
                                   rtol=0, atol=1e-14, err_msg=mode)


def test_non_integer_scale_factor_maps_with_its_inverse():
    """scale_factor=1.7 on 5 cells gives 8 cells sampled at (dst + 0.5) /
    1.7 - 0.5, not at (dst + 0.5) * 5 / 8 - 0.5 as size=8 does."""
    x = _uniform((1, 1, 5), 3)
    by_scale = dg.ops.interpolate(dg.tensor(x), scale_factor=[1.7],
                                  mode="linear").numpy()
    by_size = dg.ops.interpolate(dg.tensor(x), size=[8], mode="linear").numpy()
    assert by_scale.shape == by_size.shape == (1, 1, 8)
    assert not np.allclose(by_scale, by_size)
    np.testing.assert_allclose(by_scale, interp_ref(x, scale_factor=[1.7],
                                                    mode="linear"), atol=1e-14)


def test_equal_size_axis_is_copied():
    """floor(3 * 1.2) = 3 and floor(4 * 1.1) = 4 cells: both axes keep their
    size, so nearest and bilinear copy x (PyTorch's CPU rule), although the
    factors are not 1; bicubic has no such rule and samples at
    (dst + 0.5) / factor - 0.5."""
    x = _uniform((1, 2, 3, 4), 4)
    for mode in ("nearest", "bilinear"):
        y = dg.ops.interpolate(dg.tensor(x), scale_factor=[1.2, 1.1],
                               mode=mode).numpy()
        np.testing.assert_array_equal(y, x, err_msg=mode)
    y = dg.ops.interpolate(dg.tensor(x), scale_factor=[1.2, 1.1],
                           mode="bicubic").numpy()
    assert y.shape == x.shape and not np.allclose(y, x)
    np.testing.assert_allclose(y, interp_ref(x, scale_factor=[1.2, 1.1],
                                             mode="bicubic"), atol=1e-14)


def test_nearest_doubling_rule():
    """3 cells with scale_factor 2.1 give 6: legacy nearest of a 4-D input
    reads dst // 2 (PyTorch's CPU rule of its 2-D kernel, not
    floor(dst / 2.1) = 0, 0, 0, 1, 1, 2), of a 3-D or 5-D input
    floor(dst * float(1 / 2.1)) (torch 2.13's 1-D and 3-D kernels have no
    such shortcut), while nearest-exact reads floor((dst + 0.5) / 2.1)."""
    x = dg.tensor(np.arange(3.0).reshape(1, 1, 1, 3))
    near = dg.ops.interpolate(x, scale_factor=[1.0, 2.1], mode="nearest").numpy()
    np.testing.assert_array_equal(near[0, 0, 0], [0, 0, 1, 1, 2, 2])
    x = dg.tensor(np.arange(3.0).reshape(1, 1, 3))
    near = dg.ops.interpolate(x, scale_factor=[2.1], mode="nearest").numpy()
    exact = dg.ops.interpolate(x, scale_factor=[2.1],
                               mode="nearest-exact").numpy()
    np.testing.assert_array_equal(near[0, 0], [0, 0, 0, 1, 1, 2])
    np.testing.assert_array_equal(exact[0, 0], [0, 0, 1, 1, 2, 2])
    near = dg.ops.interpolate(dg.tensor(np.arange(3.0).reshape(1, 1, 1, 1, 3)),
                              scale_factor=[1.0, 1.0, 2.1], mode="nearest").numpy()
    np.testing.assert_array_equal(near[0, 0, 0, 0], [0, 0, 0, 1, 1, 2])
    x = dg.tensor(np.arange(5.0).reshape(1, 1, 5))
    exact = dg.ops.interpolate(x, scale_factor=[2.1],
                               mode="nearest-exact").numpy()
    np.testing.assert_array_equal(  # floor((dst + 0.5) / 2.1), dst < 10
        exact[0, 0], [0, 0, 1, 1, 2, 2, 3, 3, 4, 4])


def test_python_api_accepts_scalars():
    x = dg.tensor(_uniform((1, 2, 3, 4), 5))
    a = vo.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
    b = dg.ops.interpolate(x, scale_factor=[2.0, 2.0], mode="bilinear",
                           align_corners=True)
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert tuple(vo.interpolate(x, size=5).shape) == (1, 2, 5, 5)


# ------------------------------------------------ Interpolate: gradients

INTERP_GRAD = [INTERP[i] for i in (0, 4, 5, 6, 7, 8, 10, 11, 12, 14, 17, 20,
                                    22, 24, 27, 28)]


@pytest.mark.parametrize("shape, attrs", INTERP_GRAD,
                         ids=[_interp_id(c) for c in INTERP_GRAD])
def test_interpolate_grad(shape, attrs):
    _interp_case(shape, attrs, seed=1).check_grad()


SECOND = [INTERP[i] for i in (3, 7, 11, 15, 18)]


@pytest.mark.parametrize("shape, attrs", SECOND, ids=[_interp_id(c) for c in SECOND])
def test_interpolate_grad_second_order(shape, attrs):
    _interp_case(shape, attrs, seed=2).check_grad(order=2)


@pytest.mark.parametrize("shape, attrs", [INTERP[5], INTERP[12]],
                         ids=[_interp_id(INTERP[5]), _interp_id(INTERP[12])])
def test_interpolate_grad_op_and_its_rule(shape, attrs):
    """InterpolateGrad is the adjoint: <Interp(x), dy> == <x, Grad(dy)>,
    and its own rule (Interpolate again) passes orders 1 and 2."""
    x = _uniform(shape, 3)
    y_shape = interp_ref(x, **attrs).shape
    dy = _uniform(y_shape, 4)
    lhs = np.sum(interp_ref(x, **attrs) * dy)
    dx = dg.ops.interpolate_grad(dg.tensor(x), dg.tensor(dy), **attrs).numpy()
    assert np.sum(x * dx) == pytest.approx(lhs, rel=1e-12)
    case = OpCase.of("InterpolateGrad", [x, dy], attrs=attrs)
    case.check_grad(wrt=[1])
    case.check_grad(wrt=[1], order=2)


def test_interpolate_grad_float32_and_empty_batch():
    for shape in ((2, 3, 4, 5), (0, 3, 4, 5)):
        x = dg.tensor(_uniform(shape, 5).astype(np.float32))
        with dg.GradientTape() as tape:
            tape.watch([x])
            loss = dg.ops.sum(dg.ops.interpolate(x, size=[7, 3], mode="bicubic"))
        (dx,) = tape.gradient(loss, [x])
        assert tuple(dx.shape) == shape and dx.dtype == x.dtype
        # Each output spreads weights summing to 1 over its sources.
        assert float(np.sum(dx.numpy())) == pytest.approx(shape[0] * 3 * 21,
                                                          rel=1e-5)


def test_interpolate_eager_vs_graph():
    x = _uniform((2, 3, 4, 5), 6)
    check_eager_vs_graph(
        lambda t: dg.ops.interpolate(t, size=[7, 6], mode="bicubic") * 2.0,
        x, grads=True, extra_inputs=[(_uniform((2, 3, 4, 5), 7),)])


def test_interpolate_schema_matches_kernel():
    x = _uniform((2, 3, 4, 5), 8).astype(np.float32)
    (y,) = check_schema_kernel_consistency("Interpolate", [x], size=[3, 8],
                                           mode="bilinear")
    assert y.shape == (2, 3, 3, 8)


# ------------------------------------------------- Interpolate: errors


@pytest.mark.parametrize("kwargs, match", [
    ({"size": [3, 3], "scale_factor": [2.0]}, "not both"),
    ({}, "one of size or scale_factor"),
    ({"size": [3, 3], "mode": "area"}, "unknown mode 'area'"),
    ({"size": [3, 3], "mode": "nearest", "align_corners": True},
     "align_corners can only be set"),
    ({"size": [3, 3], "mode": "nearest-exact", "align_corners": False},
     "align_corners can only be set"),
    ({"size": [3], "mode": "linear"}, "mode 'linear' needs a 3-D input"),
    ({"size": [3], "mode": "trilinear"}, "needs a 5-D input"),
    ({"size": [3, 3, 3]}, "1 value or one per spatial axis"),
    ({"size": [0, 3]}, "must be positive"),
    ({"scale_factor": [-2.0]}, "finite and positive"),
    ({"scale_factor": [float("nan")]}, "finite and positive"),
    ({"scale_factor": [0.1]}, "output size of 0"),
])
def test_interpolate_bad_attrs(kwargs, match):
    x = dg.tensor(_uniform((1, 2, 4, 5), 9))
    with pytest.raises(InvalidArgumentError, match="Interpolate") as err:
        dg.ops.interpolate(x, **kwargs)
    assert match in str(err.value)


def test_interpolate_bad_shapes():
    with pytest.raises(InvalidArgumentError, match=r"Interpolate: x must be 3-D"):
        dg.ops.interpolate(dg.tensor(np.ones((2, 3))), size=[3])
    with pytest.raises(InvalidArgumentError, match="empty spatial axis"):
        dg.ops.interpolate(dg.tensor(np.ones((1, 1, 0, 3))), size=[3, 3])
    with pytest.raises(InvalidArgumentError, match="dy has shape"):
        dg.ops.interpolate_grad(dg.tensor(np.ones((1, 1, 2, 3))),
                                dg.tensor(np.ones((1, 1, 4, 4))), size=[4, 5])


KNOWN: list = []   # every variant is checked, None inputs included


def _variant(report, prefix):
    """The outcome of the bad-input variant whose label starts with prefix."""
    (label,) = [k for k in report if k.startswith(prefix)]
    return report[label]


def test_interpolate_huge_sizes():
    """An empty batch may ask for a huge (empty) output without the kernel
    building per-position tables; sizes whose index arithmetic would
    overflow are refused."""
    x = dg.tensor(np.zeros((0, 1, 4)))
    assert tuple(dg.ops.interpolate(x, size=[2 ** 40], mode="linear").shape) == (
        0, 1, 2 ** 40)
    with pytest.raises(InvalidArgumentError, match="is too large for input"):
        dg.ops.interpolate(x, size=[2 ** 59])
    with pytest.raises(InvalidArgumentError, match="more elements than fit"):
        dg.ops.interpolate(dg.tensor(np.zeros((1, 1, 4, 4))), size=[2 ** 40])


def test_interpolate_garbage_inputs_never_crash():
    x = _uniform((1, 2, 3, 4), 10).astype(np.float32)
    report = check_bad_inputs("Interpolate", [x], skip=KNOWN, size=[5, 2],
                              mode="bicubic")
    assert report["valid"] == "ok"
    assert "x must be 3-D" in report["input 0 as a 0-d array"]
    dy = _uniform((1, 2, 5, 2), 11).astype(np.float32)
    report = check_bad_inputs("InterpolateGrad", [x, dy], skip=KNOWN,
                              size=[5, 2], mode="bilinear")
    assert "dy has shape" in _variant(report, "input 1 with last dim")


# ------------------------------------------------- GridSample: forward

#: (x shape, (Ho, Wo), attributes).
GRID = [
    ((2, 3, 4, 5), (3, 4), {}),
    ((2, 3, 4, 5), (3, 4), {"align_corners": True}),
    ((1, 2, 5, 3), (4, 2), {"padding_mode": "border"}),
    ((1, 2, 5, 3), (4, 2), {"padding_mode": "border", "align_corners": True}),
    ((2, 2, 4, 4), (3, 3), {"mode": "nearest"}),
    ((2, 2, 4, 4), (3, 3), {"mode": "nearest", "padding_mode": "border",
                            "align_corners": True}),
    ((1, 1, 1, 1), (2, 3), {}),                  # a single cell
    ((1, 2, 1, 4), (2, 2), {"align_corners": True}),
    ((0, 2, 3, 3), (2, 2), {}),                  # empty batch
    ((2, 3, 3, 3), (0, 2), {}),                  # no output points
]


def _grid_id(case):
    x, out, attrs = case
    return ("x".join(map(str, x)) + "-" + "x".join(map(str, out))
            + "".join(f"-{k}={v}" for k, v in attrs.items()))


def _grid_case(xs, out, attrs, dtype="float64", seed=0):
    x = _uniform(xs, seed)
    nearest = attrs.get("mode") == "nearest"
    grid = _grid(xs[0], out[0], out[1], xs[2], xs[3],
                 attrs.get("align_corners", False), seed + 100, nearest=nearest)
    return OpCase.of("GridSample", [x.astype(dtype), grid.astype(dtype)],
                     reference=grid_sample_ref, attrs=attrs)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, out, attrs", GRID, ids=[_grid_id(c) for c in GRID])
def test_grid_sample_forward(xs, out, attrs, dtype):
    _grid_case(xs, out, attrs, dtype).check_forward()


def test_grid_sample_identity_grid_returns_x():
    x = _uniform((2, 3, 4, 5), 12)
    ys, xs = np.meshgrid(np.linspace(-1, 1, 4), np.linspace(-1, 1, 5),
                         indexing="ij")
    grid = np.broadcast_to(np.stack([xs, ys], -1), (2, 4, 5, 2)).copy()
    for mode in ("bilinear", "nearest"):
        y = dg.ops.grid_sample(dg.tensor(x), dg.tensor(grid), mode=mode,
                               align_corners=True).numpy()
        np.testing.assert_allclose(y, x, rtol=0, atol=1e-14)


def test_grid_sample_by_hand():
    """2x2 image: (0, 0) is its centre (the mean); (-1, -1) without
    align_corners is the outer corner, half a cell outside both axes:
    zeros padding keeps a quarter of cell (0, 0), border padding all of it."""
    x = dg.tensor(np.array([[[[1.0, 2.0], [3.0, 4.0]]]]))
    grid = dg.tensor(np.array([[[[0.0, 0.0], [-1.0, -1.0], [np.nan, 0.0]]]]))
    zeros = dg.ops.grid_sample(x, grid).numpy()
    border = dg.ops.grid_sample(x, grid, padding_mode="border").numpy()
    np.testing.assert_allclose(zeros[0, 0, 0], [2.5, 0.25, 0.0], atol=1e-15)
    np.testing.assert_allclose(border[0, 0, 0], [2.5, 1.0, 0.0], atol=1e-15)


def test_grid_sample_far_and_non_finite_points_are_safe():
    """Points far outside or non-finite read no memory out of range."""
    x = _uniform((1, 2, 3, 3), 13)
    pts = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 3.0, -3.0, 1e308])
    grid = np.stack(np.meshgrid(pts, pts), -1)[None]
    for pad in ("zeros", "border"):
        for mode in ("bilinear", "nearest"):
            attrs = {"mode": mode, "padding_mode": pad}
            y = dg.ops.grid_sample(dg.tensor(x), dg.tensor(grid), **attrs)
            np.testing.assert_allclose(y.numpy(), grid_sample_ref(x, grid, **attrs),
                                       atol=1e-12, err_msg=str(attrs))


def test_grid_sample_python_api():
    x = dg.tensor(_uniform((1, 2, 3, 4), 14))
    grid = dg.tensor(_uniform((1, 2, 2, 2), 15))
    np.testing.assert_array_equal(
        vo.grid_sample(x, grid, padding_mode="border", align_corners=None).numpy(),
        dg.ops.grid_sample(x, grid, padding_mode="border").numpy())


# ----------------------------------------------- GridSample: gradients

GRID_GRAD = [GRID[i] for i in (0, 1, 2, 3, 4, 5, 7)]


@pytest.mark.parametrize("xs, out, attrs", GRID_GRAD,
                         ids=[_grid_id(c) for c in GRID_GRAD])
def test_grid_sample_grad(xs, out, attrs):
    """Both inputs against finite differences, points off the cell
    boundaries (and, for border, off the clipping limits)."""
    case = _grid_case(xs, out, attrs, seed=3)
    case.check_grad(wrt=[0, 1])


def test_grid_sample_grid_gradient_by_hand():
    """One row [0, 10] (H = 1) sampled at gx = 0.1, gy = 0: without
    align_corners ix = 0.6 (value 6) and dy/dgx = 10 * W/2 = 10; iy = 0
    with the row below in the zero padding, so dy/dgy = -6 * H/2 = -3.
    With align_corners dy/dgx = 10 * (W-1)/2 = 5 and dy/dgy = 6 * (H-1)/2 = 0.
    Border clipping (ix = 1.4 -> 1, iy = 0 -> 0) and nearest mode give 0."""
    x = dg.tensor(np.array([[[[0.0, 10.0]]]]))
    for attrs, gx, want in (({}, 0.1, [10.0, -3.0]),
                            ({"align_corners": True}, 0.1, [5.0, 0.0]),
                            ({"padding_mode": "border"}, 0.9, [0.0, 0.0]),
                            ({"mode": "nearest"}, 0.1, [0.0, 0.0])):
        g = dg.tensor(np.array([[[[gx, 0.0]]]]))
        with dg.GradientTape() as tape:
            tape.watch([g])
            y = dg.ops.sum(dg.ops.grid_sample(x, g, **attrs))
        (dgrid,) = tape.gradient(y, [g])
        np.testing.assert_allclose(dgrid.numpy()[0, 0, 0], want, atol=1e-12,
                                   err_msg=str(attrs))


def test_grid_sample_second_order_is_refused_clearly():
    x = dg.tensor(_uniform((1, 1, 3, 3), 16))
    g = dg.tensor(_uniform((1, 2, 2, 2), 17) * 0.7)
    with dg.GradientTape() as outer:
        outer.watch([x, g])
        with dg.GradientTape() as inner:
            inner.watch([x, g])
            y = dg.ops.grid_sample(x, g)
            y = dg.ops.sum(y * y)
        _, dgr = inner.gradient(y, [x, g])
        s = dg.ops.sum(dgr)
    with pytest.raises(NotImplementedError, match="GridSampleGrad"):
        outer.gradient(s, [g])


def test_grid_sample_grad_float32_and_empty():
    for xs, out in (((2, 3, 4, 5), (3, 2)), ((0, 3, 4, 5), (3, 2)),
                    ((2, 3, 4, 5), (0, 2))):
        x = dg.tensor(_uniform(xs, 18).astype(np.float32))
        g = dg.tensor(_uniform((xs[0],) + out + (2,), 19).astype(np.float32))
        with dg.GradientTape() as tape:
            tape.watch([x, g])
            loss = dg.ops.sum(dg.ops.grid_sample(x, g))
        dx, dgr = tape.gradient(loss, [x, g])
        assert tuple(dx.shape) == xs and tuple(dgr.shape) == tuple(g.shape)
        assert dx.dtype == dgr.dtype == x.dtype


def test_grid_sample_eager_vs_graph():
    x = _uniform((2, 3, 4, 5), 20)
    grid = _grid(2, 3, 3, 4, 5, False, 21)
    check_eager_vs_graph(
        lambda a, b: dg.ops.grid_sample(a, b, padding_mode="border"),
        x, grid, grads=True,
        extra_inputs=[(_uniform((2, 3, 4, 5), 22), _grid(2, 3, 3, 4, 5, False, 23))])


# -------------------------------------------------- GridSample: errors


@pytest.mark.parametrize("xs, gs, kwargs, match", [
    ((1, 2, 3, 3), (1, 2, 2, 2), {"mode": "trilinear"}, "unknown mode 'trilinear'"),
    ((1, 2, 3, 3), (1, 2, 2, 2), {"padding_mode": "wrap"},
     "unknown padding_mode 'wrap'"),
    ((1, 2, 3), (1, 2, 2, 2), {}, "x must be 4-D"),
    ((1, 2, 3, 3), (1, 2, 2, 3), {}, "grid must be 4-D [N, Ho, Wo, 2]"),
    ((1, 2, 3, 3), (2, 2, 2, 2), {}, "grid batch 2 differs from x batch 1"),
    ((1, 2, 0, 3), (1, 2, 2, 2), {}, "empty spatial axis"),
])
def test_grid_sample_bad_inputs(xs, gs, kwargs, match):
    with pytest.raises(InvalidArgumentError, match="GridSample") as err:
        dg.ops.grid_sample(dg.tensor(np.zeros(xs)), dg.tensor(np.zeros(gs)),
                           **kwargs)
    assert match in str(err.value)


def test_grid_sample_garbage_inputs_never_crash():
    x = _uniform((1, 2, 3, 4), 24).astype(np.float32)
    grid = _uniform((1, 2, 3, 2), 25).astype(np.float32)
    report = check_bad_inputs("GridSample", [x, grid], skip=KNOWN)
    assert report["valid"] == "ok"
    assert "grid must be 4-D" in _variant(report, "input 1 with last dim")
    dy = _uniform((1, 2, 2, 3), 26).astype(np.float32)
    report = check_bad_inputs("GridSampleGrad", [x, grid, dy], skip=KNOWN,
                              mode="nearest")
    assert "dy has shape" in _variant(report, "input 2 with last dim")


# ------------------------------------------------------ schema and docs


@pytest.mark.parametrize("name, params", [
    ("interpolate", ["x", "size", "scale_factor", "mode", "align_corners"]),
    ("interpolate_grad", ["x", "dy", "size", "scale_factor", "mode",
                          "align_corners"]),
    ("grid_sample", ["x", "grid", "mode", "padding_mode", "align_corners"]),
    ("grid_sample_grad", ["x", "grid", "dy", "mode", "padding_mode",
                          "align_corners"]),
])
def test_ops_come_from_the_plugin_schema(name, params):
    fn = getattr(dg.ops, name)
    sig = inspect.signature(fn)
    assert list(sig.parameters) == params
    assert "defined by ``vision_ops``" in fn.__doc__
    assert "align_corners" in fn.__doc__ and "mode" in fn.__doc__


def test_defaults_and_python_docs():
    sig = inspect.signature(dg.ops.interpolate)
    assert sig.parameters["mode"].default == "nearest"
    assert sig.parameters["align_corners"].default is None
    sig = inspect.signature(dg.ops.grid_sample)
    assert sig.parameters["padding_mode"].default == "zeros"
    assert sig.parameters["align_corners"].default is False
    assert "recompute_scale_factor" in dg.ops.interpolate.__doc__
    for fn in (vo.interpolate, vo.grid_sample):
        assert "Parameters" in fn.__doc__ and "Returns" in fn.__doc__
    assert set(vo._resample.__all__) == {"interpolate", "grid_sample"}


# ------------------------------------------------------------------ CUDA


@pytest.mark.skipif(not vo.built_with_cuda(), reason="built without nvcc")
@pytest.mark.parametrize("op", ["Interpolate", "InterpolateGrad", "GridSample",
                                "GridSampleGrad"])
def test_cuda_kernels_are_registered(op):
    cuda = [k for k in dg.plugins.kernels(op) if k["device"] == "cuda"]
    assert len(cuda) == 2, dg.plugins.kernels(op)


def _on(device, arrays, fn):
    out = fn(*[dg.tensor(a, device=device) for a in arrays])
    outs = out if isinstance(out, (list, tuple)) else [out]
    return [o.cpu().numpy() for o in outs]


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape, attrs", [INTERP[i] for i in (1, 4, 7, 11, 15, 17, 25)])
def test_cuda_interpolate_matches_cpu(shape, attrs, dtype):
    x = _uniform(shape, 27).astype(dtype)
    dy = _uniform(interp_ref(x, **attrs).shape, 28).astype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for fn, arrays in ((lambda a: dg.ops.interpolate(a, **attrs), [x]),
                       (lambda a, b: dg.ops.interpolate_grad(a, b, **attrs), [x, dy])):
        for got, want in zip(_on("cuda", arrays, fn), _on("cpu", arrays, fn)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, out, attrs", [GRID[i] for i in (0, 3, 4, 8)])
def test_cuda_grid_sample_matches_cpu(xs, out, attrs, dtype):
    x = _uniform(xs, 29).astype(dtype)
    grid = _grid(xs[0], out[0], out[1], xs[2], xs[3], False, 30).astype(dtype)
    dy = _uniform((xs[0], xs[1]) + out, 31).astype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for fn, arrays in ((lambda a, b: dg.ops.grid_sample(a, b, **attrs), [x, grid]),
                       (lambda a, b, c: dg.ops.grid_sample_grad(a, b, c, **attrs),
                        [x, grid, dy])):
        for got, want in zip(_on("cuda", arrays, fn), _on("cpu", arrays, fn)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
