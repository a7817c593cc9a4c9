"""The ``pattern_fusion`` pass (docs/graph.md) and ``dragon_core.fusion``.

Unit tests run the pass on hand-built GraphDefs (tests/graph/fixtures.py)
with the standard patterns registered explicitly (so they do not depend on
which plugin declares them), and compare each fused graph's results with the
unfused graph's, run by the executor. End-to-end tests trace eval-mode and
training models with ``@dg.function`` and compare fused against unfused
graphs (``DRAGON_DISABLE_PASSES=pattern_fusion``) and against NumPy float64.
``python tests/graph/test_pattern_fusion.py`` times bench/bench_graph.py's
MLP training step and forward pass in graph mode with and without the pass.
Float32 tolerance: rtol 1e-5 / atol 1e-5 (a fused kernel sums in another
order; folding batch norm rounds w * s once more).
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import fusion, nn
from dragon_core._graph.passes import run_passes
from dragon_core._graph.passes.pattern_fusion import ANNOTATION, PATTERN_ANNOTATION, pattern_fusion

try:
    from .fixtures import graph, op_summary
    from .test_fusion import run_graph
except ImportError:  # run as a script
    from fixtures import graph, op_summary
    from test_fusion import run_graph

F16, F32, F64 = "float16", "float32", "float64"
RTOL = {F32: 1e-5, F64: 1e-12}


@pytest.fixture(autouse=True)
def standard_patterns():
    """Declare the standard patterns for every test of this file."""
    added = [p for p in fusion.STANDARD_PATTERNS if p.name not in fusion._registered]
    for p in added:
        fusion.register_pattern(p)
    yield
    for p in added:
        fusion.unregister_pattern(p.name)


def _rng():
    return np.random.default_rng(7)


def _fused(g):
    return [op for op in g.op if ANNOTATION in op.attr]


def _check_same_results(g, new, feeds, dtype=F32):
    for a, b in zip(run_graph(g, feeds), run_graph(new, feeds)):
        np.testing.assert_allclose(b, a, rtol=RTOL[dtype], atol=RTOL[dtype])


def conv_graph(tail, bias_shape=(1, 4, 1, 1), dtype=F32, extra_outputs=(), device=None,
               x_shape=(2, 3, 7, 6)):
    """x -> Conv2d(w; 3x3, pads 1, stride 1) -> ``tail`` ops; tail items are
    ``"add"``, ``"relu"``, ``("bn", training)``; the result is ``out``."""
    ops, prev, k = [("Conv2d", ["x", "w"], ["c"], {"pads": [1, 1]})], "c", 0
    captured = [("w", dtype, (4, 3, 3, 3))]
    for step in tail:
        out = f"t{k}"
        if step == "add":
            ops.append(("Add", [prev, "b"], [out], {}))
            captured.append(("b", dtype, bias_shape))
        elif step == "relu":
            ops.append(("Relu", [prev], [out], {}))
        else:
            ops.append(("BatchNorm", [prev, "gamma", "beta", "mean", "var"],
                        [out, f"{out}_m", f"{out}_v"], {"training": step[1], "eps": 1e-3}))
            captured += [(n, dtype, (4,)) for n in ("gamma", "beta", "mean", "var")]
        prev, k = out, k + 1
    g = graph(inputs=[("x", dtype, x_shape)], ops=ops, outputs=[prev, *extra_outputs],
              captured=captured)
    if device is not None:
        g.metadata["device"] = device
    return g


def conv_feeds(g, dtype=F32, seed=0):
    rng = np.random.default_rng(seed)
    info = {v.name: tuple(v.shape) for v in g.value_info}
    names = list(g.input) + list(g.captured)
    feeds = {n: rng.standard_normal(info[n]).astype(dtype) for n in names}
    if "var" in feeds:
        feeds["var"] = np.abs(feeds["var"]) + 0.1
    return feeds


def matmul_graph(tail, bias_shape=(5,), dtype=F32, a_shape=(6, 3), extra_outputs=()):
    ops, prev = [("MatMul", ["a", "w"], ["m"], {"transpose_b": True})], "m"
    captured = [("w", dtype, (5, a_shape[-1]))]
    for k, step in enumerate(tail):
        if step == "add":
            ops.append(("Add", ["bias", prev], [f"t{k}"], {}))   # the bias first: commutes
            captured.append(("bias", dtype, bias_shape))
        else:
            ops.append(("Relu", [prev], [f"t{k}"], {}))
        prev = f"t{k}"
    return graph(inputs=[("a", dtype, a_shape)], ops=ops, outputs=[prev, *extra_outputs],
                 captured=captured)


# ------------------------------------------------------------ firing

@pytest.mark.parametrize("dtype", [F32, F64])
@pytest.mark.parametrize("tail,name,act", [
    (["add", "relu"], "conv2d_bias_relu", "relu"),
    (["add"], "conv2d_bias", "none"),
    (["relu"], "conv2d_relu", "relu"),
    ([("bn", False), "relu"], "conv2d_batchnorm_relu", "relu"),
    ([("bn", False)], "conv2d_batchnorm", "none"),
])
def test_conv_patterns_fire_and_keep_results(tail, name, act, dtype):
    g = conv_graph(tail, dtype=dtype)
    before = op_summary(g)
    new = pattern_fusion(g)
    assert op_summary(g) == before   # the argument is left untouched
    (op,) = _fused(new)
    assert op.type == "Conv2dBiasAct" and op.attr[PATTERN_ANNOTATION].s == name
    assert op.attr["activation"].s == act and list(op.attr["pads"].ints.values) == [1, 1]
    assert op.attr[ANNOTATION].s.split(",") == [o.name for o in g.op]
    assert op.output[0] == g.op[-1].output[0]
    assert not {o.name for o in g.op} & {o.name for o in new.op}
    assert not {o.type for o in new.op} & {"Conv2d", "Relu", "BatchNorm"}
    names = {v.name for v in new.value_info}
    assert "c" not in names and g.op[-1].output[0] in names
    _check_same_results(g, new, conv_feeds(g, dtype), dtype)


@pytest.mark.parametrize("tail,name,act", [
    (["add", "relu"], "matmul_bias_relu", "relu"),
    (["add"], "matmul_bias", "none"),
    (["relu"], "matmul_relu", "relu"),
])
@pytest.mark.parametrize("bias_shape", [(5,), (1, 5)])
def test_matmul_patterns_fire_and_keep_results(tail, name, act, bias_shape):
    g = matmul_graph(tail, bias_shape=bias_shape)
    new = pattern_fusion(g)
    (op,) = _fused(new)
    assert (op.type, op.attr[PATTERN_ANNOTATION].s, op.attr["activation"].s) == \
        ("MatMulBiasAct", name, act)
    assert op.attr["transpose_b"].b and not op.attr["transpose_a"].b
    reshapes = [o for o in new.op if o.type == "Reshape"]
    assert len(reshapes) == (1 if "add" in tail and bias_shape == (1, 5) else 0)
    _check_same_results(g, new, conv_feeds(g))


@pytest.mark.parametrize("bias_shape", [(4, 1, 1), (1, 4, 1, 1)])
def test_per_channel_bias_shapes_fire(bias_shape):
    new = pattern_fusion(conv_graph(["add", "relu"], bias_shape=bias_shape))
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct"]


def test_edge_shapes_keep_results():
    """An empty batch, 1x1 images, a single output row."""
    for x_shape in [(0, 3, 5, 5), (1, 3, 1, 1), (3, 3, 2, 9)]:
        g = conv_graph([("bn", False), "relu"], x_shape=x_shape)
        new = pattern_fusion(g)
        assert [o.type for o in _fused(new)] == ["Conv2dBiasAct"]
        _check_same_results(g, new, conv_feeds(g))
    for a_shape in [(0, 3), (1, 3), (2, 4, 3)]:
        g = matmul_graph(["add", "relu"], a_shape=a_shape)
        new = pattern_fusion(g)
        assert [o.type for o in _fused(new)] == ["MatMulBiasAct"]
        _check_same_results(g, new, conv_feeds(g))


def test_batchnorm_fold_matches_numpy_float64():
    """The folded filter and bias, written out: y = relu(conv(x, w s) + (b - mean) s + beta)."""
    g = graph(inputs=[("x", F64, (2, 3, 5, 5))],
              ops=[("Conv2d", ["x", "w", "b"], ["c"], {}),
                   ("BatchNorm", ["c", "gamma", "beta", "mean", "var"], ["y", "m", "v"],
                    {"training": False, "eps": 1e-3}),
                   ("Relu", ["y"], ["r"], {})],
              outputs=["r"],
              captured=[("w", F64, (4, 3, 3, 3))] + [(n, F64, (4,)) for n in
                                                     ("b", "gamma", "beta", "mean", "var")])
    new = pattern_fusion(g)
    assert [o.type for o in _fused(new)] == ["Conv2dBiasAct"]
    feeds = conv_feeds(g, F64)
    (got,) = run_graph(new, feeds)
    from tests.ops.test_conv import conv2d_ref
    f = feeds
    z = conv2d_ref(f["x"], f["w"], f["b"])
    s = f["gamma"] / np.sqrt(f["var"] + 1e-3)
    want = np.maximum((z - f["mean"][:, None, None]) * s[:, None, None]
                      + f["beta"][:, None, None], 0)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_constant_batchnorm_parameters_fold_to_constants():
    rng = _rng()
    consts = [("w", rng.standard_normal((4, 3, 3, 3)).astype(F32))]
    consts += [(n, rng.random(4).astype(F32) + 0.5) for n in ("gamma", "beta", "mean", "var")]
    g = graph(inputs=[("x", F32, (1, 3, 6, 6))], constants=consts,
              ops=[("Conv2d", ["x", "w"], ["c"], {}),
                   ("BatchNorm", ["c", "gamma", "beta", "mean", "var"], ["y", "m", "v"],
                    {"training": False}),
                   ("Relu", ["y"], ["r"], {})], outputs=["r"])
    new = pattern_fusion(g)
    assert [o.type for o in new.op] == ["Conv2dBiasAct"]   # the helper ops were folded
    assert set(new.op[0].input[1:]) <= {c.name for c in new.constant}
    _check_same_results(g, new, {"x": rng.standard_normal((1, 3, 6, 6)).astype(F32)})


def test_inplace_annotations_are_recomputed():
    """The fused op reads the conv's input where the Relu was. A Neg between
    them that was the last reader of that input (so ``inplace`` let it
    overwrite it) must lose its annotation, or the conv would read -x."""
    from dragon_core._graph.passes.inplace import inplace

    g = graph(inputs=[("i", F32, (2, 3, 5, 5))],
              captured=[("w", F32, (4, 3, 3, 3)), ("b", F32, (1, 4, 1, 1))],
              ops=[("Neg", ["i"], ["x"], {}), ("Conv2d", ["x", "w"], ["c"], {}),
                   ("Add", ["c", "b"], ["z"], {}), ("Neg", ["x"], ["q"], {}),
                   ("Relu", ["z"], ["r"], {})], outputs=["r", "q"])
    g = inplace(g)
    assert "_inplace_input" in g.op[3].attr
    new = pattern_fusion(g)
    assert [(o.type, "_inplace_input" in o.attr) for o in new.op] == \
        [("Neg", False), ("Neg", False), ("Reshape", False), ("Conv2dBiasAct", False)]
    _check_same_results(g, new, conv_feeds(g))


# ------------------------------------------------------------ not firing

def _unchanged(g):
    new = pattern_fusion(g)
    assert op_summary(new) == op_summary(g) and not _fused(new)
    return new


def test_intermediate_with_another_reader_blocks_the_chain():
    # The Add's output is also a graph output: conv -> add -> relu cannot
    # fuse, conv -> add still can (its output stays visible).
    new = pattern_fusion(conv_graph(["add", "relu"], extra_outputs=["t0"]))
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct", "Relu"]
    assert new.op[1].attr["activation"].s == "none"
    # The conv output is read by another op too: nothing fuses.
    g = conv_graph(["relu"])
    g.op.add().CopyFrom(graph(inputs=[("c", F32, (2, 4, 7, 6))],
                              ops=[("Neg", ["c"], ["n"], {})]).op[0])
    g.output.append("n")
    _unchanged(g)


def test_no_kernel_for_the_device_or_dtype():
    _unchanged(conv_graph(["add", "relu"], device="nodevice"))
    _unchanged(conv_graph(["add", "relu"], device="nodevice:1"))
    # int32 has a Conv2d kernel but no Conv2dBiasAct one (float16 has both).
    assert "int32" not in {d for k in dg._C.kernels("Conv2dBiasAct")
                           for d in k["dtypes"].split(", ")}
    _unchanged(conv_graph(["add", "relu"], dtype="int32"))
    fused = pattern_fusion(conv_graph(["add", "relu"], device="cpu:0"))
    assert [o.type for o in _fused(fused)] == ["Conv2dBiasAct"]


@pytest.mark.parametrize("bias_shape", [(4,), (2, 4, 7, 4), (1, 4, 7, 1), (1,), (1, 1, 1, 1)])
def test_bias_that_is_not_per_channel(bias_shape):
    # (4,) broadcasts along W (here W = 4 = O), not along the channels.
    _unchanged(conv_graph(["add", "relu"], bias_shape=bias_shape, x_shape=(2, 3, 7, 4)))


def test_matmul_bias_not_along_the_last_axis_or_1d_operand():
    _unchanged(matmul_graph(["add", "relu"], bias_shape=(6, 1)))
    _unchanged(matmul_graph(["add", "relu"], bias_shape=(6, 5)))
    g = graph(inputs=[("a", F32, (3,))], captured=[("w", F32, (3, 5)), ("bias", F32, (5,))],
              ops=[("MatMul", ["a", "w"], ["m"], {}), ("Add", ["m", "bias"], ["s"], {}),
                   ("Relu", ["s"], ["r"], {})], outputs=["r"])
    _unchanged(g)


def test_training_batchnorm_and_read_statistics_are_not_folded():
    # Batch statistics depend on the batch: no fixed affine map to fold.
    new = pattern_fusion(conv_graph([("bn", True), "relu"]))
    assert [o.type for o in new.op] == ["Conv2d", "BatchNorm", "Relu"]
    # Eval mode, but the returned running mean is read: BatchNorm must stay.
    new = pattern_fusion(conv_graph([("bn", False), "relu"], extra_outputs=["t0_m"]))
    assert [o.type for o in new.op] == ["Conv2d", "BatchNorm", "Relu"]


def test_dtypes_that_differ_never_reach_the_rewrite():
    calls = []

    def rewrite(match):
        calls.append(match.dtype)
        return fusion.Rewrite(tuple(match.ops[0].input), {"activation": "relu"})

    fusion.register_pattern(fusion.FusionPattern("test_cast", ("MatMul", "Cast", "Relu"),
                                                 "MatMulBiasAct", rewrite))
    try:
        g = graph(inputs=[("a", F32, (2, 3)), ("b", F32, (3, 4))],
                  ops=[("MatMul", ["a", "b"], ["m"], {}),
                       ("Cast", ["m"], ["c"], {"dtype": F64}), ("Relu", ["c"], ["r"], {})],
                  outputs=["r"])
        new = _unchanged(g)
        assert calls == []
        # Same chain in one dtype: the rewrite runs (and fires).
        g.op[1].attr["dtype"].dtype = dg.as_dtype(F32).code
        for v in g.value_info:
            v.dtype = dg.as_dtype(F32).code
        new = pattern_fusion(g)
        assert calls == [F32] and [o.type for o in new.op] == ["MatMulBiasAct"]
    finally:
        fusion.unregister_pattern("test_cast")


def test_rewrite_with_a_wrong_shape_is_declined():
    bad = fusion.FusionPattern(
        "test_bad", ("MatMul", "Neg"), "MatMulBiasAct",
        lambda m: fusion.Rewrite((m.ops[0].input[1], m.ops[0].input[0]), {"activation": "none"}))
    fusion.register_pattern(bad)
    try:
        _unchanged(graph(inputs=[("a", F32, (2, 3)), ("b", F32, (3, 2))],
                         ops=[("MatMul", ["a", "b"], ["m"], {}), ("Neg", ["m"], ["n"], {})],
                         outputs=["n"]))
    finally:
        fusion.unregister_pattern("test_bad")


def test_a_failing_rewrite_raises_naming_the_pattern():
    def broken(match):
        return match.attr(0, "no_such_attribute").upper()

    fusion.register_pattern(fusion.FusionPattern("test_broken", ("MatMul", "Neg"),
                                                 "MatMulBiasAct", broken))
    try:
        g = graph(inputs=[("a", F32, (2, 3)), ("b", F32, (3, 2))],
                  ops=[("MatMul", ["a", "b"], ["m"], {}), ("Neg", ["m"], ["n"], {})],
                  outputs=["n"])
        before = g.SerializeToString()
        with pytest.raises(dg.errors.PluginError, match="test_broken.*MatMul_0.*KeyError"):
            pattern_fusion(g)
        assert g.SerializeToString() == before
    finally:
        fusion.unregister_pattern("test_broken")


# ------------------------------------------------------------ relu mask readers

def _with_mask_reader(g, threshold, reader="Greater"):
    """Append ``reader(relu_input, threshold)`` as a graph output (the form
    Relu's gradient rule writes)."""
    z = g.op[-1].input[0]
    shape = next(tuple(v.shape) for v in g.value_info if v.name == z)
    extra = graph(inputs=[(z, F32, shape)], constants=[("thr", np.array(threshold, F32))],
                  ops=[(reader, [z, "thr"], ["mask"], {})])
    g.op.add().CopyFrom(extra.op[0])
    g.constant.add().CopyFrom(extra.constant[0])
    g.value_info.extend(v for v in extra.value_info if v.name in ("thr", "mask"))
    g.output.append("mask")
    return g


def test_relu_mask_reader_is_redirected_to_the_fused_output():
    g = _with_mask_reader(conv_graph(["add", "relu"]), 0.0)
    new = pattern_fusion(g)
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct", "Greater"]
    assert new.op[2].input[0] == new.op[1].output[0]
    _check_same_results(g, new, conv_feeds(g))
    g = _with_mask_reader(matmul_graph(["add", "relu"]), 0.0)
    assert [o.type for o in pattern_fusion(g).op] == ["MatMulBiasAct", "Greater"]


def _with_relu_grad_reader(g, index=0):
    """Append ``ReluGrad(relu_input, dy)`` (what Relu's gradient rule
    writes; ``index=1`` puts the Relu's input in the dy slot instead)."""
    z = g.op[-1].input[0]
    shape = next(tuple(v.shape) for v in g.value_info if v.name == z)
    ins = [z, "dy"] if index == 0 else ["dy", z]
    extra = graph(inputs=[(z, F32, shape), ("dy", F32, shape)],
                  ops=[("ReluGrad", ins, ["dz"], {})])
    g.op.add().CopyFrom(extra.op[0])
    g.input.append("dy")
    g.value_info.extend(v for v in extra.value_info if v.name in ("dy", "dz"))
    g.output.append("dz")
    return g


def test_relu_grad_reader_is_redirected_to_the_fused_output():
    """ReluGrad reads its x only through x > 0: it may read relu(z)."""
    g = _with_relu_grad_reader(conv_graph(["add", "relu"]))
    new = pattern_fusion(g)
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct", "ReluGrad"]
    assert new.op[2].input[0] == new.op[1].output[0]
    feeds = conv_feeds(g)
    feeds["dy"] = np.random.default_rng(1).standard_normal(
        next(tuple(v.shape) for v in g.value_info if v.name == "dy")).astype(F32)
    _check_same_results(g, new, feeds)
    g = _with_relu_grad_reader(matmul_graph(["add", "relu"]))
    assert [o.type for o in pattern_fusion(g).op] == ["MatMulBiasAct", "ReluGrad"]


def test_relu_input_as_relu_grad_dy_blocks_the_fusion():
    """In ReluGrad's dy slot z is read as a value: no redirect."""
    g = _with_relu_grad_reader(conv_graph(["add", "relu"]), index=1)
    assert [o.type for o in pattern_fusion(g).op] == [
        "Reshape", "Conv2dBiasAct", "Relu", "ReluGrad"]


def test_a_mask_reader_before_the_relu_is_not_redirected():
    """The fused op takes the Relu's place: a reader running earlier could
    not read its output, so conv -> add -> relu does not fuse (conv -> add does)."""
    g = _with_mask_reader(conv_graph(["add", "relu"]), 0.0)
    ops = list(g.op)
    del g.op[:]
    g.op.extend([ops[0], ops[1], ops[3], ops[2]])   # Conv2d, Add, Greater, Relu
    new = pattern_fusion(g)
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct", "Greater", "Relu"]
    assert new.op[2].input[0] == new.op[3].input[0] == new.op[1].output[0]
    _check_same_results(g, new, conv_feeds(g))


@pytest.mark.parametrize("threshold,reader", [(0.5, "Greater"), (0.0, "GreaterEqual"),
                                              (0.0, "Less")])
def test_other_readers_of_the_relu_input_block_the_fusion(threshold, reader):
    g = _with_mask_reader(conv_graph(["add", "relu"]), threshold, reader)
    new = pattern_fusion(g)
    # conv -> add still fuses (its output is kept for the reader); the Relu stays.
    assert [o.type for o in new.op] == ["Reshape", "Conv2dBiasAct", "Relu", reader]


def test_relu_mask_identity_on_special_values():
    """z > 0 == relu(z) > 0 for every float32 class, as the rewire assumes."""
    z = np.array([-np.inf, -3.0, -1e-45, -0.0, 0.0, 1e-45, 2.0, np.inf, np.nan], F32)
    t = dg.tensor(z)
    np.testing.assert_array_equal(np.asarray(dg.ops.relu(t) > 0), np.asarray(t > 0))


# ------------------------------------------------------------ switches, registry

def test_disabled_by_environment_or_metadata(monkeypatch):
    g = conv_graph(["add", "relu"])
    assert "Conv2dBiasAct" in [o.type for o in run_passes(g, 3).op]
    monkeypatch.setenv("DRAGON_DISABLE_PASSES", "pattern_fusion")
    out = run_passes(g, 3)
    assert "Conv2dBiasAct" not in [o.type for o in out.op]
    assert "pattern_fusion" not in out.metadata["passes"].split(",")
    monkeypatch.delenv("DRAGON_DISABLE_PASSES")
    g.metadata["disable_passes"] = "pattern_fusion"
    assert "Conv2dBiasAct" not in [o.type for o in run_passes(g, 3).op]
    g.metadata["disable_passes"] = "pattern_fusoin"
    with pytest.raises(ValueError, match="pattern_fusoin"):
        run_passes(g, 3)
    assert "Conv2dBiasAct" not in [o.type for o in run_passes(conv_graph(["relu"]), 2).op]


def test_function_disable_passes_argument():
    """dg.function(..., disable_passes=...) switches a pass off for that
    function only (also for methods); a misspelt name is an error."""
    m = _eval_model(F32)
    x = dg.tensor(np.random.default_rng(5).standard_normal((2, 3, 6, 6)).astype(F32))
    plain = dg.function(lambda x: m(x), disable_passes=["pattern_fusion"])
    fused = dg.function(lambda x: m(x))
    assert "BatchNorm" in {o.type for o in plain.get_graph(x).op}
    assert "BatchNorm" not in {o.type for o in fused.get_graph(x).op}
    np.testing.assert_allclose(np.asarray(plain(x)), np.asarray(fused(x)),
                               rtol=1e-4, atol=1e-4)

    class Net:
        @dg.function(disable_passes=("pattern_fusion",))
        def run(self, x):
            return m(x)
    assert "BatchNorm" in {o.type for o in Net().run.get_graph(x).op}
    with pytest.raises(ValueError, match="pattern_fusoin"):
        dg.function(lambda x: m(x), disable_passes=["pattern_fusoin"])(x)


def test_function_disable_passes_takes_a_string():
    """A string is a pass name (or a comma-separated list, as in
    DRAGON_DISABLE_PASSES), not a sequence of one-letter names."""
    m = _eval_model(F32)
    x = dg.tensor(np.random.default_rng(5).standard_normal((2, 3, 6, 6)).astype(F32))
    one = dg.function(lambda x: m(x), disable_passes="pattern_fusion")
    assert "BatchNorm" in {o.type for o in one.get_graph(x).op}
    two = dg.function(lambda x: m(x), disable_passes="pattern_fusion, fusion")
    assert two.get_graph(x).metadata["disable_passes"] == "pattern_fusion,fusion"
    assert "BatchNorm" in {o.type for o in two.get_graph(x).op}


def test_register_pattern_rejects_a_different_pattern_under_a_known_name():
    fusion.register_pattern(fusion.CONV_RELU)   # the same object again: fine
    clash = fusion.FusionPattern("conv2d_relu", ("Conv2d", "Relu"), "Conv2dBiasAct",
                                 lambda m: None)
    with pytest.raises(ValueError, match="conv2d_relu"):
        fusion.register_pattern(clash)
    with pytest.raises(ValueError, match="at least two"):
        fusion.FusionPattern("x", ("Conv2d",), "Conv2dBiasAct", lambda m: None)
    names = [p.name for p in fusion.patterns()]
    assert names.index("conv2d_bias_relu") < names.index("conv2d_bias")


@pytest.fixture
def scaled_tanh_ops():
    """Two Python ops, a scaled tanh and its fusion with a following Neg."""
    if "PfScaledTanh" not in {o["name"] for o in dg._C.list_ops()}:
        @dg.custom_op("PfScaledTanh", attrs={"scale": 1.0}, dtypes=(F32, F64))
        def pf_scaled_tanh(x, scale):
            return np.tanh(x) * x.dtype.type(scale)

        @dg.custom_op("PfNegScaledTanh", attrs={"scale": 1.0}, dtypes=(F32,))
        def pf_neg_scaled_tanh(x, scale):
            return -np.tanh(x) * x.dtype.type(scale)
    return fusion.FusionPattern(
        "test_neg_scaled_tanh", ("PfScaledTanh", "Neg"), "PfNegScaledTanh",
        lambda m: fusion.Rewrite((m.ops[0].input[0],), {"scale": m.attr(0, "scale")}))


def test_a_plugin_declares_a_pattern_for_a_python_op_through_the_hook(scaled_tanh_ops):
    class Declarer:
        @dg.plugins.hookimpl
        def dragon_fusion_patterns(self, core):
            return [scaled_tanh_ops]

    declarer = Declarer()
    g = graph(inputs=[("x", F32, (3, 4))], ops=[("PfScaledTanh", ["x"], ["t"], {"scale": 2.5}),
                                                ("Neg", ["t"], ["y"], {})], outputs=["y"])
    _unchanged(g)
    dg.plugins._pm.register(declarer, name="test_declarer")
    try:
        new = pattern_fusion(g)
        assert [(o.type, o.attr["scale"].f) for o in new.op] == [("PfNegScaledTanh", 2.5)]
        assert new.op[0].plugin == "python"
        x = _rng().standard_normal((3, 4)).astype(F32)
        (y,) = run_graph(new, {"x": x})
        np.testing.assert_allclose(y, -2.5 * np.tanh(x), rtol=1e-6)
        g64 = graph(inputs=[("x", F64, (3, 4))], ops=[("PfScaledTanh", ["x"], ["t"], {}),
                                                      ("Neg", ["t"], ["y"], {})], outputs=["y"])
        _unchanged(g64)   # the fused Python op has a float32 kernel only
    finally:
        dg.plugins._pm.unregister(declarer)
    _unchanged(g)


def test_conflicting_declarations_from_plugins_mark_the_plugin_broken():
    class Declarer:
        @dg.plugins.hookimpl
        def dragon_fusion_patterns(self, core):
            return [fusion.FusionPattern("conv2d_relu", ("Conv2d", "Relu"), "Conv2dBiasAct",
                                         lambda m: None)]

    declarer = Declarer()
    dg.plugins._pm.register(declarer, name="test_conflict")
    try:
        with pytest.warns(dg.plugins.PluginWarning, match="test_conflict.*conv2d_relu"):
            declared = fusion.patterns()
        assert [p for p in declared if p.name == "conv2d_relu"] == [fusion.CONV_RELU]
        assert any(p.name == "test_conflict" and p.state == "broken"
                   for p in dg.plugins.list())
    finally:
        dg.plugins._pm.unregister(declarer)


# ------------------------------------------------------------ end to end

def _eval_model(dtype):
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1, bias=False, dtype=dtype),
                      nn.BatchNorm2d(4, dtype=dtype), nn.ReLU(),
                      nn.Conv2d(4, 5, 3, stride=2, dtype=dtype), nn.ReLU(), nn.Flatten(),
                      nn.Linear(5 * 2 * 2, 6, dtype=dtype), nn.ReLU(),
                      nn.Linear(6, 2, dtype=dtype))
    rng = np.random.default_rng(1)
    bn = m[1]
    for t, v in ((bn.running_mean, rng.standard_normal(4)), (bn.running_var, rng.random(4) + .5),
                 (bn.weight, rng.random(4) + .5), (bn.bias, rng.standard_normal(4))):
        t.assign(dg.tensor(v.astype(dtype)))
    return m.eval()


