"""DeformConv2d (v1 and v2) and its backward op DeformConv2dGrad.

The reference is written from the papers' definition: a direct loop over
images, offset groups, taps and output positions that samples the input
bilinearly (zeros outside the image), scales by the mask, then contracts the
samples with the filter (float64). Gradients of every input are checked
against central finite differences in float64, with offsets whose sampling
points keep a fractional part in [0.15, 0.85] (bilinear interpolation has
kinks at integer coordinates).
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from dragon_sdk.testing import (OpCase, check_bad_inputs, check_eager_vs_graph,
                                op_case)

import dragon_core as dg
import dragon_vision_ops as vo
from dragon_vision_ops import _deform

from vision_testing import requires_cuda  # noqa: E402


# ---------------------------------------------------------------- reference


def _pads4(pads):
    """(top, left, bottom, right) from the schema's 2 or 4 values or the
    Python layout's ((top, bottom), (left, right))."""
    pads = list(pads)
    if pads and isinstance(pads[0], (tuple, list)):
        (t, b), (l, r) = pads
        return [t, l, b, r]
    return pads + pads if len(pads) == 2 else pads


def out_size(size, k, stride, pad_begin, pad_end, dilation):
    return (size + pad_begin + pad_end - dilation * (k - 1) - 1) // stride + 1


def bilinear(img, y, x):
    """img [C, H, W] sampled at (y, x), zeros outside the image."""
    _, h, w = img.shape
    y0, x0 = int(np.floor(y)), int(np.floor(x))
    out = np.zeros(img.shape[0])
    for yy, wy in ((y0, 1 - (y - y0)), (y0 + 1, y - y0)):
        for xx, wx in ((x0, 1 - (x - x0)), (x0 + 1, x - x0)):
            if 0 <= yy < h and 0 <= xx < w:
                out += wy * wx * img[:, yy, xx]
    return out


def deform_conv2d_ref(x, weight, offset, mask=None, bias=None, strides=(1, 1),
                      pads=(0, 0), dilations=(1, 1), groups=1, offset_groups=1):
    """y[n, o, i, j] = b[o] + sum_{c, k} w[o, c, k] * m_k * x(p0 + p_k + dp_k)."""
    n_, c_, h, w = x.shape
    o_, cg, kh, kw = weight.shape
    pt, pl, pb, pr = _pads4(pads)
    ho = out_size(h, kh, strides[0], pt, pb, dilations[0])
    wo = out_size(w, kw, strides[1], pl, pr, dilations[1])
    taps, per_og = kh * kw, c_ // offset_groups
    cols = np.zeros((n_, c_, taps, ho, wo))
    for n in range(n_):
        for g in range(offset_groups):
            chans = slice(g * per_og, (g + 1) * per_og)
            for k in range(taps):
                p, q = divmod(k, kw)
                row = g * taps + k
                for i in range(ho):
                    for j in range(wo):
                        y = i * strides[0] - pt + p * dilations[0] + offset[n, 2 * row, i, j]
                        xx = j * strides[1] - pl + q * dilations[1] + offset[n, 2 * row + 1, i, j]
                        m = 1.0 if mask is None else mask[n, row, i, j]
                        cols[n, chans, k, i, j] = m * bilinear(x[n, chans], y, xx)
    out = np.zeros((n_, o_, ho, wo))
    og = o_ // groups
    for g in range(groups):
        wg = weight[g * og:(g + 1) * og].reshape(og, cg, taps)
        out[:, g * og:(g + 1) * og] = np.einsum(
            "ock,nckij->noij", wg, cols[:, g * cg:(g + 1) * cg])
    if bias is not None:
        out += bias.reshape(1, -1, 1, 1)
    return out


# ------------------------------------------------------------------- inputs


def geometry(x_shape, w_shape, attrs):
    """(Ho, Wo) of the convolution."""
    pt, pl, pb, pr = _pads4(attrs.get("pads", (0, 0)))
    s = attrs.get("strides", (1, 1))
    d = attrs.get("dilations", (1, 1))
    return (out_size(x_shape[2], w_shape[2], s[0], pt, pb, d[0]),
            out_size(x_shape[3], w_shape[3], s[1], pl, pr, d[1]))


