"""From a trace (the ops a Python function ran) to a GraphDef."""

from __future__ import annotations

import contextlib
import contextvars
import json

import numpy as np

from .. import _C
from .._dtypes import as_dtype
from .. import proto as P

# Attribute type codes of the C ABI (DG_ATTR_*).
_INT, _FLOAT, _BOOL, _STRING, _INTS, _FLOATS, _DTYPE = 1, 2, 3, 4, 5, 6, 7

_schema_cache: dict = {}

# Metadata key of a sub-graph that only raises (a cond branch whose tracing
# failed): JSON with the status code, error kind, message and op.
RAISES = "raises"


def schema(op: str) -> dict:
    """The registry's description of ``op`` (cached per op name)."""
    desc = _schema_cache.get(op)
    if desc is None:
        desc = _schema_cache[op] = _C.op(op).describe()
    return desc


def attr_to_proto(kind: int, value) -> P.AttrValue:
    """A Python attribute value as an AttrValue of schema type ``kind``."""
    a = P.AttrValue()
    if value is None:
        a.none = True
    elif kind == _INT:
        a.i = int(value)
    elif kind == _FLOAT:
        a.f = float(value)
    elif kind == _BOOL:
        a.b = bool(value)
    elif kind == _STRING:
        a.s = str(value)
    elif kind == _INTS:
        a.ints.values.extend(int(v) for v in value)
    elif kind == _FLOATS:
        a.floats.values.extend(float(v) for v in value)
    elif kind == _DTYPE:
        a.dtype = as_dtype(value).code
    else:
        raise ValueError(f"unknown attribute type {kind}")
    return a


def attr_from_proto(a: P.AttrValue):
    """The Python value of an AttrValue (None when unset)."""
    which = a.WhichOneof("value")
    if which is None or which == "none":
        return None
    if which == "ints":
        return list(a.ints.values)
    if which == "floats":
        return list(a.floats.values)
    if which == "dtype":
        return as_dtype(a.dtype).name
    if which == "graph":
        return a.graph
    return getattr(a, which)


def attrs_tuple(op_type: str, opdef: P.OpDef) -> tuple:
    """The attribute values of ``opdef`` in schema order (for the runtime)."""
    out = []
    for spec in schema(op_type)["attrs"]:
        a = opdef.attr.get(spec["name"])
        out.append(None if a is None else attr_from_proto(a))
    return tuple(out)


def tensor_to_proto(name: str, t) -> P.TensorProto:
    """A host copy of tensor ``t`` as a TensorProto; ``device`` names the
    device of a tensor that is not on the host (see :func:`constant_feed`)."""
    arr = np.array(t.cpu().numpy(), order="C", copy=True)  # keeps 0-d shapes
    dev = t.device
    return P.TensorProto(name=name, dtype=t._dtype_code, shape=list(arr.shape),
                         data=arr.tobytes(),
                         device="" if dev.type == "cpu" else str(dev))


def constant_feed(tp: P.TensorProto):
    """The tensor a compiled plan is fed for constant ``tp``: the borrowed
    tensor, or the stored value on the device it was computed on (a
    constant folded on ``cuda:0`` feeds ``cuda:0`` ops; the host otherwise)."""
    t = tensor_from_proto(tp)
    if tp.device and _borrowed(tp) is None:
        t = t.to(tp.device)
    return t


def tensor_from_proto(tp: P.TensorProto):
    """The tensor stored in a TensorProto (on the host); for a borrowed
    constant (see :func:`borrowed_constants`), the tensor it borrows."""
    from .._tensor import tensor
    t = _borrowed(tp)
    if t is not None:
        return t
    dt = as_dtype(tp.dtype)
    return tensor(constant_array(tp).copy(), dtype=dt)


