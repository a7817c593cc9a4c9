"""cond and while_loop in eager and graph mode, with gradients."""

import numpy as np
import pytest

import dragon_core as dg


def _x():
    return dg.tensor(np.array([1.0, 2.0]))


def _w():
    return dg.tensor(np.array([3.0, 4.0]))


def test_cond_eager_and_graph_take_the_same_branch():
    w = _w()

    def f(x):
        return dg.cond(dg.ops.sum(x) > 0, lambda a: a * w, lambda a: a - w, [x])

    g = dg.function(f)
    for x in (_x(), -_x()):
        np.testing.assert_array_equal(f(x).numpy(), g(x).numpy())
    assert g.trace_count == 1
    types = [op.type for op in g.get_graph(_x()).op]
    assert "Cond" in types


def test_cond_branches_must_agree():
    @dg.function
    def f(x):
        return dg.cond(dg.ops.sum(x) > 0, lambda a: a, lambda a: dg.ops.sum(a), [x])

    with pytest.raises(ValueError, match="different shapes"):
        f(_x())


@pytest.mark.parametrize("graph", [False, True])
def test_cond_is_differentiable_first_and_second_order(graph):
    w = _w()

    def f(x):
        with dg.GradientTape() as outer:
            outer.watch(w)
            with dg.GradientTape() as inner:
                inner.watch(w)
                y = dg.cond(dg.ops.sum(x) > 0, lambda a: a * w * w * w, lambda a: a - w, [x])
                loss = dg.ops.sum(y)
            g1 = inner.gradient(loss, w)
            s = dg.ops.sum(g1)
        g2 = outer.gradient(s, w, unconnected_gradients="zero")
        return g1, g2

    fn = dg.function(f) if graph else f
    x, wn = _x().numpy(), w.numpy()
    g1, g2 = fn(_x())
    np.testing.assert_allclose(g1.numpy(), 3 * x * wn ** 2)
    np.testing.assert_allclose(g2.numpy(), 6 * x * wn)
    g1, g2 = fn(-_x())
    np.testing.assert_allclose(g1.numpy(), [-1.0, -1.0])
    np.testing.assert_allclose(g2.numpy(), [0.0, 0.0])


def test_while_loop_eager_and_graph():
    def f(x):
        _, y = dg.while_loop(lambda i, y: i < 5, lambda i, y: (i + 1, y * 2.0),
                             [dg.tensor(0), x])
        return y

    g = dg.function(f)
    np.testing.assert_array_equal(g(_x()).numpy(), _x().numpy() * 32)
    np.testing.assert_array_equal(g(_x() + 1.0).numpy(), (_x().numpy() + 1) * 32)
    np.testing.assert_array_equal(f(_x()).numpy(), g(_x()).numpy())
    assert "While" in [op.type for op in g.get_graph(_x()).op]

    def h(x, n):
        _, y = dg.while_loop(lambda i, y: i < n, lambda i, y: (i + 1, y + 1.0),
                             [dg.tensor(0), x], maximum_iterations=3)
        return y

    hg = dg.function(h)
    # The bound and the data-dependent count both hold at run time.
    np.testing.assert_array_equal(hg(_x(), dg.tensor(2)).numpy(), _x().numpy() + 2)
    np.testing.assert_array_equal(hg(_x(), dg.tensor(9)).numpy(), _x().numpy() + 3)


@pytest.mark.parametrize("graph", [False, True])
def test_bounded_while_loop_is_differentiable(graph):
    def f(x):
        with dg.GradientTape() as t:
            t.watch(x)
            _, y = dg.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * y),
                                 [dg.tensor(0), x], maximum_iterations=5)
            loss = dg.ops.sum(y)
        return t.gradient(loss, x)

    fn = dg.function(f) if graph else f
    np.testing.assert_allclose(fn(_x()).numpy(), 8 * _x().numpy() ** 7)


def test_unbounded_while_loop_gradient_says_what_to_do():
    @dg.function
    def f(x):
        with dg.GradientTape() as t:
            t.watch(x)
            _, y = dg.while_loop(lambda i, y: i < 3, lambda i, y: (i + 1, y * y),
                                 [dg.tensor(0), x])
            loss = dg.ops.sum(y)
        return t.gradient(loss, x)

    with pytest.raises(NotImplementedError, match="maximum_iterations"):
        f(_x())


def test_control_ops_cannot_be_called_as_kernels():
    with pytest.raises(dg.errors.FailedPreconditionError, match="inside graphs"):
        dg.ops._cond([dg.tensor(True)])
    with pytest.raises(dg.errors.FailedPreconditionError, match="inside graphs"):
        dg.ops._while([_x()])


