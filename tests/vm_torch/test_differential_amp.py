"""Mixed precision of the torch front end against real torch 2.13's CPU autocast.

The same seeded inputs go through an op (or nn function, or module) under
real ``torch.autocast("cpu", dtype=torch.bfloat16)`` and under
``dragon_core.vm.torch.autocast``; the output dtype must be torch's, except
for the deliberate differences in :data:`DELIBERATE` (docs/from-pytorch.md,
"Mixed precision", says why), and the values must lie within bfloat16's
precision of a float64 reference (real torch in float64 on the same,
bf16-rounded, inputs): each value passes through at most a few bfloat16
roundings of relative size 2**-8 of the magnitudes involved, so the bound
is ``2**-6 * max(1, max|ref|)``.

Then: gradients of float32 leaves (float32, close to torch's and to
float64), nested ``enabled=False``, the cast cache across in-place weight
updates and optimizer steps inside one region, ``no_grad``, float64 and
integer inputs (left alone), the torch-named state functions,
``GradScaler`` with float16 against ``torch.amp.GradScaler("cpu")``, and
eager against compiled (``torch.compile`` and ``dragon_core.function(...,
autocast=...)``).
"""

from __future__ import annotations

import contextlib
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core as dg  # noqa: E402
import dragon_core.vm.torch as vt  # noqa: E402

BF16_TOL = 2.0 ** -6


def _inputs(seed):
    r = np.random.default_rng(seed)

    def n(*s):
        return r.standard_normal(s).astype(np.float32)
    return {
        "a": n(4, 8), "b": n(8, 3), "bb": n(2, 4, 8), "bc": n(2, 8, 3), "c43": n(4, 3),
        "c243": n(2, 4, 3), "x1": n(2, 3, 10), "w1": n(4, 3, 3), "x2": n(2, 3, 8, 8),
        "w2": n(4, 3, 3, 3), "wt": n(3, 2, 3, 3), "lw": n(5, 8), "lb": n(5), "q": n(2, 2, 5, 4),
        "emb": n(6, 4), "bn": n(4, 3), "gn": n(2, 4, 3), "x3": n(1, 2, 4, 4, 4),
        "h": n(4, 8),          # used as a bfloat16 tensor
        "i": np.array([0, 2, 1, 3], np.int64),
    }


def _make(T, arrs, low=("h",)):
    """The inputs as tensors of framework ``T``; names in ``low`` bfloat16."""
    out = {}
    for k, v in arrs.items():
        t = T.tensor(v)
        out[k] = t.to(T.bfloat16) if k in low else t
    return out


def _ref_inputs(arrs):
    """float64 copies (the bfloat16 inputs rounded first), for real torch."""
    out = {}
    for k, v in arrs.items():
        t = torch.tensor(v)
        if k == "h":
            t = t.to(torch.bfloat16)
        out[k] = t.double() if t.is_floating_point() else t
    return out


class _Ref:
    """real torch for the float64 reference: ``B`` rounds to bfloat16 and
    goes back to float64 (torch has no bfloat16 kernel for some ops)."""
    ref = True

    def __getattr__(self, name):
        return getattr(torch, name)


def B(T, t):
    """``t`` as bfloat16 (rounded, kept float64 for the reference)."""
    if isinstance(T, _Ref):
        return t.to(torch.bfloat16).double()
    return t.to(T.bfloat16)


