"""The mkldnn plugin's convolution kernels (Conv2d, Conv2dBiasAct,
ConvTranspose2d, Conv2dBackpropFilter; float32 and bfloat16).

Every numerical check also proves that oneDNN served the call: oneDNN's
verbose mode is switched on around it (``dnnl_set_verbose`` through ctypes
on the already loaded ``libdnnl.so.3``) and the primitive's ``exec`` line
must appear, so a call the plugin declined (and cpu_eigen served) fails.

References: the float64 NumPy references of the core's tests
(``tests/ops/test_conv.py``, run with the repository root as the working
directory) and cpu_eigen (pinned) in float32.

Tolerances (|got - want| <= atol + rtol * |want|, inputs in [-1, 1]):

* float32: rtol = atol = 1e-4. oneDNN accumulates in float32 in another
  order than the reference (blocked channels, Winograd is never chosen);
  with up to ~600 products per output, the rounding error stays below
  ~1e-5 relative to the output's scale.
* bfloat16: rtol = atol = 2e-2. The reference sees the same bfloat16
  inputs (widened exactly to float64); oneDNN accumulates in float32 and
  rounds the result to bfloat16 (8 significant bits: relative error up to
  2**-8 ~ 4e-3 per rounding; bias and post-op add one more rounding each).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pathlib
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest
from dragon_sdk.testing import (OpCase, check_bad_inputs,
                                check_eager_vs_graph, strided)

import dragon_core as dg
from tests.ops.test_conv import (backprop_filter_ref, conv2d_ref,
                                 conv_transpose2d_ref)

OPS = ("Conv2d", "Conv2dBiasAct", "ConvTranspose2d", "Conv2dBackpropFilter")
DTYPES = ("float32", "bfloat16")
LAYOUTS = ("contiguous", "strided")
TOL = {"float32": (1e-4, 1e-4), "bfloat16": (2e-2, 2e-2)}
PRIMITIVE = {"Conv2d": "convolution,", "Conv2dBiasAct": "convolution,",
             "ConvTranspose2d": "deconvolution,",
             "Conv2dBackpropFilter": "convolution,"}

_DNNL = ctypes.CDLL("libdnnl.so.3")  # the plugin's copy (same soname)


@contextlib.contextmanager
def onednn_execs_lines(capfd):
    """The raw ``onednn_verbose,exec`` lines of the block."""
    capfd.readouterr()
    _DNNL.dnnl_set_verbose(1)
    lines: list = []
    try:
        yield lines
    finally:
        _DNNL.dnnl_set_verbose(0)
        lines.extend(ln for ln in capfd.readouterr().out.splitlines()
                     if ln.startswith("onednn_verbose,exec,cpu,"))


@contextlib.contextmanager
def onednn_execs(capfd):
    """Collects the primitives oneDNN executes inside the block as
    ``[(primitive, implementation, prop_kind), ...]``."""
    execs: list = []
    try:
        with onednn_execs_lines(capfd) as lines:
            yield execs
    finally:
        execs.extend(tuple(ln.split(",")[3:6]) for ln in lines)


def assert_served(execs, op):
    """The call ran oneDNN's primitive for op (not a declined fallback): its
    convolution, or the matmul of the GEMM path that float32 calls with an
    output map of at most 4 pixels take (test_mkldnn_conv_gemm.py)."""
    kind = PRIMITIVE[op].rstrip(",")
    prop = "backward_weights" if op == "Conv2dBackpropFilter" else \
        "forward_inference"
    hits = [e for e in execs if (e[0] == kind and e[2] == prop) or e[0] == "matmul"]
    assert hits, f"{op}: oneDNN ran no {kind}/{prop}: {execs}"


# ---------------------------------------------------------------- cases

#: (x shape, w shape, with bias, attributes) for Conv2d / Conv2dBiasAct.
CONV = [
    ((2, 3, 7, 9), (4, 3, 3, 3), True, {}),
    ((1, 1, 5, 5), (1, 1, 1, 1), False, {}),                      # 1x1x1
    ((3, 5, 6, 7), (7, 5, 1, 1), True, {}),                       # 1x1
    ((2, 4, 9, 8), (6, 4, 3, 2), True,
     {"strides": [2, 3], "pads": [1, 0, 2, 1]}),                  # asym pads
    ((1, 3, 11, 10), (5, 3, 3, 3), False,
     {"dilations": [2, 3], "pads": [2, 1]}),                      # dilation
    ((2, 6, 8, 7), (9, 2, 3, 3), True, {"groups": 3, "pads": [1, 1]}),
    ((2, 16, 9, 9), (16, 1, 3, 3), True,
     {"groups": 16, "strides": [2, 2], "pads": [1, 1]}),          # depthwise
    ((1, 5, 13, 6), (5, 1, 5, 3), False,
     {"groups": 5, "dilations": [1, 2], "pads": [2, 0, 0, 2]}),   # odd depthwise
    ((2, 32, 10, 11), (48, 32, 3, 3), True,
     {"pads": [1, 1]}),                                           # blocked paths
    ((3, 17, 12, 9), (33, 17, 3, 3), True,
     {"strides": [2, 1], "pads": [0, 1, 1, 0]}),                  # odd channels
    ((1, 2, 5, 5), (3, 2, 5, 5), True, {}),                       # 1x1 output
    ((1, 2, 4, 4), (3, 2, 2, 2), True, {"strides": [3, 3]}),      # skipped row
    ((1, 2, 3, 3), (2, 2, 2, 2), True, {"pads": [3, 3]}),         # pads > kernel
    ((2, 3, 10, 9), (4, 3, 2, 2), False,
     {"strides": [3, 4], "pads": [2, 1, 0, 3]}),                  # stride > kernel
    ((2, 3, 12, 11), (32, 3, 7, 7), True,
     {"strides": [2, 2], "pads": [3, 3]}),                        # first layer
]

#: (x shape, w shape, with bias, attributes) for ConvTranspose2d.
TRANSPOSE = [
    ((2, 3, 4, 5), (3, 4, 3, 3), True, {}),
    ((1, 4, 3, 4), (4, 2, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 0, 0, 1], "output_padding": [1, 0]}),
    ((2, 3, 5, 4), (3, 2, 2, 3), False,
     {"strides": [3, 2], "output_padding": [2, 1], "dilations": [2, 1]}),
    ((1, 6, 3, 3), (6, 2, 3, 2), True, {"groups": 3, "strides": [1, 2]}),
    ((2, 8, 4, 4), (8, 1, 3, 3), True,
     {"groups": 8, "strides": [2, 2], "pads": [1, 1],
      "output_padding": [1, 1]}),                                 # depthwise
    ((3, 5, 4, 6), (5, 7, 1, 1), False, {}),                      # 1x1
    ((1, 3, 4, 3), (3, 2, 2, 2), True,
     {"strides": [3, 4], "pads": [1, 0, 0, 2], "output_padding": [2, 3]}),
    ((2, 32, 6, 5), (32, 24, 3, 3), True,
     {"strides": [2, 2], "pads": [1, 1], "output_padding": [1, 0]}),
]

#: (x shape, filter shape, attributes) for Conv2dBackpropFilter.
FILTER = [
    ((2, 3, 7, 6), (4, 3, 3, 3), {}),
    ((1, 4, 9, 9), (6, 2, 3, 2),
     {"strides": [2, 3], "pads": [1, 0, 2, 1], "groups": 2}),
    ((2, 3, 9, 8), (2, 3, 2, 3), {"dilations": [3, 2], "pads": [1, 1]}),
    ((2, 8, 7, 7), (8, 1, 3, 3), {"groups": 8, "pads": [1, 1]}),  # depthwise
    ((3, 5, 4, 5), (7, 5, 1, 1), {}),                              # 1x1
    ((2, 32, 9, 10), (40, 32, 3, 3), {"pads": [1, 1]}),
    ((1, 2, 4, 4), (3, 2, 2, 2), {"strides": [3, 3]}),             # skipped row
    ((2, 3, 10, 9), (4, 3, 2, 2), {"strides": [3, 4], "pads": [2, 1, 0, 3]}),
]


def _id(case):
    x, w = case[0], case[1]
    tag = "x".join(map(str, x)) + "_" + "x".join(map(str, w))
    attrs = case[-1]
    tag += "".join(f"-{k}={'.'.join(map(str, v)) if isinstance(v, list) else v}"
                   for k, v in attrs.items())
    return tag + ("-bias" if len(case) == 4 and case[2] else "")


def _pads4(pads):
    pads = list(pads)
    return pads + pads if len(pads) == 2 else pads


def _window_shape(xs, fs, attrs):
    """Conv2d's output shape for input xs and filter fs."""
    s = attrs.get("strides", [1, 1])
    d = attrs.get("dilations", [1, 1])
    pt, pl, pb, pr = _pads4(attrs.get("pads", [0, 0]))
    ho = (xs[2] + pt + pb - d[0] * (fs[2] - 1) - 1) // s[0] + 1
    wo = (xs[3] + pl + pr - d[1] * (fs[3] - 1) - 1) // s[1] + 1
    return (xs[0], fs[0], ho, wo)


