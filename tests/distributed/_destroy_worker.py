"""One rank of test_destroy.py: ``destroy_process_group`` frees every
group's communicators, a second call does nothing, and the process may
initialise again. Prints what the test checks, one fact a line.

Modes
-----
mpi
    under ``python -m dragon_core.distributed.run -n 2``: the MPI backend
    on cpu, three initialisations in one process with groups and
    collectives in each.
fake_nccl
    a plain process of an ``env://`` world (MASTER_ADDR/MASTER_PORT/RANK/
    WORLD_SIZE) with the ``nccl`` backend, libnccl replaced by the
    recording stand-in test_destroy.py builds ($DRAGON_NCCL_LIBRARY; it
    logs every communicator call to $FAKE_NCCL_LOG): the real
    ``NcclCommInit`` / ``NcclCommDestroy`` ops run.
"""

from __future__ import annotations

import os
import sys
import warnings

import dragon_core as dg
import dragon_core.distributed as dist


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def mpi() -> None:
    for round_ in range(3):
        dist.init_process_group()
        r, n = dist.get_rank(), dist.get_world_size()
        g_all = dist.new_group([0, 1])
        g_one = dist.new_group([1])
        t = dg.tensor([float(r + 1), 10.0 * round_])
        dist.all_reduce(t)
        u = dg.tensor([float(r + 1)])
        dist.all_reduce(u, group=g_all)
        say(f"ROUND {round_} rank={r} size={n} world={t.numpy().tolist()} "
            f"group={u.numpy().tolist()} groups={g_all!r},{g_one!r}")
        if g_one is not None:
            dist.destroy_process_group(g_one)
            dist.destroy_process_group(g_one)        # twice: nothing
            try:
                dist.get_rank(g_one)
            except RuntimeError as e:
                say(f"FREED {e}")
        dist.barrier()
        dist.destroy_process_group()
        dist.destroy_process_group()                 # twice: nothing
        say(f"DESTROYED {round_} {dist.is_initialized()}")
        try:
            dist.get_rank(g_all)
        except RuntimeError as e:
            say(f"GONE {type(e).__name__}")
    say("DONE")


def fake_nccl() -> None:
    timeout = float(os.environ.get("RDZV_TIMEOUT", "20"))
    dist.init_process_group("nccl", timeout=timeout)
    r = dist.get_rank()
    say(f"WORLD rank={r} size={dist.get_world_size()}")
    g_all = dist.new_group()
    g_one = dist.new_group([1])                    # every rank calls both
    g_zero = dist.new_group([0])
    mine = g_one if r == 1 else g_zero
    say(f"GROUPS {g_all!r} {mine!r}")
    # one group, then the same again (nothing), then the world and the rest
    dist.destroy_process_group(g_all)
    dist.destroy_process_group(g_all)
    say("PHASE world")
    dist.destroy_process_group()
    dist.destroy_process_group()
    say(f"destroyed {dist.is_initialized()}")
    # again: the finalize fails this time (the stand-in says so): aborted, warned
    dist.init_process_group("nccl", timeout=timeout)
    os.environ["FAKE_NCCL_FINALIZE"] = "fail"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist.destroy_process_group()
    say(f"WARNED {len(caught)} " + " | ".join(str(w.message) for w in caught))
    os.environ["FAKE_NCCL_FINALIZE"] = "ok"
    # and the failure path: aborted without a finalize
    dist.init_process_group("nccl", timeout=timeout)
    dist.new_group()
    dist.destroy_process_group(_failed=True)
    say(f"aborted {dist.is_initialized()}")
    say("DONE")


def fake_nccl_exit() -> None:
    """A clean exit with the world and a group still alive: the exit hook
    aborts their communicators (a finalize would wait for peers)."""
    timeout = float(os.environ.get("RDZV_TIMEOUT", "20"))
    dist.init_process_group("nccl", timeout=timeout)
    dist.new_group()
    say(f"WORLD rank={dist.get_rank()} size={dist.get_world_size()}")
    say("DONE")


if __name__ == "__main__":
    {"mpi": mpi, "fake_nccl": fake_nccl, "fake_nccl_exit": fake_nccl_exit}[sys.argv[1]]()
