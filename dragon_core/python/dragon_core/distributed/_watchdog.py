"""Rank-state files for the failure watchdog.

The launcher (``python -m dragon_core.distributed.run``) gives every rank a
directory, ``$DRAGON_DIST_RUN_DIR``. Each rank maps a small file there
(``rank<N>.state``: pid, collective sequence number, phase, collective name)
and updates it in memory at every collective, which costs a few stores. When
a collective times out, the waiting rank reads its peers' files to name the
rank that died (its pid is gone) or stopped answering (it has not reached
this collective) and the collective each one was in; the launcher does the
same when ``mpirun`` ends with a failure. No data travels through these
files: they are diagnostics only.
"""

from __future__ import annotations

import mmap
import os
import struct

_FMT = "<qqq48s"          # pid, seq, phase (0 idle, 1 inside), collective name
_SIZE = struct.calcsize(_FMT)


class RankState:
    """This rank's mapped state file (a no-op without a run directory)."""

    def __init__(self, rank: int, run_dir: str | None):
        self.rank, self.run_dir, self.seq = rank, run_dir, 0
        self._mm = None
        if run_dir:
            path = os.path.join(run_dir, f"rank{rank}.state")
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, _SIZE)
                self._mm = mmap.mmap(fd, _SIZE)
            finally:
                os.close(fd)
            self._write(0, "")

    def _write(self, phase: int, name: str) -> None:
        if self._mm is not None:
            struct.pack_into(_FMT, self._mm, 0, os.getpid(), self.seq, phase,
                             name.encode()[:48])

    def enter(self, name: str) -> int:
        self.seq += 1
        self._write(1, name)
        return self.seq

    def leave(self, name: str) -> None:
        self._write(0, name)

    def close(self) -> None:
        if self._mm is not None:
            self._mm.close()
            self._mm = None


def read_states(run_dir: str | None) -> dict:
    """``{rank: (pid, seq, phase, name)}`` of every state file in ``run_dir``."""
    out = {}
    if not run_dir or not os.path.isdir(run_dir):
        return out
    for fname in os.listdir(run_dir):
        if not (fname.startswith("rank") and fname.endswith(".state")):
            continue
        try:
            with open(os.path.join(run_dir, fname), "rb") as f:
                data = f.read(_SIZE)
            pid, seq, phase, name = struct.unpack(_FMT, data)
            out[int(fname[4:-6])] = (pid, seq, phase, name.rstrip(b"\0").decode())
        except (OSError, ValueError, struct.error):
            continue
    return out


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe_peers(run_dir: str | None, me: int, my_seq: int, ranks) -> str:
    """One clause per peer in ``ranks`` that is dead or behind ``my_seq``."""
    states = read_states(run_dir)
    if not states:
        return "no rank-state directory (launch with python -m dragon_core.distributed.run " \
               "to have the unresponsive rank named)"
    parts = []
    for r in ranks:
        if r == me:
            continue
        st = states.get(r)
        if st is None:
            parts.append(f"rank {r} never started")
            continue
        pid, seq, phase, name = st
        where = f"collective #{seq} {name}" + (" (inside it)" if phase else " (finished)")
        if not alive(pid):
            parts.append(f"rank {r} (pid {pid}) died; its last was {where}")
        elif seq < my_seq:
            parts.append(f"rank {r} (pid {pid}) stopped answering: it has not reached "
                         f"collective #{my_seq}; its last was {where}")
        elif seq > my_seq or name and phase:
            parts.append(f"rank {r} (pid {pid}) is at {where}")
    return "; ".join(parts) if parts else "every peer is alive and at the same collective"
