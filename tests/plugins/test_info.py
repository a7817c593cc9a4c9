"""``python -m dragon_core info``: plugins, versions, ABI, devices, counts."""

from __future__ import annotations

import re

import dragon_sdk
import pytest
from plugin_testlib import (BROKEN_INIT_MESSAGE, describe, library,
                            write_dist)


@pytest.fixture(scope="module")
def info_output(tmp_path_factory, fixture_plugins, run_info):
    site = tmp_path_factory.mktemp("info-site")
    for name in ("toy", "custom_op", "broken_init"):
        write_dist(site, name, library(fixture_plugins[name]))
    proc = run_info(site=site)
    assert proc.returncode == 0, describe(proc)
    return proc.stdout


def _line(out: str, name: str) -> str:
    lines = [ln for ln in out.splitlines()
             if re.search(rf"(^|\W){re.escape(name)}(\W|$)", ln)]
    assert lines, f"no line mentions {name}:\n{out}"
    return lines[0]


def test_lists_plugins_with_versions(info_output):
    for name, version in [("cpu_eigen", None), ("toy", "0.2.0"),
                          ("custom_op", "0.3.1")]:
        line = _line(info_output, name)
        assert "loaded" in line, line
        if version:
            assert version in line, line
    # cpu_eigen's version is whatever is installed.
    from importlib.metadata import version
    assert version("dragon-cpu-eigen") in _line(info_output, "cpu_eigen")


def test_shows_the_abi(info_output):
    major, minor = dragon_sdk.ABI_VERSION
    assert re.search(rf"ABI\D*{major}\.{minor}", info_output), info_output


def _device_section(out: str) -> str:
    """The lines under a "Devices" heading, up to the next blank line."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"\s*devices?\s*:?\s*$", line, re.I):
            block = []
            for following in lines[i + 1:]:
                if not following.strip():
                    break
                block.append(following)
            return "\n".join(block)
    raise AssertionError(f"no Devices section:\n{out}")


def test_shows_devices(info_output):
    section = _device_section(info_output)
    assert re.search(r"^\s*cpu\b", section, re.M), section
    assert re.search(r"^\s*toy\b", section, re.M), section
    # The toy device's own description (DgDeviceDef.describe) is shown.
    assert "test device" in section, section


def _numbers(line: str) -> list[int]:
    # Version-like tokens (0.2.0, 1.0) are not counts.
    line = re.sub(r"\d+(\.\d+)+", " ", line)
    return [int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", line)]


def test_shows_op_and_kernel_counts(info_output):
    assert re.search(r"\bops?\b", info_output, re.I), info_output
    assert re.search(r"\bkernels?\b", info_output, re.I), info_output
    # custom_op defines 1 op with 2 kernels (float32, float64); toy defines
    # no op and 5 kernels (Add, Mul, Relu, Fill, Contiguous).
    custom = _numbers(_line(info_output, "custom_op"))
    assert 1 in custom and 2 in custom, _line(info_output, "custom_op")
    toy = _numbers(_line(info_output, "toy"))
    assert 0 in toy and 5 in toy, _line(info_output, "toy")
    # Totals: the core defines every standard op (docs/ops.md).
    totals = re.findall(r"\bops?\b\W{0,3}(\d+)|(\d+)\s+ops?\b", info_output,
                        re.I)
    assert max(int(a or b) for a, b in totals) >= 60, info_output


def test_shows_load_errors(info_output):
    assert "broken_init" in info_output
    assert BROKEN_INIT_MESSAGE in info_output, info_output
