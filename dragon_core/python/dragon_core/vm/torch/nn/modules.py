"""``torch.nn`` modules: PyTorch's ``Module`` contract (parameters, buffers,
submodules, ``state_dict``/``load_state_dict``, ``train``/``eval``,
hooks-free ``__call__``) with layers computed by
``torch.nn.functional`` (itself ``dragon_core.nn.functional``)."""

from __future__ import annotations

import itertools
import math
from collections import OrderedDict

import dragon_core as _dg

from .. import _dtype as D
from .._creation import empty, ones, zeros
from .._functions import _EXPORTS as _T
from .._tensor import Tensor, _w
from dragon_core import _memory_format as _mf
from . import functional as F
from . import init


class Parameter(Tensor):
    """A tensor a module owns and trains (``requires_grad=True``)."""

    __slots__ = ()

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = empty(0)
        t = data._t if isinstance(data, Tensor) else _dg.tensor(data)
        p = _dg.nn.Parameter(t.detach() if t.requires_grad else t,
                             requires_grad=bool(requires_grad))
        self = object.__new__(cls)
        self._t = p
        return self

    def __init__(self, data=None, requires_grad=True):
        pass

    def __repr__(self):
        return "Parameter containing:\n" + Tensor.__repr__(self)

    def __deepcopy__(self, memo):
        out = Parameter(_w(self._t._clone()), self.requires_grad)
        memo[id(self)] = out
        return out


class Buffer(Tensor):
    __slots__ = ()