# name -> f(T, F, x): T is torch or vm.torch, F its nn.functional.
CASES = {
    "matmul": lambda T, F, x: T.matmul(x["a"], x["b"]),
    "operator_matmul": lambda T, F, x: x["a"] @ x["b"],
    "mm": lambda T, F, x: T.mm(x["a"], x["b"]),
    "bmm": lambda T, F, x: T.bmm(x["bb"], x["bc"]),
    "addmm": lambda T, F, x: T.addmm(x["c43"], x["a"], x["b"]),
    "baddbmm": lambda T, F, x: T.baddbmm(x["c243"], x["bb"], x["bc"]),
    "linear": lambda T, F, x: F.linear(x["a"], x["lw"], x["lb"]),
    "linear_nobias": lambda T, F, x: F.linear(x["a"], x["lw"]),
    "einsum": lambda T, F, x: T.einsum("ij,jk->ik", x["a"], x["b"]),
    "conv1d": lambda T, F, x: F.conv1d(x["x1"], x["w1"]),
    "conv2d": lambda T, F, x: F.conv2d(x["x2"], x["w2"], padding=1),
    "conv_transpose2d": lambda T, F, x: F.conv_transpose2d(x["x2"], x["wt"]),
    "avg_pool3d_bf16": lambda T, F, x: F.avg_pool3d(B(T, x["x3"]), 2),
    "max_pool3d_bf16": lambda T, F, x: F.max_pool3d(B(T, x["x3"]), 2),
    "avg_pool2d_bf16": lambda T, F, x: F.avg_pool2d(B(T, x["x2"]), 2),
    "sdpa": lambda T, F, x: F.scaled_dot_product_attention(x["q"], x["q"], x["q"]),
    "layer_norm_f32": lambda T, F, x: F.layer_norm(x["a"], (8,)),
    "layer_norm_bf16": lambda T, F, x: F.layer_norm(x["h"], (8,)),
    "batch_norm_bf16": lambda T, F, x: F.batch_norm(B(T, x["bn"]), None, None,
                                                    training=True),
    "group_norm_bf16": lambda T, F, x: F.group_norm(B(T, x["gn"]), 2),
    "softmax_f32": lambda T, F, x: F.softmax(x["a"], -1),
    "softmax_bf16": lambda T, F, x: F.softmax(x["h"], -1),
    "log_softmax_bf16": lambda T, F, x: F.log_softmax(x["h"], -1),
    "sum_bf16": lambda T, F, x: x["h"].sum(),
    "mean_bf16": lambda T, F, x: x["h"].mean(),
    "sum_f32": lambda T, F, x: x["a"].sum(-1),
    "prod_bf16": lambda T, F, x: (x["h"] * 0.25 + 1).prod(),
    "cumsum_bf16": lambda T, F, x: x["h"].cumsum(0),
    "var_bf16": lambda T, F, x: x["h"].var(),
    "logsumexp_bf16": lambda T, F, x: T.logsumexp(x["h"], 0),
    "max_bf16": lambda T, F, x: x["h"].max(),
    "exp_bf16": lambda T, F, x: T.exp(x["h"]),
    "log_bf16": lambda T, F, x: T.log(x["h"].abs() + 0.5),
    "sqrt_bf16": lambda T, F, x: T.sqrt(x["h"].abs()),
    "rsqrt_bf16": lambda T, F, x: T.rsqrt(x["h"].abs() + 1),
    "reciprocal_bf16": lambda T, F, x: T.reciprocal(x["h"].abs() + 1),
    "square_bf16": lambda T, F, x: x["h"] ** 2,
    "tanh_bf16": lambda T, F, x: T.tanh(x["h"]),
    "gelu_bf16": lambda T, F, x: F.gelu(x["h"]),
    "gelu_f32": lambda T, F, x: F.gelu(x["a"]),
    "relu_bf16": lambda T, F, x: F.relu(x["h"]),
    "add_mixed": lambda T, F, x: x["h"] + x["a"],
    "mul_mixed": lambda T, F, x: x["h"] * x["a"],
    "div_mixed": lambda T, F, x: x["h"] / (x["a"].abs() + 1),
    "add_scalar_bf16": lambda T, F, x: x["h"] + 1.0,
    "maximum_mixed": lambda T, F, x: T.maximum(x["h"], x["a"]),
    "atan2_mixed": lambda T, F, x: T.atan2(x["h"], x["a"]),
    "eq_mixed": lambda T, F, x: x["h"] == x["a"],
    "cat_mixed": lambda T, F, x: T.cat([x["h"], x["a"]]),
    "stack_mixed": lambda T, F, x: T.stack([x["h"], x["a"]]),
    "where_mixed": lambda T, F, x: T.where(x["a"] > 0, x["h"], x["a"]),
    "embedding": lambda T, F, x: F.embedding(x["i"], x["emb"]),
    "mse_bf16": lambda T, F, x: F.mse_loss(x["h"], x["a"]),
    "l1_bf16": lambda T, F, x: F.l1_loss(x["h"], x["a"]),
    "smooth_l1_bf16": lambda T, F, x: F.smooth_l1_loss(x["h"], x["a"]),
    "huber_bf16": lambda T, F, x: F.huber_loss(x["h"], x["a"]),
    "cross_entropy_bf16": lambda T, F, x: F.cross_entropy(x["h"], x["i"]),
    "nll_bf16": lambda T, F, x: F.nll_loss(B(T, F.log_softmax(x["a"], -1)), x["i"]),
    "bce_bf16": lambda T, F, x: F.binary_cross_entropy(T.sigmoid(x["h"]), T.sigmoid(x["a"])),
    "bce_with_logits_bf16": lambda T, F, x: F.binary_cross_entropy_with_logits(
        x["h"], T.sigmoid(x["a"])),
    "kl_div_bf16": lambda T, F, x: F.kl_div(F.log_softmax(x["h"], -1), T.softmax(x["a"], -1),
                                            reduction="batchmean"),
    "margin_ranking_bf16": lambda T, F, x: F.margin_ranking_loss(x["h"], B(T, x["a"]),
                                                                 x["a"].sign()),
    "hinge_embedding_bf16": lambda T, F, x: F.hinge_embedding_loss(x["h"], x["a"].sign()),
    "cosine_embedding_bf16": lambda T, F, x: F.cosine_embedding_loss(x["h"], B(T, x["a"]),
                                                                     x["a"][:, 0].sign()),
    "triplet_margin_bf16": lambda T, F, x: F.triplet_margin_loss(x["h"], B(T, x["a"]),
                                                                 B(T, x["a"] * 0.5)),
    "multi_margin_bf16": lambda T, F, x: F.multi_margin_loss(x["h"], x["i"]),
    "pad_reflect_1d_bf16": lambda T, F, x: F.pad(x["h"], (1, 2), mode="reflect"),
    "pad_reflect_2d_bf16": lambda T, F, x: F.pad(B(T, x["gn"]), (1, 1, 1, 1), mode="reflect"),
    "pad_reflect_3d_bf16": lambda T, F, x: F.pad(B(T, x["x3"]), (1,) * 6, mode="reflect"),
    "pad_replicate_1d_bf16": lambda T, F, x: F.pad(x["h"], (2, 1), mode="replicate"),
    "pad_replicate_3d_bf16": lambda T, F, x: F.pad(B(T, x["x3"]), (1,) * 6, mode="replicate"),
    "pad_circular_bf16": lambda T, F, x: F.pad(B(T, x["gn"]), (1, 1), mode="circular"),
    "pad_constant_bf16": lambda T, F, x: F.pad(x["h"], (1, 1), value=2.0),
    "matmul_f64": lambda T, F, x: T.matmul(x["a"].double(), x["b"].double()),
    "linear_f64": lambda T, F, x: F.linear(x["a"].double(), x["lw"].double()),
    "conv2d_f64": lambda T, F, x: F.conv2d(x["x2"].double(), x["w2"].double()),
    "softmax_f64": lambda T, F, x: F.softmax(x["a"].double(), -1),
    "matmul_int": lambda T, F, x: T.matmul(x["i"].reshape(2, 2), x["i"].reshape(2, 2)),
}

