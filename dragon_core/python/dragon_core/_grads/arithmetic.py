"""Gradients of broadcasting arithmetic: Add, Sub, Mul, Div, Neg."""

from .._autograd import gradient
from ._util import ops, unbroadcast


@gradient("Add")
def _add(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy, a.shape), unbroadcast(dy, b.shape)]


@gradient("Sub")
def _sub(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy, a.shape), unbroadcast(ops().neg(dy), b.shape)]


@gradient("Mul")
def _mul(node, dy):
    a, b = node.inputs
    return [unbroadcast(dy * b, a.shape), unbroadcast(dy * a, b.shape)]


@gradient("Div")
def _div(node, dy):
    a, b = node.inputs
    da = dy / b
    db = ops().neg(da * a / b)
    return [unbroadcast(da, a.shape), unbroadcast(db, b.shape)]


@gradient("Neg")
def _neg(node, dy):
    return [ops().neg(dy)]
