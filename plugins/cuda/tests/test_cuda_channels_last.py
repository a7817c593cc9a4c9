"""Channels-last on cuda: cuDNN convolutions read and write NHWC natively.

The cuDNN kernels (cudnn.cu) declare ``DG_KERNEL_CHANNELS_LAST`` for
float32, float16 and bfloat16: a channels-last input 0 reaches them as is,
output 0 is allocated channels-last, and every descriptor is NHWC; an
operand in the other layout is staged through the workspace. These tests
check, on a GPU, that every combination of layouts computes what the
contiguous path computes (itself checked against the CPU in
test_cuda_conformance.py), forward and gradients, that the layout
propagates (no NCHW <-> NHWC copy between the ops of a ResNet block), and
that compiled functions agree. They skip where no cuda device exists;
``DRAGON_CUDA_CHANNELS_LAST_DEVICE=cpu`` runs their float32 cases on the
CPU instead (to check the harness itself where there is no GPU). The
host-side part (layout tests, relayout index math) runs everywhere.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from _host_cpp import run_program

DEV = os.environ.get("DRAGON_CUDA_CHANNELS_LAST_DEVICE", "cuda")
FLOATS = ("float32", "float16", "bfloat16") if DEV == "cuda" else ("float32",)


@pytest.fixture
def gpu(request):
    """dragon_core where the device under test exists; else the test skips
    with the device's reason."""
    if DEV == "cuda":
        return request.getfixturevalue("gpu_device")
    import dragon_core as dg
    return dg
# cuDNN sums in its own order per layout (NHWC tensor-op kernels against
# NCHW ones): float32 compares tightly, 16-bit types within their rounding.
TOL = {"float32": (2e-4, 2e-5), "float16": (1e-2, 5e-3), "bfloat16": (6e-2, 3e-2)}


def _t(dg, arr, dtype, device=DEV):
    t = dg.tensor(np.asarray(arr, np.float32))
    if dtype != "float32":
        t = dg.ops.cast(t, dtype=dtype)
    return t.to(device)


def _np(dg, t):
    t = t.to("cpu")
    if str(t.dtype) in ("float16", "bfloat16"):
        t = dg.ops.cast(t, dtype="float32")
    return np.asarray(t.numpy(), np.float64)


def _close(dg, a, b, dtype, what):
    rtol, atol = TOL[dtype]
    want = _np(dg, b)
    scale = float(np.abs(want).max()) if want.size else 0.0
    np.testing.assert_allclose(_np(dg, a), want, rtol=rtol, atol=max(atol, rtol * scale),
                               err_msg=what)


def _cl(dg, t):
    return t.contiguous(dg.channels_last)


