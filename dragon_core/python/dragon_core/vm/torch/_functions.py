"""The torch functions (``torch.add``, ``torch.sum``, ...) and the Tensor
methods made from them, each a translation onto ``dragon_core.ops``.

A function defined here with ``@_both`` is also a Tensor method (its first
argument is ``self``); ``@_method_only`` only a method. In-place variants
(``add_``) are generated from the out-of-place ones through
``_tensor._inplace``.
"""

from __future__ import annotations

import builtins
import math
import numbers
import warnings

import numpy as np

from dragon_core import _C, _autograd as _dg_autograd, ops as _ops

from . import _dtype as D
from ._tensor import (Size, Tensor, _as_dg, _binary, _cast, _dim, _dims, _float_dt,
                      _from_np_view, _host_view_ok, _inplace, _note_alias, _note_copy_view,
                      _records, _shape_args, _tracing, _u, _w, _zero_grad_zeros, values_indices)

_EXPORTS: dict = {}

def _np_c(arr):
    """``arr`` C-contiguous (keeps 0-d arrays 0-d, unlike ascontiguousarray)."""
    arr = np.asarray(arr)
    return arr if arr.flags.c_contiguous else arr.copy(order="C")



def _int_seq(op: str, name: str, value, pos=None, one_int: bool = False) -> list:
    """A ``tuple of ints`` argument as torch's argument parser reads it: a
    list, tuple or ``Size`` of ints (0-d integer tensors included). A bare
    int is accepted only where torch's signature takes ``int[1]``
    (``one_int``: ``roll``'s shifts and dims, a reduction's dim); floats,
    bools, sets, arrays and tensors raise TypeError naming the op, as in
    torch (``torch.flip(x, 0)`` raises; ``x.flip(0)`` is the method's
    varargs form)."""
    where = f"argument '{name}'" + (f" (position {pos})" if pos else "")
    if isinstance(value, (numbers.Integral, np.integer)) \
            and not isinstance(value, (bool, np.bool_, Tensor)):
        if one_int:
            return [int(value)]
        raise TypeError(f"{op}(): {where} must be tuple of ints, not {type(value).__name__}")
    if not isinstance(value, (list, tuple)):
        kind = type(value).__name__
        if isinstance(value, np.ndarray):
            kind = "numpy.ndarray"
        raise TypeError(f"{op}(): {where} must be tuple of ints, not {kind}")
    out = []
    for i, v in enumerate(value):
        if isinstance(v, Tensor) and v.ndim == 0 and not v.dtype.is_floating_point \
                and v.dtype.name != "bool":
            out.append(int(v))
            continue
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)) \
                or isinstance(v, Tensor):
            raise TypeError(f"{op}(): {where} must be tuple of ints, but found element of type "
                            f"{type(v).__name__} at pos {i}")
        out.append(int(v))
    return out


def _export(fn):
    _EXPORTS[fn.__name__] = fn
    return fn


def _both(fn):
    _EXPORTS[fn.__name__] = fn
    setattr(Tensor, fn.__name__, fn)
    return fn


def _method_only(fn):
    setattr(Tensor, fn.__name__, fn)
    return fn


def _tensor_of(x, like=None):
    if isinstance(x, Tensor):
        return x
    from ._creation import tensor
    return tensor(x)


def _DT_FLOAT(t):
    return D.BY_CODE[t._dtype_code].is_floating_point


def _float_t(t):
    """``t`` (dragon) cast to the default float if it is not floating."""
    if not D.BY_CODE[t._dtype_code].is_floating_point:
        return _ops.cast(t, D.default_float()._dg)
    return t


# ------------------------------------------------------------ element-wise
def _unary(name, op, float_only=True, zero_grad=False, int_identity=False, bool_copy=False):
    def fn(input):
        t = input._t
        if bool_copy and t.dtype.name == "bool":
            return _w(_ops.logical_and(t, True))   # torch: sign/abs of bool is a copy
        if int_identity and not _DT_FLOAT(t):
            # torch: floor/ceil/round/trunc of an integer tensor is a copy
            if t.dtype.name == "bool":
                raise RuntimeError(f"\"{name}\" is not implemented for 'Bool'")
            return _w(_ops.add(t, 0))
        if float_only:
            t = _float_t(t)
        if zero_grad and _records(t):
            # piecewise-constant: torch gives a zero gradient, not none
            return _w(_ops.add(op(t), _zero_grad_zeros(t)))
        return _w(op(t))
    fn.__name__ = name
    fn.__doc__ = f"``torch.{name}``: element-wise, over ``dragon_core.ops``."
    _both(fn)
    return fn


