"""Reverse-mode automatic differentiation.

Two front ends share one engine:

* ``GradientTape`` (TensorFlow style): ops run inside ``with tape:`` whose
  inputs are watched (or derived from watched tensors) are recorded on the
  tape; ``tape.gradient(target, sources)`` differentiates them.
* ``requires_grad`` leaves (PyTorch style): any op with an input that
  requires grad records a :class:`Node` as its outputs' ``_grad_fn``;
  ``y.backward()`` accumulates ``.grad`` on the leaves.

Gradient rules are Python functions built from ops (see ``_grads/``), so the
backward pass is itself recorded when asked to (``create_graph=True`` or an
outer tape), which gives higher-order gradients.

A node keeps its inputs (needed by the rules) but never its differentiable
outputs: rules recompute what they need from the inputs, so no reference
cycle runs through a tensor's ``_grad_fn``. The one exception is a
non-differentiable output that cannot be recomputed (Dropout's random mask):
a rule registered with ``saved_outputs`` reads it as ``node.saved``; such an
output never gets a ``_grad_fn``, so it closes no cycle.

A rule whose derivative is written in the op's own result (softmax, exp,
tanh: ``reads_result=True``) may skip recomputing it in eager mode, as
torch's saved result does: the node keeps a detached alias of output 0 (its
memory, no ``_grad_fn``, so no cycle) and :func:`saved_result` hands it to
the rule while that memory provably holds what the op wrote (same version,
never handed out writable through NumPy/DLPack). Otherwise, and whenever the
rule itself is recorded (``create_graph``, an outer tape: the alias has no
path to the inputs), the rule recomputes it from the inputs, bit for bit the
same value. Traces keep the recomputation, which the graph's CSE merges with
the forward op.
"""

from __future__ import annotations

import contextlib
import threading
import warnings

from . import _C
from ._dtypes import _FLOAT_CODES
from .errors import InvalidArgumentError

_RULES: dict = {}
_SAVED: dict = {}   # op name -> indices of the outputs its rule reads
# ops whose rule may read output 0 through saved_result (reads_result=True)
_RESULT_READERS: set = set()
# op name -> the inputs whose values (not only shape/dtype) its rule never
# reads: a tuple of indices, or a callable ``attrs -> tuple``. Their version
# is not checked, so writing them in place after the op ran is allowed (as
# torch allows it where its node does not save the tensor).
_UNREAD: dict = {}
# ops whose rule takes None for an output nobody differentiated (instead of
# zeros): a front end's custom function node that decides itself
_NONE_DYS: set = set()
_local = threading.local()


def gradient(op_name: str, saved_outputs=(), unread_inputs=None, reads_result=False):
    """Register the gradient rule of ``op_name``.

    The rule is called as ``rule(node, *dys)`` with one output gradient per
    output (never None: missing ones are zeros) and returns a list with one
    entry per input: a tensor of the input's shape, or None where the input
    gets no gradient. Rules must be written with differentiable ops.

    ``saved_outputs`` lists outputs the rule reads as ``node.saved`` (in
    that order) because they cannot be recomputed from the inputs (a random
    mask). They must be non-differentiable: they are not marked as requiring
    grad.

    ``unread_inputs`` lists the inputs whose *values* the rule never reads
    (only their shape and dtype), as a tuple of indices or a callable
    ``attrs -> tuple``. Autograd checks, when the rule runs, that every
    other input still has the version it had when the op ran (an in-place
    write in between raises, as PyTorch's version counter does); these
    inputs are not checked.

    ``reads_result=True``: the rule may take the op's output 0 from
    :func:`saved_result` instead of recomputing it from the inputs (eagerly,
    while its memory is unchanged). The recomputation must give the same
    bits, since either may run. The node then holds that memory until it is
    freed, as torch's saved result does.
    """
    def register(fn):
        if op_name in _RULES:
            raise ValueError(f"a gradient rule for {op_name} is already registered")
        _RULES[op_name] = fn
        if saved_outputs:
            _SAVED[op_name] = tuple(saved_outputs)
        if unread_inputs is not None:
            set_unread_inputs(op_name, unread_inputs)
        if reads_result:
            _RESULT_READERS.add(op_name)
        return fn
    return register


def set_unread_inputs(op_name: str, unread_inputs) -> None:
    """Declare the inputs of ``op_name`` whose values its gradient rule
    never reads (see :func:`gradient`); their in-place modification after
    the op ran is then not an error."""
    if not callable(unread_inputs):
        unread_inputs = tuple(int(i) for i in unread_inputs)
    _UNREAD[op_name] = unread_inputs


def _saved_versions(op, inputs, attrs):
    """The version of each input the rule of ``op`` reads (None for the
    others), recorded when the op runs and checked when its rule runs."""
    unread = _UNREAD.get(op)
    if unread is None:
        return [i._version for i in inputs]
    if callable(unread):
        unread = unread(attrs)
    return [None if k in unread else i._version for k, i in enumerate(inputs)]


