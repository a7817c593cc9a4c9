"""The ``Optimizer`` base class: parameter groups, state, ``step``,
``zero_grad`` and ``state_dict`` / ``load_state_dict``.

Every optimizer keeps its learning rates and its step counts in tensors:
each parameter group owns a 0-d float64 tensor holding its ``lr`` (one per
device its parameters live on, so a kernel reads it from its own device's
memory), and optimizers with a step count keep it per parameter in a 0-d
int64 tensor on the parameter's device (``state[p]["step"]``). The fused update ops (``SgdUpdate``,
``AdamUpdate``, ...) read both as tensor inputs, so a training step compiled
with ``@dragon_core.function`` (the update included) follows a scheduler's
learning-rate changes without being traced again, and the step counts
advance inside the graph (``Tensor.assign`` makes them state updates).

The other hyper-parameters (momentum, betas, weight decay, ...) are
attributes of the update ops: a compiled graph keeps the values it was
traced with. Change them between eager steps, or trace again.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import numbers
import warnings

import numpy as np

from .. import _C
from .._autograd import grad_access
from .._tensor import Tensor, tensor


@contextlib.contextmanager
def outside_trace():
    """Run the block as if no ``@function`` were being traced.

    Optimizer state made while a training step is traced (on its first
    call) must be real tensors that outlive the trace, not constants of the
    graph: the graph then captures them and updates them with ``assign``.
    """
    # The module, not the ``function`` decorator _graph re-exports.
    graph_function = importlib.import_module("dragon_core._graph.function")
    stack = graph_function._traces()
    saved = list(stack)
    stack.clear()
    for _ in saved:
        _C._trace_exit()
    try:
        yield
    finally:
        stack.extend(saved)
        for _ in saved:
            _C._trace_enter()


_KERNEL_CACHE: dict = {}

#: Group entries that lr schedulers add (``initial_lr``; OneCycleLR's bounds).
_SCHEDULER_KEYS = frozenset({"initial_lr", "max_lr", "min_lr", "max_momentum",
                             "base_momentum"})


def _has_kernel(op_type: str, device: str, dtype_name: str) -> bool:
    """Whether ``op_type`` has a kernel for ``dtype_name`` on ``device``'s
    type (cached per op and device type)."""
    from .._graph.passes import kernel_dtypes

    key = (op_type, device.partition(":")[0])
    if key not in _KERNEL_CACHE:
        _KERNEL_CACHE[key] = kernel_dtypes(*key)
    return dtype_name in _KERNEL_CACHE[key]


def _C_kernels_text(op_type: str) -> str:
    from .. import _C

    try:
        ks = _C.kernels(op_type)
    except LookupError:
        return "none"
    return "; ".join(f"{k['device']} {{{k['dtypes']}}}" for k in ks) or "none"


def _check_param(p, where: str) -> None:
    if not isinstance(p, Tensor):
        raise TypeError(f"{where}: parameters must be Tensors, got {type(p).__name__}")
    if not p.dtype.is_floating_point:
        raise TypeError(f"{where}: parameters must be floating point, got a {p.dtype.name} "
                        f"tensor of shape {list(p.shape)}")


def _as_state_tensor(value):
    """``value`` as a Tensor when it is an array (anything with
    ``__array__`` but a Tensor or a plain number), else unchanged."""
    if isinstance(value, (Tensor, numbers.Number, str, bytes)) or value is None:
        return value
    if isinstance(value, np.ndarray) or hasattr(value, "__array__"):
        with warnings.catch_warnings():
            # (torch.Tensor.__array__ takes no copy keyword yet)
            warnings.simplefilter("ignore", DeprecationWarning)
            return tensor(np.array(np.asarray(value)))
    return value


def _same(a, b) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:   # noqa: BLE001 - incomparable values differ
        return False


class ParamGroup(dict):
    """One parameter group: a dict of hyper-parameters plus ``"params"``.

    Setting ``group["lr"]`` also writes the group's learning-rate tensors
    (:attr:`lr_tensor` on the CPU, :meth:`lr_tensor_for` on other devices),
    which the update ops read; graphs compiled with ``@function`` see the new
    value at their next run.
    """

    def __init__(self, values: dict):
        super().__init__()
        with outside_trace():
            self.lr_tensor = tensor(np.float64(0.0))
            self._lr_on = {str(self.lr_tensor.device): self.lr_tensor}
            for key, value in values.items():
                self[key] = value

    def lr_tensor_for(self, device) -> Tensor:
        """The group's learning rate as a 0-d float64 tensor on ``device``.

        Update kernels read the learning rate where they run (a GPU kernel
        reads device memory, with no host synchronisation), so each device
        the group's parameters live on gets its own copy, made on first use
        and rewritten whenever ``group["lr"]`` is set.
        """
        key = str(device)
        t = self._lr_on.get(key)
        if t is None:
            with outside_trace():
                t = self._lr_on[key] = tensor(np.float64(self.get("lr", 0.0)), device=key)
        return t

    def _note_traced(self) -> None:
        """Record the hyper-parameters a compiled step just baked in."""
        self._traced = {k: copy.deepcopy(v) for k, v in self.items()
                        if k not in ("params", "lr") and k not in _SCHEDULER_KEYS}

    def __setitem__(self, key, value):
        traced = getattr(self, "_traced", None)
        if traced and key in traced and not _same(traced[key], value):
            warnings.warn(
                f"param group {key!r} changed from {traced[key]!r} to {value!r} after a "
                f"training step over this group was compiled with @dragon_core.function: "
                f"the compiled graph keeps {key}={traced[key]!r} (only lr is read when it "
                f"runs); compile the step again (a new dragon_core.function) to use the new "
                f"value", RuntimeWarning, stacklevel=2)
        if key == "lr":
            if isinstance(value, Tensor):
                value = value.item()
            if not isinstance(value, numbers.Real) or isinstance(value, bool):
                raise TypeError(f"lr must be a real number, got {type(value).__name__}")
            value = float(value)
            for t in self._lr_on.values():
                t.assign(tensor(np.float64(value), device=str(t.device)))
        super().__setitem__(key, value)

    def update(self, *args, **kwargs):
        for key, value in dict(*args, **kwargs).items():
            self[key] = value

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]


class _State(dict):
    """Optimizer state: ``state[param]`` is a dict of tensors.

    Keys are parameters (looked up by identity); a parameter without state
    yet maps to an empty dict that is kept once written to.
    """

    def __init__(self):
        super().__init__()
        self._params = {}

    def _key(self, p):
        return p._id if isinstance(p, Tensor) else p

    def __getitem__(self, p):
        key = self._key(p)
        if not dict.__contains__(self, key):
            if isinstance(p, Tensor):
                self._params[key] = p
            dict.__setitem__(self, key, {})
        return dict.__getitem__(self, key)

    def __setitem__(self, p, value):
        key = self._key(p)
        if isinstance(p, Tensor):
            self._params[key] = p
        dict.__setitem__(self, key, value)

    def __contains__(self, p):
        return dict.__contains__(self, self._key(p))

    def get(self, p, default=None):
        return dict.get(self, self._key(p), default)

    def __delitem__(self, p):
        key = self._key(p)
        dict.__delitem__(self, key)
        self._params.pop(key, None)

    def pop(self, p, *default):
        key = self._key(p)
        self._params.pop(key, None)
        return dict.pop(self, key, *default)

    def clear(self):
        dict.clear(self)
        self._params.clear()


class Optimizer:
    """Base class of the optimizers (PyTorch-like).

    Parameters
    ----------
    params : iterable of Tensor or iterable of dict
        Leaf tensors to optimise, or parameter groups: dicts with a
        ``"params"`` entry and any hyper-parameters that override
        ``defaults`` for that group.
    defaults : dict
        Default hyper-parameters of every group.

    Attributes
    ----------
    param_groups : list of ParamGroup
        The groups, each a dict with ``"params"`` (list of Tensor), ``"lr"``
        and the optimizer's other hyper-parameters.
    state : dict
        ``state[param]`` is the dict of that parameter's state tensors.
    defaults : dict
        The hyper-parameters a new group starts from.

    Notes
    -----
    Subclasses implement ``_update(group, params, grads)`` with one fused
    update op per parameter, or one multi-tensor op per batch of parameters
    of one dtype and device (``_foreach_batches``).
    """

    #: Names of per-parameter state entries that hold tensors of the
    #: parameter's shape (cast to the parameter's dtype on load).
    _state_like_param: tuple = ()

    def __init__(self, params, defaults: dict):
        self.defaults = dict(defaults)
        self.state = _State()
        self.param_groups: list[ParamGroup] = []
        self._empty: dict = {}
        if isinstance(params, Tensor):
            raise TypeError(f"{type(self).__name__}: params must be an iterable of Tensors or "
                            f"dicts, got a single Tensor (wrap it in a list)")
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def __repr__(self):
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)

    # ------------------------------------------------------------ groups

    def add_param_group(self, param_group: dict) -> None:
        """Add a group of parameters with its own hyper-parameters.

        Parameters
        ----------
        param_group : dict
            ``"params"`` (a Tensor or an iterable of Tensors) and optional
            hyper-parameters; missing ones come from ``defaults``.
        """
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, got {type(param_group).__name__}")
        name = type(self).__name__
        params = param_group.get("params")
        if params is None:
            raise ValueError(f"{name}.add_param_group: the group has no 'params'")
        params = [params] if isinstance(params, Tensor) else list(params)
        for p in params:
            _check_param(p, name)
        seen = {p._id for g in self.param_groups for p in g["params"]}
        ids = [p._id for p in params]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{name}: a parameter appears twice in one group")
        if seen.intersection(ids):
            raise ValueError(f"{name}: some parameters appear in more than one parameter group")
        values = dict(self.defaults)
        values.update((k, v) for k, v in param_group.items() if k != "params")
        unknown = sorted(set(values) - set(self.defaults) - _SCHEDULER_KEYS)
        if unknown:
            raise ValueError(f"{name}: unknown hyper-parameter(s) {unknown}; it takes "
                             f"{sorted(self.defaults)}")
        self._check_hyper(values)
        values["params"] = params
        self.param_groups.append(ParamGroup(values))

    def _check_hyper(self, group: dict) -> None:
        """Validate one group's hyper-parameters (raises ValueError)."""
        lr = group.get("lr")
        if not isinstance(lr, numbers.Real) or lr < 0:
            raise ValueError(f"{type(self).__name__}: invalid learning rate {lr!r} (must be "
                             f"a number >= 0)")

    # ------------------------------------------------------------ stepping

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the ``.grad`` of every parameter.

        Parameters
        ----------
        set_to_none : bool, default True
            Set ``.grad`` to None (the next ``backward()`` then stores its
            gradient instead of adding to zeros); False makes it zeros.
        """
        from .. import ops

        for group in self.param_groups:
            for p in group["params"]:
                grad_access(p, reads=not set_to_none)
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    # In place where possible: a held ``h = p.grad`` sees zeros.
                    from .clip import write_grad
                    g = p.grad
                    write_grad(p, ops.zeros(g.shape, g.dtype, device=str(g.device)))

    def _flat_params(self) -> list:
        return [p for group in self.param_groups for p in group["params"]]

    def step(self, grads=None, closure=None):
        """Update every parameter from its gradient.

        Parameters
        ----------
        grads : sequence of Tensor or None, optional
            Explicit gradients, one per parameter in group order (the order
            of ``[p for g in param_groups for p in g["params"]]``); None
            entries skip their parameter. Without it each parameter's
            ``.grad`` is used (parameters whose ``.grad`` is None are
            skipped). Inside ``@dragon_core.function`` both forms work:
            explicit gradients from a ``GradientTape``, or ``.grad`` after
            ``loss.backward()`` (``.grad`` is then state of the compiled
            step, never a tensor frozen at trace time).
        closure : callable, optional
            Re-evaluates the model and returns the loss (called first, with
            gradient recording enabled).

        Returns
        -------
        The closure's loss, or None.
        """
        from .._autograd import enable_grad, no_grad

        if callable(grads) and closure is None:
            grads, closure = None, grads
        # Schedulers warn when they step before the optimizer has (PyTorch's
        # calling-order warning).
        self._opt_called = True
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        params = self._flat_params()
        if grads is None:
            for p in params:
                grad_access(p, reads=True)
            grads = [p.grad for p in params]
        else:
            if isinstance(grads, Tensor):
                grads = [grads]
            grads = list(grads)
            if len(grads) != len(params):
                raise ValueError(f"{type(self).__name__}.step: got {len(grads)} gradients for "
                                 f"{len(params)} parameters (one per parameter, in group order; "
                                 f"None skips a parameter)")
        k = 0
        with no_grad():
            for group in self.param_groups:
                n = len(group["params"])
                pairs = [(p, g) for p, g in zip(group["params"], grads[k:k + n])
                         if g is not None]
                k += n
                if pairs:
                    self._update(group, [p for p, _ in pairs], [g for _, g in pairs])
                    if _C._is_tracing():
                        group._note_traced()
        return loss

    def _update(self, group: ParamGroup, params: list, grads: list) -> None:
        raise NotImplementedError(f"{type(self).__name__} does not implement _update")

    def _foreach_batches(self, group: ParamGroup, params: list, op_type: str):
        """Split ``params`` (by index) between the multi-tensor op
        ``op_type`` and the per-parameter op, by the group's ``foreach``.

        Parameters of one dtype and device form one batch (one call of
        ``op_type``). ``foreach=None`` (the default) batches those whose
        device and dtype have an ``op_type`` kernel and updates the others
        one by one (both give the same bits); ``True`` requires the kernel
        (NotImplementedError naming the op, dtype and device otherwise);
        ``False`` never batches.

        Returns
        -------
        (list of list of int, list of int)
            The batches and the indices updated one by one.
        """
        foreach = group.get("foreach")
        if foreach is False:
            return [], list(range(len(params)))
        by_key: dict = {}
        for i, p in enumerate(params):
            by_key.setdefault((p.dtype, str(p.device)), []).append(i)
        batches, singles = [], []
        for (dtype, device), idx in by_key.items():
            if _has_kernel(op_type, device, dtype.name):
                batches.append(idx)
            elif foreach:
                raise NotImplementedError(
                    f"{type(self).__name__}(foreach=True): no {op_type} kernel for {dtype.name} "
                    f"on {device} (kernels: {_C_kernels_text(op_type)}); pass foreach=None to "
                    f"update such parameters one by one")
            else:
                singles += idx
        return batches, sorted(singles)

    # ------------------------------------------------------------ state

    def _zeros_like(self, p, value: float = 0.0):
        from .. import ops

        with outside_trace():
            return ops.full(p.shape, float(value), p.dtype, device=str(p.device))

    def _step_tensor(self, p):
        """A parameter's step count: a 0-d int64 tensor on p's device."""
        with outside_trace():
            return tensor(np.int64(0), device=str(p.device))

    def _placeholder(self, p):
        """An empty tensor of p's dtype for a state input the options leave
        unused (the update op only copies it)."""
        key = (p._dtype_code, str(p.device))
        t = self._empty.get(key)
        if t is None:
            from .. import ops

            with outside_trace():
                t = self._empty[key] = ops.zeros([0], p.dtype, device=str(p.device))
        return t

    @staticmethod
    def _next_step(state: dict):
        """The incremented step count (a tensor); the caller assigns it.

        Eagerly, a host step count that owns its memory is incremented in
        place and returned (torch's ``step_t += 1``): one write instead of
        an ``Add`` op per parameter and step. Traced (the graph updates the
        count), on other devices, or where the count shares memory with
        another tensor, the ``Add`` makes a new tensor."""
        step = state["step"]
        if (not _C._is_tracing() and step._device_name == "cpu" and step.ndim == 0
                and step._storage_refs == 1 and not step.is_read_only):
            value = step.numpy()
            if value.dtype == np.int64:
                value += 1
                step._bump_version()
                return step
        return step + 1

    @staticmethod
    def _undo_step(state: dict, step) -> None:
        """Takes back :meth:`_next_step`'s in-place increment (``step`` is
        ``state["step"]`` itself) when the update that follows it raised:
        a failed step leaves the count as it was."""
        if step is state.get("step") and not _C._is_tracing():
            step.numpy()[...] -= 1
            step._bump_version()

    def state_dict(self) -> dict:
        """A snapshot of the optimizer: state tensors and hyper-parameters.

        Returns
        -------
        dict
            ``{"state": {index: {name: Tensor}}, "param_groups": [group]}``
            where parameters are numbered 0, 1, ... in group order and each
            group is a dict of its hyper-parameters with ``"params"`` the
            list of its parameters' numbers (PyTorch's layout). The tensors
            are copies: later steps do not change them.
        """
        index = {}
        groups = []
        for group in self.param_groups:
            entry = {k: copy.deepcopy(v) for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                ids.append(index.setdefault(p._id, len(index)))
            entry["params"] = ids
            groups.append(entry)
        state = {}
        for p in self._flat_params():
            st = self.state.get(p)
            if st:
                state[index[p._id]] = {k: (tensor(v) if isinstance(v, Tensor) else
                                           copy.deepcopy(v)) for k, v in st.items()}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restore a :meth:`state_dict` (of an optimizer of the same kind over
        parameters of the same shapes, grouped the same way).

        Existing state tensors are overwritten with ``assign``, so training
        steps already compiled with ``@function`` continue from the loaded
        state. Hyper-parameters other than ``lr`` are attributes of the
        compiled update ops: trace again after loading different ones.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict) or not {"state", "param_groups"} <= set(state_dict):
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and "
                             f"'param_groups'")
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError(f"{name}.load_state_dict: the state dict has {len(groups)} "
                             f"parameter group(s), the optimizer {len(self.param_groups)}")
        # Arrays from elsewhere (NumPy, or another framework's CPU tensors,
        # as in a PyTorch checkpoint) become tensors: state must be tensors
        # the update ops can read and ``assign`` can write.
        state_dict = dict(state_dict, state={
            idx: {k: _as_state_tensor(v) for k, v in st.items()}
            for idx, st in state_dict["state"].items()})
        mapping = {}
        for i, (mine, saved) in enumerate(zip(self.param_groups, groups)):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError(f"{name}.load_state_dict: group {i} has "
                                 f"{len(saved['params'])} parameter(s) in the state dict and "
                                 f"{len(mine['params'])} in the optimizer")
            for p, idx in zip(mine["params"], saved["params"]):
                mapping[idx] = p
        for idx, st in state_dict["state"].items():
            if idx not in mapping:
                raise ValueError(f"{name}.load_state_dict: state for parameter {idx}, which no "
                                 f"group lists")
            p = mapping[idx]
            for key, value in st.items():
                if isinstance(value, Tensor) and key in self._state_like_param and \
                        tuple(value.shape) != tuple(p.shape):
                    raise ValueError(f"{name}.load_state_dict: state '{key}' of parameter "
                                     f"{idx} has shape {list(value.shape)}, the parameter "
                                     f"{list(p.shape)}")
        for i, saved in enumerate(groups):
            values = {k: v for k, v in saved.items() if k != "params"}
            unknown = sorted(set(values) - set(self.defaults) - _SCHEDULER_KEYS)
            if unknown:
                raise ValueError(f"{name}.load_state_dict: group {i} has unknown "
                                 f"hyper-parameter(s) {unknown}; {name} takes "
                                 f"{sorted(self.defaults)}")
            self._check_hyper({**self.defaults, **values})
        for mine, saved in zip(self.param_groups, groups):
            for key, value in saved.items():
                if key != "params":
                    mine[key] = copy.deepcopy(value)
        with outside_trace():
            for idx, st in state_dict["state"].items():
                p = mapping[idx]
                mine = self.state[p]
                for key, value in st.items():
                    if isinstance(value, Tensor):
                        value = self._cast_state(p, key, value)
                        if key in mine and isinstance(mine[key], Tensor) and \
                                mine[key].dtype == value.dtype and \
                                tuple(mine[key].shape) == tuple(value.shape):
                            mine[key].assign(value)
                        else:
                            mine[key] = value
                    else:
                        mine[key] = copy.deepcopy(value)

    def _cast_state(self, p, key: str, value):
        """A copy of a loaded state tensor, in p's dtype and on p's device
        when it is a state of p's shape."""
        if key in self._state_like_param:
            return tensor(value, dtype=p.dtype, device=str(p.device))
        if key == "step":
            return tensor(value, dtype="int64", device=str(p.device))
        return tensor(value)