CONV_GEOMS = [
    dict(c=8, o=16, k=(3, 3), strides=[1, 1], pads=[1, 1], groups=1),
    dict(c=8, o=8, k=(3, 3), strides=[2, 2], pads=[1, 1], groups=2),
    dict(c=3, o=16, k=(7, 7), strides=[2, 2], pads=[3, 3], groups=1),
    dict(c=16, o=8, k=(1, 1), strides=[1, 1], pads=[0, 0], groups=1),
]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("geom", range(len(CONV_GEOMS)))
@pytest.mark.parametrize("layouts", ["cl_cl", "cl_dense", "dense_cl"])
def test_conv2d_layouts_match_contiguous(gpu, dtype, geom, layouts):
    """Conv2d forward and its three gradients (ConvTranspose2d for dx,
    Conv2dBackpropFilter for dw), Conv2dBiasAct and ConvTranspose2d on
    channels-last x and/or w equal the all-contiguous run; a channels-last x
    gives channels-last y and dw, and with a channels-last dy (as an NHWC
    backward pass hands it on) a channels-last dx.

    dy is given explicitly, in x's layout: the gradient of a reduction such
    as ``sum(y * r)`` is a row-major tensor whatever y's layout (the core's
    element-wise layout rule needs every full-shape operand channels-last,
    and the broadcast gradient of the sum is not), and ConvTranspose2d's
    output follows its input 0, dy; asserting a channels-last dx after such a
    dy (as this test once did) fails on a correct implementation."""
    dg = gpu
    ops = dg.ops
    g = dict(CONV_GEOMS[geom])
    c, o, k = g.pop("c"), g.pop("o"), g.pop("k")
    rng = np.random.default_rng(geom)
    x = rng.uniform(-1, 1, (3, c, 13, 11))
    w = rng.uniform(-1, 1, (o, c // g["groups"]) + k)
    b = rng.uniform(-1, 1, (o,))
    tw = rng.uniform(-1, 1, (c, o // g["groups"]) + k)
    x_cl, w_cl = layouts.split("_")

    def run(x_fmt, w_fmt):
        xt, wt, bt, twt = (_t(dg, v, dtype) for v in (x, w, b, tw))
        if x_fmt == "cl":
            xt = _cl(dg, xt)
        if w_fmt == "cl":
            wt, twt = _cl(dg, wt), _cl(dg, twt)
        with dg.GradientTape() as tape:
            for t in (xt, wt, bt):
                tape.watch(t)
            y = ops.conv2d(xt, wt, bt, **g)
        r = _t(dg, np.random.default_rng(5).uniform(-1, 1, tuple(y.shape)), dtype)
        if x_fmt == "cl":
            r = _cl(dg, r)
        dx, dw, db = tape.gradient(y, [xt, wt, bt], output_gradients=r)
        z = ops.conv2d_bias_act(xt, wt, bt, activation="relu", **g)
        tr = ops.conv_transpose2d(xt, twt, bt,
                                  strides=g["strides"], pads=g["pads"], groups=g["groups"])
        return dict(y=y, dx=dx, dw=dw, db=db, z=z, tr=tr)

    ref = run("dense", "dense")
    got = run(x_cl, w_cl)
    for name in ref:
        _close(dg, got[name], ref[name], dtype, f"{name} ({layouts}, {dtype})")
    if x_cl == "cl" and DEV == "cuda":  # the CPU kernels do not declare the trait
        for name in ("y", "dx", "z", "tr"):
            assert got[name].is_contiguous(dg.channels_last), (name, got[name].strides)
        # dw follows x (input 0 of Conv2dBackpropFilter): channels-last too.
        assert got["dw"].is_contiguous(dg.channels_last)


@pytest.mark.gpu
def test_float64_conv_takes_dense_operands(gpu):
    """float64 kernels do not declare the trait: correct values, contiguous
    output."""
    dg = gpu
    if DEV != "cuda":
        pytest.skip("the float64 trait rule is the cuda kernels'")
    rng = np.random.default_rng(1)
    x = _t(dg, rng.uniform(-1, 1, (2, 4, 6, 6)), "float32")
    x = dg.ops.cast(x, dtype="float64")
    w = dg.ops.cast(_t(dg, rng.uniform(-1, 1, (5, 4, 3, 3)), "float32"), dtype="float64")
    y = dg.ops.conv2d(_cl(dg, x), w, pads=[1, 1])
    assert y.is_contiguous()
    np.testing.assert_allclose(_np(dg, y), _np(dg, dg.ops.conv2d(x, w, pads=[1, 1])),
                               rtol=1e-12, atol=1e-12)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
def test_pool_and_norm_on_channels_last(gpu, dtype):
    """MaxPool2d and BatchNorm (forward and gradient) read channels-last
    natively on cuda; adaptive average pooling and the max-pool gradient get
    dense copies: all give the values and gradients of contiguous inputs."""
    dg = gpu
    ops = dg.ops
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (4, 8, 10, 9))
    gam, bet = rng.uniform(0.5, 1.5, (8,)), rng.uniform(-0.5, 0.5, (8,))

    def run(fmt):
        xt = _t(dg, x, dtype)
        if fmt == "cl":
            xt = _cl(dg, xt)
        gt, bt = _t(dg, gam, "float32"), _t(dg, bet, "float32")
        if dtype != "float32":
            gt, bt = ops.cast(gt, dtype=dtype), ops.cast(bt, dtype=dtype)
        with dg.GradientTape() as tape:
            tape.watch(xt)
            m = ops.max_pool2d(xt, [3, 3], strides=[2, 2], pads=[1, 1])
            a = ops.adaptive_avg_pool2d(xt, [1, 1])
            bn = ops.batch_norm(xt, gt, bt, ops.zeros([8], dtype=dtype).to(DEV),
                                ops.ones([8], dtype=dtype).to(DEV), eps=1e-5,
                                training=True)[0]
            s = ops.sum(m) + ops.sum(a) + ops.sum(bn * bn)
        return [m, a, bn, tape.gradient(s, xt)]

    got, want = run("cl"), run("dense")
    for a, b in zip(got, want):
        _close(dg, a, b, dtype, "pool/norm")
    if DEV == "cuda":  # MaxPool2d and BatchNorm declare the trait on cuda
        assert got[0].is_contiguous(dg.channels_last), got[0].strides
        assert got[2].is_contiguous(dg.channels_last), got[2].strides


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("layouts", ["cl_cl", "cl_dense", "dense_cl"])
@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_grad_mixed_layouts(gpu, dtype, layouts, training):
    """BatchNormGrad with x and dy in any pair of layouts (the staging
    paths) equals the all-contiguous call; BatchNorm in inference mode too."""
    dg = gpu
    ops = dg.ops
    rng = np.random.default_rng(6)
    shape = (3, 16, 7, 5)
    arrays = [rng.uniform(-1, 1, shape), rng.uniform(0.5, 1.5, (16,)),
              rng.uniform(-0.2, 0.2, (16,)), rng.uniform(0.5, 1.5, (16,)),
              rng.uniform(-1, 1, shape), rng.uniform(-1, 1, (16,)), rng.uniform(-1, 1, (16,))]
    x_fmt, dy_fmt = layouts.split("_")

    def run(xf, df):
        x, g, rm, rv, dy, dm, dv = (_t(dg, a, dtype) for a in arrays)
        if xf == "cl":
            x = _cl(dg, x)
        if df == "cl":
            dy = _cl(dg, dy)
        grads = ops.batch_norm_grad(x, g, rm, rv, dy, dm, dv, eps=1e-5, training=training)
        y = ops.batch_norm(x, g, dm, rm, rv, eps=1e-5, training=training)
        return list(grads) + list(y)

    for a, b in zip(run(x_fmt, dy_fmt), run("dense", "dense")):
        _close(dg, a, b, dtype, f"batch norm ({layouts}, training={training})")


def _basic_block(dg, x, p):
    ops = dg.ops

    def bn(t, g, b):
        return ops.batch_norm(t, g, b, p["rm"], p["rv"], eps=1e-5, training=True)[0]

    h = ops.relu(bn(ops.conv2d(x, p["w1"], None, pads=[1, 1]), p["g1"], p["b1"]))
    h = bn(ops.conv2d(h, p["w2"], None, pads=[1, 1]), p["g2"], p["b2"])
    return ops.relu(h + x)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [d for d in ("bfloat16", "float32") if d in FLOATS])
def test_resnet_basic_block_bf16_channels_last(gpu, dtype):
    """A ResNet basic block (conv-bn-relu-conv-bn-add-relu) with
    channels-last activations and filters, forward and backward, equals the
    contiguous run; the block's output stays channels-last."""
    dg = gpu
    ops = dg.ops
    rng = np.random.default_rng(3)
    c = 64
    x = rng.uniform(-1, 1, (8, c, 14, 14))
    raw = {"w1": rng.normal(0, 0.05, (c, c, 3, 3)), "w2": rng.normal(0, 0.05, (c, c, 3, 3)),
           "g1": rng.uniform(0.5, 1.5, (c,)), "b1": rng.uniform(-0.2, 0.2, (c,)),
           "g2": rng.uniform(0.5, 1.5, (c,)), "b2": rng.uniform(-0.2, 0.2, (c,)),
           "rm": np.zeros(c), "rv": np.ones(c)}

    def run(fmt):
        p = {k: _t(dg, v, dtype) for k, v in raw.items()}
        xt = _t(dg, x, dtype)
        if fmt == "cl":
            xt = _cl(dg, xt)
            p["w1"], p["w2"] = _cl(dg, p["w1"]), _cl(dg, p["w2"])
        watched = [xt, p["w1"], p["w2"], p["g1"], p["g2"]]
        with dg.GradientTape() as tape:
            for t in watched:
                tape.watch(t)
            y = _basic_block(dg, xt, p)
            s = ops.sum(y * y)
        return [y] + list(tape.gradient(s, watched))

    got, want = run("cl"), run("dense")
    if DEV == "cuda":  # the CPU kernels do not declare the trait
        assert got[0].is_contiguous(dg.channels_last)
    for a, b in zip(got, want):
        _close(dg, a, b, dtype, f"resnet block ({dtype})")


@pytest.mark.gpu
def test_compiled_conv_on_channels_last_feed(gpu):
    dg = gpu
    ops = dg.ops
    rng = np.random.default_rng(4)
    dt = FLOATS[-1]
    x = _t(dg, rng.uniform(-1, 1, (2, 8, 9, 9)), dt)
    w = _t(dg, rng.uniform(-1, 1, (8, 8, 3, 3)), dt)

    @dg.function
    def f(x, w):
        return ops.relu(ops.conv2d(x, w, None, pads=[1, 1]))

    want = f(x, w)
    for xx, ww in ((_cl(dg, x), w), (x, _cl(dg, w)), (_cl(dg, x), _cl(dg, w))):
        _close(dg, f(xx, ww), want, dt, "compiled")
    _close(dg, want, ops.relu(ops.conv2d(x, w, None, pads=[1, 1])), dt, "eager")


# --------------------------------------------------------- host-side math

HOST_PROGRAM = r"""
#include <cstdio>
#include <cstdint>
#include <vector>
#include "cudnn_plan.h"

using namespace dragon_cuda::cudnn_plan;

int main() {
  int fails = 0;
  // h == 1: batchnorm.cu's RelayoutNcs views [N, C, S] as [N, C, 1, S].
  const int64_t dims[][4] = {{2, 3, 4, 5}, {1, 1, 1, 1}, {3, 1, 2, 2}, {2, 5, 1, 1}, {1, 7, 3, 1},
                            {2, 3, 1, 7}, {3, 6, 1, 5}};
  for (auto& d : dims) {
    const int64_t n = d[0], c = d[1], h = d[2], w = d[3];
    const int64_t nchw[4] = {c * h * w, h * w, w, 1};
    const int64_t nhwc[4] = {h * w * c, 1, w * c, c};
    const bool ambiguous = c == 1 || h * w == 1;
    if (!IsNchw(d, nchw) || !IsNhwc(d, nhwc)) { std::printf("dense layouts\n"); ++fails; }
    if (IsNhwc(d, nchw) != ambiguous || IsNchw(d, nhwc) != ambiguous) {
      std::printf("ambiguity %lld %lld %lld %lld\n", (long long)n, (long long)c, (long long)h,
                  (long long)w);
      ++fails;
    }
    // Relayout both ways against the strides: element (a, b, y, x).
    for (int a = 0; a < n; ++a)
      for (int b = 0; b < c; ++b)
        for (int y = 0; y < h; ++y)
          for (int x = 0; x < w; ++x) {
            const int64_t off_nchw = a * nchw[0] + b * nchw[1] + y * nchw[2] + x * nchw[3];
            const int64_t off_nhwc = a * nhwc[0] + b * nhwc[1] + y * nhwc[2] + x * nhwc[3];
            if (RelayoutSource(off_nhwc, c, h, w, true) != off_nchw ||
                RelayoutSource(off_nchw, c, h, w, false) != off_nhwc) {
              std::printf("relayout at %d %d %d %d\n", a, b, y, x);
              ++fails;
            }
            if (ChannelOf(off_nchw, h * w, c, false) != b ||
                ChannelOf(off_nhwc, h * w, c, true) != b) {
              std::printf("channel at %d %d %d %d\n", a, b, y, x);
              ++fails;
            }
          }
  }
  // Neither layout: a transposed H/W, a slice.
  const int64_t d[4] = {2, 3, 4, 5};
  const int64_t odd[4] = {60, 20, 1, 4}, sliced[4] = {120, 40, 10, 2};
  if (IsNchw(d, odd) || IsNhwc(d, odd) || IsNchw(d, sliced) || IsNhwc(d, sliced)) {
    std::printf("strided layouts accepted\n");
    ++fails;
  }
  // The plan key tells the layouts apart.
  ConvGeometry a, b;
  b.nhwc = true;
  if (a == b || !(a < b || b < a)) { std::printf("nhwc not in the key\n"); ++fails; }
  std::printf(fails ? "fails %d\n" : "OK\n", fails);
  return fails != 0;
}
"""


def test_channels_last_host_math(tmp_path):
    run_program(tmp_path, "channels_last_math", HOST_PROGRAM)
