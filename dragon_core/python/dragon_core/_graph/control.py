"""Control flow: ``cond`` and ``while_loop``, in eager and graph mode.

Eagerly they are Python ``if``/``while`` (autograd records the ops that
ran). Inside ``@function`` each branch or body is traced into a sub-graph
and the outer graph gets one ``Cond``/``While`` op holding them; the
executor runs the sub-graph chosen at run time.

Differentiation: a ``Cond`` is recorded as one autograd node whose gradient
is another ``cond`` over the branches' vector-Jacobian products, so it works
in both modes and to any order. A ``While`` is differentiable when it has a
``maximum_iterations`` bound: its gradient unrolls that many masked steps.
"""

from __future__ import annotations

import json

from .. import _C
from .. import _autograd
from .. import proto as P
from .._tensor import Tensor, tensor
from .build import RAISES, Trace, build_graph
from .function import _flatten, _traces, _unflatten, is_tracing


def _as_tensors(values) -> list:
    return [v if isinstance(v, Tensor) else tensor(v) for v in values]


class SubGraph:
    """A traced branch/body: its GraphDef and what it needs fed.

    ``failed`` is the exception its tracing raised, for a branch traced
    lazily (see :func:`_trace_lazily`); its graph then only raises.
    """

    def __init__(self, graph, constants, captured, out_spec, outputs, failed=None):
        self.graph = graph
        self.constants = constants
        self.captured = captured
        self.out_spec = out_spec
        self.outputs = outputs
        self.failed = failed


def _trace_sub(name: str, fn, args: list) -> SubGraph:
    trace = Trace()
    _traces().append(trace)
    _C._trace_enter()
    try:
        with _autograd.suspend_tapes():
            result = fn(*args)
    finally:
        _C._trace_exit()
        _traces().pop()
        trace.restore()
    if trace.originals:
        raise ValueError(f"{name}: assign() inside a cond/while_loop branch is not supported")
    leaves: list = []
    spec = _flatten(result, leaves)
    graph, constants, captured = build_graph(name, trace, args, leaves)
    return SubGraph(graph, constants, captured, spec, leaves)


def _error_record(exc: BaseException) -> dict:
    """Status code, error kind, message and op of ``exc``, so the executor
    can raise the same kind of Dragon error later (see ``errors._make``)."""
    from .. import errors as E
    kind = 0
    if isinstance(exc, E.DragonError) and exc.code:
        code = exc.code
        if isinstance(exc, E.NoKernelError):
            kind = 1
        elif isinstance(exc, E.PluginError):
            kind = 2
        elif isinstance(exc, E.ArgumentTypeError):
            kind = 3
    elif isinstance(exc, TypeError):
        code, kind = 1, 3
    elif isinstance(exc, ValueError):
        code = 1
    elif isinstance(exc, NotImplementedError):
        code = 3
    elif isinstance(exc, MemoryError):
        code = 4
    elif isinstance(exc, IndexError):
        code = 6
    elif isinstance(exc, LookupError):
        code = 2
    else:
        code = 5
    return {"code": code, "kind": kind, "message": f"{type(exc).__name__}: {exc}",
            "op": getattr(exc, "op", "") or ""}


def _trace_lazily(name: str, fn, args: list) -> SubGraph:
    """Trace a branch that may not run for these inputs.

    Eagerly a branch that is not taken never runs, so an error it would
    raise (a reshape invalid for these shapes, say) must not break the
    trace. A branch whose tracing fails becomes a sub-graph that raises that
    error, with its type kept, when the executor takes it.
    """
    try:
        return _trace_sub(name, fn, args)
    except Exception as exc:   # noqa: BLE001 - re-raised at run time, if taken
        rec = _error_record(exc)
        rec["message"] = (f"{name}: could not be traced for the inputs of the trace (it did "
                          f"not run then), and this run reached it: {rec['message']}")
        g = P.GraphDef(name=name)
        for i, t in enumerate(args):
            nm = f"input:{i}"
            g.input.append(nm)
            g.value_info.add(name=nm, dtype=t._dtype_code, shape=list(t.shape))
        g.metadata[RAISES] = json.dumps(rec)
        return SubGraph(g, [], [], None, None, failed=exc)


def _signature(outs):
    return [(tuple(o.shape), o._dtype_code) for o in outs]


