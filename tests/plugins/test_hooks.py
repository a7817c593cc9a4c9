"""A plugin's failing Python hook marks that plugin broken, never the core.

A plugin whose ``dragon_fusion_patterns`` or ``dragon_graph_passes`` hook
raises (or returns something that is not a pattern/pass) is marked broken
with its traceback, announced with one PluginWarning, and left out: every
``@dg.function`` keeps compiling and running, without that plugin's passes and
patterns. ``DRAGON_STRICT=1`` turns the failure into an error.
"""

from __future__ import annotations

import contextlib
import json
import warnings

import numpy as np
import pytest
from plugin_testlib import (DUMP_PLUGINS, describe, find_plugin, parse_plugins,
                            python_module)

import dragon_core as dg
from dragon_core import fusion


def _tag(graph):
    """A pass leaving a mark, so a test sees whether it ran."""
    new = type(graph)()
    new.CopyFrom(graph)
    new.metadata["tagged_by_hooks_test"] = "yes"
    return new


class _Plugin:
    """A fake plugin; ``patterns``/``passes`` are callables (may raise)."""

    def __init__(self, patterns, passes):
        self._patterns, self._passes = patterns, passes

    @dg.plugins.hookimpl
    def dragon_fusion_patterns(self, core):
        return self._patterns()

    @dg.plugins.hookimpl
    def dragon_graph_passes(self, core):
        return self._passes()


def _boom():
    raise RuntimeError("the hook of this fake plugin is broken")


def _tag_pass():
    return [dg.GraphPass("hooks_test_tag", _tag, after="cse")]


@pytest.fixture
def registered(monkeypatch):
    """Register a fake plugin under a fresh name; unregister it afterwards."""
    monkeypatch.delenv("DRAGON_STRICT", raising=False)
    monkeypatch.delenv("DRAGON_QUIET_PLUGINS", raising=False)
    names = iter(f"hooks_test_plugin_{i}" for i in range(100))
    done = []

    def register(plugin):
        name = next(names)
        dg.plugins._pm.register(plugin, name=name)
        done.append(plugin)
        return name

    yield register
    for plugin in done:
        dg.plugins._pm.unregister(plugin)


def _compile_and_run():
    f = dg.function(lambda x: x * 2.0 + 1.0)
    x = dg.tensor(np.ones(3))
    np.testing.assert_array_equal(f(x).numpy(), [3.0, 3.0, 3.0])
    return f.get_graph(x)


