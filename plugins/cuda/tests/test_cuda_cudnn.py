"""The cuDNN convolutions of the cuda plugin (src/cudnn.cu, src/cudnn_plan.h).

Host-side (no GPU): ``src/cudnn_plan.h`` is plain C++, compiled here with
the host compiler: the padding rule is checked against brute-force 1-D
convolutions (the rule claims cuDNN's symmetric padding gives the op's exact
result whenever the window extents agree), the algorithm rule against
crafted heuristic lists, and the plan cache for one plan per geometry under
threads. The registry shows the cuDNN kernels ahead of the direct ones.

On a GPU (``-m gpu``): every geometry kind (cuDNN's and the direct
kernel's) against float64 NumPy, forward and the gradients of x and w, per
dtype; float32 is exact float32 by default and TF32 only when asked;
repeated calls give the same bits (deterministic algorithms); a missing
libcudnn is an UnavailableError naming the op, the library and the folders
searched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from _host_cpp import run_program

import dragon_core as dg

ops = dg.ops

PROGRAM = r"""
#include <cstdio>
#include <cstdint>
#include <random>
#include <thread>
#include <vector>
#include "cudnn_plan.h"

using namespace dragon_cuda::cudnn_plan;

static int fails = 0;
#define EXPECT(c) do { if (!(c)) { std::printf("line %d: %s\n", __LINE__, #c); ++fails; } } while (0)

// A 1-D cross-correlation of x with kernel k (dilation d, stride s), pads
// (pb, pe): the op's definition, with its own output extent.
static std::vector<double> Conv1d(const std::vector<double>& x, const std::vector<double>& k,
                                  int64_t s, int64_t d, int64_t pb, int64_t pe, int64_t out) {
  std::vector<double> y(out, 0.0);
  for (int64_t i = 0; i < out; ++i)
    for (int64_t p = 0; p < (int64_t)k.size(); ++p) {
      const int64_t r = i * s - pb + p * d;
      if (r >= 0 && r < (int64_t)x.size()) y[i] += x[r] * k[p];
    }
  (void)pe;
  return y;
}

static int64_t OpExtent(int64_t h, int64_t kk, int64_t s, int64_t d, int64_t pb, int64_t pe) {
  const int64_t room = h + pb + pe - (d * (kk - 1) + 1);
  return room < 0 ? -1 : room / s + 1;
}

struct Dummy { int id; };