def smooth_offsets(rng, shape, spread=2):
    """Offsets with an integer part in [-spread, spread] and a fractional part
    in [0.15, 0.85]: every sampling point (the base grid is integer) is far
    from the kinks of bilinear interpolation."""
    whole = rng.integers(-spread, spread + 1, size=shape)
    return whole + rng.uniform(0.15, 0.85, size=shape)


def make_inputs(rng, dtype, x_shape, w_shape, attrs, mask=True, bias=True):
    ho, wo = geometry(x_shape, w_shape, attrs)
    taps = w_shape[2] * w_shape[3]
    og = attrs.get("offset_groups", 1)
    arrays = [rng.uniform(-1, 1, x_shape), rng.uniform(-1, 1, w_shape),
              smooth_offsets(rng, (x_shape[0], 2 * og * taps, ho, wo))]
    if mask:
        arrays.append(rng.uniform(0.1, 1.0, (x_shape[0], og * taps, ho, wo)))
    if bias:
        arrays.append(rng.uniform(-1, 1, (w_shape[0],)))
    return [a.astype(dtype) for a in arrays]


#: (x shape, w shape, with mask, with bias, attributes).
CASES = [
    ((2, 3, 5, 6), (4, 3, 3, 3), True, True, {}),                      # v2
    ((2, 3, 5, 6), (4, 3, 3, 3), False, False, {}),                    # v1
    ((1, 2, 7, 6), (3, 2, 3, 2), True, True,
     {"strides": [2, 1], "pads": [1, 2]}),
    ((1, 2, 6, 7), (2, 2, 2, 3), True, False,
     {"strides": [1, 2], "pads": [0, 1, 2, 1], "dilations": [2, 1]}),
    ((2, 4, 5, 5), (6, 2, 3, 3), True, True, {"groups": 2, "pads": [1, 1]}),
    ((1, 4, 5, 4), (2, 4, 2, 2), True, True, {"offset_groups": 2}),
    ((1, 6, 4, 5), (6, 2, 3, 3), True, True,
     {"groups": 3, "offset_groups": 2, "pads": [1, 1]}),
    ((1, 1, 1, 1), (1, 1, 1, 1), True, True, {}),                      # size-1
    ((3, 2, 3, 3), (2, 2, 1, 1), False, False, {"strides": [2, 2]}),    # 1x1 kernel
]


def _case_id(case):
    xs, ws, mask, bias, attrs = case
    tag = "x".join(map(str, xs)) + "_" + "x".join(map(str, ws))
    tag += ("-v2" if mask else "-v1") + ("-bias" if bias else "")
    return tag + "".join(f"-{k}={v}" for k, v in attrs.items())


def _op_case(case, dtype="float64", seed=0):
    xs, ws, mask, bias, attrs = case
    rng = np.random.default_rng(seed)
    inputs = make_inputs(rng, dtype, xs, ws, attrs, mask, bias)  # bias only after a mask
    return OpCase.of("DeformConv2d", inputs, deform_conv2d_ref, attrs=attrs,
                     tol=10.0)


# ------------------------------------------------------------------ forward


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_forward_matches_the_definition(case, dtype):
    _op_case(case, dtype).check_forward()


def _sample(rng, dtype, attrs):
    return make_inputs(rng, dtype, (2, 4, 5, 6), (4, 2, 3, 3), attrs)


@op_case("DeformConv2d", inputs=_sample, reference=deform_conv2d_ref,
         attrs=[{"groups": 2}, {"groups": 2, "offset_groups": 2, "pads": [1, 1]},
                {"groups": 2, "strides": [2, 2], "dilations": [1, 2]}],
         tol=10.0)
def test_forward_layouts(case):
    """Contiguous and non-contiguous inputs, float32 and float64."""
    case.check_forward()


