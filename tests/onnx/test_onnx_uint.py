"""ONNX import/export with uint16/uint32/uint64 tensors and
QuantizeLinear/DequantizeLinear (per-tensor, per-axis, blocked, uint16/int16
zero points), checked against onnx's reference evaluator; dtypes Dragon has
no equivalent for (float8, int4, ...) are refused at load with their name."""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
dgx = pytest.importorskip("dragon_core.onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

_ELEM = {"uint16": TensorProto.UINT16, "uint32": TensorProto.UINT32,
         "uint64": TensorProto.UINT64, "float32": TensorProto.FLOAT,
         "int16": TensorProto.INT16, "uint8": TensorProto.UINT8, "int8": TensorProto.INT8,
         "bool": TensorProto.BOOL, "int64": TensorProto.INT64}


def _model(nodes, inputs, outputs, inits=(), opset=21):
    g = helper.make_graph(nodes, "m", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _vi(name, dt, shape=None):
    return helper.make_tensor_value_info(name, _ELEM[dt], shape)


def _run_both(model, feeds):
    want = ReferenceEvaluator(model).run(None, feeds)
    f = dgx.load(model.SerializeToString())
    got = f(*feeds.values())
    got = got if isinstance(got, (list, tuple)) else [got]
    return [np.asarray(g.numpy() if hasattr(g, "numpy") else g) for g in got], want


@pytest.mark.parametrize("dt", ["uint16", "uint32", "uint64"])
@pytest.mark.parametrize("op,out", [("Add", None), ("Sub", None), ("Mul", None),
                                    ("Div", None), ("Mod", None), ("Max", None),
                                    ("Min", None), ("Less", "bool"), ("Equal", "bool"),
                                    ("BitwiseXor", None)])
def test_binary_ops_import(dt, op, out):
    info = np.iinfo(dt)
    rng = np.random.default_rng(0)
    a = rng.integers(0, info.max, (3, 4), endpoint=True, dtype=dt)
    b = rng.integers(1, info.max, (4,), endpoint=True, dtype=dt)
    a[0, 0] = info.max
    m = _model([helper.make_node(op, ["a", "b"], ["y"])],
               [_vi("a", dt, [3, 4]), _vi("b", dt, [4])], [_vi("y", out or dt)])
    got, want = _run_both(m, {"a": a, "b": b})
    assert got[0].dtype == want[0].dtype
    np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("dt", ["uint16", "uint32", "uint64"])
def test_cast_topk_reduce_import(dt):
    info = np.iinfo(dt)
    x = np.array([[3, info.max, 0, 7], [2 ** (info.bits - 1), 1, 5, 5]], dt)
    k = np.array([2], np.int64)
    nodes = [helper.make_node("Cast", ["x"], ["f"], to=TensorProto.FLOAT),
             helper.make_node("ReduceMax", ["x"], ["r"], keepdims=0)]
    outs = [_vi("f", "float32"), _vi("r", dt)]
    if dt != "uint16":
        nodes.append(helper.make_node("TopK", ["x", "k"], ["v", "i"]))
        outs += [_vi("v", dt), _vi("i", "int64")]
    m = _model(nodes, [_vi("x", dt, [2, 4]), _vi("k", "int64", [1])], outs)
    got, want = _run_both(m, {"x": x, "k": k})
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def _quant_model(op, x_dt, scale, zp, axis=None, block=None, out_dt=None, opset=21,
                 **attrs):
    inits = [numpy_helper.from_array(scale, "s")]
    ins = ["x", "s"]
    if zp is not None:
        inits.append(numpy_helper.from_array(zp, "z"))
        ins.append("z")
    if axis is not None:
        attrs["axis"] = axis
    if block is not None:
        attrs["block_size"] = block
    node = helper.make_node(op, ins, ["y"], **attrs)
    return _model([node], [_vi("x", x_dt)], [_vi("y", out_dt)], inits, opset)


@pytest.mark.parametrize("zp_dt", ["uint8", "int8", "uint16", "int16"])
@pytest.mark.parametrize("mode", ["tensor", "axis", "blocked"])
def test_quantize_dequantize_against_onnx_reference(zp_dt, mode):
    rng = np.random.default_rng(1)
    info = np.iinfo(zp_dt)
    x = (rng.standard_normal((3, 8)) * 3000.0).astype(np.float32)
    x[0, :4] = [0.5, 1.5, -2.5, 1e6]           # ties to even; saturation
    if mode == "tensor":
        scale = np.array(0.37, np.float32)
        zp = np.array(info.min // 2 + info.max // 2 + 1, zp_dt)
        axis = block = None
    elif mode == "axis":
        scale = np.array([0.5, 2.0, 25.0], np.float32)
        zp = np.array([info.min + 1, 0, info.max - 3], zp_dt)
        axis, block = 0, None
    else:
        scale = rng.uniform(0.1, 40.0, (3, 4)).astype(np.float32)
        zp = rng.integers(info.min, info.max, (3, 4), dtype=zp_dt)
        axis, block = 1, 2
    qm = _quant_model("QuantizeLinear", "float32", scale, zp, axis, block, zp_dt)
    got, want = _run_both(qm, {"x": x})
    assert got[0].dtype == np.dtype(zp_dt)
    np.testing.assert_array_equal(got[0], want[0])
    dm = _quant_model("DequantizeLinear", zp_dt, scale, zp, axis, block, "float32")
    got, want = _run_both(dm, {"x": want[0]})
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("elem,name", [(TensorProto.FLOAT8E4M3FN, "float8e4m3fn"),
                                       (TensorProto.INT4, "int4"),
                                       (TensorProto.UINT4, "uint4")])
def test_float8_and_int4_zero_points_are_refused_at_load(elem, name):
    zp = helper.make_tensor("z", elem, [], [0])
    scale = numpy_helper.from_array(np.array(0.5, np.float32), "s")
    node = helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")
    m = helper.make_model(
        helper.make_graph([node], "m", [_vi("x", "float32", [2])],
                          [helper.make_tensor_value_info("y", elem, [2])], [scale, zp]),
        opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    with pytest.raises(NotImplementedError, match=name):
        dgx.load(m.SerializeToString())


@pytest.mark.parametrize("dt", ["uint16", "uint32", "uint64"])
def test_export_runs_in_onnx_reference(dt, tmp_path):
    info = np.iinfo(dt)
    a = np.array([[1, info.max, 7], [2 ** (info.bits - 1), 0, 9]], dt)
    b = np.array([3, 2, 0], dt)

    def fn(x, y):
        return (x + y) // (y + dg.tensor(np.array(1, dt))), x % (y + dg.tensor(np.array(1, dt)))

    path = str(tmp_path / "m.onnx")
    dgx.export(dg.function(fn), (dg.tensor(a), dg.tensor(b)), path)
    model = onnx.load(path)
    onnx.checker.check_model(model, full_check=True)
    got = ReferenceEvaluator(model).run(None, {model.graph.input[0].name: a,
                                               model.graph.input[1].name: b})
    one = np.array(1, dt)
    np.testing.assert_array_equal(got[0], (a + b) // (b + one))
    np.testing.assert_array_equal(got[1], a % (b + one))
    assert got[0].dtype == np.dtype(dt)
