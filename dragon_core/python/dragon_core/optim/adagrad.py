"""Adagrad (one ``AdagradUpdate`` op per parameter)."""

from __future__ import annotations

from .optimizer import Optimizer


class Adagrad(Optimizer):
    """Adagrad (PyTorch's ``torch.optim.Adagrad`` rule).

    With ``t`` the step count (including this step): ``g = grad +
    weight_decay * p``; ``sum = sum + g^2``; ``p = p - lr / (1 + (t - 1) *
    lr_decay) * g / (sqrt(sum) + eps)``.

    Parameters
    ----------
    params : iterable of Tensor or iterable of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float, default 1e-2
        Learning rate.
    lr_decay : float, default 0
        Learning-rate decay per step.
    weight_decay : float, default 0
        L2 penalty added to the gradient.
    initial_accumulator_value : float, default 0
        Starting value of ``sum``.
    eps : float, default 1e-10
        Added to the denominator.
    maximize : bool, default False
        Ascend the objective instead of descending it.

    Notes
    -----
    State per parameter: ``step`` (0-d int64 tensor) and ``sum``.
    """

    _state_like_param = ("sum",)

    def __init__(self, params, lr: float = 1e-2, lr_decay: float = 0.0,
                 weight_decay: float = 0.0, initial_accumulator_value: float = 0.0,
                 eps: float = 1e-10, *, maximize: bool = False):
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value,
                                      eps=eps, maximize=maximize))

    def _check_hyper(self, group):
        super()._check_hyper(group)
        for key in ("lr_decay", "weight_decay", "initial_accumulator_value", "eps"):
            if group[key] < 0:
                raise ValueError(f"Adagrad: invalid {key} {group[key]} (must be >= 0)")

    def _update(self, group, params, grads):
        from .. import ops

        for p, g in zip(params, grads):
            lr = group.lr_tensor_for(p.device)
            state = self.state[p]
            if "step" not in state:
                state["step"] = self._step_tensor(p)
                state["sum"] = self._zeros_like(p, group["initial_accumulator_value"])
            step = self._next_step(state)
            try:
                new_p, new_sum = ops.adagrad_update(
                    p, g, state["sum"], lr, step, lr_decay=group["lr_decay"],
                    weight_decay=group["weight_decay"], eps=group["eps"],
                    maximize=group["maximize"])
            except BaseException:
                self._undo_step(state, step)     # a failed step keeps its count
                raise
            p.assign(new_p)
            state["sum"].assign(new_sum)
            state["step"].assign(step)