@contextlib.contextmanager
def _no_plugin_warning():
    """Fails if a PluginWarning is issued inside the block."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", dg.plugins.PluginWarning)
        yield
    assert not [w for w in caught if issubclass(w.category, dg.plugins.PluginWarning)], \
        [str(w.message) for w in caught]


def _record(name):
    return find_plugin(dg.plugins.list(), name)


@pytest.mark.parametrize("broken_hook", ["dragon_fusion_patterns", "dragon_graph_passes"])
def test_raising_hook_marks_its_plugin_broken_and_graphs_still_compile(registered,
                                                                       broken_hook):
    if broken_hook == "dragon_fusion_patterns":
        plugin = _Plugin(patterns=_boom, passes=_tag_pass)
    else:
        plugin = _Plugin(patterns=lambda: [], passes=_boom)
    name = registered(plugin)
    with pytest.warns(dg.plugins.PluginWarning, match=f"plugin '{name}' is broken"):
        graph = _compile_and_run()
    # The plugin's pass (declared by its healthy hook) is dropped too.
    assert "tagged_by_hooks_test" not in graph.metadata
    assert "hooks_test_tag" not in graph.metadata["passes"]
    rec = _record(name)
    assert rec.state == "broken", rec
    assert broken_hook in rec.error and "RuntimeError" in rec.error, rec.error
    assert "the hook of this fake plugin is broken" in rec.traceback, rec.traceback
    assert "Traceback (most recent call last)" in rec.traceback
    assert f"DRAGON_DISABLE_PLUGINS={name}" in rec.error
    # Warned once: the next graphs compile quietly, still without it.
    with _no_plugin_warning():
        assert "tagged_by_hooks_test" not in _compile_and_run().metadata
        assert fusion.patterns()        # the healthy plugins' patterns remain


def test_healthy_fake_plugin_pass_runs(registered):
    """The control for the test above: the same plugin, healthy, is used."""
    name = registered(_Plugin(patterns=lambda: [], passes=_tag_pass))
    assert _compile_and_run().metadata["tagged_by_hooks_test"] == "yes"
    assert name not in [p.name for p in dg.plugins.list() if p.state == "broken"]


def _mutate_then_raise(graph):
    graph.metadata["half_done_by_hooks_test"] = "yes"    # edits its input, then fails
    raise RuntimeError("the pass of this fake plugin is broken")


@pytest.mark.parametrize("fn, problem", [
    (_mutate_then_raise, "RuntimeError: the pass of this fake plugin is broken"),
    (lambda graph: None, "TypeError: it returned NoneType, not a GraphDef"),
])
def test_raising_graph_pass_marks_its_plugin_broken_and_graphs_still_compile(registered, fn,
                                                                             problem):
    """Not only the hook: the pass it declared, failing on a graph, marks
    the plugin broken; the function compiles without it (nothing of its
    half-done edit kept) instead of every @dg.function raising."""
    passes = [dg.GraphPass("hooks_test_bad", fn, after="cse"),
              dg.GraphPass("hooks_test_tag", _tag, after="fusion")]
    name = registered(_Plugin(patterns=lambda: [], passes=lambda: passes))
    with pytest.warns(dg.plugins.PluginWarning, match=f"plugin '{name}' is broken"):
        graph = _compile_and_run()
    assert "half_done_by_hooks_test" not in graph.metadata
    assert "hooks_test_bad" not in graph.metadata["passes"]
    assert "tagged_by_hooks_test" not in graph.metadata     # its later pass is skipped too
    rec = _record(name)
    assert rec.state == "broken", rec
    assert "graph pass 'hooks_test_bad' raised" in rec.error and problem in rec.error, rec
    with _no_plugin_warning():
        assert "tagged_by_hooks_test" not in _compile_and_run().metadata

def test_failing_rewrite_of_a_declared_pattern_marks_its_plugin_broken(registered):
    """A plugin's fusion pattern whose rewrite raises on a graph marks that
    plugin broken; the graph compiles, unfused, instead of raising."""
    def broken(match):
        raise KeyError("the rewrite of this fake plugin is broken")

    pattern = fusion.FusionPattern("hooks_test_broken_rewrite", ("Mul", "Add"), "Add", broken)
    name = registered(_Plugin(patterns=lambda: [pattern], passes=_tag_pass))
    with pytest.warns(dg.plugins.PluginWarning, match=f"plugin '{name}' is broken"):
        graph = _compile_and_run()
    assert not any(op.attr["_fusion_pattern"].s == "hooks_test_broken_rewrite"
                   for op in graph.op if "_fusion_pattern" in op.attr)
    rec = _record(name)
    assert rec.state == "broken", rec
    assert "fusion pattern 'hooks_test_broken_rewrite' raised KeyError" in rec.error, rec
    with _no_plugin_warning():
        assert "tagged_by_hooks_test" not in _compile_and_run().metadata

@pytest.mark.parametrize("declared, hook, problem", [
    (lambda: ([], [lambda g: g]), "dragon_graph_passes", "not a dragon_core.GraphPass"),
    (lambda: ([], [dg.GraphPass("cse", _tag, after="prune")]), "dragon_graph_passes",
     "reuses the name of a built-in pass"),
    (lambda: (["conv2d_relu"], []), "dragon_fusion_patterns", "not a dragon_core.fusion"),
    (lambda: ([fusion.FusionPattern("conv2d_relu", ("Conv2d", "Relu"), "Conv2dBiasAct",
                                    lambda m: None)], []),
     "dragon_fusion_patterns", "differently"),
])
def test_bad_declarations_mark_the_plugin_broken(registered, declared, hook, problem):
    patterns, passes = declared()
    name = registered(_Plugin(patterns=lambda: patterns, passes=lambda: passes))
    with pytest.warns(dg.plugins.PluginWarning, match=name):
        _compile_and_run()
    rec = _record(name)
    assert rec.state == "broken" and hook in rec.error and problem in rec.error, rec


def test_strict_mode_makes_a_failing_hook_an_error(registered, monkeypatch):
    name = registered(_Plugin(patterns=_boom, passes=lambda: []))
    monkeypatch.setenv("DRAGON_STRICT", "1")
    with pytest.warns(dg.plugins.PluginWarning):
        with pytest.raises(dg.errors.PluginError, match=f"plugin '{name}'.*RuntimeError"):
            fusion.patterns()
    assert _record(name).state == "broken"


# --------------------------------------- an installed plugin, end to end

RAISING_PLUGIN = '''
import pluggy
hookimpl = pluggy.HookimplMarker("dragon_core")

@hookimpl
def dragon_fusion_patterns(core):
    raise ValueError("fusion tables not found")

@hookimpl
def dragon_graph_passes(core):
    return []
'''

CHILD = DUMP_PLUGINS + r"""
import numpy as np
f = _dg.function(lambda x: _dg.ops.relu(x * 2.0 - 1.0))
print("@@RESULT@@", f(_dg.tensor(np.array([0.0, 1.0, 2.0]))).tolist())
print("@@AFTER@@" + _json.dumps([{"name": p.name, "state": p.state, "error": p.error,
                                  "traceback": p.traceback} for p in _dg.plugins.list()]))
