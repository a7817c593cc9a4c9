"""Pattern fusion: the chains of ops a plugin asks the graph compiler to fuse.

A :class:`FusionPattern` names a chain of op types (``Conv2d -> Add ->
Relu``), the fused op that replaces it (``Conv2dBiasAct``) and a rewrite
function that checks the chain's conditions and gives the fused op's inputs
and attributes. The ``pattern_fusion`` graph pass (level 3, see
docs/graph.md) applies a declared pattern only where a kernel for the fused
op is registered for the graph's device and dtype, so declaring a pattern is
safe for a plugin whose kernels are not loaded.

Patterns are declared by plugins through the pluggy hook
``dragon_fusion_patterns`` (:mod:`dragon_core.plugins`) or directly with
:func:`register_pattern`. The standard patterns over the core's ops are
defined here (:data:`STANDARD_PATTERNS`); a plugin with fast kernels for
``Conv2dBiasAct`` / ``MatMulBiasAct`` declares them::

    import pluggy
    hookimpl = pluggy.HookimplMarker("dragon_core")  # importing dragon_core
                                                     # here would be circular
    @hookimpl
    def dragon_fusion_patterns(core):
        return core.fusion.STANDARD_PATTERNS

Turning the pass off: ``opt_level=2`` (with every other level-3 pass), or
``DRAGON_DISABLE_PASSES=pattern_fusion`` in the environment when a function
is traced (``graph.metadata["disable_passes"]`` does the same per graph).
:func:`fused_ops` lists what fused in a compiled graph.
"""

from __future__ import annotations

import dataclasses
from typing import Callable


@dataclasses.dataclass(frozen=True)
class Rewrite:
    """What replaces a matched chain: one op of the pattern's fused type.

    Attributes
    ----------
    inputs : tuple of str
        The fused op's input tensor names (optional inputs left out at the
        end are simply omitted).
    attrs : dict
        Its attribute values by name; the others take their defaults.
    """

    inputs: tuple
    attrs: dict


@dataclasses.dataclass(frozen=True)
class FusionPattern:
    """A chain of ops the ``pattern_fusion`` pass may replace by one op.

    Attributes
    ----------
    name : str
        Unique name, shown in the fused op's ``_fusion_pattern`` annotation.
    chain : tuple of str
        Op types, producer first: op ``i + 1`` reads output 0 of op ``i``
        through exactly one of its inputs. The last op is the *root*; the
        fused op writes the root's output 0 under the same name.
    fused : str
        The op type written instead. The pattern applies only where a kernel
        for it is registered on the graph's device for the chain's dtype.
    rewrite : callable
        ``rewrite(match) -> Rewrite | None`` with a match object of the pass
        (``match.ops``, ``match.info(name)``, ``match.attr(k, name)``,
        ``match.other_inputs(k)``, ``match.constant(name)``,
        ``match.scalar(value)``, ``match.emit(op_type, inputs, **attrs)``;
        see ``dragon_core._graph.passes.pattern_fusion.Match``); None
        declines this match.
    rewire : callable, optional
        ``rewire(reader, index, match) -> bool``: whether ``reader`` (an
        OpDef after the root), reading the root's chain input at input
        ``index``, computes the same thing when it reads the root's output
        instead. Such readers do not stop the fusion and are redirected
        (for Relu-rooted chains, the backward's ``Greater(z, 0)``).
    """

    name: str
    chain: tuple
    fused: str
    rewrite: Callable
    rewire: Callable | None = None

    def __post_init__(self):
        if not self.name or not isinstance(self.name, str):
            raise ValueError("FusionPattern: name must be a non-empty string")
        if len(self.chain) < 2 or not all(isinstance(t, str) and t for t in self.chain):
            raise ValueError(f"FusionPattern '{self.name}': chain must list at least two op "
                             f"types, got {self.chain!r}")
        if not callable(self.rewrite):
            raise TypeError(f"FusionPattern '{self.name}': rewrite must be callable")


_registered: dict = {}   # name -> FusionPattern (register_pattern)
_owners: dict = {}       # name -> (plugin object, plugin name), for declared ones


