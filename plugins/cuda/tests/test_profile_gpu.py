"""bench/profile_gpu.py (per-op device-time profile of the GPU training
steps): its eager op timer, and the whole tool at small sizes on the CPU
(``--device cpu``) and, where there is one, on the GPU."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

import dragon_core as dg

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"


@pytest.fixture()
def profile_gpu():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("profile_gpu_under_test",
                                                      BENCH / "profile_gpu.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def _sections(path):
    return {s["title"]: s for s in json.loads(Path(path).read_text())["sections"]}


def test_eager_timer_counts_every_path_and_restores_it(profile_gpu):
    """Ops reached through dg.ops functions, Tensor operators and _C.call
    are each timed once (nested calls not twice); leaving the timer puts
    every patched entry point back."""
    call, add = dg._C.call, dg.Tensor.__dict__["__add__"]
    relu = dg.ops.relu
    a = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = dg.tensor(np.ones((2, 3), np.float32))
    with profile_gpu.EagerOpTimer(dg, "cpu") as timer:
        y = a + b                      # Tensor operator bound in C++
        y = y * b                      # another
        z = dg.ops.relu(y - 3.0)       # generated op function (+ an operator)
        w = dg._C.call(dg._C.op("Neg"), (z,), ())  # the dispatcher itself
        ops = timer.collect()
    assert {k: v[0] for k, v in ops.items()} == {"Add": 1, "Mul": 1, "Sub": 1, "Relu": 1,
                                                 "Neg": 1}
    assert all(ms >= 0 for _, ms in ops.values())
    np.testing.assert_array_equal(np.asarray(w.numpy()),
                                  -np.maximum((np.arange(6).reshape(2, 3) + 1.0) - 3.0, 0))
    assert dg._C.call is call and dg.Tensor.__dict__["__add__"] is add
    assert dg.ops.relu is relu and relu.__globals__["_call"] is call
    with profile_gpu.EagerOpTimer(dg, "cpu") as timer:
        pass
    assert timer.collect() == {}


def test_cpu_run_of_the_mlp_profiles(profile_gpu, tmp_path, capsys):
    """The whole tool on the CPU (MLP, eager and compiled, torch when it is
    installed): every section is a table, shares sum to one, and the op
    census is the MLP's (3 forward and 5 backward products, one optimizer
    update)."""
    out = tmp_path / "p.json"
    assert profile_gpu.main(["--device", "cpu", "--quick", "--only", "mlp", "--runs", "2",
                             "--json", str(out)]) == 0
    text = capsys.readouterr().out
    secs = _sections(out)
    eager = next(s for t, s in secs.items() if "dragon eager" in t)
    comp = next(s for t, s in secs.items() if "dragon compiled" in t)
    for s in (eager, comp):
        assert "skipped" not in s, s
        assert s["runs"] >= 1
        assert abs(sum(r["share"] for r in s["rows"]) - 1.0) < 1e-9
        assert all(r["ms_per_step"] >= 0 for r in s["rows"])
        assert s["title"] in text
    rows = {r["name"]: r for r in eager["rows"]}
    # eager linear adds the bias inside MatMulBiasAct (nn.functional.linear)
    assert rows.get("MatMulBiasAct", {"calls_per_step": 0})["calls_per_step"] \
        + rows.get("MatMul", {"calls_per_step": 0})["calls_per_step"] == 8
    assert rows["MultiSgdUpdate"]["calls_per_step"] == 1
    crows = {r["name"]: r for r in comp["rows"]}
    assert crows["MultiSgdUpdate"]["calls_per_step"] == 1
    # compiled: the three forward products are fused with bias (and ReLU)
    assert crows.get("MatMulBiasAct", {"calls_per_step": 0})["calls_per_step"] \
        + crows.get("MatMul", {"calls_per_step": 0})["calls_per_step"] == 8
    # the same weights and data: the same first loss eagerly and compiled
    np.testing.assert_allclose(eager["first_loss"], comp["first_loss"], rtol=1e-5)
    torch_sec = next(s for t, s in secs.items() if "torch eager" in t)
    if "skipped" not in torch_sec:
        np.testing.assert_allclose(eager["first_loss"], torch_sec["first_loss"], rtol=1e-4)
        assert torch_sec["rows"]


def test_bad_arguments_and_no_gpu(profile_gpu, capsys):
    with pytest.raises(SystemExit):
        profile_gpu.main(["--only", "resnet50"])
    if not dg.cuda.is_available():
        assert profile_gpu.main(["--only", "mlp"]) == 1
        assert "no cuda device" in capsys.readouterr().out


@pytest.mark.gpu
@pytest.mark.skipif(not dg.cuda.is_available(), reason="needs a cuda device")
def test_gpu_run_small(profile_gpu, tmp_path):
    """On a GPU: every workload at small sizes, eager and compiled; every
    Dragon section is a table with the step's ops (batch norm forward and
    backward, pooling, the optimizer) and device times, and the eager op
    times cover the step (no op escaped the timer)."""
    out = tmp_path / "p.json"
    assert profile_gpu.main(["--device", "cuda", "--quick", "--runs", "2", "--budget", "120",
                             "--json", str(out)]) == 0
    secs = _sections(out)
    dragon = {t: s for t, s in secs.items()
              if ("| dragon eager" in t and "kernels" not in t) or "| dragon compiled" in t}
    assert len(dragon) == 6, list(secs)
    for t, s in dragon.items():
        assert "skipped" not in s, (t, s)
        names = {r["name"] for r in s["rows"]}
        if t.startswith("resnet18"):
            assert {"BatchNorm", "BatchNormGrad", "MaxPool2d", "MultiSgdUpdate"} <= names, t
        assert s["step_ms"] > 0
    for t, s in dragon.items():
        if "dragon eager" in t:
            ops = sum(r["ms_per_step"] for r in s["rows"])
            assert 0.1 * s["step_ms"] <= ops <= 1.05 * s["step_ms"], (t, ops, s["step_ms"])


def test_single_op_table_on_the_cpu(profile_gpu, tmp_path):
    """``--ops``: every op of the table runs (no ERROR row) and is timed."""
    out = tmp_path / "ops.json"
    assert profile_gpu.main(["--device", "cpu", "--quick", "--ops", "--rounds", "1",
                             "--calls", "1", "--json", str(out)]) == 0
    (sec,) = json.loads(out.read_text())["sections"]
    names = [r["name"] for r in sec["rows"]]
    assert len(names) == 16 and any(n.startswith("BatchNormGrad") for n in names)
    for r in sec["rows"]:
        assert "error" not in r, r
        assert r["dragon_ms"] > 0


@pytest.mark.gpu
@pytest.mark.skipif(not dg.cuda.is_available(), reason="needs a cuda device")
def test_single_op_table_on_the_gpu(profile_gpu, tmp_path):
    """On a GPU: every op runs, with torch's kernel time beside it when
    torch sees the GPU."""
    out = tmp_path / "ops.json"
    assert profile_gpu.main(["--device", "cuda", "--quick", "--ops", "--rounds", "1",
                             "--calls", "2", "--json", str(out)]) == 0
    (sec,) = json.loads(out.read_text())["sections"]
    try:
        import torch
        torch_gpu = torch.cuda.is_available()
    except ImportError:
        torch_gpu = False
    for r in sec["rows"]:
        assert "error" not in r, r
        assert r["dragon_ms"] > 0
        if torch_gpu:
            assert r["torch_ms"] is not None and r["torch_ms"] > 0, r
