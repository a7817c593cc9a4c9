"""dragon_core.onnx.load: errors before running, initializers without
copies, external data, values needed at trace time, control flow."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
dgx = pytest.importorskip("dragon_core.onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _model(nodes, inputs, outputs, inits=(), opset=21, name="m"):
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _vi(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


def test_unsupported_nodes_are_all_listed_before_anything_runs():
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="ok"),
             helper.make_node("TfIdfVectorizer", ["a"], ["b"], name="tfidf_node"),
             helper.make_node("StringNormalizer", ["b"], ["c"], name="strings"),
             helper.make_node("Foo", ["c"], ["d"], name="custom", domain="com.example"),
             helper.make_node("Pad", ["d", "p"], ["y"], name="wrap_pad", mode="wrap")]
    m = _model(nodes, [_vi("x", shape=[2, 2]), _vi("p", TensorProto.INT64, [4])],
               [_vi("y")])
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    with pytest.raises(dgx.UnsupportedModelError) as err:
        dgx.load(m.SerializeToString())
    msg = str(err.value)
    for part in ("TfIdfVectorizer (opset 21) node 'tfidf_node'", "StringNormalizer", "'strings'",
                 "com.example::Foo", "'custom'", "'wrap_pad'", "mode='wrap'"):
        assert part in msg, msg
    assert "ok" not in [n.name for n in err.value.nodes]
    assert len(err.value.nodes) == 4
    assert isinstance(err.value, NotImplementedError)


def test_opset_below_7_is_refused():
    m = _model([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", shape=[1])], [_vi("y")],
               opset=6)
    with pytest.raises(NotImplementedError, match="opset 6"):
        dgx.load(m)


def _gemm_model():
    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3)).astype(np.float32)
    b = rng.standard_normal(3).astype(np.float32)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], alpha=2.0, beta=0.5)]
    m = _model(nodes, [_vi("x", shape=[2, 4])], [_vi("y")],
               [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return m, w, b


def test_initializers_are_views_of_the_model_bytes():
    m, w, b = _gemm_model()
    f = dgx.load(m.SerializeToString())
    t = f.initializers["w"]
    assert t.is_read_only
    raw = [k for k in f._keep if isinstance(k, bytes) and len(k) == w.nbytes]
    assert raw and np.shares_memory(t.numpy(), np.frombuffer(raw[0], np.float32))
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    (y,) = f(x)
    np.testing.assert_allclose(y.numpy(), 2.0 * x @ w + 0.5 * b, rtol=1e-6, atol=1e-6)
    assert f.input_names == ["x"] and f.output_names == ["y"]


def test_external_data_is_memory_mapped(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data
    m, w, b = _gemm_model()
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="weights.bin",
                                   size_threshold=0)
    path = tmp_path / "gemm.onnx"
    onnx.save_model(m, str(path))
    f = dgx.load(path)
    assert any(isinstance(k, np.memmap) for k in f._keep)
    assert f.initializers["w"].is_read_only
    x = np.ones((2, 4), np.float32)
    np.testing.assert_allclose(f(x)[0].numpy(), 2.0 * x @ w + 0.5 * b, rtol=1e-6, atol=1e-6)
    # The same bytes without a folder to read weights.bin from: a clear error.
    with pytest.raises(ValueError, match="external file"):
        dgx.load(path.read_bytes())
    g = dgx.load(path.read_bytes(), base_dir=tmp_path)
    np.testing.assert_allclose(g(x)[0].numpy(), f(x)[0].numpy())


def test_external_data_may_not_leave_the_model_folder(tmp_path):
    m, _, _ = _gemm_model()
    w = m.graph.initializer[0]
    w.ClearField("raw_data")
    del w.float_data[:]
    w.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "../secret.bin"), ("offset", "0"), ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "m").mkdir()
    (tmp_path / "secret.bin").write_bytes(b"\0" * 48)
    path = tmp_path / "m" / "m.onnx"
    path.write_bytes(m.SerializeToString())
    with pytest.raises(ValueError, match="leaves the model's folder"):
        dgx.load(path)


def test_reshape_target_fed_by_the_caller_is_never_stale():
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    m = _model(nodes, [_vi("x", shape=[2, 6]), _vi("shape", TensorProto.INT64, [2])],
               [_vi("y")])
    f = dgx.load(m)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert f(x, np.array([3, 4]))[0].shape == (3, 4)
    assert f(x, np.array([4, 3]))[0].shape == (4, 3)
    assert f(x, np.array([-1, 2]))[0].shape == (6, 2)
    np.testing.assert_array_equal(f(x, np.array([3, 4]))[0].numpy(), x.reshape(3, 4))


def test_shape_arithmetic_is_exact_for_new_shapes():
    # y = reshape(x, [shape(x)[0], -1]): the Shape chain is recomputed per shape.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "zero1"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    inits = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
             numpy_helper.from_array(np.array([0], np.int64), "zero1"),
             numpy_helper.from_array(np.array([-1], np.int64), "minus1")]
    m = _model(nodes, [_vi("x", shape=["n", 2, 3])], [_vi("y")], inits)
    f = dgx.load(m)
    for n in (1, 4):
        x = np.random.default_rng(n).standard_normal((n, 2, 3)).astype(np.float32)
        np.testing.assert_array_equal(f(x)[0].numpy(), x.reshape(n, -1))


def test_inputs_are_checked():
    m, _, _ = _gemm_model()
    f = dgx.load(m)
    with pytest.raises(TypeError, match="takes 1 inputs"):
        f()
    with pytest.raises(TypeError, match="must be float32, got int64"):
        f(np.ones((2, 4), np.int64))


def _branch(name, op, out):
    return helper.make_graph([helper.make_node(op, ["x"], [out])], name, [],
                             [_vi(out, shape=[3])])


def test_if_with_a_data_dependent_condition():
    then_g = _branch("then", "Neg", "t")
    else_g = _branch("else", "Abs", "e")
    nodes = [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)]
    m = _model(nodes, [_vi("c", TensorProto.BOOL, []), _vi("x", shape=[3])], [_vi("y")])
    f = dgx.load(m)
    x = np.array([-1.0, 2.0, -3.0], np.float32)
    np.testing.assert_array_equal(f(np.array(True), x)[0].numpy(), -x)
    np.testing.assert_array_equal(f(np.array(False), x)[0].numpy(), np.abs(x))
    np.testing.assert_array_equal(f(np.array(True), x)[0].numpy(), -x)


def test_loop_with_a_known_trip_count_and_scan_outputs():
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "x"], ["acc_out"]),
         helper.make_node("Identity", ["acc_out"], ["scan"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("acc_in", shape=[2])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[2]),
         _vi("scan", shape=[2])])
    nodes = [helper.make_node("Loop", ["M", "", "acc0"], ["acc", "scans"], body=body)]
    inits = [numpy_helper.from_array(np.array(3, np.int64), "M")]
    m = _model(nodes, [_vi("acc0", shape=[2]), _vi("x", shape=[2])],
               [_vi("acc"), _vi("scans")], inits)
    acc, scans = dgx.load(m)(np.zeros(2, np.float32), np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(acc.numpy(), [3.0, 6.0])
    np.testing.assert_array_equal(scans.numpy(), [[1, 2], [2, 4], [3, 6]])


def test_dragon_domain_ops_round_trip(tmp_path):
    """A plugin op with no standard ONNX op (DeformConv2d) is exported to
    its plugin's domain and read back by load."""
    if not hasattr(dg.ops, "deform_conv2d"):
        pytest.skip("dragon-vision-ops is not installed")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    w = dg.tensor(rng.standard_normal((3, 2, 3, 3)).astype(np.float32))
    off = rng.standard_normal((1, 18, 3, 3)).astype(np.float32) * 0.5

    def f(x, off):
        return dg.ops.deform_conv2d(x, w, off)

    model = dgx.export(f, [x, off], tmp_path / "d.onnx")
    node = [n for n in model.graph.node if n.op_type == "DeformConv2d"][0]
    assert node.domain == "ai.dragon.vision_ops"
    ref = f(dg.tensor(x), dg.tensor(off)).numpy()
    np.testing.assert_allclose(dgx.load(tmp_path / "d.onnx")(x, off)[0].numpy(), ref,
                               rtol=1e-6, atol=1e-6)


