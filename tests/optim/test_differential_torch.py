"""Optimizers, lr schedulers, gradient clipping and GradScaler against real
PyTorch (not against our own reference, which can share our mistakes).

Seeded parameters and gradients are fed to ``torch.optim`` and to ours,
through the torch front end (``dragon_core.vm.torch.optim``) and through the
native API (``dragon_core.optim``), for several steps; the parameters and
the optimizer state are compared after every step (float32 within a few
units in the last place, float64 to 1e-12). The cases cover every option
torch has for each optimizer we ship, parameter groups with different
options, parameters without a gradient (skipped) and zero-size ones,
``zero_grad``, ``add_param_group``, ``state_dict`` round trips (resuming
mid-training bit-equal), lr changes through ``param_groups``, gradient
accumulation, every scheduler we ship, clipping, ``GradScaler`` and compiled
steps. What we do not support must raise.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

import _fuzzcases

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core as dg  # noqa: E402
import dragon_core.vm.torch as vt  # noqa: E402

STEPS = 6
SHAPES = [(3, 4), (5,), (0,), (2, 1, 3)]
#: (rtol, atol): float32 allows a few units in the last place (the kernels
#: round the scalar factors once, as torch does, but fuse differently).
TOL = {"float32": dict(rtol=1e-5, atol=1e-6), "float64": dict(rtol=1e-12, atol=1e-14)}

#: name -> (torch class name, kwargs): every option torch has for each
#: optimizer we ship.
OPT_CASES = {
    "sgd": ("SGD", dict(lr=0.1)),
    "sgd_momentum": ("SGD", dict(lr=0.1, momentum=0.9)),
    "sgd_dampening": ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.5)),
    "sgd_dampening_wd_max": ("SGD", dict(lr=0.05, momentum=0.7, dampening=0.3,
                                         weight_decay=0.1, maximize=True)),
    "sgd_nesterov_wd": ("SGD", dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.2)),
    "sgd_maximize": ("SGD", dict(lr=0.1, maximize=True)),
    "sgd_wd": ("SGD", dict(lr=0.1, weight_decay=0.3)),
    "adam": ("Adam", dict(lr=0.01)),
    "adam_amsgrad": ("Adam", dict(lr=0.02, amsgrad=True)),
    "adam_wd_betas_eps": ("Adam", dict(lr=0.01, betas=(0.5, 0.8), eps=1e-3,
                                       weight_decay=0.1)),
    "adam_maximize_amsgrad_wd": ("Adam", dict(lr=0.01, maximize=True, amsgrad=True,
                                              weight_decay=0.05)),
    "adam_beta1_zero": ("Adam", dict(lr=0.01, betas=(0.0, 0.9))),
    "adam_decoupled": ("Adam", dict(lr=0.01, weight_decay=0.2, decoupled_weight_decay=True)),
    "adamw": ("AdamW", dict(lr=0.01)),
    "adamw_amsgrad_wd": ("AdamW", dict(lr=0.02, amsgrad=True, weight_decay=0.3)),
    "adamw_maximize": ("AdamW", dict(lr=0.01, maximize=True, betas=(0.8, 0.99))),
    "adagrad": ("Adagrad", dict(lr=0.1)),
    "adagrad_all": ("Adagrad", dict(lr=0.1, lr_decay=0.1, weight_decay=0.05,
                                    initial_accumulator_value=0.3, eps=1e-3)),
    "adagrad_maximize": ("Adagrad", dict(lr=0.05, maximize=True)),
    "rmsprop": ("RMSprop", dict(lr=0.01)),
    "rmsprop_centered": ("RMSprop", dict(lr=0.01, centered=True)),
    "rmsprop_momentum": ("RMSprop", dict(lr=0.01, momentum=0.9)),
    "rmsprop_all": ("RMSprop", dict(lr=0.01, alpha=0.5, eps=1e-4, weight_decay=0.1,
                                    momentum=0.5, centered=True)),
    "rmsprop_maximize": ("RMSprop", dict(lr=0.01, maximize=True, momentum=0.3)),
    "adadelta": ("Adadelta", dict()),
    "adadelta_all": ("Adadelta", dict(lr=0.5, rho=0.5, eps=1e-3, weight_decay=0.1,
                                      maximize=True)),
}
#: Classes the native API has (Adadelta lives in vm.torch only).
NATIVE = {"SGD", "Adam", "AdamW", "Adagrad", "RMSprop"}

#: torch state keys we do not keep (docs/optim.md): RMSprop and Adadelta
#: have no step (their rules do not use it).
STATE_SKIP = {"RMSprop": {"step"}, "Adadelta": {"step"}}


# ------------------------------------------------------------------ helpers
def _data(seed, dtype, shapes=SHAPES, steps=STEPS):
    rng = np.random.default_rng(seed)
    params = [rng.standard_normal(s).astype(dtype) for s in shapes]
    grads = []
    for t in range(steps):
        gs = [rng.standard_normal(s).astype(dtype) for s in shapes]
        if t in (2, 4):             # one parameter has no gradient this step
            gs[(t // 2) % len(shapes)] = None
        grads.append(gs)
    return params, grads


def _torch_opt(cls_name, groups, kwargs):
    return getattr(torch.optim, cls_name)(groups, **kwargs)


def _native_kwargs(kwargs):
    kw = dict(kwargs)
    if kw.pop("decoupled_weight_decay", False):
        return "AdamW", kw
    return None, kw


class _Front:
    """One of our two front ends over the same NumPy values."""

    def __init__(self, front, dtype):
        self.front, self.dtype = front, dtype

    def param(self, a):
        if self.front == "vt":
            return vt.tensor(a.copy(), requires_grad=True)
        return dg.tensor(a.copy()).requires_grad_()

    def grad(self, a):
        return vt.tensor(a.copy()) if self.front == "vt" else dg.tensor(a.copy())

    def opt(self, cls_name, groups, kwargs):
        if self.front == "vt":
            return getattr(vt.optim, cls_name)(groups, **kwargs)
        alt, kw = _native_kwargs(kwargs)
        return getattr(dg.optim, alt or cls_name)(groups, **kw)

    @staticmethod
    def numpy(t):
        return t.detach().numpy() if hasattr(t, "detach") else t.numpy()


def _state_np(value):
    if isinstance(value, torch.Tensor):
        return value.detach().numpy()
    if hasattr(value, "numpy"):
        return value.numpy()
    return np.asarray(value)


def _compare_state(cls_name, torch_opt, ours, t_params, o_params, tol, where):
    """Every torch state entry (but the documented omissions) equals ours."""
    skip = STATE_SKIP.get(cls_name, set())
    for i, (tp, op) in enumerate(zip(t_params, o_params)):
        ts = torch_opt.state.get(tp, {})
        os_ = ours.state.get(op._t if hasattr(op, "_t") else op) or {}
        if not ts or ("step" in ts and float(ts["step"]) == 0):
            continue        # never stepped (torch's Adagrad makes state up front)
        expect = {k for k, v in ts.items() if v is not None} - skip
        assert expect <= set(os_), f"{where}: param {i} state keys {sorted(os_)} lack " \
                                   f"{sorted(expect - set(os_))}"
        for k in expect:
            np.testing.assert_allclose(_state_np(os_[k]).astype(np.float64),
                                       _state_np(ts[k]).astype(np.float64),
                                       err_msg=f"{where}: param {i} state {k}", **tol)


def _run_pair(cls_name, kwargs, front, dtype, seed=0, groups=None, steps=STEPS,
              lr_change_at=3, use_step_grads=False, our_kwargs=None):
    """Run torch and ours side by side, comparing after every step."""
    f = _Front(front, dtype)
    params_np, grads_np = _data(seed, dtype, steps=steps)
    tp = [torch.tensor(a.copy(), requires_grad=True) for a in params_np]
    op = [f.param(a) for a in params_np]

    def grouped(ps):
        if groups is None:
            return ps
        return [dict(g, params=[ps[i] for i in g["params"]]) for g in groups]

    topt = _torch_opt(cls_name, grouped(tp), kwargs)
    oopt = f.opt(cls_name, grouped(op), kwargs if our_kwargs is None else our_kwargs)
    order = [i for g in groups for i in g["params"]] if groups else list(range(len(tp)))
    tol = TOL[dtype]
    for t in range(steps):
        if t == lr_change_at:
            for tg, og in zip(topt.param_groups, oopt.param_groups):
                tg["lr"] = tg["lr"] * 0.5
                og["lr"] = og["lr"] * 0.5
        topt.zero_grad()
        oopt.zero_grad()
        for p, g in zip(tp, grads_np[t]):
            if g is not None:
                p.grad = torch.tensor(g.copy())
        if use_step_grads:
            oopt.step([None if grads_np[t][i] is None else f.grad(grads_np[t][i])
                       for i in order])
        else:
            for p, g in zip(op, grads_np[t]):
                if g is not None:
                    p.grad = f.grad(g)
            oopt.step()
        topt.step()
        for i, (a, b) in enumerate(zip(op, tp)):
            np.testing.assert_allclose(f.numpy(a), b.detach().numpy(), **tol,
                                       err_msg=f"step {t}, param {i}")
            assert f.numpy(a).dtype == np.dtype(dtype)
        _compare_state(cls_name, topt, oopt, tp, op, tol, f"step {t}")
    return topt, oopt, tp, op


def _opt_params(name, front):
    cls_name, _ = OPT_CASES[name]
    return front == "vt" or cls_name in NATIVE


OPT_GRID = [(n, fr) for n in OPT_CASES for fr in ("vt", "native") if _opt_params(n, fr)]


# ------------------------------------------------------------------ optimizers
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name, front", OPT_GRID, ids=[f"{n}-{f}" for n, f in OPT_GRID])
def test_optimizer_steps_match_torch(name, front, dtype):
    cls_name, kwargs = OPT_CASES[name]
    _run_pair(cls_name, kwargs, front, dtype, seed=len(name),
              use_step_grads=(front == "native" and len(name) % 2 == 0))


# Two groups with different options each (the second overrides lr and one
# option the first keeps at its default).
GROUP_CASES = {
    "SGD": ({"momentum": 0.9}, {"lr": 0.02, "nesterov": True, "momentum": 0.5,
                                "weight_decay": 0.1}),
    "Adam": ({}, {"lr": 0.05, "amsgrad": True, "betas": (0.7, 0.9)}),
    "AdamW": ({"weight_decay": 0.1}, {"lr": 0.05, "weight_decay": 0.0, "maximize": True}),
    # (torch reads initial_accumulator_value from the constructor only, so a
    # per-group value is not compared here; ours honours it: docs/optim.md.)
    "Adagrad": ({}, {"lr": 0.2, "lr_decay": 0.5, "eps": 1e-3}),
    "RMSprop": ({}, {"lr": 0.02, "centered": True, "momentum": 0.4}),
    "Adadelta": ({}, {"lr": 0.3, "rho": 0.6}),
}
GROUP_GRID = [(c, fr) for c in GROUP_CASES for fr in ("vt", "native")
              if fr == "vt" or c in NATIVE]


@pytest.mark.parametrize("cls_name, front", GROUP_GRID, ids=[f"{c}-{f}" for c, f in GROUP_GRID])
def test_param_groups_with_different_options_match_torch(cls_name, front):
    g0, g1 = GROUP_CASES[cls_name]
    groups = [dict(g0, params=[0, 3]), dict(g1, params=[1, 2])]
    _run_pair(cls_name, {"lr": 0.1} if cls_name != "Adadelta" else {}, front, "float32",
              seed=7, groups=groups, use_step_grads=(front == "native"))


@pytest.mark.parametrize("front", ["vt", "native"])
@pytest.mark.parametrize("set_to_none", [True, False])
def test_zero_grad_and_accumulation_match_torch(front, set_to_none):
    """Two backward passes accumulate into ``.grad``; ``zero_grad`` resets
    it to None or to zeros, as torch; a zero gradient still steps (momentum
    and weight decay move the parameter), a None one does not."""
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(8)]
    tw = torch.tensor(w0, requires_grad=True)
    topt = torch.optim.SGD([tw], lr=0.1, momentum=0.9, weight_decay=0.1)
    if front == "vt":
        ow = vt.tensor(w0, requires_grad=True)
        oopt = vt.optim.SGD([ow], lr=0.1, momentum=0.9, weight_decay=0.1)
    else:
        ow = dg.tensor(w0).requires_grad_()
        oopt = dg.optim.SGD([ow], lr=0.1, momentum=0.9, weight_decay=0.1)
    mk = vt.tensor if front == "vt" else dg.tensor
    for t in range(4):
        topt.zero_grad(set_to_none=set_to_none)
        oopt.zero_grad(set_to_none=set_to_none)
        if set_to_none:
            assert tw.grad is None and ow.grad is None
        elif t:
            np.testing.assert_array_equal(_Front.numpy(ow.grad), np.zeros((4, 3), np.float32))
        for x in xs[2 * t:2 * t + 2]:        # gradient accumulation
            (torch.tensor(x) @ tw).square().sum().backward()
            ((mk(x) @ ow) ** 2).sum().backward()
        np.testing.assert_allclose(_Front.numpy(ow.grad), tw.grad.numpy(), rtol=1e-5,
                                   atol=1e-5)
        topt.step()
        oopt.step()
        np.testing.assert_allclose(_Front.numpy(ow), tw.detach().numpy(), rtol=1e-5,
                                   atol=1e-6)


@pytest.mark.parametrize("front", ["vt", "native"])
def test_add_param_group_matches_torch(front):
    f = _Front(front, "float32")
    params_np, grads_np = _data(11, "float32")
    tp = [torch.tensor(a, requires_grad=True) for a in params_np]
    op = [f.param(a) for a in params_np]
    topt = torch.optim.Adam(tp[:2], lr=0.05)
    oopt = f.opt("Adam", op[:2], dict(lr=0.05))
    for t in range(STEPS):
        if t == 2:
            topt.add_param_group({"params": tp[2:], "lr": 0.01, "amsgrad": True})
            oopt.add_param_group({"params": op[2:], "lr": 0.01, "amsgrad": True})
        n = 2 if t < 2 else 4
        for i in range(n):
            g = grads_np[t][i] if grads_np[t][i] is not None else np.ones(SHAPES[i], np.float32)
            tp[i].grad = torch.tensor(g)
            op[i].grad = f.grad(g)
        topt.step()
        oopt.step()
        for i in range(4):
            np.testing.assert_allclose(f.numpy(op[i]), tp[i].detach().numpy(),
                                       **TOL["float32"], err_msg=f"step {t} param {i}")
    assert [g["lr"] for g in oopt.param_groups] == [g["lr"] for g in topt.param_groups]
    assert oopt.param_groups[1]["amsgrad"] and not oopt.param_groups[0]["amsgrad"]


RESUME_GRID = [(n, fr) for n in ("sgd_dampening", "adam_maximize_amsgrad_wd", "adamw",
                                  "adagrad_all", "rmsprop_all", "adadelta_all")
               for fr in ("vt", "native") if _opt_params(n, fr)]


@pytest.mark.parametrize("name, front", RESUME_GRID, ids=[f"{n}-{f}" for n, f in RESUME_GRID])
def test_state_dict_resume_is_bit_equal(name, front):
    """Save mid-training, load into a fresh optimizer over copies of the
    parameters, continue: every later step equals the uninterrupted run
    bit for bit (and both follow torch)."""
    cls_name, kwargs = OPT_CASES[name]
    f = _Front(front, "float32")
    params_np, grads_np = _data(5, "float32", steps=8)
    topt, oopt, tp, op = _run_pair(cls_name, kwargs, front, "float32", seed=5, steps=4,
                                   lr_change_at=-1)
    saved = oopt.state_dict()
    op2 = [f.param(f.numpy(p)) for p in op]
    oopt2 = f.opt(cls_name, op2, kwargs)
    oopt2.load_state_dict(saved)
    for t in range(4, 8):
        for group in (tp, op, op2):
            for p, g in zip(group, grads_np[t]):
                if g is not None:
                    p.grad = torch.tensor(g) if group is tp else f.grad(g)
        for o in (topt, oopt, oopt2):
            o.step()
        for i in range(len(SHAPES)):
            np.testing.assert_array_equal(f.numpy(op2[i]), f.numpy(op[i]),
                                          err_msg=f"step {t} param {i}")
            np.testing.assert_allclose(f.numpy(op[i]), tp[i].detach().numpy(),
                                       **TOL["float32"])
    # The saved dict was a snapshot: the run went on, it did not.
    oopt3 = f.opt(cls_name, [f.param(a) for a in params_np], kwargs)
    oopt3.load_state_dict(saved)
    assert oopt3.state_dict()["param_groups"] == saved["param_groups"]


def test_state_dict_layout_matches_torch():
    """The layout torch code reads: integer keys, ``param_groups[i]['params']``
    the indices, the state entry names torch uses."""
    params_np, grads_np = _data(2, "float32")
    tp = [torch.tensor(a, requires_grad=True) for a in params_np]
    op = [vt.tensor(a, requires_grad=True) for a in params_np]
    topt = torch.optim.Adam([{"params": tp[:2]}, {"params": tp[2:], "lr": 0.1}], amsgrad=True)
    oopt = vt.optim.Adam([{"params": op[:2]}, {"params": op[2:], "lr": 0.1}], amsgrad=True)
    for p, q, g in zip(tp, op, grads_np[0]):
        if g is not None:
            p.grad, q.grad = torch.tensor(g), vt.tensor(g)
    topt.step()
    oopt.step()
    ts, os_ = topt.state_dict(), oopt.state_dict()
    assert sorted(ts["state"]) == sorted(os_["state"])
    for k in ts["state"]:
        assert set(ts["state"][k]) == set(os_["state"][k])
        assert float(os_["state"][k]["step"].numpy()) == float(ts["state"][k]["step"])
    assert [g["params"] for g in ts["param_groups"]] == [g["params"] for g in os_["param_groups"]]
    for tg, og in zip(ts["param_groups"], os_["param_groups"]):
        for key in ("lr", "betas", "eps", "weight_decay", "amsgrad", "maximize"):
            assert tuple(np.ravel(og[key])) == tuple(np.ravel(tg[key])), key


@pytest.mark.parametrize("flag, value", [("foreach", True), ("foreach", False),
                                         ("fused", True), ("capturable", True),
                                         ("differentiable", True)])
@pytest.mark.parametrize("cls_name", ["SGD", "Adam", "AdamW", "Adagrad", "RMSprop"])
def test_torch_flags_accepted_with_torch_values_or_raise(cls_name, flag, value):
    """torch's implementation flags change how, not what: accepted ones must
    give torch's values; the rest raise."""
    import inspect
    if flag not in inspect.signature(getattr(torch.optim, cls_name)).parameters:
        with pytest.raises(TypeError):
            getattr(vt.optim, cls_name)([vt.tensor(np.ones(2), requires_grad=True)],
                                        lr=0.1, **{flag: value})
        return
    kwargs = {"lr": 0.05, flag: value}
    if flag == "differentiable":
        with pytest.raises(NotImplementedError):
            getattr(vt.optim, cls_name)([vt.tensor(np.ones(2), requires_grad=True)], **kwargs)
        return
    # torch refuses capturable=True for CPU parameters (at the first step);
    # where it accepts it, it computes the values it computes without it.
    tkwargs = {"lr": 0.05} if flag == "capturable" else kwargs
    _run_pair(cls_name, tkwargs, "vt", "float32", seed=9, our_kwargs=kwargs)


