"""The autograd machinery of dragon_core.vm.torch against real PyTorch (2.13,
CPU wheel): ``.grad`` accumulation, ``requires_grad``/``is_leaf``/``grad_fn``
propagation, grad-mode switches, ``torch.autograd.grad``'s contracts, hooks,
and the native ``GradientTape``/``dg.grad`` contracts (docs/python-api.md).

Every case is a function of the torch module (real or vm) returning plain
Python values; :func:`_same` runs it on both and asserts the same outcome:
the same values (gradients, dtypes, flags), or both raising. Where vm.torch
does not support a torch feature it must raise a clear error, never compute
something else; those cases assert the error. The seeded scenarios at the end
draw random small graphs (leaf shapes that broadcast, leaf dtypes, op chains,
how the backward pass is asked for) through ``tests/_fuzzcases.py``.
"""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.vm.torch as vt

real = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")

sys.path.insert(0, __file__.rsplit("/", 2)[0])
import _fuzzcases  # noqa: E402


def _outcome(lib, case, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = case(lib, *args)
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as e:
            return ("raise", f"{type(e).__name__}: {e}")
    return ("ok", out)


def _norm(v):
    """Plain values to compare: floats as float64 arrays, the rest as is."""
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    if isinstance(v, float):
        return np.float64(v)
    return v


def _eq(got, want, tol):
    if isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            _eq(g, w, tol)
    elif isinstance(want, np.floating):
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        assert got == want, (got, want)


def _same(case, *args, tol=1e-6):
    """Run ``case`` on both libraries; assert the same outcome and return it."""
    want = _outcome(real, case, *args)
    got = _outcome(vt, case, *args)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        _eq(_norm(got[1]), _norm(want[1]), tol)
    return got


def _g(t):
    """A tensor's values as nested float lists (None stays None)."""
    if t is None:
        return None
    return t.detach().double().tolist()


def _dt(t):
    return None if t is None else str(t.dtype).replace("torch.", "")


def _leaf(T, vals=(1.5, -2.5, 3.0), dtype=None):
    return T.tensor(list(vals), dtype=dtype, requires_grad=True)


# =================================================== .grad accumulation
def _accumulate_into_held_grad(T):
    # torch accumulates into the existing .grad tensor in place (no grad
    # mode): a reference taken after the first backward sees the sum.
    x = _leaf(T)
    (x * 2).sum().backward()
    g0 = x.grad
    (x * 3).sum().backward()
    return [_g(g0), _g(x.grad)]


def _accumulate_into_user_buffer(T):
    x = _leaf(T)
    buf = T.zeros(3)
    x.grad = buf
    (x * 2).sum().backward()
    (x * 5).sum().backward()
    return [_g(buf), _g(x.grad)]


def _accumulate_after_zero_(T):
    # zero_grad(set_to_none=False) then a cached reference: the pattern of
    # hand-written gradient bucketing
    x = _leaf(T)
    (x * 2).sum().backward()
    held = x.grad
    x.grad.zero_()
    (x * 3).sum().backward()
    return [_g(held), _g(x.grad)]


def _accumulate_shared_rule_output(T):
    # Add's rule hands the same gradient to both inputs: accumulating one
    # in place must not change the other
    a, b = _leaf(T), _leaf(T, (0.5, 0.25, 4.0))
    (a + b).sum().backward()
    (a * 3).sum().backward()
    return [_g(a.grad), _g(b.grad)]


def _accumulate_does_not_write_given_gradient(T):
    # the gradient passed to backward() passes through Add unchanged; a
    # later accumulation must not write into the caller's tensor
    a = _leaf(T)
    gvec = T.tensor([1.0, 2.0, 3.0])
    (a + 1).backward(gvec)
    (a * 3).sum().backward()
    return [_g(gvec), _g(a.grad)]


def _accumulate_create_graph(T):
    x = _leaf(T)
    (x ** 3).sum().backward(create_graph=True)
    g1 = x.grad
    (x * 2).sum().backward(create_graph=True)
    return [_g(g1), _g(x.grad), x.grad.requires_grad]


@pytest.mark.parametrize("case", [_accumulate_into_held_grad, _accumulate_into_user_buffer,
                                  _accumulate_after_zero_, _accumulate_shared_rule_output,
                                  _accumulate_does_not_write_given_gradient,
                                  _accumulate_create_graph])
def test_grad_accumulation_as_torch(case):
    assert _same(case)[0] == "ok"


def _backward_twice(T):
    x = _leaf(T)
    z = (x * x).sum()
    z.backward(retain_graph=True)
    z.backward()
    return _g(x.grad)


def test_backward_twice_with_retain_graph_accumulates():
    assert _same(_backward_twice)[0] == "ok"


# ============================================ gradient dtype and shape
def _gradient_arg_wider_dtype(T):
    # torch casts the gradient handed to backward() to the output's dtype:
    # a float32 leaf gets a float32 .grad
    x = _leaf(T)
    (x * 1).backward(T.tensor([1.0, 2.0, 3.0], dtype=T.float64))
    return [_dt(x.grad), _g(x.grad)]


def _gradient_arg_int_dtype(T):
    x = _leaf(T)
    (x * 2).backward(T.tensor([1, 2, 3]))
    return [_dt(x.grad), _g(x.grad)]


def _grad_outputs_wider_dtype(T):
    x = _leaf(T, dtype=T.float16)
    (g,) = T.autograd.grad(x * 2, x, grad_outputs=T.ones(3, dtype=T.float64))
    return [_dt(g), _g(g)]


def _leaf_dtypes(T):
    out = []
    for dt in (T.float16, T.bfloat16, T.float32, T.float64):
        x = _leaf(T, (1.0, 2.0, 0.5), dtype=dt)
        w = _leaf(T, (2.0, 1.0, 4.0))
        (x.float() * w).sum().backward()
        out.append([_dt(x.grad), _g(x.grad), _dt(w.grad)])
    return out


def _broadcast_reduction(T):
    a = T.tensor([[1.0], [2.0]], requires_grad=True)          # (2, 1)
    b = T.tensor([0.5, -1.0, 2.0], requires_grad=True)        # (3,)
    c = T.tensor(3.0, requires_grad=True)                     # ()
    ((a * b + c) ** 2).sum().backward()
    return [_g(a.grad), _g(b.grad), _g(c.grad), list(c.grad.shape)]


def _empty_leaf(T):
    x = T.zeros(0, 3, requires_grad=True)
    w = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
    ((x * w).sum() + w.sum()).backward()
    return [list(x.grad.shape), _g(w.grad)]


@pytest.mark.parametrize("case", [_gradient_arg_wider_dtype, _gradient_arg_int_dtype,
                                  _grad_outputs_wider_dtype, _leaf_dtypes,
                                  _broadcast_reduction, _empty_leaf])
def test_gradient_dtype_and_shape_as_torch(case):
    assert _same(case)[0] == "ok"


def _assign_grad(T, shape, dtype):
    x = _leaf(T)
    x.grad = T.zeros(*shape, dtype=dtype)
    return [_dt(x.grad), list(x.grad.shape)]


@pytest.mark.parametrize("shape,dtype", [((3,), "float32"), ((2,), "float32"),
                                         ((1,), "float32"), ((3, 1), "float32"),
                                         ((3,), "float64"), ((3,), "int64")])
def test_assigning_grad_checks_shape_and_dtype_as_torch(shape, dtype):
    def case(T):
        return _assign_grad(T, shape, getattr(T, dtype))
    kind, msg = _same(case)
    if (shape, dtype) != ((3,), "float32"):
        assert kind == "raise" and "attempting to assign a gradient" in msg, msg


def test_native_grad_assignment_checks_shape_and_dtype():
    w = dg.tensor([1.0, 2.0]).requires_grad_()
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(2,\)"):
        w.grad = dg.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="float64.*float32"):
        w.grad = dg.tensor([1.0, 2.0], dtype="float64")
    with pytest.raises(TypeError, match="Tensor"):
        w.grad = [1.0, 2.0]
    w.grad = dg.tensor([3.0, 4.0])
    w.grad = None
    assert w.grad is None


