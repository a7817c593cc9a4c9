"""GridSample beyond bilinear/nearest on 4-D inputs: volumetric (5-D)
sampling, bicubic mode and reflection padding (vision_ops plugin).

The reference below is written from the definitions (PyTorch's
grid_sampler coordinate maps, which ONNX GridSample-20 shares) point by
point in float64: reflection of a coordinate by PyTorch's
``reflect_coordinates`` then clipping; bicubic as Keys' kernel (A = -0.75)
over the 4 x 4 cells around the unpadded coordinate, each cell index padded
on its own. Gradients of both inputs are checked against finite
differences.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from dragon_core.errors import InvalidArgumentError
from dragon_sdk.testing import OpCase

import dragon_core as dg

from vision_testing import requires_cuda  # noqa: E402

DTYPES = ["float32", "float64"]
_A = -0.75


def _keys(d):
    d = abs(d)
    if d <= 1:
        return (_A + 2) * d ** 3 - (_A + 3) * d ** 2 + 1
    if d < 2:
        return _A * d ** 3 - 5 * _A * d ** 2 + 8 * _A * d - 4 * _A
    return 0.0


def _unnormalize(g, size, align):
    with np.errstate(over="ignore"):
        if align:
            return (float(g) + 1) / 2 * (size - 1)
        return ((float(g) + 1) * size - 1) / 2


def _reflect(c, size, align):
    """PyTorch's reflect_coordinates followed by the clip to the image."""
    lo2, hi2 = (0, 2 * (size - 1)) if align else (-1, 2 * size - 1)
    if lo2 == hi2:
        return 0.0
    lo, span = lo2 / 2, (hi2 - lo2) / 2
    c = abs(c - lo)
    extra = math.fmod(c, span)
    flips = math.floor(c / span)
    c = extra + lo if flips % 2 == 0 else span - extra + lo
    return min(max(c, 0.0), size - 1.0)


def grid_sample_ref(x, grid, mode="bilinear", padding_mode="zeros",
                    align_corners=False):
    """Any of 4-D / 5-D, bilinear / nearest / bicubic, zeros / border /
    reflection, point by point."""
    dims = x.ndim - 2
    sizes = x.shape[2:]
    outs = grid.shape[1:-1]
    y = np.zeros(x.shape[:2] + outs)

    def cell(b, idx):
        if all(0 <= i < s for i, s in zip(idx, sizes)):
            return x[(b, slice(None)) + tuple(idx)].astype(np.float64)
        return np.zeros(x.shape[1])

    for b in range(x.shape[0]):
        for pos in np.ndindex(*outs):
            g = grid[(b,) + pos]
            if not np.all(np.isfinite(g)):
                continue
            # Axis a of (D,) H, W reads grid component dims - 1 - a.
            coords = [_unnormalize(g[dims - 1 - a], sizes[a], align_corners)
                      for a in range(dims)]
            if mode != "bicubic":
                if padding_mode == "border":
                    coords = [min(max(c, 0.0), s - 1.0) for c, s in zip(coords, sizes)]
                elif padding_mode == "reflection":
                    if not all(np.isfinite(coords)):
                        continue
                    coords = [_reflect(c, s, align_corners) for c, s in zip(coords, sizes)]
                if not all(np.isfinite(coords)):
                    continue
                if mode == "nearest":
                    y[(b, slice(None)) + pos] = cell(b, [int(np.rint(c)) for c in coords])
                    continue
                base = [math.floor(c) for c in coords]
                acc = np.zeros(x.shape[1])
                for corner in itertools.product((0, 1), repeat=dims):
                    w = 1.0
                    for c, f, k in zip(coords, base, corner):
                        w *= (c - f) if k else (1 - (c - f))
                    acc += w * cell(b, [f + k for f, k in zip(base, corner)])
                y[(b, slice(None)) + pos] = acc
                continue
            # Bicubic: pad each of the 4 x 4 cells.
            if padding_mode == "border":
                # Beyond 2 cells out every tap is the edge cell.
                coords = [min(max(c, -3.0), s + 2.0) for c, s in zip(coords, sizes)]
            if not all(np.isfinite(coords)):
                continue
            base = [math.floor(c) for c in coords]
            acc = np.zeros(x.shape[1])
            for taps in itertools.product(range(-1, 3), repeat=dims):
                w = 1.0
                idx = []
                for c, f, t, s in zip(coords, base, taps, sizes):
                    w *= _keys(c - (f + t))
                    i = f + t
                    if padding_mode == "border":
                        i = min(max(i, 0), s - 1)
                    elif padding_mode == "reflection":
                        i = int(round(_reflect(float(i), s, align_corners)))
                    idx.append(i)
                acc += w * cell(b, idx)
            y[(b, slice(None)) + pos] = acc
    return y