def test_unknown_torch_optimizer_and_option_raise():
    p = vt.tensor(np.ones(2, np.float32), requires_grad=True)
    with pytest.raises(NotImplementedError, match="LBFGS"):
        vt.optim.LBFGS([p])
    with pytest.raises(TypeError):
        vt.optim.SGD([p], lr=0.1, momentom=0.9)
    with pytest.raises(ValueError, match="Nesterov"):
        vt.optim.SGD([p], lr=0.1, nesterov=True)
    with pytest.raises(ValueError):
        vt.optim.Adam([p], lr=-1.0)


def test_torch_state_dict_loads_and_continues_equal():
    """A state dict saved by real torch (mid-training) loads into vm.torch's
    optimizer, which then continues exactly as torch does."""
    params_np, grads_np = _data(4, "float32", steps=6)
    tp = [torch.tensor(a, requires_grad=True) for a in params_np]
    topt = torch.optim.Adam(tp, lr=0.02, amsgrad=True, weight_decay=0.1)
    for t in range(3):
        for p, g in zip(tp, grads_np[t]):
            p.grad = None if g is None else torch.tensor(g)
        topt.step()
    sd = topt.state_dict()
    op = [vt.tensor(p.detach().numpy().copy(), requires_grad=True) for p in tp]
    oopt = vt.optim.Adam(op, lr=0.02, amsgrad=True, weight_decay=0.1)
    oopt.load_state_dict(sd)
    for t in range(3, 6):
        for p, q, g in zip(tp, op, grads_np[t]):
            p.grad = None if g is None else torch.tensor(g)
            q.grad = None if g is None else vt.tensor(g)
        topt.step()
        oopt.step()
        for p, q in zip(tp, op):
            np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(),
                                       **TOL["float32"])


