"""The mkldnn plugin's GEMM path for convolutions on tiny maps (src/conv_gemm.cc).

A float32 Conv2d / ConvTranspose2d / Conv2dBackpropFilter with one group,
no dilation, no bias, a filter larger than 1x1 and an output map (the
forward convolution's) of at most 4 pixels runs as im2col + one oneDNN
matmul instead of oneDNN's direct convolution. Checked here: the float64
NumPy references of ``tests/ops/test_conv.py`` (tolerances as in
test_mkldnn_conv.py: rtol = atol = 1e-4 on inputs in [-1, 1]; the GEMM sums
~4,600 products in float32, the error stays ~1e-6 relative to the output's
scale), strided inputs and filters, which calls take the path (oneDNN's
verbose log: a ``matmul`` and no ``convolution``), gradients of a compiled
layer through it, and the ``DRAGON_MKLDNN_CONV_GEMM=0`` switch (read once
per process, so in a child) that restores the direct convolution.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from dragon_sdk.testing import OpCase, strided

import dragon_core as dg
from tests.ops.test_conv import (backprop_filter_ref, conv2d_ref,
                                 conv_transpose2d_ref)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_mkldnn_conv import onednn_execs  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[3]
TOL = 1e-4

#: (x shape, filter shape, Conv2d attrs): every output map <= 4 pixels.
CASES = [
    ((8, 64, 2, 2), (64, 64, 3, 3), {"pads": [1, 1]}),                 # ResNet layer4
    ((2, 32, 4, 4), (48, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1]}),  # downsampling
    ((3, 5, 3, 3), (7, 5, 3, 3), {}),                                   # 1 pixel, no pad
    ((1, 4, 5, 6), (3, 4, 3, 2), {"strides": [3, 4], "pads": [1, 0, 0, 1]}),  # asym pads
    ((2, 6, 2, 3), (4, 6, 5, 5), {"pads": [2, 1]}),                     # pads < kernel/2
    ((1, 3, 2, 2), (2, 3, 2, 2), {"pads": [2, 2], "strides": [3, 3]}),  # all-pad taps
    ((2, 17, 1, 4), (9, 17, 1, 3), {"pads": [0, 1], "strides": [1, 2]}),  # 1 row
]


def _id(case):
    return "x".join(map(str, case[0])) + "_" + "x".join(map(str, case[1]))


def _window(xs, fs, attrs):
    s = attrs.get("strides", [1, 1])
    pads = list(attrs.get("pads", [0, 0]))
    pt, pl, pb, pr = pads + pads if len(pads) == 2 else pads
    return (xs[0], fs[0], (xs[2] + pt + pb - fs[2]) // s[0] + 1,
            (xs[3] + pl + pr - fs[3]) // s[1] + 1)


def _served_by_gemm(execs):
    kinds = [e[0] for e in execs]
    assert "matmul" in kinds, execs
    assert "convolution" not in kinds and "deconvolution" not in kinds, execs


def _arrays(shapes, seed, layout):
    rng = np.random.default_rng(seed)
    out = [rng.uniform(-1, 1, s).astype(np.float32) for s in shapes]
    return [strided(a) for a in out] if layout == "strided" else out


def test_cases_have_tiny_maps():
    for xs, fs, attrs in CASES:
        _, _, oh, ow = _window(xs, fs, attrs)
        assert 1 <= oh * ow <= 4, (xs, fs, attrs)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("xs, fs, attrs", CASES, ids=map(_id, CASES))
def test_conv2d(xs, fs, attrs, layout, capfd):
    arrays = _arrays([xs, fs], sum(xs) + sum(fs), layout)
    case = OpCase.of("Conv2d", arrays, conv2d_ref, attrs=attrs, rtol=TOL, atol=TOL)
    with onednn_execs(capfd) as execs:
        case.check_forward()
    _served_by_gemm(execs)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("xs, fs, attrs", CASES, ids=map(_id, CASES))
def test_conv_transpose2d(xs, fs, attrs, layout, capfd):
    """ConvTranspose2d as Conv2d's data gradient: its input is Conv2d's
    output map, its output the image (output_padding restores rows a stride
    skipped)."""
    ws = _window(xs, fs, attrs)
    s = attrs.get("strides", [1, 1])
    pads = list(attrs.get("pads", [0, 0]))
    pt, pl, pb, pr = pads + pads if len(pads) == 2 else pads
    full = [(ws[2] - 1) * s[0] + fs[2] - pt - pb, (ws[3] - 1) * s[1] + fs[3] - pl - pr]
    t_attrs = dict(attrs, output_padding=[xs[2] - full[0], xs[3] - full[1]])
    if any(v >= max(st, 1) for v, st in zip(t_attrs["output_padding"], s)):
        pytest.skip("the image is not reachable by output_padding < stride")
    arrays = _arrays([ws, fs], sum(xs) + 2 * sum(fs), layout)
    case = OpCase.of("ConvTranspose2d", arrays, conv_transpose2d_ref, attrs=t_attrs,
                     rtol=TOL, atol=TOL)
    with onednn_execs(capfd) as execs:
        case.check_forward()
    _served_by_gemm(execs)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
@pytest.mark.parametrize("xs, fs, attrs", CASES, ids=map(_id, CASES))
def test_conv2d_backprop_filter(xs, fs, attrs, layout, capfd):
    arrays = _arrays([xs, _window(xs, fs, attrs)], sum(xs) + 3 * sum(fs), layout)
    case = OpCase.of("Conv2dBackpropFilter", arrays, backprop_filter_ref,
                     attrs={"filter_shape": list(fs), **attrs}, rtol=TOL, atol=TOL)
    with onednn_execs(capfd) as execs:
        case.check_forward()
    _served_by_gemm(execs)


def test_transposed_filter_view(capfd):
    """A filter that is a transposed view (not contiguous) is packed first."""
    rng = np.random.default_rng(3)
    x = rng.uniform(-1, 1, (2, 16, 2, 2)).astype(np.float32)
    w = rng.uniform(-1, 1, (16, 24, 3, 3)).astype(np.float32)
    wt = dg.ops.transpose(dg.tensor(w), (1, 0, 2, 3))        # [24, 16, 3, 3] view
    with onednn_execs(capfd) as execs:
        y = dg.ops.conv2d(dg.tensor(x), wt, pads=[1, 1]).numpy()
    _served_by_gemm(execs)
    want = conv2d_ref(x.astype(float), w.transpose(1, 0, 2, 3).astype(float), pads=[1, 1])
    np.testing.assert_allclose(y, want, rtol=TOL, atol=TOL)


def test_larger_maps_keep_the_direct_convolution(capfd):
    """A 3x3 output map (9 pixels), a 1x1 filter, a bias, bfloat16, a group
    or a dilation: oneDNN's convolution as before."""
    rng = np.random.default_rng(4)
    x = dg.tensor(rng.uniform(-1, 1, (2, 16, 3, 3)).astype(np.float32))
    w = dg.tensor(rng.uniform(-1, 1, (16, 16, 3, 3)).astype(np.float32))
    b = dg.tensor(rng.uniform(-1, 1, (16,)).astype(np.float32))
    small = dg.tensor(rng.uniform(-1, 1, (2, 16, 2, 2)).astype(np.float32))
    calls = [
        lambda: dg.ops.conv2d(x, w, pads=[1, 1]),
        lambda: dg.ops.conv2d(small, dg.ops.slice(w, [0, 0, 1, 1], [16, 16, 2, 2])),
        lambda: dg.ops.conv2d(small, w, b, pads=[1, 1]),
        lambda: dg.ops.conv2d(small.to("bfloat16"), w.to("bfloat16"), pads=[1, 1]),
        lambda: dg.ops.conv2d(small, dg.ops.slice(w, [0, 0, 0, 0], [16, 4, 3, 3]),
                              pads=[1, 1], groups=4),
        lambda: dg.ops.conv2d(small, w, pads=[2, 2], dilations=[2, 2]),
    ]
    for call in calls:
        with onednn_execs(capfd) as execs:
            call().numpy()
        kinds = [e[0] for e in execs]
        assert "convolution" in kinds and "matmul" not in kinds, kinds


