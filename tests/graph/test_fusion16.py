"""16-bit element-wise fusion (issue 21): FusedElementwise on float16 and
bfloat16, and the `fusion` pass's 16-bit groups (docs/graph.md, "Fusion").

A 16-bit program computes each instruction in float32 and rounds its result
to the dtype, as each unfused 16-bit kernel stores its result, so a fused
group gives the unfused ops' values bit for bit. Checked: every opcode of the
element-wise op table against its eager op, bit for bit; multi-instruction
programs (broadcasting, 0-d, empty, the parallel path) against the same
program as eager ops, bit for bit, and against a float64 NumPy interpreter
that rounds to the dtype after each op; the pass on hand-built 16-bit
graphs; compiled bfloat16 functions against eager, bit for bit, with the
pass's groups counted through ``dragon_core.fusion.fused_ops``.
"""

from __future__ import annotations

import contextlib
import math
import zlib

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops
from dragon_core._graph.passes import fusion as fusion_module
from dragon_core._graph.passes.fusion import ANNOTATION, fusion

try:
    from .fixtures import graph, op_summary
    from .test_fusion import EAGER_BINARY, EAGER_UNARY, PROGRAMS, SHAPES, chain5, interpret
    from .test_fusion import run_graph, _feeds
except ImportError:  # run as a script
    from fixtures import graph, op_summary
    from test_fusion import EAGER_BINARY, EAGER_UNARY, PROGRAMS, SHAPES, chain5, interpret
    from test_fusion import run_graph, _feeds

HALF = ("bfloat16", "float16")
NP = {dt: dg.as_dtype(dt).numpy for dt in HALF}

# Every opcode of the table: the eager op for each (the ones test_fusion
# lists, plus the libm rows and the division family).
UNARY_OPS = dict(EAGER_UNARY)
UNARY_OPS.update({22: ops.tan, 23: ops.asin, 24: ops.acos, 25: ops.atan, 26: ops.sinh,
                  27: ops.cosh, 28: ops.asinh, 29: ops.acosh, 30: ops.atanh, 31: ops.erf,
                  42: ops.expm1})
BINARY_OPS = dict(EAGER_BINARY)
BINARY_OPS.update({39: ops.floor_divide, 40: ops.mod, 41: ops.fmod})

ELEMENTWISE_OPS = sorted({*fusion_module.UNARY, *fusion_module.BINARY,
                          *fusion_module.WITH_ALPHA, "Gelu"})


def test_every_opcode_is_covered():
    codes = {*fusion_module.UNARY.values(), *fusion_module.BINARY.values(),
             *fusion_module.WITH_ALPHA.values(), *fusion_module.GELU.values()}
    assert codes == set(UNARY_OPS) | set(BINARY_OPS)


def test_cpu_eigen_serves_16_bit_programs():
    kernels = [k for k in dg._C.kernels("FusedElementwise")
               if k["device"] == "cpu" and k["plugin"] == "cpu_eigen"]
    dtypes = {d.strip() for k in kernels for d in k["dtypes"].split(",")}
    assert {"float16", "bfloat16", "float32", "float64"} <= dtypes


@contextlib.contextmanager
def _cpu_eigen():
    """Pin the element-wise ops to cpu_eigen, the plugin serving
    FusedElementwise (mkldnn's bfloat16 Gelu/Tanh round differently)."""
    for op in ELEMENTWISE_OPS:
        dg.plugins.pin(op, "cpu", "cpu_eigen")
    try:
        yield
    finally:
        for op in ELEMENTWISE_OPS:
            dg.plugins.unpin(op, "cpu")


def _tensor(x, dt):
    return dg.tensor(np.asarray(x, np.float32).astype(NP[dt]))


def _f32(t) -> np.ndarray:
    return np.asarray(t).astype(np.float32)


def fused(xs, dt, program, constants=(), result=-1):
    return _f32(ops.fused_elementwise([_tensor(x, dt) for x in xs], program,
                                      list(constants), result))


