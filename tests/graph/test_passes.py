"""Unit tests of the graph passes (prune, cse, constant_fold, inplace, memory)
on small hand-built GraphDefs (tests/graph/fixtures.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import dragon_core as dg
from dragon_core._graph import passes
from dragon_core._graph.passes.constant_fold import constant_fold
from dragon_core._graph.passes.cse import cse
from dragon_core._graph.passes.inplace import inplace
from dragon_core._graph.passes.memory import memory, tensor_bytes
from dragon_core._graph.passes.prune import prune

from .fixtures import constant_array, graph, op_summary

F32 = "float32"
X = [("x", F32, (2, 3))]


def names(field) -> list:
    return [v.name for v in field]


def info(g, name):
    found = [v for v in g.value_info if v.name == name]
    assert len(found) == 1, f"{name}: {len(found)} value_info entries"
    return dg.as_dtype(found[0].dtype).name, tuple(found[0].shape)


def annotations(g) -> dict:
    return {op.name: op.attr["_inplace_input"].i for op in g.op if "_inplace_input" in op.attr}


def plan_of(g) -> dict:
    return json.loads(g.metadata["memory_plan"])


# ---------------------------------------------------------------- registry

def test_registry_levels_and_order():
    plugin = {gp.name for gp in passes.plugin_passes()}   # e.g. mkldnn's nchw16c

    def at(level):
        return [n for n, _ in passes.passes_for(level)
                if n not in ("fusion", "pattern_fusion", "cast_fold", "cast_hoist", "gelu_fusion",
                             "linear_epilogue", "sum_cast", "matmul_transpose", "attention_fusion",
                             "loss_fusion")
                and n not in plugin]
    assert at(0) == []
    # ddp_buckets (a no-op on graphs without DDP all-reduce ops) runs from O1.
    assert at(1) == ["prune", "cse", "constant_fold", "ddp_buckets"]
    assert at(2) == ["prune", "cse", "constant_fold", "relu_mask", "inplace", "ddp_buckets",
                     "state_inplace"]
    assert at(3) == ["prune", "cse", "constant_fold", "relu_mask", "inplace", "ddp_buckets",
                     "state_inplace", "memory"]
    assert [n for n, _ in passes.passes_for(3) if n not in plugin] == [
        "prune", "cse", "cast_hoist", "cast_fold", "matmul_transpose", "gelu_fusion",
        "linear_epilogue", "sum_cast", "constant_fold", "loss_fusion", "relu_mask", "pattern_fusion",
        "attention_fusion",
        "inplace", "fusion", "ddp_buckets", "state_inplace", "memory"]
    # A plugin pass runs right after the built-in pass it names.
    order = [n for n, _ in passes.passes_for(3)]
    for gp in passes.plugin_passes():
        before = [n for n in order[:order.index(gp.name)] if n not in plugin]
        assert before[-1] == gp.after, (gp, order)


# ---------------------------------------------------------------- purity

def _rich_graph():
    """Every pass has something to do here."""
    return graph(
        inputs=X, captured=[("w", F32, (2, 3))],
        constants=[("k", np.full(3, 2, np.float32)), ("unused", np.ones(2, np.float32))],
        ops=[("Mul", ["k", "k"], ["k2"], {}),
             ("Add", ["x", "k2"], ["y"], {}),
             ("Add", ["x", "k2"], ["y2"], {}),
             ("Relu", ["y"], ["r"], {}),
             ("Mul", ["r", "y2"], ["m"], {}),
             ("Neg", ["x"], ["dead"], {}),
             ("Exp", ["m"], ["e"], {}),
             ("Add", ["e", "w"], ["out"], {})],
        outputs=["out"], state=[("w", "e")])


@pytest.mark.parametrize("fn", [prune, cse, constant_fold, inplace, memory],
                         ids=lambda f: f.__name__)
def test_pass_is_pure(fn):
    g = _rich_graph()
    before = g.SerializeToString(deterministic=True)
    out = fn(g)
    assert g.SerializeToString(deterministic=True) == before
    assert out is not g
    assert out.SerializeToString(deterministic=True) != before  # it did something


def _run_without_fusion(graph, level):
    """Every pass of ``level`` except fusion (tested in test_fusion.py)."""
    for name, fn in passes.passes_for(level):
        if name != "fusion":
            graph = fn(graph)
    return graph


def test_all_levels_on_rich_graph():
    g = _run_without_fusion(_rich_graph(), 3)
    assert op_summary(g) == [("Add", ["x", "k2"], ["y"]),
                             ("Relu", ["y"], ["r"]),
                             ("Mul", ["r", "y"], ["m"]),
                             ("Exp", ["m"], ["e"]),
                             ("Add", ["e", "w"], ["out"])]
    assert names(g.constant) == ["k2"]
    # y is read again by Mul, so Relu stays out of place; Exp may write its
    # output (a state update) over m, so r, m, e are not planned.
    assert annotations(g) == {"Mul_4": 0, "Exp_6": 0}
    assert plan_of(g) == {"buffers": [64], "assign": {"y": 0}}


# ---------------------------------------------------------------- prune

def test_prune_removes_dead_ops_values_and_constants():
    g = graph(inputs=X, captured=[("unused_w", F32, (1,))],
              constants=[("c", np.ones(3, np.float32)), ("d", np.ones(3, np.float32))],
              ops=[("Neg", ["x"], ["a"], {}),
                   ("Add", ["a", "d"], ["b"], {}),      # dead, last reader of d
                   ("Add", ["x", "c"], ["y"], {}),
                   ("Exp", ["b"], ["e"], {})],          # dead
              outputs=["y"])
    out = prune(g)
    assert op_summary(out) == [("Add", ["x", "c"], ["y"])]
    assert names(out.constant) == ["c"]
    assert names(out.value_info) == ["x", "unused_w", "c", "y"]
    assert list(out.input) == ["x"] and list(out.captured) == ["unused_w"]


def test_prune_keeps_state_updates_and_multi_output_producers():
    g = graph(inputs=[("x", F32, (2, 4))], captured=[("w", F32, (2, 1))],
              ops=[("Split", ["x"], ["s0", "s1"], {"sizes": [1, 3], "axis": 1}),
                   ("Exp", ["s0"], ["e"], {}),         # only a state update needs it
                   ("Relu", ["s1"], ["r"], {})],       # dead
              outputs=[], state=[("w", "e")])
    out = prune(g)
    assert op_summary(out) == [("Split", ["x"], ["s0", "s1"]), ("Exp", ["s0"], ["e"])]
    assert "s1" in names(out.value_info) and "r" not in names(out.value_info)


def test_prune_drops_unused_stateful_op_but_keeps_used_one():
    g = graph(ops=[("RandomUniform", [], ["u"], {"shape": [2], "seed": 1}),
                   ("RandomUniform", [], ["v"], {"shape": [2], "seed": 2})],
              outputs=["v"])
    assert op_summary(prune(g)) == [("RandomUniform", [], ["v"])]


# ---------------------------------------------------------------- cse

def test_cse_merges_duplicates_transitively():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Exp", ["x"], ["b"], {}),
                   ("Neg", ["a"], ["c"], {}),
                   ("Neg", ["b"], ["d"], {}),        # same as c once b -> a
                   ("Add", ["c", "d"], ["y"], {})],
              outputs=["y"])
    out = cse(g)
    assert op_summary(out) == [("Exp", ["x"], ["a"]), ("Neg", ["a"], ["c"]),
                               ("Add", ["c", "c"], ["y"])]
    assert [op.name for op in out.op] == ["Exp_0", "Neg_2", "Add_4"]
    assert "b" not in names(out.value_info) and "d" not in names(out.value_info)


def test_cse_compares_attrs_and_input_order():
    g = graph(inputs=X + [("z", F32, (2, 3))],
              ops=[("Clip", ["x"], ["a"], {"max": 1.0}),
                   ("Clip", ["x"], ["b"], {"max": 2.0}),
                   ("Sum", ["x"], ["s1"], {}),                # axes unset: all axes
                   ("Sum", ["x"], ["s2"], {"axes": []}),      # no axis
                   ("Sub", ["x", "z"], ["d1"], {}),
                   ("Sub", ["z", "x"], ["d2"], {}),
                   ("Clip", ["x"], ["c"], {"max": 1.0})],     # duplicate of a
              outputs=["a", "b", "s1", "s2", "d1", "d2", "c"])
    out = cse(g)
    assert [op.name for op in out.op] == ["Clip_0", "Clip_1", "Sum_2", "Sum_3", "Sub_4", "Sub_5"]
    assert list(out.output) == ["a", "b", "s1", "s2", "d1", "d2", "a"]


def test_cse_never_merges_stateful_ops():
    same = {"shape": [2, 3], "seed": 7}
    g = graph(ops=[("RandomUniform", [], ["u"], same),
                   ("RandomUniform", [], ["v"], same),
                   ("Add", ["u", "v"], ["y"], {})],
              outputs=["y"])
    assert op_summary(cse(g)) == op_summary(g)


def test_cse_renames_graph_outputs_and_state_updates():
    g = graph(inputs=X, captured=[("w", F32, (2, 3))],
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Exp", ["x"], ["b"], {}),
                   ("Exp", ["x"], ["c"], {})],
              outputs=["a", "b"], state=[("w", "c")])
    out = cse(g)
    assert op_summary(out) == [("Exp", ["x"], ["a"])]
    assert list(out.output) == ["a", "a"]
    assert list(out.state_target) == ["w"] and list(out.state_update) == ["a"]
    assert list(out.input) == ["x"] and list(out.captured) == ["w"]


# ---------------------------------------------------------------- constant_fold

def test_constant_fold_chain_values_and_value_info():
    c1 = np.arange(6, dtype=np.float32).reshape(2, 3)
    c2 = np.array([0.5, -1.0, 2.0], np.float32)
    g = graph(inputs=X, constants=[("c1", c1), ("c2", c2)],
              ops=[("Add", ["c1", "c2"], ["s"], {}),
                   ("Mul", ["s", "s"], ["m"], {}),
                   ("Add", ["x", "m"], ["y"], {})],
              outputs=["y"])
    out = constant_fold(g)
    assert op_summary(out) == [("Add", ["x", "m"], ["y"])]
    assert names(out.constant) == ["m"]
    np.testing.assert_allclose(constant_array(out, "m"), (c1 + c2) ** 2, rtol=1e-6)
    assert info(out, "m") == (F32, (2, 3))
    assert not {"c1", "c2", "s"} & set(names(out.value_info))


def test_constant_fold_variadic_multi_output_and_cast():
    c = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    g = graph(inputs=[("x", "int32", (4, 1))], constants=[("c", c)],
              ops=[("Concat", [["c", "c"]], ["cc"], {"axis": 0}),
                   ("Split", ["cc"], ["p", "q"], {"sizes": [1, 2], "axis": 1}),
                   ("Cast", ["p"], ["pi"], {"dtype": "int32"}),
                   ("Add", ["x", "pi"], ["y"], {}),
                   ("Exp", ["q"], ["e"], {})],
              outputs=["y", "e"])
    out = constant_fold(g)
    assert op_summary(out) == [("Add", ["x", "pi"], ["y"]), ("Exp", ["q"], ["e"])]
    assert sorted(names(out.constant)) == ["pi", "q"]
    cc = np.concatenate([c, c], axis=0)
    np.testing.assert_array_equal(constant_array(out, "pi"), cc[:, :1].astype(np.int32))
    np.testing.assert_array_equal(constant_array(out, "q"), cc[:, 1:])
    assert info(out, "pi") == ("int32", (4, 1)) and info(out, "q") == (F32, (4, 2))


def test_constant_fold_skips_stateful_large_and_output_ops():
    g = graph(inputs=X,
              ops=[("Fill", [], ["f"], {"shape": [2, 3], "value": 1.5}),
                   ("RandomUniform", [], ["u"], {"shape": [2, 3], "seed": 3}),
                   ("Fill", [], ["big"], {"shape": [600, 600]}),     # 1.4 MB > 1 MiB
                   ("Add", ["f", "u"], ["a"], {}),
                   ("Exp", ["f"], ["ef"], {}),                       # a graph output
                   ("Sum", ["big"], ["sb"], {}),
                   ("Add", ["a", "x"], ["y"], {}),
                   ("Add", ["y", "sb"], ["z"], {})],
              outputs=["z", "ef"])
    out = constant_fold(g)
    assert [op.type for op in out.op] == ["RandomUniform", "Fill", "Add", "Exp", "Sum",
                                          "Add", "Add"]
    assert names(out.constant) == ["f"]
    np.testing.assert_array_equal(constant_array(out, "f"), np.full((2, 3), 1.5, np.float32))


def test_constant_fold_maps_a_big_constant_to_one_of_its_size():
    """An op reading a constant above the 1 MiB limit folds when its result
    is no larger (a frozen weight times a per-channel scale): the graph does
    not grow, the input constant goes, and the value is exact. A result
    larger than its inputs (and the limit) still does not fold."""
    w = np.random.default_rng(0).standard_normal((512, 600)).astype(np.float32)  # 1.2 MB
    s = np.linspace(0.5, 2.0, 512).astype(np.float32).reshape(512, 1)
    g = graph(inputs=X, constants=[("w", w), ("s", s)],
              ops=[("Mul", ["w", "s"], ["ws"], {}),
                   ("Concat", [["ws", "ws"]], ["twice"], {"axis": 0}),   # 2.4 MB
                   ("Sum", ["twice"], ["t"], {}),
                   ("Add", ["x", "t"], ["y"], {})],
              outputs=["y"])
    out = constant_fold(g)
    assert [op.type for op in out.op] == ["Concat", "Sum", "Add"]
    assert names(out.constant) == ["ws"]
    np.testing.assert_array_equal(constant_array(out, "ws"), w * s)


# ---------------------------------------------------------------- inplace

def test_inplace_chain_refuses_graph_inputs():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Relu", ["a"], ["b"], {}),
                   ("Neg", ["b"], ["c"], {})],
              outputs=["c"])
    out = inplace(g)
    assert annotations(out) == {"Relu_1": 0, "Neg_2": 0}   # not Exp: x is an input
    assert op_summary(out) == op_summary(g)


def test_inplace_refuses_tensors_read_again():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Relu", ["a"], ["b"], {}),       # a is read again by Add
                   ("Add", ["a", "b"], ["c"], {}),   # last read of a: in place on 0
                   ("Exp", ["c"], ["d"], {}),
                   ("Add", ["d", "d"], ["e"], {})],  # d read twice by this op
              outputs=["e"])
    assert annotations(inplace(g)) == {"Add_2": 0, "Exp_3": 0}


def test_inplace_needs_equal_shape_and_dtype():
    g = graph(inputs=[("v", F32, (3,))] + X,
              ops=[("Exp", ["v"], ["ev"], {}),
                   ("Exp", ["x"], ["ex"], {}),
                   ("Add", ["ev", "ex"], ["s"], {}),   # ev broadcasts: only input 1
                   ("LogicalNot", ["s"], ["n"], {}),   # bool output
                   ("Transpose", ["s"], ["t"], {})],   # no in-place bit
              outputs=["n", "t"])
    assert annotations(inplace(g)) == {"Add_2": 1}


def test_inplace_refuses_constants_captured_outputs_and_state():
    g = graph(inputs=X, captured=[("w", F32, (2, 3))],
              constants=[("c", np.ones((2, 3), np.float32))],
              ops=[("Relu", ["c"], ["rc"], {}),
                   ("Relu", ["w"], ["rw"], {}),
                   ("Exp", ["x"], ["o"], {}),
                   ("Relu", ["o"], ["ro"], {}),     # o is a graph output
                   ("Exp", ["x"], ["s"], {}),
                   ("Relu", ["s"], ["rs"], {}),     # s is a state update
                   ("Exp", ["x"], ["t"], {}),
                   ("Relu", ["t"], ["rt"], {})],    # the control: allowed
              outputs=["rc", "rw", "o", "ro", "rs", "rt"], state=[("w", "s")])
    assert annotations(inplace(g)) == {"Relu_7": 0}


def test_inplace_recomputes_existing_annotations():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {"_inplace_input": 0}),   # wrong: x is an input
                   ("Relu", ["a"], ["b"], {})],
              outputs=["b"])
    out = inplace(g)
    assert annotations(out) == {"Relu_1": 0}
    assert inplace(out).SerializeToString() == out.SerializeToString()


# ---------------------------------------------------------------- memory

def _chain(n, shape=(2, 3)):
    ops, prev = [], "x"
    for k in range(n):
        ops.append(("Exp" if k % 2 == 0 else "Neg", [prev], [f"t{k}"], {}))
        prev = f"t{k}"
    return graph(inputs=[("x", F32, shape)], ops=ops, outputs=[prev])


def test_memory_non_overlapping_tensors_share_a_buffer():
    out = memory(_chain(4))         # t0 [0,1], t1 [1,2], t2 [2,3], t3 output
    assert plan_of(out) == {"buffers": [64, 64], "assign": {"t0": 0, "t1": 1, "t2": 0}}


def test_memory_overlapping_tensors_do_not_share():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Neg", ["x"], ["b"], {}),
                   ("Add", ["a", "b"], ["c"], {}),
                   ("Exp", ["c"], ["d"], {})],
              outputs=["d"])
    plan = plan_of(memory(g))
    assert plan["assign"]["a"] != plan["assign"]["b"]
    assert plan["assign"]["c"] != plan["assign"]["a"] and plan["assign"]["c"] != plan["assign"]["b"]
    assert len(plan["buffers"]) == 3


def test_memory_planned_bytes_below_naive_sum_on_a_chain():
    out = memory(_chain(8, shape=(16, 16)))     # 1 KiB tensors
    plan = plan_of(out)
    naive = sum(tensor_bytes(v) for v in out.value_info if v.name in plan["assign"])
    assert len(plan["assign"]) == 7 and naive == 7 * 1024
    assert sum(plan["buffers"]) == 2 * 1024 < naive
    assert out.metadata["memory_note"] == ("2048 bytes in 2 buffers for 7 tensors "
                                           "(without reuse: 7168 bytes)")


def test_memory_best_fit_and_growth():
    g = graph(inputs=[("x", F32, (64,))],
              ops=[("Exp", ["x"], ["big"], {}),                          # 256 B
                   ("Sum", ["big"], ["small"], {"axes": [0], "keepdims": True}),  # 64 B
                   ("Concat", [["x", "x"]], ["huge"], {}),               # 512 B
                   ("Add", ["huge", "small"], ["y"], {})],
              outputs=["y"])
    plan = plan_of(memory(g))
    # big dies at op 1; huge (op 2) grows big's buffer rather than adding one.
    assert plan == {"buffers": [512, 64], "assign": {"big": 0, "small": 1, "huge": 0}}


def test_memory_never_assigns_io_state_or_constants():
    g = graph(inputs=X, captured=[("w", F32, (2, 3))],
              constants=[("c", np.ones((2, 3), np.float32))],
              ops=[("Add", ["x", "c"], ["a"], {}),
                   ("Add", ["a", "w"], ["s"], {}),
                   ("Exp", ["s"], ["y"], {})],
              outputs=["y", "x"], state=[("w", "s")])
    assert plan_of(memory(g)) == {"buffers": [64], "assign": {"a": 0}}


def test_memory_inplace_groups_share_one_buffer():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Relu", ["a"], ["b"], {"_inplace_input": 0}),
                   ("Neg", ["b"], ["c"], {"_inplace_input": 0}),
                   ("Exp", ["x"], ["d"], {}),              # a..c still live: new buffer
                   ("Add", ["c", "d"], ["e"], {}),          # both read here: new buffer
                   ("Exp", ["e"], ["f"], {}),
                   ("Relu", ["f"], ["y"], {"_inplace_input": 0})],   # y: a graph output
              outputs=["y"])
    plan = plan_of(memory(g))
    assert plan == {"buffers": [64, 64, 64], "assign": {"a": 0, "b": 0, "c": 0, "d": 1, "e": 2}}
    assert "f" not in plan["assign"]            # its storage leaves with y


def check_plan(g):
    """Brute-force validity of ``g``'s memory plan; raises AssertionError."""
    plan = plan_of(g)
    assign, buffers = plan["assign"], plan["buffers"]
    produced = {o for op in g.op for o in op.output}
    pinned = set(g.output) | set(g.state_update)
    assert set(assign) <= produced - pinned
    span = {}
    for k, op in enumerate(g.op):
        for n in op.output:
            span[n] = [k, k]
        for n in op.input:
            if n in span:
                span[n][1] = k
    inplace_pairs = {(op.input[op.attr["_inplace_input"].i], op.output[0])
                     for op in g.op if "_inplace_input" in op.attr}
    infos = {v.name: v for v in g.value_info}
    for n, b in assign.items():
        assert 0 <= b < len(buffers)
        raw = int(np.prod(infos[n].shape)) * dg.as_dtype(infos[n].dtype).itemsize
        assert buffers[b] >= raw, f"{n}: {raw} bytes in buffer {b} of {buffers[b]}"
    items = sorted(assign.items())
    for i, (n1, b1) in enumerate(items):
        for n2, b2 in items[i + 1:]:
            if b1 != b2:
                continue
            (s1, e1), (s2, e2) = span[n1], span[n2]
            if max(s1, s2) > min(e1, e2):
                continue
            # Only an in-place pair may touch, at the op that links them.
            linked = (n1, n2) in inplace_pairs or (n2, n1) in inplace_pairs
            assert linked and max(s1, s2) == min(e1, e2), \
                f"{n1} {span[n1]} and {n2} {span[n2]} share buffer {b1}"


