"""``tf.random``: normal, uniform and seeding."""

from __future__ import annotations

import numpy as np

import dragon_core as dg

from ._core import as_dtype, cast, float32
from ._unsupported import module_getattr

# Initialisers draw from this NumPy generator; ops draw from the core's.
_state = {"rng": np.random.default_rng()}


def set_seed(seed: int) -> None:
    """Seed the core's generator (random ops, dropout) and the one Keras
    initialisers draw from."""
    dg.manual_seed(int(seed))
    _state["rng"] = np.random.default_rng(int(seed))


def generator() -> np.random.Generator:
    """The NumPy generator the initialisers use."""
    return _state["rng"]


def normal(shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, name=None):
    dtype = as_dtype(dtype)
    t = dg.ops.random_normal([int(s) for s in shape], mean=float(mean), std=float(stddev),
                             dtype=dtype, seed=-1 if seed is None else int(seed))
    return t


def uniform(shape, minval=0, maxval=None, dtype=float32, seed=None, name=None):
    dtype = as_dtype(dtype)
    if not dtype.is_floating_point:
        if maxval is None:
            raise ValueError("random.uniform: integer dtypes need maxval")
        vals = generator().integers(int(minval), int(maxval), size=[int(s) for s in shape])
        return cast(dg.tensor(vals), dtype)
    hi = 1.0 if maxval is None else float(maxval)
    return dg.ops.random_uniform([int(s) for s in shape], low=float(minval), high=hi,
                                 dtype=dtype, seed=-1 if seed is None else int(seed))


def truncated_normal(shape, mean=0.0, stddev=1.0, dtype=float32, seed=None, name=None):
    """Normal values redrawn until within two standard deviations."""
    rng = generator() if seed is None else np.random.default_rng(int(seed))
    n = int(np.prod([int(s) for s in shape]))
    out = rng.standard_normal(n)
    bad = np.abs(out) > 2
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2
    vals = (out * stddev + mean).reshape([int(s) for s in shape])
    return cast(dg.tensor(vals.astype(np.float64)), dtype)


def shuffle(value, seed=None, name=None):
    from ._ops import gather, _t
    x = _t(value)
    perm = generator().permutation(x.shape[0]) if x.ndim else np.zeros(0, np.int64)
    return gather(x, dg.tensor(perm.astype(np.int64)))


__getattr__ = module_getattr("tf.random")