def eager(xs, dt, program, constants=(), result=-1):
    """The program as eager 16-bit ops (constants as 0-d tensors of dt)."""
    with _cpu_eigen():
        out = interpret([_tensor(x, dt) for x in xs], program, constants, result,
                        unary=UNARY_OPS, binary=BINARY_OPS, const=lambda c: _tensor(c, dt))
    shape = np.broadcast_shapes(*[np.shape(x) for x in xs])
    return np.broadcast_to(_f32(out), shape).copy()


def _bitwise(got, want, msg=""):
    """Equal bit for bit (NaNs compared as NaNs; the sign of zero counts)."""
    assert got.shape == want.shape, msg
    g, w = got.astype(np.float32).view(np.uint32), want.astype(np.float32).view(np.uint32)
    same = (g == w) | (np.isnan(got) & np.isnan(want))
    bad = np.flatnonzero(~same)
    assert bad.size == 0, (msg, [(got.flat[i], want.flat[i]) for i in bad[:6]])


_SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 100.0, -100.0, 1000.0, -1000.0,
             0.5, 2.5, -2.5, 65504.0, 1e-7]


@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("opcode", sorted(UNARY_OPS))
def test_each_unary_opcode_equals_its_op(opcode, dt):
    rng = np.random.default_rng(opcode)
    x = np.concatenate([rng.uniform(-10, 10, 1500), rng.uniform(-1, 1, 200), _SPECIALS])
    if opcode in (20, 21):
        program, consts = [opcode, 2, 0, 1], [0.3]
    else:
        program, consts = [opcode, 1, 0, -1], []
    with np.errstate(all="ignore"):
        _bitwise(fused([x], dt, program, consts), eager([x], dt, program, consts))


@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("opcode", sorted(BINARY_OPS))
def test_each_binary_opcode_equals_its_op(opcode, dt):
    rng = np.random.default_rng(opcode)
    a = np.concatenate([rng.uniform(-4, 4, 700), _SPECIALS]).reshape(-1, 1)
    b = np.concatenate([rng.uniform(-4, 4, 20), [0.0, -0.0, 2.0, np.nan, 0.1]])
    for program, consts, xs in [
        ([opcode, 2, 0, 1], [], [a, b]),               # broadcast vectors
        ([opcode, 2, 1, 0], [], [a, b]),               # swapped
        ([opcode, 2, 0, 1], [2.0], [a]),               # vector op constant (pow 2)
        ([opcode, 2, 1, 0], [-0.0], [a]),              # constant op vector
        ([opcode, 2, 0, 1], [0.1], [a]),               # a constant rounded to dt
        ([opcode, 2, 0, 1], [], [a, np.array(2.0)]),   # 0-d input
    ]:
        with np.errstate(all="ignore"):
            _bitwise(fused(xs, dt, program, consts), eager(xs, dt, program, consts),
                     f"program {program} constants {consts}")


# ------------------------------------------------- multi-instruction programs

def _rounded(dt):
    """x rounded to dt, back in float64."""
    return lambda x: np.asarray(x, np.float64).astype(NP[dt]).astype(np.float64)


_erf = np.vectorize(math.erf, otypes=[np.float64])
NP_UNARY = {
    0: np.negative, 1: np.abs, 2: np.sign, 3: np.square, 4: np.reciprocal, 5: np.sqrt,
    6: lambda x: 1 / np.sqrt(x), 7: np.exp, 8: np.log, 9: np.log1p, 10: np.sin, 11: np.cos,
    12: np.tanh, 13: lambda x: 1 / (1 + np.exp(-x)), 14: lambda x: np.maximum(x, 0),
    15: np.floor, 16: np.ceil, 17: np.rint,
    18: lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    19: lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    20: lambda x, a: np.where(x > 0, x, a * x),
    21: lambda x, a: np.where(x > 0, x, a * np.expm1(x)),
}
NP_BINARY = {32: np.add, 33: np.subtract, 34: np.multiply, 35: np.divide, 36: np.power,
             37: np.maximum, 38: np.minimum}


