"""Tensors, variables, dtypes and conversion with TensorFlow's rules.

A ``tf`` tensor here *is* a ``dragon_core.Tensor`` (no wrapper, no copy);
a ``tf.Variable`` is a Tensor subclass that autograd and the tape treat as
trainable state. What differs from ``dragon_core`` is conversion: as in
TensorFlow, Python floats become float32 and Python ints int32, while NumPy
arrays keep their dtype.
"""

from __future__ import annotations

import numbers

import numpy as np

import dragon_core as dg
from dragon_core import Tensor

float16, bfloat16, float32, float64 = dg.float16, dg.bfloat16, dg.float32, dg.float64
int8, int16, int32, int64, uint8, bool_ = dg.int8, dg.int16, dg.int32, dg.int64, dg.uint8, \
    dg.bool_
DType = dg.dtype


def as_dtype(value):
    """A dtype from a dtype, its name or a NumPy dtype (``tf.as_dtype``)."""
    if value is bool:
        return bool_
    return dg.as_dtype(value)


def _python_default(value):
    """TensorFlow's dtype for nested Python scalars (None: not only Python
    scalars, so NumPy decides)."""
    kinds = set()

    def walk(v):
        if isinstance(v, (list, tuple)):
            for e in v:
                if not walk(e):
                    return False
            return True
        if isinstance(v, bool):
            kinds.add("b")
        elif isinstance(v, numbers.Integral) and not isinstance(v, np.generic):
            kinds.add("i")
        elif isinstance(v, float):
            kinds.add("f")
        else:
            return False
        return True
    if not walk(value) or not kinds:
        return None
    if "f" in kinds:
        return float32
    if "i" in kinds:
        return int32
    return bool_


def convert_to_tensor(value, dtype=None, name=None):
    """``value`` as a tensor (``tf.convert_to_tensor``).

    Parameters
    ----------
    value : Tensor, array_like or Python scalar
        A Tensor of the requested dtype (or of any dtype when none is asked
        for) is returned as is.
    dtype : dtype, optional
        Requested dtype. A Tensor of another dtype raises ValueError, as in
        TensorFlow (use ``tf.cast``); Python and NumPy values are converted.
    name : str, optional
        Ignored (TensorFlow's op name).
    """
    want = None if dtype is None else as_dtype(dtype)
    if isinstance(value, Tensor):
        if want is not None and value.dtype != want:
            raise ValueError(f"convert_to_tensor: tensor of dtype {value.dtype.name} requested "
                             f"as {want.name}; use tf.cast to change the dtype")
        return value
    if want is None:
        want = _python_default(value)
    arr = np.asarray(value)
    if arr.dtype == object:
        raise TypeError(f"convert_to_tensor: cannot convert {type(value).__name__} "
                        f"{value!r:.80} to a tensor")
    if want is None:
        if arr.dtype.kind == "U" or arr.dtype.kind == "S":
            raise NotImplementedError("string tensors are not supported by "
                                      "dragon_core.vm.tensorflow; keep strings in Python "
                                      "(or encode them as integer ids)")
        return dg.tensor(arr)
    if not want.is_floating_point and arr.dtype.kind == "f" and dtype is not None:
        if not np.all(np.isfinite(arr)) or np.any(arr != np.trunc(arr)):
            raise TypeError(f"convert_to_tensor: cannot convert {value!r:.80} to "
                            f"{want.name} without losing precision")
    if want.name == "bfloat16":
        return dg.tensor(arr.astype(np.float32)).astype(want)
    return dg.tensor(arr.astype(want.name))


def constant(value, dtype=None, shape=None, name=None):
    """A tensor holding ``value`` (``tf.constant``).

    ``shape`` reshapes it, or broadcasts a scalar (``tf.constant(0.0,
    shape=[2, 3])``), as TensorFlow does.
    """
    if isinstance(value, Tensor):
        t = value if dtype is None else cast(value, dtype)
        t = t._clone() if t is value else t
    else:
        t = convert_to_tensor(value, dtype)
    if shape is not None:
        shape = [int(s) for s in shape]
        if t.size == 1:
            t = dg.ops.broadcast_to(dg.ops.reshape(t, [1] * max(len(shape), 0)), shape) \
                if shape else dg.ops.reshape(t, [])
            t = t._clone()
        elif t.size == int(np.prod(shape)):
            t = dg.ops.reshape(t, shape)
        else:
            raise TypeError(f"constant: {t.size} values do not fill shape {shape}")
    return t