# ------------------------------------------------------------------ fuzz
#: Every option each optimizer takes, with the values a draw picks from.
FUZZ_OPTIONS = {
    "SGD": dict(momentum=[0.0, 0.5, 0.9], dampening=[0.0, 0.1, 0.6], nesterov=[False, True],
                weight_decay=[0.0, 1e-3, 0.3], maximize=[False, True]),
    "Adam": dict(betas=[(0.9, 0.999), (0.0, 0.5), (0.5, 0.9), (0.99, 0.9999)],
                 eps=[1e-8, 1e-3, 0.0], weight_decay=[0.0, 0.1], amsgrad=[False, True],
                 maximize=[False, True]),
    "AdamW": dict(betas=[(0.9, 0.999), (0.3, 0.7)], eps=[1e-8, 1e-2],
                  weight_decay=[0.0, 1e-2, 0.5], amsgrad=[False, True], maximize=[False, True]),
    "Adagrad": dict(lr_decay=[0.0, 0.01, 1.0], weight_decay=[0.0, 0.2],
                    initial_accumulator_value=[0.0, 0.1, 2.0], eps=[1e-10, 1e-3],
                    maximize=[False, True]),
    "RMSprop": dict(alpha=[0.99, 0.5, 0.0], eps=[1e-8, 1e-3], weight_decay=[0.0, 0.1],
                    momentum=[0.0, 0.9], centered=[False, True], maximize=[False, True]),
    "Adadelta": dict(rho=[0.9, 0.3], eps=[1e-6, 1e-2], weight_decay=[0.0, 0.1],
                     maximize=[False, True]),
}