int main() {
  // --- the padding rule against brute force: where Unsupported() accepts a
  // geometry, cuDNN's convolution (symmetric pad = the top pad, over the
  // image zero-extended by that pad on both sides) equals the op's.
  std::mt19937_64 rng(11);
  int accepted_asym = 0, declined = 0;
  for (int t = 0; t < 20000; ++t) {
    const int64_t h = 1 + rng() % 12, kk = 1 + rng() % 5, s = 1 + rng() % 3, d = 1 + rng() % 3;
    const int64_t pb = rng() % 4, pe = rng() % 4;
    const int64_t out = OpExtent(h, kk, s, d, pb, pe);
    if (out < 1) continue;
    ConvGeometry g;
    g.n = 1, g.c = 1, g.h = h, g.w = 1, g.k = 1, g.kh = kk, g.kw = 1, g.ho = out, g.wo = 1;
    g.pad_top = pb, g.pad_bottom = pe, g.sh = s, g.dh = d;
    const bool ok = Unsupported(g).empty();
    EXPECT(ok == (SymmetricWindowExtent(h, pb, kk, s, d) == out));
    if (pb == pe) EXPECT(ok);
    if (!ok) { ++declined; continue; }
    if (pb != pe) ++accepted_asym;
    std::vector<double> x(h), k(kk);
    for (auto& v : x) v = (double)(rng() % 17) - 8.0;
    for (auto& v : k) v = (double)(rng() % 9) - 4.0;
    const std::vector<double> want = Conv1d(x, k, s, d, pb, pe, out);
    // cuDNN's view: pads pb on both sides, its own extent (the same).
    const std::vector<double> got = Conv1d(x, k, s, d, pb, pb, SymmetricWindowExtent(h, pb, kk, s, d));
    EXPECT(got == want);
  }
  EXPECT(accepted_asym > 100 && declined > 100);

  // --- extents: int range, emptiness, groups.
  ConvGeometry g;
  g.n = 2, g.c = 4, g.h = 5, g.w = 5, g.k = 6, g.kh = 3, g.kw = 3, g.ho = 5, g.wo = 5;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = 1, g.groups = 2;
  EXPECT(Unsupported(g).empty());
  ConvGeometry e = g; e.n = 0; EXPECT(Unsupported(e) == "an empty extent");
  e = g; e.c = 0; EXPECT(!Unsupported(e).empty());
  e = g; e.groups = 3; EXPECT(!Unsupported(e).empty());
  e = g; e.w = 3000000000LL; EXPECT(Unsupported(e).find("2^31") != std::string::npos);
  e = g; e.n = 50000; e.c = 64; e.h = 30; e.w = 30; e.k = 64; e.ho = 30; e.wo = 30;
  EXPECT(Unsupported(e) == "a tensor of more than 2^31-1 elements");
  e = g; e.pad_bottom = 3; e.ho = 7;  // the op's 7 rows, cuDNN's 5: declined
  EXPECT(!Unsupported(e).empty());
  e = g; e.pad_top = 2; e.pad_bottom = 0; e.ho = 5;  // (5 + 2 - 3) + 1 = 5 rows: the op's 5
  EXPECT(Unsupported(e) != "");  // symmetric 2 gives 7 rows, not 5
  // stride 2, SAME-style pads (0 top, 1 bottom) on 6 rows: the op's 3 rows, cuDNN's 2
  e = g; e.h = 6; e.sh = 2; e.pad_top = 0; e.pad_bottom = 1; e.ho = 3;
  EXPECT(!Unsupported(e).empty());
  // top 1, bottom 0, stride 2 on 6 rows: op (6+1-3)/2+1 = 3, cuDNN (6+2-3)/2+1 = 3: accepted
  e = g; e.h = 6; e.sh = 2; e.pad_top = 1; e.pad_bottom = 0; e.ho = 3;
  EXPECT(Unsupported(e).empty());

  // --- the algorithm rule.
  const size_t MB = size_t(1) << 20;
  std::vector<Candidate> list = {
      {1, 0, 10 * MB, 1, kTensorOpMath},   // tensor ops
      {2, 3, 0, 1, kFmaMath},              // not supported (status 3)
      {3, 0, 0, 0, kFmaMath},              // non-deterministic
      {4, 0, 4096 * MB, 1, kFmaMath},      // too large
      {5, 0, 2 * MB, 1, kDefaultMath},     // fine
      {6, 0, 0, 1, kFmaMath}};             // fine
  std::vector<size_t> a = Acceptable(list, 1024 * MB, true);
  EXPECT(a.size() == 2 && a[0] == 4 && a[1] == 5);
  a = Acceptable(list, 1024 * MB, false);  // TF32 / 16-bit / float64: tensor ops allowed
  EXPECT(a.size() == 3 && a[0] == 0 && a[1] == 4);
  a = Acceptable(list, 0, true);
  EXPECT(a.size() == 1 && a[0] == 5);
  a = Acceptable(list, 0, true, false);  // DRAGON_CUDNN_DETERMINISTIC=0: atomics allowed
  EXPECT(a.size() == 2 && a[0] == 2 && a[1] == 5);
  EXPECT(Acceptable({}, 1024 * MB, true).empty());
  EXPECT(MathFor(list[4], true, false) == kFmaMath);
  EXPECT(MathFor(list[0], false, true) == kTensorOpMath);
  EXPECT(MathFor(list[4], false, false) == kDefaultMath);

  // --- the plan cache: one plan per geometry, shared; a full cache starts over.
  PlanCache<Dummy> cache(8);
  int made = 0;
  auto make = [&made] { return std::make_shared<const Dummy>(Dummy{made++}); };
  ConvGeometry k1 = g, k2 = g;
  k2.dtype = 1;
  auto p1 = cache.Get(k1, make), p1b = cache.Get(k1, make), p2 = cache.Get(k2, make);
  EXPECT(p1.get() == p1b.get() && p1.get() != p2.get() && made == 2 && cache.size() == 2);
  ConvGeometry k3 = g; k3.tf32 = true;
  EXPECT(cache.Get(k3, make).get() != p1.get());
  ConvGeometry k4 = g; k4.deterministic = false;
  EXPECT(cache.Get(k4, make).get() != p1.get());
  for (int i = 0; i < 10; ++i) { ConvGeometry kk = g; kk.n = 100 + i; cache.Get(kk, make); }
  EXPECT(cache.size() <= 8);
  EXPECT(p1->id == 0);  // still alive in its holder after the clear
  PlanCache<Dummy> shared(4096);
  std::vector<std::thread> threads;
  std::vector<const Dummy*> seen(8);
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int r = 0; r < 2000; ++r) {
        ConvGeometry kk = g; kk.n = 1 + r % 50;
        auto p = shared.Get(kk, [] { return std::make_shared<const Dummy>(Dummy{0}); });
        if (r == 1999) seen[t] = p.get();
      }
    });
  for (auto& th : threads) th.join();
  EXPECT(shared.size() == 50 && shared.made() == 50);
  for (int t = 1; t < 8; ++t) EXPECT(seen[t] == seen[0]);
  std::printf(fails ? "FAILED %d\n" : "OK\n", fails);
  return fails ? 1 : 0;
}
"""


def test_cudnn_plan_rules_on_the_host(tmp_path):
    run_program(tmp_path, "plan", PROGRAM, flags=("-O1", "-pthread"))


@pytest.mark.parametrize("op", ["Conv2d", "Conv2dBiasAct", "ConvTranspose2d",
                                "Conv2dBackpropFilter"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_cudnn_kernels_rank_above_the_direct_ones(op, dtype):
    """The registry (no GPU needed): a cuDNN kernel with a supports() rule at
    priority 10, the direct kernel at 0 for what it declines."""
    ks = [k for k in dg.plugins.kernels(op)
          if k["device"] == "cuda" and k["name"].endswith(f"<{dtype}>")]
    names = {k["name"]: k for k in ks}
    cudnn = [n for n in names if n.startswith("cudnn::")]
    direct = [n for n in names if not n.startswith("cudnn::")]
    assert len(cudnn) == 1 and len(direct) == 1, names
    assert names[cudnn[0]]["priority"] > names[direct[0]]["priority"]
    text = dg.plugins.explain(op, "cuda", dtype)
    assert text.index(cudnn[0]) < text.index(direct[0]), text


# ------------------------------------------------------------------ GPU

DEV = os.environ.get("DRAGON_CUDA_CONFORMANCE_DEVICE", "cuda")
HALF = ("float16", "bfloat16")
# Relative to the largest |value| of the output: cuDNN sums in its own order
# (implicit GEMM, Winograd, FFT), so an output that cancels to ~0 keeps the
# rounding of the largest terms.
TOL = {"float64": 1e-11, "float32": 5e-5, "float16": 4e-3, "bfloat16": 3e-2}


@pytest.fixture
def need_gpu():
    if DEV != "cuda":
        return
    import dragon_cuda
    if dragon_cuda.device_count() == 0:
        pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")


def _to(arr, dtype):
    """A tensor on the device under test holding arr rounded to dtype, and
    that rounded array in float64."""
    t = dg.tensor(np.asarray(arr, np.float32 if dtype in HALF else dtype))
    if dtype in HALF:
        t = ops.cast(t, dtype=dtype)
    t = t.to(DEV)
    return t, _np(t)


def _np(t):
    t = t.to("cpu")
    if str(t.dtype) in HALF:
        t = ops.cast(t, dtype="float32")
    return np.asarray(t.numpy(), np.float64)


def _conv_ref(x, w, strides, pads, dil, groups):
    """float64 NumPy Conv2d; pads (top, left, bottom, right)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ho = (h + pt + pb - dil[0] * (kh - 1) - 1) // strides[0] + 1
    wo = (wd + pl + pr - dil[1] * (kw - 1) - 1) // strides[1] + 1
    y = np.zeros((n, o, ho, wo))
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                r0, c0 = p * dil[0], q * dil[1]
                patch = xs[:, :, r0:r0 + strides[0] * (ho - 1) + 1:strides[0],
                           c0:c0 + strides[1] * (wo - 1) + 1:strides[1]]
                y[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch,
                                                       w[g * og:(g + 1) * og, :, p, q])
    return y


