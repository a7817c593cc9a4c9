"""``tf.keras.losses``: losses as classes and functions (Keras's names).

Functions return one value per example (the mean over the last axis where
Keras takes it); the classes reduce over the batch with Keras's default
``"sum_over_batch_size"`` (the mean), or ``"sum"`` / ``"none"``.
Probabilities (``from_logits=False``) are clipped to ``[1e-7, 1 - 1e-7]``
before the log, as Keras does.
"""

from __future__ import annotations

import dragon_core as dg
from dragon_core import Tensor

from .. import nn as _nn
from .._core import convert_to_tensor
from .._unsupported import module_getattr

ops = dg.ops
_EPS = 1e-7


def _pair(y_true, y_pred):
    y_pred = y_pred if isinstance(y_pred, Tensor) else convert_to_tensor(y_pred)
    if not isinstance(y_true, Tensor):
        y_true = convert_to_tensor(y_true)
    return y_true, y_pred


def _float_like(y_true, y_pred):
    return y_true if y_true.dtype == y_pred.dtype else ops.cast(y_true, y_pred.dtype)


def _match_rank(y_true, y_pred):
    """Keras squeezes or expands a label of rank ndim-1 / ndim+1 to match."""
    if y_true.ndim == y_pred.ndim - 1:
        y_true = ops.unsqueeze(y_true, [y_true.ndim])
    return y_true


def sparse_categorical_crossentropy(y_true, y_pred, from_logits=False, axis=-1,
                                    ignore_class=None):
    """Per-example cross-entropy of class ids ``y_true`` against
    probabilities (or logits) ``y_pred``."""
    y_true, y_pred = _pair(y_true, y_pred)
    if ignore_class is not None:
        raise NotImplementedError("sparse_categorical_crossentropy(ignore_class=...) is not "
                                  "supported by dragon_core.vm.tensorflow; drop those "
                                  "examples or use dragon_core.nn.functional.cross_entropy "
                                  "with ignore_index")
    if axis != -1:
        raise NotImplementedError("sparse_categorical_crossentropy(axis != -1) is not "
                                  "supported; move the class axis last with tf.transpose")
    if y_true.ndim == y_pred.ndim and y_true.shape[-1] == 1:
        y_true = ops.squeeze(y_true, [y_true.ndim - 1])
    if y_true.dtype.is_floating_point:
        y_true = ops.cast(y_true, "int64")
    if from_logits:
        return _nn.sparse_softmax_cross_entropy_with_logits(labels=y_true, logits=y_pred)
    p = y_pred / ops.sum(y_pred, axis=[y_pred.ndim - 1], keepdims=True)
    p = ops.clip(p, _EPS, 1.0 - _EPS)
    onehot = ops.one_hot(ops.cast(y_true, "int64"), y_pred.shape[-1], dtype=y_pred.dtype)
    return ops.neg(ops.sum(onehot * ops.log(p), axis=[y_pred.ndim - 1]))