def _arrays(shapes, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    np_dtype = ml_dtypes.bfloat16 if dtype == "bfloat16" else np.float32
    out = [rng.uniform(-1.0, 1.0, s).astype(np_dtype) for s in shapes]
    return [strided(a) for a in out] if layout == "strided" else out


def _check(op, arrays, reference, attrs, dtype, capfd):
    """The op matches the float64 reference within TOL[dtype], served by
    oneDNN."""
    rtol, atol = TOL[dtype]
    case = OpCase.of(op, arrays, reference, attrs=attrs, rtol=rtol, atol=atol)
    with onednn_execs(capfd) as execs:
        case.check_forward()
    assert_served(execs, op)


# ------------------------------------------------------ forward numerics


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", CONV, ids=map(_id, CONV))
def test_conv2d_matches_reference(xs, ws, bias, attrs, dtype, layout, capfd):
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    arrays = _arrays(shapes, dtype, layout, seed=sum(xs) + sum(ws))
    _check("Conv2d", arrays, conv2d_ref, attrs, dtype, capfd)


def _bias_act_ref(x, w, b=None, activation="relu", **attrs):
    y = conv2d_ref(x, w, b, **attrs)
    return np.maximum(y, 0.0) if activation == "relu" else y


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", CONV[::2], ids=map(_id, CONV[::2]))
def test_conv2d_bias_act_matches_reference(xs, ws, bias, attrs, dtype,
                                           activation, capfd):
    shapes = [xs, ws] + ([(ws[0],)] if bias else [])
    arrays = _arrays(shapes, dtype, "contiguous", seed=sum(xs) + sum(ws))
    _check("Conv2dBiasAct", arrays, _bias_act_ref,
           {**attrs, "activation": activation}, dtype, capfd)


def test_conv2d_bias_act_relu_zeroes_negatives(capfd):
    """The post-op really applies: a filter that makes every output
    negative gives zeros with relu and the negatives without."""
    x = np.ones((1, 2, 4, 4), np.float32)
    w = -np.ones((3, 2, 3, 3), np.float32)
    b = np.array([0.5, -1.0, 2.0], np.float32)
    args = [dg.tensor(a) for a in (x, w, b)]
    with onednn_execs(capfd) as execs:
        relu = dg.ops.conv2d_bias_act(*args, activation="relu").numpy()
        none = dg.ops.conv2d_bias_act(*args, activation="none").numpy()
    assert_served(execs, "Conv2dBiasAct")
    np.testing.assert_array_equal(relu, np.zeros((1, 3, 2, 2), np.float32))
    np.testing.assert_array_equal(
        none, np.broadcast_to((-18.0 + b).reshape(1, 3, 1, 1), (1, 3, 2, 2)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, ws, bias, attrs", TRANSPOSE,
                         ids=map(_id, TRANSPOSE))
def test_conv_transpose2d_matches_reference(xs, ws, bias, attrs, dtype,
                                            layout, capfd):
    groups = attrs.get("groups", 1)
    shapes = [xs, ws] + ([(ws[1] * groups,)] if bias else [])
    arrays = _arrays(shapes, dtype, layout, seed=sum(xs) + sum(ws))
    _check("ConvTranspose2d", arrays, conv_transpose2d_ref, attrs, dtype,
           capfd)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("xs, fs, attrs", FILTER, ids=map(_id, FILTER))
def test_conv2d_backprop_filter_matches_reference(xs, fs, attrs, dtype,
                                                  layout, capfd):
    shapes = [xs, _window_shape(xs, fs, attrs)]
    arrays = _arrays(shapes, dtype, layout, seed=sum(xs) + sum(fs))
    _check("Conv2dBackpropFilter", arrays, backprop_filter_ref,
           {"filter_shape": list(fs), **attrs}, dtype, capfd)


# ---------------------------------------------------- against cpu_eigen


@contextlib.contextmanager
def pinned(target):
    for op in OPS:
        dg.plugins.pin(op, "cpu", target)
    try:
        yield
    finally:
        for op in OPS:
            dg.plugins.unpin(op, "cpu")


def _all_three(x, w, b, attrs):
    """Conv2d, its transpose applied to the output and the filter
    gradient, as NumPy float32 (``attrs`` in the schema's layout)."""
    attrs = dg.plugin_api.py_attrs("Conv2d", attrs)
    y = dg.ops.conv2d(x, w, b, **attrs)
    t = dg.ops.conv_transpose2d(y, w, **attrs)
    f = dg.ops.conv2d_backprop_filter(x, y, list(w.shape), **attrs)
    return [a.numpy() for a in (y, t, f)]


@pytest.mark.parametrize("xs, ws, bias, attrs", CONV, ids=map(_id, CONV))
def test_float32_matches_cpu_eigen(xs, ws, bias, attrs, capfd):
    x, w, b = [dg.tensor(a) for a in _arrays([xs, ws, (ws[0],)], "float32",
                                             "contiguous", seed=7)]
    b = b if bias else None
    with onednn_execs(capfd) as execs:
        ours = _all_three(x, w, b, attrs)
    kinds = {e[0] for e in execs}
    assert kinds >= {"convolution", "deconvolution"} or "matmul" in kinds, kinds
    with pinned("cpu_eigen"):
        ref = _all_three(x, w, b, attrs)
    for name, a, r in zip(("conv2d", "transpose", "filter"), ours, ref):
        scale = max(1.0, float(np.abs(r).max()))
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=name)


# ------------------------------------------------------------ edge cases


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_batch(dtype, capfd):
    """N = 0: empty outputs, and a zero filter gradient (the sum over no
    images), in both dtypes; nothing reaches oneDNN."""
    x, w, dy = [dg.tensor(a) for a in _arrays(
        [(0, 3, 6, 5), (4, 3, 3, 3), (0, 4, 4, 3)], dtype, "contiguous", 1)]
    with onednn_execs(capfd) as execs:
        y = dg.ops.conv2d(x, w)
        t = dg.ops.conv_transpose2d(dy, w)
        dw = dg.ops.conv2d_backprop_filter(x, dy, [4, 3, 3, 3])
    assert tuple(y.shape) == (0, 4, 4, 3) and tuple(t.shape) == (0, 3, 6, 5)
    np.testing.assert_array_equal(dw.numpy().astype(np.float32),
                                  np.zeros((4, 3, 3, 3), np.float32))
    assert str(dw.dtype) == dtype
    assert not [e for e in execs if e[0] != "reorder"], execs


def test_zero_channels_are_declined_to_cpu_eigen(capfd):
    """oneDNN has no zero-channel convolution: supports() declines and
    cpu_eigen gives the defined result (the bias alone)."""
    x = dg.tensor(np.ones((2, 0, 5, 5), np.float32))
    w = dg.tensor(np.ones((3, 0, 3, 3), np.float32))
    b = dg.tensor(np.array([1.0, -2.0, 3.0], np.float32))
    with onednn_execs(capfd) as execs:
        y = dg.ops.conv2d(x, w, b).numpy()
    assert execs == []
    np.testing.assert_array_equal(
        y, np.broadcast_to(np.array([1.0, -2.0, 3.0], np.float32)
                           .reshape(1, 3, 1, 1), (2, 3, 3, 3)))


def test_empty_height_inside_padding(capfd):
    """x with an empty height and pads around it: every tap reads the
    padding. Conv2d is then declined (oneDNN has no such convolution) and
    cpu_eigen gives the bias; the filter gradient is zero (the plugin's own
    result, no primitive needed)."""
    x = dg.tensor(np.ones((1, 2, 0, 3), np.float32))
    w = dg.tensor(np.ones((3, 2, 2, 2), np.float32))
    b = dg.tensor(np.array([0.5, -1.0, 2.0], np.float32))
    dy = dg.tensor(np.ones((1, 3, 1, 4), np.float32))
    with onednn_execs(capfd) as execs:
        y = dg.ops.conv2d(x, w, b, pads=[1, 1]).numpy()
        dw = dg.ops.conv2d_backprop_filter(x, dy, [3, 2, 2, 2],
                                           pads=[1, 1]).numpy()
    assert execs == []
    np.testing.assert_array_equal(
        y, np.broadcast_to(np.array([0.5, -1.0, 2.0], np.float32)
                           .reshape(1, 3, 1, 1), (1, 3, 1, 4)))
    np.testing.assert_array_equal(dw, np.zeros((3, 2, 2, 2), np.float32))


def test_sliced_input_is_read_in_place():
    """A channel slice and a spatial crop of a bigger tensor (non-dense
    strides) give the result of its dense copy."""
    rng = np.random.default_rng(5)
    big = rng.uniform(-1, 1, (3, 10, 12, 14)).astype(np.float32)
    w = rng.uniform(-1, 1, (6, 4, 3, 3)).astype(np.float32)
    view = dg.tensor(big)[:, 2:6, 1:10, 3:13]
    dense = big[:, 2:6, 1:10, 3:13]
    got = dg.ops.conv2d(view, dg.tensor(w), pads=[1, 1]).numpy()
    np.testing.assert_allclose(got, conv2d_ref(dense.astype(np.float64),
                                               w.astype(np.float64),
                                               pads=[1, 1]),
                               rtol=1e-4, atol=1e-4)


def test_negative_strides_are_declined_to_cpu_eigen(capfd):
    """Flipped views (negative strides) cannot be described to oneDNN: every
    conv op declines them, and cpu_eigen (given the core's dense copy)
    returns the result of that copy. (The kernels used to accept the call
    and fail with "could not construct a memory descriptor".)"""
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, (2, 3, 6, 5)).astype(np.float32)
    w = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, (4,)).astype(np.float32)
    dy = rng.uniform(-1, 1, (2, 4, 4, 3)).astype(np.float32)
    f64 = lambda a: np.ascontiguousarray(a, np.float64)  # noqa: E731
    for name, call, want in [
        ("conv2d x", lambda: dg.ops.conv2d(dg.from_numpy(x[:, :, ::-1]), dg.tensor(w)),
         conv2d_ref(f64(x[:, :, ::-1]), f64(w))),
        ("conv2d w", lambda: dg.ops.conv2d(dg.tensor(x), dg.from_numpy(w[..., ::-1])),
         conv2d_ref(f64(x), f64(w[..., ::-1]))),
        ("bias act b", lambda: dg.ops.conv2d_bias_act(dg.tensor(x), dg.tensor(w),
                                                      dg.from_numpy(b[::-1]),
                                                      activation="none"),
         conv2d_ref(f64(x), f64(w), f64(b[::-1]))),
        ("transpose", lambda: dg.ops.conv_transpose2d(dg.from_numpy(dy[:, ::-1]),
                                                      dg.tensor(w)),
         conv_transpose2d_ref(f64(dy[:, ::-1]), f64(w))),
        ("filter", lambda: dg.ops.conv2d_backprop_filter(
            dg.tensor(x), dg.from_numpy(dy[..., ::-1, :]), [4, 3, 3, 3]),
         backprop_filter_ref(f64(x), f64(dy[..., ::-1, :]), [4, 3, 3, 3])),
    ]:
        with onednn_execs(capfd) as execs:
            got = call().numpy()
        assert not [e for e in execs if "convolution" in e[0]], (name, execs)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=name)


