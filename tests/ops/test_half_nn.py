"""float16 / bfloat16 CPU kernels of convolution (2-D, 3-D, transposed),
pooling (max / average, 2-D / 3-D, adaptive and global), normalization
(batch / layer / group / instance) and MatMul, forward and gradient.

The kernels run the float32 kernel on widened copies and round each output
once (``plugins/cpu_eigen/src/widen_call.h``), so every result is checked
against the float64 NumPy reference of the same (exactly representable)
16-bit inputs with a bound derived from the two epsilons:

    |y - ref| <= eps_h * |ref| + 2 * terms * eps_f32 * mag + tiny

``eps_h * |ref|`` is the one rounding to the 16-bit type (one ulp, twice the
round-to-nearest bound), ``terms * eps_f32 * mag`` the float32 accumulation
of ``terms`` products whose absolute values sum to ``mag`` (the reference
on absolute inputs), ``tiny`` the 16-bit type's smallest subnormal. A kernel
that accumulated in the 16-bit type would miss this bound.
"""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import HALF_DTYPES, numpy_dtype, run_op

import dragon_core as dg

from .test_conv import backprop_filter_ref, conv2d_ref, conv_transpose2d_ref
from .test_conv3d import conv3d_backprop_filter_ref, conv3d_ref, conv_transpose3d_ref
from .test_norm import (batch_norm_grad_ref, batch_norm_ref, group_norm_grad_ref,
                        group_norm_ref, layer_norm_grad_ref, layer_norm_ref)
from .test_pool import (adaptive_avg_pool2d_grad_ref, adaptive_avg_pool2d_ref,
                        avg_pool2d_grad_ref, avg_pool2d_ref, max_pool2d_grad_ref,
                        max_pool2d_indices_ref, max_pool2d_ref)
from .test_pool3d import avg_pool3d_grad_ref, avg_pool3d_ref, max_pool3d_ref

EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}
TINY = {"float16": 2.0 ** -24, "bfloat16": 2.0 ** -133}
EPS32 = 2.0 ** -23


def _half(rng, dt, shape, low=-2.0, high=2.0):
    """Values of dtype ``dt`` (so exactly representable) in [low, high]."""
    return rng.uniform(low, high, shape).astype(numpy_dtype(dt))


def _f64(a):
    return np.asarray(a).astype(np.float64)


def assert_close(y, ref, dt, *, mag=None, terms=1, what=""):
    """Check a 16-bit result against its float64 reference (see module doc)."""
    y = np.asarray(y)
    assert y.dtype == numpy_dtype(dt), f"{what}: dtype {y.dtype}, expected {dt}"
    ref = np.asarray(ref, np.float64)
    assert y.shape == ref.shape, f"{what}: shape {y.shape} vs {ref.shape}"
    mag = np.abs(ref) if mag is None else np.asarray(mag, np.float64)
    bound = EPS[dt] * np.abs(ref) + 2 * terms * EPS32 * mag + TINY[dt]
    err = np.abs(y.astype(np.float64) - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what} [{dt}]: {int(bad.sum())} of {y.size} elements off; worst "
        f"error {err[bad].max():.3g} vs bound {bound[bad][np.argmax(err[bad])]:.3g}")


# ------------------------------------------------------------ convolution

