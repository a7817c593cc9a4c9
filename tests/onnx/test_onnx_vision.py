"""ONNX import/export of the vision ops beyond the node suite's cases:
GridSample (5-D, cubic with border/reflection padding), checked against
onnx's reference implementation and onnxruntime, and export round trips."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
dgx = pytest.importorskip("dragon_core.onnx")
from onnx import TensorProto, helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

if not hasattr(dg.ops, "grid_sample"):
    pytest.skip("dragon-vision-ops is not installed", allow_module_level=True)


def _model(node, inputs, outputs, opset=22):
    g = helper.make_graph([node], "m", inputs, outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _both(model, *xs):
    """(Dragon's outputs, onnx reference outputs)."""
    got = [o.numpy() for o in dgx.load(model.SerializeToString())(*xs)]
    want = ReferenceEvaluator(model).run(None, {i.name: x for i, x in
                                               zip(model.graph.input, xs)})
    return got, want


@pytest.mark.parametrize("mode", ["linear", "nearest", "cubic"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_2d_every_mode_and_padding(mode, pad, align):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    # Points up to 2.5 image widths outside, away from rounding ties.
    grid = rng.uniform(-2.5, 2.5, (2, 3, 4, 2)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad,
                            align_corners=align)
    model = _model(node, [_vi("x", x.shape), _vi("g", grid.shape)], [_vi("y", None)])
    got, want = _both(model, x, grid)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("pad", ["zeros", "border", "reflection"])
def test_grid_sample_volumetric(mode, pad):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 2, 3, 4, 5)).astype(np.float32)
    grid = rng.uniform(-1.8, 1.8, (1, 2, 3, 2, 3)).astype(np.float32)
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode=mode, padding_mode=pad)
    model = _model(node, [_vi("x", x.shape), _vi("g", grid.shape)], [_vi("y", None)])
    got, want = _both(model, x, grid)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


def test_grid_sample_5d_cubic_is_refused_clearly():
    node = helper.make_node("GridSample", ["x", "g"], ["y"], mode="cubic")
    model = _model(node, [_vi("x", [1, 1, 2, 2, 2]), _vi("g", [1, 1, 1, 1, 3])],
                   [_vi("y", None)])
    with pytest.raises(NotImplementedError, match="cubic sampling of a 5-D input"):
        dgx.load(model.SerializeToString())(np.zeros((1, 1, 2, 2, 2), np.float32),
                                            np.zeros((1, 1, 1, 1, 3), np.float32))


@pytest.mark.parametrize("attrs, shape", [
    ({"mode": "bicubic", "padding_mode": "zeros"}, (1, 2, 4, 5)),
    ({"mode": "bilinear", "padding_mode": "reflection", "align_corners": True}, (1, 2, 4, 5)),
    ({"mode": "nearest", "padding_mode": "border"}, (1, 2, 3, 4, 5)),
    ({"mode": "bilinear", "padding_mode": "reflection"}, (1, 2, 3, 4, 5)),
])
def test_grid_sample_export_round_trip(attrs, shape):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    grid = rng.uniform(-1.5, 1.5, (1, 3, 2, len(shape) - 2) if len(shape) == 4
                       else (1, 2, 3, 2, 3)).astype(np.float32)

    def f(a, b):
        return dg.ops.grid_sample(a, b, **attrs)

    model = dgx.export(f, [x, grid], None)
    assert [n.op_type for n in model.graph.node] == ["GridSample"]
    want = f(dg.tensor(x), dg.tensor(grid)).numpy()
    ref = ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x,
                                               model.graph.input[1].name: grid})[0]
    np.testing.assert_allclose(ref, want, rtol=1e-4, atol=1e-5)


def test_grid_sample_bicubic_reflection_export_is_refused():
    x = np.zeros((1, 1, 3, 3), np.float32)
    grid = np.zeros((1, 1, 1, 2), np.float32)
    with pytest.raises(NotImplementedError, match="bicubic"):
        dgx.export(lambda a, b: dg.ops.grid_sample(a, b, mode="bicubic",
                                                   padding_mode="reflection"),
                   [x, grid], None)


