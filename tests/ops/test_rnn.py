"""Lstm and Gru against a float64 NumPy reference written from the ONNX
operator spec, and against torch.nn.LSTM / torch.nn.GRU (docs/ops.md,
"Recurrent layers")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError


def _sig(x):
    return 1.0 / (1.0 + np.exp(-x))


def _clip(x, clip):
    return x if clip is None else np.clip(x, -clip, clip)


def _to_time_major(x, h0, c0, layout):
    if layout == 1:
        x = x.transpose(1, 0, 2)
        h0 = None if h0 is None else h0.transpose(1, 0, 2)
        c0 = None if c0 is None else c0.transpose(1, 0, 2)
    return x, h0, c0


def _from_time_major(y, states, layout):
    if layout == 1:
        return [y.transpose(2, 0, 1, 3)] + [s.transpose(1, 0, 2) for s in states]
    return [y] + list(states)


def lstm_reference(X, W, R, B=None, sequence_lens=None, initial_h=None, initial_c=None, P=None,
                   hidden_size=None,
                   direction="forward", layout=0, clip=None, input_forget=False):
    """ONNX LSTM; steps at or past a sequence's length keep the state, output 0."""
    X, h0, c0 = _to_time_major(X, initial_h, initial_c, layout)
    T, N, _ = X.shape
    D, _, H = R.shape
    Y = np.zeros((T, D, N, H))
    hs, cs = [], []
    for d in range(D):
        Wi, Wo, Wf, Wc = np.split(W[d], 4)
        Ri, Ro, Rf, Rc = np.split(R[d], 4)
        b = B[d] if B is not None else np.zeros(8 * H)
        Wbi, Wbo, Wbf, Wbc, Rbi, Rbo, Rbf, Rbc = np.split(b, 8)
        Pi, Po, Pf = np.split(P[d], 3) if P is not None else (0.0, 0.0, 0.0)
        h = h0[d] if h0 is not None else np.zeros((N, H))
        c = c0[d] if c0 is not None else np.zeros((N, H))
        order = range(T - 1, -1, -1) if (direction == "reverse" or d == 1) else range(T)
        for t in order:
            x = X[t]
            i = _sig(_clip(x @ Wi.T + h @ Ri.T + Pi * c + Wbi + Rbi, clip))
            f = 1 - i if input_forget else _sig(_clip(x @ Wf.T + h @ Rf.T + Pf * c + Wbf + Rbf,
                                                      clip))
            g = np.tanh(_clip(x @ Wc.T + h @ Rc.T + Wbc + Rbc, clip))
            c_new = f * c + i * g
            o = _sig(_clip(x @ Wo.T + h @ Ro.T + Po * c_new + Wbo + Rbo, clip))
            h_new = o * np.tanh(c_new)
            live = _live(sequence_lens, t, N)
            h, c = np.where(live, h_new, h), np.where(live, c_new, c)
            Y[t, d] = np.where(live, h_new, 0.0)
        hs.append(h)
        cs.append(c)
    return _from_time_major(Y, [np.stack(hs), np.stack(cs)], layout)


def _live(lens, t, n):
    """[N, 1] mask of the sequences step t belongs to."""
    if lens is None:
        return np.ones((n, 1), bool)
    return (t < np.asarray(lens)).reshape(n, 1)


def gru_reference(X, W, R, B=None, sequence_lens=None, initial_h=None, hidden_size=None,
                  direction="forward", layout=0, clip=None, linear_before_reset=False):
    X, h0, _ = _to_time_major(X, initial_h, None, layout)
    T, N, _ = X.shape
    D, _, H = R.shape
    Y = np.zeros((T, D, N, H))
    hs = []
    for d in range(D):
        Wz, Wr, Wh = np.split(W[d], 3)
        Rz, Rr, Rh = np.split(R[d], 3)
        b = B[d] if B is not None else np.zeros(6 * H)
        Wbz, Wbr, Wbh, Rbz, Rbr, Rbh = np.split(b, 6)
        h = h0[d] if h0 is not None else np.zeros((N, H))
        order = range(T - 1, -1, -1) if (direction == "reverse" or d == 1) else range(T)
        for t in order:
            x = X[t]
            z = _sig(_clip(x @ Wz.T + h @ Rz.T + Wbz + Rbz, clip))
            r = _sig(_clip(x @ Wr.T + h @ Rr.T + Wbr + Rbr, clip))
            if linear_before_reset:
                hc = np.tanh(_clip(x @ Wh.T + r * (h @ Rh.T + Rbh) + Wbh, clip))
            else:
                hc = np.tanh(_clip(x @ Wh.T + (r * h) @ Rh.T + Rbh + Wbh, clip))
            h_new = (1 - z) * hc + z * h
            live = _live(sequence_lens, t, N)
            h = np.where(live, h_new, h)
            Y[t, d] = np.where(live, h_new, 0.0)
        hs.append(h)
    return _from_time_major(Y, [np.stack(hs)], layout)


