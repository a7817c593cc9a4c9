"""Discovery controls and kernel selection rules, each in a fresh interpreter.

``DRAGON_PLUGINS`` (allow-list), ``DRAGON_DISABLE_PLUGINS`` (deny-list or
``all``), ``DRAGON_KERNEL_PIN`` (user pin beats priority), and the rule that
two plugins making the identical claim is an error naming both.
"""

from __future__ import annotations

import json

import pytest
from plugin_testlib import (DUMP_PLUGINS, describe, find_plugin, library,
                            parse_plugins)

#: Child code: the plugin list plus the outcome of a float32 cpu Add.
ADD_PROBE = DUMP_PLUGINS + r"""
import json
import numpy as np
out = {}
try:
    y = _dg.ops.add(_dg.tensor(np.array([1.0, 2.0], np.float32)),
                    _dg.tensor(np.array([3.0, 4.0], np.float32)))
    out["add"] = ["ok", y.tolist()]
except Exception as e:
    out["add"] = [type(e).__name__, str(e),
                  [c.__name__ for c in type(e).__mro__]]
try:
    out["explain"] = _dg.plugins.explain("Add", "cpu", "float32")
except Exception as e:
    out["explain"] = f"{type(e).__name__}: {e}"
print("@@PROBE@@" + json.dumps(out))
"""


def _probe(proc) -> dict:
    assert proc.returncode == 0, describe(proc)
    for line in proc.stdout.splitlines():
        if line.startswith("@@PROBE@@"):
            out = json.loads(line[len("@@PROBE@@"):])
            out["plugins"] = parse_plugins(proc.stdout)
            return out
    raise AssertionError(describe(proc))


def _loaded(plugins) -> set[str]:
    return {p["name"] for p in plugins
            if p["state"] == "loaded" and p["name"] != "core"}


@pytest.fixture
def site(make_site, fixture_plugins):
    """toy, custom_op and pin_probe installed next to the real cpu_eigen."""
    return make_site({name: library(fixture_plugins[name])
                      for name in ("toy", "custom_op", "pin_probe")})


def test_default_loads_everything(site, run_python):
    out = _probe(run_python(ADD_PROBE, site=site))
    assert {"cpu_eigen", "toy", "custom_op", "pin_probe"} <= \
        _loaded(out["plugins"]), out["plugins"]
    assert out["add"] == ["ok", [4.0, 6.0]], out["add"]
    # pin_probe's Add (priority -50) exists but does not win.
    assert "pin_probe" in out["explain"], out["explain"]
    winner = [ln for ln in out["explain"].splitlines() if "winner" in ln]
    assert winner and "pin_probe" not in winner[0], out["explain"]


def test_allow_list(site, run_python):
    out = _probe(run_python(ADD_PROBE, site=site, DRAGON_PLUGINS="toy"))
    assert _loaded(out["plugins"]) == {"toy"}, out["plugins"]
    assert out["add"][0] == "NoKernelError", out["add"]
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_PLUGINS="cpu_eigen,custom_op"))
    assert _loaded(out["plugins"]) == {"cpu_eigen", "custom_op"}
    assert out["add"] == ["ok", [4.0, 6.0]]


#: Child prelude hiding the installed cpu_eigen entry point, as if the
#: dragon-cpu-eigen wheel were not installed.
HIDE_CPU_EIGEN = r"""
import importlib.metadata as _md
_real_distributions = _md.distributions
def _distributions(**kw):
    # Every installed backend of this repository goes, not only cpu_eigen
    # (mkldnn, vision_ops, cuda and nccl_dist provide no cpu Add either).
    return (d for d in _real_distributions(**kw) if (d.metadata["Name"] or "") not in
            ("dragon-cpu-eigen", "dragon-mkldnn", "dragon-vision-ops", "dragon-cuda",
             "dragon-nccl-dist"))
_md.distributions = _distributions
"""


def _assert_cpu_advice(add, *, installed: bool):
    kind, message, mro = add
    assert kind == "NoKernelError" and "NotImplementedError" in mro, add
    assert "Add" in message and "cpu" in message and "float32" in message
    assert "dragon-cpu-eigen" in message, message
    if installed:
        # Installed but switched off: either advice is right.
        assert ("pip install dragon-cpu-eigen" in message
                or "DRAGON_DISABLE_PLUGINS" in message
                or "DRAGON_PLUGINS" in message), message
    else:
        assert "pip install dragon-cpu-eigen" in message, message