# ------------------------------------------------- borrowed constants
#
# A graph constant normally holds its value in ``TensorProto.data`` (a copy
# made when the graph is built). A tensor the traced callable *owns* and
# never changes (an imported ONNX model's initializers) is a constant too,
# so folding and kernels' call-site state see it as one, but the graph
# borrows it instead of copying it: its TensorProto has a name, dtype and
# shape and no data, its name is listed in ``metadata[BORROWED]``, and the
# tensor itself is what the plan is fed. While such a graph is optimised
# and compiled, :func:`borrowed_constants` makes the values readable through
# :func:`constant_array` / :func:`tensor_from_proto`, which every pass uses.

#: Metadata key: JSON list of the names of the borrowed constants.
BORROWED = "borrowed_constants"
_BORROWED_VALUES = contextvars.ContextVar("dragon_borrowed_constants", default=None)


@contextlib.contextmanager
def borrowed_constants(values: dict):
    """Make ``values`` (constant name -> Tensor) the values of the borrowed
    constants while the block runs (graph passes, compilation)."""
    token = _BORROWED_VALUES.set(values)
    try:
        yield
    finally:
        _BORROWED_VALUES.reset(token)


def _borrowed(tp: P.TensorProto):
    """The tensor a borrowed constant stands for, or None for one with data."""
    if tp.data:
        return None
    table = _BORROWED_VALUES.get()
    return None if table is None else table.get(tp.name)


def constant_nbytes(tp: P.TensorProto) -> int:
    """Size in bytes of a constant's value (borrowed or not)."""
    numel = int(np.prod(tuple(tp.shape), dtype=np.int64)) if len(tp.shape) else 1
    return numel * as_dtype(tp.dtype).itemsize


def constant_array(tp: P.TensorProto) -> np.ndarray:
    """The value of a graph constant as a read-only NumPy array, without a
    copy: a view of ``tp.data``, or of the tensor a borrowed constant
    stands for.

    Raises
    ------
    ValueError
        For a borrowed constant whose value is not available here (the
        graph is optimised outside the compilation that borrowed it; use
        ``Function.get_graph``, which fills the values in).
    """
    t = _borrowed(tp)
    if t is not None:
        arr = t.numpy()
        if arr.flags.writeable:
            arr = arr.view()
            arr.flags.writeable = False
        return arr
    dt = as_dtype(tp.dtype)
    if len(tp.data) != constant_nbytes(tp):
        raise ValueError(f"graph constant '{tp.name}' ({dt.name}, shape {tuple(tp.shape)}) "
                         f"holds {len(tp.data)} bytes of {constant_nbytes(tp)}: it borrows "
                         "its value from the function that built the graph; take the graph "
                         "from that function's get_graph() to have the values filled in")
    return np.frombuffer(tp.data, dtype=dt.numpy).reshape(tuple(tp.shape))


def fill_borrowed(graph, values: dict):
    """A copy of ``graph`` whose borrowed constants hold their values
    (``values``: name -> Tensor), so it stands on its own (saving,
    printing, optimising again); ``graph`` itself when it borrows none."""
    if BORROWED not in graph.metadata:
        return graph
    names = set(json.loads(graph.metadata[BORROWED]))
    out = P.GraphDef()
    out.CopyFrom(graph)
    for c in out.constant:
        if c.name in names and c.name in values:
            c.data = np.ascontiguousarray(values[c.name].cpu().numpy()).tobytes()
    del out.metadata[BORROWED]
    return out


def _value_info(graph, name, t):
    graph.value_info.add(name=name, dtype=t._dtype_code, shape=list(t.shape))


def _plugin_versions() -> dict:
    out = {}
    for rec in _C.plugins():
        out[rec["name"]] = (rec["version"], rec["dist"])
    return out


