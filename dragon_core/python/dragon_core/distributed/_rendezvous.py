"""Environment rendezvous: ranks started by anything (a shell loop, a
torchrun-style launcher, SLURM) meet through a :class:`~.store.TCPStore`.

``init_process_group`` resolves *how* the ranks meet (:func:`resolve`):

- ``init_method="env://"``: ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``,
  ``WORLD_SIZE`` from the environment (``rank=`` / ``world_size=``
  arguments take precedence; under SLURM ``SLURM_PROCID`` / ``SLURM_NTASKS``
  stand in for ``RANK`` / ``WORLD_SIZE``). The store listens on
  ``MASTER_PORT``, or ``DRAGON_STORE_PORT`` when set; under torchrun, whose
  agent serves torch's own store on ``MASTER_PORT``
  (``TORCHELASTIC_USE_AGENT_STORE=True``), on ``MASTER_PORT + 1``;
- ``init_method="tcp://host:port"`` with the ``rank=`` and ``world_size=``
  arguments;
- ``store=`` (a ``TCPStore`` the caller made) with ``rank=`` and
  ``world_size=``;
- otherwise the MPI launch (``mpirun`` / ``python -m
  dragon_core.distributed.run``), or a world of one.

Then every rank :func:`join` s: it claims its rank in the store (a rank
claimed twice is an error naming both processes), checks that its world size
is rank 0's, and waits until every rank has arrived. Every wait is bounded by
the timeout and fails naming the ranks that did not arrive; a rank that finds
an inconsistency publishes it, so every rank fails with the same message
instead of waiting for the timeout.

The store is a rendezvous, not a transport: it carries a handful of small
values (the claims, the NCCL unique ids of the process groups, barrier
counters); every tensor moves through NCCL.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from .store import StoreError, TCPStore

ENV_KEYS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE")


class RendezvousError(RuntimeError):
    """Raised through :class:`dragon_core.distributed.DistributedError`
    (the caller converts); carries whether it is a timeout."""

    def __init__(self, msg: str, timeout: bool = False):
        super().__init__(msg)
        self.timeout = timeout


@dataclass
class Rendezvous:
    """Where and as whom this process meets the others."""
    method: str                 # "env://", "tcp://host:port" or "store"
    rank: int
    world_size: int
    host: str = ""
    port: int = 0
    store: TCPStore | None = None
    owned: bool = True          # whether destroy_process_group closes the store
    prefix: str = ""            # key prefix of this initialisation (generation)
    port_note: str = ""         # where the port came from, when not MASTER_PORT
    counters: dict = field(default_factory=dict)

    def where(self) -> str:
        if self.store is not None:
            return f"the store at {self.store.host}:{self.store.port}"
        return f"{self.host}:{self.port}"


def under_mpirun() -> bool:
    """Whether an MPI launcher (``mpirun``, ``srun --mpi=pmix``) started us."""
    return any(k in os.environ for k in ("OMPI_COMM_WORLD_SIZE", "PMIX_RANK"))


def _int(name: str, value, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ValueError(f"init_process_group({what}): {name}={value!r} must be an "
                         "integer") from None


def _check_rank(rank: int, size: int, what: str) -> None:
    if size < 1:
        raise ValueError(f"init_process_group({what}): world size must be >= 1, got {size}")
    if not 0 <= rank < size:
        raise ValueError(f"init_process_group({what}): rank {rank} is outside the world "
                         f"of {size} ranks (need 0 <= rank < world_size)")


def resolve(init_method, rank, world_size, store) -> Rendezvous | None:
    """How this process meets the others (None: through MPI).

    Raises ``ValueError`` naming a missing or malformed variable/argument.
    """
    if store is not None:
        if init_method is not None:
            raise ValueError("init_process_group: give init_method or store, not both")
        if not all(hasattr(store, a) for a in ("set", "get", "add", "check")):
            raise TypeError("init_process_group: store must be a dragon_core.distributed."
                            f"store.TCPStore (set/get/add/check), got {type(store).__name__}")
        if rank is None or world_size is None:
            raise ValueError("init_process_group(store=...): rank and world_size must be "
                             "given with a store")
        r = _int("rank", rank, "store=...")
        n = _int("world_size", world_size, "store=...")
        _check_rank(r, n, "store=...")
        return Rendezvous("store", r, n, store=store, owned=False)
    if init_method is None:
        # The MPI launch wins; otherwise any of the four variables means
        # environment rendezvous (a missing one then raises instead of
        # silently running as a world of one).
        if under_mpirun() or not any(os.environ.get(k) for k in ENV_KEYS):
            if rank is not None or world_size is not None:
                raise ValueError(
                    "init_process_group: rank= / world_size= need init_method='env://', "
                    "'tcp://host:port' or store= (under mpirun MPI assigns the ranks)")
            return None
        init_method = "env://"
    init_method = str(init_method)
    if init_method == "mpi":
        if rank is not None or world_size is not None:
            raise ValueError("init_process_group(init_method='mpi'): MPI assigns the ranks; "
                             "do not give rank= / world_size=")
        return None
    if init_method == "env://":
        env = dict(os.environ)
        if rank is None and not env.get("RANK") and env.get("SLURM_PROCID"):
            env["RANK"] = env["SLURM_PROCID"]                       # srun
        if world_size is None and not env.get("WORLD_SIZE") and env.get("SLURM_NTASKS"):
            env["WORLD_SIZE"] = env["SLURM_NTASKS"]
        missing = [k for k in ENV_KEYS if not env.get(k)
                   and not (k == "RANK" and rank is not None)
                   and not (k == "WORLD_SIZE" and world_size is not None)]
        if missing:
            raise ValueError(
                f"init_process_group(init_method='env://'): {', '.join(missing)} not set "
                f"(environment rendezvous needs {', '.join(ENV_KEYS)}; rank= / world_size= "
                "may replace RANK / WORLD_SIZE). Set them on every rank, or launch with "
                "python -m dragon_core.distributed.run (MPI)")
        r = _int("RANK", env["RANK"] if rank is None else rank, "env://")
        n = _int("WORLD_SIZE", env["WORLD_SIZE"] if world_size is None else world_size,
                 "env://")
        port = _int("MASTER_PORT", env["MASTER_PORT"], "env://")
        name, note = "MASTER_PORT", ""
        if env.get("DRAGON_STORE_PORT"):
            port = _int("DRAGON_STORE_PORT", env["DRAGON_STORE_PORT"], "env://")
            name, note = "DRAGON_STORE_PORT", "DRAGON_STORE_PORT"
        elif env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true":
            # torchrun: its agent serves torch's own store on MASTER_PORT.
            port += 1
            name = "MASTER_PORT + 1"
            note = ("MASTER_PORT + 1: under torchrun its agent serves torch's store on "
                    "MASTER_PORT; set DRAGON_STORE_PORT to choose another port")
        if not 1 <= port <= 65535:
            raise ValueError(f"init_process_group(init_method='env://'): {name}={port} "
                             "is not a TCP port (1..65535)")
        _check_rank(r, n, "env://")
        return Rendezvous("env://", r, n, host=env["MASTER_ADDR"], port=port, port_note=note)
    if init_method.startswith("tcp://"):
        u = urlsplit(init_method)
        try:
            port = u.port
        except ValueError:
            port = None
        if not u.hostname or not port:
            raise ValueError(f"init_process_group: init_method {init_method!r} must be "
                             "'tcp://host:port' (the address rank 0 serves the store on)")
        if rank is None or world_size is None:
            raise ValueError(f"init_process_group(init_method={init_method!r}): rank and "
                             "world_size must be given")
        r = _int("rank", rank, init_method)
        n = _int("world_size", world_size, init_method)
        _check_rank(r, n, init_method)
        return Rendezvous(init_method, r, n, host=u.hostname, port=port)
    raise ValueError(f"init_process_group: init_method {init_method!r} is not supported; "
                     "use 'env://' (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE), "
                     "'tcp://host:port' with rank= and world_size=, store= with rank= and "
                     "world_size=, or 'mpi' (started by python -m dragon_core.distributed.run)")


def _poll(store, key: str, target: int, error_key: str, deadline: float):
    """Wait until counter ``key`` reaches ``target``; returns None, or the
    published error message, or "timeout"."""
    delay = 0.001
    while True:
        if store.add(key, 0) >= target:
            return None
        if store.check(error_key):
            return store.get(error_key).decode(errors="replace")
        if time.monotonic() > deadline:
            return "timeout"
        time.sleep(delay)
        delay = min(0.02, delay * 2)


def _ranks(rs, word: str = "rank") -> str:
    """``rank 3`` / ``ranks 1, 2`` (``word`` "" : just the numbers)."""
    nums = ", ".join(str(q) for q in rs) or "none"
    if not word:
        return nums
    return f"{word}{'s' if len(rs) != 1 else ''} {nums}"


def _store_call(rdzv: Rendezvous, what: str, fn):
    try:
        return fn()
    except StoreError as e:
        raise RendezvousError(f"rank {rdzv.rank}: {what}: {e}",
                              timeout="within" in str(e)) from None


def join(rdzv: Rendezvous, timeout: float) -> None:
    """Connect to (rank 0: serve) the store and wait for every rank (see the
    module docstring). Raises :class:`RendezvousError`."""
    r, n = rdzv.rank, rdzv.world_size
    what = f"rendezvous ({rdzv.method}, rank {r} of {n})"
    if rdzv.store is None:
        try:
            rdzv.store = TCPStore(rdzv.host, rdzv.port, n, is_master=(r == 0),
                                  timeout=timeout, rank=r)
        except StoreError as e:
            note = f" (port {rdzv.port} = {rdzv.port_note})" if rdzv.port_note else ""
            if r == 0:
                raise RendezvousError(f"{what}: {e}{note}") from None
            raise RendezvousError(
                f"{what}: rank 0 did not arrive within {timeout:g} s: nobody serves the "
                f"store at {rdzv.host}:{rdzv.port} (rank 0 serves it; check MASTER_ADDR/"
                f"MASTER_PORT and that rank 0 started){note} [{e}]", timeout=True) from None
    store = rdzv.store
    # One key space per initialisation: a store this rendezvous opened is
    # fresh; a caller's store may serve several in turn, and every process
    # counts its own initialisations with it (all ranks initialise equally
    # often; two processes claiming one rank still meet in one key space).
    gen = getattr(store, "_dragon_inits", 0) + 1
    store._dragon_inits = gen
    p = rdzv.prefix = f"dragon/rdzv/{gen}"
    err = f"{p}/error"
    me = f"{socket.gethostname()} pid {os.getpid()}"

    def fail(msg: str):
        try:
            store.set(err, msg.encode())
        except StoreError:
            pass
        raise RendezvousError(msg)

    def body():
        if store.add(f"{p}/claim/{r}", 1) > 1:
            other = store.get(f"{p}/who/{r}").decode(errors="replace")
            fail(f"{what}: rank {r} was claimed twice, by {other} and by {me}: RANK (or "
                 "rank=) must be distinct on every process")
        store.set(f"{p}/who/{r}", me.encode())
        if r == 0:
            store.set(f"{p}/world_size", str(n).encode())
        else:
            n0 = int(store.get(f"{p}/world_size"))
            if n0 != n:
                fail(f"{what}: world size mismatch: rank 0 has world size {n0}, rank {r} "
                     f"({me}) has {n}: WORLD_SIZE (or world_size=) must be the same on "
                     "every rank")
        deadline = time.monotonic() + timeout
        store.add(f"{p}/arrived", 1)
        got = _poll(store, f"{p}/arrived", n, err, deadline)
        if got is None:
            return
        if got != "timeout":
            raise RendezvousError(f"rank {r} stops: {got}", timeout="timed out" in got)
        missing = [q for q in range(n) if not store.check(f"{p}/claim/{q}")]
        msg = (f"{what}: timed out after {timeout:g} s waiting at {rdzv.where()}: "
               f"{_ranks(missing)} of {n} did not arrive (arrived: "
               f"{_ranks([q for q in range(n) if q not in missing], '')})")
        try:                   # the ranks that arrived all stop with this message
            store.set(err, msg.encode())
        except StoreError:
            pass
        raise RendezvousError(msg, timeout=True)
    _store_call(rdzv, what, body)


def barrier(rdzv: Rendezvous, gid: int, me: int, members, timeout: float,
            what: str = "barrier") -> None:
    """Wait until every world rank in ``members`` reached this barrier of
    process group ``gid`` (through the store: a counter per barrier)."""
    k = rdzv.counters.get(gid, 0) + 1
    rdzv.counters[gid] = k
    store, p = rdzv.store, f"{rdzv.prefix}/barrier/{gid}/{k}"

    def body():
        store.set(f"{p}/rank/{me}", b"1")
        store.add(f"{p}/count", 1)
        got = _poll(store, f"{p}/count", len(members), f"{rdzv.prefix}/error",
                    time.monotonic() + timeout)
        if got is None:
            return
        if got != "timeout":
            raise RendezvousError(f"rank {me} stops: {got}")
        missing = [q for q in members if not store.check(f"{p}/rank/{q}")]
        raise RendezvousError(
            f"rank {me}: {what} #{k} of process group {gid} did not complete within "
            f"{timeout:g} s: {_ranks(missing)} did not reach it (died, stopped answering, "
            "or issue collectives in another order)", timeout=True)
    _store_call(rdzv, what, body)


def exchange(rdzv: Rendezvous, key: str, group_rank: int, size: int, value, what: str,
             check=None):
    """Group rank 0 publishes ``value`` (bytes) under ``key``; every member
    returns it (:func:`.store.exchange_bytes`)."""
    from .store import exchange_bytes
    return _store_call(rdzv, what, lambda: exchange_bytes(
        rdzv.store, f"{rdzv.prefix}/{key}", group_rank, value, size=size, check=check))


def _leave(rdzv: Rendezvous, bound: float) -> None:
    """Every rank leaves together, so none is still inside a store
    operation when rank 0 goes. Rank 0 of a store this rendezvous opened
    also stops accepting connections before it tells the others they may
    go, so a rank that initialises again at once cannot reach the old store
    (whose server then closes)."""
    store, p = rdzv.store, f"{rdzv.prefix}/leave"
    saved, store.timeout = store.timeout, bound
    try:
        store.add(f"{p}/count", 1)
        if rdzv.rank == 0:
            _poll(store, f"{p}/count", rdzv.world_size, f"{rdzv.prefix}/error",
                  time.monotonic() + bound)
            if rdzv.owned and store._server is not None:
                store._server.stop_listening()
            store.set(f"{p}/done", b"1")
        else:
            store.get(f"{p}/done")
    finally:
        store.timeout = saved


def close(rdzv: Rendezvous, failed: bool = False, grace: float = 10.0,
          linger: float = 0.0) -> None:
    """Leave the rendezvous; close the store if this rendezvous opened it.
    Unless ``failed``, the ranks first leave together (each waits at most
    ``grace`` seconds for the others); rank 0 then stops serving once the
    others disconnected. ``failed``: rank 0 keeps serving at most
    ``linger`` seconds, so the others can read the error it published,
    then stops. A caller's store (``store=``) stays open."""
    store = rdzv.store
    if store is None:
        return
    if not failed and rdzv.prefix:
        try:
            _leave(rdzv, min(grace, store.timeout))
        except StoreError:
            failed = True
    if rdzv.owned:
        try:
            store.close(grace=linger if failed else None)
        except Exception:  # noqa: BLE001 - best effort at shutdown
            pass
    rdzv.store = None
