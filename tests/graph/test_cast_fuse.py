"""FusedElementwiseCast and the `cast_fuse` pass (issue 21; docs/graph.md,
"Cast fusion").

The op runs a FusedElementwise program in float32 / float64 and stores its
result narrowed to bfloat16 / float16. Checked: against a float64 NumPy
interpreter of the program, rounded to the 16-bit dtype (the only rounding
beyond the program's own), and bit for bit against Cast(FusedElementwise(...))
on every program and shape of test_fusion (broadcasting, 0-d, empty, the
parallel path), specials (NaN, inf, ties, overflow to inf, subnormals) and
thread counts; bad inputs raise naming the problem. The pass on hand-built
graphs (where it fires, where it must not), and on the bfloat16-autocast
compiled encoder training step of bench/bench_workloads.py, bit for bit
against the same step with the pass disabled.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import errors, ops
from dragon_core._graph.passes.cast_fuse import OP, cast_fuse
from dragon_core._graph.passes.fusion import ANNOTATION, BINARY, GELU, fusion

try:
    from .fixtures import graph, op_summary
    from .test_fusion import PROGRAMS, SHAPES, np_reference, run_graph
except ImportError:  # run as a script
    from fixtures import graph, op_summary
    from test_fusion import PROGRAMS, SHAPES, np_reference, run_graph

WIDE = ("float32", "float64")
NARROW = ("bfloat16", "float16")
NP = {dt: dg.as_dtype(dt).numpy for dt in NARROW}
ADD, MUL = BINARY["Add"], BINARY["Mul"]


def _bits(a) -> np.ndarray:
    return np.asarray(a).view(np.uint16)


def _cases():
    for pid, gens, program, consts, result, tol in PROGRAMS:
        for wide in WIDE:
            for to in NARROW:
                for shapes in SHAPES[len(gens)]:
                    yield pytest.param(pid, gens, program, consts, result, tol, wide, to, shapes,
                                       id=f"{pid}-{wide}-{to}-{'x'.join(map(str, shapes))}")


def _inputs(pid, gens, dt, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((pid, dt, shapes)).encode()))
    return [g(rng, dt, s) for g, s in zip(gens, shapes)]


def fused_cast(xs, program, consts, result, to):
    return ops.fused_elementwise_cast([dg.tensor(x) for x in xs], program, to,
                                      list(consts), result)


def test_cpu_eigen_provides_the_kernel():
    kernels = [k for k in dg._C.kernels(OP) if k["device"] == "cpu"]
    assert kernels and kernels[0]["plugin"] == "cpu_eigen"
    dtypes = {d.strip() for k in kernels for d in k["dtypes"].split(",")}
    assert dtypes == {"float32", "float64"}


def test_schema():
    assert OP == "FusedElementwiseCast"
    desc = dg._C.op("FusedElementwiseCast").describe()
    assert desc["no_grad"] and not desc["same_dtype"] and not desc["stateful"]
    assert dg.infer_shape(OP, [((3, 1), "float32"), ((4,), "float32")], program=[ADD, 2, 0, 1],
                          dtype="bfloat16") == [((3, 4), "bfloat16")]


@pytest.mark.parametrize("pid,gens,program,consts,result,tol,wide,to,shapes", list(_cases()))
def test_equals_cast_of_fused_bitwise_and_matches_numpy(pid, gens, program, consts, result,
                                                         tol, wide, to, shapes):
    xs = _inputs(pid, gens, wide, shapes)
    got = fused_cast(xs, program, consts, result, to)
    assert got.dtype == dg.as_dtype(to)
    want_shape = np.broadcast_shapes(*[np.shape(x) for x in xs])
    assert tuple(got.shape) == want_shape
    # Bit for bit the two ops it replaces.
    unfused = ops.cast(ops.fused_elementwise([dg.tensor(x) for x in xs], program,
                                             list(consts), result), to)
    np.testing.assert_array_equal(_bits(got), _bits(unfused))
    # Against float64 NumPy: the program's own error (tol ulps of the wide
    # dtype) plus one rounding to the 16-bit dtype (at most half an ulp,
    # relative: 2^-9 for bfloat16, 2^-12 for float16; checked with 2x).
    with np.errstate(all="ignore"):
        ref = np_reference([x.astype(np.float64) for x in xs], program, consts, result)
    # The program's error is absolute at the scale of its operands (up to ~4
    # here: tanh(a b) + 0.5 may cancel); float16's subnormals are 2^-24 apart.
    rel = {"bfloat16": 2.0 ** -8, "float16": 2.0 ** -11}[to]
    atol = 8 * tol * np.finfo(wide).eps + (2.0 ** -24 if to == "float16" else 0.0)
    out = np.asarray(got).astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=rel, atol=atol)


@pytest.mark.parametrize("to", NARROW)
def test_specials_round_as_cast(to):
    """NaN, infinities, ties to even, overflow to inf, subnormals, -0."""
    f32 = np.float32
    ties = np.array([1 + 2.0 ** -8, 1 + 3 * 2.0 ** -8, 1 + 2.0 ** -11, 1 + 3 * 2.0 ** -11], f32)
    x = np.concatenate([ties, -ties, np.array(
        [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 3.4e38, -3.4e38, 65520.0, 70000.0,
         1e-40, -1e-40, 1e-8, 5.96e-8, 2.98e-8, 1e-45], f32)])
    x = np.concatenate([x, np.random.default_rng(3).standard_normal(3000).astype(f32) * 100])
    zero = np.zeros((), f32)
    got = fused_cast([x, zero], [ADD, 2, 0, 1], [], -1, to)
    want = ops.cast(dg.tensor(x + zero), to)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    # and from float64 (Cast's round-to-odd path: one rounding)
    x64 = x.astype(np.float64) * (1 + 2.0 ** -30)
    got = fused_cast([x64], [0, 1, 0, -1, 0, 1, 1, -1], [], -1, to)   # -(-x)
    np.testing.assert_array_equal(_bits(got), _bits(ops.cast(dg.tensor(x64), to)))


_HASH_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
from dragon_core._graph.passes.fusion import BINARY, GELU
rng = np.random.default_rng(5)
h = hashlib.sha256()
for rows, cols in [(512, 1030), (3, 7), (1, 70000)]:
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    b = rng.standard_normal(cols).astype(np.float32)
    program = [BINARY["Add"], 2, 0, 1, GELU["none"], 2, 2, -1]
    for to in ("bfloat16", "float16"):
        xs = [dg.tensor(x), dg.tensor(b)]
        y = np.asarray(dg.ops.fused_elementwise_cast(xs, program, to))
        want = np.asarray(dg.ops.cast(dg.ops.fused_elementwise(xs, program), to))
        assert y.tobytes() == want.tobytes(), (rows, cols, to)
        h.update(y.tobytes())
print(h.hexdigest())
"""