def cast(x, dtype, name=None):
    """``x`` converted to ``dtype`` (float to int truncates toward zero)."""
    x = convert_to_tensor(x)
    dtype = as_dtype(dtype)
    if x.dtype == dtype:
        return x
    return dg.ops.cast(x, dtype)


class Variable(Tensor):
    """A mutable tensor that training updates (``tf.Variable``).

    It is a ``dragon_core.Tensor``: ops take it directly. A trainable
    variable has ``requires_grad=True``, so a ``GradientTape`` watches it
    when an op reads it, as TensorFlow watches trainable variables.

    Parameters
    ----------
    initial_value : Tensor, array_like or callable
        The value (a callable is called with no argument).
    trainable : bool, default True
    name : str, optional
    dtype : dtype, optional
        Converts the initial value.
    """

    def __init__(self, initial_value=None, trainable: bool = True, name: str | None = None,
                 dtype=None, shape=None, **kwargs):
        for k in kwargs:
            if k not in ("validate_shape", "caching_device", "constraint", "synchronization",
                         "aggregation", "import_scope", "experimental_enable_variable_lifting"):
                raise TypeError(f"Variable: unexpected argument '{k}'")
        if kwargs.get("constraint") is not None:
            raise NotImplementedError("Variable(constraint=...) is not supported by "
                                      "dragon_core.vm.tensorflow; apply the constraint after "
                                      "each step with var.assign(constraint(var))")
        if initial_value is None:
            raise ValueError("Variable: initial_value is required")
        if callable(initial_value):
            initial_value = initial_value()
        value = convert_to_tensor(initial_value) if dtype is None or isinstance(
            initial_value, Tensor) else convert_to_tensor(initial_value, dtype)
        if dtype is not None and value.dtype != as_dtype(dtype):
            value = dg.ops.cast(value, as_dtype(dtype))
        # A copy: assigning to the variable never changes the caller's tensor.
        super().__init__(value._clone())
        self.trainable = bool(trainable)
        self.requires_grad = self.trainable and self.dtype.is_floating_point
        self.name = (name or "Variable") + ":0"

    def assign(self, value, use_locking=None, name=None, read_value=True):
        """Replace the value (same shape and dtype); returns the variable."""
        value = convert_to_tensor(value, self.dtype) if not isinstance(value, Tensor) else value
        if tuple(value.shape) != tuple(self.shape):
            raise ValueError(f"Variable {self.name}: cannot assign a value of shape "
                             f"{tuple(value.shape)} to a variable of shape {tuple(self.shape)}")
        Tensor.assign(self, value)
        return self if read_value else None

    def assign_add(self, delta, use_locking=None, name=None, read_value=True):
        """``self += delta``; returns the variable."""
        return self.assign(self + convert_to_tensor(delta, self.dtype), read_value=read_value)

    def assign_sub(self, delta, use_locking=None, name=None, read_value=True):
        """``self -= delta``; returns the variable."""
        return self.assign(self - convert_to_tensor(delta, self.dtype), read_value=read_value)

    def read_value(self):
        """A tensor with the current value (a copy)."""
        return self._clone()

    def value(self):
        return self.read_value()

    def __repr__(self):
        return (f"<tf.Variable '{self.name}' shape={tuple(self.shape)} "
                f"dtype={self.dtype.name}, numpy={self.numpy()!r}>")

    def __reduce__(self):
        raise TypeError("tf.Variable objects are not picklable; save weights with "
                        "model.save_weights or dragon_core.save")


def is_tensor(x) -> bool:
    """Whether ``x`` is a tensor (variables included)."""
    return isinstance(x, Tensor)


class TensorSpec:
    """Shape and dtype of a tensor argument (for ``tf.function(input_signature=)``).

    A None dimension (or ``shape=None``) matches any size.
    """

    def __init__(self, shape=None, dtype=float32, name=None):
        self.shape = None if shape is None else tuple(None if d is None else int(d)
                                                      for d in shape)
        self.dtype = as_dtype(dtype)
        self.name = name

    def __repr__(self):
        return f"TensorSpec(shape={self.shape}, dtype=tf.{self.dtype.name}, name={self.name!r})"
