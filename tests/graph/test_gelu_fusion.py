"""The ``gelu_fusion`` pass (docs/graph.md): ``Add(bias) -> Gelu -> [Cast]``
becomes ``BiasGelu``, ``GeluGrad -> Sum & [Cast]`` becomes
``BiasGeluGrad``. Unit tests on hand-built graphs (the hits, and each
precondition's miss), run through the executor against the unfused graph
(bit for bit); then a Linear -> GELU -> Linear training step, float32 and
bfloat16 autocast, compiled with and without the pass (the kernels
themselves: tests/ops/test_fused_act.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph.passes import gelu_fusion as _gelu_fusion_module
from dragon_core._graph.passes.gelu_fusion import gelu_fusion

try:
    from .fixtures import graph, op_summary
    from .test_fusion import run_graph
except ImportError:  # run as a script
    from fixtures import graph, op_summary
    from test_fusion import run_graph

F32, BF16 = "float32", "bfloat16"
S = (2, 3, 8)


@pytest.fixture(autouse=True)
def forward_half_on(request, monkeypatch):
    """The forward half runs by default only where a 16-bit Cast follows
    (FUSE_FORWARD_CAST; a float32 output measured slower in the step);
    these tests check both halves' matching and bits everywhere."""
    if "default_forward" not in request.node.name:
        monkeypatch.setattr(_gelu_fusion_module, "FUSE_FORWARD", True)


