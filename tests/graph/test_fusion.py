"""FusedElementwise (docs/ops.md) and the `fusion` pass (docs/graph.md).

The op is checked against a NumPy interpreter of its program, and bit for
bit against the same program run as eager ops; the pass on hand-built
graphs (tests/graph/fixtures.py), and numerically by running a graph before
and after fusion. ``python tests/graph/test_fusion.py`` times a chain of 100
ops fused and eager.
"""

from __future__ import annotations

import contextlib
import math
import time
import zlib

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import errors, ops
from dragon_core._graph.build import tensor_from_proto
from dragon_core._graph.compile import compile_graph
from dragon_core._graph.passes.fusion import ANNOTATION, fusion
from dragon_sdk.testing import FLOAT_DTYPES, OpCase

try:
    from .fixtures import graph, op_summary
except ImportError:  # run as a script
    from fixtures import graph, op_summary

F32, F64, I32 = "float32", "float64", "int32"

def needs_kernel(test):
    """Marks tests that run the cpu kernel (cpu_eigen provides it; see
    test_cpu_eigen_provides_the_fused_kernel)."""
    return test


def test_cpu_eigen_provides_the_fused_kernel():
    assert any(k["device"] == "cpu" and k["plugin"] == "cpu_eigen"
               for k in dg._C.kernels("FusedElementwise"))

# ------------------------------------------------------------ interpreters

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


NP_UNARY = {
    0: np.negative, 1: np.abs, 2: np.sign, 3: np.square, 4: np.reciprocal, 5: np.sqrt,
    6: lambda x: 1 / np.sqrt(x), 7: np.exp, 8: np.log, 9: np.log1p, 10: np.sin, 11: np.cos,
    12: np.tanh, 13: lambda x: 1 / (1 + np.exp(-x)), 14: lambda x: np.maximum(x, 0),
    15: np.floor, 16: np.ceil, 17: np.rint, 18: lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    19: _gelu_tanh,
    20: lambda x, a: np.where(x > 0, x, a * x),
    21: lambda x, a: np.where(x > 0, x, a * np.expm1(x)),
}
NP_BINARY = {32: np.add, 33: np.subtract, 34: np.multiply, 35: np.divide, 36: np.power,
             37: np.maximum, 38: np.minimum}

EAGER_UNARY = {
    0: ops.neg, 1: ops.abs, 2: ops.sign, 3: ops.square, 4: ops.reciprocal, 5: ops.sqrt,
    6: ops.rsqrt, 7: ops.exp, 8: ops.log, 9: ops.log1p, 10: ops.sin, 11: ops.cos,
    12: ops.tanh, 13: ops.sigmoid, 14: ops.relu, 15: ops.floor, 16: ops.ceil, 17: ops.round,
    18: lambda x: ops.gelu(x, "none"), 19: lambda x: ops.gelu(x, "tanh"),
    20: ops.leaky_relu, 21: ops.elu,
}
EAGER_BINARY = {32: ops.add, 33: ops.sub, 34: ops.mul, 35: ops.div, 36: ops.pow,
                37: ops.maximum, 38: ops.minimum}


def interpret(inputs, program, constants, result, *, unary, binary, const):
    """Run a FusedElementwise program with the given op tables."""
    regs = {i: x for i, x in enumerate(inputs)}
    n = len(inputs)
    for j, c in enumerate(constants):
        regs[n + j] = const(c)
    for k in range(0, len(program), 4):
        op, dst, a, b = program[k:k + 4]
        if op in binary:
            regs[dst] = binary[op](regs[a], regs[b])
        elif op in (20, 21):
            regs[dst] = unary[op](regs[a], constants[b - n])
        else:
            regs[dst] = unary[op](regs[a])
    return regs[program[-3] if result == -1 else result]


def np_reference(inputs, program, constants=(), result=-1):
    """The program in float64 NumPy, at the broadcast shape of the inputs."""
    out = interpret(inputs, program, constants, result, unary=NP_UNARY, binary=NP_BINARY,
                    const=np.float64)
    shape = np.broadcast_shapes(*[np.shape(x) for x in inputs])
    return np.broadcast_to(out, shape).copy()


