"""Convolution ops Conv2d, ConvTranspose2d and Conv2dBackpropFilter
(docs/ops.md, "Convolution"), checked against float64 NumPy references
written directly from the definitions (a tap-by-tap gather for Conv2d, a
tap-by-tap scatter for ConvTranspose2d), over strides, 2- and 4-value pads,
dilations, groups (depthwise included), non-square kernels, empty batches,
1x1 kernels and batches large enough to take the threaded paths.
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import FLOAT_DTYPES, LAYOUTS, OpCase, strided

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

# ------------------------------------------------------------- references


def _pads4(pads):
    """(top, left, bottom, right) from the schema's 2 or 4 values or the
    Python layout's ((top, bottom), (left, right))."""
    pads = list(pads)
    if pads and isinstance(pads[0], (tuple, list)):
        (t, b), (l, r) = pads
        return [t, l, b, r]
    return pads + pads if len(pads) == 2 else pads


def _taps(size_in, k, s, d, begin, end):
    """Output extent of a window sweep along one axis."""
    return (size_in + begin + end - d * (k - 1) - 1) // s + 1


def conv2d_ref(x, w, b=None, strides=(1, 1), pads=(0, 0), dilations=(1, 1),
               groups=1):
    """y[n, o, i, j] = b[o] + sum x[n, g*Cg + c, i*s - pt + p*d, ...] w[o, c, p, q]."""
    pt, pl, pb, pr = _pads4(pads)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    ho = _taps(h, kh, sh, dh, pt, pb)
    wo = _taps(wd, kw, sw, dw, pl, pr)
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    og = o // groups
    y = np.zeros((n, o, ho, wo))
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                patch = xg[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh,
                           q * dw:q * dw + sw * (wo - 1) + 1:sw]
                y[:, g * og:(g + 1) * og] += np.einsum(
                    "nchw,oc->nohw", patch, w[g * og:(g + 1) * og, :, p, q])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return y


def conv_transpose2d_ref(x, w, b=None, strides=(1, 1), pads=(0, 0),
                         output_padding=(0, 0), dilations=(1, 1), groups=1):
    """Scatter of every input pixel through the filter, then the pads cut."""
    pt, pl, pb, pr = _pads4(pads)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilations
    ho = (h - 1) * sh - pt - pb + dh * (kh - 1) + output_padding[0] + 1
    wo = (wd - 1) * sw - pl - pr + dw * (kw - 1) + output_padding[1] + 1
    cg = c // groups
    full = np.zeros((n, og * groups, max((h - 1) * sh + dh * (kh - 1) + 1,
                                         pt + ho),
                     max((wd - 1) * sw + dw * (kw - 1) + 1, pl + wo)))
    for g in range(groups):
        xg = x[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                full[:, g * og:(g + 1) * og,
                     p * dh:p * dh + sh * (h - 1) + 1:sh,
                     q * dw:q * dw + sw * (wd - 1) + 1:sw] += np.einsum(
                         "nchw,co->nohw", xg, w[g * cg:(g + 1) * cg, :, p, q])
    y = full[:, :, pt:pt + ho, pl:pl + wo]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return y


def backprop_filter_ref(x, dy, filter_shape, strides=(1, 1), pads=(0, 0),
                        dilations=(1, 1), groups=1):
    """dw[o, c, p, q] = sum dy[n, o, i, j] x[n, g*Cg + c, i*s - pt + p*d, ...]."""
    pt, pl, pb, pr = _pads4(pads)
    o, cg, kh, kw = filter_shape
    (sh, sw), (dh, dw) = strides, dilations
    ho, wo = dy.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    og = o // groups
    out = np.zeros(filter_shape)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                patch = xg[:, :, p * dh:p * dh + sh * (ho - 1) + 1:sh,
                           q * dw:q * dw + sw * (wo - 1) + 1:sw]
                out[g * og:(g + 1) * og, :, p, q] = np.einsum(
                    "nohw,nchw->oc", dy[:, g * og:(g + 1) * og], patch)
    return out


def test_references_agree_with_each_other():
    """The gather (Conv2d) and scatter (ConvTranspose2d) references are
    adjoint, and the filter reference is the derivative of the first, so a
    mistake in one of them shows up here rather than as a kernel bug."""
    rng = np.random.default_rng(0)
    geo = {"strides": (2, 1), "pads": (1, 0, 2, 1), "dilations": (1, 2),
           "groups": 2}
    x = rng.standard_normal((2, 4, 7, 6))
    w = rng.standard_normal((6, 2, 3, 2))
    y = conv2d_ref(x, w, **geo)
    g = rng.standard_normal(y.shape)
    back = conv_transpose2d_ref(g, w, output_padding=(1, 0), **geo)
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(y * g), np.sum(x * back), rtol=1e-12)
    dw = backprop_filter_ref(x, g, w.shape, **geo)
    v = rng.standard_normal(w.shape)
    np.testing.assert_allclose(np.sum(conv2d_ref(x, v, **geo) * g),
                               np.sum(dw * v), rtol=1e-12)


