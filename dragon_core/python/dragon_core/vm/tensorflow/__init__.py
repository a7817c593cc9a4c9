"""``dragon_core.vm.tensorflow``: TensorFlow 2's API over dragon_core.

``import dragon_core.vm.tensorflow as tf`` gives ``tf.constant``,
``tf.Variable``, ``tf.function`` (onto ``dragon_core.function``),
``tf.GradientTape`` (onto dragon's tape), the common ``tf.math``,
``tf.nn``, ``tf.linalg``, ``tf.random`` and array ops with TensorFlow's
names and semantics, and ``tf.keras`` (layers, ``Sequential``, ``Model``
with ``compile``/``fit``/``evaluate``/``predict``, optimizers, losses,
metrics). ``tf.Graph`` is a :class:`dragon_core.Workspace`.

Tensors are ``dragon_core.Tensor`` objects: nothing is wrapped or copied
between this front end and the core. A TensorFlow name that is not provided
raises NotImplementedError naming the alternative (docs/from-tensorflow.md).
"""

from __future__ import annotations

import dragon_core as _dg
from dragon_core import Tensor  # noqa: F401

from ._core import (DType, TensorSpec, Variable, as_dtype, bfloat16,  # noqa: F401
                    bool_ as bool,  # noqa: A004
                    cast, constant, convert_to_tensor, float16, float32, float64, int8, int16,
                    int32, int64, is_tensor, uint8)
from ._ops import (abs, add, add_n, argmax, argmin, boolean_mask, broadcast_to,  # noqa: A004,F401
                   clip_by_value, concat, cumsum, divide, equal, exp, expand_dims, eye, fill,
                   gather, greater, greater_equal, identity, less, less_equal, linspace,
                   log, logical_and, logical_not, logical_or, matmul, maximum, minimum,
                   multiply, negative, not_equal, one_hot, ones, ones_like, pad, pow,
                   range_ as range, rank, reduce_all, reduce_any, reduce_logsumexp,
                   reduce_max, reduce_mean, reduce_min, reduce_prod, reduce_std, reduce_sum,
                   reduce_variance, reshape, round, shape, sigmoid, sign, size, split, sqrt,
                   square, squeeze, stack, stop_gradient, subtract, tanh, tensordot, tile,
                   transpose, truediv, unstack, where, zeros, zeros_like)
from . import linalg, math, nn, random  # noqa: F401,A004
from ._unsupported import UnsupportedError, module_getattr

__version__ = "2.21.0-dragon"   # the TensorFlow API level this follows
newaxis = None


class Graph(_dg.Workspace):
    """TensorFlow's ``tf.Graph``: here a :class:`dragon_core.Workspace`.

    ``with tf.Graph().as_default():`` (or ``with g:``) makes it current:
    functions traced inside keep their plans in it, named tensors live in
    it, and ``g.clear()`` frees both.
    """

    def __init__(self, name: str = "graph"):
        super().__init__(name)

    def as_default(self):
        return self

    def finalize(self):
        raise NotImplementedError("tf.Graph.finalize is not supported by "
                                  "dragon_core.vm.tensorflow (graphs are built by tracing, "
                                  "never by adding ops to a Graph); drop the call")


class Module:
    """``tf.Module``: a container whose attributes' variables (and those of
    nested modules, lists, tuples and dicts) are collected by
    ``variables`` / ``trainable_variables``."""

    def __init__(self, name: str | None = None):
        self._tf_name = name or type(self).__name__.lower()

    @property
    def name(self) -> str:
        return self._tf_name

    def _walk(self, seen):
        for value in vars(self).values():
            yield from _collect(value, seen)

    @property
    def variables(self) -> tuple:
        return tuple(v for v in self._walk(set()) if isinstance(v, Variable))

    @property
    def trainable_variables(self) -> tuple:
        return tuple(v for v in self.variables if v.trainable)

    @property
    def submodules(self) -> tuple:
        return tuple(m for m in self._walk(set()) if isinstance(m, Module))


def _collect(value, seen):
    if id(value) in seen:
        return
    if isinstance(value, Variable):
        seen.add(id(value))
        yield value
    elif isinstance(value, Module):
        seen.add(id(value))
        yield value
        yield from value._walk(seen)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _collect(v, seen)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _collect(v, seen)
    elif hasattr(type(value), "weights") and hasattr(value, "_own_weights"):   # Keras layer
        seen.add(id(value))
        for w in value.weights:
            if id(w) not in seen:
                seen.add(id(w))
                yield w


def get_default_graph() -> Graph:
    """The current workspace (TensorFlow 1's name for it)."""
    return _dg.get_workspace()


def _to_signature(sig):
    if sig is None:
        return None
    out = []
    for s in sig:
        if isinstance(s, TensorSpec):
            out.append((None if s.shape is None else list(s.shape), s.dtype))
        elif isinstance(s, tuple) and len(s) == 2:
            out.append(s)
        else:
            raise TypeError(f"tf.function: input_signature entries must be tf.TensorSpec, got "
                            f"{type(s).__name__}")
    return out


def function(func=None, input_signature=None, autograph=True, jit_compile=None,
             reduce_retracing=False, experimental_compile=None, name=None):
    """Compile a Python function into a graph (``tf.function``), onto
    :func:`dragon_core.function`.

    As in TensorFlow, the first call with a new signature traces the
    function and later calls run the compiled graph; Python control flow is
    unrolled for the traced values (``tf.cond``/``tf.while_loop`` for
    data-dependent control flow). ``jit_compile`` and ``reduce_retracing``
    are accepted and change nothing (the graph is always compiled; every new
    shape traces again). ``autograph=True`` does not convert Python ``if``
    on tensors: such a condition is evaluated once at trace time.
    """
    sig = _to_signature(input_signature)

    def wrap(f):
        return _dg.function(f, input_signature=sig, name=name)
    return wrap if func is None else wrap(func)


