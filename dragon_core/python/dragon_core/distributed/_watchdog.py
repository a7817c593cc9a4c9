"""Rank-state files for the failure watchdog.

The launcher (``python -m dragon_core.distributed.run``) gives every rank a
directory, ``$DRAGON_DIST_RUN_DIR``. Each rank's collective kernels (the
dragon-nccl-dist plugin) map a small file there (``rank<N>.state``: pid,
collective sequence number, phase, collective name, in the layout ``_FMT``
reads) and update it in memory at every collective, a few stores. When
a collective times out, the waiting rank reads its peers' files to name the
rank that died (its pid is gone) or stopped answering (it has not reached
this collective) and the collective each one was in; the launcher does the
same when ``mpirun`` ends with a failure. No data travels through these
files: they are diagnostics only.
"""

from __future__ import annotations

import os
import struct

_FMT = "<qqq48s"  # pid, seq, phase (0 idle, 1 inside), name: as mpi_dist.cc writes it
_SIZE = struct.calcsize(_FMT)


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
