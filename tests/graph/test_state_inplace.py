"""In-place optimizer updates in compiled steps (passes/state_inplace.py and
the executor's check in Plan::RunSequential; docs/graph.md, "In-place
optimizer updates").

The update op of a compiled training step may write the parameters and
moments over their own storage instead of fresh buffers. What a caller can
observe must not change: the parameter and state objects hold the new
values after a step (as ``assign`` gives them, and as torch's in-place
optimizers do), anything else that shares the old storage (a view, a
NumPy array, a tensor a previous call returned) keeps the old bytes, the
bits equal the out-of-place path's (``disable_passes="state_inplace"``) and
eager mode's, and a step that fails leaves every variable as it was.
"""

from __future__ import annotations

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.optim as optim
from dragon_core import ops

OFF = ("state_inplace",)


def bits(t) -> np.ndarray:
    """The bytes of t, read from a copy: ``numpy()`` of t itself would mark
    its storage as exported, which (rightly) keeps the next step out of
    place."""
    return np.ascontiguousarray(t._clone().numpy()).reshape(-1).view(np.uint8).copy()


def _params(seed=0, dtype="float32"):
    rng = np.random.default_rng(seed)
    shapes = [(6, 5), (5,), (5, 3), (3,)]
    return [dg.tensor(rng.standard_normal(s).astype(dtype)).requires_grad_() for s in shapes]


def _loss(params, x):
    w1, b1, w2, b2 = params
    h = ops.tanh(ops.add(ops.matmul(x, w1), b1))
    return ops.sum(ops.square(ops.add(ops.matmul(h, w2), b2)))


def _x(dtype="float32", seed=3):
    return dg.tensor(np.random.default_rng(seed).standard_normal((7, 6)).astype(dtype))


def _trainer(cls, kwargs, disable=(), compiled=True, params=None, after=None):
    params = params if params is not None else _params()
    opt = cls(params, **kwargs)

    def step(x, *extra):
        opt.zero_grad()
        loss = _loss(params, x)
        loss.backward()
        opt.step()
        if after is not None:
            return after(loss, params, *extra)
        return loss

    fn = dg.function(step, disable_passes=disable) if compiled else step
    return fn, params, opt


def _state(params, opt):
    """Bits of every parameter and optimizer state tensor."""
    out = [bits(p) for p in params]
    for p in params:
        for k in sorted(opt.state[p]):
            v = opt.state[p][k]
            if isinstance(v, dg.Tensor):
                out.append(bits(v))
    return out


OPTIMIZERS = [
    (optim.Adam, dict(lr=0.01)),
    (optim.Adam, dict(lr=0.01, amsgrad=True, weight_decay=0.01)),
    (optim.AdamW, dict(lr=0.01, weight_decay=0.1)),
    (optim.Adam, dict(lr=0.01, foreach=False)),
    (optim.SGD, dict(lr=0.05, momentum=0.9)),
    (optim.SGD, dict(lr=0.05)),
]
IDS = ["adam", "adam_amsgrad_l2", "adamw", "adam_per_param", "sgd_momentum", "sgd"]


def _ptrs(params, opt):
    out = [p.data_ptr() for p in params]
    for p in params:
        for k in ("exp_avg", "exp_avg_sq", "momentum_buffer"):
            v = opt.state[p].get(k) if p in opt.state else None
            if isinstance(v, dg.Tensor):
                out.append(v.data_ptr())
    return out


# ------------------------------------------------------------ the pass

def test_the_update_is_annotated_and_last():
    fn, params, _ = _trainer(optim.Adam, dict(lr=0.01))
    x = _x()
    fn(x)
    g = fn.get_graph(x)
    assert "state_inplace" in g.metadata["passes"].split(",")
    marked = [op for op in g.op if "_state_inplace" in op.attr]
    assert [op.type for op in marked] == ["MultiAdamUpdate"]
    assert g.op[-1].type == "MultiAdamUpdate"
    pairs = list(marked[0].attr["_state_inplace"].ints.values)
    n = len(params)
    # new params over params, new moments over the moments (not vmax: no amsgrad)
    assert sorted(zip(pairs[0::2], pairs[1::2])) == sorted(
        [(k, 1 + k) for k in range(n)] + [(n + k, 1 + 2 * n + k) for k in range(n)]
        + [(2 * n + k, 1 + 3 * n + k) for k in range(n)])
    off, _, _ = _trainer(optim.Adam, dict(lr=0.01), disable=OFF)
    off(x)
    assert not any("_state_inplace" in op.attr for op in off.get_graph(x).op)


