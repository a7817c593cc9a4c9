"""In-place writes inside ``@dragon_core.function``: the misuse that the
version counter catches eagerly (a value read by an op, then assigned,
then differentiated) raises at trace time; the correct order compiles and
runs each step as eager code does; vm.torch in-place ops on intermediates
and captured state trace to the eager result.
"""

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.vm.torch as vt
from dragon_core import ops

ERR = "one of the variables needed for gradient computation has been modified by an " \
      "inplace operation"


def _t(values):
    return dg.tensor(np.asarray(values, dtype=np.float32))


def test_assign_between_forward_and_gradient_raises_at_trace_time():
    w = _t([1.0, 2.0]).requires_grad_()

    @dg.function
    def step(x):
        with dg.GradientTape() as tape:
            y = ops.sum(w * x)
        w.assign(w * 2.0)
        return tape.gradient(y, w)

    with pytest.raises(RuntimeError, match=r"input 0 of Mul .*version 1; expected version 0"):
        step(_t([3.0, 4.0]))
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])   # the failed trace left w alone


def test_assign_of_a_tensor_only_add_read_traces_and_runs():
    w = _t([1.0, 2.0]).requires_grad_()
    c = _t([0.5, 0.5])

    @dg.function
    def step(x):
        with dg.GradientTape() as tape:
            y = ops.sum((w + c) * x)
        c.assign(c + 1.0)          # Add reads no value of c
        return tape.gradient(y, w)

    for k in range(2):
        np.testing.assert_allclose(step(_t([3.0, 4.0])).numpy(), [3.0, 4.0])
        np.testing.assert_allclose(c.numpy(), [1.5 + k, 1.5 + k])


def test_compiled_sgd_step_matches_eager_over_steps():
    x = _t([[1.0, 2.0], [-1.0, 0.5]])
    w_eager = _t([0.5, -1.0]).requires_grad_()
    w_graph = _t([0.5, -1.0]).requires_grad_()

    def body(w):
        with dg.GradientTape() as tape:
            loss = ops.sum(ops.matmul(x, w) ** 2)
        g = tape.gradient(loss, w)
        w.assign(w - g * 0.05)
        return loss

    compiled = dg.function(lambda: body(w_graph))
    for _ in range(3):
        le = body(w_eager)
        lg = compiled()
        np.testing.assert_allclose(lg.numpy(), le.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w_graph.numpy(), w_eager.numpy(), rtol=1e-6)
    assert w_eager._version == 3


def test_vm_torch_inplace_on_intermediates_traces_to_eager_values():
    def f(x, w):
        y = x * w
        y[0] = 5.0
        y.relu_()
        y.mul_(2.0)
        return y.sum()

    x = vt.tensor([[1.0, -2.0, 3.0], [-1.0, 0.5, 2.0]])
    w = vt.tensor([[2.0, 1.0, -1.0], [3.0, 2.0, 1.0]])
    ref = np.asarray(x.numpy() * w.numpy())
    ref[0] = 5.0
    ref = 2.0 * np.maximum(ref, 0.0)
    cf = vt.compile(f)
    for _ in range(2):
        np.testing.assert_allclose(float(cf(x, w)), ref.sum(), rtol=1e-6)


def test_vm_torch_inplace_on_view_raises_at_trace_time():
    def f(x):
        y = x * 2.0
        y.view(-1)[:2].zero_()
        return y

    with pytest.raises(RuntimeError, match=r"in-place write to a view"):
        vt.compile(f)(vt.ones(2, 2))


def test_vm_torch_inplace_on_captured_state_persists_across_runs():
    buf = vt.zeros(2)

    def f(x):
        buf.mul_(0.5)
        buf.add_(x)
        return buf.sum()

    cf = vt.compile(f)
    x = vt.tensor([2.0, 4.0])
    expect = np.zeros(2)
    for _ in range(3):
        expect = expect * 0.5 + np.array([2.0, 4.0])
        np.testing.assert_allclose(float(cf(x)), expect.sum(), rtol=1e-6)
    np.testing.assert_allclose(buf.numpy(), expect, rtol=1e-6)
