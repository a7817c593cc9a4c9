"""``torch.optim``: PyTorch's optimizers as ``dragon_core.optim`` ones over
the dragon tensors under the parameters (one fused update op per
parameter), plus Adadelta composed of ops."""

from __future__ import annotations

import collections.abc

import dragon_core as _dg
from dragon_core import ops as _ops
from dragon_core.optim import optimizer as _opt

from . import lr_scheduler  # noqa: F401


def _groups(params, keys=None):
    """The groups with dragon tensors; ``keys`` (dragon tensor id -> the
    caller's torch-front-end parameter) is filled on the way."""
    params = list(params)
    if params and isinstance(params[0], dict):
        out = []
        for g in params:
            g = dict(g)
            ps = [g["params"]] if hasattr(g["params"], "_t") else list(g["params"])
            _remember(keys, ps)
            g["params"] = [p._t for p in ps]
            out.append(g)
        return out
    _remember(keys, params)
    return [p._t for p in params]


def _remember(keys, params):
    if keys is not None:
        for p in params:
            if hasattr(p, "_t"):
                keys[p._t._id] = p


class Optimizer:
    """A PyTorch optimizer: a handle over a ``dragon_core.optim`` one."""

    _impl_cls = None

    def __init__(self, params, defaults=None, **kwargs):
        self._keys = {}
        self._impl = self._impl_cls(_groups(params, self._keys), **kwargs)
        self.defaults = self._impl.defaults

    @property
    def param_groups(self):
        """The optimizer's groups, read and written through (``group["lr"]
        = x`` reaches it), with ``group["params"]`` the parameter objects
        given to the optimizer (torch code compares them by identity and
        hands them to ``clip_grad_norm_``)."""
        keys = self.__dict__.setdefault("_keys", {})
        return [_GroupView(g, keys) for g in self._impl.param_groups]

    @property
    def state(self):
        """``state[param]`` (a torch-front-end tensor, or the dragon tensor
        under it): that parameter's state entries as tensors sharing the
        optimizer's. A mutable mapping, as torch's: ``del state[p]``,
        ``state[p] = {...}``, ``clear()``; iterating yields the parameters
        themselves (the objects given to the optimizer)."""
        return _StateView(self._impl.state, self.__dict__.setdefault("_keys", {}))

    def zero_grad(self, set_to_none=True):
        """``set_to_none=False`` zeroes each ``.grad`` in place, as torch's
        (a reference ``g = p.grad`` held across the call sees the zeros and
        keeps accumulating); a gradient with a graph (``create_graph=True``)
        is detached first, as torch's."""
        if set_to_none:
            self._impl.zero_grad(True)
            return
        from dragon_core.optim.clip import write_grad
        for group in self._impl.param_groups:
            for p in group["params"]:
                _dg._autograd.grad_access(p, reads=True)
                g = p.grad
                if g is None:
                    continue
                if g.requires_grad:
                    g.requires_grad = False
                    g._grad_fn = None
                # assign, not zero_(): the gradient may share storage with a
                # tensor the user holds (the gradient= of backward, another
                # leaf's grad), which zero_() would overwrite too.
                write_grad(p, _dg.ops.zeros(g.shape, g.dtype, device=str(g.device)))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd import enable_grad
            with enable_grad():
                loss = closure()
        self._impl.step()
        return loss

    def add_param_group(self, param_group):
        self._impl.add_param_group(
            _groups([param_group], self.__dict__.setdefault("_keys", {}))[0])

    def state_dict(self):
        return self._impl.state_dict()

    def load_state_dict(self, state_dict):
        from ..serialization import _to_dg
        state_dict = _to_dg(state_dict)
        if isinstance(state_dict, dict) and "param_groups" in state_dict:
            # A state dict saved by PyTorch carries its implementation flags
            # in every group: drop those that only choose how torch computes
            # (ours computes the same values), refuse those that change what.
            groups = []
            for i, g in enumerate(state_dict["param_groups"]):
                g = dict(g)
                for k in _IMPL_FLAGS:
                    if k in g and k not in self._impl.defaults:
                        v = g.pop(k)
                        if k == "differentiable" and v:
                            raise NotImplementedError(
                                f"{type(self).__name__}.load_state_dict: group {i} was saved "
                                f"with differentiable=True, which is not supported")
                if "decoupled_weight_decay" in g:
                    v = bool(g.pop("decoupled_weight_decay"))
                    if v != getattr(self._impl, "_decoupled", False):
                        raise ValueError(
                            f"{type(self).__name__}.load_state_dict: group {i} was saved with "
                            f"decoupled_weight_decay={v}, this optimizer has "
                            f"{getattr(self._impl, '_decoupled', False)}")
                groups.append(g)
            state_dict = dict(state_dict, param_groups=groups)
        self._impl.load_state_dict(state_dict)

    def __repr__(self):
        return repr(self._impl).replace("dragon_core.optim.", "torch.optim.")


