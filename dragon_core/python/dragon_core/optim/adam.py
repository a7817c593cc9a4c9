"""Adam and AdamW (one ``MultiAdamUpdate`` op per batch of parameters, or
one ``AdamUpdate`` op per parameter)."""

from __future__ import annotations

from .optimizer import Optimizer


class Adam(Optimizer):
    """Adam (PyTorch's ``torch.optim.Adam`` rule), optionally AMSGrad.

    With ``t`` the step count (including this step): ``g = grad +
    weight_decay * p``; ``m = beta1 * m + (1 - beta1) * g``; ``v = beta2 * v
    + (1 - beta2) * g^2``; ``p = p - lr / (1 - beta1^t) * m / (sqrt(v) /
    sqrt(1 - beta2^t) + eps)`` (AMSGrad uses the running maximum of v).

    Parameters
    ----------
    params : iterable of Tensor or iterable of dict
        Parameters or parameter groups (see :class:`Optimizer`).
    lr : float, default 1e-3
        Learning rate.
    betas : tuple of float, default (0.9, 0.999)
        Decay rates of the first and second moments, each in [0, 1).
    eps : float, default 1e-8
        Added to the denominator.
    weight_decay : float, default 0
        L2 penalty added to the gradient (decoupled in :class:`AdamW`).
    amsgrad : bool, default False
        Use the running maximum of the second moment.
    maximize : bool, default False
        Ascend the objective instead of descending it.
    foreach : bool or None, default None
        Update all parameters of one dtype and device with one multi-tensor
        ``MultiAdamUpdate`` op (bit for bit the per-parameter result): None
        does so where that op has a kernel, True requires it, False uses one
        ``AdamUpdate`` per parameter.

    Notes
    -----
    State per parameter: ``step`` (0-d int64 tensor), ``exp_avg``,
    ``exp_avg_sq`` and, with amsgrad, ``max_exp_avg_sq``.
    """

    _decoupled = False
    _state_like_param = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None):
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps,
                                      weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach))

    def _check_hyper(self, group):
        super()._check_hyper(group)
        name = type(self).__name__
        betas = group["betas"]
        if len(betas) != 2 or not all(0 <= b < 1 for b in betas):
            raise ValueError(f"{name}: invalid betas {betas} (two values in [0, 1))")
        if group["eps"] < 0:
            raise ValueError(f"{name}: invalid eps {group['eps']} (must be >= 0)")
        if group["weight_decay"] < 0:
            raise ValueError(f"{name}: invalid weight_decay {group['weight_decay']} "
                             f"(must be >= 0)")

    def _update(self, group, params, grads):
        from .. import ops

        amsgrad = group["amsgrad"]
        beta1, beta2 = group["betas"]
        vmaxs, steps = [], []
        for p in params:
            state = self.state[p]
            if "step" not in state:
                state["step"] = self._step_tensor(p)
                state["exp_avg"] = self._zeros_like(p)
                state["exp_avg_sq"] = self._zeros_like(p)
            if amsgrad and "max_exp_avg_sq" not in state:
                state["max_exp_avg_sq"] = self._zeros_like(p)
            vmaxs.append(state["max_exp_avg_sq"] if amsgrad else self._placeholder(p))
            steps.append(self._next_step(state))
        attrs = dict(beta1=beta1, beta2=beta2, eps=group["eps"],
                     weight_decay=group["weight_decay"], decoupled=self._decoupled,
                     amsgrad=amsgrad, maximize=group["maximize"])

        stored = set()

        def store(i, new_p, new_m, new_v, new_vmax):
            stored.add(i)
            state = self.state[params[i]]
            params[i].assign(new_p)
            state["exp_avg"].assign(new_m)
            state["exp_avg_sq"].assign(new_v)
            if amsgrad:
                vmaxs[i].assign(new_vmax)
            state["step"].assign(steps[i])

        try:
            self._run_updates(group, params, grads, vmaxs, steps, attrs, store)
        except BaseException:
            # The counts incremented in place for parameters not updated go
            # back (the update kernels read them; torch's step_t += 1 comes
            # first too): a failed step leaves them as they were.
            for i, p in enumerate(params):
                if i not in stored:
                    self._undo_step(self.state[p], steps[i])
            raise

    def _run_updates(self, group, params, grads, vmaxs, steps, attrs, store):
        from .. import ops

        batches, singles = self._foreach_batches(group, params, "MultiAdamUpdate")
        for idx in batches:
            n = len(idx)
            ms = [self.state[params[i]]["exp_avg"] for i in idx]
            vs = [self.state[params[i]]["exp_avg_sq"] for i in idx]
            out = ops.multi_adam_update(
                group.lr_tensor_for(params[idx[0]].device),
                [params[i] for i in idx] + [grads[i] for i in idx] + ms + vs
                + [vmaxs[i] for i in idx] + [steps[i] for i in idx],
                **attrs)
            for j, i in enumerate(idx):
                store(i, out[j], out[n + j], out[2 * n + j], out[3 * n + j])
        for i in singles:
            p, state = params[i], self.state[params[i]]
            store(i, *ops.adam_update(
                p, grads[i], state["exp_avg"], state["exp_avg_sq"], vmaxs[i],
                group.lr_tensor_for(p.device), steps[i], **attrs))


class AdamW(Adam):
    """Adam with decoupled weight decay (PyTorch's ``torch.optim.AdamW``):
    each step first scales the parameter by ``1 - lr * weight_decay``, then
    applies the Adam update without the L2 term.

    Parameters are those of :class:`Adam`; ``weight_decay`` defaults to
    1e-2.
    """

    _decoupled = True

    def __init__(self, params, lr: float = 1e-3, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, amsgrad: bool = False, *,
                 maximize: bool = False, foreach: bool | None = None):
        super().__init__(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         amsgrad=amsgrad, maximize=maximize, foreach=foreach)
