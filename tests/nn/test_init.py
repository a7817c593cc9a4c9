"""nn.init: distributions, bounds, gains, errors."""

import math

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import nn
from dragon_core.nn import init


def _t(*shape):
    return dg.ops.zeros(list(shape))


def test_gains():
    assert init.calculate_gain("relu") == pytest.approx(math.sqrt(2))
    assert init.calculate_gain("tanh") == pytest.approx(5 / 3)
    assert init.calculate_gain("leaky_relu", 0.2) == pytest.approx(math.sqrt(2 / 1.04))
    with pytest.raises(ValueError, match="unsupported nonlinearity"):
        init.calculate_gain("nope")


def test_uniform_and_normal_statistics():
    dg.manual_seed(3)
    u = init.uniform_(_t(200, 100), -2.0, 3.0).numpy()
    assert u.min() >= -2.0 and u.max() < 3.0
    assert u.mean() == pytest.approx(0.5, abs=0.05)
    n = init.normal_(_t(200, 100), 1.0, 0.5).numpy()
    assert n.mean() == pytest.approx(1.0, abs=0.02) and n.std() == pytest.approx(0.5, abs=0.02)
    with pytest.raises(ValueError):
        init.uniform_(_t(2), 1.0, 0.0)
    with pytest.raises(TypeError, match="floating-point"):
        init.zeros_(dg.ops.zeros([2], dtype="int32"))


def test_xavier_and_kaiming():
    w = _t(300, 200)
    a = math.sqrt(6 / 500)
    x = init.xavier_uniform_(w).numpy()
    assert np.abs(x).max() <= a and np.abs(x).max() > 0.95 * a
    x = init.xavier_normal_(_t(300, 200)).numpy()
    assert x.std() == pytest.approx(math.sqrt(2 / 500), rel=0.05)
    conv = _t(64, 16, 3, 3)                       # fan_in = 144, fan_out = 576
    k = init.kaiming_normal_(conv, nonlinearity="relu").numpy()
    assert k.std() == pytest.approx(math.sqrt(2 / 144), rel=0.05)
    k = init.kaiming_uniform_(_t(64, 16, 3, 3), mode="fan_out", nonlinearity="relu").numpy()
    bound = math.sqrt(3) * math.sqrt(2 / 576)
    assert np.abs(k).max() <= bound and np.abs(k).max() > 0.95 * bound
    with pytest.raises(ValueError, match="rank >= 2"):
        init.xavier_uniform_(_t(5))
    with pytest.raises(ValueError, match="mode"):
        init.kaiming_normal_(_t(3, 3), mode="fan")


def test_constants_and_eye():
    assert np.all(init.ones_(_t(2, 3)).numpy() == 1)
    assert np.all(init.constant_(_t(4), 0.25).numpy() == 0.25)
    np.testing.assert_array_equal(init.eye_(_t(2, 3)).numpy(), np.eye(2, 3))


def test_seeded_init_is_reproducible():
    dg.manual_seed(11)
    a = nn.Linear(5, 5).weight.numpy().copy()
    dg.manual_seed(11)
    b = nn.Linear(5, 5).weight.numpy()
    np.testing.assert_array_equal(a, b)