def _gen_optimizer(rng):
    cls_name = str(rng.choice(sorted(FUZZ_OPTIONS)))
    kw = {k: v[int(rng.integers(len(v)))] for k, v in FUZZ_OPTIONS[cls_name].items()}
    if cls_name == "SGD" and kw["nesterov"] and (kw["momentum"] == 0 or kw["dampening"]):
        return None                 # torch and ours both refuse it
    if cls_name == "RMSprop" and kw["centered"] and kw["alpha"] == 0.0:
        # Degenerate: the variance estimate g^2 - g^2 is 0 up to rounding
        # (torch's fused multiply-add makes some of it negative: NaN).
        return None
    kw["lr"] = float(rng.choice([1e-3, 0.05, 0.3]))
    front = "vt" if cls_name == "Adadelta" else str(rng.choice(["vt", "native"]))
    dtype = str(rng.choice(["float32", "float64"]))
    n = int(rng.integers(1, 5))
    shapes = [tuple(int(d) for d in rng.integers(0, 5, size=int(rng.integers(0, 3))))
              for _ in range(n)]
    if rng.random() < 0.3:
        shapes.append((int(rng.integers(1025, 2600)),))    # more than one kernel block
    scale = float(10.0 ** rng.choice([-6, 0, 0, 3]))
    return dict(cls=cls_name, kw=kw, front=front, dtype=dtype, shapes=shapes, scale=scale,
                steps=int(rng.integers(2, 7)), none_p=float(rng.choice([0.0, 0.3])),
                lr_change=bool(rng.random() < 0.5))


FUZZ = {"optimizer": (_gen_optimizer, 40)}


@pytest.mark.parametrize("cat, i", _fuzzcases.cases(FUZZ))
def test_fuzz_optimizer_matches_torch(cat, i):
    """Drawn optimizer, options, shapes (0-d, empty, several blocks),
    gradient scales, missing gradients and lr changes, against torch."""
    case = _fuzzcases.draw(FUZZ, cat, i, 7577)
    rng = np.random.default_rng(case["seed"])
    dt = case["dtype"]
    f = _Front(case["front"], dt)
    pn = [rng.standard_normal(s).astype(dt) for s in case["shapes"]]
    tp = [torch.tensor(np.array(a), requires_grad=True) for a in pn]
    op = [f.param(np.array(a)) for a in pn]
    topt = _torch_opt(case["cls"], tp, case["kw"])
    oopt = f.opt(case["cls"], op, case["kw"])
    tol = dict(TOL[dt])
    # State such as exp_avg = b1 * m + (1 - b1) * g can cancel: its rounding
    # is relative to the gradient's size, not to its own.
    state_tol = dict(tol, atol=max(tol["atol"], 8 * float(np.finfo(dt).eps) * case["scale"]))
    for t in range(case["steps"]):
        if case["lr_change"] and t == 1:
            topt.param_groups[0]["lr"] *= 0.3
            oopt.param_groups[0]["lr"] *= 0.3
        for p, q, s in zip(tp, op, case["shapes"]):
            if rng.random() < case["none_p"]:
                p.grad, q.grad = None, None
            else:
                g = (rng.standard_normal(s) * case["scale"]).astype(dt)
                p.grad, q.grad = torch.tensor(np.array(g)), f.grad(g)
        topt.step()
        oopt.step()
        for k, (a, b) in enumerate(zip(op, tp)):
            np.testing.assert_allclose(f.numpy(a), b.detach().numpy(), **tol,
                                       err_msg=f"{case}, step {t}, param {k}")
        _compare_state(case["cls"], topt, oopt, tp, op, state_tol, f"{case}, step {t}")


# ------------------------------------------------------------------ compiled
@pytest.mark.parametrize("name", ["sgd_dampening", "sgd_nesterov_wd", "adam_amsgrad",
                                  "adamw_maximize", "adagrad_all", "rmsprop_all"])
def test_compiled_step_equals_eager_and_torch(name):
    """A ``dg.function`` training step (the update included) gives the same
    bits as the eager step and follows torch."""
    cls_name, kwargs = OPT_CASES[name]
    rng = np.random.default_rng(len(name))
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(STEPS)]
    tw = torch.tensor(w0, requires_grad=True)
    topt = getattr(torch.optim, cls_name)([tw], **kwargs)
    runs = []
    for compiled in (False, True):
        w = dg.tensor(w0).requires_grad_()
        opt = getattr(dg.optim, cls_name)([w], **kwargs)

        def step(x, w=w, opt=opt):
            with dg.GradientTape() as tape:
                tape.watch([w])
                loss = dg.ops.sum(dg.ops.square(x @ w))
            opt.step(tape.gradient(loss, [w]))
            return loss

        fn = dg.function(step) if compiled else step
        ws = []
        for x in xs:
            fn(dg.tensor(x))
            ws.append(w.numpy().copy())
        runs.append(ws)
    for t, x in enumerate(xs):
        topt.zero_grad()
        (torch.tensor(x) @ tw).square().sum().backward()
        topt.step()
        np.testing.assert_array_equal(runs[1][t], runs[0][t], err_msg=f"step {t}")
        np.testing.assert_allclose(runs[0][t], tw.detach().numpy(), **TOL["float32"],
                                   err_msg=f"step {t}")