def np_rounded_reference(xs, dt, program, constants, result):
    """The program in float64 NumPy with every op's result rounded to dt (the
    per-op rounding of the unfused 16-bit ops); inputs and constants as dt
    holds them."""
    r = _rounded(dt)
    unary = {k: (lambda f: (lambda *a: r(f(*a))))(f) for k, f in NP_UNARY.items()}
    binary = {k: (lambda f: (lambda a, b: r(f(a, b))))(f) for k, f in NP_BINARY.items()}
    with np.errstate(all="ignore"):
        out = interpret([r(x) for x in xs], program, constants, result, unary=unary,
                        binary=binary, const=r)
    shape = np.broadcast_shapes(*[np.shape(x) for x in xs])
    return np.broadcast_to(out, shape).copy()


def _program_cases():
    for pid, gens, program, consts, result, tol in PROGRAMS:
        for dt in HALF:
            for shapes in SHAPES[len(gens)]:
                yield pytest.param(pid, gens, program, consts, result, tol, dt, shapes,
                                   id=f"{pid}-{dt}-{'x'.join(map(str, shapes))}")


def _program_inputs(pid, gens, dt, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((pid, dt, shapes)).encode()))
    # float32 draws, rounded to dt by _tensor / the reference alike
    return [g(rng, np.float32, s) for g, s in zip(gens, shapes)]


@pytest.mark.parametrize("pid,gens,program,consts,result,tol,dt,shapes",
                         list(_program_cases()))
def test_program_equals_eager_ops_bitwise(pid, gens, program, consts, result, tol, dt,
                                          shapes):
    xs = _program_inputs(pid, gens, dt, shapes)
    got = fused(xs, dt, program, consts, result)
    assert got.shape == np.broadcast_shapes(*[np.shape(x) for x in xs])
    _bitwise(got, eager(xs, dt, program, consts, result))


@pytest.mark.parametrize("pid,gens,program,consts,result,tol,dt,shapes",
                         list(_program_cases()))
def test_program_matches_rounded_numpy(pid, gens, program, consts, result, tol, dt, shapes):
    """Against float64 math rounded to dt after each op: an op's float32 result
    may round to the neighbour of the float64 one when it sits within a float32
    ulp of a tie, and that one-ulp step may grow through later ops; so at most
    2 ulp of dt relative (4 for the programs test_fusion gives a looser
    tolerance) plus the same absolute at the dtype's unit."""
    xs = _program_inputs(pid, gens, dt, shapes)
    got = fused(xs, dt, program, consts, result).astype(np.float64)
    want = np_rounded_reference(xs, dt, program, consts, result)
    eps = float(np.finfo(NP[dt]).eps) if dt == "float16" else 2.0 ** -7
    ulps = 2 if tol <= 4 else 4
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = np.isnan(want) | (got == want) | (
        np.abs(got - want) <= ulps * eps * np.maximum(np.abs(want), 1.0))
    bad = np.flatnonzero(~ok)
    assert bad.size == 0, [(got.flat[i], want.flat[i]) for i in bad[:6]]


def test_16_bit_program_is_not_the_float32_program_rounded_once():
    """Per-op rounding is visible: (x + 1) - 1 in bfloat16 loses x's low bits
    (as the unfused ops do); float32 then one rounding would keep them."""
    x = np.array([1e-3, 3e-3, 0.1, 0.3], np.float32)
    program = [32, 3, 0, 1, 33, 3, 3, 1]
    got = fused([x], "bfloat16", program, [1.0])
    np.testing.assert_array_equal(got, eager([x], "bfloat16", program, [1.0]))
    once = _f32(_tensor(x, "bfloat16"))
    assert not np.array_equal(got, once)


def test_alpha_stays_float_and_operand_constants_round():
    """An activation's alpha is the unfused op's float attribute (0.1 is not
    rounded to bfloat16); a constant operand is a bfloat16 scalar tensor."""
    x = np.linspace(-5, 5, 101).astype(np.float32)
    for program, consts in [([20, 2, 0, 1], [0.1]), ([34, 2, 0, 1], [0.1])]:
        got = fused([x], "bfloat16", program, consts)
        _bitwise(got, eager([x], "bfloat16", program, consts))
    lrelu = fused([x], "bfloat16", [20, 2, 0, 1], [0.1])
    with _cpu_eigen():
        want = _f32(ops.leaky_relu(_tensor(x, "bfloat16"), 0.1))
    _bitwise(lrelu, want)