# ------------------------------------------------- lazily traced branches
# (issue 13, item 14): a branch that is not taken for the traced values and
# cannot be traced for them must not break the trace; it raises its error,
# with its type, when a run takes it.

def _reshape_cond(x, p):
    return dg.cond(p, lambda: dg.ops.reshape(x, [2, 2]), lambda: dg.ops.reshape(x, [5]))


def test_cond_untaken_branch_invalid_for_inputs_does_not_break_the_trace():
    x = np.arange(4, dtype=np.float32)
    f = dg.function(_reshape_cond)
    out = f(dg.tensor(x), dg.tensor(True))
    np.testing.assert_array_equal(out.numpy(), x.reshape(2, 2))
    # Eager agrees.
    np.testing.assert_array_equal(_reshape_cond(dg.tensor(x), dg.tensor(True)).numpy(),
                                  x.reshape(2, 2))
    # Taking the invalid branch at run time raises the reshape error, typed
    # as eager's, every time; the plan still works afterwards.
    for _ in range(2):
        with pytest.raises(dg.errors.InvalidArgumentError) as graph_err:
            f(dg.tensor(x), dg.tensor(False))
        assert "reshape" in str(graph_err.value).lower()
        assert "cond_else" in str(graph_err.value)
    with pytest.raises(dg.errors.InvalidArgumentError):
        _reshape_cond(dg.tensor(x), dg.tensor(False))
    np.testing.assert_array_equal(f(dg.tensor(x + 1), dg.tensor(True)).numpy(),
                                  (x + 1).reshape(2, 2))
    assert f.trace_count == 1


def test_cond_taken_branch_error_raises_at_trace_as_eager():
    x = dg.tensor(np.arange(4, dtype=np.float32))
    f = dg.function(_reshape_cond)
    with pytest.raises(dg.errors.InvalidArgumentError, match="(?i)reshape"):
        f(x, dg.tensor(False))
    # The trace failed, so nothing was cached: True still works.
    np.testing.assert_array_equal(f(x, dg.tensor(True)).numpy(), x.numpy().reshape(2, 2))


def test_cond_untaken_branch_python_error_keeps_its_kind():
    def bad():
        raise NotImplementedError("this branch is not written yet")

    f = dg.function(lambda x, p: dg.cond(p, lambda: x * 2.0, bad))
    x = dg.tensor(np.array([1.0, 2.0], np.float32))
    np.testing.assert_array_equal(f(x, dg.tensor(True)).numpy(), [2.0, 4.0])
    with pytest.raises(NotImplementedError, match="not written yet"):
        f(x, dg.tensor(False))


def test_cond_with_lazy_branch_is_differentiable_in_graph():
    w = dg.tensor(np.array([1.0, 2.0, 3.0, 4.0], np.float32))

    @dg.function
    def f(p):
        with dg.GradientTape() as tape:
            tape.watch(w)
            y = dg.cond(p, lambda: dg.ops.reshape(w * w, [2, 2]),
                        lambda: dg.ops.reshape(w, [5]))
            loss = dg.ops.sum(y)
        return tape.gradient(loss, w)

    np.testing.assert_allclose(f(dg.tensor(True)).numpy(), 2 * w.numpy())
    with pytest.raises(dg.errors.InvalidArgumentError, match="(?i)reshape"):
        f(dg.tensor(False))


def test_while_loop_body_that_cannot_run_is_traced_lazily():
    def loop(x, n):
        # The body is invalid for x's shape; it only fails if the loop runs.
        return dg.while_loop(lambda v, i: i < n,
                             lambda v, i: (dg.ops.reshape(v, [5]), i + 1),
                             [x, dg.tensor(np.int64(0))])[0]

    x = dg.tensor(np.arange(4, dtype=np.float32))
    f = dg.function(loop)
    np.testing.assert_array_equal(f(x, dg.tensor(np.int64(0))).numpy(), x.numpy())
    np.testing.assert_array_equal(loop(x, dg.tensor(np.int64(0))).numpy(), x.numpy())
    with pytest.raises(dg.errors.InvalidArgumentError, match="while_body"):
        f(x, dg.tensor(np.int64(2)))
    with pytest.raises(dg.errors.InvalidArgumentError, match="(?i)reshape"):
        loop(x, dg.tensor(np.int64(2)))
    # Traced with a running loop, the body's error raises at trace time.
    g = dg.function(loop)
    with pytest.raises(dg.errors.InvalidArgumentError, match="(?i)reshape"):
        g(x, dg.tensor(np.int64(1)))
