"""The public, versioned Python API for plugins.

The Python half of a plugin (gradient rules, graph passes, fusion patterns),
the SDK's template and its test kit use this module and never
``dragon_core._*``: the core's private modules change without notice, this
module does not.

:data:`API_VERSION` is ``(major, minor)`` and moves with the C ABI
(``dragon_core.ABI_VERSION``): a minor bump only adds names; a name is
removed or changed only with a major bump. A plugin that needs a name added
in minor ``m`` checks ``API_VERSION >= (1, m)``.

Contents
--------
Autograd
    :func:`gradient` (register a gradient rule), :func:`needs_grad`,
    :func:`is_tracing`.
Op registry
    :func:`op_schema`, :func:`op_name`, :func:`kernel_dtypes`,
    :func:`set_tensor_method`, :func:`py_attr_name`, :func:`py_attrs`,
    :func:`pads_from_schema`.
Graph passes (GraphDef -> GraphDef, ``dragon_graph_passes`` hook)
    :class:`GraphPass`, :func:`device_type`, :func:`op_attrs`,
    :func:`op_builder`, :func:`drop_value_info`, :func:`numel`,
    :func:`elementwise_op_types`.
Hooks
    :data:`hookimpl` (the pluggy marker for ``dragon_*`` hooks).
"""

from __future__ import annotations

from . import _C
from ._autograd import gradient, needs_grad
from ._graph.build import _plugin_versions, attr_from_proto
from ._graph.passes import GraphPass, device_type, kernel_dtypes
from ._graph.passes.fusion import BINARY, UNARY, WITH_ALPHA, _numel
from ._graph.passes.pattern_fusion import _Emitter
from ._graph.passes.prune import _drop_value_info
from .plugins import hookimpl

#: ``(major, minor)`` of this API; equal to the C ABI's version.
API_VERSION: tuple = tuple(_C.ABI_VERSION)


def is_tracing() -> bool:
    """Whether ``@dragon_core.function`` is tracing on this thread (a Python
    gradient rule may then only use ops, never read values)."""
    return _C._is_tracing()


def op_schema(op: str) -> dict:
    """The registered schema of ``op`` (its name or Python name) as a dict:
    inputs, outputs, attrs (name, type, default), flags, providing plugin.

    Raises
    ------
    LookupError
        If no such op is defined.
    """
    return _C.op(op).describe()


def op_name(op: str) -> str:
    """The canonical op name (``"Add"``) of an op name or Python name."""
    return _C.op(op).name


def op_attrs(op) -> dict:
    """The attributes of an ``OpDef`` as Python values (None where unset)."""
    return {k: attr_from_proto(v) for k, v in op.attr.items()}


def op_builder(graph):
    """A builder of new ``OpDef``s for a pass rewriting ``graph``.

    Its ``opdef(op_type, inputs, outputs, attrs, name=None)`` returns an
    OpDef with every schema attribute resolved (defaults filled), a name
    unique in ``graph`` (``name`` or a fresh variant of it) and the providing
    plugin's name and version recorded, as traced ops have; ``fresh(base)``
    returns an unused tensor or op name.
    """
    return _Emitter({op.name for op in graph.op}, _plugin_versions())


def drop_value_info(graph, names) -> None:
    """Remove, in place, the ``value_info`` entries of ``names`` (tensors a
    pass removed)."""
    _drop_value_info(graph, set(names))


def numel(shape) -> int:
    """The element count of ``shape`` (1 for ``()``)."""
    return _numel(shape)


def elementwise_op_types() -> frozenset:
    """The core's element-wise float op types that the ``fusion`` pass merges
    and that run on any memory layout of equal-shaped operands."""
    return frozenset(UNARY) | frozenset(BINARY) | frozenset(WITH_ALPHA)



def set_tensor_method(op: str, is_method: bool) -> None:
    """Declare whether ``op`` is a ``Tensor`` method (as PyTorch's
    ``variants: method``).

    By default an op whose first input is one tensor is a method unless it is
    a gradient or an optimizer update (its name ends in ``Grad``,
    ``BackpropFilter``, ``BackpropInput`` or ``Update``). A plugin calls this
    from its Python half for ops users should not call as ``x.op(...)``
    (layout-internal or fusion-internal ops), or to make one a method. The
    declaration holds for ops defined later too.

    Parameters
    ----------
    op : str
        The op's name (``"Nchw16cFromNchw"``); it need not be defined yet.
    is_method : bool
        True: ``x.<py_name>`` calls the op; False: it does not exist.
    """
    from . import _opgen
    from ._tensor import _install_methods
    if not isinstance(is_method, bool):
        raise TypeError(f"set_tensor_method: is_method must be a bool, got {is_method!r}")
    _opgen.TENSOR_METHOD[str(op)] = is_method
    _install_methods()


def py_attr_name(op: str, attr: str) -> str:
    """The Python argument name of schema attribute ``attr`` of ``op``
    (``py_attr_name("Sum", "axes") == "axis"``); a name that is not one of
    the op's schema attributes is returned unchanged (it is a Python name
    already). The schema names are the ABI; ``dragon_core.ops`` takes the
    Python names (docs/python-api.md).
    """
    from . import _opgen
    schema = _C.op(op).describe()
    if attr not in {a["name"] for a in schema["attrs"]}:
        return attr
    return _opgen.py_attr_name(schema["name"], attr)


def py_attrs(op: str, attrs: dict) -> dict:
    """``attrs`` keyed by schema names -> the keyword arguments of the op's
    ``dragon_core.ops`` function: Python names (see :func:`py_attr_name`),
    and a ``pads`` attribute in the C++ layout turned into the Python one,
    ``(before, after)`` pairs (see :func:`pads_from_schema`). A value that
    does not convert is passed on as given, for the op to reject."""
    out = {}
    for k, v in attrs.items():
        if k == "pads" and isinstance(v, (list, tuple)) and \
                all(isinstance(e, int) and not isinstance(e, bool) for e in v):
            try:
                v = pads_from_schema(op, v)
            except (ValueError, LookupError):
                pass
        out[py_attr_name(op, k)] = v
    return out


def pads_from_schema(op: str, pads) -> tuple:
    """The C++ ``pads`` attribute of ``op`` (as a graph node or a gradient
    rule reads it: N values for both sides, or N begins then N ends; Pad's
    ``[b0, a0, b1, a1, ...]``) -> the ``(before, after)`` pairs the op's
    Python function takes (docs/python-api.md, "Padding")."""
    from . import _opgen
    schema = _C.op(op).describe()
    default = next((a["default"] for a in schema["attrs"] if a["name"] == "pads"), None)
    return _opgen.pads_from_schema(schema["name"], pads, len(default) if default else None)