@pytest.mark.parametrize("precision", [F32, BF16])
def test_default_forward_only_before_a_cast(precision):
    """By default the forward half fuses where the Gelu's output is cast to
    bfloat16 (autocast), not in a float32 graph; the backward half fuses in
    both (docs/graph.md)."""
    fn, _ = _mlp_step(precision, False)
    rng = np.random.default_rng(3)
    x = dg.tensor(rng.standard_normal((6, 24)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((6, 24)).astype(np.float32))
    types = [op.type for op in fn.get_graph(x, t).op]
    if precision == BF16:
        assert "BiasGelu" in types and "Gelu" not in types
    else:
        assert "BiasGelu" not in types and "Gelu" in types
    assert "BiasGeluGrad" in types and "GeluGrad" not in types


def test_default_forward_off_without_cast_flag(monkeypatch):
    monkeypatch.setattr(_gelu_fusion_module, "FUSE_FORWARD_CAST", False)
    fn, _ = _mlp_step(BF16, False)
    rng = np.random.default_rng(3)
    x = dg.tensor(rng.standard_normal((6, 24)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((6, 24)).astype(np.float32))
    types = [op.type for op in fn.get_graph(x, t).op]
    assert "BiasGelu" not in types and "BiasGeluGrad" in types


def _block(cast_fwd=BF16, cast_bwd=BF16, keepdims=True, axes=(0, 1), bias_shape=(8,),
           mode="none", grad_mode=None, extra=(), outputs=None, swap=False, dtype=F32):
    """u + b -> gelu -> [cast]; GeluGrad(a, dy) -> Sum(axes) & [cast]."""
    ops = [("Add", ["b", "u"] if swap else ["u", "b"], ["a"], {}),
           ("Gelu", ["a"], ["y"], {"approximate": mode})]
    outs = []
    if cast_fwd:
        ops.append(("Cast", ["y"], ["yc"], {"dtype": cast_fwd}))
        outs.append("yc")
    else:
        outs.append("y")
    ops.append(("GeluGrad", ["a", "dy"], ["g"], {"approximate": grad_mode or mode}))
    ops.append(("Sum", ["g"], ["db"], {"axes": list(axes), "keepdims": keepdims}))
    outs.append("db")
    if cast_bwd:
        ops.append(("Cast", ["g"], ["gc"], {"dtype": cast_bwd}))
        outs.append("gc")
    else:
        ops.append(("Neg", ["g"], ["gn"], {}))
        outs.append("gn")
    ops.extend(extra)
    return graph(inputs=[("u", dtype, S), ("b", dtype, bias_shape), ("dy", dtype, S)],
                 ops=ops, outputs=outputs if outputs is not None else outs)


def _feeds(bias_shape=(8,), dtype=np.float32):
    rng = np.random.default_rng(0)
    return {"u": (rng.standard_normal(S) * 2).astype(dtype),
            "b": rng.standard_normal(bias_shape).astype(dtype),
            "dy": rng.standard_normal(S).astype(dtype)}


def _same_results(g, new, feeds):
    for a, b in zip(run_graph(g, feeds), run_graph(new, feeds)):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)


def _unchanged(g):
    assert gelu_fusion(g).SerializeToString() == g.SerializeToString()


@pytest.mark.parametrize("swap", [False, True])
@pytest.mark.parametrize("mode", ["none", "tanh"])
def test_bf16_block_fuses_both_ways(mode, swap):
    g = _block(mode=mode, swap=swap)
    new = gelu_fusion(g)
    assert op_summary(new) == [
        ("BiasGelu", ["u", "b"], ["yc", "a"]),
        ("BiasGeluGrad", ["a", "dy"], ["gc", "db"])]
    fwd, bwd = new.op
    assert fwd.attr["approximate"].s == mode and bwd.attr["approximate"].s == mode
    assert dg.as_dtype(fwd.attr["dtype"].dtype).name == BF16
    assert dg.as_dtype(bwd.attr["dtype"].dtype).name == BF16
    assert bwd.attr["keepdims"].b
    info = {v.name for v in new.value_info}
    assert not info & {"y", "g"} and {"a", "yc", "gc", "db"} <= info
    assert op_summary(g)[0][0] == "Add"           # the argument is untouched
    _same_results(g, new, _feeds())


def test_float32_block_fuses_without_casts():
    g = _block(cast_fwd=None, cast_bwd=None, keepdims=False)
    new = gelu_fusion(g)
    assert op_summary(new) == [
        ("BiasGelu", ["u", "b"], ["y", "a"]),
        ("BiasGeluGrad", ["a", "dy"], ["g", "db"]),
        ("Neg", ["g"], ["gn"])]
    assert dg.as_dtype(new.op[0].attr["dtype"].dtype).name == F32
    assert not new.op[1].attr["keepdims"].b
    _same_results(g, new, _feeds())


def test_negative_axes_and_float16():
    g = _block(cast_fwd="float16", cast_bwd="float16", axes=(-3, -2))
    new = gelu_fusion(g)
    assert [op.type for op in new.op] == ["BiasGelu", "BiasGeluGrad"]
    _same_results(g, new, _feeds())


def test_inference_forward_alone():
    g = graph(inputs=[("u", F32, S), ("b", F32, (8,))],
              ops=[("Add", ["u", "b"], ["a"], {}), ("Gelu", ["a"], ["y"], {}),
                   ("Cast", ["y"], ["yc"], {"dtype": BF16})],
              outputs=["yc"])
    new = gelu_fusion(g)
    assert op_summary(new) == [("BiasGelu", ["u", "b"], ["yc", "a"])]
    _same_results(g, new, {k: v for k, v in _feeds().items() if k != "dy"})


def test_cast_with_other_readers_of_y_is_kept():
    """y read by the Cast and another op: written in float32, the Cast stays."""
    g = _block(extra=[("Neg", ["y"], ["yn"], {})], outputs=["yc", "db", "gc", "yn"])
    new = gelu_fusion(g)
    assert op_summary(new)[:2] == [("BiasGelu", ["u", "b"], ["y", "a"]),
                                   ("Cast", ["y"], ["yc"])]
    assert dg.as_dtype(new.op[0].attr["dtype"].dtype).name == F32
    _same_results(g, new, _feeds())


def test_pinned_gelu_output_keeps_float32():
    g = _block(outputs=["y", "yc", "db", "gc"])
    new = gelu_fusion(g)
    assert op_summary(new)[0] == ("BiasGelu", ["u", "b"], ["y", "a"])
    _same_results(g, new, _feeds())


# Each case: the graph, and the op types after the pass (each half of the
# block fuses or not on its own preconditions).
MISSES = {
    # the pre-activation stays a value: its other readers keep it
    "pre_activation_is_output": (dict(outputs=["yc", "db", "gc", "a"]),
                                 ["BiasGelu", "BiasGeluGrad"]),
    "other_reader_of_pre": (dict(extra=[("Neg", ["a"], ["an"], {})],
                                 outputs=["yc", "db", "gc", "an"]),
                            ["BiasGelu", "BiasGeluGrad", "Neg"]),
    # backward misses
    "grad_output_pinned": (dict(outputs=["yc", "db", "gc", "g"]),
                           ["BiasGelu", "GeluGrad", "Sum", "Cast"]),
    "sum_keeps_rows": (dict(axes=(0,)), ["BiasGelu", "GeluGrad", "Sum", "Cast"]),
    "sum_all_axes": (dict(axes=(0, 1, 2)), ["BiasGelu", "GeluGrad", "Sum", "Cast"]),
    "second_sum": (dict(extra=[("Sum", ["g"], ["db2"], {"axes": [0, 1]})],
                        outputs=["yc", "db", "gc", "db2"]),
                   ["BiasGelu", "GeluGrad", "Sum", "Cast", "Sum"]),
    # forward misses
    "bias_2d": (dict(bias_shape=(3, 8)), ["Add", "Gelu", "Cast", "BiasGeluGrad"]),
    "bias_rows": (dict(bias_shape=(1, 1, 8)), ["Add", "Gelu", "Cast", "BiasGeluGrad"]),
    "two_gelus": (dict(extra=[("Gelu", ["a"], ["y2"], {})],
                       outputs=["yc", "db", "gc", "y2"]),
                  ["Add", "Gelu", "Cast", "BiasGeluGrad", "Gelu"]),
    # neither
    "float64": (dict(cast_fwd=None, cast_bwd=None, dtype="float64"),
                ["Add", "Gelu", "GeluGrad", "Sum", "Neg"]),
    # both, each with its own mode
    "modes_differ": (dict(mode="none", grad_mode="tanh"), ["BiasGelu", "BiasGeluGrad"]),
    # a GeluGrad without a bias sum stays
    "two_grads": (dict(extra=[("GeluGrad", ["a", "u"], ["g2"], {})],
                       outputs=["yc", "db", "gc", "g2"]),
                  ["BiasGelu", "BiasGeluGrad", "GeluGrad"]),
    # a Cast to float64 is not a 16-bit rounding: float32 y, the Cast stays
    "cast_up": (dict(cast_fwd="float64", cast_bwd=None),
                ["BiasGelu", "Cast", "BiasGeluGrad", "Neg"]),
}


@pytest.mark.parametrize("case", sorted(MISSES))
def test_each_half_on_its_own_preconditions(case):
    kwargs, types = MISSES[case]
    g = _block(**kwargs)
    new = gelu_fusion(g)
    assert [op.type for op in new.op] == types
    if types == [op.type for op in g.op]:
        assert new.SerializeToString() == g.SerializeToString()
    dtype = np.float64 if kwargs.get("dtype") == "float64" else np.float32
    _same_results(g, new, _feeds(kwargs.get("bias_shape", (8,)), dtype))


def test_modes_are_kept_per_half():
    new = gelu_fusion(_block(mode="none", grad_mode="tanh"))
    assert [op.attr["approximate"].s for op in new.op] == ["none", "tanh"]


def test_no_sum_leaves_the_grad():
    g = graph(inputs=[("u", F32, S), ("b", F32, (8,)), ("dy", F32, S)],
              ops=[("Add", ["u", "b"], ["a"], {}), ("Gelu", ["a"], ["y"], {}),
                   ("GeluGrad", ["a", "dy"], ["g"], {})],
              outputs=["y", "g"])
    new = gelu_fusion(g)
    assert [op.type for op in new.op] == ["BiasGelu", "GeluGrad"]
    _same_results(g, new, _feeds())


def test_add_of_two_tensors_is_not_a_bias():
    g = graph(inputs=[("u", F32, S), ("v", F32, S), ("dy", F32, S)],
              ops=[("Add", ["u", "v"], ["a"], {}), ("Gelu", ["a"], ["y"], {}),
                   ("GeluGrad", ["a", "dy"], ["g"], {}),
                   ("Sum", ["g"], ["db"], {"axes": [0, 1], "keepdims": False})],
              outputs=["y", "db"])
    new = gelu_fusion(g)
    assert [op.type for op in new.op] == ["Add", "Gelu", "BiasGeluGrad"]
    feeds = _feeds()
    feeds["v"] = feeds.pop("b").reshape(1, 1, 8).repeat(2, 0).repeat(3, 1)
    _same_results(g, new, feeds)


def test_rank1_add_is_not_a_bias():
    """Two vectors added then Gelu: left to the element-wise fusion."""
    g = graph(inputs=[("u", F32, (8,)), ("b", F32, (8,))],
              ops=[("Add", ["u", "b"], ["a"], {}), ("Gelu", ["a"], ["y"], {})],
              outputs=["y"])
    _unchanged(g)


def test_rank1_grad_is_left_alone():
    g = graph(inputs=[("a", F32, (8,)), ("dy", F32, (8,))],
              ops=[("GeluGrad", ["a", "dy"], ["g"], {}),
                   ("Sum", ["g"], ["db"], {"axes": [0], "keepdims": False})],
              outputs=["db"])
    _unchanged(g)


def test_no_kernel_on_the_device_no_change():
    g = _block()
    g.metadata["device"] = "cuda:0"
    from dragon_core._graph.passes import kernel_dtypes
    assert "float32" not in kernel_dtypes("BiasGelu", "cuda")   # none written yet
    _unchanged(g)


def test_disabled_by_name_and_below_o3():
    from dragon_core._graph.passes import passes_for
    assert "gelu_fusion" in [n for n, _ in passes_for(3)]
    assert "gelu_fusion" not in [n for n, _ in passes_for(2)]
    names = [n for n, _ in passes_for(3)]
    assert names.index("cast_fold") < names.index("gelu_fusion")


# ------------------------------------------------ an MLP step, compiled


def _mlp_step(precision, disable):
    rng = np.random.default_rng(5)
    w1 = dg.tensor((rng.standard_normal((24, 40)) * 0.3).astype(np.float32))
    b1 = dg.tensor((rng.standard_normal(40) * 0.3).astype(np.float32))
    w2 = dg.tensor((rng.standard_normal((40, 24)) * 0.3).astype(np.float32))
    b2 = dg.tensor((rng.standard_normal(24) * 0.3).astype(np.float32))
    lin1, lin2 = dg.nn.Linear(24, 40), dg.nn.Linear(40, 24)
    lin1.load_state_dict({"weight": dg.ops.transpose(w1, [1, 0]), "bias": b1})
    lin2.load_state_dict({"weight": dg.ops.transpose(w2, [1, 0]), "bias": b2})
    params = list(lin1.parameters()) + list(lin2.parameters())
    opt = dg.optim.SGD(params, lr=0.1)

    def step(x, t):
        opt.zero_grad()
        with dg.autocast("cpu", enabled=precision == BF16):
            out = lin2(dg.nn.functional.gelu(lin1(x)))
            loss = dg.nn.functional.mse_loss(out, t)
        loss.backward()
        opt.step()
        return loss

    fn = dg.function(step, disable_passes=("gelu_fusion",) if disable else ())
    return fn, params


@pytest.mark.parametrize("precision", [F32, BF16])
def test_compiled_step_equals_the_unfused_graph(precision, monkeypatch):
    # A float32 Linear of a rank-3 input adds its bias to the 2-D product,
    # which pattern fusion then takes into MatMulBiasAct (no Add is left for
    # BiasGelu); keep the Add after the reshape here, as a model that writes
    # matmul + bias itself has it, so the float32 forward half is exercised.
    monkeypatch.setattr(dg.nn.functional, "_bias_before_reshape", lambda x, b: False)
    rng = np.random.default_rng(6)
    x = dg.tensor(rng.standard_normal((4, 7, 24)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((4, 7, 24)).astype(np.float32))
    results = []
    for disable in (True, False):
        fn, params = _mlp_step(precision, disable)
        losses = [float(fn(x, t).numpy()) for _ in range(3)]
        types = [op.type for op in fn.get_graph(x, t).op]
        results.append((losses, [p.numpy().copy() for p in params], types))
    (l0, p0, t0), (l1, p1, t1) = results
    assert "BiasGelu" not in t0 and "Gelu" in t0
    assert "BiasGelu" in t1 and "BiasGeluGrad" in t1 and "Gelu" not in t1
    assert "GeluGrad" not in t1
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)


def test_captured_tensors_on_a_device_without_a_kernel_no_change():
    """metadata["devices"] (the fed tensors' device types, set when a trace
    is built) is checked as well as metadata["device"]: a step without
    arguments over captured cuda parameters has only the former."""
    g = _block()
    g.metadata["devices"] = "cpu,cuda"
    _unchanged(g)


# --------------------------------- the bias sum read through a view (float32)


def _view_block(view_shape=(6, 8), keepdims=True, extra=(), outputs=None, sum_axes=None,
                grad_readers=()):
    """GeluGrad(a, dy) -> Reshape(view_shape) -> Sum(every axis but the
    last) & MatMul: the float32 step, whose Linear writes a 2-D product."""
    ops = [("GeluGrad", ["a", "dy"], ["g"], {}),
           ("Reshape", ["g"], ["g2"], {"shape": list(view_shape)}),
           ("Sum", ["g2"], ["db"], {"axes": list(sum_axes if sum_axes is not None
                                                   else range(len(view_shape) - 1)),
                                    "keepdims": keepdims}),
           ("MatMul", ["g2", "w"], ["dx"], {})]
    ops.extend(("Neg", ["g"], [f"n{i}"], {}) for i in range(len(grad_readers)))
    ops.extend(extra)
    last = view_shape[-1]
    return graph(inputs=[("a", F32, S), ("dy", F32, S), ("w", F32, (last, 5))], ops=ops,
                 outputs=outputs if outputs is not None
                 else ["db", "dx"] + [f"n{i}" for i in range(len(grad_readers))])


def _view_feeds():
    rng = np.random.default_rng(2)
    return {"a": (rng.standard_normal(S) * 2).astype(np.float32),
            "dy": rng.standard_normal(S).astype(np.float32),
            "w": rng.standard_normal((8, 5)).astype(np.float32)}


@pytest.mark.parametrize("keepdims", [True, False])
def test_bias_sum_through_a_view_fuses(keepdims):
    g = _view_block(keepdims=keepdims)
    new = gelu_fusion(g)
    assert [op.type for op in new.op] == ["BiasGeluGrad", "Reshape", "Reshape", "MatMul"]
    fused, _, as_sum, _ = new.op
    assert list(fused.input) == ["a", "dy"] and fused.output[0] == "g"
    assert not fused.attr["keepdims"].b
    assert dg.as_dtype(fused.attr["dtype"].dtype).name == F32
    # the Sum's output keeps its name and shape: a view of the [N] sum
    assert list(as_sum.input) == [fused.output[1]] and list(as_sum.output) == ["db"]
    info = {v.name: tuple(v.shape) for v in new.value_info}
    assert info[fused.output[1]] == (8,)
    assert info["db"] == ((1, 8) if keepdims else (8,))
    _same_results(g, new, _view_feeds())


def test_bias_sum_through_a_rank3_view():
    g = _view_block(view_shape=(3, 2, 8))
    new = gelu_fusion(g)
    assert [op.type for op in new.op][0] == "BiasGeluGrad"
    _same_results(g, new, _view_feeds())


VIEW_MISSES = {
    # the view moves the last axis: the sum would not be a bias gradient
    "view_splits_last_axis": dict(view_shape=(12, 4)),
    # the Sum keeps a leading axis
    "sum_keeps_rows": dict(sum_axes=(1,)),
    # g itself has another reader besides the view
    "second_reader_of_g": dict(grad_readers=(1,)),
    # the view is a graph output
    "view_pinned": dict(outputs=["db", "dx", "g2"]),
}


@pytest.mark.parametrize("case", sorted(VIEW_MISSES))
def test_bias_sum_through_a_view_preconditions(case):
    kwargs = VIEW_MISSES[case]
    if case == "view_splits_last_axis":
        g = graph(inputs=[("a", F32, S), ("dy", F32, S), ("w", F32, (4, 5))],
                  ops=[("GeluGrad", ["a", "dy"], ["g"], {}),
                       ("Reshape", ["g"], ["g2"], {"shape": [12, 4]}),
                       ("Sum", ["g2"], ["db"], {"axes": [0], "keepdims": True}),
                       ("MatMul", ["g2", "w"], ["dx"], {})],
                  outputs=["db", "dx"])
        feeds = _view_feeds()
        feeds["w"] = feeds["w"][:4]
    else:
        g = _view_block(**kwargs)
        feeds = _view_feeds()
    _unchanged(g)
    _same_results(g, gelu_fusion(g), feeds)


def test_bias_sum_through_a_transpose_is_left_alone():
    """A strided view (Transpose) that keeps the last axis's size but moves
    the axes: the Sum over its leading axes is not g's bias sum (here it
    sums g's axes 0 and 2), so the chain must stay as it is."""
    s = (2, 8, 8)
    g = graph(inputs=[("a", F32, s), ("dy", F32, s)],
              ops=[("GeluGrad", ["a", "dy"], ["g"], {}),
                   ("Transpose", ["g"], ["gt"], {"perm": [0, 2, 1]}),
                   ("Sum", ["gt"], ["db"], {"axes": [0, 1], "keepdims": False}),
                   ("Neg", ["gt"], ["n"], {})],
              outputs=["db", "n"])
    _unchanged(g)
    rng = np.random.default_rng(3)
    feeds = {"a": (rng.standard_normal(s) * 2).astype(np.float32),
             "dy": rng.standard_normal(s).astype(np.float32)}
    _same_results(g, gelu_fusion(g), feeds)


def test_float32_step_fuses_the_bias_sum_behind_the_reshape():
    """The float32 MLP step of a rank-3 input (the Linear's bias inside the
    2-D product): GeluGrad -> Reshape -> Sum becomes BiasGeluGrad, and the
    step computes what it computes without the pass, bit for bit."""
    rng = np.random.default_rng(6)
    x = dg.tensor(rng.standard_normal((4, 7, 24)).astype(np.float32))
    t = dg.tensor(rng.standard_normal((4, 7, 24)).astype(np.float32))
    results = []
    for disable in (True, False):
        fn, params = _mlp_step(F32, disable)
        losses = [float(fn(x, t).numpy()) for _ in range(3)]
        types = [op.type for op in fn.get_graph(x, t).op]
        results.append((losses, [p.numpy().copy() for p in params], types))
    (l0, p0, t0), (l1, p1, t1) = results
    assert "GeluGrad" in t0 and "BiasGeluGrad" not in t0
    assert "BiasGeluGrad" in t1 and "GeluGrad" not in t1
    assert l0 == l1
    for a, b in zip(p0, p1):
        np.testing.assert_array_equal(a, b)