def test_loop_with_a_data_dependent_condition_is_a_while_loop():
    # while acc < limit: acc = acc * 2   (limit is the caller's data)
    body = helper.make_graph(
        [helper.make_node("Mul", ["acc_in", "two"], ["acc_out"]),
         helper.make_node("Less", ["acc_out", "limit"], ["cond_out"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
                 _vi("acc_in", shape=[])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("acc_out", shape=[])])
    nodes = [helper.make_node("Less", ["acc0", "limit"], ["c0"]),
             helper.make_node("Loop", ["", "c0", "acc0"], ["acc"], body=body)]
    inits = [numpy_helper.from_array(np.array(2.0, np.float32), "two")]
    m = _model(nodes, [_vi("acc0", shape=[]), _vi("limit", shape=[])], [_vi("acc")], inits)
    f = dgx.load(m)
    for start, limit, want in ((1.0, 10.0, 16.0), (3.0, 100.0, 192.0), (5.0, 1.0, 5.0)):
        (acc,) = f(np.array(start, np.float32), np.array(limit, np.float32))
        assert float(acc.numpy()) == want
    ops = {op.type for op in f.get_graph(np.array(1.0, np.float32),
                                         np.array(10.0, np.float32)).op}
    assert "While" in ops


def test_gru_with_initial_state_but_no_bias():
    """ONNX lets B and sequence_lens be absent while initial_h is given;
    Dragon's optional inputs are trailing, so the defaults are filled in."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 2, 3)).astype(np.float32)
    w = rng.standard_normal((1, 6, 3)).astype(np.float32)
    r = rng.standard_normal((1, 6, 2)).astype(np.float32)
    h0 = rng.standard_normal((1, 2, 2)).astype(np.float32)
    node = helper.make_node("GRU", ["x", "w", "r", "", "", "h0"], ["y", "yh"], hidden_size=2)
    inits = [numpy_helper.from_array(v, k) for k, v in (("w", w), ("r", r))]
    m = _model([node], [_vi("x", shape=[4, 2, 3]), _vi("h0", shape=[1, 2, 2])],
               [_vi("y"), _vi("yh")], inits)
    y, yh = dgx.load(m)(x, h0)
    # NumPy GRU (ONNX gate order z, r, h; linear_before_reset = 0).
    wz, wr, wh = np.split(w[0], 3)
    rz, rr, rh = np.split(r[0], 3)
    h = h0[0].astype(np.float64)
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for t in range(4):
        z = sig(x[t] @ wz.T + h @ rz.T)
        rt = sig(x[t] @ wr.T + h @ rr.T)
        hh = np.tanh(x[t] @ wh.T + (rt * h) @ rh.T)
        h = (1 - z) * hh + z * h
        np.testing.assert_allclose(y.numpy()[t, 0], h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(yh.numpy()[0], h, rtol=1e-5, atol=1e-6)


def _conv_bn_model(rng):
    """Conv -> BatchNormalization -> Relu with non-trivial statistics."""
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, 4).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    mean = rng.standard_normal(4).astype(np.float32)
    var = rng.uniform(0.5, 2.0, 4).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"],
                              epsilon=1e-5),
             helper.make_node("Relu", ["n"], ["y"])]
    inits = [numpy_helper.from_array(a, nm) for a, nm in
             ((w, "w"), (scale, "s"), (bias, "b"), (mean, "m"), (var, "v"))]
    m = _model(nodes, [_vi("x", shape=[2, 3, 5, 5])], [_vi("y")], inits)

    def reference(x):
        x64, w64 = x.astype(np.float64), w.astype(np.float64)
        xp = np.pad(x64, ((0, 0), (0, 0), (1, 1), (1, 1)))
        win = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))
        c = np.einsum("nchwij,ocij->nohw", win, w64)
        k = (scale / np.sqrt(var.astype(np.float64) + 1e-5))[None, :, None, None]
        return np.maximum((c - mean[None, :, None, None]) * k + bias[None, :, None, None], 0)
    return m, w, reference


@pytest.mark.parametrize("freeze", [False, True])
def test_initializers_are_borrowed_constants_and_batch_norm_folds_once(freeze):
    rng = np.random.default_rng(3)
    m, w, reference = _conv_bn_model(rng)
    f = dgx.load(m.SerializeToString(), freeze=freeze)
    x = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    (y,) = f(x)
    np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-4, atol=1e-4)
    # The batch norm is folded at compile time: no op reads it per call.
    g = f.get_graph(x)
    types = [op.type for op in g.op]
    assert "BatchNorm" not in types and "BatchNormalization" not in types, types
    # Initializers are constants of the graph, not captured tensors.
    assert not list(g.captured)
    # The plan is fed the initializer tensors themselves (no copy): a
    # graph constant never folded away is the model's own bytes.
    entry = f._fn._entry([dg.tensor(x)], ())[0]
    assert not entry.captured
    # get_graph's GraphDef stands on its own (values filled in).
    from dragon_core._graph.build import BORROWED, constant_array
    assert BORROWED not in g.metadata
    for c in g.constant:
        assert constant_array(c).shape == tuple(c.shape)
    (y2,) = f(x + 1)
    np.testing.assert_allclose(y2.numpy(), reference(x + 1), rtol=1e-4, atol=1e-4)


def test_unfolded_initializers_are_fed_without_a_copy():
    m, w, b = _gemm_model()
    f = dgx.load(m.SerializeToString())
    x = np.random.default_rng(1).standard_normal((2, 4)).astype(np.float32)
    (y,) = f(x)
    np.testing.assert_allclose(y.numpy(), 2.0 * x @ w + 0.5 * b, rtol=1e-6, atol=1e-6)
    entry = f._fn._entry([dg.tensor(x)], ())[0]
    graph = entry.compiled.graph
    fed = {c.name: t for c, t in zip(graph.constant, entry.constants)}
    borrowed = [nm for nm in fed if nm.startswith("owned:")]
    assert borrowed, [c.name for c in graph.constant]
    inits = [t.numpy() for t in f.initializers.values()]
    for nm in borrowed:
        assert any(np.shares_memory(fed[nm].numpy(), a) for a in inits), nm
        proto = next(c for c in graph.constant if c.name == nm)
        assert proto.data == b""      # the compiled graph holds no copy


def _decomposed_layer_norm(opset, beta=True, leak=False):
    """The ReduceMean-based layer norm torch exports below opset 17."""
    rng = np.random.default_rng(4)
    gamma = rng.uniform(0.5, 1.5, 6).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    if opset >= 18:
        axes = [helper.make_node("Constant", [], ["axes"], value=numpy_helper.from_array(
            np.array([-1], np.int64)))]
        mean = lambda i, o: helper.make_node("ReduceMean", [i, "axes"], [o])  # noqa: E731
    else:
        axes = []
        mean = lambda i, o: helper.make_node("ReduceMean", [i], [o], axes=[-1])  # noqa: E731
    nodes = axes + [
        mean("x", "m"), helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Constant", [], ["two"], value_float=2.0),
        helper.make_node("Pow", ["d", "two"], ["p"]), mean("p", "v"),
        helper.make_node("Constant", [], ["eps"], value_float=1e-5),
        helper.make_node("Add", ["v", "eps"], ["ve"]), helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "g"], ["y" if not beta else "ng"])]
    if beta:
        nodes.append(helper.make_node("Add", ["ng", "b"], ["y"]))
    outs = [_vi("y")] + ([_vi("d")] if leak else [])
    inits = [numpy_helper.from_array(gamma, "g")] + \
        ([numpy_helper.from_array(bias, "b")] if beta else [])
    m = _model(nodes, [_vi("x", shape=[2, 3, 6])], outs, inits, opset=opset)

    def reference(x):
        x = x.astype(np.float64)
        d = x - x.mean(-1, keepdims=True)
        y = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * gamma
        return y + bias if beta else y
    return m, reference


@pytest.mark.parametrize("opset,beta", [(13, True), (14, False), (18, True)])
def test_decomposed_layer_norm_imports_as_one_layer_norm(opset, beta):
    m, reference = _decomposed_layer_norm(opset, beta)
    f = dgx.load(m.SerializeToString())
    x = np.random.default_rng(5).standard_normal((2, 3, 6)).astype(np.float32) * 3 + 1
    (y,) = f(x)
    np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-5, atol=1e-5)
    types = [op.type for op in f.get_graph(x).op]
    assert types == ["LayerNorm"], types


def test_layer_norm_chain_read_outside_is_left_decomposed():
    m, reference = _decomposed_layer_norm(14, True, leak=True)
    f = dgx.load(m.SerializeToString())
    x = np.random.default_rng(6).standard_normal((2, 3, 6)).astype(np.float32)
    y, d = f(x)
    np.testing.assert_allclose(y.numpy(), reference(x), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d.numpy(), x - x.mean(-1, keepdims=True), rtol=1e-5, atol=1e-5)
    assert "LayerNorm" not in [op.type for op in f.get_graph(x).op]
