"""The collectives as graph ops (schemas in the core, kernels per backend).

Each op carries ``DG_OP_COLLECTIVE`` (ABI 1.3): the graph passes never
prune, merge or fold it and the executor keeps collectives in their traced
order. The schemas are defined when ``dragon_core.distributed`` is imported,
so a traced graph names them without any backend; the ``mpi`` backend
registers its cpu kernels at :func:`init_process_group`. A graph run on a
device without a kernel (``cuda``) fails with the registry's no-kernel error.

The first time a traced collective runs on a rank, every rank of its group
exchanges the collective's fingerprint (kind, dtype, element count,
reduction/root): ranks that issue collectives in different orders get a
:class:`DistributedError` at the first graph run naming each rank's
collective, instead of exchanging mismatched buffers.
"""

from __future__ import annotations

import ctypes
import itertools

import numpy as np

from .. import _C

DG_OP_NO_GRAD = 1 << 2
DG_OP_COLLECTIVE = 1 << 4
_ALL = (1 << 10) - 1      # every dtype code the schema accepts
_PLUGIN = "dragon_core.distributed"

#: kind -> (op name, attrs as (name, type code, default))
_KINDS = {
    "all_reduce": "CollectiveAllReduce",
    "broadcast": "CollectiveBroadcast",
    "all_gather": "CollectiveAllGather",
    "reduce_scatter": "CollectiveReduceScatter",
    "all_to_all": "CollectiveAllToAll",
}
_KIND_CODE = {k: i + 1 for i, k in enumerate(_KINDS)}
_RED_CODE = {"sum": 1, "avg": 2, "max": 3, "min": 4, "prod": 5}

_trace_counter = itertools.count(1)
_checked: set = set()
_defined = False
_registered = False


