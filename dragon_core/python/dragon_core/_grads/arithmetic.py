"""Gradients of broadcasting arithmetic: Add, Sub, Mul, Div, Neg.

An operand the backward pass wants no gradient for (a constant such as the
0-d tensor of ``x * 0.125``, or data that does not require grad) gets None
without computing it (``needs_grad``): for Mul and Div that is a full-size
product and a sum over the broadcast axes saved.
"""

from .._autograd import gradient, needs_grad
from ._util import ops, unbroadcast


@gradient("Add")
def _add(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy, a.shape), unbroadcast(dy, b.shape)]


@gradient("Sub")
def _sub(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy, a.shape),
            unbroadcast(ops().neg(dy), b.shape) if needs_grad(node, 1) else None]


@gradient("Mul")
def _mul(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy * b, a.shape) if needs_grad(node, 0) else None,
            unbroadcast(dy * a, b.shape) if needs_grad(node, 1) else None]


@gradient("Div")
def _div(node, dy):
    a, b = node.inputs
    da = dy / b
    db = ops().neg(da * a / b) if needs_grad(node, 1) else None
    return [unbroadcast(da, a.shape) if needs_grad(node, 0) else None,
            None if db is None else unbroadcast(db, b.shape)]


@gradient("Neg")
def _neg(node, dy):
    return [ops().neg(dy)]
