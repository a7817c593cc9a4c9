"""Differential fuzzing of ``dragon_core.vm.torch.nn`` (modules and
``nn.functional``) against real PyTorch.

``test_differential.py`` draws tensor ops; this file draws layers: the same
module is built in real torch and in vm.torch with the same arguments, both
get the same parameter and buffer values (through ``load_state_dict`` of
torch's ``state_dict`` keys, so the key names and order are checked too),
run on the same inputs for one or more steps, and the outputs, the gradients
of a weighted sum of the outputs w.r.t. the float inputs and every parameter
(in ``named_parameters`` order, names compared), and the buffers after the
steps (BatchNorm's running statistics and ``num_batches_tracked``) are
compared. Functional cases have no module.

Where torch raises, vm.torch must raise too (a refusal, not an internal
error); where torch computes, vm.torch must compute the same thing. A
low-precision case that torch's CPU build does not implement is compared
with torch's float32 result rounded to that precision.

The seeds are fixed (``tests/_fuzzcases.py``; ``DRAGON_FUZZ_OFFSET=k`` draws
other cases by hand): a failure names a reproducible case, rerun one with
``pytest tests/vm_torch/test_differential_nn.py -k "conv-17"``.
"""

from __future__ import annotations

import linecache
import math

import numpy as np
import pytest

import _fuzzcases

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

FLOATS = ["float16", "bfloat16", "float32", "float64"]
#: (rtol, atol) per dtype, loosened per case by ``scale``.
TOL = {"float16": (4e-3, 4e-3), "bfloat16": (3e-2, 3e-2), "float32": (1e-5, 1e-5),
       "float64": (1e-10, 1e-11)}


# ------------------------------------------------------------------ inputs
class Spec:
    """One input: shape, dtype, value kind (``""`` normal, ``pos``,
    ``prob`` in (0, 1), ``int:K`` integers in [0, K), ``sign`` +-1,
    ``bool:P`` booleans true with probability P) and layout (``c``, ``t``
    a transposed base, ``step`` a stepped slice, ``off`` an offset slice)."""

    def __init__(self, shape, dtype="float32", kind="", layout="c", grad=True):
        self.shape, self.dtype, self.kind = tuple(shape), dtype, kind
        self.layout, self.grad = layout, grad

    def __repr__(self):
        return f"{self.dtype}{list(self.shape)}{self.kind and ':' + self.kind}/{self.layout}"


def _values(rng, shape, dt, kind):
    if kind.startswith("int:"):
        return rng.integers(0, int(kind[4:]), shape).astype(dt)
    if kind.startswith("bool:"):
        return rng.random(shape) < float(kind[5:])
    if kind.startswith("mask:"):   # True = masked out; never a whole row (NaN rows differ:
        m = rng.random(shape) < float(kind[5:])   # torch's gradient NaN, ours 0)
        if m.size:
            m[..., int(rng.integers(0, shape[-1]))] = False
        return m
    if kind == "sign":
        return np.where(rng.random(shape) < 0.5, -1.0, 1.0).astype(dt)
    if kind == "uniq":   # distinct values (max pooling without ties)
        n = int(np.prod(shape))
        return ((rng.permutation(n).reshape(shape) - n // 2) / 4.0).astype(
            "float32" if dt == "bfloat16" else dt)
    a = rng.standard_normal(shape)
    if kind == "pos":
        a = np.abs(a) + 0.5
    elif kind == "prob":
        a = rng.uniform(0.05, 0.95, shape)
    if dt in ("float16", "bfloat16"):
        a = np.round(a * 16) / 16     # exactly representable in both
    return a.astype("float32" if dt == "bfloat16" else dt)


def _base(rng, spec):
    """(base values, view function) with view(base) of spec's shape."""
    shape, lay = spec.shape, spec.layout
    nd = len(shape)
    if lay == "t" and nd >= 2:
        perm = tuple(reversed(range(nd)))
        vals = _values(rng, shape, spec.dtype, spec.kind)
        return np.ascontiguousarray(vals.transpose(perm)), lambda t: t.permute(*perm)
    if lay == "step" and nd >= 1:
        big = shape[:-1] + (2 * shape[-1] + 1,)
        return _values(rng, big, spec.dtype, spec.kind), lambda t: t[..., 1::2]
    if lay == "off" and nd >= 1:
        big = (shape[0] + 2,) + shape[1:]
        return _values(rng, big, spec.dtype, spec.kind), lambda t: t[1:shape[0] + 1]
    return _values(rng, shape, spec.dtype, spec.kind), lambda t: t


def _tensor(T, arr, dtype):
    t = T.tensor(arr)
    if dtype == "bfloat16":
        t = t.to(T.bfloat16)
    return t


def _np(t):
    t = t.detach()
    if str(t.dtype).endswith(("bfloat16", "float16")):
        t = t.float()
    return t.numpy().copy()


def _flat(out):
    if isinstance(out, (tuple, list)):
        res = []
        for o in out:
            res.extend(_flat(o))
        return res
    return [out]


def _param_values(rng, name, shape):
    a = rng.standard_normal(shape) * 0.5
    if name.endswith("running_var"):
        a = np.abs(a) + 0.5
    return a


def run(T, case, arrays, params, low_as_f32=False):
    """Builds the module (if any), loads ``params``, runs every step and
    returns (state keys, parameter names, outputs, gradients, buffers)."""
    dt = case.get("dtype", "float32")
    run_dt = "float32" if low_as_f32 else dt
    mod = case["make"](T) if case.get("make") else None
    keys, names = [], []
    if mod is not None:
        keys = list(mod.state_dict().keys())
        if run_dt != "float32":
            mod = mod.to(getattr(T, run_dt))
        if params is not None:
            mod.load_state_dict({k: T.tensor(v) for k, v in params.items()})
        mod.train(case.get("train", True))
        names = [n for n, _ in mod.named_parameters()]
    outs_all, grads_all = [], []
    for step in arrays:
        leaves, views = [], []
        for (base, view), spec in zip(step, case["specs"]):
            t = _tensor(T, base, spec.dtype)
            if low_as_f32 and spec.dtype in ("float16", "bfloat16"):
                t = t.float()
            if spec.grad and spec.dtype in FLOATS:
                t.requires_grad_(True)
            leaves.append(t)
            views.append(view(t))
        if "eval_after" in case and step is arrays[-1]:
            mod.train(False)
        out = case["fn"](T, mod, *views)
        outs = _flat(out)
        want = [t for t in leaves if t.requires_grad]
        if mod is not None:
            want += [p for p in mod.parameters() if p.requires_grad]
        floats = [o for o in outs if isinstance(o, T.Tensor) and o.dtype.is_floating_point
                  and o.requires_grad]
        grads = []
        if want and floats and case.get("grad", True):
            loss = None
            for k, o in enumerate(floats):
                w = np.random.default_rng(k + 100).standard_normal(tuple(o.shape))
                term = (o.double() * T.tensor(w)).sum()
                loss = term if loss is None else loss + term
            gs = T.autograd.grad(loss, want, allow_unused=True)
            grads = [None if g is None else _np(g) for g in gs]
        vals = []
        for o in outs:
            if isinstance(o, T.Tensor):
                d = str(o.dtype).replace("torch.", "")
                if low_as_f32 and d == "float32" and dt in ("float16", "bfloat16"):
                    o, d = o.to(getattr(T, dt)), dt
                vals.append((_np(o), d, tuple(o.shape)))
            else:
                vals.append((o, type(o).__name__, None))
        outs_all.append(vals)
        grads_all.append(grads)
    bufs = []
    if mod is not None:
        for n, b in mod.named_buffers():
            bufs.append((n, _np(b), str(b.dtype).replace("torch.", "")))
    return keys, names, outs_all, grads_all, bufs


def _close(got, ref, dtype, what, scale):
    got, ref = np.asarray(got), np.asarray(ref)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != torch's {ref.shape}"
    if ref.dtype == bool or ref.dtype.kind in "iu":
        np.testing.assert_array_equal(got, ref, err_msg=what)
        return
    rtol, atol = TOL.get(dtype, TOL["float32"])
    np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64),
                               rtol=rtol * scale, atol=atol * scale, err_msg=what,
                               equal_nan=True)


INTERNAL_ERRORS = (IndexError, AttributeError, ZeroDivisionError, TypeError, KeyError,
                   UnboundLocalError, NameError)
LOW_NOT_IMPLEMENTED = ("not implemented for 'Half'", "not implemented for 'BFloat16'")


def _deliberate(exc) -> bool:
    """Whether ``exc`` comes from a ``raise`` statement in dragon_core."""
    tb = exc.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    if "dragon_core" not in code.co_filename:
        return False
    return linecache.getline(code.co_filename, tb.tb_lineno).strip().startswith("raise ")


STATS = {"refused": []}


def _draw_inputs(rng, case):
    return [[_base(rng, s) for s in case["specs"]] for _ in range(case.get("steps", 1))]


def _copy(arrays):
    return [[(b.copy(), v) for b, v in step] for step in arrays]


def check(case):
    """case: dict(desc, fn, specs, seed[, make, dtype, steps, train,
    eval_after, grad, scale])."""
    rng = np.random.default_rng(case["seed"])
    arrays = _draw_inputs(rng, case)
    dt = case.get("dtype", "float32")
    desc = f"{case['desc']} [{dt}] on {case['specs']}"
    params = None
    low_f32 = False
    try:
        if case.get("make"):
            torch.manual_seed(0)
            probe = case["make"](torch)
            params = {k: _param_values(rng, k, tuple(v.shape)) if v.dtype.is_floating_point
                      else v.numpy().copy() for k, v in probe.state_dict().items()}
        try:
            ref = run(torch, case, _copy(arrays), params)
        except RuntimeError as exc:
            if not any(m in str(exc) for m in LOW_NOT_IMPLEMENTED):
                raise
            low_f32 = True
            ref = run(torch, case, _copy(arrays), params, low_as_f32=True)
    except (RuntimeError, TypeError, ValueError, IndexError, NotImplementedError,
            AssertionError) as exc:
        try:
            run(vt, case, _copy(arrays), params)
        except INTERNAL_ERRORS as ours:
            if not isinstance(exc, type(ours)) and not isinstance(ours, type(exc)) \
                    and not _deliberate(ours):
                raise AssertionError(f"{desc}: torch raises {type(exc).__name__} "
                                     f"({str(exc)[:200]}) but vm.torch fails with "
                                     f"{type(ours).__name__}: {ours}") from ours
            return
        except Exception:  # noqa: BLE001 - any other clear error is a refusal
            return
        raise AssertionError(f"{desc}: torch raises ({type(exc).__name__}: "
                             f"{str(exc)[:300]}) but vm.torch computes")
    try:
        got = run(vt, case, _copy(arrays), params)
    except NotImplementedError as exc:
        if not _deliberate(exc):
            raise
        STATS["refused"].append(f"{case['desc']}: {exc}")
        return   # a feature we do not have, refused by name (docs/from-pytorch.md)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{desc}: torch computes but vm.torch raises "
                             f"{type(exc).__name__}: {exc}") from exc
    _compare(desc, ref, got, case.get("scale", 1.0) * (4 if low_f32 else 1), dt)


