"""Learning-rate schedulers with PyTorch's names, arguments and behaviour.

Each :meth:`~LRScheduler.step` computes the next learning rate of every
parameter group and writes it to ``group["lr"]``; that also writes the
group's lr tensor, so training steps compiled with ``@dragon_core.function``
use the new value at their next run.

As in PyTorch, most schedulers are *chainable*: a step scales the group's
**current** ``lr`` (``StepLR`` multiplies it by ``gamma`` at each boundary,
``CosineAnnealingLR`` moves it along the cosine from where it is), so

* an lr set by hand through ``param_groups`` between steps is where later
  steps start from;
* several schedulers stepped on one optimizer compose (their factors
  multiply), as does :class:`ChainedScheduler`;
* ``step(epoch)`` (deprecated in PyTorch, warned about) jumps with the
  closed form from ``initial_lr`` where the scheduler has one.

``LambdaLR``, ``CosineAnnealingWarmRestarts`` and ``OneCycleLR`` compute the
lr from the groups' ``initial_lr`` (their closed forms), as PyTorch's do.
Warm-up followed by cosine decay::

    warmup = LinearLR(opt, start_factor=0.01, total_iters=100)
    cosine = CosineAnnealingLR(opt, T_max=900)
    sched = SequentialLR(opt, [warmup, cosine], milestones=[100])
"""

from __future__ import annotations

import bisect
import collections
import math
import numbers
import warnings

from .optimizer import Optimizer

_ORDER_WARNING = (
    "Detected call of `lr_scheduler.step()` before `optimizer.step()`. Call them in the "
    "opposite order: `optimizer.step()` before `lr_scheduler.step()`; otherwise the first "
    "value of the learning-rate schedule is skipped (as in PyTorch).")
_EPOCH_WARNING = (
    "Passing an epoch to `lr_scheduler.step()` is deprecated (as in PyTorch): it jumps to the "
    "closed form of the schedule at that epoch. Call `step()` without arguments.")


def _lrs(optimizer) -> list:
    return [group["lr"] for group in optimizer.param_groups]


def _per_group(name: str, optimizer, value) -> list:
    """One value per group: a list/tuple of that length, or one value."""
    n = len(optimizer.param_groups)
    if isinstance(value, (list, tuple)):
        if len(value) != n:
            raise ValueError(f"{name}: expected one value or {n} (one per group), got "
                             f"{len(value)}")
        return list(value)
    return [value] * n


class LRScheduler:
    """Base class: owns the epoch counter and writes the groups' lrs.

    Parameters
    ----------
    optimizer : Optimizer
        The optimizer whose groups' ``lr`` are scheduled.
    last_epoch : int, default -1
        The index of the last epoch (-1 to start afresh; otherwise every
        group must already hold ``initial_lr``, as after loading the
        optimizer state of the run being resumed, whose ``lr`` the schedule
        continues from).

    Notes
    -----
    Subclasses implement :meth:`get_lr` (the lrs of epoch ``last_epoch``,
    usually from the groups' current lrs) and optionally
    ``_closed_form_lr`` (from ``base_lrs``, for ``step(epoch)``). The
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
        self._initial_step()

    def _initial_step(self) -> None:
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self) -> list:
        """The learning rates of epoch ``last_epoch`` (one per group)."""
        raise NotImplementedError

    def get_last_lr(self) -> list:
        """The learning rates the last :meth:`step` set (one per group)."""
        return list(self._last_lr)

    def step(self, epoch: int | None = None) -> None:
        """Advance to the next epoch and set the lrs.

        Parameters
        ----------
        epoch : int, optional
            Deprecated (a warning, as in PyTorch): jump to this epoch with
            the closed form where the scheduler has one.
        """
        if self._step_count == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn(_ORDER_WARNING, UserWarning, stacklevel=2)
        self._step_count += 1
        if epoch is not None:
            warnings.warn(_EPOCH_WARNING, UserWarning, stacklevel=2)
        self._update_lr(epoch)

    def _update_lr(self, epoch: int | None) -> None:
        if epoch is None:
            self.last_epoch += 1
            values = self.get_lr()
        else:
            self.last_epoch = int(epoch)
            closed = getattr(self, "_closed_form_lr", None)
            values = closed() if closed is not None else self.get_lr()
        for group, lr in zip(self.optimizer.param_groups, values):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict:
        """The scheduler's counters and settings (no optimizer, no
        functions)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("optimizer", "_owner") and not callable(v)
                and not k.startswith("_fn")}

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

    def get_lr(self):
        return [base * fn(self.last_epoch) for fn, base in zip(self._fn_lambdas, self.base_lrs)]


