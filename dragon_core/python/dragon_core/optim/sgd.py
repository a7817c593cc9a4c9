"""Stochastic gradient descent with momentum, Nesterov momentum and weight
decay (one ``MultiSgdUpdate`` op per batch of parameters, or one
``SgdUpdate`` op per parameter)."""

from __future__ import annotations

import numpy as np

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
    As in PyTorch, a parameter's first step with momentum copies the
    (effective) gradient into the buffer: ``buf = g``, without the
    ``1 - dampening`` factor (the update op runs with dampening 0 on a zero
    buffer, which gives those bits). A step compiled with
    ``@dragon_core.function`` whose trace makes the buffer runs both rules
    and picks one by a flag that its first run sets. State per parameter:
    ``momentum_buffer`` (only when momentum != 0).
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
        from .. import _C, ops

        use_momentum = group["momentum"] != 0
        damped = use_momentum and group["dampening"] != 0
        bufs, fresh = [], []
        for p in params:
            state = self.state[p]
            if use_momentum:
                if "momentum_buffer" not in state:
                    state["momentum_buffer"] = self._zeros_like(p)
                    fresh.append(damped)
                else:
                    fresh.append(False)
                bufs.append(state["momentum_buffer"])
            else:
                bufs.append(self._placeholder(p))
                fresh.append(False)
        attrs = dict(momentum=group["momentum"], dampening=group["dampening"],
                     nesterov=group["nesterov"], weight_decay=group["weight_decay"],
                     maximize=group["maximize"])
        # A first step copies the gradient into the buffer (PyTorch's rule):
        # dampening 0 on the zero buffer gives exactly that.
        first = dict(attrs, dampening=0.0)
        if any(fresh) and _C._is_tracing():
            # The graph's later runs are not first steps: pick the rule by a
            # flag (False until the graph's first run has made the step).
            for i in [i for i, f in enumerate(fresh) if f]:
                p = params[i]
                flag = self._first_step_done(p)
                lr = group.lr_tensor_for(p.device)
                p1, b1 = ops.sgd_update(p, grads[i], bufs[i], lr, **attrs)
                p0, b0 = ops.sgd_update(p, grads[i], bufs[i], lr, **first)
                p.assign(ops.where(flag, p1, p0))
                bufs[i].assign(ops.where(flag, b1, b0))
                flag.assign(self._true(p))
            keep = [i for i, f in enumerate(fresh) if not f]
            self._sgd_apply(group, [params[i] for i in keep], [grads[i] for i in keep],
                            [bufs[i] for i in keep], attrs, use_momentum)
            return
        for rule, want in ((attrs, False), (first, True)):
            idx = [i for i, f in enumerate(fresh) if f == want]
            if idx:
                self._sgd_apply(group, [params[i] for i in idx], [grads[i] for i in idx],
                                [bufs[i] for i in idx], rule, use_momentum)

    def _first_step_done(self, p):
        """A 0-d bool tensor: whether p's momentum buffer has had its first
        step (for steps compiled before the buffer existed)."""
        from .._tensor import tensor
        from .optimizer import outside_trace

        flags = self.__dict__.setdefault("_started", {})
        if p._id not in flags:
            with outside_trace():
                flags[p._id] = tensor(np.bool_(False), device=str(p.device))
        return flags[p._id]

    def _true(self, p):
        from .optimizer import outside_trace

        with outside_trace():
            return _tensor_true(p)

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        # A loaded buffer has had its first step.
        for flag in self.__dict__.get("_started", {}).values():
            flag.assign(_tensor_true(flag))

    def _sgd_apply(self, group, params, grads, bufs, attrs, use_momentum):
        from .. import ops

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


def _tensor_true(like):
    """A 0-d True on ``like``'s device."""
    from .._tensor import tensor

    return tensor(np.bool_(True), device=str(like.device))