def _owner(pattern: FusionPattern):
    """(plugin object, plugin name) of the plugin whose hook declared
    ``pattern``; None for one given to :func:`register_pattern`."""
    owner = _owners.get(pattern.name)
    return owner if owner is not None and pattern.name not in _registered else None


def register_pattern(pattern: FusionPattern) -> FusionPattern:
    """Declare ``pattern`` for every graph traced from now on.

    Registering the same pattern object again is a no-op; another pattern
    under a registered name raises ``ValueError``.
    """
    if not isinstance(pattern, FusionPattern):
        raise TypeError(f"register_pattern: expected a FusionPattern, got "
                        f"{type(pattern).__name__}")
    old = _registered.get(pattern.name)
    if old is not None and old != pattern:
        raise ValueError(f"register_pattern: a different pattern named '{pattern.name}' is "
                         f"already registered ({old.chain} -> {old.fused})")
    _registered[pattern.name] = pattern
    return pattern


def unregister_pattern(name: str) -> None:
    """Remove a pattern declared with :func:`register_pattern`."""
    _registered.pop(name, None)


def patterns() -> list:
    """Every declared pattern (hooks and :func:`register_pattern`), longest
    chain first, then by name: the order the pass tries them in.

    A plugin whose ``dragon_fusion_patterns`` hook raises, returns something
    that is not a FusionPattern, or declares a pattern under a name already
    used for a different one is marked broken (one PluginWarning; its error
    and traceback in ``dragon_core.plugins.list()``) and left out with all
    its patterns and passes: graph mode goes on without it.

    Raises
    ------
    dragon_core.errors.PluginError
        Only under ``DRAGON_STRICT=1``, for such a plugin.
    """
    from . import plugins

    found = {name: (p, "register_pattern") for name, p in _registered.items()}
    for name, plugin, declared in plugins._hook_results("dragon_fusion_patterns"):
        problem, mine = "", {}
        for p in declared:
            if not isinstance(p, FusionPattern):
                problem = f"returned {p!r}, which is not a dragon_core.fusion.FusionPattern"
                break
            old = found.get(p.name) or (mine.get(p.name), name)
            if old[0] is not None and old[0] != p:
                problem = (f"declared fusion pattern '{p.name}' differently from "
                           f"'{old[1]}'")
                break
            mine[p.name] = p
        if problem:
            plugins._hook_failed(plugin, name, "dragon_fusion_patterns", message=problem)
            continue
        for p in mine.values():
            if found.setdefault(p.name, (p, name))[1] == name:
                _owners[p.name] = (plugin, name)
    return sorted((p for p, _ in found.values()), key=lambda p: (-len(p.chain), p.name))


def fused_ops(graph) -> dict:
    """What the fusion passes replaced in a GraphDef.

    Returns
    -------
    dict
        ``{fused op name: (op type, [names of the ops it replaces])}``.
    """
    out = {}
    for op in graph.op:
        if "_fused_ops" in op.attr:
            out[op.name] = (op.type, op.attr["_fused_ops"].s.split(","))
    return out


# ------------------------------------------------------------ standard rules
# They read the core's schemas (dragon_core/src/ops/conv.cc, linalg.cc,
# norm.cc); a rule returning None leaves the chain alone.

def _bias_of(match, k: int, axis: int):
    """The bias read by the Add at chain position ``k`` as a rank-1 tensor
    name, or None unless it varies along axis ``axis`` (negative) of the
    chain value only (its shape, padded with leading 1s to the value's rank,
    is 1 everywhere else) and the Add keeps the value's shape."""
    (bias,) = match.other_inputs(k)
    out = match.info(match.ops[k].output[0])[1]
    if out != match.info(match.ops[k - 1].output[0])[1]:
        return None
    shape = match.info(bias)[1]
    want = tuple(d if i == len(out) + axis else 1 for i, d in enumerate(out))
    if len(shape) > len(out) or (1,) * (len(out) - len(shape)) + shape != want:
        return None
    return bias if len(shape) == 1 else match.emit("Reshape", [bias], shape=[out[axis]])


def _activation(match) -> str:
    return "relu" if match.ops[-1].type == "Relu" else "none"


def _conv_geometry(match, k: int = 0) -> dict:
    return {a: match.attr(k, a) for a in ("strides", "pads", "dilations", "groups")}