def _check_versions(node) -> None:
    """Raise if an input ``node``'s rule reads was written in place (or
    rebound with ``assign``/``.data =``) after the op ran: the rule would
    silently differentiate at the new value."""
    for k, (inp, v) in enumerate(zip(node.inputs, node.versions)):
        if v is not None and inp._version != v:
            raise RuntimeError(
                "one of the variables needed for gradient computation has been modified "
                f"by an inplace operation: input {k} of {node.op} (a {inp.dtype.name} "
                f"tensor of shape {list(inp.shape)} on {inp.device}) is at version "
                f"{inp._version}; expected version {v} instead. It was written in place "
                "(an in-place op, item assignment, copy_, assign or `.data =`) after "
                f"{node.op} used it and before backward; compute on a copy (x.clone()) or "
                "modify it after the backward pass")


def has_gradient(op_name: str) -> bool:
    """Whether ``op_name`` has a registered gradient rule."""
    return op_name in _RULES


class Node:
    """One recorded op application."""

    __slots__ = ("op", "inputs", "attrs", "out_ids", "out_meta", "saved", "needs",
                 "versions", "result", "__weakref__")

    def __init__(self, op, inputs, attrs, outputs):
        self.op = op
        self.inputs = inputs
        self.attrs = attrs
        # The version of every input the rule reads, checked before it runs.
        self.versions = _saved_versions(op, inputs, attrs)
        saved = _SAVED.get(op)
        self.saved = [outputs[i] for i in saved] if saved else []
        # Which inputs the running backward pass wants a gradient for; set by
        # the engine before it calls the rule (rules may skip the others).
        self.needs = None
        self.out_ids = [o._id for o in outputs]
        self.out_meta = [(o.shape, o._dtype_code, o._device_name, o._device_index)
                         for o in outputs]
        # (a detached alias of output 0, its version) for saved_result;
        # never in a trace, whose graph recomputes (see the module docstring)
        if op in _RESULT_READERS and not _C._is_tracing():
            alias = outputs[0].detach()
            self.result = (alias, alias._version)
        else:
            self.result = None

    def __repr__(self):
        return f"<Node {self.op} inputs={[tuple(i.shape) for i in self.inputs]}>"


def saved_result(node):
    """Output 0 of ``node``'s op as the op computed it (a detached alias of
    its memory), or None: the op's rule then recomputes it from
    ``node.inputs``.

    None when the rule was not registered with ``reads_result``, for a node
    recorded in a trace, while the rule is itself recorded (create_graph or
    a recording tape: the alias has no path to the inputs), when that memory
    was written in place since (its version moved), or when it was handed
    out writable through NumPy/DLPack (writes there bypass the version
    counter). Rebinding the output (``assign``, ``.data =``) leaves the
    op's memory, and so the alias, as it was."""
    held = node.result
    if held is None or _C._is_grad_enabled():
        return None
    for tape in _tapes():
        if tape._recording:
            return None
    y, version = held
    if y._version != version or y._written_unversioned:
        return None
    return y


def result_or(node, recompute):
    """:func:`saved_result` of ``node``, else ``recompute()`` (the op run
    again on ``node.inputs``): how a ``reads_result`` rule takes its op's
    output."""
    y = saved_result(node)
    return recompute() if y is None else y


def _tapes() -> list:
    stack = getattr(_local, "tapes", None)
    if stack is None:
        stack = _local.tapes = []
    return stack


def _record(op, inputs, attrs, outputs):
    """Called by the core after an op ran while recording is needed (once
    per eager op under autograd: kept lean, as the backward loop is)."""
    node = None
    tapes = getattr(_local, "tapes", None)
    if tapes:
        for tape in tapes:
            if tape._recording and tape._watches(inputs):
                if node is None:
                    node = Node(op, inputs, attrs, outputs)
                tape._add(node, outputs)
    for i in inputs:
        if i.requires_grad:
            break
    else:
        return
    if node is None:
        node = Node(op, inputs, attrs, outputs)
    saved = _SAVED.get(op)
    for k, o in enumerate(outputs):
        if o._dtype_code in _FLOAT_CODES and (saved is None or k not in saved):
            o.requires_grad = True
            o._grad_fn = node


_C._set_record_hook(_record)


# Rules of the standard library that read only the shape/dtype of some
# inputs (see ``unread_inputs``); every other input is version-checked.
def _batch_norm_unread(attrs):
    # beta never; the running statistics only in inference mode.
    return (2, 3, 4) if attrs.get("training") else (2,)


def _batch_norm_grad_unread(attrs):
    return (2, 3) if attrs.get("training") else ()


for _op, _unread in (("Add", (0, 1)), ("Sub", (0, 1)), ("Neg", (0,)), ("Sum", (0,)),
                     ("Mean", (0,)), ("Transpose", (0,)), ("BroadcastTo", (0,)),
                     ("Cast", (0,)), ("BatchNorm", _batch_norm_unread),
                     ("BatchNormGrad", _batch_norm_grad_unread)):
    set_unread_inputs(_op, _unread)
