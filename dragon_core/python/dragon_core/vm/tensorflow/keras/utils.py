"""``tf.keras.utils``: one-hot labels and seeding."""

from __future__ import annotations

import numpy as np

from .. import random as _random
from .._unsupported import module_getattr


def to_categorical(y, num_classes=None, dtype="float32"):
    """One-hot rows (NumPy) for integer class ids."""
    y = np.asarray(y, dtype=np.int64)
    if y.ndim and y.shape[-1] == 1 and y.ndim > 1:
        y = y[..., 0]
    n = int(y.max()) + 1 if num_classes is None else int(num_classes)
    out = np.zeros(y.shape + (n,), dtype=dtype)
    np.put_along_axis(out, y[..., None], 1, axis=-1)
    return out


def set_random_seed(seed: int) -> None:
    """Seed Python's, NumPy's, the initialisers' and the core's generators."""
    import random
    random.seed(int(seed))
    np.random.seed(int(seed))
    _random.set_seed(int(seed))


__getattr__ = module_getattr("tf.keras.utils", {
    "plot_model": "model.summary()",
    "Sequence": "NumPy arrays passed to fit, or dragon_core.data",
})