_unary("exp", _ops.exp)
_unary("log", _ops.log)
_unary("log1p", _ops.log1p)
_unary("sqrt", _ops.sqrt)
_unary("rsqrt", _ops.rsqrt)
_unary("sin", _ops.sin)
_unary("cos", _ops.cos)
_unary("tanh", _ops.tanh)
_unary("sigmoid", _ops.sigmoid)
_unary("reciprocal", _ops.reciprocal)
_unary("expm1", lambda t: _ops.sub(_ops.exp(t), 1.0))
_unary("log2", lambda t: _ops.mul(_ops.log(t), 1.0 / math.log(2.0)))
_unary("log10", lambda t: _ops.mul(_ops.log(t), 1.0 / math.log(10.0)))
_unary("tan", _ops.tan)
_unary("asin", _ops.asin)
_unary("acos", _ops.acos)
_unary("atan", _ops.atan)
_unary("sinh", _ops.sinh)
_unary("cosh", _ops.cosh)
_unary("asinh", _ops.asinh)
_unary("acosh", _ops.acosh)
_unary("atanh", _ops.atanh)
_unary("erf", _ops.erf)
for _alias, _n in (("arcsin", "asin"), ("arccos", "acos"), ("arctan", "atan"),
                   ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh")):
    _EXPORTS[_alias] = _EXPORTS[_n]
    setattr(Tensor, _alias, _EXPORTS[_n])
def _exp2(t):
    # 2 ** x through Pow (within one ulp, exact at integers, inf past the
    # range): exp(x ln 2) rounded the product first (exp2(30.) was 16 ulp off
    # in float32, exp2(1024.) finite in float64).
    return _ops.pow(2.0, t)


_unary("exp2", _exp2)
_unary("abs", _ops.abs, float_only=False)
_unary("neg", _ops.neg, float_only=False)
_unary("sign", lambda t: _ops.where(_ops.isnan(t), 0.0, _ops.sign(t)) if _DT_FLOAT(t)
       else _ops.sign(t), float_only=False, zero_grad=True, bool_copy=True)   # torch: sign(NaN) = 0
_unary("square", _ops.square, float_only=False)
_unary("relu", _ops.relu, float_only=False)
_unary("floor", _ops.floor, float_only=False, zero_grad=True, int_identity=True)
_unary("ceil", _ops.ceil, float_only=False, zero_grad=True, int_identity=True)
_unary("trunc", lambda t: _ops.where(_ops.less(t, 0.0), _ops.ceil(t), _ops.floor(t)),
       float_only=False, zero_grad=True, int_identity=True)   # (keeps -0.0, as torch)
_unary("frac", lambda t: _ops.sub(t, _ops.mul(_ops.sign(t), _ops.floor(_ops.abs(t)))))
_unary("logical_not_", lambda t: _ops.logical_not(t), float_only=False)
del _EXPORTS["logical_not_"]
_EXPORTS["negative"] = _EXPORTS["neg"]
Tensor.negative = Tensor.neg
_EXPORTS["absolute"] = _EXPORTS["abs"]
Tensor.absolute = Tensor.abs
# module-level names for the functions below (shadowing builtins on purpose:
# use builtins.<name> for Python's)
exp, log, log1p, sqrt, sigmoid, neg, square, trunc, abs = (  # noqa: A001
    _EXPORTS[_n] for _n in ("exp", "log", "log1p", "sqrt", "sigmoid", "neg", "square",
                            "trunc", "abs"))


@_both
def round(input, decimals=None):
    """``torch.round``: half to even; ``decimals`` rounds to that many
    decimal places (negative: to tens, hundreds, ...). An integer tensor
    is copied when ``decimals`` is not given and raises when it is (and a
    bool tensor always raises), as in torch."""
    t = input._t
    if not _DT_FLOAT(t):
        name = {"int64": "Long", "int32": "Int", "int16": "Short", "int8": "Char",
                "uint8": "Byte", "bool": "Bool"}.get(t.dtype.name, t.dtype.name.title())
        if decimals is not None or t.dtype.name == "bool":
            raise NotImplementedError(f"\"round_cpu\" not implemented for '{name}' "
                                      f"(round(decimals={decimals}) of a {t.dtype.name} "
                                      f"tensor of shape {list(t.shape)} on {input.device})")
        return _w(_ops.add(t, 0))   # torch: rounding an integer tensor is a copy
    if decimals:
        s = 10.0 ** decimals
        out = _ops.div(_ops.round(_ops.mul(t, s)), s)
    else:
        out = _ops.round(t)
    return _w(_ops.add(out, _zero_grad_zeros(t)) if _records(t) else out)


@_both
def logical_not(input):
    return _w(_ops.logical_not(_cast(input._t, D.DTYPES["bool"])))


@_both
def sigmoid_(input):
    return _inplace(input, sigmoid(input))


def _bool(x):
    x = _tensor_of(x)
    return _cast(x._t, D.DTYPES["bool"])


@_both
def logical_and(input, other):
    _tensor_pair("logical_and", input, other)
    return _w(_ops.logical_and(_bool(input), _bool(other)))


@_both
def logical_or(input, other):
    _tensor_pair("logical_or", input, other)
    return _w(_ops.logical_or(_bool(input), _bool(other)))


@_both
def logical_xor(input, other):
    _tensor_pair("logical_xor", input, other)
    return _w(_ops.not_equal(_bool(input), _bool(other)))


def _bitwise(opname, what, input, other, shift=False):
    dt = D.result_type(input, other)
    if dt.is_floating_point or (shift and dt == D.DTYPES["bool"]):
        raise RuntimeError(f"\"{what}_cpu\" not implemented for "
                           f"'{'Bool' if dt == D.DTYPES['bool'] else dt.name.title()}'")
    ref = input if isinstance(input, Tensor) else other
    dev = ref._t.device if isinstance(ref, Tensor) else None
    return _w(getattr(_ops, opname)(_as_dg(input, dt, dev), _as_dg(other, dt, dev)))


@_both
def bitwise_and(input, other):
    """``torch.bitwise_and`` (``&``): integers and bool, native BitwiseAnd."""
    return _bitwise("bitwise_and", "bitwise_and", input, other)


@_both
def bitwise_or(input, other):
    """``torch.bitwise_or`` (``|``): integers and bool, native BitwiseOr."""
    return _bitwise("bitwise_or", "bitwise_or", input, other)


@_both
def bitwise_xor(input, other):
    """``torch.bitwise_xor`` (``^``): integers and bool, native BitwiseXor."""
    return _bitwise("bitwise_xor", "bitwise_xor", input, other)


@_both
def bitwise_left_shift(input, other):
    """``torch.bitwise_left_shift`` (``<<``): integers, wrapping."""
    return _bitwise("left_shift", "lshift", input, other, shift=True)


@_both
def bitwise_right_shift(input, other):
    """``torch.bitwise_right_shift`` (``>>``): integers, arithmetic."""
    return _bitwise("right_shift", "rshift", input, other, shift=True)


@_both
def bitwise_not(input):
    """``torch.bitwise_not`` (``~``): integers and bool."""
    if input.dtype.is_floating_point:
        raise RuntimeError(f"\"bitwise_not_cpu\" not implemented for "
                           f"'{input.dtype.name.title()}'")
    return _w(_ops.bitwise_not(input._t))


@_both
def add(input, other, *, alpha=1):
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _binary("add", input, other)


@_both
def sub(input, other, *, alpha=1):
    from ._tensor import _no_bool_sub
    _no_bool_sub(input if isinstance(input, Tensor) else other, other)
    _no_bool_sub(other if isinstance(other, Tensor) else input, input)
    if alpha != 1:
        other = mul(other, alpha) if isinstance(other, Tensor) else other * alpha
    return _binary("sub", input, other)


_EXPORTS["subtract"] = sub
Tensor.subtract = sub


@_both
def mul(input, other):
    return _binary("mul", input, other)


_EXPORTS["multiply"] = mul
Tensor.multiply = mul


@_both
def div(input, other, *, rounding_mode=None):
    if rounding_mode is None:
        return _binary("div", input, other, _float_dt(input, other))
    if rounding_mode == "floor":
        return _int_division("floor_divide", input, other, "div")
    if rounding_mode == "trunc":
        return _int_division("trunc_divide", input, other, "div")
    raise ValueError(f"div expected rounding_mode to be one of None, 'trunc', or 'floor' but "
                     f"found '{rounding_mode}'")


_EXPORTS["divide"] = div
_EXPORTS["true_divide"] = div
Tensor.divide = div
Tensor.true_divide = div


def _int_division(opname, input, other, what, grad="zero"):
    """``dragon_core.ops.<opname>`` (FloorDivide, TruncDivide, Mod, Fmod) in
    torch's result dtype. Integer division by zero raises as torch does
    (``ZeroDivisionError``). ``grad``: "zero" (torch's zero gradient of
    ``div(rounding_mode=...)``), "native" (Mod/Fmod's own gradient) or
    "none" (torch has no derivative: the result does not record)."""
    dt = D.result_type(input, other)
    if dt == D.DTYPES["bool"]:
        raise RuntimeError(f"\"{what}_cpu\" not implemented for 'Bool'")
    ref = input if isinstance(input, Tensor) else other
    dev = ref._t.device if isinstance(ref, Tensor) else None
    a, b = _as_dg(input, dt, dev), _as_dg(other, dt, dev)
    if not dt.is_floating_point and b.size and bool(_ops.equal(b, 0).numpy().any()):
        raise RuntimeError(f"ZeroDivisionError: {what} of {dt} tensors by an integer zero "
                           f"(shapes {list(a.shape)} and {list(b.shape)})")
    undefined = [x for x in (a, b) if _records(x)] if grad == "none" else None
    if grad == "none":
        a = a.detach() if _records(a) else a
        b = b.detach() if _records(b) else b
    out = getattr(_ops, opname)(a, b)
    if undefined and not _tracing():
        # torch: the result requires grad, and a backward pass that reaches
        # it raises (never a silent constant)
        _dg_autograd._record(_NO_DERIVATIVE, undefined, {"name": f"aten::{what}"}, [out])
    if grad == "zero" and (_records(a) or _records(b)):
        # piecewise-constant: torch gives zero gradients, not none
        zero = _zero_grad_zeros(a) if _records(a) else None
        if _records(b):
            zb = _zero_grad_zeros(b)
            zero = zb if zero is None else _ops.add(zero, zb)
        out = _ops.add(out, zero)
    return _w(out)


_NO_DERIVATIVE = "TorchNoDerivative"


def _no_derivative(node, *dys):
    raise RuntimeError(f"derivative for {node.attrs['name']} is not implemented")


if not _dg_autograd.has_gradient(_NO_DERIVATIVE):
    _dg_autograd.gradient(_NO_DERIVATIVE, unread_inputs=lambda attrs: (0, 1))(_no_derivative)


@_both
def floor_divide(input, other):
    """``torch.floor_divide`` / ``//``: the native FloorDivide (Python's
    rounding toward -inf). torch defines no derivative for it: the result
    requires grad, and a backward pass that reaches it raises."""
    return _int_division("floor_divide", input, other, "floor_divide", grad="none")


@_both
def remainder(input, other):
    """``torch.remainder`` / ``%``: the native Mod, Python's sign rule (the
    result has the sign of ``other``). Differentiable in ``input`` and a
    Tensor ``other``; ``Number % Tensor`` has no derivative in torch (a
    backward pass that reaches it raises)."""
    return _int_division("mod", input, other, "remainder",
                         grad="none" if not isinstance(input, Tensor) else "native")


@_both
def fmod(input, other):
    """``torch.fmod``: the native Fmod, C's sign rule (the sign of
    ``input``). Differentiable. ``input`` must be a Tensor (torch has no
    fmod(Number, Tensor); ``remainder`` has)."""
    if not isinstance(input, Tensor):
        raise TypeError(f"fmod(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    return _int_division("fmod", input, other, "fmod", grad="native")


@_both
def pow(input, exponent):
    if isinstance(input, Tensor) and isinstance(exponent, bool) and input.dtype.name == "bool":
        # torch: a bool tensor to a Python bool stays bool (x ** True is x, x ** False all True)
        return _w(_ops.logical_or(input._t, not exponent))
    if isinstance(input, Tensor) and isinstance(exponent, numbers.Number) \
            and not isinstance(exponent, bool):
        t = _cast(input._t, D.result_type(input, exponent))
        if exponent == 2:
            return _w(_ops.square(t))
        if exponent == 1:
            return _w(_ops.mul(t, 1)) if _records(t) else _w(t._clone())
        if exponent == 0.5 and D.BY_CODE[t._dtype_code].is_floating_point:
            return _w(_ops.sqrt(t))
        dt = D.result_type(input, exponent)
        return _w(_ops.pow(_cast(t, dt), _as_dg(exponent, dt)))
    dt = D.result_type(input, exponent)
    if isinstance(exponent, Tensor) and not dt.is_floating_point and dt.name != "bool":
        return _int_pow_tensor(input, exponent, dt)
    return _binary("pow", input, exponent, dt)


def _int_pow_tensor(input, exponent, dt):
    """Integer ``a ** b`` with a tensor exponent, torch's rule for b < 0
    (dragon_core's Pow raises there, as NumPy): 1 ** b = 1,
    (-1) ** b = +-1 by the parity of b, any other base (0 included) gives 0.
    A Python-scalar negative exponent raises as torch does (above)."""
    dev = exponent._t.device
    a, b = _as_dg(input, dt, dev), _as_dg(exponent, dt, dev)
    neg = _ops.less(b, 0)
    pos = _ops.pow(a, _ops.where(neg, _ops.mul(b, 0), b))
    one = _ops.add(_ops.mul(pos, 0), 1)
    odd = _ops.not_equal(_ops.mod(b, 2), 0)
    minus1 = _ops.where(odd, _ops.neg(one), one)
    is_m1 = _ops.equal(a, -1) if dt.is_signed else _ops.logical_and(neg, False)
    small = _ops.where(_ops.equal(a, 1), one, _ops.where(is_m1, minus1, _ops.mul(one, 0)))
    return _w(_ops.where(neg, small, pos))


_EXPORTS["float_power"] = lambda input, exponent: pow(
    _tensor_of(input).double(), exponent.double() if isinstance(exponent, Tensor) else exponent)


def _tensor_pair(name, input, other):
    # torch.maximum/minimum/fmax/fmin take two tensors; a Python number raises
    for pos, v in ((1, input), (2, other)):
        if not isinstance(v, Tensor):
            raise TypeError(f"{name}(): argument '{'input' if pos == 1 else 'other'}' "
                            f"(position {pos}) must be Tensor, not {type(v).__name__}")


@_both
def maximum(input, other):
    _tensor_pair("maximum", input, other)
    return _binary("maximum", input, other)


@_both
def minimum(input, other):
    _tensor_pair("minimum", input, other)
    return _binary("minimum", input, other)


def _fminmax(kind, input, other):
    """``torch.fmax``/``fmin``: maximum/minimum that ignores a NaN operand
    (NaN only where both are NaN)."""
    if not isinstance(other, Tensor) or not isinstance(input, Tensor):
        raise TypeError(f"{kind}(): argument 'other' (position 2) must be Tensor, not "
                        f"{type(other if isinstance(input, Tensor) else input).__name__}")
    out = (maximum if kind == "fmax" else minimum)(input, other)
    if not out.dtype.is_floating_point:
        return out
    a, b = _cast(input._t, out.dtype), _cast(other._t, out.dtype)
    # torch's selection: input where it wins or ties or other is NaN (a tie
    # gives input the whole gradient, unlike maximum's half-and-half)
    wins = _ops.greater_equal(a, b) if kind == "fmax" else _ops.less_equal(a, b)
    return _w(_ops.where(_ops.logical_or(wins, _ops.isnan(b)), a, b))


@_both
def fmax(input, other):
    return _fminmax("fmax", input, other)


@_both
def fmin(input, other):
    return _fminmax("fmin", input, other)


def _sign_bit(t, ones):
    """Whether each element of float tensor ``t`` has its sign bit set:
    below zero, or -0.0 (1 / -0.0 is -inf)."""
    return _ops.logical_or(_ops.less(t, 0.0), _ops.less(_ops.div(ones, t), 0.0))


@_both
def atan2(input, other):
    """``torch.atan2(y, x)``: the angle of (x, y) in [-pi, pi], as C's
    atan2, from the native Atan of a ratio of at most 1 in magnitude:
    atan(y / x) (+-pi where x < 0) when |x| >= |y|, else
    +-pi/2 - atan(x / y). Infinities as C's (atan2(y, -inf) = +-pi for a
    finite y, atan2(+-inf, +-inf) = +-pi/4 or +-3pi/4), signed zeros as C's
    ((+-0, +0) -> +-0, (+-0, -0) -> +-pi); float16 / bfloat16 computed in
    float32 and rounded once, as torch. Differentiable: the branch not taken
    divides by a safe 1, so its gradient is never NaN."""
    _tensor_pair("atan2", input, other)
    dt = _float_dt(input, other)
    work = D.DTYPES["float32"] if dt.itemsize == 2 else dt
    dev = input._t.device
    y, x = _as_dg(input, work, dev), _as_dg(other, work, dev)
    y0, x0 = y, x
    # broadcast shape (NaN where y+x is), a constant: no dy * 0 in the gradient
    ones = _ops.add(_ops.mul(_ops.add(y.detach(), x.detach()), 0.0), 1.0)
    ones = _ops.where(_ops.isnan(ones), 1.0, ones)
    both_inf = _ops.logical_and(_ops.isinf(y), _ops.isinf(x))
    # two infinities: the angle of (+-1, +-1)
    m1 = _ops.neg(ones)
    y = _ops.where(both_inf, _ops.where(_sign_bit(y, ones), m1, ones), y)
    x = _ops.where(both_inf, _ops.where(_sign_bit(x, ones), m1, ones), x)
    ay, ax = _ops.abs(y), _ops.abs(x)
    near_x = _ops.logical_not(_ops.greater(ay, ax))   # |x| >= |y| (NaN: the other branch)
    both0 = _ops.logical_and(_ops.equal(y, 0.0), _ops.equal(x, 0.0))
    y_neg = _sign_bit(y, ones)
    pi = _ops.where(y_neg, _ops.mul(ones, -math.pi), _ops.mul(ones, math.pi))
    # |x| >= |y|: atan(y / x), y itself (+-0) for two zeros; +-pi where x < 0
    x_safe = _ops.where(_ops.logical_and(near_x, _ops.logical_not(both0)), x, ones)
    r = _ops.atan(_ops.div(y, x_safe))
    r = _ops.where(both0, y, r)
    r = _ops.where(_sign_bit(x, ones), _ops.add(r, pi), r)
    # |y| > |x|: +-pi/2 - atan(x / y)
    y_safe = _ops.where(near_x, ones, y)
    s = _ops.sub(_ops.mul(pi, 0.5), _ops.atan(_ops.div(x, y_safe)))
    out = _ops.where(near_x, r, s)
    if _records(y0) or _records(x0):
        # torch's gradient is (x, -y) / (x^2 + y^2), taken as 0 where that
        # denominator is 0 (at the origin, or where the squares underflow)
        yd, xd = y0.detach(), x0.detach()
        den0 = _ops.equal(_ops.add(_ops.square(yd), _ops.square(xd)), 0.0)
        out = _ops.where(den0, out.detach(), out)
    return _w(_cast(out, dt))


@_both
def clamp(input, min=None, max=None):
    t = input._t
    if isinstance(min, Tensor) or isinstance(max, Tensor):
        # torch's rule: min(max(x, lo), hi), a tie going to x (its gradient
        # passes where lo <= x <= hi), not Maximum's half-and-half
        # torch's gradients (derivatives.yaml, clamp.Tensor): x where lo <= x <= hi,
        # lo where x < lo < hi, hi where x > hi or hi < lo; none at all where
        # x < lo == hi (the value there is a constant)
        dt = D.result_type(input, *(v for v in (min, max) if v is not None))
        dev = input._t.device
        x = _cast(input._t, dt)
        lo = None if min is None else _as_dg(min, dt, dev)
        hi = None if max is None else _as_dg(max, dt, dev)
        value = x.detach()
        if lo is not None:
            value = _ops.maximum(value, lo.detach())
        if hi is not None:
            value = _ops.minimum(value, hi.detach())
        keep_x = take_lo = take_hi = None
        if lo is not None:
            keep_x = _ops.greater_equal(x, lo)
            take_lo = _ops.less(x, lo)
        if hi is not None:
            below = _ops.less_equal(x, hi)
            keep_x = below if keep_x is None else _ops.logical_and(keep_x, below)
            take_hi = _ops.greater(x, hi)
            if lo is not None:
                take_lo = _ops.logical_and(take_lo, _ops.less(lo, hi))
                take_hi = _ops.logical_or(take_hi, _ops.less(hi, lo))
        out = _ops.where(keep_x, x, value)
        if take_lo is not None:
            out = _ops.where(take_lo, lo, out)
        if take_hi is not None:
            out = _ops.where(take_hi, hi, out)
        return _w(out)
    if min is None and max is None:
        raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
    dt = D.result_type(input, *(v for v in (min, max) if v is not None))
    t = _cast(t, dt)
    out = _ops.clip(t, min, max)
    if _records(t):
        # torch passes the gradient where min <= x <= max (bounds included);
        # Clip's own rule is strict, so the kept elements come from x itself
        keep = None
        if min is not None:
            keep = _ops.greater_equal(t, min)
        if max is not None:
            below = _ops.less_equal(t, max)
            keep = below if keep is None else _ops.logical_and(keep, below)
        out = _ops.where(keep, t, out)
    return _w(out)


_EXPORTS["clip"] = clamp
Tensor.clip = clamp


@_both
def clamp_min(input, min):
    return clamp(input, min=min)


@_both
def clamp_max(input, max):
    return clamp(input, max=max)


@_both
def where(condition, input=None, other=None):
    if input is None and other is None:
        return nonzero(condition, as_tuple=True)
    dt = D.result_type(input, other)
    ref = input if isinstance(input, Tensor) else other
    dev = ref._t.device if isinstance(ref, Tensor) else None
    return _w(_ops.where(_bool(condition), _as_dg(input, dt, dev), _as_dg(other, dt, dev)))


@_both
def lerp(input, end, weight):
    """``torch.lerp``: floating inputs of one dtype only, as torch (integer
    inputs and mixed dtypes computed a promoted result where torch raises)."""
    if not input.dtype.is_floating_point:
        raise NotImplementedError(f"lerp: not implemented for {input.dtype} input (shape "
                                  f"{list(input.shape)}); torch's lerp takes floating tensors")
    if not isinstance(end, Tensor):
        raise TypeError(f"lerp(): argument 'end' (position 2) must be Tensor, not "
                        f"{type(end).__name__}")
    for what, v in (("end", end), ("weight", weight)):
        if isinstance(v, Tensor) and v.dtype != input.dtype:
            raise RuntimeError(f"lerp: expected dtype {input.dtype} for `{what}` but got dtype "
                               f"{v.dtype} (input {list(input.shape)}, {what} {list(v.shape)})")
    # torch's two forms: start + w (end - start) below |w| = 0.5, else
    # end - (end - start)(1 - w) (exact at w = 1; lerp(inf, 3, 0.5) is inf, not NaN)
    diff = sub(end, input)
    if not isinstance(weight, Tensor):
        if builtins.abs(weight) < 0.5:
            return add(input, mul(diff, weight))
        return sub(end, mul(diff, 1 - weight))
    return where(abs(weight) < 0.5, add(input, mul(diff, weight)),
                 sub(end, mul(diff, sub(1, weight))))


def _addc_dtype(op, input, tensor1, tensor2, value):
    """The dtype of ``addcmul`` / ``addcdiv``: the tensors' promotion, the
    ``value`` scalar weak (it made bool and 8-bit results int64)."""
    dt = D.result_type(input, tensor1, tensor2)
    shapes = f"(input {list(input.shape)} {input.dtype}, tensor1 {list(tensor1.shape)} " \
             f"{tensor1.dtype}, tensor2 {list(tensor2.shape)} {tensor2.dtype})"
    if dt.name == "bool":
        raise NotImplementedError(f"{op}: not implemented for bool tensors {shapes}")
    if not dt.is_floating_point and isinstance(value, float):
        # torch truncates the value to an int (value=0.5 adds nothing): refused here
        raise RuntimeError(f"{op}: for integral input tensors, argument value must not be a "
                           f"floating point number (value={value}; torch would truncate it to "
                           f"{int(value)}) {shapes}")
    return dt


@_both
def addcmul(input, tensor1, tensor2, *, value=1):
    dt = _addc_dtype("addcmul", input, tensor1, tensor2, value)
    prod = mul(tensor1.to(dt), tensor2.to(dt))
    return add(input.to(dt), prod if value == 1 else mul(prod, value))


@_both
def addcdiv(input, tensor1, tensor2, *, value=1):
    dt = _addc_dtype("addcdiv", input, tensor1, tensor2, value)
    if not (tensor1.dtype.is_floating_point or tensor2.dtype.is_floating_point):
        raise RuntimeError(f"addcdiv: integer division with addcdiv is not supported, as in "
                           f"torch (tensor1 {tensor1.dtype}, tensor2 {tensor2.dtype}); use "
                           f"torch.addcmul(input, tensor1, 1 / tensor2) or torch.div")
    work = D.DTYPES["float32"] if dt.itemsize == 2 else dt   # 16-bit: rounded once, as torch
    out = add(input.to(work), mul(div(tensor1.to(work), tensor2.to(work)), value))
    return out.to(dt)


@_both
def hypot(input, other):
    _tensor_pair("hypot", input, other)
    if not (input.dtype.is_floating_point or other.dtype.is_floating_point):
        raise NotImplementedError(
            f"hypot: not implemented for {input.dtype} and {other.dtype} inputs (torch has "
            "no integer hypot); convert one to a floating dtype")
    dt = _float_dt(input, other)   # computed in the promoted dtype (f32 with f64: f64)
    # float16 / bfloat16 in float32, rounded once at the end (as torch: the
    # scaled 16-bit steps were up to an ulp off, hypot(3, 5) = 5.8125 in bf16)
    work = D.DTYPES["float32"] if dt.itemsize == 2 else dt
    a, b = _tensor_of(input).to(work), _tensor_of(other).to(work)
    # Scaled by s = max(|a|, |b|), held constant for autograd (the gradient
    # stays a / hypot, b / hypot): a plain sqrt(a^2 + b^2) overflows to inf
    # from ~1.8e19 in float32 and underflows to 0 below ~1e-23. An infinite
    # side gives inf even beside NaN, as torch (std::hypot).
    from ._creation import full_like, ones_like
    ad, bd = a.detach().abs(), b.detach().abs()
    s = maximum(ad, bd)
    s = where(logical_or(logical_or(isnan(s), isinf(s)), s == 0), ones_like(s), s)
    h = mul(sqrt(add(square(div(a, s)), square(div(b, s)))), s)
    return where(logical_or(isinf(ad), isinf(bd)), full_like(h, math.inf), h).to(dt)


# ------------------------------------------------------------ comparisons
def _cmp(name, opname):
    def fn(input, other):
        from ._tensor import _compare
        return _compare(opname, input, other)
    fn.__name__ = name
    _both(fn)


for _n, _o in (("eq", "equal"), ("ne", "not_equal"), ("lt", "less"), ("le", "less_equal"),
               ("gt", "greater"), ("ge", "greater_equal")):
    _cmp(_n, _o)
eq, ne, lt, le, gt, ge = (_EXPORTS[_n] for _n in ("eq", "ne", "lt", "le", "gt", "ge"))
for _alias, _n in (("greater", "gt"), ("less", "lt"), ("greater_equal", "ge"),
                   ("less_equal", "le"), ("not_equal", "ne")):
    _EXPORTS[_alias] = _EXPORTS[_n]
    setattr(Tensor, _alias, _EXPORTS[_n])


@_both
def equal(input, other) -> bool:
    return tuple(input.shape) == tuple(other.shape) and bool(eq(input, other).all())


@_both
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    a, b = input.detach().numpy(), _tensor_of(other).detach().numpy()
    from ._creation import _from_numpy_owned
    return _from_numpy_owned(np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))


@_both
def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False) -> bool:
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