del _op, _unread


# ---------------------------------------------------------------- .grad in traces
#
# Inside ``@function`` a leaf's ``.grad`` is state of the compiled step, as a
# variable is: the trace must know every place it is read or written, so the
# graph computes it (backward ops included) instead of freezing the tensor
# that happened to be there when it was traced. The graph layer installs
# the hooks (``_graph`` imports this module, never the reverse).

_grad_trace_hooks = {"access": None, "alias": None}


def set_grad_trace_hooks(access, alias) -> None:
    """Install the trace's callbacks: ``access(leaf, reads)`` before code
    touches ``leaf.grad`` (``reads``: what it does depends on the current
    value, its None-ness included), and ``alias(source, alias)`` when a
    gradient is stored as an alias of a traced value."""
    _grad_trace_hooks["access"] = access
    _grad_trace_hooks["alias"] = alias


def grad_access(leaf, reads: bool = True) -> None:
    """Announce that ``leaf.grad`` is about to be read (``reads``) or only
    overwritten; a no-op outside a trace. Framework code that touches
    ``.grad`` (``backward``, optimizers, clipping, ``zero_grad``) calls it,
    so a compiled training step keeps ``.grad`` right across runs."""
    hook = _grad_trace_hooks["access"]
    if hook is not None and _C._is_tracing():
        hook(leaf, reads)


def _store_alias(g):
    """``g`` as a new tensor for ``.grad`` (the trace knows it is ``g``)."""
    a = g._alias()
    hook = _grad_trace_hooks["alias"]
    if hook is not None and _C._is_tracing():
        hook(g, a)
    return a


@contextlib.contextmanager
def suspend_tapes():
    """Hide the active tapes of this thread inside the block (control-flow
    branches are traced without being recorded op by op)."""
    saved = list(_tapes())
    _local.tapes = []
    for _ in saved:
        _C._tape_exit()
    try:
        yield
    finally:
        _local.tapes = saved
        for _ in saved:
            _C._tape_enter()


# ---------------------------------------------------------------- grad mode

@contextlib.contextmanager
def no_grad():
    """Within the block, ops are not recorded for autograd."""
    old = _C._set_grad_enabled(False)
    try:
        yield
    finally:
        _C._set_grad_enabled(old)


@contextlib.contextmanager
def enable_grad():
    """Within the block, recording is on (e.g. inside :func:`no_grad`)."""
    old = _C._set_grad_enabled(True)
    try:
        yield
    finally:
        _C._set_grad_enabled(old)


def is_grad_enabled() -> bool:
    """Whether ops are currently recorded for autograd."""
    return _C._is_grad_enabled()


# ---------------------------------------------------------------- engine

def _zeros_like_meta(meta):
    from . import ops
    from ._dtypes import from_code
    shape, code, dev, idx = meta
    return ops.fill(list(shape), 0.0, from_code(code), device=f"{dev}:{idx}")


def _accumulate(grads: dict, key, value):
    old = grads.get(key)
    grads[key] = value if old is None else old + value


def _as_source_dtype(g, source):
    """``g`` in ``source``'s dtype. A gradient inside the backward pass may
    be wider than its tensor (a matmul's rule writes the gradient of an
    autocast operand in float32 for the Cast rule that reads it, see
    ``_grads/linalg.py``); a gradient handed to the caller never is."""
    if g is None or g.dtype == source.dtype:
        return g
    from . import ops
    return ops.cast(g, source.dtype)


def _check_grad_shape(node, i, inp, dx):
    if tuple(dx.shape) != tuple(inp.shape):
        raise InvalidArgumentError(
            f"gradient rule of {node.op} returned shape {tuple(dx.shape)} for input {i}, "
            f"whose shape is {tuple(inp.shape)}")


def needs_grad(node, i: int) -> bool:
    """Whether the backward pass running ``node``'s rule wants the gradient
    of input ``i`` (rules skip expensive gradients nobody reads)."""
    return node.needs is None or node.needs[i]


def _run_backward(nodes, grads: dict, create_graph: bool, wanted=None, after_node=None,
                  keep=None):
    """Back-propagate ``grads`` (tensor id -> gradient) through ``nodes``,
    which are in execution order; returns the updated dict.

    ``wanted(t)`` says whether a gradient for input ``t`` can reach a source
    (None: every input); the rules may skip the others, and the engine
    drops them. ``after_node(position)``, when given, runs after the node at
    that position of the backward order is done (or skipped).

    ``keep``: None keeps every gradient in ``grads``; a set of tensor ids
    keeps only those, and the gradient of any other node output is dropped
    from ``grads`` as soon as its node's rule has read it (as torch frees a
    consumed gradient), so its memory goes back to the allocator while the
    pass runs instead of at its end.
    """
    # As torch: the rules record exactly when create_graph asks for it, also
    # when the caller runs under no_grad.
    ctx = enable_grad() if create_graph else no_grad()
    # Gradient rules run on the dtypes the forward ops used: autocast off.
    autocast_prev = _C._autocast_set(-1)
    try:
        with ctx:
            return _backward_nodes(nodes, grads, wanted, after_node, keep)
    finally:
        _C._autocast_set(autocast_prev)