def _normalise(pix, size, align):
    if align:
        return pix / (size - 1) * 2 - 1 if size > 1 else np.zeros_like(pix)
    return (2 * pix + 1) / size - 1


def _grid(x_shape, out, align, seed, nearest=False, reach=1):
    """Grid [N, *out, dims] with pixel coordinates up to `reach` cells
    outside the image, away from the points where the sample is not
    differentiable (integer cells; half cells for nearest)."""
    rng = np.random.default_rng(seed)
    sizes = x_shape[2:]
    dims = len(sizes)
    comps = []
    for k in range(dims):  # component k runs along axis dims - 1 - k
        size = sizes[dims - 1 - k]
        base = rng.integers(-reach, size + reach, size=(x_shape[0],) + tuple(out))
        frac = (rng.uniform(-0.3, 0.3, base.shape) if nearest
                else rng.uniform(0.15, 0.85, base.shape))
        comps.append(_normalise(base + frac, size, align))
    return np.stack(comps, axis=-1)


def _case(xs, out, attrs, dtype="float64", seed=0, reach=1):
    x = np.random.default_rng(seed).uniform(-1, 1, xs)
    grid = _grid(xs, out, attrs.get("align_corners", False), seed + 100,
                 nearest=attrs.get("mode") == "nearest", reach=reach)
    return OpCase.of("GridSample", [x.astype(dtype), grid.astype(dtype)],
                     reference=grid_sample_ref, attrs=attrs)


#: (x shape, output spatial shape, attributes, reach in cells).
CASES = [
    # volumetric
    ((2, 3, 3, 4, 5), (2, 3, 4), {}, 1),
    ((2, 3, 3, 4, 5), (2, 3, 4), {"align_corners": True}, 1),
    ((1, 2, 4, 3, 3), (3, 2, 2), {"padding_mode": "border"}, 1),
    ((1, 2, 4, 3, 3), (3, 2, 2), {"padding_mode": "reflection"}, 3),
    ((1, 2, 4, 3, 3), (3, 2, 2), {"padding_mode": "reflection",
                                  "align_corners": True}, 3),
    ((2, 2, 3, 4, 4), (2, 3, 3), {"mode": "nearest"}, 1),
    ((2, 2, 3, 4, 4), (2, 3, 3), {"mode": "nearest", "padding_mode": "reflection"}, 3),
    ((1, 1, 1, 1, 1), (2, 2, 3), {}, 1),
    ((0, 2, 3, 3, 3), (2, 2, 2), {}, 1),
    ((2, 3, 3, 3, 3), (0, 2, 2), {}, 1),
    # bicubic
    ((2, 3, 4, 5), (3, 4), {"mode": "bicubic"}, 2),
    ((2, 3, 4, 5), (3, 4), {"mode": "bicubic", "align_corners": True}, 2),
    ((1, 2, 5, 3), (4, 3), {"mode": "bicubic", "padding_mode": "border"}, 3),
    ((1, 2, 5, 3), (4, 3), {"mode": "bicubic", "padding_mode": "border",
                            "align_corners": True}, 3),
    ((1, 2, 5, 3), (4, 3), {"mode": "bicubic", "padding_mode": "reflection"}, 7),
    ((1, 2, 5, 3), (4, 3), {"mode": "bicubic", "padding_mode": "reflection",
                            "align_corners": True}, 7),
    ((1, 1, 1, 1), (2, 3), {"mode": "bicubic", "padding_mode": "reflection",
                            "align_corners": True}, 1),
    ((1, 2, 2, 1), (2, 3), {"mode": "bicubic", "padding_mode": "reflection"}, 3),
    # reflection, 2-D
    ((2, 3, 4, 5), (3, 4), {"padding_mode": "reflection"}, 4),
    ((2, 3, 4, 5), (3, 4), {"padding_mode": "reflection", "align_corners": True}, 4),
    ((2, 2, 4, 4), (3, 3), {"mode": "nearest", "padding_mode": "reflection",
                            "align_corners": True}, 4),
    ((1, 2, 1, 4), (2, 2), {"padding_mode": "reflection", "align_corners": True}, 2),
]


def _id(case):
    xs, out, attrs, _ = case
    return ("x".join(map(str, xs)) + "-" + "x".join(map(str, out))
            + "".join(f"-{k}={v}" for k, v in attrs.items()))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, out, attrs, reach", CASES, ids=[_id(c) for c in CASES])
def test_forward(xs, out, attrs, reach, dtype):
    _case(xs, out, attrs, dtype, reach=reach).check_forward()


GRAD = [c for c in CASES if c[2].get("mode") != "nearest"
        and 0 not in c[0] and 0 not in c[1]]