def test_disable_cpu_eigen(site, run_python):
    # pin_probe also has a (low-priority) cpu Add: disable it too.
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_DISABLE_PLUGINS="cpu_eigen,pin_probe"))
    loaded = _loaded(out["plugins"])
    assert "cpu_eigen" not in loaded and "toy" in loaded, out["plugins"]
    _assert_cpu_advice(out["add"], installed=True)


def test_cpu_eigen_not_installed(make_site, fixture_plugins, run_python):
    site = make_site({"toy": library(fixture_plugins["toy"])})
    out = _probe(run_python(HIDE_CPU_EIGEN + ADD_PROBE, site=site))
    assert _loaded(out["plugins"]) == {"toy"}, out["plugins"]
    _assert_cpu_advice(out["add"], installed=False)


def test_disable_all(site, run_python):
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_DISABLE_PLUGINS="all"))
    assert _loaded(out["plugins"]) == set(), out["plugins"]
    states = {p["name"]: p["state"] for p in out["plugins"]}
    assert states.get("cpu_eigen") == "disabled", states
    _assert_cpu_advice(out["add"], installed=True)


def test_disable_list_with_spaces(site, run_python):
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_DISABLE_PLUGINS="toy, pin_probe"))
    loaded = _loaded(out["plugins"])
    assert "toy" not in loaded and "pin_probe" not in loaded, out["plugins"]
    assert {"cpu_eigen", "custom_op"} <= loaded


@pytest.mark.parametrize("target", ["pin_probe", "PinProbeAdd<float32>"])
def test_kernel_pin_beats_priority(site, run_python, target):
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_KERNEL_PIN=f"Add:cpu={target}"))
    # pin_probe's kernel returns a + b + 1000: seeing it proves it ran.
    assert out["add"] == ["ok", [1004.0, 1006.0]], out["add"]
    winner = [ln for ln in out["explain"].splitlines() if "winner" in ln]
    assert winner and "PinProbeAdd" in winner[0], out["explain"]
    assert "pin" in winner[0], out["explain"]


def test_pin_does_not_fall_back_silently(site, run_python):
    """A pin whose target has no kernel for the dtype is an error, not a
    quiet return to the default kernel."""
    proc = run_python(r"""
        import numpy as np, dragon_core as dg
        a = dg.tensor(np.ones(2, np.float64))
        try:
            dg.ops.add(a, a)
            print("no error")
        except dg.errors.DragonError as e:
            print("error:", e)
    """, site=site, DRAGON_KERNEL_PIN="Add:cpu=pin_probe")
    assert proc.returncode == 0, describe(proc)
    assert proc.stdout.startswith("error:"), describe(proc)
    assert "pin_probe" in proc.stdout, proc.stdout


def test_pin_for_another_device_does_not_affect_cpu(site, run_python):
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_KERNEL_PIN="Add:toy=toy"))
    assert out["add"] == ["ok", [4.0, 6.0]], out["add"]


def test_identical_claims_are_an_error_naming_both(make_site, fixture_plugins,
                                                   run_python):
    site = make_site({name: library(fixture_plugins[name])
                      for name in ("dup_claim_a", "dup_claim_b")})
    out = _probe(run_python(ADD_PROBE, site=site))
    assert out["add"][0] != "ok", "two identical claims silently resolved"
    kind, message, mro = out["add"]
    assert "DragonError" in mro, out["add"]
    assert "dup_claim_a" in message and "dup_claim_b" in message, message
    assert "Add" in message and "cpu" in message, message
    assert "dup_claim_a" in out["explain"] and "dup_claim_b" in out["explain"]


def test_identical_claims_resolved_by_a_pin(make_site, fixture_plugins,
                                            run_python):
    site = make_site({name: library(fixture_plugins[name])
                      for name in ("dup_claim_a", "dup_claim_b")})
    out = _probe(run_python(ADD_PROBE, site=site,
                            DRAGON_KERNEL_PIN="Add:cpu=dup_claim_b"))
    assert out["add"] == ["ok", [4.0, 6.0]], out["add"]
    winner = [ln for ln in out["explain"].splitlines() if "winner" in ln]
    assert winner and "dup_claim_b" in winner[0], out["explain"]


def test_a_single_claim_is_fine(make_site, fixture_plugins, run_python):
    site = make_site({"dup_claim_a": library(fixture_plugins["dup_claim_a"])})
    out = _probe(run_python(ADD_PROBE, site=site))
    assert out["add"] == ["ok", [4.0, 6.0]], out["add"]
    # Priority 7 beats cpu_eigen's kernel.
    winner = [ln for ln in out["explain"].splitlines() if "winner" in ln]
    assert winner and "dup_claim_a" in winner[0], out["explain"]
    assert find_plugin(out["plugins"], "dup_claim_a")["state"] == "loaded"
