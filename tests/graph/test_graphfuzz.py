"""Compiled (``dg.function``) against eager: random programs and training
steps from ``graphfuzz.py``, run at every optimisation level (with and
without fusion / in-place / buffer reuse, and on the parallel executor),
several calls in a row; plus the regression tests of what the fuzzing found.

``DRAGON_FUZZ_OFFSET`` (first seed, default 0) and ``DRAGON_FUZZ_COUNT``
(programs, default 160; training steps: a quarter of it) choose the programs,
so a deeper run by hand is e.g.
``DRAGON_FUZZ_OFFSET=5000 DRAGON_FUZZ_COUNT=2000 pytest tests/graph/test_graphfuzz.py``.
"""

import os

import numpy as np
import pytest

import dragon_core as dg

from . import graphfuzz as G

OFFSET = int(os.environ.get("DRAGON_FUZZ_OFFSET", "0"))
COUNT = int(os.environ.get("DRAGON_FUZZ_COUNT", "160"))
CHUNK = 8


@pytest.mark.parametrize("chunk", range((COUNT + CHUNK - 1) // CHUNK))
def test_random_programs_compiled_equal_eager(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * CHUNK, OFFSET + min(COUNT, (chunk + 1) * CHUNK)):
        # O0-O2 must give eager's bits; O3 (fusion) too, docs/graph.md
        ran += G.check_program(G.random_program(seed), exact_levels=(0, 1, 2, 3, "parallel"))
    assert ran > 0


@pytest.mark.parametrize("chunk", range(max(1, COUNT // 4 // 4)))
def test_random_training_steps_compiled_equal_eager(chunk):
    ran = 0
    for seed in range(OFFSET + chunk * 4, OFFSET + (chunk + 1) * 4):
        ran += G.check_train_step(G.TrainStep(seed))
    assert ran > 0


def test_generator_is_deterministic_and_covers_the_op_kinds():
    ops = set()
    for seed in range(200):
        a, b = G.random_program(seed), G.random_program(seed)
        assert repr(a) == repr(b)
        ops.update(op for op, _, _ in a.instrs)
        assert 3 <= len(a.instrs) <= 15
    assert ops >= {"relu", "gelu", "add", "mul", "sum", "mean", "max", "reshape", "transpose",
                   "slice", "concat", "split", "matmul", "softmax", "layer_norm", "cast_rt",
                   "where"}


def test_fuzz_checker_catches_a_wrong_result(monkeypatch):
    """The checker is not vacuous: a compiled run that adds 1e-3 fails it."""
    prog = G.random_program(1)
    real = dg.function

    def wrong(fn, **kw):
        g = real(fn, **kw)
        return lambda *xs: tuple(o + 1e-3 if str(o.dtype).startswith("float") else o
                                 for o in g(*xs))

    monkeypatch.setattr(G.dg, "function", wrong)
    with pytest.raises(AssertionError, match="differs from eager"):
        G.check_program(prog, configs=[(1, ())])


# ------------------------------------------------------------- findings


@pytest.mark.parametrize("level", [0, 1, 2, 3])
def test_returning_an_assigned_variable_returns_the_variable(level):
    """Finding 1: ``w.assign(...); return w`` eagerly returns ``w`` itself
    (a later assign rebinds it); a compiled call returned a new tensor
    holding that call's value, so a kept result differed from eager's."""
    def make():
        w = dg.tensor(np.ones(4, np.float32))

        def f(x):
            old = w                 # the variable, not a copy (as eagerly)
            w.assign(w + x)
            return w, old, dg.ops.reshape(w, [2, 2])
        return w, f

    w_e, f_e = make()
    w_c, f_c = make()
    g = dg.function(f_c, opt_level=level)
    x = dg.tensor(np.arange(4.0, dtype=np.float32))
    kept_e = [f_e(x) for _ in range(3)]
    kept_c = [g(x) for _ in range(3)]
    for (a, b, c), (ea, eb, ec) in zip(kept_c, kept_e):
        assert a is w_c and b is w_c
        np.testing.assert_array_equal(a.numpy(), ea.numpy())
        np.testing.assert_array_equal(b.numpy(), eb.numpy())
        np.testing.assert_array_equal(c.numpy(), ec.numpy())
    np.testing.assert_array_equal(w_c.numpy(), w_e.numpy())


@pytest.mark.parametrize("relu", [False, True])
def test_bfloat16_matmul_bias_fusion_rounds_once(relu):
    """Finding 2 (by design, documented in docs/graph.md "Rounding of 16-bit
    chains"): a bfloat16 MatMul -> Add(bias) [-> Relu] fused into mkldnn's
    MatMulBiasAct rounds once, so it differs from eager mode's two
    roundings by at most one bfloat16 rounding, and is never farther from
    the float64 result; without pattern_fusion the graph gives eager bits."""
    if not any(k["op"] == "MatMulBiasAct" and k["device"] == "cpu" and "bfloat16" in k["dtypes"]
               for k in dg.plugins.kernels("MatMulBiasAct")):
        pytest.skip("no bfloat16 MatMulBiasAct on cpu (mkldnn not installed)")
    rng = np.random.default_rng(5)
    xs = [rng.standard_normal(s).astype(np.float32) for s in ((16, 32), (32, 24), (24,))]
    x, w, b = (dg.tensor(a).cast("bfloat16") for a in xs)

    def f(x, w, b):
        z = dg.ops.add(dg.ops.matmul(x, w), b)
        return dg.ops.relu(z) if relu else z

    eager = f(x, w, b).cast("float32").numpy()
    fused_fn = dg.function(f)
    fused = fused_fn(x, w, b).cast("float32").numpy()
    assert [op.type for op in fused_fn.get_graph(x, w, b).op] == ["MatMulBiasAct"]
    plain = dg.function(f, disable_passes=("pattern_fusion",))(x, w, b).cast("float32").numpy()
    np.testing.assert_array_equal(plain, eager)
    assert not np.array_equal(fused, eager)          # the documented difference exists
    # exact reference from the bfloat16 operands
    xf, wf, bf = (t.cast("float64").numpy() for t in (x, w, b))
    ref = xf @ wf + bf
    ref = np.maximum(ref, 0) if relu else ref
    # eager rounds the product, then the sum: the fused op skips the first
    # rounding (half a bfloat16 ulp of the product) and its second one may
    # then differ by one ulp of the result
    bound = (np.abs(xf @ wf) / 2 + np.abs(eager)) * 2.0 ** -7
    assert np.all(np.abs(fused - eager) <= bound)
    assert np.abs(fused - ref).sum() <= np.abs(eager - ref).sum()


_C4 = np.arange(4, dtype=np.float32)
_CONST_VIEWS = {
    "reshape": lambda: dg.ops.reshape(dg.tensor(_C4), [2, 2]),
    "transpose": lambda: dg.ops.transpose(dg.ops.reshape(dg.tensor(_C4), [2, 2])),
    "unsqueeze": lambda: dg.ops.unsqueeze(dg.tensor(_C4), 0),
    "flatten_of_reshape": lambda: dg.ops.flatten(dg.ops.reshape(dg.tensor(_C4), [2, 2])),
}


@pytest.mark.parametrize("level", [0, 1, 2, 3])
@pytest.mark.parametrize("view", sorted(_CONST_VIEWS))
def test_a_returned_view_of_a_constant_is_the_callers_own(view, level):
    """Finding 3: a result that is a view of one of the graph's constants
    (``reshape(dg.tensor(...))``: a view, no kernel) shared the constant's
    storage, so writing into the result (``.numpy()[...] = v``, a vm.torch
    in-place op) changed what every later call returned. Eagerly each call
    makes a new tensor; a compiled call now returns a copy, as it does for a
    constant returned directly."""
    make = _CONST_VIEWS[view]

    def f(x):
        return make(), x + 1.0

    g = dg.function(f, opt_level=level)
    x = dg.tensor(np.zeros(4, np.float32))
    want = make().numpy().copy()
    first, _ = g(x)
    np.testing.assert_array_equal(first.numpy(), want)
    first.numpy()[...] = 99.0
    again, _ = g(x)
    np.testing.assert_array_equal(again.numpy(), want)
    np.testing.assert_array_equal(first.numpy(), np.full_like(want, 99.0))


@pytest.mark.parametrize("level", [0, 3])
@pytest.mark.parametrize("as_view", [False, True])
def test_a_variable_assigned_a_constant_does_not_share_it(as_view, level):
    """Finding 3, state side: ``w.assign(dg.tensor(...))`` (or a view of it)
    rebound ``w`` to the constant's storage, so a write into ``w`` between
    calls changed the constant the next call assigns."""
    w = dg.tensor(np.zeros((2, 2) if as_view else 4, np.float32))

    def f(x):
        c = dg.tensor(_C4)
        w.assign(dg.ops.reshape(c, [2, 2]) if as_view else c)
        return x + 1.0

    g = dg.function(f, opt_level=level)
    x = dg.tensor(np.zeros(4, np.float32))
    g(x)
    w.numpy()[...] = 99.0
    g(x)
    np.testing.assert_array_equal(w.numpy().ravel(), _C4)


def test_host_data_made_by_a_front_end_in_a_trace_is_a_constant():
    """Finding 4: vm.torch's creation functions (``torch.arange``, ...) make
    their tensor from host data without ``dg.tensor``; in a trace it was
    taken for a captured tensor (state from before the call, fed as is at
    every run), so ``torch.arange(4.).view(2, 2)`` returned from a compiled
    function aliased that one tensor and an in-place op on a result changed
    every later result. The core now reports every tensor made from host
    data while tracing (``_C._set_created_hook``): it is a constant."""
    torch = pytest.importorskip("dragon_core.vm.torch")

    def h(x):
        return torch.arange(4.0).view(2, 2), x * 2

    c = torch.compile(h)
    x = torch.zeros(3)
    a, _ = c(x)
    a.add_(100.0)
    b, _ = c(x)
    np.testing.assert_array_equal(b.numpy(), np.arange(4.0).reshape(2, 2))
    graph = c._graph.get_graph(x._t)
    assert len(graph.captured) == 0 and len(graph.constant) >= 1


def test_non_tensor_arguments_key_the_cache_by_type_and_exact_value():
    """Finding 5: the plan cache keyed a non-tensor argument by equality
    (``2 == 2.0 == True``, ``0.0 == -0.0``) or, unhashable, by ``repr``
    (NumPy elides long arrays): a call reused a plan traced for another
    value and returned the wrong dtype or values."""
    def f(x, s):
        return x * s

    g = dg.function(f)
    xi = dg.tensor(np.arange(3, dtype=np.int32))
    assert str(g(xi, 2).dtype) == "int32"
    assert str(g(xi, 2.0).dtype) == str(f(xi, 2.0).dtype) == "float32"
    xf = dg.tensor(np.ones(2, np.float32))
    g(xf, 0.0)
    assert np.all(np.signbit(g(xf, -0.0).numpy()))
    g(xf, float("nan"))
    n = g.trace_count
    assert np.all(np.isnan(g(xf, float("nan")).numpy())) and g.trace_count == n   # NaN: one trace

    def h(x, flag):
        return x + (0.5 if flag is True else 0.0)

    gh = dg.function(h)
    gh(xf, 1)
    np.testing.assert_array_equal(gh(xf, True).numpy(), h(xf, True).numpy())

    def c(x, a):
        return x + dg.tensor(a)

    gc = dg.function(c)
    x = dg.tensor(np.zeros(2000, np.float32))
    a = np.zeros(2000, np.float32)
    b = a.copy()
    b[1000] = 5.0                      # same (elided) repr as a
    assert repr(a) == repr(b)
    gc(x, a)
    np.testing.assert_array_equal(gc(x, b).numpy(), c(x, b).numpy())
    gc(x, a.copy())
    assert gc.trace_count == 2         # equal arrays share the trace

    class Opaque:
        __hash__ = None

        def __reduce__(self):
            raise TypeError("not picklable")

    with pytest.raises(TypeError, match="cannot key the plan cache"):
        dg.function(lambda x, o: x + 1.0)(xf, Opaque())


@pytest.mark.parametrize("level", [0, 3])
def test_the_same_tensor_passed_twice_does_not_fix_the_plan(level):
    """Finding 6: traced as ``f(x, x)``, both arguments became one graph
    input (the trace names tensors by identity), so a later ``f(a, b)`` of
    the same shapes computed ``f(a, a)``."""
    def f(a, b):
        return a - b, dg.ops.sqrt(dg.ops.abs(b) + 1.0), a, b

    g = dg.function(f, opt_level=level)
    x = dg.tensor(np.ones((2, 3), np.float32))
    a = dg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    b = dg.tensor(-np.arange(6, dtype=np.float32).reshape(2, 3))
    for args in ((x, x), (a, b), (b, b), (b, a)):
        got, want = g(*args), f(*args)
        for u, v in zip(got[:2], want[:2]):
            np.testing.assert_array_equal(u.numpy(), v.numpy())
        assert got[2] is args[0] and got[3] is args[1]     # returned arguments: the caller's
    assert g.trace_count == 1


@pytest.mark.parametrize("level", [0, 3])
def test_an_argument_that_is_also_read_from_outside(level):
    """Finding 6, closure side: traced as ``f(w)`` for a function that also
    reads ``w`` itself, ``x + w`` became ``input + input``, so ``f(y)``
    computed ``y + y`` instead of ``y + w``."""
    w = dg.tensor(np.ones(2, np.float32))

    def f(x):
        return x + w, x * 1.0

    g = dg.function(f, opt_level=level)
    g(w)
    y = dg.tensor(np.array([0.0, 5.0], np.float32))
    np.testing.assert_array_equal(g(y)[0].numpy(), f(y)[0].numpy())
    w.assign(dg.tensor(np.array([2.0, 3.0], np.float32)))   # w is captured: read at every run
    np.testing.assert_array_equal(g(y)[0].numpy(), [2.0, 8.0])


def test_an_assigned_argument_is_still_the_callers_variable():
    """The fix above traces on stand-ins for the arguments; one the function
    assigns keeps its identity (the caller's tensor is rebound)."""
    v = dg.tensor(np.zeros(3, np.float32))

    @dg.function
    def bump(var, d):
        var.assign(var + d)
        return var * 2.0

    d = dg.tensor(np.ones(3, np.float32))
    bump(v, d)
    out = bump(v, d)
    np.testing.assert_array_equal(v.numpy(), [2.0, 2.0, 2.0])
    np.testing.assert_array_equal(out.numpy(), [4.0, 4.0, 4.0])
    assert bump.trace_count == 1


@pytest.mark.parametrize("autocast", [True, False])
def test_an_explicit_round_trip_through_bfloat16_survives_cast_fold(autocast):
    """Finding 7: ``matmul(...).to(bfloat16).to(float32)`` of a product
    written in float32 (autocast's matmul, or ``out_dtype=float32``):
    cast_fold folded the Cast down (the product rounds to bfloat16, exact)
    and then the Cast back up (the product is written in float32 again), so
    the rounding the program asked for was gone at O3."""
    rng = np.random.default_rng(14)
    a = dg.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    b = dg.tensor(rng.standard_normal((5, 4)).astype(np.float32))

    def f(a, b):
        if autocast:
            p = dg.ops.matmul(a, b)
        else:
            p = dg.ops.matmul(a.cast("bfloat16"), b.cast("bfloat16"), out_dtype="float32")
        return p.cast("bfloat16").cast("float32")

    if autocast:
        with dg.autocast("cpu", dtype="bfloat16"):
            want = f(a, b).numpy()
        g = dg.function(f, autocast="bfloat16")
    else:
        want = f(a, b).numpy()
        g = dg.function(f)
    got = g(a, b).numpy()
    np.testing.assert_array_equal(got, want)
    # bfloat16 values: the low 16 bits of each float32 are zero
    assert not np.any(got.view(np.uint32) & 0xFFFF)


@pytest.mark.parametrize("chunk", range(3))
def test_random_programs_under_autocast_compiled_equal_eager(chunk):
    """float32 programs traced under bfloat16 autocast against eager mode
    inside ``dg.autocast``: bits at every level, except cast_fold's
    documented widening fold at O3 (docs/mixed-precision.md)."""
    ran = 0
    seed = OFFSET + 10_000 + chunk * 40
    for s in range(seed, seed + 40):
        prog = G.random_program(s)
        if prog.dtype != "float32":
            continue
        ran += G.check_program(prog, autocast="bfloat16",
                               exact_levels=(0, 1, 2, 3, "parallel"))
    assert ran > 0


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_an_empty_16bit_product_written_in_float32(dtype):
    """Finding 8 (eager too, reached through cast_fold under float16
    autocast): a 16-bit MatMul with ``out_dtype=float32`` and an empty
    product raised "MakeWide: a float32 alias must be a dense float32
    tensor": cpu_eigen's density check refused an empty output's strides."""
    a = dg.tensor(np.zeros((2, 0, 2), np.float32)).cast(dtype)
    b = dg.tensor(np.zeros((2, 2, 3), np.float32)).cast(dtype)
    r = dg.ops.matmul(a, b, out_dtype="float32")
    assert r.shape == (2, 0, 3) and str(r.dtype) == "float32"
    r = dg.ops.matmul(a, a, transpose_b=True, out_dtype="float32")
    assert r.shape == (2, 0, 0)

    def f(a, b):
        return dg.ops.matmul(a, b).cast("float32")     # cast_fold: out_dtype=float32

    g = dg.function(f)
    assert g(a, b).shape == (2, 0, 3)
    assert any(op.type == "MatMul" and op.attr["out_dtype"].WhichOneof("value") == "dtype"
               for op in g.get_graph(a, b).op)