def _conv_adjoint(r, w, image, strides, pads, dil, groups):
    """float64 NumPy adjoint of Conv2d (ConvTranspose2d, the gradient of x):
    r [N, O, Ho, Wo] scattered back onto an image of ``image`` = (C, H, W)."""
    n, o, ho, wo = r.shape
    _, cg, kh, kw = w.shape
    c, h, wd = image
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    og = o // groups
    for g in range(groups):
        for p in range(kh):
            for q in range(kw):
                r0, c0 = p * dil[0], q * dil[1]
                xp[:, g * cg:(g + 1) * cg, r0:r0 + strides[0] * (ho - 1) + 1:strides[0],
                   c0:c0 + strides[1] * (wo - 1) + 1:strides[1]] += np.einsum(
                       "nohw,oc->nchw", r[:, g * og:(g + 1) * og], w[g * og:(g + 1) * og, :, p, q])
    return xp[:, :, pt:pt + h, pl:pl + wd]


def _conv_filter_grad(x, r, wshape, strides, pads, dil, groups):
    """float64 NumPy gradient of sum(Conv2d(x, w) * r) with respect to w."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = wshape
    _, _, ho, wo = r.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr))
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    gw = np.zeros(wshape)
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        for p in range(kh):
            for q in range(kw):
                r0, c0 = p * dil[0], q * dil[1]
                patch = xs[:, :, r0:r0 + strides[0] * (ho - 1) + 1:strides[0],
                           c0:c0 + strides[1] * (wo - 1) + 1:strides[1]]
                gw[g * og:(g + 1) * og, :, p, q] = np.einsum("nohw,nchw->oc",
                                                             r[:, g * og:(g + 1) * og], patch)
    return gw


def _close(got, want, dtype, what):
    scale = max(float(np.abs(want).max()) if want.size else 0.0, 1.0)
    err = float(np.abs(got - want).max()) if want.size else 0.0
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    assert err <= TOL[dtype] * scale, f"{what} {dtype}: max error {err:.3g} (scale {scale:.3g})"


# (n, c, h, w, o, k, strides, pads (t, l, b, r), dilations, groups): cuDNN's
# geometries (symmetric pads, an accepted asymmetric one, depthwise,
# dilation, stride) and one the direct kernel keeps (bottom pad > top).
GEOMS = [
    (2, 16, 12, 10, 32, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    (3, 8, 9, 9, 8, (3, 3), (2, 2), (1, 1, 0, 0), (1, 1), 1),
    (2, 12, 8, 8, 12, (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), 12),
    (2, 6, 7, 11, 9, (5, 3), (2, 1), (2, 1, 2, 1), (1, 2), 3),
    (4, 32, 6, 6, 16, (1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (2, 4, 7, 6, 6, (3, 2), (2, 1), (0, 0, 1, 1), (1, 2), 2),
]


@pytest.mark.parametrize("geom", GEOMS + [
    (1, 6, 10, 11, 4, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 2)])
def test_references_are_adjoint(geom):
    """The NumPy references (no GPU): <conv(x, w), r> == <x, adjoint(r, w)>
    == <w, filter_grad(x, r)>, element by element through unit impulses."""
    n, c, h, wd, o, k, strides, pads, dil, groups = geom
    rng = np.random.default_rng(8)
    x = rng.uniform(-1, 1, (n, c, h, wd))
    w = rng.uniform(-1, 1, (o, c // groups) + k)
    r = rng.uniform(-1, 1, _conv_ref(x, w, strides, pads, dil, groups).shape)
    gx = _conv_adjoint(r, w, x.shape[1:], strides, pads, dil, groups)
    gw = _conv_filter_grad(x, r, w.shape, strides, pads, dil, groups)
    for idx in list(np.ndindex(*x.shape))[::7]:
        e = np.zeros_like(x)
        e[idx] = 1.0
        assert np.isclose((_conv_ref(e, w, strides, pads, dil, groups) * r).sum(), gx[idx])
    for idx in list(np.ndindex(*w.shape))[::3]:
        e = np.zeros_like(w)
        e[idx] = 1.0
        assert np.isclose((_conv_ref(x, e, strides, pads, dil, groups) * r).sum(), gw[idx])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("geom", GEOMS, ids=lambda g: "x".join(map(str, g[:5])) + f"g{g[-1]}")
def test_conv_forward_and_gradients_match_numpy(need_gpu, dtype, geom):
    if dtype in HALF and DEV != "cuda":
        pytest.skip("the CPU has no 16-bit conv kernel")
    n, c, h, wd, o, k, strides, pads, dil, groups = geom
    rng = np.random.default_rng(5)
    x, xr = _to(rng.uniform(-1, 1, (n, c, h, wd)), dtype)
    w, wr = _to(rng.uniform(-1, 1, (o, c // groups) + k), dtype)
    b, br = _to(rng.uniform(-1, 1, (o,)), dtype)
    attrs = dict(strides=list(strides), pads=((pads[0], pads[2]), (pads[1], pads[3])),
                 dilations=list(dil), groups=groups)
    want = _conv_ref(xr, wr, strides, pads, dil, groups) + br[None, :, None, None]
    r, rr = _to(rng.uniform(-1, 1, want.shape), dtype)
    with dg.GradientTape() as tape:
        tape.watch(x)
        tape.watch(w)
        y = ops.conv2d(x, w, b, **attrs)
        s = ops.sum(y * r)
    gx, gw = tape.gradient(s, [x, w])
    _close(_np(y), want, dtype, "Conv2d")
    # d/dx and d/dw of sum(conv(x, w) * r) in float64 (the adjoint and the
    # filter gradient; test_references_are_adjoint checks them by impulses).
    base = _conv_ref(xr, wr, strides, pads, dil, groups)
    want_gx = _conv_adjoint(rr, wr, xr.shape[1:], strides, pads, dil, groups)
    want_gw = _conv_filter_grad(xr, rr, wr.shape, strides, pads, dil, groups)
    _close(_np(gx), want_gx, dtype, "ConvTranspose2d (gradient of x)")
    _close(_np(gw), want_gw, dtype, "Conv2dBackpropFilter (gradient of w)")
    fused = ops.conv2d_bias_act(x, w, b, activation="relu", **attrs)
    _close(_np(fused), np.maximum(base + br[None, :, None, None], 0), dtype, "Conv2dBiasAct")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_conv_transpose_with_output_padding_and_bias(need_gpu, dtype):
    """ConvTranspose2d (cudnnConvolutionBackwardData) as the adjoint of
    Conv2d: <conv_t(x, w), z> == <x, conv(z, w)>, in float64 NumPy."""
    if dtype in HALF and DEV != "cuda":
        pytest.skip("the CPU has no 16-bit conv kernel")
    rng = np.random.default_rng(9)
    x, xr = _to(rng.uniform(-1, 1, (2, 8, 5, 6)), dtype)
    w, wr = _to(rng.uniform(-1, 1, (8, 3, 3, 3)), dtype)   # [C, O / groups, kh, kw], groups 2
    b, br = _to(rng.uniform(-1, 1, (6,)), dtype)
    y = ops.conv_transpose2d(x, w, b, strides=[2, 2], pads=[1, 1], output_padding=[1, 0],
                             dilations=[1, 1], groups=2)
    got = _np(y) - br[None, :, None, None]
    assert tuple(y.shape) == (2, 6, 10, 11)
    want = _conv_adjoint(xr, wr, (6, 10, 11), (2, 2), (1, 1, 1, 1), (1, 1), 2)
    _close(got, want, dtype, "ConvTranspose2d")


@pytest.mark.gpu
def test_float32_conv_is_exact_unless_tf32_is_asked(need_gpu, monkeypatch):
    """Sums of 64 x 9 products: exact float32 (even through Winograd) stays
    within 5e-5 of float64, relative to the largest output; TF32 (10-bit
    mantissas, ~5e-4) only with DRAGON_CUDA_ALLOW_TF32=1."""
    rng = np.random.default_rng(3)
    x, xr = _to(rng.uniform(-1, 1, (4, 64, 20, 20)), "float32")
    w, wr = _to(rng.uniform(-1, 1, (64, 64, 3, 3)), "float32")
    want = _conv_ref(xr, wr, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    exact = _np(ops.conv2d(x, w, None, pads=[1, 1]))
    scale = float(np.abs(want).max())
    assert float(np.abs(exact - want).max()) <= 5e-5 * scale
    monkeypatch.setenv("DRAGON_CUDA_ALLOW_TF32", "1")
    fast = _np(ops.conv2d(x, w, None, pads=[1, 1]))
    assert float(np.abs(fast - want).max()) <= 5e-3 * scale


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_conv_gradients_are_deterministic(need_gpu, dtype, monkeypatch):
    """The algorithm rule takes deterministic algorithms only: the same
    call twice gives the same bits (the filter gradient sums over the batch,
    where atomics would reorder). DRAGON_CUDNN_DETERMINISTIC=0 may pick an
    atomic algorithm: the same values within rounding."""
    rng = np.random.default_rng(4)
    x, _ = _to(rng.uniform(-1, 1, (16, 32, 28, 28)), dtype)
    dy, _ = _to(rng.uniform(-1, 1, (16, 64, 28, 28)), dtype)
    w, _ = _to(rng.uniform(-1, 1, (64, 32, 3, 3)), dtype)
    outs = []
    for _ in range(3):
        gw = ops.conv2d_backprop_filter(x, dy, filter_shape=[64, 32, 3, 3], pads=[1, 1])
        gx = ops.conv_transpose2d(dy, w, None, pads=[1, 1])
        outs.append((_np(gw), _np(gx)))
    for a, b in outs[1:]:
        np.testing.assert_array_equal(a, outs[0][0])
        np.testing.assert_array_equal(b, outs[0][1])
    monkeypatch.setenv("DRAGON_CUDNN_DETERMINISTIC", "0")
    gw = _np(ops.conv2d_backprop_filter(x, dy, filter_shape=[64, 32, 3, 3], pads=[1, 1]))
    gx = _np(ops.conv_transpose2d(dy, w, None, pads=[1, 1]))
    _close(gw, outs[0][0], dtype, "Conv2dBackpropFilter (DRAGON_CUDNN_DETERMINISTIC=0)")
    _close(gx, outs[0][1], dtype, "ConvTranspose2d (DRAGON_CUDNN_DETERMINISTIC=0)")


@pytest.mark.gpu
def test_empty_extents_run_without_cudnn(need_gpu):
    """An empty batch or zero input channels: the direct kernel's rule (no
    cuDNN call), with the bias where the output is not empty."""
    x = dg.tensor(np.zeros((0, 3, 5, 5), np.float32)).to(DEV)
    w = dg.tensor(np.ones((4, 3, 3, 3), np.float32)).to(DEV)
    assert tuple(ops.conv2d(x, w, None).shape) == (0, 4, 3, 3)
    x0 = dg.tensor(np.zeros((2, 0, 5, 5), np.float32)).to(DEV)
    w0 = dg.tensor(np.zeros((4, 0, 3, 3), np.float32)).to(DEV)
    b = dg.tensor(np.arange(4, dtype=np.float32)).to(DEV)
    y = _np(ops.conv2d(x0, w0, b))
    np.testing.assert_array_equal(y, np.broadcast_to(np.arange(4.0)[None, :, None, None],
                                                      (2, 4, 3, 3)))


NO_CUDNN = textwrap.dedent("""
    import ctypes, os, sys
    try:
        ctypes.CDLL(os.environ.get("DRAGON_CUDNN_LIBRARY", "libcudnn.so.9"))
        print("SKIP: the system loader finds the library")
        sys.exit(0)
    except OSError:
        pass
    import numpy as np
    import dragon_core as dg
    x = dg.tensor(np.ones((1, 2, 4, 4), np.float32)).to("cuda")
    w = dg.tensor(np.ones((3, 2, 3, 3), np.float32)).to("cuda")
    try:
        dg.ops.conv2d(x, w, None)
    except dg.errors.UnavailableError as e:
        print("RAISED:", e)
    else:
        print("NO ERROR")
