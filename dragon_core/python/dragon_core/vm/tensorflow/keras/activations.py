"""``tf.keras.activations``: activation functions by name."""

from __future__ import annotations

from .. import nn as _nn
from .._unsupported import module_getattr


def linear(x):
    return x


relu = _nn.relu
sigmoid = _nn.sigmoid
tanh = _nn.tanh
elu = _nn.elu
selu = _nn.selu
softplus = _nn.softplus
softsign = _nn.softsign
swish = silu = _nn.silu


def gelu(x, approximate=False):
    return _nn.gelu(x, approximate=approximate)


def leaky_relu(x, negative_slope=0.2):
    return _nn.leaky_relu(x, alpha=negative_slope)


def softmax(x, axis=-1):
    return _nn.softmax(x, axis=axis)


def log_softmax(x, axis=-1):
    return _nn.log_softmax(x, axis=axis)


relu6 = _nn.relu6

_BY_NAME = {"linear": linear, "relu": relu, "sigmoid": sigmoid, "tanh": tanh, "elu": elu,
            "selu": selu, "softplus": softplus, "softsign": softsign, "swish": swish,
            "silu": silu, "gelu": gelu, "leaky_relu": leaky_relu, "softmax": softmax,
            "log_softmax": log_softmax, "relu6": relu6}


def get(identifier):
    """An activation from a name, a callable or None (linear)."""
    if identifier is None:
        return linear
    if callable(identifier):
        return identifier
    if isinstance(identifier, str) and identifier in _BY_NAME:
        return _BY_NAME[identifier]
    raise ValueError(f"unknown activation {identifier!r}; known: {sorted(_BY_NAME)}")


__getattr__ = module_getattr("tf.keras.activations")