#: The eager ops a FusedElementwise program may use.
ELEMENTWISE_OPS = ["Neg", "Abs", "Sign", "Square", "Reciprocal", "Sqrt", "Rsqrt", "Exp",
                   "Log", "Log1p", "Sin", "Cos", "Tanh", "Sigmoid", "Relu", "Floor", "Ceil",
                   "Round", "Gelu", "LeakyRelu", "Elu", "Add", "Sub", "Mul", "Div", "Pow",
                   "Maximum", "Minimum"]


@contextlib.contextmanager
def _same_plugin_as_fused(dtype):
    """Pin the element-wise ops to the plugin serving FusedElementwise, so a
    bitwise comparison compares one plugin's arithmetic with itself (another
    backend, e.g. mkldnn's Gelu on large tensors, rounds differently)."""
    plugin = next(k["plugin"] for k in dg.plugins.kernels("FusedElementwise")
                  if k["device"] == "cpu" and str(np.dtype(dtype)) in k["dtypes"])
    for op in ELEMENTWISE_OPS:
        dg.plugins.pin(op, "cpu", plugin)
    try:
        yield
    finally:
        for op in ELEMENTWISE_OPS:
            dg.plugins.unpin(op, "cpu")


def eager(inputs, program, constants=(), result=-1):
    """The program as eager Dragon ops (constants as 0-d tensors), run by the
    plugin that serves FusedElementwise."""
    dtype = inputs[0].dtype
    tensors = [dg.tensor(x) for x in inputs]
    with _same_plugin_as_fused(dtype):
        out = interpret(tensors, program, constants, result, unary=EAGER_UNARY,
                        binary=EAGER_BINARY, const=lambda c: dg.tensor(np.array(c, dtype)))
    shape = np.broadcast_shapes(*[np.shape(x) for x in inputs])
    return np.broadcast_to(np.asarray(out), shape).copy()


def fused(inputs, program, constants=(), result=-1):
    return np.asarray(ops.fused_elementwise([dg.tensor(x) for x in inputs], program,
                                            list(constants), result))


# ---------------------------------------------------------------- programs

def _uniform(lo, hi):
    return lambda rng, dt, shape: rng.uniform(lo, hi, shape).astype(dt)


def _away_from_zero(rng, dt, shape):
    return (rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], shape)).astype(dt)


#: (id, input generators, program, constants, result, tol)
PROGRAMS = [
    # tanh(a * b) + 0.5
    ("tanh_mul_add", [_uniform(-2, 2)] * 2, [34, 3, 0, 1, 12, 3, 3, -1, 32, 3, 3, 2], [0.5], -1,
     4),
    # sigmoid(exp(x) - y) / z
    ("three_inputs", [_uniform(-2, 2), _uniform(-2, 2), _away_from_zero],
     [7, 3, 0, -1, 33, 3, 3, 1, 13, 3, 3, -1, 35, 3, 3, 2], [], -1, 16),
    # t3 = |x|; t4 = log1p(t3); t5 = sin(x); t3 = t4 * t5; t4 = max(t3, x); t5 = min(t4, 0.25)
    ("reuse_registers", [_uniform(-3, 3)],
     [1, 2, 0, -1, 9, 3, 2, -1, 10, 4, 0, -1, 34, 2, 3, 4, 37, 3, 2, 0, 38, 4, 3, 1], [0.25],
     -1, 8),
    # pow(|x| + 1, 2) - pow(|x| + 1, y), one constant 1 and one 2
    ("pow", [_uniform(-2, 2), _uniform(-1.5, 1.5)],
     [1, 4, 0, -1, 32, 4, 4, 2, 36, 5, 4, 3, 36, 6, 4, 1, 33, 4, 5, 6], [1.0, 2.0], -1, 16),
    # elu(leaky_relu(x, 0.1), 0.7) * gelu(y) + gelu_tanh(x); a dead instruction
    ("activations", [_uniform(-3, 3)] * 2,
     [20, 4, 0, 2, 21, 4, 4, 3, 18, 5, 1, -1, 34, 4, 4, 5, 7, 6, 0, -1, 19, 5, 0, -1,
      32, 4, 4, 5], [0.1, 0.7], -1, 16),
    # the result is input 0, broadcast: an empty program
    ("copy_input", [_uniform(-1, 1)] * 2, [], [], 0, 1),
    # the result depends on single elements only: exp(c) * 3, filled
    ("constant_result", [_uniform(-1, 1)], [7, 3, 1, -1, 34, 3, 3, 2], [0.5, 3.0], -1, 4),
]

