"""``tf.keras.callbacks``: History, EarlyStopping, LambdaCallback."""

from __future__ import annotations

import numpy as np

from .._unsupported import module_getattr


class Callback:
    """Base class: override any ``on_*`` hook; ``self.model`` is the model."""

    def __init__(self):
        self.model = None
        self.params = {}

    def set_model(self, model):
        self.model = model

    def on_train_begin(self, logs=None): pass
    def on_train_end(self, logs=None): pass
    def on_epoch_begin(self, epoch, logs=None): pass
    def on_epoch_end(self, epoch, logs=None): pass
    def on_train_batch_end(self, batch, logs=None): pass


class History(Callback):
    """``history[name]``: the value of each epoch; ``epoch``: their indices."""

    def on_train_begin(self, logs=None):
        self.history = {}
        self.epoch = []

    def on_epoch_end(self, epoch, logs=None):
        self.epoch.append(epoch)
        for k, v in (logs or {}).items():
            self.history.setdefault(k, []).append(float(v))


class EarlyStopping(Callback):
    """Stop when ``monitor`` has not improved by ``min_delta`` for
    ``patience`` epochs (optionally restoring the best weights)."""

    def __init__(self, monitor="val_loss", min_delta=0.0, patience=0, verbose=0, mode="auto",
                 baseline=None, restore_best_weights=False, start_from_epoch=0):
        super().__init__()
        self.monitor, self.min_delta, self.patience = monitor, abs(min_delta), int(patience)
        if mode == "auto":
            mode = "max" if "acc" in monitor else "min"
        self.sign = 1.0 if mode == "min" else -1.0
        self.restore_best_weights = restore_best_weights

    def on_train_begin(self, logs=None):
        self.wait, self.best, self.best_weights, self.stopped_epoch = 0, np.inf, None, 0

    def on_epoch_end(self, epoch, logs=None):
        value = (logs or {}).get(self.monitor)
        if value is None:
            raise KeyError(f"EarlyStopping: '{self.monitor}' is not among the logged values "
                           f"{sorted(logs or {})}")
        if self.sign * value < self.best - self.min_delta:
            self.best, self.wait = self.sign * value, 0
            if self.restore_best_weights:
                self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait > self.patience:
            self.model.stop_training = True
            self.stopped_epoch = epoch
            if self.restore_best_weights and self.best_weights is not None:
                self.model.set_weights(self.best_weights)


class LambdaCallback(Callback):
    def __init__(self, on_epoch_begin=None, on_epoch_end=None, on_train_begin=None,
                 on_train_end=None, on_train_batch_end=None, **kwargs):
        super().__init__()
        for name, fn in (("on_epoch_begin", on_epoch_begin), ("on_epoch_end", on_epoch_end),
                         ("on_train_begin", on_train_begin), ("on_train_end", on_train_end),
                         ("on_train_batch_end", on_train_batch_end)):
            if fn is not None:
                setattr(self, name, fn)


class CallbackList:
    def __init__(self, callbacks, model):
        self.callbacks = list(callbacks)
        for c in self.callbacks:
            c.set_model(model)

    def call(self, hook, *args):
        for c in self.callbacks:
            getattr(c, hook)(*args)


__getattr__ = module_getattr("tf.keras.callbacks", {
    "ModelCheckpoint": "a LambdaCallback(on_epoch_end=...) calling model.save_weights",
    "TensorBoard": "dragon_core.summary in a LambdaCallback",
    "ReduceLROnPlateau": "a LambdaCallback setting model.optimizer.learning_rate",
    "LearningRateScheduler": "a LambdaCallback setting model.optimizer.learning_rate",
})
