"""The sum_cast pass (dragon_core/_graph/passes/sum_cast.py): a float32
gradient's leading-axes Sum and its 16-bit Cast become one SumCastGrad;
over a head merge (Reshape of a transposed view) the Reshape copy goes too.
Every case checks whether the pass fired and that the results are bit for
bit those of the same function without the pass; the compiled bfloat16
encoder training step likewise."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

from .fixtures import encoder_same_bits_without

ops = dg.ops


def _types(fn, *args):
    return [op.type for op in fn.get_graph(*args).op]


def _bits(a):
    a = np.ascontiguousarray(np.asarray(a))
    return a.view(f"u{a.dtype.itemsize}")


def _same_bits(on, off, *args):
    a, b = on(*args), off(*args)
    a = a if isinstance(a, (list, tuple)) else [a]
    b = b if isinstance(b, (list, tuple)) else [b]
    assert len(a) == len(b)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(_bits(x.numpy()), _bits(y.numpy()))


def _both(f):
    return dg.function(f), dg.function(f, disable_passes=("sum_cast",))


@pytest.fixture
def xw():
    rng = np.random.default_rng(7)
    return (dg.tensor(rng.standard_normal((3, 10, 24)).astype(np.float32)),
            dg.tensor(rng.standard_normal((3, 10, 24)).astype(np.float32)))


def _fused(fn, *args):
    return [op for op in fn.get_graph(*args).op if op.type == "SumCastGrad"]


@pytest.mark.parametrize("dst", ["bfloat16", "float16"])
@pytest.mark.parametrize("axes,keepdims", [((0, 1), True), ((1, 0), False), ((-3, -2), True),
                                           ((0,), False)])
def test_sum_and_cast_of_one_value_fuse(xw, dst, axes, keepdims):
    def f(x, w):
        g = x * w
        return ops.sum(g, axis=axes, keepdims=keepdims), ops.reshape(g.astype(dst), (30, 24))

    on, off = _both(f)
    (fused,) = _fused(on, *xw)
    assert fused.attr["_fused_ops"].s.count(",") == 1
    assert fused.attr["num_leading"].i == len(axes)
    types = _types(on, *xw)
    assert "Sum" not in types and "Cast" not in types
    assert "Sum" in _types(off, *xw) and "Cast" in _types(off, *xw)
    _same_bits(on, off, *xw)
    assert dg.fusion.fused_ops(on.get_graph(*xw))[fused.name][0] == "SumCastGrad"


def test_a_third_reader_keeps_reading_the_value(xw):
    def f(x, w):
        g = x * w
        return ops.sum(g, axis=(0, 1)), g.astype("bfloat16"), g + 1.0

    on, off = _both(f)
    assert len(_fused(on, *xw)) == 1
    _same_bits(on, off, *xw)


@pytest.mark.parametrize("dim", [16, 4])
def test_head_merge_reshape_copy_is_gone(dim):
    """MatMul [B, H, S, D] -> Transpose [B, S, H, D] -> Reshape [B, S, H*D]
    read by the Sum and the Cast only: the fused op reads the Transpose."""
    rng = np.random.default_rng(dim)
    a = dg.tensor(rng.standard_normal((2, 4, 12, 8)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((2, 4, 8, dim)).astype(np.float32))

    def f(a, b):
        h = ops.reshape(ops.transpose(ops.matmul(a, b), (0, 2, 1, 3)), (2, 12, 4 * dim))
        return ops.sum(h, axis=(0, 1)), ops.reshape(h.astype("bfloat16"), (24, 4 * dim))

    on, off = _both(f)
    (fused,) = _fused(on, a, b)
    graph = on.get_graph(a, b)
    producer = {o: op for op in graph.op for o in op.output}
    assert producer[fused.input[0]].type == "Transpose"
    assert list(fused.attr["shape"].ints.values) == [2, 12, 4 * dim]
    assert "Reshape" in fused.attr["_fused_ops"].s
    assert _types(on, a, b).count("Reshape") == _types(off, a, b).count("Reshape") - 1
    _same_bits(on, off, a, b)


def test_head_merge_of_a_view_with_a_strided_last_axis_keeps_the_reshape():
    """[B, H, D, S] -> Transpose (0, 1, 3, 2) -> Transpose (0, 2, 1, 3) ->
    Reshape [B, S, H*D] (the attention key gradient): the view's last axis
    has stride S, so the fused op reads the Reshape's dense copy instead of
    gathering element by element (4x slower than the copy it saved)."""
    rng = np.random.default_rng(5)
    a = dg.tensor(rng.standard_normal((2, 4, 8, 12)).astype(np.float32))

    def f(a):
        v = ops.transpose(ops.transpose(a * 2.0, (0, 1, 3, 2)), (0, 2, 1, 3))
        h = ops.reshape(v, (2, 12, 32))
        return ops.sum(h, axis=(0, 1)), h.astype("bfloat16")

    on, off = _both(f)
    (fused,) = _fused(on, a)
    producer = {o: op for op in on.get_graph(a).op for o in op.output}
    assert producer[fused.input[0]].type == "Reshape"
    assert "shape" not in fused.attr
    _same_bits(on, off, a)


def test_head_merge_of_two_transposes_with_a_dense_last_axis_reads_the_view():
    rng = np.random.default_rng(6)
    a = dg.tensor(rng.standard_normal((2, 12, 4, 8)).astype(np.float32))

    def f(a):
        v = ops.transpose(ops.transpose(a * 2.0, (0, 2, 1, 3)), (0, 2, 1, 3))
        h = ops.reshape(ops.transpose(v, (0, 2, 1, 3)), (2, 4, 96))
        return ops.sum(h, axis=(0, 1)), h.astype("bfloat16")

    on, off = _both(f)
    (fused,) = _fused(on, a)
    producer = {o: op for op in on.get_graph(a).op for o in op.output}
    assert producer[fused.input[0]].type == "Transpose"
    _same_bits(on, off, a)


def test_head_merge_with_another_reader_keeps_the_reshape():
    rng = np.random.default_rng(2)
    a = dg.tensor(rng.standard_normal((2, 4, 12, 16)).astype(np.float32))

    def f(a):
        h = ops.reshape(ops.transpose(a * 2.0, (0, 2, 1, 3)), (2, 12, 64))
        return ops.sum(h, axis=(0, 1)), h.astype("bfloat16"), h * 3.0

    on, off = _both(f)
    (fused,) = _fused(on, a)
    producer = {o: op for op in on.get_graph(a).op for o in op.output}
    assert producer[fused.input[0]].type == "Reshape"
    assert "shape" not in fused.attr
    _same_bits(on, off, a)


@pytest.mark.parametrize("case", ["inner_axis", "gap", "cast_fp64", "cast_int", "strided",
                                  "input", "float64", "sum_of_cast"])
def test_misses(xw, case):
    def f(x, w):
        g = x * w
        if case == "inner_axis":
            return ops.sum(g, axis=(1, 2)), g.astype("bfloat16")
        if case == "gap":
            return ops.sum(g, axis=(0, 2)), g.astype("bfloat16")
        if case == "cast_fp64":
            return ops.sum(g, axis=(0, 1)), g.astype("float64")
        if case == "cast_int":
            return ops.sum(g, axis=(0, 1)), g.astype("int32")
        if case == "strided":  # Sum folds a transposed view in memory order
            t = ops.transpose(g, (1, 0, 2))
            return ops.sum(t, axis=(0, 1)), t.astype("bfloat16")
        if case == "input":    # a graph input may arrive as a strided view
            return ops.sum(x, axis=(0, 1)), x.astype("bfloat16")
        if case == "float64":
            d = g.astype("float64")
            return ops.sum(d, axis=(0, 1)), d.astype("bfloat16")
        # the Sum reads the Cast's output, not the same value
        c = g.astype("bfloat16")
        return ops.sum(c.astype("float32"), axis=(0, 1)), c

    on, off = _both(f)
    assert not _fused(on, *xw)
    assert _types(on, *xw) == _types(off, *xw)
    _same_bits(on, off, *xw)


def test_bf16_encoder_step_equals_the_unfused_graph():
    """The bfloat16-autocast encoder training step (bench/models/bert.py):
    the Linear layers' bias gradients fuse (three of them over head-merge
    copies, which disappear; the GeluGrad's is left to the GELU fusion), and
    three steps give bit for bit the losses and parameters of the graph
    without the pass."""
    on, off, x, t = encoder_same_bits_without("sum_cast")
    graph = on.get_graph(x, t)
    fused = [op for op in graph.op if op.type == "SumCastGrad"]
    producer = {o: op for op in graph.op for o in op.output}
    assert len(fused) == 5
    # The three head merges read their transposed views (the key
    # gradient's too: matmul_transpose wrote it as dS^T q, whose last axis
    # is dense), and their Reshape copies are gone.
    assert sum(producer[op.input[0]].type == "Transpose" for op in fused) == 3
    assert all(producer[op.input[0]].type != "GeluGrad" for op in fused)
    n_reshape = [op.type for op in graph.op].count("Reshape")
    assert n_reshape == [op.type for op in off.get_graph(x, t).op].count("Reshape") - 3


def test_pure_pass_and_devices_without_a_kernel(xw):
    """On a GraphDef directly: the pass leaves its argument as it was, fuses
    on the CPU, and does nothing for a device with no SumCastGrad kernel."""
    from dragon_core import proto as P
    from dragon_core._graph.passes.sum_cast import sum_cast

    def f(x, w):
        g = x * w
        return ops.sum(g, axis=(0, 1)), g.astype("bfloat16")

    base = P.GraphDef()
    base.CopyFrom(dg.function(f, disable_passes=("sum_cast",)).get_graph(*xw))
    before = base.SerializeToString()
    fused = sum_cast(base)
    assert base.SerializeToString() == before
    assert [op.type for op in fused.op].count("SumCastGrad") == 1
    base.metadata["device"] = "cuda:0"
    assert sum_cast(base) is base


def test_a_step_without_arguments_checks_its_captured_tensors_devices():
    """A compiled function with no arguments has no metadata["device"]
    (read as the host); its captured tensors' device types are recorded in
    metadata["devices"], and a device there without a SumCastGrad kernel
    keeps the pass out (a cuda training step over captured parameters)."""
    from dragon_core._graph.passes import device_types
    from dragon_core._graph.passes.sum_cast import sum_cast
    rng = np.random.default_rng(9)
    x = dg.tensor(rng.standard_normal((3, 10, 24)).astype(np.float32))

    @dg.function
    def f():
        g = x * 2.0
        return ops.sum(g, axis=(0, 1)), g.astype("bfloat16")

    graph = f.get_graph()
    assert "device" not in graph.metadata
    assert graph.metadata["devices"] == "cpu"
    assert [op.type for op in graph.op].count("SumCastGrad") == 1
    assert device_types(graph) == ["cpu"]
    def h():
        g = x * 2.0
        return ops.sum(g, axis=(0, 1)), g.astype("bfloat16")

    unfused = dg.function(h, disable_passes=("sum_cast",)).get_graph()
    assert [op.type for op in unfused.op].count("SumCastGrad") == 0
    assert [op.type for op in sum_cast(unfused).op].count("SumCastGrad") == 1
    unfused.metadata["devices"] = "cpu,cuda"           # captured cuda parameters, say
    assert device_types(unfused) == ["cpu", "cuda"]
    assert sum_cast(unfused) is unfused