@pytest.mark.parametrize("xs, out, attrs, reach", GRAD, ids=[_id(c) for c in GRAD])
def test_grad(xs, out, attrs, reach):
    """dx and dgrid against finite differences (points off cell boundaries,
    so off the kinks of the linear weights, the clipping and the
    reflections)."""
    _case(xs, out, attrs, seed=3, reach=reach).check_grad(wrt=[0, 1])


def test_nearest_grid_gradient_is_zero_and_dx_scatters():
    x = np.random.default_rng(5).uniform(-1, 1, (1, 2, 3, 3, 4))
    grid = _grid(x.shape, (2, 2, 2), False, 6, nearest=True)
    dy = np.random.default_rng(7).uniform(-1, 1, (1, 2, 2, 2, 2))
    dx, dgrid = dg.ops.grid_sample_grad(dg.tensor(x), dg.tensor(grid), dg.tensor(dy),
                                        mode="nearest", padding_mode="reflection")
    assert np.all(dgrid.numpy() == 0)
    # dx is the adjoint: <dx, x'> == <dy, sample(x')> for any x'.
    x2 = np.random.default_rng(8).uniform(-1, 1, x.shape)
    lhs = np.sum(dx.numpy() * x2)
    rhs = np.sum(dy * grid_sample_ref(x2, grid, "nearest", "reflection"))
    np.testing.assert_allclose(lhs, rhs, rtol=1e-12)


def test_bicubic_by_hand():
    """An impulse at cell 3 of a row of 6 (align_corners) sampled at pixel
    coordinates 1.25 .. 4.25 reads Keys' weights (A = -0.75) at t = 0.25:
    W(1.75) = -0.03515625, W(0.75) = 0.26171875, W(0.25) = 0.87890625,
    W(1.25) = -0.10546875; constants are reproduced exactly."""
    x = np.zeros((1, 1, 5, 6))
    x[..., 3] = 1.0
    pix = np.array([1.25, 2.25, 3.25, 4.25])
    grid = np.stack([_normalise(pix, 6, True), np.zeros(4)], -1).reshape(1, 1, 4, 2)
    y = dg.ops.grid_sample(dg.tensor(x), dg.tensor(grid), mode="bicubic",
                           align_corners=True).numpy()
    np.testing.assert_allclose(
        y.reshape(-1), [-0.03515625, 0.26171875, 0.87890625, -0.10546875], atol=1e-15)
    y = dg.ops.grid_sample(dg.tensor(np.full((1, 1, 5, 6), 2.5)), dg.tensor(grid),
                           mode="bicubic", padding_mode="border").numpy()
    np.testing.assert_allclose(y, 2.5, atol=1e-14)


def test_reflection_by_hand():
    """Row [0, 1, 2, 3]: with align_corners the pixel coordinate -1.25
    mirrors about 0 to 1.25, 4.5 about 3 to 1.5; without, -1.25 mirrors
    about -0.5 to 0.25 and 4.5 about 3.5 to 2.5."""
    x = dg.tensor(np.arange(4.0).reshape(1, 1, 1, 4))
    for align, pix, want in ((True, [-1.25, 4.5], [1.25, 1.5]),
                             (False, [-1.25, 4.5], [0.25, 2.5])):
        gx = _normalise(np.array(pix), 4, align)
        grid = dg.tensor(np.stack([gx, np.zeros(2)], -1).reshape(1, 1, 2, 2))
        y = dg.ops.grid_sample(x, grid, padding_mode="reflection",
                               align_corners=align).numpy()
        np.testing.assert_allclose(y.reshape(-1), want, atol=1e-13)


def test_reflection_grid_gradient_changes_sign():
    """Beyond the right end (align_corners, W = 4) the reflected coordinate
    runs backwards: d(sample)/d(gx) = -slope * (W - 1) / 2."""
    x = dg.tensor(np.array([[[[0.0, 2.0, 4.0, 6.0]]]]))
    for pix, sign in ((1.4, 1.0), (3.6, -1.0), (-0.6, -1.0)):
        g = dg.tensor(np.array([[[[_normalise(pix, 4, True), 0.0]]]]))
        with dg.GradientTape() as tape:
            tape.watch([g])
            y = dg.ops.sum(dg.ops.grid_sample(x, g, padding_mode="reflection",
                                              align_corners=True))
        (dgrid,) = tape.gradient(y, [g])
        np.testing.assert_allclose(dgrid.numpy()[0, 0, 0], [sign * 2.0 * 1.5, 0.0],
                                   atol=1e-12, err_msg=str(pix))