class Module:
    """Base class of layers and models (PyTorch's contract)."""

    training: bool
    _version = 1
    dump_patches = False

    def __init__(self, *args, **kwargs):
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent", set())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_forward_hooks", OrderedDict())
        object.__setattr__(self, "_forward_pre_hooks", OrderedDict())

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  '"forward" function')

    def __call__(self, *args, **kwargs):
        if self._forward_pre_hooks:
            for hook in self._forward_pre_hooks.values():
                res = hook(self, args)
                if res is not None:
                    args = res if isinstance(res, tuple) else (res,)
        out = self.forward(*args, **kwargs)
        if self._forward_hooks:
            for hook in self._forward_hooks.values():
                res = hook(self, args, out)
                if res is not None:
                    out = res
        return out

    _call_impl = __call__

    def register_forward_hook(self, hook):
        key = len(self._forward_hooks)
        self._forward_hooks[key] = hook
        return _Handle(self._forward_hooks, key)

    def register_forward_pre_hook(self, hook):
        key = len(self._forward_pre_hooks)
        self._forward_pre_hooks[key] = hook
        return _Handle(self._forward_pre_hooks, key)

    def register_full_backward_hook(self, hook):
        raise NotImplementedError("backward hooks are not supported; use "
                                  "torch.autograd.grad on the module's output")

    register_backward_hook = register_full_backward_hook

    # ----------------------------------------------------------- attributes
    def __setattr__(self, name, value):
        d = self.__dict__
        if isinstance(value, Parameter):
            if "_parameters" not in d:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._remove(name)
            self._parameters[name] = value
        elif isinstance(value, Module):
            if "_modules" not in d:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._remove(name)
            self._modules[name] = value
        elif "_parameters" in d and name in self._parameters:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as parameter '{name}' "
                                "(torch.nn.Parameter or None expected)")
            self._parameters[name] = None
        elif "_modules" in d and name in self._modules:
            if value is not None:
                raise TypeError(f"cannot assign '{type(value).__name__}' as child module "
                                f"'{name}' (torch.nn.Module or None expected)")
            self._modules[name] = None
        elif "_buffers" in d and name in self._buffers:
            if value is not None and not isinstance(value, Tensor):
                raise TypeError(f"cannot assign '{type(value).__name__}' as buffer '{name}' "
                                "(torch.Tensor or None expected)")
            self._buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _remove(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            self.__dict__[table].pop(name, None)
        self.__dict__.pop(name, None)

    def __getattr__(self, name):
        d = self.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            t = d.get(table)
            if t is not None and name in t:
                return t[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for table in ("_parameters", "_buffers", "_modules"):
            if name in self.__dict__.get(table, {}):
                del self.__dict__[table][name]
                return
        object.__delattr__(self, name)

    def __dir__(self):
        return list(super().__dir__()) + list(self._parameters) + list(self._buffers) + \
            list(self._modules)

    def register_parameter(self, name, param):
        if param is not None and not isinstance(param, Parameter):
            raise TypeError(f"cannot assign '{type(param).__name__}' object to parameter "
                            f"'{name}' (torch.nn.Parameter or None required)")
        self._remove(name)
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        if tensor is not None and not isinstance(tensor, Tensor):
            raise TypeError(f"cannot assign '{type(tensor).__name__}' object to buffer "
                            f"'{name}' (torch Tensor or None required)")
        self._remove(name)
        self._buffers[name] = tensor
        if not persistent:
            self._non_persistent.add(name)
        else:
            self._non_persistent.discard(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{type(module).__name__} is not a Module subclass")
        self._remove(name)
        self._modules[name] = module

    register_module = add_module

    def get_submodule(self, target):
        mod = self
        for part in target.split(".") if target else []:
            mod = getattr(mod, part)
        return mod

    def get_parameter(self, target):
        mod, _, name = target.rpartition(".")
        return getattr(self.get_submodule(mod), name)

    # ------------------------------------------------------------ iteration
    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        if memo is None:
            memo = set()
        if self in memo and remove_duplicate:
            return
        memo.add(self)
        yield prefix, self
        for name, m in self._modules.items():
            if m is None:
                continue
            yield from m.named_modules(memo, prefix + ("." if prefix else "") + name,
                                       remove_duplicate)

    def modules(self):
        for _, m in self.named_modules():
            yield m

    def named_children(self):
        seen = set()
        for name, m in self._modules.items():
            if m is not None and m not in seen:
                seen.add(m)
                yield name, m

    def children(self):
        for _, m in self.named_children():
            yield m

    def _named(self, table, prefix, recurse, remove_duplicate=True):
        seen = set()
        mods = self.named_modules(prefix=prefix) if recurse else [(prefix, self)]
        for mp, m in mods:
            for name, v in m.__dict__[table].items():
                if v is None or (remove_duplicate and id(v) in seen):
                    continue
                seen.add(id(v))
                yield mp + ("." if mp else "") + name, v

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, b in self.named_buffers(recurse=recurse):
            yield b

    # ---------------------------------------------------------------- modes
    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for p in self.parameters():
            p.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        for p in self.parameters():
            if p._t.grad is not None:
                if set_to_none:
                    p._t.grad = None
                else:
                    p.grad.zero_()

    def apply(self, fn):
        for m in self.children():
            m.apply(fn)
        fn(self)
        return self

    def _apply_tensors(self, convert):
        """Convert every parameter and buffer; a parameter keeps its handle
        (the module and anything holding the handle see the new value)."""
        for m in self.modules():
            for table in ("_parameters", "_buffers"):
                entries = m.__dict__[table]
                for name, v in list(entries.items()):
                    if v is None:
                        continue
                    new = convert(v)
                    if new is v:
                        continue
                    if isinstance(v, Parameter):
                        t = new._t.detach() if new._t.requires_grad else new._t
                        v._t = _dg.nn.Parameter(t, requires_grad=v._t.requires_grad)
                    else:
                        entries[name] = new
        return self

    def to(self, *args, **kwargs):
        # memory_format (PyTorch's rule) lays out the 4-D floating-point
        # parameters and buffers only (5-D too for channels_last_3d).
        fmt = kwargs.pop("memory_format", None)
        if fmt is not None:
            fmt = _mf.as_memory_format(fmt, "Module.to")

        def convert(t):
            t = convert_dtype_device(t)
            if fmt is not None and t.dtype.is_floating_point and \
                    (fmt.rank is None or t.dim() == fmt.rank):
                t = t.contiguous(fmt)
            return t

        def convert_dtype_device(t):
            if not args and not kwargs:
                return t
            if not t.dtype.is_floating_point:
                kw = {k: v for k, v in kwargs.items() if k != "dtype"}
                a = [x for x in args if not isinstance(x, D.dtype)]
                return t.to(*a, **kw) if a or kw else t
            return t.to(*args, **kwargs)
        return self._apply_tensors(convert)

    def float(self):
        return self.to(D.DTYPES["float32"])

    def double(self):
        return self.to(D.DTYPES["float64"])

    def half(self):
        return self.to(D.DTYPES["float16"])

    def bfloat16(self):
        return self.to(D.DTYPES["bfloat16"])

    def cpu(self):
        return self.to("cpu")

    def cuda(self, device=None):
        return self.to("cuda" if device is None else f"cuda:{device}")

    def type(self, dst_type):
        return self.to(dst_type)

    def share_memory(self):
        return self

    # ------------------------------------------------------------ state dict
    def state_dict(self, *args, destination=None, prefix="", keep_vars=False):
        out = OrderedDict() if destination is None else destination
        self._save_to(out, prefix, keep_vars)
        return out

    def _save_to(self, out, prefix, keep_vars):
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = p if keep_vars else p.detach()
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = b if keep_vars else b.detach()
        for name, m in self._modules.items():
            if m is not None:
                m._save_to(out, prefix + name + ".", keep_vars)

    def _slots_to(self, out, prefix):
        """``{key: (module, table, name)}`` for each state-dict entry."""
        for name, p in self._parameters.items():
            if p is not None:
                out[prefix + name] = (self, "_parameters", name)
        for name, b in self._buffers.items():
            if b is not None and name not in self._non_persistent:
                out[prefix + name] = (self, "_buffers", name)
        for name, m in self._modules.items():
            if m is not None:
                m._slots_to(out, prefix + name + ".")

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy ``state_dict`` into the parameters and buffers, in place.

        As PyTorch's: each value is cast to the tensor's dtype and device and
        written into its memory (views and aliases taken before, optimizers
        and compiled functions holding the tensor see the loaded value; the
        version counter moves). Size mismatches and, with ``strict``, missing
        or unexpected keys raise a RuntimeError listing them all, after the
        keys that fit were loaded (PyTorch's order). ``assign=True`` instead
        makes each state-dict tensor the module's (its dtype and device; a
        parameter keeps its ``requires_grad``); earlier views keep the old
        values. A view taken while autograd records is a copy here, so an
        in-place load with one alive raises before anything is written.
        """
        from .._tensor import _check_inplace_target
        from ..autograd import no_grad
        slots = OrderedDict()
        self._slots_to(slots, "")
        missing = [k for k in slots if k not in state_dict]
        unexpected = [k for k in state_dict if k not in slots]
        errors = []
        updates = []
        for k, v in state_dict.items():
            if k not in slots:
                continue
            mod, table, name = slots[k]
            mine = getattr(mod, table)[name]
            if isinstance(v, Tensor):
                src = v
            elif isinstance(v, _dg.Tensor):
                src = _w(v)
            else:
                src = _w(_dg.tensor(v))
            if tuple(src.shape) != tuple(mine.shape):
                errors.append(f'size mismatch for {k}: copying a param with shape '
                              f'{src.shape} from checkpoint, the shape in current model is '
                              f'{mine.shape}.')
                continue
            updates.append((k, mod, table, name, mine, src))
        if not assign:
            for k, _, _, _, mine, _ in updates:
                _check_inplace_target(mine, f"load_state_dict for {type(self).__name__} "
                                      f"('{k}')", False)
        with no_grad():
            for k, mod, table, name, mine, src in updates:
                if not assign:
                    mine.copy_(src)
                elif table == "_parameters":
                    mod._parameters[name] = src if isinstance(src, Parameter) and \
                        src.requires_grad == mine.requires_grad else \
                        Parameter(src, requires_grad=mine.requires_grad)
                else:
                    mod._buffers[name] = src
        if strict and (missing or unexpected):
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in missing) + ".")
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: " +
                              ", ".join(f'"{k}"' for k in unexpected) + ".")
        if errors:
            raise RuntimeError(f"Error(s) in loading state_dict for {type(self).__name__}:\n\t"
                               + "\n\t".join(errors))
        return _IncompatibleKeys(missing, unexpected)

    # ----------------------------------------------------------------- repr
    def extra_repr(self):
        return ""

    def __repr__(self):
        lines = []
        extra = self.extra_repr()
        for name, m in self._modules.items():
            r = repr(m).replace("\n", "\n  ")
            lines.append(f"({name}): {r}")
        main = type(self).__name__ + "("
        if extra and not lines:
            return main + extra + ")"
        body = ([extra] if extra else []) + lines
        if not body:
            return main + ")"
        return main + "\n  " + "\n  ".join(body) + "\n)"

    def __deepcopy__(self, memo):
        import copy
        new = object.__new__(type(self))
        memo[id(self)] = new
        for k, v in self.__dict__.items():
            object.__setattr__(new, k, copy.deepcopy(v, memo))
        return new

    def __getstate__(self):
        raise TypeError("modules are not picklable here; save module.state_dict() with "
                        "torch.save")


class _IncompatibleKeys(tuple):
    def __new__(cls, missing, unexpected):
        self = tuple.__new__(cls, (missing, unexpected))
        return self

    missing_keys = property(lambda self: self[0])
    unexpected_keys = property(lambda self: self[1])

    def __repr__(self):
        if not self[0] and not self[1]:
            return "<All keys matched successfully>"
        return f"_IncompatibleKeys(missing_keys={self[0]}, unexpected_keys={self[1]})"


class _Handle:
    def __init__(self, table, key):
        self._table, self._key = table, key

    def remove(self):
        self._table.pop(self._key, None)


# ================================================================ containers
class Sequential(Module):
    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for k, m in args[0].items():
                self.add_module(k, m)
        else:
            for i, m in enumerate(args):
                self.add_module(str(i), m)

    def forward(self, input):
        for m in self._modules.values():
            input = m(input)
        return input

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(OrderedDict(list(self._modules.items())[idx]))
        return mods[idx]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self


class ModuleList(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return ModuleList(mods[idx])
        return mods[idx]

    def __setitem__(self, idx, module):
        key = list(self._modules)[idx]
        self._modules[key] = module

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for m in modules:
            self.append(m)
        return self

    def insert(self, index, module):
        mods = list(self._modules.values())
        mods.insert(index, module)
        self._modules.clear()
        for i, m in enumerate(mods):
            self._modules[str(i)] = m


class ModuleDict(Module):
    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def keys(self):
        return self._modules.keys()

    def values(self):
        return self._modules.values()

    def items(self):
        return self._modules.items()

    def update(self, modules):
        items = modules.items() if hasattr(modules, "items") else modules
        for k, m in items:
            self.add_module(k, m)


class ParameterList(Module):
    def __init__(self, values=None):
        super().__init__()
        for v in values or []:
            self.append(v)

    def append(self, value):
        self.register_parameter(str(len(self._parameters)), value if isinstance(
            value, Parameter) else Parameter(value))
        return self

    def __getitem__(self, idx):
        return list(self._parameters.values())[idx]

    def __len__(self):
        return len(self._parameters)

    def __iter__(self):
        return iter(self._parameters.values())


class ParameterDict(Module):
    def __init__(self, values=None):
        super().__init__()
        for k, v in (values or {}).items():
            self[k] = v

    def __setitem__(self, k, v):
        self.register_parameter(k, v if isinstance(v, Parameter) else Parameter(v))

    def __getitem__(self, k):
        return self._parameters[k]

    def keys(self):
        return self._parameters.keys()

    def items(self):
        return self._parameters.items()

    def __len__(self):
        return len(self._parameters)


# =================================================================== layers
class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


class Linear(Module):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        self.bias = Parameter(empty(out_features, dtype=dtype)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()
        if device is not None:
            self.to(device)

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            bound = 1 / math.sqrt(self.in_features) if self.in_features > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, input):
        b = self._parameters["bias"]
        return _w(_dg.nn.functional.linear(input._t, self._parameters["weight"]._t,
                                           None if b is None else b._t))

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class Bilinear(Module):
    def __init__(self, in1_features, in2_features, out_features, bias=True):
        super().__init__()
        self.weight = Parameter(empty(out_features, in1_features, in2_features))
        bound = 1 / math.sqrt(in1_features)
        init.uniform_(self.weight, -bound, bound)
        self.bias = Parameter(empty(out_features)) if bias else None
        if bias:
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x1, x2):
        return F.bilinear(x1, x2, self.weight, self.bias)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


class _ConvNd(Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                 groups, bias, padding_mode, nd, transposed=False, output_padding=0,
                 dtype=None):
        super().__init__()
        if in_channels % groups or out_channels % groups:
            raise ValueError("in_channels and out_channels must be divisible by groups")
        if padding_mode not in ("zeros", "reflect", "replicate", "circular"):
            raise ValueError(f"padding_mode must be one of 'zeros', 'reflect', 'replicate' or "
                             f"'circular', got {padding_mode!r}")
        if padding_mode != "zeros" and transposed:
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f'{type(self).__name__}')
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 "{'valid', 'same'}")
            if padding == "same" and any(v != 1 for v in ((stride,) * nd if isinstance(
                    stride, int) else tuple(stride))):
                raise ValueError("padding='same' is not supported for strided convolutions")
        ks = (kernel_size,) * nd if isinstance(kernel_size, int) else tuple(kernel_size)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, ks
        self.stride = (stride,) * nd if isinstance(stride, int) else tuple(stride)
        self.padding = padding if isinstance(padding, str) else (
            (padding,) * nd if isinstance(padding, int) else tuple(padding))
        self.dilation = (dilation,) * nd if isinstance(dilation, int) else tuple(dilation)
        self.output_padding = (output_padding,) * nd if isinstance(output_padding, int) \
            else tuple(output_padding)
        self.groups, self.padding_mode, self.transposed = groups, padding_mode, transposed
        shape = ((in_channels, out_channels // groups) if transposed else
                 (out_channels, in_channels // groups)) + ks
        self.weight = Parameter(empty(*shape, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def _mode_padded(self, input):
        """(input, padding): with a padding_mode other than zeros, the input
        padded by F.pad in that mode and a padding of 0 for the conv."""
        if self.padding_mode == "zeros":
            return input, self.padding
        nd = len(self.kernel_size)
        if self.padding == "valid":
            return input, (0,) * nd
        if self.padding == "same":
            tot = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
            pairs = [(t // 2, t - t // 2) for t in tot]
        else:
            pairs = [(p, p) for p in self.padding]
        flat = []
        for lo, hi in reversed(pairs):   # F.pad: last axis first
            flat += [lo, hi]
        return F.pad(input, flat, mode=self.padding_mode), (0,) * nd

    def reset_parameters(self):
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.weight.shape[1] * math.prod(self.kernel_size)
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def extra_repr(self):
        s = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
             f"stride={self.stride}")
        if self.padding not in ((0,), (0, 0)):
            s += f", padding={self.padding}"
        if self.bias is None:
            s += ", bias=False"
        return s


class Conv2d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 2, dtype=dtype)

    def forward(self, input):
        input, padding = self._mode_padded(input)
        if isinstance(padding, str) or input.ndim != 4:
            return F.conv2d(input, self.weight, self.bias, self.stride, padding,
                            self.dilation, self.groups)
        b = self._parameters["bias"]
        return _w(_dg.nn.functional.conv2d(input._t, self._parameters["weight"]._t,
                                           None if b is None else b._t, self.stride,
                                           padding, self.dilation, self.groups))


class Conv1d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 1, dtype=dtype)

    def forward(self, input):
        input, padding = self._mode_padded(input)
        p = padding if isinstance(padding, str) else padding[0]
        return F.conv1d(input, self.weight, self.bias, self.stride[0], p, self.dilation[0],
                        self.groups)


def _no_output_size(module, output_size):
    """torch picks output_padding from ``output_size``; we do not, so it raises
    rather than return a tensor of another shape."""
    if output_size is not None:
        raise NotImplementedError(
            f"{type(module).__name__}.forward(output_size=...) is not supported; set "
            f"output_padding when constructing the module instead")


class ConvTranspose2d(_ConvNd):
    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 2, True, output_padding, dtype=dtype)

    def forward(self, input, output_size=None):
        _no_output_size(self, output_size)
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class ConvTranspose1d(_ConvNd):
    """``torch.nn.ConvTranspose1d`` over ConvTranspose2d with a height of 1."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 1, True, output_padding, dtype=dtype)

    def forward(self, input, output_size=None):
        _no_output_size(self, output_size)
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class Conv3d(_ConvNd):
    """``torch.nn.Conv3d`` over the native Conv3d."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 dilation=1, groups=1, bias=True, padding_mode="zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 3, dtype=dtype)

    def forward(self, input):
        input, padding = self._mode_padded(input)
        return F.conv3d(input, self.weight, self.bias, self.stride, padding,
                        self.dilation, self.groups)


class ConvTranspose3d(_ConvNd):
    """``torch.nn.ConvTranspose3d`` over the native ConvTranspose3d."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         groups, bias, padding_mode, 3, True, output_padding, dtype=dtype)

    def forward(self, input, output_size=None):
        _no_output_size(self, output_size)
        return F.conv_transpose3d(input, self.weight, self.bias, self.stride, self.padding,
                                  self.output_padding, self.groups, self.dilation)


class _Pool(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.dilation, self.ceil_mode = padding, dilation, ceil_mode
        self.return_indices = return_indices

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class _MaxPool(_Pool):
    _fn = None

    def forward(self, input):
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding,
                              self.dilation, self.ceil_mode, self.return_indices)


class MaxPool1d(_MaxPool):
    _fn = staticmethod(F.max_pool1d)


class MaxPool2d(_MaxPool):
    _fn = staticmethod(F.max_pool2d)


class MaxPool3d(_MaxPool):
    """``torch.nn.MaxPool3d`` over the native MaxPool3d."""

    _fn = staticmethod(F.max_pool3d)


class _AvgPool(Module):
    _fn = None

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = kernel_size if stride is None else stride
        self.padding, self.ceil_mode = padding, ceil_mode
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, input):
        extra = () if self.divisor_override is None else (self.divisor_override,)
        return type(self)._fn(input, self.kernel_size, self.stride, self.padding,
                              self.ceil_mode, self.count_include_pad, *extra)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(_AvgPool):
    _fn = staticmethod(F.avg_pool1d)

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode, count_include_pad)


class AvgPool2d(_AvgPool):
    _fn = staticmethod(F.avg_pool2d)


class AvgPool3d(_AvgPool):
    """``torch.nn.AvgPool3d`` over the native AvgPool3d."""

    _fn = staticmethod(F.avg_pool3d)


class _LPPool(Module):
    _fn = None

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type, self.kernel_size = norm_type, kernel_size
        self.stride, self.ceil_mode = stride, ceil_mode

    def forward(self, input):
        return type(self)._fn(input, float(self.norm_type), self.kernel_size, self.stride,
                              self.ceil_mode)


class LPPool1d(_LPPool):
    _fn = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPool):
    _fn = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPool):
    _fn = staticmethod(F.lp_pool3d)


