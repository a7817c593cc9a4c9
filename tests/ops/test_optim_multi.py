"""The multi-tensor (foreach) optimizer ops, MultiSgdUpdate and
MultiAdamUpdate: each parameter's result is bit for bit that of the
per-parameter op (SgdUpdate / AdamUpdate) and matches the float64 formula,
for float32 and float64, with empty and 0-d parameters and sizes that cross
the kernels' block (1024) and parallel thresholds; bad lists raise errors
naming the op. The optimizers' use of them: tests/optim/test_foreach.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops

SHAPES = [(3, 4), (), (0,), (1025,), (70, 300), (5,)]


def bits(a) -> np.ndarray:
    """The bytes of an array (0-d included), for bit-exact comparisons."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def _tensors(seed, dtype, shapes=SHAPES):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


SGD_ATTRS = [
    dict(momentum=0.0),
    dict(momentum=0.9),
    dict(momentum=0.9, dampening=0.3, weight_decay=0.01),
    dict(momentum=0.8, nesterov=True, weight_decay=0.1, maximize=True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", SGD_ATTRS, ids=str)
def test_multi_sgd_is_bit_exact(dtype, attrs):
    ps, gs, bs = (_tensors(s, dtype) for s in (1, 2, 3))
    momentum = attrs["momentum"] != 0
    if not momentum:
        bs = [np.zeros((0,), dtype) for _ in ps]
    lr = dg.tensor(np.float32(0.037))
    n = len(ps)
    out = ops.multi_sgd_update(lr, [dg.tensor(a) for a in ps + gs + bs], **attrs)
    assert len(out) == 2 * n
    for k in range(n):
        p1, b1 = ops.sgd_update(dg.tensor(ps[k]), dg.tensor(gs[k]), dg.tensor(bs[k]), lr,
                                **attrs)
        assert out[k].dtype.name == dtype and out[k].shape == p1.shape
        np.testing.assert_array_equal(bits(out[k].numpy()), bits(p1.numpy()))
        np.testing.assert_array_equal(out[n + k].numpy(), b1.numpy())
        # And against the float64 formula (PyTorch's rule).
        g = gs[k].astype(np.float64) * (-1 if attrs.get("maximize") else 1)
        g = g + attrs.get("weight_decay", 0.0) * ps[k]
        if momentum:
            buf = attrs["momentum"] * bs[k] + (1 - attrs.get("dampening", 0.0)) * g
            g = g + attrs["momentum"] * buf if attrs.get("nesterov") else buf
        tol = 1e-5 if dtype == "float32" else 1e-12
        lr64 = float(np.float32(0.037))     # the lr tensor holds a float32
        np.testing.assert_allclose(out[k].numpy(), ps[k] - lr64 * g, rtol=tol, atol=tol)


ADAM_ATTRS = [
    dict(),
    dict(weight_decay=0.1),
    dict(decoupled=True, weight_decay=0.05),
    dict(amsgrad=True, beta1=0.8, beta2=0.95, eps=1e-6, maximize=True),
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("attrs", ADAM_ATTRS, ids=str)
def test_multi_adam_is_bit_exact(dtype, attrs):
    ps, gs, ms = (_tensors(s, dtype) for s in (4, 5, 6))
    vs = [np.abs(a) for a in _tensors(7, dtype)]
    amsgrad = attrs.get("amsgrad", False)
    vmax = [np.abs(a) for a in _tensors(8, dtype)] if amsgrad \
        else [np.zeros((0,), dtype) for _ in ps]
    steps = [dg.tensor(np.int64(s)) for s in (1, 2, 7, 1, 30, 3)]   # per-parameter counts
    lr = dg.tensor(np.float64(0.01))
    n = len(ps)
    out = ops.multi_adam_update(lr, [dg.tensor(a) for a in ps + gs + ms + vs + vmax] + steps,
                                **attrs)
    assert len(out) == 4 * n
    for k in range(n):
        ref = ops.adam_update(dg.tensor(ps[k]), dg.tensor(gs[k]), dg.tensor(ms[k]),
                              dg.tensor(vs[k]), dg.tensor(vmax[k]), lr, steps[k], **attrs)
        for role in range(4):
            got = out[role * n + k].numpy()
            np.testing.assert_array_equal(bits(got), bits(ref[role].numpy()))
    # One parameter against the float64 formula.
    k, t = 4, 30
    b1, b2, eps = attrs.get("beta1", 0.9), attrs.get("beta2", 0.999), attrs.get("eps", 1e-8)
    g = gs[k].astype(np.float64) * (-1 if attrs.get("maximize") else 1)
    p = ps[k].astype(np.float64)
    wd = attrs.get("weight_decay", 0.0)
    if attrs.get("decoupled"):
        p = p * (1 - 0.01 * wd)
    else:
        g = g + wd * ps[k]
    m = b1 * ms[k] + (1 - b1) * g
    v = b2 * vs[k] + (1 - b2) * g * g
    vv = np.maximum(vmax[k], v) if amsgrad else v
    want = p - 0.01 / (1 - b1 ** t) * m / (np.sqrt(vv) / np.sqrt(1 - b2 ** t) + eps)
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(out[k].numpy(), want, rtol=tol, atol=tol)


def test_multi_update_errors_name_op_and_tensors():
    lr = dg.tensor(np.float32(0.1))
    a = dg.tensor(np.zeros((2, 3), np.float32))
    b = dg.tensor(np.zeros((3,), np.float32))
    c = dg.tensor(np.zeros((2, 3), np.float64))
    with pytest.raises(ValueError, match=r"MultiSgdUpdate.*3 tensors per parameter"):
        ops.multi_sgd_update(lr, [a, a], momentum=0.9)
    with pytest.raises(ValueError, match=r"MultiSgdUpdate.*grads\[0\] has shape"):
        ops.multi_sgd_update(lr, [a, b, a], momentum=0.9)
    with pytest.raises(ValueError, match=r"MultiSgdUpdate.*one dtype"):
        ops.multi_sgd_update(lr, [a, c, a, a, a, a], momentum=0.9)
    with pytest.raises(ValueError, match=r"MultiAdamUpdate.*steps\[0\]"):
        ops.multi_adam_update(lr, [a, a, a, a, a, dg.tensor(np.ones(2, np.int64))])
    with pytest.raises(ValueError, match=r"MultiAdamUpdate.*step must be >= 1"):
        ops.multi_adam_update(lr, [a, a, a, a, a, dg.tensor(np.int64(0))])


@pytest.mark.parametrize("name, first", [("MultiSgdUpdate", 1), ("MultiAdamUpdate", 1)])
def test_multi_update_schemas(name, first):
    d = dg._C.op(name).describe()
    assert d["no_grad"] and not d["view"]
    assert [i["name"] for i in d["inputs"]] == ["lr", "tensors"]
    assert d["inputs"][-1]["variadic"] and d["outputs"][-1]["variadic"]
    assert d["dispatch_input"] == first          # params[0]'s dtype picks the kernel
    assert {k["dtypes"] for k in dg._C.kernels(name) if k["device"] == "cpu"} == \
        {"float32", "float64"}