@pytest.mark.parametrize("opset, ctm", [(10, None), (16, "half_pixel"),
                                        (16, "output_half_pixel"), (21, None)])
@pytest.mark.parametrize("mode", ["avg", "max"])
def test_roi_align_modes_and_opset_coordinates(opset, ctm, mode):
    """Opsets 10-15 have no coordinate_transformation_mode (rois unshifted,
    as onnxruntime runs them); 16+ default to half_pixel. Checked against
    onnxruntime and, from opset 16, onnx's reference (which applies
    half_pixel to opset-10 models too, so it is not the oracle there)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 3, 10, 8)).astype(np.float32)
    rois = np.array([[0.5, 1.0, 6.2, 7.5], [-1.0, 2.0, 4.0, 12.0], [2.2, 3.1, 2.6, 3.3]],
                    np.float32)
    idx = np.array([0, 1, 1], np.int64)
    attrs = {"mode": mode, "output_height": 3, "output_width": 2, "spatial_scale": 0.8,
             "sampling_ratio": 2 if opset == 16 else 0}
    if ctm:
        attrs["coordinate_transformation_mode"] = ctm
    node = helper.make_node("RoiAlign", ["x", "r", "i"], ["y"], **attrs)
    model = _model(node, [_vi("x", x.shape), _vi("r", rois.shape),
                          _vi("i", idx.shape, TensorProto.INT64)], [_vi("y", None)], opset)
    ort = pytest.importorskip("onnxruntime")
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "r": rois, "i": idx})[0]
    got = dgx.load(model.SerializeToString())(x, rois, idx)[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    if opset >= 16:
        _, ref = _both(model, x, rois, idx)
        np.testing.assert_allclose(got, ref[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("aligned", [True, False])
def test_roi_align_max_export_round_trip(aligned):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 12, 12)).astype(np.float32)
    rois = np.array([[0, 1.0, 1.5, 8.0, 9.0], [1, 0.0, 0.0, 11.0, 5.5]], np.float32)

    def f(a, r):
        return dg.ops.roi_align(a, r, [3, 4], spatial_scale=0.75, sampling_ratio=2,
                                aligned=aligned, mode="max")

    model = dgx.export(f, [x, rois], None)
    node = [n for n in model.graph.node if n.op_type == "RoiAlign"][0]
    assert helper.get_attribute_value([a for a in node.attribute if a.name == "mode"][0]) \
        == b"max"
    ref = ReferenceEvaluator(model).run(None, {model.graph.input[0].name: x,
                                               model.graph.input[1].name: rois})[0]
    np.testing.assert_allclose(ref, f(dg.tensor(x), dg.tensor(rois)).numpy(),
                               rtol=1e-4, atol=1e-5)


def test_conv_integer_3d_with_zero_points_and_asymmetric_pads():
    rng = np.random.default_rng(5)
    x = rng.integers(0, 255, (1, 2, 4, 5, 4)).astype(np.uint8)
    w = rng.integers(0, 255, (3, 2, 2, 3, 2)).astype(np.uint8)
    xz, wz = np.array(17, np.uint8), np.array(200, np.uint8)
    node = helper.make_node("ConvInteger", ["x", "w", "xz", "wz"], ["y"],
                            pads=[1, 0, 1, 0, 1, 0], strides=[1, 2, 1])
    model = _model(node, [_vi("x", x.shape, TensorProto.UINT8), _vi("w", w.shape, TensorProto.UINT8),
                          _vi("xz", [], TensorProto.UINT8), _vi("wz", [], TensorProto.UINT8)],
                   [_vi("y", None, TensorProto.INT32)], 21)
    got, want = _both(model, x, w, xz, wz)
    assert got[0].dtype == np.int32
    np.testing.assert_array_equal(got[0], want[0])


def _resize_model(x_shape, mode, scales=None, sizes=None, opset=18, **attrs):
    inputs = [_vi("x", x_shape), _vi("roi", [0])]
    names = ["x", "roi"]
    if scales is not None:
        inputs.append(_vi("scales", [len(scales)]))
        names.append("scales")
    else:
        inputs.append(_vi("sizes", [len(sizes)], TensorProto.INT64))
        names += ["", "sizes"]
    node = helper.make_node("Resize", names, ["y"], mode=mode, **attrs)
    return _model(node, inputs, [_vi("y", None)], opset)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("scales", [[1, 1, 0.6, 0.3], [1, 1, 0.25, 0.8], [1, 1, 1.7, 0.45]])
@pytest.mark.parametrize("attrs", [{}, {"coordinate_transformation_mode": "align_corners"},
                                   {"coordinate_transformation_mode": "asymmetric",
                                    "exclude_outside": 1},
                                   {"cubic_coeff_a": -0.5,
                                    "coordinate_transformation_mode": "pytorch_half_pixel"}])
def test_resize_antialias_scales(mode, scales, attrs):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 9, 13)).astype(np.float32)
    model = _resize_model(x.shape, mode, scales=scales, antialias=1, **attrs)
    s = np.array(scales, np.float32)
    got, want = _both(model, x, np.zeros(0, np.float32), s)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias_sizes_and_axes(mode):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 3, 16, 10)).astype(np.float32)
    model = _resize_model(x.shape, mode, sizes=[5, 4], antialias=1, axes=[2, 3])
    got, want = _both(model, x, np.zeros(0, np.float32), np.array([5, 4], np.int64))
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
    # A constant image stays constant (the weights are normalised).
    got, _ = _both(model, np.full(x.shape, 3.25, np.float32), np.zeros(0, np.float32),
                   np.array([5, 4], np.int64))
    np.testing.assert_allclose(got[0], 3.25, rtol=1e-6)


def test_resize_antialias_box_average_by_hand():
    """Linear antialias halving [0, 1, 2, 3, 4, 5, 6, 7] (half_pixel): output
    i sits at source 2i + 0.5 with a triangle of half-width 2 cells: weights
    1/8, 3/8, 3/8, 1/8 over cells 2i-1 .. 2i+2 (edge clamped)."""
    x = np.arange(8, dtype=np.float32).reshape(1, 1, 1, 8)
    model = _resize_model(x.shape, "linear", scales=[1, 1, 1, 0.5], antialias=1)
    got, _ = _both(model, x, np.zeros(0, np.float32), np.array([1, 1, 1, 0.5], np.float32))
    cells = [[0, 0, 1, 2], [1, 2, 3, 4], [3, 4, 5, 6], [5, 6, 7, 7]]
    want = [np.dot([1 / 8, 3 / 8, 3 / 8, 1 / 8], c) for c in cells]
    np.testing.assert_allclose(got[0].reshape(-1), want, rtol=1e-6)


def test_resize_nearest_antialias_is_refused():
    model = _resize_model([1, 1, 4, 4], "nearest", scales=[1, 1, 0.5, 0.5], antialias=1)
    with pytest.raises(Exception, match="antialias"):
        dgx.load(model.SerializeToString())


@pytest.mark.parametrize("xs, ws, attrs", [
    ((1, 2, 3, 3), (2, 3, 3, 3), {"output_shape": [11, 8], "strides": [3, 2]}),
    ((1, 2, 3, 3), (2, 3, 3, 3), {"output_shape": [11, 8], "strides": [3, 2],
                                  "auto_pad": "SAME_LOWER"}),
    ((2, 2, 3, 2, 3), (2, 2, 2, 3, 2), {"pads": [1, 0, 0, 0, 1, 1], "strides": [2, 1, 2]}),
    ((1, 2, 2, 3, 2), (2, 1, 2, 2, 2), {"output_shape": [5, 7, 5], "strides": [2, 2, 2]}),
])
def test_conv_transpose_negative_and_asymmetric_pads(xs, ws, attrs):
    rng = np.random.default_rng(8)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    b = rng.standard_normal(ws[1]).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], **attrs)
    # onnxruntime is the oracle: onnx's reference evaluator rejects some
    # output_shape cases (its Col2Im shape check).
    ort = pytest.importorskip("onnxruntime")
    model = _model(node, [_vi("x", xs), _vi("w", ws), _vi("b", [ws[1]])], [_vi("y", None)],
                   opset=21)
    model.ir_version = 8
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"x": x, "w": w, "b": b})[0]
    got = dgx.load(model.SerializeToString())(x, w, b)[0].numpy()
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
