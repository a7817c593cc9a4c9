"""mkldnn's MatMul and MatMulBiasAct (plugins/mkldnn/src/matmul.cc).

Values are checked against float64 NumPy written from the definition and
against cpu_eigen (pinned), with error bounds derived in docs/matmul.md:

* float32: ``|y - ref| <= (k + 2) * 2**-24 * (|A| @ |B|)`` elementwise (the
  classical bound for a k-term float32 dot product, inputs exact);
* bfloat16, inputs rounded to bfloat16 first so the reference sees what the
  kernel sees: ``|y - ref| <= 2**-8 * |ref| + (k + 2) * 2**-24 * (|A| @ |B|)``
  (rounding the float32 accumulator to bfloat16 costs at most half an ulp,
  2**-9 relative; the factor 2 is margin, not slack for a wrong kernel).

A pin does not stop a kernel from declining (the core then takes the next
candidate), so which kernel served each call is checked separately, in a
child process with oneDNN's verbose log: one oneDNN matmul per accepted
call, none for a declined one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

import ml_dtypes
import numpy as np
import pytest
from dragon_sdk.testing import (check_bad_inputs, check_eager_vs_graph,
                                strided)

import dragon_core as dg
from mkldnn_testing import cpu_eigen_result
from tests.ops.test_fused_ops import matmul_bias_act_ref

BF16 = ml_dtypes.bfloat16
U32 = 2.0 ** -24  # unit roundoff of float32


# ------------------------------------------------------------ references


def matmul_ref(a, b, bias=None, transpose_a=False, transpose_b=False,
               activation="none"):
    """act(op(a) @ op(b) + bias) in float64, NumPy matmul semantics (the
    core's reference, with no activation by default)."""
    f64 = lambda t: None if t is None else np.asarray(t, np.float64)
    return matmul_bias_act_ref(f64(a), f64(b), f64(bias), transpose_a=transpose_a,
                               transpose_b=transpose_b, activation=activation)


def error_bound(a, b, k, dtype, ref, **flags):
    """Elementwise error bound of the module docstring."""
    mag = matmul_ref(np.abs(np.asarray(a, np.float64)),
                     np.abs(np.asarray(b, np.float64)), **flags)
    bound = (k + 2) * U32 * mag + 1e-30
    if dtype == "bfloat16":
        bound = bound + 2.0 ** -8 * np.abs(ref)
    return bound


def assert_within(got, ref, bound, what):
    got = np.asarray(got, np.float64)
    assert got.shape == ref.shape, (what, got.shape, ref.shape)
    err = np.abs(got - ref)
    bad = ~(err <= bound)
    assert not bad.any(), (
        f"{what}: {bad.sum()} of {bad.size} elements out of bound; worst "
        f"error {err.max():.3g} (bound there {bound.flat[np.argmax(err)]:.3g})")


def np_dtype(name):
    return np.dtype(BF16) if name == "bfloat16" else np.dtype(name)


def operand(rng, shape, dtype, layout):
    """A random operand in `layout`: contiguous, strided (column-major, every
    other element: the SDK's strided()) or sliced (rows of a wider buffer)."""
    x = rng.standard_normal(shape).astype(np_dtype(dtype))
    if layout == "strided":
        return strided(x)
    if layout == "sliced" and x.ndim >= 1:
        wide = np.zeros(x.shape[:-1] + (x.shape[-1] + 3,), x.dtype)
        wide[..., 1:x.shape[-1] + 1] = x
        return wide[..., 1:x.shape[-1] + 1]
    return x


def stored_shape(shape, transpose):
    shape = tuple(shape)
    if transpose and len(shape) >= 2:
        return shape[:-2] + (shape[-1], shape[-2])
    return shape


def run(op, arrays, **attrs):
    tensors = [dg.from_numpy(a) for a in arrays]
    fn = dg.ops.matmul if op == "MatMul" else dg.ops.matmul_bias_act
    return fn(*tensors, **attrs).numpy()


# Logical (after the transpose flags) shapes of a and b.
SHAPES = [
    ((3, 4), (4, 5)),
    ((1, 1), (1, 1)),
    ((1, 17), (17, 1)),
    ((4,), (4,)),              # dot product: a 0-d result
    ((17,), (17, 3)),          # vector @ matrix
    ((3, 17), (17,)),          # matrix @ vector
    ((2, 3, 4), (4, 5)),       # batch @ matrix
    ((3,), (2, 3, 5)),         # vector @ batch
    ((2, 1, 3, 4), (5, 4, 2)),  # broadcast batch on both sides
    ((1, 3, 17), (4, 17, 3)),  # a broadcast over b's batch
    ((129, 17), (17, 3)),
    ((3, 129), (129, 17)),
    ((33, 70), (70, 65)),
    ((2, 2, 1, 2, 3, 3), (3, 1)),  # rank 6
]
EMPTY_SHAPES = [
    ((0, 4), (4, 3)),
    ((3, 4), (4, 0)),
    ((2, 0, 4), (4, 3)),
    ((0, 2, 3), (3, 2)),
]
ZERO_K_SHAPES = [((3, 0), (0, 5)), ((2, 3, 0), (0,)), ((0,), (0, 4))]
FLAGS = [{}, {"transpose_a": True}, {"transpose_b": True},
         {"transpose_a": True, "transpose_b": True}]
LAYOUTS = ["contiguous", "strided", "sliced"]


def case_arrays(rng, sa, sb, flags, dtype, layout):
    a = operand(rng, stored_shape(sa, flags.get("transpose_a")), dtype, layout)
    b = operand(rng, stored_shape(sb, flags.get("transpose_b")), dtype, layout)
    return a, b


def check_case(sa, sb, flags, dtype, layout, seed):
    rng = np.random.default_rng(seed)
    a, b = case_arrays(rng, sa, sb, flags, dtype, layout)
    ref = matmul_ref(a, b, **flags)
    got = run("MatMul", [a, b], **flags)
    assert got.dtype == np_dtype(dtype)
    assert_within(got, ref, error_bound(a, b, sa[-1], dtype, ref, **flags),
                  f"MatMul {sa} @ {sb} {flags} {dtype} {layout}")


# ------------------------------------------------------------ selection


@pytest.mark.parametrize("op", ["MatMul", "MatMulBiasAct"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_explain_names_the_mkldnn_kernel(op, dtype):
    text = dg.plugins.explain(op, "cpu", dtype)
    winner = [line for line in text.splitlines() if "winner" in line]
    if dtype == "bfloat16" and f"{op}Bf16Avx512 [plugin cpu_eigen] priority=20" in text:
        # cpu_eigen's AVX512-BF16 kernel (priority 20, on CPUs with
        # AVX512_BF16 and no AMX) comes first; its supports() leaves the
        # rest to oneDNN.
        assert winner and f"{op}Bf16Avx512 from cpu_eigen" in winner[0], text
        assert f"2. {op}OneDNN [plugin mkldnn]" in text, text
    elif dtype == "bfloat16" and f"{op}Bf16Avx512" in text:
        # Where oneDNN runs AMX tiles cpu_eigen's kernel ranks below it
        # (priority 5; tests/ops/test_bf16_gemm_amx_rank.py).
        assert f"{op}Bf16Avx512 [plugin cpu_eigen] priority=5" in text, text
        assert winner and f"{op}OneDNN from mkldnn" in winner[0], text
    elif dtype == "float32" and op == "MatMul" and "MatMulBatchedF32Avx512" in text:
        # cpu_eigen's float32 batched kernel (priority 20, x86-64-v4) comes
        # first; its supports() takes only batches of small items.
        assert winner and "MatMulBatchedF32Avx512 from cpu_eigen" in winner[0], text
        assert "2. MatMulOneDNN [plugin mkldnn]" in text, text
    else:
        assert winner and "mkldnn" in winner[0], text
    assert "has supports()" in text, text


def test_no_float64_kernel_is_registered():
    for op in ("MatMul", "MatMulBiasAct"):
        for k in dg.plugins.kernels(op):
            if k.get("plugin") == "mkldnn":
                assert "float64" not in str(k.get("dtypes")), k


def _child(code, **env):
    full = dict(os.environ, **env)
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                         capture_output=True, text=True, env=full,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    return out


def test_disabled_plugin_leaves_matmul_to_cpu_eigen():
    out = _child("""
        import numpy as np, dragon_core as dg
        a = np.arange(12, dtype=np.float32).reshape(3, 4)
        y = dg.ops.matmul(dg.tensor(a), dg.tensor(a.T.copy())).numpy()
        text = dg.plugins.explain("MatMul", "cpu", "float32")
        print([l for l in text.splitlines() if "winner" in l][0])
        print(float(np.abs(y - a.astype(np.float64) @ a.T).max()))
    """, DRAGON_DISABLE_PLUGINS="mkldnn")
    winner, err = out.stdout.strip().splitlines()
    assert "cpu_eigen" in winner and "mkldnn" not in winner, out.stdout
    assert float(err) == 0.0


# Calls the child of test_kernel_choice_is_as_documented runs, with the
# oneDNN executions each must log: [matmuls, reorders]. No matmul: declined
# by supports() (cpu_eigen serves it) or trivial (k = 0, filled directly).
SERVED_CASES = [
    ("contiguous", {}, [1, 0]),
    ("transposed flags", {"transpose_a": True, "transpose_b": True}, [1, 0]),
    ("strided views", {"layout": "strided"}, [1, 0]),
    ("sliced rows", {"layout": "sliced"}, [1, 0]),
    ("matrix @ vector with bias", {"vector": True}, [1, 0]),
    ("zero-stride batch (broadcast)", {"expanded": True}, [1, 0]),
    ("no unit stride (packed)", {"every_other": True}, [1, 1]),
    ("k = 0", {"k0": True}, [0, 0]),
    ("rank 13 (declined)", {"rank13": True}, [0, 0]),
]


def test_kernel_choice_is_as_documented():
    """oneDNN's verbose log shows one matmul execution for each accepted
    call and none for declined (or trivial) ones."""
    code = """
        import ctypes, json, sys
        import numpy as np, dragon_core as dg
        from dragon_sdk.testing import strided
        libc = ctypes.CDLL(None)
        cases = json.loads(sys.argv[1])
        rng = np.random.default_rng(0)
        for name, opts, _ in cases:
            a = rng.standard_normal((6, 8)).astype(np.float32)
            b = rng.standard_normal((8, 5)).astype(np.float32)
            args = {k: v for k, v in opts.items() if k.startswith("trans")}
            if args.get("transpose_a"): a = a.T.copy()
            if args.get("transpose_b"): b = b.T.copy()
            if opts.get("layout") == "strided": a, b = strided(a), strided(b)
            if opts.get("layout") == "sliced":
                a = np.pad(a, ((0, 0), (0, 3)))[:, :8]
            if opts.get("every_other"):
                a = rng.standard_normal((12, 16)).astype(np.float32)[::2, ::2]
            if opts.get("expanded"):
                a = np.broadcast_to(a, (3, 6, 8))
                b = rng.standard_normal((3, 8, 5)).astype(np.float32)
            if opts.get("k0"):
                a, b = a[:, :0], b[:0]
            if opts.get("rank13"):
                a = a.reshape((1,) * 11 + a.shape)
            libc.printf(b"CASE %s\\n", name.encode()); libc.fflush(None)
            if opts.get("vector"):
                y = dg.ops.matmul_bias_act(dg.tensor(a), dg.tensor(b[:, 0]),
                                           dg.tensor(a[:, 0].copy()))
            else:
                y = dg.ops.matmul(dg.from_numpy(a), dg.from_numpy(b), **args)
            libc.printf(b"DONE\\n"); libc.fflush(None)
    """
    full = dict(os.environ, ONEDNN_VERBOSE="1")
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code),
         json.dumps(SERVED_CASES)], capture_output=True, text=True, env=full,
        timeout=300)
    assert out.returncode == 0, out.stderr
    counts, current = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
            counts[current] = [0, 0]
        elif line.startswith("onednn_verbose") and ",exec," in line:
            kind = line.split(",")[3]
            assert kind in ("matmul", "reorder"), line
            counts[current][kind == "reorder"] += 1
    for name, _, want in SERVED_CASES:
        assert counts[name] == want, (name, out.stdout)