class MultiplicativeLR(LRScheduler):
    """Each step multiplies the lr by ``lr_lambda(epoch)``.

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
            raise ValueError(f"MultiplicativeLR: expected one callable or {n} (one per group), "
                             f"got {lr_lambda!r}")
        self._fn_lambdas = fns
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [g["lr"] * fn(self.last_epoch)
                for fn, g in zip(self._fn_lambdas, self.optimizer.param_groups)]


class StepLR(LRScheduler):
    """Multiplies the lr by ``gamma`` every ``step_size`` epochs (from
    ``initial_lr``: ``initial_lr * gamma ** (epoch // step_size)``).

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
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size)
                for base in self.base_lrs]


class MultiStepLR(LRScheduler):
    """Multiplies the lr by ``gamma`` at each milestone (twice at a
    milestone given twice).

    Parameters
    ----------
    optimizer : Optimizer
    milestones : sequence of int
        Epochs at which the lr decays.
    gamma : float, default 0.1
        Decay factor.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, milestones, gamma: float = 0.1, last_epoch: int = -1):
        self.milestones = collections.Counter(int(m) for m in milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return _lrs(self.optimizer)
        return [lr * self.gamma ** self.milestones[self.last_epoch]
                for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        ms = sorted(self.milestones.elements())
        return [base * self.gamma ** bisect.bisect_right(ms, self.last_epoch)
                for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """Multiplies the lr by ``factor`` until epoch ``total_iters``, then
    restores it.

    Parameters
    ----------
    optimizer : Optimizer
    factor : float, default 1/3
        In [0, 1].
    total_iters : int, default 5
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, factor: float = 1.0 / 3, total_iters: int = 5,
                 last_epoch: int = -1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be in [0, 1], got {factor}")
        self.factor = factor
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.factor for lr in _lrs(self.optimizer)]
        if self.last_epoch != self.total_iters:
            return _lrs(self.optimizer)
        return [lr * (1.0 / self.factor) for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        done = self.last_epoch >= self.total_iters
        return [base * (self.factor + done * (1 - self.factor)) for base in self.base_lrs]


class LinearLR(LRScheduler):
    """Moves the lr factor linearly from ``start_factor`` to ``end_factor``
    over ``total_iters`` epochs, then keeps it (a linear warm-up when
    ``start_factor < end_factor = 1``).

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
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [lr * self.start_factor for lr in _lrs(self.optimizer)]
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        delta = self.end_factor - self.start_factor
        ratio = 1.0 + delta / (self.total_iters * self.start_factor
                               + (self.last_epoch - 1) * delta)
        return [lr * ratio for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        t = min(self.total_iters, self.last_epoch)
        return [base * (self.start_factor + (self.end_factor - self.start_factor) * t
                        / self.total_iters) for base in self.base_lrs]


class ExponentialLR(LRScheduler):
    """Multiplies the lr by ``gamma`` every epoch.

    Parameters
    ----------
    optimizer : Optimizer
    gamma : float
        Decay factor per epoch.
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return _lrs(self.optimizer)
        return [lr * self.gamma for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """``lr = initial_lr * (1 - min(epoch, total_iters) / total_iters) **
    power`` (applied as a factor on the current lr each step).

    Parameters
    ----------
    optimizer : Optimizer
    total_iters : int, default 5
    power : float, default 1
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, total_iters: int = 5, power: float = 1.0,
                 last_epoch: int = -1):
        if int(total_iters) <= 0:
            raise ValueError(f"PolynomialLR: total_iters must be > 0, got {total_iters}")
        self.total_iters = int(total_iters)
        self.power = power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial or self.last_epoch > self.total_iters:
            return _lrs(self.optimizer)
        t, n = self.last_epoch, self.total_iters
        factor = ((1.0 - t / n) / (1.0 - (t - 1) / n)) ** self.power
        return [lr * factor for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        t = min(self.total_iters, self.last_epoch)
        return [base * (1.0 - t / self.total_iters) ** self.power for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """Half a cosine period from ``initial_lr`` down to ``eta_min`` over
    ``T_max`` epochs (no restarts; past ``T_max`` the cosine continues):
    ``eta_min + (initial_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2``,
    applied step by step to the current lr.

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
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        e, t, lo = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return _lrs(self.optimizer)
        if self._step_count == 1 and e > 0:
            return [lo + (base - lo) * (1 + math.cos(e * math.pi / t)) / 2
                    for base in self.base_lrs]
        if (e - 1 - t) % (2 * t) == 0:
            # The trough: the ratio below would divide by zero.
            return [lr + (base - lo) * (1 - math.cos(math.pi / t)) / 2
                    for base, lr in zip(self.base_lrs, _lrs(self.optimizer))]
        ratio = (1 + math.cos(math.pi * e / t)) / (1 + math.cos(math.pi * (e - 1) / t))
        return [ratio * (lr - lo) + lo for lr in _lrs(self.optimizer)]

    def _closed_form_lr(self):
        cos = math.cos(math.pi * self.last_epoch / self.T_max)
        return [self.eta_min + (base - self.eta_min) * (1 + cos) / 2 for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """Cosine annealing from ``initial_lr`` to ``eta_min`` over ``T_0``
    epochs, then restarts, each period ``T_mult`` times the last.

    Parameters
    ----------
    optimizer : Optimizer
    T_0 : int
        Length of the first period (> 0).
    T_mult : int, default 1
        Growth of the period after each restart (>= 1).
    eta_min : float, default 0
    last_epoch : int, default -1
    """

    def __init__(self, optimizer, T_0: int, T_mult: int = 1,  # noqa: N803
                 eta_min: float = 0.0, last_epoch: int = -1):
        if not isinstance(T_0, numbers.Integral) or T_0 <= 0:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_0 must be a positive int, got "
                             f"{T_0!r}")
        if not isinstance(T_mult, numbers.Integral) or T_mult < 1:
            raise ValueError(f"CosineAnnealingWarmRestarts: T_mult must be an int >= 1, got "
                             f"{T_mult!r}")
        self.T_0 = self.T_i = int(T_0)
        self.T_mult = int(T_mult)
        self.eta_min = eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        cos = math.cos(math.pi * self.T_cur / self.T_i)
        return [self.eta_min + (base - self.eta_min) * (1 + cos) / 2 for base in self.base_lrs]

    def step(self, epoch=None) -> None:
        """Advance one epoch, or (fractional epochs allowed) jump to
        ``epoch``."""
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        else:
            if epoch < 0:
                raise ValueError(f"CosineAnnealingWarmRestarts: epoch must be >= 0, got "
                                 f"{epoch}")
            if epoch >= self.T_0:
                if self.T_mult == 1:
                    self.T_cur = epoch % self.T_0
                else:
                    n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
                    self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
                    self.T_i = self.T_0 * self.T_mult ** n
            else:
                self.T_i = self.T_0
                self.T_cur = epoch
        self._step_count += 1
        self.last_epoch = math.floor(epoch)
        for group, lr in zip(self.optimizer.param_groups, self.get_lr()):
            group["lr"] = lr
        self._last_lr = _lrs(self.optimizer)


class OneCycleLR(LRScheduler):
    """The 1cycle policy: the lr rises from ``max_lr / div_factor`` to
    ``max_lr`` over ``pct_start`` of ``total_steps``, then falls to
    ``initial_lr / final_div_factor`` (with ``three_phase``, back to the
    initial lr first); momentum (or Adam's beta1) cycles the other way
    when ``cycle_momentum``.

    Parameters
    ----------
    optimizer : Optimizer
    max_lr : float or list of float
    total_steps : int, optional
        Or ``epochs * steps_per_epoch``.
    epochs, steps_per_epoch : int, optional
    pct_start : float, default 0.3
    anneal_strategy : {'cos', 'linear'}, default 'cos'
    cycle_momentum : bool, default True
    base_momentum, max_momentum : float or list of float, default 0.85, 0.95
    div_factor : float, default 25
    final_div_factor : float, default 1e4
    three_phase : bool, default False
    last_epoch : int, default -1

    Notes
    -----
    The momentum is an attribute of the compiled update ops: a step
    compiled with ``@dragon_core.function`` keeps the momentum it was traced
    with (the lr it follows); use ``cycle_momentum=False`` there.
    """

    def __init__(self, optimizer, max_lr, total_steps: int | None = None,
                 epochs: int | None = None, steps_per_epoch: int | None = None,
                 pct_start: float = 0.3, anneal_strategy: str = "cos",
                 cycle_momentum: bool = True, base_momentum=0.85, max_momentum=0.95,
                 div_factor: float = 25.0, final_div_factor: float = 1e4,
                 three_phase: bool = False, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"OneCycleLR: expected an Optimizer, got {type(optimizer).__name__}")
        if total_steps is not None:
            if not isinstance(total_steps, numbers.Integral) or total_steps <= 0:
                raise ValueError(f"OneCycleLR: total_steps must be a positive int, got "
                                 f"{total_steps!r}")
            self.total_steps = int(total_steps)
        elif epochs is not None and steps_per_epoch is not None:
            for name, v in (("epochs", epochs), ("steps_per_epoch", steps_per_epoch)):
                if not isinstance(v, numbers.Integral) or v <= 0:
                    raise ValueError(f"OneCycleLR: {name} must be a positive int, got {v!r}")
            self.total_steps = int(epochs) * int(steps_per_epoch)
        else:
            raise ValueError("OneCycleLR: give total_steps, or epochs and steps_per_epoch")
        if not isinstance(pct_start, float) or not 0 <= pct_start <= 1:
            raise ValueError(f"OneCycleLR: pct_start must be a float in [0, 1], got "
                             f"{pct_start!r}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"OneCycleLR: anneal_strategy must be 'cos' or 'linear', got "
                             f"{anneal_strategy!r}")
        self.anneal_strategy = anneal_strategy
        n = self.total_steps
        up = float(pct_start * n) - 1
        if three_phase:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * n) - 2, "max_lr", "initial_lr",
                             "base_momentum", "max_momentum"),
                            (n - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(up, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (n - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        max_lrs = _per_group("OneCycleLR max_lr", optimizer, max_lr)
        if last_epoch == -1:
            for top, group in zip(max_lrs, optimizer.param_groups):
                group["initial_lr"] = top / div_factor
                group["max_lr"] = top
                group["min_lr"] = group["initial_lr"] / final_div_factor
        self.cycle_momentum = bool(cycle_momentum)
        if self.cycle_momentum:
            if "momentum" not in optimizer.defaults and "betas" not in optimizer.defaults:
                raise ValueError(f"OneCycleLR: cycle_momentum needs an optimizer with momentum "
                                 f"or betas, {type(optimizer).__name__} has neither "
                                 f"(pass cycle_momentum=False)")
            self.use_beta1 = "betas" in optimizer.defaults
            tops = _per_group("OneCycleLR max_momentum", optimizer, max_momentum)
            bases = _per_group("OneCycleLR base_momentum", optimizer, base_momentum)
            if last_epoch == -1:
                for top, base, group in zip(tops, bases, optimizer.param_groups):
                    if self.use_beta1:
                        group["betas"] = (top, *group["betas"][1:])
                    else:
                        group["momentum"] = top
                    group["max_momentum"] = top
                    group["base_momentum"] = base
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        t = self.last_epoch
        if t > self.total_steps:
            raise ValueError(f"OneCycleLR: stepped {t} times, more than total_steps="
                             f"{self.total_steps}")
        lrs = []
        for group in self.optimizer.param_groups:
            start = 0.0
            for i, (end, lr0, lr1, m0, m1) in enumerate(self._phases):
                if t <= end or i == len(self._phases) - 1:
                    pct = (t - start) / (end - start)
                    lr = self._anneal(group[lr0], group[lr1], pct)
                    mom = self._anneal(group[m0], group[m1], pct) if self.cycle_momentum \
                        else None
                    break
                start = end
            lrs.append(lr)
            if self.cycle_momentum:
                if self.use_beta1:
                    group["betas"] = (mom, *group["betas"][1:])
                else:
                    group["momentum"] = mom
        return lrs


class SequentialLR(LRScheduler):
    """Runs schedulers one after another: at ``milestones[i - 1]`` scheduler
    ``i`` takes over, restarting its schedule from the groups'
    ``initial_lr``.

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
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"SequentialLR: scheduler {i} is a ReduceLROnPlateau, whose "
                                 f"step needs a metric")
            if not isinstance(s, LRScheduler) or s.optimizer is not optimizer:
                raise ValueError(f"SequentialLR: scheduler {i} is not a scheduler of this "
                                 f"optimizer")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"SequentialLR: expected an Optimizer, got "
                            f"{type(optimizer).__name__}")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._milestones = milestones
        self.last_epoch = int(last_epoch) + 1
        self._step_count = 0
        self._is_initial = False
        for group in optimizer.param_groups:
            group["lr"] = group["initial_lr"]
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        # The schedulers' constructors each took a first step: undo their
        # counters, then let the first one take its first step again.
        self._undo(self)
        idx = bisect.bisect_right(milestones, 0)
        schedulers[idx]._initial_step()
        self._last_lr = schedulers[idx].get_last_lr()

    @property
    def milestones(self) -> list:
        return list(self._milestones)

    def _undo(self, sched) -> None:
        subs = getattr(sched, "_schedulers", None)
        if subs is not None:
            for s in subs:
                self._undo(s)
        elif hasattr(sched, "last_epoch"):
            sched.last_epoch -= 1

    def step(self, epoch=None) -> None:
        if epoch is not None:
            raise TypeError("SequentialLR.step() takes no epoch (as in PyTorch)")
        self.last_epoch += 1
        idx = bisect.bisect_right(self._milestones, self.last_epoch)
        sched = self._schedulers[idx]
        if idx > 0 and self._milestones[idx - 1] == self.last_epoch:
            sched._update_lr(0)
        else:
            sched.step()
        self._last_lr = sched.get_last_lr()

    def state_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers", None)
        if subs is None:
            subs = state_dict.pop("schedulers", [])
        if len(subs) != len(self._schedulers):
            raise ValueError(f"SequentialLR.load_state_dict: {len(subs)} scheduler states "
                             f"for {len(self._schedulers)} schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, subs):
            s.load_state_dict(sd)
        for group, lr in zip(self.optimizer.param_groups, self._last_lr):
            group["lr"] = lr


class ChainedScheduler(LRScheduler):
    """Steps several schedulers of one optimizer together, so their effects
    compose (each scales the lr the previous one left).

    Parameters
    ----------
    schedulers : sequence of LRScheduler
    optimizer : Optimizer, optional
        Defaults to the first scheduler's.
    """

    def __init__(self, schedulers, optimizer=None):
        schedulers = list(schedulers)
        if not schedulers:
            raise ValueError("ChainedScheduler: needs at least one scheduler")
        optimizer = optimizer or schedulers[0].optimizer
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                raise ValueError(f"ChainedScheduler: scheduler {i} is a ReduceLROnPlateau, "
                                 f"whose step needs a metric")
            if not isinstance(s, LRScheduler) or s.optimizer is not optimizer:
                raise ValueError(f"ChainedScheduler: scheduler {i} is not a scheduler of this "
                                 f"optimizer")
        self.optimizer = optimizer
        self._schedulers = schedulers
        self._last_lr = _lrs(optimizer)

    def step(self, epoch=None) -> None:
        if epoch is not None:
            raise TypeError("ChainedScheduler.step() takes no epoch (as in PyTorch)")
        for s in self._schedulers:
            s.step()
        self._last_lr = _lrs(self.optimizer)

    def state_dict(self) -> dict:
        out = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "_schedulers")}
        out["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return out

    def load_state_dict(self, state_dict: dict) -> None:
        state_dict = dict(state_dict)
        subs = state_dict.pop("_schedulers", [])
        if len(subs) != len(self._schedulers):
            raise ValueError(f"ChainedScheduler.load_state_dict: {len(subs)} scheduler states "
                             f"for {len(self._schedulers)} schedulers")
        self.__dict__.update(state_dict)
        for s, sd in zip(self._schedulers, subs):
            s.load_state_dict(sd)


class ReduceLROnPlateau:
    """Multiplies the lr by ``factor`` when a metric has not improved for
    ``patience`` epochs (``step(metric)``).

    Parameters
    ----------
    optimizer : Optimizer
    mode : {'min', 'max'}, default 'min'
    factor : float, default 0.1
        In (0, 1).
    patience : int, default 10
    threshold : float, default 1e-4
    threshold_mode : {'rel', 'abs'}, default 'rel'
        ``rel``: better means below ``best * (1 - threshold)`` (min) or
        above ``best * (1 + threshold)`` (max); ``abs``: beyond ``best -/+
        threshold``.
    cooldown : int, default 0
    min_lr : float or list of float, default 0
    eps : float, default 1e-8
        Changes smaller than this are ignored.
    """

    def __init__(self, optimizer, mode: str = "min", factor: float = 0.1, patience: int = 10,
                 threshold: float = 1e-4, threshold_mode: str = "rel", cooldown: int = 0,
                 min_lr=0.0, eps: float = 1e-8):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"ReduceLROnPlateau: expected an Optimizer, got "
                            f"{type(optimizer).__name__}")
        if not factor < 1.0:
            raise ValueError(f"ReduceLROnPlateau: factor must be < 1, got {factor}")
        if mode not in ("min", "max"):
            raise ValueError(f"ReduceLROnPlateau: mode must be 'min' or 'max', got {mode!r}")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError(f"ReduceLROnPlateau: threshold_mode must be 'rel' or 'abs', got "
                             f"{threshold_mode!r}")
        self.optimizer = optimizer
        self.factor = factor
        if isinstance(min_lr, (list, tuple)):
            self.default_min_lr = None
            self.min_lrs = _per_group("ReduceLROnPlateau min_lr", optimizer, list(min_lr))
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * len(optimizer.param_groups)
        self.mode, self.threshold, self.threshold_mode = mode, threshold, threshold_mode
        self.patience, self.cooldown, self.eps = patience, cooldown, eps
        self.last_epoch = 0
        self.best = math.inf if mode == "min" else -math.inf
        self.cooldown_counter = 0
        self.num_bad_epochs = 0
        self._last_lr = _lrs(optimizer)

    def _is_better(self, a: float) -> bool:
        best = self.best
        if self.mode == "min":
            return a < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                        else best - self.threshold)
        return a > (best * (self.threshold + 1.0) if self.threshold_mode == "rel"
                    else best + self.threshold)

    def step(self, metrics, epoch=None) -> None:
        """Record this epoch's metric and lower the lrs on a plateau."""
        current = float(metrics)
        if epoch is None:
            epoch = self.last_epoch + 1
        else:
            warnings.warn(_EPOCH_WARNING, UserWarning, stacklevel=2)
        self.last_epoch = epoch
        if self._is_better(current):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            groups = self.optimizer.param_groups
            if len(groups) != len(self.min_lrs):
                if self.default_min_lr is None:
                    raise RuntimeError(f"ReduceLROnPlateau: the optimizer has {len(groups)} "
                                       f"param groups, min_lr gave {len(self.min_lrs)}")
                self.min_lrs = [self.default_min_lr] * len(groups)
            for group, lo in zip(groups, self.min_lrs):
                old = float(group["lr"])
                new = max(old * self.factor, lo)
                if old - new > self.eps:
                    group["lr"] = new
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = _lrs(self.optimizer)

    def get_last_lr(self) -> list:
        return list(self._last_lr)

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