#: Input shapes per input count: same shape, broadcasting, 0-d, empty, and
#: one large enough for the parallel path.
SHAPES = {
    1: [((7,),), ((),), ((0, 3),), ((2, 3, 4),), ((257, 131),)],
    2: [((7,), (7,)), ((3, 1), (4,)), ((), (2, 3)), ((2, 3), ()), ((), ()), ((0, 3), (3,)),
        ((5, 1, 3), (1, 4, 1)), ((257, 131), (131,))],
    3: [((2, 3, 4), (3, 1), (4,)), ((), (5,), ()), ((4, 0), (1,), (4, 1)),
        ((300, 129), (300, 1), (129,))],
}


def _cases():
    for pid, gens, program, consts, result, tol in PROGRAMS:
        for dt in FLOAT_DTYPES:
            for shapes in SHAPES[len(gens)]:
                yield pytest.param(pid, gens, program, consts, result, tol, dt, shapes,
                                   id=f"{pid}-{dt}-{'x'.join(map(str, shapes))}")


def _inputs(pid, gens, dt, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((pid, dt, shapes)).encode()))
    return [g(rng, dt, s) for g, s in zip(gens, shapes)]


@needs_kernel
@pytest.mark.parametrize("pid,gens,program,consts,result,tol,dt,shapes", list(_cases()))
def test_forward_matches_numpy(pid, gens, program, consts, result, tol, dt, shapes):
    """Values, shape inference, dtype; inputs left untouched."""
    case = OpCase.of("FusedElementwise", [_inputs(pid, gens, dt, shapes)], np_reference,
                     attrs={"program": program, "constants": consts, "result": result},
                     tol=tol)
    case.check_forward()


@needs_kernel
@pytest.mark.parametrize("pid,gens,program,consts,result,tol,dt,shapes", list(_cases()))
def test_forward_equals_eager_ops_bitwise(pid, gens, program, consts, result, tol, dt,
                                          shapes):
    xs = _inputs(pid, gens, dt, shapes)
    np.testing.assert_array_equal(fused(xs, program, consts, result),
                                  eager(xs, program, consts, result))


#: Each opcode alone, on inputs in its domain (with specials for the ops
#: whose kernels take a scalar path outside a range).
_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -1e-40, 100.0, -100.0, 1000.0,
             -1000.0, 0.5, 2.5, -2.5]


@needs_kernel
@pytest.mark.parametrize("dt", FLOAT_DTYPES)
@pytest.mark.parametrize("opcode", sorted(NP_UNARY))
def test_each_unary_opcode_equals_its_op(opcode, dt):
    rng = np.random.default_rng(opcode)
    x = np.concatenate([rng.uniform(-10, 10, 1500), _SPECIALS]).astype(dt)
    if opcode in (20, 21):
        program, consts = [opcode, 2, 0, 1], [0.3]
    else:
        program, consts = [opcode, 1, 0, -1], []
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(fused([x], program, consts), eager([x], program, consts))


