"""``DistributedDataParallel``: data-parallel training over a process group.

Every rank holds a replica of the module and trains on its own shard of the
data; after ``loss.backward()`` every gradient is the average over the ranks,
so the optimizers step identically and the replicas stay equal.

How (the same design as PyTorch's DDP):

- at wrap time the parameters and buffers of rank 0 are broadcast to the
  others (replicas start equal whatever each rank's seed);
- the parameters are grouped into *buckets* in reverse registration order
  (the order in which backward usually produces their gradients): the first
  bucket holds up to ``first_bucket_cap_mb`` (default 1 MiB) so that
  communication starts early, the others up to ``bucket_cap_mb`` (25 MiB);
- a post-accumulate-grad hook on every parameter marks its gradient ready;
  when a bucket is complete its gradients are flattened into one buffer and
  its all-reduce is *started* (``async_op=True``) while backward goes on
  computing the gradients of earlier layers; buckets start in order, so every
  rank issues the same collectives in the same order;
- when the last bucket has started, every all-reduce is waited for and the
  averaged gradients are written back to ``.grad``;
- inside :meth:`DistributedDataParallel.no_sync` the gradients only
  accumulate locally; the first backward outside it all-reduces the sum.

The process group is ``dragon_core.distributed``'s default group unless one is
passed (see :func:`resolve_group` for what a group object must provide).
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable

from .. import _C, ops
from ..nn.module import Module

_MiB = 1024 * 1024
#: A cpu gradient at least this large is averaged in place on its own (one
#: all-reduce of its own, in bucket order) instead of being copied into the
#: bucket's flat buffer and back: two passes over its bytes saved per step,
#: for the cost of one more (small-latency) MPI call. The rule depends on
#: sizes only, so every rank issues the same collectives.
DIRECT_BYTES = 256 * 1024


# ------------------------------------------------------------------ group

class _Group:
    """What DDP and SyncBatchNorm need from a process group.

    Built by :func:`resolve_group` from either ``dragon_core.distributed``
    (default group, or a group object it returns) or any object that has
    ``rank()``, ``size()``, ``all_reduce(tensor, op="sum", async_op=False)``
    (returning the reduced tensor, or a work object whose ``wait()`` returns
    it or None for an in-place reduction) and ``broadcast(tensor, src=0)``.
    """

    def __init__(self, rank: int, size: int, all_reduce: Callable, broadcast: Callable,
                 name: str, avg_start: Callable | None = None,
                 traced_avg: Callable | None = None):
        self.rank, self.size, self.name = int(rank), int(size), name
        self._all_reduce, self._broadcast = all_reduce, broadcast
        self._avg_start = avg_start
        self._traced_avg = traced_avg

    @property
    def averages_in_place(self) -> bool:
        """Whether :meth:`average_start` averages a cpu tensor in place
        (dragon_core.distributed's groups), so a gradient can be reduced
        where it is."""
        return self._avg_start is not None

    def traced_average(self, tensor):
        """While tracing: the average over the ranks of a *device* (cuda)
        bucket as the core's ``CollectiveAllReduce`` graph op (``op="avg"``;
        dragon-nccl-dist's NCCL kernel, stream-ordered), or None when this
        group cannot (then the bucket goes through the cpu-only
        ``DDPAllReduceStart``/``DDPAllReduceWait`` pair)."""
        if self._traced_avg is None:
            return None
        return self._traced_avg(tensor)

    def average_start(self, tensor):
        """Start the average over the ranks of ``tensor`` (a private buffer:
        DDP's flat bucket); returns ``wait() -> averaged tensor``. In place in
        ``tensor`` with the division in the kernel where the group can
        (dragon_core.distributed's groups on cpu); otherwise a sum
        all-reduce, scaled on wait."""
        if self._avg_start is not None:
            from . import _OnDevice
            try:
                return self._avg_start(tensor)
            except _OnDevice:
                pass
        wait = self.all_reduce_start(tensor)
        if self.size == 1:
            return wait
        scale = 1.0 / self.size
        return lambda: wait() * scale

    def all_reduce_start(self, tensor):
        """Start a sum all-reduce of ``tensor``; returns ``wait() -> tensor``."""
        work = self._all_reduce(tensor, async_op=True)
        if work is None or not hasattr(work, "wait"):
            done = tensor if work is None else work
            return lambda: done

        def wait():
            out = work.wait()
            return tensor if out is None or out is True else out
        return wait

    def all_reduce(self, tensor):
        return self.all_reduce_start(tensor)()

    def broadcast(self, tensor, src: int = 0):
        out = self._broadcast(tensor, src=src)
        if hasattr(out, "wait"):
            out = out.wait()
        return tensor if out is None or out is True else out


def resolve_group(process_group: Any = None) -> _Group:
    """The :class:`_Group` for ``process_group`` (None: the default group of
    ``dragon_core.distributed``, which must be initialised)."""
    if isinstance(process_group, _Group):
        return process_group
    if process_group is not None and all(hasattr(process_group, a) for a in
                                          ("rank", "size", "all_reduce", "broadcast")):
        pg = process_group
        return _Group(pg.rank(), pg.size(), pg.all_reduce, pg.broadcast, type(pg).__name__)
    try:
        from . import get_rank, get_world_size, is_initialized  # dist-core's API
        from . import all_reduce as _all_reduce, broadcast as _broadcast
    except ImportError as e:
        raise RuntimeError(
            "DistributedDataParallel: dragon_core.distributed has no process-group API in "
            f"this installation ({e}); pass process_group= explicitly") from None
    if not is_initialized():
        raise RuntimeError("DistributedDataParallel: the default process group is not "
                           "initialised; call dragon_core.distributed.init_process_group() "
                           "first (or launch with python -m dragon_core.distributed.run)")
    from . import _all_reduce_start_result
    kw = {} if process_group is None else {"group": process_group}
    return _Group(get_rank(**kw), get_world_size(**kw),
                  lambda t, async_op: _all_reduce(t, async_op=async_op, **kw),
                  lambda t, src: _broadcast(t, src=src, **kw), "dragon_core.distributed",
                  avg_start=lambda t: _all_reduce_start_result(t, "avg", **kw),
                  traced_avg=lambda t: _all_reduce(t, op="avg", **kw))


# ------------------------------------------------- graph ops (compiled steps)
#
# Inside ``dg.function`` the hooks see symbolic gradients, so a bucket's
# all-reduce becomes two graph ops: ``DDPAllReduceStart(flat) -> token``
# starts it (the kernel copies the buffer and calls the group's async
# all-reduce) and ``DDPAllReduceWait(token, flat) -> reduced`` waits for it.
# The ``ddp_buckets`` graph pass (``_graph/passes/ddp_buckets.py``) places
# every start right after its inputs are computed and every wait right before
# the first op that reads its result, so communication overlaps the rest of
# backward in the compiled step too.

@contextlib.contextmanager
def untraced():
    """Run the body as eager code even inside a trace: the kernels of the
    DDP/SyncBatchNorm graph ops call the group's *eager* collectives, and a
    trace runs kernels as it records."""
    depth = 0
    while _C._is_tracing():
        _C._trace_exit()
        depth += 1
    try:
        yield
    finally:
        for _ in range(depth):
            _C._trace_enter()


_GRAPH_GROUPS: dict = {}     # group key (op attribute) -> (_Group, event log or None)
_INFLIGHT: dict = {}         # token -> wait()
_NEXT_TOKEN = [1]
_GRAPH_OPS: list = []


def _graph_ops():
    if _GRAPH_OPS:
        return _GRAPH_OPS
    import numpy as np
    from .. import custom_op, from_numpy

    def _start_shape(x, group):
        return [], "int64"

    @custom_op("DDPAllReduceStart", attrs={"group": 0}, outputs=("token",),
               shape=_start_shape, dtypes=("float16", "bfloat16", "float32", "float64"),
               plugin="distributed", differentiable=False, collective=True)
    def ddp_all_reduce_start(x, group):
        """Start the all-reduce (the average over the ranks) of a DDP bucket;
        returns its token."""
        g, log = _GRAPH_GROUPS[int(group)]
        token = _NEXT_TOKEN[0]
        _NEXT_TOKEN[0] += 1
        if log is not None:
            log.append((time.perf_counter(), "allreduce_start", token))
        with untraced():
            _INFLIGHT[token] = g.average_start(from_numpy(np.array(x, copy=True)))
        return np.array(token, dtype=np.int64)

    def _wait_shape(token, like, group):
        return like.shape, like.dtype

    @custom_op("DDPAllReduceWait", inputs=("token", "like"), attrs={"group": 0},
               shape=_wait_shape, dtypes=("int64",), plugin="distributed",
               differentiable=False, collective=True)
    def ddp_all_reduce_wait(token, like, group):
        """Wait for the all-reduce ``token`` started; returns the average."""
        wait = _INFLIGHT.pop(int(token), None)
        if wait is None:
            raise RuntimeError(f"DDPAllReduceWait: no all-reduce in flight with token "
                               f"{int(token)}")
        with untraced():
            out = np.array(wait().numpy(), copy=True)
        log = _GRAPH_GROUPS[int(group)][1]
        if log is not None:
            log.append((time.perf_counter(), "allreduce_done", int(token)))
        return out

    _GRAPH_OPS.extend([ddp_all_reduce_start, ddp_all_reduce_wait])
    return _GRAPH_OPS


# ---------------------------------------------------------------- buckets

def plan_buckets(params, first_bucket_cap_mb: float = 1.0,
                 bucket_cap_mb: float = 25.0) -> list[list[int]]:
    """Indices of ``params`` per bucket, in the order the buckets are reduced.

    Parameters are taken in *reverse* order (``params`` is in registration
    order); a bucket closes when the next parameter would take it past its
    cap (the first bucket's cap is ``first_bucket_cap_mb``, the others'
    ``bucket_cap_mb``; a parameter larger than the cap gets a bucket of its
    own) or has another dtype or device.
    """
    if first_bucket_cap_mb <= 0 or bucket_cap_mb <= 0:
        raise ValueError(f"DistributedDataParallel: bucket caps must be > 0 MiB, got "
                         f"first_bucket_cap_mb={first_bucket_cap_mb}, "
                         f"bucket_cap_mb={bucket_cap_mb}")
    buckets: list[list[int]] = []
    current: list[int] = []
    size, key = 0, None
    for i in reversed(range(len(params))):
        p = params[i]
        nbytes = p.numel() * p.dtype.itemsize
        cap = (first_bucket_cap_mb if not buckets else bucket_cap_mb) * _MiB
        pkey = (str(p.dtype), str(p.device))
        if current and (size + nbytes > cap or pkey != key):
            buckets.append(current)
            current, size = [], 0
        current.append(i)
        size += nbytes
        key = pkey
    if current:
        buckets.append(current)
    return buckets


class _Bucket:
    __slots__ = ("index", "params", "pending", "wait", "flat", "direct", "params_rest")

    def __init__(self, index: int, params: list):
        self.index, self.params = index, params
        self.pending = len(params)
        self.wait = None
        self.flat = None
        self.direct = None   # [(param index, wait)] of gradients averaged in place
        self.params_rest = None  # with direct: the others, through the flat buffer


# -------------------------------------------------------------------- DDP

class DistributedDataParallel(Module):
    """Wrap ``module`` for data-parallel training (see the module docstring).

    Parameters
    ----------
    module : Module
        The replica on this rank. Every parameter that requires grad must
        receive a gradient in every backward (otherwise the next forward
        raises, naming the parameters that did not).
    process_group : optional
        The group to average over (default: ``dragon_core.distributed``'s
        default group).
    bucket_cap_mb : float, default 25
        Cap of every bucket but the first, in MiB.
    first_bucket_cap_mb : float, default 1
        Cap of the first bucket (the last layers' gradients), in MiB.
    broadcast_buffers : bool, default True
        Also broadcast the buffers (BatchNorm statistics) from rank 0 at wrap
        time.
    event_log : list, optional
        Appended ``(time.perf_counter(), event, detail)`` tuples: ``"grad_ready"``
        (parameter name), ``"allreduce_start"`` / ``"allreduce_done"``
        (bucket index) — to check that communication overlaps backward.

    Notes
    -----
    ``state_dict()`` keys are the module's with a ``module.`` prefix, as in
    PyTorch; save ``ddp.module.state_dict()`` for checkpoints that load into
    the bare module.

    In a compiled step (``dg.function`` around forward, ``backward()`` and
    the optimizer step) each bucket becomes a ``DDPAllReduceStart`` /
    ``DDPAllReduceWait`` pair of graph ops, scheduled by the ``ddp_buckets``
    graph pass; there ``event_log`` gets ``allreduce_start`` /
    ``allreduce_done`` events with the run-time token instead of the bucket.
    :meth:`no_sync` works in compiled steps too, entered inside the
    compiled function or around its call (the plans are keyed on it).
    """

    def __init__(self, module: Module, *, process_group: Any = None,
                 bucket_cap_mb: float = 25.0, first_bucket_cap_mb: float = 1.0,
                 broadcast_buffers: bool = True, event_log: list | None = None):
        super().__init__()
        if not isinstance(module, Module):
            raise TypeError(f"DistributedDataParallel: module must be an nn.Module, got "
                            f"{type(module).__name__}")
        self.module = module
        group = resolve_group(process_group)
        object.__setattr__(self, "_group", group)
        object.__setattr__(self, "_event_log", event_log)
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        object.__setattr__(self, "_names", [n for n, _ in named])
        object.__setattr__(self, "_params", [p for _, p in named])
        self.bucket_cap_mb = float(bucket_cap_mb)
        self.first_bucket_cap_mb = float(first_bucket_cap_mb)
        plan = plan_buckets(self._params, first_bucket_cap_mb, bucket_cap_mb)
        object.__setattr__(self, "bucket_indices", plan)
        object.__setattr__(self, "_buckets", [_Bucket(k, idx) for k, idx in enumerate(plan)])
        owner = {}
        for b in self._buckets:
            for i in b.params:
                owner[i] = b
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_sync", True)
        object.__setattr__(self, "_next", 0)        # next bucket to start
        object.__setattr__(self, "_active", False)  # a synced backward is in flight
        object.__setattr__(self, "_ready", set())     # parameters whose grad is ready
        object.__setattr__(self, "_early", {})        # param -> wait of a direct gradient
        self._broadcast_state(broadcast_buffers)
        handles = []
        for i, p in enumerate(self._params):
            handles.append(p.register_post_accumulate_grad_hook(
                lambda t, i=i: self._grad_ready(i)))
        object.__setattr__(self, "_handles", handles)

    # -- wrap time

    def _broadcast_state(self, broadcast_buffers: bool) -> None:
        if self._group.size == 1:
            return
        tensors = list(self.module.parameters())
        if broadcast_buffers:
            tensors += [b for b in self.module.buffers() if b is not None]
        for t in tensors:
            t.data = self._group.broadcast(t.detach(), src=0)

    # -- forward

    def forward(self, *args, **kwargs):
        if self._active:
            missing = [n for i, n in enumerate(self._names) if i not in self._ready]
            self._reset()
            raise RuntimeError(
                "DistributedDataParallel: the previous backward did not produce gradients "
                f"for every parameter (bucket(s) still waiting; parameters {missing[:8]}"
                f"{' ...' if len(missing) > 8 else ''}); every parameter that requires grad "
                "must be used in the forward on every rank (or the previous backward "
                "failed part-way)")
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Inside it, backward accumulates gradients locally without any
        communication; the first backward after it all-reduces the sum.

        Works eagerly and with compiled steps (``dg.function``), entered
        either inside the compiled function or around its call: the state
        joins the key of the compiled plans, so one function called inside
        and outside ``no_sync`` gets two plans, with and without the
        all-reduces.
        """
        from ..nn import module as _module
        old = self._sync
        flag = ("ddp_no_sync", id(self))
        had = flag in _module._mode_flags
        object.__setattr__(self, "_sync", False)
        _module._mode_flags.add(flag)
        _module._update_mode_key()
        try:
            yield
        finally:
            object.__setattr__(self, "_sync", old)
            if not had:
                _module._mode_flags.discard(flag)
                _module._update_mode_key()

    # -- hooks

    def _log(self, event: str, detail) -> None:
        if self._event_log is not None:
            self._event_log.append((time.perf_counter(), event, detail))

    def _grad_ready(self, i: int) -> None:
        if not self._sync:
            return
        object.__setattr__(self, "_active", True)
        if not _C._is_tracing():
            self._log("grad_ready", self._names[i])
        bucket = self._owner[i]
        if i in self._ready:
            raise RuntimeError(f"DistributedDataParallel: parameter {self._names[i]} received "
                               "two gradients in one backward (a parameter used in two "
                               "backward passes before the optimizer step); use no_sync() "
                               "for all but the last")
        self._ready.add(i)
        bucket.pending -= 1
        if not _C._is_tracing() and self._group.averages_in_place and self._direct(i):
            # A large gradient starts its own in-place average at once: its
            # all-reduce overlaps the rest of backward instead of waiting for
            # the bucket's other gradients. (Every rank runs its hooks in the
            # same order, the graph's, so the collectives match.)
            self._early[i] = self._start_one(i)
        # Start every complete bucket, in bucket order.
        while self._next < len(self._buckets) and self._buckets[self._next].pending == 0:
            self._start(self._buckets[self._next])
            object.__setattr__(self, "_next", self._next + 1)
        if self._next == len(self._buckets):
            self._finish()

    def _start(self, bucket: _Bucket) -> None:
        if not _C._is_tracing() and self._group.averages_in_place:
            big = [i for i in bucket.params if self._direct(i)]
            if big:
                self._start_direct(bucket, big)
                return
        grads = [self._params[i].grad.reshape([-1]) for i in bucket.params]
        # Always a fresh buffer (concat copies, even one tensor): a group may
        # reduce in place, and a gradient tensor can be shared by two leaves.
        flat = ops.concat(grads, 0)
        bucket.flat = flat
        if _C._is_tracing():
            if not str(flat.device).startswith("cpu"):
                # A device bucket: the collective op itself (NCCL on cuda),
                # ordered on the device's stream; the cpu-only custom-op
                # pair below has no kernel there.
                total = self._group.traced_average(flat)
                if total is not None:
                    bucket.wait = lambda: total
                    return
            start, wait = _graph_ops()
            token = start(flat, group=self._graph_key())
            bucket.wait = lambda: wait(token, flat, group=self._graph_key())
            return
        self._log("allreduce_start", bucket.index)
        bucket.wait = self._group.average_start(flat)

    def _direct(self, i: int) -> bool:
        p = self._params[i]
        return (p.numel() * p.dtype.itemsize >= DIRECT_BYTES
                and str(p.device).startswith("cpu"))

    def _start_one(self, i: int):
        """Start the in-place average of parameter ``i``'s gradient."""
        g = self._params[i].grad
        if g._storage_refs != 1 or not g.is_contiguous():
            # shared with another tensor (two leaves can get one gradient
            # tensor) or strided: reduce a private copy instead
            g = ops.concat([g.reshape([-1])], 0).reshape(list(g.shape))
        return self._group.average_start(g)

    def _start_direct(self, bucket: _Bucket, big: list) -> None:
        """The bucket's large gradients were started as they became ready
        (in place, one all-reduce each); the rest go through a flat buffer."""
        self._log("allreduce_start", bucket.index)
        bucket.direct = [(i, self._early.pop(i)) for i in big]
        rest = [i for i in bucket.params if i not in big]
        bucket.params_rest = rest if rest else None
        if rest:
            flat = ops.concat([self._params[i].grad.reshape([-1]) for i in rest], 0)
            bucket.flat = flat
            bucket.wait = self._group.average_start(flat)

    def _graph_key(self) -> int:
        key = getattr(self, "_gkey", None)
        if key is None:
            key = len(_GRAPH_GROUPS) + 1
            _GRAPH_GROUPS[key] = (self._group, self._event_log)
            object.__setattr__(self, "_gkey", key)
        return key

    def _finish(self) -> None:
        try:
            for bucket in self._buckets:
                if bucket.direct is not None:
                    for i, wait in bucket.direct:
                        self._params[i].grad = wait()    # averaged in place
                    params = bucket.params_rest or []
                    total = bucket.wait() if params else None
                else:
                    params = bucket.params
                    total = bucket.wait()          # the average over the ranks
                if not _C._is_tracing():
                    self._log("allreduce_done", bucket.index)
                offset = 0
                for i in params:
                    p = self._params[i]
                    n = p.numel()
                    p.grad = total[offset:offset + n].reshape(list(p.shape))
                    offset += n
        finally:
            self._reset()

    def _reset(self) -> None:
        for b in self._buckets:
            b.pending, b.wait, b.flat, b.direct = len(b.params), None, None, None
            b.params_rest = None
        object.__setattr__(self, "_next", 0)
        object.__setattr__(self, "_active", False)
        self._ready.clear()
        self._early.clear()

    def extra_repr(self) -> str:
        sizes = [sum(self._params[i].numel() * self._params[i].dtype.itemsize
                     for i in b) for b in self.bucket_indices]
        return (f"world_size={self._group.size}, rank={self._group.rank}, "
                f"buckets={len(sizes)} ({', '.join(f'{s / _MiB:.3g} MiB' for s in sizes)})")