#: Ops whose output dtype differs from torch's CPU autocast on purpose:
#: case -> our dtype. Matrix products are written in float32 (their
#: float32 accumulator, not rounded; every reader of a product in a network
#: is float32 anyway); softmax, normalisations and exp/log/sqrt-type
#: functions of 16-bit inputs run in float32 (torch's CUDA lists; torch's
#: CPU list keeps bfloat16); attention has no 16-bit kernel, so it runs as
#: given (float32). docs/from-pytorch.md, "Mixed precision".
DELIBERATE = {name: "float32" for name in (
    "matmul", "operator_matmul", "mm", "bmm", "addmm", "baddbmm", "linear", "linear_nobias",
    "einsum", "sdpa", "layer_norm_bf16", "batch_norm_bf16", "group_norm_bf16",
    "softmax_bf16", "log_softmax_bf16", "exp_bf16", "log_bf16", "sqrt_bf16", "rsqrt_bf16",
    "reciprocal_bf16")}


def _ours(name, seed=0, dtype="bfloat16"):
    x = _make(vt, _inputs(seed))
    with vt.autocast("cpu", dtype=getattr(vt, dtype)):
        return CASES[name](vt, vt.nn.functional, x)


def _torchs(name, seed=0):
    x = _make(torch, _inputs(seed))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return CASES[name](torch, torch.nn.functional, x)


def _reference(name, seed=0):
    return CASES[name](_Ref(), torch.nn.functional, _ref_inputs(_inputs(seed)))


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_dtype_matches_torch_autocast(name):
    ours, theirs = _ours(name), _torchs(name)
    want = DELIBERATE.get(name, str(theirs.dtype).replace("torch.", ""))
    assert ours.dtype.name == want, (name, ours.dtype, theirs.dtype)
    assert tuple(ours.shape) == tuple(theirs.shape)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("seed", [0, 1])
def test_values_within_bf16_precision_of_float64(name, seed):
    ref = _reference(name, seed)
    ours = _ours(name, seed)
    if not ref.dtype.is_floating_point:
        np.testing.assert_array_equal(ours.numpy(), ref.numpy())
        return
    r = ref.double().numpy()
    o = ours.double().numpy()
    bound = 1e-12 if ours.dtype.name == "float64" else BF16_TOL * max(1.0, np.abs(r).max())
    err = np.abs(o - r).max()
    assert err <= bound, (name, err, bound)
    # torch's own autocast result obeys the same bound (the bound is not loose
    # enough to hide a policy difference of more than bf16's rounding).
    t = _torchs(name, seed).double().numpy()
    assert np.abs(t - r).max() <= max(bound, 1e-12)


@pytest.mark.parametrize("name", sorted(CASES))
def test_float16_values_within_precision_of_float64(name):
    ref = _reference(name, 2)
    ours = _ours(name, 2, dtype="float16")
    if ref.dtype.is_floating_point:
        r = ref.double().numpy()
        bound = 1e-12 if ours.dtype.name == "float64" else BF16_TOL * max(1.0, np.abs(r).max())
        assert np.abs(ours.double().numpy() - r).max() <= bound


@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_matches_eager_bitwise(name):
    """``torch.compile`` called inside the region, and
    ``dragon_core.function(..., autocast="bfloat16")``, give the eager
    region's dtype and bits."""
    x = _make(vt, _inputs(0))
    keys = sorted(x)

    def f(*a):
        return CASES[name](vt, vt.nn.functional, dict(zip(keys, a)))
    args = [x[k] for k in keys]
    with vt.autocast("cpu"):
        eager = f(*args)
        compiled = vt.compile(f)(*args)
    native = vt.from_dragon(dg.function(lambda *a: f(*map(vt.from_dragon, a)).dragon(),
                                        autocast="bfloat16")(*(t.dragon() for t in args)))
    for got in (compiled, native):
        assert got.dtype == eager.dtype
        np.testing.assert_array_equal(got.double().numpy(), eager.double().numpy())


def test_every_autocast_table_name_is_an_op():
    """A misspelt op name in the tables was silently skipped (the policy
    never applied): reductions were listed as ReduceSum ..., the logits
    loss as BinaryCrossEntropyWithLogits."""
    names = {o["name"] for o in dg._C.list_ops()}
    listed = dg.amp.LOWER_PRECISION_OPS + dg.amp.FLOAT32_OPS + dg.amp.PROMOTE_OPS
    assert sorted(n for n in listed if n not in names) == []


