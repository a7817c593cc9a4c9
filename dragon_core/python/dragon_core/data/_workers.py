"""Worker processes shared by :class:`RecordPipeline` and :class:`DataLoader`.

Topology::

    main --tasks--> reader x R --items--> transformer x T --examples--> main
                                  (T = 0: readers transform and send to main)

- The main process issues *tasks* (a few consecutive epoch positions with
  their record indices) and never more than ``prefetch`` positions ahead of
  the next one it must yield, so memory is bounded. Examples come back in
  any order and are put back in epoch order in the main process: the output
  is deterministic whatever the number of workers.
- Every message crosses a bounded ``multiprocessing.Queue``. Workers pickle
  their messages themselves, so an unpicklable example becomes a reported
  error instead of a silently lost item.
- Every blocking queue operation has a short timeout after which the caller
  checks for shutdown (workers) or for dead workers and the overall timeout
  (main). Nothing waits forever.
- An iteration has a *generation* number, kept in shared memory; starting a
  new iteration (or abandoning one) makes workers skip stale work.
- Workers ignore SIGINT (Ctrl-C goes to the whole process group; the main
  process handles it and shuts the workers down), run a watchdog thread that
  exits the process when the main process dies, and are daemonic.
- The main process never changes its own SIGINT disposition, not even for
  an instant: a Ctrl-C may be delivered to any of its threads (a BLAS or
  OpenMP worker, a queue feeder), and Python's handler, run in whichever
  thread, always raises KeyboardInterrupt in the main thread. Only the
  thread that starts a worker blocks SIGINT, for the duration of the start,
  so that the child (which inherits that thread's mask through fork, exec
  and a fork server started then) cannot be interrupted before it installs
  SIG_IGN; a Ctrl-C meanwhile goes to another thread, or stays pending
  until the mask is restored.
- A KeyboardInterrupt is raised between two bytecodes, possibly inside
  multiprocessing's own code. Where that would leave a lock held (putting
  a task starts and feeds the queue's feeder thread under a lock that its
  close, and interpreter exit, wait for) or a worker half-started, the
  main thread holds Ctrl-C for those few microseconds (``hold_sigint``).
  Where it would only tear the stream (half a message read from the
  output queue), the interrupted iteration closes the pool: the next one
  starts fresh workers.
- Shutdown (``close()``, garbage collection, interpreter exit via
  ``weakref.finalize``) sets a stop event, joins with a deadline, then
  terminates and finally kills stragglers.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import pickle
import queue
import random
import signal
import threading
import time
import traceback
import weakref
from typing import Any, Callable, Iterator

import numpy as np

from ._errors import DataError, DataTimeoutError, WorkerError
from ._signals import hold_sigint

POLL = 0.1                 # seconds between liveness checks on blocking queue ops
_GROUP = 8                 # positions per task


def default_start_method() -> str:
    """``"forkserver"`` where available (fast and safe with threads), else ``"spawn"``."""
    return "forkserver" if "forkserver" in mp.get_all_start_methods() else "spawn"


def _context(start_method: str | None) -> mp.context.BaseContext:
    method = start_method or default_start_method()
    if method not in mp.get_all_start_methods():
        raise ValueError(f"start_method {method!r} is not available here; "
                         f"choose one of {mp.get_all_start_methods()}")
    ctx = mp.get_context(method)
    if method == "forkserver":
        # Import this module once in the fork server, so each worker forked
        # from it starts without re-importing dragon_core. Keep whatever the
        # application preloads already.
        from multiprocessing import forkserver
        current = list(getattr(forkserver._forkserver, "_preload_modules", ["__main__"]))
        if __name__ not in current:
            ctx.set_forkserver_preload(current + [__name__])
    return ctx


def apply_transform(transform: Callable | None, item: Any, seed: int, epoch: int,
                    index: int, occ: int = 0) -> Any:
    """Run ``transform`` on one item.

    A :class:`~dragon_core.data.Transformer` gets a NumPy generator seeded by
    ``(seed, epoch, index)`` (and ``occ``, the number of earlier visits of
    ``index`` in this epoch, when it is not 0): augmentation is
    reproducible, differs across epochs and across repeats of a record, and
    does not depend on which worker runs it.
    """
    if transform is None:
        return item
    if getattr(transform, "_dg_wants_rng", False):
        key = [seed & 0xFFFFFFFF, epoch, index] + ([int(occ)] if occ else [])
        return transform(item, np.random.default_rng(key))
    return transform(item)


def occurrences(indices: np.ndarray) -> np.ndarray:
    """``occ[j]``: how many times ``indices[j]`` appears in ``indices[:j]``.

    All zeros when the indices are unique (shuffled or sequential epochs);
    a sampler that repeats records (with replacement, weighted, padded, or
    a user's list) gets 0, 1, 2, ... for the successive visits of a record.
    """
    indices = np.asarray(indices, dtype=np.int64).reshape(-1)
    n = len(indices)
    occ = np.zeros(n, dtype=np.int64)
    if n < 2:
        return occ
    order = np.argsort(indices, kind="stable")      # equal indices keep epoch order
    ranked = indices[order]
    pos = np.arange(n, dtype=np.int64)
    first = np.empty(n, dtype=bool)
    first[0] = True
    first[1:] = ranked[1:] != ranked[:-1]
    run_start = np.maximum.accumulate(np.where(first, pos, 0))
    occ[order] = pos - run_start
    return occ


# ----------------------------------------------------------------------- worker side

class WorkerInfo:
    """What a worker process knows about itself (:func:`get_worker_info`).

    Attributes
    ----------
    id : int
        This worker's number within its stage, ``0 .. num_workers - 1``.
    num_workers : int
        Processes in this stage (readers, or transformers).
    stage : str
        ``"reader"`` or ``"transformer"``.
    seed : int
        The loader's or pipeline's seed.
    item_seed : int or None
        The seed of the example being processed (see :func:`seed_item`);
        None before the first one.
    """

    __slots__ = ("id", "item_seed", "num_workers", "seed", "stage")

    def __init__(self, id: int, num_workers: int, stage: str, seed: int):
        self.id, self.num_workers, self.stage, self.seed = id, num_workers, stage, seed
        self.item_seed: int | None = None

    def __repr__(self) -> str:
        return (f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, "
                f"stage={self.stage!r}, seed={self.seed}, item_seed={self.item_seed})")


_INFO: WorkerInfo | None = None     # set in worker processes only


def get_worker_info() -> WorkerInfo | None:
    """In a worker process of a :class:`DataLoader` or :class:`RecordPipeline`:
    its :class:`WorkerInfo`; in any other process: None."""
    return _INFO


_M64 = (1 << 64) - 1


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit ints that scatters bits."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


# Mixed into the seed of the global generators before a transform runs, so a
# transform's draws never repeat the stream that ``source[index]`` drew from.
TRANSFORM_STREAM = 0x7472616E73666F72     # b"transfor"


def item_seed(seed: int, epoch: int, index: int, occ: int = 0, stream: int = 0) -> int:
    """The 63-bit seed of record ``index`` in ``epoch`` for a loader seeded ``seed``.

    ``occ`` counts the earlier visits of ``index`` in this epoch (a sampler
    may repeat records); each visit gets its own seed. ``stream`` tells the
    dataset read (0) from the transform (:data:`TRANSFORM_STREAM`). With
    ``occ == 0`` and ``stream == 0`` the value is the one of
    ``(seed, epoch, index)`` alone, as before repeats were counted.
    """
    h = _mix64(_mix64(_mix64(int(seed) & _M64) ^ (int(epoch) & _M64)) ^ (int(index) & _M64))
    if occ:
        h = _mix64(h ^ _mix64(int(occ) & _M64))
    if stream:
        h = _mix64(h ^ _mix64(int(stream) & _M64))
    return h >> 1


def seed_item(seed: int, epoch: int, index: int, occ: int = 0, stream: int = 0) -> None:
    """Seed this worker's global generators for one example.

    Before each ``source[index]`` a worker seeds dragon_core's generator
    (``dg.manual_seed``: random ops), Python's ``random`` and NumPy's legacy
    global generator (``np.random.*``) from ``(seed, epoch, index, occ)``
    (:func:`item_seed`), and before each transform again, from the same
    values and :data:`TRANSFORM_STREAM`. Random choices made in
    ``__getitem__`` or a transform are then different for every example
    and every repeat of a record, reproducible, different every epoch, and
    independent of the number of workers and of which worker reads what.
    Without it, workers forked from one process would start from the same
    generator state and repeat each other's random numbers. Whatever a
    ``worker_init_fn`` or ``setup()`` did to these global generators is
    overwritten before every example.
    """
    s = item_seed(seed, epoch, index, occ, stream)
    from .. import manual_seed
    manual_seed(s)
    random.seed(s)
    np.random.seed(s & 0xFFFFFFFF)
    if _INFO is not None:
        _INFO.item_seed = s


def _transform_seeded(transform: Callable | None, item: Any, seed: int, epoch: int,
                      index: int, occ: int) -> Any:
    """``apply_transform`` in a worker: the global generators reseeded first."""
    if transform is None:
        return item
    seed_item(seed, epoch, index, occ, TRANSFORM_STREAM)
    return apply_transform(transform, item, seed, epoch, index, occ)


def _watchdog(ppid: int) -> None:
    """Exit this process as soon as the process that started it is gone."""
    parent = mp.parent_process()
    sentinel = parent.sentinel if parent is not None else None
    while True:
        if sentinel is not None:
            try:
                if mp.connection.wait([sentinel], timeout=1.0):
                    os._exit(0)
            except OSError:
                sentinel = None
        else:
            time.sleep(0.5)
        if os.getppid() != ppid:
            os._exit(0)


def _worker_main(stage: str, worker_id: int, num_workers: int, source: Any,
                 transform: Callable | None, seed: int, in_q: Any, out_q: Any, stop: Any,
                 generation: Any) -> None:
    global _INFO
    _INFO = WorkerInfo(worker_id, num_workers, stage, seed)
    # Ignore first, then unblock: a Ctrl-C that arrived while the start
    # blocked it (see _start_blocking_sigint) is discarded, not raised here.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_watchdog, args=(os.getppid(),), daemon=True,
                     name="dragon-data-watchdog").start()
    out_q.cancel_join_thread()  # never block exit on items nobody will read

    def put(message: tuple, gen: int | None) -> bool:
        try:
            data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        except Exception:
            _, pos, index = message[1], message[3], message[4]
            data = pickle.dumps(_error_message(
                gen, pos, index, stage, worker_id,
                "the example cannot be pickled to reach the main process:\n"
                + traceback.format_exc()))
        while not stop.is_set():
            if gen is not None and generation.value != gen:
                return False
            try:
                out_q.put(data, timeout=POLL)
                return True
            except queue.Full:
                continue
        return False

    try:
        setup = getattr(transform, "setup", None)
        if callable(setup):
            setup(worker_id)
        if source is not None and callable(getattr(source, "setup", None)):
            source.setup(worker_id)
    except BaseException:
        put(("fatal", stage, worker_id, traceback.format_exc()), None)
        return

    while not stop.is_set():
        try:
            raw = in_q.get(timeout=POLL)
        except queue.Empty:
            continue
        if raw is None:
            break
        message = pickle.loads(raw) if isinstance(raw, bytes) else raw
        if message[0] == "task":                        # reader
            _, gen, epoch, positions, indices, occs = message
            for pos, index, occ in zip(positions, indices, occs):
                if generation.value != gen or stop.is_set():
                    break
                index, occ = int(index), int(occ)
                try:
                    seed_item(seed, epoch, index, occ)
                    item = source[index]
                    item = _transform_seeded(transform, item, seed, epoch, index, occ)
                except Exception:
                    reply = _error_message(gen, int(pos), index, stage, worker_id,
                                           traceback.format_exc())
                else:
                    reply = ("ok", gen, epoch, int(pos), index, item, occ)
                if not put(reply, gen):
                    break
        elif message[0] == "ok" and stage == "transformer":
            _, gen, epoch, pos, index, item, occ = message
            if generation.value != gen:
                continue
            try:
                example = _transform_seeded(transform, item, seed, epoch, index, occ)
            except Exception:
                reply = _error_message(gen, pos, index, stage, worker_id,
                                       traceback.format_exc())
            else:
                reply = ("ok", gen, epoch, pos, index, example, occ)
            put(reply, gen)
        else:                                           # errors travel on unchanged
            put(message, message[1] if message[0] == "err" else None)
    close = getattr(source, "close", None)
    if callable(close):
        try:
            close()
        except Exception:
            pass


def _error_message(gen: int | None, pos: int, index: int, stage: str, worker_id: int,
                   text: str) -> tuple:
    return ("err", gen, stage, pos, index, worker_id, text)


# ------------------------------------------------------------------------- main side

def _describe_exit(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited unexpectedly with code {code}"


def _shutdown(procs: list, queues: list, stop: Any, join_timeout: float) -> None:
    """Stop workers: ask, wait until ``join_timeout``, terminate, kill.

    The queues are released first: a feeder thread blocked on a full pipe
    must never be joined at interpreter exit (that would hang the exit after
    a Ctrl-C), whatever happens to the workers below. A Ctrl-C during the
    shutdown is raised when it is complete (a second one at once).
    """
    with hold_sigint():
        _stop_workers(procs, queues, stop, join_timeout)


def _stop_workers(procs: list, queues: list, stop: Any, join_timeout: float) -> None:
    for q in queues:
        try:
            q.cancel_join_thread()
        except Exception:
            pass
    try:
        stop.set()
    except Exception:
        pass
    deadline = time.monotonic() + join_timeout
    for p in procs:
        try:
            if p.pid is not None:
                p.join(max(0.0, deadline - time.monotonic()))
        except Exception:
            pass
    for p in procs:
        try:
            if p.pid is not None and p.is_alive():
                p.terminate()
        except Exception:
            pass
    for p in procs:
        try:
            if p.pid is not None:
                p.join(1.0)
                if p.is_alive():
                    p.kill()
                    p.join(1.0)
        except Exception:
            pass
    for q in queues:
        try:
            q.close()
        except Exception:
            pass


class WorkerPool:
    """Reader (and optionally transformer) processes producing examples in order.

    Parameters
    ----------
    source : indexable
        Picklable; ``source[i]`` is called in reader processes. Optional
        ``setup(worker_id)`` and ``close()`` methods run there.
    transform : callable or None
        Applied in transformer processes (or in the readers when
        ``num_transformers == 0``).
    num_readers, num_transformers : int
        Process counts (``num_readers >= 1``).
    seed : int
        Seeds per-example generators of :class:`Transformer` instances.
    queue_size : int
        Capacity of the reader → transformer queue.
    prefetch : int
        The most positions in flight ahead of the consumer.
    start_method : str, optional
        ``"fork"``, ``"spawn"`` or ``"forkserver"`` (default: forkserver if
        available).
    timeout : float or None
        Seconds without any example before :class:`DataTimeoutError`.
    name : str
        Used in error messages.
    """

    def __init__(self, source: Any, transform: Callable | None, *, num_readers: int,
                 num_transformers: int, seed: int, queue_size: int, prefetch: int,
                 start_method: str | None, timeout: float | None, name: str):
        if num_readers < 1 or num_transformers < 0:
            raise ValueError(f"need num_readers >= 1 and num_transformers >= 0, got "
                             f"{num_readers} and {num_transformers}")
        self._name = name
        self._timeout = timeout
        self._prefetch = max(1, int(prefetch))
        self._gen_counter = 0
        self._broken: str | None = None
        ctx = _context(start_method)
        self._stop = ctx.Event()
        self._generation = ctx.RawValue("q", -1)
        task_slots = self._prefetch // _GROUP + 2
        self._task_q = ctx.Queue(task_slots)
        self._out_q = ctx.Queue(max(2, self._prefetch))
        queues = [self._task_q, self._out_q]
        stages: list[tuple[str, int, int, Any, Any, Any, Any]] = []
        if num_transformers:
            mid_q = ctx.Queue(max(1, int(queue_size)))
            queues.append(mid_q)
            stages += [("reader", i, num_readers, source, None, self._task_q, mid_q)
                       for i in range(num_readers)]
            stages += [("transformer", i, num_transformers, None, transform, mid_q,
                        self._out_q) for i in range(num_transformers)]
        else:
            stages += [("reader", i, num_readers, source, transform, self._task_q,
                        self._out_q) for i in range(num_readers)]
        self._procs: list = []
        self._stages: list[tuple[str, int]] = []
        self._finalizer = weakref.finalize(self, _shutdown, self._procs, queues,
                                           self._stop, 2.0)
        try:
            for stage, wid, count, src, fn, in_q, out_q in stages:
                p = ctx.Process(target=_worker_main, daemon=True,
                                name=f"dragon-data-{stage}-{wid}",
                                args=(stage, wid, count, src, fn, seed, in_q, out_q,
                                      self._stop, self._generation))
                self._procs.append(p)
                self._stages.append((stage, wid))
                _start_blocking_sigint(p)
        except BaseException:       # a Ctrl-C (or a failed start) half-way: reap now
            self.close()
            raise
        self._num_readers = num_readers

    @property
    def pids(self) -> list[int]:
        """The worker process ids."""
        return [p.pid for p in self._procs]

    def close(self) -> None:
        """Stop and reap every worker (idempotent)."""
        self._broken = self._broken or "the pool is closed"
        self._finalizer()

    @property
    def closed(self) -> bool:
        return not self._finalizer.alive

    def _check_workers(self) -> None:
        for p, (stage, wid) in zip(self._procs, self._stages):
            code = p.exitcode
            if code is not None:
                self._fail(WorkerError(
                    f"{self._name}: {stage} worker {wid} (pid {p.pid}) {_describe_exit(code)}",
                    stage=stage, worker_id=wid, exitcode=code))

    def _fail(self, error: DataError) -> None:
        self._broken = str(error)
        self.close()
        raise error

    def run(self, epoch: int, indices: np.ndarray) -> Iterator[tuple[int, Any]]:
        """Yield ``(index, example)`` for ``indices``, in that order."""
        if self._broken:
            raise DataError(f"{self._name}: cannot iterate: {self._broken}")
        self._gen_counter += 1
        gen = self._gen_counter
        self._generation.value = gen
        try:
            yield from self._drive(gen, epoch, indices, occurrences(indices))
        except (GeneratorExit, DataError):
            raise                                   # raised where the queues are consistent
        except BaseException as exc:
            # A KeyboardInterrupt (or another exception from a signal handler)
            # may have landed inside a queue read, leaving half a message in
            # the pipe: these workers cannot be trusted any more.
            self._broken = f"an iteration was interrupted by {type(exc).__name__}"
            self.close()
            raise
        finally:
            if self._generation.value == gen:
                self._generation.value = -1         # workers drop the rest

    def _issue(self, gen: int, epoch: int, indices: np.ndarray, occs: np.ndarray,
               issued: int, next_pos: int) -> int:
        """Queue tasks up to ``prefetch`` positions ahead; return the new ``issued``.

        Ctrl-C is held meanwhile: interrupted inside ``Queue.put``, the main
        thread would keep the lock that the queue's feeder thread, its
        ``close()`` and interpreter exit all wait for.
        """
        n = len(indices)
        with hold_sigint():
            while issued < n and issued < next_pos + self._prefetch:
                stop = min(n, issued + _GROUP, next_pos + self._prefetch)
                task = ("task", gen, epoch, np.arange(issued, stop), indices[issued:stop],
                        occs[issued:stop])
                try:
                    self._task_q.put_nowait(task)
                except queue.Full:
                    break
                issued = stop
        return issued

    def _drive(self, gen: int, epoch: int, indices: np.ndarray,
               occs: np.ndarray) -> Iterator[tuple[int, Any]]:
        n = len(indices)
        ready: dict[int, tuple[int, Any]] = {}
        issued = 0
        next_pos = 0
        last_progress = time.monotonic()
        while next_pos < n:
            if issued < n and issued < next_pos + self._prefetch:
                issued = self._issue(gen, epoch, indices, occs, issued, next_pos)
            if next_pos in ready:
                yield ready.pop(next_pos)
                next_pos += 1
                continue
            try:
                message = pickle.loads(self._out_q.get(timeout=POLL))
            except queue.Empty:
                self._check_workers()
                if self._timeout is not None and \
                        time.monotonic() - last_progress > self._timeout:
                    self._fail(DataTimeoutError(
                        f"{self._name}: no example for {self._timeout:g} s (waiting for epoch "
                        f"position {next_pos}, record {int(indices[next_pos])}); the "
                        "workers are alive, so a dataset or transformer call is hanging"))
                continue
            kind = message[0]
            if kind == "fatal":
                _, stage, wid, text = message
                self._fail(WorkerError(
                    f"{self._name}: {stage} worker {wid} failed to start:\n{text}",
                    stage=stage, worker_id=wid, worker_traceback=text))
            if message[1] != gen:
                continue                                # left over from an earlier iteration
            last_progress = time.monotonic()
            if kind == "err":
                _, _, stage, pos, index, wid, text = message
                raise WorkerError(
                    f"{self._name}: {stage} worker {wid} raised while processing record "
                    f"{index} (epoch {epoch}, position {pos}):\n{text}",
                    stage=stage, worker_id=wid, index=index, worker_traceback=text)
            pos, index, example = message[3], message[4], message[5]
            ready[pos] = (index, example)


def _start_blocking_sigint(process: Any) -> None:
    """Start ``process`` with SIGINT blocked in the calling thread only.

    The child inherits the blocked mask (``fork`` copies the calling
    thread's mask, ``spawn`` keeps it across ``exec``, and so does a fork
    server that this start launches), so a Ctrl-C cannot interrupt it
    before :func:`_worker_main` makes it ignore SIGINT. The disposition of
    SIGINT in this process is never touched: a Ctrl-C arriving meanwhile
    is taken by another thread and still raises KeyboardInterrupt in the
    main thread, or stays pending here until the mask is restored.
    """
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def in_process(source: Any, transform: Callable | None, seed: int, epoch: int,
               indices: np.ndarray, name: str) -> Iterator[tuple[int, Any]]:
    """The same contract as :meth:`WorkerPool.run`, without processes.

    Exceptions propagate unchanged (with a note naming the record), which is
    what one wants when debugging with no workers.
    """
    for pos, (index, occ) in enumerate(zip(indices, occurrences(indices))):
        index = int(index)
        try:
            item = apply_transform(transform, source[index], seed, epoch, index, int(occ))
        except Exception as exc:
            exc.add_note(f"{name}: while processing record {index} "
                         f"(epoch {epoch}, position {pos})")
            raise
        yield index, item