@pytest.mark.parametrize("dt", HALF)
def test_bad_16_bit_programs_raise(dt):
    """The checks are the same as for float32: when run, with the op named;
    mixing a 16-bit dtype with another one is refused by shape inference."""
    from dragon_core import errors

    x = _tensor(np.ones(3), dt)
    with pytest.raises(errors.InvalidArgumentError, match="unknown opcode 77"):
        ops.fused_elementwise([x], [12, 1, 0, -1, 77, 1, 1, -1])
    with pytest.raises(errors.InvalidArgumentError, match="operand"):
        ops.fused_elementwise([_tensor(np.ones((0,)), dt)], [34, 1, 0, 9])
    with pytest.raises(errors.InvalidArgumentError, match="float32"):
        dg.infer_shape("FusedElementwise", [((3,), dt), ((3,), "float32")],
                       program=[34, 2, 0, 1])


# --------------------------------------------------------------------- pass

@pytest.mark.parametrize("dt", HALF)
def test_chain_of_five_becomes_one_op(dt):
    g = chain5(dt)
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x", "y"], ["f"])]
    op = h.op[0]
    assert op.attr[ANNOTATION].s == "Mul_0,Tanh_1,Add_2,Sigmoid_3,Exp_4"
    assert list(op.attr["constants"].floats.values) == [0.5]
    assert list(op.attr["program"].ints.values) == [
        34, 3, 0, 1, 12, 3, 3, -1, 32, 3, 3, 2, 13, 3, 3, -1, 7, 3, 3, -1]
    feeds = _feeds(g)
    with _cpu_eigen():
        _bitwise(run_graph(h, feeds)[0].astype(np.float32),
                 run_graph(g, feeds)[0].astype(np.float32))