def test_pass_is_idempotent_and_pure():
    from dragon_core._graph.passes.state_inplace import state_inplace
    fn, _, _ = _trainer(optim.Adam, dict(lr=0.01), disable=OFF)
    x = _x()
    fn(x)
    g = fn.get_graph(x)
    before = g.SerializeToString(deterministic=True)
    once = state_inplace(g)
    assert g.SerializeToString(deterministic=True) == before
    twice = state_inplace(once)
    assert twice.SerializeToString(deterministic=True) == once.SerializeToString(deterministic=True)


# ------------------------------------------------------ the executor

@pytest.mark.parametrize("cls, kwargs", OPTIMIZERS, ids=IDS)
def test_steps_write_in_place_with_the_same_bits(cls, kwargs):
    x = _x()
    fn, params, opt = _trainer(cls, kwargs)
    ref, rparams, ropt = _trainer(cls, kwargs, disable=OFF)
    eager, eparams, eopt = _trainer(cls, kwargs, compiled=False)
    moved = []
    for i in range(4):
        ptrs = _ptrs(params, opt) if i >= 2 else None
        a, b, c = fn(x), ref(x), eager(x)
        assert bits(a).tobytes() == bits(b).tobytes() == bits(c).tobytes()
        if ptrs is not None:
            moved.append(ptrs != _ptrs(params, opt))
        for s, r, e in zip(_state(params, opt), _state(rparams, ropt), _state(eparams, eopt)):
            assert s.tobytes() == r.tobytes() == e.tobytes()
    # Steps 3 and 4 (plan warm, state dense) wrote over the same storage; the
    # per-parameter update writes in place only in its largest op.
    assert moved == [False, False] or (kwargs.get("foreach") is False and moved == [True, True])


def test_per_parameter_updates_write_one_op_in_place():
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01, foreach=False))
    x = _x()
    for _ in range(3):
        fn(x)
    g = fn.get_graph(x)
    marked = [op for op in g.op if "_state_inplace" in op.attr]
    assert len(marked) == 1 and g.op[-1] is not None and g.op[-1].name == marked[0].name
    # the largest parameter (6 x 5)
    assert marked[0].input[0] == g.op[-1].input[0]
    before = params[0].data_ptr()
    fn(x)
    assert params[0].data_ptr() == before


def test_a_view_of_a_parameter_keeps_the_old_value():
    """A view (or NumPy array) taken before a step shares the old storage:
    it keeps the old bytes, as in eager mode (assign rebinds), and the
    parameter object holds the new value."""
    x = _x()
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01))
    eager, eparams, eopt = _trainer(optim.Adam, dict(lr=0.01), compiled=False)
    for _ in range(3):
        fn(x), eager(x)
    view, eview = params[0][1], eparams[0][1]
    alias, arr = params[2].detach(), params[1].numpy()
    old_view, old_alias, old_arr = bits(view), bits(alias), arr.copy()
    fn(x), eager(x)
    assert bits(view).tobytes() == old_view.tobytes() == bits(eview).tobytes()
    assert bits(alias).tobytes() == old_alias.tobytes()
    assert np.array_equal(arr, old_arr)
    for p, e in zip(params, eparams):
        assert bits(p).tobytes() == bits(e).tobytes()
    assert bits(params[0][1]).tobytes() != old_view.tobytes()
    # with the views gone, the next steps write in place again and agree
    del view, alias, arr
    fn(x), eager(x)
    ptr = params[2].data_ptr()
    fn(x), eager(x)
    assert params[2].data_ptr() == ptr
    for p, e in zip(params, eparams):
        assert bits(p).tobytes() == bits(e).tobytes()


def test_held_state_objects_see_the_new_values():
    """Holding the parameter or moment objects: they hold the new values
    after every step (as eagerly; torch's in-place update shows the same)."""
    x = _x()
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01))
    eager, eparams, eopt = _trainer(optim.Adam, dict(lr=0.01), compiled=False)
    fn(x), eager(x)
    held_p, held_m = params[0], opt.state[params[0]]["exp_avg"]
    eheld_p, eheld_m = eparams[0], eopt.state[eparams[0]]["exp_avg"]
    for _ in range(3):
        before = bits(held_m)
        fn(x), eager(x)
        assert bits(held_p).tobytes() == bits(eheld_p).tobytes()
        assert bits(held_m).tobytes() == bits(eheld_m).tobytes() != before.tobytes()
        assert held_m is opt.state[params[0]]["exp_avg"]