def test_torch_compile_of_step_equals_eager():
    rng = np.random.default_rng(12)
    w0 = rng.standard_normal((4, 3)).astype(np.float32)
    xs = [rng.standard_normal((5, 4)).astype(np.float32) for _ in range(STEPS)]
    runs = []
    for compiled in (False, True):
        w = vt.tensor(w0, requires_grad=True)
        opt = vt.optim.SGD([w], lr=0.05, momentum=0.9, dampening=0.2)

        def step(x, w=w, opt=opt):
            opt.zero_grad()
            loss = ((x @ w) ** 2).sum()
            loss.backward()
            opt.step()
            return loss

        fn = vt.compile(step) if compiled else step
        for x in xs:
            fn(vt.tensor(x))
        runs.append(w.detach().numpy().copy())
    np.testing.assert_array_equal(runs[1], runs[0])


# ------------------------------------------------------------------ schedulers
def _sched_pair(make, epochs=25, groups_lr=(0.1, 0.05), manual_lr_at=None,
                metric=None, step_epochs=None, front="vt"):
    """Build the same schedule on torch and on ours (``make(module,
    optimizer)``; vm.torch's or the native one) and compare the lrs after
    every step."""
    tp = [torch.zeros(2, requires_grad=True) for _ in groups_lr]
    topt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(tp, groups_lr)])
    ts = make(torch.optim.lr_scheduler, topt)
    if front == "vt":
        op = [vt.tensor(np.zeros(2, np.float32), requires_grad=True) for _ in groups_lr]
        oopt = vt.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(op, groups_lr)])
        os_ = make(vt.optim.lr_scheduler, oopt)
    else:
        op = [dg.tensor(np.zeros(2, np.float32)).requires_grad_() for _ in groups_lr]
        oopt = dg.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(op, groups_lr)])
        os_ = make(dg.optim.lr_scheduler, oopt)

    def lrs(o):
        return [g["lr"] for g in o.param_groups]

    np.testing.assert_allclose(lrs(oopt), lrs(topt), rtol=1e-12, err_msg="after construction")
    for e in range(epochs):
        if manual_lr_at is not None and e == manual_lr_at:
            for o in (topt, oopt):
                for g in o.param_groups:
                    g["lr"] = g["lr"] * 3.0
        topt.step()
        oopt.step() if front == "vt" else oopt.step([None] * len(op))
        args = () if metric is None else (metric(e),)
        kw = {} if step_epochs is None else {"epoch": step_epochs(e)}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ts.step(*args, **kw)
        os_.step(*args, **kw)
        np.testing.assert_allclose(lrs(oopt), lrs(topt), rtol=1e-12, atol=1e-15,
                                   err_msg=f"epoch {e}")
        np.testing.assert_allclose(os_.get_last_lr(), ts.get_last_lr(), rtol=1e-12,
                                   atol=1e-15, err_msg=f"get_last_lr, epoch {e}")
        if hasattr(ts, "last_epoch"):
            assert os_.last_epoch == ts.last_epoch
    return ts, os_, topt, oopt


SCHED_CASES = {
    "lambda": lambda m, o: m.LambdaLR(o, lambda e: 0.9 ** e + 0.01 * e),
    "lambda_per_group": lambda m, o: m.LambdaLR(o, [lambda e: 1 / (e + 1), lambda e: 0.5]),
    "step": lambda m, o: m.StepLR(o, step_size=3, gamma=0.5),
    "multistep": lambda m, o: m.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.3),
    "exponential": lambda m, o: m.ExponentialLR(o, gamma=0.8),
    "cosine": lambda m, o: m.CosineAnnealingLR(o, T_max=7, eta_min=0.001),
    "cosine_past_tmax": lambda m, o: m.CosineAnnealingLR(o, T_max=4),
    "linear_warmup": lambda m, o: m.LinearLR(o, start_factor=0.1, total_iters=6),
    "linear_decay": lambda m, o: m.LinearLR(o, start_factor=1.0, end_factor=0.2,
                                            total_iters=10),
    "constant": lambda m, o: m.ConstantLR(o, factor=0.25, total_iters=4),
    "cosine_warm_restarts": lambda m, o: m.CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2,
                                                                        eta_min=0.001),
    "onecycle": lambda m, o: m.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=30,
                                          cycle_momentum=False),
    "onecycle_linear_3phase": lambda m, o: m.OneCycleLR(o, max_lr=0.8, total_steps=30,
                                                        anneal_strategy="linear",
                                                        three_phase=True,
                                                        cycle_momentum=False),
    "polynomial": lambda m, o: m.PolynomialLR(o, total_iters=8, power=2.0),
    "multiplicative": lambda m, o: m.MultiplicativeLR(o, lambda e: 0.95),
    "sequential_warmup_cosine": lambda m, o: m.SequentialLR(
        o, [m.LinearLR(o, start_factor=0.01, total_iters=5), m.CosineAnnealingLR(o, T_max=15)],
        milestones=[5]),
    "sequential_three": lambda m, o: m.SequentialLR(
        o, [m.ConstantLR(o, factor=0.5, total_iters=2), m.StepLR(o, 2, 0.5),
            m.ExponentialLR(o, 0.9)], milestones=[4, 10]),
    "chained": lambda m, o: m.ChainedScheduler(
        [m.ExponentialLR(o, 0.9), m.StepLR(o, 4, 0.5)]),
}


@pytest.mark.parametrize("front", ["vt", "native"])
@pytest.mark.parametrize("name", sorted(SCHED_CASES))
def test_scheduler_matches_torch_or_raises(name, front):
    make = SCHED_CASES[name]
    if front == "vt":
        try:
            make(vt.optim.lr_scheduler, vt.optim.SGD(
                [{"params": [vt.tensor(np.zeros(2, np.float32), requires_grad=True)]}
                 for _ in range(2)], lr=0.1))
        except NotImplementedError as e:
            assert "not supported" in str(e)
            return
    _sched_pair(make, epochs=30, front=front)


def test_one_cycle_cycles_momentum_like_torch():
    """OneCycleLR with cycle_momentum writes SGD's momentum and Adam's beta1
    as torch does (native API)."""
    for cls, key in (("SGD", "momentum"), ("Adam", "betas")):
        tp = torch.zeros(2, requires_grad=True)
        op = dg.tensor(np.zeros(2, np.float32)).requires_grad_()
        kw = {"momentum": 0.9} if cls == "SGD" else {}
        topt = getattr(torch.optim, cls)([tp], lr=0.1, **kw)
        oopt = getattr(dg.optim, cls)([op], lr=0.1, **kw)
        ts = torch.optim.lr_scheduler.OneCycleLR(topt, max_lr=0.5, total_steps=12)
        os_ = dg.optim.lr_scheduler.OneCycleLR(oopt, max_lr=0.5, total_steps=12)
        for e in range(11):
            topt.step()
            oopt.step([None])
            ts.step()
            os_.step()
            np.testing.assert_allclose(os_.get_last_lr(), ts.get_last_lr(), rtol=1e-12)
            np.testing.assert_allclose(np.ravel(oopt.param_groups[0][key]),
                                       np.ravel(topt.param_groups[0][key]), rtol=1e-12)


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine", "linear_warmup"])
def test_scheduler_follows_manual_lr_change_like_torch(name):
    """torch's schedulers are chainable: an lr set by hand through
    ``param_groups`` between steps is the one later steps start from."""
    _sched_pair(SCHED_CASES[name], epochs=15, manual_lr_at=6)