@_both
def isnan(input):
    if input.dtype.name == "bool":
        return _w(_ops.logical_and(input._t, False))
    return _w(_ops.isnan(input._t))


@_both
def isinf(input):
    if input.dtype.name == "bool":
        return _w(_ops.logical_and(input._t, False))
    return _w(_ops.isinf(input._t))


@_both
def isfinite(input):
    if input.dtype.name == "bool":
        return _w(_ops.logical_or(input._t, True))
    return _w(_ops.isfinite(input._t))


@_both
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    """``torch.nan_to_num``: NaN, +inf and -inf replaced (by default with 0
    and the dtype's largest and lowest finite values); every dtype,
    differentiable (gradient 1 where the element is kept, 0 where
    replaced)."""
    t = input._t
    if not input.dtype.is_floating_point:
        return _w(_ops.add(t, 0) if t.dtype.name != "bool" else _ops.logical_or(t, False))
    import ml_dtypes
    fi = ml_dtypes.finfo(input.dtype._dg.numpy)
    hi = fi.max if posinf is None else posinf
    lo = fi.min if neginf is None else neginf
    out = _ops.where(_ops.isnan(t), float(nan), t)
    out = _ops.where(_ops.equal(t, math.inf), float(hi), out)
    return _w(_ops.where(_ops.equal(t, -math.inf), float(lo), out))


# -------------------------------------------------------------- reductions
def _red_input(input, dtype, name):
    t = input._t
    if dtype is not None:
        t = _cast(t, D.to_dtype(dtype))
    return t


def _axes(dim, n, op: str = "reduction"):
    """The axes of a reduction's ``dim``: torch reduces every axis for
    ``None`` and for an empty ``()``/``[]`` too (NumPy's empty axis tuple
    reduces nothing)."""
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        return None
    if dim is not None:   # a float or bool dim raises as in torch (int() would truncate it)
        dim = _int_seq(op, "dim", dim, one_int=True)
    d = _dims(dim, n)
    return d


@_both
def sum(input, dim=None, keepdim=False, *, dtype=None):
    t = _red_input(input, dtype, "sum")
    if dtype is None and not D.BY_CODE[t._dtype_code].is_floating_point:
        t = _cast(t, D.DTYPES["int64"])
    return _w(_ops.sum(t, _axes(dim, t.ndim, "sum"), keepdim))


@_both
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    return sum(where(isnan(input), 0.0, input), dim, keepdim, dtype=dtype)


@_both
def mean(input, dim=None, keepdim=False, *, dtype=None):
    t = _red_input(input, dtype, "mean")
    if not D.BY_CODE[t._dtype_code].is_floating_point:
        raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either "
                           f"a floating point or complex dtype. Got: {input.dtype.name.title()}")
    return _w(_ops.mean(t, _axes(dim, t.ndim, "mean"), keepdim))


@_both
def prod(input, dim=None, keepdim=False, *, dtype=None):
    t = _red_input(input, dtype, "prod")
    if dtype is None and not D.BY_CODE[t._dtype_code].is_floating_point:
        t = _cast(t, D.DTYPES["int64"])
    return _w(_ops.prod(t, _axes(dim, t.ndim, "prod"), keepdim))


def _correction(unbiased, correction):
    if correction is not None:
        return int(correction)
    return 1 if unbiased in (None, True) else 0


@_both
def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    t = _float_t(input._t)
    return _w(_ops.std(t, _axes(dim, t.ndim, "std"), keepdim, _correction(unbiased, correction)))


@_both
def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    t = _float_t(input._t)
    return _w(_ops.var(t, _axes(dim, t.ndim, "var"), keepdim, _correction(unbiased, correction)))