def test_zero_offsets_and_unit_mask_equal_conv2d(rng):
    for attrs in ({}, {"strides": [2, 1], "pads": ((1, 0), (0, 2)), "dilations": [1, 2]},
                  {"groups": 2, "pads": [1, 1]}):
        x = rng.standard_normal((2, 4, 7, 6))
        w = rng.standard_normal((6, 4 // attrs.get("groups", 1), 3, 2))
        b = rng.standard_normal(6)
        ho, wo = geometry(x.shape, w.shape, attrs)
        offset = np.zeros((2, 2 * 6, ho, wo))
        mask = np.ones((2, 6, ho, wo))
        got = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                                   dg.tensor(mask), dg.tensor(b), **attrs).numpy()
        want = dg.ops.conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(b), **attrs).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_offset_of_one_pixel_equals_a_shifted_image(rng):
    """dy = +1 on every tap reads row r + 1: the convolution of the image
    moved up by one row (its last row zero)."""
    x = rng.standard_normal((1, 2, 6, 5))
    w = rng.standard_normal((3, 2, 3, 3))
    offset = np.zeros((1, 18, 4, 3))
    offset[:, 0::2] = 1.0
    shifted = np.zeros_like(x)
    shifted[:, :, :-1] = x[:, :, 1:]
    got = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset)).numpy()
    want = dg.ops.conv2d(dg.tensor(shifted), dg.tensor(w)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    offset[:, 0::2], offset[:, 1::2] = 0.0, -1.0  # dx = -1: moved right
    shifted = np.zeros_like(x)
    shifted[:, :, :, 1:] = x[:, :, :, :-1]
    got = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset)).numpy()
    want = dg.ops.conv2d(dg.tensor(shifted), dg.tensor(w)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_hand_computed_bilinear_samples():
    """A 1x1 kernel on a 2x3 image: each output samples one point."""
    x = np.array([[[[1.0, 2.0, 4.0], [8.0, 16.0, 32.0]]]])
    w = np.ones((1, 1, 1, 1))
    offset = np.zeros((1, 2, 2, 3))
    offset[0, :, 0, 0] = [0.5, 0.5]     # centre of 1, 2, 8, 16 -> 6.75
    offset[0, :, 0, 1] = [0.25, 0.0]    # 0.75 * 2 + 0.25 * 16 -> 5.5
    offset[0, :, 0, 2] = [-0.5, 0.0]    # half above the image -> 0.5 * 4 = 2
    offset[0, :, 1, 0] = [0.0, -1.0]    # exactly one column left: outside -> 0
    offset[0, :, 1, 1] = [5.0, 5.0]     # far outside -> 0
    offset[0, :, 1, 2] = [-0.5, 0.5]    # (0.5, 2.5): 0.25 * 4 + 0.25 * 32 -> 9
    mask = np.full((1, 1, 2, 3), 2.0)
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                             dg.tensor(mask)).numpy()
    want = 2.0 * np.array([[6.75, 5.5, 2.0], [0.0, 0.0, 9.0]])
    np.testing.assert_allclose(y[0, 0], want, rtol=1e-12)


def test_samples_outside_the_image_read_zero(rng):
    x = rng.standard_normal((1, 2, 4, 4))
    w = rng.standard_normal((3, 2, 3, 3))
    b = rng.standard_normal(3)
    offset = np.full((1, 18, 2, 2), 40.0)
    offset[:, 1::2] = -40.0
    mask = np.ones((1, 9, 2, 2))
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                             dg.tensor(mask), dg.tensor(b)).numpy()
    np.testing.assert_allclose(y, np.broadcast_to(b.reshape(1, 3, 1, 1), y.shape))


def test_empty_image_reads_only_padding():
    """An image with no rows: every sample is outside, the output is the bias
    and the gradients of x (empty), offset and mask are zero."""
    x = np.zeros((1, 1, 0, 3))
    w = np.ones((2, 1, 1, 1))
    offset = np.full((1, 2, 2, 5), 0.5)
    mask = np.ones((1, 1, 2, 5))
    b = np.array([0.5, -1.5])
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                             dg.tensor(mask), dg.tensor(b), pads=[1, 1]).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(b.reshape(1, 2, 1, 1), (1, 2, 2, 5)))
    grads = dg.ops.deform_conv2d_grad(
        *(dg.tensor(a) for a in (x, w, offset, np.ones((1, 2, 2, 5)), mask)), pads=[1, 1])
    assert tuple(grads[0].shape) == x.shape
    for g in grads[1:]:
        np.testing.assert_array_equal(g.numpy(), 0.0)