# ------------------------------------------------------------- gradients
def _model_step(T, arrs, ac):
    F = T.nn.functional
    w = T.tensor(arrs["lw"], requires_grad=True)
    b = T.tensor(arrs["lb"], requires_grad=True)
    g = T.tensor(np.ones(5, np.float32), requires_grad=True)
    with ac:
        h = F.linear(T.tensor(arrs["a"]), w, b)
        h = F.layer_norm(F.gelu(h), (5,)) * g
        loss = F.cross_entropy(h, T.tensor(arrs["i"]))
    loss.backward()
    return loss, w, b, g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gradients_of_float32_leaves(seed):
    arrs = _inputs(seed)
    lo, *po = _model_step(vt, arrs, vt.autocast("cpu"))
    lt, *pt = _model_step(torch, arrs, torch.autocast("cpu"))
    l64, *p64 = _model_step(torch, {k: (v.astype(np.float64) if v.dtype == np.float32 else v)
                                    for k, v in arrs.items()}, torch.autocast("cpu",
                                                                           enabled=False))
    assert lo.dtype.name == "float32" and lt.dtype == torch.float32
    for o, t, r in zip(po, pt, p64):
        assert o.grad.dtype.name == "float32" and t.grad.dtype == torch.float32
        ref = r.grad.numpy()
        bound = BF16_TOL * max(1.0, np.abs(ref).max())
        assert np.abs(o.grad.numpy() - ref).max() <= bound
        assert np.abs(t.grad.numpy() - ref).max() <= bound


# --------------------------------------------------------------- nesting
def test_nested_disabled_region_is_float32_exactly():
    x = _make(vt, _inputs(3))
    plain = vt.matmul(x["a"], x["b"])
    with vt.autocast("cpu"):
        low = vt.matmul(x["a"], x["b"])
        with vt.autocast("cpu", enabled=False):
            assert not vt.is_autocast_enabled("cpu")
            inner = vt.matmul(x["a"], x["b"])
            conv = vt.nn.functional.conv1d(x["x1"], x["w1"])
        assert vt.is_autocast_enabled("cpu")
        again = vt.nn.functional.conv1d(x["x1"], x["w1"])
    assert not vt.is_autocast_enabled("cpu")
    np.testing.assert_array_equal(inner.numpy(), plain.numpy())
    assert conv.dtype == vt.float32 and again.dtype == vt.bfloat16
    assert not np.array_equal(low.numpy(), plain.numpy())   # the region did round


def test_nested_dtype_and_decorator():
    x = _make(vt, _inputs(4))

    @vt.autocast("cpu", dtype=vt.float16)
    def f16(a, w):
        assert vt.get_autocast_dtype("cpu") == vt.float16
        return vt.nn.functional.conv1d(a, w)

    with vt.autocast("cpu"):
        assert f16(x["x1"], x["w1"]).dtype == vt.float16
        assert vt.get_autocast_dtype("cpu") == vt.bfloat16
        assert vt.nn.functional.conv1d(x["x1"], x["w1"]).dtype == vt.bfloat16
    assert vt.get_autocast_dtype("cpu") == vt.bfloat16


# ------------------------------------------------- cast cache, in place
_MUTATIONS = {
    "data_add_": lambda w: w.data.add_(1.0),
    "data_assign": lambda w: setattr(w, "data", w.data * 2.0 + 1.0),
    "data_copy_": lambda w: w.data.copy_(vt.ones(8, 3)),
    "no_grad_mul_": lambda w: _no_grad(lambda: w.mul_(-2.0)),
    "index_set": lambda w: w.data.__setitem__((0, 0), 100.0),
    "sgd_step": lambda w: _opt_step(w, vt.optim.SGD([w], lr=0.5)),
    "adam_step": lambda w: _opt_step(w, vt.optim.Adam([w], lr=0.5)),
    "numpy_write": lambda w: w.detach().numpy().__setitem__((1, 1), -50.0),
    "init_uniform_": lambda w: vt.nn.init.uniform_(w),
}


def _no_grad(fn):
    with vt.no_grad():
        fn()


def _opt_step(w, opt):
    w.grad = vt.ones(8, 3)
    opt.step()


@pytest.mark.parametrize("mutation", sorted(_MUTATIONS))
@pytest.mark.parametrize("requires_grad", [True, False])
def test_cast_cache_sees_inplace_weight_updates(mutation, requires_grad):
    """A weight read by a matmul, changed in place, read again in the same
    region: the second product uses the new values (a stale cached cast
    would silently reuse the old bf16 copy)."""
    arrs = _inputs(5)
    x = vt.tensor(arrs["a"])
    w = vt.tensor(arrs["b"], requires_grad=requires_grad)
    with vt.autocast("cpu"):
        y1 = x @ w
        _MUTATIONS[mutation](w)
        y2 = x @ w
    now = w.detach().numpy().astype(np.float32)
    assert not np.array_equal(now, arrs["b"])
    ref = (torch.tensor(arrs["a"]).bfloat16().double()
           @ torch.tensor(now).bfloat16().double()).numpy()
    np.testing.assert_allclose(y2.detach().double().numpy(), ref, rtol=1e-5, atol=1e-5)
    assert y1 is not y2


