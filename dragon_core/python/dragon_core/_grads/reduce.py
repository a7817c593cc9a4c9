"""Gradients of the reductions Sum, Mean, Prod, Max, Min, Var, Std and
LogSumExp.

Every rule honours the ``axes`` attribute (None = all axes, ``[]`` = none,
negative axes) and ``keepdims``: the output gradient is first given the
keepdims shape and then broadcast back over the reduced axes.

Conventions where the reduction is not differentiable or the formula
breaks down:

* ``Prod``: exact for inputs containing zeros, to first and second order
  (the gradient of each element is the product of the *other* elements,
  computed without dividing by zero; see :func:`_prod`). Third and higher
  derivatives are exact only for groups without zeros.
* ``Max`` / ``Min``: the gradient goes to the positions holding the
  extremum; when several positions tie, it is split evenly among them.
* ``Var``: ``2 (x - mean) / (N - ddof)``; when ``N - ddof <= 0`` the
  gradient is infinite or of the wrong sign, like the value itself.
* ``Std``: ``(x - mean) / ((N - ddof) * std)`` where ``std > 0``; where the
  standard deviation is 0 (all elements equal) the gradient is taken as 0
  (a subgradient, as for a norm at 0).
* ``LogSumExp``: ``exp(x - logsumexp(x))`` (the softmax); a group whose
  elements are all ``-inf`` gets a zero gradient.
"""

from .._autograd import gradient
from ._util import expand, keep_dims, ops, reduced_axes, reduced_count, scalar_like


def _params(node):
    """(input, sorted axes, keepdims) of a reduction node."""
    x = node.inputs[0]
    return x, reduced_axes(node.attrs.get("axes"), x.ndim), bool(node.attrs.get("keepdims"))


@gradient("Sum")
def _sum(node, dy):
    x, axes, keepdims = _params(node)
    return [expand(dy, x.shape, axes, keepdims)]


@gradient("Mean")
def _mean(node, dy):
    x, axes, keepdims = _params(node)
    n = reduced_count(x.shape, axes)
    if n > 1:  # n == 0 only for an empty x, whose gradient is empty anyway
        dy = dy / float(n)
    return [expand(dy, x.shape, axes, keepdims)]


@gradient("Prod")
def _prod(node, dy):
    """d prod / d x_i = prod_{k != i} x_k, computed without dividing by 0.

    Within each reduced group, let ``z`` be the number of zeros, ``p`` the
    product with zeros replaced by 1, and ``s`` the sum of the elements at
    zero positions (value 0, but its derivative marks those positions). Then
    ``prod_{k != i} x_k = p / x_i * q_i`` with ``x_i`` replaced by 1 where it
    is 0, and ``q_i``:

    ======  ===============  ===================
    z       x_i == 0         x_i != 0
    ======  ===============  ===================
    0       --               1
    1       1                s
    2       s - x_i          0
    >= 2    0                0
    ======  ===============  ===================

    Each ``q_i`` has the value and the first derivative of the product of
    the zero elements other than ``i``, so the rule is exact to second order.
    """
    o = ops()
    x, axes, keepdims = _params(node)
    one, zero = scalar_like(x, 1.0), scalar_like(x, 0.0)
    is_zero = x == 0.0
    x_nz = o.where(is_zero, one, x)
    p = o.prod(x_nz, axes, keepdims=True)
    z = o.sum(is_zero, axes, keepdims=True)           # int64 zero counts
    s = o.sum(o.where(is_zero, x, zero), axes, keepdims=True)
    q_one = o.where(is_zero, one, s)
    q_two = o.where(is_zero, s - x, zero)
    q = o.where(z == 0, one, o.where(z == 1, q_one, o.where(z == 2, q_two, zero)))
    g = keep_dims(dy, x.shape, axes, keepdims) * p
    return [g / x_nz * q]


def _extremum_grad(node, dy, reduce):
    o = ops()
    x, axes, keepdims = _params(node)
    # The extremum is recomputed (rules never read outputs); it only feeds a
    # comparison, so nothing is differentiated through it.
    m = reduce(x, axes, keepdims=True)
    # A NaN extremum comes from the NaN elements: they share the gradient
    # (x == NaN is false everywhere, which would drop it).
    hit = (x == m) | (o.isnan(x) & o.isnan(m))
    count = o.sum(o.cast(hit, x.dtype), axes, keepdims=True)
    share = keep_dims(dy, x.shape, axes, keepdims) / count
    return [o.where(hit, share, scalar_like(x, 0.0))]


@gradient("Max")
def _max(node, dy):
    return _extremum_grad(node, dy, ops().max)


@gradient("Min")
def _min(node, dy):
    return _extremum_grad(node, dy, ops().min)


def _centered(node):
    """(x, axes, keepdims, x - mean(x), N - ddof) of a Var/Std node."""
    x, axes, keepdims = _params(node)
    centered = x - ops().mean(x, axes, keepdims=True)
    dof = reduced_count(x.shape, axes) - int(node.attrs.get("ddof") or 0)
    return x, axes, keepdims, centered, dof


@gradient("Var")
def _var(node, dy):
    x, axes, keepdims, centered, dof = _centered(node)
    # The mean's own dependence on x drops out: sum(x - mean) == 0.
    g = keep_dims(dy, x.shape, axes, keepdims)
    return [g * centered * 2.0 / float(dof)]


@gradient("Std")
def _std(node, dy):
    o = ops()
    x, axes, keepdims, centered, dof = _centered(node)
    std = o.std(x, axes, keepdims=True, ddof=int(node.attrs.get("ddof") or 0))
    positive = std > 0.0
    one, zero = scalar_like(x, 1.0), scalar_like(x, 0.0)
    # 1 / std where std > 0, else 0; the inner where keeps the division (and
    # its derivatives) finite.
    inv = o.where(positive, o.reciprocal(o.where(positive, std, one)), zero)
    g = keep_dims(dy, x.shape, axes, keepdims) * inv
    return [g * centered / float(dof)]


@gradient("LogSumExp")
def _logsumexp(node, dy):
    o = ops()
    x, axes, keepdims = _params(node)
    lse = o.logsumexp(x, axes, keepdims=True)
    # A group of -inf has lse = -inf; shifting it by 0 instead gives
    # exp(-inf) = 0 rather than exp(nan).
    lse = o.where(lse == float("-inf"), scalar_like(x, 0.0), lse)
    return [keep_dims(dy, x.shape, axes, keepdims) * o.exp(x - lse)]