def test_non_finite_offsets_sample_nothing():
    """A NaN or infinite offset samples nothing (no crash, no garbage index)."""
    x = np.ones((1, 1, 3, 3))
    w = np.ones((1, 1, 1, 1))
    offset = np.zeros((1, 2, 3, 3))
    offset[0, 0, 0, 0] = np.nan
    offset[0, 1, 1, 1] = np.inf
    offset[0, 0, 2, 2] = -np.inf
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset)).numpy()
    want = np.ones((3, 3))
    want[0, 0] = want[1, 1] = want[2, 2] = 0.0
    np.testing.assert_array_equal(y[0, 0], want)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_empty_batch(dtype):
    x = np.zeros((0, 2, 5, 5), dtype)
    w = np.ones((3, 2, 3, 3), dtype)
    offset = np.zeros((0, 18, 3, 3), dtype)
    mask = np.zeros((0, 9, 3, 3), dtype)
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                             dg.tensor(mask))
    assert tuple(y.shape) == (0, 3, 3, 3) and str(y.dtype) == dtype
    xt, wt, ot, mt = (dg.tensor(a) for a in (x, w, offset, mask))
    with dg.GradientTape() as tape:
        tape.watch([xt, wt, ot, mt])
        loss = dg.ops.sum(dg.ops.deform_conv2d(xt, wt, ot, mt))
    grads = tape.gradient(loss, [xt, wt, ot, mt])
    assert [tuple(g.shape) for g in grads] == [x.shape, w.shape, offset.shape, mask.shape]
    np.testing.assert_array_equal(grads[1].numpy(), 0.0)


def test_empty_batch_with_huge_sizes():
    """An empty batch may carry any spatial size: no work, no scratch; a size
    whose column buffer could not even be addressed is refused by the shape
    rule."""
    def zeros(*shape):
        return dg.tensor(np.zeros(shape))
    big = 2**20
    y = dg.ops.deform_conv2d(zeros(0, 2, big, big), zeros(3, 2, 3, 3),
                             zeros(0, 18, big - 2, big - 2))
    assert tuple(y.shape) == (0, 3, big - 2, big - 2)
    grads = dg.ops.deform_conv2d_grad(zeros(0, 2, big, big), zeros(3, 2, 3, 3),
                                      zeros(0, 18, big - 2, big - 2),
                                      zeros(0, 3, big - 2, big - 2))
    np.testing.assert_array_equal(grads[1].numpy(), np.zeros((3, 2, 3, 3)))
    with pytest.raises(ValueError, match="too large to address"):
        dg.ops.deform_conv2d(zeros(0, 2**16, big, big), zeros(0, 2**16, 3, 3),
                             zeros(0, 18, big - 2, big - 2))


def test_zero_input_channels_give_the_bias():
    x = np.zeros((2, 0, 4, 4))
    w = np.zeros((3, 0, 2, 2))
    b = np.array([1.0, -2.0, 3.0])
    offset = np.zeros((2, 8, 3, 3))
    mask = np.ones((2, 4, 3, 3))
    y = dg.ops.deform_conv2d(dg.tensor(x), dg.tensor(w), dg.tensor(offset),
                             dg.tensor(mask), dg.tensor(b)).numpy()
    np.testing.assert_array_equal(y, np.broadcast_to(b.reshape(1, 3, 1, 1), (2, 3, 3, 3)))


# ---------------------------------------------------------------- gradients


GRAD_CASES = [
    ((2, 2, 4, 4), (3, 2, 2, 2), True, True, {}),
    ((1, 2, 4, 5), (2, 2, 3, 3), False, False, {"pads": [1, 1]}),
    ((1, 2, 5, 5), (2, 2, 2, 2), True, True,
     {"strides": [2, 1], "pads": [0, 1, 1, 0], "dilations": [1, 2]}),
    ((1, 4, 3, 3), (4, 2, 2, 2), True, True, {"groups": 2, "offset_groups": 2}),
]


