"""Recurrent layers (``RNN``, ``LSTM``, ``GRU`` and their cells) in
PyTorch's parameter layout (``weight_ih_l{k}``, gates i, f, g, o for LSTM and
r, z, n for GRU), unrolled over time with ops (differentiable)."""

from __future__ import annotations

import math

from .._creation import empty, zeros
from .._functions import _EXPORTS as _T
from . import init
from .modules import Module, Parameter


def _cell_params(mod, suffix, in_size, hidden, gates, bias):
    setattr(mod, f"weight_ih{suffix}", Parameter(empty(gates * hidden, in_size)))
    setattr(mod, f"weight_hh{suffix}", Parameter(empty(gates * hidden, hidden)))
    if bias:
        setattr(mod, f"bias_ih{suffix}", Parameter(empty(gates * hidden)))
        setattr(mod, f"bias_hh{suffix}", Parameter(empty(gates * hidden)))


def _lin(x, w, b):
    out = _T["matmul"](x, w.t())
    return out if b is None else out + b


def _lstm_step(x, h, c, wi, wh, bi, bh):
    g = _lin(x, wi, bi) + _lin(h, wh, bh)
    i, f, gg, o = _T["chunk"](g, 4, -1)
    c = _T["sigmoid"](f) * c + _T["sigmoid"](i) * _T["tanh"](gg)
    h = _T["sigmoid"](o) * _T["tanh"](c)
    return h, c


def _gru_step(x, h, wi, wh, bi, bh):
    gi = _lin(x, wi, bi)
    gh = _lin(h, wh, bh)
    ir, iz, inn = _T["chunk"](gi, 3, -1)
    hr, hz, hn = _T["chunk"](gh, 3, -1)
    r = _T["sigmoid"](ir + hr)
    z = _T["sigmoid"](iz + hz)
    n = _T["tanh"](inn + r * hn)
    return (1 - z) * n + z * h


def _rnn_step(x, h, wi, wh, bi, bh, nonlinearity):
    pre = _lin(x, wi, bi) + _lin(h, wh, bh)
    return _T["tanh"](pre) if nonlinearity == "tanh" else _T["relu"](pre)


class _RNNBase(Module):
    _gates = 1

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, nonlinearity="tanh", proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        if proj_size:
            raise NotImplementedError("LSTM(proj_size=...) is not supported")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.nonlinearity = bidirectional, nonlinearity
        dirs = 2 if bidirectional else 1
        for layer in range(num_layers):
            for d in range(dirs):
                in_size = input_size if layer == 0 else hidden_size * dirs
                _cell_params(self, f"_l{layer}" + ("_reverse" if d else ""), in_size,
                             hidden_size, self._gates, bias)
        self.reset_parameters()

    def reset_parameters(self):
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _weights(self, layer, d):
        s = f"_l{layer}" + ("_reverse" if d else "")
        return (getattr(self, "weight_ih" + s), getattr(self, "weight_hh" + s),
                getattr(self, "bias_ih" + s) if self.bias else None,
                getattr(self, "bias_hh" + s) if self.bias else None)

    def forward(self, input, hx=None):
        batched = input.ndim == 3
        x = input if batched else input.unsqueeze(1 if not self.batch_first else 0)
        if self.batch_first:
            x = x.transpose(0, 1)
        T, B = x.shape[0], x.shape[1]
        dirs = 2 if self.bidirectional else 1
        lstm = self._gates == 4
        if hx is None:
            h0 = zeros(self.num_layers * dirs, B, self.hidden_size, dtype=x.dtype)
            c0 = zeros(self.num_layers * dirs, B, self.hidden_size, dtype=x.dtype) if lstm \
                else None
        else:
            h0, c0 = (hx if lstm else (hx, None))
            if not batched:
                h0 = h0.unsqueeze(1)
                c0 = c0.unsqueeze(1) if c0 is not None else None
        hn, cn = [], []
        layer_in = x
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                wi, wh, bi, bh = self._weights(layer, d)
                k = layer * dirs + d
                h = h0[k]
                c = c0[k] if lstm else None
                steps = range(T - 1, -1, -1) if d else range(T)
                seq = [None] * T
                for t in steps:
                    xt = layer_in[t]
                    if lstm:
                        h, c = _lstm_step(xt, h, c, wi, wh, bi, bh)
                    elif self._gates == 3:
                        h = _gru_step(xt, h, wi, wh, bi, bh)
                    else:
                        h = _rnn_step(xt, h, wi, wh, bi, bh, self.nonlinearity)
                    seq[t] = h
                outs.append(_T["stack"](seq, 0))
                hn.append(h)
                if lstm:
                    cn.append(c)
            layer_in = outs[0] if dirs == 1 else _T["cat"](outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                from .functional import dropout
                layer_in = dropout(layer_in, self.dropout, True)
        out = layer_in.transpose(0, 1) if self.batch_first else layer_in
        h_n = _T["stack"](hn, 0)
        c_n = _T["stack"](cn, 0) if lstm else None
        if not batched:
            out = out.squeeze(1 if not self.batch_first else 0)
            h_n = h_n.squeeze(1)
            c_n = c_n.squeeze(1) if c_n is not None else None
        return (out, (h_n, c_n)) if lstm else (out, h_n)

    def flatten_parameters(self):
        pass

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}, num_layers={self.num_layers}"


class RNN(_RNNBase):
    _gates = 1


class LSTM(_RNNBase):
    _gates = 4


class GRU(_RNNBase):
    _gates = 3


class _CellBase(Module):
    _gates = 1

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__()
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.nonlinearity = nonlinearity
        _cell_params(self, "", input_size, hidden_size, self._gates, bias)
        stdv = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            init.uniform_(p, -stdv, stdv)

    def _w(self):
        return (self.weight_ih, self.weight_hh, self.bias_ih if self.bias else None,
                self.bias_hh if self.bias else None)


class RNNCell(_CellBase):
    def forward(self, input, hx=None):
        if hx is None:
            hx = zeros(*input.shape[:-1], self.hidden_size, dtype=input.dtype)
        return _rnn_step(input, hx, *self._w(), self.nonlinearity)


class LSTMCell(_CellBase):
    _gates = 4

    def forward(self, input, hx=None):
        if hx is None:
            z = zeros(*input.shape[:-1], self.hidden_size, dtype=input.dtype)
            hx = (z, z)
        return _lstm_step(input, hx[0], hx[1], *self._w())


class GRUCell(_CellBase):
    _gates = 3

    def forward(self, input, hx=None):
        if hx is None:
            hx = zeros(*input.shape[:-1], self.hidden_size, dtype=input.dtype)
        return _gru_step(input, hx, *self._w())