def _conv_with_bias(match) -> Rewrite | None:
    """Conv2d (no bias) -> Add(per-channel [O,1,1] / [1,O,1,1]) [-> Relu]."""
    conv = match.ops[0]
    if len(conv.input) != 2:
        return None
    bias = _bias_of(match, 1, -3)
    if bias is None:
        return None
    return Rewrite((conv.input[0], conv.input[1], bias),
                   dict(_conv_geometry(match), activation=_activation(match)))


def _conv_relu(match) -> Rewrite | None:
    """Conv2d (bias or not) -> Relu."""
    return Rewrite(tuple(match.ops[0].input), dict(_conv_geometry(match), activation="relu"))


def _matmul_operands_ok(match) -> bool:
    mm = match.ops[0]
    return all(len(match.info(t)[1]) >= 2 for t in mm.input)


def _matmul_attrs(match) -> dict:
    attrs = {"transpose_a": match.attr(0, "transpose_a"),
             "transpose_b": match.attr(0, "transpose_b"), "activation": _activation(match)}
    # A float32 product of 16-bit operands (autocast) stays one.
    out_dtype = match.attr(0, "out_dtype") if "out_dtype" in match.ops[0].attr else None
    if out_dtype is not None:
        attrs["out_dtype"] = out_dtype
    return attrs


def _matmul_with_bias(match) -> Rewrite | None:
    """MatMul (both operands rank >= 2) -> Add(bias along the last axis) [-> Relu]."""
    if not _matmul_operands_ok(match):
        return None
    mm = match.ops[0]
    bias = _bias_of(match, 1, -1)
    if bias is None:
        return None
    return Rewrite((mm.input[0], mm.input[1], bias), _matmul_attrs(match))


def _matmul_relu(match) -> Rewrite | None:
    """MatMul (both operands rank >= 2) -> Relu."""
    if not _matmul_operands_ok(match):
        return None
    return Rewrite(tuple(match.ops[0].input), _matmul_attrs(match))


def _conv_batchnorm(match) -> Rewrite | None:
    """Conv2d -> BatchNorm(training=False) [-> Relu], folded into the conv.

    With s = gamma / sqrt(running_var + eps) per output channel, BatchNorm
    of y = conv(x, w) + b is conv(x, w * s) + (b - mean) * s + beta (conv
    is linear in w, channel o of y depends on w[o] only). The new filter
    and bias are computed by small ops placed before the fused op (folded
    to constants when every parameter is one). In training mode BatchNorm
    normalises with the statistics of the batch it is given, which depend
    on x: not an affine map with fixed coefficients, so nothing folds.
    """
    conv, bn = match.ops[0], match.ops[1]
    if match.attr(1, "training") or bn.input[0] != conv.output[0]:
        return None
    _, gamma, beta, mean, var = bn.input
    o = match.info(conv.output[0])[1][1]
    eps = match.scalar(float(match.attr(1, "eps")))
    scale = match.emit("Mul", [gamma, match.emit("Rsqrt", [match.emit("Add", [var, eps])])])
    w = match.emit("Mul", [conv.input[1], match.emit("Reshape", [scale], shape=[o, 1, 1, 1])])
    shifted = (match.emit("Sub", [conv.input[2], mean]) if len(conv.input) > 2
               else match.emit("Neg", [mean]))
    bias = match.emit("Add", [match.emit("Mul", [shifted, scale]), beta])
    return Rewrite((conv.input[0], w, bias),
                   dict(_conv_geometry(match), activation=_activation(match)))


def relu_mask_reader(reader, index: int, match) -> bool:
    """Whether ``reader`` reads the Relu's input z only through ``z > 0``:
    ``ReluGrad(z, dy)`` (Relu's gradient) or ``Greater(z, 0)``.

    With y = relu(z) = max(z, 0): if z > 0 then y = z > 0; if z <= 0 then
    y = 0, and 0 > 0 is false; if z is NaN, z > 0 is false and y is NaN or
    0, for which y > 0 is false too. So ``z > 0`` equals ``relu(z) > 0``
    element by element, and the reader may read the fused op's output. Any
    other reader of z (another comparison, another threshold) still blocks
    the fusion.
    """
    if reader.type == "ReluGrad":
        return index == 0
    if reader.type != "Greater" or index != 0 or len(reader.input) != 2:
        return False
    zero = match.constant(reader.input[1])
    if zero is None or zero.size != 1 or zero.ndim > len(match.info(reader.input[0])[1]):
        return False
    return bool(zero.reshape(-1)[0] == 0)


