"""``tf.keras.initializers``: Keras's default initialisers, drawn from the
generator ``tf.random.set_seed`` (or ``keras.utils.set_random_seed``) seeds."""

from __future__ import annotations

import math

import numpy as np

import dragon_core as dg

from .. import random as _random
from .._core import as_dtype, float32
from .._unsupported import module_getattr


def _fans(shape):
    shape = [int(s) for s in shape]
    if len(shape) == 0:
        return 1, 1
    if len(shape) == 1:
        return shape[0], shape[0]
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = int(np.prod(shape[:-2]))   # HWIO kernels
    return shape[-2] * receptive, shape[-1] * receptive


class Initializer:
    """Base class: ``init(shape, dtype)`` returns a tensor."""

    def __call__(self, shape, dtype=None):
        dtype = as_dtype(dtype or float32)
        vals = np.asarray(self._values([int(s) for s in shape]), dtype=np.float64)
        return dg.tensor(vals.astype(np.float32 if dtype.name == "bfloat16" else dtype.name))

    def _values(self, shape):
        raise NotImplementedError

    def get_config(self) -> dict:
        return {}


class Zeros(Initializer):
    def _values(self, shape):
        return np.zeros(shape)


class Ones(Initializer):
    def _values(self, shape):
        return np.ones(shape)


class Constant(Initializer):
    def __init__(self, value=0.0):
        self.value = value

    def _values(self, shape):
        return np.broadcast_to(np.asarray(self.value, dtype=np.float64), shape).copy()


class RandomNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def _values(self, shape):
        return _rng(self.seed).normal(self.mean, self.stddev, size=shape)


class RandomUniform(Initializer):
    def __init__(self, minval=-0.05, maxval=0.05, seed=None):
        self.minval, self.maxval, self.seed = minval, maxval, seed

    def _values(self, shape):
        return _rng(self.seed).uniform(self.minval, self.maxval, size=shape)


class TruncatedNormal(Initializer):
    def __init__(self, mean=0.0, stddev=0.05, seed=None):
        self.mean, self.stddev, self.seed = mean, stddev, seed

    def _values(self, shape):
        return _truncated(_rng(self.seed), shape) * self.stddev + self.mean


class VarianceScaling(Initializer):
    """Keras's VarianceScaling: ``scale / fan`` variance, normal (truncated)
    or uniform."""

    def __init__(self, scale=1.0, mode="fan_in", distribution="truncated_normal", seed=None):
        if mode not in ("fan_in", "fan_out", "fan_avg"):
            raise ValueError(f"VarianceScaling: mode must be fan_in, fan_out or fan_avg, "
                             f"got {mode!r}")
        self.scale, self.mode, self.distribution, self.seed = scale, mode, distribution, seed

    def _values(self, shape):
        fan_in, fan_out = _fans(shape)
        fan = {"fan_in": fan_in, "fan_out": fan_out, "fan_avg": (fan_in + fan_out) / 2}[self.mode]
        var = self.scale / max(1.0, fan)
        rng = _rng(self.seed)
        if self.distribution == "uniform":
            limit = math.sqrt(3.0 * var)
            return rng.uniform(-limit, limit, size=shape)
        if self.distribution == "untruncated_normal":
            return rng.normal(0.0, math.sqrt(var), size=shape)
        # truncated normal at 2 sd, rescaled to the wanted variance
        return _truncated(rng, shape) * (math.sqrt(var) / 0.87962566103423978)


class GlorotUniform(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "uniform", seed)


class GlorotNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_avg", "truncated_normal", seed)


class HeNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "truncated_normal", seed)


class HeUniform(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(2.0, "fan_in", "uniform", seed)


class LecunNormal(VarianceScaling):
    def __init__(self, seed=None):
        super().__init__(1.0, "fan_in", "truncated_normal", seed)


def _rng(seed):
    return _random.generator() if seed is None else np.random.default_rng(int(seed))


def _truncated(rng, shape):
    out = rng.standard_normal(shape)
    bad = np.abs(out) > 2
    while bad.any():
        out[bad] = rng.standard_normal(int(bad.sum()))
        bad = np.abs(out) > 2
    return out


_BY_NAME = {
    "zeros": Zeros, "ones": Ones, "random_normal": RandomNormal,
    "random_uniform": RandomUniform, "uniform": RandomUniform,
    "truncated_normal": TruncatedNormal, "glorot_uniform": GlorotUniform,
    "glorot_normal": GlorotNormal, "he_normal": HeNormal, "he_uniform": HeUniform,
    "lecun_normal": LecunNormal,
}


def get(identifier) -> Initializer:
    """An initialiser from a name, an instance or a callable."""
    if identifier is None:
        return Zeros()
    if isinstance(identifier, Initializer) or callable(identifier):
        return identifier
    if isinstance(identifier, str):
        key = identifier.lower()
        if key in _BY_NAME:
            return _BY_NAME[key]()
        raise ValueError(f"unknown initializer {identifier!r}; known: {sorted(_BY_NAME)}")
    raise TypeError(f"initializer must be a name or an Initializer, got {identifier!r}")


__getattr__ = module_getattr("tf.keras.initializers", {
    "Orthogonal": "GlorotUniform (no QR op in dragon_core; or np.linalg.qr and Constant)",
    "Identity": "Constant(np.eye(n))",
})