@_export
def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return (std(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


@_export
def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return (var(input, dim, unbiased, keepdim, correction=correction),
            mean(input, dim, keepdim))


@_both
def logsumexp(input, dim, keepdim=False):
    t = _float_t(input._t)
    if isinstance(dim, (tuple, list)) and len(dim) == 0:
        raise RuntimeError("logsumexp(): dim=() is not supported (torch refuses it too); "
                           "name the dims to reduce")
    if t.ndim == 0:   # torch: dim 0 / -1 of a 0-d tensor is the element itself
        _dims(dim, 1)
        return _w(_ops.reshape(_ops.logsumexp(_ops.reshape(t, [1]), [0]), []))
    return _w(_ops.logsumexp(t, _axes(dim, t.ndim, "logsumexp"), keepdim))


def _no_empty_reduction(name, t, axes):
    for a in (range(t.ndim) if axes is None else axes):
        if t.shape[a] == 0:
            raise IndexError(f"{name}(): Expected reduction dim {a} to have non-zero size.")


@_both
def amax(input, dim=(), keepdim=False):
    t = input._t
    axes = None if dim in ((), None, []) else _axes(dim, t.ndim, "amax")
    _no_empty_reduction("amax", t, axes)
    return _w(_extremum_nan_grad(_ops.max, t, axes, keepdim))


@_both
def amin(input, dim=(), keepdim=False):
    t = input._t
    axes = None if dim in ((), None, []) else _axes(dim, t.ndim, "amin")
    _no_empty_reduction("amin", t, axes)
    return _w(_extremum_nan_grad(_ops.min, t, axes, keepdim))


def _extremum_nan_grad(reduce, t, axes, keepdim):
    """``reduce`` (Max/Min) over ``axes`` with torch's amax/amin gradient
    where a reduced group holds a NaN: torch's ``dy / count * (x == m)``
    counts no element equal to a NaN extremum, so every element of that
    group gets NaN (Max's rule would hand the NaN elements dy)."""
    m = reduce(t, axes, keepdim)
    if not _records(t) or not _DT_FLOAT(t):
        return m
    mk = reduce(t.detach(), axes, True)
    nan = _ops.isnan(mk)                                   # keepdim shape
    # NaN * x in those groups only (0 elsewhere, and x kept out there)
    c = _ops.where(nan, math.nan, _ops.mul(mk, 0.0))
    c = _ops.where(_ops.isnan(c), c, 0.0)
    extra = _ops.sum(_ops.mul(_ops.where(nan, t, 0.0), c), axes, keepdim)
    return _ops.where(_ops.isnan(m), extra, m)


def _minmax(kind, input, dim, keepdim, other):
    if isinstance(dim, Tensor) and other is None:
        return (maximum if kind == "max" else minimum)(input, dim)
    if other is not None:
        return (maximum if kind == "max" else minimum)(input, other)
    t = input._t
    if dim is None:
        if not t.size:   # dragon's Max gives -inf here (ONNX's rule); torch refuses
            raise RuntimeError(f"{kind}(): Expected reduction dim to be specified for "
                               f"input.numel() == 0. Specify the reduction dim with the "
                               f"'dim' argument.")
        return _w((_ops.max if kind == "max" else _ops.min)(t))
    if t.ndim == 0:   # torch: a 0-d input is its own extremum, at index 0
        _dim(int(dim), 1)
        return values_indices(input.clone(), _w(_as_dg(0, D.DTYPES["int64"], t.device)))
    d = _dim(int(dim), t.ndim)
    _no_empty_reduction(kind, t, [d])
    if t.dtype.name == "bool":   # ArgMax/Max take no bool: on uint8 (same order, same ties)
        v, i = _minmax(kind, _w(_cast(t, D.DTYPES["uint8"])), d, keepdim, None)
        return values_indices(_w(_cast(v._t, D.DTYPES["bool"])), i)
    idx = (_ops.argmax if kind == "max" else _ops.argmin)(t, d, keepdim)
    if _records(t) and t.ndim:
        # torch's gradient goes to the returned index only (not shared among
        # ties, as amax's is). The values are picked on the device (no host
        # copy of the indices, so a compiled step stays input-dependent):
        # a one-hot mask (position == index) keeps the picked element and
        # -0.0 elsewhere, and the sum along ``d`` is then exactly that
        # element (NaN and inf included; a picked -0.0 comes back +0.0, as
        # the sum starts at +0.0: see docs/from-pytorch.md).
        at = idx if keepdim else _ops.unsqueeze(idx, [d])
        shape = [1] * t.ndim
        shape[d] = t.shape[d]
        pos = _ops.reshape(_ops.arange(t.shape[d], dtype=D.DTYPES["int64"]._dg,
                                       device=str(t.device)), shape)
        mask = _ops.equal(pos, _cast(at, D.DTYPES["int64"]))
        values = _ops.sum(_ops.where(mask, t, -0.0), [d], keepdim)
    else:
        values = (_ops.max if kind == "max" else _ops.min)(t, [d], keepdim)
    return values_indices(_w(values), _w(_cast(idx, D.DTYPES["int64"])))


@_both
def max(input, dim=None, keepdim=False, *, other=None):
    return _minmax("max", input, dim, keepdim, other)


@_both
def min(input, dim=None, keepdim=False, *, other=None):
    return _minmax("min", input, dim, keepdim, other)


@_both
def argmax(input, dim=None, keepdim=False):
    t = input._t
    if dim is None:
        return _w(_cast(_ops.argmax(_ops.reshape(t, [-1]), 0), D.DTYPES["int64"]))
    return _w(_cast(_ops.argmax(t, _dim(dim, t.ndim), keepdim), D.DTYPES["int64"]))


@_both
def argmin(input, dim=None, keepdim=False):
    t = input._t
    if dim is None:
        return _w(_cast(_ops.argmin(_ops.reshape(t, [-1]), 0), D.DTYPES["int64"]))
    return _w(_cast(_ops.argmin(t, _dim(dim, t.ndim), keepdim), D.DTYPES["int64"]))


_BOOL_EXTREMA: dict = {}


def _bool_extrema_on(device_type: str) -> bool:
    """Whether ``device_type`` has bool Max and Min kernels (cpu_eigen's
    any/all folds); read once per device type from the kernel registry."""
    ok = _BOOL_EXTREMA.get(device_type)
    if ok is None:
        from dragon_core import plugins
        ok = builtins.all(builtins.any(k["device"] == device_type and k["dtypes"] == "bool"
                                       for k in plugins.kernels(op)) for op in ("Max", "Min"))
        _BOOL_EXTREMA[device_type] = ok
    return ok


def _truth(input, dim, keepdim, want_all):
    """``torch.any`` (``want_all`` False) / ``torch.all`` as bool: element
    truth is a cast to bool (x != 0, NaN true; never a truncating cast to
    an integer, which made any([0.5]) False), then a bool Max (any) or Min
    (all) over ``dim``, whose empty fold is False / True. A device without
    bool Max/Min kernels counts the true (or false) elements instead. A
    comparison with a Python 0 would cost a scalar conversion per call:
    the cast is both the cheapest and the exact truth test."""
    t = input._t
    hit = _cast(t, _BOOL_DT)
    if isinstance(dim, (tuple, list)) and len(dim) == 0:   # torch: dim=() reduces nothing
        return _ops.logical_and(hit, True) if hit is t else hit   # (always a new tensor)
    axes = _axes(dim, t.ndim, "all" if want_all else "any")
    if _bool_extrema_on(t._device_name.split(":")[0]):
        return (_ops.min if want_all else _ops.max)(hit, axes, keepdim)
    if want_all:   # all: no element is false
        return _ops.logical_not(_cast(_ops.sum(_ops.logical_not(hit), axes, keepdim), _BOOL_DT))
    return _cast(_ops.sum(hit, axes, keepdim), _BOOL_DT)


_BOOL_DT = D.DTYPES["bool"]


def _truth_dtype(input):
    # torch keeps uint8 for uint8 inputs (its legacy mask dtype); bool otherwise
    return D.DTYPES["uint8"] if input.dtype == D.DTYPES["uint8"] else _BOOL_DT


@_both
def all(input, dim=None, keepdim=False):
    """``torch.all``: whether no element along ``dim`` is zero (True over
    an empty axis)."""
    return _w(_cast(_truth(input, dim, keepdim, True), _truth_dtype(input)))


@_both
def any(input, dim=None, keepdim=False):
    """``torch.any``: whether some element along ``dim`` is non-zero (NaN
    counts as non-zero; False over an empty axis)."""
    return _w(_cast(_truth(input, dim, keepdim, False), _truth_dtype(input)))


@_both
def count_nonzero(input, dim=None):
    return sum(ne(input, 0), dim)


@_both
def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if p == "fro" and isinstance(dim, (tuple, list)) and len(dim) > 2:
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {tuple(dim)} "
                           f"(use torch.linalg.vector_norm over more dims)")
    t = _float_t(input._t)
    axes = _axes(dim, t.ndim, "norm")
    if p in ("fro", 2, 2.0) or p is None:
        return _w(_root_of_sum(t, axes, keepdim, 2.0))
    if p in (1, 1.0):
        return _w(_ops.sum(_ops.abs(t), axes, keepdim))
    if p == float("inf"):
        return _w(_ops.max(_ops.abs(t), axes, keepdim))
    if p == -float("inf"):
        return _w(_ops.min(_ops.abs(t), axes, keepdim))
    if p == 0:   # the number of non-zero elements (no gradient reaches x, as in torch)
        return _w(_ops.sum(_ops.cast(_ops.not_equal(t, 0), t.dtype), axes, keepdim))
    if isinstance(p, numbers.Real):
        return _w(_root_of_sum(t, axes, keepdim, float(p)))
    raise NotImplementedError(f"norm(p={p!r}) is not supported; use torch.linalg for "
                              "matrix norms")


def _root_of_sum(t, axes, keepdim, p):
    """(sum |t|^p)^(1/p) over ``axes`` as torch's vector norm: float16 /
    bfloat16 in float32, rounded once (300^2 overflowed float16: norm of
    [300, 400] was inf, of [1e-4, 1e-4] 0), and a zero gradient where the
    norm or an element is 0 (the derivatives there are inf * 0 = NaN; torch
    gives 0)."""
    dt = D.BY_CODE[t._dtype_code]
    if dt.itemsize == 2:
        t = _ops.cast(t, D.DTYPES["float32"]._dg)
    wdt = D.BY_CODE[t._dtype_code]
    if p == 2.0:
        s = _ops.sum(_ops.square(t), axes, keepdim)
    elif not _records(t):
        s = _ops.sum(_ops.pow(_ops.abs(t), _as_dg(p, wdt)), axes, keepdim)
    else:
        # |x|^p with a zero gradient at x = 0 (torch's masked backward; the
        # derivative p |x|^(p-1) is 0 * inf = NaN there for p < 1)
        a = _ops.abs(t)
        at0 = _ops.equal(a, 0.0)
        ones = _ops.add(_ops.mul(a.detach(), 0.0), 1.0)   # a constant (inf * 0 is NaN)
        powed = _ops.pow(_ops.where(at0, ones, a), _as_dg(p, wdt))
        s = _ops.sum(_ops.where(at0, _ops.mul(ones, 0.0 if p > 0 else math.inf), powed),
                     axes, keepdim)
    if _records(s):
        zero = _ops.equal(s, 0.0)
        root = _ops.sqrt(_ops.where(zero, _ops.add(_ops.mul(s, 0.0), 1.0), s)) if p == 2.0 \
            else _ops.pow(_ops.where(zero, _ops.add(_ops.mul(s, 0.0), 1.0), s),
                          _as_dg(1.0 / p, wdt))
        out = _ops.where(zero, _ops.mul(s, 0.0), root)
    else:
        out = _ops.sqrt(s) if p == 2.0 else _ops.pow(s, _as_dg(1.0 / p, wdt))
    return _cast(out, dt)


@_both
def dist(input, other, p=2):
    return norm(sub(input, other), p)


def _move_last(t, d):
    n = t.ndim
    if d == n - 1:
        return t, None
    perm = [i for i in range(n) if i != d] + [d]
    inv = list(np.argsort(perm))
    return _ops.transpose(t, perm), inv


_SCAN_CODES = None


def _scan_native(t) -> bool:
    """Whether the native scan/sort ops (float32/64, int32/64) take ``t``."""
    global _SCAN_CODES
    if _SCAN_CODES is None:
        _SCAN_CODES = {D.DTYPES[n]._dg.code for n in ("float32", "float64", "int32", "int64")}
    return t._dtype_code in _SCAN_CODES


@_both
def cumsum(input, dim, *, dtype=None):
    """``torch.cumsum``: the native CumSum (differentiable); integer and
    bool inputs accumulate in int64 as torch does; float16/bfloat16 in
    float32, cast back."""
    t = input._t
    if dtype is not None:
        t = _cast(t, D.to_dtype(dtype))
    elif not D.BY_CODE[t._dtype_code].is_floating_point:
        t = _cast(t, D.DTYPES["int64"])
    if t.ndim == 0:
        _dim(dim, 1)
        return _w(t) if not _records(t) else _w(_ops.mul(t, 1))
    d = _dim(dim, t.ndim)
    if _scan_native(t):
        return _w(_ops.cumsum(t, d))
    dt = D.BY_CODE[t._dtype_code]
    return _w(_ops.cast(_ops.cumsum(_ops.cast(t, D.DTYPES["float32"]._dg), d), dt._dg))


@_both
def cumprod(input, dim, *, dtype=None):
    """``torch.cumprod``: on the host (NumPy) when nothing records; under
    autograd a log-depth scan of Mul (``_cumprod_scan``), differentiable to
    any order and exact where elements are 0 (float16/bfloat16 computed in
    float32 and rounded once). Integer and bool inputs give int64."""
    t = input._t
    if _records(t):
        dt = D.to_dtype(dtype) if dtype is not None else D.BY_CODE[t._dtype_code]
        t = _cast(t, dt)
        if t.ndim == 0:
            _dim(dim, 1)
            return _w(_ops.mul(t, 1))
        d = _dim(dim, t.ndim)
        if dt.name in ("float16", "bfloat16"):
            wide = _cumprod_scan(_ops.cast(t, D.DTYPES["float32"]._dg), d)
            return _w(_ops.cast(wide, dt._dg))
        return _w(_cumprod_scan(t, d))
    from ._creation import _from_numpy_owned
    arr = t.numpy()
    dt = D.to_dtype(dtype) if dtype is not None else (
        D.BY_CODE[t._dtype_code] if D.BY_CODE[t._dtype_code].is_floating_point else D.DTYPES["int64"])
    if dt.name in ("float16", "bfloat16"):   # as torch: in float32, rounded once
        out = np.cumprod(arr.astype(np.float32), axis=_dim(dim, t.ndim)).astype(dt._dg.numpy)
    else:
        out = np.cumprod(arr, axis=_dim(dim, t.ndim), dtype=dt._dg.numpy)
    return _from_numpy_owned(out.reshape(arr.shape))   # a 0-d input stays 0-d


def _take_along(t, idx: np.ndarray, d: int):
    """``t`` gathered along ``d`` at integer positions ``idx`` (same ndim,
    torch.gather semantics), differentiable w.r.t. ``t``."""
    shape = idx.shape
    strides = np.cumprod((list(t.shape[1:]) + [1])[::-1])[::-1]
    grids = np.indices(shape, sparse=True)
    flat = np.zeros(shape, np.int64)
    for k in range(len(shape)):
        flat = flat + (idx if k == d else grids[k]) * int(strides[k])
    fi = _C._from_numpy_copy(_np_c(flat.reshape(-1)))
    if t._device_name != "cpu":
        fi = fi._to_device(str(t.device))
    out = _ops.gather(_ops.reshape(t, [-1]), fi, 0)
    return _ops.reshape(out, list(shape))


def _sort_host(t, d, descending):
    """Stable sort on the host for the dtypes the native Sort lacks."""
    arr = t.detach().numpy() if t._device_name == "cpu" else t.cpu().numpy()
    if descending:
        idx = np.flip(np.argsort(np.flip(arr, d), axis=d, kind="stable"), d)
        idx = arr.shape[d] - 1 - idx
    else:
        idx = np.argsort(arr, axis=d, kind="stable")
    idx = _np_c(idx)
    values = _take_along(t, idx, d)
    i = _C._from_numpy_copy(idx.astype(np.int64))
    return values, (i if t._device_name == "cpu" else i._to_device(str(t.device)))


@_both
def sort(input, dim=-1, descending=False, stable=False):
    """``torch.sort``: the native Sort (always stable, so ``stable=False``
    gives one of torch's valid orders: equal values keep index order; NaN
    sorts last ascending, first descending, as torch). Differentiable."""
    t = input._t
    if t.ndim == 0:
        _dim(dim, 1)
        return values_indices(input.clone(), _w(_as_dg(0, D.DTYPES["int64"])))
    d = _dim(dim, t.ndim)
    if _scan_native(t):
        v, i = _ops.sort(t, d, descending=bool(descending))
    else:
        v, i = _sort_host(t, d, descending)
    return values_indices(_w(v), _w(i))


@_both
def argsort(input, dim=-1, descending=False, stable=False):
    """``torch.argsort``: the native ArgSort (stable; see ``sort``)."""
    t = input._t
    if t.ndim == 0 or not _scan_native(t):
        return sort(input, dim, descending, stable)[1]
    return _w(_ops.argsort(t, _dim(dim, t.ndim), descending=bool(descending)))


@_both
def msort(input):
    return sort(input, 0)[0]


@_both
def topk(input, k, dim=-1, largest=True, sorted=True):
    """``torch.topk``: the native TopK (always sorted; ties go to the lower
    index). Differentiable w.r.t. the values."""
    t = input._t
    d = _dim(dim, t.ndim if t.ndim else 1)
    if not 0 <= k <= (t.shape[d] if t.ndim else 1):
        raise RuntimeError(f"topk: selected index k out of range (k={k}, input of shape "
                           f"{list(t.shape)}, dim {dim})")
    if t.ndim and _scan_native(t):
        v, i = _ops.topk(t, int(k), d, largest=bool(largest))
        return values_indices(_w(v), _w(i))
    v, i = sort(input, d, descending=largest)
    if not t.ndim:
        return values_indices(v, i)
    return values_indices(v.narrow(d, 0, k), i.narrow(d, 0, k))


@_both
def kthvalue(input, k, dim=-1, keepdim=False):
    v, i = sort(input, dim)
    d = _dim(dim, input.ndim)
    v, i = v.narrow(d, k - 1, 1), i.narrow(d, k - 1, 1)
    if not keepdim:
        v, i = v.squeeze(d), i.squeeze(d)
    return values_indices(v, i)


@_both
def median(input, dim=None, keepdim=False):
    if input.dtype.name == "bool":
        raise NotImplementedError("\"median_cpu\" not implemented for 'Bool'")
    if input.ndim == 0 and dim is not None:   # torch: the value itself, at index 0
        _dim(dim, 1)
        return values_indices(input.clone(), _w(_as_dg(0, D.DTYPES["int64"], input._t.device)))
    if dim is None:
        flat = input.reshape(-1)
        v, _ = sort(flat)
        # a NaN anywhere makes the median NaN (torch); sort puts NaNs last
        v = where(isnan(v[-1]), v[-1], v[(flat.numel() - 1) // 2]) \
            if flat.numel() and input.dtype.is_floating_point else v[(flat.numel() - 1) // 2]
        t = flat._t
        if not _records(t):
            return v
        # torch's gradient of median() splits dy evenly among every element
        # equal to the median (every NaN for a NaN median), not the one
        # position sort picked: the Max (Min for a -inf median) of the
        # input with every other element pushed to -inf (+inf) has that
        # value and that gradient (Max/Min split ties evenly).
        vc = v._t.detach()
        hit = _ops.logical_or(_ops.equal(t, vc),
                              _ops.logical_and(_ops.isnan(t), _ops.isnan(vc)))
        hi = _ops.max(_ops.where(hit, t, -math.inf), None, False)
        lo = _ops.min(_ops.where(hit, t, math.inf), None, False)
        return _w(_ops.where(_ops.equal(vc, -math.inf), lo, hi))
    d = _dim(dim, input.ndim)
    n = input.shape[d]
    r = kthvalue(input, (n - 1) // 2 + 1, d, True)
    if n and input.dtype.is_floating_point:
        # torch: a row holding a NaN has median NaN, at its first NaN (sort
        # puts NaNs last, so kthvalue would pick a number)
        nan = isnan(input)
        i = where(nan.any(d, keepdim=True), argmax(nan.to(D.DTYPES["uint8"]), d, keepdim=True),
                  r.indices)
        r = values_indices(gather(input, d, i), i)
    if not keepdim:
        r = values_indices(r.values.squeeze(d), r.indices.squeeze(d))
    return r


@_both
def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """``torch.unique``: the distinct values of the flattened input, or the
    distinct slices along ``dim`` (the native Unique with ``axis``; sorted
    ascending, slices lexicographically; torch's ``sorted=False`` order is
    unspecified, sorted is one of its valid answers); other dtypes than
    float32/64, int32/64 on the host (``numpy.unique``)."""
    if dim is not None:
        if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)):
            raise TypeError(f"unique(): dim must be an int, got {type(dim).__name__}")
        nd = len(input.shape)
        if not -nd <= int(dim) < nd:
            raise IndexError(f"unique(): dim {dim} is out of range for a tensor of "
                             f"{nd} dimensions (shape {list(input.shape)})")
        dim = int(dim) % nd
    t = input._t
    if _scan_native(t):
        res = _ops.unique(t.detach() if _records(t) else t, return_inverse=return_inverse,
                          return_counts=return_counts, axis=dim)
        if not isinstance(res, tuple):
            return _w(res)
        return tuple(_w(r) for r in res)
    from ._creation import _from_numpy_owned
    res = np.unique(input.detach().cpu().numpy(), return_inverse=return_inverse,
                    return_counts=return_counts, axis=dim)
    if not isinstance(res, tuple):
        return _from_numpy_owned(res)
    out = [_from_numpy_owned(res[0])]
    k = 1
    if return_inverse:
        inv = res[k].reshape(input.shape if dim is None else (-1,))
        out.append(_from_numpy_owned(inv.astype(np.int64)))
        k += 1
    if return_counts:
        out.append(_from_numpy_owned(res[k].astype(np.int64)))
    return tuple(out)


@_both
def bincount(input, weights=None, minlength=0):
    from ._creation import _from_numpy_owned
    w = None if weights is None else weights.detach().numpy()
    return _from_numpy_owned(np.bincount(input.numpy(), w, minlength))


# ------------------------------------------------------------- shape/views
def _view_or_op(input, np_fn, op_fn):
    t = input._t
    if _host_view_ok(t):
        return _note_alias(input, _w(_from_np_view(np_fn(t.numpy()))))
    out = _w(op_fn(t))
    if _records(t) or _tracing():
        _note_copy_view(input, out)
    return out


def _infer_shape(shape, numel):
    shape = list(shape)
    if shape.count(-1) > 1:
        raise RuntimeError("only one dimension can be inferred")
    if -1 in shape:
        known = math.prod(s for s in shape if s != -1)
        if known == 0 or numel % known:
            raise RuntimeError(f"shape '{shape}' is invalid for input of size {numel}")
        shape[shape.index(-1)] = numel // known
    if math.prod(shape) != numel:
        raise RuntimeError(f"shape '{shape}' is invalid for input of size {numel}")
    return shape


@_method_only
def view(self, *shape):
    if len(shape) == 1 and isinstance(shape[0], D.dtype):
        raise NotImplementedError("view(dtype) is not supported; use .to(dtype) (copies)")
    shape = _infer_shape(_shape_args(shape), int(self._t.size))
    if self._t._device_name == "cpu" and not self._t.is_contiguous():
        # (a contiguous tensor views as any shape of its size: no probe)
        probe = self._t.numpy().view()
        try:
            probe.shape = shape   # NumPy refuses exactly when a copy would be needed
        except AttributeError:
            raise RuntimeError("view size is not compatible with input tensor's size and "
                               "stride (at least one dimension spans across two contiguous "
                               "subspaces). Use .reshape(...) instead.") from None
    return _view_or_op(self, lambda a: a.reshape(shape), lambda t: _ops.reshape(t, shape))


@_method_only
def reshape(input, *shape):
    """``Tensor.reshape``: the sizes as separate ints or one sequence (the
    function ``torch.reshape(input, shape)`` takes one sequence only)."""
    shape = _infer_shape(_shape_args(shape), int(input._t.size))
    return _view_or_op(input, lambda a: a.reshape(shape), lambda t: _ops.reshape(t, shape))


def _reshape_fn(input, shape):
    """``torch.reshape(input, shape)``: ``shape`` one sequence of ints (a
    bare int raises TypeError, as in torch)."""
    return reshape(input, _int_seq("reshape", "shape", shape, 2))


_EXPORTS["reshape"] = _reshape_fn


@_method_only
def view_as(self, other):
    return self.view(other.shape)


@_method_only
def reshape_as(self, other):
    return self.reshape(other.shape)


@_export
def permute(input, dims):
    """``torch.permute(input, dims)``: ``dims`` one sequence of ints (a
    bare int or separate ints raise TypeError, as in torch; the method
    ``x.permute(1, 0)`` takes them separately)."""
    n = input._t.ndim
    dims = _int_seq("permute", "dims", dims, 2)
    if len(dims) != n:
        raise RuntimeError(f"permute(): number of dims don't match in permute: the input of "
                           f"shape {list(input.shape)} has {n} dimensions, dims {dims} has "
                           f"{len(dims)}")
    perm = [_dim(d, n) for d in dims]
    if sorted_(perm) != list(range(n)):
        raise RuntimeError(f"permute(): dims {dims} are not a permutation of the {n} dimensions "
                           f"of the input of shape {list(input.shape)} (repeated dim)")
    return _view_or_op(input, lambda a: a.transpose(perm), lambda t: _ops.transpose(t, perm))


def _permute_method(self, *dims, **kwargs):
    """``Tensor.permute``: the dims as separate ints or as one sequence."""
    if "dims" in kwargs:
        if dims:
            raise TypeError("permute() got multiple values for argument 'dims'")
        return permute(self, _int_seq("permute", "dims", kwargs.pop("dims")), **kwargs)
    if not dims:
        raise TypeError('permute() missing 1 required positional arguments: "dims"')
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        return permute(self, _int_seq("permute", "dims", dims[0], 1), **kwargs)
    return permute(self, _int_seq("permute", "dims", list(dims), 1), **kwargs)


Tensor.permute = _permute_method


def sorted_(x):
    return builtins.sorted(x)


@_both
def transpose(input, dim0, dim1):
    n = input._t.ndim
    perm = list(range(n))
    a, b = _dim(dim0, n), _dim(dim1, n)
    if n < 2:   # 0-d and 1-d: dims 0/-1 only, nothing moves
        return _view_or_op(input, lambda a: a, lambda t: _ops.reshape(t, list(t.shape)))
    perm[a], perm[b] = perm[b], perm[a]
    return _view_or_op(input, lambda x: x.transpose(perm), lambda t: _ops.transpose(t, perm))


_EXPORTS["swapaxes"] = transpose
_EXPORTS["swapdims"] = transpose
Tensor.swapaxes = transpose
Tensor.swapdims = transpose


@_both
def t(input):
    if input.ndim > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is "
                           f"{input.ndim}D")
    return transpose(input, 0, 1) if input.ndim == 2 else input


Tensor.T = property(lambda self: permute(self, list(range(self.ndim))[::-1]))
Tensor.mT = property(lambda self: transpose(self, -2, -1))


@_both
def movedim(input, source, destination):
    n = input.ndim
    if isinstance(source, (list, tuple)) != isinstance(destination, (list, tuple)):
        raise TypeError(f"movedim(): source and destination must both be ints or both "
                        f"sequences of ints, got {type(source).__name__} and "
                        f"{type(destination).__name__}")
    src = [_dim(s, n) for s in _int_seq("movedim", "source", source, 2, one_int=True)]
    dst = [_dim(s, n) for s in _int_seq("movedim", "destination", destination, 3, one_int=True)]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({source} dims) "
                           f"should contain the same number of dims as destination "
                           f"({destination} dims)")
    for what, ds, given in (("source", src, source), ("destination", dst, destination)):
        if len(set(ds)) != len(ds):
            raise RuntimeError(f"movedim: repeated dim in `{what}` ({given}) for the input of "
                               f"shape {list(input.shape)}")
    order = [i for i in range(n) if i not in src]
    for d, s in builtins.sorted(zip(dst, src)):
        order.insert(d, s)
    if n == 0:   # dims 0/-1 of a 0-d tensor: nothing moves
        return _view_or_op(input, lambda a: a, lambda t: _ops.reshape(t, []))
    return permute(input, order)


_EXPORTS["moveaxis"] = movedim
Tensor.moveaxis = movedim


@_both
def squeeze(input, dim=None):
    t = input._t
    if dim is None:
        axes = [i for i, s in enumerate(t.shape) if s == 1]
    else:
        axes = [d for d in _dims(dim, t.ndim) if t.shape[d] == 1] if t.ndim else []
    if not axes:
        return _view_or_op(input, lambda a: a, lambda t: _ops.reshape(t, list(t.shape)))
    shape = [s for i, s in enumerate(t.shape) if i not in axes]
    return _view_or_op(input, lambda a: a.reshape(shape), lambda t: _ops.squeeze(t, axes))


@_both
def unsqueeze(input, dim):
    t = input._t
    d = _dim(dim, t.ndim + 1)
    shape = list(t.shape)
    shape.insert(d, 1)
    return _view_or_op(input, lambda a: a.reshape(shape), lambda t: _ops.unsqueeze(t, [d]))


@_both
def flatten(input, start_dim=0, end_dim=-1):
    t = input._t
    if t.ndim == 0:
        return reshape(input, 1)
    s, e = _dim(start_dim, t.ndim), _dim(end_dim, t.ndim)
    shape = list(t.shape[:s]) + [int(math.prod(t.shape[s:e + 1]))] + list(t.shape[e + 1:])
    return reshape(input, shape)


@_both
def unflatten(input, dim, sizes):
    d = _dim(dim, input.ndim)
    shape = list(input.shape)
    sizes = _int_seq("unflatten", "sizes", sizes, 2)
    if -1 in sizes:
        known = math.prod(s for s in sizes if s != -1)
        sizes[sizes.index(-1)] = shape[d] // known
    return reshape(input, shape[:d] + sizes + shape[d + 1:])


@_both
def ravel(input):
    return reshape(input, -1)


@_method_only
def expand(self, *sizes):
    if not sizes:
        raise TypeError('expand() missing 1 required positional arguments: "size"')
    sizes = list(_shape_args(sizes))
    t = self._t
    lead = len(sizes) - t.ndim
    if lead < 0:
        raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater "
                           f"or equal to the number of dimensions in the tensor ({t.ndim})")
    shape = [t.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes)]
    for i in range(t.ndim):
        if t.shape[i] != 1 and t.shape[i] != shape[i + lead]:
            raise RuntimeError(f"The expanded size of the tensor ({shape[i + lead]}) must match "
                               f"the existing size ({t.shape[i]}) at non-singleton dimension "
                               f"{i + lead}.  Target sizes: {sizes}.  Tensor sizes: "
                               f"{list(t.shape)}")
    return _view_or_op(self, lambda a: _broadcast_view(a, shape),
                       lambda t: _ops.broadcast_to(t, shape))


