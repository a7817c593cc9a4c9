"""Round trips: models exported from Dragon run in onnxruntime with Dragon's
outputs; the same models exported by torch.onnx import into Dragon and
match torch. ResNet-18 (bench/models/resnet.py) and a BERT-style encoder
layer (bench/models/bert.py), one definition for dg.nn and torch.nn, one
set of weights."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

import dragon_core as dg

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
dgx = pytest.importorskip("dragon_core.onnx")

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, os.path.abspath(BENCH))

from models import bert as bert_model  # noqa: E402
from models import resnet as resnet_model  # noqa: E402


def _ort_run(path_or_model, feeds: dict):
    data = path_or_model if isinstance(path_or_model, (str, os.PathLike)) else \
        path_or_model.SerializeToString()
    sess = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _close(a, b, rtol=1e-4, atol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


@pytest.fixture(scope="module")
def resnet_pair():
    dm = resnet_model.resnet18(dg.nn, num_classes=10)
    state = resnet_model.random_state(resnet_model.float_shapes(dm.state_dict()))
    dm.load_state_dict(state)
    tm = resnet_model.resnet18(torch.nn, num_classes=10)
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()}, strict=False)
    return dm.eval(), tm.eval()


@pytest.fixture(scope="module")
def bert_pair():
    dm = bert_model.encoder_layer(dg.nn, bert_model.dragon_f(), hidden=64, heads=4)
    state = bert_model.random_state({k: tuple(v.shape) for k, v in dm.state_dict().items()})
    dm.load_state_dict(state)
    tm = bert_model.encoder_layer(torch.nn, bert_model.torch_f(), hidden=64, heads=4)
    tm.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    return dm.eval(), tm.eval()


def _x_image(n=2):
    return np.random.default_rng(1).standard_normal((n, 3, 32, 32)).astype(np.float32)


def _x_seq(n=2):
    return np.random.default_rng(2).standard_normal((n, 16, 64)).astype(np.float32)


def test_resnet18_from_dragon_runs_in_onnxruntime(resnet_pair, tmp_path):
    dm, _ = resnet_pair
    x = _x_image()
    path = tmp_path / "resnet18.onnx"
    model = dgx.export(dm, [x], path, opset=21, input_names=["image"],
                       output_names=["logits"], dynamic_axes={"image": {0: "batch"},
                                                              "logits": {0: "batch"}})
    # Initializers carry the state-dict names.
    names = {i.name for i in model.graph.initializer}
    assert set(dm.state_dict()) <= names
    assert dm.training is False
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    ref = dm(dg.tensor(x)).numpy()
    _close(_ort_run(str(path), {"image": x})[0], ref)
    # The batch axis is dynamic in the exported model.
    x3 = _x_image(3)
    _close(_ort_run(str(path), {"image": x3})[0], dm(dg.tensor(x3)).numpy())
    # And Dragon reads its own export back.
    _close(dgx.load(path)(x)[0].numpy(), ref)


def test_export_restores_training_mode(resnet_pair, tmp_path):
    dm, _ = resnet_pair
    dm.train()
    try:
        dgx.export(dm, [_x_image()], tmp_path / "r.onnx")
        assert dm.training
    finally:
        dm.eval()


def test_bert_layer_from_dragon_runs_in_onnxruntime(bert_pair, tmp_path):
    dm, tm = bert_pair
    x = _x_seq()
    path = tmp_path / "bert.onnx"
    model = dgx.export(dm, [x], path, dynamic_axes={"input_0": {0: "batch"},
                                                     "output_0": {0: "batch"}})
    assert {"query.weight", "ln2.bias", "ffn_in.weight"} <= \
        {i.name for i in model.graph.initializer}
    ref = dm(dg.tensor(x)).numpy()
    with torch.no_grad():
        _close(ref, tm(torch.from_numpy(x)).numpy())
    _close(_ort_run(str(path), {"input_0": x})[0], ref)
    x3 = _x_seq(3)      # another batch size through the dynamic axis
    _close(_ort_run(str(path), {"input_0": x3})[0], dm(dg.tensor(x3)).numpy())
    # Below opset 20 GELU is written with Erf, below 17 LayerNorm by hand.
    for opset in (17, 19):
        m = dgx.export(dm, [x], None, opset=opset)
        _close(_ort_run(m, {"input_0": x})[0], ref)


def _torch_export(tm, x, path, **kw):
    torch.onnx.export(tm, (torch.from_numpy(x),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], **kw)


def test_resnet18_from_torch_imports_into_dragon(resnet_pair, tmp_path):
    _, tm = resnet_pair
    x = _x_image()
    path = tmp_path / "resnet18_torch.onnx"
    _torch_export(tm, x, path, dynamic_axes={"x": {0: "n"}, "y": {0: "n"}})
    f = dgx.load(path)
    for xx in (x, _x_image(3)):
        with torch.no_grad():
            ref = tm(torch.from_numpy(xx)).numpy()
        (y,) = f(xx)
        _close(y.numpy(), ref, rtol=1e-4, atol=1e-4)


def test_bert_layer_from_torch_imports_into_dragon(bert_pair, tmp_path):
    _, tm = bert_pair
    x = _x_seq()
    path = tmp_path / "bert_torch.onnx"
    _torch_export(tm, x, path)
    f = dgx.load(path)
    assert "Erf" in {n.op_type for n in f.model.graph.node}
    with torch.no_grad():
        ref = tm(torch.from_numpy(x)).numpy()
    _close(f(x)[0].numpy(), ref)
    # The five-node Erf GELU runs as Dragon's one Gelu op (at O3 with its
    # bias add: BiasGelu, the gelu_fusion pass).
    ops = {op.type for op in f.get_graph(x).op}
    assert ("Gelu" in ops or "BiasGelu" in ops) and "Where" not in ops, ops
    # Tensors are accepted as well as arrays.
    _close(f(dg.tensor(x))[0].numpy(), ref)