#: Variants skipped by the bad-input checks: none (None inputs included).
KNOWN_BAD_INPUT_ISSUES: list = []


def test_bad_inputs_raise_clean_errors():
    """Malformed calls are rejected by the shape rules (naming the op) and
    never crash the plugin."""
    x = np.ones((1, 2, 5, 5), np.float32)
    cases = [
        ("Conv2d", [x, np.ones((3, 2, 3, 3), np.float32)], {"pads": [1, 1]}),
        ("ConvTranspose2d", [x, np.ones((2, 3, 3, 3), np.float32)],
         {"strides": [2, 2], "output_padding": [1, 1]}),
        ("Conv2dBackpropFilter", [x, np.ones((1, 3, 3, 3), np.float32)],
         {"filter_shape": [3, 2, 3, 3]}),
        ("Conv2dBiasAct", [x, np.ones((3, 2, 3, 3), np.float32),
                           np.ones(3, np.float32)], {"activation": "relu"}),
    ]
    for op, inputs, attrs in cases:
        report = check_bad_inputs(op, inputs, skip=KNOWN_BAD_INPUT_ISSUES,
                                  **attrs)
        assert len(report) > 20, (op, report)


# ------------------------------------------------------------ gradients


def _net(x, w1, b1, w2, w3):
    """A small conv net: conv + bias + relu, a strided depthwise conv, a
    transposed conv back to the input size."""
    h = dg.ops.relu(dg.ops.conv2d(x, w1, b1, pads=[1, 1]))
    h = dg.ops.conv2d(h, w2, strides=[2, 2], pads=[1, 1], groups=4)
    return dg.ops.conv_transpose2d(h, w3, strides=[2, 2], pads=[1, 1],
                                   output_padding=[1, 1])


