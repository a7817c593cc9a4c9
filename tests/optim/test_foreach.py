"""Multi-tensor (foreach) optimizer updates: MultiSgdUpdate, MultiAdamUpdate.

Each parameter's result must be bit for bit that of the per-parameter op
(SgdUpdate / AdamUpdate), in eager and in a compiled step, for float32 and
float64, with empty and 0-d parameters and sizes that cross the kernels'
block (1024) and parallel thresholds; the optimizers' ``foreach`` option
picks the multi-tensor op by default on the host.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.optim as optim
from dragon_core import ops

from ._reference import RefAdam, RefSGD

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


def _model(seed, dtype):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in [(4, 3), (3,), (3, 2), (2,), ()]]


def _loss(params, x):
    w1, b1, w2, b2, s = params
    h = ops.tanh(ops.add(ops.matmul(x, w1), b1))
    return ops.mul(ops.sum(ops.square(ops.add(ops.matmul(h, w2), b2))), ops.exp(s))


@pytest.mark.parametrize("mode", ["eager", "graph"])
@pytest.mark.parametrize("cls, kwargs", [
    (optim.SGD, dict(lr=0.05, momentum=0.9, weight_decay=0.01)),
    (optim.SGD, dict(lr=0.05)),
    (optim.Adam, dict(lr=0.01, amsgrad=True)),
    (optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
], ids=["sgd_momentum", "sgd", "adam_amsgrad", "adamw"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_optimizer_foreach_equals_per_parameter(cls, kwargs, mode, dtype):
    x = dg.tensor(np.random.default_rng(9).standard_normal((5, 4)).astype(dtype))
    results = []
    for foreach in (False, True, None):
        params = [dg.tensor(a).requires_grad_() for a in _model(0, dtype)]
        opt = cls(params, foreach=foreach, **kwargs)

        def step(x, params=params, opt=opt):
            with dg.GradientTape() as tape:
                tape.watch(params)
                loss = _loss(params, x)
            opt.step(tape.gradient(loss, params))
            return loss

        fn = dg.function(step) if mode == "graph" else step
        for _ in range(4):
            fn(x)
        if mode == "graph":
            types = [op.type for op in fn.get_graph(x).op]
            multi = "MultiSgdUpdate" if cls is optim.SGD else "MultiAdamUpdate"
            assert types.count(multi) == (0 if foreach is False else 1)
            single = multi[len("Multi"):]
            assert types.count(single) == (5 if foreach is False else 0)
        results.append([p.numpy().copy() for p in params])
    for other in results[1:]:
        for a, b in zip(results[0], other):
            np.testing.assert_array_equal(bits(a), bits(b))


def test_foreach_follows_the_reference_and_mixed_dtypes():
    # Two dtypes in one group: one batch per dtype.
    rng = np.random.default_rng(3)
    w32 = rng.standard_normal((3, 2)).astype(np.float32)
    w64 = rng.standard_normal((4,))
    ps = [dg.tensor(w32).requires_grad_(), dg.tensor(w64).requires_grad_()]
    opt = optim.SGD(ps, lr=0.1, momentum=0.9, foreach=True)
    ref32 = RefSGD([([w32.copy()], dict(lr=0.1, momentum=0.9))])
    ref64 = RefSGD([([w64.copy()], dict(lr=0.1, momentum=0.9))])
    for i in range(3):
        g32 = np.full_like(w32, 0.5 * (i + 1))
        g64 = np.linspace(-1, 1, 4) * (i + 1)
        opt.step([dg.tensor(g32), dg.tensor(g64)])
        ref32.step([[g32]])
        ref64.step([[g64]])
    np.testing.assert_allclose(ps[0].numpy(), ref32.params[0], rtol=1e-6)
    np.testing.assert_allclose(ps[1].numpy(), ref64.params[0], rtol=1e-13)
    assert ps[0].dtype.name == "float32" and ps[1].dtype.name == "float64"

    # Adam against its reference with per-parameter step counts that differ
    # (a parameter that had no gradient in the first step).
    a = rng.standard_normal((5,))
    b = rng.standard_normal((2, 2))
    pa, pb = dg.tensor(a).requires_grad_(), dg.tensor(b).requires_grad_()
    opt = optim.Adam([pa, pb], lr=0.01, foreach=True)
    ref_a = RefAdam([([a.copy()], dict(lr=0.01))])
    ref_b = RefAdam([([b.copy()], dict(lr=0.01))])
    opt.step([dg.tensor(np.ones(5)), None])
    ref_a.step([[np.ones(5)]])
    for i in range(3):
        ga, gb = np.full(5, 0.1 * i - 0.3), np.full((2, 2), 0.2 + i)
        opt.step([dg.tensor(ga), dg.tensor(gb)])
        ref_a.step([[ga]])
        ref_b.step([[gb]])
    np.testing.assert_allclose(pa.numpy(), ref_a.params[0], rtol=1e-12)
    np.testing.assert_allclose(pb.numpy(), ref_b.params[0], rtol=1e-12)
    assert opt.state[pa]["step"].item() == 4 and opt.state[pb]["step"].item() == 3


def test_foreach_true_without_kernel_raises(monkeypatch):
    from dragon_core.optim import optimizer as mod

    monkeypatch.setattr(mod, "_KERNEL_CACHE", {("MultiSgdUpdate", "cpu"): set()})
    p = dg.tensor(np.ones(3, np.float32)).requires_grad_()
    opt = optim.SGD([p], lr=0.1, foreach=True)
    with pytest.raises(NotImplementedError, match=r"MultiSgdUpdate.*float32.*cpu"):
        opt.step([dg.tensor(np.ones(3, np.float32))])
    # foreach=None updates one by one instead (the same bits, see above).
    opt = optim.SGD([p], lr=0.1)
    opt.step([dg.tensor(np.ones(3, np.float32))])
    np.testing.assert_allclose(p.numpy(), 0.9, rtol=1e-7)
