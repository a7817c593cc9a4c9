"""Memory planning (O0 vs O3 peak), save/load of graphs and their providers."""

import subprocess
import sys

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.proto as P


def _mlp_step(opt_level):
    rng = np.random.default_rng(0)
    sizes = [64, 256, 256, 10]
    params = [dg.tensor(rng.standard_normal((a, b)) * 0.05) for a, b in zip(sizes, sizes[1:])]
    x = dg.tensor(rng.standard_normal((32, 64)))
    labels = dg.ops.one_hot(dg.tensor(rng.integers(0, 10, 32)), 10, dtype="float64")

    @dg.function(opt_level=opt_level)
    def step(x, labels):
        with dg.GradientTape() as tape:
            tape.watch(params)
            h = x
            for i, w in enumerate(params):
                h = h @ w
                if i < len(params) - 1:
                    h = dg.ops.relu(h)
            loss = -dg.ops.mean(dg.ops.sum(labels * dg.ops.log_softmax(h), [1]))
        grads = tape.gradient(loss, params)
        for w, g in zip(params, grads):
            w.assign(w - 0.01 * g)
        return loss

    step(x, labels)                       # trace and compile
    dg.memory.reset_peak()
    base = dg.memory.stats()["allocated"]
    loss = step(x, labels)
    peak = dg.memory.stats()["peak"] - base
    return peak, loss.item(), [p.numpy().copy() for p in params]


def test_o3_peak_is_lower_than_o0_and_results_agree():
    peak0, loss0, p0 = _mlp_step(0)
    peak3, loss3, p3 = _mlp_step(3)
    print(f"\nMLP step peak bytes: O0={peak0}  O3={peak3}")
    assert peak3 < peak0
    assert loss0 == pytest.approx(loss3, rel=1e-12)
    for a, b in zip(p0, p3):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_save_and_load_graph_round_trip(tmp_path):
    w = dg.tensor(np.array([[1.0, 2.0], [3.0, 4.0]]))

    @dg.function
    def f(x):
        return dg.ops.relu(x @ w - 2.0)

    x = dg.tensor(np.array([[1.0, -1.0], [0.5, 2.0]]))
    path = tmp_path / "f.pb"
    dg.save_graph(f, path, x)
    w.assign(w * 0.0)                      # the saved graph froze w's value
    loaded = dg.load_graph(path)
    np.testing.assert_allclose(loaded(x).numpy(),
                               np.maximum(x.numpy() @ [[1.0, 2.0], [3.0, 4.0]] - 2.0, 0))
    graph = P.GraphDef.FromString(path.read_bytes())
    assert {op.plugin for op in graph.op} == {"core"}
    assert all(op.plugin_dist == "dragon-core" for op in graph.op)


def test_loading_a_graph_whose_plugin_is_missing_names_the_wheel(tmp_path):
    # A plugin nobody installs here (vision_ops is installed by make).
    g = P.GraphDef(name="needs_acme")
    g.input.append("x")
    op = g.op.add(name="AcmeRoiWarp_0", type="AcmeRoiWarp", plugin="acme_ops",
                  plugin_version="0.3.0", plugin_dist="acme-vision-ops")
    op.input.append("x")
    op.output.append("y")
    g.output.append("y")
    path = tmp_path / "g.pb"
    dg.save_graph(g, path)
    with pytest.raises(dg.errors.PluginError) as info:
        dg.load_graph(path)
    assert "pip install acme-vision-ops" in str(info.value)
    assert "AcmeRoiWarp" in str(info.value) and "0.3.0" in str(info.value)


def test_corrupt_graph_file_is_a_clear_error(tmp_path):
    path = tmp_path / "bad.pb"
    path.write_bytes(b"\xff\xff\xff not a graph")
    with pytest.raises(ValueError, match="not a valid Dragon graph"):
        dg.load_graph(path)


def test_save_graph_is_atomic(tmp_path):
    """A save that fails half-way leaves the previous file intact."""
    path = tmp_path / "keep.pb"
    dg.save_graph(P.GraphDef(name="old"), path)
    code = (
        "import os, dragon_core as dg, dragon_core.proto as P\n"
        "real = os.replace\n"
        "os.replace = lambda *a: os._exit(3)\n"
        f"dg.save_graph(P.GraphDef(name='new'), r'{path}')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 3
    assert P.GraphDef.FromString(path.read_bytes()).name == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.pb"] or \
        all(p.name == "keep.pb" or p.name.startswith(".tmp-") for p in tmp_path.iterdir())
