"""Gradient of ScaledDotProductAttention (``src/ops/attention.cc``).

The rule recomputes the attention probabilities ``P`` from the inputs with
ops (MatMul, Where, Softmax) and applies the textbook adjoints::

    dV = P^T dY            dP = dY V^T
    dS = P * (dP - rowsum(dP * P))
    dQ = dS K * scale      dK = dS^T Q * scale      dMask = dS (float mask)

so it is itself differentiable (second order through the same ops).
Grouped-query attention is handled by viewing the query heads as
``[Hk, G]`` (G = Hq / Hk) against key/value heads ``[Hk, 1]``: MatMul
broadcasts over G, and the key/value gradients sum over it. A query row
that keeps no key has P = 0 (as the kernel's output is 0), so it passes no
gradient; the recomputation avoids the NaN a plain softmax of -inf would
give.
"""

from __future__ import annotations

import math

import numpy as np

from .._autograd import gradient, needs_grad
from ._util import ops, scalar_like, unbroadcast


def attention_probs(q5, k5, scale, mask5, causal, L, S):
    """P [..., Hk, G, L, S] from grouped views (see the module doc)."""
    o = ops()
    s = o.matmul(q5, k5, transpose_b=True) * scalar_like(q5, scale)
    keep = None
    if mask5 is not None:
        if mask5.dtype.name == "bool":
            keep = mask5
        else:
            s = s + mask5
    if causal:
        from .. import tensor
        tri = tensor(np.tril(np.ones((L, S), bool)), device=str(q5.device))
        keep = tri
    if keep is None and mask5 is None:
        return o.softmax(s, -1)
    if keep is not None:
        s = o.where(keep, s, scalar_like(s, -math.inf))
    # NaN rows stay NaN (as the kernel): only an all -inf row is "keeps no key".
    row_ok = o.not_equal(o.max(s, [-1], keepdims=True), scalar_like(s, -math.inf))
    p = o.softmax(o.where(row_ok, s, scalar_like(s, 0.0)), -1)
    return o.where(row_ok, p, scalar_like(p, 0.0))


def _views(node):
    """Grouped views of the inputs and the shapes to restore."""
    o = ops()
    q, k, v = node.inputs[:3]
    qs, ks, vs = list(q.shape), list(k.shape), list(v.shape)
    L, E, S, Ev = qs[-2], qs[-1], ks[-2], vs[-1]
    if len(qs) >= 3:
        pre, hq, hk = qs[:-3], qs[-3], ks[-3]
    else:
        pre, hq, hk = [], 1, 1
    g = hq // hk if hk else 1
    q5 = o.reshape(q, pre + [hk, g, L, E])
    k5 = o.reshape(k, pre + [hk, 1, S, E])
    v5 = o.reshape(v, pre + [hk, 1, S, Ev])
    return q5, k5, v5, pre, hk, g, (L, E, S, Ev)


@gradient("ScaledDotProductAttention")
def _attention(node, dy):
    o = ops()
    q, k, v = node.inputs[:3]
    mask = node.inputs[3] if len(node.inputs) > 3 else None
    q5, k5, v5, pre, hk, g, (L, E, S, Ev) = _views(node)
    scale = node.attrs.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(E) if E else math.inf
    grads = [None] * len(node.inputs)
    zeros = lambda t: o.fill(list(t.shape), 0.0, t.dtype, device=str(t.device))  # noqa: E731
    if S == 0 or L == 0 or not hk:
        grads[:3] = [zeros(q), zeros(k), zeros(v)]
        if mask is not None and mask.dtype.is_floating_point:
            grads[3] = zeros(mask)
        return grads
    full = list(q.shape[:-2]) + [L, S]
    mask5 = None
    if mask is not None:
        mask5 = o.reshape(o.broadcast_to(mask, full), pre + [hk, g, L, S])
    p = attention_probs(q5, k5, scale, mask5, bool(node.attrs["is_causal"]), L, S)
    dy5 = o.reshape(dy, pre + [hk, g, L, Ev])
    c = scalar_like(dy, scale)
    g_axis = -3
    if needs_grad(node, 2):
        dv = o.sum(o.matmul(p, dy5, transpose_a=True), [g_axis], keepdims=True)
        grads[2] = o.reshape(dv, list(v.shape))
    dp = o.matmul(dy5, v5, transpose_b=True)
    ds = p * (dp - o.sum(dp * p, [-1], keepdims=True))
    if needs_grad(node, 0):
        grads[0] = o.reshape(o.matmul(ds, k5) * c, list(q.shape))
    if needs_grad(node, 1):
        dk = o.sum(o.matmul(ds, q5, transpose_a=True), [g_axis], keepdims=True) * c
        grads[1] = o.reshape(dk, list(k.shape))
    if mask is not None and mask.dtype.is_floating_point and needs_grad(node, 3):
        grads[3] = unbroadcast(o.reshape(ds, full), mask.shape)
    return grads
