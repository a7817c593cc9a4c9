"""The public Python plugin API (dragon_core.plugin_api) and the rule that
nothing outside the core imports its private modules (DESIGN.md §3)."""

from __future__ import annotations

import re
from pathlib import Path

import dragon_core as dg
from dragon_core import plugin_api

ROOT = Path(__file__).resolve().parents[2]
# Python code that plugins and the SDK ship (their own tests may poke inside).
SHIPPED = [ROOT / "sdk" / "python"] + sorted((ROOT / "plugins").glob("*/python"))
PRIVATE = re.compile(r"(from\s+dragon_core\._|import\s+dragon_core\._|"
                     r"from\s+dragon_core\s+import\s+_|\b(dg|dragon_core)\._[A-Za-z])")


def test_shipped_plugin_and_sdk_code_uses_no_private_core_module():
    offenders = []
    for root in SHIPPED:
        for path in sorted(root.rglob("*")):
            if path.suffix not in (".py", ".tmpl") or not path.is_file():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                code = line.split("#", 1)[0]
                if PRIVATE.search(code):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, ("use dragon_core.plugin_api instead of private core modules:\n"
                           + "\n".join(offenders))


def test_api_version_moves_with_the_abi():
    assert plugin_api.API_VERSION == tuple(dg.ABI_VERSION)
    assert dg.plugin_api is plugin_api


def test_op_registry_helpers():
    assert plugin_api.op_name("add") == "Add"
    schema = plugin_api.op_schema("Add")
    assert schema["name"] == "Add" and [i["name"] for i in schema["inputs"]] == ["a", "b"]
    assert "float32" in plugin_api.kernel_dtypes("Add", "cpu")
    assert {"Add", "Relu", "LeakyRelu"} <= plugin_api.elementwise_op_types()
    assert plugin_api.numel(()) == 1 and plugin_api.numel([2, 3]) == 6


def test_graph_editing_helpers_rewrite_a_traced_graph():
    import numpy as np

    f = dg.function(lambda x: dg.ops.relu(x + x))
    g = f.get_graph(dg.tensor(np.ones(3, np.float32)))
    builder = plugin_api.op_builder(g)
    op = builder.opdef("Relu", [g.op[0].output[0]], ["y2"], {})
    assert op.type == "Relu" and op.name not in {o.name for o in g.op}
    assert op.plugin == plugin_api.op_schema("Relu")["plugin"]
    assert plugin_api.op_attrs(op) == {}
    assert plugin_api.device_type(g) == "cpu"
    assert isinstance(plugin_api.GraphPass, type) and plugin_api.is_tracing() is False
