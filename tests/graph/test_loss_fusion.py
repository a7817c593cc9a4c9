"""The ``loss_fusion`` pass (docs/graph.md): ``MseLoss(x, t)`` and its
gradient ``Mul(Sub(x, t), scale)`` become one ``MseLossAndGrad``. Unit
tests on hand-built graphs (the hit, and each precondition's miss), run
through the executor against the unfused graph (bit for bit); then a
training step, float32 and bfloat16 autocast, compiled with and without the
pass (the kernel itself: tests/ops/test_mse_loss_and_grad.py)."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph.passes.loss_fusion import loss_fusion

try:
    from .fixtures import graph, op_summary
    from .test_fusion import run_graph
except ImportError:  # run as a script
    from fixtures import graph, op_summary
    from test_fusion import run_graph

F32, F64 = "float32", "float64"
S = (4, 6)


def _loss_graph(reduction="mean", dtype=F32, sub_inputs=("x", "t"), swap=False,
                scale_shape=(), extra=(), outputs=("loss", "g"), scale_from_op=False):
    """loss = MseLoss(x, t); g = Mul(Sub(x, t), s)."""
    ops = [("MseLoss", ["x", "t"], ["loss"], {"reduction": reduction})]
    scale = "s"
    if scale_from_op:               # the scale computed after the loss
        ops.append(("Neg", ["s"], ["s2"], {}))
        scale = "s2"
    ops.append(("Sub", list(sub_inputs), ["d"], {}))
    ops.append(("Mul", [scale, "d"] if swap else ["d", scale], ["g"], {}))
    ops.extend(extra)
    # the scale is a graph input here (a folded constant in a traced step;
    # the fixture's constants cannot be 0-d)
    return graph(inputs=[("x", dtype, S), ("t", dtype, S), ("s", dtype, scale_shape)],
                 ops=ops, outputs=list(outputs))


def _feeds(dtype=np.float32, scale_shape=()):
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal(S).astype(dtype),
            "t": rng.standard_normal(S).astype(dtype),
            "s": np.full(scale_shape, 2.0 / 24, dtype=dtype)}


def _same_results(g, new, feeds):
    for a, b in zip(run_graph(g, feeds), run_graph(new, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _unchanged(g):
    assert loss_fusion(g).SerializeToString() == g.SerializeToString()


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", [F32, F64])
def test_loss_and_gradient_fuse(dtype, reduction, swap):
    g = _loss_graph(reduction=reduction, dtype=dtype, swap=swap)
    new = loss_fusion(g)
    assert op_summary(new) == [("MseLossAndGrad", ["x", "t", "s"], ["loss", "g"])]
    op = new.op[0]
    assert op.attr["reduction"].s == reduction
    assert op.attr["_fused_ops"].s == "MseLoss_0,Sub_1,Mul_2"
    assert op.attr["_fusion_pattern"].s == "loss_fusion"
    info = {v.name for v in new.value_info}
    assert "d" not in info and {"loss", "g"} <= info
    assert op_summary(g)[0][0] == "MseLoss"           # the argument is untouched
    _same_results(g, new, _feeds(np.float64 if dtype == F64 else np.float32))


def test_readers_of_the_gradient_keep_reading_it():
    """A trained target: the gradient rule's Neg of g reads the fused op's
    output under its old name."""
    g = _loss_graph(extra=[("Neg", ["g"], ["gt"], {})], outputs=("loss", "g", "gt"))
    new = loss_fusion(g)
    assert op_summary(new) == [("MseLossAndGrad", ["x", "t", "s"], ["loss", "g"]),
                               ("Neg", ["g"], ["gt"])]
    _same_results(g, new, _feeds())


MISSES = {
    "reduction_none": dict(reduction="none"),
    "sub_reversed": dict(sub_inputs=("t", "x")),
    "sub_of_other_values": dict(sub_inputs=("x", "x")),
    "scale_not_0d": dict(scale_shape=(1,)),
    "difference_read_twice": dict(extra=[("Neg", ["d"], ["dn"], {})],
                                  outputs=("loss", "g", "dn")),
    "difference_is_output": dict(outputs=("loss", "g", "d")),
    "scale_computed_after_the_loss": dict(scale_from_op=True),
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_preconditions(case):
    g = _loss_graph(**MISSES[case])
    _unchanged(g)
    _same_results(g, loss_fusion(g), _feeds(scale_shape=MISSES[case].get("scale_shape", ())))


def test_no_kernel_on_the_device_no_change():
    """A device type without an MseLossAndGrad kernel (here one no plugin
    registers) leaves the graph as it is, also when it is only one of the
    fed tensors' device types."""
    from dragon_core._graph.passes import kernel_dtypes
    assert kernel_dtypes("MseLossAndGrad", "npu") == set()
    g = _loss_graph()
    g.metadata["device"] = "npu:0"
    _unchanged(g)
    g = _loss_graph()
    g.metadata["devices"] = "cpu,npu"
    _unchanged(g)


def test_a_device_with_the_kernel_fuses():
    """cuda registers MseLossAndGrad for float32/64 (plugins/cuda/src/nn.cu)."""
    from dragon_core._graph.passes import kernel_dtypes
    if "float32" not in kernel_dtypes("MseLossAndGrad", "cuda"):
        pytest.skip("the cuda plugin is not installed")
    g = _loss_graph()
    g.metadata["devices"] = "cpu,cuda"
    assert [op.type for op in loss_fusion(g).op] == ["MseLossAndGrad"]


def test_runs_at_o3_after_constant_fold():
    from dragon_core._graph.passes import passes_for
    names = [n for n, _ in passes_for(3)]
    assert "loss_fusion" in names and "loss_fusion" not in [n for n, _ in passes_for(2)]
    assert names.index("constant_fold") < names.index("loss_fusion") < names.index("fusion")


# ------------------------------------------------ a training step, compiled


def _step(precision, disable):
    rng = np.random.default_rng(5)
    lin = dg.nn.Linear(24, 16)
    lin.load_state_dict({
        "weight": dg.tensor((rng.standard_normal((16, 24)) * 0.3).astype(np.float32)),
        "bias": dg.tensor((rng.standard_normal(16) * 0.3).astype(np.float32))})
    norm = dg.nn.LayerNorm(16)
    params = list(lin.parameters()) + list(norm.parameters())
    opt = dg.optim.Adam(params, lr=1e-2)

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=precision == "bfloat16"):
            loss = dg.nn.functional.mse_loss(norm(lin(x)), t)
        loss.backward()
        opt.step()
        return loss

    fn = dg.function(step, disable_passes=("loss_fusion",) if disable else ())
    return fn, params


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_compiled_step_equals_the_unfused_graph(precision):
    rng = np.random.default_rng(6)
    x = dg.tensor(rng.standard_normal((4, 7, 24)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((4, 7, 16)).astype(np.float32))
    results = []
    for disable in (True, False):
        fn, params = _step(precision, disable)
        losses = [float(fn(x, t).numpy()) for _ in range(3)]
        types = [op.type for op in fn.get_graph(x, t).op]
        results.append((losses, [p.numpy().copy() for p in params], types))
    (l0, p0, t0), (l1, p1, t1) = results
    assert "MseLoss" in t0 and "MseLossAndGrad" not in t0
    assert "MseLossAndGrad" in t1 and "MseLoss" not in t1
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
