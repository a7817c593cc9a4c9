"""The user surface of the cuda device on a GPU (marker ``gpu``; the tests
skip with the device's reason elsewhere): ``x.to("cuda")``,
``dg.device("cuda:N")``, ``dg.cuda.is_available()`` / ``device_count()`` /
``get_device_name()`` / ``get_device_capability()`` / ``synchronize()``,
``dg.memory.stats("cuda:0")``, kernel selection (``explain``) for a compiled
function, ``python -m dragon_core info`` and ``examples/train_digits.py
--device cuda``.

The expected values come from the CUDA runtime through other routes
(``nvidia-smi`` where it is installed, the device's attributes and memory
info) and from the CPU, not from constants.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dragon_core as dg
import dragon_cuda

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).resolve().parents[3]

# "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB, 132 SMs, driver 13.0, runtime 13.0)"
DESCRIPTION = re.compile(r"^(?P<name>.+) \(sm_(?P<cc>\d+), (?P<gib>[\d.]+) GiB, (?P<sms>\d+) SMs, "
                         r"driver (?P<driver>\d+\.\d+), runtime (?P<runtime>\d+\.\d+)\)$")


@pytest.fixture(autouse=True)
def _need_gpu():
    if dragon_cuda.device_count() == 0:
        pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")


def _smi(query: str) -> list[str] | None:
    """One nvidia-smi field per GPU, or None without nvidia-smi."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    r = subprocess.run([smi, f"--query-gpu={query}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=60, check=False)
    if r.returncode != 0:
        return None
    return [ln.strip() for ln in r.stdout.splitlines() if ln.strip()]


def test_namespace_answers():
    n = dg.cuda.device_count()
    assert dg.cuda.is_available() is True
    assert n == dragon_cuda.device_count() >= 1
    assert dg.cuda.unavailable_reason() == ""
    names = [dg.cuda.get_device_name(i) for i in range(n)]
    assert dg.cuda.get_device_name() == names[0] == dg.cuda.get_device_name("cuda:0")
    smi = _smi("name")
    for i, desc in enumerate(names):
        m = DESCRIPTION.match(desc)
        assert m, desc
        assert m["name"].strip(), desc
        if smi is not None:
            assert m["name"] == smi[i], (desc, smi)   # e.g. "NVIDIA H100 80GB HBM3"
        assert int(m["sms"]) > 0 and float(m["gib"]) > 0


def test_compute_capability_and_memory():
    for i in range(dg.cuda.device_count()):
        cap = dg.cuda.get_device_capability(i)
        assert isinstance(cap, tuple) and len(cap) == 2 and all(isinstance(v, int) for v in cap)
        assert cap >= (8, 0), cap  # the wheel holds sm_80 and sm_90 code
        m = DESCRIPTION.match(dg.cuda.get_device_name(i))
        assert int(m["cc"]) == 10 * cap[0] + cap[1]
        smi = _smi("compute_cap")
        if smi is not None:
            assert smi[i] == f"{cap[0]}.{cap[1]}", smi
        free, total = dg.memory.mem_get_info(f"cuda:{i}")
        assert 0 < free <= total
        attrs = dg.memory.device_attributes(f"cuda:{i}")
        assert attrs["total_memory"] == total and attrs["compute_units"] == int(m["sms"])
        assert attrs["compute_capability"] == int(m["cc"])
        assert abs(float(m["gib"]) - total / 2 ** 30) <= 0.2, (m["gib"], total)
        smi_mem = _smi("memory.total")  # MiB
        if smi_mem is not None:
            assert abs(int(smi_mem[i]) * 2 ** 20 - total) <= 2 ** 30, (smi_mem, total)


def test_tensor_to_cuda_and_back():
    a = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    x = dg.tensor(a).to("cuda")
    assert str(x.device) == "cuda:0" and x.device.type == "cuda" and x.device.index == 0
    assert x.to(dg.device("cuda:0")) is x
    y = (x * 2).to(dg.device("cuda", 0))
    np.testing.assert_array_equal(y.cpu().numpy(), 2 * a)
    with pytest.raises(Exception, match=r"cpu\(\)|\.cpu"):
        y.numpy()  # as torch: a device tensor is read through .cpu()
    assert "cuda:0" in repr(y)


def test_device_beyond_the_count_is_a_clear_error():
    n = dg.cuda.device_count()
    d = dg.device(f"cuda:{n}")  # as torch.device: checked where it is used
    assert (d.type, d.index) == ("cuda", n)
    with pytest.raises(dg.errors.DragonError) as info:
        dg.tensor([1.0]).to(d)
    msg = str(info.value)
    assert f"cuda:{n}" in msg and f"({n} cuda device(s) found)" in msg, msg
    with pytest.raises(ValueError, match=rf"cuda:{n} does not exist \({n} cuda device"):
        dg.cuda.get_device_name(n)
    with pytest.raises(ValueError):
        dg.device("cuda", -1)


