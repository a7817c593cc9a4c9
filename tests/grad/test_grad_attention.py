"""Gradient of ScaledDotProductAttention (``_grads/attention.py``) against
central finite differences in float64, first and second order, and against
torch autograd."""

from __future__ import annotations

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

OP = "ScaledDotProductAttention"

# (name, q, k, v shapes, mask spec, attrs)
CASES = [
    ("basic", (1, 2, 3, 4), (1, 2, 4, 4), (1, 2, 4, 3), None, {}),
    ("rank2", (3, 2), (4, 2), (4, 3), None, {"scale": 0.8}),
    ("causal", (1, 2, 4, 3), (1, 2, 4, 3), (1, 2, 4, 2), None, {"is_causal": True}),
    ("causal_L>S", (1, 1, 5, 3), (1, 1, 3, 3), (1, 1, 3, 2), None, {"is_causal": True}),
    ("bool_mask", (2, 1, 3, 2), (2, 1, 4, 2), (2, 1, 4, 3), ("bool", (2, 1, 3, 4)), {}),
    ("float_mask", (1, 2, 3, 2), (1, 2, 4, 2), (1, 2, 4, 2), ("float", (1, 1, 3, 4)), {}),
    ("float_mask_bcast", (2, 2, 3, 2), (2, 2, 4, 2), (2, 2, 4, 2), ("float", (4,)), {}),
    ("ninf_mask", (1, 1, 3, 2), (1, 1, 4, 2), (1, 1, 4, 2), ("ninf", (3, 4)), {}),
    ("gqa", (1, 4, 3, 2), (1, 2, 4, 2), (1, 2, 4, 3), None, {"enable_gqa": True}),
    ("gqa_mask", (2, 3, 2, 2), (2, 1, 3, 2), (2, 1, 3, 2), ("bool", (2, 3, 2, 3)),
     {"enable_gqa": True}),
    ("empty_S", (1, 2, 3, 2), (1, 2, 0, 2), (1, 2, 0, 3), None, {}),
]


def _inputs(case, seed=0):
    _, qs, ks, vs, mask, _ = case
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s) for s in (qs, ks, vs)]
    if mask is not None:
        kind, shape = mask
        if kind == "bool":
            m = rng.random(shape) < 0.6
            m[..., 0, :] = False           # a query that keeps no key: zero gradient
            m[..., 1, 0] = True
            xs.append(m)
        elif kind == "float":
            xs.append(rng.standard_normal(shape))
        else:
            m = np.where(rng.random(shape) < 0.5, -np.inf, 0.0)
            m[0, :] = -np.inf
            m[1, 1] = 0.0
            xs.append(m)
    return xs


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_attention(case):
    xs = _inputs(case)
    c = OpCase.of(OP, xs, attrs=case[5])
    wrt = [0, 1, 2] + ([3] if len(xs) > 3 and xs[3].dtype.kind == "f"
                       and np.isfinite(xs[3]).all() else [])
    c.check_grad(wrt=wrt)
    c.check_grad(wrt=wrt, order=2)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] not in ("rank2",)],
                         ids=[c[0] for c in CASES if c[0] not in ("rank2",)])
def test_matches_torch_autograd(case):
    torch = pytest.importorskip("torch")
    xs = _inputs(case, seed=3)
    dy = np.random.default_rng(4).standard_normal(
        xs[0].shape[:-1] + (xs[2].shape[-1],))
    ts = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in xs]
    kw = dict(case[5])
    if len(ts) > 3:
        kw["attn_mask"] = ts[3]
    torch.nn.functional.scaled_dot_product_attention(*ts[:3], **kw).backward(torch.tensor(dy))
    ds = [dg.tensor(x) for x in xs]
    with dg.GradientTape() as tape:
        for d in ds[:3]:
            tape.watch(d)
        y = dg.ops.scaled_dot_product_attention(*ds, **case[5])
    grads = tape.gradient(y, ds[:3], output_gradients=dg.tensor(dy))
    for g, t in zip(grads, ts[:3]):
        np.testing.assert_allclose(g.numpy(), t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_graph_mode_training_step():
    """The gradient works inside a traced function (dg.function)."""
    xs = _inputs(CASES[0])

    @dg.function
    def step(q, k, v):
        with dg.GradientTape() as tape:
            tape.watch(q)
            y = dg.ops.scaled_dot_product_attention(q, k, v, is_causal=True)
            loss = dg.ops.sum(y * y)
        return tape.gradient(loss, q)

    ts = [dg.tensor(x) for x in xs]
    with dg.GradientTape() as tape:
        tape.watch(ts[0])
        y = dg.ops.scaled_dot_product_attention(*ts, is_causal=True)
        loss = dg.ops.sum(y * y)
    want = tape.gradient(loss, ts[0]).numpy()
    np.testing.assert_allclose(step(*ts).numpy(), want, rtol=1e-12, atol=1e-14)
