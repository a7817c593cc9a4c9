"""``tf.keras.optimizers``: SGD and Adam over ``dragon_core.optim``.

``apply_gradients(zip(grads, vars))`` updates each variable with one fused
update op of the core; the optimizer's state (momentum, moments, step
count) lives in tensors, so a training step that calls it compiles into one
graph under ``tf.function``. The update rules are Keras's: SGD's momentum
``v = momentum * v - lr * g; w += v`` equals the core's (PyTorch's) rule
for a constant learning rate; Adam adds epsilon to the bias-corrected
``sqrt(v_hat)`` (PyTorch's placement), where Keras adds it to ``sqrt(v)``
before the correction -- a difference of order ``epsilon`` (1e-7).
"""

from __future__ import annotations

import dragon_core as dg

from .._unsupported import module_getattr


class Optimizer:
    """Base class of the Keras optimizers."""

    def __init__(self, learning_rate, name, **kwargs):
        for k in kwargs:
            if k in ("clipnorm", "clipvalue", "global_clipnorm") and kwargs[k] is not None:
                raise NotImplementedError(f"{type(self).__name__}({k}=...) is not supported by "
                                          "dragon_core.vm.tensorflow; clip the gradients with "
                                          "dragon_core.optim.clip_grads_by_norm before "
                                          "apply_gradients")
            if k not in ("clipnorm", "clipvalue", "global_clipnorm", "weight_decay",
                         "use_ema", "jit_compile", "amsgrad"):
                raise TypeError(f"{type(self).__name__}: unexpected argument '{k}'")
        if callable(learning_rate):
            raise NotImplementedError("learning-rate schedules are not supported by "
                                      "dragon_core.vm.tensorflow; set "
                                      "optimizer.learning_rate between epochs")
        self._lr = float(learning_rate)
        self.name = name
        self._inner = {}   # tuple of variable ids -> dragon_core optimizer
        self.iterations = 0

    @property
    def learning_rate(self) -> float:
        return self._lr

    @learning_rate.setter
    def learning_rate(self, value) -> None:
        self._lr = float(value)
        for opt in self._inner.values():
            for g in opt.param_groups:
                g["lr"] = self._lr

    lr = learning_rate

    def _make(self, variables):
        raise NotImplementedError

    def apply_gradients(self, grads_and_vars, name=None):
        """Update each variable from its gradient (None gradients skip)."""
        pairs = list(grads_and_vars)
        if not pairs:
            return
        variables = [v for _, v in pairs]
        key = tuple(id(v) for v in variables)
        opt = self._inner.get(key)
        if opt is None:
            opt = self._inner[key] = self._make(variables)
        opt.step([g for g, _ in pairs])
        self.iterations += 1

    def minimize(self, loss, var_list, tape=None):
        """``apply_gradients`` of ``tape.gradient(loss, var_list)``."""
        if tape is None:
            raise ValueError(f"{type(self).__name__}.minimize: pass the tape that recorded "
                             "the loss (tape=...)")
        grads = tape.gradient(loss, var_list)
        self.apply_gradients(zip(grads, var_list))

    def get_config(self) -> dict:
        return {"name": self.name, "learning_rate": self._lr}


class SGD(Optimizer):
    """Gradient descent with optional (Nesterov) momentum; Keras's default
    learning rate 0.01."""

    def __init__(self, learning_rate=0.01, momentum=0.0, nesterov=False, name="SGD",
                 **kwargs):
        super().__init__(learning_rate, name, **kwargs)
        self.momentum = float(momentum)
        self.nesterov = bool(nesterov)

    def _make(self, variables):
        return dg.optim.SGD(variables, lr=self._lr, momentum=self.momentum,
                            nesterov=self.nesterov)


class Adam(Optimizer):
    """Adam; Keras's defaults (learning rate 1e-3, epsilon 1e-7)."""

    def __init__(self, learning_rate=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                 amsgrad=False, name="Adam", **kwargs):
        super().__init__(learning_rate, name, **kwargs)
        if amsgrad:
            raise NotImplementedError("Adam(amsgrad=True) is not supported by "
                                      "dragon_core.vm.tensorflow; use amsgrad=False")
        self.beta_1, self.beta_2, self.epsilon = float(beta_1), float(beta_2), float(epsilon)

    def _make(self, variables):
        return dg.optim.Adam(variables, lr=self._lr, betas=(self.beta_1, self.beta_2),
                             eps=self.epsilon)


def get(identifier):
    """An optimizer from a name (``"sgd"``, ``"adam"``) or an instance."""
    if isinstance(identifier, Optimizer):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key == "sgd":
            return SGD()
        if key == "adam":
            return Adam()
        if key in ("rmsprop", "adagrad", "adadelta", "adamw", "nadam", "adamax", "ftrl"):
            raise NotImplementedError(f"optimizer {identifier!r} is not supported by "
                                      "dragon_core.vm.tensorflow; use 'adam' or 'sgd' (or "
                                      "dragon_core.optim in a custom loop)")
    raise ValueError(f"unknown optimizer {identifier!r}; known: 'sgd', 'adam'")


__getattr__ = module_getattr("tf.keras.optimizers", {
    "RMSprop": "Adam, or dragon_core.optim.RMSprop in a custom loop",
    "Adagrad": "Adam, or dragon_core.optim.Adagrad in a custom loop",
    "AdamW": "Adam, or dragon_core.optim.AdamW in a custom loop",
    "schedules": "setting optimizer.learning_rate between epochs",
})