def _train(T, arrs, one_region):
    F = T.nn.functional
    w = T.tensor(arrs["lw"], requires_grad=True)
    opt = T.optim.SGD([w], lr=0.5, momentum=0.9)
    losses = []
    # (no outer region at all otherwise: torch's cache lives until the
    # outermost region, enabled or not, exits)
    with T.autocast("cpu") if one_region else contextlib.nullcontext():
        for _ in range(4):
            opt.zero_grad()
            with T.autocast("cpu") if not one_region else contextlib.nullcontext():
                loss = F.cross_entropy(F.linear(T.tensor(arrs["a"]), w), T.tensor(arrs["i"]))
            loss.backward()
            opt.step()
            losses.append(float(loss))
    return losses, w.detach().numpy()


def test_training_loop_inside_one_region_reads_updated_weights():
    """forward, backward, optimizer step, forward again, all in one region:
    every forward reads the updated weights, as with one region per step.

    Real torch 2.13 does not: its cache keeps the bf16 copy of a weight
    until the outermost region exits, so the loss below stays at its first
    value for all four steps (a deliberate difference, docs/from-pytorch.md).
    """
    arrs = _inputs(6)
    lo, wo = _train(vt, arrs, one_region=True)
    lt, wt = _train(torch, arrs, one_region=False)
    assert lo[0] != lo[-1]
    np.testing.assert_allclose(lo, lt, rtol=2 ** -6, atol=2 ** -6)
    np.testing.assert_allclose(wo, wt, rtol=2 ** -6, atol=2 ** -6)
    stale, _ = _train(torch, arrs, one_region=True)
    assert stale == [stale[0]] * 4     # torch's stale cache (if this fails, torch fixed it)


# ----------------------------------------------- no_grad, float64, ints
def test_no_grad_inference_dtypes_and_values():
    x = _make(vt, _inputs(7))
    w = vt.tensor(_inputs(7)["lw"], requires_grad=True)
    with vt.no_grad(), vt.autocast("cpu"):
        y = vt.nn.functional.conv2d(x["x2"], x["w2"])
        z = vt.nn.functional.linear(x["a"], w)
    assert y.dtype == vt.bfloat16 and not y.requires_grad and not z.requires_grad
    t = _make(torch, _inputs(7))
    with torch.no_grad(), torch.autocast("cpu"):
        ty = torch.nn.functional.conv2d(t["x2"], t["w2"])
    np.testing.assert_allclose(y.float().numpy(), ty.float().numpy(), rtol=2 ** -6,
                               atol=2 ** -6 * float(ty.abs().max()))


def test_float64_and_integer_inputs_untouched():
    arrs = _inputs(8)
    a64, b64 = vt.tensor(arrs["a"].astype(np.float64)), vt.tensor(arrs["b"].astype(np.float64))
    with vt.autocast("cpu"):
        y = a64 @ b64
        s = vt.nn.functional.softmax(a64, -1)
        k = vt.tensor(arrs["i"]) * 3
    np.testing.assert_allclose(y.numpy(), arrs["a"].astype(np.float64) @ arrs["b"], rtol=1e-12)
    assert y.dtype == vt.float64 and s.dtype == vt.float64 and k.dtype == vt.int64


# ------------------------------------------------------- state functions
def test_state_functions_follow_torch():
    assert not vt.is_autocast_enabled("cpu") and not vt.is_autocast_enabled()
    assert vt.get_autocast_dtype("cpu") == vt.bfloat16
    assert vt.get_autocast_dtype("cuda") == vt.float16
    assert vt.is_autocast_cache_enabled()
    vt.set_autocast_enabled("cpu", True)
    try:
        assert vt.is_autocast_enabled("cpu") and vt.is_autocast_cpu_enabled()
        assert dg.amp.is_autocast_enabled()
        assert (vt.ones(2, 3) @ vt.ones(3, 2)).dtype == vt.float32   # ran in bf16 (DELIBERATE)
        vt.set_autocast_dtype("cpu", vt.float16)
        assert vt.nn.functional.conv1d(vt.ones(1, 1, 4), vt.ones(1, 1, 2)).dtype == vt.float16
    finally:
        vt.set_autocast_enabled("cpu", False)
        vt.set_autocast_dtype("cpu", vt.bfloat16)
    assert not vt.is_autocast_enabled("cpu")
    assert vt.amp.is_autocast_available("cpu") == torch.amp.is_autocast_available("cpu")
    with pytest.raises(RuntimeError, match="cpu autocast supports"):
        vt.set_autocast_dtype("cpu", vt.float32)
    with pytest.raises(RuntimeError, match="device_type 'mps'"):
        vt.autocast("mps")


def test_unsupported_dtype_warns_and_disables_as_torch():
    for T in (torch, vt):
        with pytest.warns(UserWarning, match="target dtype is not supported"):
            with T.autocast("cpu", dtype=T.float32):
                assert not T.is_autocast_enabled("cpu")


