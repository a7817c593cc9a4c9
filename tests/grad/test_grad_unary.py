"""Gradient rules of the unary ops, Softmax / LogSoftmax and Cast
(``dragon_core/_grads/unary.py``), checked against central finite
differences in float64 (first order, and second order through nested tapes).

Inputs stay away from the points where an op is not differentiable (0 for
Abs/Relu/LeakyRelu/Elu, the Clip bounds, the Softplus threshold).
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

import dragon_core as dg
from dragon_sdk.testing import OpCase

SHAPES = [(), (3,), (2, 3)]


# ------------------------------------------------------------ input makers


def _uniform(low, high):
    def make(rng, shape):
        return rng.uniform(low, high, shape)
    return make


def _nonzero(low=0.2, high=2.0):
    """|x| in [low, high] with a random sign (away from a kink at 0)."""
    def make(rng, shape):
        sign = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
        return rng.uniform(low, high, shape) * sign
    return make


def _avoiding(*kinks, low=-2.0, high=2.0, gap=0.1):
    """Uniform in [low, high] but at least ``gap`` from every kink."""
    def make(rng, shape):
        x = np.asarray(rng.uniform(low, high, shape))
        while True:
            near = np.zeros(x.shape, dtype=bool)
            for k in kinks:
                near |= np.abs(x - k) < gap
            if not near.any():
                return x
            x = np.where(near, rng.uniform(low, high, shape), x)
    return make


ANY = _uniform(-2.0, 2.0)
POSITIVE = _uniform(0.5, 2.0)

# (op, attrs, input maker): every op and attribute variant checked at first
# order on SHAPES.
UNARY = [
    ("Abs", {}, _nonzero()),
    ("Exp", {}, ANY),
    ("Log", {}, POSITIVE),
    ("Log1p", {}, _uniform(-0.5, 2.0)),
    ("Sqrt", {}, POSITIVE),
    ("Rsqrt", {}, POSITIVE),
    ("Square", {}, ANY),
    ("Reciprocal", {}, _nonzero(0.5, 2.0)),
    ("Sin", {}, _uniform(-3.0, 3.0)),
    ("Cos", {}, _uniform(-3.0, 3.0)),
    ("Tanh", {}, ANY),
    ("Sigmoid", {}, _uniform(-4.0, 4.0)),
    ("Relu", {}, _nonzero()),
    ("LeakyRelu", {}, _nonzero()),
    ("LeakyRelu", {"alpha": 0.2}, _nonzero()),
    ("Elu", {}, _nonzero()),
    ("Elu", {"alpha": 0.5}, _nonzero()),
    ("Gelu", {}, _uniform(-3.0, 3.0)),
    ("Gelu", {"approximate": "tanh"}, _uniform(-3.0, 3.0)),
    ("Gelu", {"approximate": "none"}, _uniform(-0.15, 0.15)),  # series branch
    ("Softplus", {}, ANY),
    ("Softplus", {"beta": 2.0}, ANY),
    ("Softplus", {"beta": -1.5}, ANY),
    # The kink at beta * x == threshold is x == 0.5; about half the points
    # lie above it, where the op returns x.
    ("Softplus", {"beta": 2.0, "threshold": 1.0}, _avoiding(0.5, low=-1.0, high=2.0)),
    ("Clip", {"min": -0.5}, _avoiding(-0.5)),
    ("Clip", {"max": 0.8}, _avoiding(0.8)),
    ("Clip", {"min": -0.5, "max": 0.8}, _avoiding(-0.5, 0.8)),
    ("Clip", {}, ANY),
    ("Cast", {"dtype": "float64"}, ANY),
]

# Ops checked at second order too (on shape (2, 3)).
SECOND_ORDER = [
    ("Sin", {}, _uniform(-3.0, 3.0)),
    ("Cos", {}, _uniform(-3.0, 3.0)),
    ("Tanh", {}, ANY),
    ("Relu", {}, _nonzero()),
    ("Log", {}, POSITIVE),
    ("Log1p", {}, _uniform(-0.5, 2.0)),
    ("Square", {}, ANY),
    ("Reciprocal", {}, _nonzero(0.5, 2.0)),
    ("Abs", {}, _nonzero()),
    ("Clip", {"min": -0.5, "max": 0.8}, _avoiding(-0.5, 0.8)),
    ("Clip", {"min": -0.5}, _avoiding(-0.5)),
    ("Sigmoid", {}, _uniform(-4.0, 4.0)),
    ("Sqrt", {}, POSITIVE),
    ("Rsqrt", {}, POSITIVE),
    ("Exp", {}, ANY),
    ("Softplus", {}, ANY),
    ("Softplus", {"beta": 2.0, "threshold": 1.0}, _avoiding(0.5, low=-1.0, high=2.0)),
    ("LeakyRelu", {"alpha": 0.2}, _nonzero()),
    ("Elu", {"alpha": 0.5}, _nonzero()),
    ("Gelu", {}, _uniform(-3.0, 3.0)),
    ("Gelu", {"approximate": "tanh"}, _uniform(-3.0, 3.0)),
]


def _id(op, attrs):
    if not attrs:
        return op
    return op + "-" + ",".join(f"{k}={v}" for k, v in attrs.items())


def _rng(*key):
    return np.random.default_rng(zlib.crc32(repr(key).encode()))


def _case(op, attrs, make, shape):
    x = np.asarray(make(_rng(op, attrs, shape), shape), dtype=np.float64)
    return OpCase.of(op, [x], attrs=attrs)


def _grad(op, attrs, x, dy):
    """d(op(x))/dx applied to dy, through a GradientTape."""
    with dg.GradientTape() as tape:
        tape.watch(x)
        y = getattr(dg.ops, _py(op))(x, **attrs)
    return y, tape.gradient(y, x, output_gradients=dy)


def _py(op):
    return {"LeakyRelu": "leaky_relu", "LogSoftmax": "log_softmax"}.get(op, op.lower())


# ------------------------------------------------------------ first order


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
@pytest.mark.parametrize("op,attrs,make", UNARY, ids=[_id(o, a) for o, a, _ in UNARY])
def test_first_order(op, attrs, make, shape):
    """The rule matches finite differences on 0-d, 1-D and 2-D inputs."""
    _case(op, attrs, make, shape).check_grad()


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_special_points(approximate):
    """Both branches of the exact form (series near 0, gelu(x)/x beyond),
    the switch between them at |x| = 0.1, and the tails."""
    x = np.array([0.0, 0.03, -0.07, 0.0999, 0.1001, -0.1001, -0.5, 2.5, -6.0, 9.0])
    case = OpCase.of("Gelu", [x], attrs={"approximate": approximate})
    case.check_grad()
    case.check_grad(order=2)


def _gelu_derivatives(x, approximate):
    """First and second derivatives of GELU in closed form (float64)."""
    if approximate == "tanh":
        # y = x s(v), v = 2 sqrt(2/pi) (x + 0.044715 x^3); with s = s(v) and
        # r = s(-v) = 1 - s (no cancellation in the tails).
        k = 2.0 * math.sqrt(2.0 / math.pi)
        v = k * (x + 0.044715 * x**3)
        dv = k * (1.0 + 3 * 0.044715 * x**2)
        d2v = k * 6 * 0.044715 * x
        s, r = 1.0 / (1.0 + np.exp(-v)), 1.0 / (1.0 + np.exp(v))
        d1 = s + x * s * r * dv
        d2 = 2.0 * s * r * dv + x * s * r * ((r - s) * dv * dv + d2v)
        return d1, d2
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    cdf = 0.5 * np.array([math.erfc(-v / math.sqrt(2.0)) for v in x])
    return cdf + x * pdf, (2.0 - x * x) * pdf


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_closed_form(approximate):
    """First and second derivatives to near float64 rounding, on both sides
    of the series / quotient switch of the exact form at |x| = 0.1."""
    x = np.array([0.0, 1e-9, -3e-5, 0.01, -0.06, 0.0999, 0.1, 0.1001, -0.25,
                  0.7, -1.3, 2.2, -4.0, 6.0, -9.0])
    t = dg.tensor(x)
    ones = dg.ops.ones([x.size], "float64")
    with dg.GradientTape() as outer:
        outer.watch(t)
        with dg.GradientTape() as inner:
            inner.watch(t)
            y = dg.ops.gelu(t, approximate)
        d1 = inner.gradient(y, t, output_gradients=ones)
    d2 = outer.gradient(d1, t, output_gradients=ones)
    want1, want2 = _gelu_derivatives(x, approximate)
    np.testing.assert_allclose(d1.numpy(), want1, rtol=1e-14, atol=1e-16)
    np.testing.assert_allclose(d2.numpy(), want2, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_large_inputs_are_finite(approximate):
    """Far tails: the gradient is 1 (x >> 0) or 0 (x << 0), not NaN."""
    x = dg.tensor(np.array([-1e200, -1e30, -50.0, 50.0, 1e30, 1e200]))
    _, g = _grad("Gelu", {"approximate": approximate}, x, dg.ops.ones([6], "float64"))
    # atol: an underflowing exp may come out as a subnormal rather than 0.
    np.testing.assert_allclose(g.numpy(), [0.0, 0.0, 0.0, 1.0, 1.0, 1.0], rtol=0, atol=1e-100)


def test_elu_large_input_is_finite():
    """exp is never evaluated at a large positive x (0 * inf would be NaN)."""
    x = dg.tensor(np.array([1e3, -1e3, 2.0]))
    _, g = _grad("Elu", {}, x, dg.ops.ones([3], "float64"))
    np.testing.assert_allclose(g.numpy(), [1.0, 0.0, 1.0], rtol=0, atol=1e-300)


@pytest.mark.parametrize("attrs,x", [
    ({"beta": 2.0, "threshold": 1.0}, [-1.0, 0.2, 1.5, 3.0]),
    ({}, [25.0, -25.0, 0.3, 40.0]),
], ids=["threshold=1", "default"])
def test_softplus_above_threshold(attrs, x):
    """Points with beta * x > threshold (where the op returns x) get gradient
    1; the others sigmoid(beta * x)."""
    x = np.array(x)
    case = OpCase.of("Softplus", [x], attrs=attrs)
    case.check_grad()
    case.check_grad(order=2)
    beta, threshold = attrs.get("beta", 1.0), attrs.get("threshold", 20.0)
    _, g = _grad("Softplus", attrs, dg.tensor(x), dg.ops.ones([x.size], "float64"))
    want = np.where(beta * x > threshold, 1.0, 1.0 / (1.0 + np.exp(-beta * x)))
    np.testing.assert_allclose(g.numpy(), want, rtol=1e-14)


def test_clip_bounds_block_gradient():
    """The gradient passes strictly inside (min, max), and is 0 at and beyond
    either bound."""
    x = dg.tensor(np.array([-1.0, -0.5, 0.0, 0.8, 1.0]))
    dy = dg.tensor(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    _, g = _grad("Clip", {"min": -0.5, "max": 0.8}, x, dy)
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0, 3.0, 0.0, 0.0])
    _, g = _grad("Clip", {"max": 0.8}, x, dy)
    np.testing.assert_array_equal(g.numpy(), [1.0, 2.0, 3.0, 0.0, 0.0])


# ------------------------------------------------------------ softmax


SOFTMAX_CASES = [((3,), -1), ((3,), 0), ((2, 3), -1), ((2, 3), 0),
                 ((2, 3, 4), -1), ((2, 3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -3)]


@pytest.mark.parametrize("shape,axis", SOFTMAX_CASES,
                         ids=[f"{'x'.join(map(str, s))}-axis{a}" for s, a in SOFTMAX_CASES])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_first_order(op, shape, axis):
    """Softmax and LogSoftmax over every axis of 1-D to 3-D inputs."""
    _case(op, {"axis": axis}, _uniform(-3.0, 3.0), shape).check_grad()


@pytest.mark.parametrize("shape,axis", [((2, 3), -1), ((2, 3, 4), 1)],
                         ids=["2x3-axis-1", "2x3x4-axis1"])
@pytest.mark.parametrize("op", ["Softmax", "LogSoftmax"])
def test_softmax_second_order(op, shape, axis):
    """The softmax rules are themselves differentiable."""
    _case(op, {"axis": axis}, _uniform(-3.0, 3.0), shape).check_grad(order=2)


# ------------------------------------------------------------ second order


@pytest.mark.parametrize("op,attrs,make", SECOND_ORDER,
                         ids=[_id(o, a) for o, a, _ in SECOND_ORDER])
def test_second_order(op, attrs, make):
    """Hessian-vector products through nested tapes match finite
    differences of the first-order rule."""
    _case(op, attrs, make, (2, 3)).check_grad(order=2)


# ------------------------------------------------------------ dtypes, shapes


ALL_OPS = UNARY + [("Softmax", {"axis": 0}, ANY), ("LogSoftmax", {}, ANY)]


@pytest.mark.parametrize("op,attrs,make", ALL_OPS, ids=[_id(o, a) for o, a, _ in ALL_OPS])
def test_float32_gradient(op, attrs, make):
    """A float32 input gets a float32 gradient, equal to the float64 one
    within float32 rounding."""
    x64 = np.asarray(make(_rng(op, attrs, "f32"), (2, 3)), dtype=np.float64)
    dy64 = _rng("dy").standard_normal((2, 3))
    out_dtype = attrs.get("dtype", "float32")
    x32 = dg.tensor(x64.astype(np.float32))
    _, g32 = _grad(op, attrs, x32, dg.tensor(dy64.astype(out_dtype)))
    assert g32.dtype == dg.float32
    _, g64 = _grad(op, attrs, dg.tensor(x64), dg.tensor(dy64))
    np.testing.assert_allclose(g32.numpy(), g64.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape", [(0,), (3, 0)], ids=["0", "3x0"])
@pytest.mark.parametrize("op,attrs,make", ALL_OPS, ids=[_id(o, a) for o, a, _ in ALL_OPS])
def test_empty_input(op, attrs, make, shape):
    """The gradient of an empty input is an empty tensor of its shape."""
    x = dg.tensor(np.zeros(shape))
    _, g = _grad(op, attrs, x, dg.tensor(np.zeros(shape)))
    assert tuple(g.shape) == shape and g.dtype == dg.float64


# ------------------------------------------------------------ cast


@pytest.mark.parametrize("src,dst", [("float64", "float32"), ("float32", "float64"),
                                     ("float32", "float32")])
def test_cast_between_floats(src, dst):
    """The gradient is the output gradient cast back to the input dtype."""
    x = dg.tensor(np.array([[1.5, -2.0, 0.25]], dtype=src))
    dy = np.array([[0.5, 3.0, -1.25]], dtype=dst)
    y, g = _grad("Cast", {"dtype": dst}, x, dg.tensor(dy))
    assert y.dtype == dst and g.dtype == src
    np.testing.assert_array_equal(g.numpy(), dy.astype(src))


def test_cast_to_integer_has_no_gradient():
    """A cast to an integer or bool dtype cuts the gradient."""
    x = dg.tensor(np.array([1.5, -2.0, 0.25]))
    for dtype in ("int32", "bool"):
        with dg.GradientTape() as tape:
            tape.watch(x)
            y = dg.ops.cast(x, dtype)
        assert tape.gradient(y, x) is None
        with dg.GradientTape() as tape:
            tape.watch(x)
            z = dg.ops.cast(dg.ops.cast(x, dtype), "float64") * x
        g = tape.gradient(z, x, output_gradients=dg.ops.ones([3], "float64"))
        # Only the direct factor x contributes: d(c * x)/dx = c, c constant.
        np.testing.assert_array_equal(g.numpy(), np.array([1.5, -2.0, 0.25]).astype(dtype))


# ------------------------------------------------------------ PyTorch style


def test_requires_grad_backward():
    """``requires_grad`` leaves and ``.backward()`` use the same rules."""
    a = np.array([[0.3, -1.2, 2.0], [0.0, 0.7, -0.4]])
    x = dg.tensor(a)
    x.requires_grad = True
    y = dg.ops.tanh(x)
    loss = dg.ops.sum(y * y)
    loss.backward()
    t = np.tanh(a)
    np.testing.assert_allclose(x.grad.numpy(), 2.0 * t * (1.0 - t * t), rtol=1e-13)