def _broadcast_view(a, shape):
    """A stride-0 view of ``a`` with ``shape``, writable when ``a`` is (a
    write through an expanded tensor reaches its one element, as in torch;
    in-place ops on it raise torch's overlap error, see _check_overlap)."""
    b = np.broadcast_to(a, shape)
    if a.flags.writeable:
        # made writable in place rather than rebuilt with as_strided, whose
        # non-ndarray base would cut the view off from a's storage (its
        # own version counter: autograd would miss writes through it)
        b.flags.writeable = True
    return b


@_method_only
def expand_as(self, other):
    return self.expand(other.shape)


@_export
def broadcast_to(input, size):
    return input.expand(*_int_seq("broadcast_to", "size", size, 2))


@_export
def broadcast_tensors(*tensors):
    shape = np.broadcast_shapes(*[tuple(t.shape) for t in tensors])
    return tuple(t.expand(*shape) for t in tensors)


@_export
def broadcast_shapes(*shapes):
    return Size(np.broadcast_shapes(*shapes))


@_both
def narrow(input, dim, start, length):
    t = input._t
    d = _dim(dim, t.ndim)
    start = int(start)
    if start < 0:
        start += t.shape[d]
    if not (0 <= start and start + length <= t.shape[d]):
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({t.shape[d]}).")
    key = (slice(None),) * d + (slice(start, start + length),)
    return _view_or_op(input, lambda a: a[key],
                       lambda t: _ops.slice(t, [start], [start + length], [1], [d]))


@_method_only
def unfold(self, dimension, size, step):
    raise NotImplementedError("Tensor.unfold is not supported; use narrow in a loop and "
                              "torch.stack")


@_both
def repeat_interleave(input, repeats, dim=None):
    if isinstance(repeats, Tensor):
        repeats = repeats.tolist()
    x = input if dim is not None else input.reshape(-1)
    d = 0 if dim is None else _dim(dim, x.ndim)
    n = x.shape[d]
    reps = [repeats] * n if isinstance(repeats, int) else list(repeats)
    idx = np.repeat(np.arange(n), reps)
    return index_select(x, d, idx)


@_method_only
def repeat(self, *sizes):
    sizes = list(_shape_args(sizes))
    if builtins.any(r < 0 for r in sizes):
        raise RuntimeError(f"Trying to create tensor with negative dimension: repeat{tuple(sizes)}")
    if len(sizes) < self.ndim:
        raise RuntimeError(f"Number of dimensions of repeat dims can not be smaller than number "
                           f"of dimensions of tensor (repeat{tuple(sizes)} of a tensor of shape "
                           f"{list(self.shape)})")
    x = self
    if len(sizes) > x.ndim:
        x = x.reshape([1] * (len(sizes) - x.ndim) + list(x.shape))
    out = x
    for d, r in enumerate(sizes):
        if r != 1:
            out = cat([out] * r, d) if r > 0 else narrow(out, d, 0, 0)
    # torch.repeat always copies (even all-ones repeats): never the input's memory
    return out if out is not x else x.clone()


@_export
def tile(input, dims):
    dims = _int_seq("tile", "dims", dims, 2)
    if len(dims) < input.ndim:
        dims = [1] * (input.ndim - len(dims)) + dims
    return input.repeat(*dims)


Tensor.tile = lambda self, *dims: tile(
    self, _int_seq("tile", "dims", dims[0] if len(dims) == 1 and isinstance(dims[0], (list, tuple))
                   else list(dims), 1))


@_both
def flip(input, dims):
    """``torch.flip(input, dims)``: ``dims`` one sequence of ints (a bare
    int raises TypeError, as in torch; ``x.flip(0)`` is the method's
    varargs form)."""
    t = input._t
    ds = _dims(_int_seq("flip", "dims", dims, 2), t.ndim)
    if len(set(ds)) != len(ds):
        raise RuntimeError(f"flip(): dim {builtins.max(ds, key=ds.count)} appears multiple "
                           f"times in the list of dims")
    if _host_view_ok(t):
        # torch.flip returns a copy: a write to the result never reaches input
        return _w(_C._from_numpy_copy(_np_c(np.flip(t.numpy(), ds) if t.ndim else t.numpy())))
    out = t if t.ndim else _ops.add(t, 0)   # a 0-d tensor flips to a copy of itself
    for d in (ds if t.ndim else ()):
        n = out.shape[d]
        if n > 1:
            out = _ops.gather(out, _as_dg(np.arange(n - 1, -1, -1), D.DTYPES["int64"]), d)
    return _w(out)


def _flip_method(self, *dims, **kwargs):
    """``Tensor.flip``: the dims as one sequence or as separate ints
    (``x.flip(0, 1)``), as in torch."""
    if "dims" in kwargs:
        if dims:
            raise TypeError("flip() got multiple values for argument 'dims'")
        return flip(self, _int_seq("flip", "dims", kwargs.pop("dims")), **kwargs)
    if not dims:
        raise TypeError('flip() missing 1 required positional arguments: "dims"')
    if len(dims) == 1 and isinstance(dims[0], (list, tuple, Size)):
        return flip(self, _int_seq("flip", "dims", dims[0], 1), **kwargs)
    if len(dims) == 1:
        return flip(self, _int_seq("flip", "dims", dims[0], 1, one_int=True), **kwargs)
    return flip(self, _int_seq("flip", "dims", list(dims), 1), **kwargs)


Tensor.flip = _flip_method


@_both
def fliplr(input):
    return flip(input, [1])


@_both
def flipud(input):
    return flip(input, [0])


@_both
def roll(input, shifts, dims=None):
    if dims is None:
        shifts = _int_seq("roll", "shifts", shifts, 2, one_int=True)
        if len(shifts) != 1:
            raise RuntimeError(f"roll(): shifts {shifts} without dims: one shift only (the "
                               f"flattened input of shape {list(input.shape)} is rolled)")
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    shifts = _int_seq("roll", "shifts", shifts, 2, one_int=True)
    dims = _int_seq("roll", "dims", dims, 3, one_int=True)
    if len(shifts) != len(dims):
        # (zip would silently drop the extra shifts or dims)
        raise RuntimeError(f"roll(): shifts and dimensions must align. shifts: {len(shifts)}, "
                           f"dims: {len(dims)} (input of shape {list(input.shape)})")
    out = input
    for s, d in zip(shifts, dims):
        d = _dim(d, out.ndim)
        n = out.shape[d]
        idx = (np.arange(n) - s) % n
        out = index_select(out, d, idx)
    return out


@_export
def cat(tensors, dim=0):
    tensors = [t for t in tensors]
    if not tensors:
        raise RuntimeError("torch.cat(): expected a non-empty list of Tensors")
    # torch's legacy rule: a 1-d empty tensor is skipped for the shapes but
    # takes part in the dtype promotion (and receives an empty gradient)
    legacy = [t for t in tensors if t.ndim == 1 and t.shape[0] == 0]
    nonempty = [t for t in tensors if not (t.ndim == 1 and t.shape[0] == 0)] or tensors[:1]
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = D.promote_types(dt, t.dtype)
    d = _dim(dim, nonempty[0].ndim)
    out = _ops.concat([_cast(t._t, dt) for t in nonempty], d)
    for t in legacy:
        if t is not nonempty[0] and _records(t._t):
            # subtracts the empty sum (+0.0: x - 0.0 is x for every x, -0.0
            # included, where + 0.0 would flip it), linking the gradient
            out = _ops.sub(out, _ops.sum(_cast(t._t, dt)))
    return _w(out)


_EXPORTS["concat"] = cat
_EXPORTS["concatenate"] = cat


@_export
def stack(tensors, dim=0):
    tensors = list(tensors)
    if not tensors:
        raise RuntimeError("stack expects a non-empty TensorList")
    dt = tensors[0].dtype
    for t in tensors[1:]:
        dt = D.promote_types(dt, t.dtype)
        if tuple(t.shape) != tuple(tensors[0].shape):
            raise RuntimeError(f"stack expects each tensor to be equal size, but got "
                               f"{list(tensors[0].shape)} at entry 0 and {list(t.shape)}")
    d = _dim(dim, tensors[0].ndim + 1)
    return _w(_ops.stack([_cast(t._t, dt) for t in tensors], d))


@_export
def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@_export
def vstack(tensors):
    return cat([t.reshape(1, -1) if t.ndim == 1 else t for t in tensors], 0)


@_export
def dstack(tensors):
    return stack(tensors, -1) if tensors[0].ndim < 3 else cat(tensors, 2)


@_export
def column_stack(tensors):
    return cat([t.reshape(-1, 1) if t.ndim == 1 else t for t in tensors], 1)


@_both
def split(tensor, split_size_or_sections, dim=0):
    d = _dim(dim, tensor.ndim)
    n = tensor.shape[d]
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [s] * (n // s) + ([n % s] if n % s else [])
        if n == 0:
            sizes = [0]
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to {n} "
                               f"(input tensor's size at dimension {d}), but got "
                               f"split_sizes={sizes}")
    out, start = [], 0
    for s in sizes:
        out.append(narrow(tensor, d, start, s))
        start += s
    return tuple(out)