@pytest.mark.parametrize("dtype", [F32, F64])
def test_eval_model_fused_equals_unfused(dtype, monkeypatch):
    m = _eval_model(dtype)
    x = dg.tensor(np.random.default_rng(2).standard_normal((3, 3, 6, 6)).astype(dtype))
    fused = dg.function(lambda x: m(x))
    g = fused.get_graph(x)
    assert sorted(t for t, _ in fusion.fused_ops(g).values() if t != "FusedElementwise") == \
        ["Conv2dBiasAct", "Conv2dBiasAct", "MatMulBiasAct", "MatMulBiasAct"]
    assert not {"BatchNorm", "Relu", "Conv2d", "MatMul"} & {o.type for o in g.op}
    monkeypatch.setenv("DRAGON_DISABLE_PASSES", "pattern_fusion")
    plain = dg.function(lambda x: m(x))
    assert "BatchNorm" in {o.type for o in plain.get_graph(x).op}
    monkeypatch.delenv("DRAGON_DISABLE_PASSES")
    want = np.asarray(m(x))   # eager
    tol = RTOL[dtype] * 10
    np.testing.assert_allclose(np.asarray(fused(x)), want, rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(plain(x)), want, rtol=tol, atol=tol)


def test_training_step_fused_equals_unfused(monkeypatch):
    dtype = F64   # gradients compared tightly; float32 is covered by the plugin's tests
    rng = np.random.default_rng(4)
    m = nn.Sequential(nn.Conv2d(2, 3, 3, dtype=dtype), nn.ReLU(), nn.Flatten(),
                      nn.Linear(3 * 4 * 4, 5, dtype=dtype), nn.ReLU(), nn.Linear(5, 1, dtype=dtype))
    params = list(m.parameters())
    x = dg.tensor(rng.standard_normal((4, 2, 6, 6)))

    def step(x):
        with dg.GradientTape() as tape:
            tape.watch(params)
            loss = dg.ops.mean(dg.ops.square(m(x)))
        return [loss] + list(tape.gradient(loss, params))

    fused = dg.function(step)
    g = fused.get_graph(x)
    kinds = sorted(op.attr[PATTERN_ANNOTATION].s for op in _fused(g)
                   if PATTERN_ANNOTATION in op.attr)
    # The last Linear's bias is [1] for a [4, 1] product: still per-column.
    assert kinds == ["conv2d_relu", "matmul_bias", "matmul_bias_relu"]
    assert "Relu" not in {o.type for o in g.op}
    for op in g.op:   # the backward's masks read the fused outputs
        assert op.type not in ("Greater", "Where")
        if op.type == "ReluGrad":
            assert op.input[0] in {o.output[0] for o in _fused(g) if o.type != "FusedElementwise"}
    monkeypatch.setenv("DRAGON_DISABLE_PASSES", "pattern_fusion")
    plain = dg.function(step)
    assert "Conv2dBiasAct" not in {o.type for o in plain.get_graph(x).op}
    monkeypatch.delenv("DRAGON_DISABLE_PASSES")
    for a, b, c in zip(fused(x), plain(x), step(x)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(a), np.asarray(c), rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------ timing

def _time_mlp(rounds: int = 40) -> None:
    """Both variants built first, then timed in alternating rounds (best of)."""
    import os
    import sys
    import time
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                    "bench"))
    import bench_graph as B

    init, x, y = B._mlp_init()
    dx, dy = dg.tensor(x), dg.tensor(y)
    runs = {}
    for label, off in (("fused", ""), ("unfused", "pattern_fusion")):
        os.environ["DRAGON_DISABLE_PASSES"] = off
        step = B.make_dragon_step(dg, init, "graph")
        ps = [dg.tensor(a) for a in init]
        fwd = dg.function(lambda x, ps=ps: dg.ops.relu(dg.ops.relu(
            x @ ps[0] + ps[1]) @ ps[2] + ps[3]) @ ps[4] + ps[5])
        losses = [float(step(dx, dy).numpy()) for _ in range(3)]
        fwd(dx)
        kinds = sorted(t for t, _ in fusion.fused_ops(step.get_graph(dx, dy)).values()
                       if t != "FusedElementwise")
        print(f"{label}: losses {losses}, fused {kinds}")
        runs[f"{label} train step"] = (step, (dx, dy), 10)
        runs[f"{label} forward"] = (fwd, (dx,), 30)
    os.environ.pop("DRAGON_DISABLE_PASSES")
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(rounds):
        for key, (fn, args, n) in runs.items():
            start = time.perf_counter()
            for _ in range(n):
                fn(*args)
            best[key] = min(best[key], (time.perf_counter() - start) / n)
    for key, seconds in best.items():
        print(f"{key:20s} {seconds * 1e3:8.3f} ms")


