"""Gradients of the broadcasting binary ops Pow, Maximum and Minimum, and
of the selection op Where.

Conventions at the points where these functions are not differentiable:

* ``Pow``: the gradient with respect to the exponent, ``a**b * log(a)``, is
  only defined for ``a > 0``; where ``a <= 0`` it is taken as 0 (for
  ``a == 0`` and ``b > 0`` that is the true derivative, ``0**b`` being 0;
  for ``a < 0`` the power is not a real function of ``b``). The gradient
  with respect to the base, ``b * a**(b - 1)``, is the usual formula (so
  ``inf`` at ``a == 0`` when ``0 < b < 1``, as the derivative is), and 0
  where ``b == 0``. Higher-order gradients at ``a == 0`` are finite
  wherever the first-order ones are.
* ``Maximum`` / ``Minimum``: the output gradient goes to the selected
  input; where ``a == b`` it is split evenly (half to each), the average of
  the two one-sided derivatives; the other input gets exactly 0 (even for
  an infinite or NaN output gradient). Where an operand is NaN, neither is
  selected nor tied and both get the output gradient (torch's rule).
* ``Where``: the condition gets no gradient; ``x`` receives the output
  gradient where the condition is true and ``y`` where it is false (zeros
  elsewhere), each summed back to its own shape.
"""

from .._autograd import gradient
from ._util import ops, scalar_like, unbroadcast


@gradient("Pow")
def _pow(node, dy):
    o = ops()
    a, b = node.inputs
    one = scalar_like(a, 1.0)
    zero = scalar_like(a, 0.0)
    # b * a**(b - 1) is 0 where b == 0 (a**0 is constant), also at a == 0
    # where a**(-1) is infinite: the base is replaced by 1 there, which keeps
    # the value and every higher-order gradient finite.
    da = dy * b * o.pow(o.where(b == 0.0, one, a), b - 1.0)
    # log(a) only where a > 0; the inner where keeps log's argument positive
    # so that higher-order gradients of the masked branch stay finite.
    positive = a > 0.0
    log_a = o.where(positive, o.log(o.where(positive, a, one)), zero)
    db = dy * o.pow(a, b) * log_a
    return [unbroadcast(da, a.shape), unbroadcast(db, b.shape)]


def _select_grad(node, dy, sign: float):
    """dy to the selected input, dy / 2 to each on a tie, 0 to the other
    one, chosen by selects (comparisons are not recorded), not by a 0/1
    weight times dy: an infinite or NaN dy gives the unselected input 0,
    and a NaN operand (neither selected nor tied) gives both dy, as
    torch's maximum/minimum."""
    o = ops()
    a, b = node.inputs
    zero = scalar_like(dy, 0.0)
    a_loses, b_loses = (a < b, b < a) if sign > 0 else (a > b, b > a)
    share = o.where(a == b, dy * 0.5, dy)
    return [unbroadcast(o.where(a_loses, zero, share), a.shape),
            unbroadcast(o.where(b_loses, zero, share), b.shape)]


@gradient("Maximum")
def _maximum(node, dy):
    return _select_grad(node, dy, 1.0)


@gradient("Minimum")
def _minimum(node, dy):
    return _select_grad(node, dy, -1.0)


@gradient("Where")
def _where(node, dy):
    o = ops()
    cond, x, y = node.inputs
    zero = scalar_like(dy, 0.0)
    dx = o.where(cond, dy, zero)
    dyy = o.where(cond, zero, dy)
    return [None, unbroadcast(dx, x.shape), unbroadcast(dyy, y.shape)]