def _backward_nodes(nodes, grads: dict, wanted, after_node=None, keep=None):
    """The loop of _run_backward (autocast off, grad mode set).

    It runs once per recorded op of every eager backward pass, between
    kernels that have just evicted the interpreter's data from the caches,
    so it keeps its own work small: single-output nodes (most) skip the
    list and the zero-filling checks, float inputs are told by dtype code,
    and shapes are compared as the tuples they are."""
    get = grads.get
    for pos, node in enumerate(reversed(nodes)):
        if after_node is not None and pos:
            after_node(pos - 1)
        out_ids = node.out_ids
        missing = False     # an output without a gradient (filled below)
        if len(out_ids) == 1:
            dy = get(out_ids[0])
            if dy is None:
                continue
            dys = [dy]
        else:
            dys = [get(k) for k in out_ids]
            present = False
            for d in dys:
                if d is None:
                    missing = True
                else:
                    present = True
            if not present:
                continue
        if _GRAD_HOOKS:
            for j, k in enumerate(out_ids):
                if k in _GRAD_HOOKS and dys[j] is not None:
                    dys[j] = grads[k] = _run_grad_hooks(k, dys[j])
        if keep is not None:
            # every use of these outputs is upstream of this node in the
            # backward order: their gradients are complete and only this
            # rule reads them (popped before the rule's results are added,
            # so an input sharing an id with an output starts afresh)
            for k in out_ids:
                if k not in keep:
                    grads.pop(k, None)
        op = node.op
        rule = _RULES.get(op)
        if rule is None:
            raise NotImplementedError(
                f"no gradient rule for op {op}; it cannot be differentiated yet")
        if missing and op not in _NONE_DYS:
            dys = [d if d is not None else _zeros_like_meta(m)
                   for d, m in zip(dys, node.out_meta)]
        inputs = node.inputs
        if wanted is not None:
            needs = tuple([wanted(inp) for inp in inputs])
            if not any(needs):
                continue
            node.needs = needs
        _check_versions(node)
        try:
            dxs = rule(node, *dys)
        finally:
            node.needs = None
        if len(dxs) != len(inputs):
            raise InvalidArgumentError(
                f"gradient rule of {op} returned {len(dxs)} gradients for "
                f"{len(inputs)} inputs")
        for i, dx in enumerate(dxs):
            if dx is None:
                continue
            inp = inputs[i]
            if inp._dtype_code not in _FLOAT_CODES:
                continue
            if wanted is not None and not wanted(inp):
                continue
            if dx.shape != inp.shape:
                _check_grad_shape(node, i, inp, dx)
            key = inp._id
            old = get(key)
            grads[key] = dx if old is None else old + dx
    if after_node is not None and nodes:
        after_node(len(nodes) - 1)
    return grads


def _initial_grads(targets, output_gradients):
    from ._tensor import Tensor
    from . import ops
    if isinstance(targets, Tensor):
        targets = [targets]
    if output_gradients is None:
        output_gradients = [None] * len(targets)
    elif isinstance(output_gradients, Tensor):
        output_gradients = [output_gradients]
    if len(output_gradients) != len(targets):
        raise InvalidArgumentError(f"{len(targets)} targets but {len(output_gradients)} "
                                   "output gradients")
    grads = {}
    for t, g in zip(targets, output_gradients):
        if g is None:
            g = ops.fill(list(t.shape), 1.0, t.dtype, device=str(t.device))
        else:
            if not isinstance(g, Tensor):
                raise TypeError(f"output gradient: expected a Tensor or None, got "
                                f"{type(g).__name__}")
            if tuple(g.shape) != tuple(t.shape):
                raise InvalidArgumentError(f"output gradient of shape {tuple(g.shape)} for a "
                                           f"target of shape {tuple(t.shape)}")
            if g.dtype != t.dtype and t.dtype.is_floating_point:
                # As PyTorch: the gradient of a target has the target's dtype
                # (a float64 or integer one would widen every rule's result
                # and the leaves' .grad).
                g = ops.cast(g, t.dtype)

        _accumulate(grads, t._id, g)
    return targets, grads


def _graph_nodes(targets):
    """Nodes reachable from the targets' ``_grad_fn``, in execution order."""
    order, seen = [], set()
    stack = [(t._grad_fn, False) for t in targets if t._grad_fn is not None]
    while stack:
        node, done = stack.pop()
        if done:
            order.append(node)
            continue
        if id(node) in seen:
            continue
        seen.add(id(node))
        stack.append((node, True))
        for inp in node.inputs:
            fn = inp._grad_fn
            if fn is not None and id(fn) not in seen:
                stack.append((fn, False))
    return order


def _requires_grad(t) -> bool:
    return t.requires_grad


