"""``tf.keras``: layers, models, optimizers, losses, metrics over dragon_core."""

from __future__ import annotations

from . import (activations, callbacks, initializers, layers, losses, metrics,  # noqa: F401
               optimizers, utils)
from . import models  # noqa: F401
from .layers import Input, Layer  # noqa: F401
from .models import Model, Sequential  # noqa: F401
from .._unsupported import module_getattr

__getattr__ = module_getattr("tf.keras", {
    "backend": "tf ops (tf.reduce_sum, tf.nn...) directly",
    "applications": "building the network with tf.keras.layers",
    "datasets": "sklearn.datasets or NumPy arrays",
    "preprocessing": "NumPy preprocessing before fit",
    "mixed_precision": "float32 models (dtype policies are not supported)",
    "regularizers": "adding the penalty to the loss in a custom train step",
})