@pytest.mark.skipif(vt.cuda.is_available(), reason="checks the no-GPU path")
def test_cuda_without_gpu_warns_and_disables_as_torch():
    with pytest.warns(UserWarning, match="CUDA is not available"):
        with vt.autocast("cuda"):
            assert not vt.is_autocast_enabled("cuda")
            assert not vt.is_autocast_enabled("cpu")
    with pytest.warns(UserWarning, match="Disabling"):
        assert not vt.amp.GradScaler().is_enabled()


def test_cuda_amp_spellings_as_torch():
    """``torch.cuda.amp.autocast(enabled=use_amp)`` / ``GradScaler`` (the
    legacy spelling many scripts use) raised NotImplementedError; torch
    warns (FutureWarning) and, without a GPU, disables them."""
    for T in (torch, vt):
        with pytest.warns(FutureWarning):
            with T.cuda.amp.autocast(enabled=False):
                assert not T.is_autocast_enabled("cuda")
        with pytest.warns(FutureWarning):
            s = T.cuda.amp.GradScaler(enabled=False)
        assert not s.is_enabled()
        if not T.cuda.is_available():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with T.cuda.amp.autocast():
                    assert not T.is_autocast_enabled("cuda")
                    assert not T.is_autocast_enabled("cpu")
                assert not T.cuda.amp.GradScaler().is_enabled()
            assert {w.category for w in caught} >= {FutureWarning, UserWarning}


def test_cpu_amp_spellings():
    x = _make(vt, _inputs(9))
    with pytest.warns(FutureWarning):
        ctx = vt.cpu.amp.autocast()
    with ctx:
        assert vt.get_autocast_dtype("cpu") == vt.bfloat16
        assert vt.nn.functional.conv1d(x["x1"], x["w1"]).dtype == vt.bfloat16
    with pytest.warns(FutureWarning):
        s = vt.cpu.amp.GradScaler(init_scale=8.0)
    assert s.is_enabled() and s.get_scale() == 8.0
    assert vt.amp.autocast is vt.autocast


# ------------------------------------------------------------ GradScaler
def _scaler_loop(T, make_scaler, bad):
    arrs = _inputs(10)
    F = T.nn.functional
    w = T.tensor(arrs["lw"], requires_grad=True)
    opt = T.optim.SGD([w], lr=0.1)
    scaler = make_scaler()
    scales, rets, params = [], [], []
    for step in range(7):
        x = arrs["a"].copy()
        if step in bad:
            x[0, 0] = np.inf if step % 2 else np.nan
        opt.zero_grad()
        with T.autocast("cpu", dtype=T.float16):
            out = F.linear(T.tensor(x), w)
            loss = F.cross_entropy(out, T.tensor(arrs["i"]))
        scaler.scale(loss).backward()
        rets.append(scaler.step(opt))
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(w.detach().numpy().copy())
    return scales, rets, params, scaler.state_dict()


def test_grad_scaler_float16_matches_torch():
    bad = {2, 3, 5}
    kw = dict(init_scale=2.0 ** 12, growth_factor=4.0, backoff_factor=0.25, growth_interval=2)
    so, ro, po, sdo = _scaler_loop(vt, lambda: vt.amp.GradScaler("cpu", **kw), bad)
    st, rt, pt, sdt = _scaler_loop(torch, lambda: torch.amp.GradScaler("cpu", **kw), bad)
    assert so == st
    assert ro == rt          # None: torch's SGD.step returns None, and a skip too
    for o, t in zip(po, pt):
        np.testing.assert_allclose(o, t, rtol=2 ** -9, atol=2 ** -9)
    assert sdo == sdt
    # checkpoints cross over
    mine = vt.amp.GradScaler("cpu")
    mine.load_state_dict(sdt)
    assert mine.state_dict() == sdt
    theirs = torch.amp.GradScaler("cpu")
    theirs.load_state_dict(sdo)
    assert theirs.state_dict() == sdo


def test_grad_scaler_misuse_raises_as_torch():
    for T in (torch, vt):
        w = T.ones(3, requires_grad=True)
        opt = T.optim.SGD([w], lr=0.1)
        s = T.amp.GradScaler("cpu")
        s.scale((w * w).sum()).backward()
        s.unscale_(opt)
        with pytest.raises(RuntimeError, match="unscale_\\(\\) has already been called"):
            s.unscale_(opt)
        s.step(opt)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
            s.step(opt)
        s.update()
        with pytest.raises((RuntimeError, AssertionError), match="[Nn]o inf"):
            s.update()


def test_grad_scaler_unscales_the_gradient_tensors_in_place():
    """A gradient held before ``unscale_`` (a hook, a list kept for logging
    or clipping) is unscaled too, as torch's (we replaced ``p.grad`` with a
    new tensor: the held one kept the scaled values, 1024x too large)."""
    held = {}
    for T in (torch, vt):
        w = T.tensor(np.array([3.0, 4.0], np.float32), requires_grad=True)
        opt = T.optim.SGD([w], lr=0.1)
        s = T.amp.GradScaler("cpu", init_scale=1024.0)
        s.scale((w * w).sum()).backward()
        grads = [w.grad]
        s.unscale_(opt)
        unscaled = grads[0].numpy().copy()
        norm = T.nn.utils.clip_grad_norm_([w], 1.0)
        s.step(opt)
        s.update()
        held[T] = (unscaled, float(norm), w.detach().numpy().copy())
    np.testing.assert_allclose(held[vt][0], held[torch][0], rtol=1e-6)
    assert held[vt][1] == held[torch][1] == 10.0
    np.testing.assert_allclose(held[vt][2], held[torch][2], rtol=1e-6)
    ow = dg.tensor(np.array([3.0, 4.0], np.float32)).requires_grad_()
    s = dg.GradScaler(init_scale=1024.0)
    s.scale((ow * ow).sum()).backward()
    g = ow.grad
    s.unscale_(dg.optim.SGD([ow], lr=0.1))
    np.testing.assert_array_equal(g.numpy(), [6.0, 8.0])


