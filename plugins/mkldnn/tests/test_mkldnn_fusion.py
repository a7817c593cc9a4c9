"""mkldnn declares the standard fusion patterns; graphs fuse and stay exact.

The plugin's ``_fusion`` module implements the ``dragon_fusion_patterns``
hook; the core's ``pattern_fusion`` pass applies the patterns where a kernel
for the fused op exists on cpu (see tests/graph/test_pattern_fusion.py for
the pass itself). Float32 models are compared with a NumPy float64
reference written from the definitions (conv2d_ref of tests/ops/test_conv)
at rtol 1e-4 / atol 1e-4 relative to the output's scale (the fused kernels
sum in another order, and batch-norm folding rounds w * s once more), and
fused with unfused graphs (``DRAGON_DISABLE_PASSES=pattern_fusion``) at
1e-5.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import fusion, nn

from mkldnn_testing import run_without
from tests.ops.test_conv import conv2d_ref

F32 = "float32"


def test_mkldnn_declares_the_standard_patterns_through_its_hook():
    impls = {i.plugin_name: i for i in dg.plugins._pm.hook.dragon_fusion_patterns.get_hookimpls()}
    assert {"mkldnn", "cpu_eigen"} <= set(impls)
    for name in ("mkldnn", "cpu_eigen"):
        assert tuple(impls[name].function(core=dg)) == fusion.STANDARD_PATTERNS
    assert {p.name for p in fusion.patterns()} >= {p.name for p in fusion.STANDARD_PATTERNS}


def _conv_net(rng, groups: int, hw: tuple):
    """conv(bias=False) -> bn -> relu -> conv(stride 2, groups) -> relu ->
    flatten -> linear -> relu -> linear, in eval mode, for images ``hw``."""
    flat = 4 * ((hw[0] - 3) // 2 + 1) * ((hw[1] - 3) // 2 + 1)
    m = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(),
                      nn.Conv2d(6, 4, 3, stride=2, groups=groups), nn.ReLU(),
                      nn.Flatten(), nn.Linear(flat, 7), nn.ReLU(), nn.Linear(7, 3))
    for p in m.parameters():
        p.assign(dg.tensor(rng.standard_normal(tuple(p.shape)).astype(F32) * 0.5))
    bn = m[1]
    bn.running_mean.assign(dg.tensor(rng.standard_normal(6).astype(F32)))
    bn.running_var.assign(dg.tensor(rng.random(6).astype(F32) + 0.5))
    return m.eval()


def _net_ref(m, x):
    """The network in float64 NumPy, from the layer definitions."""
    f = lambda t: np.asarray(t, dtype=np.float64)  # noqa: E731
    c = lambda v: v[:, None, None]  # noqa: E731
    bn = m[1]
    z = conv2d_ref(f(x), f(m[0].weight), None, pads=[1, 1])
    z = (z - c(f(bn.running_mean))) / np.sqrt(c(f(bn.running_var)) + bn.eps)
    z = np.maximum(z * c(f(bn.weight)) + c(f(bn.bias)), 0)
    z = np.maximum(conv2d_ref(z, f(m[3].weight), f(m[3].bias), strides=[2, 2],
                              groups=m[3].groups), 0)
    z = z.reshape(z.shape[0], int(np.prod(z.shape[1:])))
    z = np.maximum(z @ f(m[6].weight).T + f(m[6].bias), 0)
    return z @ f(m[8].weight).T + f(m[8].bias)


def _traced(fn, fused: bool, *args):
    """``dg.function(fn)`` traced for ``args``, with or without pattern fusion
    (the switch is read when the graph is optimised, at the trace)."""
    old = os.environ.pop("DRAGON_DISABLE_PASSES", None)
    if not fused:
        os.environ["DRAGON_DISABLE_PASSES"] = "pattern_fusion"
    try:
        f = dg.function(fn)
        f.get_graph(*args)
        return f
    finally:
        os.environ.pop("DRAGON_DISABLE_PASSES", None)
        if old is not None:
            os.environ["DRAGON_DISABLE_PASSES"] = old


@pytest.mark.parametrize("batch,hw,groups", [(2, (6, 5), 1), (1, (7, 4), 2), (0, (6, 5), 1)])
def test_eval_network_fused_matches_numpy_and_unfused(batch, hw, groups):
    rng = np.random.default_rng(batch + groups)
    m = _conv_net(rng, groups, hw)
    x = dg.tensor(rng.standard_normal((batch, 3) + hw).astype(F32))
    fused, plain = (_traced(lambda x: m(x), on, x) for on in (True, False))
    g, plain_graph = fused.get_graph(x), plain.get_graph(x)
    patterns = sorted(op.attr["_fusion_pattern"].s for op in g.op if "_fusion_pattern" in op.attr)
    assert patterns == ["conv2d_batchnorm_relu", "conv2d_relu", "matmul_bias",
                        "matmul_bias_relu"]
    assert "BatchNorm" in {op.type for op in plain_graph.op}
    got, unfused = np.asarray(fused(x)), np.asarray(plain(x))
    want = _net_ref(m, x.numpy())
    scale = max(1.0, float(np.abs(want).max(initial=0)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale)
    np.testing.assert_allclose(got, unfused, rtol=1e-5, atol=1e-5 * scale)


def test_training_steps_fused_match_unfused():
    """Three SGD steps of conv -> relu -> linear -> relu -> linear: the same
    losses and parameters with and without fusion (float32)."""
    results = []
    for on in (True, False):
        rng = np.random.default_rng(11)
        m = nn.Sequential(nn.Conv2d(3, 5, 3), nn.ReLU(), nn.Flatten(), nn.Linear(5 * 3 * 3, 6),
                          nn.ReLU(), nn.Linear(6, 2))
        params = list(m.parameters())
        for p in params:
            p.assign(dg.tensor(rng.standard_normal(tuple(p.shape)).astype(F32) * 0.3))
        x = dg.tensor(rng.standard_normal((4, 3, 5, 5)).astype(F32))

        def step(x):
            with dg.GradientTape() as tape:
                tape.watch(params)
                loss = dg.ops.mean(dg.ops.square(m(x)))
            for p, g in zip(params, tape.gradient(loss, params)):
                p.assign(p - 0.05 * g)
            return loss

        f = _traced(step, on, x)
        kinds = {op.type for op in f.get_graph(x).op}
        assert ("Conv2dBiasAct" in kinds and "MatMulBiasAct" in kinds) == on
        losses = [float(f(x).numpy()) for _ in range(3)]
        results.append((losses, [p.numpy().copy() for p in params]))
    (l1, p1), (l2, p2) = results
    np.testing.assert_allclose(l1, l2, rtol=1e-5)
    assert l1[2] < l1[0]   # the steps train
    for a, b in zip(p1, p2):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


_PROBE = r"""
import json, numpy as np, dragon_core as dg
out = {"patterns": sorted(p.name for p in dg.fusion.patterns())}
if any(k["device"] == "cpu" for k in dg.plugins.kernels("Conv2d")):
    w = dg.tensor(np.linspace(-1, 1, 24, dtype=np.float32).reshape(2, 3, 2, 2))
    x = dg.tensor(np.linspace(-2, 2, 48, dtype=np.float32).reshape(1, 3, 4, 4))
    f = dg.function(lambda x: dg.ops.relu(dg.nn.functional.conv2d(x, w)))
    out.update(types=[op.type for op in f.get_graph(x).op], y=np.asarray(f(x)).tolist())
print(json.dumps(out))
"""


def _probe(disable: str) -> dict:
    return run_without(disable, _PROBE)


def test_cpu_eigen_declares_the_same_patterns_without_mkldnn():
    """cpu_eigen's fused kernels serve the same patterns, so a graph fuses
    the same way with mkldnn disabled; with neither plugin nothing declares."""
    standard = sorted(p.name for p in fusion.STANDARD_PATTERNS)
    on, off = _probe(""), _probe("mkldnn")
    assert on["patterns"] == off["patterns"] == standard
    assert on["types"] == off["types"] == ["Conv2dBiasAct"]
    np.testing.assert_allclose(on["y"], off["y"], rtol=1e-6, atol=1e-6)
    assert _probe("mkldnn,cpu_eigen") == {"patterns": []}
