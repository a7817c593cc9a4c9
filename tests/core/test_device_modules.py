"""``dg.cuda`` and the other per-device-type namespaces, and ``dg.device``.

The core names no device: the namespaces come from the device registry.
Here (no GPU) cuda reports count 0 with the plugin's reason; on a GPU
machine the same tests check the other branch.
"""

from __future__ import annotations

import pytest

import dragon_core as dg


def test_cpu_namespace_is_available():
    assert dg.cpu.is_available()
    assert dg.cpu.device_count() == 1
    assert dg.cpu.unavailable_reason() == ""
    assert dg.cpu.get_device_name() == dg.plugins.devices()[0]["descriptions"][0]
    assert dg.cpu.synchronize() is None   # a synchronous device: nothing to wait for
    assert dg.cpu.current_stream() == dg.current_stream("cpu")


def test_cpu_memory_queries_follow_live_tensors():
    base = dg.cpu.memory_allocated()
    x = dg.ops.zeros([1 << 18])
    assert dg.cpu.memory_allocated() >= base + (1 << 20)
    assert dg.cpu.memory_reserved() >= dg.cpu.memory_allocated()
    assert dg.cpu.max_memory_allocated() >= dg.cpu.memory_allocated()
    del x


def test_cuda_namespace_matches_the_registry():
    entry = [d for d in dg.plugins.devices() if d["name"] == "cuda"]
    count = entry[0]["count"] if entry else 0
    assert dg.cuda.device_count() == count
    assert dg.cuda.is_available() == (count > 0)
    if count == 0:
        reason = dg.cuda.unavailable_reason()
        assert reason and "\n" not in reason
        if entry:
            assert reason == entry[0]["reason"]
        else:
            assert "pip install dragon-cuda" in reason
        with pytest.raises(dg.errors.UnavailableError,
                           match=r"cuda:0 does not exist \(0 cuda device"):
            dg.cuda.get_device_name()
        with pytest.raises(RuntimeError, match="cuda.synchronize: cuda:0 does not exist"):
            dg.cuda.synchronize()
        with pytest.raises(RuntimeError, match="cuda:0 does not exist"):
            dg.cuda.memory_stats()
    else:
        assert dg.cuda.unavailable_reason() == ""
        assert dg.cuda.get_device_name(0) == entry[0]["descriptions"][0]
        assert dg.cuda.get_device_name("cuda:0") == dg.cuda.get_device_name()
        dg.cuda.synchronize()
        with pytest.raises(ValueError, match=f"cuda:{count} does not exist"):
            dg.cuda.get_device_name(count)


def test_compute_capability_needs_the_attribute():
    """get_device_capability reads DgDeviceDef.get_attribute code 3
    (major * 10 + minor); a device that does not report it raises."""
    with pytest.raises(ValueError, match="cpu:0 reports no compute capability"):
        dg.cpu.get_device_capability()
    if dg.cuda.device_count() == 0:
        with pytest.raises(dg.errors.UnavailableError, match="cuda:0 does not exist"):
            dg.cuda.get_device_capability()
    else:
        major, minor = dg.cuda.get_device_capability()
        cc = dg.memory.device_attributes("cuda:0")["compute_capability"]
        assert (major, minor) == (cc // 10, cc % 10)


def test_a_known_wheel_not_installed_says_what_to_install(monkeypatch):
    monkeypatch.setitem(dg.plugins.KNOWN_PROVIDERS, "npuxyz", "dragon-npuxyz")
    ns = dg.npuxyz
    assert not ns.is_available() and ns.device_count() == 0
    assert "pip install dragon-npuxyz" in ns.unavailable_reason()
    assert dg.device("npuxyz:2") == "npuxyz:2"


def test_unknown_names_stay_attribute_errors():
    with pytest.raises(AttributeError, match="no attribute 'nosuchdevice'"):
        dg.nosuchdevice  # noqa: B018
    assert not hasattr(dg, "_private_thing")


def test_wrong_type_of_device_string():
    with pytest.raises(ValueError, match="is not a 'cpu' device"):
        dg.cpu.get_device_name("cuda:0")


def test_device_constructor():
    assert dg.device("cpu") == dg.Device("cpu", 0)
    assert dg.device("cpu", 0) == "cpu:0"
    assert dg.device("cuda:1") == dg.Device("cuda", 1)
    assert dg.device(dg.Device("cpu", 0)) == "cpu:0"
    with pytest.raises(ValueError, match="unknown device type 'gpu'"):
        dg.device("gpu")
    with pytest.raises(ValueError, match="give the index once"):
        dg.device("cuda:0", 1)
    with pytest.raises(ValueError, match="index must be an int >= 0"):
        dg.device("cpu", -1)


def test_info_lists_every_device_of_a_type(monkeypatch):
    """``python -m dragon_core info`` shows one line per device when a type
    has several (the GPU name, memory, compute capability and versions are
    the plugin's description); one device keeps the single line."""
    from dragon_core import __main__ as main

    fake = [{"name": "gpux", "plugin": "gpux", "count": 2, "host_accessible": False,
             "descriptions": ["Card A (sm_90, 79.2 GiB)", "Card B (sm_80, 39.4 GiB)"],
             "reason": ""},
            {"name": "gpuy", "plugin": "gpuy", "count": 1, "host_accessible": False,
             "descriptions": ["Card C"], "reason": ""}]
    monkeypatch.setattr(dg._C, "devices", lambda: fake)
    lines = main.info().splitlines()
    start = lines.index("Devices:")
    assert lines[start + 1:start + 5] == [
        "  gpux       count=2  from gpux (Card A (sm_90, 79.2 GiB))",
        "      gpux:0  Card A (sm_90, 79.2 GiB)",
        "      gpux:1  Card B (sm_80, 39.4 GiB)",
        "  gpuy       count=1  from gpuy (Card C)"]
