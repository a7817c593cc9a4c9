"""``bench/bench_mkldnn.py --quick`` runs end to end: every row is produced,
every checked result is right (no WRONG or ERROR row), and Dragon's rows name
the kernel that served each op.

The benchmark compares with torch and onnxruntime, which ``make test``
installs (requirements-dev.txt).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "bench" / "bench_mkldnn.py"

#: (benchmark, library, implementation prefix) of every row the run must print.
EXPECTED = [
    ("conv2d_b8_64x56_f32", "dragon", "F.conv2d eager"),
    ("conv2d_b8_64x56_f32", "torch", "F.conv2d eager"),
    ("conv2d_fwdbwd_b8_64x56_f32", "dragon", "conv2d + dg.grad(x, w) eager"),
    ("conv2d_fwdbwd_b8_64x56_f32", "torch", "conv2d + autograd.grad(x, w) eager"),
    ("matmul_1024_f32", "dragon", "dg.ops.matmul(a, b)"),
    ("matmul_1024_f32", "torch", "torch.matmul(a, b)"),
    ("resnet18_b8_64_f32", "dragon", "@dg.function(freeze=True) forward (O3)"),
    ("resnet18_b8_64_f32", "dragon", "@dg.function forward (O3), live parameters"),
    ("resnet18_b8_64_f32", "dragon", "eager forward"),
    ("resnet18_b8_64_f32", "onnxruntime", "InferenceSession CPU"),
    ("resnet18_b8_64_f32", "torch", "eager forward, no_grad"),
]

#: The ops each Dragon row must attribute to a plugin.
SERVED = {
    "conv2d_b8_64x56_f32": {"Conv2d"},
    "conv2d_fwdbwd_b8_64x56_f32": {"Conv2d", "ConvTranspose2d", "Conv2dBackpropFilter"},
    "matmul_1024_f32": {"MatMul"},
    # The graph: pattern fusion folds each BatchNorm into its convolution
    # and fuses the bias and ReLU (conv -> bn -> relu becomes Conv2dBiasAct);
    # mkldnn's nchw16c pass then runs the convolutions and the max pooling
    # on blocked tensors.
    "resnet18_b8_64_f32": {"Conv2dNchw16c", "MaxPool2dNchw16c", "AdaptiveAvgPool2d",
                           "MatMulBiasAct"},
}


#: Informational Dragon rows that do not name their kernels.
UNATTRIBUTED = {"eager forward", "@dg.function forward (O3), live parameters"}


def _missing(*modules: str) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def _run_quick(tmp_path):
    """Run the benchmark once with --quick; return (process, JSON data or None)."""
    out = tmp_path / "mkldnn.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--quick", "--json", str(out)],
                          check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=600)
    return proc, (json.loads(out.read_text()) if out.exists() else None)


def _check_every_row_printed(proc, data):
    assert data is not None and data["meta"]["quick"] is True
    for bench, library, impl in EXPECTED:
        assert f"{library}: {impl}" in proc.stdout, (bench, library, impl, proc.stdout)
        rows = [r for r in data["results"] if r["bench"] == bench
                and r["library"] == library and r["impl"].startswith(impl)]
        assert len(rows) == 1, (bench, library, impl, data["results"])
    assert len(data["results"]) == len(EXPECTED)


def _check_every_result_checked_and_timed(data):
    for row in data["results"]:
        assert row["status"] not in ("WRONG", "ERROR", "SKIP"), row
        assert row["value"] is not None and row["value"] > 0, row
    resnet = [r for r in data["results"] if r["bench"] == "resnet18_b8_64_f32"]
    assert {r["reference"] for r in resnet} == {"torch float64"}
    graph = next(r for r in resnet if r["impl"].startswith("@dg.function"))
    ort = next(r for r in resnet if r["library"] == "onnxruntime")
    assert graph["target"] == pytest.approx(ort["value"], abs=0.01)


def _check_serving_plugins_named(data):
    import dragon_core as dg
    for row in data["results"]:
        if row["library"] != "dragon" or row["impl"] in UNATTRIBUTED:
            continue
        served = row["served"]
        assert SERVED[row["bench"]] <= set(served), (row["bench"], sorted(served))
        for op, entry in served.items():
            plugins = {k["plugin"] for k in dg.plugins.kernels(op) if k["device"] == "cpu"}
            assert entry["plugin"] in plugins, (op, entry, plugins)
            assert entry["plugin"] in row["impl"] and op in row["note"], row
            if entry["plugin"] == "mkldnn":   # it ran oneDNN primitives of its own
                assert entry["onednn"] or "only candidate" in entry["text"], entry


@pytest.mark.slow
def test_bench_mkldnn_quick_runs_checks_and_names_kernels(tmp_path):
    # One test (one benchmark run) so that pytest -n 2 does not run it twice.
    missing = _missing("torch", "onnxruntime", "onnx")
    assert not missing, (f"{', '.join(missing)} not importable: requirements-dev.txt "
                         "installs them")
    proc, data = _run_quick(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    _check_every_row_printed(proc, data)
    _check_every_result_checked_and_timed(data)
    _check_serving_plugins_named(data)