@_both
def chunk(input, chunks, dim=0):
    """``torch.chunk``: pieces of ceil(n / chunks) along ``dim`` (fewer
    than ``chunks`` when they run out); an empty ``dim`` gives ``chunks``
    empty pieces, as torch (it gave one)."""
    if isinstance(chunks, bool) or not isinstance(chunks, (numbers.Integral, np.integer)):
        raise TypeError(f"chunk(): argument 'chunks' (position 1) must be int, not "
                        f"{type(chunks).__name__}")
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks} (input "
                           f"of shape {list(input.shape)})")
    d = _dim(dim, input.ndim)
    n = input.shape[d]
    if n == 0:
        return tuple(narrow(input, d, 0, 0) for _ in range(int(chunks)))
    return split(input, -(-n // int(chunks)), d)


@_both
def tensor_split(input, indices_or_sections, dim=0):
    d = _dim(dim, input.ndim)
    n = input.shape[d]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
        return split(input, sizes, d)
    bounds = [0] + list(indices_or_sections) + [n]
    return tuple(narrow(input, d, a, builtins.max(b - a, 0)) for a, b in zip(bounds, bounds[1:]))


@_both
def unbind(input, dim=0):
    d = _dim(dim, input.ndim)
    return tuple(select(input, d, i) for i in range(input.shape[d]))


@_both
def select(input, dim, index):
    d = _dim(dim, input.ndim)
    n = input.shape[d]
    i = int(index)
    if not -n <= i < n:
        raise IndexError(f"select(): index {i} out of range for tensor of size "
                         f"{list(input.shape)} at dimension {d}")
    i %= n
    return squeeze(narrow(input, d, i, 1), d)


def _index_np(index):
    """An index tensor's values on the host (torch wants an integer dtype)."""
    if isinstance(index, Tensor):
        if index.dtype.is_floating_point or index.dtype.name == "bool":
            raise RuntimeError(f"expected an integer index tensor (int64), got {index.dtype}")
        return index._t.numpy() if index._t._device_name == "cpu" else index._t.cpu().numpy()
    return np.asarray(index, np.int64)


def _check_range(name, idx, n, d, exc=RuntimeError):
    """torch's bounds check of gather/scatter/index_* indices: 0 <= i < n
    (no negative indices)."""
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = int(idx.min()) if idx.min() < 0 else int(idx.max())
        if exc is IndexError:
            raise IndexError(f"{name}(): index out of range in self (index {bad}, dimension "
                             f"{d} with size {n})")
        raise RuntimeError(f"{name}(): index {bad} is out of bounds for dimension {d} with "
                           f"size {n}")


def _check_index_range(name, index, n, d, exc=RuntimeError, on_device=None):
    """:func:`_check_range` of an index tensor (or array-like) without
    copying a device tensor's indices to the host: the check runs on its
    device and reads back one count; only a bad index copies them (for the
    message). ``on_device`` forces either path (default: the tensor's
    device is not the host, whose indices NumPy reads without a copy)."""
    if on_device is None:
        on_device = isinstance(index, Tensor) and index._t._device_name != "cpu"
    if on_device and isinstance(index, Tensor):
        if index.dtype.is_floating_point or index.dtype.name == "bool":
            raise RuntimeError(f"expected an integer index tensor (int64), got {index.dtype}")
        i = _cast(index._t, D.DTYPES["int64"])
        if not i.size:
            return
        bad = _ops.logical_or(_ops.less(i, 0), _ops.greater_equal(i, n))
        if not int(_ops.sum(_cast(bad, D.DTYPES["int64"])).numpy()):
            return
    _check_range(name, _index_np(index), n, d, exc)


def _check_scatter_shapes(name, t_shape, d, idx_shape, src_shape=None):
    # torch: index.size(k) <= src.size(k) for every k and <= self.size(k) for k != dim
    if len(idx_shape) != len(t_shape):
        raise RuntimeError(f"{name}(): index tensor must have the same number of dimensions "
                           f"as self tensor ({len(idx_shape)} vs {len(t_shape)})")
    for k, m in enumerate(idx_shape):
        if (k != d and m > t_shape[k]) or (src_shape is not None and (
                len(src_shape) != len(idx_shape) or m > src_shape[k])):
            raise RuntimeError(f"{name}(): expected index {list(idx_shape)} to be smaller than "
                               f"self {list(t_shape)} apart from dimension {d} and to be "
                               f"smaller size than src {list(src_shape or [])}")


@_both
def index_select(input, dim, index):
    t = input._t
    d = _dim(dim, t.ndim)
    _check_index_range("index_select", index, t.shape[d] if t.ndim else 1, d, IndexError)
    return _index_select_in_range(input, d, index)


def _index_select_in_range(input, d, index):
    """``index_select`` of indices the caller knows to be in range (no
    check, so no read of device indices; nn.functional's class weights)."""
    t = input._t
    d = _dim(d, t.ndim)
    idx = _u(index) if isinstance(index, Tensor) else _as_dg(np.asarray(index, np.int64),
                                                              D.DTYPES["int64"])
    if idx.ndim != 1:
        idx = _ops.reshape(idx, [-1])
    return _w(_ops.gather(t, idx, d))


@_both
def gather(input, dim, index, *, sparse_grad=False):
    t = input._t
    d = _dim(dim, t.ndim)
    idx = index._t.numpy() if index._t._device_name == "cpu" else index._t.cpu().numpy()
    if idx.ndim != t.ndim:
        raise RuntimeError(f"gather: Index tensor must have the same number of dimensions as "
                           f"input tensor (index {list(idx.shape)}, input {list(t.shape)})")
    _check_range("gather", idx, t.shape[d], d)
    for k, m in enumerate(idx.shape):
        if k != d and m > t.shape[k]:
            raise RuntimeError(f"gather(): size of index {list(idx.shape)} must not exceed "
                               f"the input's {list(t.shape)} apart from dimension {d}")
    return _w(_take_along(t, idx, d))


@_export
def take_along_dim(input, indices, dim=None):
    """``torch.take_along_dim``: input and indices broadcast against each
    other on every axis but ``dim``; the result has the indices' size on
    ``dim``."""
    if dim is None:
        return gather(input.reshape(-1), 0, indices.reshape(-1))
    if indices.ndim != input.ndim:
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.ndim} dimensions for input, "
                           f"and {indices.ndim} dimensions for indices")
    d = _dim(int(dim), input.ndim)
    n = input.shape[d]
    idx = _index_np(indices)
    if idx.size and (idx.min() < -n or idx.max() >= n):
        raise RuntimeError(f"take_along_dim(): index out of bounds for dimension {d} with "
                           f"size {n}")
    if idx.size and idx.min() < 0:   # take_along_dim wraps negative indices (gather does not)
        from ._creation import tensor as _tensor
        indices = _tensor(np.where(idx < 0, idx + n, idx).astype(np.int64))
    shape = []
    for k, (a, b) in enumerate(zip(input.shape, indices.shape)):
        if k != d and a != b and 1 not in (a, b):
            raise RuntimeError(f"torch.take_along_dim(): shapes {tuple(input.shape)} (input) "
                               f"and {tuple(indices.shape)} (indices) do not broadcast "
                               f"outside dim {d}")
        shape.append(builtins.max(a, b) if 1 in (a, b) else a)
    x_shape = [input.shape[k] if k == d else s for k, s in enumerate(shape)]
    i_shape = [indices.shape[k] if k == d else s for k, s in enumerate(shape)]
    return gather(input.expand(*x_shape), d, indices.expand(*i_shape))


@_both
def take(input, index):
    return input.reshape(-1)[index]


def _flat_positions(shape, dim, index: np.ndarray):
    strides = np.cumprod((list(shape[1:]) + [1])[::-1])[::-1]
    grids = np.indices(index.shape, sparse=True)
    flat = np.zeros(index.shape, np.int64)
    for k in range(len(index.shape)):
        flat = flat + (index if k == dim else grids[k]) * int(strides[k])
    return flat.reshape(-1)


def _scatter(input, dim, index, src, reduce_add):
    t = input._t
    d = _dim(dim, t.ndim)
    idx = _index_np(index)
    name = "scatter_add" if reduce_add else "scatter"
    if isinstance(src, Tensor) and src.dtype != input.dtype:
        raise RuntimeError(f"scatter(): Expected self.dtype to be equal to src.dtype "
                           f"({name} of a {input.dtype.name} tensor of shape "
                           f"{list(input.shape)} with a {src.dtype.name} src on "
                           f"{input.device})")
    _check_scatter_shapes(name, tuple(t.shape), d, idx.shape,
                          tuple(src.shape) if isinstance(src, Tensor) else None)
    _check_range(name, idx, t.shape[d] if t.ndim else 1, d)
    pos = _flat_positions(t.shape, d, idx)
    if isinstance(src, Tensor):
        key = tuple(slice(0, s) for s in idx.shape)
        s = src[key].reshape(-1)._t if tuple(src.shape) != tuple(idx.shape) else \
            _ops.reshape(src._t, [-1])
    else:
        s = _ops.broadcast_to(_as_dg(src, input.dtype), [pos.size])
    s = _cast(s, input.dtype)
    flat = _ops.reshape(t, [-1])
    p = _as_dg(pos, D.DTYPES["int64"], t.device)
    if reduce_add:
        out = _ops.scatter_add(flat, p, s, 0)
    else:
        # last write wins for a repeated position (torch's CPU scatter), so
        # only the last source element of each position is added
        uniq, last = np.unique(pos[::-1], return_index=True)
        # -0.0 (not flat * 0, NaN where flat is infinite): adding it to a
        # scattered value keeps that value exactly, -0.0 included
        zeros = _as_dg(np.full(flat.shape[0], -0.0 if _DT_FLOAT(t) else 0,
                               D.BY_CODE[t._dtype_code]._dg.numpy), input.dtype, t.device)
        route = None
        if len(uniq) != len(pos):
            if _records(s):
                # torch's gradient of src is grad.gather(dim, index): every
                # source element, overwritten or not, gets the gradient of
                # its position. The surviving elements get it through the
                # gather below; ``route`` gives it to the overwritten ones,
                # -0.0 in value (so adding it changes nothing, -0.0
                # included). An overwritten infinite or NaN source element
                # routes nothing (its s - s is not 0; see docs/from-pytorch.md).
                lost = np.ones(len(pos), bool)
                lost[len(pos) - 1 - last] = False
                sd = s.detach()
                r = _ops.where(_ops.logical_and(_ops.isfinite(sd),
                                                _as_dg(lost, D.DTYPES["bool"], t.device)),
                               _ops.neg(_ops.sub(sd, s)), -0.0)
                route = _ops.scatter_add(zeros, p, r, 0)
            src_at = (len(pos) - 1 - last).astype(np.int64)
            s = _ops.gather(s, _as_dg(src_at, D.DTYPES["int64"], t.device), 0)
            pos = uniq
            p = _as_dg(pos, D.DTYPES["int64"], t.device)
        keep = np.ones(flat.shape[0], bool)
        keep[pos] = False
        out = _ops.where(_as_dg(keep, D.DTYPES["bool"], t.device), flat,
                         _ops.scatter_add(zeros, p, s, 0))
        if route is not None:
            out = _ops.add(out, route)
    return _w(_ops.reshape(out, list(t.shape)))


@_both
def scatter(input, dim, index, src=None, value=None, reduce=None):
    if src is None:
        src = value
    if reduce == "add":
        return _scatter(input, dim, index, src, True)
    if reduce is not None:
        raise NotImplementedError(f"scatter(reduce={reduce!r}) is not supported; use "
                                  "scatter_add or scatter_reduce")
    return _scatter(input, dim, index, src, False)


@_both
def scatter_add(input, dim, index, src):
    return _scatter(input, dim, index, src, True)


@_both
def index_add(input, dim, index, source, *, alpha=1):
    if isinstance(source, Tensor) and source.dtype != input.dtype:
        raise RuntimeError(f"index_add_(): self ({input.dtype}) and source ({source.dtype}) "
                           "must have the same scalar type")
    t = input._t
    d = _dim(dim, t.ndim)
    _check_index_range("index_add", index, t.shape[d] if t.ndim else 1, d)
    src = source if alpha == 1 else mul(source, alpha)
    moved = transpose(input, 0, d) if d else input
    srcm = transpose(src, 0, d) if d else src
    out = _w(_ops.scatter_add(moved._t, _cast(_u(index), D.DTYPES["int64"]),
                              _cast(srcm._t, input.dtype), 0))
    return transpose(out, 0, d) if d else out


@_both
def index_fill(input, dim, index, value):
    d = _dim(dim, input.ndim)
    mask = np.zeros(input.shape[d], bool)
    mask[_tensor_of(index).numpy()] = True
    shape = [1] * input.ndim
    shape[d] = -1
    from ._creation import _from_numpy_owned
    # the input's dtype is kept (torch casts the value, never promotes)
    return masked_fill(input, _from_numpy_owned(mask.reshape(shape)), value)


@_both
def masked_fill(input, mask, value):
    if isinstance(value, Tensor):
        value = value.to(input.dtype)
        return _w(_ops.where(_bool(mask), value._t, input._t))
    if isinstance(value, float) and not input.dtype.is_floating_point:
        # torch casts the value to the input's dtype (truncation toward zero)
        value = bool(value) if input.dtype.name == "bool" else int(value)
    return _w(_ops.where(_bool(mask), _as_dg(value, input.dtype, input._t.device), input._t))


@_both
def masked_select(input, mask):
    return input[mask.expand_as(input) if tuple(mask.shape) != tuple(input.shape) else mask]


@_both
def masked_scatter(input, mask, source):
    out = input.clone()
    m = mask.expand_as(input)
    n = int(m.sum())
    out[m] = source.reshape(-1)[:n]
    return out


@_both
def nonzero(input, *, as_tuple=False):
    """``torch.nonzero``: the native NonZero, as ``[count, ndim]`` int64 (a
    0-d input: ``[count, 0]``), or one 1-d tensor per axis (``as_tuple``; a
    0-d input counts as 1-d)."""
    t = input._t
    if _records(t):
        t = t.detach()
    if as_tuple:
        if t.ndim == 0:
            t = _ops.reshape(t, [1])
        idx = _ops.nonzero(t)
        return tuple(_w(_ops.reshape(_ops.slice(idx, [k, 0], [k + 1, idx.shape[1]], [1, 1]),
                                     [-1])) for k in range(t.ndim))
    return _w(_ops.transpose(_ops.nonzero(t), [1, 0]))


@_export
def argwhere(input):
    return nonzero(input)


@_both
def tril(input, diagonal=0):
    n, m = input.shape[-2:]
    mask = np.tril(np.ones((n, m), bool), diagonal)
    from ._creation import _from_numpy_owned
    return where(_from_numpy_owned(mask), input, 0)


@_both
def triu(input, diagonal=0):
    n, m = input.shape[-2:]
    mask = np.triu(np.ones((n, m), bool), diagonal)
    from ._creation import _from_numpy_owned
    return where(_from_numpy_owned(mask), input, 0)


@_both
def diagonal(input, offset=0, dim1=0, dim2=1):
    """``torch.diagonal``: a view of the diagonal on the host outside
    autograd (a write to it reaches ``input``, as in torch), a gather
    otherwise."""
    x = movedim(input, (dim1, dim2), (-2, -1))
    t = x._t
    if _host_view_ok(t) and not t.is_read_only:
        # NumPy's diagonal is a view whose base chain stays ndarrays (so it
        # shares a's storage and version counter); it is read-only only by
        # NumPy's convention
        view = np.diagonal(t.numpy(), offset, -2, -1)
        view.flags.writeable = True
        return _note_alias(input, _w(_from_np_view(view)))
    n, m = x.shape[-2:]
    rows = np.arange(builtins.max(0, -offset), builtins.min(n, m - offset))
    if rows.size == 0:
        return x[..., :0, 0]
    flat = x.reshape(*x.shape[:-2], n * m)
    return index_select(flat, -1, rows * m + rows + offset)


@_both
def diag(input, diagonal=0):
    if input.ndim == 1:
        n = input.shape[0] + builtins.abs(diagonal)
        from ._creation import zeros
        pos = np.arange(input.shape[0])
        r, c = (pos, pos + diagonal) if diagonal >= 0 else (pos - diagonal, pos)
        out = zeros(n * n, dtype=input.dtype)
        return _w(_ops.scatter_add(out._t, _as_dg(r * n + c, D.DTYPES["int64"]), input._t,
                                   0)).reshape(n, n)
    return diagonal_(input, diagonal)


def diagonal_(input, offset):
    return diagonal(input, offset)


def _autocast_float32(*tensors):
    """Inside an autocast region, float16/bfloat16 tensors cast to float32
    (differentiably): for the functions torch's CPU autocast runs in float32
    that we compose of several ops (cdist, trace), where the core's per-op
    table (dragon_core.amp.FLOAT32_OPS) cannot see the function."""
    if _C._autocast_get() < 0:
        return tensors
    return tuple(t.float() if isinstance(t, Tensor) and t.dtype.name in ("float16", "bfloat16")
                 else t for t in tensors)


@_both
def trace(input):
    if input.ndim != 2:
        raise RuntimeError(f"trace: expected a matrix, but got tensor with dim {input.ndim} "
                           f"(shape {list(input.shape)})")
    (input,) = _autocast_float32(input)
    return sum(diagonal(input))


@_both
def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    n = input.shape[-1]
    from ._creation import eye
    return mul(input.unsqueeze(-1), eye(n, dtype=input.dtype))


# ---------------------------------------------------------- linear algebra
def _out_args_check(name, out, *inputs):
    """torch's refusal of ``out=`` under autograd, before computing."""
    if not isinstance(out, Tensor):
        raise TypeError(f"{name}(): argument 'out' must be Tensor, not {type(out).__name__}")
    from ._tensor import _records
    if builtins.any(isinstance(t, Tensor) and _records(t._t) for t in inputs + (out,)):
        raise RuntimeError(f"{name}(): functions with out=... arguments don't support "
                           "automatic differentiation, but one of the arguments requires grad.")


def _write_out(name, res, out):
    """Write ``res`` into ``out`` (torch's ``out=``) and return ``out``.

    dtype and device must match (torch's rule: no cast into out). An out of
    another shape with as many elements is reshaped in place, with torch's
    deprecation warning; one with another number of elements (torch would
    resize its storage, also an empty one) raises: our tensors do not
    resize their storage.
    """
    if out.dtype != res.dtype:
        raise RuntimeError(f"Expected out tensor to have dtype {res.dtype.name}, but got "
                           f"{out.dtype.name} instead ({name} with out=)")
    if out.device != res.device:
        raise RuntimeError(f"Expected out tensor to be on {res.device}, but it is on "
                           f"{out.device} ({name} with out=)")
    shape = tuple(res.shape)
    if tuple(out.shape) != shape:
        if out.numel() != res.numel():
            raise RuntimeError(
                f"{name}(): out has shape {list(out.shape)} and the result has shape "
                f"{list(shape)}; dragon_core.vm.torch does not resize an out= tensor to "
                f"another number of elements (torch does): pass out of shape {list(shape)}, "
                "or drop out= and use the returned tensor")
        if out.numel():
            warnings.warn(f"An output with one or more elements was resized since it had "
                          f"shape {list(out.shape)}, which does not match the required output "
                          f"shape {list(shape)}. This behavior is deprecated, and in a future "
                          "PyTorch release outputs will not be resized unless they have zero "
                          "elements.", UserWarning, stacklevel=3)
        out.resize_(shape)
    out.copy_(res)
    return out