def test_returned_views_of_a_parameter_keep_their_values():
    """A step that returns a view of a parameter taken before the update:
    the caller's tensor from one call must not change at the next (the
    pass leaves that parameter out, and the executor would refuse a shared
    storage anyway)."""
    x = _x()

    def make(compiled):
        params = _params()
        opt = optim.Adam(params, lr=0.01)

        def step(x):
            opt.zero_grad()
            loss = _loss(params, x)
            loss.backward()
            view = ops.reshape(params[0], [-1])
            opt.step()
            return loss, view
        return (dg.function(step) if compiled else step), params, opt
    fn, params, opt = make(True)
    eager, eparams, eopt = make(False)
    outs, eouts = [], []
    for _ in range(4):
        outs.append(fn(x))
        eouts.append(eager(x))
        for (l, v), (el, ev) in zip(outs, eouts):
            assert bits(v).tobytes() == bits(ev).tobytes()
            assert bits(l).tobytes() == bits(el).tobytes()
    for s, e in zip(_state(params, opt), _state(eparams, eopt)):
        assert s.tobytes() == e.tobytes()
    g = fn.get_graph(x)
    marked = [op for op in g.op if "_state_inplace" in op.attr]
    pairs = list(marked[0].attr["_state_inplace"].ints.values)
    assert 0 not in pairs[0::2] and 1 in pairs[0::2]   # params[0] is left out


@pytest.mark.parametrize("disable", [(), OFF], ids=["inplace", "out_of_place"])
def test_parameters_sharing_one_storage(disable):
    """Two parameters that are views of one live buffer (``reshape`` is a
    view; a slice is a copy) are never written in place (neither is alone
    on its storage): the buffer keeps its bytes, the parameters hold the
    new values, and the bits equal eager mode's."""
    base = np.random.default_rng(5).standard_normal(30).astype(np.float32)

    def make():
        buf = dg.tensor(base)
        w1 = ops.reshape(buf, [6, 5]).requires_grad_()
        w2 = ops.reshape(buf, [5, 6]).requires_grad_()
        assert w1.data_ptr() == w2.data_ptr() == buf.data_ptr()
        return buf, [w1, w2]

    def trainer(params, compiled):
        opt = optim.Adam(params, lr=0.01)

        def step(x):
            opt.zero_grad()
            w1, w2 = params
            loss = ops.sum(ops.square(ops.matmul(ops.tanh(ops.matmul(x, w1)), w2)))
            loss.backward()
            opt.step()
            return loss
        return (dg.function(step, disable_passes=disable) if compiled else step), opt

    x = _x()
    buf, params = make()
    ebuf, eparams = make()
    fn, opt = trainer(params, True)
    eager, eopt = trainer(eparams, False)
    for _ in range(4):
        before = [bits(p) for p in params]
        assert bits(fn(x)).tobytes() == bits(eager(x)).tobytes()
        assert bits(buf).tobytes() == base.tobytes()
        for s, e in zip(_state(params, opt), _state(eparams, eopt)):
            assert s.tobytes() == e.tobytes()
        for p, b in zip(params, before):   # the variables hold the new values
            assert bits(p).tobytes() != b.tobytes()
    assert bits(ebuf).tobytes() == base.tobytes()