def _net_grads(dtype, seed=11):
    rng = np.random.default_rng(seed)
    shapes = [(2, 3, 8, 8), (4, 3, 3, 3), (4,), (4, 1, 3, 3), (4, 3, 3, 3)]
    arrays = [rng.uniform(-1, 1, s) for s in shapes]
    tensors = [dg.tensor(a.astype(dtype)) for a in arrays]
    c = dg.tensor(rng.uniform(-1, 1, (2, 3, 8, 8)).astype(dtype))
    with dg.GradientTape() as tape:
        for t in tensors:
            tape.watch(t)
        loss = dg.ops.sum(_net(*tensors) * c)
    return [g.numpy() for g in tape.gradient(loss, tensors)]


def test_net_gradients_match_cpu_eigen_and_float64(capfd):
    """Gradients through GradientTape (every conv op's forward and the
    gradient ops) agree with cpu_eigen pinned in float32 and with the
    float64 run (cpu_eigen's float64 kernels, whose gradient rules the core
    checks against finite differences)."""
    with onednn_execs(capfd) as execs:
        ours = _net_grads(np.float32)
    kinds = {(e[0], e[2]) for e in execs}
    assert {("convolution", "forward_inference"),
            ("deconvolution", "forward_inference"),
            ("convolution", "backward_weights")} <= kinds, kinds
    with pinned("cpu_eigen"):
        eigen = _net_grads(np.float32)
    exact = _net_grads(np.float64)
    for i, (a, e, r) in enumerate(zip(ours, eigen, exact)):
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(a, e, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"input {i} vs cpu_eigen")
        np.testing.assert_allclose(a, r, rtol=1e-4, atol=1e-5 * scale,
                                   err_msg=f"input {i} vs float64")