def backward(targets, grad_tensors=None, create_graph: bool = False):
    """Accumulate gradients of ``targets`` into the ``.grad`` of the leaves
    that require grad (PyTorch's ``autograd.backward``)."""
    # The caller's output gradients: no leaf's .grad may be stored in them.
    from ._tensor import Tensor
    given = [g for g in (grad_tensors if isinstance(grad_tensors, (list, tuple))
                         else [grad_tensors]) if isinstance(g, Tensor)]
    targets, grads = _initial_grads(targets, grad_tensors)
    for t in targets:
        if not t.requires_grad:
            raise InvalidArgumentError("backward(): the target does not require grad; "
                                       "set requires_grad=True on a leaf it depends on")
    nodes = _graph_nodes(targets)
    leaves = {}
    for t in targets:
        if t._grad_fn is None:      # a leaf target gets its own gradient (torch)
            leaves[t._id] = t
    for node in nodes:
        for inp in node.inputs:
            if inp.requires_grad and inp._grad_fn is None:
                leaves[inp._id] = inp
    keep = set(leaves)      # only the leaves' gradients are read after the pass
    after_node = _early_accumulation(nodes, leaves, grads, create_graph, given)
    _run_backward(nodes, grads, create_graph, _requires_grad, after_node, keep)
    for key, leaf in leaves.items():
        _accumulate_leaf(leaf, grads.get(key), create_graph, given)


def _accumulate_leaf(leaf, g, create_graph: bool, given=()) -> None:
    """Add ``g`` into ``leaf.grad``, then run its post-accumulate-grad hooks."""
    if g is None:
        return
    if leaf._id in _GRAD_HOOKS:
        with contextlib.nullcontext() if create_graph else no_grad():
            g = _run_grad_hooks(leaf._id, g)
    grad_access(leaf, reads=True)
    g = _as_source_dtype(g, leaf)
    old = leaf.grad
    if old is None:
        if create_graph:
            leaf.grad = g
        elif not _C._is_tracing() and (g._storage_refs > 1
                                       or any(g._same_storage(u) for u in given)):
            # The gradient's memory is shared with another tensor (another
            # leaf's .grad from the same rule, the caller's gradient= tensor,
            # a retained non-leaf gradient): .grad gets its own copy, as
            # torch's AccumulateGrad clones a gradient it does not own, so an
            # in-place op on one (.grad.mul_(), zero_()) leaves the others.
            leaf.grad = g._clone()
        else:
            leaf.grad = _store_alias(g)
    elif create_graph or _C._is_tracing() or not _accumulate_in_place(old, g):
        leaf.grad = old + g
    for hook in list(_post_accumulate_hooks(leaf)):
        hook(leaf)


def _accumulate_in_place(old, g) -> bool:
    """``old += g`` where ``old`` is a leaf's ``.grad`` (PyTorch accumulates
    into the existing gradient tensor when the backward pass does not build
    a graph, so a reference to it taken earlier, or a buffer assigned to
    ``.grad``, sees the sum). Host memory is written (its views see it too);
    on other devices the tensor object is rebound. Returns False (the caller
    stores a new tensor) where ``old``'s memory is shared with another
    tensor: a gradient a rule handed to several inputs, or a caller's
    tensor that passed through unchanged, must not be written."""
    if (old.dtype != g.dtype or tuple(old.shape) != tuple(g.shape)
            or old._storage_refs != 1 or old.is_read_only):
        return False
    if not old._is_contiguous_strides():
        # an expanded (stride-0) or otherwise strided ``.grad`` may map
        # several elements to one memory cell: adding into it would sum
        # the wrong elements, so store a new tensor instead
        return False
    if old._device_name == "cpu" and g._device_name == "cpu":
        # one pass, no temporary; NumPy's sum is bit-identical to the Add
        # kernel's for the four floating dtypes (bfloat16 via ml_dtypes)
        import numpy as np
        dst = old.numpy()
        np.add(dst, g.numpy(), out=dst)
        old._bump_version()
    else:
        with no_grad():
            old._rebind(old + g)
    return True


# ------------------------------------------------ post-accumulate-grad hooks
#
# ``Tensor.register_post_accumulate_grad_hook(fn)``: ``fn(leaf)`` runs as soon
# as ``backward()`` has accumulated the leaf's final gradient into ``.grad`` —
# right after the last node of the backward pass that contributes to it, not
# at the end of the pass — so that work on that gradient (DDP's bucketed
# all-reduce) overlaps the rest of the backward pass. Leaves without hooks
# are accumulated at the end, as before.

_POST_HOOKS: dict = {}   # tensor _id -> (weakref to the tensor, [hooks])


class _HookHandle:
    """Returned by ``register_hook`` and ``register_post_accumulate_grad_hook``;
    ``remove()`` unregisters the hook."""

    def __init__(self, key, hook, table=None):
        self._key, self._hook = key, hook
        self._table = _POST_HOOKS if table is None else table

    def remove(self) -> None:
        entry = self._table.get(self._key)
        if entry is not None and any(h is self._hook for h in entry[1]):
            entry[1][:] = [h for h in entry[1] if h is not self._hook]
            if not entry[1] and not entry[2:]:
                del self._table[self._key]