def make_inputs(kind, T, N, I, H, direction="forward", layout=0, n_inputs=8, dtype="float64",
                seed=0, full_lens=False):
    """X, W, R, B, sequence_lens, initial_h, initial_c, P (the first n_inputs;
    Gru has no initial_c or P). Lengths are random in [0, T] (T with full_lens)."""
    rng = np.random.default_rng(seed)
    G = 4 if kind == "Lstm" else 3
    D = 2 if direction == "bidirectional" else 1
    state = (N, D, H) if layout else (D, N, H)
    shapes = [(N, T, I) if layout else (T, N, I), (D, G * H, I), (D, G * H, H), (D, 2 * G * H),
              None, state, state, (D, 3 * H)]
    n_max = 8 if kind == "Lstm" else 6
    out = []
    for i, s in enumerate(shapes[:min(n_inputs, n_max)]):
        if s is None:
            lens = np.full(N, T) if full_lens else rng.integers(0, T + 1, N)
            out.append(lens.astype(np.int32 if seed % 2 == 0 else np.int64))
        else:
            out.append((0.7 * rng.standard_normal(s)).astype(dtype))
    return out


CONFIGS = [
    # (T, N, I, H, direction, layout, n_inputs, attrs); input 5 is sequence_lens
    (5, 3, 4, 3, "forward", 0, 3, {}),
    (5, 3, 4, 3, "forward", 0, 4, {}),
    (5, 4, 3, 2, "forward", 0, 5, {}),
    (4, 2, 3, 2, "reverse", 0, 6, {}),
    (5, 4, 3, 2, "reverse", 1, 6, {}),
    (4, 2, 3, 2, "bidirectional", 0, 8, {}),
    (4, 3, 3, 2, "bidirectional", 1, 8, {}),
    (3, 4, 2, 5, "forward", 1, 7, {"clip": 0.5}),
    (1, 1, 1, 1, "forward", 0, 8, {"hidden_size": 1}),
    (0, 2, 3, 2, "forward", 0, 6, {}),
    (3, 0, 3, 2, "bidirectional", 0, 4, {}),
    (40, 8, 16, 12, "bidirectional", 0, 7, {}),
]


def _id(c):
    return f"T{c[0]}-N{c[1]}-I{c[2]}-H{c[3]}-{c[4]}-l{c[5]}-in{c[6]}-{c[7]}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=[_id(c) for c in CONFIGS])
@pytest.mark.parametrize("extra", [{}, {"input_forget": True}], ids=["", "input_forget"])
def test_lstm(cfg, dtype, extra):
    T, N, I, H, direction, layout, n_in, attrs = cfg
    xs = make_inputs("Lstm", T, N, I, H, direction, layout, n_in, dtype)
    attrs = dict(attrs, direction=direction, layout=layout, **extra)
    OpCase.of("Lstm", xs, lstm_reference, attrs=attrs, tol=10).check_forward()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("cfg", CONFIGS, ids=[_id(c) for c in CONFIGS])
@pytest.mark.parametrize("extra", [{}, {"linear_before_reset": True}], ids=["", "lbr"])
def test_gru(cfg, dtype, extra):
    T, N, I, H, direction, layout, n_in, attrs = cfg
    xs = make_inputs("Gru", T, N, I, H, direction, layout, min(n_in, 6), dtype)
    attrs = dict(attrs, direction=direction, layout=layout, **extra)
    OpCase.of("Gru", xs, gru_reference, attrs=attrs, tol=10).check_forward()


