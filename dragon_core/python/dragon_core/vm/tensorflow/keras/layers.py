"""``tf.keras.layers``: Keras layers over dragon_core ops.

Layers build their weights on the first call from the input's shape, as
Keras does, and keep Keras's weight layouts (Dense kernel ``[in, out]``,
Conv2D kernel ``[kh, kw, in, out]``), so ``get_weights``/``set_weights``
exchange values with real Keras. Images are channels-last (NHWC) by
default; Conv2D and the pooling layers transpose to the core's NCHW ops and
back (``data_format="channels_first"`` skips that).
"""

from __future__ import annotations

import re
import threading

import numpy as np

import dragon_core as dg
from dragon_core import Tensor
from dragon_core.optim.optimizer import outside_trace

from .. import nn as _nn
from .._core import Variable, as_dtype, convert_to_tensor, float32
from .._unsupported import module_getattr, unsupported
from . import activations, initializers

ops = dg.ops
_local = threading.local()
_counts: dict = {}


def _training_default() -> bool:
    return bool(getattr(_local, "training", False))


def _unique_name(cls_name: str) -> str:
    base = re.sub(r"(?<!^)(?=[A-Z])", "_", cls_name).lower()
    n = _counts.get(base, 0)
    _counts[base] = n + 1
    return base if n == 0 else f"{base}_{n}"


