"""Gradients of the element-wise unary ops, Softmax / LogSoftmax and Cast.

Every rule recomputes what it needs from the op's input and is built from
differentiable ops, so it can be differentiated again.

Piecewise functions select their branch with a constant mask, ``cast(x > 0,
dtype)`` (comparisons are not recorded, so the mask carries no gradient),
multiplied into the result. A masked-out branch is still evaluated, and a
zero mask times an infinite branch would be NaN, so each branch is only fed
inputs on which it is finite (e.g. ``exp(min(x, 0))`` for Elu).

Conventions where a function has a kink (the one-sided derivative taken):

* ``Abs``: ``sign(x)``, so 0 at ``x == 0``, and 0 at a NaN ``x`` (torch's).
* ``Relu``: 0 at ``x == 0``; ``LeakyRelu`` and ``Elu``: the negative branch
  (``alpha``) at ``x == 0``. At a NaN ``x``, Relu and Elu pass ``dy`` (slope
  1), as torch's threshold_backward and elu_backward, which test ``x <= 0``.
* ``Clip``: the gradient passes only where ``min < x < max`` (strictly); an
  unset bound does not block anything; elsewhere it is 0 even for an
  infinite or NaN ``dy``.
* ``Softplus``: 1 where ``beta * x > threshold`` (where the op returns
  ``x``), ``sigmoid(beta * x)`` elsewhere.
* ``Cast``: between floating dtypes the gradient is cast back to the input
  dtype (passed on as it is when it already has that dtype: a matmul's
  rule writes the gradient of an autocast operand in float32, see
  ``linalg.py``); a cast to or from an integer or bool dtype passes no
  gradient.
"""

import math

from .._autograd import gradient, result_or
from .._dtypes import as_dtype
from ._util import eager_fused, ops, relu_grad, scalar_like


def _mask(cond, like):
    """``cond`` (a bool tensor) as 0/1 in the dtype of ``like``.

    Comparisons are never recorded, so the mask is a constant for autograd.
    """
    return ops().cast(cond, like.dtype)


# ---------------------------------------------------------------- smooth


@gradient("Exp", reads_result=True)
def _exp(node, dy):
    (x,) = node.inputs
    return [dy * result_or(node, lambda: ops().exp(x))]


@gradient("Log")
def _log(node, dy):
    (x,) = node.inputs
    return [dy / x]


@gradient("Log1p")
def _log1p(node, dy):
    (x,) = node.inputs
    return [dy / (x + 1.0)]


@gradient("Expm1")
def _expm1(node, dy):
    # d (e^x - 1) = e^x.
    (x,) = node.inputs
    return [dy * ops().exp(x)]


@gradient("Sqrt")
def _sqrt(node, dy):
    # d sqrt(x) = 1 / (2 sqrt(x)); infinite at 0, as the derivative is.
    (x,) = node.inputs
    return [dy * ops().rsqrt(x) * 0.5]


@gradient("Rsqrt", reads_result=True)
def _rsqrt(node, dy):
    # d x^(-1/2) = -x^(-3/2) / 2 = -rsqrt(x) / (2 x).
    (x,) = node.inputs
    return [dy * result_or(node, lambda: ops().rsqrt(x)) / x * -0.5]


@gradient("Square")
def _square(node, dy):
    (x,) = node.inputs
    return [dy * x * 2.0]


@gradient("Reciprocal", reads_result=True)
def _reciprocal(node, dy):
    (x,) = node.inputs
    r = result_or(node, lambda: ops().reciprocal(x))
    return [ops().neg(dy * r * r)]


@gradient("Sin")
def _sin(node, dy):
    (x,) = node.inputs
    return [dy * ops().cos(x)]


@gradient("Cos")
def _cos(node, dy):
    (x,) = node.inputs
    return [ops().neg(dy * ops().sin(x))]


@gradient("Tanh", reads_result=True)
def _tanh(node, dy):
    (x,) = node.inputs
    t = result_or(node, lambda: ops().tanh(x))
    return [dy * (1.0 - t * t)]