def test_synchronize_waits_for_the_device():
    x = dg.tensor(np.ones((2048, 2048), np.float32)).to("cuda")
    s = dg.cuda.current_stream()
    for _ in range(6):
        x = dg.ops.matmul(x, x) * (1.0 / 2048)
    e = s.record_event()
    before = dg.memory.stats("cuda:0")["device_syncs"]
    dg.cuda.synchronize()
    assert e.query(), "an event recorded before synchronize() must be complete after it"
    assert dg.memory.stats("cuda:0")["device_syncs"] == before + 1
    np.testing.assert_allclose(x.cpu().numpy(), np.ones((2048, 2048)), rtol=1e-5)


def test_memory_stats_of_cuda0():
    keys = {"allocated", "reserved", "peak", "num_allocs", "num_requests", "num_frees",
            "cross_stream_reuses", "device_syncs", "stream_syncs", "event_syncs",
            "stream_waits", "events_created"}
    s0 = dg.memory.stats("cuda:0")
    assert keys <= set(s0), sorted(s0)
    x = dg.ops.zeros((1 << 20,), device="cuda:0")
    s1 = dg.memory.stats("cuda:0")
    assert s1["allocated"] >= s0["allocated"] + (4 << 20)
    assert dg.cuda.memory_allocated() == s1["allocated"]
    assert dg.cuda.memory_reserved() >= s1["allocated"]
    assert dg.cuda.max_memory_allocated() >= s1["allocated"]
    assert dg.cuda.memory_stats()["num_requests"] >= s1["num_requests"]
    assert float(dg.ops.sum(x).cpu().numpy()) == 0.0


def test_explain_of_a_compiled_function_lists_cuda_kernels():
    @dg.function
    def step(x, w, b):
        return dg.ops.sum(dg.ops.softmax(dg.ops.relu(dg.ops.matmul(x, w) + b), axis=-1))

    rng = np.random.default_rng(1)
    args = [dg.tensor(rng.standard_normal(s).astype(np.float32)).to("cuda")
            for s in ((8, 16), (16, 4), (4,))]
    got = float(step(*args).cpu().numpy())
    assert got == pytest.approx(8.0, rel=1e-5)  # each softmax row sums to 1
    types = sorted({op.type for op in step.get_graph(*args).op})
    assert types, "the compiled graph has no ops"
    cuda_kernels = {k["name"] for t in types for k in dg.plugins.kernels(t)
                    if k["device"] == "cuda"}
    for t in types:
        if not dg.plugins.kernels(t):
            continue  # control ops run by the executor
        text = dg.plugins.explain(t, "cuda", "float32")
        m = re.search(r"winner: (\S+) from (\S+)", text)
        assert m and m[2] == "cuda" and m[1] in cuda_kernels, (t, text, sorted(cuda_kernels))


def test_info_lists_each_gpu():
    r = subprocess.run([sys.executable, "-m", "dragon_core", "info"], capture_output=True,
                       text=True, timeout=120, check=False, cwd=str(ROOT.parent))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    (head,) = [ln for ln in lines if re.match(r"^  cuda\s+count=", ln)]
    n = dg.cuda.device_count()
    m = re.match(r"^  cuda\s+count=(\d+)\s+from cuda \((.*)\)$", head)
    assert m and int(m[1]) == n, head
    descs = [m[2]]
    if n > 1:
        descs = [re.match(rf"^      cuda:{i}  (.*)$", ln)[1]
                 for i, ln in enumerate(ln for ln in lines if ln.startswith("      cuda:"))]
    assert len(descs) == n, lines
    for i, desc in enumerate(descs):
        assert desc == dg.cuda.get_device_name(i)
        d = DESCRIPTION.match(desc)
        assert d, desc
        cap = dg.cuda.get_device_capability(i)
        assert d["cc"] == f"{cap[0]}{cap[1]}"
        assert float(d["driver"]) >= 12.0 and float(d["runtime"]) >= 12.0, desc
        assert float(d["driver"]) >= float(d["runtime"]), desc  # the driver runs the runtime
    plugin = [ln for ln in lines if re.match(r"^  cuda\s+\S+\s+ABI", ln)]
    assert plugin and "loaded" in plugin[0], lines


def test_train_digits_on_cuda(tmp_path):
    pytest.importorskip("sklearn", reason="the example loads scikit-learn's digits")
    script = ROOT / "examples" / "train_digits.py"
    assert script.is_file(), script
    r = subprocess.run([sys.executable, str(script), "--device", "cuda", "--epochs", "2",
                        "--min-accuracy", "0.9", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=400, check=False,
                       cwd=str(tmp_path), env=dict(os.environ, PYTHONUNBUFFERED="1"))
    assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:])
    accs = {m[1]: float(m[2]) for m in re.finditer(r"^(eager|graph): test accuracy ([\d.]+)%",
                                                   r.stdout, re.M)}
    assert set(accs) == {"eager", "graph"} and min(accs.values()) >= 90.0, r.stdout
    assert "reloaded model: test accuracy" in r.stdout