class PixelShuffle(Module):
    def __init__(self, upscale_factor):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, input):
        return F.pixel_shuffle(input, self.upscale_factor)


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, input):
        return F.pixel_unshuffle(input, self.downscale_factor)


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool2d(input, self.output_size)


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)


class AdaptiveMaxPool2d(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size, self.return_indices = output_size, return_indices

    def forward(self, input):
        return F.adaptive_max_pool2d(input, self.output_size, self.return_indices)


class AdaptiveMaxPool1d(AdaptiveMaxPool2d):
    def forward(self, input):
        return F.adaptive_max_pool1d(input, self.output_size, self.return_indices)


class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode="nearest", align_corners=None,
                 recompute_scale_factor=None):
        super().__init__()
        self.size, self.scale_factor, self.mode = size, scale_factor, mode
        self.align_corners, self.recompute_scale_factor = align_corners, recompute_scale_factor

    def forward(self, input):
        return F.interpolate(input, self.size, self.scale_factor, self.mode, self.align_corners,
                             self.recompute_scale_factor)

    def extra_repr(self):   # as torch's (a scale factor shown as floats)
        sf = self.scale_factor
        if sf is not None:
            sf = tuple(float(v) for v in sf) if isinstance(sf, (tuple, list)) else float(sf)
            info = f"scale_factor={sf!r}"
        else:
            info = f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class _BatchNorm(Module):
    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = Parameter(ones(num_features, dtype=dtype))
            self.bias = Parameter(zeros(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", zeros((), dtype=D.DTYPES["int64"]))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self):
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            init.zeros_(self.bias)

    def _check_input_dim(self, input):
        pass

    def forward(self, input):
        self._check_input_dim(input)
        use_batch = self.training or self.running_mean is None
        if use_batch:
            F._check_batch_values(input, type(self).__name__)
        momentum = self.momentum
        if self.training and self.track_running_stats:
            nbt = self._buffers["num_batches_tracked"]
            nbt._t.assign(_dg.ops.add(nbt._t, 1)) if not _dg._C._is_tracing() else None
            if momentum is None:
                momentum = 1.0 / float(nbt.item())
        rm, rv = self._buffers["running_mean"], self._buffers["running_var"]
        w, b = self._parameters["weight"], self._parameters["bias"]
        return _w(_dg.nn.functional.batch_norm(
            input._t, None if rm is None else rm._t, None if rv is None else rv._t,
            None if w is None else w._t, None if b is None else b._t,
            use_batch, momentum, self.eps))

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.ndim not in (2, 3):
            raise ValueError(f"expected 2D or 3D input (got {input.ndim}D input)")


class BatchNorm2d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.ndim != 4:
            raise ValueError(f"expected 4D input (got {input.ndim}D input)")


class BatchNorm3d(_BatchNorm):
    def _check_input_dim(self, input):
        if input.ndim != 5:
            raise ValueError(f"expected 5D input (got {input.ndim}D input)")


class _InstanceNorm(_BatchNorm):
    """InstanceNorm1d/2d/3d: per-sample statistics; the running ones (with
    ``track_running_stats``) move as torch's (``momentum=None`` keeps them)
    and serve in eval mode. ``num_batches_tracked`` exists but stays 0, as
    in torch."""

    _rank = 0

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype)

    def forward(self, input):
        r = self._rank
        if input.ndim not in (r - 1, r):
            raise ValueError(f"expected {r - 1}D or {r}D input (got {input.ndim}D input)")
        if input.ndim == r - 1:
            return self.forward(input.unsqueeze(0)).squeeze(0)
        if input.shape[1] != self.num_features and self.affine:
            raise ValueError(f"expected input's size at dim=1 to match num_features "
                             f"({self.num_features}), but got: {input.shape[1]}.")
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               self.momentum if self.momentum is not None else 0.0, self.eps)