def _compare(desc, ref, got, scale, dt="float32"):
    rkeys, rnames, routs, rgrads, rbufs = ref
    gkeys, gnames, gouts, ggrads, gbufs = got
    assert gkeys == rkeys, f"{desc}: state_dict keys {gkeys} != torch's {rkeys}"
    assert gnames == rnames, f"{desc}: named_parameters {gnames} != torch's {rnames}"
    for step, (go, ro, gg, rg) in enumerate(zip(gouts, routs, ggrads, rgrads)):
        at = f"{desc} step {step}"
        assert len(go) == len(ro), f"{at}: {len(go)} outputs, torch gives {len(ro)}"
        for i, ((gv, gd, gs), (rv, rd, rs)) in enumerate(zip(go, ro)):
            assert gd == rd, f"{at}: output {i} dtype {gd} != torch's {rd}"
            assert gs == rs, f"{at}: output {i} shape {gs} != torch's {rs}"
            if rs is None:
                assert gv == rv, f"{at}: output {i} {gv!r} != torch's {rv!r}"
            else:
                _close(gv, rv, rd, f"{at}: output {i}", scale)
        assert len(gg) == len(rg), f"{at}: gradient count {len(gg)} != torch's {len(rg)}"
        for i, (g, r) in enumerate(zip(gg, rg)):
            what = f"{at}: grad {i}" + (f" ({rnames[i - (len(rg) - len(rnames))]})"
                                        if i >= len(rg) - len(rnames) else "")
            assert (g is None) == (r is None), f"{what} presence differs"
            if g is not None:
                _close(g, r, dt, what, 10 * scale)
    assert [b[0] for b in gbufs] == [b[0] for b in rbufs], \
        f"{desc}: buffers {[b[0] for b in gbufs]} != torch's {[b[0] for b in rbufs]}"
    for (n, gv, gd), (_, rv, rd) in zip(gbufs, rbufs):
        assert gd == rd, f"{desc}: buffer {n} dtype {gd} != torch's {rd}"
        _close(gv, rv, rd, f"{desc}: buffer {n} after the steps", scale)


# -------------------------------------------------------------- generators
def _pick(rng, seq):
    return seq[int(rng.integers(0, len(seq)))]


def _layout(rng):
    return _pick(rng, ["c", "c", "c", "t", "step", "off"])


def _fdt(rng, low=True):
    return _pick(rng, ["float32", "float32", "float64"] + (["bfloat16", "float32", "float16"]
                                                            if low else []))


def _call(T, m, *xs):
    return m(*xs)


def gen_linear(rng):
    dt = _fdt(rng)
    if rng.random() < 0.3:
        i1, i2, o = (int(v) for v in rng.integers(1, 5, 3))
        n = int(_pick(rng, [0, 1, 3]))
        bias = bool(rng.random() < 0.7)
        return dict(desc=f"Bilinear({i1}, {i2}, {o}, bias={bias})", dtype=dt,
                    make=lambda T: T.nn.Bilinear(i1, i2, o, bias=bias), fn=_call,
                    specs=[Spec((n, i1), dt, layout=_layout(rng)),
                           Spec((n, i2), dt, layout=_layout(rng))], scale=4)
    i, o = (int(v) for v in rng.integers(1, 6, 2))
    lead = tuple(int(v) for v in rng.integers(0 if rng.random() < 0.1 else 1, 4,
                                              int(rng.integers(0, 3))))
    bias = bool(rng.random() < 0.7)
    return dict(desc=f"Linear({i}, {o}, bias={bias})", dtype=dt,
                make=lambda T: T.nn.Linear(i, o, bias=bias), fn=_call,
                specs=[Spec(lead + (i,), dt, layout=_layout(rng))], scale=4)


def _tup(rng, nd, lo, hi):
    if rng.random() < 0.5:
        return int(rng.integers(lo, hi + 1))
    return tuple(int(v) for v in rng.integers(lo, hi + 1, nd))


