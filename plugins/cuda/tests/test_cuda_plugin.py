"""The cuda plugin on any machine: it loads through the ABI only, passes
the SDK's audit, registers the stream-ordered ``cuda`` device, and without a
driver reports 0 devices with a one-line reason -- quietly, lazily, and
without slowing ``import dragon_core``."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

import pytest

import dragon_core as dg
import dragon_cuda
import dragon_sdk


def _run(code: str, **env) -> subprocess.CompletedProcess:
    e = dict(os.environ, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=e, timeout=120, check=False)


def test_plugin_is_loaded_and_registers_the_device():
    (info,) = [p for p in dg.plugins.list_plugins() if p.name == "cuda"]
    assert info.state == "loaded", info
    assert info.abi == "%d.%d" % dragon_sdk.ABI_VERSION and info.dist == "dragon-cuda"
    assert "cuda" in info.devices
    (dev,) = [d for d in dg.plugins.devices() if d["name"] == "cuda"]
    assert dev["plugin"] == "cuda" and dev["host_accessible"] is False
    assert info.num_kernels > 300  # one per (op, dtype)


def test_library_passes_the_abi_audit():
    """One exported symbol, no core symbol imported, every import versioned:
    cudart is linked statically and cuBLAS is never linked."""
    from dragon_sdk.testing import audit_plugin_so
    audit = audit_plugin_so(dragon_cuda.plugin_library(), abi_major=1)
    assert audit.exports == ["dragon_plugin_entry_v1"]
    # Built against the SDK's header; it asks nothing of the host beyond 1.3.
    assert audit.abi == tuple(dragon_sdk.ABI_VERSION) and audit.min_host_minor == 3
    assert not any("cublas" in n or "cudnn" in n or "libcuda" in n or "cudart" in n
                   for n in audit.needed), audit.needed


def _fatbin_entries(path: str) -> list[tuple[int, int]]:
    """(kind, arch) of every entry of the library's .nv_fatbin section: kind 1
    is PTX, 2 is SASS (an ELF cubin); arch is e.g. 90 for sm_90/compute_90.
    The fatbin container: a 16-byte header (magic 0xBA55ED50, version,
    header size, payload size) per translation unit, then entries each with
    a header (kind u16, header size u32 at 4, payload size u64 at 8, arch
    u32 at 28)."""
    import struct

    elffile = pytest.importorskip("elftools.elf.elffile", reason="pyelftools is not installed")
    with open(path, "rb") as f:
        data = elffile.ELFFile(f).get_section_by_name(".nv_fatbin").data()
    out, off = [], 0
    while off + 16 <= len(data):
        magic, _, hsz, size = struct.unpack_from("<IHHQ", data, off)
        assert magic == 0xBA55ED50, hex(magic)
        pos, end = off + hsz, off + hsz + size
        while pos < end:
            kind, _, ehsz, esize = struct.unpack_from("<HHIQ", data, pos)
            out.append((kind, struct.unpack_from("<I", data, pos + 28)[0]))
            pos += ehsz + esize
        off = (end + 7) // 8 * 8
    return out


def test_library_holds_sass_for_sm80_and_sm90_and_ptx():
    entries = set(_fatbin_entries(dragon_cuda.plugin_library()))
    assert {(2, 80), (2, 90), (1, 90)} <= entries, sorted(entries)
    assert dragon_cuda.build_info()["cuda_architectures"] == "80-real;90"


def test_count_and_reason_agree():
    n = dragon_cuda.device_count()
    reason = dragon_cuda.unavailable_reason()
    (dev,) = [d for d in dg.plugins.devices() if d["name"] == "cuda"]
    assert dev["count"] == n
    if n == 0:
        assert reason and "\n" not in reason, repr(reason)
        assert dev["reason"] == reason and dev["descriptions"] == []
        assert not dragon_cuda.is_available()
    else:
        assert reason == "" and dev["reason"] == ""
        assert len(dev["descriptions"]) == n and all(dev["descriptions"])
        assert "sm_" in dragon_cuda.get_device_name(0)


def test_without_a_device_moving_a_tensor_raises_with_the_reason():
    if dragon_cuda.device_count() > 0:
        pytest.skip("a cuda device exists here: the no-device path does not apply")
    import numpy as np
    x = dg.tensor(np.ones(3, np.float32))
    with pytest.raises(dg.errors.UnavailableError) as e:
        x.to("cuda")
    assert "cuda:0 is not present" in str(e.value)
    assert dragon_cuda.unavailable_reason() in str(e.value)
    with pytest.raises(dg.errors.UnavailableError, match="does not exist"):
        dragon_cuda.get_device_name(0)


def test_info_lists_the_device_and_its_state():
    r = subprocess.run([sys.executable, "-m", "dragon_core", "info"], capture_output=True,
                       text=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr
    line = [ln for ln in r.stdout.splitlines() if ln.strip().startswith("cuda ") and "count=" in ln]
    assert line, r.stdout
    if dragon_cuda.device_count() == 0:
        assert "unavailable: " + dragon_cuda.unavailable_reason() in r.stdout


def test_import_and_probe_are_silent():
    """Neither importing nor probing writes anything (no driver, no GPU, or a GPU)."""
    r = _run("import dragon_core, dragon_cuda; dragon_cuda.device_count(); "
             "dragon_cuda.unavailable_reason()")
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "", (r.stdout, r.stderr)


def test_import_does_not_touch_the_driver():
    """The driver is opened by the first device query, never at load: the
    dynamic loader's trace shows no search for libcuda during the import."""
    code = ("import sys, dragon_core\n"
            "sys.stderr.write('@@PROBE@@\\n'); sys.stderr.flush()\n"
            "import dragon_cuda; dragon_cuda.device_count()\n")
    r = _run(code, LD_DEBUG="libs")
    assert r.returncode == 0, r.stderr[-2000:]
    before, sep, after = r.stderr.partition("@@PROBE@@")
    assert sep, r.stderr[-2000:]
    assert "libcuda.so" not in before
    assert "libcuda.so" in after  # the first query looks for the driver


def _import_seconds(env: dict) -> float:
    code = ("import time; t = time.perf_counter(); import dragon_core; "
            "print(time.perf_counter() - t)")
    r = _run(code, **env)
    assert r.returncode == 0, r.stderr
    return float(r.stdout.strip().splitlines()[-1])


def test_import_is_not_measurably_slower_with_the_plugin():
    """Loading the plugin costs a dlopen and a few hundred registrations, no
    CUDA call. Medians of alternating runs; the bound is generous (a loaded
    machine), yet far below a CUDA initialisation (hundreds of ms)."""
    with_, without = [], []
    for _ in range(5):
        with_.append(_import_seconds({}))
        without.append(_import_seconds({"DRAGON_DISABLE_PLUGINS": "cuda"}))
    extra = statistics.median(with_) - statistics.median(without)
    assert extra < 0.2, (with_, without)


def test_disabled_plugin_leaves_no_device():
    r = _run("import dragon_core as dg; print([d['name'] for d in dg.plugins.devices()])",
             DRAGON_DISABLE_PLUGINS="cuda")
    assert r.returncode == 0 and "'cuda'" not in r.stdout, (r.stdout, r.stderr)