@needs_kernel
@pytest.mark.parametrize("dt", FLOAT_DTYPES)
@pytest.mark.parametrize("opcode", sorted(NP_BINARY))
def test_each_binary_opcode_equals_its_op(opcode, dt):
    rng = np.random.default_rng(opcode)
    a = np.concatenate([rng.uniform(-4, 4, 700), _SPECIALS]).astype(dt).reshape(-1, 1)
    b = np.concatenate([rng.uniform(-4, 4, 20), [0.0, -0.0, 2.0, np.nan]]).astype(dt)
    for program, consts, xs in [
        ([opcode, 2, 0, 1], [], [a, b]),                        # broadcast vectors
        ([opcode, 2, 1, 0], [], [a, b]),                        # swapped
        ([opcode, 2, 0, 1], [2.0], [a]),                        # vector op constant
        ([opcode, 2, 1, 0], [-0.0], [a]),                       # constant op vector
        ([opcode, 2, 0, 1], [], [a, np.array(2.0, dt)]),        # 0-d input
    ]:
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(fused(xs, program, consts),
                                          eager(xs, program, consts),
                                          err_msg=f"program {program} constants {consts}")


# ------------------------------------------------------------ bad programs

X2 = [((2, 3), F32), ((3,), F32)]


@pytest.mark.parametrize("attrs,inputs,match", [
    ({"program": [34, 2, 0]}, X2, "multiple of 4"),
    ({"program": [99, 2, 0, 1]}, X2, "unknown opcode 99"),
    ({"program": [-1, 2, 0, 1]}, X2, "unknown opcode -1"),
    ({"program": [34, 2, 0, 5]}, X2, "operand b = 5"),
    ({"program": [34, 2, -1, 0]}, X2, "operand a = -1"),
    ({"program": [34, 2, 0, 3]}, X2, "operand b = 3"),          # temp not written yet
    ({"program": [34, 2, 0, 2]}, X2, "operand b = 2"),          # reads its own dst
    ({"program": [12, 1, 0, -1]}, X2, "destination 1"),         # writes an input
    ({"program": [12, 2, 0, -1], "constants": [1.0]}, X2, "destination 2"),  # a constant
    ({"program": [12, 5000, 0, -1]}, X2, "destination 5000"),
    ({"program": [12, 2, 0, 1]}, X2, "takes b = -1"),
    ({"program": [20, 2, 0, 1]}, X2, "constant register that holds alpha"),
    ({"program": []}, X2, "explicit result"),
    ({"program": [12, 2, 0, -1], "result": 3}, X2, "result register 3"),
    ({"program": [12, 2, 0, -1], "result": -2}, X2, "result register -2"),
    ({"program": [34, 2, 0, 1]}, [((2, 3), F32), ((4,), F32)], "cannot be broadcast"),
    ({"program": [34, 2, 0, 1]}, [((2, 3), F32), ((3,), F64)], "float64"),
    ({"program": [12, 1, 0, -1]}, [((3,), I32)], "int32"),
    ({"program": []}, [], "at least one input"),
])
def test_bad_programs_raise_invalid_argument(attrs, inputs, match):
    with pytest.raises(errors.InvalidArgumentError, match=match):
        dg.infer_shape("FusedElementwise", inputs, **attrs)


@needs_kernel
def test_bad_program_raises_when_run():
    x = dg.tensor(np.ones(3, np.float32))
    with pytest.raises(errors.InvalidArgumentError, match="unknown opcode 77"):
        ops.fused_elementwise([x], [12, 1, 0, -1, 77, 1, 1, -1])
    with pytest.raises(errors.InvalidArgumentError, match="operand"):
        ops.fused_elementwise([dg.tensor(np.ones((0,), np.float32))], [34, 1, 0, 9])


def test_schema_is_not_differentiable():
    desc = dg._C.op("FusedElementwise").describe()
    assert desc["no_grad"] and desc["same_dtype"] and not desc["stateful"]


# ------------------------------------------------------------------- pass

X = [("x", F32, (2, 3))]
XY = [("x", F32, (2, 3)), ("y", F32, (3,))]