@gradient("Sigmoid", reads_result=True)
def _sigmoid(node, dy):
    # s(x) (1 - s(x)) written as s(x) s(-x): no cancellation for large x.
    o = ops()
    (x,) = node.inputs
    return [dy * result_or(node, lambda: o.sigmoid(x)) * o.sigmoid(o.neg(x))]


# ------------------------------------------------------------- piecewise


@gradient("Abs")
def _abs(node, dy):
    # Sign is not differentiable (never recorded): a constant factor, taken
    # as 0 at a NaN x (torch's sgn(NaN) = 0; Sign gives NaN there, as NumPy).
    o = ops()
    (x,) = node.inputs
    s = o.sign(x)
    if x.dtype.is_floating_point:
        s = o.where(o.isnan(x), scalar_like(s, 0.0), s)
    return [dy * s]


@gradient("Relu")
def _relu(node, dy):
    (x,) = node.inputs
    return [relu_grad(x, dy)]


@gradient("ReluGrad")
def _relu_grad(node, g):
    # Linear in dy with the same mask; piecewise constant in x (no gradient).
    x = node.inputs[0]
    return [None, relu_grad(x, g)]


@gradient("LeakyRelu")
def _leaky_relu(node, dy):
    (x,) = node.inputs
    alpha = node.attrs["alpha"]
    m = _mask(x > 0, x)
    # m + (1 - m) * alpha is exactly 1 or exactly alpha in any dtype.
    return [dy * (m + (1.0 - m) * alpha)]


@gradient("Elu")
def _elu(node, dy):
    o = ops()
    (x,) = node.inputs
    alpha = node.attrs["alpha"]
    neg = x <= 0
    # alpha * e^x where x <= 0, else 1 (a NaN x too: torch's elu_backward
    # tests x <= 0). The exp branch reads 0 where it is masked out, so it
    # stays finite (x large and positive, or NaN) and 0 * it is 0.
    m = 1.0 - _mask(neg, x)
    neg_part = o.where(neg, x, scalar_like(x, 0.0))
    return [dy * (m + (1.0 - m) * alpha * o.exp(neg_part))]


@gradient("Clip")
def _clip(node, dy):
    (x,) = node.inputs
    lo, hi = node.attrs.get("min"), node.attrs.get("max")
    inside = None
    if lo is not None:
        inside = x > lo
    if hi is not None:
        below = x < hi
        inside = below if inside is None else inside & below
    if inside is None:
        return [dy]
    # a select, not dy * mask: an infinite or NaN dy outside stays 0 (torch)
    return [ops().where(inside, dy, scalar_like(dy, 0.0))]


@gradient("Softplus")
def _softplus(node, dy):
    # The op returns x where beta * x > threshold (derivative 1) and
    # log(1 + e^(beta x)) / beta elsewhere (derivative sigmoid(beta x)).
    (x,) = node.inputs
    beta = node.attrs["beta"]
    threshold = node.attrs["threshold"]
    z = x * beta
    m = _mask(z > threshold, x)
    return [dy * (m + (1.0 - m) * ops().sigmoid(z))]


# ------------------------------------------------------------------ GELU

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
# Maclaurin coefficients of Phi(x) = 1/2 + x / sqrt(2 pi) * sum_n c_n x^(2n),
# c_n = (-1)^n / (2^n n! (2n + 1)); used for |x| < _PHI_SERIES_BELOW, where
# the terms left out are below float64 rounding.
_PHI_SERIES = tuple((-1.0) ** n / (2.0 ** n * math.factorial(n) * (2 * n + 1))
                    for n in range(6))
_PHI_SERIES_BELOW = 0.1
# The tanh form is x * sigmoid(x * (K1 + K3 x^2)).
_GELU_K1 = 2.0 * math.sqrt(2.0 / math.pi)
_GELU_K3 = _GELU_K1 * 0.044715
# Beyond |x| = 30, sigmoid(v) * sigmoid(-v) underflows to 0 in every dtype;
# clipping x there keeps the polynomial factor finite (0 * inf would be NaN).
_GELU_TANH_CLIP = 30.0


