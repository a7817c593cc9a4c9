"""A BERT-style transformer encoder layer for any ``nn`` namespace.

``encoder_layer(nn, F)`` builds one post-LayerNorm encoder layer (BERT's):
multi-head self-attention (query/key/value projections, scaled dot-product
scores, softmax, output projection), residual + LayerNorm, a GELU
feed-forward block (hidden -> 4 x hidden -> hidden), residual + LayerNorm.
``F`` supplies the four tensor functions whose names differ between
libraries (:data:`DRAGON_F`, :func:`torch_f`), so Dragon and torch run one
definition with the same state-dict names (``query.weight``, ``ln1.bias``...).
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np


def dragon_f():
    """The tensor functions of ``dragon_core`` used by the layer."""
    import dragon_core as dg
    return SimpleNamespace(reshape=dg.ops.reshape, permute=dg.ops.transpose,
                           matmul=dg.ops.matmul, softmax=dg.ops.softmax)


def torch_f():
    """The same functions in torch."""
    import torch
    return SimpleNamespace(reshape=torch.reshape, permute=torch.permute,
                           matmul=torch.matmul, softmax=torch.softmax)


def encoder_layer(nn, F, hidden: int = 256, heads: int = 4, ffn: int | None = None,
                  eps: float = 1e-12):
    """Return the encoder layer module built from ``nn`` (``dragon_core.nn``
    or ``torch.nn``) and ``F`` (:func:`dragon_f` / :func:`torch_f`).

    Input and output: ``[batch, sequence, hidden]`` float32.
    """
    ffn = ffn or 4 * hidden
    head_dim = hidden // heads

    class EncoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query = nn.Linear(hidden, hidden)
            self.key = nn.Linear(hidden, hidden)
            self.value = nn.Linear(hidden, hidden)
            self.attn_out = nn.Linear(hidden, hidden)
            self.ln1 = nn.LayerNorm(hidden, eps=eps)
            self.ffn_in = nn.Linear(hidden, ffn)
            self.act = nn.GELU()
            self.ffn_out = nn.Linear(ffn, hidden)
            self.ln2 = nn.LayerNorm(hidden, eps=eps)

        def forward(self, x):
            b, s = int(x.shape[0]), int(x.shape[1])

            def heads_first(t):
                return F.permute(F.reshape(t, (b, s, heads, head_dim)), (0, 2, 1, 3))

            q, k, v = heads_first(self.query(x)), heads_first(self.key(x)), \
                heads_first(self.value(x))
            scores = F.matmul(q, F.permute(k, (0, 1, 3, 2))) * (1.0 / math.sqrt(head_dim))
            ctx = F.matmul(F.softmax(scores, -1), v)
            ctx = F.reshape(F.permute(ctx, (0, 2, 1, 3)), (b, s, hidden))
            x = self.ln1(x + self.attn_out(ctx))
            return self.ln2(x + self.ffn_out(self.act(self.ffn_in(x))))

    return EncoderLayer()


def random_state(shapes: dict, seed: int = 0) -> dict:
    """Deterministic float32 weights for the layer's state dict: Linear
    weights uniform in torch's default bound, biases small, LayerNorm
    scale around 1 and shift around 0 (non-trivial, so a wrong
    normalisation shows)."""
    rng = np.random.default_rng(seed)
    state = {}
    for name, shape in shapes.items():
        if name.startswith("ln"):
            value = (rng.uniform(0.5, 1.5, shape) if name.endswith("weight")
                     else rng.standard_normal(shape) * 0.1)
        elif len(shape) == 2:
            bound = 1.0 / math.sqrt(shape[1])
            value = rng.uniform(-bound, bound, shape)
        else:
            value = rng.standard_normal(shape) * 0.02
        state[name] = value.astype(np.float32)
    return state
