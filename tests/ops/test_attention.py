"""ScaledDotProductAttention against a float64 NumPy reference and against
torch.nn.functional.scaled_dot_product_attention (docs/ops.md, "Attention")."""

from __future__ import annotations

import numpy as np
import pytest

from dragon_sdk.testing import OpCase

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

OP = "ScaledDotProductAttention"


def sdpa_reference(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
                   enable_gqa=False):
    """float64 reference: softmax(q k^T * scale + mask) v; rows with no kept key are 0."""
    L, E, S = q.shape[-2], q.shape[-1], k.shape[-2]
    scale = 1.0 / np.sqrt(E) if scale is None else scale
    if q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        g = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, g, axis=-3), np.repeat(v, g, axis=-3)
    out_shape = q.shape[:-1] + (v.shape[-1],)
    if S == 0 or L == 0:
        return np.zeros(out_shape)
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    keep = np.ones(s.shape, bool)
    if is_causal:
        keep &= np.tril(np.ones((L, S), bool))
    if attn_mask is not None:
        if attn_mask.dtype == bool:
            keep &= attn_mask
        else:
            s = s + attn_mask
    s = np.where(keep, s, -np.inf)
    mx = s.max(-1, keepdims=True)
    ok = mx > -np.inf
    e = np.where(ok, np.exp(s - np.where(ok, mx, 0.0)), 0.0)
    tot = e.sum(-1, keepdims=True)
    p = e / np.where(tot > 0, tot, 1.0)
    return np.matmul(p, v)


# (name, query, key, value shapes, mask: None | "bool" | "float" | shape spec, attrs)
CASES = [
    ("basic", (2, 3, 5, 4), (2, 3, 7, 4), (2, 3, 7, 6), None, {}),
    ("rank2", (5, 4), (7, 4), (7, 3), None, {}),
    ("rank3", (3, 5, 4), (3, 6, 4), (3, 6, 4), None, {}),
    ("rank5", (2, 2, 2, 3, 4), (2, 2, 2, 4, 4), (2, 2, 2, 4, 2), None, {}),
    ("scale", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 4), None, {"scale": 0.3}),
    ("causal", (2, 2, 6, 4), (2, 2, 6, 4), (2, 2, 6, 5), None, {"is_causal": True}),
    ("causal_L<S", (1, 2, 3, 4), (1, 2, 6, 4), (1, 2, 6, 4), None, {"is_causal": True}),
    ("causal_L>S", (1, 2, 6, 4), (1, 2, 3, 4), (1, 2, 3, 4), None, {"is_causal": True}),
    ("bool_mask", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), ("bool", (5, 6)), {}),
    ("bool_mask_full", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), ("bool", (2, 2, 5, 6)), {}),
    ("bool_mask_bcast", (2, 3, 5, 4), (2, 3, 6, 4), (2, 3, 6, 3), ("bool", (2, 1, 1, 6)), {}),
    ("float_mask", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), ("float", (1, 2, 5, 6)), {}),
    ("float_mask_row", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), ("float", (1, 6)), {}),
    ("float_mask_1d", (2, 2, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), ("float", (6,)), {}),
    ("neg_inf_mask", (1, 2, 4, 4), (1, 2, 5, 4), (1, 2, 5, 3), ("ninf", (4, 5)), {}),
    ("gqa", (2, 4, 5, 4), (2, 2, 6, 4), (2, 2, 6, 3), None, {"enable_gqa": True}),
    ("gqa_mqa", (2, 6, 5, 4), (2, 1, 6, 4), (2, 1, 6, 3), ("bool", (2, 6, 5, 6)),
     {"enable_gqa": True}),
    ("gqa_causal", (1, 4, 5, 4), (1, 2, 5, 4), (1, 2, 5, 4), None,
     {"enable_gqa": True, "is_causal": True, "scale": 0.7}),
    ("gqa_equal_heads", (2, 2, 3, 4), (2, 2, 4, 4), (2, 2, 4, 4), None, {"enable_gqa": True}),
    ("long", (1, 2, 130, 16), (1, 2, 150, 16), (1, 2, 150, 8), ("bool", (130, 150)), {}),
    ("empty_L", (2, 2, 0, 4), (2, 2, 6, 4), (2, 2, 6, 3), None, {}),
    ("empty_S", (2, 2, 5, 4), (2, 2, 0, 4), (2, 2, 0, 3), None, {}),
    ("empty_batch", (0, 2, 5, 4), (0, 2, 6, 4), (0, 2, 6, 3), None, {}),
]


def _inputs(case, dtype, seed=0):
    name, qs, ks, vs, mask, _ = case
    rng = np.random.default_rng(seed)
    xs = [rng.standard_normal(s).astype(dtype) for s in (qs, ks, vs)]
    if mask is not None:
        kind, shape = mask
        if kind == "bool":
            m = rng.random(shape) < 0.6
            if len(shape) >= 2 and shape[-2] > 1:
                m[..., 1, :] = False  # a query that keeps no key
            xs.append(m)
        elif kind == "float":
            xs.append(rng.standard_normal(shape).astype(dtype))
        else:
            m = np.where(rng.random(shape) < 0.5, -np.inf, 0.0).astype(dtype)
            m[0, :] = -np.inf
            xs.append(m)
    return xs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_forward(case, dtype):
    xs = _inputs(case, dtype)
    OpCase.of(OP, xs, sdpa_reference, attrs=case[5], tol=4).check_forward()


