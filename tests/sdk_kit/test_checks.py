"""Schema/kernel consistency, numerics and eager-vs-graph checks: applied to
core + cpu_eigen ops and a third-party op, and shown to fail when they should."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import (BASE_TOLERANCES, OpCase,
                                check_eager_vs_graph, check_numerics,
                                check_schema_kernel_consistency,
                                kernel_dtypes)


def _r(*shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ------------------------------------------------- schema/kernel consistency

@pytest.mark.parametrize("op, inputs, attrs", [
    ("MatMul", [_r(3, 4), _r(4, 5)], {}),
    ("Add", [_r(3, 1), _r(1, 4)], {}),
    ("Sum", [_r(2, 3, 4)], {"axes": [1], "keepdims": True}),
    ("Concat", [[_r(2, 3), _r(1, 3)]], {"axis": 0}),
    ("Equal", [_r(3), _r(3)], {}),
    ("Cast", [_r(2, 2)], {"dtype": "int32"}),
])
def test_consistency_on_core_ops(dg, op, inputs, attrs):
    outs = check_schema_kernel_consistency(op, inputs, **attrs)
    assert outs


def test_consistency_on_a_plugin_op(dg, custom_op):
    (y,) = check_schema_kernel_consistency("ScaledAdd", [_r(2, 3), _r(2, 3)],
                                           alpha=2.0)
    assert y.shape == (2, 3)


def test_consistency_catches_a_wrong_shape(dg, monkeypatch):
    monkeypatch.setattr(dg.ops, "neg", lambda x: dg.ops.transpose(x, [1, 0]))
    with pytest.raises(AssertionError, match=r"output 0 is float32\[3, 2\], "
                       r"shape inference declared float32\[2, 3\]"):
        check_schema_kernel_consistency("neg", [_r(2, 3)])


def test_consistency_catches_a_wrong_dtype_and_count(dg, monkeypatch):
    monkeypatch.setattr(dg.ops, "neg",
                        lambda x: dg.ops.cast(x, dtype="float64"))
    with pytest.raises(AssertionError, match="float64.*declared float32"):
        check_schema_kernel_consistency("neg", [_r(2, 3)])
    monkeypatch.setattr(dg.ops, "neg", lambda x: [x, x])
    with pytest.raises(AssertionError, match="declared 1 output"):
        check_schema_kernel_consistency("neg", [_r(2, 3)])


# ------------------------------------------------------------- numerics

CASES = [[_r(3, 4, dtype=np.float64, seed=1), _r(3, 4, dtype=np.float64,
                                                seed=2)],
         [_r(2, 1, dtype=np.float64, seed=3), _r(1, 5, dtype=np.float64,
                                                seed=4)]]


def test_numerics_cover_every_registered_dtype(dg):
    declared = kernel_dtypes("Add", "cpu")
    assert {"float32", "float64", "int32", "uint8"} <= set(declared)
    counts = check_numerics("Add", np.add, CASES)
    assert sorted(counts) == sorted(declared)
    assert all(n == 2 * len(CASES) for n in counts.values())  # 2 layouts


def test_numerics_with_attrs_and_half_precision(dg):
    x = np.linspace(-3, 3, 12).reshape(3, 4)
    check_numerics("Softplus", lambda x, beta=1.0, threshold=20.0:
                   np.log1p(np.exp(beta * x)) / beta,
                   [{"inputs": [x], "attrs": {"beta": 2.0}}], tol=4)
    # Transpose has 16-bit float kernels: checked with the looser tolerance.
    counts = check_numerics("Transpose", lambda x, perm: x.transpose(perm),
                            [{"inputs": [x], "attrs": {"perm": [1, 0]}}])
    assert {"float16", "bfloat16"} <= set(counts)
    assert BASE_TOLERANCES["bfloat16"] > BASE_TOLERANCES["float16"] \
        > BASE_TOLERANCES["float32"]


def test_numerics_on_a_plugin_op(dg, custom_op):
    counts = check_numerics("ScaledAdd", lambda a, b, alpha=1.0: a + alpha * b,
                            [{"inputs": CASES[0], "attrs": {"alpha": 0.5}}])
    assert sorted(counts) == ["float32", "float64"]


def test_numerics_catch_a_wrong_reference(dg):
    with pytest.raises(AssertionError) as err:
        check_numerics("Add", np.subtract, CASES[:1],
                       dtypes=["float32", "int32"])
    text = str(err.value)
    assert "Add: 4 numerics failure(s)" in text
    assert "[float32-case0-contiguous]" in text and "[int32-case0-strided]" in text


def test_numerics_catch_a_dtype_specific_error(dg):
    # Wrong only beyond float32 precision: float64 must fail, float32 pass.
    def almost(a, b):
        return a + b + 1e-9

    with pytest.raises(AssertionError) as err:
        check_numerics("Add", almost, CASES[:1], dtypes=["float32", "float64"])
    assert "float64-case0" in str(err.value)
    assert "float32-case0" not in str(err.value)


def test_numerics_accept_opcases(dg):
    case = OpCase.of("Exp", [np.float64([0.0, 1.0])], np.exp)
    # Every dtype with a kernel: cpu_eigen serves Exp on 16-bit floats too.
    assert check_numerics("Exp", np.exp, [case]) == {"float16": 2, "bfloat16": 2,
                                                     "float32": 2, "float64": 2}


# ------------------------------------------------------- eager vs graph

def test_eager_equals_graph_with_gradients(dg):
    def mlp(x, w, b):
        return dg.ops.sum(dg.ops.relu(dg.ops.matmul(x, w) + b), [1])

    out = check_eager_vs_graph(mlp, _r(4, 3, dtype=np.float64),
                               _r(3, 5, dtype=np.float64, seed=1),
                               _r(5, dtype=np.float64, seed=2), grads=True,
                               extra_inputs=[(_r(4, 3, dtype=np.float64,
                                                 seed=7),
                                              _r(3, 5, dtype=np.float64),
                                              _r(5, dtype=np.float64))])
    assert len(out) == 1 + 3 and out[1].shape == (4, 3)


def test_eager_equals_graph_for_a_plugin_op(dg, custom_op):
    check_eager_vs_graph(lambda a, b: dg.ops.scaled_add(a, b, alpha=3.0) * a,
                         _r(2, 3), _r(2, 3, seed=1))  # no gradient rule


def test_eager_vs_graph_catches_a_frozen_value(dg):
    def scale_by_mean(x):
        return x * float(dg.ops.mean(x).item())   # frozen into the trace

    check_eager_vs_graph(scale_by_mean, _r(3))    # same inputs: agrees
    with pytest.raises(AssertionError, match="input set 1, graph plan call"):
        check_eager_vs_graph(scale_by_mean, _r(3),
                             extra_inputs=[(_r(3, seed=5),)])


def test_eager_vs_graph_catches_python_state(dg):
    calls = []

    def counted(x):
        calls.append(1)
        return x + float(len(calls))

    with pytest.raises(AssertionError, match="graph trace call: output 0 "
                                             "differs from eager"):
        check_eager_vs_graph(counted, _r(3))


def test_dragon_checks_fixture(dg, dragon_checks, rng):
    x = rng.standard_normal((2, 3))
    assert dragon_checks.numerics("Exp", np.exp, [[x]]) == {"float16": 2, "bfloat16": 2,
                                                            "float32": 2, "float64": 2}
    dragon_checks.schema_kernel_consistency("Exp", [x])
    dragon_checks.eager_vs_graph(dg.ops.exp, x)