CONV2D = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 4, 6, 6), (4, 2, 3, 2), {"strides": [2, 1], "pads": [1, 0], "groups": 2}),
    ((1, 2, 9, 9), (3, 2, 3, 3), {"dilations": [2, 2], "pads": [2, 1, 0, 2]}),
    ((0, 3, 5, 5), (2, 3, 3, 3), {}),            # empty batch
    ((1, 1, 1, 1), (1, 1, 1, 1), {}),            # single element
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("xs,ws,attrs", CONV2D)
def test_conv2d_half(dt, xs, ws, attrs):
    rng = np.random.default_rng(1)
    x, w, b = _half(rng, dt, xs), _half(rng, dt, ws), _half(rng, dt, ws[:1])
    terms = int(np.prod(ws[1:])) + 1
    y = run_op("Conv2d", x, w, b, **attrs)
    ref = conv2d_ref(_f64(x), _f64(w), _f64(b), **attrs)
    mag = conv2d_ref(np.abs(_f64(x)), np.abs(_f64(w)), np.abs(_f64(b)), **attrs)
    assert_close(y, ref, dt, mag=mag, terms=terms, what="Conv2d")
    # The filter gradient and the input gradient (a transposed convolution).
    dy = _half(rng, dt, ref.shape)
    dw = run_op("Conv2dBackpropFilter", x, dy, filter_shape=list(ws), **attrs)
    dw_ref = backprop_filter_ref(_f64(x), _f64(dy), ws, **attrs)
    dw_mag = backprop_filter_ref(np.abs(_f64(x)), np.abs(_f64(dy)), ws, **attrs)
    assert_close(dw, dw_ref, dt, mag=dw_mag, terms=max(1, ref.size // ws[0]),
                 what="Conv2dBackpropFilter")


CONVT2D = [
    ((2, 3, 4, 5), (3, 2, 3, 3), {}),
    ((1, 4, 3, 3), (4, 1, 3, 2), {"strides": [2, 2], "pads": [1, 0], "groups": 2,
                                  "output_padding": [1, 0]}),
    ((0, 2, 3, 3), (2, 2, 2, 2), {}),
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("xs,ws,attrs", CONVT2D)
def test_conv_transpose2d_half(dt, xs, ws, attrs):
    rng = np.random.default_rng(2)
    groups = attrs.get("groups", 1)
    x, w = _half(rng, dt, xs), _half(rng, dt, ws)
    b = _half(rng, dt, (ws[1] * groups,))
    y = run_op("ConvTranspose2d", x, w, b, **attrs)
    ref = conv_transpose2d_ref(_f64(x), _f64(w), _f64(b), **attrs)
    mag = conv_transpose2d_ref(np.abs(_f64(x)), np.abs(_f64(w)), np.abs(_f64(b)), **attrs)
    assert_close(y, ref, dt, mag=mag, terms=ws[0] * ws[2] * ws[3] + 1,
                 what="ConvTranspose2d")


CONV3D = [
    ((2, 2, 4, 5, 3), (3, 2, 2, 3, 2), {}),
    ((1, 2, 5, 5, 5), (2, 1, 3, 3, 3), {"strides": [2, 1, 2], "pads": [1, 1, 0],
                                        "groups": 2}),
    ((0, 2, 3, 3, 3), (1, 2, 2, 2, 2), {}),
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("xs,ws,attrs", CONV3D)
def test_conv3d_half(dt, xs, ws, attrs):
    rng = np.random.default_rng(3)
    x, w, b = _half(rng, dt, xs), _half(rng, dt, ws), _half(rng, dt, ws[:1])
    y = run_op("Conv3d", x, w, b, **attrs)
    ref = conv3d_ref(_f64(x), _f64(w), _f64(b), **attrs)
    mag = conv3d_ref(np.abs(_f64(x)), np.abs(_f64(w)), np.abs(_f64(b)), **attrs)
    terms = int(np.prod(ws[1:])) + 1
    assert_close(y, ref, dt, mag=mag, terms=terms, what="Conv3d")
    dy = _half(rng, dt, ref.shape)
    dw = run_op("Conv3dBackpropFilter", x, dy, filter_shape=list(ws), **attrs)
    dw_ref = conv3d_backprop_filter_ref(_f64(x), _f64(dy), ws, **attrs)
    dw_mag = conv3d_backprop_filter_ref(np.abs(_f64(x)), np.abs(_f64(dy)), ws, **attrs)
    assert_close(dw, dw_ref, dt, mag=dw_mag, terms=max(1, ref.size // ws[0]),
                 what="Conv3dBackpropFilter")
    # The input gradient is ConvTranspose3d of dy with the same filter.
    if x.size:
        pads, strides = attrs.get("pads", [0, 0, 0]), attrs.get("strides", [1, 1, 1])
        back = dict(attrs, output_padding=[
            (xs[2 + i] + 2 * pads[i] - (ws[2 + i] - 1) - 1) % strides[i] for i in range(3)])
        dx = run_op("ConvTranspose3d", dy, w, **back)
        dx_ref = conv_transpose3d_ref(_f64(dy), _f64(w), **back)
        dx_mag = conv_transpose3d_ref(np.abs(_f64(dy)), np.abs(_f64(w)), **back)
        assert dx.shape == xs
        assert_close(dx, dx_ref, dt, mag=dx_mag, terms=int(np.prod(ws)),
                     what="ConvTranspose3d")


# ------------------------------------------------------------ pooling

POOL2D = [
    ((2, 3, 7, 6), {"kernel_size": [2, 2]}),
    ((1, 2, 5, 8), {"kernel_size": [3, 3], "strides": [1, 1], "pads": [1, 1]}),
    ((1, 2, 7, 7), {"kernel_size": [3, 3], "strides": [2, 2], "ceil_mode": True}),
    ((0, 2, 6, 5), {"kernel_size": [2, 2]}),
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,attrs", POOL2D)
def test_max_pool2d_half(dt, shape, attrs):
    rng = np.random.default_rng(4)
    x = _half(rng, dt, shape)
    y = run_op("MaxPool2d", x, **attrs)
    # The maximum of 16-bit values is one of them: exact.
    np.testing.assert_array_equal(_f64(y), max_pool2d_ref(_f64(x), **attrs))
    ref_idx = max_pool2d_indices_ref(_f64(x), **attrs)
    outs = run_op("MaxPool2dIndices", x, **attrs)
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    np.testing.assert_array_equal(outs[-1], ref_idx)
    dy = _half(rng, dt, ref_idx.shape)
    dx = run_op("MaxPool2dGrad", x, dy, **attrs)
    dx_ref = max_pool2d_grad_ref(_f64(x), _f64(dy), **attrs)
    mag = max_pool2d_grad_ref(_f64(x), np.abs(_f64(dy)), **attrs)
    assert_close(dx, dx_ref, dt, mag=mag, terms=4, what="MaxPool2dGrad")


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,attrs", POOL2D)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool2d_half(dt, shape, attrs, count_include_pad):
    rng = np.random.default_rng(5)
    x = _half(rng, dt, shape)
    k = int(np.prod(attrs["kernel_size"] * (2 // len(attrs["kernel_size"]))))
    y = run_op("AvgPool2d", x, count_include_pad=count_include_pad, **attrs)
    ref = avg_pool2d_ref(_f64(x), count_include_pad=count_include_pad, **attrs)
    mag = avg_pool2d_ref(np.abs(_f64(x)), count_include_pad=count_include_pad, **attrs)
    assert_close(y, ref, dt, mag=mag, terms=k, what="AvgPool2d")
    dy = _half(rng, dt, ref.shape)
    dx = run_op("AvgPool2dGrad", x, dy, count_include_pad=count_include_pad, **attrs)
    dx_ref = avg_pool2d_grad_ref(_f64(x), _f64(dy), count_include_pad=count_include_pad,
                                 **attrs)
    dx_mag = avg_pool2d_grad_ref(_f64(x), np.abs(_f64(dy)),
                                 count_include_pad=count_include_pad, **attrs)
    assert_close(dx, dx_ref, dt, mag=dx_mag, terms=k, what="AvgPool2dGrad")


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,out", [((2, 3, 7, 6), [3, 2]), ((1, 2, 5, 5), [1, 1]),
                                       ((2, 2, 4, 4), [4, 4]), ((0, 2, 3, 3), [1, 1])])
def test_adaptive_and_global_avg_pool2d_half(dt, shape, out):
    rng = np.random.default_rng(6)
    x = _half(rng, dt, shape)
    terms = int(np.prod(shape[2:]))
    y = run_op("AdaptiveAvgPool2d", x, output_size=out)
    ref = adaptive_avg_pool2d_ref(_f64(x), out)
    mag = adaptive_avg_pool2d_ref(np.abs(_f64(x)), out)
    assert_close(y, ref, dt, mag=mag, terms=terms, what="AdaptiveAvgPool2d")
    dy = _half(rng, dt, ref.shape)
    dx = run_op("AdaptiveAvgPool2dGrad", x, dy, output_size=out)
    dx_ref = adaptive_avg_pool2d_grad_ref(_f64(x), _f64(dy), out)
    dx_mag = adaptive_avg_pool2d_grad_ref(_f64(x), np.abs(_f64(dy)), out)
    assert_close(dx, dx_ref, dt, mag=dx_mag, terms=terms, what="AdaptiveAvgPool2dGrad")


POOL3D = [
    ((2, 2, 4, 5, 4), {"kernel_size": [2, 2, 2]}),
    ((1, 2, 5, 5, 5), {"kernel_size": [3, 3, 3], "strides": [2, 1, 2], "pads": [1, 1, 1]}),
    ((0, 1, 3, 3, 3), {"kernel_size": [2, 2, 2]}),
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,attrs", POOL3D)
def test_pool3d_half(dt, shape, attrs):
    rng = np.random.default_rng(7)
    x = _half(rng, dt, shape)
    y, idx = run_op("MaxPool3d", x, **attrs)
    ref_y, ref_idx = max_pool3d_ref(_f64(x), **attrs)
    np.testing.assert_array_equal(_f64(y), ref_y)
    np.testing.assert_array_equal(idx, ref_idx)
    k = int(np.prod(attrs["kernel_size"]))
    y = run_op("AvgPool3d", x, **attrs)
    ref = avg_pool3d_ref(_f64(x), **attrs)
    mag = avg_pool3d_ref(np.abs(_f64(x)), **attrs)
    assert_close(y, ref, dt, mag=mag, terms=k, what="AvgPool3d")
    dy = _half(rng, dt, ref.shape)
    dx = run_op("AvgPool3dGrad", x, dy, **attrs)
    dx_ref = avg_pool3d_grad_ref(_f64(x), _f64(dy), **attrs)
    dx_mag = avg_pool3d_grad_ref(_f64(x), np.abs(_f64(dy)), **attrs)
    assert_close(dx, dx_ref, dt, mag=dx_mag, terms=k, what="AvgPool3dGrad")


# ------------------------------------------------------------ normalization

def _norm_mag(*refs):
    """Magnitude of a normalized result: |ref| plus its largest value (the
    float32 moments err relative to the whole row, not one element)."""
    return [np.abs(r) + (np.abs(r).max() if r.size else 0.0) for r in refs]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5, 4), (3, 2, 2, 3, 2), (0, 3, 2)])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_half(dt, shape, training):
    rng = np.random.default_rng(8)
    c = shape[1]
    x = _half(rng, dt, shape)
    gamma, beta = _half(rng, dt, (c,), 0.5, 1.5), _half(rng, dt, (c,))
    rm, rv = _half(rng, dt, (c,)), _half(rng, dt, (c,), 0.5, 2.0)
    outs = run_op("BatchNorm", x, gamma, beta, rm, rv, training=training)
    terms = max(1, x.size // c)
    if x.size == 0:  # (the batch statistics of an empty batch are NaN)
        assert outs[0].shape == shape and outs[0].dtype == numpy_dtype(dt)
        return
    refs = batch_norm_ref(*map(_f64, (x, gamma, beta, rm, rv)), training=training)
    mags = _norm_mag(*refs)
    for o, r, m, name in zip(outs, refs, mags, ("y", "batch_mean", "batch_var")):
        assert_close(o, r, dt, mag=m, terms=terms, what=f"BatchNorm {name}")
    dy, dmean, dvar = _half(rng, dt, shape), _half(rng, dt, (c,)), _half(rng, dt, (c,))
    grads = run_op("BatchNormGrad", x, gamma, rm, rv, dy, dmean, dvar, training=training)
    grefs = batch_norm_grad_ref(*map(_f64, (x, gamma, rm, rv, dy, dmean, dvar)),
                                training=training)
    for g, r, m, name in zip(grads, grefs, _norm_mag(*grefs), ("dx", "dgamma", "dbeta")):
        assert_close(g, r, dt, mag=m, terms=terms, what=f"BatchNormGrad {name}")


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,axis", [((4, 6), -1), ((2, 3, 5), 1), ((3, 1), -1),
                                        ((0, 4), -1)])
def test_layer_norm_half(dt, shape, axis):
    rng = np.random.default_rng(9)
    x = _half(rng, dt, shape)
    ns = shape[axis % len(shape):]
    gamma, beta = _half(rng, dt, ns, 0.5, 1.5), _half(rng, dt, ns)
    y = run_op("LayerNorm", x, gamma, beta, axis=axis)
    ref = layer_norm_ref(*map(_f64, (x, gamma, beta)), axis=axis)
    terms = int(np.prod(ns))
    assert_close(y, ref, dt, mag=_norm_mag(ref)[0], terms=terms, what="LayerNorm")
    dy = _half(rng, dt, shape)
    grads = run_op("LayerNormGrad", x, gamma, dy, axis=axis)
    grefs = layer_norm_grad_ref(*map(_f64, (x, gamma, dy)), axis=axis)
    lead = max(1, x.size // max(1, terms))
    for g, r, m, name in zip(grads, grefs, _norm_mag(*grefs), ("dx", "dgamma", "dbeta")):
        assert_close(g, r, dt, mag=m, terms=max(terms, lead), what=f"LayerNormGrad {name}")


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("shape,groups", [((2, 4, 3, 3), 2), ((2, 6, 5), 3),
                                          ((2, 3, 4, 4), 3),   # instance norm
                                          ((1, 4), 4)])
def test_group_and_instance_norm_half(dt, shape, groups):
    rng = np.random.default_rng(10)
    c = shape[1]
    x = _half(rng, dt, shape)
    gamma, beta = _half(rng, dt, (c,), 0.5, 1.5), _half(rng, dt, (c,))
    y = run_op("GroupNorm", x, gamma, beta, groups=groups)
    ref = group_norm_ref(*map(_f64, (x, gamma, beta)), groups)
    terms = x.size // (shape[0] * groups)
    assert_close(y, ref, dt, mag=_norm_mag(ref)[0], terms=terms, what="GroupNorm")
    dy = _half(rng, dt, shape)
    grads = run_op("GroupNormGrad", x, gamma, dy, groups=groups)
    grefs = group_norm_grad_ref(*map(_f64, (x, gamma, dy)), groups)
    for g, r, m, name in zip(grads, grefs, _norm_mag(*grefs), ("dx", "dgamma", "dbeta")):
        assert_close(g, r, dt, mag=m, terms=max(terms, x.size // c),
                     what=f"GroupNormGrad {name}")


# ------------------------------------------------------------ matmul

MATMUL = [
    ((3, 4), (4, 5), {}),
    ((2, 1, 3, 4), (3, 4, 2), {}),              # batch broadcast
    ((4,), (4, 3), {}),                          # 1-D a
    ((2, 3, 4), (4,), {}),                       # 1-D b
    ((4,), (4,), {}),                            # 0-d result
    ((4, 3), (5, 4), {"transpose_a": True, "transpose_b": True}),
    ((2, 0), (0, 3), {}),                        # empty inner: zeros
    ((0, 3), (3, 2), {}),                        # empty result
    ((17, 70), (70, 33), {}),                    # beyond one GEMM block
]


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("a_shape,b_shape,attrs", MATMUL)
def test_matmul_half(dt, a_shape, b_shape, attrs):
    rng = np.random.default_rng(11)
    a, b = _half(rng, dt, a_shape), _half(rng, dt, b_shape)

    def ref_of(a64, b64):
        if attrs.get("transpose_a"):
            a64 = np.swapaxes(a64, -1, -2)
        if attrs.get("transpose_b"):
            b64 = np.swapaxes(b64, -1, -2)
        return np.matmul(a64, b64)

    y = run_op("MatMul", a, b, **attrs)
    ref = ref_of(_f64(a), _f64(b))
    mag = ref_of(np.abs(_f64(a)), np.abs(_f64(b)))
    k = a_shape[-2] if attrs.get("transpose_a") else a_shape[-1]
    assert_close(y, ref, dt, mag=mag, terms=k, what="MatMul")


@pytest.mark.parametrize("dt", HALF_DTYPES)
def test_matmul_half_strided_input(dt):
    """A transposed view (non-contiguous) is read through its strides."""
    rng = np.random.default_rng(12)
    a, b = _half(rng, dt, (5, 3)), _half(rng, dt, (5, 4))
    at = dg.ops.transpose(dg.tensor(a), [1, 0])
    y = dg.ops.matmul(at, dg.tensor(b)).numpy()
    ref = _f64(a).T @ _f64(b)
    assert_close(y, ref, dt, mag=np.abs(_f64(a)).T @ np.abs(_f64(b)), terms=5,
                 what="MatMul of a view")


# ------------------------------------------------------------ autograd

def _grad_both(fn, arrays, dt, seed):
    """Gradients of sum(fn(*xs) * probe) in dtype dt and in float64."""
    rng = np.random.default_rng(seed)
    out = {}
    probe = None
    for dtype in (dt, "float64"):
        xs = [dg.tensor(a.astype(numpy_dtype(dtype))) for a in arrays]
        with dg.GradientTape() as tape:
            tape.watch(xs)
            y = fn(*xs)
            if probe is None:
                probe = _half(rng, dt, tuple(y.shape))
            loss = dg.ops.sum(y * dg.tensor(probe.astype(numpy_dtype(dtype))))
        out[dtype] = [g.numpy() for g in tape.gradient(loss, xs)]
    return out[dt], out["float64"]


F = dg.nn.functional

AUTOGRAD = {
    "conv2d": (lambda x, w: F.conv2d(x, w, stride=2, padding=1), [(2, 3, 6, 5), (4, 3, 3, 3)]),
    "conv_transpose2d": (lambda x, w: F.conv_transpose2d(x, w, stride=2),
                         [(1, 3, 3, 4), (3, 2, 3, 3)]),
    "conv3d": (lambda x, w: dg.ops.conv3d(x, w, pads=[1, 0, 1]),
               [(1, 2, 4, 3, 4), (3, 2, 2, 2, 2)]),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(2, 2, 5, 6)]),
    "avg_pool2d": (lambda x: F.avg_pool2d(x, 3, stride=1, padding=1), [(2, 2, 5, 6)]),
    "global_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 1), [(2, 3, 4, 5)]),
    "max_pool3d": (lambda x: dg.ops.max_pool3d(x, kernel_size=[2, 2, 2])[0],
                   [(1, 2, 4, 4, 4)]),
    "avg_pool3d": (lambda x: dg.ops.avg_pool3d(x, kernel_size=[2, 2, 2]),
                   [(1, 2, 4, 4, 4)]),
    "batch_norm": (lambda x, g, b: F.batch_norm(x, None, None, g, b, training=True),
                   [(4, 3, 2, 2), (3,), (3,)]),
    "layer_norm": (lambda x, g, b: F.layer_norm(x, [5], g, b), [(3, 4, 5), (5,), (5,)]),
    "group_norm": (lambda x, g, b: F.group_norm(x, 2, g, b), [(2, 4, 3, 3), (4,), (4,)]),
    "instance_norm": (lambda x, g, b: F.group_norm(x, 3, g, b), [(2, 3, 4, 4), (3,), (3,)]),
    "matmul": (lambda a, b: dg.ops.matmul(a, b), [(2, 3, 4), (4, 5)]),
}


@pytest.mark.parametrize("dt", HALF_DTYPES)
@pytest.mark.parametrize("name", sorted(AUTOGRAD))
def test_half_gradients_match_float64(dt, name):
    """Gradients through the tape in the 16-bit type match the float64 tape
    (itself checked against finite differences in tests/grad) within a few
    16-bit roundings of the gradient's scale."""
    fn, shapes = AUTOGRAD[name]
    rng = np.random.default_rng(13)
    arrays = [_half(rng, dt, s) for s in shapes]
    got, want = _grad_both(fn, arrays, dt, 14)
    for i, (g, r) in enumerate(zip(got, want)):
        assert g.dtype == numpy_dtype(dt), f"{name} grad {i}: dtype {g.dtype}"
        scale = np.abs(r).max() if r.size else 0.0
        bound = 4 * EPS[dt] * (np.abs(r) + scale) + TINY[dt]
        err = np.abs(g.astype(np.float64) - r)
        assert (err <= bound).all(), (
            f"{name} grad {i} [{dt}]: worst error {err.max():.3g}, scale {scale:.3g}")


@pytest.mark.parametrize("dt", HALF_DTYPES)
def test_scatter_add_half_sums_in_float32(dt):
    """ScatterAdd (the gradient of MaxPool3d) with many repeated indices:
    the sums are float32 sums rounded once, not chains of 16-bit adds."""
    rng = np.random.default_rng(15)
    x = _half(rng, dt, (6, 3))
    idx = rng.integers(0, 6, 200).astype(np.int64)
    upd = _half(rng, dt, (200, 3))
    y = run_op("ScatterAdd", x, idx, upd, axis=0)
    ref, mag = _f64(x).copy(), np.abs(_f64(x))
    np.add.at(ref, idx, _f64(upd))
    np.add.at(mag, idx, np.abs(_f64(upd)))
    assert_close(y, ref, dt, mag=mag, terms=200, what="ScatterAdd")


@pytest.mark.parametrize("dt", HALF_DTYPES)
def test_half_conv_bias_relu_graph_mode(dt):
    """In a compiled graph (fused Conv2dBiasAct, call-site state) the 16-bit
    kernels stay within two 16-bit roundings of float64, like eager mode (the
    fused kernel adds the bias before its one rounding, eager after it), and
    the second run of the graph repeats the first bit for bit."""
    rng = np.random.default_rng(16)
    x, w, b = _half(rng, dt, (2, 3, 6, 6)), _half(rng, dt, (4, 3, 3, 3)), _half(rng, dt, (4,))

    def net(x, w, b):
        y = F.conv2d(x, w, padding=1) + dg.ops.reshape(b, [1, 4, 1, 1])
        return F.max_pool2d(dg.ops.relu(y), 2)

    def ref_net(x, w, b):
        y = np.maximum(conv2d_ref(x, w, b, pads=(1, 1)), 0.0)
        return max_pool2d_ref(y, kernel_size=[2, 2])

    ref = ref_net(*map(_f64, (x, w, b)))
    mag = ref_net(*(np.abs(_f64(v)) for v in (x, w, b)))
    bound = 2 * EPS[dt] * (np.abs(ref) + mag) + TINY[dt]
    args = [dg.tensor(v) for v in (x, w, b)]
    compiled = dg.function(net)
    first = compiled(*args).numpy()
    for y in (net(*args).numpy(), first):
        assert y.dtype == numpy_dtype(dt)
        assert (np.abs(_f64(y) - ref) <= bound).all()
    np.testing.assert_array_equal(compiled(*args).numpy(), first)


WIDENED_OPS = ["Conv2d", "Conv2dBiasAct", "ConvTranspose2d", "Conv2dBackpropFilter",
               "Conv3d", "ConvTranspose3d", "Conv3dBackpropFilter", "MaxPool2d",
               "MaxPool2dIndices", "MaxPool2dGrad", "AvgPool2d", "AvgPool2dGrad",
               "AdaptiveAvgPool2d", "AdaptiveAvgPool2dGrad", "MaxPool3d", "AvgPool3d",
               "AvgPool3dGrad", "BatchNorm", "BatchNormGrad", "LayerNorm", "LayerNormGrad",
               "GroupNorm", "GroupNormGrad", "MatMul", "ScatterAdd"]


@pytest.mark.parametrize("op", WIDENED_OPS)
def test_cpu_eigen_registers_both_half_types(op):
    """cpu_eigen itself serves float16 and bfloat16 (mkldnn, when present,
    may also serve bfloat16 for some; the values above were checked with
    DRAGON_DISABLE_PLUGINS=mkldnn too)."""
    kinds = {d for k in dg._C.kernels(op) if k.get("plugin") == "cpu_eigen"
             for d in k["dtypes"].split(", ")}
    assert {"float16", "bfloat16"} <= kinds, f"{op}: cpu_eigen serves {sorted(kinds)}"
