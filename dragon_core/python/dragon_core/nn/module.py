"""``Module``: the base class of layers and models.

A module owns parameters (:class:`Parameter`), buffers (non-trained state
such as batch-norm running statistics) and sub-modules, all registered by
attribute assignment, as in PyTorch::

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(dg.ops.relu(self.fc1(x)))

Modules run eagerly and inside ``@dragon_core.function``: parameters and
buffers are captured by the trace, and buffer updates (``buffer.assign``)
become state updates of the compiled graph. ``train()`` / ``eval()`` change
what a trace records (dropout, batch statistics), so a flip invalidates the
compiled plans of every function (they retrace on their next call).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterator

import numpy as np

from .._autograd import grad_access
from .._graph.function import set_mode_key
from .._tensor import Tensor
from .parameter import Parameter

# Modules in eval mode. Compiled functions key their plans on this set (see
# ``set_mode_key``), so a function traced in training mode and one traced in
# eval mode are two cached plans, and flipping back reuses the first.
_eval_modules: "weakref.WeakSet[Module]" = weakref.WeakSet()
# Other Python state a trace depends on, as hashable flags that join the same
# key: DistributedDataParallel.no_sync() adds ("ddp_no_sync", id(ddp)) while
# it is entered, so a step traced inside it (no all-reduce) and one traced
# outside (all-reduce) are two plans.
_mode_flags: set = set()


def _update_mode_key() -> None:
    set_mode_key(frozenset(id(m) for m in _eval_modules) | frozenset(_mode_flags))


class Module:
    """Base class of every layer and model (see the module docstring)."""

    training: bool

    def __init__(self):
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "training", True)

    # ------------------------------------------------------------ forward
    def forward(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__} does not define forward()")

    def __call__(self, *args, **kwargs):
        return self.forward(*args, **kwargs)

    # ------------------------------------------------------- registration
    def _check_ready(self):
        if "_parameters" not in self.__dict__:
            raise AttributeError(f"{type(self).__name__}: call super().__init__() before "
                                 "assigning parameters, buffers or sub-modules")

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, Parameter):
            self._check_ready()
            self._discard(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._check_ready()
            self._discard(name)
            self._modules[name] = value
        elif "_parameters" in self.__dict__ and name in self._parameters:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to parameter "
                                f"'{name}' of {type(self).__name__} (expected a Parameter "
                                "or None)")
            self._parameters[name] = None
        elif "_buffers" in self.__dict__ and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign {type(value).__name__} to buffer '{name}' "
                                f"of {type(self).__name__} (expected a Tensor or None)")
            self._buffers[name] = value
        elif "_modules" in self.__dict__ and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign {type(value).__name__} to sub-module "
                                f"'{name}' of {type(self).__name__}")
            self._modules[name] = None
        else:
            object.__setattr__(self, name, value)

    def _discard(self, name: str) -> None:
        self.__dict__.pop(name, None)
        for table in (self._parameters, self._buffers, self._modules):
            table.pop(name, None)
        self._non_persistent.discard(name)

    def __getattr__(self, name: str):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            if table in d and name in d[table]:
                return d[table][name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name: str) -> None:
        for table in (self._parameters, self._buffers, self._modules):
            if name in table:
                del table[name]
                self._non_persistent.discard(name)
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return sorted(set(super().__dir__()) | set(self._parameters) | set(self._buffers)
                      | set(self._modules))

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        """Register ``param`` (or a ``None`` placeholder) under ``name``."""
        _check_name(self, name)
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"register_parameter('{name}'): expected a Parameter or None, "
                            f"got {type(param).__name__}")
        self._check_ready()
        self._discard(name)
        self._parameters[name] = param

    def register_buffer(self, name: str, tensor: Tensor | None, persistent: bool = True) -> None:
        """Register non-trained state (saved in ``state_dict`` when persistent)."""
        _check_name(self, name)
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"register_buffer('{name}'): expected a Tensor or None, got "
                            f"{type(tensor).__name__}")
        self._check_ready()
        self._discard(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)

    def add_module(self, name: str, module: "Module | None") -> None:
        """Register ``module`` as a child under ``name``."""
        _check_name(self, name)
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"add_module('{name}'): {type(module).__name__} is not a Module")
        self._check_ready()
        self._discard(name)
        self._modules[name] = module

    register_module = add_module

    # ------------------------------------------------------------ traversal
    def named_modules(self, prefix: str = "", memo: set | None = None
                      ) -> Iterator[tuple[str, "Module"]]:
        """Every module of the tree (this one first), each once."""
        memo = set() if memo is None else memo
        if id(self) in memo:
            return
        memo.add(id(self))
        yield prefix, self
        for name, child in self._modules.items():
            if child is not None:
                yield from child.named_modules(f"{prefix}.{name}" if prefix else name, memo)

    def modules(self) -> Iterator["Module"]:
        for _, m in self.named_modules():
            yield m

    def named_children(self) -> Iterator[tuple[str, "Module"]]:
        """Direct sub-modules, each once (a module registered twice keeps its
        first name)."""
        seen = set()
        for name, child in self._modules.items():
            if child is not None and id(child) not in seen:
                seen.add(id(child))
                yield name, child

    def children(self) -> Iterator["Module"]:
        for _, child in self.named_children():
            yield child

    def _named_members(self, table: str, prefix: str, recurse: bool):
        seen = set()
        mods = self.named_modules(prefix) if recurse else [(prefix, self)]
        for mod_prefix, mod in mods:
            for name, value in getattr(mod, table).items():
                if value is None or id(value) in seen:
                    continue
                seen.add(id(value))
                yield (f"{mod_prefix}.{name}" if mod_prefix else name), value

    def named_parameters(self, prefix: str = "", recurse: bool = True
                         ) -> Iterator[tuple[str, Parameter]]:
        """``(dotted_name, parameter)`` pairs; a shared parameter appears once."""
        return self._named_members("_parameters", prefix, recurse)

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix: str = "", recurse: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        return self._named_members("_buffers", prefix, recurse)

    def buffers(self, recurse: bool = True) -> Iterator[Tensor]:
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ------------------------------------------------------------- modes
    def train(self, mode: bool = True) -> "Module":
        """Set training mode on this module and all descendants."""
        if not isinstance(mode, bool):
            raise TypeError(f"train(mode): mode must be a bool, got {type(mode).__name__}")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
            if mode:
                _eval_modules.discard(m)
            else:
                _eval_modules.add(m)
        _update_mode_key()
        return self

    def eval(self) -> "Module":
        """Set inference mode (same as ``train(False)``)."""
        return self.train(False)

    def requires_grad_(self, requires_grad: bool = True) -> "Module":
        for p in self.parameters():
            p.requires_grad = requires_grad
        return self

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the ``.grad`` of every parameter."""
        from .. import ops
        for p in self.parameters():
            grad_access(p, reads=not set_to_none)
            if p.grad is not None:
                p.grad = None if set_to_none else ops.zeros(list(p.shape), dtype=p.dtype,
                                                            device=str(p.device))

    def apply(self, fn: Callable[["Module"], None]) -> "Module":
        """Call ``fn`` on every sub-module (children first), then on this one."""
        for child in self.children():
            child.apply(fn)
        fn(self)
        return self

    # --------------------------------------------------------- conversion
    def to(self, device=None, dtype=None, memory_format=None) -> "Module":
        """Move/cast every parameter and buffer, in place; returns ``self``.

        ``device`` may be a device string (``"cpu"``) or a dtype (then it is
        the dtype). Only floating-point tensors are cast to ``dtype``.
        ``memory_format`` (``dragon_core.channels_last`` / ``channels_last_3d``)
        lays out every floating-point parameter and buffer of rank 4 (5) in
        that format (PyTorch's rule: convolution filters; others stay).
        Parameters are replaced by new ``Parameter`` objects when they move,
        so build optimisers after calling ``to``.
        """
        from .._memory_format import as_memory_format
        fmt = None if memory_format is None else as_memory_format(memory_format, "Module.to")
        from .._dtypes import dtype_arg
        if device is not None and dtype is None and not isinstance(device, int):
            try:
                dtype, device = dtype_arg(device), None
            except TypeError:
                pass   # a device
        target_dtype = None if dtype is None else dtype_arg(dtype, "Module.to: dtype")

        def convert(t: Tensor) -> Tensor:
            out = t
            if target_dtype is not None and t.dtype.is_floating_point and t.dtype != target_dtype:
                out = out.to(target_dtype)
            if device is not None:
                out = out.to(device)
            if fmt is not None and out.dtype.is_floating_point and \
                    (fmt.rank is None or out.ndim == fmt.rank):
                out = out.contiguous(fmt)
            return out

        for m in self.modules():
            for name, p in list(m._parameters.items()):
                if p is None:
                    continue
                new = convert(p)
                if new is p:
                    continue
                q = Parameter(new.detach(), requires_grad=p.requires_grad)
                if p.grad is not None:
                    q.grad = convert(p.grad)
                m._parameters[name] = q
            for name, b in list(m._buffers.items()):
                if b is not None:
                    m._buffers[name] = convert(b)
        return self

    def float(self) -> "Module":
        return self.to(dtype="float32")

    def double(self) -> "Module":
        return self.to(dtype="float64")

    def cpu(self) -> "Module":
        return self.to("cpu")

    # --------------------------------------------------------- state dict
    def state_dict(self, prefix: str = "", keep_vars: bool = False) -> "OrderedDict[str, Tensor]":
        """Parameters and persistent buffers by dotted name.

        The values share storage with the module's tensors (detached unless
        ``keep_vars``); ``dragon_core.save`` writes them to disk.
        """
        out: "OrderedDict[str, Tensor]" = OrderedDict()
        for mod_prefix, mod in self.named_modules(prefix.rstrip(".")):
            for name, p in mod._parameters.items():
                if p is not None:
                    out[_join(mod_prefix, name)] = p if keep_vars else p.detach()
            for name, b in mod._buffers.items():
                if b is not None and name not in mod._non_persistent:
                    out[_join(mod_prefix, name)] = b if keep_vars else b.detach()
        return out

    def load_state_dict(self, state_dict, strict: bool = True):
        """Copy values from ``state_dict`` into parameters and buffers.

        Shapes must match exactly; values are cast to each tensor's dtype and
        device. With ``strict`` (default) missing or unexpected keys raise a
        ``KeyError`` listing them, and nothing is changed. Returns
        ``(missing_keys, unexpected_keys)``.
        """
        from .._tensor import tensor as _tensor
        own = self.state_dict(keep_vars=True)
        missing = [k for k in own if k not in state_dict]
        unexpected = [k for k in state_dict if k not in own]
        if strict and (missing or unexpected):
            raise KeyError(f"load_state_dict for {type(self).__name__}: missing keys "
                           f"{missing}, unexpected keys {unexpected}")
        updates = []
        for key, target in own.items():
            if key not in state_dict:
                continue
            value = state_dict[key]
            if not isinstance(value, Tensor):
                value = _tensor(value)
            if tuple(value.shape) != tuple(target.shape):
                raise ValueError(f"load_state_dict for {type(self).__name__}: '{key}' has "
                                 f"shape {tuple(value.shape)} in the state dict, "
                                 f"{tuple(target.shape)} in the module")
            value = value.to(target.dtype).to(str(target.device))
            updates.append((target, value))
        # Every check passed: now copy (a failed load leaves the module as it was).
        for target, value in updates:
            _write_in_place(target, value)
        return missing, unexpected

    # ---------------------------------------------------------------- repr
    def extra_repr(self) -> str:
        """Extra text inside this module's ``repr`` (layers override it)."""
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        if extra:
            lines.extend(extra.split("\n"))
        for name, child in self._modules.items():
            text = repr(child).replace("\n", "\n  ")
            lines.append(f"({name}): {text}")
        head = type(self).__name__ + "("
        if not lines:
            return head + ")"
        if len(lines) == 1 and not self._modules:
            return head + lines[0] + ")"
        return head + "\n  " + "\n  ".join(lines) + "\n)"


