"""Stochastic gradient descent with momentum, Nesterov momentum and weight
decay (one ``MultiSgdUpdate`` op per batch of parameters, or one
``SgdUpdate`` op per parameter)."""

from __future__ import annotations

from .optimizer import Optimizer


class SGD(Optimizer):
    """Stochastic gradient descent (PyTorch's ``torch.optim.SGD`` rule).

    ``g = grad + weight_decay * p``; with momentum ``buf = momentum * buf +
    (1 - dampening) * g`` and ``g = g + momentum * buf`` (Nesterov) or
    ``g = buf``; then ``p = p - lr * g``.

    Parameters
    ----------
    params : iterable of Tensor or iterable of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float, default 1e-3
        Learning rate.
    momentum : float, default 0
        Momentum factor.
    dampening : float, default 0
        Dampening of the momentum.
    weight_decay : float, default 0
        L2 penalty added to the gradient.
    nesterov : bool, default False
        Nesterov momentum (needs momentum > 0 and dampening = 0).
    maximize : bool, default False
        Ascend the objective instead of descending it.
    foreach : bool or None, default None
        Update all parameters of one dtype and device with one multi-tensor
        ``MultiSgdUpdate`` op (bit for bit the per-parameter result): None
        does so where that op has a kernel, True requires it, False uses one
        ``SgdUpdate`` per parameter.

    Notes
    -----
    The momentum buffer starts at zero, so the first step gives ``buf =
    (1 - dampening) * grad``; PyTorch copies the first gradient into it.
    The two agree whenever dampening is 0 (the default). State per
    parameter: ``momentum_buffer`` (only when momentum != 0).
    """

    _state_like_param = ("momentum_buffer",)

    def __init__(self, params, lr: float = 1e-3, momentum: float = 0.0,
                 dampening: float = 0.0, weight_decay: float = 0.0,
                 nesterov: bool = False, *, maximize: bool = False,
                 foreach: bool | None = None):
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                      weight_decay=weight_decay, nesterov=nesterov,
                                      maximize=maximize, foreach=foreach))

    def _check_hyper(self, group):
        super()._check_hyper(group)
        if group["momentum"] < 0:
            raise ValueError(f"SGD: invalid momentum {group['momentum']} (must be >= 0)")
        if not 0 <= group["dampening"] <= 1:
            raise ValueError(f"SGD: invalid dampening {group['dampening']} (must be in [0, 1])")
        if group["weight_decay"] < 0:
            raise ValueError(f"SGD: invalid weight_decay {group['weight_decay']} (must be >= 0)")
        if group["nesterov"] and (group["momentum"] <= 0 or group["dampening"] != 0):
            raise ValueError("SGD: Nesterov momentum needs momentum > 0 and dampening = 0")

    def _update(self, group, params, grads):
        from .. import ops

        use_momentum = group["momentum"] != 0
        bufs = []
        for p in params:
            state = self.state[p]
            if use_momentum:
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = self._zeros_like(p)
                bufs.append(state["momentum_buffer"])
            else:
                bufs.append(self._placeholder(p))
        attrs = dict(momentum=group["momentum"], dampening=group["dampening"],
                     nesterov=group["nesterov"], weight_decay=group["weight_decay"],
                     maximize=group["maximize"])
        batches, singles = self._foreach_batches(group, params, "MultiSgdUpdate")
        for idx in batches:
            n = len(idx)
            out = ops.multi_sgd_update(
                group.lr_tensor_for(params[idx[0]].device),
                [params[i] for i in idx] + [grads[i] for i in idx] + [bufs[i] for i in idx],
                **attrs)
            for j, i in enumerate(idx):
                params[i].assign(out[j])
                if use_momentum:
                    bufs[i].assign(out[n + j])
        for i in singles:
            p = params[i]
            new_p, new_buf = ops.sgd_update(p, grads[i], bufs[i], group.lr_tensor_for(p.device),
                                            **attrs)
            p.assign(new_p)
            if use_momentum:
                bufs[i].assign(new_buf)