def register_post_accumulate_grad_hook(tensor, hook) -> _HookHandle:
    """Run ``hook(tensor)`` each time ``backward()`` has accumulated the
    tensor's gradient into ``tensor.grad`` (PyTorch's hook of that name).

    Parameters
    ----------
    tensor : Tensor
        A leaf that requires grad.
    hook : callable
        ``hook(tensor) -> None``; it may read ``tensor.grad`` and replace it.

    Returns
    -------
    handle
        ``handle.remove()`` unregisters the hook.
    """
    import weakref
    if not callable(hook):
        raise TypeError(f"register_post_accumulate_grad_hook: hook must be callable, got "
                        f"{type(hook).__name__}")
    if not tensor.requires_grad or tensor._grad_fn is not None:
        raise InvalidArgumentError(
            "register_post_accumulate_grad_hook: only leaves that require grad accumulate "
            f"gradients (got a tensor of shape {tuple(tensor.shape)} with requires_grad="
            f"{tensor.requires_grad}, leaf={tensor._grad_fn is None})")
    key = tensor._id
    entry = _POST_HOOKS.get(key)
    if entry is None or entry[0]() is not tensor:
        ref = weakref.ref(tensor, lambda _r, k=key, d=_POST_HOOKS: d.pop(k, None))
        entry = _POST_HOOKS[key] = (ref, [])
    entry[1].append(hook)
    return _HookHandle(key, hook)


def _post_accumulate_hooks(leaf) -> list:
    entry = _POST_HOOKS.get(leaf._id)
    if entry is None or entry[0]() is not leaf:
        return []
    return entry[1]


# ------------------------------------------------------------ tensor hooks
#
# ``register_hook(tensor, fn)``: ``fn(grad)`` runs when the gradient of
# ``tensor`` is complete in a backward pass (``backward()``, ``grad()``, a
# tape's ``gradient``) and may return a replacement (None keeps it), as
# PyTorch's ``Tensor.register_hook``. For a tensor an op produced that is when
# the engine reaches its op (every use has contributed); for a leaf, before
# the gradient is accumulated into ``.grad`` or returned. Hooks run in the
# order they were registered. ``retain_grad(tensor)`` keeps the gradient of a
# non-leaf in its ``.grad`` (accumulating), after its hooks ran.

_GRAD_HOOKS: dict = {}   # tensor _id -> [weakref to the tensor, [hooks], retain]


def _hook_entry(tensor, what: str) -> list:
    import weakref
    if not tensor.requires_grad:
        raise RuntimeError(f"cannot {what} on a tensor that doesn't require gradient "
                           f"(a {tensor.dtype.name} tensor of shape {tuple(tensor.shape)})")
    key = tensor._id
    entry = _GRAD_HOOKS.get(key)
    if entry is None or entry[0]() is not tensor:
        ref = weakref.ref(tensor, lambda _r, k=key, d=_GRAD_HOOKS: d.pop(k, None))
        entry = _GRAD_HOOKS[key] = [ref, [], False]
    return entry


def register_hook(tensor, hook) -> _HookHandle:
    """Run ``hook(grad)`` on the gradient of ``tensor`` in every backward
    pass (see above); it may return a tensor of the same shape to use
    instead. Returns a handle whose ``remove()`` unregisters it."""
    if not callable(hook):
        raise TypeError(f"register_hook: hook must be callable, got {type(hook).__name__}")
    entry = _hook_entry(tensor, "register a hook")
    entry[1].append(hook)
    return _HookHandle(tensor._id, hook, _GRAD_HOOKS)


def retain_grad(tensor) -> None:
    """Keep the gradient of non-leaf ``tensor`` in its ``.grad`` in later
    backward passes (a no-op for a leaf, which accumulates anyway)."""
    if tensor._grad_fn is None and tensor.requires_grad:
        return
    _hook_entry(tensor, "retain_grad")[2] = True


def retains_grad(tensor) -> bool:
    """Whether :func:`retain_grad` was called on this non-leaf tensor."""
    entry = _GRAD_HOOKS.get(tensor._id)
    return entry is not None and entry[0]() is tensor and entry[2]


def _run_grad_hooks(key, g):
    """``g``, the complete gradient of tensor ``key``, through its hooks
    (and stored into ``.grad`` if it is retained)."""
    entry = _GRAD_HOOKS.get(key)
    if entry is None or g is None:
        return g
    tensor = entry[0]()
    if tensor is None:
        return g
    for hook in list(entry[1]):
        r = hook(g)
        if r is None:
            continue
        if tuple(r.shape) != tuple(g.shape):
            raise RuntimeError(
                f"hook {getattr(hook, '__name__', hook)!r} has changed the size of value: "
                f"it returned shape {tuple(r.shape)} for a gradient of shape "
                f"{tuple(g.shape)}")
        g = r if r.dtype == g.dtype else _cast_to(r, g.dtype)
    if entry[2]:
        old = tensor.grad
        if old is None:
            tensor.grad = g if _C._is_grad_enabled() else _store_alias(g)
        else:
            tensor.grad = old + g
    return g