# ================================== requires_grad / is_leaf / grad_fn
def _flags(t):
    return [t.requires_grad, t.is_leaf, t.grad_fn is None]


def _propagation(T):
    x = T.tensor([[1.0, -2.0], [3.0, 0.5]], requires_grad=True)
    outs = [x.view(4), x[0], x.t(), x.reshape(4), x.unsqueeze(0), x.expand(2, 2, 2),
            x * 2, x.sum(), x.exp(), x.argmax(), x > 0, x.long(), x.round(), x.sign(),
            x.max(0).values, x.max(0).indices, x.double(), x.detach(), x.clone(),
            x.float(), x.to(T.float32)]
    return [_flags(o) for o in outs]


def _no_grad_propagation(T):
    x = _leaf(T)
    with T.no_grad():
        y = x * 2
    return _flags(y)


def _requires_grad_false_on_nonleaf(T):
    x = _leaf(T)
    y = x * 2
    y.requires_grad_(False)
    return _flags(y)


def _requires_grad_attr_false_on_nonleaf(T):
    x = _leaf(T)
    y = x * 2
    y.requires_grad = False
    return _flags(y)


def _requires_grad_true_on_nonleaf(T):
    x = _leaf(T)
    y = (x * 2).requires_grad_(True)
    y.sum().backward()
    return [_flags(y), _g(x.grad)]


def _requires_grad_false_on_leaf(T):
    x = _leaf(T)
    x.requires_grad_(False)
    return _flags(x)


def _detach_inplace_nonleaf(T):
    x = _leaf(T)
    y = x * 2
    z = y.detach_()
    w = _leaf(T, (1.0, 1.0, 1.0))
    (y * w).sum().backward()
    return [z is y, _flags(y), _g(x.grad), _g(w.grad)]


def _detach_shares(T):
    x = _leaf(T)
    d = x.detach()
    d.add_(1)
    return [_flags(d), _g(x)]


def _int_leaf(T):
    return T.tensor([1, 2], requires_grad=True)


def _int_leaf_requires_grad_(T):
    return T.tensor([1, 2]).requires_grad_()


