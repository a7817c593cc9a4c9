"""Gradients of Lstm and Gru (``src/ops/rnn.cc``), by composition.

The fused kernels have no backward op. The rule rebuilds the layer from
ops, unrolled over time (MatMul, Slice, Sigmoid, Tanh, Clip, Stack: the
same equations as the kernel), and returns the vector-Jacobian product of
that composition, taken with a nested :class:`GradientTape`. Every step is
an op, so the result is differentiable again (higher orders), and inside a
traced function the backward is traced like any other.
"""

from __future__ import annotations

from .._autograd import GradientTape, enable_grad, gradient
from ._util import ops


def _take(t, d):
    """t[d] for a tensor of rank >= 1."""
    o = ops()
    rest = list(t.shape[1:])
    return o.reshape(o.slice(t, [d] + [0] * len(rest), [d + 1] + rest,
                             [1] * (len(rest) + 1)), rest)


def _gate(t, k, h):
    """Block k (of width h) of the last axis of a 2-D tensor."""
    n = t.shape[0]
    return ops().slice(t, [0, k * h], [n, (k + 1) * h], [1, 1])


def rnn_composite(kind: str, inputs, attrs):
    """The Lstm / Gru outputs computed with ops (see ``src/ops/rnn.cc``)."""
    o = ops()
    x, w, r = inputs[:3]
    b = inputs[3] if len(inputs) > 3 else None
    lens = inputs[4] if len(inputs) > 4 else None
    h0 = inputs[5] if len(inputs) > 5 else None
    c0 = inputs[6] if len(inputs) > 6 else None
    p = inputs[7] if len(inputs) > 7 else None
    batch_major = attrs.get("layout", 0) == 1
    direction = attrs.get("direction", "forward")
    clip = attrs.get("clip")
    if batch_major:
        x = o.transpose(x, [1, 0, 2])
        h0 = o.transpose(h0, [1, 0, 2]) if h0 is not None else None
        c0 = o.transpose(c0, [1, 0, 2]) if c0 is not None else None
    t_len, n, i_size = x.shape
    d_num, gh, hid = r.shape
    dev = str(x.device)

    def act(v, fn):
        if clip is not None:
            v = o.clip(v, -clip, clip)
        return fn(v)

    def zeros():
        return o.fill([n, hid], 0.0, x.dtype, device=dev)

    ys, hs, cs = [], [], []
    for d in range(d_num):
        back = direction == "reverse" or d == 1
        wd, rd = _take(w, d), _take(r, d)
        h = _take(h0, d) if h0 is not None else zeros()
        c = _take(c0, d) if c0 is not None else zeros()
        if b is not None:
            bd = _take(b, d)
            wb = o.slice(bd, [0], [gh], [1])
            rb = o.slice(bd, [gh], [2 * gh], [1])
        else:
            wb = rb = o.fill([gh], 0.0, x.dtype, device=dev)
        xw = o.reshape(o.matmul(o.reshape(x, [t_len * n, i_size]), wd, transpose_b=True),
                       [t_len, n, gh])
        outs = [None] * t_len
        steps = range(t_len - 1, -1, -1) if back else range(t_len)
        for t in steps:
            xt = _take(xw, t)
            h_prev, c_prev = h, c
            if kind == "Lstm":
                pre = xt + o.matmul(h, rd, transpose_b=True) + (wb + rb)
                ig, og, fg, cg = (_gate(pre, k, hid) for k in range(4))
                if p is not None:
                    pd = _take(p, d)
                    pi, po, pf = (o.slice(pd, [k * hid], [(k + 1) * hid], [1]) for k in range(3))
                    ig = ig + pi * c
                    fg = fg + pf * c
                ig = act(ig, o.sigmoid)
                fg = 1.0 - ig if attrs.get("input_forget") else act(fg, o.sigmoid)
                c = fg * c + ig * act(cg, o.tanh)
                if p is not None:
                    og = og + po * c
                h = act(og, o.sigmoid) * o.tanh(c)
            else:
                xz, xr, xh = (_gate(xt, k, hid) for k in range(3))
                hr = o.matmul(h, rd, transpose_b=True)
                wz, wr, wh = (o.slice(wb, [k * hid], [(k + 1) * hid], [1]) for k in range(3))
                rz, rr, rh = (o.slice(rb, [k * hid], [(k + 1) * hid], [1]) for k in range(3))
                z = act(xz + _gate(hr, 0, hid) + wz + rz, o.sigmoid)
                rg = act(xr + _gate(hr, 1, hid) + wr + rr, o.sigmoid)
                if attrs.get("linear_before_reset"):
                    rec = rg * (_gate(hr, 2, hid) + rh)
                else:
                    r_h = o.slice(rd, [2 * hid, 0], [3 * hid, hid], [1, 1])
                    rec = o.matmul(rg * h, r_h, transpose_b=True) + rh
                hc = act(xh + rec + wh, o.tanh)
                h = (1.0 - z) * hc + z * h
            if lens is not None:
                # Steps at or past a sequence's end keep its state, output 0.
                live = o.reshape(o.greater(lens, o.fill([], float(t), lens.dtype,
                                                        int_value=t, device=dev)), [n, 1])
                h = o.where(live, h, h_prev)
                c = o.where(live, c, c_prev)
                outs[t] = o.where(live, h, o.fill([], 0.0, x.dtype, device=dev))
                continue
            outs[t] = h
        ys.append(o.stack(outs, 0) if t_len else
                  o.fill([0, n, hid], 0.0, x.dtype, device=dev))
        hs.append(h)
        cs.append(c)
    y = o.stack(ys, 1)                  # [T, D, N, H]
    y_h, y_c = o.stack(hs, 0), o.stack(cs, 0)
    if batch_major:
        y = o.transpose(y, [2, 0, 1, 3])
        y_h, y_c = o.transpose(y_h, [1, 0, 2]), o.transpose(y_c, [1, 0, 2])
    return (y, y_h, y_c) if kind == "Lstm" else (y, y_h)


def _vjp(kind, node, dys):
    inputs = list(node.inputs)
    floats = [t for t in inputs if t.dtype.is_floating_point]
    with enable_grad(), GradientTape() as tape:
        for t in floats:
            tape.watch(t)
        outs = rnn_composite(kind, inputs, node.attrs)
    grads = iter(tape.gradient(list(outs), floats, output_gradients=list(dys)))
    return [next(grads) if t.dtype.is_floating_point else None for t in inputs]


@gradient("Lstm")
def _lstm(node, dy, dy_h, dy_c):
    return _vjp("Lstm", node, (dy, dy_h, dy_c))


@gradient("Gru")
def _gru(node, dy, dy_h):
    return _vjp("Gru", node, (dy, dy_h))