def _as_tuple(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


def gen_conv(rng):
    nd = int(_pick(rng, [1, 2, 2, 3]))
    g = int(_pick(rng, [1, 1, 2]))
    cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    k = _tup(rng, nd, 1, 3)
    s = _tup(rng, nd, 1, 2) if rng.random() < 0.5 else 1
    d = _tup(rng, nd, 1, 2) if rng.random() < 0.4 else 1
    mode = _pick(rng, ["zeros", "zeros", "zeros", "reflect", "replicate", "circular"])
    r = rng.random()
    p = "same" if r < 0.15 else "valid" if r < 0.22 else _tup(rng, nd, 0, 2)
    bias = bool(rng.random() < 0.7)
    kk, dd = _as_tuple(k, nd), _as_tuple(d, nd)
    size = tuple(int(rng.integers(max(1, (a - 1) * b + 1 - 1), (a - 1) * b + 4))
                 for a, b in zip(kk, dd))
    n = int(_pick(rng, [1, 2, 2, 0])) if rng.random() < 0.9 else None  # None: unbatched
    shape = ((n,) if n is not None else ()) + (cin,) + size
    dt = _fdt(rng) if nd < 3 else _fdt(rng, low=False)
    via = "F" if rng.random() < 0.25 and mode == "zeros" else "module"
    name = f"Conv{nd}d"
    if via == "F":
        fname = f"conv{nd}d"

        def fn(T, m, x, w, *b):
            return getattr(T.nn.functional, fname)(x, w, b[0] if b else None, s, p, d, g)
        specs = [Spec(shape, dt, layout=_layout(rng)),
                 Spec((cout, cin // g) + kk, dt)] + ([Spec((cout,), dt)] if bias else [])
        return dict(desc=f"F.{fname}(stride={s}, padding={p!r}, dilation={d}, groups={g})",
                    dtype=dt, fn=fn, specs=specs, scale=8)
    return dict(desc=f"{name}({cin}, {cout}, {k}, stride={s}, padding={p!r}, dilation={d}, "
                     f"groups={g}, bias={bias}, padding_mode={mode!r})", dtype=dt,
                make=lambda T: getattr(T.nn, name)(cin, cout, k, stride=s, padding=p,
                                                   dilation=d, groups=g, bias=bias,
                                                   padding_mode=mode),
                fn=_call, specs=[Spec(shape, dt, layout=_layout(rng))], scale=8)


def gen_conv_transpose(rng):
    nd = int(_pick(rng, [1, 2, 2, 3]))
    g = int(_pick(rng, [1, 1, 2]))
    cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
    k = _tup(rng, nd, 1, 3)
    s = _tup(rng, nd, 1, 3) if rng.random() < 0.6 else 1
    d = _tup(rng, nd, 1, 2) if rng.random() < 0.3 else 1
    p = _tup(rng, nd, 0, 1)
    ss, dd = _as_tuple(s, nd), _as_tuple(d, nd)
    # (output_padding below the stride: vm.torch refuses torch's
    # output_padding < dilation with a smaller stride, docs/from-pytorch.md)
    op = tuple(int(rng.integers(0, a)) for a in ss) if rng.random() < 0.4 else 0
    bias = bool(rng.random() < 0.7)
    size = tuple(int(v) for v in rng.integers(1, 4, nd))
    kk, pp = _as_tuple(k, nd), _as_tuple(p, nd)
    if any((i - 1) * a - 2 * q + b * (c - 1) + 1 <= 0
           for i, a, q, b, c in zip(size, ss, pp, dd, kk)):
        return None   # an empty output: vm.torch refuses it (torch gives an empty tensor)
    n = int(_pick(rng, [1, 2, 2, 0])) if rng.random() < 0.9 else None
    shape = ((n,) if n is not None else ()) + (cin,) + size
    dt = _fdt(rng) if nd < 3 else _fdt(rng, low=False)
    name = f"ConvTranspose{nd}d"
    if rng.random() < 0.25:
        fname = f"conv_transpose{nd}d"
        kk = _as_tuple(k, nd)

        def fn(T, m, x, w, *b):
            return getattr(T.nn.functional, fname)(x, w, b[0] if b else None, s, p, op, g, d)
        specs = [Spec(shape, dt, layout=_layout(rng)),
                 Spec((cin, cout // g) + kk, dt)] + ([Spec((cout,), dt)] if bias else [])
        return dict(desc=f"F.{fname}(stride={s}, padding={p}, output_padding={op}, "
                         f"groups={g}, dilation={d})", dtype=dt, fn=fn, specs=specs, scale=8)
    return dict(desc=f"{name}({cin}, {cout}, {k}, stride={s}, padding={p}, output_padding="
                     f"{op}, groups={g}, bias={bias}, dilation={d})", dtype=dt,
                make=lambda T: getattr(T.nn, name)(cin, cout, k, stride=s, padding=p,
                                                   output_padding=op, groups=g, bias=bias,
                                                   dilation=d),
                fn=_call, specs=[Spec(shape, dt, layout=_layout(rng))], scale=8)


def gen_pool(rng):
    nd = int(_pick(rng, [1, 2, 2, 3]))
    kind = _pick(rng, ["Max", "Avg", "Max", "Avg", "LP"])
    k = _tup(rng, nd, 1, 3)
    kk = _as_tuple(k, nd)
    s = _tup(rng, nd, 1, 3) if rng.random() < 0.6 else None
    p = tuple(int(rng.integers(0, a // 2 + 1)) for a in kk) if rng.random() < 0.5 else 0
    ceil = bool(rng.random() < 0.4)
    size = tuple(int(rng.integers(a, a + 4)) for a in kk)
    n = int(_pick(rng, [1, 2, 2])) if rng.random() < 0.9 else None
    shape = ((n,) if n is not None else ()) + (int(rng.integers(1, 3)),) + size
    dt = _fdt(rng) if nd < 3 else _fdt(rng, low=False)
    name = f"{kind}Pool{nd}d"
    if kind == "Max":
        d = _tup(rng, nd, 1, 2) if rng.random() < 0.3 else 1
        dd = _as_tuple(d, nd)
        shape = shape[:len(shape) - nd] + tuple(int(v) + (a - 1) * (b - 1)
                                                for v, a, b in zip(size, kk, dd))
        ri = bool(rng.random() < 0.3)
        kw = dict(stride=s, padding=p, dilation=d, return_indices=ri, ceil_mode=ceil)
        kind_in = "uniq"
    elif kind == "Avg":
        kw = dict(stride=s, padding=p, ceil_mode=ceil, count_include_pad=bool(rng.random() < 0.5))
        if nd > 1 and rng.random() < 0.3:
            kw["divisor_override"] = int(rng.integers(1, 5))
        kind_in = ""
    else:
        nt = _pick(rng, [1.0, 2.0, 3.0, math.inf])
        kw = dict(stride=s, ceil_mode=ceil)
        if nd == 1:
            k = kk[0]   # (torch 2.13's lp_pool1d multiplies by kernel_size: a tuple fails)
        spec = Spec(shape, dt, "pos", _layout(rng))
        if rng.random() < 0.3:
            fname = f"lp_pool{nd}d"
            return dict(desc=f"F.{fname}({nt}, {k}, {kw})", dtype=dt, specs=[spec], scale=4,
                        fn=lambda T, m, x: getattr(T.nn.functional, fname)(x, nt, k, **kw))
        return dict(desc=f"{name}({nt}, {k}, {kw})", dtype=dt, specs=[spec], fn=_call,
                    make=lambda T: getattr(T.nn, name)(nt, k, **kw), scale=4)
    spec = Spec(shape, dt, kind_in, _layout(rng))
    if rng.random() < 0.3:
        fname = f"{kind.lower()}_pool{nd}d"
        return dict(desc=f"F.{fname}({k}, {kw})", dtype=dt, specs=[spec],
                    fn=lambda T, m, x: getattr(T.nn.functional, fname)(x, k, **kw))
    return dict(desc=f"{name}({k}, {kw})", dtype=dt, specs=[spec], fn=_call,
                make=lambda T: getattr(T.nn, name)(k, **kw))


def gen_adaptive(rng):
    nd = int(_pick(rng, [1, 2, 2, 3]))
    kind = _pick(rng, ["Avg", "Max"])
    size = tuple(int(v) for v in rng.integers(1, 7, nd))
    out = tuple(int(v) if rng.random() < 0.85 else None for v in rng.integers(1, 5, nd))
    if nd == 1 or rng.random() < 0.3:
        out = out[0] if out[0] is not None else 2
    n = int(_pick(rng, [1, 2])) if rng.random() < 0.9 else None
    shape = ((n,) if n is not None else ()) + (int(rng.integers(1, 3)),) + size
    dt = _fdt(rng) if nd < 3 else _fdt(rng, low=False)
    ri = kind == "Max" and rng.random() < 0.3
    name = f"Adaptive{kind}Pool{nd}d"
    spec = Spec(shape, dt, "uniq" if kind == "Max" else "", _layout(rng))
    kw = {"return_indices": True} if ri else {}
    if rng.random() < 0.3:
        fname = f"adaptive_{kind.lower()}_pool{nd}d"
        return dict(desc=f"F.{fname}({out}, {kw})", dtype=dt, specs=[spec],
                    fn=lambda T, m, x: getattr(T.nn.functional, fname)(x, out, **kw))
    return dict(desc=f"{name}({out}, {kw})", dtype=dt, specs=[spec], fn=_call,
                make=lambda T: getattr(T.nn, name)(out, **kw))


def gen_norm(rng):
    kind = _pick(rng, ["BatchNorm", "BatchNorm", "BatchNorm", "LayerNorm", "GroupNorm",
                       "InstanceNorm", "InstanceNorm"])
    dt = _fdt(rng)
    eps = _pick(rng, [1e-5, 1e-3, 0.1])
    c = int(rng.integers(1, 4))
    if kind in ("BatchNorm", "InstanceNorm"):
        nd = int(_pick(rng, [1, 2, 3]))
        sp = tuple(int(v) for v in rng.integers(1, 4, nd if nd > 1 else int(rng.integers(0, 2))
                                                if kind == "BatchNorm" else nd))
        if kind == "InstanceNorm" and nd == 1:
            sp = (int(rng.integers(2, 5)),)
        n = int(rng.integers(2, 4))
        shape = (n, c) + sp
        if kind == "InstanceNorm" and rng.random() < 0.2:
            shape = shape[1:]   # unbatched
        mom = _pick(rng, [0.1, 0.1, 0.5, None])
        affine = bool(rng.random() < (0.7 if kind == "BatchNorm" else 0.5))
        trs = bool(rng.random() < (0.8 if kind == "BatchNorm" else 0.4))
        train = bool(rng.random() < 0.75)
        name = f"{kind}{nd}d"
        steps = 3 if train else 1
        case = dict(desc=f"{name}({c}, eps={eps}, momentum={mom}, affine={affine}, "
                         f"track_running_stats={trs}) {'train' if train else 'eval'}",
                    dtype=dt, steps=steps, train=train, fn=_call,
                    make=lambda T: getattr(T.nn, name)(c, eps=eps, momentum=mom, affine=affine,
                                                       track_running_stats=trs),
                    specs=[Spec(shape, dt, layout=_layout(rng))], scale=8)
        if train and rng.random() < 0.3:
            case["eval_after"] = True
            case["desc"] += " then eval"
        return case
    if kind == "LayerNorm":
        shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(1, 4))))
        k = int(rng.integers(1, len(shape) + 1))
        ns = shape[len(shape) - k:]
        ea = bool(rng.random() < 0.7)
        bias = bool(rng.random() < 0.8)
        return dict(desc=f"LayerNorm({ns}, eps={eps}, elementwise_affine={ea}, bias={bias})",
                    dtype=dt, fn=_call, make=lambda T: T.nn.LayerNorm(
                        ns, eps=eps, elementwise_affine=ea, bias=bias),
                    specs=[Spec(shape, dt, layout=_layout(rng))], scale=8)
    g = int(_pick(rng, [1, 2, 3]))
    c = g * int(rng.integers(1, 3))
    shape = (int(rng.integers(1, 3)), c) + tuple(int(v) for v in rng.integers(
        1, 4, int(rng.integers(0, 3))))
    affine = bool(rng.random() < 0.7)
    return dict(desc=f"GroupNorm({g}, {c}, eps={eps}, affine={affine})", dtype=dt, fn=_call,
                make=lambda T: T.nn.GroupNorm(g, c, eps=eps, affine=affine),
                specs=[Spec(shape, dt, layout=_layout(rng))], scale=8)


def gen_embedding(rng):
    n, d = int(rng.integers(2, 7)), int(rng.integers(1, 4))
    pi = _pick(rng, [None, None, 0, 1, -1])
    mn = _pick(rng, [None, None, None, 1.0, 0.5])
    nt = _pick(rng, [2.0, 1.0])
    sgf = bool(rng.random() < 0.2)
    idx = tuple(int(v) for v in rng.integers(0 if rng.random() < 0.1 else 1, 4,
                                             int(rng.integers(1, 3))))
    dt = _fdt(rng)
    idt = _pick(rng, ["int64", "int64", "int32"])
    kw = dict(padding_idx=pi, max_norm=mn, norm_type=nt, scale_grad_by_freq=sgf)
    spec = Spec(idx, idt, f"int:{n}", grad=False)
    if rng.random() < 0.3:
        return dict(desc=f"F.embedding({kw})", dtype=dt,
                    specs=[spec, Spec((n, d), dt)],
                    fn=lambda T, m, i, w: T.nn.functional.embedding(i, w * 1, **kw))
    return dict(desc=f"Embedding({n}, {d}, {kw})", dtype=dt, specs=[spec], fn=_call,
                make=lambda T: T.nn.Embedding(n, d, **kw))


ACTS = {  # module name: (constructor kwargs choices, functional name)
    "ReLU": ([{}], "relu"), "ReLU6": ([{}], "relu6"),
    "LeakyReLU": ([{}, {"negative_slope": 0.2}], "leaky_relu"),
    "ELU": ([{}, {"alpha": 0.5}], "elu"), "CELU": ([{}, {"alpha": 2.0}], "celu"),
    "SELU": ([{}], "selu"), "GELU": ([{}, {"approximate": "tanh"}], "gelu"),
    "SiLU": ([{}], "silu"), "Mish": ([{}], "mish"), "Sigmoid": ([{}], None),
    "Tanh": ([{}], None), "Softplus": ([{}, {"beta": 2.0, "threshold": 1.0}], "softplus"),
    "Softsign": ([{}], "softsign"), "LogSigmoid": ([{}], "logsigmoid"),
    "Hardsigmoid": ([{}], "hardsigmoid"), "Hardswish": ([{}], "hardswish"),
    "Hardtanh": ([{}, {"min_val": -0.5, "max_val": 2.0}], "hardtanh"),
    "Tanhshrink": ([{}], "tanhshrink"), "Softmax": ([{"dim": 1}, {"dim": -1}], "softmax"),
    "LogSoftmax": ([{"dim": 1}, {"dim": 0}], "log_softmax"),
    "Softmin": ([{"dim": 1}], "softmin"), "GLU": ([{}, {"dim": 0}], "glu"),
    "PReLU": ([{}, {"num_parameters": 3, "init": 0.1}], None),
    "Threshold": ([{"threshold": 0.1, "value": 2.0}], "threshold"),
    "Hardshrink": ([{}, {"lambd": 0.3}], "hardshrink"),
    "Softshrink": ([{}, {"lambd": 0.3}], "softshrink"),
}
INPLACE = {"ReLU", "ReLU6", "LeakyReLU", "ELU", "CELU", "SELU", "SiLU", "Mish", "Hardsigmoid",
           "Hardswish", "Hardtanh", "Threshold"}


def gen_activation(rng):
    name = _pick(rng, sorted(ACTS))
    choices, fname = ACTS[name]
    kw = dict(_pick(rng, choices))
    dt = _fdt(rng)
    shape = (int(rng.integers(1, 4)), 3) + tuple(int(v) for v in rng.integers(
        1, 4, int(rng.integers(0, 3))))
    if name == "GLU":
        shape = (2 * shape[0],) + shape[1:-1] + (2 * shape[-1],)
    spec = Spec(shape, dt, layout=_layout(rng))
    how = rng.random()
    # torch 2.13's hardsigmoid gradient multiplies by a float32 1/6 in every
    # dtype (3e-8 relative in float64)
    sc = 4e3 if name in ("Hardsigmoid", "Hardswish") and dt == "float64" else 4
    if name in INPLACE and how < 0.35:
        kw["inplace"] = True
        if rng.random() < 0.5:
            def fn(T, m, x):
                with T.no_grad():
                    y = x * 1.0
                    out = m(y[:, 1:])       # in place on a view of y: y sees it
                return out, y
            where = "on a view"
        else:
            def fn(T, m, x):
                y = x * 1.0
                out = m(y)                  # y itself takes the result
                return out, y
            where = "recorded"
        return dict(desc=f"{name}({kw}) {where}", dtype=dt, specs=[spec], fn=fn,
                    make=lambda T: getattr(T.nn, name)(**kw), scale=sc)
    if fname and how < 0.6:
        return dict(desc=f"F.{fname}({kw})", dtype=dt, specs=[spec], scale=sc,
                    fn=lambda T, m, x: getattr(T.nn.functional, fname)(x, **kw))
    return dict(desc=f"{name}({kw})", dtype=dt, specs=[spec], fn=_call, scale=sc,
                make=lambda T: getattr(T.nn, name)(**kw))


def _red(rng):
    return _pick(rng, ["mean", "sum", "none"])


def gen_loss(rng):
    case = _gen_loss(rng)
    case["dtype"] = case["specs"][0].dtype
    return case


def _gen_loss(rng):
    kind = _pick(rng, ["ce", "ce", "ce-probs", "nll", "mse", "l1", "smoothl1", "huber", "bce",
                       "bcelogits", "kldiv", "poisson", "gaussian", "cosemb", "margin",
                       "triplet", "hinge", "softmargin", "multilabelsoft", "multimargin",
                       "ctc"])
    red = _red(rng)
    dt = _pick(rng, ["float32", "float64"])
    n, c = int(rng.integers(1, 4)), int(rng.integers(2, 5))
    extra = tuple(int(v) for v in rng.integers(1, 3, int(rng.integers(0, 2))))
    lay = _layout(rng)
    if kind in ("ce", "nll", "ce-probs"):
        w = (np.abs(rng.standard_normal(c)) + 0.25) if rng.random() < 0.4 else None
        ls = _pick(rng, [0.0, 0.0, 0.1, 0.3]) if kind != "nll" else 0.0
        ign = _pick(rng, [-100, -100, 0, 1])
        if kind == "ce-probs":
            specs = [Spec((n, c) + extra, dt, layout=lay), Spec((n, c) + extra, dt, "prob",
                                                               grad=False)]
        else:
            specs = [Spec((n, c) + extra, dt, layout=lay), Spec((n,) + extra, "int64",
                                                               f"int:{c}", grad=False)]
        mod = kind != "nll" and rng.random() < 0.5

        def fn(T, m, x, t):
            wt = None if w is None else T.tensor(w, dtype=x.dtype)
            if kind == "nll":
                return T.nn.functional.nll_loss(T.nn.functional.log_softmax(x, 1), t, wt,
                                                ignore_index=ign, reduction=red)
            if mod:
                return T.nn.CrossEntropyLoss(wt, ignore_index=ign, reduction=red,
                                             label_smoothing=ls)(x, t)
            return T.nn.functional.cross_entropy(x, t, wt, ignore_index=ign, reduction=red,
                                                 label_smoothing=ls)
        return dict(desc=f"{kind}(w={w is not None}, ign={ign}, ls={ls}, red={red}, "
                         f"module={mod})", specs=specs, fn=fn, scale=4)
    shape = (n, c) + extra
    if kind in ("mse", "l1", "smoothl1", "huber"):
        kw = {"smoothl1": {"beta": _pick(rng, [1.0, 0.5])},
              "huber": {"delta": _pick(rng, [1.0, 0.5, 2.0])}}.get(kind, {})
        fname = {"mse": "mse_loss", "l1": "l1_loss", "smoothl1": "smooth_l1_loss",
                 "huber": "huber_loss"}[kind]
        return dict(desc=f"{fname}(red={red}, {kw})", specs=[
            Spec(shape, dt, layout=lay), Spec(shape, dt)],
            fn=lambda T, m, x, y: getattr(T.nn.functional, fname)(x, y, reduction=red, **kw))
    if kind == "bce":
        w = rng.random() < 0.3
        return dict(desc=f"binary_cross_entropy(red={red}, weight={w})",
                    specs=[Spec(shape, dt, "prob", lay), Spec(shape, dt, "prob", grad=False)]
                    + ([Spec(shape[-1:], dt, "pos", grad=False)] if w else []),
                    fn=lambda T, m, x, y, *wt: T.nn.functional.binary_cross_entropy(
                        x, y, wt[0] if wt else None, reduction=red))
    if kind == "bcelogits":
        w, pw = rng.random() < 0.3, rng.random() < 0.4
        specs = [Spec(shape, dt, layout=lay), Spec(shape, dt, "prob")]
        if w:
            specs.append(Spec(shape[-1:], dt, "pos", grad=False))
        if pw:
            specs.append(Spec(shape[-1:], dt, "pos", grad=False))

        def fn(T, m, x, y, *rest):
            wt = rest[0] if w else None
            p = rest[-1] if pw else None
            return T.nn.functional.binary_cross_entropy_with_logits(x, y, wt, reduction=red,
                                                                    pos_weight=p)
        return dict(desc=f"bce_with_logits(red={red}, weight={w}, pos_weight={pw})",
                    specs=specs, fn=fn)
    if kind == "kldiv":
        lt = bool(rng.random() < 0.5)
        r = _pick(rng, ["mean", "sum", "none", "batchmean"])
        return dict(desc=f"kl_div(red={r}, log_target={lt})",
                    specs=[Spec(shape, dt, layout=lay), Spec(shape, dt, "" if lt else "prob")],
                    fn=lambda T, m, x, y: T.nn.functional.kl_div(x, y, reduction=r,
                                                                 log_target=lt))
    if kind == "poisson":
        li, full = bool(rng.random() < 0.5), bool(rng.random() < 0.5)
        return dict(desc=f"poisson_nll_loss(log_input={li}, full={full}, red={red})",
                    specs=[Spec(shape, dt, "" if li else "pos", lay),
                           Spec(shape, dt, "int:5", grad=False)],
                    fn=lambda T, m, x, y: T.nn.functional.poisson_nll_loss(
                        x, y, log_input=li, full=full, reduction=red))
    if kind == "gaussian":
        full = bool(rng.random() < 0.5)
        return dict(desc=f"gaussian_nll_loss(full={full}, red={red})",
                    specs=[Spec(shape, dt, layout=lay), Spec(shape, dt), Spec(shape, dt, "pos")],
                    fn=lambda T, m, x, y, v: T.nn.functional.gaussian_nll_loss(
                        x, y, v, full=full, reduction=red))
    if kind == "cosemb":
        mg = _pick(rng, [0.0, 0.3])
        return dict(desc=f"cosine_embedding_loss(margin={mg}, red={red})",
                    specs=[Spec((n, c), dt, layout=lay), Spec((n, c), dt),
                           Spec((n,), dt, "sign", grad=False)],
                    fn=lambda T, m, a, b, y: T.nn.functional.cosine_embedding_loss(
                        a, b, y, mg, reduction=red))
    if kind == "margin":
        mg = _pick(rng, [0.0, 0.5])
        return dict(desc=f"margin_ranking_loss(margin={mg}, red={red})",
                    specs=[Spec((n,), dt), Spec((n,), dt), Spec((n,), dt, "sign", grad=False)],
                    fn=lambda T, m, a, b, y: T.nn.functional.margin_ranking_loss(
                        a, b, y, mg, reduction=red))
    if kind == "triplet":
        mg, p, swap = _pick(rng, [1.0, 0.5]), _pick(rng, [2.0, 1.0]), bool(rng.random() < 0.4)
        mod = rng.random() < 0.5

        def fn(T, m, a, pp, nn_):
            if mod:
                return T.nn.TripletMarginLoss(margin=mg, p=p, swap=swap, reduction=red)(
                    a, pp, nn_)
            return T.nn.functional.triplet_margin_loss(a, pp, nn_, margin=mg, p=p, swap=swap,
                                                       reduction=red)
        return dict(desc=f"triplet_margin_loss(margin={mg}, p={p}, swap={swap}, red={red}, "
                         f"module={mod})",
                    specs=[Spec((n, c), dt, layout=lay), Spec((n, c), dt), Spec((n, c), dt)],
                    fn=fn)
    if kind == "hinge":
        return dict(desc=f"hinge_embedding_loss(red={red})",
                    specs=[Spec(shape, dt, layout=lay), Spec(shape, dt, "sign", grad=False)],
                    fn=lambda T, m, x, y: T.nn.functional.hinge_embedding_loss(
                        x, y, reduction=red))
    if kind == "softmargin":
        return dict(desc=f"soft_margin_loss(red={red})",
                    specs=[Spec(shape, dt, layout=lay), Spec(shape, dt, "sign", grad=False)],
                    fn=lambda T, m, x, y: T.nn.functional.soft_margin_loss(x, y, reduction=red))
    if kind == "multilabelsoft":
        return dict(desc=f"multilabel_soft_margin_loss(red={red})",
                    specs=[Spec((n, c), dt, layout=lay), Spec((n, c), dt, "int:2", grad=False)],
                    fn=lambda T, m, x, y: T.nn.functional.multilabel_soft_margin_loss(
                        x, y, reduction=red))
    if kind == "multimargin":
        p, mg = _pick(rng, [1, 2]), _pick(rng, [1.0, 0.5])
        w = (np.abs(rng.standard_normal(c)) + 0.25) if rng.random() < 0.4 else None
        return dict(desc=f"multi_margin_loss(p={p}, margin={mg}, w={w is not None}, red={red})",
                    specs=[Spec((n, c), dt, layout=lay), Spec((n,), "int64", f"int:{c}",
                                                              grad=False)],
                    fn=lambda T, m, x, y: T.nn.functional.multi_margin_loss(
                        x, y, p, mg, None if w is None else T.tensor(w, dtype=x.dtype),
                        reduction=red))
    # ctc
    tlen, s = int(rng.integers(3, 6)), int(rng.integers(1, 3))
    return dict(desc=f"ctc_loss(red={red})",
                specs=[Spec((tlen, n, c), dt, layout=lay),
                       Spec((n, s), "int64", f"int:{c - 1}", grad=False)],
                fn=lambda T, m, x, y: T.nn.functional.ctc_loss(
                    T.nn.functional.log_softmax(x, 2), y + 1, T.tensor([tlen] * n),
                    T.tensor([s] * n), reduction=red))


def gen_interpolate(rng):
    mode = _pick(rng, ["nearest", "nearest", "nearest-exact", "linear", "bilinear",
                       "bicubic", "trilinear", "area"])
    nd = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}.get(mode) or int(
        rng.integers(1, 4))
    size_in = tuple(int(v) for v in rng.integers(1, 5, nd))
    shape = (int(rng.integers(1, 3)), int(rng.integers(1, 3))) + size_in
    ac = None if mode in ("nearest", "nearest-exact", "area") else _pick(rng, [None, True,
                                                                              False])
    kw = {"mode": mode}
    if ac is not None:
        kw["align_corners"] = ac
    if rng.random() < 0.5:
        out = tuple(int(v) for v in rng.integers(1, 7, nd))
        kw["size"] = out if rng.random() < 0.7 or nd > 1 else out[0]
    else:
        sf = tuple(float(_pick(rng, [0.5, 1.5, 2.0, 2.5, 3.0])) for _ in range(nd))
        kw["scale_factor"] = sf if rng.random() < 0.6 else sf[0]
        if rng.random() < 0.4:
            kw["recompute_scale_factor"] = bool(rng.random() < 0.5)
    dt = _fdt(rng) if nd < 3 else _fdt(rng, low=False)
    if rng.random() < 0.15 and mode in ("nearest", "bilinear", "linear"):
        kw.pop("recompute_scale_factor", None)
        return dict(desc=f"Upsample({kw})", dtype=dt, fn=_call,
                    specs=[Spec(shape, dt, layout=_layout(rng))],
                    make=lambda T: T.nn.Upsample(**kw), scale=4)
    return dict(desc=f"interpolate({kw})", dtype=dt, scale=4,
                specs=[Spec(shape, dt, layout=_layout(rng))],
                fn=lambda T, m, x: T.nn.functional.interpolate(x, **kw))


def gen_pad(rng):
    mode = _pick(rng, ["constant", "constant", "reflect", "replicate", "circular"])
    nd = int(rng.integers(1, 4)) if mode != "constant" else int(rng.integers(1, 4))
    shape = tuple(int(v) for v in rng.integers(1, 4, 2)) + tuple(
        int(v) for v in rng.integers(2, 6, nd))
    if mode == "constant" and rng.random() < 0.3:
        shape = shape[1:]
    npairs = nd if mode != "constant" else int(rng.integers(1, len(shape) + 1))
    pads = []
    for i in range(npairs):
        size = shape[len(shape) - 1 - i]
        hi = size - 1 if mode == "reflect" else size if mode == "circular" else 3
        lo = -1 if rng.random() < 0.2 and mode != "reflect" else 0
        pads += [int(rng.integers(lo, hi + 1)), int(rng.integers(lo, hi + 1))]
    value = _pick(rng, [None, 1.5]) if mode == "constant" else None
    dt = _fdt(rng)
    kw = {"mode": mode} if value is None else {"mode": mode, "value": value}
    return dict(desc=f"pad({pads}, {kw})", dtype=dt, specs=[Spec(shape, dt, layout=_layout(rng))],
                fn=lambda T, m, x: T.nn.functional.pad(x, pads, **kw))


def gen_rnn(rng):
    kind = _pick(rng, ["RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"])
    i, h = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    bias = bool(rng.random() < 0.8)
    dt = _pick(rng, ["float32", "float64"])
    b = int(_pick(rng, [1, 2, 3]))
    if kind.endswith("Cell"):
        kw = {"bias": bias}
        if kind == "RNNCell":
            kw["nonlinearity"] = _pick(rng, ["tanh", "relu"])
        batched = rng.random() < 0.85
        x = Spec((b, i) if batched else (i,), dt, layout=_layout(rng))
        hs = (b, h) if batched else (h,)
        st = rng.random() < 0.5
        specs = [x] + ([Spec(hs, dt)] * (2 if kind == "LSTMCell" else 1) if st else [])

        def fn(T, m, x, *hx):
            if not hx:
                return m(x)
            return m(x, tuple(hx) if kind == "LSTMCell" else hx[0])
        return dict(desc=f"{kind}({i}, {h}, {kw}) state={st}", dtype=dt, specs=specs,
                    fn=fn, make=lambda T: getattr(T.nn, kind)(i, h, **kw), scale=4)
    layers = int(rng.integers(1, 3))
    bidir = bool(rng.random() < 0.4)
    bf = bool(rng.random() < 0.4)
    proj = int(rng.integers(1, h)) if kind == "LSTM" and h > 1 and rng.random() < 0.2 else 0
    kw = dict(num_layers=layers, bias=bias, batch_first=bf, bidirectional=bidir)
    if kind == "RNN":
        kw["nonlinearity"] = _pick(rng, ["tanh", "relu"])
    if proj:
        kw["proj_size"] = proj
    t = int(rng.integers(1, 4))
    batched = rng.random() < 0.85
    xs = ((b, t) if bf else (t, b)) + (i,) if batched else (t, i)
    d = layers * (2 if bidir else 1)
    st = rng.random() < 0.5
    hs = (d, b) if batched else (d,)
    specs = [Spec(xs, dt, layout=_layout(rng))]
    if st:
        specs.append(Spec(hs + (proj or h,), dt))
        if kind == "LSTM":
            specs.append(Spec(hs + (h,), dt))

    def fn(T, m, x, *hx):
        if not hx:
            return m(x)
        return m(x, tuple(hx) if kind == "LSTM" else hx[0])
    return dict(desc=f"{kind}({i}, {h}, {kw}) state={st}", dtype=dt, specs=specs, fn=fn,
                make=lambda T: getattr(T.nn, kind)(i, h, **kw), scale=4)


def _mask_spec(rng, shape, dt, allow_float=True):
    if allow_float and rng.random() < 0.4:
        return Spec(shape, dt, grad=False), "float"
    return Spec(shape, "bool", "mask:0.3", grad=False), "bool"


def gen_attention(rng):
    kind = _pick(rng, ["mha", "mha", "encoder", "sdpa", "sdpa"])
    dt = _pick(rng, ["float32", "float32", "float64"])
    if kind == "sdpa":
        b, h = int(rng.integers(1, 3)), int(rng.integers(1, 3))
        lq, s, e = (int(v) for v in rng.integers(1, 5, 3))
        ev = int(rng.integers(1, 4))
        causal = bool(rng.random() < 0.3)
        scale = _pick(rng, [None, None, 0.5])
        specs = [Spec((b, h, lq, e), dt, layout=_layout(rng)), Spec((b, h, s, e), dt),
                 Spec((b, h, s, ev), dt)]
        mk = None
        if not causal and rng.random() < 0.5:
            ms, mk = _mask_spec(rng, _pick(rng, [(lq, s), (b, 1, lq, s), (b, h, lq, s)]), dt)
            specs.append(ms)

        def fn(T, m, q, k, v, *mask):
            return T.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=mask[0] if mask else None, is_causal=causal, scale=scale)
        return dict(desc=f"sdpa(causal={causal}, scale={scale}, mask={mk})", dtype=dt,
                    specs=specs, fn=fn, scale=8)
    e_h = int(_pick(rng, [1, 2]))
    emb = e_h * int(rng.integers(1, 4))
    b, lq = int(rng.integers(1, 3)), int(rng.integers(1, 4))
    s = lq if kind == "encoder" else int(rng.integers(1, 4))
    bf = bool(rng.random() < 0.5)
    bias = bool(rng.random() < 0.8)
    batched = rng.random() < 0.85

    def sh(n):
        return ((b, n) if bf else (n, b)) + (emb,) if batched else (n, emb)
    am = rng.random() < 0.4
    kpm = batched and rng.random() < 0.3
    specs, tags = [], []
    if am:
        ms, mk = _mask_spec(rng, (lq, s), dt)
        specs.append(ms)
        tags.append(f"attn_mask={mk}")
    if kpm:
        ms, mk = _mask_spec(rng, (b, s), dt)
        if mk == "bool":
            ms.kind = "mask:0.2"
        specs.append(ms)
        tags.append(f"key_padding_mask={mk}")
    if kind == "encoder":
        nf = bool(rng.random() < 0.5)
        act = _pick(rng, ["relu", "gelu"])
        ff = int(rng.integers(1, 6))
        train = bool(rng.random() < 0.5)

        def fn(T, m, x, *masks):
            it = iter(masks)
            a = next(it) if am else None
            k = next(it) if kpm else None
            return m(x, src_mask=a, src_key_padding_mask=k)
        return dict(desc=f"TransformerEncoderLayer({emb}, {e_h}, {ff}, norm_first={nf}, "
                         f"batch_first={bf}, act={act}, bias={bias}, "
                         f"{'train' if train else 'eval'}) {tags}", dtype=dt,
                    specs=[Spec(sh(lq), dt, layout=_layout(rng))] + specs, fn=fn, train=train,
                    make=lambda T: T.nn.TransformerEncoderLayer(
                        emb, e_h, ff, dropout=0.0, activation=act, batch_first=bf,
                        norm_first=nf, bias=bias), scale=16)
    nw = bool(rng.random() < 0.6)
    avg = bool(rng.random() < 0.7)
    causal = rng.random() < 0.15 and lq == s   # (without attn_mask torch raises)

    def fn(T, m, q, k, v, *masks):
        it = iter(masks)
        a = next(it) if am else None
        p = next(it) if kpm else None
        return m(q, k, v, key_padding_mask=p, need_weights=nw, attn_mask=a,
                 average_attn_weights=avg, is_causal=bool(causal))
    train = bool(rng.random() < 0.5)
    return dict(desc=f"MultiheadAttention({emb}, {e_h}, bias={bias}, batch_first={bf}, "
                     f"need_weights={nw}, average={avg}, causal={causal}, "
                     f"{'train' if train else 'eval'}) {tags}", dtype=dt, train=train,
                specs=[Spec(sh(lq), dt, layout=_layout(rng)), Spec(sh(s), dt),
                       Spec(sh(s), dt)] + specs, fn=fn,
                make=lambda T: T.nn.MultiheadAttention(emb, e_h, bias=bias, batch_first=bf),
                scale=16)


def gen_misc(rng):
    kind = _pick(rng, ["dropout-eval", "dropout-p0", "normalize", "cosine_similarity",
                       "pairwise_distance", "one_hot", "flatten", "pixel_shuffle",
                       "unfold", "fold"])
    dt = _fdt(rng)
    shape = (int(rng.integers(1, 4)), int(rng.integers(1, 4))) + tuple(
        int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3))))
    spec = Spec(shape, dt, layout=_layout(rng))
    if kind == "dropout-eval":
        name = _pick(rng, ["Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout"])
        return dict(desc=f"{name}(0.5) eval", dtype=dt, specs=[spec], fn=_call, train=False,
                    make=lambda T: getattr(T.nn, name)(0.5))
    if kind == "dropout-p0":
        return dict(desc="F.dropout(p=0, training=True)", dtype=dt, specs=[spec],
                    fn=lambda T, m, x: T.nn.functional.dropout(x, 0.0, True))
    if kind == "normalize":
        p, d = _pick(rng, [2.0, 1.0, 3.0]), int(rng.integers(-len(shape), len(shape)))
        return dict(desc=f"normalize(p={p}, dim={d})", dtype=dt, specs=[spec], scale=4,
                    fn=lambda T, m, x: T.nn.functional.normalize(x, p, d))
    if kind == "cosine_similarity":
        d = int(rng.integers(-len(shape), len(shape)))
        return dict(desc=f"cosine_similarity(dim={d})", dtype=dt, scale=4,
                    specs=[spec, Spec(shape, dt)],
                    fn=lambda T, m, a, b: T.nn.functional.cosine_similarity(a, b, d))
    if kind == "pairwise_distance":
        p, kd = _pick(rng, [2.0, 1.0]), bool(rng.random() < 0.5)
        return dict(desc=f"pairwise_distance(p={p}, keepdim={kd})", dtype=dt, scale=4,
                    specs=[spec, Spec(shape, dt)],
                    fn=lambda T, m, a, b: T.nn.functional.pairwise_distance(a, b, p,
                                                                            keepdim=kd))
    if kind == "one_hot":
        c = _pick(rng, [-1, 5])
        return dict(desc=f"one_hot({c})", specs=[Spec(shape, "int64", "int:4", grad=False)],
                    fn=lambda T, m, x: T.nn.functional.one_hot(x, c))
    if kind == "flatten":
        s, e = int(rng.integers(0, 2)), int(_pick(rng, [-1, 1]))
        return dict(desc=f"Flatten({s}, {e})", dtype=dt, specs=[spec], fn=_call,
                    make=lambda T: T.nn.Flatten(s, e))
    if kind == "pixel_shuffle":
        r = int(_pick(rng, [1, 2, 3]))
        lead = tuple(int(v) for v in rng.integers(1, 3, int(rng.integers(0, 3))))
        if rng.random() < 0.5:
            return dict(desc=f"pixel_shuffle({r})", dtype=dt,
                        specs=[Spec(lead + (r * r * 2, 2, 3), dt, layout=_layout(rng))],
                        fn=lambda T, m, x: T.nn.functional.pixel_shuffle(x, r))
        return dict(desc=f"PixelUnshuffle({r})", dtype=dt, fn=_call,
                    specs=[Spec(lead + (2, 2 * r, r), dt, layout=_layout(rng))],
                    make=lambda T: T.nn.PixelUnshuffle(r))
    if kind == "unfold":
        return dict(desc="unfold(2)", dtype=dt, specs=[Spec((1, 2, 3, 3), dt)],
                    fn=lambda T, m, x: T.nn.functional.unfold(x, 2))
    return dict(desc="fold((3, 3), 2)", dtype=dt, specs=[Spec((1, 8, 4), dt)],
                fn=lambda T, m, x: T.nn.functional.fold(x, (3, 3), 2))


# ------------------------------------------------- the native layer API
# dragon_core.nn (the layers without vm.torch): the same check against
# torch's layer of the same name, on contiguous inputs.
import dragon_core as dg  # noqa: E402


def _dg_np(t):
    return np.asarray(t.numpy()).copy()


def run_native(case, arrays, params):
    dt = case.get("dtype", "float32")
    mod = case["dg"](dt)
    keys = list(mod.state_dict().keys())
    if params is not None:
        mod.load_state_dict({k: dg.tensor(np.asarray(v).astype(
            dt if np.asarray(v).dtype.kind == "f" else np.asarray(v).dtype)) for k, v in
            params.items() if not k.endswith("num_batches_tracked")})
    mod.train(case.get("train", True))
    names = [n for n, _ in mod.named_parameters()]
    outs_all, grads_all = [], []
    for step in arrays:
        leaves = []
        for (base, _), spec in zip(step, case["specs"]):
            t = dg.tensor(np.ascontiguousarray(base))
            if spec.grad and spec.dtype in FLOATS:
                t.requires_grad = True
            leaves.append(t)
        outs = _flat(case["dg_fn"](mod, *leaves))
        want = [t for t in leaves if t.requires_grad] + [p for p in mod.parameters()]
        grads = []
        floats = [o for o in outs if o.dtype.name.startswith("float") and o.requires_grad]
        if want and floats:
            loss = None
            for k, o in enumerate(floats):
                w = np.random.default_rng(k + 100).standard_normal(tuple(o.shape))
                term = dg.ops.sum(dg.ops.cast(o, "float64") * dg.tensor(w))
                loss = term if loss is None else loss + term
            gs = dg.grad(loss, want, allow_unused=True)
            grads = [None if g is None else _dg_np(g) for g in gs]
        outs_all.append([(_dg_np(o), o.dtype.name, tuple(o.shape)) for o in outs])
        grads_all.append(grads)
    bufs = [(n, _dg_np(b), b.dtype.name) for n, b in mod.named_buffers()]
    return keys, names, outs_all, grads_all, bufs


def check_native(case):
    """A case of the native layer API: ``dg(dtype)`` builds the layer,
    ``dg_fn(layer, *inputs)`` runs it; ``make``/``fn`` are torch's twin."""
    rng = np.random.default_rng(case["seed"])
    arrays = _draw_inputs(rng, case)
    dt = case.get("dtype", "float32")
    desc = f"dragon_core.nn {case['desc']} [{dt}] on {case['specs']}"
    params = None
    try:
        probe = case["make"](torch)
        params = {k: _param_values(rng, k, tuple(v.shape)) if v.dtype.is_floating_point
                  else v.numpy().copy() for k, v in probe.state_dict().items()}
        ref = run(torch, case, _copy(arrays), params)
    except (RuntimeError, ValueError, IndexError, NotImplementedError) as exc:
        with pytest.raises(Exception) as info:  # noqa: PT011 - a refusal of any kind
            run_native(case, _copy(arrays), params)
        assert not isinstance(info.value, INTERNAL_ERRORS) or _deliberate(info.value), \
            f"{desc}: torch raises ({exc}) but dragon_core.nn fails with {info.value!r}"
        return
    try:
        got = run_native(case, _copy(arrays), params)
    except Exception as exc:  # noqa: BLE001
        raise AssertionError(f"{desc}: torch computes but dragon_core.nn raises "
                             f"{type(exc).__name__}: {exc}") from exc
    # (the native BatchNorm keeps no num_batches_tracked: its momentum is a number)
    rkeys, rnames, routs, rgrads, rbufs = ref
    ref = ([k for k in rkeys if not k.endswith("num_batches_tracked")], rnames, routs, rgrads,
           [b for b in rbufs if not b[0].endswith("num_batches_tracked")])
    _compare(desc, ref, got, case.get("scale", 1.0), dt)


def gen_native(rng):
    kind = _pick(rng, ["Linear", "Conv2d", "ConvTranspose2d", "MaxPool2d", "AvgPool2d",
                       "AdaptiveAvgPool2d", "BatchNorm", "BatchNorm", "LayerNorm", "GroupNorm",
                       "Embedding", "act", "loss"])
    dt = _pick(rng, ["float32", "float64"])
    n = int(_pick(rng, [1, 2, 3]))
    if kind == "Linear":
        i, o, bias = int(rng.integers(1, 5)), int(rng.integers(1, 5)), bool(rng.random() < 0.7)
        return dict(desc=f"Linear({i}, {o}, bias={bias})", dtype=dt, specs=[Spec((n, i), dt)],
                    make=lambda T: T.nn.Linear(i, o, bias=bias), fn=_call,
                    dg=lambda d: dg.nn.Linear(i, o, bias=bias, dtype=d),
                    dg_fn=lambda m, x: m(x), scale=4)
    if kind in ("Conv2d", "ConvTranspose2d"):
        g = int(_pick(rng, [1, 1, 2]))
        cin, cout = g * int(rng.integers(1, 3)), g * int(rng.integers(1, 3))
        k, s = _tup(rng, 2, 1, 3), _tup(rng, 2, 1, 2)
        d = _tup(rng, 2, 1, 2) if rng.random() < 0.3 else 1
        bias = bool(rng.random() < 0.7)
        hw = tuple(int(v) for v in rng.integers(4, 7, 2))
        if kind == "Conv2d":
            p = _pick(rng, [0, 1, (1, 0), "valid"] + (["same"] if s == 1 else []))
            kw = dict(stride=s, padding=p, dilation=d, groups=g, bias=bias)
        else:
            p = _tup(rng, 2, 0, 1)
            op = tuple(int(rng.integers(0, a)) for a in _as_tuple(s, 2))
            kw = dict(stride=s, padding=p, output_padding=op, groups=g, bias=bias, dilation=d)
        return dict(desc=f"{kind}({cin}, {cout}, {k}, {kw})", dtype=dt,
                    specs=[Spec((n, cin) + hw, dt)], fn=_call, scale=8,
                    make=lambda T: getattr(T.nn, kind)(cin, cout, k, **kw),
                    dg=lambda dd: getattr(dg.nn, kind)(cin, cout, k, dtype=dd, **kw),
                    dg_fn=lambda m, x: m(x))
    if kind in ("MaxPool2d", "AvgPool2d"):
        k = _tup(rng, 2, 1, 3)
        kk = _as_tuple(k, 2)
        s = _tup(rng, 2, 1, 3) if rng.random() < 0.6 else None
        p = tuple(int(rng.integers(0, a // 2 + 1)) for a in kk)
        kw = dict(stride=s, padding=p, ceil_mode=bool(rng.random() < 0.4))
        if kind == "AvgPool2d":
            kw["count_include_pad"] = bool(rng.random() < 0.5)
        elif rng.random() < 0.3:
            kw["dilation"] = 2
        hw = tuple(int(rng.integers(a + 2, a + 6)) for a in kk)
        return dict(desc=f"{kind}({k}, {kw})", dtype=dt, fn=_call,
                    specs=[Spec((n, 2) + hw, dt, "uniq")],
                    make=lambda T: getattr(T.nn, kind)(k, **kw),
                    dg=lambda dd: getattr(dg.nn, kind)(k, **kw), dg_fn=lambda m, x: m(x))
    if kind == "AdaptiveAvgPool2d":
        out = (int(rng.integers(1, 4)), int(rng.integers(1, 4)))
        hw = tuple(int(v) for v in rng.integers(1, 7, 2))
        return dict(desc=f"AdaptiveAvgPool2d({out})", dtype=dt, fn=_call,
                    specs=[Spec((n, 2) + hw, dt)], make=lambda T: T.nn.AdaptiveAvgPool2d(out),
                    dg=lambda dd: dg.nn.AdaptiveAvgPool2d(out), dg_fn=lambda m, x: m(x))
    if kind == "BatchNorm":
        nd = int(_pick(rng, [1, 2]))
        c = int(rng.integers(1, 4))
        shape = (int(rng.integers(2, 4)), c) + ((int(rng.integers(1, 4)),) * (
            2 if nd == 2 else int(rng.integers(0, 2))))
        mom = _pick(rng, [0.1, 0.5, 1.0])
        affine, trs = bool(rng.random() < 0.7), bool(rng.random() < 0.8)
        train = bool(rng.random() < 0.7)
        name = f"BatchNorm{nd}d"
        return dict(desc=f"{name}({c}, momentum={mom}, affine={affine}, "
                         f"track_running_stats={trs}) {'train' if train else 'eval'}",
                    dtype=dt, steps=2 if train else 1, train=train, fn=_call, scale=8,
                    specs=[Spec(shape, dt)],
                    make=lambda T: getattr(T.nn, name)(c, momentum=mom, affine=affine,
                                                       track_running_stats=trs),
                    dg=lambda dd: getattr(dg.nn, name)(c, momentum=mom, affine=affine,
                                                       track_running_stats=trs, dtype=dd),
                    dg_fn=lambda m, x: m(x), native_buffers=True)
    if kind == "LayerNorm":
        shape = tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(2, 4))))
        ns = shape[-int(rng.integers(1, len(shape))):]
        ea = bool(rng.random() < 0.7)
        return dict(desc=f"LayerNorm({ns}, elementwise_affine={ea})", dtype=dt, fn=_call,
                    specs=[Spec(shape, dt)], scale=8,
                    make=lambda T: T.nn.LayerNorm(ns, elementwise_affine=ea),
                    dg=lambda dd: dg.nn.LayerNorm(ns, elementwise_affine=ea, dtype=dd),
                    dg_fn=lambda m, x: m(x))
    if kind == "GroupNorm":
        g = int(_pick(rng, [1, 2]))
        c = g * int(rng.integers(1, 3))
        shape = (n, c) + tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(0, 3))))
        return dict(desc=f"GroupNorm({g}, {c})", dtype=dt, fn=_call, specs=[Spec(shape, dt)],
                    make=lambda T: T.nn.GroupNorm(g, c), scale=8,
                    dg=lambda dd: dg.nn.GroupNorm(g, c, dtype=dd), dg_fn=lambda m, x: m(x))
    if kind == "Embedding":
        ne, d = int(rng.integers(2, 6)), int(rng.integers(1, 4))
        pi = _pick(rng, [None, 0, -1])
        return dict(desc=f"Embedding({ne}, {d}, padding_idx={pi})", dtype=dt, fn=_call,
                    specs=[Spec((n, 3), "int64", f"int:{ne}", grad=False)],
                    make=lambda T: T.nn.Embedding(ne, d, padding_idx=pi),
                    dg=lambda dd: dg.nn.Embedding(ne, d, padding_idx=pi, dtype=dd),
                    dg_fn=lambda m, x: m(x))
    shape = (n, 3) + tuple(int(v) for v in rng.integers(1, 4, int(rng.integers(0, 2))))
    if kind == "act":
        name, kw = _pick(rng, [("ReLU", {}), ("ReLU6", {}), ("LeakyReLU", {"negative_slope": 0.2}),
                               ("ELU", {"alpha": 0.5}), ("GELU", {"approximate": "tanh"}),
                               ("GELU", {}), ("SiLU", {}), ("Sigmoid", {}), ("Tanh", {}),
                               ("Softplus", {"beta": 2.0, "threshold": 1.0}),
                               ("Softmax", {"dim": 1}), ("LogSoftmax", {"dim": -1}),
                               ("Dropout", {"p": 0.0})])
        return dict(desc=f"{name}({kw})", dtype=dt, fn=_call, specs=[Spec(shape, dt)],
                    make=lambda T: getattr(T.nn, name)(**kw), scale=4,
                    dg=lambda dd: getattr(dg.nn, name)(**kw), dg_fn=lambda m, x: m(x))
    red = _red(rng)
    name = _pick(rng, ["CrossEntropyLoss", "NLLLoss", "MSELoss", "L1Loss", "SmoothL1Loss",
                       "BCEWithLogitsLoss"])
    kw = {"reduction": red}
    if name in ("CrossEntropyLoss", "NLLLoss"):
        kw["ignore_index"] = _pick(rng, [-100, 1])
        if name == "CrossEntropyLoss":
            kw["label_smoothing"] = _pick(rng, [0.0, 0.2])
        tgt = Spec(shape[:1] + shape[2:], "int64", "int:3", grad=False)
    elif name == "BCEWithLogitsLoss":
        tgt = Spec(shape, dt, "prob", grad=False)
    else:
        if name == "SmoothL1Loss":
            kw["beta"] = _pick(rng, [1.0, 0.5])
        tgt = Spec(shape, dt)
    return dict(desc=f"{name}({kw})", dtype=dt, fn=_call, specs=[Spec(shape, dt), tgt],
                make=lambda T: getattr(T.nn, name)(**kw), scale=4,
                dg=lambda dd: getattr(dg.nn, name)(**kw), dg_fn=lambda m, x, t: m(x, t))


