"""``tf.keras.Model`` and ``Sequential`` with compile / fit / evaluate / predict.

``fit`` compiles one training step (forward, loss, tape gradient, optimizer
update, batch-norm statistics) with ``dragon_core.function`` the first time
it sees a batch shape, then runs the compiled graph per batch; the last,
smaller batch of an epoch compiles a second plan once. ``predict`` and
``evaluate`` compile the inference pass the same way.
"""

from __future__ import annotations

import sys
import time

import numpy as np

import dragon_core as dg
from dragon_core import Tensor

from .._core import convert_to_tensor
from .._unsupported import module_getattr
from . import callbacks as callbacks_mod
from . import losses as losses_mod
from . import metrics as metrics_mod
from . import optimizers as optimizers_mod
from .layers import InputLayer, Layer


class Progbar:
    """A Keras-style progress bar: ``12/57 [====>.....] - ETA: 1s - loss: 0.41``.

    With ``verbose=1`` the line is redrawn in place (on a terminal; once per
    second otherwise), with ``verbose=2`` only the epoch's last line is
    printed.
    """

    def __init__(self, target: int, verbose: int = 1, width: int = 30, stream=None):
        self.target, self.verbose, self.width = int(target), int(verbose), width
        self.stream = stream or sys.stdout
        self.start = time.perf_counter()
        self._last = self.start   # off a terminal: a line per second at most
        self._tty = hasattr(self.stream, "isatty") and self.stream.isatty()

    def update(self, current: int, values: dict, finalize: bool = False) -> None:
        if self.verbose == 0:
            return
        now = time.perf_counter()
        if not finalize and self.verbose == 2:
            return
        if not finalize and not self._tty and now - self._last < 1.0:
            return
        self._last = now
        elapsed = now - self.start
        frac = current / max(self.target, 1)
        done = int(self.width * frac)
        bar = "=" * max(done - 1, 0) + (">" if done < self.width else "=") if done else ""
        bar = f"[{bar}{'.' * (self.width - len(bar))}]"
        per_step = elapsed / max(current, 1)
        if finalize:
            t = f" - {elapsed:.0f}s {per_step * 1e3:.0f}ms/step"
        else:
            t = f" - ETA: {per_step * (self.target - current):.0f}s"
        vals = "".join(f" - {k}: {v:.4f}" for k, v in values.items())
        digits = len(str(self.target))
        line = f"{current:>{digits}}/{self.target} {bar}{t}{vals}"
        if self._tty:
            self.stream.write("\r" + line + ("\n" if finalize else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


def _batches(n: int, batch_size: int, shuffle: bool, rng) -> list:
    idx = rng.permutation(n) if shuffle else np.arange(n)
    return [idx[i:i + batch_size] for i in range(0, n, batch_size)]


def _as_numpy(x):
    if x is None:
        return None
    if isinstance(x, Tensor):
        return x.numpy()
    if isinstance(x, (list, tuple)) and x and isinstance(x[0], (np.ndarray, Tensor)):
        raise NotImplementedError("models with several inputs are not supported by "
                                  "dragon_core.vm.tensorflow's fit; concatenate the inputs "
                                  "or write a custom training loop with tf.GradientTape")
    return np.asarray(x)


def _to_tensor(a: np.ndarray):
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return dg.tensor(np.ascontiguousarray(a))


class Model(Layer):
    """A layer with training and inference loops (``tf.keras.Model``).

    Subclass it, create layers in ``__init__`` (after ``super().__init__()``)
    and compute in ``call(inputs, training=None)``. The functional form
    ``Model(inputs=..., outputs=...)`` is not supported.
    """

    _tf_qualname = "tf.keras.Model"

    def __init__(self, *args, **kwargs):
        if args or "inputs" in kwargs or "outputs" in kwargs:
            raise NotImplementedError("the functional API (tf.keras.Model(inputs, outputs)) is "
                                      "not supported by dragon_core.vm.tensorflow; subclass "
                                      "tf.keras.Model (layers in __init__, computation in "
                                      "call) or use tf.keras.Sequential")
        super().__init__(**kwargs)
        self.optimizer = None
        self.loss = None
        self.compiled_metrics = []
        self.history = None
        self.stop_training = False
        self._train_fn = None
        self._predict_fn = None
        self._eval_fn = None
        self._run_eagerly = False

    # ------------------------------------------------------------ compile
    def compile(self, optimizer="rmsprop", loss=None, metrics=None, loss_weights=None,
                weighted_metrics=None, run_eagerly=False, steps_per_execution=1,
                jit_compile="auto", **kwargs):
        """Set the optimizer, the loss and the metrics.

        ``run_eagerly=True`` runs every step eagerly instead of through a
        compiled graph (for debugging).
        """
        if loss_weights is not None or weighted_metrics is not None:
            raise NotImplementedError("compile(loss_weights/weighted_metrics) is not "
                                      "supported by dragon_core.vm.tensorflow (single-output "
                                      "models only)")
        if isinstance(loss, (list, dict)):
            raise NotImplementedError("several losses are not supported by "
                                      "dragon_core.vm.tensorflow (single-output models only)")
        self.optimizer = optimizers_mod.get(optimizer)
        self.loss = losses_mod.get(loss) if loss is not None else None
        loss_fn = self.loss
        if isinstance(loss, str):
            loss_fn = losses_mod._BY_NAME[loss]
        self.compiled_metrics = [metrics_mod.get(m, loss_fn) for m in (metrics or [])]
        self._run_eagerly = bool(run_eagerly)
        self._train_fn = self._predict_fn = self._eval_fn = None

    def _compute_loss(self, y, pred):
        if self.loss is None:
            raise RuntimeError(f"{self.name}: call compile(loss=...) before fit/evaluate")
        value = self.loss(y, pred)
        if not isinstance(value, Tensor):
            value = convert_to_tensor(value)
        if value.ndim:
            value = dg.ops.mean(value)
        extra = [loss for layer in [self] + list(self._flat_layers()) for loss in layer._losses]
        for e in extra:
            value = value + e
        return value

    # ----------------------------------------------------------- steps
    def train_step(self, x, y):
        """One training step on a batch: returns ``(loss, predictions)``."""
        from .. import GradientTape
        with GradientTape() as tape:
            pred = self(x, training=True)
            loss = self._compute_loss(y, pred)
        tvars = self.trainable_variables
        grads = tape.gradient(loss, tvars)
        self.optimizer.apply_gradients(zip(grads, tvars))
        return loss, pred

    def _ensure_built(self, x_batch):
        if not self.built or not self.weights:
            with dg.no_grad():
                self(x_batch[:1] if x_batch.shape[0] > 1 else x_batch, training=False)

    def _train_callable(self):
        if self._run_eagerly:
            return self.train_step
        if self._train_fn is None:
            self._train_fn = dg.function(self.train_step, name=f"{self.name}_train_step")
        return self._train_fn

    def _predict_callable(self):
        def step(x):
            return self(x, training=False)
        if self._run_eagerly:
            return step
        if self._predict_fn is None:
            self._predict_fn = dg.function(step, name=f"{self.name}_predict_step")
        return self._predict_fn

    # ------------------------------------------------------------- loops
    def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto", callbacks=None,
            validation_split=0.0, validation_data=None, shuffle=True, class_weight=None,
            sample_weight=None, initial_epoch=0, steps_per_epoch=None, **kwargs):
        """Train for ``epochs`` passes over ``(x, y)`` in batches.

        Returns
        -------
        History
            ``history.history[name]`` lists the epoch means of the loss and
            metrics (``val_*`` for the validation data).
        """
        if class_weight is not None or sample_weight is not None:
            raise NotImplementedError("fit(class_weight/sample_weight) is not supported by "
                                      "dragon_core.vm.tensorflow; weight the loss in a custom "
                                      "train step")
        if steps_per_epoch is not None:
            raise NotImplementedError("fit(steps_per_epoch=...) is not supported by "
                                      "dragon_core.vm.tensorflow; pass arrays and batch_size")
        if self.optimizer is None:
            raise RuntimeError(f"{self.name}: call compile(optimizer=..., loss=...) before fit")
        x, y = _as_numpy(x), _as_numpy(y)
        if x is None or y is None:
            raise ValueError("fit: x and y are required (NumPy arrays or tensors)")
        if len(x) != len(y):
            raise ValueError(f"fit: x has {len(x)} examples but y has {len(y)}")
        if validation_split and validation_data is None:
            k = int(len(x) * (1.0 - validation_split))
            x, y, validation_data = x[:k], y[:k], (x[k:], y[k:])
        batch_size = 32 if batch_size is None else int(batch_size)
        verbose = 1 if verbose == "auto" else int(verbose)
        history = callbacks_mod.History()
        cbs = callbacks_mod.CallbackList(list(callbacks or []) + [history], self)
        self.stop_training = False
        from .. import random as _random
        rng = _random.generator()
        self._ensure_built(_to_tensor(x[:2]))
        step = self._train_callable()
        cbs.call("on_train_begin", {})
        for epoch in range(initial_epoch, int(epochs)):
            for m in self.compiled_metrics:
                m.reset_state()
            cbs.call("on_epoch_begin", epoch, {})
            batches = _batches(len(x), batch_size, shuffle, rng)
            if verbose:
                print(f"Epoch {epoch + 1}/{epochs}")
            bar = Progbar(len(batches), verbose)
            loss_sum, n_seen = 0.0, 0
            logs = {}
            for i, idx in enumerate(batches):
                xb, yb = _to_tensor(x[idx]), _to_tensor(y[idx])
                loss, pred = step(xb, yb)
                nb = len(idx)
                loss_sum += float(loss.item()) * nb
                n_seen += nb
                pred_np = pred.numpy()
                for m in self.compiled_metrics:
                    m.update_state(y[idx], pred_np)
                logs = {"loss": loss_sum / n_seen}
                logs.update({m.name: float(m.result().item()) for m in self.compiled_metrics})
                cbs.call("on_train_batch_end", i, logs)
                bar.update(i + 1, logs, finalize=False)
            if validation_data is not None:
                vx, vy = validation_data[0], validation_data[1]
                vals = self.evaluate(vx, vy, batch_size=batch_size, verbose=0, return_dict=True)
                logs.update({f"val_{k}": v for k, v in vals.items()})
            bar.update(len(batches), logs, finalize=True)
            cbs.call("on_epoch_end", epoch, logs)
            if self.stop_training:
                break
        cbs.call("on_train_end", logs if epochs > initial_epoch else {})
        self.history = history
        return history

    def evaluate(self, x=None, y=None, batch_size=None, verbose="auto", sample_weight=None,
                 steps=None, callbacks=None, return_dict=False, **kwargs):
        """The loss (and metrics) over ``(x, y)``, with inference behaviour."""
        x, y = _as_numpy(x), _as_numpy(y)
        batch_size = 32 if batch_size is None else int(batch_size)
        verbose = 1 if verbose == "auto" else int(verbose)
        metrics = list(self.compiled_metrics)
        saved = [(m._total, m._count) for m in metrics]
        for m in metrics:
            m.reset_state()
        predict = self._predict_callable()
        self._ensure_built(_to_tensor(x[:2]))
        batches = _batches(len(x), batch_size, False, None)
        bar = Progbar(len(batches), verbose)
        loss_sum = 0.0
        for i, idx in enumerate(batches):
            pred = predict(_to_tensor(x[idx]))
            with dg.no_grad():
                loss = self._compute_loss(_to_tensor(y[idx]), pred)
            loss_sum += float(loss.item()) * len(idx)
            for m in metrics:
                m.update_state(y[idx], pred.numpy())
            bar.update(i + 1, {"loss": loss_sum / max(1, sum(len(b) for b in batches[:i + 1]))})
        out = {"loss": loss_sum / max(len(x), 1)}
        out.update({m.name: float(m.result().item()) for m in metrics})
        bar.update(len(batches), out, finalize=True)
        for m, (t, c) in zip(metrics, saved):
            m._total, m._count = t, c
        if return_dict:
            return out
        vals = list(out.values())
        return vals[0] if len(vals) == 1 else vals

    def predict(self, x, batch_size=None, verbose="auto", steps=None, callbacks=None, **kwargs):
        """Outputs for ``x`` in batches, as one NumPy array."""
        x = _as_numpy(x)
        batch_size = 32 if batch_size is None else int(batch_size)
        verbose = 1 if verbose == "auto" else int(verbose)
        predict = self._predict_callable()
        self._ensure_built(_to_tensor(x[:2]))
        batches = _batches(len(x), batch_size, False, None)
        bar = Progbar(len(batches), verbose)
        outs = []
        for i, idx in enumerate(batches):
            outs.append(predict(_to_tensor(x[idx])).numpy())
            bar.update(i + 1, {})
        bar.update(len(batches), {}, finalize=True)
        return np.concatenate(outs, axis=0) if outs else np.zeros((0,), np.float32)

    def train_on_batch(self, x, y, return_dict=False, **kwargs):
        x, y = _to_tensor(_as_numpy(x)), _to_tensor(_as_numpy(y))
        self._ensure_built(x)
        loss, pred = self._train_callable()(x, y)
        out = {"loss": float(loss.item())}
        for m in self.compiled_metrics:
            m.update_state(y.numpy(), pred.numpy())
            out[m.name] = float(m.result().item())
        return out if return_dict else (list(out.values()) if len(out) > 1 else out["loss"])

    def test_on_batch(self, x, y, return_dict=False, **kwargs):
        return self.evaluate(x, y, batch_size=len(x), verbose=0, return_dict=return_dict)

    def predict_on_batch(self, x):
        return self.predict(x, batch_size=len(x), verbose=0)

    # ----------------------------------------------------------- weights
    def save_weights(self, filepath, overwrite=True, **kwargs):
        """Save the weights (dragon_core's safe format, no pickle)."""
        dg.save({f"{i}:{w.name}": w for i, w in enumerate(self.weights)}, filepath)

    def load_weights(self, filepath, **kwargs):
        """Load weights saved by :meth:`save_weights` (same architecture)."""
        state = dg.load(filepath)
        mine = self.weights
        if len(state) != len(mine):
            raise ValueError(f"{self.name}.load_weights: the file has {len(state)} weights, "
                             f"the model {len(mine)}")
        by_index = {int(k.split(":", 1)[0]): v for k, v in state.items()}
        self.set_weights([by_index[i].numpy() for i in range(len(mine))])

    def save(self, filepath, **kwargs):
        raise NotImplementedError("Model.save is not supported by dragon_core.vm.tensorflow; "
                                  "use model.save_weights(path) and rebuild the model in code, "
                                  "or dragon_core.save_graph for a compiled inference graph")

    def summary(self, print_fn=None):
        """Print each layer with its parameter count."""
        p = print_fn or print
        if not self.built and isinstance(self, Sequential):
            self.build()
        p(f'Model: "{self.name}"')
        p(f"{'Layer (type)':<32}{'Param #':>12}")
        for layer in self._sublayers:
            p(f"{layer.name + ' (' + type(layer).__name__ + ')':<32}{layer.count_params():>12,}")
        total = self.count_params()
        trainable = int(sum(w.size for w in self.trainable_weights))
        p(f"Total params: {total:,}")
        p(f"Trainable params: {trainable:,}")
        p(f"Non-trainable params: {total - trainable:,}")

    @property
    def layers(self) -> list:
        return list(self._sublayers)

    @property
    def metrics_names(self) -> list:
        return ["loss"] + [m.name for m in self.compiled_metrics]


class Sequential(Model):
    """A stack of layers applied in order (``tf.keras.Sequential``)."""

    _tf_qualname = "tf.keras.Sequential"

    def __init__(self, layers=None, name=None, **kwargs):
        super().__init__(name=name, **kwargs)
        for layer in layers or []:
            self.add(layer)

    def add(self, layer) -> None:
        if not isinstance(layer, Layer):
            raise TypeError(f"Sequential.add: expected a layer, got {type(layer).__name__}")
        self._sublayers.append(layer)
        self.built = False
        self._train_fn = self._predict_fn = self._eval_fn = None

    def pop(self) -> None:
        if not self._sublayers:
            raise TypeError("Sequential.pop: there are no layers")
        self._sublayers.pop()
        self._train_fn = self._predict_fn = self._eval_fn = None

    def build(self, input_shape=None):
        shape = input_shape
        if shape is None:
            for layer in self._sublayers:
                if layer._build_input_shape is not None:
                    shape = layer._build_input_shape
                    break
        if shape is None:
            raise ValueError(f"{self.name}.build: the input shape is unknown; pass it, give the "
                             "first layer input_shape=..., or call the model on data")
        dummy = dg.ops.zeros([1 if d is None else int(d) for d in shape], dtype="float32")
        with dg.no_grad():
            for layer in self._sublayers:
                dummy = layer(dummy, training=False)
        self.built = True

    def call(self, inputs, training=None):
        x = inputs
        for layer in self._sublayers:
            if isinstance(layer, InputLayer):
                continue
            x = layer(x, training=training)
        return x


def load_model(*args, **kwargs):
    raise NotImplementedError("tf.keras.models.load_model is not supported by "
                              "dragon_core.vm.tensorflow; rebuild the model in code and call "
                              "model.load_weights(path)")


__getattr__ = module_getattr("tf.keras.models", {
    "clone_model": "building the model again in code and set_weights(get_weights())",
})