class GradientTape(_dg.GradientTape):
    """Record operations for differentiation (``tf.GradientTape``).

    Trainable variables read inside the block are watched automatically;
    ``tape.watch(t)`` watches other tensors. ``tape.gradient(target,
    sources)`` accepts a tensor, a list or a dict of sources and returns
    the same structure, with None for a source the target does not depend
    on (``unconnected_gradients="zero"`` gives zeros instead).
    """

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients="none"):
        flat, rebuild = _flatten_sources(sources)
        if not flat:
            return rebuild([])
        import warnings
        with warnings.catch_warnings():
            # TensorFlow returns None for an unwatched source without a word.
            warnings.filterwarnings("ignore", message=".*was never watched by this tape")
            grads = super().gradient(target, flat, output_gradients=output_gradients,
                                     unconnected_gradients=str(unconnected_gradients).lower()
                                     .replace("unconnectedgradients.", ""))
        return rebuild(list(grads))


def _flatten_sources(sources):
    if isinstance(sources, Tensor):
        return [sources], lambda g: g[0]
    if isinstance(sources, dict):
        keys = list(sources)
        flat, back = _flatten_sources([sources[k] for k in keys])
        return flat, lambda g: dict(zip(keys, back(g)))
    if isinstance(sources, (list, tuple)):
        flat = []
        spans = []
        for s in sources:
            sub, back = _flatten_sources(s)
            spans.append((len(flat), len(sub), back))
            flat.extend(sub)
        kind = type(sources) if isinstance(sources, tuple) else list
        return flat, lambda g: kind(back(g[i:i + n]) for i, n, back in spans)
    raise TypeError(f"GradientTape.gradient: sources must be tensors (or lists/dicts of "
                    f"them), got {type(sources).__name__}")


def cond(pred, true_fn=None, false_fn=None, name=None):
    """``true_fn()`` if ``pred`` else ``false_fn()`` (a Cond op inside
    ``tf.function``), onto :func:`dragon_core.cond`."""
    return _dg.cond(pred, true_fn, false_fn)


def while_loop(cond, body, loop_vars, shape_invariants=None, parallel_iterations=10,
               back_prop=True, swap_memory=False, maximum_iterations=None, name=None):
    """Run ``body`` while ``cond`` holds, onto :func:`dragon_core.while_loop`."""
    kwargs = {} if maximum_iterations is None else {"maximum_iterations": maximum_iterations}
    single = not isinstance(loop_vars, (list, tuple))
    lv = [loop_vars] if single else list(loop_vars)
    out = _dg.while_loop(lambda *v: cond(*v), lambda *v: _as_list(body(*v)), lv, **kwargs)
    return out[0] if single else type(loop_vars)(out) if isinstance(loop_vars, tuple) else out


def _as_list(v):
    return list(v) if isinstance(v, (list, tuple)) else [v]


def executing_eagerly() -> bool:
    """False while a ``tf.function`` is being traced, else True."""
    return not _dg._C._is_tracing()


def print(*inputs, output_stream=None, sep=" ", end="\n", summarize=None, name=None):  # noqa: A001
    """Print tensors' values (eager; inside a traced function it prints once,
    at trace time)."""
    import builtins
    vals = [i.numpy() if isinstance(i, Tensor) else i for i in inputs]
    builtins.print(*vals, sep=sep, end=end)


def get_static_value(tensor, partial=False):
    return tensor.numpy() if isinstance(tensor, Tensor) else tensor


from . import keras  # noqa: E402,F401

__getattr__ = module_getattr("tf", {
    "Session": "tf.function (TensorFlow 2 style; there are no sessions)",
    "placeholder": "arguments of a tf.function",
    "compat": "the TensorFlow 2 API (tf.function, tf.GradientTape)",
    "py_function": "eager Python outside tf.function",
    "numpy_function": "eager Python outside tf.function",
    "SparseTensor": "dense tensors",
    "RaggedTensor": "padded dense tensors with a mask",
    "strings": "Python strings (string tensors are not supported)",
    "data": "dragon_core.data (or keras' fit on NumPy arrays)",
    "distribute": "dragon_core.distributed",
    "saved_model": "model.save_weights / dragon_core.save_graph",
    "image": "dragon_core.ops (resize and crops live in the vision_ops plugin)",
    "signal": "NumPy on x.numpy()",
    "sort": "np.sort on x.numpy() (no Sort op in the core yet)",
    "argsort": "np.argsort on x.numpy() (no Sort op in the core yet)",
    "einsum": "tf.matmul / tf.tensordot with tf.transpose",
    "scatter_nd": "tf.one_hot and tf.where, or dragon_core.ops.scatter_add",
    "gather_nd": "tf.gather on a reshaped tensor",
    "tensor_scatter_nd_update": "tf.where with a mask",
    "roll": "tf.concat of two slices",
    "reverse": "slicing with a negative step on x.numpy()",
    "TensorArray": "a Python list of tensors and tf.stack",
    "device": "tensors' .to(device) (dragon_core places ops on their inputs' device)",
    "config": "dragon_core.plugins and DRAGON_NUM_THREADS",
    "custom_gradient": "dragon_core.custom_op or dragon_core.plugin_api gradient rules",
})