def _requires_grad_on_no_grad_result(T):
    x = _leaf(T)
    with T.no_grad():
        y = x * 2
    y.requires_grad_()
    (y * 3).sum().backward()
    return [_flags(y), _g(y.grad), x.grad]


def _detach_inplace_after_use(T):
    # ops recorded before detach_() keep passing gradients through it
    x = _leaf(T)
    y = x * 2
    z = (y + 1).sum()
    y.detach_()
    z.backward()
    return [_flags(y), _g(x.grad)]


def _backward_on_leaf(T):
    x = _leaf(T)
    x.backward(T.tensor([1.0, 2.0, 3.0]))
    x.sum().backward()
    return _g(x.grad)


def _create_graph_under_no_grad(T):
    x = _leaf(T)
    z = (x ** 3).sum()
    with T.no_grad():
        (g,) = T.autograd.grad(z, x, create_graph=True)
    (gg,) = T.autograd.grad(g.sum(), x)
    return [g.requires_grad, _g(g), _g(gg)]


@pytest.mark.parametrize("case", [_propagation, _no_grad_propagation,
                                  _detach_inplace_after_use, _backward_on_leaf,
                                  _create_graph_under_no_grad,
                                  _requires_grad_false_on_nonleaf,
                                  _requires_grad_attr_false_on_nonleaf,
                                  _requires_grad_true_on_nonleaf,
                                  _requires_grad_false_on_leaf, _detach_inplace_nonleaf,
                                  _detach_shares, _int_leaf, _int_leaf_requires_grad_,
                                  _requires_grad_on_no_grad_result])
def test_flags_as_torch(case):
    _same(case)


def test_requires_grad_false_on_nonleaf_raises_naming_detach():
    kind, msg = _same(_requires_grad_false_on_nonleaf)
    assert kind == "raise" and "leaf" in msg and "detach()" in msg


def test_nonleaf_grad_read_warns_and_is_none():
    x = vt.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    with pytest.warns(UserWarning, match="non-leaf"):
        assert y.grad is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert x.grad is None          # a leaf: no warning


# ================================================= in-place and versions
def _inplace_leaf(T):
    x = _leaf(T)
    x.add_(1)


def _inplace_view_of_leaf(T):
    x = _leaf(T)
    x[0:2].add_(1)


def _inplace_leaf_no_grad(T):
    x = _leaf(T)
    with T.no_grad():
        x.mul_(2)
    (x * x).sum().backward()
    return [_flags(x), _g(x), _g(x.grad)]


def _version_counter(T):
    x = _leaf(T)
    c = T.tensor([1.0, 2.0, 3.0])
    y = x * c
    c.add_(1)
    y.sum().backward()


@pytest.mark.parametrize("case", [_inplace_leaf, _inplace_view_of_leaf, _inplace_leaf_no_grad,
                                  _version_counter])
def test_inplace_rules_as_torch(case):
    _same(case)


# ============================================================ grad modes
def _set_grad_enabled_decorator(T):
    # torch.set_grad_enabled(False) switches at once, but used as a
    # decorator it switches back: only the decorated calls run without grad
    @T.set_grad_enabled(False)
    def f(t):
        return [T.is_grad_enabled(), (t * 2).requires_grad]
    after = T.is_grad_enabled()
    x = _leaf(T)
    inside = f(x)
    return [after, inside, T.is_grad_enabled(), (x * 2).requires_grad]


def _no_grad_generator(T):
    x = _leaf(T)

    @T.no_grad()
    def gen():
        for _ in range(2):
            yield (x * 2).requires_grad
    return list(gen()) + [T.is_grad_enabled()]


def _no_grad_bare_generator(T):
    x = _leaf(T)

    @T.no_grad
    def gen():
        yield (x * 2).requires_grad
    return list(gen())


def _enable_grad_generator_under_no_grad(T):
    x = _leaf(T)

    @T.enable_grad()
    def gen():
        yield (x * 2).requires_grad
    with T.no_grad():
        g = gen()
        first = next(g)
    return [first, T.is_grad_enabled()]


def _generator_send_and_close(T):
    x = _leaf(T)
    seen = []

    @T.no_grad()
    def gen():
        got = yield (x * 2).requires_grad
        seen.append([got, (x * 3).requires_grad])
        yield 1
    g = gen()
    first = next(g)
    g.send("hi")
    g.close()
    return [first, seen, T.is_grad_enabled()]


def _nested_modes(T):
    x = _leaf(T)
    out = []
    with T.no_grad():
        out.append((x * 2).requires_grad)
        with T.enable_grad():
            out.append((x * 2).requires_grad)
            with T.set_grad_enabled(False):
                out.append((x * 2).requires_grad)
            out.append((x * 2).requires_grad)
        out.append((x * 2).requires_grad)
    out.append((x * 2).requires_grad)
    return out


def _decorators(T):
    x = _leaf(T)

    @T.no_grad()
    def f(t):
        return (t * 2).requires_grad

    @T.enable_grad()
    def g(t):
        return (t * 2).requires_grad

    @T.inference_mode()
    def h(t):
        return (t * 2).requires_grad
    with T.no_grad():
        r = g(x)
    return [f(x), r, h(x), T.is_grad_enabled()]


