"""Gradient of MatMul (NumPy ``matmul`` semantics with transpose flags).

With ``A = op(a)`` and ``B = op(b)`` the operands after their transpose
flags and ``Y = A @ B``: ``dA = dY @ B^T`` and ``dB = A^T @ dY``. The
products are taken with MatMul's own transpose flags on the operands as
given, so no transpose is materialised. A 1-D operand is promoted to a row
(``a``) or a column (``b``) and the output gradient gets the matching axis
back; gradients of broadcast batch dimensions are summed back to each
operand's batch shape. With ``out_dtype`` (a float32 product of 16-bit
operands, as autocast writes it) ``dY`` is cast to the operands' dtype and
the gradient products run in that dtype, so each gradient has its
operand's dtype (a graph's fusion folds the Cast that brings a weight's
gradient back to float32 into the product's ``out_dtype``).

The same fold in eager mode: when a 16-bit operand is the output of a
recorded ``Cast`` from float32 (autocast's cast of a float32 weight or
activation), the only reader of its gradient is that Cast's rule, which
casts it up to float32. Its gradient product is then written in float32
directly (``out_dtype="float32"``: the float32 accumulator, unrounded, as
the compiled step's ``cast_fold`` writes it) and the Cast rule passes it on
without a second Cast. So eager and compiled steps compute the same
gradients, and the eager step runs one Cast fewer per such operand.
"""

from .._autograd import gradient, needs_grad
from ._util import ops, relu_grad, unbroadcast


_LOW = ("bfloat16", "float16")


def _mm(x, tx: bool, y, ty: bool, out_dtype=None):
    return ops().matmul(x, y, transpose_a=tx, transpose_b=ty, out_dtype=out_dtype)


def _float32_grad(t) -> str | None:
    """``"float32"`` when the gradient of operand ``t`` may be written in
    float32: ``t`` is 16-bit and the output of a recorded Cast from float32
    (whose rule casts the gradient to float32 anyway); else None."""
    if t.dtype.name not in _LOW:
        return None
    fn = t._grad_fn
    if fn is None or fn.op != "Cast" or fn.inputs[0].dtype.name != "float32":
        return None
    return "float32"


@gradient("MatMul")
def _matmul(node, dy):
    return _matmul_grads(node, dy)


def _matmul_grads(node, dy):
    """[da, db] of matmul(a, b) (the node's first two inputs) for dy."""
    o = ops()
    a, b = node.inputs[0], node.inputs[1]
    if dy.dtype != a.dtype:  # out_dtype: the products run in a's dtype
        dy = o.cast(dy, a.dtype)
    a_vec, b_vec = a.ndim == 1, b.ndim == 1
    # Transpose flags are ignored for 1-D operands.
    ta = bool(node.attrs.get("transpose_a")) and not a_vec
    tb = bool(node.attrs.get("transpose_b")) and not b_vec
    a2 = o.reshape(a, [1, a.shape[0]]) if a_vec else a
    b2 = o.reshape(b, [b.shape[0], 1]) if b_vec else b
    # Restore the axes that 1-D operands removed from the output.
    if a_vec or b_vec:
        batch = tuple(dy.shape)
        if not b_vec:
            batch, n = batch[:-1], [batch[-1]]
        else:
            n = [1]
        if not a_vec:
            batch, m = batch[:-1], [batch[-1]]
        else:
            m = [1]
        dy = o.reshape(dy, list(batch) + m + n)
    # dA = dY @ B^T, stored transposed when transpose_a is set; dB likewise.
    da = db = None
    if needs_grad(node, 0):
        f32 = _float32_grad(a)
        da = _mm(b2, tb, dy, True, f32) if ta else _mm(dy, False, b2, not tb, f32)
        da = unbroadcast(da, a2.shape)
        if a_vec:
            da = o.reshape(da, list(a.shape))
    if needs_grad(node, 1):
        f32 = _float32_grad(b)
        db = _mm(dy, True, a2, ta, f32) if tb else _mm(a2, not ta, dy, False, f32)
        db = unbroadcast(db, b2.shape)
        if b_vec:
            db = o.reshape(db, list(b.shape))
    return [da, db]


@gradient("MatMulBiasAct")
def _matmul_bias_act(node, dy):
    # As Conv2dBiasAct: the activation's mask is recomputed from the
    # pre-activation product (the node keeps no outputs).
    o = ops()
    flags = {"transpose_a": bool(node.attrs.get("transpose_a")),
             "transpose_b": bool(node.attrs.get("transpose_b")),
             "out_dtype": node.attrs.get("out_dtype")}
    if node.attrs["activation"] == "relu":
        z = o.matmul(node.inputs[0], node.inputs[1], **flags)
        if len(node.inputs) > 2:
            z = z + node.inputs[2]
        dy = relu_grad(z, dy)
    grads = _matmul_grads(node, dy)
    if len(node.inputs) > 2:
        grads.append(unbroadcast(dy, node.inputs[2].shape)
                     if needs_grad(node, 2) else None)
    return grads


@gradient("Det")
def _det(node, dy):
    """``dx = dy * cofactor(x)`` (``det(x) * inv(x)^T`` where x is
    invertible, exact from the minors where it is singular): the DetGrad
    kernel. First order only: DetGrad has no gradient of its own, so a
    second derivative through Det raises naming DetGrad."""
    return [ops().det_grad(node.inputs[0], dy)]


@gradient("DetGrad")
def _det_grad(node, ddx):
    """Second derivatives of Det are not implemented: raise rather than
    return a wrong (zero) Hessian."""
    raise NotImplementedError("DetGrad: the second derivative of Det is not implemented "
                              f"(x {list(node.inputs[0].shape)} {node.inputs[0].dtype}); "
                              "Det is differentiable to first order only")