# ------------------------------------------------------------------ cases

#: (x shape, w shape, with bias, attributes) for Conv2d.
CONV_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((2, 3, 8, 7), (5, 3, 3, 3), True, {"strides": [2, 2], "pads": [1, 1]}),
    ((1, 2, 6, 5), (3, 2, 3, 2), False, {"pads": [0, 2, 1, 0]}),
    ((2, 2, 9, 8), (3, 2, 3, 3), False, {"dilations": [2, 1], "pads": [1, 2]}),
    ((2, 4, 6, 6), (6, 2, 3, 3), True, {"groups": 2}),
    ((2, 3, 6, 5), (3, 1, 3, 3), True, {"groups": 3, "pads": [1, 1]}),
    ((1, 2, 5, 5), (4, 1, 2, 2), False, {"groups": 2, "strides": [2, 1]}),
    ((2, 3, 9, 7), (2, 3, 2, 4), True, {"strides": [3, 2]}),
    ((2, 5, 4, 3), (3, 5, 1, 1), True, {}),                  # 1x1: no im2col
    ((2, 4, 3, 3), (6, 2, 1, 1), False, {"groups": 2}),
    ((1, 3, 5, 5), (2, 3, 1, 1), False, {"strides": [2, 2]}),
    ((1, 2, 3, 3), (2, 2, 2, 2), True, {"pads": [3, 3]}),    # all-pad windows
    ((1, 2, 7, 7), (3, 2, 2, 2), False, {"strides": [3, 3]}),  # skipped pixels
    ((1, 2, 3, 3), (2, 2, 5, 5), True, {"pads": [1, 1]}),    # kernel = input
    ((0, 3, 5, 5), (2, 3, 3, 3), True, {}),                  # empty batch
    ((1, 2, 4, 4), (0, 2, 3, 3), False, {}),                 # no outputs
    ((1, 1, 1, 1), (1, 1, 1, 1), True, {}),                  # one element
    ((9, 8, 16, 16), (8, 8, 3, 3), True, {"pads": [1, 1]}),  # threaded
    ((5, 4, 10, 9), (6, 2, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 0, 2, 1], "groups": 2}),
]

#: (x shape, w shape, with bias, attributes) for ConvTranspose2d.
TRANSPOSE_CASES = [
    ((2, 3, 4, 5), (3, 2, 3, 3), True, {}),
    ((2, 4, 3, 4), (4, 3, 3, 3), False,
     {"strides": [2, 2], "pads": [1, 1], "output_padding": [1, 1]}),
    ((1, 2, 3, 3), (2, 3, 3, 2), True,
     {"strides": [2, 3], "pads": [0, 1, 1, 0], "output_padding": [1, 2]}),
    ((2, 2, 4, 3), (2, 2, 3, 3), False, {"dilations": [2, 2]}),
    ((2, 4, 3, 3), (4, 3, 3, 3), True, {"groups": 2}),
    ((1, 3, 4, 4), (3, 1, 3, 3), False, {"groups": 3, "strides": [2, 2]}),
    ((2, 4, 3, 3), (4, 5, 1, 1), True, {}),                  # 1x1: no col2im
    ((1, 2, 4, 4), (2, 2, 5, 5), False, {"pads": [2, 2]}),
    ((0, 2, 3, 3), (2, 2, 3, 3), True, {}),                  # empty batch
    ((1, 1, 1, 1), (1, 1, 1, 1), True, {}),                  # one element
    ((8, 6, 8, 8), (6, 4, 3, 3), True,                        # threaded
     {"strides": [2, 2], "pads": [1, 1], "output_padding": [1, 0]}),
]

