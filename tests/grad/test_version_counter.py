"""The version counter: a tensor written in place (assign, ``.data =``, a
write through memory it shares) after an op read it must never give a
silently wrong gradient. Backward raises, as PyTorch's version counter
does, naming the op, the tensor and both versions; inputs whose value a
rule does not read (Add, BatchNorm's running statistics in training) may
be written.
"""

import numpy as np
import pytest

import dragon_core as dg
from dragon_core import ops

ERR = "one of the variables needed for gradient computation has been modified by an " \
      "inplace operation"


def _t(values, dtype="float32"):
    return dg.tensor(np.asarray(values, dtype=dtype))


# ---------------------------------------------------------------- counter
def test_version_starts_at_zero_and_assign_bumps_it():
    w = _t([1.0, 2.0])
    assert w._version == 0
    w.assign(_t([3.0, 4.0]))
    assert w._version == 1
    w.assign(_t([5.0, 6.0]))
    assert w._version == 2
    w.data = _t([1.0, 2.0, 3.0])          # any shape: a rebind, counted
    assert w._version == 3
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0, 3.0])


def test_assign_does_not_bump_the_value_it_takes():
    w, v = _t([1.0, 2.0]), _t([3.0, 4.0])
    w.assign(v)
    assert v._version == 0 and w._version == 1


def test_views_share_the_counter_of_their_storage():
    x = _t(np.arange(6.0).reshape(2, 3))
    view = dg.from_numpy(x.numpy()[1:, ::2])      # a NumPy view of x's memory
    assert view._same_storage(x)
    view._bump_version()
    assert x._version == 1 and view._version == 1
    x._bump_version()
    assert view._version == 2


def test_rebind_keeps_the_version_increasing_over_other_storage():
    w = _t([1.0])
    for _ in range(3):
        w._bump_version()
    fresh = _t([2.0])
    w.assign(fresh)                       # the new storage is at version 0
    assert w._version == 4 and fresh._version == 0
    fresh._bump_version()                 # a write to that storage is seen through w
    assert w._version == 5


# ------------------------------------------------------------- backward()
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backward_raises_when_a_saved_input_was_assigned(dtype):
    x = _t([1.0, -2.0, 3.0], dtype).requires_grad_()
    c = _t([2.0, 3.0, 4.0], dtype)
    loss = ops.sum(x * c)
    c.assign(_t([0.0, 0.0, 0.0], dtype))
    with pytest.raises(RuntimeError) as e:
        loss.backward()
    msg = str(e.value)
    assert ERR in msg
    assert f"input 1 of Mul (a {dtype} tensor of shape [3] on cpu:0)" in msg
    assert "is at version 1; expected version 0" in msg
    assert x.grad is None


def test_backward_after_the_write_of_an_unread_input_is_right():
    x = _t([1.0, -2.0, 3.0]).requires_grad_()
    c = _t([2.0, 3.0, 4.0])
    y = x + c                                 # Add reads no value
    loss = ops.sum(y * y)
    c.assign(_t([9.0, 9.0, 9.0]))
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (np.array([1.0, -2.0, 3.0])
                                                    + np.array([2.0, 3.0, 4.0])))


def test_0d_and_empty_saved_inputs_are_checked():
    x = dg.tensor(np.float32(2.0)).requires_grad_()
    c = dg.tensor(np.float32(3.0))
    loss = x * c
    c.assign(dg.tensor(np.float32(5.0)))
    with pytest.raises(RuntimeError, match=r"input 1 of Mul \(a float32 tensor of shape \[\]"):
        loss.backward()
    e = _t(np.zeros((0, 3))).requires_grad_()
    f = _t(np.zeros((0, 3)))
    loss = ops.sum(e * f)
    f._bump_version()
    with pytest.raises(RuntimeError, match=r"shape \[0, 3\]"):
        loss.backward()


def test_broadcast_saved_input_written_through_numpy_view_is_caught():
    x = _t(np.ones((2, 3))).requires_grad_()
    row = _t([1.0, 2.0, 3.0])
    loss = ops.sum(x * row)
    # an in-place write to row's memory, recorded the way vm.torch does it
    arr = row.numpy()
    arr[:] = 0.0
    row._bump_version()
    with pytest.raises(RuntimeError, match="is at version 1; expected version 0"):
        loss.backward()