class Trace:
    """What a traced run did: op records, created constants, assignments."""

    ASSIGN = "__assign__"
    ALIAS = "__alias__"

    def __init__(self):
        self.records = []     # (op, inputs, attrs, outputs); assignments inline
        self.created = {}     # id -> tensor made inside the trace (constants)
        self.originals = {}   # id -> (variable, alias of its value before the trace)
        self.assigned = {}    # id -> the value the trace last assigned it
        self.grads = {}       # leaf id -> (leaf, its .grad before the trace, first touch reads)

    def add(self, op, inputs, attrs, outputs):
        self.records.append((op, list(inputs), dict(attrs), list(outputs)))

    def add_control(self, op, inputs, attrs, outputs, subs):
        """A Cond/While op; ``subs`` are its traced sub-graphs."""
        self.records.append((op, list(inputs), {"_control": (dict(attrs), subs)}, list(outputs)))

    def add_assign(self, var, value):
        if var._id not in self.originals:
            self.originals[var._id] = (var, var._alias())
        self.assigned[var._id] = value
        self.records.append((self.ASSIGN, [var, value], {}, []))

    def touch_grad(self, leaf, reads: bool):
        """``leaf.grad`` is about to be read (``reads``) or overwritten; the
        first touch records its value from before the trace."""
        if leaf._id not in self.grads:
            self.grads[leaf._id] = (leaf, leaf.grad, bool(reads))

    def restore_grads(self) -> dict:
        """Put back every touched ``.grad`` as it was before the trace (the
        graph recomputes it); returns leaf id -> its value at the end of
        the trace."""
        finals = {}
        for uid, (leaf, original, _) in self.grads.items():
            finals[uid] = leaf.grad
            leaf.grad = original
        return finals

    def add_alias(self, source, alias):
        """``alias`` shares ``source``'s storage (``detach()``): same graph value."""
        self.records.append((self.ALIAS, [source], {}, [alias]))

    def restore(self):
        """Undo the assignments the trace run made (the graph redoes them).

        A variable that no longer holds what the trace assigned was written
        meanwhile by someone else (another thread's compiled run): that
        value is kept, not overwritten with the one from before the trace.
        """
        for uid, (var, original) in self.originals.items():
            last = self.assigned.get(uid)
            if last is None or var._same_storage(last):
                var._rebind(original)


def _assigned_ids(trace: Trace) -> set:
    """The ids of the tensors the trace assigns, an assignment through an
    alias (``w.detach().assign(v)``) counting for the tensor aliased, since
    the graph updates that one."""
    source: dict = {}   # alias id -> id of the tensor it aliases
    out = set()
    for op, ins, _, outs in trace.records:
        if op == Trace.ALIAS:
            source[outs[0]._id] = source.get(ins[0]._id, ins[0]._id)
        elif op == Trace.ASSIGN:
            out.add(source.get(ins[0]._id, ins[0]._id))
    return out