@pytest.mark.parametrize("disable", [(), OFF], ids=["inplace", "out_of_place"])
def test_a_variable_changed_behind_the_graph_fails_before_any_write(disable):
    """A step that also assigns a variable whose shape changed after
    tracing (``buf.data = ...``) raises before the run: the parameters,
    the moments and the step count are all as they were, as the error
    says, and the same step then runs as before once buf is restored."""
    x = _x()
    buf = dg.tensor(np.zeros(3, np.float32))

    def after(loss, params):
        buf.assign(dg.tensor(np.ones(3, np.float32)))
        return loss
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01), disable=disable, after=after)
    ref, rparams, ropt = _trainer(optim.Adam, dict(lr=0.01), compiled=False, after=after)
    for _ in range(3):
        fn(x), ref(x)
    inplace = any("_state_inplace" in op.attr for op in fn.get_graph(x).op)
    assert inplace == (not disable)
    before = _state(params, opt)
    steps = [opt.state[p]["step"] for p in params]
    steps = [s if not isinstance(s, dg.Tensor) else bits(s).tobytes() for s in steps]
    buf.data = dg.tensor(np.zeros(5, np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"shape \(5,\).*traced for float32 of shape \(3,\)"
                             r".*No state was updated"):
        fn(x)
    assert [b.tobytes() for b in _state(params, opt)] == [b.tobytes() for b in before]
    now = [opt.state[p]["step"] for p in params]
    assert [s if not isinstance(s, dg.Tensor) else bits(s).tobytes() for s in now] == steps
    buf.data = dg.tensor(np.zeros(3, np.float32))
    assert bits(fn(x)).tobytes() == bits(ref(x)).tobytes()
    for s, r in zip(_state(params, opt), _state(rparams, ropt)):
        assert s.tobytes() == r.tobytes()
    assert buf.tolist() == [1.0] * 3


def test_a_leaf_whose_grad_is_set_changed_behind_the_graph_fails_before_any_write():
    """The same for a leaf whose ``.grad`` the step sets: after a change of
    shape behind the graph (``.data = ...``) the call fails before the run,
    with the parameters, the moments and that ``.grad`` as they were."""
    x = _x()
    other = dg.tensor(np.zeros(4, np.float32)).requires_grad_()
    params = _params()
    opt = optim.Adam(params, lr=0.01)
    clear = optim.SGD([other], lr=0.0)

    def step(x):
        opt.zero_grad()
        clear.zero_grad()
        loss = _loss(params, x) + ops.sum(other)
        loss.backward()
        opt.step()
        return loss
    fn = dg.function(step)
    for _ in range(3):
        fn(x)
    assert fn.trace_count == 1
    np.testing.assert_array_equal(other.grad.numpy(), np.ones(4, np.float32))
    before = _state(params, opt)
    other.data = dg.tensor(np.zeros(5, np.float32))
    with pytest.raises(dg.errors.InvalidArgumentError,
                       match=r"\.grad.*shape \(5,\).*traced for float32 of shape \(4,\)"
                             r".*No state was updated"):
        fn(x)
    assert fn.trace_count == 1
    assert [b.tobytes() for b in _state(params, opt)] == [b.tobytes() for b in before]
    np.testing.assert_array_equal(other.grad.numpy(), np.ones(4, np.float32))


def test_a_failed_step_leaves_the_state_as_it_was():
    """An op after opt.step() fails at run time (an index out of range fed
    as an argument): the update, moved after it, has not run, so every
    parameter, moment and step count is as before the call; the next good
    call then equals the out-of-place path's."""
    x = _x()

    def after(loss, params, idx):
        return ops.gather(ops.reshape(loss, [1]), idx, axis=0)
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01), after=after)
    ref, rparams, ropt = _trainer(optim.Adam, dict(lr=0.01), disable=OFF, after=after)
    good = dg.tensor(np.array([0], np.int64))
    bad = dg.tensor(np.array([5], np.int64))
    for _ in range(3):
        fn(x, good), ref(x, good)
    g = fn.get_graph(x, good)
    assert g.op[-1].type == "MultiAdamUpdate" and "_state_inplace" in g.op[-1].attr
    before = _state(params, opt)
    with pytest.raises(Exception, match="(?i)gather|index|range"):
        fn(x, bad)
    assert [b.tobytes() for b in _state(params, opt)] == [b.tobytes() for b in before]
    ptr = params[0].data_ptr()
    assert bits(fn(x, good)).tobytes() == bits(ref(x, good)).tobytes()
    assert params[0].data_ptr() == ptr
    for s, r in zip(_state(params, opt), _state(rparams, ropt)):
        assert s.tobytes() == r.tobytes()


def test_an_update_whose_output_is_read_later_is_not_moved():
    """Reading the new parameters after the step (here: their sum) keeps the
    update where it is and out of place, so a failure after it cannot have
    written anything."""
    x = _x()

    def after(loss, params):
        return loss + ops.sum(params[3])
    fn, params, opt = _trainer(optim.Adam, dict(lr=0.01), after=after)
    eager, eparams, eopt = _trainer(optim.Adam, dict(lr=0.01), compiled=False, after=after)
    for _ in range(3):
        assert bits(fn(x)).tobytes() == bits(eager(x)).tobytes()
    g = fn.get_graph(x)
    assert not any("_state_inplace" in op.attr for op in g.op)
    for s, e in zip(_state(params, opt), _state(eparams, eopt)):
        assert s.tobytes() == e.tobytes()