class InstanceNorm1d(_InstanceNorm):
    _rank = 3


class InstanceNorm2d(_InstanceNorm):
    _rank = 4


class InstanceNorm3d(_InstanceNorm):
    _rank = 5


class LayerNorm(Module):
    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(*self.normalized_shape, dtype=dtype))
            self.bias = Parameter(zeros(*self.normalized_shape, dtype=dtype)) if bias else None
            if not bias:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, " \
               f"elementwise_affine={self.elementwise_affine}"


class GroupNorm(Module):
    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None):
        super().__init__()
        self.num_groups, self.num_channels, self.eps, self.affine = (num_groups, num_channels,
                                                                     eps, affine)
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype))
            self.bias = Parameter(zeros(num_channels, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)


class Dropout(Module):
    _fn = staticmethod(F.dropout)

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, input):
        return type(self)._fn(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    _fn = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    _fn = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    _fn = staticmethod(F.dropout3d)


class AlphaDropout(Dropout):
    _fn = staticmethod(F.alpha_dropout)


class Embedding(Module):
    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None and padding_idx < 0:
            padding_idx += num_embeddings
        self.padding_idx = padding_idx
        self.max_norm, self.norm_type = max_norm, norm_type
        self.scale_grad_by_freq, self.sparse = scale_grad_by_freq, sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype))
            init.normal_(self.weight)
            if padding_idx is not None:
                from ..autograd import no_grad
                with no_grad():
                    self.weight[padding_idx] = 0.0
        else:
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        n, d = embeddings.shape
        return cls(n, d, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm, self.norm_type,
                           self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}"