def _mode_restored_after_exception(T):
    @T.no_grad()
    def f():
        raise ValueError("boom")
    try:
        f()
    except ValueError:
        pass
    try:
        with T.no_grad():
            raise KeyError("x")
    except KeyError:
        pass
    return T.is_grad_enabled()


@pytest.mark.parametrize("case", [_set_grad_enabled_decorator, _no_grad_generator,
                                  _no_grad_bare_generator,
                                  _enable_grad_generator_under_no_grad,
                                  _generator_send_and_close, _nested_modes, _decorators,
                                  _mode_restored_after_exception])
def test_grad_modes_as_torch(case):
    try:
        assert _same(case)[0] == "ok"
    finally:
        real.set_grad_enabled(True)
        vt.set_grad_enabled(True)


# ================================================== torch.autograd.grad
def _grad_wrt_input_not_requiring_grad(T):
    w = _leaf(T)
    a = T.tensor([1.0, 2.0, 3.0])
    return T.autograd.grad((a * w).sum(), [a])


def _grad_of_output_not_requiring_grad(T, **kw):
    w = _leaf(T)
    a = T.tensor([1.0, 2.0, 3.0])
    return T.autograd.grad(a.sum(), [w], **kw)


def _grad_unused(T, **kw):
    w, x = _leaf(T), _leaf(T)
    return [_g(g) for g in T.autograd.grad((w * 2).sum(), [w, x], **kw)]


def _grad_nonscalar(T):
    x = _leaf(T)
    T.autograd.grad(x * 2, [x])


def _grad_outputs_shape(T):
    x = _leaf(T)
    T.autograd.grad(x * 2, [x], T.ones(2))


def _grad_outputs_list(T):
    x = _leaf(T)
    (g,) = T.autograd.grad([(x * 2).sum(), x * 3], [x], [None, T.tensor([1.0, 0.0, 2.0])])
    return _g(g)


def _grad_intermediate(T):
    x = _leaf(T)
    y = x * 2
    z = (y * y).sum()
    return [_g(g) for g in T.autograd.grad(z, [y, x])]


def _grad_higher_orders(T):
    x = _leaf(T, (1.0, 2.0, -0.5))
    y = (x ** 4).sum()
    (g1,) = T.autograd.grad(y, x, create_graph=True)
    (g2,) = T.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = T.autograd.grad(g2.sum(), x)
    return [_g(g1), _g(g2), _g(g3), g1.requires_grad, g3.requires_grad]


def _grad_then_backward(T):
    x = _leaf(T)
    w = T.tensor(2.0, requires_grad=True)
    (gx,) = T.autograd.grad((x * x * w).sum(), x, create_graph=True)
    (gx * gx).sum().backward()
    return [_g(x.grad), _g(w.grad)]


def _backward_create_graph_then_grad(T):
    x = _leaf(T, (1.0, 2.0, 3.0))
    (x ** 3).sum().backward(create_graph=True)
    g = x.grad
    (gg,) = T.autograd.grad(g.sum(), x)
    return [_g(g), _g(gg)]


def _grad_accumulates_nothing(T):
    x = _leaf(T)
    T.autograd.grad((x * 2).sum(), x)
    return x.grad


def _grad_no_create_graph_result(T):
    x = _leaf(T)
    (g,) = T.autograd.grad((x * x).sum(), x)
    return _flags(g)


def _grad_returns_tuple(T):
    x = _leaf(T)
    r = T.autograd.grad((x * 2).sum(), x)
    return [type(r).__name__, len(r)]


@pytest.mark.parametrize("case", [
    _grad_wrt_input_not_requiring_grad, _grad_of_output_not_requiring_grad,
    lambda T: _grad_of_output_not_requiring_grad(T, allow_unused=True),
    lambda T: _grad_of_output_not_requiring_grad(T, materialize_grads=True),
    _grad_unused, lambda T: _grad_unused(T, allow_unused=True),
    lambda T: _grad_unused(T, materialize_grads=True), _grad_nonscalar, _grad_outputs_shape,
    _grad_outputs_list, _grad_intermediate, _grad_higher_orders, _grad_then_backward,
    _backward_create_graph_then_grad, _grad_accumulates_nothing,
    _grad_no_create_graph_result, _grad_returns_tuple])
def test_autograd_grad_as_torch(case):
    _same(case)


def test_grad_of_output_not_requiring_grad_raises_even_with_allow_unused():
    for kw in ({}, {"allow_unused": True}, {"materialize_grads": True}):
        kind, msg = _same(lambda T: _grad_of_output_not_requiring_grad(T, **kw))
        assert kind == "raise" and "does not require grad" in msg, (kw, msg)


def test_backward_of_output_not_requiring_grad_raises():
    for T in (real, vt):
        with pytest.raises(RuntimeError, match="does not require grad"):
            T.tensor([1.0, 2.0]).sum().backward()


# ====================================== hooks and the unsupported surface
def _retain_grad(T):
    x = _leaf(T)
    y = x * 2
    y.retain_grad()
    (y * y).sum().backward()
    return [_g(y.grad), _g(x.grad)]


def _register_hook(T):
    x = _leaf(T)
    h = x.register_hook(lambda g: g * 10)
    (x * 2).sum().backward()
    first = _g(x.grad)
    h.remove()
    x.grad = None
    (x * 2).sum().backward()
    return [first, _g(x.grad)]