def run_graph(g, feeds: dict) -> list:
    """Run a GraphDef with the executor: its outputs as NumPy arrays."""
    compiled = compile_graph(g, 1)
    consts = {c.name: tensor_from_proto(c) for c in g.constant}
    values = [dg.tensor(feeds[n]) if n in feeds else consts[n] for n in compiled.feed_names]
    return [np.asarray(t) for t in compiled.run(values)]


def info_names(g) -> set:
    return {v.name for v in g.value_info}


def chain5(dtype=F32):
    """x * y -> tanh -> + 0.5 -> sigmoid -> exp."""
    return graph(
        inputs=[("x", dtype, (2, 3)), ("y", dtype, (3,))],
        constants=[("c", np.array(0.5, dtype))],
        ops=[("Mul", ["x", "y"], ["a"], {}),
             ("Tanh", ["a"], ["b"], {}),
             ("Add", ["b", "c"], ["d"], {}),
             ("Sigmoid", ["d"], ["e"], {}),
             ("Exp", ["e"], ["f"], {})],
        outputs=["f"])


def _feeds(g, seed=0):
    rng = np.random.default_rng(seed)
    infos = {v.name: v for v in g.value_info}
    out = {}
    for n in g.input:
        dt = dg.as_dtype(infos[n].dtype).numpy
        out[n] = rng.uniform(-2, 2, tuple(infos[n].shape)).astype(dt)
    return out


@needs_kernel
@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
def test_chain_of_five_becomes_one_op(dtype):
    g = chain5(dtype)
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "y"], ["f"])]
    op = h.op[0]
    assert op.attr[ANNOTATION].s == "Mul_0,Tanh_1,Add_2,Sigmoid_3,Exp_4"
    assert list(op.attr["constants"].floats.values) == [0.5]   # the folded constant
    assert list(op.attr["program"].ints.values) == [
        34, 3, 0, 1, 12, 3, 3, -1, 32, 3, 3, 2, 13, 3, 3, -1, 7, 3, 3, -1]
    assert op.attr["result"].i == 3
    assert op.plugin == "core"
    assert info_names(h) == {"x", "y", "f"}        # intermediates and the constant gone
    assert [c.name for c in h.constant] == []
    feeds = _feeds(g)
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


_OP_ATTRS = {"Gelu": [{"approximate": "none"}, {"approximate": "tanh"}],
             "LeakyRelu": [{"alpha": 0.3}], "Elu": [{"alpha": 0.7}]}


def _every_fusable_op():
    from dragon_core._graph.passes import fusion as module

    for op_type in [*module.UNARY, "Gelu", *module.WITH_ALPHA, *module.BINARY]:
        for attrs in _OP_ATTRS.get(op_type, [{}]):
            yield pytest.param(op_type, attrs, id=f"{op_type}-{attrs}")


@needs_kernel
@pytest.mark.parametrize("op_type,attrs", list(_every_fusable_op()))
def test_each_fusable_op_keeps_its_meaning(op_type, attrs):
    """The pass's opcode for each op type: op, then Neg, fused vs. not."""
    from dragon_core._graph.passes import fusion as module

    binary = op_type in module.BINARY
    g = graph(inputs=[("x", F64, (40,)), ("y", F64, (40,))],
              ops=[(op_type, ["x", "y"] if binary else ["x"], ["a"], attrs),
                   ("Neg", ["a"], ["b"], {})],
              outputs=["b"])
    h = fusion(g)
    assert [op.type for op in h.op] == ["FusedElementwise"]
    feeds = {"x": np.linspace(-3, 3, 40), "y": np.linspace(2, -2, 40)}
    with np.errstate(all="ignore"):
        np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


@needs_kernel
def test_input_graph_is_unchanged():
    g = chain5()
    g.op[1].attr["_inplace_input"].i = 0
    before = g.SerializeToString(deterministic=True)
    fusion(g)
    assert g.SerializeToString(deterministic=True) == before


