"""RMSprop (one ``RmspropUpdate`` op per parameter)."""

from __future__ import annotations

from .optimizer import Optimizer


class RMSprop(Optimizer):
    """RMSprop (PyTorch's ``torch.optim.RMSprop`` rule).

    ``g = grad + weight_decay * p``; ``s = alpha * s + (1 - alpha) * g^2``;
    centered: ``a = alpha * a + (1 - alpha) * g`` and ``d = sqrt(s - a^2) +
    eps``, else ``d = sqrt(s) + eps``; with momentum ``buf = momentum * buf
    + g / d`` and ``p = p - lr * buf``, else ``p = p - lr * g / d``.

    Parameters
    ----------
    params : iterable of Tensor or iterable of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float, default 1e-2
        Learning rate.
    alpha : float, default 0.99
        Smoothing constant of the squared-gradient average.
    eps : float, default 1e-8
        Added to the denominator.
    weight_decay : float, default 0
        L2 penalty added to the gradient.
    momentum : float, default 0
        Momentum factor.
    centered : bool, default False
        Normalise by an estimate of the gradient's variance.
    maximize : bool, default False
        Ascend the objective instead of descending it.

    Notes
    -----
    State per parameter: ``square_avg``, ``momentum_buffer`` (momentum !=
    0) and ``grad_avg`` (centered). Unlike PyTorch there is no ``step``
    entry: the rule does not use it.
    """

    _state_like_param = ("square_avg", "momentum_buffer", "grad_avg")

    def __init__(self, params, lr: float = 1e-2, alpha: float = 0.99, eps: float = 1e-8,
                 weight_decay: float = 0.0, momentum: float = 0.0, centered: bool = False, *,
                 maximize: bool = False):
        super().__init__(params, dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay,
                                      momentum=momentum, centered=centered,
                                      maximize=maximize))

    def _check_hyper(self, group):
        super()._check_hyper(group)
        if not 0 <= group["alpha"] <= 1:
            raise ValueError(f"RMSprop: invalid alpha {group['alpha']} (must be in [0, 1])")
        for key in ("eps", "weight_decay", "momentum"):
            if group[key] < 0:
                raise ValueError(f"RMSprop: invalid {key} {group[key]} (must be >= 0)")

    def _update(self, group, params, grads):
        from .. import ops

        use_momentum = group["momentum"] != 0
        centered = group["centered"]
        for p, g in zip(params, grads):
            lr = group.lr_tensor_for(p.device)
            state = self.state[p]
            if "square_avg" not in state:
                state["square_avg"] = self._zeros_like(p)
            if use_momentum and "momentum_buffer" not in state:
                state["momentum_buffer"] = self._zeros_like(p)
            if centered and "grad_avg" not in state:
                state["grad_avg"] = self._zeros_like(p)
            buf = state["momentum_buffer"] if use_momentum else self._placeholder(p)
            avg = state["grad_avg"] if centered else self._placeholder(p)
            new_p, new_s, new_buf, new_avg = ops.rmsprop_update(
                p, g, state["square_avg"], buf, avg, lr, alpha=group["alpha"],
                eps=group["eps"], weight_decay=group["weight_decay"],
                momentum=group["momentum"], centered=centered, maximize=group["maximize"])
            p.assign(new_p)
            state["square_avg"].assign(new_s)
            if use_momentum:
                buf.assign(new_buf)
            if centered:
                avg.assign(new_avg)