class Flatten(Module):
    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)


class Unflatten(Module):
    def __init__(self, dim, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, unflattened_size

    def forward(self, input):
        return input.unflatten(self.dim, self.unflattened_size)


# ------------------------------------------------------------- activations
def _act(name, fn, params=None, inplace=False):
    """An activation module over ``fn(input, **params)``: the constructor
    takes ``params`` (by position or name) and, where torch's has it,
    ``inplace`` after them (passed to ``fn``: the input takes the result)."""
    params = params or {}

    def __init__(self, *args, **kwargs):
        Module.__init__(self)
        names = list(params) + (["inplace"] if inplace else [])
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments, got {len(args)}")
        vals = dict(zip(names, args))
        for k in kwargs:
            if k not in names or k in vals:
                raise TypeError(f"{name}() got an unexpected or repeated argument {k!r}")
        vals.update(kwargs)
        for k, default in params.items():
            if k not in vals and default is _REQUIRED:
                raise TypeError(f"{name}() missing required argument {k!r}")
            setattr(self, k, vals.get(k, default))
        if inplace:
            self.inplace = bool(vals.get("inplace", False))

    def forward(self, input):
        kw = {k: getattr(self, k) for k in params}
        if inplace:
            kw["inplace"] = self.inplace
        return fn(input, **kw)

    def extra_repr(self):
        return ", ".join(f"{k}={getattr(self, k)}" for k in params)
    cls = type(name, (Module,), {"__init__": __init__, "forward": forward,
                                 "extra_repr": extra_repr})
    return cls


_REQUIRED = object()
ReLU = _act("ReLU", F.relu, inplace=True)
ReLU6 = _act("ReLU6", F.relu6, inplace=True)
Sigmoid = _act("Sigmoid", F.sigmoid)
Tanh = _act("Tanh", F.tanh)
SiLU = _act("SiLU", F.silu, inplace=True)
Mish = _act("Mish", F.mish, inplace=True)
SELU = _act("SELU", F.selu, inplace=True)
Softsign = _act("Softsign", F.softsign)
LogSigmoid = _act("LogSigmoid", F.logsigmoid)
Hardsigmoid = _act("Hardsigmoid", F.hardsigmoid, inplace=True)
Hardswish = _act("Hardswish", F.hardswish, inplace=True)
Tanhshrink = _act("Tanhshrink", F.tanhshrink)
LeakyReLU = _act("LeakyReLU", F.leaky_relu, {"negative_slope": 0.01}, inplace=True)
ELU = _act("ELU", F.elu, {"alpha": 1.0}, inplace=True)
CELU = _act("CELU", F.celu, {"alpha": 1.0}, inplace=True)
GELU = _act("GELU", F.gelu, {"approximate": "none"})
Softplus = _act("Softplus", F.softplus, {"beta": 1.0, "threshold": 20.0})
Hardtanh = _act("Hardtanh", F.hardtanh, {"min_val": -1.0, "max_val": 1.0}, inplace=True)
Threshold = _act("Threshold", F.threshold, {"threshold": _REQUIRED, "value": _REQUIRED},
                 inplace=True)
Hardshrink = _act("Hardshrink", F.hardshrink, {"lambd": 0.5})
Softshrink = _act("Softshrink", F.softshrink, {"lambd": 0.5})
Softmax = _act("Softmax", F.softmax, {"dim": None})
LogSoftmax = _act("LogSoftmax", F.log_softmax, {"dim": None})
Softmin = _act("Softmin", F.softmin, {"dim": None})
GLU = _act("GLU", F.glu, {"dim": -1})


class PReLU(Module):
    def __init__(self, num_parameters=1, init=0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters = num_parameters
        from .._creation import full
        self.weight = Parameter(full((num_parameters,), float(init), dtype=dtype))

    def forward(self, input):
        w = self.weight
        if input.ndim >= 2 and self.num_parameters > 1:
            w = w.reshape(-1, *[1] * (input.ndim - 2))
        # (x > 0: at 0 the gradient w.r.t. x is the weight, as torch's)
        return _T["where"](input > 0, input, input * w)


class CosineSimilarity(Module):
    def __init__(self, dim=1, eps=1e-8):
        super().__init__()
        self.dim, self.eps = dim, eps

    def forward(self, x1, x2):
        return F.cosine_similarity(x1, x2, self.dim, self.eps)


class PairwiseDistance(Module):
    def __init__(self, p=2.0, eps=1e-6, keepdim=False):
        super().__init__()
        self.p, self.eps, self.keepdim = p, eps, keepdim

    def forward(self, x1, x2):
        return F.pairwise_distance(x1, x2, self.p, self.eps, self.keepdim)


# ------------------------------------------------------------------ losses
class _Loss(Module):
    def __init__(self, size_average=None, reduce=None, reduction="mean"):
        super().__init__()
        self.reduction = F._legacy(size_average, reduce, reduction)


class CrossEntropyLoss(_Loss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean", label_smoothing=0.0):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input, target):
        if self.weight is None and not self.label_smoothing and input.ndim == 2 \
                and target.ndim == 1:
            t = target._t
            return _w(_dg.nn.functional.cross_entropy(
                input._t, t if t._dtype_code == _I64 else _dg.ops.cast(t, "int64"),
                self.ignore_index, self.reduction))
        return F.cross_entropy(input, target, self.weight, ignore_index=self.ignore_index,
                               reduction=self.reduction, label_smoothing=self.label_smoothing)


_I64 = D.DTYPES["int64"]._dg.code


class NLLLoss(_Loss):
    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.ignore_index = ignore_index

    def forward(self, input, target):
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                          reduction=self.reduction)


def _simple_loss(name, fn, extra=None):
    extra = extra or {}

    def __init__(self, *args, size_average=None, reduce=None, reduction="mean", **kwargs):
        _Loss.__init__(self, size_average, reduce, reduction)
        for (k, default), v in itertools.zip_longest(extra.items(), args, fillvalue=None):
            if k is None:
                break
            setattr(self, k, kwargs.get(k, default if v is None else v))

    def forward(self, input, target):
        return fn(input, target, reduction=self.reduction,
                  **{k: getattr(self, k) for k in extra})
    return type(name, (_Loss,), {"__init__": __init__, "forward": forward})


MSELoss = _simple_loss("MSELoss", F.mse_loss)
L1Loss = _simple_loss("L1Loss", F.l1_loss)
SmoothL1Loss = _simple_loss("SmoothL1Loss", F.smooth_l1_loss, {"beta": 1.0})
HuberLoss = _simple_loss("HuberLoss", F.huber_loss, {"delta": 1.0})
KLDivLoss = _simple_loss("KLDivLoss", F.kl_div, {"log_target": False})
BCELoss = _simple_loss("BCELoss", F.binary_cross_entropy, {"weight": None})
SoftMarginLoss = _simple_loss("SoftMarginLoss", F.soft_margin_loss)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean",
                 pos_weight=None):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)
        self.register_buffer("pos_weight", pos_weight)

    def forward(self, input, target):
        return F.binary_cross_entropy_with_logits(input, target, self.weight,
                                                  reduction=self.reduction,
                                                  pos_weight=self.pos_weight)


class CosineEmbeddingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, x1, x2, target):
        return F.cosine_embedding_loss(x1, x2, target, self.margin, self.reduction)


class MarginRankingLoss(_Loss):
    def __init__(self, margin=0.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, x1, x2, target):
        return F.margin_ranking_loss(x1, x2, target, self.margin, self.reduction)


class TripletMarginLoss(_Loss):
    def __init__(self, margin=1.0, p=2.0, eps=1e-6, swap=False, size_average=None,
                 reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin, self.p, self.eps, self.swap = margin, p, eps, swap

    def forward(self, a, p, n):
        return F.triplet_margin_loss(a, p, n, self.margin, self.p, self.eps, self.swap,
                                     reduction=self.reduction)


class MultiMarginLoss(_Loss):
    def __init__(self, p=1, margin=1.0, weight=None, size_average=None, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        if p not in (1, 2):
            raise ValueError("only p == 1 and p == 2 supported")
        self.p, self.margin = p, margin
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multi_margin_loss(input, target, self.p, self.margin, self.weight,
                                   reduction=self.reduction)


class PoissonNLLLoss(_Loss):
    def __init__(self, log_input=True, full=False, size_average=None, eps=1e-8, reduce=None,
                 reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.log_input, self.full, self.eps = log_input, full, eps

    def forward(self, input, target):
        return F.poisson_nll_loss(input, target, self.log_input, self.full, eps=self.eps,
                                  reduction=self.reduction)


class GaussianNLLLoss(_Loss):
    def __init__(self, *, full=False, eps=1e-6, reduction="mean"):
        super().__init__(reduction=reduction)
        self.full, self.eps = full, eps

    def forward(self, input, target, var):
        return F.gaussian_nll_loss(input, target, var, self.full, self.eps, self.reduction)


class HingeEmbeddingLoss(_Loss):
    def __init__(self, margin=1.0, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.margin = margin

    def forward(self, input, target):
        return F.hinge_embedding_loss(input, target, self.margin, reduction=self.reduction)


class MultiLabelSoftMarginLoss(_Loss):
    def __init__(self, weight=None, size_average=None, reduce=None, reduction="mean"):
        super().__init__(size_average, reduce, reduction)
        self.register_buffer("weight", weight)

    def forward(self, input, target):
        return F.multilabel_soft_margin_loss(input, target, self.weight,
                                             reduction=self.reduction)


# ---------------------------------------------------------------- padding
class _PadNd(Module):
    """torch's padding layers over ``F.pad``: an int pads every side, or one
    (left, right) pair per spatial axis, last axis first."""
    mode, nd = "constant", 1

    def __init__(self, padding, value=0.0):
        super().__init__()
        if isinstance(padding, int):
            padding = (padding,) * (2 * self.nd)
        padding = tuple(int(p) for p in padding)
        if len(padding) != 2 * self.nd:
            raise ValueError(f"{type(self).__name__}: padding must be an int or "
                             f"{2 * self.nd} ints, got {padding}")
        self.padding, self.value = padding, value

    def forward(self, input):
        if self.mode == "constant":
            return F.pad(input, self.padding, "constant", self.value)
        return F.pad(input, self.padding, self.mode)

    def extra_repr(self):   # as torch's: ConstantPad names both, the others the padding
        if type(self).__name__.startswith("Constant"):
            return f"padding={self.padding}, value={self.value}"
        return f"{self.padding}"


def _pad_layer(name, mode, nd, constant=False):
    def __init__(self, padding, *value):
        if constant and len(value) != 1:
            raise TypeError(f"{name}.__init__() needs padding and value")
        _PadNd.__init__(self, padding, *(value if constant else (0.0,)))
    return type(name, (_PadNd,), {"mode": mode, "nd": nd, "__init__": __init__})


for _nd in (1, 2, 3):
    globals()[f"ZeroPad{_nd}d"] = _pad_layer(f"ZeroPad{_nd}d", "constant", _nd)
    globals()[f"ConstantPad{_nd}d"] = _pad_layer(f"ConstantPad{_nd}d", "constant", _nd, True)
    globals()[f"ReflectionPad{_nd}d"] = _pad_layer(f"ReflectionPad{_nd}d", "reflect", _nd)
    globals()[f"ReplicationPad{_nd}d"] = _pad_layer(f"ReplicationPad{_nd}d", "replicate", _nd)
    globals()[f"CircularPad{_nd}d"] = _pad_layer(f"CircularPad{_nd}d", "circular", _nd)
del _nd


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "nearest")


class UpsamplingBilinear2d(Upsample):
    """Bilinear with ``align_corners=True`` (torch's legacy layer)."""

    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, "bilinear", True)


class Softmax2d(Module):
    """Softmax over the channels of ``[N, C, H, W]`` or ``[C, H, W]``."""

    def forward(self, input):
        if input.ndim not in (3, 4):
            raise ValueError(f"Softmax2d: expected a 3-D or 4-D input, got shape "
                             f"{tuple(input.shape)}")
        return F.softmax(input, -3)


class ChannelShuffle(Module):
    def __init__(self, groups):
        super().__init__()
        self.groups = int(groups)

    def extra_repr(self):
        return f"groups={self.groups}"

    def forward(self, input):
        g = self.groups
        if input.ndim < 3 or g <= 0 or input.shape[1] % g:
            raise RuntimeError(f"ChannelShuffle: {input.shape[1] if input.ndim > 1 else '?'} "
                               f"channels of input {tuple(input.shape)} do not split into "
                               f"{g} groups (an input of rank >= 3 is needed)")
        n, c = input.shape[0], input.shape[1]
        rest = tuple(input.shape[2:])
        return input.reshape(n, g, c // g, *rest).transpose(1, 2).reshape(n, c, *rest)


class LocalResponseNorm(Module):
    def __init__(self, size, alpha=1e-4, beta=0.75, k=1.0):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"

    def forward(self, input):
        return F.local_response_norm(input, self.size, self.alpha, self.beta, self.k)
