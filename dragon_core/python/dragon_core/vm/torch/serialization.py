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


def _tensors(obj, where, out):
    """(path, tensor) of every distinct tensor in the tree."""
    if isinstance(obj, Tensor):
        out.setdefault(id(obj), (where, obj))
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            _tensors(v, f"{where}[{k!r}]", out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _tensors(v, f"{where}[{i}]", out)
    return out


def _warn_shared_views(obj) -> None:
    """Warn where two saved tensors overlap in memory (a view of another): the
    file holds each one's values, so they load as independent tensors, where
    torch's load keeps them views of one storage (a write to one would show
    in the other)."""
    spans = []
    for where, t in _tensors(obj, "obj", {}).values():
        if t.numel() == 0:
            continue
        extent = 1 + sum((n - 1) * abs(st) for n, st in zip(t.shape, t.stride()))
        lo = t.data_ptr() - sum((n - 1) * st for n, st in zip(t.shape, t.stride()) if st < 0) \
            * t.element_size()
        spans.append((lo, lo + extent * t.element_size(), where, t))
    spans.sort(key=lambda s: s[0])
    for i, (lo, hi, where, t) in enumerate(spans):
        for lo2, _hi2, where2, t2 in spans[i + 1:]:
            if lo2 >= hi:
                break
            if t._t._same_storage(t2._t):
                import warnings
                warnings.warn(
                    f"torch.save: {where} and {where2} share memory (one is a view of the "
                    f"other); they are saved as two tensors and load as two independent "
                    f"tensors, not as views of one storage as torch's load gives. Save the "
                    f"base tensor and take the view after loading to keep them linked",
                    UserWarning, stacklevel=3)
                return


def save(obj, f, pickle_module=None, pickle_protocol=None, _use_new_zipfile_serialization=True):
    """Save tensors, state dicts and containers of them to ``f`` (a path,
    written atomically, or a binary file object). Tensors that are views of
    one another are saved as independent tensors (a ``UserWarning`` says so;
    torch keeps them views of one storage)."""
    if pickle_module is not None:
        raise NotImplementedError("torch.save(pickle_module=...) : dragon_core.vm.torch never "
                                  "pickles; save state_dicts of tensors")
    _warn_shared_views(obj)
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
