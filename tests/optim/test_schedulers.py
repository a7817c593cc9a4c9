"""Learning-rate schedulers: lr sequences against closed forms, the groups'
lr tensors, state_dict, SequentialLR and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dragon_core as dg
import dragon_core.optim as optim
from dragon_core.optim import lr_scheduler as lrs

EPOCHS = 25


def _opt(lr=0.1, second_lr=None):
    a = dg.tensor(np.ones(2)).requires_grad_()
    groups = [{"params": [a]}]
    if second_lr is not None:
        groups.append({"params": [dg.tensor(np.ones(2)).requires_grad_()], "lr": second_lr})
    return optim.SGD(groups, lr=lr, momentum=0.9)


def _sequence(sched, n=EPOCHS):
    """lrs of epochs 0..n-1 (the constructor sets epoch 0), per group."""
    out = [sched.get_last_lr()]
    for _ in range(n - 1):
        sched.step()
        out.append(sched.get_last_lr())
    return np.array(out)


CLOSED_FORMS = [
    ("step", lambda o: lrs.StepLR(o, step_size=4, gamma=0.5),
     lambda base, e: base * 0.5 ** (e // 4)),
    ("multistep", lambda o: lrs.MultiStepLR(o, milestones=[10, 3, 10], gamma=0.1),
     lambda base, e: base * 0.1 ** ((e >= 3) + 2 * (e >= 10))),
    ("exponential", lambda o: lrs.ExponentialLR(o, gamma=0.9),
     lambda base, e: base * 0.9 ** e),
    ("cosine", lambda o: lrs.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
     lambda base, e: 0.001 + (base - 0.001) * (1 + math.cos(math.pi * e / 10)) / 2),
    ("linear", lambda o: lrs.LinearLR(o, start_factor=0.2, end_factor=1.0, total_iters=8),
     lambda base, e: base * (0.2 + 0.8 * min(e, 8) / 8)),
    ("lambda", lambda o: lrs.LambdaLR(o, lambda e: 1.0 / (1 + e)),
     lambda base, e: base / (1 + e)),
    ("sequential_warmup_cosine",
     lambda o: lrs.SequentialLR(o, [lrs.LinearLR(o, start_factor=0.1, total_iters=5),
                                    lrs.CosineAnnealingLR(o, T_max=15)], milestones=[5]),
     lambda base, e: (base * (0.1 + 0.9 * e / 5) if e < 5 else
                      base * (1 + math.cos(math.pi * (e - 5) / 15)) / 2)),
]


@pytest.mark.parametrize("name, make, closed", CLOSED_FORMS, ids=[c[0] for c in CLOSED_FORMS])
def test_lr_sequence_matches_closed_form(name, make, closed):
    opt = _opt(lr=0.1, second_lr=0.03)
    sched = make(opt)
    got = _sequence(sched)
    want = np.array([[closed(0.1, e), closed(0.03, e)] for e in range(EPOCHS)])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)
    # The groups and the lr tensors the update ops read hold the last value.
    for group, lr in zip(opt.param_groups, got[-1]):
        assert group["lr"] == lr
        assert group.lr_tensor.item() == lr


def test_scheduled_lr_drives_the_updates():
    a = dg.tensor(np.zeros(1)).requires_grad_()
    opt = optim.SGD([a], lr=1.0)
    sched = lrs.StepLR(opt, step_size=1, gamma=0.5)
    for _ in range(4):
        opt.step([dg.tensor(np.ones(1))])
        sched.step()
    np.testing.assert_allclose(a.numpy(), [-(1 + 0.5 + 0.25 + 0.125)])


def test_state_dict_round_trip():
    opt = _opt()
    sched = lrs.CosineAnnealingLR(opt, T_max=10)
    for _ in range(4):
        sched.step()
    sd, osd = sched.state_dict(), opt.state_dict()
    assert sd["last_epoch"] == 4 and "optimizer" not in sd
    opt2 = _opt()
    opt2.load_state_dict(osd)
    sched2 = lrs.CosineAnnealingLR(opt2, T_max=10)
    sched2.load_state_dict(sd)
    assert opt2.param_groups[0]["lr"] == opt.param_groups[0]["lr"]
    for _ in range(3):
        sched.step()
        sched2.step()
        assert sched2.get_last_lr() == sched.get_last_lr()


def test_sequential_state_dict_round_trip():
    def make(o):
        return lrs.SequentialLR(o, [lrs.LinearLR(o, 0.5, total_iters=2),
                                    lrs.StepLR(o, 2)], milestones=[2])
    opt = _opt()
    sched = make(opt)
    for _ in range(3):
        sched.step()
    sd = sched.state_dict()
    assert len(sd["_schedulers"]) == 2     # torch's key
    opt2 = _opt()
    opt2.load_state_dict(opt.state_dict())
    sched2 = make(opt2)
    sched2.load_state_dict(sd)
    for _ in range(4):
        sched.step()
        sched2.step()
        assert sched2.get_last_lr() == sched.get_last_lr()


def test_resume_with_last_epoch():
    """Resuming continues from the lr of the loaded optimizer state (as in
    torch: the schedulers are chainable)."""
    opt = _opt(lr=0.2)
    sched = lrs.StepLR(opt, step_size=2)
    for _ in range(4):
        opt.step([None])
        sched.step()
    opt2 = _opt(lr=0.2)
    opt2.load_state_dict(opt.state_dict())
    resumed = lrs.StepLR(opt2, step_size=2, last_epoch=4)
    assert resumed.last_epoch == 5
    assert resumed.get_last_lr() == pytest.approx([0.2 * 0.1 ** 2])
    resumed.step()
    assert resumed.get_last_lr() == pytest.approx([0.2 * 0.1 ** 3])


def test_step_to_an_explicit_epoch():
    sched = lrs.ExponentialLR(_opt(lr=1.0), gamma=0.5)
    sched.step(3)
    assert sched.get_last_lr() == [0.125]


def test_bad_input():
    opt = _opt()
    with pytest.raises(TypeError, match="Optimizer"):
        lrs.StepLR(object(), step_size=1)
    with pytest.raises(ValueError, match="step_size"):
        lrs.StepLR(opt, step_size=0)
    with pytest.raises(ValueError, match="T_max"):
        lrs.CosineAnnealingLR(opt, T_max=0)
    with pytest.raises(ValueError, match="start_factor"):
        lrs.LinearLR(opt, start_factor=0.0)
    with pytest.raises(ValueError, match="milestones"):
        lrs.SequentialLR(opt, [lrs.StepLR(opt, 1), lrs.StepLR(opt, 1)], milestones=[])
    with pytest.raises(ValueError, match="not a scheduler of this optimizer"):
        lrs.SequentialLR(opt, [lrs.StepLR(_opt(), 1)], milestones=[])
    with pytest.raises(KeyError, match="initial_lr"):
        lrs.StepLR(_opt(), step_size=1, last_epoch=3)
    with pytest.raises(ValueError, match="one per group"):
        lrs.LambdaLR(_opt(second_lr=0.1), [lambda e: 1.0])