def _hash(env_extra):
    env = dict(os.environ, **env_extra)
    out = subprocess.run([sys.executable, "-c", _HASH_SCRIPT], env=env,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_same_bits_for_any_thread_count():
    hashes = {t: _hash({"OMP_NUM_THREADS": str(t), "DRAGON_NUM_THREADS": str(t)})
              for t in (1, 2, 3)}
    assert len(set(hashes.values())) == 1, hashes


@pytest.mark.parametrize("isa", ["base", "v3"])
def test_equals_the_unfused_pair_in_every_build(isa):
    """Each instruction-set build (the float table's GELU, the Cast's
    bfloat16 loop) gives Cast(FusedElementwise) bit for bit (the script
    asserts it); builds may differ from each other where the float table's
    builds do (GELU's erf)."""
    assert _hash({"DRAGON_CPU_EIGEN_ISA": isa})


@pytest.mark.parametrize("attrs,inputs,match", [
    ({"program": [ADD, 2, 0, 1], "dtype": "int32"}, [((3,), "float32")] * 2, "dtype"),
    ({"program": [ADD, 2, 0, 1], "dtype": "float32"}, [((3,), "float32")] * 2, "dtype"),
    ({"program": [ADD, 2, 0, 1], "dtype": "bfloat16"}, [((3,), "bfloat16")] * 2, "bfloat16"),
    ({"program": [ADD, 2, 0, 1], "dtype": "bfloat16"},
     [((3,), "float32"), ((3,), "float64")], "input 1 is float64"),
    ({"program": [ADD, 2, 0, 1], "dtype": "float16"},
     [((2, 3), "float32"), ((4,), "float32")], "cannot be broadcast"),
    ({"program": [99, 2, 0, 1], "dtype": "float16"}, [((3,), "float32")] * 2,
     "unknown opcode 99"),
    ({"program": [], "dtype": "float16"}, [], "at least one input"),
])
def test_bad_inputs_raise_invalid_argument(attrs, inputs, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        dg.infer_shape(OP, inputs, **attrs)


def test_bad_program_raises_when_run():
    x = dg.tensor(np.ones(3, np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="unknown opcode 77"):
        ops.fused_elementwise_cast([x], [12, 1, 0, -1, 77, 1, 1, -1], "bfloat16")


# ------------------------------------------------------------------- pass

F32, BF16 = "float32", "bfloat16"


def _feeds(g, seed=0):
    rng = np.random.default_rng(seed)
    infos = {v.name: v for v in g.value_info}
    return {n: rng.uniform(-3, 3, tuple(infos[n].shape)).astype(
        dg.as_dtype(infos[n].dtype).numpy) for n in g.input}


def _same_outputs(g, h):
    feeds = _feeds(g)
    for a, b in zip(run_graph(h, feeds), run_graph(g, feeds)):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def _bias_add_cast(to=BF16, **extra):
    return graph(inputs=[("x", F32, (8, 16)), ("b", F32, (16,))],
                 ops=[("Add", ["x", "b"], ["y"], {}),
                      ("Cast", ["y"], ["z"], {"dtype": to}),
                      ("Neg", ["z"], ["w"], {})],
                 outputs=["w"], **extra)


@pytest.mark.parametrize("to", NARROW)
def test_single_op_and_cast_become_one_op(to):
    g = _bias_add_cast(to)
    h = cast_fuse(g)
    assert op_summary(h) == [(OP, ["x", "b"], ["z"]), ("Neg", ["z"], ["w"])]
    op = h.op[0]
    assert op.attr[ANNOTATION].s == "Add_0,Cast_1"
    assert list(op.attr["program"].ints.values) == [ADD, 2, 0, 1]
    assert op.attr["dtype"].dtype == dg.as_dtype(to).code
    assert op.plugin == "core"
    assert {v.name for v in h.value_info} == {"x", "b", "z", "w"}
    _same_outputs(g, h)


def test_gelu_with_constant_and_fused_chain():
    g = graph(inputs=[("x", F32, (4, 300)), ("b", F32, (300,))],
              constants=[("s", np.array(0.125, np.float32))],
              ops=[("Add", ["x", "b"], ["a"], {}),
                   ("Gelu", ["a"], ["y"], {"approximate": "none"}),
                   ("Cast", ["y"], ["z"], {"dtype": BF16}),
                   ("Mul", ["x", "s"], ["m"], {}),
                   ("Cast", ["m"], ["n"], {"dtype": BF16}),
                   ("GeluGrad", ["a", "x"], ["gg"], {})],
              outputs=["z", "n", "gg"])
    # Add's output is also read by GeluGrad: fusion keeps it; Gelu alone
    # joins its Cast; Mul by a constant (folded to an immediate) joins its Cast.
    h = cast_fuse(fusion(g))
    types = [op.type for op in h.op]
    assert types.count("Cast") == 0 and types.count(OP) == 2
    mul = next(op for op in h.op if op.type == OP and "Mul" in op.attr[ANNOTATION].s)
    assert list(mul.input) == ["x"] and list(mul.attr["constants"].floats.values) == [0.125]
    assert [c.name for c in h.constant] == []       # the folded constant is gone
    _same_outputs(g, h)


def test_whole_fused_group_joins_its_cast():
    g = graph(inputs=[("x", F32, (6, 7)), ("y", F32, (7,))],
              ops=[("Mul", ["x", "y"], ["a"], {}),
                   ("Tanh", ["a"], ["b"], {}),
                   ("Cast", ["b"], ["c"], {"dtype": BF16})],
              outputs=["c"])
    h = cast_fuse(fusion(g))
    assert op_summary(h) == [(OP, ["x", "y"], ["c"])]
    assert h.op[0].attr[ANNOTATION].s == "Mul_0,Tanh_1,Cast_2"
    _same_outputs(g, h)


@pytest.mark.parametrize("case", ["second_reader", "graph_output", "widening", "to_float32",
                                  "not_elementwise", "state_update"])
def test_where_the_pass_must_not_fire(case):
    if case == "second_reader":
        g = graph(inputs=[("x", F32, (3, 4))],
                  ops=[("Exp", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": BF16}),
                       ("Neg", ["y"], ["w"], {})], outputs=["z", "w"])
    elif case == "graph_output":
        g = graph(inputs=[("x", F32, (3, 4))],
                  ops=[("Exp", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": BF16})],
                  outputs=["z", "y"])
    elif case == "widening":
        g = graph(inputs=[("x", BF16, (3, 4))],
                  ops=[("Exp", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": F32})],
                  outputs=["z"])
    elif case == "to_float32":
        g = graph(inputs=[("x", "float64", (3, 4))],
                  ops=[("Exp", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": F32})],
                  outputs=["z"])
    elif case == "not_elementwise":
        g = graph(inputs=[("x", F32, (3, 4))],
                  ops=[("Softmax", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": BF16})],
                  outputs=["z"])
    else:
        g = graph(inputs=[("x", F32, (3, 4))], captured=[("v", F32, (3, 4))],
                  ops=[("Exp", ["x"], ["y"], {}), ("Cast", ["y"], ["z"], {"dtype": BF16})],
                  outputs=["z"], state=[("v", "y")])
    h = cast_fuse(g)
    assert op_summary(h) == op_summary(g)


def test_input_graph_is_unchanged_and_no_kernel_leaves_it_alone():
    g = _bias_add_cast()
    before = g.SerializeToString(deterministic=True)
    cast_fuse(g)
    assert g.SerializeToString(deterministic=True) == before
    g.metadata["device"] = "toy"
    assert op_summary(cast_fuse(g)) == op_summary(g)
    g.metadata["device"] = "cpu:0"
    assert [op.type for op in cast_fuse(g).op] == [OP, "Neg"]


def test_runs_after_fusion_in_the_pass_order():
    from dragon_core._graph import passes
    order = passes._ORDER
    assert order.index("fusion") < order.index("cast_fuse") < order.index("memory")


def test_function_bf16_autocast_fuses_and_matches_pass_disabled():
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal((16, 32)).astype(np.float32))
    w1 = dg.tensor(rng.standard_normal((32, 64)).astype(np.float32) * 0.2)
    b1 = dg.tensor(rng.standard_normal(64).astype(np.float32))
    w2 = dg.tensor(rng.standard_normal((64, 8)).astype(np.float32) * 0.2)

    def f(x):
        with dg.autocast("cpu"):
            h = ops.gelu(ops.matmul(x, w1) + b1)
            return ops.matmul(h, w2)

    on = dg.function(f)
    off = dg.function(f, disable_passes=("cast_fuse",))
    types = [op.type for op in on.get_graph(x).op]
    assert OP in types
    assert OP not in [op.type for op in off.get_graph(x).op]
    a, b = np.asarray(on(x)), np.asarray(off(x))
    assert a.dtype == b.dtype
    np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


@pytest.mark.slow
def test_encoder_bf16_step_is_bit_identical_with_the_pass_disabled():
    """The bfloat16-autocast encoder training step of bench_workloads.py
    (with torch for its weights): 3 steps, losses and parameters bit for bit
    with and without the pass, and the pass fires on it."""
    pytest.importorskip("torch")
    bench = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
    code = f"""
import hashlib, sys
sys.path.insert(0, {os.path.abspath(bench)!r})
import numpy as np, dragon_core as dg, torch
import bench_workloads as bw
from models import bert
x, t = bw._encoder_data()
shapes = {{k: tuple(v.shape) for k, v in bert.encoder_layer(
    torch.nn, bert.torch_f(), bw.HIDDEN, bw.HEADS).state_dict().items()}}
step, model = bw.dragon_encoder_step(dg, bert.random_state(shapes), "bfloat16", True)
xt, tt = dg.tensor(x), dg.tensor(t)
losses = [np.asarray(step(xt, tt)).tobytes().hex() for _ in range(3)]
h = hashlib.sha1()
for p in model.parameters():
    h.update(np.asarray(p).tobytes())
n = [op.type for op in step.get_graph(xt, tt).op].count({OP!r})
print(n, losses, h.hexdigest())
"""
    outs = []
    for disable in ("", "cast_fuse"):
        env = dict(os.environ, DRAGON_DISABLE_PASSES=disable)
        r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                           text=True, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        outs.append(r.stdout.split("\n")[-2].split(" ", 1))
    assert int(outs[0][0]) >= 5 and int(outs[1][0]) == 0
    assert outs[0][1] == outs[1][1]