def test_two_schedulers_on_one_optimizer_match_torch():
    """Stacking two chainable schedulers on one optimizer multiplies their
    effects in torch; ours must do the same (or raise)."""
    tp = torch.zeros(2, requires_grad=True)
    op = vt.tensor(np.zeros(2, np.float32), requires_grad=True)
    topt, oopt = torch.optim.SGD([tp], lr=0.1), vt.optim.SGD([op], lr=0.1)
    ta = torch.optim.lr_scheduler.ExponentialLR(topt, 0.9)
    tb = torch.optim.lr_scheduler.StepLR(topt, 3, 0.5)
    oa = vt.optim.lr_scheduler.ExponentialLR(oopt, 0.9)
    ob = vt.optim.lr_scheduler.StepLR(oopt, 3, 0.5)
    for e in range(10):
        topt.step()
        oopt.step()
        ta.step()
        tb.step()
        oa.step()
        ob.step()
        np.testing.assert_allclose(oopt.param_groups[0]["lr"], topt.param_groups[0]["lr"],
                                   rtol=1e-12, err_msg=f"epoch {e}")


@pytest.mark.parametrize("sign", [1.0, -1.0])
@pytest.mark.parametrize("kwargs", [
    dict(), dict(mode="max", factor=0.5, patience=1),
    dict(patience=2, threshold=0.1, threshold_mode="abs", cooldown=2, min_lr=[0.01, 0.04]),
    dict(patience=1, threshold=0.05), dict(mode="max", patience=1, threshold=0.05),
    dict(patience=0, factor=0.2, eps=0.05)])
def test_reduce_lr_on_plateau_matches_torch(kwargs, sign):
    """Negative metrics too: the relative threshold scales the best value
    (``best * (1 - threshold)``), it is not an absolute margin."""
    vals = [1.0, 0.9, 0.9, 0.95, 0.91, 0.92, 0.93, 0.5, 0.6, 0.7, 0.8, 0.81, 0.82, 0.83, 0.84,
            0.85, 0.86, 0.87, 0.86, 0.85, 0.84]
    _sched_pair(lambda m, o: m.ReduceLROnPlateau(o, **kwargs), epochs=len(vals),
                metric=lambda e: sign * vals[e])


@pytest.mark.parametrize("name", ["step", "exponential", "cosine", "multistep"])
def test_scheduler_resume_with_last_epoch_matches_torch(name):
    """``last_epoch=k`` resumes with the groups' ``initial_lr``."""
    def make(m, o):
        for g in o.param_groups:
            g["initial_lr"] = g["lr"]
        return SCHED_CASES[name](m, o) if False else {
            "step": lambda: m.StepLR(o, step_size=3, gamma=0.5, last_epoch=4),
            "exponential": lambda: m.ExponentialLR(o, gamma=0.8, last_epoch=4),
            "cosine": lambda: m.CosineAnnealingLR(o, T_max=7, eta_min=0.001, last_epoch=4),
            "multistep": lambda: m.MultiStepLR(o, milestones=[2, 5, 9], last_epoch=4)}[name]()
    _sched_pair(make, epochs=10)


def test_scheduler_state_dict_round_trip_matches_torch():
    ts, os_, topt, oopt = _sched_pair(SCHED_CASES["sequential_warmup_cosine"], epochs=7)
    sd = os_.state_dict()
    op = vt.tensor(np.zeros(2, np.float32), requires_grad=True)
    op2 = vt.tensor(np.zeros(2, np.float32), requires_grad=True)
    oopt2 = vt.optim.SGD([{"params": [op], "lr": 0.1}, {"params": [op2], "lr": 0.05}])
    os2 = SCHED_CASES["sequential_warmup_cosine"](vt.optim.lr_scheduler, oopt2)
    os2.load_state_dict(sd)
    for e in range(10):
        for s in (ts, os_, os2):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                s.step()
        np.testing.assert_allclose(os2.get_last_lr(), ts.get_last_lr(), rtol=1e-12)
        assert [g["lr"] for g in oopt2.param_groups] == [g["lr"] for g in oopt.param_groups]


def test_scheduler_step_before_optimizer_step_warns_like_torch():
    op = vt.tensor(np.zeros(2, np.float32), requires_grad=True)
    oopt = vt.optim.SGD([op], lr=0.1)
    s = vt.optim.lr_scheduler.StepLR(oopt, 2)
    with pytest.warns(UserWarning, match="optimizer.step"):
        s.step()


# ------------------------------------------------------------------ clipping
def _grads(seed, dtype="float32", scale=1.0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(s) * scale).astype(dtype) for s in [(3, 4), (7,), (0,), (2, 5)]]


CLIP_NORMS = [1.0, 2.0, math.inf, 3.0, 0.5, "inf"]
CLIP_GRID = [(f, n) for f in ("vt", "native") for n in CLIP_NORMS]


@pytest.mark.parametrize("front, norm_type", CLIP_GRID,
                         ids=[f"{f}-{n}" for f, n in CLIP_GRID])
@pytest.mark.parametrize("max_norm", [0.5, 100.0])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_grad_norm_matches_torch(front, norm_type, max_norm, dtype):
    gs = _grads(int(max_norm) + 3, dtype, scale=2.0)
    if float(norm_type) == math.inf:
        # torch refuses the inf norm of an empty gradient (no identity for
        # max); ours skips it, as it skips empty gradients for every norm.
        gs = [g for g in gs if g.size]
    tps = [torch.zeros(g.shape, dtype=getattr(torch, dtype), requires_grad=True) for g in gs]
    for p, g in zip(tps, gs):
        p.grad = torch.tensor(g)
    tps.append(torch.zeros(2, dtype=getattr(torch, dtype), requires_grad=True))  # no grad
    tn = torch.nn.utils.clip_grad_norm_(tps, max_norm, norm_type=norm_type)
    if front == "vt":
        ops_ = [vt.tensor(np.zeros(g.shape, dtype), requires_grad=True) for g in gs]
        for p, g in zip(ops_, gs):
            p.grad = vt.tensor(g)
        ops_.append(vt.tensor(np.zeros(2, dtype), requires_grad=True))
        on = vt.nn.utils.clip_grad_norm_(ops_, max_norm, norm_type=norm_type)
    else:
        ops_ = [dg.tensor(np.zeros(g.shape, dtype)).requires_grad_() for g in gs]
        for p, g in zip(ops_, gs):
            p.grad = dg.tensor(g)
        ops_.append(dg.tensor(np.zeros(2, dtype)).requires_grad_())
        on = dg.optim.clip_grad_norm_(ops_, max_norm, norm_type=norm_type)
    tol = TOL[dtype]
    np.testing.assert_allclose(_state_np(on), tn.numpy(), **tol)
    assert str(_state_np(on).dtype) == dtype
    for p, q in zip(tps, ops_):
        if p.grad is None:
            assert q.grad is None
        else:
            np.testing.assert_allclose(_state_np(q.grad), p.grad.numpy(), **tol)


