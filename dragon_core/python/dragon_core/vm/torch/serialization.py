"""``torch.save`` / ``torch.load`` in dragon_core's safe checkpoint format
(no pickle: only tensors, numbers, strings, lists, tuples and dicts)."""

from __future__ import annotations

import io
import os

import dragon_core as _dg
from dragon_core import serialization as _ser

from ._tensor import Tensor, _w


def _to_dg(obj):
    if isinstance(obj, Tensor):
        return obj._t.detach() if obj._t.requires_grad else obj._t
    if isinstance(obj, dict):
        return type(obj)((k, _to_dg(v)) for k, v in obj.items()) if type(obj) is not dict \
            else {k: _to_dg(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_dg(v) for v in obj)
    if hasattr(obj, "_dg") and hasattr(obj, "itemsize"):
        return obj.name
    return obj


def _from_dg(obj):
    if isinstance(obj, _dg.Tensor):
        return _w(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _from_dg(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_from_dg(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_from_dg(v) for v in obj)
    return obj


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True):
    """Save tensors, state dicts and containers of them to ``f`` (a path)."""
    if pickle_module is not None:
        raise NotImplementedError("torch.save(pickle_module=...) : dragon_core.vm.torch never "
                                  "pickles; save state_dicts of tensors")
    if not isinstance(f, (str, os.PathLike)):
        raise NotImplementedError("torch.save to a file object is not supported; give a path")
    try:
        _ser.save(_to_dg(obj), f)
    except TypeError as exc:
        raise TypeError(f"torch.save: {exc} (dragon_core.vm.torch saves tensors, numbers, "
                        "strings and containers of them -- save model.state_dict(), not the "
                        "model)") from None


def load(f, map_location=None, pickle_module=None, *, weights_only=True, mmap=None, **kwargs):
    """Load what :func:`save` wrote (``weights_only`` is always true here)."""
    if not isinstance(f, (str, os.PathLike)):
        raise NotImplementedError("torch.load from a file object is not supported; give a path")
    loc = map_location
    if loc is not None and not isinstance(loc, str) and not callable(loc):
        loc = str(loc)
    return _from_dg(_ser.load(f, map_location=loc))