def _series_mask(x):
    """1 where |x| < _PHI_SERIES_BELOW, else 0 (NaN at NaN), in x's dtype.

    max(ceil(1 - |x| / _PHI_SERIES_BELOW), 0): element-wise table ops only,
    so in a compiled step the graph `fusion` pass folds the mask into the
    one FusedElementwise of the gradient, where comparisons, a bitwise and
    and a cast would be four separate ops over the whole activation
    (issue 21). Ceil is never recorded, so the mask is a constant for
    autograd, as a comparison's is.
    """
    o = ops()
    return o.maximum(o.ceil(1.0 - o.abs(x) * (1.0 / _PHI_SERIES_BELOW)), 0.0)


def _normal_cdf(x):
    """Phi(x), the standard normal CDF, from the Gelu op: gelu(x) / x.

    The quotient is exact up to rounding for |x| >= 0.1; nearer 0 (where it
    is 0/0 at x = 0, and its derivative would cancel badly) a Maclaurin
    series is used. Each branch is fed a harmless input where it is masked
    out, so neither it nor its derivatives overflow.
    """
    o = ops()
    small = _series_mask(x)
    large = 1.0 - small
    xs = x * small                 # 0 outside the series' range
    xl = x * large + small         # 1 inside it
    z = xs * xs
    poly = _PHI_SERIES[-1]
    for c in reversed(_PHI_SERIES[:-1]):
        poly = z * poly + c
    series = xs * poly * _INV_SQRT_2PI + 0.5
    quotient = o.gelu(xl, "none") / xl
    return series * small + quotient * large


def gelu_grad_composed(x, dy, approximate="none"):
    """dy * gelu'(x) written with element-wise ops (the rule before the
    ``GeluGrad`` op, issue 21); kept as a reference and for A/B benchmarks.
    """
    o = ops()
    if approximate == "tanh":
        # d/dx x s(v) = s(v) + x s(v) s(-v) v',  v = x (K1 + K3 x^2).
        v = x * (x * x * _GELU_K3 + _GELU_K1)
        xc = o.clip(x, -_GELU_TANH_CLIP, _GELU_TANH_CLIP)
        slope = xc * (xc * xc * (3.0 * _GELU_K3) + _GELU_K1)
        return dy * (o.sigmoid(v) + o.sigmoid(v) * o.sigmoid(o.neg(v)) * slope)
    # d/dx x Phi(x) = Phi(x) + x phi(x).
    pdf = o.exp(x * x * -0.5) * _INV_SQRT_2PI
    return dy * (_normal_cdf(x) + x * pdf)


@gradient("Gelu")
def _gelu(node, dy):
    # One GeluGrad kernel (issue 21); GeluGrad has its own rule below, so
    # the gradient stays differentiable.
    (x,) = node.inputs
    return [ops().gelu_grad(x, dy, node.attrs["approximate"])]


# Beyond |x| = 40, gelu''(x) is 0 in every dtype (phi(40) ~ 1e-348); the
# clip keeps phi(x) * x^2 from becoming 0 * inf at x = +-inf.
_GELU_ERF_CLIP = 40.0


def gelu_second_derivative(x, approximate="none"):
    """gelu''(x), written with differentiable ops.

    exact form: phi(x) (2 - x^2);
    tanh form (gelu = x s(v), v = x (K1 + K3 x^2), a = s(v) s(-v)):
    a (2 v' + x v'' + x v'^2 (s(-v) - s(v))), v' = K1 + 3 K3 x^2,
    v'' = 6 K3 x.
    """
    o = ops()
    if approximate == "tanh":
        xc = o.clip(x, -_GELU_TANH_CLIP, _GELU_TANH_CLIP)
        v = xc * (xc * xc * _GELU_K3 + _GELU_K1)
        s = o.sigmoid(v)
        sm = o.sigmoid(o.neg(v))
        d1 = xc * xc * (3.0 * _GELU_K3) + _GELU_K1
        d2 = xc * (6.0 * _GELU_K3)
        return s * sm * (d1 * 2.0 + xc * d2 + xc * d1 * d1 * (sm - s))
    xc = o.clip(x, -_GELU_ERF_CLIP, _GELU_ERF_CLIP)
    return o.exp(xc * xc * -0.5) * _INV_SQRT_2PI * (2.0 - xc * xc)


