"""Reshape-family ops as zero-copy views (the schema's ``view`` flag).

Eager: a view of a contiguous tensor shares its storage (writes through
either are seen by both), a non-contiguous input is copied. Graph mode: the
in-place pass never writes over storage another live view still reads, and
the memory planner keeps a buffer while any view of it is live.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_core._graph import passes
from dragon_core._graph.passes.inplace import inplace
from dragon_core._graph.passes.memory import memory

from .fixtures import graph
from .test_passes import annotations, plan_of, random_dag

F32 = "float32"
VIEW_OPS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")


def test_view_flag_in_schemas():
    for name in VIEW_OPS:
        assert dg._C.op(name).describe()["view"] is True, name
    for name in ("BroadcastTo", "Contiguous", "Add", "Cast"):
        assert dg._C.op(name).describe()["view"] is False, name
    # Transpose is a strided view (tests/graph/test_strided_views.py).
    assert dg._C.op("Transpose").describe()["view"] is True


CASES = [
    (lambda t: ops.reshape(t, shape=[6, 4]), lambda a: a.reshape(6, 4), (2, 3, 4)),
    (lambda t: ops.reshape(t, shape=[-1]), lambda a: a.reshape(-1), (2, 3, 4)),
    (lambda t: ops.reshape(t, shape=[]), lambda a: a.reshape(()), (1, 1)),
    (lambda t: ops.reshape(t, shape=[0, 5]), lambda a: a.reshape(0, 5), (5, 0)),
    (lambda t: ops.squeeze(t, axis=1), lambda a: a.squeeze(1), (3, 1, 2)),
    (lambda t: ops.unsqueeze(t, axis=0), lambda a: a[None], (3, 2)),
    (lambda t: ops.unsqueeze(t, axis=0), lambda a: a[None], ()),
    (lambda t: ops.flatten(t, start_axis=1), lambda a: a.reshape(a.shape[0], -1), (2, 3, 4)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "bool", "bfloat16"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_eager_view_values_and_shared_storage(case, dtype):
    fn, ref, shape = CASES[case]
    rng = np.random.default_rng(case)
    a = rng.standard_normal(shape)
    x = dg.tensor(a.astype(np.float32)).to(None, dtype=dtype) if dtype == "bfloat16" \
        else dg.tensor(a.astype(dtype))
    y = fn(x)
    expect = ref(x.to(None, dtype="float64").numpy() if dtype == "bfloat16"
                 else x.numpy())
    got = y.to(None, dtype="float64").numpy() if dtype == "bfloat16" else y.numpy()
    assert got.shape == expect.shape
    np.testing.assert_array_equal(got, expect)
    assert y.dtype == x.dtype
    if x.size and dtype != "bfloat16":
        # Zero copy: the two NumPy views point at the same bytes.
        assert np.shares_memory(x.numpy(), y.numpy())
        yn = y.numpy()
        yn.reshape(-1)[0] = 1 if dtype != "bool" else True
        assert x.numpy().reshape(-1)[0] == yn.reshape(-1)[0]


def test_writes_through_views_both_ways():
    x = dg.tensor(np.arange(12, dtype=np.float64))
    y = ops.reshape(x, shape=[3, 4])
    z = ops.unsqueeze(ops.flatten(y), axis=0)       # a view of a view
    x.numpy()[5] = -1.0
    assert y.numpy()[1, 1] == -1.0 and z.numpy()[0, 5] == -1.0
    z.numpy()[0, 11] = 42.0
    assert x.numpy()[11] == 42.0 and y.numpy()[2, 3] == 42.0
    # The views keep the storage alive after the base goes.
    del x
    np.testing.assert_array_equal(y.numpy().reshape(-1)[:5], [0, 1, 2, 3, 4])


def test_non_contiguous_input_is_copied():
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = dg.from_numpy(base.T)                        # strided view of base
    assert np.shares_memory(x.numpy(), base)      # from_numpy kept the strides
    y = ops.reshape(x, shape=[24])
    np.testing.assert_array_equal(y.numpy(), base.T.reshape(-1))
    y.numpy()[0] = 100.0
    assert base[0, 0] == 0.0                         # a copy, not a view


def test_view_of_read_only_memory_stays_read_only():
    buf = np.arange(6, dtype=np.float32).tobytes()
    x = dg.from_numpy(np.frombuffer(buf, dtype=np.float32))
    assert x.is_read_only
    y = ops.reshape(x, shape=[2, 3])
    assert y.is_read_only
    with pytest.raises(ValueError):
        y.numpy()[0, 0] = 1.0
    np.testing.assert_array_equal(ops.add(y, 1.0).numpy(), np.arange(6).reshape(2, 3) + 1)


def test_view_errors_name_the_op():
    x = dg.tensor(np.zeros((2, 3), np.float32))
    with pytest.raises(ValueError, match="Reshape"):
        ops.reshape(x, shape=[4, 2])
    with pytest.raises(ValueError, match="Squeeze"):
        ops.squeeze(x, axis=0)


def test_gradient_through_views_unchanged():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 3))
    x = dg.tensor(a)
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = ops.reshape(x, shape=[4, 3])
        loss = ops.sum(ops.mul(ops.mul(y, y), dg.tensor(w)))
    (g,) = tape.gradient(loss, [x])
    np.testing.assert_allclose(g.numpy(), (2 * a.reshape(4, 3) * w).reshape(3, 4), rtol=1e-12)
    # Finite differences on the composite.
    eps, fd = 1e-6, np.zeros_like(a)
    f = lambda v: float(np.sum(v.reshape(4, 3) ** 2 * w))  # noqa: E731
    for i in np.ndindex(a.shape):
        d = np.zeros_like(a)
        d[i] = eps
        fd[i] = (f(a + d) - f(a - d)) / (2 * eps)
    np.testing.assert_allclose(g.numpy(), fd, rtol=1e-6, atol=1e-8)


def test_torch_inplace_on_reshaped_tensor_reaches_the_base():
    torch = pytest.importorskip("dragon_core.vm.torch")
    a = torch.arange(6, dtype=torch.float32)
    b = a.reshape(2, 3)
    b.add_(10)
    np.testing.assert_array_equal(a.numpy(), np.arange(6) + 10)
    c = dg.ops.reshape(a._t, shape=[3, 2])         # the core op, not a NumPy view
    np.testing.assert_array_equal(c.numpy(), (np.arange(6) + 10).reshape(3, 2))


# ---------------------------------------------------------------- graph passes

X = [("x", F32, (2, 3))]


def test_inplace_refuses_a_view_whose_base_is_read_later():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Reshape", ["a"], ["r"], {"shape": [3, 2]}),
                   ("Relu", ["r"], ["b"], {}),                  # r dead, but a is read below
                   ("Reshape", ["b"], ["b2"], {"shape": [2, 3]}),
                   ("Add", ["a", "b2"], ["c"], {})],
              outputs=["c"])
    ann = annotations(inplace(g))
    assert "Relu_2" not in ann
    # Without the later read of a, the view may be overwritten in place.
    g2 = graph(inputs=X,
               ops=[("Exp", ["x"], ["a"], {}),
                    ("Reshape", ["a"], ["r"], {"shape": [3, 2]}),
                    ("Relu", ["r"], ["b"], {}),
                    ("Neg", ["b"], ["c"], {})],
               outputs=["c"])
    assert annotations(inplace(g2)) == {"Relu_2": 0, "Neg_3": 0}


def test_inplace_refuses_a_base_with_a_live_view():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Reshape", ["a"], ["r"], {"shape": [6]}),
                   ("Relu", ["a"], ["b"], {}),                  # last read of a; r lives on
                   ("Reshape", ["b"], ["b6"], {"shape": [6]}),
                   ("Add", ["r", "b6"], ["c"], {})],
              outputs=["c"])
    assert "Relu_2" not in annotations(inplace(g))


def test_inplace_refuses_views_of_inputs_and_state():
    g = graph(inputs=X, captured=[("w", F32, (2, 3))],
              ops=[("Reshape", ["x"], ["r"], {"shape": [6]}),
                   ("Relu", ["r"], ["b"], {}),
                   ("Reshape", ["w"], ["rw"], {"shape": [6]}),
                   ("Neg", ["rw"], ["c"], {}),
                   ("Add", ["b", "c"], ["d"], {})],
              outputs=["d"])
    ann = annotations(inplace(g))
    assert "Relu_1" not in ann and "Neg_3" not in ann
    assert ann == {"Add_4": 0}


def test_memory_keeps_a_buffer_while_a_view_is_live():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),                 # 0
                   ("Reshape", ["a"], ["r"], {"shape": [6]}),  # 1: r aliases a
                   ("Neg", ["x"], ["n"], {}),                  # 2: a is dead, r is not
                   ("Reshape", ["n"], ["n6"], {"shape": [6]}),
                   ("Add", ["r", "n6"], ["c"], {})],           # 4
              outputs=["c"])
    plan = plan_of(memory(g))
    assert plan["assign"]["a"] == plan["assign"]["r"]
    assert plan["assign"]["n"] == plan["assign"]["n6"]
    assert plan["assign"]["a"] != plan["assign"]["n"]
    check_view_plan(memory(g))


def test_memory_view_of_an_output_or_input_is_not_planned():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Reshape", ["a"], ["y"], {"shape": [6]}),   # y: a graph output
                   ("Reshape", ["x"], ["rx"], {"shape": [6]}),  # a view of an input
                   ("Neg", ["rx"], ["z"], {})],
              outputs=["y", "z"])
    assign = plan_of(memory(g))["assign"]
    assert "a" not in assign and "y" not in assign and "rx" not in assign


def random_view_dag(seed: int, n_ops: int = 30):
    """``random_dag`` with a Reshape after every third op."""
    g = random_dag(seed, n_ops)
    from dragon_core import proto as P

    new = P.GraphDef()
    new.CopyFrom(g)
    del new.op[:]
    infos = {v.name: v for v in g.value_info}
    rename = {}
    for k, op in enumerate(g.op):
        op2 = new.op.add()
        op2.CopyFrom(op)
        del op2.input[:]
        op2.input.extend(rename.get(n, n) for n in op.input)
        if k % 3 == 0 and len(op.output) == 1 and op.output[0] not in g.output:
            src = op.output[0]
            shape = [int(np.prod(infos[src].shape))]
            view = new.op.add(name=f"Reshape_v{k}", type="Reshape", input=[src],
                              output=[src + "_v"], plugin=dg._C.op("Reshape").describe()["plugin"])
            view.attr["shape"].ints.values.extend(shape)
            new.value_info.add(name=src + "_v", dtype=infos[src].dtype, shape=shape)
            back = new.op.add(name=f"Reshape_w{k}", type="Reshape", input=[src + "_v"],
                              output=[src + "_w"], plugin=view.plugin)
            back.attr["shape"].ints.values.extend(infos[src].shape)
            new.value_info.add(name=src + "_w", dtype=infos[src].dtype, shape=infos[src].shape)
            rename[src] = src + "_w"
    return new


def check_view_plan(g):
    """``check_plan`` that lets a view share its base's buffer; then checks
    that every view sits in its base's buffer and no other tensor in that
    buffer lives between the base's definition and the views' last use."""
    roots = passes.view_roots(g)
    stripped = type(g)()
    stripped.CopyFrom(g)
    plan = plan_of(g)
    assign = plan["assign"]
    span = {}
    for k, op in enumerate(g.op):
        for n in op.output:
            span[n] = [k, k]
        for n in op.input:
            if n in span:
                span[n][1] = k
    groups: dict = {}
    for n in assign:
        groups.setdefault(roots.get(n, n), []).append(n)
    for root, members in groups.items():
        bufs = {assign[m] for m in members}
        assert len(bufs) == 1, f"views of {root} in buffers {bufs}"
    # Collapse each alias group into one lifetime and check no overlaps.
    life = {}
    for root, members in groups.items():
        life[root] = (min(span[m][0] for m in members), max(span[m][1] for m in members),
                      assign[members[0]])
    inplace_pairs = {(roots.get(op.input[op.attr["_inplace_input"].i],
                                op.input[op.attr["_inplace_input"].i]),
                      roots.get(op.output[0], op.output[0]))
                     for op in g.op if "_inplace_input" in op.attr}
    items = sorted(life.items())
    for i, (r1, (s1, e1, b1)) in enumerate(items):
        for r2, (s2, e2, b2) in items[i + 1:]:
            if b1 != b2 or max(s1, s2) > min(e1, e2):
                continue
            linked = (r1, r2) in inplace_pairs or (r2, r1) in inplace_pairs
            assert linked and max(s1, s2) == min(e1, e2), \
                f"{r1} {(s1, e1)} and {r2} {(s2, e2)} share buffer {b1}"


@pytest.mark.parametrize("seed", range(8))
def test_memory_plan_valid_on_random_dags_with_views(seed):
    g = random_view_dag(seed)
    check_view_plan(memory(g))
    check_view_plan(memory(inplace(g)))


# ---------------------------------------------------------------- compiled graphs

@pytest.mark.parametrize("level", [0, 2, 3])
def test_compiled_views_with_reuse_match_numpy(level):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6)).astype(np.float32)

    @dg.function(opt_level=level)
    def f(x):
        h = ops.exp(x)                               # base
        r = ops.reshape(h, shape=[6, 4])             # view of it
        t = ops.relu(ops.neg(r))                     # candidates for in-place over r
        back = ops.reshape(t, shape=[4, 6])
        s = ops.add(h, back)                         # h read after the view's consumer
        u = ops.unsqueeze(ops.tanh(s), axis=0)
        return ops.mul(ops.squeeze(u, axis=0), 2.0), ops.flatten(h)

    def ref(v):
        h = np.exp(v.astype(np.float64))
        t = np.maximum(-h.reshape(6, 4), 0).reshape(4, 6)
        return 2 * np.tanh(h + t), h.reshape(-1)

    for _ in range(3):                               # reuse of the planned buffers
        got, flat = f(dg.tensor(a))
        want, want_flat = ref(a)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(flat.numpy(), want_flat, rtol=1e-6)


def test_compiled_view_of_an_input_does_not_write_the_input():
    a = np.arange(6, dtype=np.float32)

    @dg.function
    def f(x):
        r = ops.reshape(x, shape=[2, 3])
        return ops.relu(ops.neg(r))

    x = dg.tensor(a.copy())
    out = f(x)
    np.testing.assert_array_equal(x.numpy(), a)
    np.testing.assert_array_equal(out.numpy(), np.maximum(-a, 0).reshape(2, 3))


def test_view_flag_is_reserved_for_core_ops():
    """A plugin op that sets the core's view bits (1 << 5, and 1 << 6 for a
    strided view) does not get them: the registry clears them, so no plugin
    kernel is skipped by surprise."""
    import importlib

    co = importlib.import_module("dragon_core.custom_op")

    name = "PerfViewBitProbe"
    dg._C._define_py_op(name, "", "probe", "perf_probe_plugin",
                        [("x", co._ALL_DTYPES, 0)], [("y", co._ALL_DTYPES, 0)], [],
                        co._OP_NO_GRAD | (1 << 5) | (1 << 6),
                        co._shape_wrapper(name, lambda x: x, 1))
    try:
        assert dg._C.op(name).describe()["view"] is False
        assert dg._C.op(name).describe()["strided_view"] is False
    finally:
        dg._C._retire_py_op(name)
