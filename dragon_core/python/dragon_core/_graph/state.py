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

Locks are taken in the order of the variables' ids, so runs never
deadlock. A graph that touches no assigned variable takes no lock: pure
graphs (inference) run concurrently as before.
"""

from __future__ import annotations

import threading


class RWLock:
    """Many readers or one writer; a waiting writer holds back new readers."""

    __slots__ = ("_cv", "_readers", "_writer", "_writers_waiting")

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._writers_waiting = 0

    def acquire(self, exclusive: bool) -> None:
        """Take the write side (``exclusive``) or the read side."""
        with self._cv:
            if exclusive:
                self._writers_waiting += 1
                try:
                    while self._writer or self._readers:
                        self._cv.wait()
                finally:
                    self._writers_waiting -= 1
                self._writer = True
            else:
                while self._writer or self._writers_waiting:
                    self._cv.wait()
                self._readers += 1

    def release(self, exclusive: bool) -> None:
        """Give back the side taken by :meth:`acquire`."""
        with self._cv:
            if exclusive:
                self._writer = False
            else:
                self._readers -= 1
            self._cv.notify_all()


_registry_mu = threading.Lock()
_locks: dict = {}      # variable id -> RWLock, for variables some graph assigns
_version = [0]         # bumped when _locks grows (guards recompute their plan)


def register(variables) -> None:
    """Give each of ``variables`` (assigned by a compiled graph) a lock."""
    with _registry_mu:
        grew = False
        for v in variables:
            if v._id not in _locks:
                _locks[v._id] = RWLock()
                grew = True
        if grew:
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
        if self._version != _version[0]:
            with _registry_mu:
                self._plan = tuple((uid, _locks[uid], uid in self._write)
                                   for uid in sorted(self._touched) if uid in _locks)
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