def test_far_and_non_finite_points_are_safe():
    x = np.random.default_rng(9).uniform(-1, 1, (1, 2, 3, 3))
    pts = np.array([1e30, -1e30, np.inf, -np.inf, np.nan, 3.0, -3.0, 1e308, 40.3])
    grid = np.stack(np.meshgrid(pts, pts), -1)[None]
    for mode in ("bilinear", "nearest", "bicubic"):
        for pad in ("zeros", "border", "reflection"):
            attrs = {"mode": mode, "padding_mode": pad}
            y = dg.ops.grid_sample(dg.tensor(x), dg.tensor(grid), **attrs).numpy()
            assert np.all(np.isfinite(y)), attrs
            if mode == "bicubic" and pad == "reflection":
                # Far points shift by whole periods first (the same taps
                # mathematically; 1e30 has no exact fraction to compare).
                assert np.all(np.abs(y) <= 4 * np.abs(x).max()), attrs
                continue
            np.testing.assert_allclose(y, grid_sample_ref(x, grid, **attrs),
                                       atol=1e-12, err_msg=str(attrs))
    x5 = np.random.default_rng(10).uniform(-1, 1, (1, 1, 2, 2, 2))
    grid5 = np.stack(np.meshgrid(pts[:5], pts[:5], pts[:5]), -1)[None]
    for pad in ("zeros", "border", "reflection"):
        y = dg.ops.grid_sample(dg.tensor(x5), dg.tensor(grid5), padding_mode=pad).numpy()
        np.testing.assert_allclose(y, grid_sample_ref(x5, grid5, padding_mode=pad),
                                   atol=1e-12, err_msg=pad)


def test_eager_vs_graph_and_python_api():
    import dragon_vision_ops as vo
    x = np.random.default_rng(11).uniform(-1, 1, (1, 2, 3, 4, 5))
    grid = _grid(x.shape, (2, 2, 3), False, 12, reach=3)
    eager = vo.grid_sample(dg.tensor(x), dg.tensor(grid), padding_mode="reflection")
    graph = dg.function(lambda a, b: dg.ops.grid_sample(
        a, b, padding_mode="reflection"))(dg.tensor(x), dg.tensor(grid))
    np.testing.assert_array_equal(eager.numpy(), graph.numpy())
    np.testing.assert_allclose(eager.numpy(),
                               grid_sample_ref(x, grid, padding_mode="reflection"),
                               atol=1e-12)


@pytest.mark.parametrize("xs, gs, kwargs, match", [
    ((1, 2, 3, 3, 3), (1, 2, 2, 2, 3), {"mode": "bicubic"},
     "mode 'bicubic' needs a 4-D input"),
    ((1, 2, 3, 3), (1, 2, 2, 2), {"mode": "cubic"}, "unknown mode 'cubic'"),
    ((1, 2, 3, 3), (1, 2, 2, 2), {"padding_mode": "mirror"},
     "unknown padding_mode 'mirror'"),
    ((1, 2, 3, 3, 3), (1, 2, 2, 2), {}, "grid must be 5-D [N, Do, Ho, Wo, 3]"),
    ((1, 2, 3, 3, 3), (1, 2, 2, 2, 2), {}, "grid must be 5-D [N, Do, Ho, Wo, 3]"),
    ((1, 2, 3, 3), (1, 2, 2, 3), {}, "grid must be 4-D [N, Ho, Wo, 2]"),
    ((1, 2, 3, 3, 3, 3), (1, 2, 2, 2, 2, 4), {}, "x must be 4-D"),
    ((1, 2, 3, 0, 3), (1, 2, 2, 2, 3), {}, "empty spatial axis"),
])
def test_bad_inputs(xs, gs, kwargs, match):
    with pytest.raises(InvalidArgumentError, match="GridSample") as err:
        dg.ops.grid_sample(dg.tensor(np.zeros(xs)), dg.tensor(np.zeros(gs)), **kwargs)
    assert match in str(err.value)


@requires_cuda
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, out, attrs, reach", [CASES[i] for i in (0, 3, 6, 10, 14, 19)],
                         ids=[_id(CASES[i]) for i in (0, 3, 6, 10, 14, 19)])
def test_cuda_matches_cpu(xs, out, attrs, reach, dtype):
    x = np.random.default_rng(13).uniform(-1, 1, xs).astype(dtype)
    grid = _grid(xs, out, attrs.get("align_corners", False), 14, reach=reach).astype(dtype)
    dy = np.random.default_rng(15).uniform(-1, 1, xs[:2] + out).astype(dtype)
    tol = 1e-5 if dtype == "float32" else 1e-12

    def run(device, fn, arrays):
        out = fn(*[dg.tensor(a, device=device) for a in arrays])
        return [o.cpu().numpy() for o in (out if isinstance(out, (list, tuple)) else [out])]

    for fn, arrays in ((lambda a, b: dg.ops.grid_sample(a, b, **attrs), [x, grid]),
                       (lambda a, b, c: dg.ops.grid_sample_grad(a, b, c, **attrs),
                        [x, grid, dy])):
        for got, want in zip(run("cuda", fn, arrays), run("cpu", fn, arrays)):
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
