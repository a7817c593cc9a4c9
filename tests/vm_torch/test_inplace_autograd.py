"""In-place writes under autograd in dragon_core.vm.torch, case by case
against real PyTorch (2.13, CPU wheel): every case either behaves as torch
(same values and gradients, or the same error) or raises a clear error
naming the unsupported pattern; none silently differs.

Each case is a function of the torch module (real or vm) returning plain
Python values, so both run the same code.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import dragon_core.vm.torch as vt

real = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")

VERSION_ERR = "one of the variables needed for gradient computation has been modified by an " \
              "inplace operation"
LEAF_ERR = "a leaf Variable that requires grad is being used in an in-place operation"
VIEW_ERR = "in-place write to a view (slice, view, reshape, transpose, ...)"
BASE_ERR = "that has live views"
ALIAS_ERR = "whose memory other tensors share"


def _outcome(lib, case, *args):
    try:
        out = case(lib, *args)
    except (RuntimeError, TypeError, ValueError) as e:
        return ("raise", str(e))
    return ("ok", out)


def _grad(t):
    return None if t.grad is None else t.grad.detach().numpy().astype(np.float64).tolist()


def _vals(t):
    return t.detach().numpy().astype(np.float64).tolist()


# The in-place writes under test: name -> fn(lib, tensor) writing it in place.
INPLACE = {
    "add_": lambda T, y: y.add_(1.5),
    "mul_": lambda T, y: y.mul_(3.0),
    "clamp_": lambda T, y: y.clamp_(-1.0, 2.5),
    "relu_": lambda T, y: y.relu_(),
    "zero_": lambda T, y: y.zero_(),
    "fill_": lambda T, y: y.fill_(0.25),
    "copy_": lambda T, y: y.copy_(T.full(tuple(y.shape), 7.0)),
    "setitem": lambda T, y: y.__setitem__(0, -4.0),
    "iadd": lambda T, y: y.__iadd__(2.0),
    "sigmoid_": lambda T, y: y.sigmoid_(),
}


def _flat(x) -> np.ndarray:
    """Nested lists of numbers (None: no gradient) as one float64 vector."""
    if x is None:
        return np.array([np.nan])
    if isinstance(x, (list, tuple)):
        parts = [_flat(v) for v in x]
        return np.concatenate(parts) if parts else np.zeros(0)
    return np.array([float(x)])


def _same(case, *args):
    """Run ``case`` on both libraries; assert the same outcome (values, or
    both raising with the same message start) and return it."""
    want = _outcome(real, case, *args)
    got = _outcome(vt, case, *args)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        np.testing.assert_allclose(_flat(got[1]), _flat(want[1]), rtol=1e-6, atol=1e-6)
    return got


# ------------------------------------------------- leaves that require grad
def _leaf(T, name):
    w = T.tensor([1.0, -2.0, 3.0], requires_grad=True)
    INPLACE[name](T, w)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_leaf_requiring_grad_refuses_inplace_as_torch(name):
    kind, msg = _same(_leaf, name)
    assert kind == "raise" and LEAF_ERR in msg


def _leaf_no_grad(T, name):
    w = T.tensor([1.0, -2.0, 3.0], requires_grad=True)
    with T.no_grad():
        INPLACE[name](T, w)
    (w * w).sum().backward()
    return [_vals(w), _grad(w)]


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_leaf_under_no_grad_writes_in_place_as_torch(name):
    kind, _ = _same(_leaf_no_grad, name)
    assert kind == "ok"


def _leaf_no_grad_after_forward(T, name):
    # the optimizer-step pattern done too early: the graph saved w
    w = T.tensor([1.0, -2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()
    with T.no_grad():
        INPLACE[name](T, w)
    loss.backward()
    return _grad(w)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_saved_leaf_written_under_no_grad_raises_at_backward(name):
    kind, msg = _same(_leaf_no_grad_after_forward, name)
    assert kind == "raise" and VERSION_ERR in msg


def test_version_error_names_op_shape_dtype_and_versions():
    w = vt.tensor([1.0, -2.0, 3.0], requires_grad=True)
    loss = (w * w).sum()
    with vt.no_grad():
        w.mul_(2.0)
        w.add_(1.0)
    with pytest.raises(RuntimeError) as e:
        loss.backward()
    msg = str(e.value)
    assert "input 0 of Mul" in msg and "float32 tensor of shape [3] on cpu:0" in msg
    assert "is at version 2; expected version 0" in msg
    assert w.grad is None


# ---------------------------------------------------------- intermediates
def _intermediate(T, name):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    INPLACE[name](T, y)
    (y * T.tensor([1.0, 2.0, 3.0])).sum().backward()
    return [_vals(y), _grad(x)]


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_inplace_on_intermediate_matches_torch(name):
    kind, _ = _same(_intermediate, name)
    assert kind == "ok"


def _intermediate_saved_no_grad(T, name):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    z = (y * y).sum()            # Mul reads y
    with T.no_grad():
        INPLACE[name](T, y)
    z.backward()
    return _grad(x)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_saved_intermediate_written_under_no_grad_raises_as_torch(name):
    kind, msg = _same(_intermediate_saved_no_grad, name)
    assert kind == "raise" and VERSION_ERR in msg


def _constant_saved(T, name):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    c = T.tensor([1.0, 2.0, 3.0])
    z = (x * c).sum()            # Mul reads c for x's gradient
    INPLACE[name](T, c)
    z.backward()
    return _grad(x)


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_saved_constant_written_raises_as_torch(name):
    kind, msg = _same(_constant_saved, name)
    assert kind == "raise" and VERSION_ERR in msg


def _constant_view_saved(T):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    c = T.tensor([1.0, 2.0, 3.0])
    z = (x * c).sum()
    c[1:].mul_(5.0)              # a view shares the version counter
    z.backward()
    return _grad(x)


def test_write_through_view_of_saved_constant_raises_as_torch():
    kind, msg = _same(_constant_view_saved)
    assert kind == "raise" and VERSION_ERR in msg


def _constant_not_saved(T):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    c = T.tensor([1.0, 2.0, 3.0])
    z = (x + c).sum()            # Add reads no value: torch saves nothing
    c.add_(1.0)
    z.backward()
    return _grad(x)


def test_write_to_input_of_add_is_allowed_as_torch():
    kind, out = _same(_constant_not_saved)
    assert kind == "ok" and out == [1.0, 1.0, 1.0]


def _resnet_block(T):
    x = T.tensor([[1.0, -2.0], [0.5, 3.0]], requires_grad=True)
    w = T.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    out = x @ w
    out += x                     # residual, in place on the matmul output
    out.relu_()
    (out * out).sum().backward()
    return [_vals(out), _grad(x), _grad(w)]


def test_residual_inplace_pattern_matches_torch():
    kind, _ = _same(_resnet_block)
    assert kind == "ok"


def test_saved_intermediate_modified_while_recording_gives_the_true_gradient():
    # torch raises here (its saved y was overwritten); dragon's graph kept
    # the value Mul used, so the gradient is the true one: d/dx sum((2x)^2)
    # = 8x, plus d/dx sum(2x + 1) = 2 from the in-place add's branch.
    def case(T):
        x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
        y = x * 2.0
        z = (y * y).sum()
        y.add_(1.0)
        (z + y.sum()).backward()
        return _grad(x)
    kind, msg = _outcome(real, case)
    assert kind == "raise" and VERSION_ERR in msg
    got = case(vt)
    np.testing.assert_allclose(got, 8 * np.array([0.5, -1.0, 2.0]) + 2.0, rtol=1e-6)


# ------------------------------------------------------------------ views
def _view_of_intermediate(T, name, view):
    x = T.tensor([[0.5, -1.0, 2.0], [1.0, 3.0, -0.5]], requires_grad=True)
    y = x * 2.0
    v = {"slice": lambda: y[1:], "select": lambda: y[0], "view": lambda: y.view(6),
         "transpose": lambda: y.t(), "narrow": lambda: y.narrow(1, 0, 2)}[view]()
    INPLACE[name](T, v)
    (y * y).sum().backward()
    return [_vals(y), _grad(x)]


@pytest.mark.parametrize("view", ["slice", "select", "view", "transpose", "narrow"])
@pytest.mark.parametrize("name", ["add_", "mul_", "clamp_", "relu_", "zero_", "fill_", "copy_",
                                  "setitem"])
def test_inplace_on_view_of_recorded_tensor_raises_where_torch_writes_the_base(name, view):
    assert _outcome(real, _view_of_intermediate, name, view)[0] == "ok"
    with pytest.raises(RuntimeError, match=r"in-place write to a view \(slice, view"):
        _view_of_intermediate(vt, name, view)


def test_inplace_on_base_with_live_recorded_view_raises():
    x = vt.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    v = y[1:]
    with pytest.raises(RuntimeError, match=BASE_ERR):
        y.mul_(3.0)
    with pytest.raises(RuntimeError, match=BASE_ERR):
        y[0] = 1.0
    with vt.no_grad(), pytest.raises(RuntimeError, match=BASE_ERR):
        y.zero_()
    # a copy-view refuses writes even under no_grad (they would not reach y)
    with vt.no_grad(), pytest.raises(RuntimeError, match=r"in-place write to a view"):
        v.zero_()
    assert _vals(y) == [1.0, -2.0, 4.0] and _vals(v) == [-2.0, 4.0]


def _base_after_view_is_gone(T):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    y = y.view(3, 1)             # the view replaces the base: nothing else sees it
    y.mul_(3.0)
    (y * y).sum().backward()
    return [_vals(y), _grad(x)]


def test_inplace_on_view_whose_base_is_dead_matches_torch():
    kind, _ = _same(_base_after_view_is_gone)
    assert kind == "ok"


def _view_outside_autograd(T):
    b = T.tensor([1.0, 2.0, 3.0, 4.0])
    w = T.tensor([2.0, 3.0], requires_grad=True)
    with T.no_grad():
        b[1:3].mul_(10.0)        # host views share memory: the base sees it
    loss = (b[1:3] * w).sum()
    loss.backward()
    return [_vals(b), _grad(w)]


def test_write_through_view_outside_autograd_reaches_base_as_torch():
    kind, out = _same(_view_outside_autograd)
    assert kind == "ok" and out[0] == [1.0, 20.0, 30.0, 4.0]


def test_recorded_inplace_on_aliased_memory_raises():
    x = vt.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    d = y.detach()               # shares y's memory
    with pytest.raises(RuntimeError, match=ALIAS_ERR):
        y.add_(1.0)
    with pytest.raises(RuntimeError, match=ALIAS_ERR):
        y[0] = 3.0
    assert _vals(d) == [1.0, -2.0, 4.0]
    # a plain tensor written with a value that requires grad, while a
    # view taken outside autograd still shares its memory
    b = vt.tensor([1.0, 2.0, 3.0])
    v = b[1:]
    with pytest.raises(RuntimeError, match=ALIAS_ERR):
        b.add_(x)
    del v, d
    y.add_(1.0)                  # the aliases are gone: allowed
    assert _vals(y) == [2.0, -1.0, 5.0]


# ------------------------------------------------------------ grad modes
def _inplace_under_no_grad_then_new_graph(T, name):
    x = T.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = x * 2.0
    with T.no_grad():
        INPLACE[name](T, y)
    (y * y).sum().backward()     # y's history is x * 2; its value the written one
    return [_vals(y), _grad(x)]


@pytest.mark.parametrize("name", sorted(INPLACE))
def test_no_grad_write_then_use_matches_torch(name):
    kind, _ = _same(_inplace_under_no_grad_then_new_graph, name)
    assert kind == "ok"


# ------------------------------------------------------------- optimizers
def _training(T):
    T.manual_seed(0)
    w = T.tensor([[0.5, -1.0], [2.0, 0.25]], requires_grad=True)
    b = T.tensor([0.1, -0.2], requires_grad=True)
    opt = T.optim.SGD([w, b], lr=0.1, momentum=0.9)
    x = T.tensor([[1.0, 2.0], [-1.0, 0.5], [0.0, 3.0]])
    losses = []
    for _ in range(3):
        opt.zero_grad()
        loss = ((x @ w + b) ** 2).mean()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses + _vals(w) + _vals(b)


def test_optimizer_steps_write_parameters_without_breaking_training():
    kind, _ = _same(_training)
    assert kind == "ok"


def test_backward_through_a_graph_whose_parameters_an_optimizer_stepped_raises():
    w = vt.tensor([1.0, 2.0], requires_grad=True)
    opt = vt.optim.SGD([w], lr=0.1)
    loss = (w * w).sum()
    loss.backward()
    opt.step()
    with pytest.raises(RuntimeError, match=VERSION_ERR):
        loss.backward()


# --------------------------------------------------------------- out=
def _out_cases(T, which):
    if which == "zeros_int":
        o = T.empty(3, dtype=T.int64)
        T.zeros(3, out=o)
        return _vals(o)
    if which == "arange_float":
        o = T.empty(5)
        r = T.arange(5, out=o)
        assert r is o
        return _vals(o)
    if which == "ones_resize":
        o = T.empty(2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            T.ones(4, out=o)
        return _vals(o)
    if which == "full_view_sees":
        o = T.zeros(4)
        v = o[:2]
        T.full((4,), 2.5, out=o)
        return _vals(v)
    if which == "dtype_mismatch":
        T.zeros(3, dtype=T.int64, out=T.empty(3))
    if which == "requires_grad":
        T.zeros(3, out=T.empty(3, requires_grad=True))
    if which == "saved":
        x = T.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = x * 2.0
        z = (y * y).sum()
        with T.no_grad():
            T.zeros(3, out=y)
        z.backward()
    if which == "eye":
        o = T.empty(2, 2)
        T.eye(2, out=o)
        return _vals(o)
    return None


@pytest.mark.parametrize("which", ["zeros_int", "arange_float", "ones_resize", "full_view_sees",
                                   "dtype_mismatch", "requires_grad", "saved", "eye"])
def test_out_argument_writes_the_tensor_as_torch(which):
    kind, msg = _same(_out_cases, which)
    if which in ("dtype_mismatch",):
        assert kind == "raise" and "does not match dtype of out parameter" in msg
    elif which == "requires_grad":
        assert kind == "raise" and "out=... arguments don't support automatic " \
                                   "differentiation" in msg
    elif which == "saved":
        assert kind == "raise" and VERSION_ERR in msg
    else:
        assert kind == "ok"


# ------------------------------------------------------------ compiled
def test_compiled_inplace_on_intermediates_matches_eager():
    def f(x, w):
        y = x * w
        y[0] = 5.0
        y.relu_()
        y += 1.0
        return y.sum()
    x = vt.tensor([[1.0, -2.0, 3.0], [-1.0, 0.5, 2.0]])
    w = vt.tensor([[2.0, 1.0, -1.0], [3.0, 2.0, 1.0]])
    eager = float(f(x, w))
    cf = vt.compile(f)
    assert float(cf(x, w)) == eager == float(f(real.tensor(x.numpy()), real.tensor(w.numpy())))
    assert float(cf(x, w)) == eager


def test_compiled_inplace_on_view_raises_at_trace_time():
    def f(x, w):
        y = x * w
        y[0].mul_(2.0)
        return y.sum()
    x = vt.ones(2, 3)
    w = vt.ones(2, 3)
    with pytest.raises(RuntimeError, match=r"in-place write to a view"):
        vt.compile(f)(x, w)


def test_compiled_inplace_on_captured_buffer_updates_it_each_run():
    buf = vt.zeros(3)

    def f(x):
        buf.add_(x)
        return buf * 1.0
    cf = vt.compile(f)
    x = vt.tensor([1.0, 2.0, 3.0])
    cf(x)
    out = cf(x)
    assert _vals(buf) == [2.0, 4.0, 6.0] and _vals(out) == [2.0, 4.0, 6.0]


def test_inplace_on_view_of_a_temporary_view_still_raises():
    # the middle view dies at once; the write still would not reach y
    x = vt.tensor([[0.5, -1.0], [2.0, 3.0]], requires_grad=True)
    y = x * 2.0
    with pytest.raises(RuntimeError, match=r"in-place write to a view"):
        y.view(-1)[:2].zero_()
    assert _vals(y) == [[1.0, -2.0], [4.0, 6.0]]


def test_data_assignment_before_backward_raises_where_torch_is_silent():
    def case(T):
        w = T.tensor([1.0, 2.0], requires_grad=True)
        loss = (w * w).sum()
        w.data = T.tensor([10.0, 20.0])
        loss.backward()
        return _grad(w)
    # torch differentiates at the new value: 2 * [10, 20]
    assert _outcome(real, case) == ("ok", [20.0, 40.0])
    with pytest.raises(RuntimeError, match=r"input 0 of Mul .*version 1; expected version 0"):
        case(vt)