#: (op, x shape, w shape, attributes) for the directional checks.
DIRECTIONAL = [
    ("conv2d", (2, 3, 7, 6), (4, 3, 3, 2),
     {"strides": [2, 1], "pads": [1, 0, 0, 1]}),
    ("conv2d", (1, 6, 6, 6), (6, 2, 3, 3), {"groups": 3, "dilations": [2, 1]}),
    ("conv_transpose2d", (2, 4, 3, 4), (4, 3, 3, 3),
     {"strides": [2, 2], "pads": [1, 1], "output_padding": [1, 0]}),
]


def _pairing(op, attrs, c):
    """L(x, w) = <op(x, w), c>, a bilinear form."""
    py = dg.plugin_api.py_attrs("Conv2d", attrs)

    def loss(x, w):
        return dg.ops.sum(getattr(dg.ops, op)(x, w, **py) * c)
    return loss


@pytest.mark.parametrize("op, xs, ws, attrs", DIRECTIONAL,
                         ids=[f"{c[0]}-{_id(c[1:])}" for c in DIRECTIONAL])
def test_float32_gradients_match_directional_differences(op, xs, ws, attrs,
                                                         capfd):
    """First and second order through the oneDNN kernels in float32. L is
    bilinear in (x, w), so central differences along any direction are
    exact up to rounding: <dL/dx, u> = (L(x + u) - L(x - u)) / 2, and for
    the second order, H(w) = <dL/dx(w), u> is linear in w, so
    <dH/dw, v> = (H(w + v) - H(w - v)) / 2 (the gradient of a gradient
    runs Conv2d, ConvTranspose2d and Conv2dBackpropFilter again)."""
    rng = np.random.default_rng(sum(xs) + sum(ws))
    x, w, u, v = [rng.uniform(-1, 1, s).astype(np.float32)
                  for s in (xs, ws, xs, ws)]
    y_shape = getattr(dg.ops, op)(dg.tensor(x), dg.tensor(w),
                                  **dg.plugin_api.py_attrs("Conv2d", attrs)).shape
    c = dg.tensor(rng.uniform(-1, 1, tuple(y_shape)).astype(np.float32))
    loss = _pairing(op, attrs, c)

    def value(xa, wa):
        return float(loss(dg.tensor(xa), dg.tensor(wa)).item())

    def hvp(wa):
        """H(w) = <dL/dx at w, u>, and its gradient with respect to w."""
        xt, wt = dg.tensor(x), dg.tensor(wa)
        with dg.GradientTape() as outer:
            outer.watch(wt)
            with dg.GradientTape() as inner:
                inner.watch(xt)
                out = loss(xt, wt)
            h = dg.ops.sum(inner.gradient(out, xt) * dg.tensor(u))
        return float(h.item()), outer.gradient(h, wt).numpy()

    with onednn_execs(capfd) as execs:
        xt, wt = dg.tensor(x), dg.tensor(w)
        with dg.GradientTape() as tape:
            tape.watch([xt, wt])
            out = loss(xt, wt)
        dx, dw = [g.numpy() for g in tape.gradient(out, [xt, wt])]
        h0, dh = hvp(w)
        h_plus, _ = hvp(w + v)
        h_minus, _ = hvp(w - v)
    assert {e[0] for e in execs} >= {"convolution", "deconvolution"}
    scale = np.abs(x).sum() * np.abs(w).sum() * 1e-6  # float32 rounding
    fd_x = (value(x + u, w) - value(x - u, w)) / 2
    fd_w = (value(x, w + v) - value(x, w - v)) / 2
    assert abs(np.sum(dx * u) - fd_x) <= scale, (np.sum(dx * u), fd_x)
    assert abs(np.sum(dw * v) - fd_w) <= scale, (np.sum(dw * v), fd_w)
    assert abs(h0 - np.sum(dx * u)) <= scale
    assert abs(np.sum(dh * v) - (h_plus - h_minus) / 2) <= scale, (
        np.sum(dh * v), (h_plus - h_minus) / 2)