@pytest.mark.parametrize("front", ["vt", "native"])
@pytest.mark.parametrize("bad", [np.inf, np.nan])
def test_clip_grad_norm_nonfinite_matches_torch(front, bad):
    gs = _grads(1)
    gs[0][1, 2] = bad
    tps = [torch.zeros(g.shape, requires_grad=True) for g in gs]
    for p, g in zip(tps, gs):
        p.grad = torch.tensor(g)
    with pytest.raises(RuntimeError):
        torch.nn.utils.clip_grad_norm_(tps, 1.0, error_if_nonfinite=True)
    tn = torch.nn.utils.clip_grad_norm_(tps, 1.0)
    mod = vt if front == "vt" else dg
    ops_ = [(vt.tensor(np.zeros(g.shape, np.float32), requires_grad=True) if front == "vt" else
             dg.tensor(np.zeros(g.shape, np.float32)).requires_grad_()) for g in gs]
    for p, g in zip(ops_, gs):
        p.grad = mod.tensor(g)
    clip = vt.nn.utils.clip_grad_norm_ if front == "vt" else dg.optim.clip_grad_norm_
    with pytest.raises(RuntimeError):
        clip(ops_, 1.0, error_if_nonfinite=True)
    on = clip(ops_, 1.0)
    np.testing.assert_array_equal(_state_np(on), tn.numpy())
    for p, q in zip(tps, ops_):
        np.testing.assert_array_equal(_state_np(q.grad), p.grad.numpy())


@pytest.mark.parametrize("foreach", [None, True, False])
def test_clip_grad_norm_foreach_flag(foreach):
    gs = _grads(2)
    tps = [torch.zeros(g.shape, requires_grad=True) for g in gs]
    ops_ = [vt.tensor(np.zeros(g.shape, np.float32), requires_grad=True) for g in gs]
    for p, q, g in zip(tps, ops_, gs):
        p.grad, q.grad = torch.tensor(g), vt.tensor(g)
    tn = torch.nn.utils.clip_grad_norm_(tps, 1.0, foreach=foreach)
    on = vt.nn.utils.clip_grad_norm_(ops_, 1.0, foreach=foreach)
    np.testing.assert_allclose(on.numpy(), tn.numpy(), **TOL["float32"])


@pytest.mark.parametrize("front", ["vt", "native"])
@pytest.mark.parametrize("clip_value", [0.0, 0.3, 5.0])
def test_clip_grad_value_matches_torch(front, clip_value):
    gs = _grads(4, scale=2.0)
    tps = [torch.zeros(g.shape, requires_grad=True) for g in gs]
    for p, g in zip(tps, gs):
        p.grad = torch.tensor(g)
    torch.nn.utils.clip_grad_value_(tps, clip_value)
    mod = vt if front == "vt" else dg
    ops_ = [(vt.tensor(np.zeros(g.shape, np.float32), requires_grad=True) if front == "vt" else
             dg.tensor(np.zeros(g.shape, np.float32)).requires_grad_()) for g in gs]
    for p, g in zip(ops_, gs):
        p.grad = mod.tensor(g)
    (vt.nn.utils.clip_grad_value_ if front == "vt" else dg.optim.clip_grad_value_)(
        ops_, clip_value)
    for p, q in zip(tps, ops_):
        np.testing.assert_array_equal(_state_np(q.grad), p.grad.numpy())