@needs_kernel
def test_intermediate_graph_output_splits_the_chain():
    g = chain5()
    g.output.append("b")            # tanh's result is also returned
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "y"], ["b"]),
                             ("FusedElementwise", ["b"], ["f"])]
    assert info_names(h) == {"x", "y", "b", "f"}
    feeds = _feeds(g)
    for got, want in zip(run_graph(h, feeds), run_graph(g, feeds)):
        np.testing.assert_array_equal(got, want)


@needs_kernel
def test_intermediate_read_outside_is_not_absorbed():
    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Neg", ["a"], ["b"], {}),
                   ("Sum", ["a"], ["s"], {}),        # reads a: a stays a tensor
                   ("Tanh", ["b"], ["c"], {}),
                   ("Mul", ["c", "s"], ["d"], {})],
              outputs=["d"])
    h = fusion(g)
    assert op_summary(h) == [("Exp", ["x"], ["a"]), ("Sum", ["a"], ["s"]),
                             ("FusedElementwise", ["a", "s"], ["d"])]
    feeds = _feeds(g)
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


@needs_kernel
def test_diamond_is_one_group():
    g = graph(inputs=X,
              ops=[("Abs", ["x"], ["a"], {}),
                   ("Exp", ["a"], ["b"], {}),
                   ("Log1p", ["a"], ["c"], {}),
                   ("Add", ["b", "c"], ["d"], {}),
                   ("Mul", ["d", "x"], ["e"], {})],
              outputs=["e"])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x"], ["e"])]
    # a, b, c, d in two temporaries at most
    prog = list(h.op[0].attr["program"].ints.values)
    assert max(prog[1::4]) <= 2
    feeds = _feeds(g)
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


@needs_kernel
def test_non_float_and_singleton_ops_are_untouched():
    g = graph(inputs=[("i", I32, (4,)), ("x", F32, (4,))],
              ops=[("Add", ["i", "i"], ["a"], {}),
                   ("Mul", ["a", "i"], ["b"], {}),
                   ("Neg", ["b"], ["c"], {}),
                   ("Cast", ["c"], ["d"], {"dtype": F32}),
                   ("Exp", ["d"], ["e"], {}),
                   ("Add", ["x", "x"], ["f"], {}),
                   ("Cast", ["f"], ["g"], {"dtype": I32})],
              outputs=["e", "g"])
    h = fusion(g)
    assert op_summary(h) == op_summary(g)
    assert h.SerializeToString(deterministic=True) == g.SerializeToString(deterministic=True)


@needs_kernel
def test_mixed_float_dtypes_are_separate_groups():
    g = graph(inputs=[("x", F32, (3,)), ("z", F64, (3,))],
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Neg", ["a"], ["b"], {}),
                   ("Cast", ["b"], ["c"], {"dtype": F64}),
                   ("Mul", ["c", "z"], ["d"], {}),
                   ("Tanh", ["d"], ["e"], {})],
              outputs=["e"])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x"], ["b"]), ("Cast", ["b"], ["c"]),
                             ("FusedElementwise", ["c", "z"], ["e"])]


@needs_kernel
def test_small_producer_is_not_recomputed_at_the_broadcast_shape():
    g = graph(inputs=[("x", F32, (100, 4)), ("bias", F32, (4,))],
              ops=[("Exp", ["bias"], ["eb"], {}),           # 4 elements
                   ("Neg", ["eb"], ["nb"], {}),
                   ("Add", ["x", "nb"], ["a"], {}),         # 400 elements
                   ("Relu", ["a"], ["r"], {})],
              outputs=["r"])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["bias"], ["nb"]),
                             ("FusedElementwise", ["x", "nb"], ["r"])]
    feeds = _feeds(g)
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


