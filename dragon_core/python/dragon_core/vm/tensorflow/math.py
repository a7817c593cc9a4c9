"""``tf.math``: element-wise math, comparisons and reductions."""

from __future__ import annotations

from ._ops import (abs, add, add_n, argmax, argmin, ceil, count_nonzero,  # noqa: F401,A004
                   cos, cumsum,
                   divide, equal, exp, floor, floordiv, floormod, greater, greater_equal,
                   less, less_equal, log, log1p, logical_and, logical_not, logical_or,
                   maximum, minimum, mod, multiply, negative, not_equal, pow, reciprocal,
                   reduce_all, reduce_any, reduce_logsumexp, reduce_max, reduce_mean,
                   reduce_min, reduce_prod, reduce_std, reduce_sum, reduce_variance, round,
                   rsqrt, sigmoid, sign, sin, sqrt, square, squared_difference, subtract,
                   tanh, truediv)
from ._unsupported import module_getattr
from .nn import log_softmax, softmax, softplus, l2_normalize  # noqa: F401
from . import _ops as _o


def is_nan(x, name=None):
    x = _o._t(x)
    return _o.ops.not_equal(x, x)


def is_finite(x, name=None):
    x = _o._t(x)
    return _o.ops.logical_and(_o.ops.equal(x, x), _o.ops.less(_o.ops.abs(x),
                                                              _o.convert_to_tensor(float("inf"),
                                                                                   x.dtype)))


def top_k(input, k=1, sorted=True, name=None):  # noqa: A002
    raise NotImplementedError("tf.math.top_k is not supported by dragon_core.vm.tensorflow "
                              "(no TopK op in the core yet); use np.argsort on x.numpy() in "
                              "eager code")


__getattr__ = module_getattr("tf.math")