# ------------------------------------------------------------------ GradScaler
def _scaler_run(make_scaler, steps, bad_steps, clip=None, two_opts=False):
    """The same float32 training loop with torch's GradScaler("cpu") and
    ours; gradients of ``bad_steps`` hold an inf or a NaN."""
    rng = np.random.default_rng(21)
    w0 = rng.standard_normal((3, 2)).astype(np.float32)
    xs = [rng.standard_normal((4, 3)).astype(np.float32) for _ in range(steps)]
    tw = torch.tensor(w0, requires_grad=True)
    ow = dg.tensor(w0).requires_grad_()
    tb = torch.zeros(2, requires_grad=True)
    ob = dg.tensor(np.zeros(2, np.float32)).requires_grad_()
    if two_opts:
        topts = [torch.optim.SGD([tw], lr=0.1, momentum=0.9), torch.optim.Adam([tb], lr=0.1)]
        oopts = [dg.optim.SGD([ow], lr=0.1, momentum=0.9), dg.optim.Adam([ob], lr=0.1)]
    else:
        topts = [torch.optim.SGD([tw, tb], lr=0.1, momentum=0.9)]
        oopts = [dg.optim.SGD([ow, ob], lr=0.1, momentum=0.9)]
    ts = make_scaler(torch.amp.GradScaler, "cpu")
    os_ = make_scaler(dg.GradScaler, None)
    for t in range(steps):
        x = xs[t].copy()
        if t in bad_steps:
            x[0, 0] = np.inf if t % 2 else np.nan
        for o in topts + oopts:
            o.zero_grad()
        tl = ((torch.tensor(x) @ tw + tb) ** 2).sum()
        ol = dg.ops.sum(dg.ops.square(dg.tensor(x) @ ow + ob))
        ts.scale(tl).backward()
        os_.scale(ol).backward()
        np.testing.assert_allclose(ow.grad.numpy(), tw.grad.numpy(), rtol=1e-5, atol=1e-3)
        if clip is not None:
            for s, opts, ps, fn in ((ts, topts, [tw, tb], torch.nn.utils.clip_grad_norm_),
                                    (os_, oopts, [ow, ob], dg.optim.clip_grad_norm_)):
                for o in opts:
                    s.unscale_(o)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fn(ps, clip)
        for s, opts in ((ts, topts), (os_, oopts)):
            for o in opts:
                s.step(o)
            s.update()
        assert os_.get_scale() == ts.get_scale(), f"step {t}"
        np.testing.assert_allclose(ow.numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {t}")
        np.testing.assert_allclose(ob.numpy(), tb.detach().numpy(), rtol=1e-5, atol=1e-6,
                                   err_msg=f"step {t}")
    return ts, os_


def _mk(**kw):
    def make(cls, dev):
        return cls(dev, **kw) if dev else cls(**kw)
    return make


@pytest.mark.parametrize("kw, bad", [
    (dict(init_scale=2.0 ** 10, growth_interval=3), {4}),
    (dict(init_scale=8.0, growth_factor=4.0, backoff_factor=0.25, growth_interval=2), {1, 2, 7}),
    (dict(init_scale=2.0 ** 16), {0, 1, 2}),
    (dict(init_scale=3.0, growth_factor=1.5, backoff_factor=0.3, growth_interval=1), {3, 5}),
])
@pytest.mark.parametrize("two_opts", [False, True])
def test_grad_scaler_matches_torch(kw, bad, two_opts):
    _scaler_run(_mk(**kw), 10, bad, two_opts=two_opts)


def test_grad_scaler_unscale_then_clip_matches_torch():
    _scaler_run(_mk(init_scale=2.0 ** 12, growth_interval=2), 8, {3}, clip=0.5)


def test_grad_scaler_state_dict_matches_torch():
    ts, os_ = _scaler_run(_mk(init_scale=4.0, growth_interval=3), 8, {2})
    tsd, osd = ts.state_dict(), os_.state_dict()
    for key in tsd:
        assert key in osd, key
        assert float(osd[key]) == float(tsd[key]), key
    # A torch scaler's state dict loads into ours, and ours into torch.
    fresh = dg.GradScaler()
    fresh.load_state_dict(tsd)
    assert fresh.get_scale() == ts.get_scale()
    back = torch.amp.GradScaler("cpu")
    back.load_state_dict(osd)
    assert back.get_scale() == os_.get_scale()
    assert back._get_growth_tracker() == ts._get_growth_tracker()


def test_grad_scaler_update_without_step_raises_like_torch():
    ts = torch.amp.GradScaler("cpu")
    with pytest.raises(AssertionError):
        ts.update()
    with pytest.raises(RuntimeError, match="update"):
        dg.GradScaler().update()


def test_grad_scaler_disabled_passes_through():
    s = dg.GradScaler(enabled=False)
    t = torch.amp.GradScaler("cpu", enabled=False)
    assert s.get_scale() == t.get_scale() == 1.0
    assert s.state_dict() == t.state_dict() == {}


# ------------------------------------------------------------------ never silent
def test_changing_a_hyper_parameter_a_compiled_step_baked_in_warns():
    """torch.compile guards on the options and recompiles; our compiled
    graph keeps the values it was traced with (only lr is read at run
    time), so changing one afterwards must not pass silently."""
    w = dg.tensor(np.ones((2, 2), np.float32)).requires_grad_()
    opt = dg.optim.SGD([w], lr=0.1, momentum=0.9)

    @dg.function
    def step(x):
        with dg.GradientTape() as tape:
            tape.watch([w])
            loss = dg.ops.sum(x @ w)
        opt.step(tape.gradient(loss, [w]))
        return loss

    step(dg.tensor(np.ones((2, 2), np.float32)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        opt.param_groups[0]["lr"] = 0.05            # read at run time: fine
        opt.param_groups[0]["momentum"] = 0.9       # unchanged: fine
    with pytest.warns(RuntimeWarning, match="momentum.*compile the step again"):
        opt.param_groups[0]["momentum"] = 0.5
    with pytest.warns(RuntimeWarning, match="momentum"):
        dg.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.5, total_steps=10)


def test_adadelta_refuses_a_gradient_of_another_shape():
    p = vt.tensor(np.zeros((3, 1), np.float32), requires_grad=True)
    opt = vt.optim.Adadelta([p])
    # The .grad setter refuses the wrong shape first, as torch's does
    # ("assigned grad has data of a different size"); nothing reaches step.
    with pytest.raises(RuntimeError):
        p.grad = vt.tensor(np.ones((1, 3), np.float32))
    tp = torch.zeros((3, 1), requires_grad=True)
    with pytest.raises(RuntimeError):
        tp.grad = torch.ones((1, 3))
    opt.step()
    assert tuple(p.shape) == (3, 1) and p.grad is None


def test_optimizer_state_is_keyed_by_torch_front_end_parameters():
    """torch code reads and writes ``optimizer.state[p]`` with its own
    parameters."""
    params_np, grads_np = _data(13, "float32")
    tp = [torch.tensor(a, requires_grad=True) for a in params_np[:2]]
    op = [vt.tensor(a, requires_grad=True) for a in params_np[:2]]
    topt = torch.optim.SGD(tp, lr=0.1, momentum=0.9)
    oopt = vt.optim.SGD(op, lr=0.1, momentum=0.9)
    for p, q, g in zip(tp, op, grads_np[0][:2]):
        p.grad, q.grad = torch.tensor(g), vt.tensor(g)
    topt.step()
    oopt.step()
    assert (op[0] in oopt.state) == (tp[0] in topt.state) is True
    assert len(oopt.state) == len(topt.state)
    buf = oopt.state[op[0]]["momentum_buffer"]
    np.testing.assert_allclose(buf.numpy(), topt.state[tp[0]]["momentum_buffer"].numpy(),
                               **TOL["float32"])
    # A buffer written through the view is the one the next step uses.
    topt.state[tp[1]]["momentum_buffer"] = torch.zeros(5)
    oopt.state[op[1]]["momentum_buffer"] = vt.zeros(5)
    for p, q, g in zip(tp, op, grads_np[1][:2]):
        p.grad, q.grad = torch.tensor(g), vt.tensor(g)
    topt.step()
    oopt.step()
    for p, q in zip(tp, op):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), **TOL["float32"])


def test_user_subclass_of_lr_scheduler_matches_torch():
    """A schedule written as torch users write one: subclass LRScheduler,
    override get_lr."""
    def make(m, o):
        class Warmup(m.LRScheduler):
            def __init__(self, optimizer, warmup, last_epoch=-1):
                self.warmup = warmup
                super().__init__(optimizer, last_epoch)

            def get_lr(self):
                f = min(1.0, (self.last_epoch + 1) / self.warmup)
                return [base * f * 0.99 ** self.last_epoch for base in self.base_lrs]
        return Warmup(o, 4)
    ts, os_, _, _ = _sched_pair(make, epochs=8)
    assert os_.state_dict()["last_epoch"] == ts.state_dict()["last_epoch"]
    with pytest.raises(NotImplementedError, match="get_lr"):
        class NoRule(vt.optim.lr_scheduler.LRScheduler):
            pass
        NoRule(vt.optim.SGD([vt.tensor(np.zeros(2, np.float32), requires_grad=True)], lr=0.1))


@pytest.mark.parametrize("opt_name,kw", [("SGD", dict(lr=0.1, momentum=0.9)),
                                         ("Adam", dict(lr=0.1))])
@pytest.mark.parametrize("three_phase", [False, True])
def test_vm_torch_one_cycle_lr_matches_torch(opt_name, kw, three_phase):
    # vm.torch's OneCycleLR drives the native scheduler through the wrapped
    # optimizer: lr, the cycled momentum / beta1 and the parameters follow
    # torch's step for step.
    seqs = []
    for T in (torch, vt):
        p = T.nn.Parameter(T.ones(3))
        opt = getattr(T.optim, opt_name)([p], **kw)
        sched = T.optim.lr_scheduler.OneCycleLR(opt, max_lr=1.0, total_steps=10,
                                                three_phase=three_phase)
        seq = []
        for _ in range(10):
            p.grad = T.ones(3)
            opt.step()
            sched.step()
            g = opt.param_groups[0]
            mom = g["momentum"] if "momentum" in g else g["betas"][0]
            seq.append([g["lr"], mom] + p.detach().numpy().tolist())
        seqs.append(np.array(seq, dtype=np.float64))
    np.testing.assert_allclose(seqs[1], seqs[0], rtol=1e-6)
