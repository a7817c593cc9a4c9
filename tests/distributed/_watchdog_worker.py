"""One process of test_nccl_watchdog.py: dragon-nccl-dist's cuda kernels on
a stand-in GPU. The real cuda plugin is disabled; ``fake_cuda_device.cc``
($FAKE_CUDA_PLUGIN) provides a "cuda" device of host memory with
$FAKE_CUDA_DEVICES ordinals, and libnccl and the CUDA driver are the
recording stand-in of test_destroy.py ($DRAGON_NCCL_LIBRARY,
$DRAGON_CUDA_DRIVER_LIBRARY; log in $FAKE_NCCL_LOG). Prints what the test
checks, one fact a line.

Modes
-----
ok
    a communicator on cuda:1, three all_reduces there (the stand-in's world
    of one: the identity), one of a tensor on cuda:0 (refused), then waits
    until the watchdog destroyed the three collectives' events.
dist
    the same through ``dragon_core.distributed`` (an ``env://`` world of
    one, MASTER_ADDR/... set by the test): ``init_process_group("nccl",
    device_id=1)``, eager ``all_reduce`` of cuda:1 tensors; then a kernel
    that never completes, as in ``hang``: DistributedTimeoutError.
local_rank
    ``LOCAL_RANK=0`` and a tensor made on cuda:1 before
    ``init_process_group("nccl")`` (no device_id): the world is bound to
    cuda:0 and the tensor's all_reduce raises naming both devices.
hang_forever
    as ``hang`` with an infinite or huge $WD_TIMEOUT: nothing is aborted;
    prints how many collectives ran during $WD_WATCH seconds, then exits.
hang
    after one completed all_reduce the stand-in's events stop completing
    ($FAKE_CUDA_HANG): the next all_reduce is enqueued and returns; later
    collectives raise once the watchdog aborted the communicator, and the
    watchdog ends the process after $DRAGON_DIST_ABORT_GRACE seconds.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

import dragon_core as dg


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def log_count(word: str) -> int:
    with open(os.environ["FAKE_NCCL_LOG"]) as f:
        return sum(1 for line in f if line.split()[0] == word)


def dist_mode() -> None:
    import dragon_core.distributed as dist
    dg.load_library(os.environ["FAKE_CUDA_PLUGIN"])
    dist.init_process_group("nccl", timeout=float(os.environ["WD_TIMEOUT"]), device_id=1)
    say(f"BOUND {dist.new_group([0]).bound_device_id}")
    x = np.arange(6, dtype=np.float32)
    t = dg.tensor(x).to("cuda:1")
    dist.all_reduce(t)
    assert str(t.device) == "cuda:1" and np.array_equal(t.to("cpu").numpy(), x), t
    say("EAGER OK")
    os.environ["FAKE_CUDA_HANG"] = "1"
    dist.all_reduce(t)
    say("ENQUEUED")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            dist.all_reduce(dg.tensor(x).to("cuda:1"))
        except Exception as e:  # noqa: BLE001 - printed for the test
            say(f"RAISED {type(e).__name__}: {e}")
            break
    time.sleep(60)              # the watchdog ends the process before this returns
    say("NOT ENDED")


def local_rank_mode() -> None:
    """torch's set_device pattern under LOCAL_RANK=0: the tensors are on
    cuda:1 before init_process_group, which still binds LOCAL_RANK's
    cuda:0; the first collective says what to do."""
    import dragon_core.distributed as dist
    dg.load_library(os.environ["FAKE_CUDA_PLUGIN"])
    t = dg.tensor(np.arange(6, dtype=np.float32)).to("cuda:1")
    dist.init_process_group("nccl", timeout=30)
    say(f"BOUND {dist.new_group([0]).bound_device_id}")
    try:
        dist.all_reduce(t)
        say("WRONG DEVICE ACCEPTED")
    except Exception as e:  # noqa: BLE001 - printed for the test
        say(f"RAISED {type(e).__name__}: {e}")
        say(f"IS VALUEERROR {isinstance(e, ValueError)}")
    dist.destroy_process_group()
    say("DONE")


def main(mode: str) -> None:
    if mode == "dist":
        dist_mode()
        return
    if mode == "local_rank":
        local_rank_mode()
        return
    dg.load_library(os.environ["FAKE_CUDA_PLUGIN"])
    ops = dg.ops
    timeout = float(os.environ.get("WD_TIMEOUT", "30"))
    info = ops.nccl_comm_init(ops.nccl_unique_id(), group=7, nranks=1, rank=0,
                              timeout_s=timeout, device=1)
    say(f"INFO {info.numpy().tolist()}")
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    rounds = 3 if mode == "ok" else 1
    for _ in range(rounds):
        y = ops.collective_all_reduce(dg.tensor(x).to("cuda:1"), group=7, group_size=1)
        assert str(y.device) == "cuda:1" and np.array_equal(y.to("cpu").numpy(), x), y
    say(f"ALLREDUCE OK {rounds}")
    if mode == "ok":
        try:
            ops.collective_all_reduce(dg.tensor(x).to("cuda:0"), group=7, group_size=1)
            say("WRONG DEVICE ACCEPTED")
        except Exception as e:  # noqa: BLE001 - printed for the test
            say(f"WRONG {type(e).__name__}: {e}")
        deadline = time.monotonic() + 30
        while log_count("EVENT_DESTROY") < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        say(f"EVENTS created={log_count('EVENT_CREATE')} destroyed={log_count('EVENT_DESTROY')}")
        say("DONE")
        return
    os.environ["FAKE_CUDA_HANG"] = "1"
    ops.collective_all_reduce(dg.tensor(x).to("cuda:1"), group=7, group_size=1)
    say("ENQUEUED")
    if mode == "hang_forever":
        # an infinite (or huge) timeout: the pending kernel is followed but
        # never aborted; collectives keep running for WD_WATCH seconds
        deadline = time.monotonic() + float(os.environ.get("WD_WATCH", "3"))
        n = 0
        while time.monotonic() < deadline:
            time.sleep(0.05)
            ops.collective_all_reduce(dg.tensor(x).to("cuda:1"), group=7, group_size=1)
            n += 1
        say(f"STILL RUNNING after {n} more, aborts={log_count('ABORT')}")
        sys.stdout.flush()
        os._exit(0)             # the hung events stay pending: no orderly exit
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        time.sleep(0.05)
        try:
            ops.collective_all_reduce(dg.tensor(x).to("cuda:1"), group=7, group_size=1)
        except Exception as e:  # noqa: BLE001 - printed for the test
            say(f"RAISED {type(e).__name__}: {e}")
            break
    time.sleep(60)              # the watchdog ends the process before this returns
    say("NOT ENDED")


if __name__ == "__main__":
    main(sys.argv[1])
