"""MseLossAndGrad (dragon_core/src/ops/loss.cc, the op of the loss_fusion
graph pass): the loss and dinput against float64 references on every edge
shape (0-d, empty, one and several summation blocks, strided inputs), dinput
against central differences of the loss, bit for bit against the ops it
replaces (MseLoss; Sub then Mul) with one and two threads, and bad input."""

from __future__ import annotations


import numpy as np
import pytest
from dragon_sdk.testing import op_case

import dragon_core as dg
from dragon_core.errors import InvalidArgumentError

from ._common import hashes_per_thread_count

# (4099,) and (3, 4096 + 7): more than one of the loss's 4096-element blocks,
# with a tail; (180, 190): many blocks, split between threads.
SHAPES = [(), (0,), (7,), (3, 0), (4, 5), (2, 3, 4), (4099,), (3, 4103), (180, 190)]


def _inputs(rng, dt, shape):
    x = rng.uniform(-3.0, 3.0, shape).astype(dt)
    t = rng.uniform(-3.0, 3.0, shape).astype(dt)
    scale = np.asarray(rng.uniform(0.1, 2.0), dtype=dt)
    return [x, t, scale]


def _reference(x, t, scale, reduction="mean"):
    sq = (x - t) ** 2
    loss = np.sum(sq) if reduction == "sum" else np.float64(np.sum(sq)) / np.float64(sq.size)
    return [np.asarray(loss), (x - t) * scale]


@op_case("MseLossAndGrad", inputs=_inputs, reference=_reference,
         attrs=[{}, {"reduction": "mean"}, {"reduction": "sum"}], shapes=SHAPES)
def test_mse_loss_and_grad(case):
    case.check_forward()


@pytest.mark.parametrize("reduction", ["mean", "sum"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_dinput_is_the_gradient_of_the_loss(reduction, dtype):
    """With scale = 2 (/ n for the mean), dinput is d loss / d input: checked
    against central differences of the float64 loss."""
    rng = np.random.default_rng(4)
    x = rng.uniform(-2.0, 2.0, (3, 5)).astype(dtype)
    t = rng.uniform(-2.0, 2.0, (3, 5)).astype(dtype)
    scale = np.asarray(2.0 / x.size if reduction == "mean" else 2.0, dtype=dtype)
    _, dx = dg.ops.mse_loss_and_grad(dg.tensor(x), dg.tensor(t), dg.tensor(scale),
                                     reduction=reduction)

    def loss(v):
        sq = (v - t.astype(np.float64)) ** 2
        return sq.sum() if reduction == "sum" else sq.mean()

    x64, eps = x.astype(np.float64), 1e-6
    fd = np.empty_like(x64)
    for i in np.ndindex(x.shape):
        up, down = x64.copy(), x64.copy()
        up[i] += eps
        down[i] -= eps
        fd[i] = (loss(up) - loss(down)) / (2 * eps)
    tol = 1e-5 if dtype == "float32" else 1e-8
    np.testing.assert_allclose(dx.numpy(), fd, rtol=tol, atol=tol)


@pytest.mark.parametrize("shape", [(4099,), (1024, 256), (3, 0), ()])
@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_same_bits_as_the_ops_it_replaces(shape, reduction):
    rng = np.random.default_rng(9)
    x = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    t = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    s = dg.tensor(np.float32(7.62939453125e-06))
    loss, dx = dg.ops.mse_loss_and_grad(x, t, s, reduction=reduction)
    ref_loss = dg.ops.mse_loss(x, t, reduction=reduction)
    ref_dx = dg.ops.mul(dg.ops.sub(x, t), s)
    np.testing.assert_array_equal(loss.numpy(), ref_loss.numpy())
    np.testing.assert_array_equal(dx.numpy(), ref_dx.numpy())
    assert loss.shape == () and dx.shape == x.shape


def test_empty_mean_is_nan_like_mse_loss():
    x = dg.tensor(np.zeros((0, 3), np.float32))
    loss, dx = dg.ops.mse_loss_and_grad(x, x, dg.tensor(np.float32(1.0)))
    assert np.isnan(loss.numpy()) and dx.shape == (0, 3)
    loss, _ = dg.ops.mse_loss_and_grad(x, x, dg.tensor(np.float32(1.0)), reduction="sum")
    assert float(loss.numpy()) == 0.0


_THREADS_SCRIPT = """
import hashlib, numpy as np, dragon_core as dg
rng = np.random.default_rng(1)
h = hashlib.sha256()
for shape in [(4099,), (1024, 256), (180, 190)]:
    x = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    t = dg.tensor(rng.standard_normal(shape).astype(np.float32))
    loss, dx = dg.ops.mse_loss_and_grad(x, t, dg.tensor(np.float32(0.25)))
    h.update(loss.numpy().tobytes())
    h.update(dx.numpy().tobytes())
print(h.hexdigest())
"""


def test_same_bits_with_one_two_and_three_threads():
    hashes = hashes_per_thread_count(_THREADS_SCRIPT, timeout=300)
    assert len(set(hashes.values())) == 1 and len(hashes[1]) == 64, hashes


_X = np.ones((2, 3), np.float32)


@pytest.mark.parametrize("call, words", [
    (lambda: dg.ops.mse_loss_and_grad(dg.tensor(_X), dg.tensor(_X), dg.tensor(np.float32(1)),
                                      reduction="none"),
     ["MseLossAndGrad", "reduction", "none"]),
    (lambda: dg.ops.mse_loss_and_grad(dg.tensor(_X), dg.tensor(_X),
                                      dg.tensor(np.ones(1, np.float32))),
     ["MseLossAndGrad", "scale", "0-d", "[1]"]),
    (lambda: dg.ops.mse_loss_and_grad(dg.tensor(_X), dg.tensor(_X), dg.tensor(np.float64(1))),
     ["MseLossAndGrad", "scale", "float32", "float64"]),
    (lambda: dg.ops.mse_loss_and_grad(dg.tensor(_X), dg.tensor(np.ones((3, 2), np.float32)),
                                      dg.tensor(np.float32(1))),
     ["MseLossAndGrad", "[2, 3]", "[3, 2]"]),
    (lambda: dg.ops.mse_loss_and_grad(dg.tensor(_X), dg.tensor(_X), dg.tensor(np.float32(1)),
                                      reduction="avg"),
     ["MseLossAndGrad", "reduction", "avg"]),
])
def test_bad_input_names_the_op_and_the_problem(call, words):
    with pytest.raises((InvalidArgumentError, TypeError)) as e:
        call()
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_not_differentiable():
    """A fused backward op: its outputs never require grad, so a backward
    through it raises instead of computing a wrong gradient."""
    x = dg.tensor(np.ones((2, 3), np.float32))
    x.requires_grad = True
    loss, dx = dg.ops.mse_loss_and_grad(x, dg.tensor(np.zeros((2, 3), np.float32)),
                                        dg.tensor(np.float32(1)))
    assert not loss.requires_grad and not dx.requires_grad
    with pytest.raises(InvalidArgumentError, match="does not require grad"):
        loss.backward()
