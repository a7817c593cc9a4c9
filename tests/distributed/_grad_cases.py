"""Gradient-through-collective cases shared by _grad_worker.py (2 ranks) and
test_collective_grads.py (the NumPy float64 reference by central finite
differences of the global loss sum_r <w_r, C_r(x_0, x_1)>)."""

from __future__ import annotations

import numpy as np

WORLD = 2
DTYPES = ("float32", "float64")
MODES = ("eager", "graph")
# name -> (kind, kwargs, x shape)
KINDS = {
    "all_reduce_sum": ("all_reduce", {"op": "sum"}, (3, 4)),
    "all_reduce_avg": ("all_reduce", {"op": "avg"}, (3, 4)),
    "broadcast_src0": ("broadcast", {"src": 0}, (5,)),
    "broadcast_src1": ("broadcast", {"src": 1}, (2, 3)),
    "all_gather": ("all_gather", {}, (3,)),
    "reduce_scatter_sum": ("reduce_scatter", {"op": "sum"}, (4, 3)),
    "reduce_scatter_avg": ("reduce_scatter", {"op": "avg"}, (4, 3)),
    "all_to_all": ("all_to_all", {}, (4, 3)),
}


def cases():
    return [(f"{k}-{d}-{m}", k, d, m) for k in KINDS for d in DTYPES for m in MODES]


def x_of(rank, shape):
    return np.random.default_rng(100 + rank).standard_normal(shape)


def forward(kind, kw, xs, r):
    """Rank r's result of the collective on the ranks' inputs xs (NumPy)."""
    n = len(xs)
    if kind == "all_reduce":
        s = sum(xs)
        return s / n if kw["op"] == "avg" else s
    if kind == "broadcast":
        return xs[kw["src"]].copy()
    if kind == "all_gather":
        return np.stack(xs)
    if kind == "reduce_scatter":
        s = sum(xs)
        s = s / n if kw["op"] == "avg" else s
        return np.split(s, n, axis=0)[r]
    if kind == "all_to_all":
        return np.concatenate([np.split(x, n, axis=0)[r] for x in xs], axis=0)
    raise ValueError(kind)


def w_of(rank, name):
    kind, kw, shape = KINDS[name]
    xs = [x_of(r, shape) for r in range(WORLD)]
    return np.random.default_rng(200 + rank).standard_normal(forward(kind, kw, xs, rank).shape)


def reference_grad(name, rank):
    """d/dx_rank of sum_r <w_r, C_r(x_0, ..)> by central differences (float64)."""
    kind, kw, shape = KINDS[name]
    xs = [x_of(r, shape) for r in range(WORLD)]
    ws = [w_of(r, name) for r in range(WORLD)]

    def loss(xk):
        ys = list(xs)
        ys[rank] = xk
        return sum(float((ws[r] * forward(kind, kw, ys, r)).sum()) for r in range(WORLD))
    g = np.zeros(shape)
    eps = 1e-3
    for i in np.ndindex(*shape):
        hi, lo = xs[rank].copy(), xs[rank].copy()
        hi[i] += eps
        lo[i] -= eps
        g[i] = (loss(hi) - loss(lo)) / (2 * eps)
    return g
