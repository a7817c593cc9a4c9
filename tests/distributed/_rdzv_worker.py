"""One rank of the environment-rendezvous tests (test_rendezvous.py),
started as a plain process (no mpirun): ``python _rdzv_worker.py MODE``
with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE in the environment, or
RDZV_INIT_METHOD (init_method=), RDZV_RANK/RDZV_WORLD (rank=/world_size=),
RDZV_STORE (store=: a TCPStore made here), RDZV_TIMEOUT (timeout=).
Prints what the test checks, one fact a line.

Modes
-----
nccl_id
    ``init_process_group("nccl")`` through env:// on this GPU-less machine:
    the unique id goes through the store, then ``NcclCommInit`` (the real
    op) fails without a GPU. Prints the id each rank passed to it.
recorded
    ``init_process_group("nccl")`` with the communicator creation replaced
    by a recorder (NCCL cannot create a communicator without a GPU; the
    GPU check runs the real one): the whole store world -- id per group,
    new_group, barrier, errors for cpu tensors, destroy and a second
    initialisation -- in plain processes. Each ``NcclCommDestroy`` call
    (destroy_process_group) is printed.
join
    only the rendezvous (``init_process_group("nccl")`` with the recorder):
    prints OK or the exception (missing ranks, mismatches).
barrier_hang
    rank 1 skips the second barrier and sleeps: rank 0's barrier must time
    out naming rank 1.
group_mismatch
    world of 3 (recorder): ranks 0 and 1 call ``new_group([0, 1, 2])``,
    rank 2 ``new_group([0, 2])``: rank 2 must be told, rank 0 time out.
mpi
    ``init_process_group("mpi", init_method="env://")``: the refusal.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dragon_core as dg
import dragon_core.distributed as dist

mode = sys.argv[1]
kw = {}
if os.environ.get("RDZV_INIT_METHOD"):
    kw["init_method"] = os.environ["RDZV_INIT_METHOD"]
if os.environ.get("RDZV_RANK"):
    kw["rank"] = int(os.environ["RDZV_RANK"])
    kw["world_size"] = int(os.environ["RDZV_WORLD"])
timeout = float(os.environ.get("RDZV_TIMEOUT", "20"))
if os.environ.get("RDZV_STORE"):        # store=: the caller's own TCPStore
    from dragon_core.distributed.store import TCPStore
    kw["store"] = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                           kw["world_size"], is_master=kw["rank"] == 0, timeout=timeout,
                           rank=kw["rank"])


def record(uid, g):
    """Stands in for NcclCommInit: prints the id this rank would use."""
    arr = uid.numpy()
    assert arr.dtype == np.uint8 and arr.shape == (128,)
    say(f"UID group={g.id} ranks={g.ranks} grank={g.rank()} {bytes(arr).hex()}")


def say(line: str) -> None:
    """One write per line: under torchrun both ranks share one unbuffered
    pipe, where print()'s separate writes (each argument, the newline)
    interleave across ranks ('BARRIERS BARRIERSTrue')."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def fail(e):
    say(f"ERR {type(e).__name__}: {e}")


if mode == "nccl_id":
    real = dist._nccl_comm_init

    def spy(uid, g):
        record(uid, g)
        real(uid, g)
    dist._nccl_comm_init = spy
    try:
        dist.init_process_group("nccl", timeout=timeout, **kw)
        say("INIT OK")           # only with a GPU
    except Exception as e:  # noqa: BLE001 - reported to the test
        fail(e)
    say(f"initialised {dist.is_initialized()}")

elif mode in ("recorded", "join", "barrier_hang", "group_mismatch"):
    dist._nccl_comm_init = record
    real_destroy = dist._nccl_comm_destroy

    def record_destroy(g, abort=False):
        """Prints each NcclCommDestroy call (the real op: with no
        communicator made, it frees nothing and returns 0)."""
        code = real_destroy(g, abort)
        say(f"NCCL_DESTROY group={g.id} abort={abort} code={code}")
        return code
    dist._nccl_comm_destroy = record_destroy
    try:
        dist.init_process_group("nccl", timeout=timeout, **kw)
    except Exception as e:  # noqa: BLE001
        fail(e)
        say(f"initialised {dist.is_initialized()}")
        sys.exit(0)
    r, n = dist.get_rank(), dist.get_world_size()
    say(f"WORLD rank={r} size={n} backend={dist.get_backend()}")
    if mode == "recorded":
        g_all = dist.new_group()
        g_one = dist.new_group([1])
        g_zero = dist.new_group([0])
        say(f"GROUPS {g_all!r} {g_one!r} {g_zero!r}")
        dist.barrier()
        dist.barrier(group=g_all)
        w = dist.barrier(async_op=True)
        say(f"BARRIERS {w.is_completed()}")
        mine = g_one if r == 1 else g_zero
        say(f"MINE rank={mine.rank()} size={mine.size()}")
        import dragon_core.distributed.nn as dnn
        for f in (lambda: dist.all_reduce(dg.tensor([1.0, 2.0])),
                  lambda: dist.broadcast(dg.tensor([1.0]), src=0),
                  lambda: dnn.all_reduce(dg.tensor([1.0])),
                  lambda: dg.function(lambda t: dist.all_reduce(t) * 2.0)(dg.tensor([1.0]))):
            try:
                f()
                say("CPU COLLECTIVE RAN")
            except RuntimeError as e:
                fail(e)
        dist.destroy_process_group()
        say(f"destroyed {dist.is_initialized()}")
        # A store world may be initialised again (MPI could not be).
        dist.init_process_group("nccl", timeout=timeout, **kw)
        dist.barrier()
        say(f"AGAIN rank={dist.get_rank()} size={dist.get_world_size()}")
        dist.destroy_process_group()
    elif mode == "group_mismatch":
        try:
            g = dist.new_group([0, 2] if r == 2 else [0, 1, 2])
            say(f"GROUP {g!r}")
        except Exception as e:  # noqa: BLE001
            fail(e)
    elif mode == "join":
        say("JOIN OK")
        dist.destroy_process_group()
    else:
        dist.barrier()
        if r == 1:
            time.sleep(float(os.environ.get("RDZV_SLEEP", "8")))
        else:
            t0 = time.monotonic()
            try:
                dist.barrier()
                say("BARRIER PASSED")
            except Exception as e:  # noqa: BLE001
                say(f"after {time.monotonic() - t0:.1f} s")
                fail(e)
    say("DONE")

elif mode == "mpi":
    try:
        dist.init_process_group("mpi", timeout=timeout, **kw)
        t = dg.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        say(f"MPI OK {dist.get_rank()} {dist.get_world_size()} {t.numpy().tolist()}")
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001
        fail(e)
    say(f"initialised {dist.is_initialized()}")
else:
    raise SystemExit(f"unknown mode {mode}")
