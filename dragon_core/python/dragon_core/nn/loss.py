"""Loss layers (each wraps one loss op; see ``functional``)."""

from __future__ import annotations

from . import functional as F
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        super().__init__()
        self.reduction = F._reduction(reduction, type(self).__name__)

    def extra_repr(self) -> str:
        return f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """Softmax cross-entropy of logits ``[N, C, *]`` and class indices ``[N, *]``."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"CrossEntropyLoss: label_smoothing must be in [0, 1], got "
                             f"{label_smoothing}")
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        return F.cross_entropy(input, target, self.ignore_index, self.reduction,
                               self.label_smoothing)


class NLLLoss(_Loss):
    """Negative log-likelihood of log-probabilities."""

    def __init__(self, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.ignore_index, self.reduction)


class MSELoss(_Loss):
    """Mean squared error."""

    def forward(self, input, target):
        return F.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    """Mean absolute error."""

    def forward(self, input, target):
        return F.l1_loss(input, target, self.reduction)


class SmoothL1Loss(_Loss):
    """Huber-style loss: quadratic below ``beta``, linear above."""

    def __init__(self, reduction: str = "mean", beta: float = 1.0):
        super().__init__(reduction)
        self.beta = beta

    def forward(self, input, target):
        return F.smooth_l1_loss(input, target, self.reduction, self.beta)


class BCEWithLogitsLoss(_Loss):
    """Sigmoid + binary cross-entropy (stable), optional ``pos_weight``."""

    def __init__(self, reduction: str = "mean", pos_weight=None):
        super().__init__(reduction)
        self.pos_weight = pos_weight

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.reduction,
                                                  self.pos_weight)


class SigmoidFocalLoss(_Loss):
    """RetinaNet's focal loss on logits."""

    def __init__(self, alpha: float = 0.25, gamma: float = 2.0, reduction: str = "mean"):
        super().__init__(reduction)
        self.alpha, self.gamma = alpha, gamma

    def forward(self, input, target):
        return F.sigmoid_focal_loss(input, target, self.alpha, self.gamma, self.reduction)