@needs_kernel
def test_constants_fold_unless_they_set_the_rank():
    g = graph(inputs=[("x", F32, (3,))],
              constants=[("k", np.full((1, 1), 2.0, np.float32)),   # makes the output 2-d
                         ("h", np.array(0.5, np.float32)),          # folds
                         ("v", np.arange(3, dtype=np.float32))],    # not a single element
              ops=[("Mul", ["x", "k"], ["a"], {}),
                   ("Add", ["a", "h"], ["b"], {}),
                   ("Sub", ["b", "v"], ["c"], {}),
                   ("Neg", ["h"], ["d"], {})],                      # h is read outside
              outputs=["c", "d"])
    h = fusion(g)
    assert op_summary(h)[0] == ("FusedElementwise", ["x", "k", "v"], ["c"])
    assert list(h.op[0].attr["constants"].floats.values) == [0.5]
    assert [c.name for c in h.constant] == ["k", "h", "v"]
    feeds = _feeds(g)
    for got, want in zip(run_graph(h, feeds), run_graph(g, feeds)):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@needs_kernel
def test_folded_constants_unread_afterwards_are_dropped():
    g = graph(inputs=X,
              constants=[("two", np.array(2.0, np.float32)), ("alpha_src", np.ones(3, np.float32))],
              ops=[("Pow", ["x", "two"], ["a"], {}),
                   ("LeakyRelu", ["a"], ["b"], {"alpha": 0.2}),
                   ("Gelu", ["b"], ["c"], {"approximate": "tanh"}),
                   ("Add", ["c", "alpha_src"], ["d"], {})],
              outputs=["d"])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "alpha_src"], ["d"])]
    consts = list(h.op[0].attr["constants"].floats.values)
    assert consts == [2.0, pytest.approx(0.2)]
    assert [c.name for c in h.constant] == ["alpha_src"]
    assert "two" not in info_names(h)
    feeds = _feeds(g)
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


@needs_kernel
def test_state_update_is_an_exit():
    g = graph(inputs=X, captured=[("w", F32, (2, 3))],
              ops=[("Mul", ["x", "w"], ["a"], {}),
                   ("Tanh", ["a"], ["b"], {}),
                   ("Sub", ["w", "b"], ["w2"], {}),
                   ("Exp", ["w2"], ["e"], {}),
                   ("Neg", ["e"], ["out"], {})],
              outputs=["out"], state=[("w", "w2")])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "w"], ["w2"]),
                             ("FusedElementwise", ["w2"], ["out"])]


@needs_kernel
def test_inplace_annotations_are_recomputed():
    # t is read by Exp (a member), then last by Neg, which may overwrite it;
    # the fused op reads t where Mul was, after Neg: Neg must not overwrite.
    from dragon_core._graph.passes.inplace import inplace

    g = inplace(graph(inputs=X,
                      ops=[("Abs", ["x"], ["t"], {}),
                           ("Exp", ["t"], ["a"], {}),
                           ("Neg", ["t"], ["n"], {}),
                           ("Mul", ["a", "x"], ["m"], {})],
                      outputs=["m", "n"]))
    assert "_inplace_input" in g.op[2].attr
    h = fusion(g)
    assert op_summary(h) == [("Abs", ["x"], ["t"]), ("Neg", ["t"], ["n"]),
                             ("FusedElementwise", ["t", "x"], ["m"])]
    assert not any("_inplace_input" in op.attr for op in h.op)
    feeds = _feeds(g)
    for got, want in zip(run_graph(h, feeds), run_graph(g, feeds)):
        np.testing.assert_array_equal(got, want)


@needs_kernel
def test_device_with_index_is_understood():
    g = chain5()
    g.metadata["device"] = "cpu:0"
    assert [op.type for op in fusion(g).op] == ["FusedElementwise"]


@needs_kernel
def test_group_needing_too_many_registers_is_left_alone(monkeypatch):
    from dragon_core._graph.passes import fusion as module

    g = graph(inputs=X,
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Sin", ["x"], ["b"], {}),
                   ("Add", ["a", "b"], ["c"], {})],
              outputs=["c"])
    assert [op.type for op in fusion(g).op] == ["FusedElementwise"]   # 2 temporaries
    monkeypatch.setattr(module, "MAX_TEMPORARIES", 1)
    assert op_summary(fusion(g)) == op_summary(g)