def build_graph(name: str, trace: Trace, inputs: list, outputs: list, freeze: bool = False,
                owned: dict | None = None):
    """Build the GraphDef of a trace.

    With ``freeze``, tensors the trace reads but did not create and never
    assigns, directly or through an alias (parameters), become constants
    holding their values now, as created tensors do, so passes can fold
    them (torch.jit.freeze).

    ``owned`` (tensor id -> tensor) names tensors the traced callable owns
    and never changes (an imported model's initializers): the ones the
    trace reads and never assigns become *borrowed* constants (see
    :func:`borrowed_constants`): constants to every pass and kernel, fed
    the tensor itself, with no copy.

    Returns
    -------
    (GraphDef, constants, captured)
        ``constants`` and ``captured`` are the tensors fed for
        ``graph.constant`` and ``graph.captured``, in order.
    """
    g = P.GraphDef(name=name)
    if inputs:
        g.metadata["device"] = inputs[0]._device_name
    names: dict = {}
    constants, captured = [], []
    owned = owned or {}
    borrowed: list = []
    assigned = _assigned_ids(trace) if freeze or owned else set()
    for i, t in enumerate(inputs):
        nm = f"input:{i}"
        g.input.append(nm)
        _value_info(g, nm, t)
        names.setdefault(t._id, nm)

    def name_of(t):
        nm = names.get(t._id)
        if nm is not None:
            return nm
        if t._id in owned and t._id not in assigned and t._id not in trace.created:
            nm = f"owned:{len(borrowed)}"
            g.constant.append(P.TensorProto(name=nm, dtype=t._dtype_code, shape=list(t.shape)))
            borrowed.append(nm)
            constants.append(t)   # fed as it is: the callable never changes it
        elif t._id in trace.created or (freeze and t._id not in assigned):
            nm = f"const:{len(constants)}"
            g.constant.append(tensor_to_proto(nm, t))
            # The graph owns a copy of each constant (a frozen parameter's
            # value at trace time): no assign() or in-place write through
            # the caller's tensor reaches it, so kernels may keep what they
            # derive from it (call-site state, docs/abi.md).
            constants.append(t._clone())
        else:
            nm = f"captured:{len(captured)}"
            g.captured.append(nm)
            captured.append(t)
        _value_info(g, nm, t)
        names[t._id] = nm
        return nm

    versions = _plugin_versions()
    counts: dict = {}
    for op, ins, attrs, outs in trace.records:
        if op == Trace.ALIAS:
            names[outs[0]._id] = name_of(ins[0])
            continue
        if op == Trace.ASSIGN:
            var, value = ins
            if var._id in trace.created:
                raise ValueError("assign() inside a function must target a tensor created "
                                 "outside it (a variable), not one made during the trace")
            target = names.get(var._id)
            if target is None or not target.startswith("captured:"):
                target = None
                for i, t in enumerate(captured):
                    if t._id == var._id:
                        # (names[] holds the value it was last assigned)
                        target = f"captured:{i}"
                if target is None:
                    nm = f"captured:{len(captured)}"
                    g.captured.append(nm)
                    captured.append(var)
                    _value_info(g, nm, var)
                    target = nm
            if target in g.state_target:
                # assigned again in the same trace: the last value is the update
                g.state_update[list(g.state_target).index(target)] = name_of(value)
            else:
                g.state_target.append(target)
                g.state_update.append(name_of(value))
            names[var._id] = name_of(value)
            continue
        desc = schema(op)
        k = counts.get(op, 0)
        counts[op] = k + 1
        opdef = g.op.add(type=op, name=f"{op}_{k}")
        plugin = desc["plugin"]
        opdef.plugin = plugin
        version, dist = versions.get(plugin, ("", ""))
        opdef.plugin_version = version
        opdef.plugin_dist = dist
        for t in ins:
            opdef.input.append(name_of(t))
        for j, t in enumerate(outs):
            nm = f"{opdef.name}:{j}"
            names[t._id] = nm
            opdef.output.append(nm)
            _value_info(g, nm, t)
        if "_control" in attrs:
            cattrs, subs = attrs["_control"]
            keys = ("then_branch", "else_branch") if op == "Cond" else ("cond_graph", "body_graph")
            for key, sub in zip(keys, subs):
                opdef.attr[key].graph.CopyFrom(sub.graph)
            for key in ("num_operands", "num_then_captures", "num_else_captures",
                        "maximum_iterations"):
                if key in cattrs:
                    opdef.attr[key].i = int(cattrs[key])
            continue
        for spec in desc["attrs"]:
            opdef.attr[spec["name"]].CopyFrom(attr_to_proto(spec["type"], attrs.get(spec["name"])))
    for t in outputs:
        g.output.append(name_of(t))
    if borrowed:
        g.metadata[BORROWED] = json.dumps(borrowed)
    # Every device type the graph's fed tensors live on (its inputs and the
    # captured variables): "device" names the first input's only, and a
    # function without arguments (a training step over captured parameters)
    # has none, so a pass that inserts an op with kernels on some devices
    # only checks them all (passes.device_types).
    kinds = sorted({t._device_name.partition(":")[0] for t in list(inputs) + captured})
    if kinds:
        g.metadata["devices"] = ",".join(kinds)
    return g, constants, captured