#: torch's flags that choose how an optimizer computes, not what.
_IMPL_FLAGS = ("foreach", "fused", "capturable", "differentiable")


def _unwrap(t):
    return t._t if hasattr(t, "_t") else t


def _wrap(v):
    from .._tensor import _w
    return _w(v) if isinstance(v, _dg.Tensor) else v


class _GroupView(collections.abc.MutableMapping):
    """One of ``optimizer.param_groups``: the optimizer's group dict, read
    and written through, except that ``"params"`` reads as the caller's
    parameter objects (``keys``: dragon tensor id -> parameter) and takes
    them on assignment. The list read is a new one: append to it does not
    add a parameter (``add_param_group`` does)."""

    def __init__(self, group, keys):
        self._g, self._keys = group, keys

    def __getitem__(self, k):
        v = self._g[k]
        if k != "params":
            return v
        from .._tensor import _w
        out = []
        for t in v:
            p = self._keys.get(t._id)
            out.append(_w(t) if p is None else p)
        return out

    def __setitem__(self, k, v):
        if k == "params":
            v = [v] if hasattr(v, "_t") or isinstance(v, _dg.Tensor) else list(v)
            _remember(self._keys, v)
            v = [_unwrap(p) for p in v]
        self._g[k] = v

    def __delitem__(self, k):
        del self._g[k]

    def __iter__(self):
        return iter(self._g)

    def __len__(self):
        return len(self._g)

    def __repr__(self):
        return repr({k: (f"<{len(v)} parameters>" if k == "params" else v)
                     for k, v in self._g.items()})


class _ParamState(collections.abc.MutableMapping):
    """One parameter's state: torch-front-end tensors over the optimizer's
    dragon tensors (writes store the tensor under them)."""

    def __init__(self, d):
        self._d = d

    def __getitem__(self, k):
        return _wrap(self._d[k])

    def __setitem__(self, k, v):
        self._d[k] = _unwrap(v)

    def __delitem__(self, k):
        del self._d[k]

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)

    def __repr__(self):
        return repr(dict(self.items()))


class _StateView(collections.abc.MutableMapping):
    """``optimizer.state`` keyed by torch-front-end parameters (torch code
    reads ``optimizer.state[p]["exp_avg"]``, deletes or replaces entries).

    The state lives in the dragon optimizer, keyed by the dragon tensors
    under the parameters; ``keys`` maps a dragon tensor's id to the
    caller's parameter object, so iterating yields the very objects the
    optimizer was given (or that were used as keys here).
    """

    def __init__(self, state, keys):
        self._s, self._keys = state, keys

    def _key(self, p):
        if hasattr(p, "_t"):
            self._keys.setdefault(p._t._id, p)
        return _unwrap(p)

    def __getitem__(self, p):
        return _ParamState(self._s[self._key(p)])

    def get(self, p, default=None):
        d = self._s.get(_unwrap(p))      # a missing entry is not created (as torch's)
        return default if d is None else _ParamState(d)

    def __setitem__(self, p, value):
        if not isinstance(value, collections.abc.Mapping):
            raise TypeError(f"optimizer.state[param] = value: value must be a dict of state "
                            f"entries, got {type(value).__name__}")
        self._s[self._key(p)] = {k: _unwrap(v) for k, v in value.items()}

    def __delitem__(self, p):
        t = _unwrap(p)
        if t not in self._s:
            raise KeyError(p)
        key = self._s._key(t)
        dict.__delitem__(self._s, key)
        self._s._params.pop(key, None)

    def clear(self):
        dict.clear(self._s)
        self._s._params.clear()

    def __contains__(self, p):
        return _unwrap(p) in self._s

    def __iter__(self):
        from .._tensor import _w
        for k in list(dict.keys(self._s)):
            if k in self._keys:
                yield self._keys[k]
            elif k in self._s._params:
                yield _w(self._s._params[k])
            else:
                yield k

    def __len__(self):
        return len(self._s)

    def __repr__(self):
        return repr(dict(self.items()))