""")


@pytest.mark.gpu
def test_missing_cudnn_is_an_unavailable_error(need_gpu, tmp_path):
    """DRAGON_CUDA_LIBRARY_PATH at an empty folder, the plugin loaded from a
    copy of its package (no nvidia/ wheels beside it), the system loader
    without libcudnn (where the system loader has one, the library is named
    otherwise with DRAGON_CUDNN_LIBRARY): Conv2d raises UnavailableError
    naming the op, the library and the folders searched -- never the direct
    kernel."""
    if DEV != "cuda":
        pytest.skip("needs the cuda plugin")
    import dragon_cuda
    pkg = Path(dragon_cuda.__file__).resolve().parent
    shutil.copytree(pkg, tmp_path / "site" / "dragon_cuda")
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, DRAGON_CUDA_LIBRARY_PATH=str(empty),
               PYTHONPATH=str(tmp_path / "site") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("LD_LIBRARY_PATH", None)
    env.pop("DRAGON_CUDNN_LIBRARY", None)
    import ctypes
    library = "libcudnn.so.9"
    try:
        ctypes.CDLL(library)  # the system loader has one: ask for a name it lacks
        library = "libcudnn_hidden_by_dragon_test.so.9"
        env["DRAGON_CUDNN_LIBRARY"] = library
    except OSError:
        pass
    run = subprocess.run([sys.executable, "-c", NO_CUDNN], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    out = run.stdout + run.stderr
    if "SKIP:" in out:
        pytest.skip(out.strip())
    assert "RAISED:" in out, out[-3000:]
    for part in ("Conv2d", library, str(empty), "nvidia-cudnn-cu13",
                 str(tmp_path / "site" / "dragon_cuda")):
        assert part in out, (part, out[-3000:])
