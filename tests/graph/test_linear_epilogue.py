"""The ``linear_epilogue`` pass (docs/graph.md): ``MatMul(out_dtype=float32)
-> [Reshape] -> Add(bias) -> Cast | Add(residual)`` of bfloat16 operands
becomes one ``MatMulBiasAdd``. Unit tests on hand-built graphs (the hits,
and each precondition's miss), run through the executor against the
unfused graph (bit for bit); then the bfloat16 encoder training step
compiled with and without the pass (the kernel itself:
tests/ops/test_matmul_bias_add.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph.passes import kernel_dtypes
from dragon_core._graph.passes.linear_epilogue import linear_epilogue

from .fixtures import encoder_same_bits_without, graph, op_summary
from .test_fusion import run_graph

F32, BF16 = "float32", "bfloat16"
N, K, M = 24, 16, 40
OUT = (4, 6, M)

pytestmark = pytest.mark.skipif(
    BF16 not in kernel_dtypes("MatMulBiasAdd", "cpu"),
    reason="MatMulBiasAdd has a kernel only where cpu_eigen's AVX512-BF16 GEMM runs "
           "(test_no_kernel_no_change checks the pass leaves graphs alone there)")


def _chain(last="cast", reshape=True, swap=False, bias_shape=(M,), extra=(), outputs=None,
           cast_to=BF16, res_shape=OUT):
    """a @ w^T (float32) -> [Reshape] -> + bias -> Cast | + residual."""
    ops = [("MatMul", ["a", "w"], ["m"], {"transpose_b": True, "out_dtype": F32})]
    x = "m"
    if reshape:
        ops.append(("Reshape", ["m"], ["r"], {"shape": list(OUT)}))
        x = "r"
    ops.append(("Add", ["bias", x] if swap else [x, "bias"], ["s"], {}))
    if last == "cast":
        ops.append(("Cast", ["s"], ["y"], {"dtype": cast_to}))
    else:
        ops.append(("Add", ["res", "s"] if swap else ["s", "res"], ["y"], {}))
    ops.extend(extra)
    inputs = [("a", BF16, (N, K)), ("w", BF16, (M, K)), ("bias", F32, bias_shape)]
    if last != "cast":
        inputs.append(("res", F32, res_shape if reshape else (N, M)))
    return graph(inputs=inputs, ops=ops, outputs=outputs if outputs is not None else ["y"])


def _feeds(g):
    rng = np.random.default_rng(0)
    out = {}
    for name in g.input:
        info = {v.name: v for v in g.value_info}[name]
        shape = tuple(info.shape)
        out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def _as_bf16_inputs(g):
    """The same graph taking float32 a and w and casting them to bfloat16
    first (the test feeds NumPy float32 arrays)."""
    from dragon_core import proto as P
    new = P.GraphDef()
    new.CopyFrom(g)
    del new.op[:]
    pre = graph(inputs=[("a32", F32, (N, K)), ("w32", F32, (M, K))],
                ops=[("Cast", ["a32"], ["a"], {"dtype": BF16}),
                     ("Cast", ["w32"], ["w"], {"dtype": BF16})], outputs=["a", "w"])
    new.op.extend(pre.op)
    new.op.extend(g.op)
    ins = [n for n in g.input if n not in ("a", "w")]
    del new.input[:]
    new.input.extend(["a32", "w32"] + ins)
    new.value_info.extend([v for v in pre.value_info if v.name in ("a32", "w32")])
    return new


def _same_results(g, new):
    g2, new2 = _as_bf16_inputs(g), _as_bf16_inputs(new)
    feeds = _feeds(g2)
    for x, y in zip(run_graph(g2, feeds), run_graph(new2, feeds)):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x.view(np.uint8), y.view(np.uint8))


def _unchanged(g):
    assert linear_epilogue(g).SerializeToString() == g.SerializeToString()


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("reshape", [True, False])
def test_cast_chain_fuses(reshape, swap):
    g = _chain("cast", reshape=reshape, swap=swap)
    new = linear_epilogue(g)
    assert op_summary(new) == [("MatMulBiasAdd", ["a", "w", "bias"], ["y"])]
    op = new.op[0]
    assert dg.as_dtype(op.attr["dtype"].dtype).name == BF16
    assert list(op.attr["shape"].ints.values) == list(OUT if reshape else (N, M))
    assert op.attr["transpose_b"].b and not op.attr["transpose_a"].b
    assert op.attr["_fusion_pattern"].s == "linear_epilogue"
    assert op.attr["_fused_ops"].s.count(",") == (3 if reshape else 2)
    info = {v.name for v in new.value_info}
    assert not info & {"m", "r", "s"} and "y" in info
    _same_results(g, new)


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("reshape", [True, False])
def test_residual_chain_fuses(reshape, swap):
    g = _chain("residual", reshape=reshape, swap=swap)
    new = linear_epilogue(g)
    assert op_summary(new) == [("MatMulBiasAdd", ["a", "w", "bias", "res"], ["y"])]
    assert dg.as_dtype(new.op[0].attr["dtype"].dtype).name == F32
    _same_results(g, new)


MISSES = {
    # a value of the chain is read elsewhere or pinned
    "product_is_output": dict(outputs=["y", "m"]),
    "reshape_read_twice": dict(extra=[("Neg", ["r"], ["rn"], {})], outputs=["y", "rn"]),
    "sum_is_output": dict(outputs=["y", "s"]),
    "sum_read_twice": dict(extra=[("Neg", ["s"], ["sn"], {})], outputs=["y", "sn"]),
    # not a bias: 2-D, or broadcast rows
    "bias_2d": dict(bias_shape=(6, M)),
    "bias_rows": dict(bias_shape=(1, 1, M)),
    # the Cast is not back to the operands' dtype
    "cast_to_float16": dict(cast_to="float16"),
    "cast_to_float64": dict(cast_to="float64"),
    # a residual that broadcasts is not y's shape
    "residual_broadcasts": dict(last="residual", res_shape=(1, 6, M)),
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_misses_leave_the_graph(case):
    _unchanged(_chain(**MISSES[case]))


def test_bfloat16_product_is_left():
    """out_dtype unset: the product is already bfloat16 (no float32 sum to
    keep); only the pass's matching is checked (the Add would then mix
    dtypes)."""
    g = _chain("cast")
    mm = g.op[0]
    del mm.attr["out_dtype"]
    mm.attr["out_dtype"].none = True
    _unchanged(g)


def test_reshape_of_the_last_axis_is_left():
    """[N, M] -> [4, 6, 4, M / 4]: a bias along the new last axis is not
    along the product's columns."""
    q = M // 4
    g = graph(inputs=[("a", BF16, (N, K)), ("w", BF16, (M, K)), ("bias", F32, (q,))],
              ops=[("MatMul", ["a", "w"], ["m"], {"transpose_b": True, "out_dtype": F32}),
                   ("Reshape", ["m"], ["r"], {"shape": [4, 6, 4, q]}),
                   ("Add", ["r", "bias"], ["s"], {}),
                   ("Cast", ["s"], ["y"], {"dtype": BF16})],
              outputs=["y"])
    _unchanged(g)


