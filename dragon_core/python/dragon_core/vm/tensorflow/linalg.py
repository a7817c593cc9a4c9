"""``tf.linalg``: the matrix products the core provides."""

from __future__ import annotations

from ._ops import eye, matmul, tensordot  # noqa: F401
from ._unsupported import module_getattr

__getattr__ = module_getattr("tf.linalg", {
    "inv": "numpy.linalg.inv on x.numpy() (no inverse op in dragon_core yet)",
    "det": "numpy.linalg.det on x.numpy()",
    "svd": "numpy.linalg.svd on x.numpy()",
})