def _cast_to(t, dt):
    from . import ops
    return ops.cast(t, dt)


def _early_accumulation(nodes, leaves: dict, grads: dict, create_graph: bool, given=()):
    """An ``after_node(position)`` callback for :func:`_run_backward` that
    accumulates each hooked leaf right after the last node (in backward
    order) that reads it, and removes it from ``leaves``; None when no leaf
    has hooks."""
    hooked = [k for k, leaf in leaves.items() if _post_accumulate_hooks(leaf)]
    if not hooked:
        return None
    wanted = set(hooked)
    done_at: dict = {}
    for pos, node in enumerate(reversed(nodes)):
        for inp in node.inputs:
            if inp._id in wanted:
                done_at[inp._id] = pos      # the last position wins
    by_pos: dict = {}
    for key, pos in done_at.items():
        by_pos.setdefault(pos, []).append(leaves.pop(key))

    def after_node(pos):
        for leaf in by_pos.pop(pos, ()):
            _accumulate_leaf(leaf, grads.get(leaf._id), create_graph, given)
    return after_node


def grad(outputs, inputs, grad_outputs=None, create_graph: bool = False,
         allow_unused: bool = False):
    """Gradients of ``outputs`` with respect to ``inputs`` (PyTorch's
    ``autograd.grad``); nothing is accumulated into ``.grad``."""
    from ._tensor import Tensor
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    targets, grads = _initial_grads(outputs, grad_outputs)
    nodes = _graph_nodes(targets)
    _run_backward(nodes, grads, create_graph)
    out = []
    hooked = set()
    for x in inputs:
        g = grads.get(x._id)
        if x._grad_fn is None and x._id in _GRAD_HOOKS and x._id not in hooked:
            hooked.add(x._id)       # a leaf's hooks run once, on its final gradient
            with contextlib.nullcontext() if create_graph else no_grad():
                g = grads[x._id] = _run_grad_hooks(x._id, g)
        g = _as_source_dtype(g, x)
        if g is None and not allow_unused:
            raise InvalidArgumentError("grad(): an input was not used to compute the outputs "
                                       "(pass allow_unused=True to get None)")
        out.append(g)
    return out[0] if single else out


