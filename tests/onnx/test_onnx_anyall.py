"""ONNX export of any / all (bool ReduceMax / ReduceMin in Dragon's graph):
exported as counts (ReduceSum of a cast, compared with 0), which every opset
from 17 accepts and onnxruntime reduces correctly over an empty axis; results
equal real torch's and Dragon's eager ones."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
dgx = pytest.importorskip("dragon_core.onnx")
import dragon_core.vm.torch as vt  # noqa: E402

# (name, forward(x, t) for vm.torch / torch, input shape)
_CASES = [
    ("any_all_elements", lambda x: (x.any(), x.all()), (3, 4)),
    ("all_dim", lambda x: (x.all(1), x.any(0)), (3, 4)),
    ("keepdim", lambda x: (x.any(1, keepdim=True), x.all(0, keepdim=True)), (3, 4)),
    ("negative_dim_3d", lambda x: (x.any(-1), x.all(-2, keepdim=True)), (2, 3, 4)),
    ("empty_reduced_axis", lambda x: (x.any(1), x.all(1), x.any(), x.all()), (2, 0)),
    ("empty_kept_axis", lambda x: (x.any(1), x.all(1, keepdim=True)), (0, 3)),
]


class _Fn(vt.nn.Module):
    def __init__(self, fn, compare):
        super().__init__()
        self.fn, self.compare = fn, compare

    def forward(self, x):
        return self.fn(x != 0 if self.compare else x)


def _inputs(shape, dtype):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=shape) * rng.integers(1, 3, size=shape)
    if len(shape) == 2 and shape[0] == 3:
        x[0] = 1                          # rows that are all true and all false
        x[1] = 0
    return x.astype(dtype)


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("dtype,compare", [("bool", False), ("float32", False),
                                           ("float32", True)])
@pytest.mark.parametrize("name,fn,shape", _CASES, ids=[c[0] for c in _CASES])
def test_any_all_export_runs_in_onnxruntime(name, fn, shape, dtype, compare, opset):
    x = _inputs(shape, dtype)
    model = dgx.export(_Fn(fn, compare), [x], None, opset=opset)
    ops = [(n.op_type, n.input) for n in model.graph.node]
    assert not any(op in ("ReduceMax", "ReduceMin") for op, _ in ops), ops
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got = sess.run(None, {sess.get_inputs()[0].name: x})
    tx = torch.from_numpy(x)
    want = [w.numpy() for w in fn(tx != 0 if compare else tx)]
    eager = [t.numpy() for t in _Fn(fn, compare)(vt.tensor(x))]
    assert len(got) == len(want)
    for g, w, d in zip(got, want, eager):
        assert g.dtype == np.bool_ and g.shape == w.shape, (g.dtype, g.shape, w.shape)
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(d, w)