def test_backward_uses_values_of_the_forward_when_nothing_was_written():
    x = _t([0.5, -0.25]).requires_grad_()
    w = _t([2.0, 4.0]).requires_grad_()
    loss = ops.sum(ops.tanh(x * w))
    loss.backward()
    sech2 = 1.0 - np.tanh(np.array([1.0, -1.0])) ** 2
    np.testing.assert_allclose(x.grad.numpy(), sech2 * [2.0, 4.0], rtol=1e-5)
    np.testing.assert_allclose(w.grad.numpy(), sech2 * [0.5, -0.25], rtol=1e-5)


# ------------------------------------------------------------ GradientTape
def test_tape_raises_for_an_assigned_source_read_by_mul():
    w = _t([1.0, 2.0])
    with dg.GradientTape() as tape:
        tape.watch(w)
        y = ops.sum(w * w)
    w.assign(_t([5.0, 5.0]))
    with pytest.raises(RuntimeError, match=r"input 0 of Mul .* version 1; expected version 0"):
        tape.gradient(y, w)


def test_persistent_tape_after_an_optimizer_step_raises():
    w = _t([1.0, 2.0]).requires_grad_()
    opt = dg.optim.SGD([w], lr=0.1)
    with dg.GradientTape(persistent=True) as tape:
        loss = ops.sum(w * w)
    g = tape.gradient(loss, w)
    np.testing.assert_allclose(g.numpy(), [2.0, 4.0])
    w.grad = g
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6], rtol=1e-6)
    with pytest.raises(RuntimeError, match=ERR):
        tape.gradient(loss, w)


def test_training_loop_with_optimizer_updates_is_unaffected():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, 3)).astype(np.float32)
    ys = rng.standard_normal((8, 1)).astype(np.float32)
    w = _t(rng.standard_normal((3, 1))).requires_grad_()
    opt = dg.optim.SGD([w], lr=0.05, momentum=0.9)
    ref_w = w.numpy().astype(np.float64).copy()
    ref_buf = np.zeros_like(ref_w)
    for _ in range(4):
        opt.zero_grad()
        loss = ops.mean((ops.matmul(_t(xs), w) - _t(ys)) ** 2)
        loss.backward()
        opt.step()
        grad = 2.0 * xs.T.astype(np.float64) @ (xs @ ref_w - ys) / xs.shape[0]
        ref_buf = 0.9 * ref_buf + grad
        ref_w = ref_w - 0.05 * ref_buf
    assert w._version >= 4
    np.testing.assert_allclose(w.numpy(), ref_w, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- BatchNorm
def _bn_case(training):
    rng = np.random.default_rng(1)
    x = _t(rng.standard_normal((4, 3, 2))).requires_grad_()
    gamma = _t([1.0, 2.0, 0.5]).requires_grad_()
    beta = _t([0.0, 0.1, -0.1]).requires_grad_()
    rm, rv = _t([0.1, 0.2, 0.3]), _t([1.0, 1.5, 2.0])
    y = dg.nn.functional.batch_norm(x, rm, rv, gamma, beta, training=training)
    return x, gamma, rm, rv, y


def test_batch_norm_training_updates_running_stats_and_backward_works():
    x, gamma, rm, rv, y = _bn_case(True)
    assert rm._version == 1 and rv._version == 1    # updated in place after the op
    ops.sum(y * y).backward()
    # reference: the same batch norm without running statistics
    x2 = _t(x.numpy()).requires_grad_()
    g2 = _t(gamma.numpy()).requires_grad_()
    y2 = dg.nn.functional.batch_norm(x2, None, None, g2, _t([0.0, 0.1, -0.1]), training=True)
    ops.sum(y2 * y2).backward()
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gamma.grad.numpy(), g2.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_batch_norm_inference_reads_running_stats_so_writing_them_raises():
    x, gamma, rm, rv, y = _bn_case(False)
    rv.assign(_t([3.0, 3.0, 3.0]))
    with pytest.raises(RuntimeError, match=r"input 4 of BatchNorm"):
        ops.sum(y).backward()


# -------------------------------------------------------- unread_inputs API
def test_unread_inputs_table_is_validated_per_op():
    from dragon_core import _autograd
    assert _autograd._saved_versions("Add", [_t([1.0]), _t([2.0])], {}) == [None, None]
    a, b = _t([1.0]), _t([2.0])
    b._bump_version()
    assert _autograd._saved_versions("Mul", [a, b], {}) == [0, 1]
    assert _autograd._saved_versions("BatchNorm", [a] * 5, {"training": True}) == \
        [0, 0, None, None, None]
    assert _autograd._saved_versions("BatchNorm", [a] * 5, {"training": False}) == \
        [0, 0, None, 0, 0]
