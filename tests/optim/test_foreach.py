"""Multi-tensor (foreach) optimizer updates in SGD, Adam and AdamW.

``foreach=None`` (default) and ``True`` use one MultiSgdUpdate /
MultiAdamUpdate per batch of parameters of one dtype and device; the
results must be bit for bit those of ``foreach=False`` (one op per
parameter), in eager mode and in a compiled step. The op-level tests are in
tests/ops/test_optim_multi.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.optim as optim
from dragon_core import ops

from ._reference import RefAdam, RefSGD


def bits(a) -> np.ndarray:
    """The bytes of an array (0-d included), for bit-exact comparisons."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


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


_ADAM_THREADS_SCRIPT = r"""
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(4)
sizes = [1, 1023, 1025, 70000, 262144, 3 * 1024 + 7]
ts = [lambda s=s: dg.tensor(rng.standard_normal(s).astype(np.float32)) for s in sizes]
p = [f() for f in ts]; g = [f() for f in ts]; m = [f() for f in ts]
v = [dg.tensor(np.abs(rng.standard_normal(s)).astype(np.float32)) for s in sizes]
steps = [dg.tensor(np.float32(k + 1)) for k in range(len(sizes))]
out = dg.ops.multi_adam_update(dg.tensor(np.float32(1e-3)), p + g + m + v + v + steps,
                               weight_decay=0.01)
h = hashlib.sha256()
for x in out:
    h.update(np.ascontiguousarray(x.numpy()).tobytes())
print(h.hexdigest())
"""


def test_multi_adam_same_bits_for_any_thread_count():
    """MultiAdamUpdate hands each thread its share of every parameter
    (blocks in part-major order, optim.cc MultiBlocks): the bits do not
    depend on the thread count, with parameters of one block, odd block
    counts and sizes no multiple of a block."""
    from tests.ops._common import hashes_per_thread_count
    hashes = hashes_per_thread_count(_ADAM_THREADS_SCRIPT, 300)
    assert len(set(hashes.values())) == 1, hashes