@_both
def matmul(input, other, *, out=None):
    if out is not None:
        _out_args_check("matmul", out, input, other)
        return _write_out("matmul", matmul(input, other), out)
    a, b = input._t, other._t
    if a._dtype_code != b._dtype_code:
        raise RuntimeError(f"expected m1 and m2 to have the same dtype, but got: "
                           f"{input.dtype.name} != {other.dtype.name}")
    if a.ndim == 0 or b.ndim == 0:
        raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are "
                           f"{a.ndim}D and {b.ndim}D (shapes {list(a.shape)} and "
                           f"{list(b.shape)})")
    if not _DTF_[a._dtype_code]:
        if a._dtype_code == _BOOL_:
            raise RuntimeError('"addmm_impl_cpu_" not implemented for \'Bool\'')
        # no integer MatMul kernel: exact in float64 for |values| < 2**53
        f64 = D.DTYPES["float64"]
        return _w(_ops.cast(_ops.matmul(_cast(a, f64), _cast(b, f64)), input.dtype._dg))
    return _w(_ops.matmul(a, b))


_DTF_ = {c: d.is_floating_point for c, d in D.BY_CODE.items()}
_BOOL_ = D.DTYPES["bool"]._dg.code


@_both
def softmax(input, dim, dtype=None):
    from .nn.functional import softmax as _sm
    return _sm(input, dim, dtype=dtype)


@_both
def log_softmax(input, dim, dtype=None):
    from .nn.functional import log_softmax as _lsm
    return _lsm(input, dim, dtype=dtype)


@_both
def mm(input, mat2, *, out=None):
    if out is not None:
        _out_args_check("mm", out, input, mat2)
        return _write_out("mm", mm(input, mat2), out)
    if input.ndim != 2 or mat2.ndim != 2:
        raise RuntimeError(("self must be a matrix" if input.ndim != 2 else
                            "mat2 must be a matrix") + f" (mm of shapes {list(input.shape)} and "
                           f"{list(mat2.shape)})")
    return matmul(input, mat2)


@_both
def bmm(input, mat2, *, out=None):
    if out is not None:
        _out_args_check("bmm", out, input, mat2)
        return _write_out("bmm", bmm(input, mat2), out)
    if input.ndim != 3 or mat2.ndim != 3:
        raise RuntimeError(f"batch1 must be a 3D tensor (bmm of shapes {list(input.shape)} "
                           f"and {list(mat2.shape)})")
    return matmul(input, mat2)


@_both
def mv(input, vec):
    return matmul(input, vec)


@_both
def dot(input, other):
    if input.ndim != 1 or other.ndim != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.ndim}D and {other.ndim}D "
                           "tensors")
    return matmul(input, other)


def _inner(a, b):
    """``torch.inner``: the last axes contracted, the others of ``a`` then
    of ``b`` kept (``a.shape[:-1] + b.shape[:-1]``); a 0-d side multiplies."""
    if a.ndim == 0 or b.ndim == 0:
        return mul(a, b)
    if a.shape[-1] != b.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(a.shape)} and {list(b.shape)}")
    return tensordot(a, b, dims=([-1], [-1]))


_EXPORTS["inner"] = _inner
_EXPORTS["vdot"] = dot


@_both
def outer(input, vec2):
    return mul(input.unsqueeze(1), vec2.unsqueeze(0))


_EXPORTS["ger"] = outer


@_both
def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    if out is not None:
        _out_args_check("addmm", out, input, mat1, mat2)
        return _write_out("addmm", addmm(input, mat1, mat2, beta=beta, alpha=alpha), out)
    prod = mm(mat1, mat2)
    if alpha != 1:
        prod = mul(prod, alpha)
    return add(mul(input, beta) if beta != 1 else input, prod)


@_both
def baddbmm(input, batch1, batch2, *, beta=1, alpha=1):
    prod = bmm(batch1, batch2)
    if alpha != 1:
        prod = mul(prod, alpha)
    return add(mul(input, beta) if beta != 1 else input, prod)


@_export
def einsum(equation, *operands):
    """``torch.einsum``: the native einsum (``...``, diagonals, broadcast of
    size-1 labels; differentiable). Operands are promoted to one dtype."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    eq = equation.replace(" ", "")
    nterms = len(eq.split("->")[0].split(","))
    if nterms != len(operands):
        raise RuntimeError(f"einsum(): {nterms} operands in the equation, "
                           f"{len(operands)} given")
    dt = operands[0].dtype
    for o in operands[1:]:
        dt = D.promote_types(dt, o.dtype)
    return _w(_ops.einsum(eq, *[_cast(o._t, dt) for o in operands]))


@_export
def tensordot(a, b, dims=2):
    if isinstance(dims, Tensor):
        dims = dims.tolist()
    if isinstance(dims, (numbers.Integral, np.integer)) and not isinstance(dims, bool):
        dims = int(dims)
        if dims < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={dims}")
        if dims > builtins.min(a.ndim, b.ndim):
            raise RuntimeError(f"tensordot: dims={dims} is more than the dimensions of the "
                               f"inputs of shapes {list(a.shape)} and {list(b.shape)}")
        da, db = list(range(a.ndim - dims, a.ndim)), list(range(dims))
    else:
        if not isinstance(dims, (list, tuple)) or len(dims) != 2:
            raise TypeError(f"tensordot(): dims must be an int or a pair of sequences of ints, "
                            f"got {dims!r}")
        da = [_dim(d, a.ndim) for d in _int_seq("tensordot", "dims_self", dims[0], 3)]
        db = [_dim(d, b.ndim) for d in _int_seq("tensordot", "dims_other", dims[1], 4)]
        if len(da) != len(db):
            raise RuntimeError(f"tensordot: both dimension lists should have the same length, "
                               f"got {dims[0]} and {dims[1]}")
        for ds, given in ((da, dims[0]), (db, dims[1])):
            if len(set(ds)) != len(ds):
                raise RuntimeError(f"tensordot: dim {builtins.max(ds, key=ds.count)} appears "
                                   f"multiple times in the list of dims {list(given)}")
        for i, j in zip(da, db):
            if a.shape[i] != b.shape[j]:
                raise RuntimeError(f"contracted dimensions need to match, but first has size "
                                   f"{a.shape[i]} in dim {i} and second has size {b.shape[j]} "
                                   f"in dim {j} (shapes {list(a.shape)} and {list(b.shape)})")
    fa = [i for i in range(a.ndim) if i not in da]
    fb = [i for i in range(b.ndim) if i not in db]
    am = permute(a, fa + da).reshape(int(math.prod([a.shape[i] for i in fa])), -1)
    bm = permute(b, db + fb).reshape(-1, int(math.prod([b.shape[i] for i in fb])))
    return matmul(am, bm).reshape(*[a.shape[i] for i in fa], *[b.shape[i] for i in fb])


@_export
def cdist(x1, x2, p=2.0):
    """``torch.cdist``: the p-norm distance of each row of ``x1`` to each
    row of ``x2``. Gradients as torch's cdist backward: 0 where a distance
    is 0; ``p=0`` (a count) records a zero gradient; ``p=inf`` gives every
    coordinate that ties for the maximum the full ``sign(diff) * dy`` (the
    norm's even split is torch's ``dist``/``norm`` rule, not cdist's)."""
    x1, x2 = _autocast_float32(x1, x2)   # torch's CPU autocast: float32
    diff = sub(x1.unsqueeze(-2), x2.unsqueeze(-3))
    out = norm(diff, p, dim=-1)
    t = diff._t
    if not _records(t) or p not in (0, float("inf")):
        return out
    if p == 0:
        return _w(_ops.add(out._t, _ops.sum(_zero_grad_zeros(t), [-1], False)))
    # p = inf: m + sum over the tied coordinates of (|d| - const |d|): the
    # value m exactly, a full gradient to each tie. An infinite m would make
    # inf - inf; there the norm's own (even split) value and gradient stay.
    a = _ops.abs(t)
    m = out._t
    ac, mc = a.detach(), m.detach()
    hit = _ops.equal(ac, _ops.unsqueeze(mc, -1))
    ties = _ops.sum(_ops.where(hit, _ops.sub(a, ac), 0.0), [-1], False)
    return _w(_ops.where(_ops.isinf(mc), m, _ops.add(mc, ties)))


@_export
def cross(input, other, dim=None):
    """``torch.cross``: without ``dim``, the first axis of size 3 of the
    broadcast shape (torch's deprecated default, with its warning);
    ``torch.linalg.cross`` takes the last axis."""
    if dim is None:
        shape = np.broadcast_shapes(tuple(input.shape), tuple(other.shape))
        if tuple(input.shape) != shape:
            input = input.expand(*shape)
        if tuple(other.shape) != shape:
            other = other.expand(*shape)
        sizes3 = [i for i, n in enumerate(shape) if n == 3]
        if not sizes3:
            raise RuntimeError(f"no dimension of size 3 in input (shapes {list(input.shape)} "
                               f"and {list(other.shape)})")
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated. "
                      "Please either pass the dim explicitly or simply use torch.linalg.cross. "
                      "The default value of dim will change to agree with that of "
                      "linalg.cross in a future release.", UserWarning, stacklevel=2)
        dim = sizes3[0]
    d = _dim(dim, input.ndim)
    if input.shape[d] != 3 or other.shape[d] != 3:
        raise RuntimeError(f"cross: inputs dimension {dim} must have length 3, got shapes "
                           f"{list(input.shape)} and {list(other.shape)}")
    a = [select(input, d, i) for i in range(3)]
    b = [select(other, d, i) for i in range(3)]
    return stack([a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2],
                  a[0] * b[1] - a[1] * b[0]], d)


# ----------------------------------------------------------- misc methods
@_method_only
def fill_(self, value):
    from ._creation import full
    return _inplace(self, full(self.shape, float(value) if self.dtype.is_floating_point
                               else value, dtype=self.dtype), internal_overlap=False)


@_method_only
def zero_(self):
    return fill_(self, 0)


@_method_only
def copy_(self, src, non_blocking=False):
    src = _tensor_of(src)
    r = src._t
    if r._device_name != self._t._device_name:
        r = r._to_device(str(self.device))
    r = _cast(r, self.dtype)
    if tuple(r.shape) != tuple(self._t.shape):
        r = _ops.broadcast_to(r, list(self._t.shape))
    if _records(self._t) and self._t._grad_fn is not None:
        # the overwritten value stays in the graph with zero gradient (torch)
        r = _ops.add(r, _zero_grad_zeros(self._t))
    return _inplace(self, _w(r), srcs=(src,))


@_method_only
def normal_(self, mean=0.0, std=1.0, *, generator=None):
    from ._creation import randn
    return _inplace(self, add(mul(randn(*self.shape, dtype=self.dtype,
                                                generator=generator), std), mean))


@_method_only
def uniform_(self, a=0.0, b=1.0, *, generator=None):
    from ._creation import rand
    return _inplace(self, add(mul(rand(*self.shape, dtype=self.dtype,
                                               generator=generator), b - a), a))


@_method_only
def bernoulli_(self, p=0.5, *, generator=None):
    from ._creation import rand
    return _inplace(self, lt(rand(*self.shape, generator=generator), p).to(self.dtype))


@_method_only
def random_(self, low=0, high=None, *, generator=None):
    from ._creation import randint
    if high is None:
        low, high = 0, low
    return _inplace(self, randint(low, high, tuple(self.shape), dtype=self.dtype,
                                         generator=generator))


@_method_only
def exponential_(self, lambd=1.0, *, generator=None):
    from ._creation import rand
    return _inplace(self, div(neg(log1p(neg(rand(*self.shape, dtype=self.dtype,
                                                          generator=generator)))), lambd))


@_both
def bernoulli(input, p=None, *, generator=None):
    from ._creation import rand, rand_like
    prob = input if p is None else p
    u = rand_like(input) if generator is None else rand(
        *input.shape, dtype=input.dtype, device=input.device, generator=generator)
    return lt(u, prob).to(input.dtype)


@_export
def multinomial(input, num_samples, replacement=False, *, generator=None):
    from ._creation import _from_numpy_owned, _host_rng, _np_rng, _tracing
    rng = _host_rng(generator, "multinomial") or _np_rng()
    if _tracing():
        # It samples on the host: inside a trace the sample would become a
        # constant of the plan, the same at every call.
        raise RuntimeError(
            f"torch.multinomial (input {tuple(input.shape)}, {input.dtype}) inside "
            "torch.compile / dg.function is not supported: it samples on the host, so the "
            "compiled function would repeat one sample at every call; call it outside the "
            "compiled function and pass the indices in")
    probs = input.detach().cpu().numpy().astype(np.float64)
    rows = probs.reshape(-1, probs.shape[-1])
    out = []
    for r in rows:
        out.append(rng.choice(r.size, num_samples, replace=replacement, p=r / r.sum()))
    res = np.asarray(out, np.int64)
    return _from_numpy_owned(res.reshape(*probs.shape[:-1], num_samples))


@_method_only
def masked_fill_(self, mask, value):
    return _inplace(self, masked_fill(self, mask, value), internal_overlap=False)


@_method_only
def index_fill_(self, dim, index, value):
    return _inplace(self, index_fill(self, dim, index, value), internal_overlap=False)


@_method_only
def clamp_(self, min=None, max=None):
    return _inplace(self, clamp(self, min, max))


Tensor.clip_ = clamp_


@_method_only
def apply_(self, fn):
    raise NotImplementedError("Tensor.apply_ (a Python callable per element) is not "
                              "supported; use vectorised ops")


#: In-place ops whose inputs may not even be the written-to tensor itself
#: (torch's assert_no_overlap: full overlap raises too, x.scatter_(0, i, x)).
_NO_FULL_OVERLAP = ("scatter", "scatter_add", "index_add")


def _check_cast_back(name, self, out):
    """torch's in-place rule: the result's dtype must cast back to
    ``self``'s by category (bool < integer < float): ``bool_x.add_(1)``,
    ``int_x.mul_(0.5)`` raise instead of being cast (an integer result went
    silently into a bool tensor)."""
    if isinstance(out, Tensor) and out.dtype._cat > self.dtype._cat:
        raise RuntimeError(f"{name}_: result type {out.dtype.name} can't be cast to the desired "
                           f"output type {self.dtype.name} (self: {self.dtype} tensor of shape "
                           f"{list(self.shape)})")


def _make_inplace(name):
    fn = getattr(Tensor, name)

    def method(self, *args, **kwargs):
        srcs = [*args, *kwargs.values()]
        if name in _NO_FULL_OVERLAP:
            for src in srcs:
                if isinstance(src, Tensor) and (src._t is self._t or (
                        self._t._device_name == "cpu" and src._t._device_name == "cpu"
                        and src._t.size and np.may_share_memory(src._t.numpy(),
                                                                self._t.numpy()))):
                    a, b = self._t.numpy(), src._t.numpy()
                    if src._t is self._t or (
                            a.__array_interface__["data"][0] == b.__array_interface__["data"][0]
                            and a.strides == b.strides and a.shape == b.shape):
                        raise RuntimeError(
                            "unsupported operation: some elements of the input tensor and "
                            "the written-to tensor refer to a single memory location. "
                            f"Please clone() the tensor before performing the operation. "
                            f"({name}_ of a {list(self.shape)} tensor with itself as input)")
        out = fn(self, *args, **kwargs)
        _check_cast_back(name, self, out)
        return _inplace(self, out, srcs=srcs)
    method.__name__ = name + "_"
    method.__doc__ = f"In-place ``{name}`` (see ``Tensor.{name}``)."
    if not hasattr(Tensor, name + "_"):
        setattr(Tensor, name + "_", method)