@pytest.mark.parametrize("case", GRAD_CASES, ids=[_case_id(c) for c in GRAD_CASES])
def test_gradients_match_finite_differences(case):
    """x, weight, offset, mask and bias, in float64."""
    _op_case(case, "float64", seed=1).check_grad(rtol=1e-5, atol=1e-7)


def test_larger_case_runs_the_parallel_loops(rng):
    """Big enough for the OpenMP paths: the forward matches the definition,
    and the backward satisfies the adjoint identities of an op linear in x,
    in the weight and in the mask (<y, dy> = <x, dx> = <w, dw> = <m, dm>),
    plus a directional derivative for the offsets."""
    attrs = {"pads": [1, 1], "offset_groups": 2, "groups": 2}
    x, w, off, mask, _ = make_inputs(rng, "float64", (2, 16, 12, 12), (24, 8, 3, 3), attrs)
    y = dg.ops.deform_conv2d(*(dg.tensor(a) for a in (x, w, off, mask)), **attrs).numpy()
    np.testing.assert_allclose(y, deform_conv2d_ref(x, w, off, mask, **attrs),
                               rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    dx, dw, doff, dm = (g.numpy() for g in dg.ops.deform_conv2d_grad(
        *(dg.tensor(a) for a in (x, w, off, dy, mask)), **attrs))
    inner = np.vdot(y, dy)
    for value, grad in ((x, dx), (w, dw), (mask, dm)):
        np.testing.assert_allclose(np.vdot(value, grad), inner, rtol=1e-10)
    direction = rng.uniform(-1, 1, off.shape)
    eps = 1e-6

    def loss(o):
        out = dg.ops.deform_conv2d(*(dg.tensor(a) for a in (x, w, o, mask)), **attrs)
        return np.vdot(out.numpy(), dy)

    numeric = (loss(off + eps * direction) - loss(off - eps * direction)) / (2 * eps)
    np.testing.assert_allclose(np.vdot(doff, direction), numeric, rtol=1e-6)


def test_gradient_of_some_inputs_only(rng):
    """The rule asks DeformConv2dGrad only for what is needed; the others come
    back empty from the op."""
    x, w, off, mask, b = make_inputs(rng, "float64", (1, 2, 4, 4), (2, 2, 2, 2), {})
    case = OpCase.of("DeformConv2d", [x, w, off, mask, b], attrs={})
    case.check_grad(wrt=[2])
    case.check_grad(wrt=[0, 3])
    dy = rng.standard_normal((1, 2, 3, 3))
    outs = dg.ops.deform_conv2d_grad(*(dg.tensor(a) for a in (x, w, off, dy, mask)),
                                     grads=[0, 1, 0, 1])
    assert [tuple(o.shape) for o in outs] == [(0,), w.shape, (0,), mask.shape]
    full = dg.ops.deform_conv2d_grad(*(dg.tensor(a) for a in (x, w, off, dy, mask)))
    np.testing.assert_allclose(outs[1].numpy(), full[1].numpy(), rtol=1e-12)
    np.testing.assert_allclose(outs[3].numpy(), full[3].numpy(), rtol=1e-12)
    no_mask = dg.ops.deform_conv2d_grad(*(dg.tensor(a) for a in (x, w, off, dy)))
    assert tuple(no_mask[3].shape) == (0,)


def test_float32_gradients_agree_with_float64(rng):
    arrays = make_inputs(rng, "float64", (2, 3, 5, 5), (4, 3, 3, 3), {"pads": [1, 1]})
    dy = rng.standard_normal((2, 4, 5, 5))
    args64 = [dg.tensor(a) for a in arrays[:3]] + [dg.tensor(dy), dg.tensor(arrays[3])]
    args32 = [dg.tensor(a.astype(np.float32)) for a in arrays[:3]] + \
        [dg.tensor(dy.astype(np.float32)), dg.tensor(arrays[3].astype(np.float32))]
    g64 = dg.ops.deform_conv2d_grad(*args64, pads=[1, 1])
    g32 = dg.ops.deform_conv2d_grad(*args32, pads=[1, 1])
    for a, b in zip(g32, g64):
        assert str(a.dtype) == "float32"
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-4)