"""


def test_installed_plugin_with_a_raising_hook(make_site, run_python):
    site = make_site({"raising_hooks": python_module(RAISING_PLUGIN)})
    proc = run_python(CHILD, site=site)
    assert proc.returncode == 0, describe(proc)
    assert "@@RESULT@@ [0.0, 1.0, 3.0]" in proc.stdout, describe(proc)
    before = find_plugin(parse_plugins(proc.stdout), "raising_hooks")
    assert before["state"] == "loaded", before       # a Python-only plugin is listed
    (after,) = [json.loads(ln[len("@@AFTER@@"):]) for ln in proc.stdout.splitlines()
                if ln.startswith("@@AFTER@@")]
    rec = find_plugin(after, "raising_hooks")
    assert rec["state"] == "broken" and "fusion tables not found" in rec["error"], rec
    assert 'raise ValueError("fusion tables not found")' in rec["traceback"], rec
    warned = [ln for ln in proc.stderr.splitlines() if "PluginWarning" in ln]
    assert len(warned) == 1 and "raising_hooks" in warned[0], describe(proc)

    strict = run_python(CHILD, site=site, DRAGON_STRICT="1")
    assert strict.returncode != 0, describe(strict)
    assert "PluginError" in strict.stderr and "raising_hooks" in strict.stderr, \
        describe(strict)


LOADED_HOOK_RAISES = '''
import pluggy
hookimpl = pluggy.HookimplMarker("dragon_core")

@hookimpl
def dragon_plugin_loaded(core, info):
    raise KeyError("no config")

@hookimpl
def dragon_graph_passes(core):
    raise AssertionError("must not be called: the plugin is broken")
'''


def test_failing_plugin_loaded_hook_marks_the_plugin_itself_broken(make_site, run_python):
    site = make_site({"loaded_hook": python_module(LOADED_HOOK_RAISES)})
    proc = run_python(DUMP_PLUGINS + r"""
import numpy as np
print("@@RESULT@@", _dg.function(lambda x: x + 1.0)(_dg.tensor(np.ones(2))).tolist())
""", site=site)
    assert proc.returncode == 0, describe(proc)
    assert "@@RESULT@@ [2.0, 2.0]" in proc.stdout, describe(proc)
    plugins = parse_plugins(proc.stdout)
    rec = find_plugin(plugins, "loaded_hook")
    assert rec["state"] == "broken" and "dragon_plugin_loaded" in rec["error"], rec
    assert "KeyError" in rec["error"], rec
    assert not [p for p in plugins if "#" in p["name"]], plugins


def test_warnings_as_errors_never_break_import_or_graph_mode(make_site, run_python):
    """python -W error (pytest -W error) must not turn a broken plugin into a
    failed ``import dragon_core`` or failing @dg.function: the warning is
    shown, the rest goes on; DRAGON_STRICT=1 is the switch that makes it fatal."""
    site = make_site({"raising_hooks": python_module(RAISING_PLUGIN),
                      "import_fails": python_module("raise ImportError('broken on purpose')")})
    proc = run_python(CHILD, site=site, PYTHONWARNINGS="error")
    assert proc.returncode == 0, describe(proc)
    assert "@@RESULT@@ [0.0, 1.0, 3.0]" in proc.stdout, describe(proc)
    warned = [ln for ln in proc.stderr.splitlines() if "PluginWarning" in ln]
    assert any("import_fails" in ln for ln in warned), describe(proc)
    assert any("raising_hooks" in ln for ln in warned), describe(proc)
