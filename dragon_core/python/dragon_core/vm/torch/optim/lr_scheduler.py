"""``torch.optim.lr_scheduler`` over ``dragon_core.optim.lr_scheduler``."""

from __future__ import annotations

from dragon_core.optim import lr_scheduler as _S


def _make(name):
    impl = getattr(_S, name)

    class Sched:
        def __init__(self, optimizer, *args, **kwargs):
            kwargs.pop("verbose", None)
            self.optimizer = optimizer
            if name == "SequentialLR":
                kwargs["schedulers"] = [s._impl for s in kwargs.get("schedulers", args[0])]
                args = args[1:] if args else args
            self._impl = impl(optimizer._impl, *args, **kwargs)

        def step(self, epoch=None):
            self._impl.step(epoch) if epoch is not None else self._impl.step()

        def get_last_lr(self):
            return self._impl.get_last_lr()

        def get_lr(self):
            return self._impl.get_lr()

        @property
        def last_epoch(self):
            return self._impl.last_epoch

        def state_dict(self):
            return self._impl.state_dict()

        def load_state_dict(self, sd):
            self._impl.load_state_dict(sd)
    Sched.__name__ = Sched.__qualname__ = name
    Sched.__doc__ = impl.__doc__
    return Sched


LambdaLR = _make("LambdaLR")
StepLR = _make("StepLR")
MultiStepLR = _make("MultiStepLR")
ExponentialLR = _make("ExponentialLR")
CosineAnnealingLR = _make("CosineAnnealingLR")
LinearLR = _make("LinearLR")
SequentialLR = _make("SequentialLR")
LRScheduler = _S.LRScheduler


class ReduceLROnPlateau:
    """Lower the learning rate when a metric stops improving."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8, verbose=False):
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, patience
        self.threshold, self.threshold_mode, self.cooldown = threshold, threshold_mode, cooldown
        self.min_lrs = min_lr if isinstance(min_lr, list) else [min_lr] * len(
            optimizer.param_groups)
        self.eps, self.best, self.bad, self.cool = eps, None, 0, 0
        self.last_epoch = 0

    def _better(self, a):
        if self.best is None:
            return True
        if self.threshold_mode == "rel":
            d = self.best * self.threshold
        else:
            d = self.threshold
        return a < self.best - abs(d) if self.mode == "min" else a > self.best + abs(d)

    def step(self, metrics, epoch=None):
        m = float(metrics)
        self.last_epoch += 1
        if self._better(m):
            self.best, self.bad = m, 0
        else:
            self.bad += 1
        if self.cool > 0:
            self.cool -= 1
            self.bad = 0
        if self.bad > self.patience:
            for g, lo in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(g["lr"] * self.factor, lo)
                if g["lr"] - new > self.eps:
                    g["lr"] = new
            self.cool, self.bad = self.cooldown, 0

    def get_last_lr(self):
        return [g["lr"] for g in self.optimizer.param_groups]


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.optim.lr_scheduler.{name} is not supported; supported: "
                              "LambdaLR, StepLR, MultiStepLR, ExponentialLR, CosineAnnealingLR, "
                              "LinearLR, SequentialLR, ReduceLROnPlateau")
