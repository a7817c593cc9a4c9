"""The training demo (`make demo`) reaches its accuracy in both modes and
leaves a loadable checkpoint and readable TensorBoard logs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_digits.py"


@pytest.fixture(scope="module")
def demo():
    spec = importlib.util.spec_from_file_location("train_digits", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_digits_cnn_reaches_97_percent_eager_and_graph(demo, tmp_path, capsys):
    code = demo.main(["--epochs", "5", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    for mode in ("eager", "graph"):
        line = next(l for l in out.splitlines() if l.startswith(f"{mode}: test accuracy"))
        acc = float(line.split("accuracy ")[1].split("%")[0])
        assert acc >= 97.0, line
    import dragon_core as dg
    state = dg.load(str(tmp_path / "digits_cnn.dgt"))
    assert state["accuracy"] >= 0.97
    assert "features.0.weight" in state["model"]
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    for mode in ("eager", "graph"):
        acc = EventAccumulator(str(tmp_path / "logs" / mode))
        acc.Reload()
        tags = acc.Tags()
        assert "train/loss" in tags["scalars"] and "test/accuracy" in tags["scalars"]
        assert len(acc.Scalars("test/accuracy")) == 5
        assert any(t.startswith("params/") for t in tags["histograms"])
        assert "samples/test" in tags["images"]
    graph_acc = EventAccumulator(str(tmp_path / "logs" / "graph"))
    graph_acc.Reload()
    assert graph_acc.Tags()["graph"]


def test_an_unavailable_device_stops_with_its_reason(demo, capsys):
    """No silent fallback: --device cuda without a GPU (or a missing index)
    ends at once with the device's one-line reason and exit code 2."""
    import dragon_core as dg
    count = dg.cuda.device_count()
    code = demo.main(["--device", f"cuda:{count}", "--epochs", "1"])
    out = capsys.readouterr().out
    assert code == 2, out
    assert f"cannot train on cuda:{count}: " in out
    if count == 0:
        assert dg.cuda.unavailable_reason() in out
