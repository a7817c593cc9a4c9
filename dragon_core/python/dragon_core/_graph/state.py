"""Runs of compiled graphs that touch the same state serialize.

A compiled function that updates state (``x.assign(...)`` inside
``@function``) reads its variables when the run starts and rebinds them to
the new values when it ends. Two such runs overlapping on one variable
would lose an update (both read ``ctr``, both write ``ctr + d``). So every
variable that some compiled graph assigns gets a readers-writer lock, and a
run holds, from reading its feeds to rebinding its state:

* the write side of the lock of every variable it assigns, and
* the read side of the lock of every other captured tensor that some graph
  assigns (it then sees all of one run's updates or none of them).

The variables a graph assigns that had no lock yet share one (a training
step's ~60 parameters and optimizer states take one lock per run, not ~60);
a graph touching some of them takes the group's lock, which can only
serialize more than needed, never less. Locks are taken in the order of
their smallest variable id, so runs never deadlock. A graph that touches no assigned variable takes no lock: pure
graphs (inference) run concurrently as before.
"""

from __future__ import annotations

import threading


class RWLock:
    """Many readers or one writer; a waiting writer holds back new readers.

    A training step takes one per variable (~60) at every run, so the
    uncontended path is kept short: the plain mutex's own ``with`` (no
    Condition method calls), and a notify only when someone waits."""

    __slots__ = ("_mu", "_cv", "_readers", "_writer", "_writers_waiting", "_waiting", "order")

    def __init__(self):
        self._mu = threading.Lock()
        self._cv = threading.Condition(self._mu)
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0
        self._waiting = 0     # threads inside _cv.wait (readers and writers)
        self.order = 0        # where plans take it (register)

    def acquire(self, exclusive: bool) -> None:
        """Take the write side (``exclusive``) or the read side."""
        with self._mu:
            if exclusive:
                if self._writer or self._readers:
                    self._writers_waiting += 1
                    self._waiting += 1
                    try:
                        while self._writer or self._readers:
                            self._cv.wait()
                    finally:
                        self._writers_waiting -= 1
                        self._waiting -= 1
                self._writer = True
            else:
                if self._writer or self._writers_waiting:
                    self._waiting += 1
                    try:
                        while self._writer or self._writers_waiting:
                            self._cv.wait()
                    finally:
                        self._waiting -= 1
                self._readers += 1

    def release(self, exclusive: bool) -> None:
        """Give back the side taken by :meth:`acquire`."""
        with self._mu:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            if self._waiting:
                self._cv.notify_all()


_registry_mu = threading.Lock()
_locks: dict = {}      # variable id -> RWLock, for variables some graph assigns
_version = [0]         # bumped when _locks grows (guards recompute their plan)


def register(variables) -> None:
    """Give the variables of ``variables`` (assigned by one compiled graph)
    that have no lock yet one lock between them.

    A training step assigns every parameter and optimizer state (~60
    variables), and a lock per variable cost ~1 us per variable at every
    run. Sharing one lock among the variables first registered together
    only makes locking coarser: a graph that touches some of them takes the
    whole group's lock (so it may wait for a run it does not conflict
    with), never less than it needs."""
    with _registry_mu:
        group = None
        for v in variables:
            if v._id not in _locks:
                if group is None:
                    group = RWLock()
                    # Plans take their locks in this order (the smallest id
                    # of the group's variables): the same order everywhere.
                    group.order = v._id
                group.order = min(group.order, v._id)
                _locks[v._id] = group
        if group is not None:
            _version[0] += 1


class StateGuard:
    """The locks one compiled graph holds around a run.

    Parameters
    ----------
    captured : list of Tensor
        The tensors the graph reads from outside (fed at every run).
    assigned : list of Tensor
        The variables it assigns (a subset of ``captured``).
    """

    def __init__(self, captured, assigned):
        self._write = {t._id for t in assigned}
        self._touched = self._write | {t._id for t in captured}
        self._version = -1
        self._plan: tuple = ()
        register(assigned)

    def _locks(self) -> tuple:
        """``(order, lock, exclusive)`` for each lock this graph takes, in
        the global order: a group's lock once, exclusive if the graph
        assigns any of the group's variables it touches."""
        if self._version != _version[0]:
            with _registry_mu:
                need: dict = {}
                for uid in self._touched:
                    lock = _locks.get(uid)
                    if lock is not None:
                        need[lock] = need.get(lock, False) or uid in self._write
                self._plan = tuple(sorted(((lock.order, lock, ex) for lock, ex in need.items()),
                                          key=lambda e: e[0]))
                self._version = _version[0]
        return self._plan

    def run(self, fn):
        """``fn()`` with this graph's locks held; returns its result."""
        plan = self._locks()
        if not plan:
            return fn()
        held = []
        try:
            for _, lock, exclusive in plan:
                lock.acquire(exclusive)
                held.append((lock, exclusive))
            return fn()
        finally:
            for lock, exclusive in reversed(held):
                lock.release(exclusive)