#: (x shape, filter shape, attributes) for Conv2dBackpropFilter.
FILTER_CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((2, 3, 8, 7), (5, 3, 3, 2), {"strides": [2, 2], "pads": [1, 0, 0, 2]}),
    ((2, 2, 9, 8), (3, 2, 3, 3), {"dilations": [2, 1], "pads": [1, 2]}),
    ((2, 4, 6, 6), (6, 2, 3, 3), {"groups": 2}),
    ((2, 3, 6, 5), (3, 1, 3, 3), {"groups": 3, "pads": [1, 1]}),
    ((3, 5, 4, 3), (3, 5, 1, 1), {}),                       # 1x1: no im2col
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),                       # empty: zeros
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),
    ((13, 8, 12, 12), (8, 4, 3, 3), {"groups": 2, "pads": [1, 1]}),  # threaded
    ((7, 2, 40, 40), (3, 2, 5, 5), {}),                   # several stacks
]


def _ids(cases):
    out = []
    for case in cases:
        x, w = case[0], case[1]
        tag = "x".join(map(str, x)) + "_" + "x".join(map(str, w))
        attrs = case[-1]
        tag += "".join(f"-{k}={'.'.join(map(str, v)) if isinstance(v, list) else v}"
                       for k, v in attrs.items())
        if len(case) == 4 and case[2]:
            tag += "-bias"
        out.append(tag)
    return out


def _inputs(dtype, layout, shapes, seed):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1.0, 1.0, s).astype(dtype) for s in shapes]
    if layout == "strided":
        arrays = [strided(a) for a in arrays]
    return arrays


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", CONV_CASES, ids=_ids(CONV_CASES))
def test_conv2d(xs, ws, bias, attrs, dtype, layout):
    """Conv2d matches the gather reference; shape inference agrees."""
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    arrays = _inputs(dtype, layout, shapes, seed=len(xs) + sum(ws))
    OpCase.of("Conv2d", arrays, conv2d_ref, attrs=attrs, tol=20).check_forward()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", TRANSPOSE_CASES,
                         ids=_ids(TRANSPOSE_CASES))
def test_conv_transpose2d(xs, ws, bias, attrs, dtype, layout):
    """ConvTranspose2d matches the scatter reference, output_padding
    included."""
    groups = attrs.get("groups", 1)
    shapes = [xs, ws] + ([(ws[1] * groups,)] if bias else [])
    arrays = _inputs(dtype, layout, shapes, seed=sum(xs) + sum(ws))
    OpCase.of("ConvTranspose2d", arrays, conv_transpose2d_ref, attrs=attrs,
              tol=20).check_forward()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("xs, fs, attrs", FILTER_CASES, ids=_ids(FILTER_CASES))
def test_conv2d_backprop_filter(xs, fs, attrs, dtype, layout):
    """Conv2dBackpropFilter sums dy * patch over the batch and positions."""
    geo = {"strides": [1, 1], "pads": [0, 0], "dilations": [1, 1], "groups": 1}
    geo.update(attrs)
    pt, pl, pb, pr = _pads4(geo["pads"])
    ho = _taps(xs[2], fs[2], geo["strides"][0], geo["dilations"][0], pt, pb)
    wo = _taps(xs[3], fs[3], geo["strides"][1], geo["dilations"][1], pl, pr)
    shapes = [xs, (xs[0], fs[0], ho, wo)]
    arrays = _inputs(dtype, layout, shapes, seed=sum(xs) + sum(fs))
    tol = 20 if np.prod(xs) < 2000 else 100  # long sums over the batch
    OpCase.of("Conv2dBackpropFilter", arrays, backprop_filter_ref,
              attrs={"filter_shape": list(fs), **attrs}, tol=tol).check_forward()


def test_conv2d_empty_batch_gives_empty_output():
    x = np.zeros((0, 3, 5, 5), np.float32)
    w = np.ones((2, 3, 3, 3), np.float32)
    y = dg.ops.conv2d(dg.tensor(x), dg.tensor(w))
    assert tuple(y.shape) == (0, 2, 3, 3)