def test_second_order_is_refused_clearly(rng):
    x, w, off, mask, b = (dg.tensor(a) for a in
                          make_inputs(rng, "float64", (1, 1, 3, 3), (1, 1, 2, 2), {}))
    with dg.GradientTape() as outer:
        outer.watch([x])
        with dg.GradientTape() as inner:
            inner.watch([x])
            loss = dg.ops.sum(dg.ops.deform_conv2d(x, w, off, mask, b))
        (gx,) = inner.gradient(loss, [x])
        total = dg.ops.sum(gx * gx)
    with pytest.raises(NotImplementedError,
                       match="DeformConv2dGrad: second-order gradients of DeformConv2d"):
        outer.gradient(total, [x])


# ----------------------------------------------------------- eager vs graph


def test_eager_vs_graph(rng):
    attrs = {"pads": [1, 1], "offset_groups": 2}
    inputs = make_inputs(rng, "float64", (2, 4, 5, 5), (3, 4, 3, 3), attrs)
    extra = make_inputs(np.random.default_rng(7), "float64", (2, 4, 5, 5), (3, 4, 3, 3), attrs)

    def fn(x, w, off, mask, b):
        return dg.ops.deform_conv2d(x, w, off, mask, b, **attrs) * 2.0

    check_eager_vs_graph(fn, *inputs, grads=True, extra_inputs=[extra])


def test_eager_vs_graph_python_api_v1_with_bias(rng):
    x, w, off, _, b = make_inputs(rng, "float64", (1, 2, 5, 5), (3, 2, 3, 3), {})

    def fn(x, off, w, b):
        return vo.deform_conv2d(x, off, w, b)

    check_eager_vs_graph(fn, x, off, w, b, grads=True)


# --------------------------------------------------------------- Python API


def test_python_api_follows_torchvision(rng):
    """deform_conv2d(input, offset, weight, bias, stride, padding, dilation,
    mask): groups and offset groups inferred from the shapes; a bias without
    a mask is added after the op."""
    attrs = {"strides": [2, 1], "pads": [1, 2], "dilations": [1, 2], "groups": 2,
             "offset_groups": 2}
    x, w, off, mask, b = make_inputs(rng, "float64", (2, 4, 7, 8), (4, 2, 3, 3), attrs)
    t = {k: dg.tensor(v) for k, v in dict(x=x, w=w, off=off, mask=mask, b=b).items()}
    got = vo.deform_conv2d(t["x"], t["off"], t["w"], t["b"], stride=(2, 1),
                           padding=(1, 2), dilation=(1, 2), mask=t["mask"]).numpy()
    np.testing.assert_allclose(got, deform_conv2d_ref(x, w, off, mask, b, **attrs),
                               rtol=1e-10, atol=1e-12)
    v1 = vo.deform_conv2d(t["x"], t["off"], t["w"], t["b"], stride=(2, 1),
                          padding=(1, 2), dilation=(1, 2)).numpy()
    np.testing.assert_allclose(v1, deform_conv2d_ref(x, w, off, None, b, **attrs),
                               rtol=1e-10, atol=1e-12)
    # Int geometry; zero offsets: a grouped convolution.
    plain = vo.deform_conv2d(t["x"], dg.tensor(np.zeros((2, 36, 4, 4))), t["w"],
                             stride=2, padding=1, dilation=1).numpy()
    want = dg.ops.conv2d(t["x"], t["w"], strides=[2, 2], pads=[1, 1], groups=2).numpy()
    np.testing.assert_allclose(plain, want, rtol=1e-12, atol=1e-12)