def test_float32_operands_are_left_to_pattern_fusion():
    g = graph(inputs=[("a", F32, (N, K)), ("w", F32, (M, K)), ("bias", F32, (M,))],
              ops=[("MatMul", ["a", "w"], ["m"], {"transpose_b": True}),
                   ("Add", ["m", "bias"], ["s"], {}),
                   ("Cast", ["s"], ["y"], {"dtype": BF16})],
              outputs=["y"])
    _unchanged(g)


def test_batched_product_is_left():
    """A 3-D operand (a batched MatMul) is not a Linear layer's 2-D product."""
    g = graph(inputs=[("a", BF16, (4, 6, K)), ("w", BF16, (M, K)), ("bias", F32, (M,))],
              ops=[("MatMul", ["a", "w"], ["m"], {"transpose_b": True, "out_dtype": F32}),
                   ("Add", ["m", "bias"], ["s"], {}),
                   ("Cast", ["s"], ["y"], {"dtype": BF16})],
              outputs=["y"])
    _unchanged(g)


def test_no_kernel_no_change():
    g = _chain("cast")
    g.metadata["device"] = "cuda:0"
    assert BF16 not in kernel_dtypes("MatMulBiasAdd", "cuda")
    _unchanged(g)


def test_order_and_levels():
    from dragon_core._graph.passes import passes_for
    names = [n for n, _ in passes_for(3)]
    assert names.index("gelu_fusion") < names.index("linear_epilogue") < names.index("fusion")
    assert "linear_epilogue" not in [n for n, _ in passes_for(2)]


def test_gelu_block_keeps_its_add():
    """MatMul -> Add(bias) -> Gelu is gelu_fusion's: this pass leaves it
    (the Add's reader is a Gelu)."""
    g = graph(inputs=[("a", BF16, (N, K)), ("w", BF16, (M, K)), ("bias", F32, (M,))],
              ops=[("MatMul", ["a", "w"], ["m"], {"transpose_b": True, "out_dtype": F32}),
                   ("Add", ["m", "bias"], ["s"], {}),
                   ("Gelu", ["s"], ["y"], {})],
              outputs=["y"])
    _unchanged(g)


# ------------------------------------------------ the encoder step, compiled


def test_encoder_step_same_bits_and_five_chains():
    """The bfloat16 encoder step: q, k, v (bias, Cast) and the two
    sublayers' output products (bias, residual) fuse; three steps of
    training give the same losses and parameters, bit for bit."""
    on, off, x, t = encoder_same_bits_without("linear_epilogue")
    fused = [op for op in on.get_graph(x, t).op if op.type == "MatMulBiasAdd"]
    dtypes = sorted(dg.as_dtype(op.attr["dtype"].dtype).name for op in fused)
    assert dtypes == [BF16] * 3 + [F32] * 2
    assert not any(op.type == "MatMulBiasAdd" for op in off.get_graph(x, t).op)


def test_float32_encoder_step_unchanged():
    on, off, x, t = encoder_same_bits_without("linear_epilogue", steps=1, autocast=False)
    assert not any(op.type == "MatMulBiasAdd" for op in on.get_graph(x, t).op)