for _n in ("add", "sub", "mul", "div", "pow", "exp", "log", "log1p", "sqrt", "rsqrt", "sin",
           "cos", "tanh", "abs", "neg", "sign", "square", "relu", "floor", "ceil", "round",
           "trunc", "frac", "reciprocal", "clamp_min", "clamp_max", "fmod", "remainder",
           "lerp", "addcmul", "addcdiv", "logical_not", "logical_and", "logical_or",
           "maximum", "minimum", "scatter", "scatter_add", "index_add", "tril", "triu",
           "floor_divide", "expm1", "log2", "log10", "tan", "where", "nan_to_num",
           "subtract", "multiply", "divide", "true_divide", "eq", "ne", "lt", "le", "gt", "ge",
           "masked_scatter", "exp2", "hypot", "atan2", "bitwise_and", "bitwise_or",
           "bitwise_xor", "bitwise_left_shift", "bitwise_right_shift", "copysign", "xlogy"):
    if hasattr(Tensor, _n):
        _make_inplace(_n)


def _squeeze_(self, dim=None):
    self._t = squeeze(self, dim)._t
    return self


def _unsqueeze_(self, dim):
    self._t = unsqueeze(self, dim)._t
    return self


def _t_(self):
    self._t = t(self)._t
    return self


def _transpose_(self, d0, d1):
    self._t = transpose(self, d0, d1)._t
    return self


def _resize_(self, *sizes):
    sizes = _shape_args(sizes)
    if math.prod(sizes) != self.numel():
        raise NotImplementedError("resize_ to a different number of elements is not supported; "
                                  "make a new tensor")
    self._t = reshape(self, sizes)._t
    return self


Tensor.squeeze_ = _squeeze_
Tensor.unsqueeze_ = _unsqueeze_
Tensor.t_ = _t_
Tensor.transpose_ = _transpose_
Tensor.resize_ = _resize_
Tensor.new_tensor = lambda self, data, dtype=None, device=None, requires_grad=False: \
    __import__(__package__ + "._creation", fromlist=["x"]).tensor(
        data, dtype=dtype or self.dtype, requires_grad=requires_grad)


def _new_factory(kind):
    def method(self, *size, dtype=None, device=None, requires_grad=False, **kw):
        from . import _creation as C
        dt = dtype or self.dtype
        if kind == "full":
            size, value = size[0], size[1] if len(size) > 1 else kw.pop("fill_value")
            out = C.full(size, value, dtype=dt)
        else:
            out = getattr(C, kind)(*size, dtype=dt)
        return out.requires_grad_(requires_grad) if requires_grad else out
    method.__name__ = "new_" + kind
    setattr(Tensor, "new_" + kind, method)


for _k in ("zeros", "ones", "empty", "full"):
    _new_factory(_k)


# ------------------------------------------- cummax/cummin, index_copy,
# scatter_reduce, copysign, xlogy (torch's semantics on existing core ops)
_SIGN_INT = {"float16": "int16", "bfloat16": "int16", "float32": "int32", "float64": "int64"}


def _signbit(t):
    """Whether each element of the float dragon tensor ``t`` has its sign
    bit set (-0.0 and a negative NaN included), as a bool tensor."""
    as_int = D.DTYPES[_SIGN_INT[D.BY_CODE[t._dtype_code].name]]._dg
    return _ops.less(_ops.bitcast(t, as_int), 0)


def _cum_extreme(kind, input, dim):
    """cummax / cummin: the indices on the host (NumPy's running extremum,
    then the last position that holds it), the values gathered at them
    (so the gradient of each output goes to the element it came from, as
    torch's scatter-add backward)."""
    t = input._t
    if t.ndim == 0:
        _dim(dim, 1)
        return values_indices(input.clone(), _w(_as_dg(0, D.DTYPES["int64"], t.device)))
    d = _dim(dim, t.ndim)
    arr = t.detach().numpy() if t._device_name == "cpu" else t.cpu().numpy()
    if D.BY_CODE[t._dtype_code].name in ("float16", "bfloat16"):
        arr = arr.astype(np.float32)   # exact; the comparisons are the same
    a = np.moveaxis(arr, d, -1)
    run = (np.maximum if kind == "max" else np.minimum).accumulate(a, axis=-1) \
        if a.size else a
    hit = a == run
    if a.dtype.kind == "f":
        hit = hit | (np.isnan(a) & np.isnan(run))   # NaN propagates; its index is the latest NaN
    pos = np.where(hit, np.arange(a.shape[-1], dtype=np.int64), -1)
    # torch takes the later of equal extrema (and of NaNs): the last hit so far
    idx = np.maximum.accumulate(pos, axis=-1) if a.size else pos
    idx = _np_c(np.moveaxis(idx.astype(np.int64), -1, d))
    if not idx.size:
        values = _ops.mul(t, 1) if _records(t) else t._clone()
    else:
        values = _take_along(t, idx, d)
    i = _C._from_numpy_copy(idx)
    if t._device_name != "cpu":
        i = i._to_device(str(t.device))
    return values_indices(_w(values), _w(i))


@_both
def cummax(input, dim):
    """``torch.cummax``: the running maximum along ``dim`` and the index it
    came from (the latest of equal maxima; NaN propagates, and its index is
    the latest NaN). Differentiable w.r.t. the values: each output's
    gradient goes to the element at its index. Every dtype (bool too)."""
    return _cum_extreme("max", input, dim)


@_both
def cummin(input, dim):
    """``torch.cummin``: the running minimum along ``dim`` and its index
    (see ``cummax``)."""
    return _cum_extreme("min", input, dim)


@_both
def index_copy(input, dim, index, source):
    """``torch.index_copy``: ``input`` with the slices ``index[i]`` along
    ``dim`` replaced by ``source``'s slice ``i`` (a repeated index takes the
    last of its slices, torch's CPU order). ``index`` is int64, 1-d or 0-d;
    ``source`` has ``input``'s dtype and shape with ``dim`` of size
    ``len(index)``. Differentiable w.r.t. ``input`` (zero at the copied
    slices) and ``source``."""
    if not isinstance(source, Tensor):
        raise TypeError(f"index_copy(): argument 'source' must be Tensor, not "
                        f"{type(source).__name__}")
    t = input._t
    if isinstance(index, Tensor) and index.dtype != D.DTYPES["int64"]:
        raise RuntimeError(f"index_copy(): Expected a long tensor for index, but got "
                           f"{index.dtype}")
    idx = _index_np(index)
    if idx.ndim > 1:
        raise IndexError(f"index_copy(): Index should have dimension 1 or 0 (got {idx.ndim})")
    if source.dtype != input.dtype:
        raise RuntimeError(f"index_copy(): self and source expected to have the same dtype, "
                           f"but got (self) {input.dtype} and (source) {source.dtype}")
    idx = idx.reshape(-1).astype(np.int64)
    nd = t.ndim
    d = _dim(dim, nd if nd else 1)
    shape = list(t.shape) if nd else [1]
    want = list(shape)
    want[d] = idx.size
    s_shape = list(source.shape) if source.ndim else [1]
    if s_shape != want and not (nd == 0 and source.numel() == idx.size):
        raise RuntimeError(f"index_copy(): source {list(source.shape)} must have self's shape "
                           f"{list(t.shape)} with dimension {d} of size {idx.size} (the "
                           f"number of indices)")
    n = shape[d]
    _check_range("index_copy", idx, n, d, IndexError)
    x = _ops.reshape(t, [1]) if not nd else t
    src = _ops.reshape(source._t, want)
    if not idx.size or not t.size:
        out = _ops.mul(x, 1) if _records(x) else x._clone()
        if _records(src):   # empty: keep source in the graph (its gradient is empty);
            # x - 0 keeps signed zeros
            out = _ops.sub(out, _ops.mul(_ops.sum(src), 0))
    else:
        uniq, last = np.unique(idx[::-1], return_index=True)
        rows = np.zeros(n, np.int64)
        rows[uniq] = idx.size - 1 - last        # the source slice each copied slice takes
        copied = np.zeros(n, bool)
        copied[uniq] = True
        mshape = [1] * len(shape)
        mshape[d] = n
        mask = _as_dg(copied.reshape(mshape), D.DTYPES["bool"], t.device)
        taken = _ops.gather(src, _as_dg(rows, D.DTYPES["int64"], t.device), d)
        out = _ops.where(mask, taken, x)
    return _w(_ops.reshape(out, list(t.shape)))


_SCATTER_REDUCE = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _reduce_identity(reduce, dt):
    """The value that leaves ``reduce`` unchanged in dtype ``dt``."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    big = reduce == "amin"
    if dt.is_floating_point:
        return float("inf") if big else -float("inf")
    if dt.name == "bool":
        return big
    info = np.iinfo(dt._dg.numpy)
    return int(info.max if big else info.min)


@_both
def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """``torch.scatter_reduce``: reduces ``src[i][j]...`` into
    ``input[index[i][j]...]`` along ``dim`` with ``reduce`` (``"sum"``,
    ``"prod"``, ``"mean"``, ``"amax"``, ``"amin"``), on the core's
    ScatterReduce. With ``include_self=False`` the positions some index
    names start from the reduction's identity (so ``input``'s value there
    takes no part and gets no gradient); positions no index names keep
    ``input``. ``"mean"`` divides by the number of values reduced (floor
    division for integers, as torch). Differentiable: ``amax``/``amin``
    split the gradient evenly among tied values, ``prod`` is exact with
    zeros."""
    reduce = {"max": "amax", "min": "amin"}.get(reduce, reduce)   # torch takes these too
    if reduce not in _SCATTER_REDUCE:
        raise RuntimeError(f"scatter_reduce(): reduce argument must be either sum, prod, "
                           f"mean, amax or amin, got {reduce!r}")
    if not isinstance(src, Tensor):
        raise TypeError(f"scatter_reduce(): argument 'src' must be Tensor, not "
                        f"{type(src).__name__}")
    if isinstance(index, Tensor) and index.dtype != D.DTYPES["int64"]:
        raise RuntimeError(f"scatter_reduce(): Expected dtype int64 for index, got "
                           f"{index.dtype}")
    if src.dtype != input.dtype:
        raise RuntimeError(f"scatter_reduce(): Expected self.dtype to be equal to src.dtype "
                           f"({input.dtype} vs {src.dtype})")
    t = input._t
    dt = input.dtype
    nd = t.ndim
    d = _dim(dim, nd if nd else 1)
    idx = _index_np(index)
    shape = tuple(t.shape) if nd else (1,)
    if nd == 0:
        idx = idx.reshape(-1)[:1] if idx.ndim == 0 else idx
    _check_scatter_shapes("scatter_reduce", shape, d, idx.shape,
                          tuple(src.shape) if src.ndim else (1,))
    _check_range("scatter_reduce", idx, shape[d], d)
    flat = _ops.reshape(t, [-1])
    if not idx.size:
        out = _ops.mul(flat, 1) if _records(t) else flat._clone()
        if _records(src._t):   # keep src in the graph (its gradient is 0); x - 0 keeps -0.0
            out = _ops.sub(out, _ops.mul(_ops.sum(src._t), 0))
        return _w(_ops.reshape(out, list(t.shape)))
    if dt.name == "bool":
        # as torch: sum/amax are a logical or, prod/amin an and (on uint8)
        if reduce == "mean":
            raise RuntimeError("\"scatter_gather_tensor_cpu_reduce_mean\" not implemented "
                               "for 'Bool'")
        u8 = D.DTYPES["uint8"]
        wide = scatter_reduce(input.to(u8), dim, index, src.to(u8),
                              "amax" if reduce in ("sum", "amax") else "amin",
                              include_self=include_self)
        return wide.to(dt)
    if dt.name in ("float16", "bfloat16"):
        # no 16-bit ScatterReduce kernel: computed in float32, rounded once
        wide = scatter_reduce(input.float(), dim, index, src.float(), reduce,
                              include_self=include_self)
        return wide.to(dt)
    pos = _flat_positions(shape, d, idx)
    s = src if src.ndim else src.reshape(1)
    if tuple(s.shape) != tuple(idx.shape):
        s = s[tuple(slice(0, k) for k in idx.shape)]
    s = _ops.reshape(s._t, [-1])
    size = int(np.prod(shape))
    touched = np.zeros(size, bool)
    touched[pos] = True
    base = flat
    if not include_self:
        mask = _as_dg(touched, D.DTYPES["bool"], t.device)
        base = _ops.where(mask, _as_dg(_reduce_identity(reduce, dt), dt, t.device), flat)
    p = _as_dg(pos, D.DTYPES["int64"], t.device)
    out = _ops.scatter_reduce(base, p, s, 0, _SCATTER_REDUCE[reduce])
    if reduce == "mean":
        count = np.bincount(pos, minlength=size) + (1 if include_self else 0)
        count = _as_dg(np.maximum(count, 1), dt, t.device)
        out = _ops.div(out, count) if dt.is_floating_point else _ops.floor_divide(out, count)
    return _w(_ops.reshape(out, list(t.shape)))


@_both
def copysign(input, other):
    """``torch.copysign``: ``|input|`` with the sign bit of ``other``
    (``-0.0`` and a negative NaN count as negative); broadcasts, integer
    and bool operands give the default float dtype. The gradient w.r.t.
    ``input`` is ``sign(input) * sign(result)`` (0 where ``input`` is 0),
    w.r.t. ``other`` zero, as torch's."""
    if not isinstance(input, Tensor):
        raise TypeError(f"copysign(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    dt = _float_dt(input, other)
    dev = input._t.device
    x, o = _as_dg(input, dt, dev), _as_dg(other, dt, dev)
    a = _ops.abs(x)
    out = _ops.where(_signbit(o), _ops.neg(a), a)
    if _records(o):   # torch's gradient w.r.t. other: zeros (not None)
        out = _ops.where(_as_dg(False, D.DTYPES["bool"], dev), o, out)
    return _w(out)


@_both
def xlogy(input, other):
    """``torch.xlogy``: ``input * log(other)``, 0 where ``input`` is 0 and
    ``other`` is not NaN (NaN where ``other`` is). Either argument may be a
    Python number; integer and bool operands give the default float dtype.
    Differentiable as torch: w.r.t. ``input`` ``log(other)`` (0 where
    ``input`` is 0 and ``other <= 0``), w.r.t. ``other`` ``input / other``
    (0 where ``input`` is 0: torch gives NaN at ``input == other == 0``, and
    ``inf`` w.r.t. ``input`` at ``input == 0, other == inf``, where we give
    0)."""
    if not isinstance(input, Tensor) and not isinstance(other, Tensor):
        raise TypeError("xlogy(): one of the arguments must be a Tensor")
    dt = _float_dt(input, other)
    ref = input if isinstance(input, Tensor) else other
    dev = ref._t.device
    x, y = _as_dg(input, dt, dev), _as_dg(other, dt, dev)
    # x * L with L = log(y), except 0 where x == 0 and y <= 0 or y == inf
    # (there x * log(y) would be NaN; xlogy is 0). So the gradient w.r.t. x
    # is log(y), 0 where x == 0 and y <= 0 (torch's rule), and w.r.t. y
    # x / y (0 where x == 0; torch gives NaN for x == y == 0).
    off = _ops.logical_and(_ops.equal(x, 0.0), _ops.logical_or(
        _ops.less_equal(y, 0.0), _ops.equal(y, float("inf"))))
    log_y = _ops.where(off, _as_dg(0.0, dt, dev),
                       _ops.log(_ops.where(off, _as_dg(1.0, dt, dev), y)))
    return _w(_ops.mul(x, log_y))


def _cumprod_scan(t, d):
    """The cumulative product of dragon tensor ``t`` along ``d`` as a
    log-depth scan of Mul (each step multiplies by the tensor shifted by 2^k
    along ``d``, padded with ones): differentiable to any order and exact
    where elements are 0."""
    n = t.shape[d]
    y = _ops.mul(t, 1)
    step = 1
    pads = [(0, 0)] * t.ndim
    while step < n:
        shifted = _ops.slice(y, [0], [n - step], None, [d])
        pads[d] = (step, 0)
        y = _ops.mul(y, _ops.pad(shifted, list(pads), value=1.0))
        step *= 2
    return y


for _n in ("index_copy", "scatter_reduce", "copysign", "xlogy"):
    _make_inplace(_n)