def test_signatures_and_docstrings():
    sig = inspect.signature(dg.ops.deform_conv2d)
    assert list(sig.parameters) == ["x", "weight", "offset", "mask", "bias", "strides",
                                    "pads", "dilations", "groups", "offset_groups"]
    assert sig.parameters["mask"].default is None
    assert sig.parameters["offset_groups"].default == 1
    doc = dg.ops.deform_conv2d.__doc__
    assert "Deformable 2-D convolution" in doc and "offset_groups" in doc
    assert "vision_ops" in doc
    grad_sig = inspect.signature(dg.ops.deform_conv2d_grad)
    assert list(grad_sig.parameters)[:6] == ["x", "weight", "offset", "dy", "mask", "grads"]
    api = inspect.signature(vo.deform_conv2d)
    assert list(api.parameters) == ["input", "offset", "weight", "bias", "stride",
                                    "padding", "dilation", "mask"]
    assert "torchvision" in vo.deform_conv2d.__doc__
    assert _deform.__all__ == ["deform_conv2d"] and vo.deform_conv2d is _deform.deform_conv2d


# --------------------------------------------------------------- bad inputs


def _valid(dtype="float32"):
    rng = np.random.default_rng(0)
    return make_inputs(rng, dtype, (1, 2, 4, 4), (2, 2, 3, 3), {"pads": [1, 1]})


@pytest.mark.parametrize("change, message", [
    (lambda a: a.__setitem__(2, np.zeros((1, 17, 4, 4), "float32")),
     "must have 18 channels"),
    (lambda a: a.__setitem__(3, np.zeros((1, 18, 4, 4), "float32")),
     "must have 9 channels"),
    (lambda a: a.__setitem__(2, np.zeros((1, 18, 3, 4), "float32")),
     r"must have shape \[1, 18, 4, 4\]"),
    (lambda a: a.__setitem__(1, np.zeros((2, 3, 3, 3), "float32")),
     "input channels"),
    (lambda a: a.__setitem__(4, np.zeros((3,), "float32")), r"bias must have shape \[2\]"),
    (lambda a: a.__setitem__(0, np.zeros((2, 4, 4), "float32")), "rank 4"),
])
def test_bad_shapes_raise_clear_errors(change, message):
    arrays = _valid()
    change(arrays)
    with pytest.raises(ValueError, match=message) as err:
        dg.ops.deform_conv2d(*(dg.tensor(a) for a in arrays), pads=[1, 1])
    assert "DeformConv2d" in str(err.value)


@pytest.mark.parametrize("attrs, message", [
    ({"offset_groups": 3}, "offset_groups 3 does not divide"),
    ({"offset_groups": 0}, "offset_groups must be >= 1"),
    ({"groups": 3}, "groups 3 must divide"),
    ({"strides": [0, 1]}, "strides must be"),
    ({"pads": [1, 1, 1]}, r"flat list of 3 values.*\(\(top, bottom\), \(left, right\)\)"),
    ({"pads": [1, 1, 1, 1]}, r"the old flat layout is gone: .*\(\(1, 1\), \(1, 1\)\)"),
    ({"pads": [0, 0], "dilations": [3, 3]}, "larger than the padded input"),
])
def test_bad_attributes_raise_clear_errors(attrs, message):
    arrays = _valid()
    with pytest.raises(ValueError, match=message):
        dg.ops.deform_conv2d(*(dg.tensor(a) for a in arrays), **{"pads": [1, 1], **attrs})


def test_grad_op_checks_dy_and_flags():
    x, w, off, mask, _ = _valid("float64")
    args = [dg.tensor(a) for a in (x, w, off)]
    with pytest.raises(ValueError, match=r"dy \[1, 2, 3, 4\] must have the output shape"):
        dg.ops.deform_conv2d_grad(*args, dg.tensor(np.zeros((1, 2, 3, 4))),
                                  dg.tensor(mask), pads=[1, 1])
    with pytest.raises(ValueError, match="grads must hold 4 flags"):
        dg.ops.deform_conv2d_grad(*args, dg.tensor(np.zeros((1, 2, 4, 4))),
                                  grads=[1, 1], pads=[1, 1])


KNOWN: list = []   # every variant is checked, None inputs included