if __name__ == "__main__":
    _time_mlp()


def test_freeze_bakes_parameters_and_folds_batch_norm_once():
    """dg.function(freeze=True): parameters become constants at trace time,
    so the batch-norm fold is computed once (no fold ops left in the graph);
    results equal the live-parameter graph; later parameter changes are not
    seen by the frozen graph (documented), but are by the live one."""
    m = _eval_model(F32)
    x = dg.tensor(np.random.default_rng(6).standard_normal((2, 3, 6, 6)).astype(F32))
    live = dg.function(lambda x: m(x))
    frozen = dg.function(lambda x: m(x), freeze=True)
    g_live, g_frozen = live.get_graph(x), frozen.get_graph(x)
    assert {"Mul", "Reshape"} & {o.type for o in g_live.op}        # the fold runs each call
    assert not {"Mul", "Reshape", "BatchNorm"} & {o.type for o in g_frozen.op}
    assert not g_frozen.captured and len(g_frozen.constant) > len(g_live.constant)
    want = np.asarray(live(x))
    np.testing.assert_allclose(np.asarray(frozen(x)), want, rtol=1e-5, atol=1e-5)
    p = next(iter(m.parameters()))
    p.assign(p * 0.0)
    assert not np.allclose(np.asarray(live(x)), want)
    np.testing.assert_allclose(np.asarray(frozen(x)), want, rtol=1e-5, atol=1e-5)



