"""dragon_core.onnx.export: functions and plugin ops in onnxruntime, errors
listing every op, atomic writes."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
dgx = pytest.importorskip("dragon_core.onnx")


def _ort(model, *xs):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {i.name: x for i, x in zip(sess.get_inputs(), xs)})


def test_function_with_several_outputs_and_many_ops(tmp_path):
    w = dg.tensor(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))

    @dg.function
    def f(x, y):
        h = dg.ops.matmul(x, w)                       # captured: an initializer
        a = dg.ops.softmax(dg.ops.leaky_relu(h, 0.1), axis=-1)
        b = dg.ops.sum(dg.ops.square(h - 1.5), axis=[1], keepdims=True)
        c = dg.ops.concat([y, dg.ops.sqrt(dg.ops.abs(y))], axis=0)
        d = dg.ops.where(h > 0.0, dg.ops.exp(-h), dg.ops.tanh(h))
        e = dg.ops.var(h, axis=[0], ddof=1) + dg.ops.max(h, axis=[1]).mean()
        g = dg.ops.slice(dg.ops.pad(h, ((1, 0), (0, 2)), value=0.5), [0, 1], [2, 6], [1, 2], [0, 1])
        return a, b, c, d, e, dg.ops.clip(g, -0.5, 0.5)

    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    y = rng.standard_normal((2, 3)).astype(np.float32)
    model = dgx.export(f, [x, y], tmp_path / "f.onnx", output_names=list("abcdeg"))
    refs = f(dg.tensor(x), dg.tensor(y))
    for got, ref in zip(_ort(model, x, y), refs):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_roi_align_exports_to_the_standard_op():
    if not hasattr(dg.ops, "roi_align"):
        pytest.skip("dragon-vision-ops is not installed")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    rois = np.array([[0, 1.0, 1.5, 8.0, 9.0], [1, 0.0, 0.0, 11.0, 5.5], [1, 3.2, 2.1, 6.7, 10.4]],
                    np.float32)
    for aligned in (True, False):
        for ratio in (2, -1):
            def f(x, r):
                return dg.ops.roi_align(x, r, [3, 4], spatial_scale=0.75, sampling_ratio=ratio,
                                        aligned=aligned)
            model = dgx.export(f, [x, rois], None)
            assert "RoiAlign" in {n.op_type for n in model.graph.node}
            assert all(n.domain == "" for n in model.graph.node)
            np.testing.assert_allclose(_ort(model, x, rois)[0],
                                       f(dg.tensor(x), dg.tensor(rois)).numpy(),
                                       rtol=1e-5, atol=1e-5)


def test_nms_exports_to_non_max_suppression():
    if not hasattr(dg.ops, "nms_padded"):
        pytest.skip("dragon-vision-ops is not installed")
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 20, (30, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + rng.uniform(2, 10, (30, 2)).astype(np.float32)], 1)
    scores = rng.permutation(30).astype(np.float32) / 30.0

    def f(b, s):
        return dg.ops.nms_padded(b, s, 0.4)

    model = dgx.export(f, [boxes, scores], None)
    assert "NonMaxSuppression" in {n.op_type for n in model.graph.node}
    keep, count = f(dg.tensor(boxes), dg.tensor(scores))
    got_keep, got_count = _ort(model, boxes, scores)
    np.testing.assert_array_equal(got_keep, keep.numpy())
    assert int(got_count) == int(count.numpy())
    assert 0 < int(count.numpy()) < 30


def test_ops_without_translation_are_all_listed_and_nothing_is_written(tmp_path):
    def f(x, t):
        a = dg.ops.sigmoid_focal_loss(x, t)
        return dg.ops.random_uniform([3]) + a + dg.ops.softmax_cross_entropy(
            x[None], dg.ops.cast(t[None, :1], "int64")[0], label_smoothing=0.1)

    path = tmp_path / "out.onnx"
    path.write_bytes(b"previous")
    x = np.ones(3, np.float32)
    t = np.array([0.0, 1.0, 1.0], np.float32)
    with pytest.raises(dgx.UnsupportedModelError) as err:
        dgx.export(f, [x, t], path)
    assert {n.op_type for n in err.value.nodes} == {"SigmoidFocalLoss", "RandomUniform",
                                                    "SoftmaxCrossEntropy"}
    assert "label_smoothing" in str(err.value)
    assert path.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_indices_and_losses():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    y = rng.standard_normal((4, 5)).astype(np.float32)
    t = np.array([0, 3, 4, 1], np.int64)
    idx = np.array([2, 0, 2], np.int64)
    upd = rng.standard_normal((3, 5)).astype(np.float32)

    def f(x, y, t, idx, upd):
        logp = dg.ops.log_softmax(x, axis=1)
        return (dg.ops.one_hot(t, 6, 2.0, -1.0, "float32", 0),
                dg.ops.scatter_add(x, idx, upd, 0),
                dg.ops.scatter_add(x, idx[:2], dg.ops.transpose(upd[:2, :4]), 1),
                dg.ops.mse_loss(x, y), dg.ops.l1_loss(x, y, reduction="sum"),
                dg.ops.nll_loss(logp, t, ignore_index=3),
                dg.ops.softmax_cross_entropy(x, t, reduction="none"))

    args = [x, y, t, idx, upd]
    model = dgx.export(f, args, None)
    refs = f(*[dg.tensor(v) for v in args])
    for got, ref in zip(_ort(model, *args), refs):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-6)


def test_export_arguments_are_checked():
    with pytest.raises(ValueError, match="opset"):
        dgx.export(lambda x: x * 2.0, [np.ones(2, np.float32)], None, opset=12)
    with pytest.raises(ValueError, match="input names"):
        dgx.export(lambda x: x * 2.0, [np.ones(2, np.float32)], None, input_names=["a", "b"])


def test_cond_exports_as_if():
    w = dg.tensor(np.array([1.0, -2.0, 3.0], np.float32))

    @dg.function
    def f(x, p):
        y = dg.cond(p, lambda a: dg.ops.relu(a * 2.0 + w), lambda a: dg.ops.exp(a - w), [x])
        return y + 1.0

    x = np.array([0.5, -1.0, 2.0], np.float32)
    model = dgx.export(f, [x, np.array(True)], None)
    assert "If" in {n.op_type for n in model.graph.node}
    for p in (True, False):
        ref = f(dg.tensor(x), dg.tensor(np.array(p))).numpy()
        np.testing.assert_allclose(_ort(model, x, np.array(p))[0], ref, rtol=1e-6)
        np.testing.assert_allclose(dgx.load(model)(x, np.array(p))[0].numpy(), ref, rtol=1e-6)


def test_while_loop_exports_as_loop():
    step = dg.tensor(np.array(1.5, np.float32))

    @dg.function
    def f(x, limit):
        def cond(i, acc):
            return dg.ops.less(dg.ops.sum(acc), limit)

        def body(i, acc):
            return [i + 1, acc * 2.0 + step]
        i, acc = dg.while_loop(cond, body, [dg.tensor(np.array(0, np.int64)), x])
        return i, acc

    x = np.array([0.25, 0.5], np.float32)
    model = dgx.export(f, [x, np.array(20.0, np.float32)], None)
    assert "Loop" in {n.op_type for n in model.graph.node}
    for limit in (20.0, 300.0, -1.0):
        lim = np.array(limit, np.float32)
        i, acc = f(dg.tensor(x), dg.tensor(lim))
        got_i, got_acc = _ort(model, x, lim)
        assert got_i.shape == tuple(i.shape), (got_i.shape, i.shape)
        assert int(got_i) == int(i.numpy())
        np.testing.assert_allclose(got_acc, acc.numpy(), rtol=1e-6)
        di, dacc = dgx.load(model)(x, lim)
        assert int(di.numpy()) == int(i.numpy())
        np.testing.assert_allclose(dacc.numpy(), acc.numpy(), rtol=1e-6)


def test_integer_math_scans_sorts_and_recurrent_ops():
    rng = np.random.default_rng(7)
    a = rng.integers(-20, 20, (3, 4)).astype(np.int64)
    b = rng.integers(1, 6, (3, 4)).astype(np.int64) * rng.choice([-1, 1], (3, 4))
    f32 = rng.standard_normal((3, 4)).astype(np.float32)
    seq = rng.standard_normal((5, 2, 3)).astype(np.float32)
    w = dg.tensor(rng.standard_normal((1, 16, 3)).astype(np.float32))
    r = dg.tensor(rng.standard_normal((1, 16, 4)).astype(np.float32))
    wg = dg.tensor(rng.standard_normal((2, 12, 3)).astype(np.float32))
    rg = dg.tensor(rng.standard_normal((2, 12, 4)).astype(np.float32))

    def f(a, b, x, s):
        y_lstm, h, c = dg.ops.lstm(s, w, r)
        y_gru, hg = dg.ops.gru(s, wg, rg, direction="bidirectional", linear_before_reset=True)
        vals, idx = dg.ops.topk(x, 2, axis=1)
        return (dg.ops.trunc_divide(a, b), dg.ops.floor_divide(a, b), dg.ops.mod(a, b),
                dg.ops.fmod(a, b), dg.ops.floor_divide(x, x + 3.0), dg.ops.mod(x, x * 0.0 + 0.7),
                dg.ops.erf(x), dg.ops.atan(x), dg.ops.isinf(x / 0.0),
                dg.ops.cumsum(x, 1, exclusive=True, reverse=True), vals, idx,
                dg.ops.bitwise_and(a, b), y_lstm, h, c, y_gru, hg)

    args = [a, b, f32, seq]
    model = dgx.export(f, args, None)
    refs = f(*[dg.tensor(v) for v in args])
    for k, (got, ref) in enumerate(zip(_ort(model, *args), refs)):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5, err_msg=str(k))
    for got, ref in zip(dgx.load(model)(*args), refs):
        np.testing.assert_allclose(got.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)


def test_3d_convolution_and_pooling():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((1, 2, 6, 6, 6)).astype(np.float32)
    w = dg.tensor(rng.standard_normal((3, 2, 3, 3, 3)).astype(np.float32))
    wt = dg.tensor(rng.standard_normal((3, 2, 2, 2, 2)).astype(np.float32))

    def f(x):
        y = dg.ops.conv3d(x, w, strides=(1, 2, 1), pads=(1, 1, 0))
        p, _ = dg.ops.max_pool3d(y, [2, 2, 2], pads=(1, 1, 1))
        q = dg.ops.avg_pool3d(y, [2, 1, 2], count_include_pad=False, pads=(1, 0, 1))
        return p, q, dg.ops.conv_transpose3d(y, wt, strides=(2, 2, 2))

    model = dgx.export(f, [x], None)
    refs = f(dg.tensor(x))
    for got, ref in zip(_ort(model, x), refs):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-4, atol=1e-5)


def test_scaled_dot_product_attention():
    rng = np.random.default_rng(9)
    q = rng.standard_normal((2, 4, 5, 8)).astype(np.float32)
    k = rng.standard_normal((2, 2, 6, 8)).astype(np.float32)
    v = rng.standard_normal((2, 2, 6, 3)).astype(np.float32)
    keep = rng.random((5, 6)) > 0.3
    keep[2] = False                                   # a query that keeps no key
    m = dg.tensor(keep)

    def f(q, k, v):
        return (dg.ops.scaled_dot_product_attention(q, k, v, enable_gqa=True),
                dg.ops.scaled_dot_product_attention(q, k, v, m, enable_gqa=True, scale=0.3),
                dg.ops.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))

    model = dgx.export(f, [q, k, v], None)
    refs = f(dg.tensor(q), dg.tensor(k), dg.tensor(v))
    for got, ref in zip(_ort(model, q, k, v), refs):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-5)


def test_scatter_reductions_and_det():
    """ScatterReduce (mul/max/min/add, repeated indices) exports to
    ScatterElements with its reduction, Det to Det; onnxruntime gives
    Dragon's values. Below opset 18, max/min are listed as unsupported."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    idx = np.array([2, 0, 2, -1], np.int64)
    upd = rng.standard_normal((4, 5)).astype(np.float32)
    m = rng.standard_normal((2, 3, 3)).astype(np.float32)

    def f(x, idx, upd, m):
        outs = [dg.ops.scatter_reduce(x, idx, upd, 0, reduction=r)
                for r in ("mul", "max", "min", "add")]
        outs.append(dg.ops.scatter_reduce(x, idx[:3], dg.ops.transpose(upd[:3, :4]), 1,
                                          reduction="max"))
        return tuple(outs) + (dg.ops.det(m),)

    args = [x, idx, upd, m]
    model = dgx.export(f, args, None)
    ops = {n.op_type for n in model.graph.node}
    assert {"ScatterElements", "Det"} <= ops
    refs = f(*[dg.tensor(v) for v in args])
    for got, ref in zip(_ort(model, *args), refs):
        np.testing.assert_allclose(got, ref.numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(dgx.UnsupportedModelError) as err:
        dgx.export(f, args, None, opset=17)
    assert "opset 18" in str(err.value)


def test_padding_layouts_export_and_import_back(tmp_path):
    """Asymmetric pads of every padding op reach ONNX as [x1_begin, ...,
    x1_end, ...] (Pad's as its pads input), run in onnxruntime, and import
    back to the same values; 3-D pads of 6 values too."""
    rng = np.random.default_rng(2)
    w = dg.tensor(rng.standard_normal((4, 3, 3, 2)).astype(np.float32))
    w3 = dg.tensor(rng.standard_normal((2, 3, 2, 2, 3)).astype(np.float32))

    @dg.function
    def f(x, v):
        c = dg.ops.conv2d(x, w, pads=((1, 0), (0, 1)), strides=[2, 1])
        m = dg.ops.max_pool2d(x, [3, 2], [2, 2], ((1, 0), (0, 1)))
        a = dg.ops.avg_pool2d(x, [3, 3], [2, 2], ((0, 1), (1, 1)), count_include_pad=False)
        p = dg.ops.pad(x, ((0, 0), (1, 0), (0, 2), (1, 1)), mode="edge")
        t = dg.ops.conv3d(v, w3, pads=((1, 0), (0, 1), (1, 1)))
        q = dg.ops.avg_pool3d(v, [2, 2, 2], [1, 2, 1], ((1, 0), (0, 1), (1, 0)))
        return c, m, a, p, t, q

    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    v = rng.standard_normal((1, 3, 4, 5, 4)).astype(np.float32)
    model = dgx.export(f, [x, v], tmp_path / "pads.onnx")
    refs = [r.numpy() for r in f(dg.tensor(x), dg.tensor(v))]
    for got, ref in zip(_ort(model, x, v), refs):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)
    back = dgx.load(model)
    for got, ref in zip(back(dg.tensor(x), dg.tensor(v)), refs):
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-5, atol=1e-5)
@pytest.mark.parametrize("opset", [17, 21])
def test_dft_family_exports_to_dft(opset):
    """Fft/Ifft/Rfft/Irfft -> ONNX DFT (axis an attribute before opset 20,
    an input from 20), other norms as a Mul, irfft as the written-out
    Hermitian spectrum; onnxruntime and Dragon's own loader agree with
    Dragon."""
    rng = np.random.default_rng(5)
    z = rng.standard_normal((3, 10, 2)).astype(np.float32)
    r = rng.standard_normal((4, 9)).astype(np.float32)

    def f(z, r):
        return (dg.ops.fft(z, axis=0),
                dg.ops.ifft(z, 12, 1, "ortho"),
                dg.ops.fft(z, 7, 1, "forward"),
                dg.ops.rfft(r, 8, 0, "backward"),
                dg.ops.rfft(r, None, 1, "ortho"),
                dg.ops.irfft(z, None, 1),
                dg.ops.irfft(z, 5, 0, "forward"),
                dg.ops.irfft(z, 19, 1, "ortho"))

    model = dgx.export(f, [z, r], None, opset=opset)
    assert "DFT" in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model, full_check=True)
    refs = [t.numpy() for t in f(dg.tensor(z), dg.tensor(r))]
    for got, ref in zip(_ort(model, z, r), refs):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)
    back = dgx.load(model.SerializeToString())
    for got, ref in zip(back(z, r), refs):
        np.testing.assert_allclose(np.asarray(got.numpy() if hasattr(got, "numpy") else got),
                                   ref, rtol=1e-5, atol=1e-5)