def test_bad_inputs_never_crash():
    report = check_bad_inputs("DeformConv2d", _valid(), skip=KNOWN, pads=[1, 1])
    assert report["valid"] == "ok"
    assert report["input 4 as None"] == "ok"  # no bias


def test_grad_op_bad_inputs_never_crash():
    x, w, off, mask, _ = _valid()
    dy = np.ones((1, 2, 4, 4), "float32")
    report = check_bad_inputs("DeformConv2dGrad", [x, w, off, dy, mask], skip=KNOWN,
                              pads=[1, 1])
    assert report["valid"] == "ok"


# --------------------------------------------------------------------- CUDA


def test_cuda_kernels_are_registered_when_built_with_cuda():
    for op in ("DeformConv2d", "DeformConv2dGrad"):
        cuda = [k for k in dg.plugins.kernels(op) if k["device"] == "cuda"]
        if vo.built_with_cuda():
            assert sorted(k["dtypes"] for k in cuda) == ["float32", "float64"], cuda
        else:
            assert not cuda


def _wrapper_attrs(attrs: dict) -> dict:
    """The cases' schema attributes as the Python wrappers take them: a flat
    4-value ``pads`` (begins, then ends) becomes ((top, bottom), (left, right))."""
    pads = attrs.get("pads")
    if pads is None or len(pads) != 4:
        return attrs
    return {**attrs, "pads": ((pads[0], pads[2]), (pads[1], pads[3]))}


@requires_cuda
@pytest.mark.parametrize("case", CASES[:7], ids=[_case_id(c) for c in CASES[:7]])
def test_cuda_forward_matches_cpu(case):
    arrays = _op_case(case, "float64").arrays()
    attrs = _wrapper_attrs(case[-1])
    cpu = dg.ops.deform_conv2d(*(dg.tensor(a) for a in arrays), **attrs).cpu().numpy()
    gpu = dg.ops.deform_conv2d(*(dg.tensor(a, device="cuda") for a in arrays),
                               **attrs).cpu().numpy()
    np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-12)
    arrays32 = [a.astype(np.float32) for a in arrays]
    gpu32 = dg.ops.deform_conv2d(*(dg.tensor(a, device="cuda") for a in arrays32),
                                 **attrs).cpu().numpy()
    np.testing.assert_allclose(gpu32, cpu, rtol=1e-4, atol=1e-4)


@requires_cuda
@pytest.mark.parametrize("case", GRAD_CASES, ids=[_case_id(c) for c in GRAD_CASES])
def test_cuda_backward_matches_cpu(case):
    arrays = _op_case(case, "float64", seed=1).arrays()
    x, w, off = arrays[:3]
    mask = arrays[3] if case[2] else None
    dy = np.random.default_rng(2).standard_normal(
        (x.shape[0], w.shape[0]) + geometry(x.shape, w.shape, case[-1]))
    args = [x, w, off, dy] + ([mask] if mask is not None else [])
    attrs = _wrapper_attrs(case[-1])
    cpu = dg.ops.deform_conv2d_grad(*(dg.tensor(a) for a in args), **attrs)
    gpu = dg.ops.deform_conv2d_grad(*(dg.tensor(a, device="cuda") for a in args), **attrs)
    for c, g in zip(cpu, gpu):
        np.testing.assert_allclose(g.cpu().numpy(), c.cpu().numpy(), rtol=1e-10, atol=1e-12)


@requires_cuda
def test_cuda_empty_batch_and_partial_grads():
    x = np.zeros((0, 2, 5, 5))
    w = np.ones((3, 2, 3, 3))
    off = np.zeros((0, 18, 3, 3))
    y = dg.ops.deform_conv2d(dg.tensor(x, device="cuda"), dg.tensor(w, device="cuda"),
                             dg.tensor(off, device="cuda"))
    assert tuple(y.shape) == (0, 3, 3, 3)
    dy = np.zeros((0, 3, 3, 3))
    outs = dg.ops.deform_conv2d_grad(*(dg.tensor(a, device="cuda") for a in (x, w, off, dy)),
                                     grads=[0, 1, 0, 0])
    np.testing.assert_array_equal(outs[1].cpu().numpy(), 0.0)