@pytest.mark.parametrize("bidirectional", [False, True])
def test_lstm_matches_torch(bidirectional):
    torch = pytest.importorskip("torch")
    T, N, I, H = 6, 3, 4, 5
    D = 2 if bidirectional else 1
    m = torch.nn.LSTM(I, H, bidirectional=bidirectional).double()
    x = torch.randn(T, N, I, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    h0 = torch.randn(D, N, H, dtype=torch.float64)
    c0 = torch.randn(D, N, H, dtype=torch.float64)
    y, (hn, cn) = m(x, (h0, c0))
    sfx = ["", "_reverse"][:D]

    def reorder(w):  # torch i, f, g, o -> ONNX i, o, f, c
        i, f, g, o = np.split(w, 4)
        return np.concatenate([i, o, f, g])
    W = np.stack([reorder(getattr(m, "weight_ih_l0" + s).detach().numpy()) for s in sfx])
    R = np.stack([reorder(getattr(m, "weight_hh_l0" + s).detach().numpy()) for s in sfx])
    B = np.stack([np.concatenate([reorder(getattr(m, "bias_ih_l0" + s).detach().numpy()),
                                  reorder(getattr(m, "bias_hh_l0" + s).detach().numpy())])
                  for s in sfx])
    lens = np.full(N, T, np.int64)
    Y, Yh, Yc = dg.ops.lstm(*[dg.tensor(a) for a in (x.numpy(), W, R, B, lens, h0.numpy(),
                                                      c0.numpy())],
                            direction="bidirectional" if bidirectional else "forward")
    # torch: [T, N, D*H]; ONNX: [T, D, N, H]
    want = y.detach().numpy().reshape(T, N, D, H).transpose(0, 2, 1, 3)
    np.testing.assert_allclose(Y.numpy(), want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Yh.numpy(), hn.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Yc.numpy(), cn.detach().numpy(), rtol=1e-12, atol=1e-12)


def test_gru_matches_torch():
    """torch's GRU is ONNX's with linear_before_reset and gates r, z, n -> z, r, h."""
    torch = pytest.importorskip("torch")
    T, N, I, H = 5, 2, 3, 4
    m = torch.nn.GRU(I, H, batch_first=True).double()
    x = torch.randn(N, T, I, dtype=torch.float64)
    h0 = torch.randn(1, N, H, dtype=torch.float64)
    y, hn = m(x, h0)

    def reorder(w):
        r, z, n = np.split(w, 3)
        return np.concatenate([z, r, n])
    W = reorder(m.weight_ih_l0.detach().numpy())[None]
    R = reorder(m.weight_hh_l0.detach().numpy())[None]
    B = np.concatenate([reorder(m.bias_ih_l0.detach().numpy()),
                        reorder(m.bias_hh_l0.detach().numpy())])[None]
    Y, Yh = dg.ops.gru(*[dg.tensor(a) for a in (x.numpy(), W, R, B, np.full(N, T, np.int32),
                                                 h0.numpy().transpose(1, 0, 2))],
                       layout=1, linear_before_reset=True)
    np.testing.assert_allclose(Y.numpy()[:, :, 0], y.detach().numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(Yh.numpy()[:, 0], hn.detach().numpy()[0], rtol=1e-12,
                               atol=1e-12)


def test_graph_mode():
    xs = make_inputs("Gru", 4, 3, 3, 2, "bidirectional", 0, 6)

    @dg.function
    def f(*ts):
        y, yh = dg.ops.gru(*ts, direction="bidirectional")
        return y * 2.0, yh

    y, yh = f(*[dg.tensor(a) for a in xs])
    want = gru_reference(*xs, direction="bidirectional")
    np.testing.assert_allclose(y.numpy(), 2 * want[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(yh.numpy(), want[1], rtol=1e-12, atol=1e-12)


def _lstm_bad(**change):
    xs = make_inputs("Lstm", 3, 2, 4, 5, n_inputs=6, dtype="float32", full_lens=True)
    for k, v in change.items():
        xs[int(k[1:])] = v
    return [dg.tensor(a) for a in xs]


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.lstm(*_lstm_bad(), direction="both"), r"Lstm.*direction must be"),
    (lambda: dg.ops.lstm(*_lstm_bad(), layout=2), r"Lstm.*layout must be 0"),
    (lambda: dg.ops.lstm(*_lstm_bad(i0=np.zeros((3, 4), np.float32))), r"Lstm.*X must be 3-D"),
    (lambda: dg.ops.lstm(*_lstm_bad(i1=np.zeros((1, 20, 3), np.float32))),
     r"Lstm.*W must be \[1, 20, 4\]"),
    (lambda: dg.ops.lstm(*_lstm_bad(i2=np.zeros((1, 20, 4), np.float32))),
     r"Lstm.*R must be \[1, 4\*H, H\]"),
    (lambda: dg.ops.lstm(*_lstm_bad(), direction="bidirectional"), r"Lstm.*R must be \[2,"),
    (lambda: dg.ops.lstm(*_lstm_bad(i3=np.zeros((1, 20), np.float32))),
     r"Lstm.*B must be float32\[1, 40\]"),
    (lambda: dg.ops.lstm(*_lstm_bad(i5=np.zeros((1, 3, 5), np.float32))),
     r"Lstm.*initial_h must be float32\[1, 2, 5\]"),
    (lambda: dg.ops.lstm(*_lstm_bad(i4=np.zeros(3, np.int32))),
     r"Lstm.*sequence_lens must be \[N\] = \[2\]"),
    (lambda: dg.ops.lstm(*_lstm_bad(i4=np.zeros(2, np.float32))),
     r"Lstm.*sequence_lens.*float32"),
    (lambda: dg.ops.lstm(*_lstm_bad(), hidden_size=4), r"Lstm.*hidden_size 4 disagrees"),
    (lambda: dg.ops.lstm(*_lstm_bad(), clip=0.0), r"Lstm.*clip must be positive"),
    (lambda: dg.ops.lstm(*_lstm_bad(i1=np.zeros((1, 20, 4), np.float64))),
     r"Lstm.*one dtype"),
])
def test_bad_input(call, match):
    with pytest.raises(InvalidArgumentError, match=match):
        call()


@pytest.mark.parametrize("bad", [-1, 4])
def test_sequence_lens_out_of_range(bad):
    from dragon_core.errors import OutOfRangeError
    xs = make_inputs("Gru", 3, 2, 2, 2, n_inputs=5, full_lens=True)
    xs[4] = np.array([1, bad], np.int32)
    with pytest.raises(OutOfRangeError, match=rf"Gru.*sequence_lens\[1\] = {bad} is outside "
                                              r"\[0, T\] with T = 3"):
        dg.ops.gru(*[dg.tensor(a) for a in xs])


def test_sequence_lens_matches_torch_packed():
    """Y_h at each sequence's own end, as torch's packed sequences give."""
    torch = pytest.importorskip("torch")
    T, N, I, H = 6, 3, 2, 4
    m = torch.nn.GRU(I, H).double()
    x = torch.randn(T, N, I, dtype=torch.float64)
    lens = [6, 2, 4]
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lens, enforce_sorted=False)
    _, hn = m(packed)

    def reorder(w):
        r, z, n = np.split(w, 3)
        return np.concatenate([z, r, n])
    W = reorder(m.weight_ih_l0.detach().numpy())[None]
    R = reorder(m.weight_hh_l0.detach().numpy())[None]
    B = np.concatenate([reorder(m.bias_ih_l0.detach().numpy()),
                        reorder(m.bias_hh_l0.detach().numpy())])[None]
    Y, Yh = dg.ops.gru(*[dg.tensor(a) for a in (x.numpy(), W, R, B,
                                                 np.array(lens, np.int64))],
                       linear_before_reset=True)
    np.testing.assert_allclose(Yh.numpy(), hn.detach().numpy(), rtol=1e-12, atol=1e-12)
    assert not Y.numpy()[2:, 0, 1].any() and not Y.numpy()[4:, 0, 2].any()