class GradientTape:
    """Record operations for automatic differentiation (TensorFlow style).

    Parameters
    ----------
    persistent : bool, default False
        Allow several calls to :meth:`gradient`.
    watch_accessed_variables : bool, default True
        Watch tensors that require grad (``requires_grad_()``, the
        parameters of ``nn`` modules) automatically when an op inside the
        block reads them, as TensorFlow watches trainable variables. With
        False only :meth:`watch` marks sources.

    Notes
    -----
    :meth:`gradient` warns when a floating-point source was never watched
    (neither :meth:`watch` nor ``requires_grad``): its gradient is unknown,
    not zero, and the ``None`` it returns is almost always a forgotten
    ``watch``. A source that requires grad but that no op read (an unused
    layer's parameter) gives None without a warning: it is unconnected.

    Examples
    --------
    >>> import dragon_core as dg
    >>> x = dg.tensor(3.0)
    >>> with dg.GradientTape() as tape:
    ...     tape.watch(x)
    ...     y = x * x
    >>> float(tape.gradient(y, x))
    6.0
    """

    def __init__(self, persistent: bool = False, watch_accessed_variables: bool = True):
        self.persistent = persistent
        self.watch_accessed_variables = watch_accessed_variables
        self._tracked: set = set()
        self._nodes: list = []
        self._recording = False
        self._used = False

    def watch(self, tensor) -> None:
        """Track ``tensor`` (or a list of tensors) as a differentiation source."""
        tensors = tensor if isinstance(tensor, (list, tuple)) else [tensor]
        for t in tensors:
            if not t.dtype.is_floating_point:
                raise InvalidArgumentError(f"can only watch floating-point tensors, got {t.dtype}")
            self._tracked.add(t._id)

    def _watches(self, inputs) -> bool:
        """Whether an op with these inputs is recorded: one of them is
        tracked, or (``watch_accessed_variables``) requires grad, which
        watches it from then on."""
        hit = False
        for i in inputs:
            if i._id in self._tracked:
                hit = True
            elif self.watch_accessed_variables and i.requires_grad:
                self._tracked.add(i._id)
                hit = True
        return hit

    def _add(self, node, outputs):
        self._nodes.append(node)
        for o in outputs:
            if o.dtype.is_floating_point:
                self._tracked.add(o._id)

    def __enter__(self) -> "GradientTape":
        if self._recording:
            raise RuntimeError("this GradientTape is already recording")
        self._recording = True
        _tapes().append(self)
        _C._tape_enter()
        return self

    def __exit__(self, *exc) -> None:
        self._stop()

    def _stop(self):
        if self._recording:
            self._recording = False
            _tapes().remove(self)
            _C._tape_exit()

    @contextlib.contextmanager
    def stop_recording(self):
        """Temporarily stop recording on this tape."""
        was = self._recording
        self._recording = False
        try:
            yield
        finally:
            self._recording = was

    def reset(self) -> None:
        """Forget everything recorded so far."""
        self._tracked.clear()
        self._nodes.clear()

    def gradient(self, target, sources, output_gradients=None,
                 unconnected_gradients: str = "none"):
        """Gradients of ``target`` with respect to ``sources``.

        Parameters
        ----------
        target : Tensor or list of Tensor
        sources : Tensor or (nested) list/tuple of Tensor
            An iterable (``model.parameters()``) is taken as a list.
        output_gradients : Tensor or list of Tensor, optional
            Gradients of the targets (default: ones).
        unconnected_gradients : {"none", "zero"}
            What to return for a source the target does not depend on.

        Returns
        -------
        Tensor or list of Tensor, matching ``sources`` (nested lists and
        tuples keep their structure).
        """
        from ._tensor import Tensor
        from . import ops
        if unconnected_gradients not in ("none", "zero"):
            raise ValueError(f"GradientTape.gradient: unconnected_gradients must be 'none' or "
                             f"'zero', got {unconnected_gradients!r}")
        if self._used and not self.persistent:
            raise RuntimeError("a non-persistent GradientTape can only compute gradients once; "
                               "use GradientTape(persistent=True)")
        single = isinstance(sources, Tensor)
        if not single:
            sources = list(sources)     # (an iterator: model.parameters())
        srcs = [sources] if single else _flatten_sources(sources)
        self._used = True
        targets, grads = _initial_grads(target, output_gradients)
        # Differentiating inside an active outer tape records the backward ops
        # there (higher order); ops are not recorded on this tape itself.
        outer = any(t._recording for t in _tapes() if t is not self)
        nodes = list(self._nodes)
        tracked = self._tracked

        def wanted(t):
            return t.requires_grad or t._id in tracked
        with self.stop_recording():
            _run_backward(nodes, grads, create_graph=outer, wanted=wanted)
        if not self.persistent:
            self._stop()
        src_ids = {x._id for x in srcs}
        if any(x._id in tracked for x in srcs) \
                and not any(t._id in tracked or t._id in src_ids for t in targets) \
                and any(t.dtype.is_floating_point for t in targets):
            # Never a silent None for every watched source: the tape saw no
            # op that made the target (an unwatched source warns below).
            warnings.warn(
                "GradientTape.gradient: the target was not recorded by this tape (computed "
                "outside the `with` block, under no_grad() or stop_recording(), or only from "
                "tensors the tape does not watch), so every gradient is "
                f"{'zeros' if unconnected_gradients == 'zero' else 'None'}", UserWarning,
                stacklevel=2)
        out = []
        for s in srcs:
            g = _as_source_dtype(grads.get(s._id), s)
            # A source that requires grad would have been watched had an op
            # read it (watch_accessed_variables): its None means unused, as
            # for an unused layer's parameters, not a forgotten watch.
            auto = self.watch_accessed_variables and s.requires_grad
            if g is None and s._id not in tracked and s.dtype.is_floating_point and not auto:
                # Never a silent None: the tape did not see this source.
                warnings.warn(
                    "GradientTape.gradient: a source of shape "
                    f"{tuple(s.shape)} was never watched by this tape, so its gradient "
                    "is not known (returned as "
                    f"{'zeros' if unconnected_gradients == 'zero' else 'None'}); call "
                    "tape.watch(x) inside the `with` block or set x.requires_grad_() "
                    "before using it", UserWarning, stacklevel=2)
            if g is None and unconnected_gradients == "zero":
                g = ops.fill(list(s.shape), 0.0, s.dtype, device=str(s.device))
            out.append(g)
        return out[0] if single else _pack_like(sources, iter(out))   # a list


def _flatten_sources(sources) -> list:
    """The tensors of a (nested) list/tuple of tensors, depth first."""
    from ._tensor import Tensor
    out = []
    for s in sources:
        if isinstance(s, Tensor):
            out.append(s)
        elif isinstance(s, (list, tuple)):
            out.extend(_flatten_sources(s))
        else:
            raise TypeError(f"GradientTape.gradient: sources must be Tensors or (nested) "
                            f"lists/tuples of Tensors, got {type(s).__name__}")
    return out


def _pack_like(structure, flat):
    """``flat``'s items in the nesting of ``structure`` (a nested list stays
    a list, a nested tuple a tuple)."""
    from ._tensor import Tensor
    if isinstance(structure, Tensor):
        return next(flat)
    if isinstance(structure, tuple):
        return tuple(_pack_like(s, flat) for s in structure)
    return [_pack_like(s, flat) for s in structure]
