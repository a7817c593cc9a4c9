"""``torch.special``: the functions of torch's namespace that vm.torch has
under another name (``xlogy``, ``expm1``, ``exp2``, ``log1p``, ``erf``,
``expit``, ``logsumexp``), each the same function as its ``torch.*``
counterpart; other names raise NotImplementedError."""

from __future__ import annotations

from ._functions import _EXPORTS

xlogy = _EXPORTS["xlogy"]


def _alias(name):
    fn = _EXPORTS.get(name)
    if fn is None:
        import dragon_core.vm.torch as _torch
        fn = getattr(_torch, name)
    return fn


expm1 = _alias("expm1")
exp2 = _alias("exp2")
log1p = _alias("log1p")
erf = _alias("erf")
expit = _alias("sigmoid")
logsumexp = _alias("logsumexp")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise NotImplementedError(f"torch.special.{name} is not supported by dragon_core.vm.torch; "
                              "see docs/from-pytorch.md")
