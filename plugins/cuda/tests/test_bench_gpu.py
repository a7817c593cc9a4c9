"""bench/bench_gpu.py (the GPU benchmark module): its path without a GPU,
its arithmetic, and the module's own code run on the CPU
(``DEVICE = "cpu"``: Dragon and torch on the CPU, small sizes) so that a
broken builder or check shows here, not first on a lent GPU machine."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

import dragon_core as dg

ROOT = Path(__file__).resolve().parents[3]
BENCH = ROOT / "bench"


@pytest.fixture()
def bench_gpu():
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location("bench_gpu_under_test",
                                                      BENCH / "bench_gpu.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))


def _keys(rows):
    return {(r["bench"], r["library"], r["impl"]) for r in rows}


def test_without_a_gpu_every_row_is_skip_with_the_reason(bench_gpu):
    if dg.cuda.is_available():
        pytest.skip("a cuda device is present: the GPU path runs instead")
    rows = bench_gpu.run()
    assert {r["bench"] for r in rows} == set(bench_gpu.TABLE)
    reason = dg.cuda.unavailable_reason()
    for r in rows:
        assert r["status"] == "SKIP" and r["value"] is None
        assert r["note"] == f"no cuda device: {reason}"
        assert r["metric"] == bench_gpu.TABLE[r["bench"]][0]
    # every Dragon implementation and one torch row per bench
    want = {(b, "dragon", i) for b, impls in bench_gpu.DRAGON_IMPLS.items() for i in impls}
    want |= {(b, "torch", "-") for b in bench_gpu.TABLE}
    assert _keys(rows) == want


def test_bench_run_lists_and_runs_the_module(tmp_path):
    """bench/run.py discovers the module; ``-k gpu`` runs it and writes the
    rows (SKIP here) without an error row."""
    listed = subprocess.run([sys.executable, str(BENCH / "run.py"), "--list", "-k", "gpu"],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "bench/bench_gpu.py" in listed.stdout
    if dg.cuda.is_available():
        return
    out = tmp_path / "gpu.json"
    ran = subprocess.run([sys.executable, str(BENCH / "run.py"), "-k", "gpu", "--json", str(out)],
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr[-2000:]
    import json
    data = json.loads(out.read_text())
    assert data["meta"]["cuda_devices"] == []
    assert data["results"] and all(r["status"] == "SKIP" for r in data["results"])


def test_targets_follow_torch_in_the_same_run(bench_gpu):
    t = bench_gpu.target_for
    assert t("add_1elem", 6.0) == 6.0 and t("add_1elem", None) == 7.8
    assert t("matmul_4096_bf16", 800.0) == pytest.approx(760.0)
    assert t("matmul_4096_f32", None) == pytest.approx(0.95 * 51.4)
    assert t("conv_fwdbwd_b8_64x56_f32", 0.2) == pytest.approx(0.22)
    assert t("mlp_train_784_512_512_10", 900.0, "eager step") == 900.0
    assert t("mlp_train_784_512_512_10", 900.0, "@dg.function step (compiled)") == 1800.0
    assert bench_gpu.matmul_tflops(4096, 2 * 4096 ** 3 / 1e12) == pytest.approx(1.0)
    assert set(bench_gpu.BUILDERS) == set(bench_gpu.TABLE) == set(bench_gpu.DRAGON_IMPLS)


def test_slow_calls_are_timed_once_within_the_budget(bench_gpu):
    calls = []
    budget = bench_gpu.Budget(100.0)
    s, note = bench_gpu.time_runs(lambda: calls.append(1), lambda: None, budget,
                                  min_run_s=0.001, runs=3, max_reps=5)
    assert s >= 0 and note == "" and len(calls) == 2 + 3 * 5
    import time
    calls.clear()
    s, note = bench_gpu.time_runs(lambda: (calls.append(1), time.sleep(0.02)), lambda: None,
                                  budget, slow_s=0.01)
    assert len(calls) == 1 and s >= 0.02 and "one call timed" in note


@pytest.mark.parametrize("benches", [("add_1elem", "mlp_train_784_512_512_10"),
                                     ("matmul_4096_f32", "matmul_4096_bf16")])
def test_module_code_runs_on_the_cpu(bench_gpu, monkeypatch, benches):
    """The builders, checks and timing with the CPU as the device (quick
    sizes): every row PASS/MISS/INFO (numbers meaningless), none WRONG or
    ERROR."""
    pytest.importorskip("torch")
    monkeypatch.setattr(bench_gpu, "DEVICE", "cpu")
    monkeypatch.setenv("DRAGON_BENCH_GPU_BUDGET_S", "60")
    rows = bench_gpu.run(quick=True, only=benches)
    assert {r["bench"] for r in rows} == set(benches)
    bad = [r for r in rows if r["status"] not in ("PASS", "MISS", "INFO")]
    assert not bad, bad
    libs = {(r["bench"], r["library"]) for r in rows}
    assert all((b, "torch") in libs and (b, "dragon") in libs for b in benches)