def random_dag(seed: int, n_ops: int = 30):
    """A random DAG of element-wise, reduction and join ops over a few shapes."""
    rng = np.random.default_rng(seed)
    pool = [("x", (4, 8)), ("z", (2, 8))]
    ops = []
    for k in range(n_ops):
        name = f"t{k}"
        kind = rng.integers(4)
        a, sa = pool[rng.integers(len(pool))]
        if kind == 1:
            same = [p for p in pool if p[1] == sa]
            b, _ = same[rng.integers(len(same))]
            ops.append(("Add" if a != b else "Mul", [a, b], [name], {}))
            shape = sa
        elif kind == 2 and sa[0] < 64:
            ops.append(("Concat", [[a, a]], [name], {"axis": 0}))
            shape = (2 * sa[0], sa[1])
        elif kind == 3 and sa[0] > 1 and sa[0] % 2 == 0:
            ops.append(("Split", [a], [name, name + "b"], {"sizes": [sa[0] // 2] * 2}))
            pool.append((name + "b", (sa[0] // 2, sa[1])))
            shape = (sa[0] // 2, sa[1])
        else:
            ops.append((["Exp", "Neg", "Relu", "Tanh"][rng.integers(4)], [a], [name], {}))
            shape = sa
        pool.append((name, shape))
    produced = [p[0] for p in pool[2:]]
    outputs = list(rng.choice(produced, size=3, replace=False))
    return graph(inputs=[("x", F32, (4, 8)), ("z", F32, (2, 8))], ops=ops, outputs=outputs)


@pytest.mark.parametrize("seed", range(8))
def test_memory_plan_valid_on_random_dags(seed):
    g = random_dag(seed)
    plain = memory(g)
    check_plan(plain)
    # Without in-place, every op output but the graph outputs is planned.
    expected = {o for op in g.op for o in op.output} - set(g.output)
    assert set(plan_of(plain)["assign"]) == expected
    check_plan(memory(inplace(g)))


def test_check_plan_catches_a_bad_plan():
    out = memory(_chain(4))
    plan = plan_of(out)
    plan["assign"]["t1"] = plan["assign"]["t0"]       # t0 [0,1] and t1 [1,2] overlap
    out.metadata["memory_plan"] = json.dumps(plan)
    with pytest.raises(AssertionError, match="share buffer"):
        check_plan(out)
    plan = plan_of(memory(_chain(4)))
    plan["buffers"] = [8, 8]
    out.metadata["memory_plan"] = json.dumps(plan)
    with pytest.raises(AssertionError, match="bytes in buffer"):
        check_plan(out)


# ------------------------------------------------------- plugin passes

class _PassDeclarer:
    """A fake plugin declaring graph passes through the pluggy hook."""

    def __init__(self, passes_):
        self.passes = passes_

    @dg.plugins.hookimpl
    def dragon_graph_passes(self, core):
        return self.passes


def _with_plugin(passes_, fn):
    declarer = _PassDeclarer(passes_)
    dg.plugins._pm.register(declarer, name="test_pass_declarer")
    try:
        return fn()
    finally:
        dg.plugins._pm.unregister(declarer)


def test_a_plugin_pass_runs_after_its_builtin_and_can_be_disabled():
    seen = []

    def tag(graph):
        seen.append(graph.metadata.get("passes", ""))
        new = type(graph)()
        new.CopyFrom(graph)
        new.metadata["tagged"] = "yes"
        return new

    gp = dg.GraphPass("test_tag", tag, after="cse")
    assert "test_tag" in repr(gp)

    def check():
        order = [n for n, _ in passes.passes_for(3)]
        assert order[order.index("cse") + 1] == "test_tag"
        assert "test_tag" not in [n for n, _ in passes.passes_for(0)]
        f = dg.function(lambda x: x * 2.0 + 1.0)
        x = dg.tensor(np.ones(3))
        np.testing.assert_array_equal(f(x).numpy(), [3.0, 3.0, 3.0])
        g = f.get_graph(x)
        assert g.metadata["tagged"] == "yes" and "test_tag" in g.metadata["passes"]
        off = dg.function(lambda x: x * 2.0 + 1.0, disable_passes="test_tag")
        assert "tagged" not in off.get_graph(x).metadata
    _with_plugin([gp], check)
    assert seen, "the pass ran"
    with pytest.raises(ValueError, match="test_tag"):   # gone with its plugin
        dg.function(lambda x: x + 1.0, disable_passes="test_tag")(dg.tensor(np.ones(2)))


def test_bad_plugin_pass_declarations_raise():
    with pytest.raises(ValueError, match="not a built-in pass"):
        dg.GraphPass("x", lambda g: g, after="nowhere")
    with pytest.raises(ValueError, match="level"):
        dg.GraphPass("x", lambda g: g, after="cse", level=4)
    # A plugin declaring a bad pass is marked broken and left out (it never
    # breaks graph mode); tests/plugins/test_hooks.py covers the details.
    def names():
        return [gp.name for gp in passes.plugin_passes()]
    healthy = names()                     # the installed plugins' own passes
    with pytest.warns(dg.plugins.PluginWarning, match="not a dragon_core.GraphPass"):
        assert _with_plugin([lambda g: g], names) == healthy
    with pytest.warns(dg.plugins.PluginWarning, match="reuses the name"):
        assert _with_plugin([dg.GraphPass("cse", lambda g: g, after="prune")],
                            names) == healthy