def test_grad_scaler_refuses_float16_gradients_as_torch():
    """float16 parameters: torch raises; we skipped the step silently (the
    scaled float16 gradient 2 * 2**16 overflows to inf)."""
    for T in (torch, vt):
        w = T.ones(3, dtype=T.float16, requires_grad=True)
        opt = T.optim.SGD([w], lr=0.1)
        s = T.amp.GradScaler("cpu")
        s.scale((w * w).sum()).backward()
        with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
            s.step(opt)
        with pytest.raises(ValueError, match="Attempting to unscale FP16 gradients"):
            s.unscale_(opt)


def test_grad_scaler_disabled_is_pass_through():
    w = vt.ones(3, requires_grad=True)
    opt = vt.optim.SGD([w], lr=0.1)
    s = vt.amp.GradScaler("cpu", enabled=False)
    loss = (w * w).sum()
    assert s.scale(loss) is loss and s.state_dict() == {} and s.get_scale() == 1.0
    loss.backward()
    s.step(opt)
    s.update()
    np.testing.assert_allclose(w.detach().numpy(), 0.8, rtol=1e-6)


# ------------------------------------------------------- eager vs compiled
def _block(T, x, w, b, g):
    F = T.nn.functional
    h = F.gelu(F.linear(x, w, b))
    return (F.layer_norm(h, (5,)) * g + h).sum(-1)


def test_torch_compile_under_autocast_matches_eager():
    arrs = _inputs(11)
    args = [vt.tensor(arrs[k]) for k in ("a", "lw", "lb", "lb")]
    compiled = vt.compile(lambda *a: _block(vt, *a))
    with vt.autocast("cpu"):
        eager = _block(vt, *args)
        comp = compiled(*args)
    with vt.autocast("cpu", enabled=False):
        plain = compiled(*args)
    assert comp.dtype == eager.dtype
    np.testing.assert_allclose(comp.numpy(), eager.numpy(), rtol=1e-5, atol=1e-5)
    # the compiled function keeps a plan per autocast state
    assert not np.allclose(plain.numpy(), eager.numpy(), rtol=1e-6, atol=1e-6)


def test_dragon_function_autocast_matches_torch_front_end():
    arrs = _inputs(12)
    args = [vt.tensor(arrs[k]) for k in ("a", "lw", "lb", "lb")]
    with vt.autocast("cpu"):
        eager = _block(vt, *args)

    def native(x, w, b, g):
        return _block(vt, *(vt.from_dragon(t) for t in (x, w, b, g))).dragon()
    fn = dg.function(native, autocast="bfloat16")
    comp = fn(*(a.dragon() for a in args))
    np.testing.assert_allclose(comp.numpy(), eager.numpy(), rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------- modules
def _module(T, name):
    T.manual_seed(0)
    return {
        "encoder": lambda: T.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0,
                                                        batch_first=True),
        "mha": lambda: T.nn.MultiheadAttention(8, 2, batch_first=True),
        "lstm": lambda: T.nn.LSTM(8, 4, batch_first=True),
        "gru": lambda: T.nn.GRU(8, 4, batch_first=True),
        "mlp": lambda: T.nn.Sequential(T.nn.Linear(8, 16), T.nn.GELU(), T.nn.LayerNorm(16),
                                       T.nn.Linear(16, 3)),
    }[name]()


