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