class Layer:
    """Base class of layers (``tf.keras.layers.Layer``).

    Subclasses create weights in :meth:`build` with :meth:`add_weight` and
    compute in :meth:`call`. Layers and lists of layers assigned as
    attributes are tracked (their weights join this layer's).

    Parameters
    ----------
    trainable : bool, default True
    name : str, optional
    dtype : dtype, optional
        The weights' dtype (float32).
    input_shape : tuple, optional
        Shape of one example (without the batch axis): builds the layer at
        once when it is the first of a ``Sequential``.
    """

    _tf_qualname = "tf.keras.layers.Layer"

    def __init__(self, trainable: bool = True, name: str | None = None, dtype=None,
                 input_shape=None, batch_input_shape=None, input_dim=None, **kwargs):
        for k in kwargs:
            if k not in ("autocast", "dynamic"):
                raise TypeError(f"{type(self).__name__}: unexpected argument '{k}'")
        object.__setattr__(self, "_sublayers", [])
        object.__setattr__(self, "_own_weights", [])
        self.built = False
        self._trainable = bool(trainable)
        self.name = name or _unique_name(type(self).__name__)
        self.dtype = as_dtype(dtype or float32)
        if input_dim is not None and input_shape is None:
            input_shape = (input_dim,)
        if batch_input_shape is not None:
            input_shape = tuple(batch_input_shape)[1:]
        self._build_input_shape = None if input_shape is None else \
            (None,) + tuple(input_shape)
        self._losses: list = []

    # ---------------------------------------------------------- tracking
    def __setattr__(self, name, value):
        if not name.startswith("__"):
            subs = self.__dict__.get("_sublayers")
            if subs is not None:
                for v in (value if isinstance(value, (list, tuple)) else [value]):
                    if isinstance(v, Layer) and v is not self and v not in subs:
                        subs.append(v)
        object.__setattr__(self, name, value)

    def __getattr__(self, name: str):
        if name.startswith("_"):
            raise AttributeError(name)
        raise unsupported(f"{type(self).__name__}.{name}")

    @property
    def trainable(self) -> bool:
        return self._trainable

    @trainable.setter
    def trainable(self, value: bool) -> None:
        self._trainable = bool(value)
        for sub in self._sublayers:
            sub.trainable = value
        for w in self._own_weights:
            if w._keras_trainable:
                w.requires_grad = bool(value)

    def _flat_layers(self):
        for sub in self._sublayers:
            yield sub
            yield from sub._flat_layers()

    def add_weight(self, name=None, shape=(), dtype=None, initializer="glorot_uniform",
                   trainable=True, regularizer=None, constraint=None, **kwargs):
        """Create a weight (a :class:`tf.Variable`) of this layer."""
        if regularizer is not None or constraint is not None:
            raise NotImplementedError(f"{type(self).__name__}.add_weight: regularizer and "
                                      "constraint are not supported by "
                                      "dragon_core.vm.tensorflow; add the penalty to the "
                                      "loss yourself")
        init = initializers.get(initializer)
        with outside_trace():
            value = init([int(s) for s in shape], dtype=as_dtype(dtype or self.dtype))
            var = Variable(value, trainable=trainable and self._trainable,
                           name=f"{self.name}/{name or 'weight'}")
        var._keras_trainable = bool(trainable)
        self._own_weights.append(var)
        return var

    @property
    def weights(self) -> list:
        """Every weight, this layer's first, then its sublayers' (in order)."""
        out = list(self._own_weights)
        for sub in self._sublayers:
            out.extend(w for w in sub.weights if not any(w is o for o in out))
        return out

    variables = weights

    @property
    def trainable_weights(self) -> list:
        if not self._trainable:
            return []
        out = [w for w in self._own_weights if w._keras_trainable]
        for sub in self._sublayers:
            out.extend(w for w in sub.trainable_weights if not any(w is o for o in out))
        return out

    trainable_variables = trainable_weights

    @property
    def non_trainable_weights(self) -> list:
        tw = self.trainable_weights
        return [w for w in self.weights if not any(w is t for t in tw)]

    non_trainable_variables = non_trainable_weights

    @property
    def losses(self) -> list:
        return list(self._losses)

    def get_weights(self) -> list:
        """The weights as NumPy arrays."""
        return [w.numpy().copy() for w in self.weights]

    def set_weights(self, weights) -> None:
        """Set every weight from NumPy arrays (same order as :meth:`get_weights`)."""
        mine = self.weights
        weights = list(weights)
        if len(weights) != len(mine):
            raise ValueError(f"{self.name}.set_weights: expected {len(mine)} arrays, got "
                             f"{len(weights)}")
        for w, v in zip(mine, weights):
            v = np.asarray(v)
            if tuple(v.shape) != tuple(w.shape):
                raise ValueError(f"{self.name}.set_weights: weight {w.name} has shape "
                                 f"{tuple(w.shape)}, got {v.shape}")
            w.assign(dg.tensor(v.astype(w.dtype.name)))

    def count_params(self) -> int:
        return int(sum(w.size for w in self.weights))

    # ------------------------------------------------------------ calling
    def build(self, input_shape) -> None:
        self.built = True

    def call(self, inputs, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def _call_accepts_training(self) -> bool:
        import inspect
        cache = type(self).__dict__.get("_accepts_training_cache")
        if cache is None:
            params = inspect.signature(self.call).parameters
            cache = "training" in params or any(p.kind == p.VAR_KEYWORD
                                                for p in params.values())
            type.__setattr__(type(self), "_accepts_training_cache", cache)
        return cache

    def __call__(self, inputs, *args, training=None, **kwargs):
        if isinstance(inputs, (list, tuple)):
            inputs = type(inputs)(convert_to_tensor(i) if not isinstance(i, Tensor) else i
                                  for i in inputs)
            shape = [tuple(i.shape) for i in inputs]
        else:
            if not isinstance(inputs, Tensor):
                inputs = convert_to_tensor(inputs)
            shape = tuple(inputs.shape)
        if not self.built:
            with outside_trace():
                self.build(shape)
            self.built = True
        if training is None:
            training = _training_default()
        prev = getattr(_local, "training", False)
        _local.training = bool(training)
        try:
            if self._call_accepts_training():
                return self.call(inputs, *args, training=bool(training), **kwargs)
            return self.call(inputs, *args, **kwargs)
        finally:
            _local.training = prev

    def get_config(self) -> dict:
        return {"name": self.name, "trainable": self.trainable}

    def __repr__(self):
        return f"<{type(self).__name__} name={self.name}, built={self.built}>"


class InputLayer(Layer):
    """Declares the input shape (one example, without the batch axis)."""

    def __init__(self, shape=None, batch_size=None, dtype=None, name=None, input_shape=None,
                 **kwargs):
        shape = shape if shape is not None else input_shape
        super().__init__(name=name, dtype=dtype, input_shape=shape, **kwargs)

    def call(self, inputs):
        return inputs


def Input(shape=None, batch_size=None, dtype=None, name=None, **kwargs):  # noqa: N802
    """A marker of the input shape, for the first entry of a ``Sequential``.

    The functional API (``Model(inputs, outputs)``) is not supported:
    subclass ``tf.keras.Model`` or use ``Sequential``.
    """
    return InputLayer(shape=shape, batch_size=batch_size, dtype=dtype, name=name, **kwargs)


class Dense(Layer):
    """``activation(inputs @ kernel + bias)`` on the last axis; kernel ``[in, units]``."""

    def __init__(self, units, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(**kwargs)
        if any(v is not None for v in (kernel_regularizer, bias_regularizer,
                                       activity_regularizer, kernel_constraint,
                                       bias_constraint)):
            raise NotImplementedError("Dense: regularizers and constraints are not supported "
                                      "by dragon_core.vm.tensorflow; add the penalty to the "
                                      "loss in a custom train step")
        self.units = int(units)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer

    def build(self, input_shape):
        d = input_shape[-1]
        if d is None:
            raise ValueError(f"{self.name}: the last axis of the input must be known")
        self.kernel = self.add_weight("kernel", [d, self.units],
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight("bias", [self.units], initializer=self.bias_initializer) \
            if self.use_bias else None
        self.built = True

    def call(self, inputs):
        x = inputs
        if x.ndim == 2:
            y = ops.matmul(x, self.kernel)
        else:
            lead = list(x.shape[:-1])
            y = ops.reshape(ops.matmul(ops.reshape(x, [-1, x.shape[-1]]), self.kernel),
                            lead + [self.units])
        if self.bias is not None:
            y = y + self.bias
        return self.activation(y)


def _data_format(value, layer):
    if value in (None, "channels_last"):
        return "NHWC"
    if value == "channels_first":
        return "NCHW"
    raise ValueError(f"{layer}: data_format must be 'channels_last' or 'channels_first', got "
                     f"{value!r}")


def _pair(v, what, layer):
    if isinstance(v, int):
        return (v, v)
    v = tuple(int(x) for x in v)
    if len(v) != 2:
        raise ValueError(f"{layer}: {what} must be an int or a pair, got {v}")
    return v


class Conv2D(Layer):
    """2-D convolution; kernel ``[kh, kw, in / groups, filters]`` (Keras's)."""

    def __init__(self, filters, kernel_size, strides=(1, 1), padding="valid", data_format=None,
                 dilation_rate=(1, 1), groups=1, activation=None, use_bias=True,
                 kernel_initializer="glorot_uniform", bias_initializer="zeros",
                 kernel_regularizer=None, bias_regularizer=None, activity_regularizer=None,
                 kernel_constraint=None, bias_constraint=None, **kwargs):
        super().__init__(**kwargs)
        if any(v is not None for v in (kernel_regularizer, bias_regularizer,
                                       activity_regularizer, kernel_constraint,
                                       bias_constraint)):
            raise NotImplementedError("Conv2D: regularizers and constraints are not supported "
                                      "by dragon_core.vm.tensorflow; add the penalty to the "
                                      "loss in a custom train step")
        self.filters = int(filters)
        self.kernel_size = _pair(kernel_size, "kernel_size", "Conv2D")
        self.strides = _pair(strides, "strides", "Conv2D")
        self.dilation_rate = _pair(dilation_rate, "dilation_rate", "Conv2D")
        if padding.lower() not in ("valid", "same"):
            raise ValueError(f"Conv2D: padding must be 'valid' or 'same', got {padding!r}")
        self.padding = padding.upper()
        self.data_format = _data_format(data_format, "Conv2D")
        self.groups = int(groups)
        self.activation = activations.get(activation)
        self.use_bias = bool(use_bias)
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(f"{self.name}: Conv2D expects 4-D input, got shape {input_shape}")
        c = input_shape[-1] if self.data_format == "NHWC" else input_shape[1]
        if c % self.groups or self.filters % self.groups:
            raise ValueError(f"{self.name}: channels {c} and filters {self.filters} must be "
                             f"multiples of groups={self.groups}")
        kh, kw = self.kernel_size
        self.kernel = self.add_weight("kernel", [kh, kw, c // self.groups, self.filters],
                                      initializer=self.kernel_initializer)
        self.bias = self.add_weight("bias", [self.filters], initializer=self.bias_initializer) \
            if self.use_bias else None
        self.built = True

    def call(self, inputs):
        y = _nn.conv2d(inputs, self.kernel, strides=list(self.strides), padding=self.padding,
                       data_format=self.data_format, dilations=list(self.dilation_rate))
        if self.bias is not None:
            y = _nn.bias_add(y, self.bias, data_format=self.data_format)
        return self.activation(y)


class _Pool2D(Layer):
    _kind = "max"

    def __init__(self, pool_size=(2, 2), strides=None, padding="valid", data_format=None,
                 **kwargs):
        super().__init__(**kwargs)
        self.pool_size = _pair(pool_size, "pool_size", type(self).__name__)
        self.strides = self.pool_size if strides is None else \
            _pair(strides, "strides", type(self).__name__)
        if padding.lower() not in ("valid", "same"):
            raise ValueError(f"{type(self).__name__}: padding must be 'valid' or 'same', got "
                             f"{padding!r}")
        self.padding = padding.upper()
        self.data_format = _data_format(data_format, type(self).__name__)

    def call(self, inputs):
        fn = _nn.max_pool2d if self._kind == "max" else _nn.avg_pool2d
        return fn(inputs, list(self.pool_size), list(self.strides), self.padding,
                  data_format=self.data_format)


class MaxPool2D(_Pool2D):
    """Max pooling over ``pool_size`` windows (stride: the pool size)."""
    _kind = "max"


class AveragePooling2D(_Pool2D):
    """Average pooling over the valid elements of each window."""
    _kind = "avg"


MaxPooling2D = MaxPool2D
AvgPool2D = AveragePooling2D


class GlobalAveragePooling2D(Layer):
    def __init__(self, data_format=None, keepdims=False, **kwargs):
        super().__init__(**kwargs)
        self.data_format = _data_format(data_format, "GlobalAveragePooling2D")
        self.keepdims = bool(keepdims)

    def call(self, inputs):
        axes = [1, 2] if self.data_format == "NHWC" else [2, 3]
        return ops.mean(inputs, axis=axes, keepdims=self.keepdims)


class GlobalMaxPooling2D(GlobalAveragePooling2D):
    def call(self, inputs):
        axes = [1, 2] if self.data_format == "NHWC" else [2, 3]
        return ops.max(inputs, axis=axes, keepdims=self.keepdims)


class Flatten(Layer):
    """``[N, ...] -> [N, prod(...)]`` (in the input's own axis order)."""

    def __init__(self, data_format=None, **kwargs):
        super().__init__(**kwargs)
        self.data_format = _data_format(data_format, "Flatten")

    def call(self, inputs):
        x = inputs
        if self.data_format == "NCHW" and x.ndim == 4:
            x = ops.transpose(x, [0, 2, 3, 1])
        return ops.reshape(x, [x.shape[0], -1]) if x.ndim != 1 else ops.reshape(x, [-1, 1])


class Reshape(Layer):
    def __init__(self, target_shape, **kwargs):
        super().__init__(**kwargs)
        self.target_shape = tuple(int(s) for s in target_shape)

    def call(self, inputs):
        return ops.reshape(inputs, [inputs.shape[0]] + list(self.target_shape))


class Dropout(Layer):
    """Zero inputs with probability ``rate`` while training (scaled by
    ``1/(1-rate)``); the identity at inference."""

    def __init__(self, rate, noise_shape=None, seed=None, **kwargs):
        super().__init__(**kwargs)
        if noise_shape is not None:
            raise NotImplementedError("Dropout(noise_shape=...) is not supported by "
                                      "dragon_core.vm.tensorflow")
        if not 0.0 <= float(rate) < 1.0:
            raise ValueError(f"Dropout: rate must be in [0, 1), got {rate}")
        self.rate = float(rate)

    def call(self, inputs, training=False):
        if not training or self.rate == 0.0:
            return inputs
        return ops.dropout(inputs, p=self.rate)[0]


class Activation(Layer):
    def __init__(self, activation, **kwargs):
        super().__init__(**kwargs)
        self.activation = activations.get(activation)

    def call(self, inputs):
        return self.activation(inputs)


class ReLU(Layer):
    def call(self, inputs):
        return ops.relu(inputs)


class Softmax(Layer):
    def __init__(self, axis=-1, **kwargs):
        super().__init__(**kwargs)
        self.axis = axis

    def call(self, inputs):
        return ops.softmax(inputs, axis=self.axis)


def _norm_axes(axis, ndim, layer):
    axes = [axis] if isinstance(axis, int) else list(axis)
    out = sorted(a % ndim for a in axes)
    if not out:
        raise ValueError(f"{layer}: axis must not be empty")
    return out


class BatchNormalization(Layer):
    """Batch normalisation over every axis but ``axis`` (the channels, last
    by default). Training uses the batch's mean and (biased) variance and
    moves ``moving_* = moving_* * momentum + batch * (1 - momentum)``;
    inference uses the moving statistics. Keras's defaults: momentum 0.99,
    epsilon 1e-3."""

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 **kwargs):
        super().__init__(**kwargs)
        self.axis = axis
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._inits = (gamma_initializer, beta_initializer, moving_mean_initializer,
                       moving_variance_initializer)

    def build(self, input_shape):
        ndim = len(input_shape)
        self._axes = _norm_axes(self.axis, ndim, self.name)
        shape = [input_shape[a] for a in self._axes]
        g, b, mm, mv = self._inits
        self.gamma = self.add_weight("gamma", shape, initializer=g) if self.scale else None
        self.beta = self.add_weight("beta", shape, initializer=b) if self.center else None
        self.moving_mean = self.add_weight("moving_mean", shape, initializer=mm,
                                           trainable=False)
        self.moving_variance = self.add_weight("moving_variance", shape, initializer=mv,
                                               trainable=False)
        self.built = True

    def _bshape(self, x):
        return [x.shape[i] if i in self._axes else 1 for i in range(x.ndim)]

    def call(self, inputs, training=False):
        x = inputs
        red = [i for i in range(x.ndim) if i not in self._axes]
        bs = self._bshape(x)
        if training:
            mean = ops.mean(x, axis=red, keepdims=True)
            var = ops.mean(ops.square(x - mean), axis=red, keepdims=True)
            with dg.no_grad():
                m = self.momentum
                self.moving_mean.assign(self.moving_mean * m +
                                        ops.reshape(mean.detach(), list(self.moving_mean.shape))
                                        * (1.0 - m))
                self.moving_variance.assign(self.moving_variance * m +
                                            ops.reshape(var.detach(),
                                                        list(self.moving_variance.shape))
                                            * (1.0 - m))
        else:
            mean = ops.reshape(self.moving_mean, bs)
            var = ops.reshape(self.moving_variance, bs)
        inv = ops.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            inv = inv * ops.reshape(self.gamma, bs)
        y = (x - mean) * inv
        if self.beta is not None:
            y = y + ops.reshape(self.beta, bs)
        return y


class LayerNormalization(Layer):
    """Normalise each example over ``axis`` (the last by default), then
    scale and shift; Keras's epsilon 1e-3."""

    def __init__(self, axis=-1, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones", **kwargs):
        super().__init__(**kwargs)
        self.axis = axis
        self.epsilon = float(epsilon)
        self.center, self.scale = bool(center), bool(scale)
        self._inits = (gamma_initializer, beta_initializer)

    def build(self, input_shape):
        ndim = len(input_shape)
        self._axes = _norm_axes(self.axis, ndim, self.name)
        shape = [input_shape[a] for a in self._axes]
        g, b = self._inits
        self.gamma = self.add_weight("gamma", shape, initializer=g) if self.scale else None
        self.beta = self.add_weight("beta", shape, initializer=b) if self.center else None
        self.built = True

    def call(self, inputs):
        x = inputs
        axes = self._axes
        trailing = axes == list(range(x.ndim - len(axes), x.ndim))
        if trailing and self.gamma is not None and self.beta is not None:
            return ops.layer_norm(x, self.gamma, self.beta, axis=x.ndim - len(axes),
                                  eps=self.epsilon)
        bs = [x.shape[i] if i in axes else 1 for i in range(x.ndim)]
        mean = ops.mean(x, axis=axes, keepdims=True)
        var = ops.mean(ops.square(x - mean), axis=axes, keepdims=True)
        y = (x - mean) * ops.rsqrt(var + self.epsilon)
        if self.gamma is not None:
            y = y * ops.reshape(self.gamma, bs)
        if self.beta is not None:
            y = y + ops.reshape(self.beta, bs)
        return y


class Embedding(Layer):
    """Rows of ``embeddings`` (``[input_dim, output_dim]``) picked by
    integer inputs; Keras's uniform(-0.05, 0.05) initialiser."""

    def __init__(self, input_dim, output_dim, embeddings_initializer="uniform",
                 embeddings_regularizer=None, embeddings_constraint=None, mask_zero=False,
                 **kwargs):
        super().__init__(**kwargs)
        if mask_zero:
            raise NotImplementedError("Embedding(mask_zero=True) is not supported by "
                                      "dragon_core.vm.tensorflow (no masking); compute a mask "
                                      "with tf.not_equal(ids, 0) and apply it yourself")
        if embeddings_regularizer is not None or embeddings_constraint is not None:
            raise NotImplementedError("Embedding: regularizers and constraints are not "
                                      "supported by dragon_core.vm.tensorflow")
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self._init = embeddings_initializer

    def build(self, input_shape):
        self.embeddings = self.add_weight("embeddings", [self.input_dim, self.output_dim],
                                          initializer=self._init)
        self.built = True

    def call(self, inputs):
        ids = inputs
        if ids.dtype.is_floating_point:
            ids = ops.cast(ids, "int64")
        elif ids.dtype.name != "int64":
            ids = ops.cast(ids, "int64")
        return ops.embedding(self.embeddings, ids)


__getattr__ = module_getattr("tf.keras.layers", {
    "LSTM": "dragon_core.vm.torch.nn.LSTM, or a Dense-based cell in a Python loop",
    "GRU": "a Dense-based cell in a Python loop",
    "SimpleRNN": "a Dense-based cell in a Python loop",
    "Conv1D": "Conv2D on inputs with a height of 1",
    "Conv3D": "no 3-D convolution exists in dragon_core yet",
    "Conv2DTranspose": "dragon_core.nn.ConvTranspose2d (NCHW)",
    "DepthwiseConv2D": "Conv2D(groups=channels)",
    "SeparableConv2D": "Conv2D(groups=channels) followed by a 1x1 Conv2D",
    "MultiHeadAttention": "Dense layers and tf.matmul/tf.nn.softmax",
    "Lambda": "a Layer subclass whose call() does the computation",
    "Concatenate": "tf.concat inside a Model subclass's call()",
    "Add": "+ inside a Model subclass's call()",
})