def test_eager_saved_parameter_still_raises_after_a_compiled_step():
    """A parameter saved by an eager forward and then updated by a compiled
    step: backward refuses the modified tensor, in place or not (the
    version counter advances as with assign)."""
    x = _x()
    for disable in ((), OFF):
        fn, params, opt = _trainer(optim.Adam, dict(lr=0.01), disable=disable)
        for _ in range(3):
            fn(x)
        loss = _loss(params, x)
        fn(x)
        with pytest.raises(Exception, match="(?i)modified|version|in.place"):
            loss.backward()


def test_parallel_executor_writes_fresh_buffers_with_the_same_bits():
    x = _x()
    params = _params()
    opt = optim.Adam(params, lr=0.01)

    def step(x):
        opt.zero_grad()
        loss = _loss(params, x)
        loss.backward()
        opt.step()
        return loss
    fn = dg.function(step, parallel=2)
    eager, eparams, eopt = _trainer(optim.Adam, dict(lr=0.01), compiled=False)
    for _ in range(3):
        assert bits(fn(x)).tobytes() == bits(eager(x)).tobytes()
    for s, e in zip(_state(params, opt), _state(eparams, eopt)):
        assert s.tobytes() == e.tobytes()


def test_double_step_in_one_function():
    """Two optimizer steps in one compiled function: the bits equal eager
    mode's."""
    x = _x()
    params = _params()
    opt = optim.SGD(params, lr=0.05, momentum=0.9)
    eparams = _params()
    eopt = optim.SGD(eparams, lr=0.05, momentum=0.9)

    def two(x, params=params, opt=opt):
        for _ in range(2):
            opt.zero_grad()
            loss = _loss(params, x)
            loss.backward()
            opt.step()
        return loss
    fn = dg.function(two)
    for _ in range(3):
        a = fn(x)
        b = two(x, eparams, eopt)
        assert bits(a).tobytes() == bits(b).tobytes()
    for s, e in zip(_state(params, opt), _state(eparams, eopt)):
        assert s.tobytes() == e.tobytes()
    # The first update's outputs feed the second step, and the second
    # update reads values, not variables: neither is written in place.
    g = fn.get_graph(x)
    assert not any("_state_inplace" in op.attr for op in g.op)


VIEWS_BEFORE_THE_STEP = {
    "detach": lambda p: p.detach(),
    "detach_detach": lambda p: p.detach().detach(),
    "detach_reshape": lambda p: ops.reshape(p.detach(), [-1]),
    "reshape": lambda p: ops.reshape(p, [-1]),
    "transpose": lambda p: ops.transpose(p, [1, 0]),
    "squeeze": lambda p: ops.squeeze(p),
    "parameter": lambda p: p,
}


@pytest.mark.parametrize("disable", [(), OFF], ids=["inplace", "out_of_place"])
@pytest.mark.parametrize("view", list(VIEWS_BEFORE_THE_STEP), ids=list(VIEWS_BEFORE_THE_STEP))
def test_a_view_taken_before_the_step_keeps_the_old_values(view, disable):
    """A step returning ``p.detach()`` (or another view of a parameter)
    taken before ``opt.step()``: eagerly it keeps the values from before the
    update (``assign`` rebinds the parameter); the compiled step gives the
    same bits, and a detached result is a new tensor, not the parameter
    (which the trace sees as the same graph value)."""
    f = VIEWS_BEFORE_THE_STEP[view]
    x = _x()
    results = {}
    for compiled in (False, True):
        params = _params()
        opt = optim.Adam(params, lr=0.01)

        def step(x):
            r = f(params[0])
            opt.zero_grad()
            _loss(params, x).backward()
            opt.step()
            return r
        fn = dg.function(step, disable_passes=disable) if compiled else step
        out = []
        for _ in range(4):
            old = bits(f(params[0]._clone()))
            r = fn(x)
            out.append((bits(r).tobytes(), tuple(r.shape), r is params[0], r.requires_grad and
                        r is params[0]))
            if view != "parameter":
                assert bits(r).tobytes() == old.tobytes()
        results[compiled] = (out, [s.tobytes() for s in _state(params, opt)])
    assert results[True] == results[False]


def test_detach_of_a_captured_tensor_is_a_new_tensor():
    """``return w.detach()`` gives a new tensor over w's storage (no
    autograd state), as eagerly; ``return w`` gives w itself."""
    w = dg.tensor(np.arange(6, dtype=np.float32)).requires_grad_()
    f = dg.function(lambda: w.detach())
    g = dg.function(lambda: w)
    for _ in range(3):
        r = f()
        assert r is not w and not r.requires_grad and r.data_ptr() == w.data_ptr()
        assert g() is w