def _post_accumulate_hook(T):
    x = _leaf(T)
    seen = []
    h = x.register_post_accumulate_grad_hook(lambda t: seen.append(_g(t.grad)))
    (x * 2).sum().backward()
    h.remove()
    (x * 2).sum().backward()
    return [seen, _g(x.grad)]


def _function(T):
    class Twice(T.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2
    x = _leaf(T)
    Twice.apply(x).sum().backward()
    return _g(x.grad)


def _backward_inputs(T):
    x, w = _leaf(T), _leaf(T)
    (x * w).sum().backward(inputs=[x])
    return [_g(x.grad), w.grad]


def _hooks_nonleaf_order_and_retain(T):
    x = _leaf(T)
    y = x * 2
    order = []
    y.register_hook(lambda g: (order.append("a"), g * 10)[1])
    y.register_hook(lambda g: (order.append("b"), None)[1])
    y.retain_grad()
    (y * 3).sum().backward()
    return [_g(x.grad), _g(y.grad), order, y.retains_grad, x.retains_grad]


def _hook_leaf_in_autograd_grad(T):
    x = _leaf(T)
    x.register_hook(lambda g: g + 1)
    return [_g(g) for g in T.autograd.grad((x * 2).sum(), [x, x])]


def _hook_on_target(T):
    x = _leaf(T)
    y = x * 2
    y.register_hook(lambda g: g * 5)
    y.backward(T.ones(3))
    return _g(x.grad)


def _hook_once_on_summed_gradient(T):
    x = _leaf(T)
    y = x * 2
    calls = []
    y.register_hook(lambda g: calls.append(_g(g)))
    (y * 3 + y * 4).sum().backward()
    return calls


def _hook_wrong_shape(T):
    x = _leaf(T)
    x.register_hook(lambda g: g.sum())
    (x * 2).sum().backward()


def _hook_not_requiring_grad(T):
    T.ones(2).register_hook(lambda g: g)


def _retain_grad_accumulates_and_autograd_grad(T):
    x = _leaf(T)
    y = x * 2
    y.retain_grad()
    z = (y * y).sum()
    z.backward(retain_graph=True)
    z.backward()
    first = _g(y.grad)
    y2 = x * 3
    y2.retain_grad()
    T.autograd.grad((y2 * y2).sum(), x)
    return [first, _g(y2.grad)]


def _hook_then_post_accumulate(T):
    x = _leaf(T)
    seen = []
    x.register_hook(lambda g: g * 100)
    x.register_post_accumulate_grad_hook(lambda t: seen.append(_g(t.grad)))
    (x * 1).sum().backward()
    return seen


def _post_accumulate_on_nonleaf(T):
    x = _leaf(T)
    (x * 2).register_post_accumulate_grad_hook(lambda t: None)


def _hook_create_graph(T):
    x = _leaf(T)
    x.register_hook(lambda g: g * x)
    (g,) = T.autograd.grad((x * x).sum(), x, create_graph=True)
    (gg,) = T.autograd.grad(g.sum(), x)
    return [_g(g), _g(gg)]


@pytest.mark.parametrize("case", [_hooks_nonleaf_order_and_retain, _hook_leaf_in_autograd_grad,
                                  _hook_on_target, _hook_once_on_summed_gradient,
                                  _hook_wrong_shape, _hook_not_requiring_grad,
                                  _retain_grad_accumulates_and_autograd_grad,
                                  _hook_then_post_accumulate, _post_accumulate_on_nonleaf,
                                  _hook_create_graph])
def test_tensor_hooks_as_torch(case):
    _same(case)


def _once_differentiable(T):
    return T.autograd.function.once_differentiable


def _fn_saved_and_higher_order(T):
    class Exp(T.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            y = (x * k).exp()
            ctx.save_for_backward(y)
            ctx.k = k
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y * ctx.k, None
    x = _leaf(T, (0.5, 1.0, -0.25))
    y = Exp.apply(x, 2.0)
    flags = _flags(y)
    y.sum().backward()
    (g,) = T.autograd.grad(Exp.apply(x, 2.0).sum(), x, create_graph=True)
    (gg,) = T.autograd.grad(g.sum(), x)
    return [flags, _g(x.grad), _g(g), g.requires_grad, _g(gg)]


def _fn_non_differentiable_and_needs(T):
    seen = []

    class Two(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            idx = a.argmax()
            m = a * 3
            ctx.mark_non_differentiable(idx, m)
            seen.append(list(ctx.needs_input_grad))
            return a * b, idx, m

        @staticmethod
        def backward(ctx, g, gidx, gm):
            seen.append([_g(gidx), _g(gm)])
            return g * 2, None
    a = _leaf(T)
    o, i, m = Two.apply(a, T.tensor([3.0, 4.0, 5.0]))
    flags = [_flags(o), _flags(i), _flags(m)]
    o.sum().backward()
    return [flags, seen, _g(a.grad)]


def _fn_materialize_grads_off(T):
    seen = []

    class Mat(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.set_materialize_grads(False)
            return a * 1, a * 2

        @staticmethod
        def backward(ctx, g1, g2):
            seen.append([g1 is None, g2 is None])
            return g1
    a = _leaf(T)
    p, q = Mat.apply(a)
    p.sum().backward()
    return [seen, _g(a.grad)]


def _fn_once_differentiable(T):
    class Sq(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        @_once_differentiable(T)
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 2 * a * g
    a = _leaf(T)
    (g,) = T.autograd.grad(Sq.apply(a).sum(), a, create_graph=True)
    out = [_g(g), g.requires_grad]
    g.sum().backward()
    return out


def _fn_no_grad_and_plain_inputs(T):
    class Id(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g
    a = _leaf(T)
    with T.no_grad():
        r1 = Id.apply(a).requires_grad
    return [Id.apply(T.ones(2)).requires_grad, r1]


def _fn_wrong_count(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a * b

        @staticmethod
        def backward(ctx, g):
            return g
    a = _leaf(T)
    Bad.apply(a, a).sum().backward()


def _fn_wrong_shape(T):
    class Bad(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return g.sum()
    Bad.apply(_leaf(T)).sum().backward()


def _fn_saved_modified(T):
    class Saved(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * 2

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * a
    c = _leaf(T)
    d = c * 1
    o = Saved.apply(d)
    with T.no_grad():
        d.mul_(3)
    o.sum().backward()


def _fn_setup_context_and_returned_input(T):
    class Scale(T.autograd.Function):
        @staticmethod
        def forward(a, k):
            return a * k

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.k = inputs[1]

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k, None

    class RetIn(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 5
    a = _leaf(T)
    Scale.apply(a, 3.0).sum().backward()
    b = _leaf(T)
    r = RetIn.apply(b)
    same = r is b
    r.sum().backward()
    return [_g(a.grad), same, _flags(r), _g(b.grad)]


def _fn_legacy_call(T):
    class Inst(T.autograd.Function):
        def forward(ctx, a):
            return a
    Inst()(_leaf(T))


def _fn_mark_dirty(T):
    class Dirty(T.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g
    Dirty.apply(_leaf(T) * 1).sum().backward()


@pytest.mark.parametrize("case", [_fn_saved_and_higher_order, _fn_non_differentiable_and_needs,
                                  _fn_materialize_grads_off, _fn_once_differentiable,
                                  _fn_no_grad_and_plain_inputs, _fn_wrong_count,
                                  _fn_wrong_shape, _fn_saved_modified,
                                  _fn_setup_context_and_returned_input, _fn_legacy_call])
def test_autograd_function_as_torch(case):
    _same(case)


def test_autograd_function_mark_dirty_raises():
    assert _outcome(real, _fn_mark_dirty)[0] == "ok"
    with pytest.raises(NotImplementedError, match="mark_dirty"):
        _fn_mark_dirty(vt)


def test_autograd_function_on_a_tape():
    class Cube(vt.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return 3 * a * a * g
    x = dg.tensor([1.0, 2.0])
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = Cube.apply(vt.from_dragon(x)).dragon()
    assert _np(tape.gradient(y, x)) == [3.0, 12.0]


def _checkpoint(T, reentrant):
    from importlib import import_module
    cp = import_module(T.__name__ + ".utils.checkpoint")
    x = _leaf(T)
    lin = T.nn.Linear(3, 2)
    with T.no_grad():
        lin.weight.copy_(T.tensor([[0.5, -1.0, 2.0], [1.0, 0.25, -0.5]]))
        lin.bias.fill_(0.1)
    y = cp.checkpoint(lambda t: T.tanh(lin(t)) * t[:2], x, use_reentrant=reentrant)
    y.sum().backward()
    z = cp.checkpoint(lin, T.ones(3), use_reentrant=reentrant)
    return [_g(y), _g(x.grad), _g(lin.weight.grad), _flags(z)]


@pytest.mark.parametrize("reentrant", [True, False])
def test_checkpoint_values_and_gradients_as_torch(reentrant):
    _same(_checkpoint, reentrant, tol=1e-5)


@pytest.mark.parametrize("case", [_retain_grad, _register_hook, _post_accumulate_hook,
                                  _function, _backward_inputs])
def test_hooks_and_unsupported_surface_same_or_raise(case):
    """Either the torch result, or a NotImplementedError naming the feature
    (never a different result)."""
    want = _outcome(real, case)
    got = _outcome(vt, case)
    assert want[0] == "ok"
    if got[0] == "raise":
        assert got[1].startswith("NotImplementedError"), got
    else:
        _eq(_norm(got[1]), _norm(want[1]), 1e-6)


def test_autograd_functional_raises():
    with pytest.raises(NotImplementedError, match="functional.jacobian"):
        vt.autograd.functional.jacobian(lambda t: t, vt.ones(2))
    with pytest.raises(NotImplementedError, match="implement the forward"):
        vt.autograd.Function.apply(vt.ones(2))


# =================================================== native GradientTape
def _np(t):
    return None if t is None else np.asarray(t.numpy()).tolist()


def test_tape_rejects_unknown_unconnected_gradients():
    x = dg.tensor([1.0, 2.0])
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = x * 3
    with pytest.raises(ValueError, match="unconnected_gradients.*'bogus'"):
        tape.gradient(y, x, unconnected_gradients="bogus")


def test_tape_nested_sources_keep_their_structure():
    x, w = dg.tensor([1.0, 2.0]), dg.tensor([[3.0, 4.0]])
    with dg.GradientTape() as tape:
        tape.watch([x, w])
        y = (x * w).sum()
    gx, (gw, (gx2,)) = tape.gradient(y, [x, (w, [x])])
    assert _np(gx) == [3.0, 4.0] and _np(gw) == [[1.0, 2.0]] and _np(gx2) == [3.0, 4.0]


def test_tape_gradient_casts_output_gradient_to_target_dtype():
    x = dg.tensor([1.0, 2.0])
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = x * 3
    g = tape.gradient(y, x, output_gradients=dg.tensor([1.0, 2.0], dtype="float64"))
    assert g.dtype == dg.float32 and _np(g) == [3.0, 6.0]


def test_tape_persistent_nested_higher_order():
    x = dg.tensor([1.0, 2.0])
    with dg.GradientTape(persistent=True) as a:
        a.watch(x)
        with dg.GradientTape() as b:
            b.watch(x)
            y = x * x * x * x
        g1 = b.gradient(y, x)
    g2 = a.gradient(g1, x)
    assert _np(g1) == [4.0, 32.0] and _np(g2) == [12.0, 48.0]
    assert _np(a.gradient(y, x)) == [4.0, 32.0]       # persistent: again


def test_native_backward_gradient_cast_to_target_dtype():
    w = dg.tensor([1.0, 2.0]).requires_grad_()
    (w * 1).backward(dg.tensor([1.0, 2.0], dtype="float64"))
    assert w.grad.dtype == dg.float32 and _np(w.grad) == [1.0, 2.0]


# ===================================================== seeded scenarios
#
# A scenario: two or three leaves of shapes that broadcast together, of
# random floating dtypes; a chain of ops mixing them (elementwise, views,
# reductions, casts); then one way of asking for gradients. The result
# compared: every leaf's .grad (values, dtype, shape) or autograd.grad's
# results, and the flags of the outputs.

_DTYPES = ["float32", "float64", "float16", "bfloat16"]
_TOL = {"float32": 1e-4, "float64": 1e-10, "float16": 2e-2, "bfloat16": 8e-2}
_UNARY = ["exp", "tanh", "sigmoid", "sq", "neg", "abs1", "relu", "scale", "sin"]
_VIEWS = ["t", "unsqueeze_squeeze", "flip_view", "reshape", "slice", "expand"]
_MODES = ["backward", "backward_twice", "backward_gradient_f64", "grad", "grad_create_graph",
          "held_grad", "user_buffer", "grad_outputs", "two_losses", "hooks", "function",
          "create_graph_no_grad"]


def _gen_scenario(rng):
    base = [int(rng.integers(1, 4)) for _ in range(2)]
    shapes = [list(base)]
    for _ in range(int(rng.integers(1, 3))):
        s = [d if rng.random() < 0.6 else 1 for d in base]
        shapes.append(s[int(rng.integers(0, 2)):] if rng.random() < 0.3 else s)
    return {
        "shapes": shapes,
        "vals": [rng.uniform(-1.5, 1.5, size=s).round(3).tolist() for s in shapes],
        "dtypes": [str(rng.choice(_DTYPES)) if rng.random() < 0.4 else "float32"
                   for _ in shapes],
        "ops": [str(rng.choice(_UNARY + _VIEWS)) for _ in range(int(rng.integers(1, 4)))],
        "mode": str(rng.choice(_MODES)),
        "gvals": rng.uniform(-1, 1, size=base).round(3).tolist(),
    }


def _apply(T, name, y):
    if name == "exp":
        return (y * 0.5).exp()
    if name == "tanh":
        return y.tanh()
    if name == "sigmoid":
        return y.sigmoid()
    if name == "sq":
        return y * y
    if name == "neg":
        return -y
    if name == "abs1":
        return (y.abs() + 1.0).sqrt()
    if name == "relu":
        return T.relu(y + 0.1)
    if name == "scale":
        return y * 1.5 - 0.25
    if name == "sin":
        return y.sin()
    if name == "t":
        return y.t().t()
    if name == "unsqueeze_squeeze":
        return y.unsqueeze(0).squeeze(0)
    if name == "flip_view":
        return y.transpose(0, 1).contiguous().transpose(0, 1)
    if name == "reshape":
        return y.reshape(-1).reshape(y.shape)
    if name == "slice":
        return T.cat([y[:, :1] * 2.0, y[:, 1:]], dim=1)
    if name == "expand":
        return y.unsqueeze(0).expand(2, *y.shape).sum(0) * 0.5
    raise AssertionError(name)


def _scenario(T, case):
    leaves = [T.tensor(v, dtype=getattr(T, d), requires_grad=True)
              for v, d in zip(case["vals"], case["dtypes"])]
    y = leaves[0].float()
    for other in leaves[1:]:
        y = y * other.float() + other.float()
    for name in case["ops"]:
        y = _apply(T, name, y)
    mode = case["mode"]
    if mode == "hooks":
        leaves[0].register_hook(lambda g: g * 2)
        y.register_hook(lambda g: g - 0.5)
        y.retain_grad()
    if mode == "function":
        y = _square_fn(T).apply(y)
    flags = _flags(y)
    loss = (y * y).sum()
    gv = T.tensor(case["gvals"]).reshape(y.shape) if list(y.shape) == \
        [len(case["gvals"]), len(case["gvals"][0])] else T.ones(y.shape)
    result = None
    if mode == "backward":
        loss.backward()
    elif mode == "backward_twice":
        loss.backward(retain_graph=True)
        loss.backward()
    elif mode == "backward_gradient_f64":
        y.backward(gv.double())
    elif mode == "grad":
        result = [_g(g) for g in T.autograd.grad(loss, leaves)]
    elif mode == "grad_create_graph":
        gs = T.autograd.grad(loss, leaves, create_graph=True)
        sum(g.float().sum() for g in gs).backward()
    elif mode == "held_grad":
        loss.backward(retain_graph=True)
        held = [leaf.grad for leaf in leaves]
        (y.sum() * 2).backward()
        result = [_g(h) for h in held]
    elif mode == "user_buffer":
        bufs = [T.full(leaf.shape, 0.5, dtype=leaf.dtype) for leaf in leaves]
        for leaf, b in zip(leaves, bufs):
            leaf.grad = b
        loss.backward()
        result = [_g(b) for b in bufs]
    elif mode == "grad_outputs":
        result = [_g(g) for g in T.autograd.grad(y, leaves, grad_outputs=gv,
                                                 allow_unused=True)]
    elif mode == "two_losses":
        T.autograd.backward([loss, y.sum()], [None, T.tensor(3.0)])
    elif mode in ("hooks", "function"):
        loss.backward()
        result = _g(y.grad) if mode == "hooks" else None
    elif mode == "create_graph_no_grad":
        with T.no_grad():
            gs = T.autograd.grad(loss, leaves, create_graph=True)
        result = [g.requires_grad for g in gs]
        sum(g.float().sum() for g in gs).backward()
    grads = [[_g(leaf.grad), _dt(leaf.grad),
              None if leaf.grad is None else list(leaf.grad.shape)] for leaf in leaves]
    return [flags, result, grads]


def _square_fn(T):
    class Square(T.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return 2.0 * t * g
    return Square


_GENERATORS = {"scenario": (_gen_scenario, 60)}


@pytest.mark.parametrize("cat,i", _fuzzcases.cases(_GENERATORS))
def test_seeded_autograd_scenario(cat, i):
    case = _fuzzcases.draw(_GENERATORS, cat, i, 7727)
    tol = max(_TOL[d] for d in case["dtypes"] + ["float32"])   # the chain runs in float32
    kind, out = _same(_scenario, case, tol=tol)
    assert kind == "ok", (case, out)


def test_tape_warns_when_the_target_was_not_recorded():
    x = dg.tensor([1.0, 2.0])
    with dg.no_grad():
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = x * 3
    with pytest.warns(UserWarning, match="target was not recorded"):
        assert tape.gradient(y, x) is None
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = x * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _np(tape.gradient(y, x)) == [3.0, 3.0]


def test_accumulate_into_expanded_grad_is_not_written_in_place():
    # An expanded (stride-0) .grad maps several elements to one cell: adding
    # into it would write several gradient elements over each other (torch
    # raises there). The sum is stored as a new tensor instead.
    x = vt.zeros(3, 2, requires_grad=True)
    x.grad = vt.zeros(1, 2).expand(3, 2)
    (x * vt.arange(6.).reshape(3, 2)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.arange(6.).reshape(3, 2))


@pytest.mark.parametrize("segments", [1, 2, 3])
def test_checkpoint_sequential_trains_like_torch_on_a_plain_input(segments):
    # torch checkpoints the first segments - 1 segments and runs the last
    # plainly: with an input that does not require grad, the last segment's
    # parameters get gradients (and the checkpointed ones do not).
    got = []
    for T in (real, vt):
        T.manual_seed(0)
        layers = [T.nn.Linear(3, 3) for _ in range(4)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = T.utils.checkpoint.checkpoint_sequential(
                T.nn.Sequential(*layers), segments, T.ones(2, 3), use_reentrant=True)
            out.sum().backward()
        got.append([layer.weight.grad is not None for layer in layers])
    assert got[1] == got[0]


def test_size_arguments_refuse_floats_and_bools_like_torch():
    # int() truncated 4.5 to 4: view(3, 4.5) viewed as (3, 4), zeros(2.5, 2)
    # made a (2, 2) tensor; torch raises TypeError for floats and bools.
    calls = [lambda T, x: x.view(3, 4.5), lambda T, x: x.reshape(2.9, 6),
             lambda T, x: T.zeros(2.5, 2), lambda T, x: x.view(True, 12)]
    for call in calls:
        for T in (real, vt):
            with pytest.raises(TypeError):
                call(T, T.arange(12.))
    for T in (real, vt):
        x = T.arange(12.)
        assert tuple(x.view(T.tensor(3), 4).shape) == (3, 4)
        assert tuple(T.zeros([2, 3]).shape) == (2, 3)