def categorical_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Per-example cross-entropy of one-hot (or soft) labels."""
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = _float_like(y_true, y_pred)
    ax = axis % y_pred.ndim
    if label_smoothing:
        n = y_pred.shape[ax]
        y_true = y_true * (1.0 - label_smoothing) + label_smoothing / n
    if from_logits:
        return ops.neg(ops.sum(y_true * ops.log_softmax(y_pred, axis=ax), axis=[ax]))
    p = y_pred / ops.sum(y_pred, axis=[ax], keepdims=True)
    p = ops.clip(p, _EPS, 1.0 - _EPS)
    return ops.neg(ops.sum(y_true * ops.log(p), axis=[ax]))


def binary_crossentropy(y_true, y_pred, from_logits=False, label_smoothing=0.0, axis=-1):
    """Mean over the last axis of the element-wise binary cross-entropy."""
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = _float_like(_match_rank(y_true, y_pred), y_pred)
    if label_smoothing:
        y_true = y_true * (1.0 - label_smoothing) + 0.5 * label_smoothing
    if from_logits:
        e = ops.bce_with_logits(y_pred, y_true, reduction="none")
    else:
        p = ops.clip(y_pred, _EPS, 1.0 - _EPS)
        e = ops.neg(y_true * ops.log(p) + (1.0 - y_true) * ops.log(1.0 - p))
    return ops.mean(e, axis=[axis % y_pred.ndim])


def mean_squared_error(y_true, y_pred):
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = _float_like(_match_rank(y_true, y_pred), y_pred)
    return ops.mean(ops.square(y_pred - y_true), axis=[y_pred.ndim - 1])


def mean_absolute_error(y_true, y_pred):
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = _float_like(_match_rank(y_true, y_pred), y_pred)
    return ops.mean(ops.abs(y_pred - y_true), axis=[y_pred.ndim - 1])


def huber(y_true, y_pred, delta=1.0):
    y_true, y_pred = _pair(y_true, y_pred)
    y_true = _float_like(_match_rank(y_true, y_pred), y_pred)
    err = ops.abs(y_pred - y_true)
    quad = ops.minimum(err, convert_to_tensor(float(delta), err.dtype))
    lin = err - quad
    return ops.mean(quad * quad * 0.5 + lin * delta, axis=[y_pred.ndim - 1])


mse = MSE = mean_squared_error
mae = MAE = mean_absolute_error


class Loss:
    """Base class: ``loss(y_true, y_pred, sample_weight=None)`` -> scalar."""

    def __init__(self, reduction="sum_over_batch_size", name=None):
        if reduction in ("auto", None):
            reduction = "sum_over_batch_size"
        if reduction not in ("sum_over_batch_size", "sum", "none"):
            raise ValueError(f"{type(self).__name__}: reduction must be "
                             f"'sum_over_batch_size', 'sum' or 'none', got {reduction!r}")
        self.reduction = reduction
        self.name = name or type(self).__name__

    def call(self, y_true, y_pred):
        raise NotImplementedError

    def __call__(self, y_true, y_pred, sample_weight=None):
        per = self.call(y_true, y_pred)
        if sample_weight is not None:
            sw = sample_weight if isinstance(sample_weight, Tensor) else \
                convert_to_tensor(sample_weight, per.dtype)
            per = per * sw
        if self.reduction == "none":
            return per
        total = ops.sum(per)
        if self.reduction == "sum":
            return total
        return total / float(max(per.size, 1))


def _loss_class(name, fn, **defaults):
    def __init__(self, reduction="sum_over_batch_size", name=None, **kwargs):
        Loss.__init__(self, reduction, name)
        bad = set(kwargs) - set(defaults)
        if bad:
            raise TypeError(f"{type(self).__name__}: unexpected argument(s) {sorted(bad)}")
        self._kw = {**defaults, **kwargs}

    def call(self, y_true, y_pred):
        return fn(y_true, y_pred, **self._kw)
    cls = type(name, (Loss,), {"__init__": __init__, "call": call,
                               "__doc__": f"Class form of :func:`{fn.__name__}`."})
    return cls


SparseCategoricalCrossentropy = _loss_class("SparseCategoricalCrossentropy",
                                            sparse_categorical_crossentropy, from_logits=False)
CategoricalCrossentropy = _loss_class("CategoricalCrossentropy", categorical_crossentropy,
                                      from_logits=False, label_smoothing=0.0)
BinaryCrossentropy = _loss_class("BinaryCrossentropy", binary_crossentropy, from_logits=False,
                                 label_smoothing=0.0)
MeanSquaredError = _loss_class("MeanSquaredError", mean_squared_error)
MeanAbsoluteError = _loss_class("MeanAbsoluteError", mean_absolute_error)
Huber = _loss_class("Huber", huber, delta=1.0)

_BY_NAME = {
    "sparse_categorical_crossentropy": SparseCategoricalCrossentropy,
    "categorical_crossentropy": CategoricalCrossentropy,
    "binary_crossentropy": BinaryCrossentropy,
    "mean_squared_error": MeanSquaredError, "mse": MeanSquaredError,
    "mean_absolute_error": MeanAbsoluteError, "mae": MeanAbsoluteError,
    "huber": Huber,
}


def get(identifier):
    """A loss from a name, a Loss or a function ``f(y_true, y_pred)``."""
    if isinstance(identifier, Loss) or callable(identifier) and not isinstance(identifier, str):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]()
    raise ValueError(f"unknown loss {identifier!r}; known: {sorted(_BY_NAME)}")


__getattr__ = module_getattr("tf.keras.losses", {
    "KLDivergence": "tf.reduce_sum(y_true * tf.math.log(y_true / y_pred), axis=-1)",
    "CosineSimilarity": "tf.nn.l2_normalize and tf.reduce_sum",
    "Hinge": "tf.maximum(1 - y_true * y_pred, 0)",
})
