"""The eager op profiler: which ops a block of code runs, on what, how long.

``with dragon_core.profiler.profile() as prof:`` records every op the
calling thread dispatches inside the block: eager op calls, operators
(``a @ b``, ``x + y``), the Casts autocast inserts, gradient rules run by
``backward()``, optimizer updates, and the ops of compiled functions
called in the block. Each :class:`OpEvent` has the op type, the inputs'
dtypes and shapes, the outputs' dtypes and the host time of the call
(shape inference, output allocation and the kernel; on a stream-ordered
device such as ``cuda`` the launch, not the kernel's run).

Ops dispatched inside another op's dispatch (a ``Contiguous`` copy of a
strided input) are recorded too, with ``depth`` 1; their time is part of
the outer op's, so totals (:meth:`profile.total_us`, :meth:`profile.by_type`)
count depth-0 events only. Outside a block the cost is one thread-local
check per op. Compiled functions have their own per-op profile
(``Function.profile``, docs/graph.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from . import _C
from ._dtypes import from_code

__all__ = ["profile", "OpEvent"]


@dataclass(frozen=True)
class OpEvent:
    """One dispatched op.

    Attributes
    ----------
    op : str
        The op type (``"MatMul"``, ``"Cast"``...).
    in_dtypes : tuple of str
        The inputs' dtype names.
    in_shapes : tuple of tuple of int
        The inputs' shapes.
    out_dtypes : tuple of str
        The outputs' dtype names.
    us : float
        Host time of the call, microseconds.
    depth : int
        0 for an op called by Python code, 1 or more for one dispatched
        inside another op's dispatch (its time is part of that op's).
    """

    op: str
    in_dtypes: tuple
    in_shapes: tuple
    out_dtypes: tuple
    us: float
    depth: int


class profile:  # noqa: N801 - a context manager, named as torch.profiler.profile
    """Record the ops this thread dispatches inside the ``with`` block.

    Profiles do not nest: entering one while another is running on the
    thread raises.

    Attributes
    ----------
    events : list of OpEvent
        The ops in call order (filled when the block exits).

    Examples
    --------
    >>> import dragon_core as dg
    >>> a = dg.ops.ones((4, 8)); b = dg.ops.ones((8, 2))
    >>> with dg.profiler.profile() as prof:
    ...     with dg.autocast("cpu"):
    ...         y = a @ b
    >>> [e.op for e in prof.events]
    ['Cast', 'Cast', 'MatMul']
    >>> prof.count("Cast"), prof.events[2].out_dtypes
    (2, ('float32',))
    """

    def __init__(self):
        self.events: list = []
        self._running = False

    def __enter__(self) -> "profile":
        if _C._op_profile_active():
            raise RuntimeError("dragon_core.profiler.profile: a profile is already running "
                               "on this thread (profiles do not nest)")
        self.events = []
        self._running = True
        _C._op_profile_start()
        return self

    def __exit__(self, *exc) -> bool:
        records = _C._op_profile_stop()
        self._running = False
        self.events = [OpEvent(op, tuple(from_code(c).name for c in ind), tuple(shapes),
                               tuple(from_code(c).name for c in outd), float(us), int(depth))
                       for op, ind, shapes, outd, us, depth in records]
        return False

    def count(self, op: str | None = None) -> int:
        """How many depth-0 ops of type ``op`` (every type when None) ran."""
        return sum(1 for e in self.events if e.depth == 0 and (op is None or e.op == op))

    def total_us(self) -> float:
        """The host time of the depth-0 ops, microseconds."""
        return sum(e.us for e in self.events if e.depth == 0)

    def by_type(self) -> list:
        """``[(op type, count, us)]`` over the depth-0 ops, most time first."""
        acc: dict = {}
        for e in self.events:
            if e.depth == 0:
                n, us = acc.get(e.op, (0, 0.0))
                acc[e.op] = (n + 1, us + e.us)
        return sorted(((k, n, us) for k, (n, us) in acc.items()), key=lambda r: -r[2])

    def table(self, limit: int = 20) -> str:
        """A Markdown table of :meth:`by_type` (``limit`` rows)."""
        total = self.total_us() or 1.0
        lines = [f"{self.count()} ops, {self.total_us() / 1e3:.2f} ms", "",
                 "| op type | ops | ms | share |", "|---|---:|---:|---:|"]
        for op, n, us in self.by_type()[:limit]:
            lines.append(f"| {op} | {n} | {us / 1e3:.3f} | {100 * us / total:.1f}% |")
        return "\n".join(lines)
