"""The eager step count of the optimizers is incremented in place on the
host (torch's ``step_t += 1``) instead of one ``Add`` op per parameter and
step; values, counts and compiled steps are unchanged."""

import numpy as np
import pytest
import torch

import dragon_core as dg

SHAPES = [(4, 3), (3,), (2, 2)]


def _params():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def _loss_dg(ps):
    return sum(dg.ops.sum(p * p * (k + 1.0)) for k, p in enumerate(ps))


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adagrad"])
def test_eager_step_dispatches_no_add_per_parameter(name):
    ps = [dg.tensor(v).requires_grad_() for v in _params()]
    opt = getattr(dg.optim, name)(ps, lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        _loss_dg(ps).backward()
        with dg.profiler.profile() as prof:
            opt.step()
        assert prof.count("Add") == 0, [e.op for e in prof.events]


@pytest.mark.parametrize("name", ["Adam", "AdamW", "Adagrad"])
def test_values_and_counts_match_torch(name):
    vals = _params()
    ps = [dg.tensor(v).requires_grad_() for v in vals]
    tps = [torch.tensor(v, requires_grad=True) for v in vals]
    opt = getattr(dg.optim, name)(ps, lr=0.1)
    topt = getattr(torch.optim, name)(tps, lr=0.1)
    held = opt.state  # the count tensors are looked up after each step
    for step in range(1, 4):
        opt.zero_grad()
        _loss_dg(ps).backward()
        opt.step()
        topt.zero_grad()
        sum(((p * p) * (k + 1.0)).sum() for k, p in enumerate(tps)).backward()
        topt.step()
        for p, tp in zip(ps, tps):
            assert int(held[p]["step"].numpy()) == int(topt.state[tp]["step"]) == step
            np.testing.assert_allclose(p.numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_reference_to_the_count_sees_the_new_value():
    (v,) = _params()[:1]
    p = dg.tensor(v).requires_grad_()
    opt = dg.optim.Adam([p], lr=0.1)
    _loss_dg([p]).backward()
    opt.step()
    count = opt.state[p]["step"]
    opt.step()
    assert int(count.numpy()) == 2


def test_a_count_sharing_memory_is_not_written():
    (v,) = _params()[:1]
    p = dg.tensor(v).requires_grad_()
    opt = dg.optim.Adam([p], lr=0.1)
    _loss_dg([p]).backward()
    opt.step()
    view = opt.state[p]["step"].numpy()     # a NumPy view shares its memory
    opt.step()
    assert int(view) == 1
    assert int(opt.state[p]["step"].numpy()) == 2


def test_compiled_step_counts_as_eager():
    vals = _params()
    res = []
    for compiled in (False, True):
        ps = [dg.tensor(v).requires_grad_() for v in vals]
        opt = dg.optim.Adam(ps, lr=0.1)

        def step():
            opt.zero_grad()
            loss = _loss_dg(ps)
            loss.backward()
            opt.step()
            return loss
        fn = dg.function(step) if compiled else step
        for _ in range(3):
            fn()
        res.append(([int(opt.state[p]["step"].numpy()) for p in ps], [p.numpy() for p in ps]))
    assert res[0][0] == res[1][0] == [3, 3, 3]
    for a, b in zip(res[0][1], res[1][1]):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,op", [("Adam", "multi_adam_update"), ("Adam", "adam_update"),
                                     ("AdamW", "multi_adam_update"),
                                     ("Adagrad", "adagrad_update")])
def test_a_failed_update_leaves_the_counts_as_they_were(name, op, monkeypatch):
    """The in-place increment comes before the update kernel (which reads
    it); an update that raises takes it back, so the retried step uses the
    right bias correction and ends where an uninterrupted run does."""
    def run(fail_once):
        ps = [dg.tensor(v).requires_grad_() for v in _params()]
        kw = {"foreach": op == "multi_adam_update"} if name != "Adagrad" else {}
        opt = getattr(dg.optim, name)(ps, lr=0.1, **kw)
        for k in range(3):
            opt.zero_grad()
            _loss_dg(ps).backward()
            if fail_once and k == 1:
                real = getattr(dg.ops, op)

                def boom(*a, **kw):
                    raise RuntimeError("injected failure")
                monkeypatch.setattr(dg.ops, op, boom)
                with pytest.raises(RuntimeError, match="injected"):
                    opt.step()
                monkeypatch.setattr(dg.ops, op, real)
                assert [int(opt.state[p]["step"].numpy()) for p in ps] == [1, 1, 1]
            opt.step()
        return [p.numpy() for p in ps], [int(opt.state[p]["step"].numpy()) for p in ps]

    (want, want_steps), (got, got_steps) = run(False), run(True)
    assert got_steps == want_steps == [3, 3, 3]
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
