"""PyTorch-style training steps inside ``@dg.function`` (issue 13, item 17).

``opt.zero_grad(); loss.backward(); opt.step()`` compiled must train exactly
as it does eagerly: the backward pass is part of the graph, and ``.grad`` is
state of the step (read at call time, written after each run), never a
tensor frozen at trace time.
"""

import numpy as np
import pytest

import dragon_core as dg

STEPS = 25


def _data(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((16, 4)).astype(np.float32)
    y = (x @ rng.standard_normal((4, 2)) + 0.5).astype(np.float32)
    return dg.tensor(x), dg.tensor(y)


def _model(seed=1):
    rng = np.random.default_rng(seed)
    m = dg.nn.Linear(4, 2)
    m.weight.assign(dg.tensor(rng.standard_normal((2, 4)).astype(np.float32)))
    m.bias.assign(dg.tensor(rng.standard_normal(2).astype(np.float32)))
    return m


_OPTIMIZERS = {
    "sgd": lambda p: dg.optim.SGD(p, lr=0.05),
    "sgd_momentum": lambda p: dg.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-3),
    "adam": lambda p: dg.optim.Adam(p, lr=0.05),
}


def _train(make_opt, compiled: bool, steps=STEPS, module_zero_grad=False):
    m = _model()
    opt = make_opt(m.parameters())
    x, y = _data()

    def step(x, y):
        if module_zero_grad:
            m.zero_grad()
        else:
            opt.zero_grad()
        loss = dg.ops.mean((m(x) - y) ** 2)
        loss.backward()
        opt.step()
        return loss

    fn = dg.function(step) if compiled else step
    losses = [float(fn(x, y)) for _ in range(steps)]
    return losses, m, fn


@pytest.mark.parametrize("opt_name", sorted(_OPTIMIZERS))
def test_compiled_backward_step_equals_eager(opt_name):
    make = _OPTIMIZERS[opt_name]
    eager, m_eager, _ = _train(make, compiled=False)
    graph, m_graph, fn = _train(make, compiled=True)
    assert fn.trace_count == 1
    np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-6)
    assert eager[-1] < 0.5 * eager[0]   # it trains
    for pe, pg in zip(m_eager.parameters(), m_graph.parameters()):
        np.testing.assert_allclose(pg.numpy(), pe.numpy(), rtol=1e-5, atol=1e-6)
        # .grad after a compiled step is the last step's gradient, as eagerly.
        np.testing.assert_allclose(pg.grad.numpy(), pe.grad.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_step_graph_holds_the_backward_ops():
    _, _, fn = _train(_OPTIMIZERS["sgd"], compiled=True, steps=1)
    x, y = _data()
    types = [op.type for op in fn.get_graph(x, y).op]
    # Forward Linear plus at least one more MatMul for the weight gradient.
    assert sum(t in ("MatMul", "Gemm", "Linear") or "MatMul" in t for t in types) >= 2, types


def test_module_zero_grad_inside_function():
    eager, _, _ = _train(_OPTIMIZERS["adam"], compiled=False, module_zero_grad=True)
    graph, _, _ = _train(_OPTIMIZERS["adam"], compiled=True, module_zero_grad=True)
    np.testing.assert_allclose(graph, eager, rtol=1e-5, atol=1e-6)


def test_gradient_accumulation_across_compiled_calls():
    """A compiled forward+backward (no zero_grad inside) accumulates into
    .grad exactly as eager calls do, whether .grad starts None or not."""
    x, y = _data()
    results = {}
    for compiled in (False, True):
        m = _model()

        def fwd_bwd(x, y):
            loss = dg.ops.mean((m(x) - y) ** 2)
            loss.backward()
            return loss

        fn = dg.function(fwd_bwd) if compiled else fwd_bwd
        got = []
        for _ in range(2):
            for _ in range(3):
                fn(x, y)
            got.append([p.grad.numpy().copy() for p in m.parameters()])
            for p in m.parameters():
                p.grad = None
        fn(x, y)
        got.append([p.grad.numpy().copy() for p in m.parameters()])
        results[compiled] = got
    for ge, gg in zip(results[False], results[True]):
        for a, b in zip(ge, gg):
            np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    # Three accumulated calls are three times one.
    for a3, a1 in zip(results[True][0], results[True][2]):
        np.testing.assert_allclose(a3, 3 * a1, rtol=1e-5, atol=1e-6)


def test_compiled_update_reads_current_grad_from_eager_backward():
    """Backward eagerly, the update compiled: each step uses that step's
    .grad (a new tensor every time), never the one seen when tracing."""
    x, y = _data()
    finals = []
    for compiled in (False, True):
        m = _model()
        opt = dg.optim.SGD(m.parameters(), lr=0.05, momentum=0.5)
        update = dg.function(lambda: opt.step()) if compiled else opt.step
        losses = []
        for _ in range(10):
            opt.zero_grad()
            loss = dg.ops.mean((m(x) - y) ** 2)
            loss.backward()
            update()
            losses.append(float(loss))
        finals.append((losses, [p.numpy() for p in m.parameters()]))
    np.testing.assert_allclose(finals[1][0], finals[0][0], rtol=1e-5, atol=1e-6)
    for a, b in zip(finals[0][1], finals[1][1]):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)


def test_grad_read_inside_function_is_current_not_baked():
    w = dg.tensor(np.array([1.0, 2.0, 3.0], np.float32)).requires_grad_()

    @dg.function
    def grad_norm2():
        return dg.ops.sum(w.grad * w.grad) + dg.ops.sum(w * 0.0)

    dg.ops.sum(w * w).backward()
    np.testing.assert_allclose(float(grad_norm2()), float(np.sum((2 * w.numpy()) ** 2)))
    w.grad = None
    dg.ops.sum(w * w * w).backward()     # a different gradient, a new tensor
    np.testing.assert_allclose(float(grad_norm2()), float(np.sum((3 * w.numpy() ** 2) ** 2)),
                               rtol=1e-6)


def test_clip_grad_norm_inside_compiled_step_equals_eager():
    x, y = _data()
    out = []
    for compiled in (False, True):
        m = _model()
        opt = dg.optim.SGD(m.parameters(), lr=0.05)

        def step(x, y):
            opt.zero_grad()
            loss = dg.ops.mean((m(x) - y) ** 2)
            loss.backward()
            dg.optim.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            return loss

        fn = dg.function(step) if compiled else step
        out.append([float(fn(x, y)) for _ in range(STEPS)])
    np.testing.assert_allclose(out[1], out[0], rtol=1e-5, atol=1e-6)


def test_freeze_refuses_a_training_step():
    m = _model()
    opt = dg.optim.SGD(m.parameters(), lr=0.05)
    x, y = _data()

    def step(x, y):
        opt.zero_grad()
        dg.ops.mean((m(x) - y) ** 2).backward()
        opt.step()

    with pytest.raises(ValueError, match="freeze"):
        dg.function(step, freeze=True)(x, y)
