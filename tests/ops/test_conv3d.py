"""Conv3d, ConvTranspose3d and Conv3dBackpropFilter against float64 NumPy
references and torch (docs/ops.md, "3-D convolution")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError


def _pads(pads):
    return (list(pads[:3]), list(pads[3:])) if len(pads) == 6 else (list(pads), list(pads))


def _taps(w):
    return np.ndindex(*w.shape[2:])


def _window(xp, k, out, strides, dilations):
    return xp[(slice(None), slice(None)) + tuple(
        slice(k[i] * dilations[i], k[i] * dilations[i] + strides[i] * (out[i] - 1) + 1,
              strides[i]) for i in range(3))]


def conv3d_ref(x, w, b=None, strides=(1, 1, 1), pads=(0, 0, 0), dilations=(1, 1, 1), groups=1):
    pb, pe = _pads(pads)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)))
    out = [(xp.shape[2 + i] - dilations[i] * (w.shape[2 + i] - 1) - 1) // strides[i] + 1
           for i in range(3)]
    O, cg = w.shape[0], w.shape[1]
    og = O // groups
    y = np.zeros((x.shape[0], O, *out))
    for g in range(groups):
        for k in _taps(w):
            win = _window(xp[:, g * cg:(g + 1) * cg], k, out, strides, dilations)
            y[:, g * og:(g + 1) * og] += np.einsum("ncdhw,oc->nodhw", win,
                                                  w[g * og:(g + 1) * og, :, k[0], k[1], k[2]])
    if b is not None:
        y += b.reshape(1, -1, 1, 1, 1)
    return y


def conv_transpose3d_ref(x, w, b=None, strides=(1, 1, 1), pads=(0, 0, 0),
                         output_padding=(0, 0, 0), dilations=(1, 1, 1), groups=1):
    pb, pe = _pads(pads)
    C, og = w.shape[0], w.shape[1]
    cg = C // groups
    full = [(x.shape[2 + i] - 1) * strides[i] + dilations[i] * (w.shape[2 + i] - 1) + 1
            + output_padding[i] for i in range(3)]
    yp = np.zeros((x.shape[0], og * groups, *full))
    for g in range(groups):
        for k in _taps(w):
            contrib = np.einsum("ncdhw,co->nodhw", x[:, g * cg:(g + 1) * cg],
                                w[g * cg:(g + 1) * cg, :, k[0], k[1], k[2]])
            _window(yp[:, g * og:(g + 1) * og], k, x.shape[2:], strides, dilations)[...] += \
                contrib
    y = yp[(slice(None), slice(None)) + tuple(
        slice(pb[i], full[i] - pe[i]) for i in range(3))]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1, 1)
    return y


def conv3d_backprop_filter_ref(x, dy, filter_shape, strides=(1, 1, 1), pads=(0, 0, 0),
                               dilations=(1, 1, 1), groups=1):
    pb, pe = _pads(pads)
    xp = np.pad(x, [(0, 0), (0, 0)] + list(zip(pb, pe)))
    O, cg = filter_shape[0], filter_shape[1]
    og = O // groups
    dw = np.zeros(filter_shape)
    for g in range(groups):
        for k in np.ndindex(*filter_shape[2:]):
            win = _window(xp[:, g * cg:(g + 1) * cg], k, dy.shape[2:], strides, dilations)
            dw[g * og:(g + 1) * og, :, k[0], k[1], k[2]] = np.einsum(
                "ncdhw,nodhw->oc", win, dy[:, g * og:(g + 1) * og])
    return dw


# (x shape, w shape, attrs, with bias)
CASES = [
    ((2, 3, 5, 6, 4), (4, 3, 3, 3, 3), {}, False),
    ((1, 2, 4, 4, 4), (3, 2, 1, 1, 1), {}, True),
    ((2, 4, 7, 6, 5), (6, 2, 3, 2, 3), {"strides": [2, 1, 2], "pads": [1, 0, 1],
                                        "groups": 2}, True),
    ((1, 2, 6, 7, 6), (2, 2, 2, 3, 2), {"dilations": [2, 1, 2], "pads": [1, 2, 0, 0, 1, 1]},
     False),
    ((1, 3, 4, 5, 4), (3, 1, 3, 3, 3), {"groups": 3, "pads": [1, 1, 1]}, True),
    ((0, 2, 4, 4, 4), (2, 2, 2, 2, 2), {}, False),
    ((2, 2, 3, 3, 3), (0, 2, 2, 2, 2), {}, False),
]


def _inputs(case, dtype, seed=0):
    xs, ws, attrs, bias = case
    rng = np.random.default_rng(seed)
    out = [rng.standard_normal(xs).astype(dtype), rng.standard_normal(ws).astype(dtype)]
    if bias:
        out.append(rng.standard_normal(ws[0]).astype(dtype))
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[str(i) for i in range(len(CASES))])
def test_conv3d(case, dtype):
    OpCase.of("Conv3d", _inputs(case, dtype), conv3d_ref, attrs=case[2], tol=10).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES[:5], ids=[str(i) for i in range(5)])
@pytest.mark.parametrize("output_padding", [[0, 0, 0], [1, 0, 1]])
def test_conv_transpose3d(case, dtype, output_padding):
    xs, ws, attrs, bias = case
    strides = attrs.get("strides", [1, 1, 1])
    if any(p >= s for p, s in zip(output_padding, strides)):
        output_padding = [0, 0, 0]
    groups = attrs.get("groups", 1)
    # ConvTranspose3d's filter is [C_in, C_out / groups, k...].
    rng = np.random.default_rng(1)
    x = rng.standard_normal((xs[0], ws[0], 3, 4, 3)).astype(dtype)
    w = rng.standard_normal((ws[0], ws[1] * groups // groups, *ws[2:])).astype(dtype)
    ins = [x, w] + ([rng.standard_normal(ws[1] * groups).astype(dtype)] if bias else [])
    OpCase.of("ConvTranspose3d", ins, conv_transpose3d_ref,
              attrs=dict(attrs, output_padding=output_padding), tol=10).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES[:5], ids=[str(i) for i in range(5)])
def test_conv3d_backprop_filter(case, dtype):
    xs, ws, attrs, _ = case
    x = _inputs(case, dtype)[0]
    y = conv3d_ref(x.astype(np.float64), np.zeros(ws), **attrs)
    dy = np.random.default_rng(2).standard_normal(y.shape).astype(dtype)
    OpCase.of("Conv3dBackpropFilter", [x, dy], conv3d_backprop_filter_ref,
              attrs=dict(attrs, filter_shape=list(ws)), tol=10).check_forward()


@pytest.mark.parametrize("case", CASES[:5], ids=[str(i) for i in range(5)])
def test_matches_torch(case):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xs, ws, attrs, bias = case
    ins = _inputs(case, "float64", seed=5)
    pads = attrs.get("pads", [0, 0, 0])
    if len(pads) == 6:  # torch pads symmetrically: pad x explicitly
        pb, pe = pads[:3], pads[3:]
        x_t = F.pad(torch.from_numpy(ins[0]), [pb[2], pe[2], pb[1], pe[1], pb[0], pe[0]])
        tpad = 0
    else:
        x_t, tpad = torch.from_numpy(ins[0]), pads
    want = F.conv3d(x_t, torch.from_numpy(ins[1]),
                    torch.from_numpy(ins[2]) if bias else None,
                    stride=attrs.get("strides", 1), padding=tpad,
                    dilation=attrs.get("dilations", 1), groups=attrs.get("groups", 1))
    got = dg.ops.conv3d(*[dg.tensor(a) for a in ins], **dg.plugin_api.py_attrs("Conv3d", attrs))
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.conv3d(_z(1, 2, 4, 4), _z(2, 2, 1, 1, 1)), r"Conv3d.*input x must have rank 5"),
    (lambda: dg.ops.conv3d(_z(1, 2, 4, 4, 4), _z(2, 3, 1, 1, 1)), r"Conv3d.*does not match 2"),
    (lambda: dg.ops.conv3d(_z(1, 2, 2, 4, 4), _z(2, 2, 3, 1, 1)),
     r"Conv3d.*kernel depth 3 .* larger than the padded input depth 2"),
    (lambda: dg.ops.conv3d(_z(1, 2, 4, 4, 4), _z(2, 2, 1, 1, 1), strides=[1, 1]),
     r"Conv3d.*strides must hold 3"),
    (lambda: dg.ops.conv3d(_z(1, 2, 4, 4, 4), _z(2, 2, 1, 1, 1), pads=[-1, 0, 0]),
     r"Conv3d.*pads must be non-negative"),
    (lambda: dg.ops.conv_transpose3d(_z(1, 2, 4, 4, 4), _z(2, 2, 1, 1, 1),
                                     output_padding=[1, 0, 0]),
     r"ConvTranspose3d.*output_padding .* smaller than the strides"),
])
def test_bad_input(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


def _z(*shape):
    return dg.tensor(np.zeros(shape, np.float32))