def test_stft_exports_through_gather_and_dft():
    rng = np.random.default_rng(6)
    s = rng.standard_normal((2, 64, 1)).astype(np.float32)

    def f(s):
        return dg.ops.stft(s, 8, dg.ops.hann_window(16), 16)

    model = dgx.export(f, [s], None)
    np.testing.assert_allclose(_ort(model, s)[0], f(dg.tensor(s)).numpy(), rtol=1e-4, atol=1e-4)


def test_matmul_out_dtype_exports_as_matmul_then_cast(tmp_path):
    """A float32 product of bfloat16 operands (autocast's MatMul) is the
    bfloat16 MatMul followed by a Cast to float32."""
    w = dg.tensor(np.random.default_rng(0).standard_normal((6, 4)).astype(np.float32))

    @dg.function
    def f(x):
        return dg.ops.matmul(x.astype("bfloat16"), w.astype("bfloat16"), out_dtype="float32")

    x = np.random.default_rng(1).standard_normal((3, 6)).astype(np.float32)
    model = dgx.export(f, [x], tmp_path / "f.onnx")
    nodes = [(n.op_type, n) for n in model.graph.node]
    kinds = [k for k, _ in nodes]
    i = kinds.index("MatMul")
    cast = nodes[i + 1][1]
    assert cast.op_type == "Cast" and cast.input[0] == nodes[i][1].output[0]
    (to,) = [a.i for a in cast.attribute if a.name == "to"]
    assert to == onnx.TensorProto.FLOAT
    assert model.graph.output[0].type.tensor_type.elem_type == onnx.TensorProto.FLOAT