def test_eager_matches_graph_with_gradients():
    """Eager and compiled graphs agree (the graph may fuse conv + bias +
    relu into Conv2dBiasAct), gradients included."""
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (2, 3, 8, 8)).astype(np.float32)
    w1 = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    b1 = rng.uniform(-1, 1, (4,)).astype(np.float32)
    w2 = rng.uniform(-1, 1, (4, 1, 3, 3)).astype(np.float32)
    w3 = rng.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)
    check_eager_vs_graph(_net, x, w1, b1, w2, w3, grads=True, rtol=1e-5,
                         atol=1e-5)


_LAYOUT_SCRIPT = """
import numpy as np, dragon_core as dg
from tests.ops.test_conv import (backprop_filter_ref, conv2d_ref,
                                 conv_transpose2d_ref)
r = np.random.default_rng(0)
for xs, ws, a in [((2, 32, 9, 8), (48, 32, 3, 3), {"pads": [1, 0, 2, 1]}),
                  ((1, 6, 7, 9), (6, 2, 3, 2), {"groups": 3,
                                                "strides": [2, 1]})]:
    x = r.uniform(-1, 1, xs).astype(np.float32)
    w = r.uniform(-1, 1, ws).astype(np.float32)
    X, W = dg.tensor(x), dg.tensor(w)
    pa = dg.plugin_api.py_attrs("Conv2d", a)  # schema layout -> Python's
    y = dg.ops.conv2d(X, W, **pa).numpy()
    t = dg.ops.conv_transpose2d(dg.tensor(y), W, **pa).numpy()
    f = dg.ops.conv2d_backprop_filter(X, dg.tensor(y), list(ws), **pa).numpy()
    x64, w64, y64 = x.astype(float), w.astype(float), y.astype(float)
    for got, want in [(y, conv2d_ref(x64, w64, **a)),
                      (t, conv_transpose2d_ref(y64, w64, **a)),
                      (f, backprop_filter_ref(x64, y64, ws, **a))]:
        scale = max(1.0, float(np.abs(want).max()))
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * scale)
print("ok")
"""