GENERATORS = {
    "linear": (gen_linear, 30), "conv": (gen_conv, 80), "conv_transpose": (gen_conv_transpose, 50),
    "pool": (gen_pool, 70), "adaptive": (gen_adaptive, 40), "norm": (gen_norm, 80),
    "embedding": (gen_embedding, 30), "activation": (gen_activation, 80), "loss": (gen_loss, 100),
    "interpolate": (gen_interpolate, 50), "pad": (gen_pad, 40), "rnn": (gen_rnn, 40),
    "attention": (gen_attention, 50), "misc": (gen_misc, 40), "native": (gen_native, 80),
}


def _case(cat, i):
    return _fuzzcases.draw(GENERATORS, cat, i, 104729)


CASES = _fuzzcases.cases(GENERATORS)


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("cat,i", CASES, ids=[f"{c}-{i}" for c, i in CASES])
def test_differential_nn(cat, i):
    case = _case(cat, i)
    check_native(case) if "dg" in case else check(case)


def test_counts():
    """The generator is bounded and reproducible."""
    assert len(CASES) == sum(n for _, n in GENERATORS.values()) >= 700
    assert _case("conv", 3)["desc"] == _case("conv", 3)["desc"]


# ------------------------------------------------ named regression cases
# Each was a silent difference (or a computation where torch raises) found by
# the generator above and fixed in the same change.
def _both(fn):
    """fn(T) on torch and vm.torch: (torch's result, ours) as NumPy."""
    return [[_np(o) if isinstance(o, T.Tensor) else o for o in _flat(fn(T))]
            for T in (torch, vt)]


