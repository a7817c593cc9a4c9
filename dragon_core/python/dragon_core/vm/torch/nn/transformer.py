"""``MultiheadAttention`` and ``TransformerEncoder(Layer)`` in PyTorch's
parameter layout (``in_proj_weight``, ``out_proj``), composed of ops."""

from __future__ import annotations

import copy
import math

from .._creation import empty, zeros
from .._functions import _EXPORTS as _T
from . import functional as F
from . import init
from .modules import Dropout, LayerNorm, Linear, Module, ModuleList, Parameter


class MultiheadAttention(Module):
    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        if add_bias_kv or add_zero_attn or (kdim not in (None, embed_dim)) or (
                vdim not in (None, embed_dim)):
            raise NotImplementedError("MultiheadAttention with add_bias_kv, add_zero_attn or "
                                      "kdim/vdim != embed_dim is not supported")
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first, self.head_dim = batch_first, embed_dim // num_heads
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim))
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * embed_dim))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias)
        init.xavier_uniform_(self.in_proj_weight)
        if bias:
            init.zeros_(self.out_proj.bias)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        if is_causal and attn_mask is None:
            raise RuntimeError("MultiheadAttention: need attn_mask if specifying the is_causal "
                               "hint (is_causal only says that attn_mask is the causal mask; "
                               "pass the mask, e.g. torch.triu(ones(L, S, dtype=bool), 1))")
        if is_causal and key_padding_mask is None and not need_weights:
            # torch takes the hint as is: attn_mask stands for the causal mask
            attn_mask = None
        batched = query.ndim == 3
        if not batched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
        elif self.batch_first:
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        L, B, E = query.shape
        S = key.shape[0]
        H, Dh = self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        wq, wk, wv = _T["chunk"](w, 3, 0)
        bq, bk, bv = _T["chunk"](b, 3, 0) if b is not None else (None, None, None)
        q = F.linear(query, wq, bq)
        k = F.linear(key, wk, bk)
        v = F.linear(value, wv, bv)
        # (L, B, E) -> (B, H, L, Dh)
        q = q.reshape(L, B, H, Dh).permute(1, 2, 0, 3)
        k = k.reshape(S, B, H, Dh).permute(1, 2, 0, 3)
        v = v.reshape(S, B, H, Dh).permute(1, 2, 0, 3)
        if not need_weights and not (self.dropout and self.training):
            # the attention weights are not returned: the native fused op
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=self._merged_mask(attn_mask, key_padding_mask, is_causal,
                                                     q, B, H, L, S))
            return self._project(out, L, B, E, batched), None
        scores = _T["matmul"](q, k.transpose(-2, -1)) * (1.0 / math.sqrt(Dh))
        if is_causal and attn_mask is None:
            import numpy as np
            from .._creation import _from_numpy_owned
            attn_mask = _from_numpy_owned(np.triu(np.ones((L, S), bool), 1))
        if attn_mask is not None:
            if attn_mask.dtype.name == "bool":
                m = attn_mask.reshape(B, H, L, S) if attn_mask.ndim == 3 else attn_mask
                scores = scores.masked_fill(m, float("-inf"))
            else:
                scores = scores + (attn_mask.reshape(B, H, L, S) if attn_mask.ndim == 3
                                   else attn_mask)
        if key_padding_mask is not None:
            kpm = key_padding_mask.reshape(B, 1, 1, S)
            if kpm.dtype.name == "bool":
                scores = scores.masked_fill(kpm, float("-inf"))
            else:
                scores = scores + kpm
        attn = F.softmax(scores, -1)
        if self.dropout and self.training:
            attn = F.dropout(attn, self.dropout, True)
        out = _T["matmul"](attn, v)  # (B, H, L, Dh)
        out = self._project(out, L, B, E, batched)
        weights = None
        if need_weights:
            weights = attn.mean(1) if average_attn_weights else attn
            if not batched:
                weights = weights.squeeze(0)
        return out, weights


def _mha_merged_mask(self, attn_mask, key_padding_mask, is_causal, q, B, H, L, S):
    """attn_mask (True = masked out), key_padding_mask and is_causal as one
    additive float mask broadcastable to (B, H, L, S), or None."""
    if is_causal and attn_mask is None:
        import numpy as np
        from .._creation import _from_numpy_owned
        attn_mask = _from_numpy_owned(np.triu(np.ones((L, S), bool), 1))
    total = None
    for m in (attn_mask, key_padding_mask):
        if m is None:
            continue
        if m is key_padding_mask:
            m = m.reshape(B, 1, 1, S)
        elif m.ndim == 3:
            m = m.reshape(B, H, L, S)
        if m.dtype.name == "bool":
            m = zeros(tuple(m.shape), dtype=q.dtype).masked_fill(m, float("-inf"))
        else:
            m = m.to(q.dtype)
        total = m if total is None else total + m
    return total


def _mha_project(self, out, L, B, E, batched):
    out = out.permute(2, 0, 1, 3).reshape(L, B, E)
    out = self.out_proj(out)
    if not batched:
        out = out.squeeze(1)
    elif self.batch_first:
        out = out.transpose(0, 1)
    return out


MultiheadAttention._merged_mask = _mha_merged_mask
MultiheadAttention._project = _mha_project


class TransformerEncoderLayer(Module):
    def __init__(self, d_model, nhead, dim_feedforward=2048, dropout=0.1, activation="relu",
                 layer_norm_eps=1e-5, batch_first=False, norm_first=False, bias=True,
                 device=None, dtype=None):
        super().__init__()
        self.self_attn = MultiheadAttention(d_model, nhead, dropout, bias,
                                            batch_first=batch_first)
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias)
        self.norm_first = norm_first
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        if isinstance(activation, str):
            self.activation = {"relu": F.relu, "gelu": F.gelu}[activation]
        else:
            self.activation = activation

    def _sa(self, x, mask, kpm, is_causal):
        return self.dropout1(self.self_attn(x, x, x, attn_mask=mask, key_padding_mask=kpm,
                                            need_weights=False, is_causal=is_causal)[0])

    def _ff(self, x):
        return self.dropout2(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal=False):
        x = src
        if self.norm_first:
            x = x + self._sa(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff(self.norm2(x))
        else:
            x = self.norm1(x + self._sa(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff(x))
        return x


class TransformerEncoder(Module):
    def __init__(self, encoder_layer, num_layers, norm=None, enable_nested_tensor=True,
                 mask_check=True):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))
        return self.norm(x) if self.norm is not None else x