def test_primitive_cache_counts():
    """Repeated shapes hit the cache; each new shape misses once."""
    out = _child("""
        import numpy as np, dragon_core as dg
        for n in (3, 5, 3, 5, 3):
            x = dg.tensor(np.ones((n, 7), np.float32))
            w = dg.tensor(np.ones((7, 2), np.float32))
            for _ in range(10):
                dg.ops.matmul(x, w)
    """, DRAGON_MKLDNN_CACHE_STATS="1")
    line = [l for l in out.stderr.splitlines() if "primitive cache" in l]
    assert line, out.stderr
    stats = dict(kv.split("=") for kv in line[-1].split(": ")[1].split())
    assert stats["misses"] == "2" and stats["size"] == "2", line


# ------------------------------------------------------------ numerics


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(f) or "plain")
@pytest.mark.parametrize("sa, sb", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_matches_float64_numpy(sa, sb, flags, layout, dtype):
    check_case(sa, sb, flags, dtype, layout, seed=len(sa) + 7 * sb[-1])


@pytest.mark.parametrize("sa, sb", SHAPES, ids=str)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(f) or "plain")
def test_matmul_matches_cpu_eigen(sa, sb, flags):
    rng = np.random.default_rng(11)
    a, b = case_arrays(rng, sa, sb, flags, "float32", "contiguous")
    ours = run("MatMul", [a, b], **flags)
    theirs = cpu_eigen_result("MatMul", lambda: run("MatMul", [a, b], **flags))
    ref = matmul_ref(a, b, **flags)
    # Both are within the bound of the reference, so within twice of each other.
    bound = 2 * error_bound(a, b, sa[-1], "float32", ref, **flags)
    assert_within(ours, theirs.astype(np.float64), bound, "mkldnn vs cpu_eigen")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("sa, sb", EMPTY_SHAPES, ids=str)