@gradient("GeluGrad")
def _gelu_grad(node, ddx):
    # dx = dy * gelu'(x): linear in dy (its gradient is GeluGrad again), and
    # d/dx = dy * gelu''(x).
    x, dy = node.inputs
    mode = node.attrs["approximate"]
    return [ddx * dy * gelu_second_derivative(x, mode),
            ops().gelu_grad(x, ddx, mode)]


# --------------------------------------------------------------- softmax
_HALF = ("float16", "bfloat16")


@gradient("Softmax", reads_result=True)
def _softmax(node, dy):
    # dx = y * (dy - sum(dy * y)) along the axis. Eagerly, along the last
    # axis, one SoftmaxGrad where the device has the kernel: bit for bit the
    # chain, which is what a trace records and the graph's fusion rewrites
    # into SoftmaxGrad (along other axes the kernel sums in double, so the
    # chain stays there too).
    o = ops()
    (x,) = node.inputs
    axis = node.attrs["axis"]
    y = result_or(node, lambda: o.softmax(x, axis))   # eagerly, the forward's result
    last = axis in (-1, x.ndim - 1)
    half = y.dtype.name in _HALF
    if (last or half) and dy.dtype == y.dtype and eager_fused("SoftmaxGrad", y):
        # float16/bfloat16 on every axis: the kernel computes in float and
        # rounds dx once (the chain would round each step to 16 bits)
        return [o.softmax_grad(y, dy, axis=axis)]
    if half:   # the chain in float32, rounded once
        yf, dyf = o.cast(y, "float32"), o.cast(dy, "float32")
        return [o.cast(yf * (dyf - o.sum(dyf * yf, [axis], keepdims=True)), y.dtype)]
    return [y * (dy - o.sum(dy * y, [axis], keepdims=True))]


@gradient("SoftmaxGrad")
def _softmax_grad(node, g):
    # dx = y * dy - y * sum(dy * y) (bilinear in y and dy). With r = sum(g * y)
    # and s = sum(dy * y) along the axis:
    #   d/d(dy) = y * (g - r)                       (SoftmaxGrad(y, g) again)
    #   d/dy    = g * (dy - s) - dy * r
    o = ops()
    y, dy = node.inputs
    axis = node.attrs["axis"]
    r = o.sum(g * y, [axis], keepdims=True)
    s = o.sum(dy * y, [axis], keepdims=True)
    return [g * (dy - s) - dy * r, y * (g - r)]


@gradient("LogSoftmax")
def _log_softmax(node, dy):
    # dx = dy - softmax(x) * sum(dy) along the axis.
    o = ops()
    (x,) = node.inputs
    axis = node.attrs["axis"]
    if x.dtype.name in _HALF:
        # float16/bfloat16: computed in float32 and rounded once, as torch's
        # CPU backward (a 16-bit chain would round the sum and each step)
        xf, dyf = o.cast(x, "float32"), o.cast(dy, "float32")
        dx = dyf - o.softmax(xf, axis) * o.sum(dyf, [axis], keepdims=True)
        return [o.cast(dx, x.dtype)]
    return [dy - o.softmax(x, axis) * o.sum(dy, [axis], keepdims=True)]


# ------------------------------------------------------------------ cast


@gradient("Cast")
def _cast(node, dy):
    (x,) = node.inputs
    if not (x.dtype.is_floating_point and as_dtype(node.attrs["dtype"]).is_floating_point):
        return [None]
    if dy.dtype == x.dtype:
        return [dy]
    return [ops().cast(dy, x.dtype)]