def _record_control(op: str, inputs: list, attrs: dict, outputs: list, subs: list):
    """Put a control op into the current trace and, when needed, on tapes."""
    stack = _traces()
    if stack:
        stack[-1].add_control(op, inputs, attrs, outputs, subs)
    if _autograd.is_grad_enabled():
        _autograd._record(op, inputs, attrs, outputs)


def cond(pred, true_fn, false_fn, operands=()):
    """``true_fn(*operands)`` if ``pred`` else ``false_fn(*operands)``.

    Parameters
    ----------
    pred : Tensor or bool
        A one-element predicate.
    true_fn, false_fn : callable
        Return tensors (or nested lists/tuples/dicts of tensors) with the
        same structure, shapes and dtypes.
    operands : sequence of Tensor
        Arguments of the branches.

    Returns
    -------
    What the taken branch returns.
    """
    operands = _as_tensors(operands)
    pred = pred if isinstance(pred, Tensor) else tensor(bool(pred))
    if pred.size != 1:
        raise ValueError(f"cond: the predicate must have one element, got shape {pred.shape}")
    if not is_tracing():
        # Eager: plain Python; autograd records the ops of the taken branch.
        return true_fn(*operands) if bool(pred.item()) else false_fn(*operands)
    # The branch taken for the traced values is traced as eager runs it (its
    # errors raise now); the other one lazily: if it cannot be traced for
    # these inputs, the graph raises that error only when a run takes it.
    if bool(pred.item()):
        then_sub = _trace_sub("cond_then", true_fn, operands)
        else_sub = _trace_lazily("cond_else", false_fn, operands)
        taken = then_sub
    else:
        then_sub = _trace_lazily("cond_then", true_fn, operands)
        else_sub = _trace_sub("cond_else", false_fn, operands)
        taken = else_sub
    if not (then_sub.failed or else_sub.failed) and \
            _signature(then_sub.outputs) != _signature(else_sub.outputs):
        raise ValueError(f"cond: the branches return different shapes/dtypes: "
                         f"{_signature(then_sub.outputs)} vs {_signature(else_sub.outputs)}")
    outs = [o._alias() for o in taken.outputs]
    inputs = [pred] + operands + then_sub.captured + else_sub.captured
    attrs = {"true_fn": true_fn, "false_fn": false_fn, "num_operands": len(operands),
             "num_then_captures": len(then_sub.captured),
             "num_else_captures": len(else_sub.captured)}
    _record_control("Cond", inputs, attrs, outs, [then_sub, else_sub])
    return _unflatten(taken.out_spec, outs)


def while_loop(cond_fn, body_fn, loop_vars, maximum_iterations: int | None = None):
    """Repeat ``loop_vars = body_fn(*loop_vars)`` while ``cond_fn(*loop_vars)``.

    Parameters
    ----------
    cond_fn : callable
        Returns a one-element bool tensor.
    body_fn : callable
        Returns new loop variables (same count, shapes and dtypes).
    loop_vars : sequence of Tensor
    maximum_iterations : int, optional
        Stop after this many iterations. Required to differentiate the loop.

    Returns
    -------
    list of Tensor
        The final loop variables.
    """
    loop_vars = _as_tensors(loop_vars)
    if maximum_iterations is not None and maximum_iterations < 0:
        raise ValueError(f"while_loop: maximum_iterations must be >= 0, got {maximum_iterations}")

    def body_list(*vs):
        out = body_fn(*vs)
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(out) != len(vs):
            raise ValueError(f"while_loop: the body returned {len(out)} values for "
                             f"{len(vs)} loop variables")
        return out

    if not is_tracing():
        vs, it = list(loop_vars), 0
        while (maximum_iterations is None or it < maximum_iterations) and \
                bool(cond_fn(*vs).item()):
            vs = _as_tensors(body_list(*vs))
            it += 1
        return vs
    # Both are traced lazily: when the loop runs at trace time, a failing
    # condition or body raises below exactly as eager does; when it does
    # not, the error is raised by the first run that enters the loop.
    cond_sub = _trace_lazily("while_cond", cond_fn, loop_vars)
    body_sub = _trace_lazily("while_body", body_list, loop_vars)
    if not body_sub.failed and _signature(body_sub.outputs) != _signature(loop_vars):
        raise ValueError(f"while_loop: the body changes the loop variables from "
                         f"{_signature(loop_vars)} to {_signature(body_sub.outputs)}")
    # Values at trace time (the outer trace continues with them).
    vs, it = list(loop_vars), 0
    with _autograd.no_grad():
        while (maximum_iterations is None or it < maximum_iterations) and \
                bool(cond_fn(*vs).item()):
            vs = _as_tensors(body_list(*vs))
            it += 1
    outs = [v._alias() for v in vs]
    inputs = list(loop_vars) + cond_sub.captured + body_sub.captured
    attrs = {"cond_fn": cond_fn, "body_fn": body_list, "num_operands": len(loop_vars),
             "num_then_captures": len(cond_sub.captured),
             "num_else_captures": len(body_sub.captured),
             "maximum_iterations": -1 if maximum_iterations is None else maximum_iterations}
    _record_control("While", inputs, attrs, outs, [cond_sub, body_sub])
    return outs