def test_conv2d_without_bias_equals_zero_bias():
    """b=None (two inputs reach the kernel) and b=0 give the same result."""
    rng = np.random.default_rng(3)
    x = dg.tensor(rng.standard_normal((2, 3, 6, 6)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
    zero = dg.tensor(np.zeros(4, np.float32))
    np.testing.assert_array_equal(dg.ops.conv2d(x, w).numpy(),
                                  dg.ops.conv2d(x, w, zero).numpy())
    np.testing.assert_array_equal(dg.ops.conv2d(x, w, b=None).numpy(),
                                  dg.ops.conv2d(x, w, zero).numpy())


def test_conv2d_python_signature():
    """The generated function has the documented parameters and defaults."""
    import inspect
    params = inspect.signature(dg.ops.conv2d).parameters
    assert list(params) == ["x", "w", "b", "strides", "pads", "dilations",
                            "groups"]
    assert params["b"].default is None
    assert tuple(params["strides"].default) == (1, 1)
    assert tuple(params["pads"].default) == (0, 0)
    assert params["groups"].default == 1
    params = inspect.signature(dg.ops.conv_transpose2d).parameters
    assert list(params) == ["x", "w", "b", "strides", "pads", "output_padding",
                            "dilations", "groups"]


def test_conv2d_graph_mode_matches_eager():
    """The same convolution (and its gradients) traced by @dg.function."""
    rng = np.random.default_rng(5)
    x = dg.tensor(rng.standard_normal((3, 4, 9, 8)).astype(np.float32))
    w = dg.tensor(rng.standard_normal((6, 2, 3, 3)).astype(np.float32))
    b = dg.tensor(rng.standard_normal(6).astype(np.float32))
    geo = {"strides": [2, 1], "pads": ((1, 2), (0, 1)), "groups": 2}

    def step(x, w, b):
        with dg.GradientTape() as tape:
            tape.watch([x, w, b])
            y = dg.ops.conv2d(x, w, b, **geo)
            loss = dg.ops.sum(y * y)
        return [y] + tape.gradient(loss, [x, w, b])

    eager = step(x, w, b)
    graph = dg.function(step)(x, w, b)
    for e, g in zip(eager, graph):
        np.testing.assert_allclose(g.numpy(), e.numpy(), rtol=1e-5, atol=1e-5)
    # Without a bias (the optional input is absent from the traced node).
    no_bias = dg.function(lambda x, w: dg.ops.conv_transpose2d(
        dg.ops.conv2d(x, w, strides=[2, 2], pads=[1, 1]), w, strides=[2, 2],
        pads=[1, 1], output_padding=[0, 1]))
    x1 = x.numpy()[:, :1].astype(np.float64)
    w1 = w.numpy()[:, :1].astype(np.float64)
    z = no_bias(dg.tensor(x1), dg.tensor(w1))
    ref = conv_transpose2d_ref(conv2d_ref(x1, w1, strides=(2, 2), pads=(1, 1)),
                               w1, strides=(2, 2), pads=(1, 1),
                               output_padding=(0, 1))
    assert tuple(z.shape) == (3, 1, 9, 8)
    np.testing.assert_allclose(z.numpy(), ref, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        eager[0].numpy(), conv2d_ref(x.numpy().astype(np.float64),
                                     w.numpy().astype(np.float64),
                                     b.numpy().astype(np.float64), **geo),
        rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ errors


def _t(shape, dtype=np.float32):
    return dg.tensor(np.zeros(shape, dtype))


@pytest.mark.parametrize("x, w, kwargs, words", [
    ((1, 3, 5), (2, 3, 3, 3), {}, ["input x must have rank 4", "[1, 3, 5]"]),
    ((1, 3, 5, 5), (2, 3, 3), {}, ["filter w must have rank 4"]),
    ((1, 3, 5, 5), (2, 4, 3, 3), {}, ["input channels", "[1, 3, 5, 5]"]),
    ((1, 3, 5, 5), (2, 1, 3, 3), {"groups": 2}, ["groups 2 does not divide"]),
    ((1, 4, 5, 5), (3, 2, 3, 3), {"groups": 2}, ["groups 2 does not divide",
                                                 "output channels"]),
    ((1, 4, 5, 5), (2, 4, 3, 3), {"groups": 0}, ["groups must be >= 1"]),
    ((1, 1, 2, 2), (1, 1, 3, 3), {}, ["larger than the padded input height"]),
    ((1, 1, 6, 6), (1, 1, 3, 3), {"dilations": [1, 3]},
     ["kernel width 3 (7 with dilation 3)", "padded input width 6"]),
    ((1, 1, 5, 5), (1, 1, 3, 3), {"strides": [0, 1]}, ["strides must be positive"]),
    ((1, 1, 5, 5), (1, 1, 3, 3), {"strides": [1]}, ["strides must hold 2 values"]),
    ((1, 1, 5, 5), (1, 1, 3, 3), {"pads": [1, 1, 1]}, ["flat list of 3 values", "((top, bottom), (left, right))"]),
    ((1, 1, 5, 5), (1, 1, 3, 3), {"pads": [-1, 0]}, ["pads must be non-negative"]),
    ((1, 1, 5, 5), (1, 1, 3, 3), {"dilations": [1, 0]},
     ["dilations must be positive"]),
    ((1, 1, 5, 5), (1, 1, 0, 3), {}, ["at least 1x1"]),
])
def test_conv2d_errors(x, w, kwargs, words):
    """Bad shapes and attributes fail in shape inference, naming the op."""
    with pytest.raises(InvalidArgumentError) as info:
        dg.ops.conv2d(_t(x), _t(w), **kwargs)
    message = str(info.value)
    assert message.startswith("Conv2d: "), message
    for word in words:
        assert word in message, message


def test_conv2d_bias_errors():
    with pytest.raises(InvalidArgumentError, match=r"Conv2d: bias b must have "
                       r"shape \[2\].*got \[3\]"):
        dg.ops.conv2d(_t((1, 1, 5, 5)), _t((2, 1, 3, 3)), _t((3,)))
    with pytest.raises(InvalidArgumentError, match="Conv2d: bias b"):
        dg.ops.conv2d(_t((1, 1, 5, 5)), _t((2, 1, 3, 3)), _t((1, 2)))


def test_conv2d_dtype_errors():
    with pytest.raises(InvalidArgumentError, match="Conv2d: inputs must share "
                       "one dtype.*float32.*float64"):
        dg.ops.conv2d(_t((1, 1, 5, 5)), _t((1, 1, 3, 3), np.float64))
    # int32 is served (tests/ops/test_int_matmul_conv.py); int64 is not.
    with pytest.raises(InvalidArgumentError, match="Conv2d: input 'x' has "
                       "dtype int64"):
        dg.ops.conv2d(_t((1, 1, 5, 5), np.int64), _t((1, 1, 3, 3), np.int64))
    with pytest.raises(InvalidArgumentError, match="Conv2d: expects"):
        dg.ops._C.call(dg._C.op("Conv2d"), (_t((1, 1, 5, 5)),),
                       ([1, 1], [0, 0], [1, 1], 1))


@pytest.mark.parametrize("x, w, kwargs, words", [
    ((1, 3, 5), (3, 2, 3, 3), {}, ["input x must have rank 4"]),
    ((1, 3, 5, 5), (2, 2, 3, 3), {}, ["filter w [2, 2, 3, 3] has 2 input "
                                      "channels"]),
    ((1, 3, 5, 5), (3, 2, 3, 3), {"groups": 2}, ["groups 2 does not divide"]),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"output_padding": [1, 0]},
     ["output_padding [1, 0] must be non-negative and smaller than strides"]),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"strides": [2, 2], "output_padding": [0, -1]},
     ["output_padding"]),
    ((1, 2, 5, 5), (2, 2, 3, 3), {"output_padding": [0]},
     ["output_padding must hold 2 values"]),
    ((1, 2, 1, 1), (2, 2, 3, 3), {"pads": [2, 2]}, ["is not positive"]),
    ((1, 2, 0, 3), (2, 2, 3, 3), {}, ["empty height"]),
])
def test_conv_transpose2d_errors(x, w, kwargs, words):
    with pytest.raises(InvalidArgumentError) as info:
        dg.ops.conv_transpose2d(_t(x), _t(w), **kwargs)
    message = str(info.value)
    assert message.startswith("ConvTranspose2d: "), message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("x, dy, filt, kwargs, words", [
    ((1, 3, 5, 5), (1, 2, 3, 3), [2, 3, 3], {}, ["filter_shape must hold 4"]),
    ((1, 3, 5, 5), (1, 2, 4, 3), [2, 3, 3, 3], {},
     ["dy [1, 2, 4, 3] must have spatial size [3, 3]"]),
    ((1, 3, 5, 5), (2, 2, 3, 3), [2, 3, 3, 3], {}, ["different batch sizes"]),
    ((1, 3, 5, 5), (1, 4, 3, 3), [2, 3, 3, 3], {}, ["2 output channels"]),
    ((1, 3, 5, 5), (1, 2, 3, 3), [2, 2, 3, 3], {}, ["does not match the 3 "
                                                    "input channels"]),
    ((1, 3, 5, 5), (1, 2, 3, 3), [2, 3, -3, 3], {}, ["negative dimension"]),
])
def test_conv2d_backprop_filter_errors(x, dy, filt, kwargs, words):
    with pytest.raises(InvalidArgumentError) as info:
        dg.ops.conv2d_backprop_filter(_t(x), _t(dy), filt, **kwargs)
    message = str(info.value)
    assert message.startswith("Conv2dBackpropFilter: "), message
    for word in words:
        assert word in message, message