def _pattern(name, chain, fused, rewrite) -> FusionPattern:
    return FusionPattern(name, tuple(chain), fused, rewrite,
                         relu_mask_reader if chain[-1] == "Relu" else None)


CONV_BIAS_RELU = _pattern("conv2d_bias_relu", ("Conv2d", "Add", "Relu"), "Conv2dBiasAct",
                          _conv_with_bias)
CONV_BIAS = _pattern("conv2d_bias", ("Conv2d", "Add"), "Conv2dBiasAct", _conv_with_bias)
CONV_RELU = _pattern("conv2d_relu", ("Conv2d", "Relu"), "Conv2dBiasAct", _conv_relu)
CONV_BN_RELU = _pattern("conv2d_batchnorm_relu", ("Conv2d", "BatchNorm", "Relu"),
                        "Conv2dBiasAct", _conv_batchnorm)
CONV_BN = _pattern("conv2d_batchnorm", ("Conv2d", "BatchNorm"), "Conv2dBiasAct",
                   _conv_batchnorm)
MATMUL_BIAS_RELU = _pattern("matmul_bias_relu", ("MatMul", "Add", "Relu"), "MatMulBiasAct",
                            _matmul_with_bias)
MATMUL_BIAS = _pattern("matmul_bias", ("MatMul", "Add"), "MatMulBiasAct", _matmul_with_bias)
MATMUL_RELU = _pattern("matmul_relu", ("MatMul", "Relu"), "MatMulBiasAct", _matmul_relu)

#: The patterns over the core's ops, for plugins with fused kernels to declare.
STANDARD_PATTERNS = (CONV_BIAS_RELU, CONV_BIAS, CONV_RELU, CONV_BN_RELU, CONV_BN,
                     MATMUL_BIAS_RELU, MATMUL_BIAS, MATMUL_RELU)


# ----------------------------------------------------------- gradient chains

def _softmax_grad(match) -> Rewrite | None:
    """Softmax's backward y * (dy - sum(dy * y, axis, keepdims)), as the
    Softmax gradient rule writes it: Mul(dy, y) -> Sum -> Sub(dy, s) ->
    Mul(y, d) (either operand order of the Muls), over the last axis only,
    dy and y of the root's shape. The SoftmaxGrad kernels round and sum the
    products as Mul and Sum do, so the fused op computes the same bits."""
    mul, red, sub, root = match.ops
    if len(mul.input) != 2 or mul.input[0] == mul.input[1]:
        return None
    if list(sub.input) != [sub.input[0], red.output[0]]:
        return None
    dy = sub.input[0]
    if dy not in mul.input:
        return None
    y = mul.input[1] if mul.input[0] == dy else mul.input[0]
    if match.other_inputs(3) != [y]:
        return None
    shape = match.info(root.output[0])[1]
    if not shape or match.info(y)[1] != shape or match.info(dy)[1] != shape:
        return None
    axes = match.attr(1, "axes") if "axes" in red.attr else None
    if axes is None or len(axes) != 1 or axes[0] not in (-1, len(shape) - 1):
        return None
    if not match.attr(1, "keepdims"):
        return None
    return Rewrite((y, dy), {"axis": -1})


#: Softmax's backward along the last axis -> ``SoftmaxGrad``.
SOFTMAX_GRAD = FusionPattern("softmax_grad", ("Mul", "Sum", "Sub", "Mul"), "SoftmaxGrad",
                             _softmax_grad)

#: Patterns over the chains the core's gradient rules write (cpu_eigen has the
#: ``SoftmaxGrad`` kernel). They are standard patterns too: a plugin declaring
#: STANDARD_PATTERNS declares them, and each applies only where its fused op
#: has a kernel for the graph's device and dtype.
GRADIENT_PATTERNS = (SOFTMAX_GRAD,)
STANDARD_PATTERNS = STANDARD_PATTERNS + GRADIENT_PATTERNS