def _spec_shape(kind, shape, size):
    shape = tuple(shape)
    if kind == "all_gather":
        return (size,) + shape
    if kind in ("reduce_scatter", "all_to_all"):
        if not shape or shape[0] % size:
            raise ValueError(f"collective {kind}: axis 0 of the input {list(shape)} must "
                             f"divide into {size} blocks (the group size)")
        if kind == "reduce_scatter":
            return (shape[0] // size,) + shape[1:]
    return shape


def _shape_rule(kind):
    def infer(inputs, attrs):
        (shape, code), = inputs
        try:
            return 0, [(_spec_shape(kind, shape, int(attrs["group_size"])), code)]
        except ValueError as e:
            return 3, str(e)   # DG_INVALID_ARGUMENT
    return infer


def define_schemas() -> None:
    """Define the five collective ops (idempotent)."""
    global _defined
    if _defined:
        return
    attrs = [("group", 1, 0), ("group_size", 1, 1), ("reduce_op", 4, "sum"),
             ("src", 1, 0), ("tag", 4, "")]
    for kind, name in _KINDS.items():
        try:
            _C.op(name)
            continue
        except LookupError:
            pass
        _C._define_py_op(
            name, "collective_" + kind,
            f"The {kind} collective over the process group ``group`` (see "
            "dragon_core.distributed).", _PLUGIN,
            [("x", _ALL, 0)], [("y", _ALL, 0)], attrs,
            DG_OP_COLLECTIVE | DG_OP_NO_GRAD, _shape_rule(kind))
    _defined = True


def traced(kind, tensor, group, reduce_op="sum", src=0):
    """Emit the op for ``kind`` into the graph being traced."""
    from .. import ops
    define_schemas()
    ops._refresh()
    fn = getattr(ops, "collective_" + kind)
    return fn(tensor, group=group.id, group_size=group.size(), reduce_op=reduce_op,
              src=int(src), tag=f"{kind}#{next(_trace_counter)}")


def _check_order(kind, g, x, reduce_op, src, tag):
    """Exchange this collective's fingerprint with the group (once per tag)."""
    from . import DistributedError, _G
    from .. import _dtypes
    key = (g.id, tag)
    if key in _checked:
        return
    extra = _RED_CODE.get(reduce_op, 0) if kind in ("all_reduce", "reduce_scatter") else src
    mine = np.array([_KIND_CODE[kind], _dtypes.as_dtype(x.dtype).code, x.size, extra],
                    np.int64)
    everyone = np.empty((g.size(), 4), np.int64)
    lib = _G.lib
    req = lib.start("MPI_Iallgather", ctypes.c_void_p(mine.ctypes.data), 4,
                    lib.dtype("int64"), ctypes.c_void_p(everyone.ctypes.data), 4,
                    lib.dtype("int64"), g._comm)
    from . import Work
    _G.state.enter(f"{kind} order check")
    Work(f"{kind} order check", g, [req], None, None, (mine, everyone)).wait()
    if not (everyone == mine).all():
        names = {v: k for k, v in _KIND_CODE.items()}
        codes = {v: k for k, v in _RED_CODE.items()}

        def say(row):
            k = names.get(int(row[0]), "?")
            d = _dtypes.as_dtype(int(row[1])).name
            e = (f"op={codes.get(int(row[3]), '?')}" if k in ("all_reduce", "reduce_scatter")
                 else f"src={int(row[3])}")
            return f"{k}({d}, {int(row[2])} elements, {e})"
        detail = "; ".join(f"rank {g.ranks[i]}: {say(row)}" for i, row in enumerate(everyone))
        raise DistributedError(
            f"rank {_G.world.rank()}: the ranks of group {g.ranks} issue collectives in "
            f"different orders (or with different arguments) in this graph, at {tag}: "
            f"{detail}. Every rank must issue the same collectives in the same order.")
    _checked.add(key)


def _kernel(kind):
    def run(x, group=0, group_size=1, reduce_op="sum", src=0, tag=""):
        from . import (_G, _group, all_gather_into_tensor, all_reduce, all_to_all_single,
                       broadcast, reduce_scatter_tensor)
        from .. import from_numpy
        if _G.world is None or group >= len(_G.groups) or _G.groups[group] is None:
            raise RuntimeError(f"{_KINDS[kind]}: process group {group} does not exist on "
                               "this rank (init_process_group / new_group first)")
        g = _group(_G.groups[group])
        if g.size() != group_size:
            raise RuntimeError(f"{_KINDS[kind]}: traced for a group of {group_size} ranks, "
                               f"the group has {g.size()}")
        _check_order(kind, g, x, reduce_op, src, tag)
        root = g.ranks[src]
        if kind == "all_reduce":
            t = from_numpy(np.array(x, copy=True))
            all_reduce(t, op=reduce_op, group=g)
        elif kind == "broadcast":
            t = from_numpy(np.array(x, copy=True))
            broadcast(t, src=root, group=g)
        elif kind == "all_gather":
            t = from_numpy(np.empty((g.size(),) + x.shape, x.dtype))
            all_gather_into_tensor(t, from_numpy(np.array(x, copy=True)), group=g)
        elif kind == "reduce_scatter":
            t = from_numpy(np.empty(_spec_shape(kind, x.shape, g.size()), x.dtype))
            reduce_scatter_tensor(t, from_numpy(np.array(x, copy=True)), op=reduce_op, group=g)
        else:
            t = from_numpy(np.empty_like(x))
            all_to_all_single(t, from_numpy(np.array(x, copy=True)), group=g)
        return t.numpy()
    run.__name__ = f"mpi_{kind}"
    return run


def register_kernels() -> None:
    """Register the ``mpi`` backend's cpu kernels (idempotent)."""
    global _registered
    define_schemas()
    if _registered:
        return
    from ..custom_op import _register_kernel
    dtypes = ("float32", "float64", "float16", "bfloat16", "int8", "uint8", "int16",
              "int32", "int64", "bool")
    for kind, name in _KINDS.items():
        _register_kernel(name, _kernel(kind), dtypes, 0, "mpi", f"mpi_{kind}", ["y"])
    _registered = True