def _write_in_place(target: Tensor, value: Tensor) -> None:
    """Write ``value`` (``target``'s shape, dtype and device) into ``target``.

    A host tensor's memory is overwritten, so views and aliases taken
    before (``w = m.weight[0]``), optimizers and compiled functions holding
    it all see the loaded value; the version counter moves as for every
    in-place write. Inside a traced function, and for a read-only host
    tensor or one on another device, the tensor is rebound to a fresh copy
    instead (the tensor object stays; earlier views keep the old value).
    """
    from .. import _C
    if _C._is_tracing():
        target.assign(_fresh_copy(value))
    elif target.device.type == "cpu" and not target.is_read_only:
        np.copyto(target.numpy(), value.numpy())
        target._bump_version()
    else:
        target._rebind(_fresh_copy(value))


def _fresh_copy(t: Tensor) -> Tensor:
    """A contiguous copy of ``t`` that shares no storage with it."""
    from .._tensor import tensor as _tensor
    if t.device.type == "cpu":
        return _tensor(t.numpy())          # dg.tensor copies
    return t.to("cpu").to(str(t.device))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _check_name(module: Module, name: str) -> None:
    if not isinstance(name, str):
        raise TypeError(f"{type(module).__name__}: attribute names must be str, got "
                        f"{type(name).__name__}")
    if not name or "." in name:
        raise KeyError(f"{type(module).__name__}: invalid name {name!r} (empty or "
                       "containing '.')")
    if name in module.__dict__ and name not in ("training",):
        pass
