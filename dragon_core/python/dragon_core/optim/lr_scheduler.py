"""Learning-rate schedulers (PyTorch-like names and arguments).

Each scheduler computes the learning rate of every parameter group from a
closed form of its epoch counter and the group's ``initial_lr`` (the ``lr``
the group had when the first scheduler was attached), and writes it to
``group["lr"]``; that also writes the group's lr tensor, so training steps
compiled with ``@dragon_core.function`` use the new value at their next run.

Because every scheduler sets the whole lr from its closed form, schedulers
are combined by :class:`SequentialLR` (one after the other), not by
stacking several on one optimizer. Warm-up followed by cosine decay::

    warmup = LinearLR(opt, start_factor=0.01, total_iters=100)
    cosine = CosineAnnealingLR(opt, T_max=900)
    sched = SequentialLR(opt, [warmup, cosine], milestones=[100])
"""

from __future__ import annotations

import bisect
import math

from .optimizer import Optimizer


class LRScheduler:
    """Base class: owns the epoch counter and writes the groups' lrs.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose groups' ``lr`` are scheduled.
    last_epoch : int, default -1
        The index of the last epoch (-1 to start afresh; otherwise every
        group must already hold ``initial_lr``).

    Notes
    -----
    Subclasses implement ``lr_at(group_index, base_lr, epoch)``. The
    constructor takes the first step, setting the lrs of epoch
    ``last_epoch + 1``.
    """

    def __init__(self, optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: expected an Optimizer, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(f"{type(self).__name__}: param group {i} has no "
                                   f"'initial_lr'; resuming with last_epoch={last_epoch} needs "
                                   f"the optimizer state of the run being resumed")
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = int(last_epoch)
        self._last_lr = [group["lr"] for group in optimizer.param_groups]
        self.step()

    def lr_at(self, group_index: int, base_lr: float, epoch: int) -> float:
        """The learning rate of group ``group_index`` at ``epoch``."""
        raise NotImplementedError

    def get_lr(self) -> list:
        """The learning rates of the current epoch (one per group)."""
        return [self.lr_at(i, base, self.last_epoch) for i, base in enumerate(self.base_lrs)]

    def get_last_lr(self) -> list:
        """The learning rates the last :meth:`step` set (one per group)."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance to the next epoch (or jump to ``epoch``) and set the lrs."""
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        lrs = self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, lrs):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def state_dict(self) -> dict:
        """The scheduler's counters and settings (no optimizer, no
        functions)."""
        return {k: v for k, v in self.__dict__.items()
                if k != "optimizer" and not callable(v) and not k.startswith("_fn")}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict` and set the groups' lrs to the ones
        its last step set (so the order in which the optimizer and the
        scheduler are restored does not matter)."""
        self.__dict__.update(state_dict)
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr


class LambdaLR(LRScheduler):
    """``lr = initial_lr * lr_lambda(epoch)``.

    Parameters
    ----------
    optimizer : Optimizer
    lr_lambda : callable or list of callable
        ``epoch -> factor``, one for all groups or one per group.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, lr_lambda, last_epoch: int = -1):
        n = len(optimizer.param_groups)
        fns = list(lr_lambda) if isinstance(lr_lambda, (list, tuple)) else [lr_lambda] * n
        if len(fns) != n or not all(callable(f) for f in fns):
            raise ValueError(f"LambdaLR: expected one callable or {n} (one per group), got "
                             f"{lr_lambda!r}")
        self._fn_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        return base_lr * self._fn_lambdas[group_index](epoch)


class StepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (epoch // step_size)``.

    Parameters
    ----------
    optimizer : Optimizer
    step_size : int
        Epochs between decays (> 0).
    gamma : float, default 0.1
        Decay factor.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if int(step_size) <= 0:
            raise ValueError(f"StepLR: step_size must be > 0, got {step_size}")
        self.step_size = int(step_size)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        return base_lr * self.gamma ** (epoch // self.step_size)


class MultiStepLR(LRScheduler):
    """``lr = initial_lr * gamma ** (number of milestones <= epoch)``.

    Parameters
    ----------
    optimizer : Optimizer
    milestones : sequence of int
        Epochs at which the lr decays (a repeated milestone decays twice).
    gamma : float, default 0.1
        Decay factor.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = sorted(int(m) for m in milestones)
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        return base_lr * self.gamma ** bisect.bisect_right(self.milestones, epoch)


class ExponentialLR(LRScheduler):
    """``lr = initial_lr * gamma ** epoch``.

    Parameters
    ----------
    optimizer : Optimizer
    gamma : float
        Decay factor per epoch.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        return base_lr * self.gamma ** epoch


class CosineAnnealingLR(LRScheduler):
    """``lr = eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch /
    T_max)) / 2`` (half a cosine period over ``T_max`` epochs, no restarts;
    past ``T_max`` the cosine continues, as PyTorch's).

    Parameters
    ----------
    optimizer : Optimizer
    T_max : int
        Epochs from the initial lr down to ``eta_min`` (> 0).
    eta_min : float, default 0
        The smallest lr.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, T_max: int, eta_min: float = 0.0,  # noqa: N803
                 last_epoch: int = -1):
        if int(T_max) <= 0:
            raise ValueError(f"CosineAnnealingLR: T_max must be > 0, got {T_max}")
        self.T_max = int(T_max)
        self.eta_min = float(eta_min)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        cos = math.cos(math.pi * epoch / self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1.0 + cos) / 2.0


class LinearLR(LRScheduler):
    """Linear change of the lr factor from ``start_factor`` to
    ``end_factor`` over ``total_iters`` epochs, then constant (a linear
    warm-up when ``start_factor < end_factor = 1``):
    ``lr = initial_lr * (start + (end - start) * min(epoch, total_iters) /
    total_iters)``.

    Parameters
    ----------
    optimizer : Optimizer
    start_factor : float, default 1/3
        Factor at epoch 0, in (0, 1].
    end_factor : float, default 1
        Factor from epoch ``total_iters`` on, in [0, 1].
    total_iters : int, default 5
        Length of the ramp (> 0).
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, start_factor: float = 1.0 / 3, end_factor: float = 1.0,
                 total_iters: int = 5, last_epoch: int = -1):
        if not 0 < start_factor <= 1:
            raise ValueError(f"LinearLR: start_factor must be in (0, 1], got {start_factor}")
        if not 0 <= end_factor <= 1:
            raise ValueError(f"LinearLR: end_factor must be in [0, 1], got {end_factor}")
        if int(total_iters) <= 0:
            raise ValueError(f"LinearLR: total_iters must be > 0, got {total_iters}")
        self.start_factor = float(start_factor)
        self.end_factor = float(end_factor)
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        t = min(max(epoch, 0), self.total_iters) / self.total_iters
        return base_lr * (self.start_factor + (self.end_factor - self.start_factor) * t)


class SequentialLR(LRScheduler):
    """Runs schedulers one after another: scheduler ``i`` takes over at
    ``milestones[i - 1]`` and sees epochs counted from there.

    Parameters
    ----------
    optimizer : Optimizer
    schedulers : sequence of LRScheduler
        Schedulers of this optimizer (their own steps are never needed).
    milestones : sequence of int
        Increasing epochs where the next scheduler starts;
        ``len(schedulers) - 1`` of them.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, schedulers, milestones, last_epoch: int = -1):
        schedulers = list(schedulers)
        milestones = [int(m) for m in milestones]
        if not schedulers:
            raise ValueError("SequentialLR: needs at least one scheduler")
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need "
                             f"{len(schedulers) - 1} milestones, got {len(milestones)}")
        if milestones != sorted(milestones):
            raise ValueError(f"SequentialLR: milestones must increase, got {milestones}")
        for i, s in enumerate(schedulers):
            if not isinstance(s, LRScheduler) or s.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} is not a scheduler of this "
                                 f"optimizer")
        self._schedulers = schedulers
        self.milestones = milestones
        super().__init__(optimizer, last_epoch)

    def lr_at(self, group_index, base_lr, epoch):
        i = bisect.bisect_right(self.milestones, epoch)
        start = self.milestones[i - 1] if i else 0
        return self._schedulers[i].lr_at(group_index, base_lr, epoch - start)

    def state_dict(self) -> dict:
        out = super().state_dict()
        out.pop("_schedulers", None)
        out["schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        subs = state_dict.pop("schedulers", [])
        if len(subs) != len(self._schedulers):
            raise ValueError(f"SequentialLR.load_state_dict: {len(subs)} scheduler states "
                             f"for {len(self._schedulers)} schedulers")
        for s, sd in zip(self._schedulers, subs):
            s.load_state_dict(sd)
        super().load_state_dict(state_dict)