@pytest.mark.parametrize("layout", ["auto", "nhwc", "blocked", "any", "plain"])
def test_every_layout_override_is_correct(layout):
    """DRAGON_MKLDNN_CONV_LAYOUT (read once per process, hence a child)
    changes the oneDNN kernels, not the results."""
    root = pathlib.Path(__file__).resolve().parents[3]
    env = dict(os.environ, DRAGON_MKLDNN_CONV_LAYOUT=layout,
               ONEDNN_VERBOSE="1",
               PYTHONPATH=os.pathsep.join(
                   [str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _LAYOUT_SCRIPT], env=env,
                          cwd=root, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().endswith("ok")
    execs = [line for line in done.stdout.splitlines()
             if line.startswith("onednn_verbose,exec,cpu,")]
    assert any(",deconvolution," in e for e in execs)
    assert any(",backward_weights," in e for e in execs)
    if layout == "plain":
        assert any(",convolution,x64:gemm" in e for e in execs), execs
    if layout == "blocked":
        assert any("dst_f32::blocked:aBcd16b" in e for e in execs), execs


# ------------------------------------------------------ kernel selection


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", OPS)
def test_explain_names_mkldnn(op, dtype):
    text = dg.plugins.explain(op, "cpu", dtype)
    winner = [line for line in text.splitlines() if "winner" in line]
    assert winner and "mkldnn" in winner[0], text


def test_float64_stays_with_cpu_eigen():
    for op in OPS:
        assert not any(k["plugin"] == "mkldnn" and "float64" in str(k)
                       for k in dg.plugins.kernels(op)), op
        winner = [line for line in dg.plugins.explain(op, "cpu", "float64")
                  .splitlines() if "winner" in line]
        assert winner and "cpu_eigen" in winner[0], winner


def test_disabled_plugin_leaves_cpu_eigen_serving():
    """With DRAGON_DISABLE_PLUGINS=mkldnn, cpu_eigen wins every conv op and
    gives the same Conv2d result."""
    code = (
        "import numpy as np, dragon_core as dg\n"
        "from tests.ops.test_conv import conv2d_ref\n"
        "for op in %r:\n"
        "    w = [l for l in dg.plugins.explain(op, 'cpu', 'float32')"
        ".splitlines() if 'winner' in l][0]\n"
        "    assert 'cpu_eigen' in w and 'mkldnn' not in w, w\n"
        "r = np.random.default_rng(0)\n"
        "x = r.uniform(-1, 1, (2, 3, 6, 6)).astype(np.float32)\n"
        "w = r.uniform(-1, 1, (4, 3, 3, 3)).astype(np.float32)\n"
        "y = dg.ops.conv2d(dg.tensor(x), dg.tensor(w), pads=[1, 1]).numpy()\n"
        "np.testing.assert_allclose(y, conv2d_ref(x.astype(float), "
        "w.astype(float), pads=[1, 1]), rtol=1e-4, atol=1e-4)\n"
        "print('served by cpu_eigen')\n" % (OPS,))
    root = pathlib.Path(__file__).resolve().parents[3]
    env = dict(os.environ, DRAGON_DISABLE_PLUGINS="mkldnn",
               PYTHONPATH=os.pathsep.join(
                   [str(root), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "served by cpu_eigen" in done.stdout


# ------------------------------------------- pre-packed constant weights


def _weight_reorders(capfd, fn, runs, w_shape):
    """How many oneDNN reorders of a tensor of w_shape ``runs`` calls run."""
    dims = ",," + "x".join(str(d) for d in w_shape) + ","
    with onednn_execs_lines(capfd) as lines:
        outs = [fn() for _ in range(runs)]
    return sum(1 for ln in lines if ",reorder," in ln and dims in ln), outs


@pytest.mark.parametrize("dtype", DTYPES)
def test_frozen_graph_packs_constant_weights_once(dtype, capfd):
    """In a frozen graph the weights are a constant input (ABI 1.2 call-site
    state): the kernel reorders them into the primitive's blocked layout on
    the first run only and reuses that copy, with results equal to the
    eager call's; live parameters and eager calls reorder every time.
    24 input channels: the weights go through oneDNN's reorder (whose verbose
    lines are counted here), not the plugin's AVX-512 transposes, which
    serve channel counts that are multiples of 16 (test_mkldnn_weights.py)."""
    rng = np.random.default_rng(5)
    x = dg.tensor(rng.uniform(-1, 1, (2, 24, 10, 11)).astype(np.float32)).to(dtype)
    w_shape = (48, 24, 3, 3)
    w = dg.tensor(rng.uniform(-1, 1, w_shape).astype(np.float32)).to(dtype)
    conv = lambda t: dg.ops.conv2d(t, w, pads=[1, 1])  # noqa: E731
    frozen = dg.function(conv, freeze=True)
    live = dg.function(conv)
    want = conv(x).to("float32").numpy()
    frozen.get_graph(x)         # the trace (an eager run) and compilation
    live.get_graph(x)

    first, _ = _weight_reorders(capfd, lambda: frozen(x), 1, w_shape)
    assert first == 1, "the first frozen run packs the weights"
    again, outs = _weight_reorders(capfd, lambda: frozen(x), 3, w_shape)
    assert again == 0, "later frozen runs reuse the packed weights"
    for y in outs:
        np.testing.assert_array_equal(y.to("float32").numpy(), want)
    live_count, outs = _weight_reorders(capfd, lambda: live(x), 3, w_shape)
    assert live_count == 3, "a live parameter may change: reordered per run"
    for y in outs:
        np.testing.assert_array_equal(y.to("float32").numpy(), want)
    eager_count, _ = _weight_reorders(capfd, lambda: conv(x), 2, w_shape)
    assert eager_count == 2


def test_first_layer_reads_plain_source_and_writes_blocked(capfd):
    """A float32 convolution with few input channels and >= 32 outputs (an
    RGB stem) runs oneDNN's direct kernel from the plain nchw image to
    nChw16c (docs/conv.md), with the reference's values."""
    rng = np.random.default_rng(9)
    x = rng.uniform(-1, 1, (2, 3, 16, 16)).astype(np.float32)
    w = rng.uniform(-1, 1, (32, 3, 7, 7)).astype(np.float32)
    attrs = {"strides": [2, 2], "pads": [3, 3]}
    with onednn_execs_lines(capfd) as lines:
        y = dg.ops.conv2d(dg.tensor(x), dg.tensor(w), **attrs).numpy()
    convs = [ln for ln in lines if ",convolution," in ln]
    assert convs and "src_f32::blocked:abcd" in convs[0], convs
    assert "dst_f32::blocked:aBcd16b" in convs[0], convs
    want = conv2d_ref(x.astype(float), w.astype(float), **attrs)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


def test_wide_backward_layout_follows_the_cpu(capfd):
    """The float32 deconvolution and filter gradient with >= 16 channels run
    nChw16c on CPUs without AMX and nhwc on AMX ones (docs/conv.md): the
    choice is per machine, deterministic, and both give the reference."""
    amx = 0xFEF  # dnnl_cpu_isa_avx512_core_amx: a bit mask of the ISA
    has_amx = (_DNNL.dnnl_get_effective_cpu_isa() & amx) == amx
    want = "acdb" if has_amx else "aBcd16b"
    rng = np.random.default_rng(4)
    x = rng.uniform(-1, 1, (2, 16, 9, 9)).astype(np.float32)
    w = rng.uniform(-1, 1, (32, 16, 3, 3)).astype(np.float32)
    dy = rng.uniform(-1, 1, (2, 32, 9, 9)).astype(np.float32)
    a = {"pads": [1, 1]}
    with onednn_execs_lines(capfd) as lines:
        dx = dg.ops.conv_transpose2d(dg.tensor(dy), dg.tensor(w), **a).numpy()
        dw = dg.ops.conv2d_backprop_filter(dg.tensor(x), dg.tensor(dy),
                                           list(w.shape), **a).numpy()
    for kind in (",deconvolution,", ",backward_weights,"):
        hits = [ln for ln in lines if kind in ln]
        assert hits and f"src_f32::blocked:{want}" in hits[0], (kind, hits)
    x64, w64, dy64 = x.astype(float), w.astype(float), dy.astype(float)
    np.testing.assert_allclose(dx, conv_transpose2d_ref(dy64, w64, **a),
                               rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(dw, backprop_filter_ref(x64, dy64, w.shape, **a),
                               rtol=1e-4, atol=1e-3)