def test_mixed_16_bit_dtypes_are_separate_groups():
    g = graph(inputs=[("x", "bfloat16", (3,)), ("z", "float32", (3,))],
              ops=[("Exp", ["x"], ["a"], {}),
                   ("Neg", ["a"], ["b"], {}),
                   ("Cast", ["b"], ["c"], {"dtype": "float32"}),
                   ("Mul", ["c", "z"], ["d"], {}),
                   ("Tanh", ["d"], ["e"], {})],
              outputs=["e"])
    h = fusion(g)
    assert op_summary(h) == [("FusedElementwise", ["x"], ["b"]), ("Cast", ["b"], ["c"]),
                             ("FusedElementwise", ["c", "z"], ["e"])]
    feeds = _feeds(g)
    with _cpu_eigen():
        _bitwise(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


def test_16_bit_constants_fold_as_their_dtype_holds_them():
    c = np.array(0.1, np.float32).astype(NP["bfloat16"])   # 0.10009765625
    g = graph(inputs=[("x", "bfloat16", (6,))],
              constants=[("c", c)],
              ops=[("Mul", ["x", "c"], ["a"], {}), ("Exp", ["a"], ["b"], {})],
              outputs=["b"])
    h = fusion(g)
    assert [op.type for op in h.op] == ["FusedElementwise"]
    assert list(h.op[0].attr["constants"].floats.values) == [float(c)]
    feeds = _feeds(g)
    with _cpu_eigen():
        _bitwise(run_graph(h, feeds)[0], run_graph(g, feeds)[0])


# ------------------------------------------------------- compiled functions

def _mlp_tail(x, b, r):
    """An MLP's element-wise tail: bias, GELU, scale, residual, tanh gate."""
    h = ops.gelu(x + b, "none")
    g = ops.sigmoid(h) * h
    return ops.tanh(g * 0.5 + r) - ops.leaky_relu(r, 0.2)


def _backward_like(x, dy):
    """The shape of a composed activation gradient: products and sums."""
    s = ops.sigmoid(x)
    return dy * s * (1.0 + x * (1.0 - s))


@pytest.mark.parametrize("dt", HALF)
@pytest.mark.parametrize("shape", [(), (5,), (3, 7), (8, 128, 64), (0, 4)])
def test_compiled_function_equals_eager_bitwise(dt, shape):
    rng = np.random.default_rng(len(shape))
    x = _tensor(rng.standard_normal(shape) * 2, dt)
    r = _tensor(rng.standard_normal(shape), dt)
    b = _tensor(rng.standard_normal(shape[-1:]), dt)
    with _cpu_eigen():
        f = dg.function(_mlp_tail)
        got = f(x, b, r)
        want = _mlp_tail(x, b, r)
        assert got.dtype == dt and tuple(got.shape) == shape
        _bitwise(_f32(got), _f32(want))
        groups = dg.fusion.fused_ops(f.get_graph(x, b, r))
        # one group: add, gelu, sigmoid, mul, mul, add, tanh, leaky_relu, sub
        # (the constants fold into the program)
        assert len(groups) == 1, groups
        ((typ, members),) = groups.values()
        assert typ == "FusedElementwise" and len(members) == 9, members

        g = dg.function(_backward_like)
        _bitwise(_f32(g(x, r)), _f32(_backward_like(x, r)))
        assert len(dg.fusion.fused_ops(g.get_graph(x, r))) == 1


def test_compiled_bfloat16_gradient_step_equals_eager():
    """A small bfloat16 training-like step (forward, gradient through the
    element-wise ops, an update) compiled equals eager bit for bit, and its
    element-wise ops are fused into bfloat16 groups."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((64,)).astype(np.float32)
    x = _tensor(rng.standard_normal((16, 64)), "bfloat16")

    def step(w, x):
        with dg.GradientTape() as tape:
            tape.watch(w)
            y = ops.tanh(ops.gelu(x * w, "none")) * 0.5
            loss = ops.sum(y * y)
        (gw,) = tape.gradient(loss, [w])
        return loss, w - gw * 0.01

    with _cpu_eigen():
        w = _tensor(w0, "bfloat16")
        f = dg.function(step)
        got = f(w, x)
        want = step(w, x)
        for a, b in zip(got, want):
            assert a.dtype == "bfloat16"
            _bitwise(_f32(a), _f32(b))
        graph_ = f.get_graph(w, x)
        groups = dg.fusion.fused_ops(graph_)
        assert len(groups) >= 2, groups
        info = {v.name: dg.as_dtype(v.dtype).name for v in graph_.value_info}
        fused_ops = [op for op in graph_.op if op.type == "FusedElementwise"]
        assert all(info[op.output[0]] == "bfloat16" for op in fused_ops)


# ------------------------------------------------------ cuda (GPU machine)

def _cuda_or_skip():
    try:
        import dragon_cuda
    except ImportError:
        pytest.skip("dragon-cuda is not installed")
    if dragon_cuda.device_count() == 0:
        pytest.skip(f"no cuda device: {dragon_cuda.unavailable_reason()}")


@pytest.mark.parametrize("dt", HALF)
def test_cuda_compiled_16_bit_group_equals_eager(dt):
    """On cuda the pass now fuses 16-bit groups into cuda's 16-bit
    FusedElementwise, whose instructions run the unfused kernels' functors
    and round as they store: compiled equals eager there bit for bit, and
    both stay close to the CPU (opcodes the cuda kernel has: 0-21, 32-38)."""
    _cuda_or_skip()
    rng = np.random.default_rng(11)
    shape = (64, 129)
    host = [_tensor(rng.standard_normal(shape) * 2, dt), _tensor(rng.standard_normal((129,)), dt),
            _tensor(rng.standard_normal(shape), dt)]
    x, b, r = [t.to("cuda") for t in host]
    f = dg.function(_mlp_tail)
    got = f(x, b, r)
    want = _mlp_tail(x, b, r)
    assert got.dtype == dt
    groups = dg.fusion.fused_ops(f.get_graph(x, b, r))
    assert len(groups) == 1, groups
    _bitwise(_f32(got.cpu()), _f32(want.cpu()))
    cpu = _f32(_mlp_tail(*host))
    np.testing.assert_allclose(_f32(got.cpu()), cpu, rtol=0.05, atol=0.05)