def _assert_same(fn, rtol=1e-6, atol=1e-7):
    ref, got = _both(fn)
    assert len(ref) == len(got)
    for r, g in zip(ref, got):
        assert np.shape(r) == np.shape(g), (np.shape(g), np.shape(r))
        np.testing.assert_allclose(np.asarray(g, np.float64), np.asarray(r, np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True)


X34 = np.random.default_rng(5).standard_normal((3, 4))


@pytest.mark.parametrize("name,kw", [
    ("relu6", {}), ("leaky_relu", {"negative_slope": 0.2}), ("elu", {"alpha": 0.5}),
    ("selu", {}), ("celu", {"alpha": 2.0}), ("silu", {}), ("mish", {}), ("hardtanh", {}),
    ("hardsigmoid", {}), ("hardswish", {}), ("threshold", {"threshold": 0.1, "value": 2.0})])
def test_inplace_activation_writes_its_input(name, kw):
    """``F.<act>(x, inplace=True)`` and ``nn.<Act>(inplace=True)`` write the
    result into x (a view of a larger tensor updates it); they used to return
    a new tensor and leave x as it was (only relu honoured inplace)."""
    def functional(T):
        x = T.tensor(X34)
        out = getattr(T.nn.functional, name)(x[:, 1:], inplace=True, **kw)
        return out, x
    _assert_same(functional)
    mod = {"relu6": "ReLU6", "leaky_relu": "LeakyReLU", "elu": "ELU", "selu": "SELU",
           "celu": "CELU", "silu": "SiLU", "mish": "Mish", "hardtanh": "Hardtanh",
           "hardsigmoid": "Hardsigmoid", "hardswish": "Hardswish",
           "threshold": "Threshold"}[name]

    def module(T):
        x = T.tensor(X34)
        out = getattr(T.nn, mod)(inplace=True, **kw)(x[1:])
        return out, x
    _assert_same(module)


def test_max_pool_return_indices():
    """MaxPool1d/2d(return_indices=True), F.max_pool1d and
    F.adaptive_max_pool2d with return_indices returned the values only
    (the indices were dropped without a word)."""
    x = np.random.default_rng(1).permutation(2 * 3 * 5 * 6).reshape(2, 3, 5, 6) / 7.0
    _assert_same(lambda T: T.nn.MaxPool2d(2, 1, 1, return_indices=True, ceil_mode=True)(
        T.tensor(x)))
    _assert_same(lambda T: T.nn.MaxPool1d(3, 2, return_indices=True)(T.tensor(x[0])))
    _assert_same(lambda T: T.nn.functional.max_pool1d(T.tensor(x[0]), 2, return_indices=True))
    _assert_same(lambda T: T.nn.functional.max_pool2d(T.tensor(x), (2, 3), dilation=(2, 1),
                                                      return_indices=True))
    _assert_same(lambda T: T.nn.functional.adaptive_max_pool2d(T.tensor(x[:, :, :4]), (2, 3),
                                                               return_indices=True))
    _assert_same(lambda T: T.nn.AdaptiveMaxPool2d((2, 3), return_indices=True)(
        T.tensor(x[:, :, :4])))


def test_adaptive_max_pool_uneven_windows_with_ties():
    """Adaptive max pooling to a size the input is not a multiple of (it
    raised): torch's overlapping windows, the first maximum of a tie taking
    the index and the gradient."""
    x = np.zeros((1, 2, 5, 7))
    x[0, 0, 1, 2] = 1.0
    def fn(T):
        t = T.tensor(x, requires_grad=True)
        y, i = T.nn.functional.adaptive_max_pool2d(t, (3, 4), return_indices=True)
        (y * T.tensor(np.arange(24.0).reshape(1, 2, 3, 4))).sum().backward()
        return y, i, t.grad
    _assert_same(fn, 1e-12, 1e-12)
    _assert_same(lambda T: T.nn.AdaptiveMaxPool1d(3)(T.tensor(x[0, :, 1])), 1e-12, 1e-12)


@pytest.mark.parametrize("nd", [2, 3])
def test_avg_pool_divisor_override(nd):
    """AvgPool2d/3d(divisor_override=d) divided by the window size (the
    module dropped the argument); F.avg_pool2d/3d refused it."""
    x = np.random.default_rng(2).standard_normal((2, 2) + (5,) * nd)
    name = f"AvgPool{nd}d"
    for kw in ({"divisor_override": 3}, {"divisor_override": 2, "padding": 1, "stride": 2,
                                         "ceil_mode": True},
               {"divisor_override": 5, "count_include_pad": False, "padding": 1}):
        def fn(T):
            t = T.tensor(x, requires_grad=True)
            y = getattr(T.nn, name)(2, **kw)(t)
            (y * y).sum().backward()
            return y, t.grad
        _assert_same(fn, 1e-10, 1e-12)
    _assert_same(lambda T: getattr(T.nn.functional, f"avg_pool{nd}d")(
        T.tensor(x), 3, divisor_override=4))


def test_poisson_nll_full_and_triplet_swap():
    """poisson_nll_loss(full=True) left out the Stirling term; the
    triplet margin loss (F and module) ignored swap=True."""
    rng = np.random.default_rng(3)
    x, t = rng.standard_normal((3, 4)), rng.integers(0, 6, (3, 4)).astype(np.float64)
    for log_input in (True, False):
        inp = x if log_input else np.abs(x) + 0.5
        for red in ("none", "mean"):
            _assert_same(lambda T: T.nn.functional.poisson_nll_loss(
                T.tensor(inp), T.tensor(t), log_input=log_input, full=True, reduction=red),
                1e-12, 1e-12)
            _assert_same(lambda T: T.nn.PoissonNLLLoss(log_input, True, reduction=red)(
                T.tensor(inp), T.tensor(t)), 1e-12, 1e-12)
    a, p, n = rng.standard_normal((3, 5, 4))
    n = p + 0.1 * n          # the positive is nearer the negative than the anchor is
    _assert_same(lambda T: T.nn.functional.triplet_margin_loss(
        T.tensor(a), T.tensor(p), T.tensor(n), swap=True, reduction="none"), 1e-12, 1e-12)
    _assert_same(lambda T: T.nn.TripletMarginLoss(margin=2.0, p=1.0, swap=True)(
        T.tensor(a), T.tensor(p), T.tensor(n)), 1e-12, 1e-12)


def test_same_padding():
    """padding='same' with a stride raises as torch's (it computed), and
    conv1d's 'same' with an even kernel pads the odd cell on the right (it
    padded symmetrically: one output too few)."""
    for make in (lambda T: T.nn.Conv2d(1, 1, 3, stride=2, padding="same"),
                 lambda T: T.nn.Conv3d(1, 1, 3, stride=(1, 2, 1), padding="same"),
                 lambda T: T.nn.Conv1d(1, 1, 3, stride=2, padding="same")):
        for T in (torch, vt):
            with pytest.raises(ValueError, match="strided"):
                make(T)
    with pytest.raises(ValueError, match="strided"):
        vt.nn.functional.conv2d(vt.ones(1, 1, 4, 4), vt.ones(1, 1, 3, 3), stride=2,
                                padding="same")
    x, w = np.random.default_rng(4).standard_normal((2, 2, 5)), np.ones((3, 2, 4))
    _assert_same(lambda T: T.nn.functional.conv1d(T.tensor(x), T.tensor(w), padding="same",
                                                  dilation=1), 1e-12, 1e-12)
    _assert_same(lambda T: T.nn.functional.conv1d(T.tensor(x), T.tensor(w[..., :2]),
                                                  padding="same", dilation=3), 1e-12, 1e-12)


def test_weighted_losses_with_every_target_ignored():
    """Class weights and every target ignored: the mean is NaN and the
    gradient 0, as torch's (cross_entropy with label_smoothing and weights,
    and weighted nll_loss, gave NaN gradients: the kept weights' sum, 0,
    divided the gradient)."""
    x = np.arange(12.0).reshape(4, 3) / 5
    w = np.array([1.0, 2.0, 3.0])
    for fn in (lambda T, t: T.nn.functional.nll_loss(t, T.tensor([1, 1, 1, 1]), T.tensor(w),
                                                     ignore_index=1),
               lambda T, t: T.nn.functional.cross_entropy(t, T.tensor([1, 1, 1, 1]),
                                                          T.tensor(w), ignore_index=1,
                                                          label_smoothing=0.2),
               lambda T, t: T.nn.CrossEntropyLoss(T.tensor(w), ignore_index=-100,
                                                  label_smoothing=0.1)(
                   t, T.tensor([-100] * 4))):
        def run_(T):
            t = T.tensor(x, requires_grad=True)
            y = fn(T, t)
            y.backward()
            return y, t.grad
        ref, got = _both(run_)
        assert np.isnan(ref[0]) and np.isnan(got[0])
        np.testing.assert_array_equal(got[1], ref[1])   # zeros, not NaN


def test_cross_entropy_probability_targets():
    """Probability targets: label_smoothing mixes the targets with the
    uniform distribution (it raised); an ignore_index raises as torch's
    (it was ignored)."""
    rng = np.random.default_rng(6)
    x, p = rng.standard_normal((3, 4, 2)), rng.random((3, 4, 2))
    p /= p.sum(1, keepdims=True)
    w = np.array([0.5, 1.0, 2.0, 1.5])
    for red in ("mean", "none"):
        _assert_same(lambda T: T.nn.functional.cross_entropy(
            T.tensor(x), T.tensor(p), T.tensor(w), reduction=red, label_smoothing=0.3),
            1e-12, 1e-12)
    for T in (torch, vt):
        with pytest.raises(RuntimeError, match="ignore_index"):
            T.nn.functional.cross_entropy(T.tensor(x), T.tensor(p), ignore_index=0)


def test_channel_dropout_and_alpha_dropout():
    """Dropout1d drops whole channels (it dropped single elements, as
    Dropout); AlphaDropout in training mode raises (it was plain dropout,
    not SELU's alpha dropout); both are the identity in eval mode."""
    vt.manual_seed(0)
    x = vt.ones(8, 16, 5)
    y = vt.nn.Dropout1d(0.5)(x).numpy()
    per_channel = y.reshape(8, 16, 5)
    assert ((per_channel == 0).all(-1) | (per_channel == 2).all(-1)).all()
    assert 0 < (per_channel[..., 0] == 0).mean() < 1
    y = vt.nn.functional.dropout3d(vt.ones(2, 6, 2, 2, 2), 0.5).numpy()
    assert ((y == 0).all((2, 3, 4)) | (y == 2).all((2, 3, 4))).all()
    y = vt.nn.functional.dropout3d(vt.ones(16, 2, 2, 2), 0.5).numpy()   # unbatched
    assert ((y == 0).all((1, 2, 3)) | (y == 2).all((1, 2, 3))).all()
    y = vt.nn.functional.dropout2d(vt.ones(4, 16, 3), 0.5).numpy()   # torch: [N, C, L]
    assert ((y == 0).all(2) | (y == 2).all(2)).all() and 0 < (y == 0).mean() < 1
    with pytest.raises(NotImplementedError, match="alpha_dropout"):
        vt.nn.AlphaDropout(0.2)(x)
    for m in (vt.nn.AlphaDropout(0.2), vt.nn.Dropout1d(0.5), vt.nn.Dropout3d(0.5)):
        assert m.eval()(x) is x


def test_embedding_scale_grad_by_freq():
    """scale_grad_by_freq divides each row's gradient by its index's count
    in the batch (the flag was ignored: the full gradient)."""
    idx = np.array([[0, 2, 2], [2, 1, 0]])
    wt = np.random.default_rng(7).standard_normal((4, 3))
    g = np.random.default_rng(8).standard_normal((2, 3, 3))
    for padding_idx in (None, 1):
        def fn(T):
            e = T.nn.Embedding(4, 3, padding_idx=padding_idx, scale_grad_by_freq=True)
            e.load_state_dict({"weight": T.tensor(wt)})
            e = e.double()
            y = e(T.tensor(idx))
            (y * T.tensor(g)).sum().backward()
            return y, e.weight.grad
        _assert_same(fn, 1e-12, 1e-12)


def test_embedding_max_norm():
    """max_norm renormalises the looked-up rows of the weight in place (it
    raised NotImplementedError); the rows not looked up keep their values."""
    wt = np.random.default_rng(13).standard_normal((5, 3)) * 2
    idx = np.array([[0, 2, 2], [4, 2, 0]])
    for norm_type in (2.0, 1.0):
        def fn(T):
            e = T.nn.Embedding(5, 3, max_norm=1.5, norm_type=norm_type).double()
            e.load_state_dict({"weight": T.tensor(wt)})
            y = e(T.tensor(idx))
            (y * y).sum().backward()
            return y, e.weight, e.weight.grad
        _assert_same(fn, 1e-12, 1e-12)


def test_instance_norm_running_stats():
    """F.instance_norm used the input's statistics always: use_input_stats
    =False ignored the running statistics, and running statistics passed
    with use_input_stats=True were not updated."""
    rng = np.random.default_rng(9)
    x = rng.standard_normal((3, 2, 5))
    rm, rv = rng.standard_normal(2), np.abs(rng.standard_normal(2)) + 0.5

    def fn(T, use):
        m, v = T.tensor(rm), T.tensor(rv)
        y = T.nn.functional.instance_norm(T.tensor(x), m, v, use_input_stats=use,
                                          momentum=0.3)
        return y, m, v
    _assert_same(lambda T: fn(T, True), 1e-10, 1e-12)
    _assert_same(lambda T: fn(T, False), 1e-10, 1e-12)


def test_mha_is_causal_hint():
    """is_causal is only a hint that attn_mask is causal: without a mask
    torch raises (we computed), and without weights or a key padding mask
    the causal mask replaces attn_mask."""
    x = np.random.default_rng(10).standard_normal((3, 2, 4))
    for T in (torch, vt):
        m = T.nn.MultiheadAttention(4, 2)
        with pytest.raises(RuntimeError, match="attn_mask"):
            m(T.tensor(x).float(), T.tensor(x).float(), T.tensor(x).float(), is_causal=True)
    not_causal = np.array([[0, 1, 1], [1, 0, 1], [0, 0, 0]], bool)

    def fn(T):
        T.manual_seed(0)
        m = T.nn.MultiheadAttention(4, 2).double()
        m.load_state_dict({k: T.tensor(np.random.default_rng(11).standard_normal(tuple(
            v.shape))) for k, v in m.state_dict().items()})
        t = T.tensor(x)
        return m(t, t, t, attn_mask=T.tensor(not_causal), need_weights=False, is_causal=True)[0]
    _assert_same(fn, 1e-10, 1e-12)


def test_activation_modules_check_their_arguments():
    """Activation modules took any keyword and dropped it (a misspelt
    ``treshold`` computed with the default); they raise TypeError as torch's."""
    for T in (torch, vt):
        with pytest.raises(TypeError):
            T.nn.Softplus(beta=2.0, treshold=1.0)
        with pytest.raises(TypeError):
            T.nn.Tanh(inplace=True)
    assert vt.nn.ELU(0.5, True).inplace and vt.nn.ELU(0.5, True).alpha == 0.5


def test_bad_input_raises_as_torch():
    """Inputs torch refuses that vm.torch used to compute with: batch
    statistics of one value per channel or group (zeros), float embedding
    indices (truncated), a broadcast BCE target, glu over an odd dimension;
    the native layers refuse the one-value statistics too."""
    for fn in (lambda T: T.nn.BatchNorm1d(3, track_running_stats=False)(T.ones(1, 3)),
               lambda T: T.nn.functional.batch_norm(T.ones(1, 3), None, None, training=True),
               lambda T: T.nn.functional.embedding(T.tensor([1.0]), T.ones(3, 2)),
               lambda T: T.nn.functional.binary_cross_entropy(T.ones(2, 3) * 0.5, T.ones(3)),
               lambda T: T.nn.functional.glu(T.ones(2, 3)),
               lambda T: T.nn.GroupNorm(2, 2)(T.ones(1, 2, 1))):
        for T in (torch, vt):
            with pytest.raises((RuntimeError, ValueError)):
                fn(T)
    for fn in (lambda: dg.nn.BatchNorm1d(3, track_running_stats=False)(dg.ops.ones([1, 3])),
               lambda: dg.nn.GroupNorm(2, 2)(dg.ops.ones([1, 2, 1]))):
        with pytest.raises(ValueError, match="more than (1|one) value"):
            fn()


@pytest.mark.parametrize("name,kw", [
    ("celu", {}), ("celu", {"alpha": 2.0}), ("hardtanh", {}),
    ("hardtanh", {"min_val": -0.5, "max_val": 3.0}), ("hardsigmoid", {}), ("hardswish", {}),
    ("relu6", {}), ("leaky_relu", {}), ("elu", {}), ("threshold", {"threshold": 0.5,
                                                                    "value": 2.0})])
def test_activation_gradient_at_kinks(name, kw):
    """Gradients at the points where an activation's pieces meet, as
    torch's (celu at 0 gave 1.5, hardtanh at its bounds 1, hardsigmoid at
    +-3 1/6, hardswish at -3 and 3 -0.5 and 1.5). (hardsigmoid's 1/6 itself
    is torch's float32 constant in every dtype: compared at 1e-7.)"""
    x = np.array([-20.0, -3.0, -1.0, -0.5, 0.0, 0.5, 1.0, 3.0, 6.0, 20.0])

    def fn(T):
        t = T.tensor(x, requires_grad=True)
        y = getattr(T.nn.functional, name)(t, **kw)
        y.sum().backward()
        return y, t.grad
    _assert_same(fn, 1e-7, 1e-12)


def test_prelu_gradient_at_zero():
    """PReLU at x == 0: the gradient w.r.t. x is the weight and w.r.t. the
    weight is 0, as torch's (it took the positive side: 1)."""
    def fn(T):
        m = T.nn.PReLU(2, init=0.3).double()
        x = T.tensor(np.array([[0.0, -1.0], [2.0, 0.0]]), requires_grad=True)
        y = m(x)
        y.sum().backward()
        return y, x.grad, m.weight.grad
    _assert_same(fn, 1e-12, 1e-12)


# ------------------------------------------------------------ module API
def _net(T):
    T.manual_seed(0)
    return T.nn.Sequential(T.nn.Conv2d(2, 3, 3, padding=1), T.nn.BatchNorm2d(3),
                           T.nn.ReLU(), T.nn.Flatten(),
                           T.nn.Sequential(T.nn.Linear(3 * 4 * 4, 5), T.nn.Dropout(0.2)),
                           T.nn.LayerNorm(5))


def test_module_api_matches_torch():
    """state_dict keys and order, named_parameters/named_buffers,
    load_state_dict's strict errors and its return value, train()/eval()
    reaching every submodule, zero_grad(set_to_none)."""
    ref, got = _net(torch), _net(vt)
    assert list(got.state_dict()) == list(ref.state_dict())
    assert [n for n, _ in got.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert [n for n, _ in got.named_buffers()] == [n for n, _ in ref.named_buffers()]
    assert [n for n, _ in got.named_modules()] == [n for n, _ in ref.named_modules()]
    sd = {k: v.numpy() for k, v in ref.state_dict().items()}
    res = got.load_state_dict({k: vt.tensor(v) for k, v in sd.items()})
    assert list(res.missing_keys) == [] and list(res.unexpected_keys) == []
    for k, v in got.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), sd[k])
    # strict errors
    for net, T in ((ref, torch), (got, vt)):
        part = {k: T.tensor(v) for k, v in sd.items() if k != "1.running_var"}
        part["extra.weight"] = T.zeros(1)
        with pytest.raises(RuntimeError, match=r'Missing key\(s\).*"1.running_var"'):
            net.load_state_dict(part)
        with pytest.raises(RuntimeError, match=r'Unexpected key\(s\).*"extra.weight"'):
            net.load_state_dict(part)
        r = net.load_state_dict(part, strict=False)
        assert list(r.missing_keys) == ["1.running_var"]
        assert list(r.unexpected_keys) == ["extra.weight"]
        bad = {k: T.tensor(v) for k, v in sd.items()}
        bad["0.weight"] = T.zeros(1, 2, 3, 3)
        with pytest.raises(RuntimeError, match="size mismatch for 0.weight"):
            net.load_state_dict(bad)
    # train/eval reach every submodule
    for net in (ref, got):
        net.eval()
        assert not any(m.training for m in net.modules())
        net[4].train()
        assert [m.training for m in net.modules()] == [False] * 5 + [True] * 3 + [False]
        net.train()
        assert all(m.training for m in net.modules())
    # the same forward and gradients, then zero_grad
    x = np.random.default_rng(12).standard_normal((2, 2, 4, 4))
    outs = []
    for net, T in ((ref, torch), (got, vt)):
        net.eval()
        y = net(T.tensor(x).float())
        (y * y).sum().backward()
        outs.append((_np(y), [_np(p.grad) for p in net.parameters()]))
        net.zero_grad(set_to_none=False)
        assert all(p.grad is not None and not p.grad.numpy().any() for p in net.parameters())
        net.zero_grad()
        assert all(p.grad is None for p in net.parameters())
    np.testing.assert_allclose(outs[1][0], outs[0][0], rtol=1e-5, atol=1e-5)
    for g, r in zip(outs[1][1], outs[0][1]):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