def test_no_kernel_on_the_device_leaves_the_graph_alone():
    g = chain5()
    g.metadata["device"] = "nosuchdevice:0"
    h = fusion(g)
    assert h.SerializeToString(deterministic=True) == g.SerializeToString(deterministic=True)
    assert h is not g


@needs_kernel
def test_function_at_o3_fuses_and_matches_eager():
    def f(x, y):
        a = ops.tanh(x * y) + 0.5
        return ops.exp(ops.sigmoid(a)) - x, ops.relu(a)

    rng = np.random.default_rng(3)
    x = dg.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    y = dg.tensor(rng.standard_normal((3,)).astype(np.float32))
    fn = dg.function(f)
    # a is read by sigmoid and relu: the chain splits there; relu is alone
    types = [op.type for op in fn.get_graph(x, y).op]
    assert types == ["FusedElementwise", "FusedElementwise", "Relu"], types
    for got, want in zip(fn(x, y), f(x, y)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


# ----------------------------------------------------- a chain of 100 ops

_KINDS = [("Mul", 34), ("Add", 32), ("Tanh", 12), ("Sigmoid", 13)]


def chain100(n=1000):
    """x -> (* c -> + c -> tanh -> sigmoid) x 25, as a graph."""
    ops_, cur = [], "x"
    for i in range(100):
        kind = _KINDS[i % 4][0]
        ins = [cur, "c"] if kind in ("Mul", "Add") else [cur]
        ops_.append((kind, ins, [f"t{i}"], {}))
        cur = f"t{i}"
    return graph(inputs=[("x", F32, (n,)), ("c", F32, ())], ops=ops_, outputs=[cur])


@needs_kernel
def test_chain_of_100_is_one_op_with_one_register():
    g = chain100()
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "c"], ["t99"])]
    prog = list(h.op[0].attr["program"].ints.values)
    assert len(prog) == 400 and set(prog[1::4]) == {2}
    feeds = {"x": np.random.default_rng(0).standard_normal(1000).astype(np.float32),
             "c": np.array(0.5, np.float32)}
    np.testing.assert_array_equal(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


def bench_chain100(repeats: int = 7) -> dict:
    """Microseconds per evaluation of the 100-op chain on 1000 float32."""
    h = fusion(chain100())
    op = h.op[0]
    program = list(op.attr["program"].ints.values)
    rng = np.random.default_rng(0)
    x = dg.tensor(rng.standard_normal(1000).astype(np.float32))
    c = dg.tensor(np.array(0.5, np.float32))
    table = {34: ops.mul, 32: ops.add, 12: ops.tanh, 13: ops.sigmoid}

    def run_fused():
        return ops.fused_elementwise([x, c], program)

    def run_eager():
        t = x
        for k in range(0, 400, 4):
            t = table[program[k]](t, c) if program[k] in (32, 34) else table[program[k]](t)
        return t

    assert np.array_equal(np.asarray(run_fused()), np.asarray(run_eager()))

    def best(fn, number, clock):
        times = []
        for _ in range(repeats):
            t0 = clock()
            for _ in range(number):
                fn()
            times.append((clock() - t0) / number * 1e6)
        return min(times)

    # Wall time, and the thread's CPU time (steadier on a busy machine; the
    # same as wall time when the op runs on one thread).
    return {"fused_us": best(run_fused, 300, time.perf_counter),
            "eager_us": best(run_eager, 10, time.perf_counter),
            "fused_cpu_us": best(run_fused, 300, time.thread_time),
            "eager_cpu_us": best(run_eager, 10, time.thread_time)}


if __name__ == "__main__":
    r = bench_chain100()
    print(f"100-op chain on 1000 float32 (best of 7): fused {r['fused_us']:.1f} us, "
          f"100 eager ops {r['eager_us']:.1f} us ({r['eager_us'] / r['fused_us']:.1f}x); "
          f"thread CPU time {r['fused_cpu_us']:.1f} us and {r['eager_cpu_us']:.1f} us")
