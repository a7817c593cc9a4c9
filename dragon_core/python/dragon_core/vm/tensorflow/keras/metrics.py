"""``tf.keras.metrics``: stateful metrics (``update_state``, ``result``,
``reset_state``), accumulated in float64 on the host."""

from __future__ import annotations

import numpy as np

from dragon_core import Tensor

from .._core import convert_to_tensor
from .._unsupported import module_getattr


def _np(x):
    return x.numpy() if isinstance(x, Tensor) else np.asarray(x)


class Metric:
    """Base class: a weighted mean of per-example values."""

    def __init__(self, name=None, dtype=None):
        self.name = name or _snake(type(self).__name__)
        self.reset_state()

    def reset_state(self) -> None:
        self._total = 0.0
        self._count = 0.0

    reset_states = reset_state

    def _values(self, y_true, y_pred):
        raise NotImplementedError

    def update_state(self, y_true, y_pred, sample_weight=None):
        v = np.asarray(self._values(_np(y_true), _np(y_pred)), dtype=np.float64)
        w = np.ones_like(v) if sample_weight is None else \
            np.broadcast_to(np.asarray(_np(sample_weight), np.float64), v.shape)
        self._total += float((v * w).sum())
        self._count += float(w.sum())

    def result(self):
        return convert_to_tensor(np.float32(self._total / self._count if self._count else 0.0))

    def __call__(self, y_true, y_pred, sample_weight=None):
        self.update_state(y_true, y_pred, sample_weight)
        return self.result()


def _snake(name):
    import re
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _sparse_labels(y_true, y_pred):
    y = np.asarray(y_true)
    if y.ndim == y_pred.ndim and y.shape[-1] == 1:
        y = y[..., 0]
    return y.astype(np.int64)


class Mean(Metric):
    """Weighted mean of the values given to ``update_state(values)``."""

    def update_state(self, values, sample_weight=None):
        v = np.asarray(_np(values), dtype=np.float64)
        w = np.ones_like(v) if sample_weight is None else \
            np.broadcast_to(np.asarray(_np(sample_weight), np.float64), v.shape)
        self._total += float((v * w).sum())
        self._count += float(w.sum())

    def __call__(self, values, sample_weight=None):
        self.update_state(values, sample_weight)
        return self.result()


class SparseCategoricalAccuracy(Metric):
    def _values(self, y_true, y_pred):
        return (np.argmax(y_pred, axis=-1) == _sparse_labels(y_true, y_pred)).astype(np.float64)


class CategoricalAccuracy(Metric):
    def _values(self, y_true, y_pred):
        return (np.argmax(y_pred, -1) == np.argmax(y_true, -1)).astype(np.float64)


class BinaryAccuracy(Metric):
    def __init__(self, name="binary_accuracy", dtype=None, threshold=0.5):
        self.threshold = threshold
        super().__init__(name, dtype)

    def _values(self, y_true, y_pred):
        y = np.asarray(y_true).reshape(y_pred.shape) if np.size(y_true) == y_pred.size else \
            y_true
        return np.mean((y_pred > self.threshold) == (y > 0.5), axis=-1)


class Accuracy(Metric):
    """Fraction of predictions equal to the labels."""

    def _values(self, y_true, y_pred):
        return (np.asarray(y_true) == np.asarray(y_pred)).astype(np.float64)


class MeanSquaredError(Metric):
    def _values(self, y_true, y_pred):
        y = np.asarray(y_true, np.float64).reshape(y_pred.shape)
        return np.mean((y_pred - y) ** 2, axis=-1)


class MeanAbsoluteError(Metric):
    def _values(self, y_true, y_pred):
        y = np.asarray(y_true, np.float64).reshape(y_pred.shape)
        return np.mean(np.abs(y_pred - y), axis=-1)


class SparseTopKCategoricalAccuracy(Metric):
    def __init__(self, k=5, name="sparse_top_k_categorical_accuracy", dtype=None):
        self.k = int(k)
        super().__init__(name, dtype)

    def _values(self, y_true, y_pred):
        top = np.argsort(-y_pred, axis=-1)[..., :self.k]
        return (top == _sparse_labels(y_true, y_pred)[..., None]).any(-1).astype(np.float64)


def get(identifier, loss=None):
    """A metric from a name (``"accuracy"`` follows the loss, as in Keras)."""
    if isinstance(identifier, Metric):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in ("accuracy", "acc"):
            lname = getattr(loss, "__name__", type(loss).__name__) if loss is not None else ""
            lname = _snake(lname)
            if "sparse" in lname:
                m = SparseCategoricalAccuracy()
            elif "binary" in lname:
                m = BinaryAccuracy()
            elif "categorical" in lname:
                m = CategoricalAccuracy()
            else:
                m = SparseCategoricalAccuracy()
            m.name = identifier
            return m
        table = {"sparse_categorical_accuracy": SparseCategoricalAccuracy,
                 "categorical_accuracy": CategoricalAccuracy,
                 "binary_accuracy": BinaryAccuracy, "mse": MeanSquaredError,
                 "mean_squared_error": MeanSquaredError, "mae": MeanAbsoluteError,
                 "mean_absolute_error": MeanAbsoluteError}
        if key in table:
            m = table[key]()
            m.name = identifier
            return m
        raise ValueError(f"unknown metric {identifier!r}; known: accuracy, {sorted(table)}")
    if callable(identifier):
        fn = identifier

        class _Fn(Metric):
            def _values(self, y_true, y_pred):
                return _np(fn(convert_to_tensor(y_true), convert_to_tensor(y_pred)))
        return _Fn(name=getattr(fn, "__name__", "metric"))
    raise TypeError(f"metric must be a name, a Metric or a function, got {identifier!r}")


__getattr__ = module_getattr("tf.keras.metrics", {
    "AUC": "sklearn.metrics.roc_auc_score on model.predict(x)",
    "Precision": "sklearn.metrics.precision_score on model.predict(x)",
    "Recall": "sklearn.metrics.recall_score on model.predict(x)",
})
