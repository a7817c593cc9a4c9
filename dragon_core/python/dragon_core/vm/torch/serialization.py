"""``torch.save`` / ``torch.load`` in dragon_core's safe checkpoint format
(no pickle: only tensors, numbers, strings, lists, tuples and dicts)."""

from __future__ import annotations

from collections.abc import Mapping

import dragon_core as _dg
from dragon_core import serialization as _ser

from dragon_core._dtypes import dtype as _dg_dtype

from ._device import device as _device
from ._dtype import DTYPES as _DTYPES
from ._dtype import dtype as _dtype
from ._tensor import Tensor, _w


def _to_dg(obj):
    """The tree with vm.torch tensors and dtypes as dragon_core's. A tensor
    keeps its ``requires_grad``, and one reached twice stays one object."""
    if isinstance(obj, Tensor):
        return obj._t
    if isinstance(obj, _dtype):
        return obj._dg
    if isinstance(obj, dict):
        return type(obj)((k, _to_dg(v)) for k, v in obj.items()) if type(obj) is not dict \
            else {k: _to_dg(v) for k, v in obj.items()}
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_to_dg(v) for v in obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_dg(v) for v in obj)
    return obj


def _from_dg(obj, memo=None):
    """The loaded tree with dragon_core tensors and dtypes as vm.torch's; a
    tensor stored once and reached twice loads as one object, as in torch."""
    memo = {} if memo is None else memo
    if isinstance(obj, _dg.Tensor):
        if id(obj) not in memo:
            memo[id(obj)] = _w(obj)
        return memo[id(obj)]
    if isinstance(obj, _dg_dtype):
        return _DTYPES.get(obj.name, obj)
    if isinstance(obj, dict):
        return type(obj)((k, _from_dg(v, memo)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_from_dg(v, memo) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_from_dg(v, memo) for v in obj)
    return obj


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True):
    """Save tensors, state dicts and containers of them to ``f`` (a path,
    written atomically, or a binary file object)."""
    if pickle_module is not None:
        raise NotImplementedError("torch.save(pickle_module=...) : dragon_core.vm.torch never "
                                  "pickles; save state_dicts of tensors")
    try:
        _ser.save(_to_dg(obj), f)
    except TypeError as exc:
        raise TypeError(f"torch.save: {exc} (dragon_core.vm.torch saves tensors, numbers, "
                        "strings and containers of them -- save model.state_dict(), not the "
                        "model)") from None


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, **kwargs):
    """Load what :func:`save` wrote from a path or a binary file object
    (``weights_only`` is always true here)."""
    return _from_dg(_ser.load(f, map_location=_map_location(map_location)))


def _location(device) -> str:
    """torch's name of a device: ``"cpu"``, ``"cuda:0"``."""
    text = str(device)
    return "cpu" if text in ("cpu", "cpu:0") else text


def _map_location(loc):
    """torch's ``map_location`` forms as dragon_core's: a device name or
    ``torch.device``, a dict of them, or ``f(storage, location)`` returning
    a tensor (or None: where it was saved)."""
    if loc is None or isinstance(loc, str):
        return loc
    if isinstance(loc, Mapping):
        return {str(k): str(v) for k, v in loc.items()}
    if callable(loc) and not isinstance(loc, _device):
        def place(t, saved, fn=loc):
            out = fn(_w(t), _location(saved))
            if out is None:                       # torch: keep the default placement
                return t if saved in ("cpu", "cpu:0") else t.to(_dg.device(saved))
            if isinstance(out, Tensor):
                return out._t
            if isinstance(out, _dg.Tensor):
                return out
            raise TypeError(f"torch.load: map_location returned {type(out).__name__}, "
                            f"not a tensor")
        return place
    return str(loc)
