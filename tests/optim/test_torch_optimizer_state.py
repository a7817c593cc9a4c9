"""``optimizer.state`` of the torch front end behaves as torch 2.13's: a
mutable mapping keyed by the user's own parameter objects (``del``,
assignment, ``clear()``, iteration yielding the same objects), and edits to
it change the next steps as they do in torch."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="pip install torch==2.13.0 (CPU wheel)")
import dragon_core.vm.torch as vt  # noqa: E402

GRADS = [[1.0, 2.0, 3.0], [-0.5, 0.25, 2.0], [0.3, -1.0, 0.7], [2.0, 0.0, -1.5],
         [0.1, 0.2, -0.3]]


def _setup(T, opt="Adam"):
    p = T.nn.Parameter(T.tensor([1.0, -2.0, 0.5], dtype=T.float64))
    q = T.nn.Parameter(T.tensor([[0.5, 1.5]], dtype=T.float64))
    kwargs = {"momentum": 0.9} if opt == "SGD" else {}
    o = getattr(T.optim, opt)([{"params": [p]}, {"params": [q], "lr": 0.05}], lr=0.1,
                              **kwargs)
    return p, q, o


def _step(T, p, q, o, i):
    p.grad = T.tensor(GRADS[i % len(GRADS)], dtype=T.float64)
    q.grad = T.tensor([GRADS[i % len(GRADS)][:2]], dtype=T.float64)
    o.step()


def _np(t):
    return np.array(t.detach().numpy(), dtype=np.float64)


def _edit_run(T, edit, opt="Adam"):
    p, q, o = _setup(T, opt)
    for i in range(2):
        _step(T, p, q, o, i)
    edit(T, p, q, o)
    for i in range(2, 5):
        _step(T, p, q, o, i)
    return [_np(p), _np(q), sorted(o.state[p]), len(o.state)]


def _del(T, p, q, o):
    del o.state[p]


def _assign_empty(T, p, q, o):
    o.state[q] = {}


def _clear(T, p, q, o):
    o.state.clear()


def _assign_entries(T, p, q, o):
    s = dict(o.state[p])
    o.state[p] = {"step": s["step"], "exp_avg": T.zeros(3, dtype=T.float64),
                  "exp_avg_sq": s["exp_avg_sq"] * 0.5}


def _assign_momentum(T, p, q, o):
    o.state[q] = {"momentum_buffer": T.tensor([[1.0, -1.0]], dtype=T.float64)}


@pytest.mark.parametrize("opt,edit", [("Adam", _del), ("Adam", _assign_empty), ("Adam", _clear),
                                      ("Adam", _assign_entries), ("SGD", _del),
                                      ("SGD", _clear), ("SGD", _assign_momentum)])
def test_state_edits_change_the_next_steps_as_in_torch(opt, edit):
    want = _edit_run(torch, edit, opt)
    got = _edit_run(vt, edit, opt)
    for w, g in zip(want[:2], got[:2]):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)
    assert got[2:] == want[2:]


@pytest.mark.parametrize("T", [torch, vt], ids=["torch", "vm.torch"])
def test_state_is_a_mutable_mapping_keyed_by_the_parameters(T):
    import collections.abc
    p, q, o = _setup(T)
    assert isinstance(o.state, collections.abc.MutableMapping)
    assert len(o.state) == 0 and p not in o.state and o.state.get(p) is None
    assert len(o.state) == 0                          # get() does not create
    _step(T, p, q, o, 0)
    keys = list(o.state)
    assert len(keys) == 2 and keys[0] is p and keys[1] is q
    assert [k is v for k, v in zip(o.state.keys(), (p, q))] == [True, True]
    del o.state[p]
    assert p not in o.state and list(o.state)[0] is q and len(o.state) == 1
    with pytest.raises(KeyError):
        del o.state[p]
    o.state[p] = {}
    assert p in o.state and len(o.state[p]) == 0
    o.state.clear()
    assert len(o.state) == 0 and list(o.state) == []
    _step(T, p, q, o, 1)                               # state made anew
    assert float(o.state[p]["step"]) == 1.0
    extra = T.nn.Parameter(T.zeros(2))
    o.state[extra]["mine"] = T.ones(2)                  # torch's state is a defaultdict
    assert list(o.state)[-1] is extra
