"""Holding a Ctrl-C while worker processes start.

Python runs its SIGINT handler in the main thread between two bytecodes, so
a KeyboardInterrupt can land half-way through ``Process.start()`` or through
the first import of :mod:`multiprocessing`. That leaves a child that was
forked but never received its arguments (it dies printing a traceback about
a missing semaphore), or a module that is half initialised and breaks every
later start in the same interpreter (a notebook, a training loop that
catches KeyboardInterrupt). :func:`hold_sigint` makes such a section atomic
with respect to Ctrl-C, without ever changing how the operating system
disposes of SIGINT in this process.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def hold_sigint() -> Iterator[None]:
    """Deliver a Ctrl-C that arrives inside the block when the block ends.

    In the main thread, while the Python-level SIGINT handler is a callable
    (``signal.default_int_handler`` or the application's own), the block
    runs with a handler that only records the signal; at its end the
    previous handler is put back and, if a Ctrl-C came, called — so the
    usual ``KeyboardInterrupt`` is raised right after the block, in the
    main thread. A second Ctrl-C inside the block is delivered at once (a
    way out should the block ever hang).

    The operating-system disposition of SIGINT never changes: swapping one
    Python callable for another keeps Python's C-level handler installed,
    so a Ctrl-C taken by any thread (BLAS, OpenMP, a queue feeder) still
    reaches the main thread. Outside the main thread, or when SIGINT is
    ignored, defaulted, or handled outside Python, the block runs as is.

    Yields
    ------
    None
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):       # SIG_IGN, SIG_DFL, or a handler installed from C
        yield
        return
    held: list = []

    def record(signum, frame):
        if held:                     # the second Ctrl-C: no more waiting
            signal.signal(signal.SIGINT, previous)
            held.clear()
            previous(signum, frame)
            return
        held.append(frame)

    signal.signal(signal.SIGINT, record)
    try:
        yield
    finally:
        if signal.getsignal(signal.SIGINT) is record:
            signal.signal(signal.SIGINT, previous)
        if held:
            previous(signal.SIGINT, held.pop())
