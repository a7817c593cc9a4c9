"""Gradients of Mod, Fmod and of the float functions of ``unary_math.cc``
(Tan, Asin, Acos, Atan, Sinh, Cosh, Asinh, Acosh, Atanh, Erf).

FloorDivide and TruncDivide are piecewise constant and defined without a
gradient (``no_grad``), as are the bitwise ops and IsNan / IsInf / IsFinite.

* ``Mod``: ``a - floor(a / b) * b``, so ``da = dy`` and
  ``db = -floor_divide(a, b) * dy`` (the floor is constant almost everywhere;
  at its jumps the one-sided derivative of the right piece is taken).
* ``Fmod``: ``a - trunc(a / b) * b``, so ``da = dy`` and
  ``db = -trunc_divide(a, b) * dy``.
* ``Asin`` / ``Acos`` / ``Atanh`` / ``Acosh`` are infinite at the ends of
  their domain, as the derivatives are, and NaN outside it.
"""

import math

from .._autograd import gradient
from ._util import ops, unbroadcast


@gradient("Mod")
def _mod(node, dy):
    a, b = node.inputs
    q = ops().floor_divide(a, b)
    return [unbroadcast(dy, a.shape), unbroadcast(ops().neg(dy * q), b.shape)]


@gradient("Fmod")
def _fmod(node, dy):
    a, b = node.inputs
    q = ops().trunc_divide(a, b)
    return [unbroadcast(dy, a.shape), unbroadcast(ops().neg(dy * q), b.shape)]


@gradient("Tan")
def _tan(node, dy):
    (x,) = node.inputs
    t = ops().tan(x)
    return [dy * (t * t + 1.0)]


@gradient("Asin")
def _asin(node, dy):
    # 1 / sqrt(1 - x^2), with 1 - x^2 as (1 - x)(1 + x): no cancellation
    # near |x| = 1.
    (x,) = node.inputs
    o = ops()
    return [dy * o.rsqrt((1.0 - x) * (x + 1.0))]


@gradient("Acos")
def _acos(node, dy):
    (x,) = node.inputs
    o = ops()
    return [o.neg(dy * o.rsqrt((1.0 - x) * (x + 1.0)))]


@gradient("Atan")
def _atan(node, dy):
    (x,) = node.inputs
    return [dy / (x * x + 1.0)]


@gradient("Sinh")
def _sinh(node, dy):
    (x,) = node.inputs
    return [dy * ops().cosh(x)]


@gradient("Cosh")
def _cosh(node, dy):
    (x,) = node.inputs
    return [dy * ops().sinh(x)]


@gradient("Asinh")
def _asinh(node, dy):
    (x,) = node.inputs
    return [dy * ops().rsqrt(x * x + 1.0)]


@gradient("Acosh")
def _acosh(node, dy):
    (x,) = node.inputs
    return [dy * ops().rsqrt((x - 1.0) * (x + 1.0))]


@gradient("Atanh")
def _atanh(node, dy):
    (x,) = node.inputs
    return [dy / ((1.0 - x) * (x + 1.0))]


@gradient("Erf")
def _erf(node, dy):
    (x,) = node.inputs
    o = ops()
    return [dy * o.exp(o.neg(x * x)) * (2.0 / math.sqrt(math.pi))]
