"""NumPy (float64) references of the optimizers, written from PyTorch's
documented update rules, independent of dragon_core."""

from __future__ import annotations

import numpy as np


class RefOptimizer:
    """``groups``: list of (list of arrays, hyper-parameter dict)."""

    def __init__(self, groups):
        self.groups = [([np.array(p, np.float64) for p in ps], dict(h)) for ps, h in groups]
        self.state = [[{} for _ in ps] for ps, _ in self.groups]

    def step(self, grads):
        """``grads``: one list of arrays (or None) per group."""
        for (ps, h), sts, gs in zip(self.groups, self.state, grads):
            for i, (p, g) in enumerate(zip(ps, gs)):
                if g is not None:
                    ps[i] = self.update(p, np.asarray(g, np.float64), sts[i], h)

    @property
    def params(self):
        return [p for ps, _ in self.groups for p in ps]


class RefSGD(RefOptimizer):
    def update(self, p, g, st, h):
        g = -g if h.get("maximize") else g
        g = g + h.get("weight_decay", 0.0) * p
        mom = h.get("momentum", 0.0)
        if mom:
            buf = st.get("buf", np.zeros_like(p))
            buf = mom * buf + (1 - h.get("dampening", 0.0)) * g
            st["buf"] = buf
            g = g + mom * buf if h.get("nesterov") else buf
        return p - h["lr"] * g


class RefAdam(RefOptimizer):
    def update(self, p, g, st, h):
        b1, b2 = h.get("betas", (0.9, 0.999))
        eps, wd, lr = h.get("eps", 1e-8), h.get("weight_decay", 0.0), h["lr"]
        g = -g if h.get("maximize") else g
        if h.get("decoupled"):
            p = p * (1 - lr * wd)
        else:
            g = g + wd * p
        t = st["t"] = st.get("t", 0) + 1
        m = st["m"] = b1 * st.get("m", 0.0) + (1 - b1) * g
        v = st["v"] = b2 * st.get("v", 0.0) + (1 - b2) * g * g
        if h.get("amsgrad"):
            v = st["vmax"] = np.maximum(st.get("vmax", 0.0), v)
        den = np.sqrt(v) / np.sqrt(1 - b2 ** t) + eps
        return p - lr / (1 - b1 ** t) * m / den


class RefRMSprop(RefOptimizer):
    def update(self, p, g, st, h):
        alpha, eps = h.get("alpha", 0.99), h.get("eps", 1e-8)
        g = -g if h.get("maximize") else g
        g = g + h.get("weight_decay", 0.0) * p
        s = st["s"] = alpha * st.get("s", 0.0) + (1 - alpha) * g * g
        if h.get("centered"):
            a = st["a"] = alpha * st.get("a", 0.0) + (1 - alpha) * g
            den = np.sqrt(s - a * a) + eps
        else:
            den = np.sqrt(s) + eps
        mom = h.get("momentum", 0.0)
        if mom:
            buf = st["buf"] = mom * st.get("buf", 0.0) + g / den
            return p - h["lr"] * buf
        return p - h["lr"] * g / den


class RefAdagrad(RefOptimizer):
    def update(self, p, g, st, h):
        g = -g if h.get("maximize") else g
        g = g + h.get("weight_decay", 0.0) * p
        t = st["t"] = st.get("t", 0) + 1
        acc = st["sum"] = st.get("sum", h.get("initial_accumulator_value", 0.0)) + g * g
        clr = h["lr"] / (1 + (t - 1) * h.get("lr_decay", 0.0))
        return p - clr * g / (np.sqrt(acc) + h.get("eps", 1e-10))
