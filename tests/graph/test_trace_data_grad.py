"""``Tensor.data`` read and ``.grad = None`` written inside a traced function
(found in the session-14 review of compiled steps)."""
import numpy as np

import dragon_core as dg
from dragon_core import ops


def test_data_read_inside_a_trace_follows_the_variable():
    # ``w.data`` was not recorded as an alias of ``w``: the trace captured
    # the trace-time storage, so every later call returned the first value.
    w = dg.tensor(np.zeros(3, np.float32))
    f = dg.function(lambda: w.data * 1.0)
    got = []
    for i in range(4):
        got.append(f().numpy().tolist())
        w.assign(dg.tensor(np.full(3, i + 1, np.float32)))
    assert got == [[float(i)] * 3 for i in range(4)]


def test_grad_set_to_none_inside_a_trace_is_traced_once():
    # ``leaf.grad = None`` in a step retraced the function at every call.
    other = dg.tensor(np.zeros(4, np.float32)).requires_grad_()
    p = dg.tensor(np.ones(3, np.float32)).requires_grad_()

    def step(v):
        other.grad = None
        loss = ops.sum(ops.square(p)) + ops.sum(ops.mul(ops.reshape(other, [2, -1])[0], v))
        loss.backward()
        return loss
    fn = dg.function(step)
    v = dg.tensor(np.ones(2, np.float32))
    for _ in range(2):
        fn(v)
    settled = fn.trace_count      # the first call ran with no .grad yet
    for _ in range(5):
        fn(v)
    assert fn.trace_count == settled <= 2
    np.testing.assert_array_equal(other.grad.numpy(), [1, 1, 0, 0])