def test_empty_outputs(sa, sb, dtype):
    rng = np.random.default_rng(0)
    a, b = case_arrays(rng, sa, sb, {}, dtype, "contiguous")
    got = run("MatMul", [a, b])
    assert got.shape == np.matmul(a.astype(np.float64), b.astype(np.float64)).shape


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("sa, sb", ZERO_K_SHAPES, ids=str)
def test_empty_inner_axis_gives_act_of_bias(sa, sb, dtype):
    """k = 0: y = act(0 + bias), not uninitialised memory."""
    rng = np.random.default_rng(1)
    a, b = case_arrays(rng, sa, sb, {}, dtype, "contiguous")
    ref = matmul_ref(a, b)
    got = run("MatMul", [a, b])
    np.testing.assert_array_equal(got.astype(np.float64), np.zeros(ref.shape))
    if ref.ndim:
        bias = operand(rng, (ref.shape[-1],), dtype, "strided")
        for act in ("none", "relu"):
            got = run("MatMulBiasAct", [a, b, bias], activation=act)
            want = matmul_ref(a, b, bias, activation=act)
            np.testing.assert_array_equal(got.astype(np.float64), want)


def test_bfloat16_long_inner_axis_accumulates_in_float32():
    """k = 4096: accumulating in bfloat16 would miss the bound by far."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((9, 4096)).astype(BF16)
    b = rng.standard_normal((4096, 33)).astype(BF16)
    ref = matmul_ref(a, b)
    got = run("MatMul", [a, b])
    assert_within(got, ref, error_bound(a, b, 4096, "bfloat16", ref),
                  "bf16 k=4096")


def test_large_float32_product():
    rng = np.random.default_rng(6)
    a = rng.standard_normal((257, 300)).astype(np.float32)
    b = rng.standard_normal((300, 129)).astype(np.float32)
    for x, y, flags in [(a, b, {}), (b.T, a.T, {}),
                        (a.T.copy(), b, {"transpose_a": True})]:
        ref = matmul_ref(x, y, **flags)
        assert_within(run("MatMul", [x, y], **flags), ref,
                      error_bound(x, y, 300, "float32", ref, **flags), "large")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_broadcast_and_declined_layouts(dtype):
    """No unit stride (packed first), a zero-stride batch (oneDNN's
    broadcast) and rank 13 (declined: cpu_eigen, float32 only)."""
    rng = np.random.default_rng(2)
    dt = np_dtype(dtype)
    a = rng.standard_normal((12, 16)).astype(dt)[::2, ::2]
    b = np.broadcast_to(rng.standard_normal((8, 3)).astype(dt), (4, 8, 3))
    c = np.broadcast_to(rng.standard_normal((1, 6, 8)).astype(dt), (4, 6, 8))
    pairs = [(a, a.T.copy()), (a, b), (c, b), (strided(c), a.T)]
    if dtype == "float32":
        pairs.append((a.reshape((1,) * 11 + a.shape), a.T))
    for x, y in pairs:
        ref = matmul_ref(x, y)
        assert_within(run("MatMul", [x, y]), ref,
                      error_bound(x, y, x.shape[-1], dtype, ref),
                      f"{x.shape} {x.strides} @ {y.shape} {y.strides}")


# ------------------------------------------------------------ fused op


BIAS_SHAPES = [((4, 3), (3, 5)), ((2, 4, 17), (17, 129)), ((17,), (17, 3)),
               ((3, 17), (17,)), ((2, 1, 3, 4), (5, 4, 2))]


@pytest.mark.parametrize("activation", ["relu", "none"])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: "-".join(f) or "plain")
@pytest.mark.parametrize("sa, sb", BIAS_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_matmul_bias_act_matches_numpy(sa, sb, flags, layout, activation,
                                       dtype):
    rng = np.random.default_rng(3)
    a, b = case_arrays(rng, sa, sb, flags, dtype, layout)
    n = matmul_ref(a, b, **flags).shape[-1]
    bias = operand(rng, (n,), dtype, layout)
    ref = matmul_ref(a, b, bias, activation=activation, **flags)
    got = run("MatMulBiasAct", [a, b, bias], activation=activation, **flags)
    bound = error_bound(a, b, sa[-1], dtype, ref, **flags)
    assert_within(got, ref, bound, f"MatMulBiasAct {sa} {sb} {flags}")
    # No bias: the activation alone.
    got = run("MatMulBiasAct", [a, b], activation=activation, **flags)
    ref = matmul_ref(a, b, activation=activation, **flags)
    assert_within(got, ref, error_bound(a, b, sa[-1], dtype, ref, **flags),
                  "MatMulBiasAct without bias")


@pytest.mark.parametrize("shapes", [((64, 96), (96, 48)),
                                    ((3, 17, 129), (129, 33))], ids=str)
def test_fused_equals_unfused(shapes):
    """One primitive (bias + relu post-op) equals MatMul, Add, Relu run one
    after the other, bit for bit in float32: oneDNN adds the bias to the
    float32 accumulator MatMul would have stored. (bfloat16 has no Add
    kernel to compare with; its fused results are checked against NumPy.)"""
    rng = np.random.default_rng(4)
    a = rng.standard_normal(shapes[0]).astype(np.float32)
    b = rng.standard_normal(shapes[1]).astype(np.float32)
    c = rng.standard_normal(shapes[1][-1]).astype(np.float32)
    ta, tb, tc = dg.from_numpy(a), dg.from_numpy(b), dg.from_numpy(c)
    fused = dg.ops.matmul_bias_act(ta, tb, tc).numpy()
    plain = dg.ops.relu(dg.ops.matmul(ta, tb) + tc).numpy()
    np.testing.assert_array_equal(fused, plain)
    assert (fused == 0).any() and (fused > 0).any()


# ------------------------------------------------------------ gradients


# Logical (after the transpose flags) shapes.
GRAD_CASES = [((4, 3), (3, 5), {}), ((2, 4, 3), (3, 5), {"transpose_b": True}),
              ((4, 3), (2, 3, 5), {"transpose_a": True}), ((3,), (3, 4), {}),
              ((4, 3), (3,), {}),
              ((2, 1, 4, 3), (5, 3, 2), {"transpose_a": True,
                                         "transpose_b": True})]


def _grads_ref(a, b, dy, bias, flags, activation):
    """d<y, dy>/d(a, b, bias) in float64 from the definition."""
    ta, tb = flags.get("transpose_a", False), flags.get("transpose_b", False)
    A = np.swapaxes(a, -1, -2) if ta and a.ndim > 1 else a
    B = np.swapaxes(b, -1, -2) if tb and b.ndim > 1 else b
    A2 = A[None, :] if A.ndim == 1 else A
    B2 = B[:, None] if B.ndim == 1 else B
    z = np.matmul(A2, B2) + (0 if bias is None else
                             (bias if B.ndim > 1 else bias[:, None]))
    g = dy.reshape(z.shape) * ((z > 0) if activation == "relu" else 1.0)
    gA = np.matmul(g, np.swapaxes(B2, -1, -2))
    gB = np.matmul(np.swapaxes(A2, -1, -2), g)

    def reduce_to(x, shape2):
        while x.ndim > len(shape2):
            x = x.sum(0)
        for i, n in enumerate(shape2):
            if n == 1 and x.shape[i] != 1:
                x = x.sum(i, keepdims=True)
        return x
    gA = reduce_to(gA, A2.shape).reshape(A.shape)
    gB = reduce_to(gB, B2.shape).reshape(B.shape)
    if ta and a.ndim > 1:
        gA = np.swapaxes(gA, -1, -2)
    if tb and b.ndim > 1:
        gB = np.swapaxes(gB, -1, -2)
    out = [gA, gB]
    if bias is not None:
        out.append(g.reshape(-1, g.shape[-1]).sum(0) if B.ndim > 1
                   else g.reshape(-1, g.shape[-2]).sum(0))
    return out


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("sa, sb, flags", GRAD_CASES, ids=str)
def test_float32_gradients_through_mkldnn(sa, sb, flags, fused):
    """The gradient rules' own MatMul calls (with transpose flags) run on
    this plugin in float32; they must match the float64 definition. (The
    rule's finite-difference check runs in float64, i.e. on cpu_eigen, in
    tests/grad/test_grad_fused.py.)"""
    rng = np.random.default_rng(8)
    # Away from relu's kink so the reference mask is the kernel's mask.
    def draw(shape):
        return (rng.uniform(0.2, 1.0, shape) *
                rng.choice([-1.0, 1.0], shape)).astype(np.float32)
    a = draw(stored_shape(sa, flags.get("transpose_a")))
    b = draw(stored_shape(sb, flags.get("transpose_b")))
    ref_y = matmul_ref(a, b, **flags)
    bias = draw((ref_y.shape[-1],)) if fused and ref_y.ndim else None
    dy = rng.standard_normal(ref_y.shape).astype(np.float32)
    ts = [dg.tensor(x) for x in (a, b) + ((bias,) if bias is not None else ())]
    with dg.GradientTape() as tape:
        tape.watch(ts)
        if fused:
            y = dg.ops.matmul_bias_act(*ts, activation="relu", **flags)
        else:
            y = dg.ops.matmul(*ts, **flags)
        loss = dg.ops.sum(y * dg.tensor(dy))
    got = tape.gradient(loss, ts)
    want = _grads_ref(a.astype(np.float64), b.astype(np.float64),
                      dy.astype(np.float64),
                      None if bias is None else bias.astype(np.float64),
                      flags, "relu" if fused else "none")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5)


def test_eager_equals_graph_with_gradients():
    rng = np.random.default_rng(9)
    x = rng.standard_normal((16, 20)).astype(np.float32)
    w1 = rng.standard_normal((20, 12)).astype(np.float32)
    b1 = rng.standard_normal(12).astype(np.float32)
    w2 = rng.standard_normal((12, 3)).astype(np.float32)

    def mlp(x, w1, b1, w2):
        h = dg.ops.relu(dg.ops.matmul(x, w1) + b1)
        return dg.ops.matmul(h, w2, transpose_b=False)

    check_eager_vs_graph(mlp, x, w1, b1, w2, grads=True, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------ threads


def test_concurrent_threads_share_the_cache():
    """Eight threads run many shapes at once (cache misses racing with hits
    and LRU updates) and every result is right."""
    errors = []
    barrier = threading.Barrier(8)

    def worker(tid):
        rng = np.random.default_rng(100 + tid)
        barrier.wait()
        try:
            for it in range(30):
                m, k, n = 1 + (tid + it) % 7, 3 + it % 5, 2 + tid % 4
                dtype = "bfloat16" if (tid + it) % 3 == 0 else "float32"
                a = rng.standard_normal((2, m, k)).astype(np_dtype(dtype))
                b = rng.standard_normal((k, n)).astype(np_dtype(dtype))
                ref = matmul_ref(a, b)
                got = run("MatMul", [a, b])
                bound = error_bound(a, b, k, dtype, ref)
                if not (np.abs(got.astype(np.float64) - ref) <= bound).all():
                    errors.append((tid, it, m, k, n, dtype))
        except Exception as e:  # reported below, with the thread
            errors.append((tid, repr(e)))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


def test_parallel_graph_runs_two_matmuls_at_once():
    """A graph with two independent products, run by the executor on two
    worker threads, equals its eager result on every call."""
    rng = np.random.default_rng(10)

    def two(a, b, c, d):
        return dg.ops.matmul(a, b) + dg.ops.matmul(c, d, transpose_b=True)

    f = dg.function(two, parallel=2)
    for it in range(20):
        m = 5 + it % 3
        a = rng.standard_normal((m, 33)).astype(np.float32)
        b = rng.standard_normal((33, 17)).astype(np.float32)
        c = rng.standard_normal((m, 65)).astype(np.float32)
        d = rng.standard_normal((17, 65)).astype(np.float32)
        args = [dg.tensor(x) for x in (a, b, c, d)]
        got = f(*args).numpy()
        ref = matmul_ref(a, b) + matmul_ref(c, d, transpose_b=True)
        bound = (error_bound(a, b, 33, "float32", matmul_ref(a, b)) +
                 error_bound(c, d, 65, "float32", ref, transpose_b=True) +
                 U32 * np.abs(ref))
        assert_within(got, ref, bound, f"parallel graph call {it}")


# ------------------------------------------------------------ bad inputs


@pytest.mark.parametrize("op, shapes", [
    ("MatMul", [(3, 4), (4, 5)]),
    ("MatMulBiasAct", [(3, 4), (4, 5), (5,)]),
])
def test_bad_inputs_give_clean_errors(op, shapes):
    rng = np.random.default_rng(12)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    check_bad_inputs(op, arrays)


# ------------------------------------------- attention head permutes (views)
# Self-contained block (branch attn): Transpose is a strided view, so the
# encoder's head split (0, 2, 1, 3) and k's (0, 1, 3, 2) reach MatMul as
# permuted operands; oneDNN must read them in place (one matmul execution,
# no reorder), in float32 and bfloat16.

@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_head_permuted_views_are_read_in_place(dtype):
    code = """
        import ctypes, sys
        import numpy as np, dragon_core as dg
        from dragon_core import ops
        libc = ctypes.CDLL(None)
        dtype = sys.argv[1]
        b, s, h, d = 2, 16, 4, 8
        x = dg.tensor(np.random.default_rng(0).standard_normal((b, s, h * d))
                      .astype(np.float32)).to(None, dtype=dtype)
        q = ops.transpose(ops.reshape(x, shape=[b, s, h, d]), axes=[0, 2, 1, 3])
        kt = ops.transpose(q, axes=[0, 1, 3, 2])
        assert not q.is_contiguous() and not kt.is_contiguous()
        ref = x.to(None, dtype="float64").numpy().reshape(b, s, h, d).transpose(0, 2, 1, 3)
        for name, fn, want in [
                ("q @ k^T", lambda: ops.matmul(q, kt), ref @ ref.transpose(0, 1, 3, 2)),
                ("k^T-flag", lambda: ops.matmul(q, q, transpose_b=True),
                 ref @ ref.transpose(0, 1, 3, 2))]:
            libc.printf(b"CASE %s\\n", name.encode()); libc.fflush(None)
            y = fn()
            libc.printf(b"DONE\\n"); libc.fflush(None)
            got = y.to(None, dtype="float64").numpy()
            tol = 1e-5 if dtype == "float32" else 3e-2
            assert np.abs(got - want).max() <= tol * np.abs(want).max(), name
    """
    # (DRAGON_CPU_EIGEN_BF16_GEMM=off: cpu_eigen's AVX512-BF16 kernel would
    # take the bfloat16 k^T products.)
    full = dict(os.environ, ONEDNN_VERBOSE="1", DRAGON_CPU_EIGEN_BF16_GEMM="off",
                DRAGON_CPU_EIGEN_BATCHED_GEMM="off")
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), dtype],
                         capture_output=True, text=True, env=full, timeout=300)
    assert out.returncode == 0, out.stderr
    counts, current = {}, None
    for line in out.stdout.splitlines():
        if line.startswith("CASE "):
            current = line[5:]
            counts[current] = [0, 0]
        elif line.startswith("DONE"):
            current = None
        elif current and line.startswith("onednn_verbose") and ",exec," in line:
            kind = line.split(",")[3]
            counts[current][kind == "reorder"] += 1
    assert counts == {"q @ k^T": [1, 0], "k^T-flag": [1, 0]}, out.stdout