def test_freeze_keeps_a_tensor_assigned_through_an_alias_live():
    """A tensor the function assigns through an alias made inside it
    (``w.detach().assign(...)``, the graph updating ``w``) is state, not a
    parameter: freeze must not bake it in as a constant. The frozen graph
    updates and reads it as the live one does."""
    def make():
        w = dg.tensor(np.array([1.0, 2.0], dtype=F32))

        def step(x):
            a = w.detach()
            a.assign(a + x)
            return w * 2.0
        return w, step

    x = dg.tensor(np.array([0.5, -1.0], dtype=F32))
    results = {}
    for freeze in (False, True):
        w, step = make()
        f = dg.function(step, freeze=freeze)
        g = f.get_graph(x)
        assert len(g.state_target) == 1 and g.state_target[0] in g.captured, freeze
        outs = [np.asarray(f(x)) for _ in range(3)]
        results[freeze] = (outs, np.asarray(w))
    np.testing.assert_array_equal(results[True][0], results[False][0])
    np.testing.assert_array_equal(results[True][1], results[False][1])


def test_owned_tensors_are_borrowed_constants_the_fold_reads_without_a_copy(tmp_path):
    """Function(owned=...): the tensors a callable owns (an imported model's
    initializers) are constants of the graph that it borrows: no TensorProto
    copy, the plan fed the tensors themselves; passes read their values
    (the batch-norm fold runs once, as with freeze); get_graph and
    save_graph fill the values in; a borrowed constant read outside its
    compilation raises instead of reading nothing."""
    from dragon_core._graph.build import BORROWED, constant_array
    from dragon_core._graph.function import Function
    m = _eval_model(F32)
    x = dg.tensor(np.random.default_rng(7).standard_normal((2, 3, 6, 6)).astype(F32))
    params = [p for p in m.parameters()] + [b for b in m.buffers()]
    owned = Function(lambda x: m(x), owned=lambda: params)
    live = dg.function(lambda x: m(x))
    np.testing.assert_allclose(np.asarray(owned(x)), np.asarray(live(x)), rtol=1e-5, atol=1e-5)
    entry = owned._entry(x)[0]
    raw = entry.compiled.graph
    assert not raw.captured and not entry.captured
    assert not {"Mul", "Reshape", "BatchNorm"} & {o.type for o in raw.op}
    # What was not folded away (none here, or a constant nothing changed) is
    # borrowed: no bytes in the proto, the owned tensor itself fed.
    by_id = {p._id for p in params}
    for c, t in zip(raw.constant, entry.constants):
        if c.name.startswith("owned:"):
            assert c.data == b"" and t._id in by_id
    g = owned.get_graph(x)
    assert BORROWED not in g.metadata
    for c in g.constant:
        assert constant_array(c).shape == tuple(c.shape)
    dg.save_graph(owned, str(tmp_path / "g.pb"), x)
    loaded = dg.load_graph(str(tmp_path / "g.pb"))
    np.testing.assert_allclose(np.asarray(loaded(x)[0] if isinstance(loaded(x), (list, tuple))
                                          else loaded(x)),
                               np.asarray(live(x)), rtol=1e-5, atol=1e-5)


def test_a_borrowed_constant_outside_its_compilation_raises():
    from dragon_core import proto as P
    from dragon_core._graph.build import borrowed_constants, constant_array, tensor_from_proto
    tp = P.TensorProto(name="owned:0", dtype=dg.float32.code, shape=[2, 3])
    with pytest.raises(ValueError, match="owned:0.*borrows its value"):
        constant_array(tp)
    t = dg.tensor(np.arange(6, dtype=F32).reshape(2, 3))
    with borrowed_constants({"owned:0": t}):
        a = constant_array(tp)
        assert not a.flags.writeable and np.shares_memory(a, t.numpy())
        assert tensor_from_proto(tp) is t
    with pytest.raises(ValueError):
        constant_array(tp)
