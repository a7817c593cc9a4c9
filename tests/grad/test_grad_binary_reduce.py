"""Gradient rules of the broadcasting binary ops (Add, Sub, Mul, Div, Pow,
Maximum, Minimum, Where), the reductions and MatMul, checked against
central finite differences in float64 (``OpCase.check_grad``), plus
higher-order and end-to-end checks: a third-order polynomial through three
nested tapes and a gradient-penalty (WGAN-GP style) training step.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from dragon_sdk.testing import OpCase

import dragon_core as dg

# ------------------------------------------------------------------ helpers

#: Operand shape pairs of the broadcasting binary ops.
BINARY_SHAPES = [
    ((), ()),
    ((2, 3), (2, 3)),
    ((2, 3), (3,)),
    ((2, 1), (1, 3)),
    ((), (2, 3)),
    ((2, 3), ()),
    ((2, 1, 3), (4, 1)),
    ((0, 3), (3,)),          # empty result
    ((1, 3), (0, 1)),        # empty result, a stretched onto an empty axis
]


def _ids(params):
    return ["_".join("x".join(map(str, s)) or "scalar" for s in p) for p in params]


def _uniform(seed, shape, low, high):
    return np.random.default_rng(seed).uniform(low, high, shape)


def _apart(seed, sa, sb, gap=0.05):
    """Operands whose broadcast pairs differ by more than ``gap`` (away
    from the ties of Maximum/Minimum)."""
    rng = np.random.default_rng(seed)
    while True:
        a = rng.uniform(-2, 2, sa)
        b = rng.uniform(-2, 2, sb)
        if np.all(np.abs(a - b) > gap):
            return a, b


def _case(op, inputs, **attrs):
    return OpCase.of(op, [np.asarray(x, dtype=np.float64) for x in inputs],
                     attrs=attrs)


def _grads(fn, *arrays):
    """First-order gradients of ``sum(fn(*tensors))`` with one tape."""
    ts = [dg.tensor(np.asarray(a, dtype=np.float64)) for a in arrays]
    with dg.GradientTape() as tape:
        tape.watch(ts)
        y = dg.ops.sum(fn(*ts))
    return [None if g is None else g.numpy().copy()
            for g in tape.gradient(y, ts)]


def _check_hvp(f, arrays, seed=0, eps=1e-6, rtol=1e-5, atol=1e-7):
    """Check the Hessian-vector product of ``sum(f(*xs))`` (through nested
    tapes) against central finite differences of ``<grad, v>``.

    Unlike ``OpCase.check_grad(order=2)``, whose loss is linear in the op's
    output, ``f`` can square the output, so the output gradient a rule
    receives depends on the inputs and the rule itself is differentiated.
    """
    rng = np.random.default_rng(seed)
    base = [np.asarray(a, dtype=np.float64) for a in arrays]
    probes = [rng.standard_normal(a.shape) for a in base]

    def hvp(arrs, analytic):
        ts = [dg.tensor(a) for a in arrs]
        with dg.GradientTape() as outer:
            outer.watch(ts)
            with dg.GradientTape() as inner:
                inner.watch(ts)
                value = dg.ops.sum(f(*ts))
            grads = inner.gradient(value, ts, unconnected_gradients="zero")
            h = None
            for g, v in zip(grads, probes):
                term = dg.ops.sum(g * dg.tensor(v))
                h = term if h is None else h + term
        if not analytic:
            return float(h.item())
        return [np.zeros(a.shape) if g is None else g.numpy().copy()
                for g in outer.gradient(h, ts)]

    got = hvp(base, True)
    for i, a in enumerate(base):
        numeric = np.zeros(a.shape)
        for j in range(a.size):
            plus = [b.copy() for b in base]
            minus = [b.copy() for b in base]
            plus[i].reshape(-1)[j] += eps
            minus[i].reshape(-1)[j] -= eps
            numeric.reshape(-1)[j] = (hvp(plus, False) - hvp(minus, False)) / (2 * eps)
        np.testing.assert_allclose(got[i], numeric, rtol=rtol, atol=atol,
                                   err_msg=f"Hessian-vector product, input {i}")


# --------------------------------------------------- Add, Sub, Mul, Div, Pow


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div"])
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=_ids(BINARY_SHAPES))
def test_arithmetic_first_order(op, shapes):
    sa, sb = shapes
    a = _uniform(1, sa, -2, 2)
    b = _uniform(2, sb, 0.5, 2) * np.where(_uniform(3, sb, 0, 1) < 0.5, -1, 1)
    _case(op, [a, b]).check_grad()


#: Operand shape pairs of the second-order checks.
SECOND_ORDER_SHAPES = [((), ()), ((2, 3), (3,)), ((2, 1), (1, 3)), ((), (2, 3))]


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Pow"])
@pytest.mark.parametrize("shapes", SECOND_ORDER_SHAPES, ids=_ids(SECOND_ORDER_SHAPES))
def test_binary_second_order(op, shapes):
    sa, sb = shapes
    a = _uniform(4, sa, 0.5, 2)
    b = _uniform(5, sb, 0.5, 2)
    if op != "Pow":
        b = b * np.where(_uniform(6, sb, 0, 1) < 0.5, -1, 1)
    _case(op, [a, b]).check_grad(order=2)


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
@pytest.mark.parametrize("shapes", SECOND_ORDER_SHAPES, ids=_ids(SECOND_ORDER_SHAPES))
def test_binary_second_order_nonlinear(op, shapes):
    """HVP of sum(c * op(a, b)^2): the rules are differentiated with an
    output gradient that depends on the inputs (and unbroadcast with it)."""
    a, b = _apart(18, *shapes)
    if op in ("div", "pow"):
        a, b = np.abs(a) + 0.5, np.abs(b) + 0.5
    c = dg.tensor(_uniform(19, np.broadcast_shapes(*shapes), -1, 1))
    fn = getattr(dg.ops, op)

    def f(x, y):
        z = fn(x, y)
        return c * z * z

    _check_hvp(f, [a, b])


@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=_ids(BINARY_SHAPES))
def test_pow_first_order(shapes):
    sa, sb = shapes
    _case("Pow", [_uniform(7, sa, 0.5, 2), _uniform(8, sb, -1.5, 1.5)]).check_grad()


def test_pow_nonpositive_base():
    """For a <= 0 the base gradient is b * a**(b-1) (checked against finite
    differences with integer exponents); the exponent gradient is 0 and
    finite, to second order too."""
    a = np.array([[-1.5, -0.5, 0.0], [0.0, 0.7, -2.0]])
    b = np.array([2.0, 3.0, 1.0])
    case = _case("Pow", [a, b])
    case.check_grad(wrt=[0])
    case.check_grad(wrt=[0], order=2)
    da, db = _grads(lambda x, y: x ** y, a, b)
    np.testing.assert_allclose(da, b * a ** (b - 1))
    # Only the a > 0 entry (0.7 ** 3 * log 0.7) contributes to db.
    np.testing.assert_allclose(db, [0.0, 0.7 ** 3 * np.log(0.7), 0.0])
    # b == 0: a**0 is constant, even at a == 0 (no 0 * inf), to second order.
    zero_exp = _case("Pow", [np.array([0.0, -1.0, 2.0]), np.array([0.0, 0.0, 0.0])])
    zero_exp.check_grad(wrt=[0], order=2)
    da, _ = _grads(lambda x, y: x ** y, np.array([0.0, -1.0]), np.array([0.0, 0.0]))
    np.testing.assert_array_equal(da, [0.0, 0.0])
    # A 0 base with an exponent below 1: the derivative is infinite, not NaN.
    da, db = _grads(lambda x, y: x ** y, np.array([0.0]), np.array([0.5]))
    assert np.isposinf(da[0]) and db[0] == 0.0


def test_pow_scalar_exponent():
    """``x ** 2.0`` (a Python scalar exponent) differentiates to 2x."""
    x = np.array([-1.0, 0.0, 3.0])
    (dx,) = _grads(lambda t: t ** 2.0, x)
    np.testing.assert_allclose(dx, 2 * x)


# ------------------------------------------------------- Maximum, Minimum


@pytest.mark.parametrize("op", ["Maximum", "Minimum"])
@pytest.mark.parametrize("shapes", BINARY_SHAPES, ids=_ids(BINARY_SHAPES))
def test_extremum_first_order(op, shapes):
    a, b = _apart(9, *shapes)
    _case(op, [a, b]).check_grad()


@pytest.mark.parametrize("op, fn", [("Maximum", dg.ops.maximum),
                                    ("Minimum", dg.ops.minimum)])
def test_extremum_ties_split(op, fn):
    """On ties each operand gets half of the gradient; a broadcast operand
    sums its shares."""
    a = np.array([[1.0, 2.0, 3.0], [0.0, 2.0, 5.0]])
    b = np.array([2.0, 2.0, 2.0])
    da, db = _grads(fn, a, b)
    pick_a = (a > b) if op == "Maximum" else (a < b)
    want_a = np.where(a == b, 0.5, pick_a.astype(float))
    np.testing.assert_array_equal(da, want_a)
    np.testing.assert_array_equal(db, (1.0 - want_a).sum(axis=0))


# ------------------------------------------------------------------- Where


WHERE_SHAPES = [
    ((), (), ()),
    ((2, 3), (2, 3), (2, 3)),
    ((2, 3), (3,), ()),
    ((3,), (2, 1), (1, 3)),
    ((2, 1), (), (2, 3)),
    ((0, 3), (3,), (1, 3)),
]


@pytest.mark.parametrize("shapes", WHERE_SHAPES, ids=_ids(WHERE_SHAPES))
def test_where_first_order(shapes):
    sc, sx, sy = shapes
    cond = np.random.default_rng(10).random(sc) < 0.5
    case = OpCase.of("Where", [np.asarray(cond), _uniform(11, sx, -2, 2),
                               _uniform(12, sy, -2, 2)])
    case.check_grad()
    case.check_grad(order=2)


@pytest.mark.parametrize("shapes", WHERE_SHAPES[1:5], ids=_ids(WHERE_SHAPES[1:5]))
def test_where_second_order_nonlinear(shapes):
    sc, sx, sy = shapes
    cond = dg.tensor(np.random.default_rng(24).random(sc) < 0.5)

    def f(x, y):
        z = dg.ops.where(cond, x, y)
        return z * z * x

    _check_hvp(f, [_uniform(25, sx, -2, 2), _uniform(26, sy, -2, 2)])


def test_where_masks_gradient():
    cond = np.array([[True, False, True], [False, False, True]])
    x, y = np.ones((2, 3)), np.ones(3)
    ts = [dg.tensor(x), dg.tensor(y)]
    with dg.GradientTape() as tape:
        tape.watch(ts)
        out = dg.ops.sum(dg.ops.where(dg.tensor(cond), ts[0], ts[1]))
    dx, dy = tape.gradient(out, ts)
    np.testing.assert_array_equal(dx.numpy(), cond.astype(float))
    np.testing.assert_array_equal(dy.numpy(), (~cond).sum(axis=0))


# -------------------------------------------------------------- reductions

#: Attribute sets over a rank-3 input.
AXES_ATTRS = [
    {},
    {"keepdims": True},
    {"axes": []},
    {"axes": [], "keepdims": True},
    {"axes": [0]},
    {"axes": [-1]},
    {"axes": [1], "keepdims": True},
    {"axes": [2, 0]},
    {"axes": [-3, -1], "keepdims": True},
    {"axes": [0, 1, 2]},
]

REDUCTIONS = ["Sum", "Mean", "Prod", "Max", "Min", "Var", "Std", "LogSumExp"]


def _reduction_input(op, shape, seed=13):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if op in ("Max", "Min"):
        # Distinct values, at least 0.1 apart: no ties.
        return (rng.permutation(n) * 0.1 + rng.uniform(0, 0.01, n)).reshape(shape)
    if op == "Prod":
        return rng.uniform(0.5, 1.5, shape) * np.where(rng.random(shape) < 0.5, -1, 1)
    return rng.uniform(-2, 2, shape)


def _attrs_id(attrs):
    return ",".join(f"{k}={v}" for k, v in attrs.items()) or "default"


@pytest.mark.parametrize("attrs", AXES_ATTRS, ids=[_attrs_id(a) for a in AXES_ATTRS])
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reduction_first_order(op, attrs):
    # With axis=[] Std is a one-element standard deviation, 0 everywhere:
    # the chosen subgradient (0) is also the finite difference.
    _case(op, [_reduction_input(op, (2, 3, 4))], **attrs).check_grad()


@pytest.mark.parametrize("op", ["Var", "Std"])
@pytest.mark.parametrize("attrs", [{"ddof": 1}, {"axes": [1], "ddof": 1},
                                   {"axes": [0, 2], "keepdims": True, "ddof": 2}],
                         ids=_attrs_id)
def test_var_std_ddof(op, attrs):
    _case(op, [_reduction_input(op, (3, 3, 4))], **attrs).check_grad()


@pytest.mark.parametrize("op", REDUCTIONS)
@pytest.mark.parametrize("attrs", [{}, {"axes": []}, {"keepdims": True}], ids=_attrs_id)
def test_reduction_scalar_input(op, attrs):
    _case(op, [np.array(0.7)], **attrs).check_grad()


_EMPTY_CASES = [
    (op, attrs) for op in REDUCTIONS
    for attrs in [{}, {"axes": [1], "keepdims": True}, {"axes": [0]}, {"axes": [2, 0]}]
    # A zero-size Max/Min reduction is an error (tested in tests/ops).
    if not (op in ("Max", "Min") and (attrs.get("axes") is None or 1 in attrs["axes"]))]


@pytest.mark.parametrize("op, attrs", _EMPTY_CASES,
                         ids=[f"{op}-{_attrs_id(a)}" for op, a in _EMPTY_CASES])
def test_reduction_empty_input(op, attrs):
    """The gradient of an empty input is an empty tensor of its shape."""
    x = np.zeros((2, 0, 3))
    kw = dg.plugin_api.py_attrs(op, attrs)  # schema names -> Python names
    (dx,) = _grads(lambda t: getattr(dg.ops, op.lower())(t, **kw), x)
    assert dx.shape == x.shape
    _case(op, [x], **attrs).check_grad()


@pytest.mark.parametrize("op", ["Sum", "Mean", "Var", "LogSumExp", "Prod"])
@pytest.mark.parametrize("attrs", [{}, {"axes": [1]}, {"axes": [2, 0], "keepdims": True}],
                         ids=_attrs_id)
def test_reduction_second_order(op, attrs):
    _case(op, [_reduction_input(op, (2, 3, 2))], **attrs).check_grad(order=2)


_NONLINEAR_CASES = [
    (op, attrs) for op in REDUCTIONS
    for attrs in [{}, {"axes": [1]}, {"axes": [2, 0], "keepdims": True}, {"axes": []}]
    # A one-element Std is 0 everywhere: not differentiable there.
    if not (op == "Std" and attrs.get("axes") == [])]


@pytest.mark.parametrize("op, attrs", _NONLINEAR_CASES,
                         ids=[f"{op}-{_attrs_id(a)}" for op, a in _NONLINEAR_CASES])
def test_reduction_second_order_nonlinear(op, attrs):
    """HVP of sum(c * reduce(x)^2), which differentiates each rule with an
    output gradient depending on x (nontrivial even for Sum and Mean)."""
    x = _reduction_input(op, (2, 3, 2))
    fn = getattr(dg.ops, op.lower())
    attrs = dg.plugin_api.py_attrs(op, attrs)  # schema names -> Python names
    shape = fn(dg.tensor(x), **attrs).shape
    c = dg.tensor(_uniform(21, shape, -1, 1))

    def f(t):
        y = fn(t, **attrs)
        return c * y * y

    _check_hvp(f, [x])


def test_std_second_order():
    _case("Std", [_reduction_input("Std", (2, 3, 2))], axes=[1], ddof=1).check_grad(order=2)


def test_prod_with_zeros():
    """Groups with zero, one, two and three zeros: exact to second order."""
    x = np.array([[0.5, -1.2, 0.8, 1.5],
                  [0.0, 1.3, -0.7, 0.9],
                  [0.0, 1.1, 0.0, -1.4],
                  [0.0, 0.0, 0.0, 1.2]])
    case = _case("Prod", [x], axes=[1])
    case.check_grad()
    case.check_grad(order=2)
    _case("Prod", [x], axes=[0], keepdims=True).check_grad(order=2)
    _case("Prod", [x]).check_grad()


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_extremum_reduction_ties(op):
    """Tied extrema share the gradient evenly."""
    x = np.array([[1.0, 3.0, 3.0, -1.0], [-1.0, 2.0, -1.0, -1.0]])
    (dx,) = _grads(lambda t: getattr(dg.ops, op.lower())(t, axis=[1]), x)
    ext = x.max(axis=1, keepdims=True) if op == "Max" else x.min(axis=1, keepdims=True)
    hit = (x == ext).astype(float)
    np.testing.assert_allclose(dx, hit / hit.sum(axis=1, keepdims=True))


def test_logsumexp_all_minus_inf():
    """A group of -inf values gets a zero gradient, not NaN."""
    x = np.array([[-np.inf, -np.inf], [0.0, 1.0]])
    (dx,) = _grads(lambda t: dg.ops.logsumexp(t, axis=[1]), x)
    e = np.exp([0.0, 1.0])
    np.testing.assert_allclose(dx, [[0.0, 0.0], e / e.sum()])


def test_std_constant_group():
    """Where the standard deviation is 0 the gradient is 0 (not NaN)."""
    x = np.array([[2.0, 2.0, 2.0], [1.0, 2.0, 4.0]])
    (dx,) = _grads(lambda t: dg.ops.std(t, axis=[1]), x)
    c = x[1] - x[1].mean()
    np.testing.assert_allclose(dx, [[0.0, 0.0, 0.0], c / (3 * x[1].std())])


# ------------------------------------------------------------------- MatMul

#: (a shape, b shape, attrs); shapes are as stored (before the flags).
MATMUL_CASES = [
    ((3,), (3,), {}),
    ((3,), (3, 4), {}),
    ((2, 3), (3,), {}),
    ((2, 3), (3, 4), {}),
    ((3, 2), (3, 4), {"transpose_a": True}),
    ((2, 3), (4, 3), {"transpose_b": True}),
    ((3, 2), (4, 3), {"transpose_a": True, "transpose_b": True}),
    ((3,), (4, 3), {"transpose_a": True, "transpose_b": True}),   # a's flag ignored
    ((3, 2), (3,), {"transpose_a": True, "transpose_b": True}),   # b's flag ignored
    ((2, 2, 3), (3, 4), {}),
    ((3,), (2, 3, 4), {}),
    ((2, 2, 3), (3,), {}),
    ((2, 1, 2, 3), (3, 3, 2), {}),                               # batch broadcast
    ((1, 3, 2), (2, 1, 4, 3), {"transpose_a": True, "transpose_b": True}),
    ((2, 3, 2), (4, 3), {"transpose_a": True, "transpose_b": True}),
    ((0, 3), (3, 2), {}),                                        # empty rows
    ((2, 0), (0, 3), {}),                                        # empty inner dim
    ((2, 0, 3), (3,), {}),                                       # empty batch
]


def _matmul_id(c):
    sa, sb, attrs = c
    flags = "".join(k[-1] for k in attrs)
    return f"{'x'.join(map(str, sa))}@{'x'.join(map(str, sb))}" + (f"-t{flags}" if flags else "")


@pytest.mark.parametrize("sa, sb, attrs", MATMUL_CASES, ids=[_matmul_id(c) for c in MATMUL_CASES])
def test_matmul_first_order(sa, sb, attrs):
    _case("MatMul", [_uniform(14, sa, -1, 1), _uniform(15, sb, -1, 1)], **attrs).check_grad()


@pytest.mark.parametrize("sa, sb, attrs", [MATMUL_CASES[i] for i in (0, 1, 2, 6, 12, 13)],
                         ids=[_matmul_id(MATMUL_CASES[i]) for i in (0, 1, 2, 6, 12, 13)])
def test_matmul_second_order(sa, sb, attrs):
    _case("MatMul", [_uniform(16, sa, -1, 1), _uniform(17, sb, -1, 1)],
          **attrs).check_grad(order=2)


@pytest.mark.parametrize("sa, sb, attrs", [MATMUL_CASES[i] for i in (0, 1, 2, 7, 12, 13)],
                         ids=[_matmul_id(MATMUL_CASES[i]) for i in (0, 1, 2, 7, 12, 13)])
def test_matmul_second_order_nonlinear(sa, sb, attrs):
    """HVP of sum((a @ b)^2), with 1-D operands and broadcast batches."""
    def f(a, b):
        y = dg.ops.matmul(a, b, **attrs)
        return y * y

    _check_hvp(f, [_uniform(22, sa, -1, 1), _uniform(23, sb, -1, 1)])


# ------------------------------------------------------ higher order, e2e


def _nested_grads(f, xs, wrts):
    """Differentiate ``f(*xs)`` once per entry of ``wrts`` (an index into
    ``xs``), each derivative through its own nested tape, innermost first.

    Returns the list of successive derivatives (summed to a scalar before
    the next differentiation).
    """
    ts = [dg.tensor(np.asarray(x, dtype=np.float64)) for x in xs]
    with contextlib.ExitStack() as stack:
        # Entered outermost first; each tape stops when it has differentiated.
        tapes = [stack.enter_context(dg.GradientTape()) for _ in wrts]
        for tape in tapes:
            tape.watch(ts)
        value = dg.ops.sum(f(*ts))
        out = []
        for tape, i in zip(reversed(tapes), wrts):
            g = tape.gradient(value, ts[i], unconnected_gradients="zero")
            out.append(g.numpy().copy())
            value = dg.ops.sum(g)
    return out


def test_third_order_polynomial():
    """f = x*x*y - x + y: d/dx = 2xy - 1, d2/dx2 = 2y, d3/dx2dy = 2, and
    d3/dx3 = 0, through three nested tapes."""
    x = np.array([0.5, -1.5, 2.0])
    y = np.array([1.5, 0.25, -3.0])

    def f(a, b):
        return a * a * b - a + b

    gx, gxx, gxxy = _nested_grads(f, [x, y], [0, 0, 1])
    np.testing.assert_allclose(gx, 2 * x * y - 1)
    np.testing.assert_allclose(gxx, 2 * y)
    np.testing.assert_allclose(gxxy, 2 * np.ones_like(y))
    *_, gxxx = _nested_grads(f, [x, y], [0, 0, 0])
    np.testing.assert_allclose(gxxx, np.zeros_like(x))
    # d/dy (x^2 - ... ) chain in the other order: d/dy, d/dx, d/dx = 2.
    gy, gyx, gyxx = _nested_grads(f, [x, y], [1, 0, 0])
    np.testing.assert_allclose(gy, x * x + 1)
    np.testing.assert_allclose(gyx, 2 * x)
    np.testing.assert_allclose(gyxx, 2 * np.ones_like(x))


def test_fourth_order_product_with_broadcast():
    """x (2, 3) times itself with a broadcast row: f = (x*x - c) * x * x;
    the derivatives of x^4 - c x^2 up to the fourth."""
    x = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]])
    c = np.array([1.0, 2.0, -0.5])
    out = _nested_grads(lambda a, b: (a * a - b) * a * a, [x, c], [0, 0, 0, 0])
    np.testing.assert_allclose(out[0], 4 * x ** 3 - 2 * c * x)
    np.testing.assert_allclose(out[1], 12 * x ** 2 - 2 * c)
    np.testing.assert_allclose(out[2], 24 * x)
    np.testing.assert_allclose(out[3], 24 * np.ones_like(x))


def _critic_loss(x, w1, w2, lam, with_grads):
    """sum(D(x)) + lam * mean((||dD/dx_i|| - 1)^2) with
    D(x) = tanh(x @ W1) @ w2; returns the loss and, when asked, its
    gradients with respect to W1 and w2."""
    xt, w1t, w2t = (dg.tensor(a) for a in (x, w1, w2))
    with dg.GradientTape() as outer:
        outer.watch([w1t, w2t])
        with dg.GradientTape() as inner:
            inner.watch(xt)
            scores = dg.ops.matmul(dg.ops.tanh(dg.ops.matmul(xt, w1t)), w2t)
            d = dg.ops.sum(scores)
        gx = inner.gradient(d, xt)                    # per-sample dD/dx_i
        norms = dg.ops.sum(gx * gx, axis=[1]) ** 0.5
        penalty = dg.ops.mean((norms - 1.0) ** 2.0)
        loss = d + lam * penalty
    value = float(loss.item())
    if not with_grads:
        return value
    gw1, gw2 = outer.gradient(loss, [w1t, w2t])
    return value, gw1.numpy().copy(), gw2.numpy().copy()


def test_gradient_penalty_training_step():
    """A WGAN-GP style step: the penalised loss is differentiated through a
    nested tape, its parameter gradients match finite differences of the
    whole loss, and one SGD step lowers it."""
    rng = np.random.default_rng(20)
    x = rng.standard_normal((4, 3))
    w1 = rng.standard_normal((3, 5)) * 0.5
    w2 = rng.standard_normal(5) * 0.5
    lam = 10.0
    loss, gw1, gw2 = _critic_loss(x, w1, w2, lam, with_grads=True)

    eps = 1e-6
    for param, grad, name in ((w1, gw1, "W1"), (w2, gw2, "w2")):
        numeric = np.zeros_like(param)
        for j in range(param.size):
            plus, minus = param.copy(), param.copy()
            plus.reshape(-1)[j] += eps
            minus.reshape(-1)[j] -= eps
            args_p = (plus, w2) if name == "W1" else (w1, plus)
            args_m = (minus, w2) if name == "W1" else (w1, minus)
            numeric.reshape(-1)[j] = (_critic_loss(x, *args_p, lam, False)
                                      - _critic_loss(x, *args_m, lam, False)) / (2 * eps)
        np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-7,
                                   err_msg=f"gradient of the penalised loss w.r.t. {name}")

    lr = 1e-3
    stepped = _critic_loss(x, w1 - lr * gw1, w2 - lr * gw2, lam, with_grads=False)
    assert stepped < loss
    # First-order prediction of the decrease.
    predicted = lr * (np.sum(gw1 * gw1) + np.sum(gw2 * gw2))
    np.testing.assert_allclose(loss - stepped, predicted, rtol=0.05)


def test_backward_skips_gradients_nobody_reads(monkeypatch):
    """x @ w with only w watched / requiring grad: the rule computes dW and
    not dX (PyTorch's needs_input_grad), so one MatMul runs in backward."""
    import numpy as np
    import dragon_core as dg
    x = dg.tensor(np.ones((4, 3), np.float32))
    w = dg.tensor(np.ones((3, 2), np.float32))
    calls = []
    real = dg.ops.matmul

    def counting(*a, **k):
        calls.append(1)
        return real(*a, **k)
    with dg.GradientTape() as tape:
        tape.watch(w)
        y = (x @ w).sum()
    monkeypatch.setattr(dg.ops, "matmul", counting)
    with pytest.warns(UserWarning, match="never watched"):   # x is not watched
        gx, gw = tape.gradient(y, [x, w])
    assert gx is None and gw is not None and len(calls) == 1
    np.testing.assert_allclose(gw.numpy(), np.full((3, 2), 4.0))
    monkeypatch.setattr(dg.ops, "matmul", real)
    w.requires_grad = True
    y = (x @ w).sum()
    calls.clear()
    monkeypatch.setattr(dg.ops, "matmul", counting)
    y.backward()
    assert len(calls) == 1 and x.grad is None
    np.testing.assert_allclose(w.grad.numpy(), np.full((3, 2), 4.0))