def test_compiled_gradients_match_eager_and_reference():
    """A compiled layer (conv -> sum of squares) differentiates through the
    GEMM path: x and w gradients against the float64 references."""
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (4, 32, 2, 2)).astype(np.float32)
    w = rng.uniform(-1, 1, (32, 32, 3, 3)).astype(np.float32)

    def step(xv, wv):
        with dg.GradientTape() as tape:
            tape.watch(xv)
            tape.watch(wv)
            y = dg.ops.conv2d(xv, wv, pads=[1, 1])
            loss = dg.ops.sum(y * y)
        return tape.gradient(loss, [xv, wv])

    eager = [g.numpy() for g in step(dg.tensor(x), dg.tensor(w))]
    compiled = [g.numpy() for g in dg.function(step)(dg.tensor(x), dg.tensor(w))]
    x64, w64 = x.astype(float), w.astype(float)
    y64 = conv2d_ref(x64, w64, pads=[1, 1])
    want_x = conv_transpose2d_ref(2 * y64, w64, pads=[1, 1])
    want_w = backprop_filter_ref(x64, 2 * y64, w.shape, pads=[1, 1])
    for got in (eager, compiled):
        np.testing.assert_allclose(got[0], want_x, rtol=TOL, atol=TOL * np.abs(want_x).max())
        np.testing.assert_allclose(got[1], want_w, rtol=TOL, atol=TOL * np.abs(want_w).max())


_SWITCH = r"""
import numpy as np, dragon_core as dg
from tests.ops.test_conv import conv2d_ref
r = np.random.default_rng(0)
x = r.uniform(-1, 1, (8, 64, 2, 2)).astype(np.float32)
w = r.uniform(-1, 1, (64, 64, 3, 3)).astype(np.float32)
y = dg.ops.conv2d(dg.tensor(x), dg.tensor(w), pads=[1, 1]).numpy()
np.testing.assert_allclose(y, conv2d_ref(x.astype(float), w.astype(float), pads=[1, 1]),
                           rtol=1e-4, atol=1e-4)
print("ok")
"""


@pytest.mark.parametrize("value, primitive", [("0", ",convolution,"), ("1", ",matmul,")])
def test_switch(value, primitive):
    env = dict(os.environ, DRAGON_MKLDNN_CONV_GEMM=value, ONEDNN_VERBOSE="1",
               PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", _SWITCH], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    execs = [ln for ln in done.stdout.splitlines() if ln.startswith("onednn_verbose,exec,cpu,")]
    assert any(primitive in e for e in execs), execs