# torch wants a mask of rank >= 2.
TORCH_CASES = [c for c in CASES if c[4] is None or len(c[4][1]) >= 2]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", TORCH_CASES, ids=[c[0] for c in TORCH_CASES])
def test_matches_torch(case, dtype):
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xs = _inputs(case, dtype, seed=1)
    attrs = dict(case[5])
    ts = [torch.from_numpy(x) for x in xs]
    kwargs = dict(attrs)
    if len(ts) > 3:
        kwargs["attn_mask"] = ts[3]
    want = F.scaled_dot_product_attention(*ts[:3], **kwargs).numpy()
    got = dg.ops.scaled_dot_product_attention(*[dg.tensor(x) for x in xs], **attrs).numpy()
    tol = 2e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_nan_propagates():
    """A NaN score makes its query row NaN (torch 2.13's CPU kernel returns a
    zero row instead, hiding the NaN; we propagate it). Other rows are exact."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(s) for s in [(1, 1, 3, 2), (1, 1, 4, 2), (1, 1, 4, 2)])
    q[0, 0, 1, 0] = np.nan
    got = dg.ops.scaled_dot_product_attention(dg.tensor(q), dg.tensor(k), dg.tensor(v)).numpy()
    want = torch.nn.functional.scaled_dot_product_attention(
        *[torch.from_numpy(a) for a in (q, k, v)]).numpy()
    assert np.isnan(got[0, 0, 1]).all()
    np.testing.assert_allclose(got[0, 0, [0, 2]], want[0, 0, [0, 2]], rtol=1e-12, atol=1e-12)


def test_many_chunks():
    """More scores than the kernel's 4M-element scratch: items run in chunks
    (here 2 + 1), each with its own mask offsets and grouped heads."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((1, 3, 1200, 8))
    k = rng.standard_normal((1, 1, 1200, 8))
    v = rng.standard_normal((1, 1, 1200, 4))
    m = rng.random((3, 1, 1200)) < 0.7
    got = dg.ops.scaled_dot_product_attention(dg.tensor(q), dg.tensor(k), dg.tensor(v),
                                              dg.tensor(m), enable_gqa=True).numpy()
    want = sdpa_reference(q, np.repeat(k, 3, 1), np.repeat(v, 3, 1), m)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_graph_mode():
    xs = _inputs(CASES[-4], "float64")  # gqa_causal-sized long case with a mask

    @dg.function
    def f(q, k, v, m):
        return dg.ops.scaled_dot_product_attention(q, k, v, m) * 2.0

    got = f(*[dg.tensor(x) for x in xs]).numpy()
    np.testing.assert_allclose(got, 2 * sdpa_reference(*xs), rtol=1e-12, atol=1e-12)


def _t(*shape, dtype="float32"):
    return dg.tensor(np.zeros(shape, dtype))


@pytest.mark.parametrize("call, match", [
    (lambda: dg.ops.scaled_dot_product_attention(_t(4), _t(4), _t(4)), r"rank >= 2"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 3), _t(2, 5, 4)),
     r"key's last dimension 3 must equal query's 4"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 6, 4)),
     r"value must have as many rows as key \(5\)"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(1, 4, 3, 4), _t(1, 2, 5, 4),
                                                 _t(1, 2, 5, 4)),
     r"need enable_gqa=True"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(1, 4, 3, 4), _t(1, 3, 5, 4),
                                                 _t(1, 3, 5, 4), enable_gqa=True),
     r"key/value heads \(3\) must divide query heads \(4\)"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 4),
                                                 dtype_mask()),
     r"input 'attn_mask' has dtype int32, expected one of: bool"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 4),
                                                 _t(3, 5, dtype="float64")),
     r"attn_mask must be bool or query's dtype float32, got float64"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 4),
                                                 _t(4, 5)),
     r"attn_mask of shape \[4, 5\] does not broadcast to the scores' shape \[2, 3, 5\]"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 4),
                                                 _t(3, 5), is_causal=True),
     r"exclusive"),
    (lambda: dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4),
                                                 _t(2, 5, 4, dtype="float64")),
     r"one dtype"),
])
def test_bad_input(call, match):
    with pytest.raises(InvalidArgumentError, match=match) as e:
        call()
    assert "ScaledDotProductAttention" in str(e.value)


def dtype_mask():
    return dg.tensor(np.zeros((3, 5), np.int32))


def test_dropout_is_refused():
    with pytest.raises(NotImplementedError, match=r"ScaledDotProductAttention.*dropout_p"):
        dg.ops.scaled_dot_product_attention(_t(2, 3, 4), _t(2, 5, 4), _t(2, 5, 4),
                                            dropout_p=0.1)