def _make(name, impl, flags):
    """A torch optimizer class over ``impl``, taking the implementation flags
    ``flags`` (those torch's class takes): ``foreach`` goes to ``impl`` where
    it has one, ``fused`` and ``capturable`` are accepted (the values are
    torch's either way), ``differentiable=True`` raises; a flag torch's
    class does not take is a TypeError, as in torch."""
    def __init__(self, params, *args, **kwargs):
        cls = impl
        for k in _IMPL_FLAGS:
            if k not in kwargs:
                continue
            if k not in flags:
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument {k!r}")
            v = kwargs.pop(k)
            if k == "differentiable" and v:
                raise NotImplementedError(f"{name}(differentiable=True) is not supported: the "
                                          "update is not recorded by autograd")
            if k == "foreach" and "foreach" in impl_params:
                kwargs["foreach"] = v
        if "decoupled_weight_decay" in kwargs:
            if name != "Adam":
                raise TypeError(f"{name}.__init__() got an unexpected keyword argument "
                                "'decoupled_weight_decay'")
            if kwargs.pop("decoupled_weight_decay"):
                # torch's Adam(decoupled_weight_decay=True) is AdamW (with
                # Adam's default weight_decay of 0).
                cls = _dg.optim.AdamW
                if len(args) < 4:
                    kwargs.setdefault("weight_decay", 0.0)
        self._keys = {}
        self._impl = cls(_groups(params, self._keys), *args, **kwargs)
        self.defaults = self._impl.defaults
    import inspect
    impl_params = set(inspect.signature(impl).parameters)
    return type(name, (Optimizer,), {"__init__": __init__, "__doc__": impl.__doc__})


SGD = _make("SGD", _dg.optim.SGD, ("foreach", "differentiable", "fused"))
Adam = _make("Adam", _dg.optim.Adam, _IMPL_FLAGS)
AdamW = _make("AdamW", _dg.optim.AdamW, _IMPL_FLAGS)
RMSprop = _make("RMSprop", _dg.optim.RMSprop, ("capturable", "foreach", "differentiable"))
Adagrad = _make("Adagrad", _dg.optim.Adagrad, ("foreach", "differentiable", "fused"))


class _DgAdadelta(_opt.Optimizer):
    """Adadelta (PyTorch's rule): ``v = rho v + (1 - rho) g^2``;
    ``d = sqrt(u + eps) / sqrt(v + eps) * g``; ``u = rho u + (1 - rho) d^2``;
    ``p -= lr * d`` (``g`` includes ``weight_decay * p``)."""

    _state_like_param = ("square_avg", "acc_delta")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0, *,
                 maximize=False):
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay,
                                      maximize=maximize))

    def _update(self, group, params, grads):
        rho, eps, wd = group["rho"], group["eps"], group["weight_decay"]
        for p, g in zip(params, grads):
            if tuple(g.shape) != tuple(p.shape) or g.dtype != p.dtype:
                # The rule is composed of broadcasting ops: refuse what torch
                # refuses instead of broadcasting the parameter to a new shape.
                raise ValueError(f"Adadelta.step: a gradient is {g.dtype.name}{list(g.shape)} "
                                 f"but its parameter is {p.dtype.name}{list(p.shape)}; "
                                 f"gradients must have the parameter's shape and dtype")
            state = self.state[p]
            if "square_avg" not in state:
                state["square_avg"] = self._zeros_like(p)
                state["acc_delta"] = self._zeros_like(p)
            if group["maximize"]:
                g = _ops.neg(g)
            if wd:
                g = _ops.add(g, _ops.mul(p, wd))
            v = _ops.add(_ops.mul(state["square_avg"], rho), _ops.mul(_ops.square(g), 1 - rho))
            d = _ops.mul(_ops.div(_ops.sqrt(_ops.add(state["acc_delta"], eps)),
                                  _ops.sqrt(_ops.add(v, eps))), g)
            u = _ops.add(_ops.mul(state["acc_delta"], rho), _ops.mul(_ops.square(d), 1 - rho))
            p.assign(_ops.sub(p, _ops.mul(d, group["lr"])))
            state["square_avg"].assign(v)
            state["acc_delta"].assign(u)


Adadelta = _make("Adadelta", _DgAdadelta, ("foreach", "capturable", "differentiable"))


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.optim.{name} is not supported by dragon_core.vm.torch; "
                              "supported: SGD, Adam, AdamW, RMSprop, Adagrad, Adadelta")
