"""Dragon: a deep-learning framework where every op and backend is a plugin.

This package is the core: Tensor, the op schema registry, the dispatcher,
the caching allocator and the plugin loader. It ships no compute kernel;
kernels and devices come from plugins discovered through the entry-point
group ``dragon_core.plugins`` (e.g. ``pip install dragon-cpu-eigen``).
"""

from __future__ import annotations

from . import _C
from . import errors
from ._device import Device
from ._dtypes import (bfloat16, bool_, dtype, float16, float32, float64, int8, int16,
                      int32, int64, uint8, uint16, uint32, uint64, as_dtype)
from ._tensor import Tensor, from_dlpack, from_numpy, tensor
from ._memory_format import (channels_last, channels_last_3d, contiguous_format,  # noqa: E402
                             memory_format, preserve_format)
from ._workspace import Workspace, default_workspace, get_workspace
from ._stream import (Event, Stream, current_stream, default_stream, stream,
                      synchronize)
from . import _tensor as _tensor_mod
from . import memory
from . import plugins

__version__ = _C.__version__
ABI_VERSION = _C.ABI_VERSION

_C._set_hooks(_tensor_mod._convert, _tensor_mod._binary_slow, errors._make,
              lambda obj: as_dtype(obj).code)
_C._set_no_kernel_hint(plugins.no_kernel_hint)
_tensor_mod._install()

from . import ops  # noqa: E402

import sys as _sys  # noqa: E402

plugins.discover(_sys.modules[__name__])
plugins._apply_pins()
ops._refresh()
_tensor_mod._install_methods()
plugins._check_strict()

load_library = plugins.load_library

from . import _autograd  # noqa: E402
from . import _grads  # noqa: E402,F401
from ._autograd import (GradientTape, enable_grad, grad, is_grad_enabled,  # noqa: E402
                        no_grad)


def _tensor_backward(self, gradient=None, create_graph: bool = False):
    """Accumulate the gradient of this tensor into the ``.grad`` of the
    leaves that require grad (``gradient`` defaults to ones)."""
    _autograd.backward([self], None if gradient is None else [gradient], create_graph)


Tensor.backward = _tensor_backward
Tensor.register_post_accumulate_grad_hook = _autograd.register_post_accumulate_grad_hook
Tensor.is_leaf = property(lambda self: self._grad_fn is None,
                          doc="True for tensors not produced by a recorded op.")


def _detach(self):
    """A tensor sharing storage with this one, outside any autograd graph."""
    out = self._alias()
    if _C._is_tracing():
        from ._graph.function import note_alias
        note_alias(self, out)
    return out


Tensor.detach = _detach


def _requires_grad_(self, value: bool = True):
    self.requires_grad = value
    return self


Tensor.requires_grad_ = _requires_grad_

from ._graph import Function, cond, function, load_graph, save_graph, while_loop  # noqa: E402
from ._graph.passes import GraphPass  # noqa: E402


def device(spec, index: int | None = None) -> Device:
    """A :class:`Device` from ``"cuda:1"``, ``("cuda", 1)`` or a Device.

    The type must be one a loaded plugin registers (or one a known wheel
    provides, such as ``"cuda"`` from ``dragon-cuda``); whether a device
    of that index exists is checked where it is used, as in PyTorch.
    """
    if index is not None:
        if isinstance(spec, Device) or (isinstance(spec, str) and ":" in spec):
            raise ValueError(f"device({spec!r}, {index}): give the index once, in the "
                             f"string or as the second argument")
        if isinstance(index, bool) or not isinstance(index, int) or index < 0:
            raise ValueError(f"device: index must be an int >= 0, got {index!r}")
        spec = f"{spec}:{index}"
    d = Device.parse(spec)
    registered = [e["name"] for e in _C.devices()]
    if d.type not in registered and d.type not in plugins.KNOWN_PROVIDERS:
        raise ValueError(f"device: unknown device type '{d.type}'; registered types: "
                         f"{registered} (a device type comes from a plugin)")
    return d


def manual_seed(seed: int) -> None:
    """Seed the global generator that random ops draw from when ``seed=-1``."""
    _C.manual_seed(int(seed))


def infer_shape(op: str, inputs, **attrs):
    """Run an op's shape/dtype inference without running it.

    Parameters
    ----------
    op : str
        Op name (``"MatMul"``) or Python name (``"matmul"``).
    inputs : list of tuple
        One ``(shape, dtype)`` pair per input: a tuple of ints and a dtype.
    **attrs
        Attribute values by name; unset ones take their defaults.

    Returns
    -------
    list of tuple
        One ``(shape, dtype_name)`` pair per output.
    """
    handle = _C.op(op)
    desc = handle.describe()
    names = [a["name"] for a in desc["attrs"]]
    unknown = set(attrs) - set(names)
    if unknown:
        raise TypeError(f"{desc['name']}: unknown attribute(s) {sorted(unknown)}; "
                        f"it has {names}")
    values = []
    for a in desc["attrs"]:
        values.append(attrs[a["name"]] if a["name"] in attrs else
                      (None if (a["optional"] or a["required"]) else a["default"]))
    metas = [(tuple(int(d) for d in s), as_dtype(t).code) for s, t in inputs]
    return [(shape, as_dtype(code).name) for shape, code in
            _C.infer_shape(desc["name"], metas, tuple(values))]


from . import nn, optim, data, summary  # noqa: E402
from .serialization import load, save  # noqa: E402
from .custom_op import custom_op  # noqa: E402
from . import fusion  # noqa: E402
from . import plugin_api  # noqa: E402
from . import amp  # noqa: E402
from . import profiler  # noqa: E402
from .amp import GradScaler, autocast  # noqa: E402


def __getattr__(name: str):
    """``dragon_core.cuda`` and the like: a namespace per device type
    (``is_available``, ``device_count``, ``get_device_name``,
    ``synchronize``, memory queries) built from the device registry, so the
    core names no device (see ``_device_modules``)."""
    if not name.startswith("_"):
        from . import _device_modules

        m = _device_modules.lookup(name)
        if m is not None:
            return m
    raise AttributeError(f"module 'dragon_core' has no attribute '{name}'")
