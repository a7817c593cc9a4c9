"""``torch.optim.lr_scheduler`` over ``dragon_core.optim.lr_scheduler``
(PyTorch's chainable behaviour: see that module's docstring)."""

from __future__ import annotations

from dragon_core.optim import lr_scheduler as _S

_SUPPORTED = ("LambdaLR", "MultiplicativeLR", "StepLR", "MultiStepLR", "ConstantLR", "LinearLR",
              "ExponentialLR", "PolynomialLR", "CosineAnnealingLR",
              "CosineAnnealingWarmRestarts", "OneCycleLR", "SequentialLR", "ChainedScheduler",
              "ReduceLROnPlateau")


def _impl_of(sched):
    impl = getattr(sched, "_impl", None)
    if impl is None:
        raise TypeError(f"expected a torch.optim.lr_scheduler scheduler, got "
                        f"{type(sched).__name__}")
    return impl


class _UserScheduler(_S.LRScheduler):
    """The native scheduler under a user's subclass of
    ``torch.optim.lr_scheduler.LRScheduler``: its ``get_lr`` is the
    subclass's (which reads ``last_epoch``, ``base_lrs`` and the groups
    through the handle)."""

    def get_lr(self):
        return self._owner.get_lr()


class LRScheduler:
    """A PyTorch scheduler: a handle over a ``dragon_core.optim`` one.

    Subclass it as in torch (override ``get_lr``, reading
    ``self.last_epoch``, ``self.base_lrs`` and
    ``self.optimizer.param_groups``) to write your own schedule."""

    _impl_cls = _UserScheduler

    def __init__(self, optimizer, *args, **kwargs):
        if kwargs.pop("verbose", False):
            raise NotImplementedError(f"{type(self).__name__}(verbose=True) is not supported "
                                      "(removed in PyTorch too); print get_last_lr() instead")
        self.optimizer = optimizer
        if self._impl_cls is _UserScheduler and type(self).get_lr is LRScheduler.get_lr:
            raise NotImplementedError(f"{type(self).__name__}: a subclass of LRScheduler must "
                                      "implement get_lr()")
        # The handle exists before the constructor's first step, which may
        # call a subclass's get_lr.
        impl = self._impl = self._impl_cls.__new__(self._impl_cls)
        if self._impl_cls is _UserScheduler:
            impl._owner = self
        impl.__init__(getattr(optimizer, "_impl", optimizer), *args, **kwargs)

    def step(self, *args, **kwargs):
        self._impl.step(*args, **kwargs)

    def get_last_lr(self):
        return self._impl.get_last_lr()

    def get_lr(self):
        return self._impl.get_lr()

    @property
    def last_epoch(self):
        return self._impl.last_epoch

    @last_epoch.setter
    def last_epoch(self, value):
        self._impl.last_epoch = value

    @property
    def base_lrs(self):
        return self._impl.base_lrs

    def state_dict(self):
        return self._impl.state_dict()

    def load_state_dict(self, state_dict):
        self._impl.load_state_dict(state_dict)


def _make(name):
    impl = getattr(_S, name)
    cls = type(name, (LRScheduler,), {"_impl_cls": impl, "__doc__": impl.__doc__})
    return cls


LambdaLR = _make("LambdaLR")
MultiplicativeLR = _make("MultiplicativeLR")
StepLR = _make("StepLR")
MultiStepLR = _make("MultiStepLR")
ConstantLR = _make("ConstantLR")
LinearLR = _make("LinearLR")
ExponentialLR = _make("ExponentialLR")
PolynomialLR = _make("PolynomialLR")
CosineAnnealingLR = _make("CosineAnnealingLR")
CosineAnnealingWarmRestarts = _make("CosineAnnealingWarmRestarts")
OneCycleLR = _make("OneCycleLR")
_LRScheduler = LRScheduler


class SequentialLR(LRScheduler):
    __doc__ = _S.SequentialLR.__doc__

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1, verbose=False):
        self.optimizer = optimizer
        self._schedulers = list(schedulers)
        self._impl = _S.SequentialLR(getattr(optimizer, "_impl", optimizer),
                                     [_impl_of(s) for s in self._schedulers], milestones,
                                     last_epoch)


class ChainedScheduler(LRScheduler):
    __doc__ = _S.ChainedScheduler.__doc__

    def __init__(self, schedulers, optimizer=None):
        self._schedulers = list(schedulers)
        self.optimizer = optimizer or self._schedulers[0].optimizer
        self._impl = _S.ChainedScheduler([_impl_of(s) for s in self._schedulers],
                                         getattr(self.optimizer, "_impl", self.optimizer))

    @property
    def last_epoch(self):
        raise AttributeError("ChainedScheduler has no last_epoch (as in PyTorch)")


class ReduceLROnPlateau(LRScheduler):
    __doc__ = _S.ReduceLROnPlateau.__doc__
    _impl_cls = _S.ReduceLROnPlateau

    def step(self, metrics, epoch=None):
        self._impl.step(float(metrics), epoch)


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.optim.lr_scheduler.{name} is not supported; supported: "
                              + ", ".join(_SUPPORTED))
