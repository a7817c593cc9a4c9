"""The element-wise op table (sdk/include/dragon/elementwise.h) is the one
list of element-wise kinds, their opcodes and kernels: the compiled core
(``_C.elementwise_table()``), the header in the repository and the one the
installed SDK ships must agree; the fusion pass's opcodes, the
FusedElementwise schema doc and docs/ops.md must list exactly its fusable
rows; every row's op must exist with cpu_eigen kernels of its class; and
every fusable opcode must run on the cpu fused kernel with the result of
its unfused op, bit for bit (which checks the decode tables cpu_eigen
generates from the header)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_core._graph.passes import fusion as fusion_pass
from dragon_core._graph.passes import kernel_dtypes

ROOT = Path(__file__).resolve().parents[2]
HEADER = ROOT / "sdk" / "include" / "dragon" / "elementwise.h"

TABLE = dg._C.elementwise_table()
FUSABLE = [r for r in TABLE if r[2] >= 0]


def _macro_body(text: str, name: str) -> str:
    m = re.search(rf"#define {name}\(X\)((?:.*\\\n)*.*\n)", text)
    assert m, f"{name} not found in {HEADER}"
    return m.group(1)


def _parse_header(path: Path) -> list:
    """The rows of the header's two X-macro lists, as _C.elementwise_table()
    gives them."""
    text = path.read_text()
    rows = []
    for args in re.findall(r"X\(([^)]*)\)", _macro_body(text, "DG_ELEMENTWISE_UNARY")):
        kind, code, op_type, attr, kernel, cost = [a.strip() for a in args.split(",")]
        rows.append((kind, "unary", int(code), op_type.strip('"'), attr.strip('"'), kernel, cost))
    for args in re.findall(r"X\(([^)]*)\)", _macro_body(text, "DG_ELEMENTWISE_BINARY")):
        kind, code, op_type, cost = [a.strip() for a in args.split(",")]
        rows.append((kind, "binary", int(code), op_type.strip('"'), "", "", cost))
    return rows


def _next_free(path: Path) -> int:
    return int(re.search(r"#define DG_EW_NEXT_FREE_OPCODE (\d+)", path.read_text()).group(1))


def test_compiled_table_equals_the_header():
    assert [tuple(r) for r in TABLE] == _parse_header(HEADER)


def test_installed_sdk_header_equals_the_repository_one():
    import dragon_sdk

    installed = Path(dragon_sdk.get_include()) / "dragon" / "elementwise.h"
    assert installed.read_text() == HEADER.read_text()


def test_kinds_and_opcodes_are_unique_and_below_next_free():
    kinds = [r[0] for r in TABLE]
    assert len(kinds) == len(set(kinds))
    codes = [r[2] for r in FUSABLE]
    assert len(codes) == len(set(codes))
    assert max(codes) < _next_free(HEADER)
    assert all(r[2] == -1 for r in TABLE if r[2] < 0)
    assert all(r[5] in {"numeric", "float", "libm", "custom0", "custom1", "custom2"}
               for r in TABLE if r[1] == "unary")
    assert all(r[6] in {"Cheap", "Divide", "Transcendental", "Heavy"} for r in TABLE)


def test_every_row_names_a_registered_op_of_its_arity():
    for kind, arity, _code, op_type, _attr, _kernel, _cost in TABLE:
        if not op_type:
            continue
        d = dg._C.op(op_type).describe()
        assert len(d["inputs"]) == (2 if arity == "binary" else 1), (kind, d["inputs"])


def test_the_pass_fuses_exactly_the_fusable_rows():
    want = {}
    for kind, arity, code, op_type, attr, _kernel, _cost in FUSABLE:
        want[(op_type, attr)] = code
    got = {}
    got.update({(t, ""): c for t, c in fusion_pass.UNARY.items()})
    got.update({(t, ""): c for t, c in fusion_pass.BINARY.items()})
    got.update({(t, "alpha"): c for t, c in fusion_pass.WITH_ALPHA.items()})
    for t, (name, codes) in fusion_pass.BY_ATTR.items():
        got.update({(t, f"{name}={v}"): c for v, c in codes.items()})
    assert got == want


def _listed(text: str) -> dict:
    return {int(c): n for c, n in re.findall(r"\b(\d+) ([A-Z][A-Za-z0-9]*)", text)}


def test_schema_doc_lists_every_opcode():
    doc = dg._C.op("FusedElementwise").describe()["doc"]
    listed = _listed(doc.split("Unary", 1)[1])
    assert listed == {r[2]: r[0] for r in FUSABLE}


def test_docs_ops_md_lists_every_opcode():
    text = (ROOT / "docs" / "ops.md").read_text()
    rows = [line for line in text.splitlines()
            if line.startswith("| unary") or line.startswith("| binary")]
    listed = _listed("\n".join(rows))
    want = {r[2]: (r[3] if r[3] != "Gelu" else "Gelu") for r in FUSABLE}
    assert listed == want


@pytest.mark.parametrize("row", [r for r in TABLE if r[1] == "unary" and r[3]],
                         ids=lambda r: r[0])
def test_cpu_eigen_registers_each_unary_row(row):
    kind, _, _, op_type, _, kernel, _ = row
    have = kernel_dtypes(op_type, "cpu")
    assert {"float32", "float64"} <= have, (kind, have)
    if kernel in ("numeric", "float", "libm"):
        assert {"float16", "bfloat16"} <= have, (kind, have)
    if kernel == "numeric":
        assert {"int32", "int64"} <= have, (kind, have)


def _eager(row, x, y):
    kind, arity, _code, op_type, attr, _kernel, _cost = row
    attrs = {}
    if attr == "alpha":
        attrs["alpha"] = 0.3
    elif "=" in attr:
        name, value = attr.split("=", 1)
        attrs[name] = value
    fn = getattr(ops, dg._C.op(op_type).py_name)
    return fn(dg.tensor(x), dg.tensor(y), **attrs) if arity == "binary" else fn(dg.tensor(x), **attrs)


@pytest.mark.parametrize("dt", ["float32", "float64"])
@pytest.mark.parametrize("row", FUSABLE, ids=lambda r: r[0])
def test_each_opcode_runs_its_ops_code(row, dt):
    kind, arity, code, op_type, attr, _kernel, _cost = row
    rng = np.random.default_rng(code)
    x = np.concatenate([rng.uniform(-3, 3, 1100),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 0.5, 2.5]]).astype(dt)
    y = rng.uniform(-2, 2, x.shape).astype(dt)
    if arity == "binary":
        prog, inputs, consts = [code, 2, 0, 1], [x, y], []
    elif attr == "alpha":
        prog, inputs, consts = [code, 2, 0, 1], [x], [0.3]
    else:
        prog, inputs, consts = [code, 1, 0, -1], [x], []
    with np.errstate(all="ignore"):
        got = np.asarray(ops.fused_elementwise([dg.tensor(a) for a in inputs], prog, consts, -1))
        want = _eager(row, x, y).numpy()
    np.testing.assert_array_equal(got, want)


def test_unknown_opcode_names_the_table():
    x = dg.tensor(np.ones(3))
    with pytest.raises(dg.errors.InvalidArgumentError, match="unknown opcode 43.*42 Expm1"):
        ops.fused_elementwise([x], [_next_free(HEADER), 1, 0, -1], [], -1)


def test_an_unset_string_attribute_takes_the_schema_default():
    """Gelu without ``approximate`` is the schema default, "none": opcode 18
    of its "approximate=none" row."""
    try:
        from .fixtures import graph
    except ImportError:
        from fixtures import graph

    g = graph(inputs=[("x", "float64", (8,))],
              ops=[("Gelu", ["x"], ["a"], {}), ("Neg", ["a"], ["b"], {})],
              outputs=["b"])
    h = fusion_pass.fusion(g)
    assert [op.type for op in h.op] == ["FusedElementwise"]
    code = {r[4]: r[2] for r in FUSABLE if r[3] == "Gelu"}["approximate=none"]
    assert h.op[0].attr["program"].ints.values[0] == code