@pytest.mark.parametrize("name", ["encoder", "mha", "lstm", "gru", "mlp"])
def test_modules_forward_backward_inside_region_match_torch(name):
    """torch's weights, one input; forward and ``backward()`` inside the
    region (torch allows it); output, input and parameter gradients within
    a few bf16 roundings (on both sides) of torch's; gradients float32."""
    x = np.random.default_rng(13).standard_normal((2, 5, 8)).astype(np.float32)
    tm, om = _module(torch, name), _module(vt, name)
    om.load_state_dict({k: vt.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    got = {}
    for T, m in ((torch, tm), (vt, om)):
        xx = T.tensor(x, requires_grad=True)
        with T.autocast("cpu"):
            y = m(xx, xx, xx)[0] if name == "mha" else m(xx)
            y = y[0] if isinstance(y, tuple) else y
            (y.float() ** 2).mean().backward()
        got[T] = [y.detach().float().numpy(), xx.grad.numpy()] + [
            p.grad.numpy() for p in m.parameters()]
        assert all(p.grad.dtype == T.float32 for p in m.parameters())
    for t, o in zip(got[torch], got[vt]):
        assert np.abs(t - o).max() <= 2 ** -5 * max(1e-2, np.abs(t).max())


# ------------------------------------------------- custom autograd, cache
def test_custom_fwd_bwd_follow_torch():
    a, b = _inputs(14)["a"], _inputs(14)["b"]
    seen = {}
    for T in (torch, vt):
        class MM(T.autograd.Function):
            @staticmethod
            @T.amp.custom_fwd(device_type="cpu", cast_inputs=T.float32)
            def forward(ctx, x, w):
                ctx.save_for_backward(x, w)
                seen[T, "fwd"] = (x.dtype, T.is_autocast_enabled("cpu"))
                return x @ w

            @staticmethod
            @T.amp.custom_bwd(device_type="cpu")
            def backward(ctx, g):
                x, w = ctx.saved_tensors
                seen[T, "bwd"] = T.is_autocast_enabled("cpu")
                return g @ w.t(), x.t() @ g
        x = T.tensor(a).to(T.bfloat16).requires_grad_()
        w = T.tensor(b, requires_grad=True)
        with T.autocast("cpu"):
            y = MM.apply(x, w)
            assert T.is_autocast_enabled("cpu")
        y.sum().backward()
        seen[T, "out"] = (y.dtype, x.grad.dtype, w.grad.dtype)
    for k in ("fwd", "bwd", "out"):
        assert repr(seen[torch, k]) == repr(seen[vt, k]), k


def test_cache_disabled_gives_the_same_values():
    arrs = _inputs(15)
    out = []
    for cache in (True, False):
        w = vt.tensor(arrs["lw"], requires_grad=True)
        with vt.autocast("cpu", cache_enabled=cache):
            assert vt.is_autocast_cache_enabled() == cache
            x = vt.tensor(arrs["a"])
            y = vt.nn.functional.linear(x, w) + vt.nn.functional.linear(x * 2, w)
        y.sum().backward()
        out.append((y.detach().numpy(), w.grad.numpy()))
    assert vt.is_autocast_cache_enabled()
    np.testing.assert_array_equal(out[0][0], out[1][0])
    np.testing.assert_array_equal(out[0][1], out[1][1])


def test_grad_scaler_two_optimizers_and_clipping_match_torch():
    """float16 autocast, two optimizers, ``unscale_`` + ``clip_grad_norm_``
    on one of them, inf inputs on two steps: the same scales, skips and
    parameters (within float16 precision) as torch, step by step."""
    r = np.random.default_rng(3)
    w0 = r.standard_normal((5, 8)).astype(np.float32)
    xs = [r.standard_normal((4, 8)).astype(np.float32) for _ in range(8)]

    def run(T):
        F = T.nn.functional
        w = T.tensor(w0, requires_grad=True)
        b = T.tensor(np.zeros(5, np.float32), requires_grad=True)
        o1 = T.optim.SGD([w], lr=0.1, momentum=0.9)
        o2 = T.optim.Adam([b], lr=0.01)
        s = T.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=3)
        out = []
        for t, x in enumerate(xs):
            x = x.copy()
            if t in (2, 5):
                x[0, 0] = np.inf
            o1.zero_grad()
            o2.zero_grad()
            with T.autocast("cpu", dtype=T.float16):
                y = F.linear(T.tensor(x), w, b)
                loss = F.cross_entropy(y, T.tensor(np.array([0, 1, 2, 3])))
            s.scale(loss).backward()
            s.unscale_(o1)
            T.nn.utils.clip_grad_norm_([w], 0.5)
            rets = (s.step(o1), s.step(o2))
            s.update()
            out.append((s.get_scale(), rets, w.detach().numpy().copy(),
                        b.detach().numpy().copy()))
        return out, s.state_dict()
    theirs, sd_t = run(torch)
    ours, sd_o = run(vt)
    assert sd_o == sd_t
    for t, o in zip(theirs, ours):
        assert o[:2] == t[:2]
        np.testing.assert_allclose(o[2], t[2], atol=2 ** -11 * 8)
        np.testing.assert_allclose(o[3], t[3], atol=2 ** -11 * 8)


def test_runner_maps_torch_amp_modules(tmp_path):
    """``python -m dragon_core.vm.torch script.py``: ``import torch.amp``,
    ``from torch.cpu.amp import autocast`` give the front end's modules (they
    were loaded a second time as new ``torch.amp`` modules, with their own
    classes and thread state)."""
    import subprocess
    import sys
    script = tmp_path / "amp_script.py"
    script.write_text(
        "import warnings\n"
        "warnings.simplefilter('ignore')\n"
        "import torch\n"
        "import torch.amp\n"
        "from torch.cpu.amp import autocast\n"
        "from torch.cuda.amp import GradScaler as CudaScaler\n"
        "assert not CudaScaler(enabled=False).is_enabled()\n"
        "import torch.nn.functional as F\n"
        "assert torch.amp.autocast is torch.autocast\n"
        "assert torch.amp.GradScaler.__module__ == 'dragon_core.vm.torch.amp'\n"
        "with autocast():\n"
        "    torch.set_autocast_dtype('cpu', torch.float16)\n"
        "    assert F.conv1d(torch.ones(1, 1, 4), torch.ones(1, 1, 2)).dtype == torch.float16\n"
        "print('ok')\n")
    out = subprocess.run([sys.executable, "-m", "dragon_core.vm.torch", str(script)],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().endswith("ok")