# ---------------------------------------------------------------- gradients

def _float_mask(ts):
    return [t.dtype.is_floating_point for t in ts]


def _vjp(fn, n_in: int, wrt: list):
    """A function (*inputs, *dys) -> gradients of fn's outputs w.r.t. ``wrt``
    (zeros where unconnected); ``wrt`` are closure tensors the branch reads."""
    from .. import ops

    def g(*args):
        ins, dys = list(args[:n_in]), list(args[n_in:])
        watch = [t for t in ins if t.dtype.is_floating_point] + list(wrt)
        # The rule may run under no_grad (a first-order backward pass); its
        # own tape must still record.
        with _autograd.enable_grad(), _autograd.GradientTape() as tape:
            tape.watch(watch)
            out = fn(*ins)
        leaves: list = []
        _flatten(out, leaves)
        pairs = [(o, d) for o, d in zip(leaves, dys) if o.dtype.is_floating_point]
        if pairs:
            grads = tape.gradient([o for o, _ in pairs], ins + list(wrt),
                                  output_gradients=[d for _, d in pairs],
                                  unconnected_gradients="zero")
        else:
            grads = [None] * (len(ins) + len(wrt))
        # A tensor listed twice (an operand also captured, or captured by
        # both branches) gets its gradient once; the engine adds them up.
        out, seen = [], set()
        for gr, t in zip(grads, ins + list(wrt)):
            if gr is None or t._id in seen:
                gr = ops.fill(list(t.shape), 0.0, t.dtype)
            seen.add(t._id)
            out.append(gr)
        return out
    return g


@_autograd.gradient("Cond")
def _cond_grad(node, *dys):
    a = node.attrs
    n, nt, ne = a["num_operands"], a["num_then_captures"], a["num_else_captures"]
    pred = node.inputs[0]
    operands = node.inputs[1:1 + n]
    then_caps = node.inputs[1 + n:1 + n + nt]
    else_caps = node.inputs[1 + n + nt:1 + n + nt + ne]
    caps = list(then_caps) + list(else_caps)
    grads = cond(pred, _vjp(a["true_fn"], n, caps), _vjp(a["false_fn"], n, caps),
                 list(operands) + list(dys))
    return [None] + list(grads)


@_autograd.gradient("While")
def _while_grad(node, *dys):
    from .. import ops
    a = node.attrs
    n = a["num_operands"]
    bound = a["maximum_iterations"]
    if bound is None or bound < 0:
        raise NotImplementedError("while_loop: differentiating a loop needs "
                                  "maximum_iterations (its gradient unrolls that many steps)")
    nc, nb = a["num_then_captures"], a["num_else_captures"]
    loop_vars = list(node.inputs[:n])
    caps = list(node.inputs[n:n + nc + nb])
    cond_fn, body_fn = a["cond_fn"], a["body_fn"]

    def unrolled(*vs):
        vs = list(vs)
        active = None
        for _ in range(bound):
            c = cond_fn(*vs)
            active = c if active is None else ops.logical_and(active, c)
            new = body_fn(*vs)
            vs = [ops.where(active, nv, v) for nv, v in zip(new, vs)]
        return vs

    grads = _vjp(unrolled, n, caps)(*loop_vars, *dys)
    return list(grads)
